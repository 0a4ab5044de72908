/* Internal to linear.c: the block formats of pyagent/linear.h, decoded to float32 weights.
 *
 * Every decoder computes the gguf package's float32 values: one rounding per multiply and per add
 * (the build compiles with -ffp-contract=off, so no multiply-add is fused). A block holds
 * QUANT_BLOCK weights; the AVX-512 decoder returns them as two vectors of 16 (weights 0..15 and
 * 16..31), the AVX2 one as two pairs of vectors of 8, the scalar one fills an array. A 4-bit block
 * has only 16 distinct weights, so the AVX-512 decoder computes those 16 once and looks each weight
 * up by its 4-bit code; AVX2 has no 16-entry permute, so its decoder converts every code, and both
 * convert every 5-bit code (a 32-entry lookup measured slower than the conversion).
 */
#ifndef PAK_LINEAR_QUANT_BLOCKS_H
#define PAK_LINEAR_QUANT_BLOCKS_H

#include <stdint.h>
#include <string.h>

#include "pyagent/linear.h"

#define QUANT_BLOCK 32

/* Bytes of one block of `wtype`, 0 for a type this file does not know. */
static inline int64_t quant_block_bytes(int wtype)
{
    switch (wtype) {
    case PAK_WEIGHT_Q4_0: return 4 + QUANT_BLOCK / 2;
    case PAK_WEIGHT_Q4_1: return 8 + QUANT_BLOCK / 2;
    case PAK_WEIGHT_Q5_0: return 4 + 4 + QUANT_BLOCK / 2;
    case PAK_WEIGHT_Q5_1: return 8 + 4 + QUANT_BLOCK / 2;
    case PAK_WEIGHT_Q8_0: return 4 + QUANT_BLOCK;
    case PAK_WEIGHT_Q6_K: return 8 + QUANT_BLOCK;
    default: return 0;
    }
}

/* Whether a block holds a float32 minimum after its scale (weight = d * q + m). */
static inline int quant_has_min(int wtype)
{
    return wtype == PAK_WEIGHT_Q4_1 || wtype == PAK_WEIGHT_Q5_1;
}

/* Whether a block's codes are 5-bit: a 32-bit word of high bits (bit j: weight j's) before the
 * 16 bytes of low halves. */
static inline int quant_five_bits(int wtype)
{
    return wtype == PAK_WEIGHT_Q5_0 || wtype == PAK_WEIGHT_Q5_1;
}

/* Whether a block's codes are signed bytes (Q8_0, and Q6_K with a second scale for weights 16..31). */
static inline int quant_byte_codes(int wtype)
{
    return wtype == PAK_WEIGHT_Q8_0 || wtype == PAK_WEIGHT_Q6_K;
}

/* What a format subtracts from each unsigned code before scaling (Q4_0: 8, Q5_0: 16, else 0). */
static inline int quant_code_bias(int wtype)
{
    return wtype == PAK_WEIGHT_Q4_0 ? 8 : wtype == PAK_WEIGHT_Q5_0 ? 16 : 0;
}

/* Bytes before a block's 4-bit halves or signed bytes: its float32 scales (and minimum), and for
 * 5-bit codes the word of high bits. */
static inline int quant_codes_offset(int wtype)
{
    const int scales = quant_has_min(wtype) || wtype == PAK_WEIGHT_Q6_K ? 8 : 4;
    return scales + (quant_five_bits(wtype) ? 4 : 0);
}

static inline float load_f32(const uint8_t *p)
{
    float f;
    memcpy(&f, p, sizeof f);
    return f;
}

/* The word of high bits of a 5-bit block (little-endian, as GGUF stores it). */
static inline uint32_t quant_high_bits(int wtype, const uint8_t *block)
{
    const uint8_t *p = block + quant_codes_offset(wtype) - 4;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The scale of weights 16..31: Q6_K's second, else the block's one. */
static inline float quant_second_scale(int wtype, const uint8_t *block)
{
    return load_f32(wtype == PAK_WEIGHT_Q6_K ? block + 4 : block);
}

/* The QUANT_BLOCK weights of one block, portable C. */
static inline void decode_block_scalar(int wtype, const uint8_t *block, float *weights)
{
    const float d = load_f32(block);
    const uint8_t *codes = block + quant_codes_offset(wtype);
    if (quant_byte_codes(wtype)) {
        const float d1 = quant_second_scale(wtype, block);
        for (int j = 0; j < QUANT_BLOCK; ++j)
            weights[j] = (j < QUANT_BLOCK / 2 ? d : d1) * (float)(int8_t)codes[j];
        return;
    }
    const uint32_t high = quant_five_bits(wtype) ? quant_high_bits(wtype, block) : 0;
    const int bias = quant_code_bias(wtype);
    for (int j = 0; j < QUANT_BLOCK; ++j) {
        const int nibble = j < QUANT_BLOCK / 2 ? codes[j] & 0xf : codes[j - QUANT_BLOCK / 2] >> 4;
        const int code = nibble | (int)((high >> j) & 1) << 4;
        const float product = d * (float)(code - bias);
        weights[j] = quant_has_min(wtype) ? product + load_f32(block + 4) : product;
    }
}

#if PAK_X86_VARIANTS
#include <immintrin.h>

#define QUANT_AVX512 "avx512f,avx512bw,avx512dq,avx512vl"

/* One block of `wtype` as weights 0..15 (*lo) and 16..31 (*hi). */
__attribute__((target(QUANT_AVX512))) static inline __attribute__((always_inline)) void
decode_block512(int wtype, const uint8_t *block, __m512 *lo, __m512 *hi)
{
    const __m512 d = _mm512_set1_ps(load_f32(block));
    const uint8_t *codes = block + quant_codes_offset(wtype);
    if (quant_byte_codes(wtype)) {
        const __m128i *bytes = (const __m128i *)codes;
        *lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(bytes))), d);
        *hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(bytes + 1))),
                            _mm512_set1_ps(quant_second_scale(wtype, block)));
        return;
    }
    if (quant_five_bits(wtype)) {
        /* the 32 codes as bytes (bit 4 added from the word of high bits, the bias subtracted),
         * then each converted and scaled as a signed byte */
        const __m128i packed = _mm_loadu_si128((const __m128i *)codes), low4 = _mm_set1_epi8(0xf);
        const __m128i bias = _mm_set1_epi8((char)quant_code_bias(wtype)), sixteen = _mm_set1_epi8(16);
        const uint32_t high = quant_high_bits(wtype, block);
        __m128i low = _mm_sub_epi8(_mm_and_si128(packed, low4), bias);
        __m128i upper = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(packed, 4), low4), bias);
        low = _mm_mask_add_epi8(low, (__mmask16)high, low, sixteen);
        upper = _mm_mask_add_epi8(upper, (__mmask16)(high >> 16), upper, sixteen);
        *lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(low)), d);
        *hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(upper)), d);
        if (quant_has_min(wtype)) {
            const __m512 m = _mm512_set1_ps(load_f32(block + 4));
            *lo = _mm512_add_ps(*lo, m);
            *hi = _mm512_add_ps(*hi, m);
        }
        return;
    }
    /* table[c]: the weight of code c; the permute reads only the low 4 bits of each index */
    const __m512 codes16 = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 table = _mm512_mul_ps(_mm512_sub_ps(codes16, _mm512_set1_ps((float)quant_code_bias(wtype))), d);
    if (quant_has_min(wtype))
        table = _mm512_add_ps(table, _mm512_set1_ps(load_f32(block + 4)));
    const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)codes));
    *lo = _mm512_permutexvar_ps(bytes, table);
    *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table);
}

#define QUANT_AVX2 "avx2,fma"

/* One block of `wtype` as weights 0..7, 8..15 (*lo) and 16..23, 24..31 (*hi): each code widened to
 * a signed 32-bit integer (4- and 5-bit codes: the low halves of the bytes, then the high halves,
 * each with its bit from the word of high bits; the bias subtracted exactly, in bytes) and
 * converted exactly, then scaled (and shifted) as above. */
__attribute__((target(QUANT_AVX2))) static inline __attribute__((always_inline)) void
decode_block256(int wtype, const uint8_t *block, __m256 (*lo)[2], __m256 (*hi)[2])
{
    const __m256 d = _mm256_set1_ps(load_f32(block));
    const __m128i *bytes = (const __m128i *)(block + quant_codes_offset(wtype));
    __m128i codes[2]; /* weights 0..15 and 16..31 as signed bytes */
    if (quant_byte_codes(wtype)) {
        codes[0] = _mm_loadu_si128(bytes);
        codes[1] = _mm_loadu_si128(bytes + 1);
    } else {
        const __m128i packed = _mm_loadu_si128(bytes), low4 = _mm_set1_epi8(0xf);
        codes[0] = _mm_and_si128(packed, low4);
        codes[1] = _mm_and_si128(_mm_srli_epi16(packed, 4), low4);
        if (quant_five_bits(wtype)) {
            /* byte j of half h: bit j % 8 of byte 2h + j / 8 of the word, set -> 16 */
            const __m128i word = _mm_cvtsi32_si128((int)quant_high_bits(wtype, block));
            const __m128i bit = _mm_set1_epi64x((long long)0x8040201008040201ull);
            for (int h = 0; h < 2; ++h) {
                const __m128i spread = _mm_shuffle_epi8(word, _mm_setr_epi8(
                    2 * h, 2 * h, 2 * h, 2 * h, 2 * h, 2 * h, 2 * h, 2 * h,
                    2 * h + 1, 2 * h + 1, 2 * h + 1, 2 * h + 1, 2 * h + 1, 2 * h + 1, 2 * h + 1, 2 * h + 1));
                const __m128i set = _mm_cmpeq_epi8(_mm_and_si128(spread, bit), bit);
                codes[h] = _mm_or_si128(codes[h], _mm_and_si128(set, _mm_set1_epi8(16)));
            }
        }
        for (int h = 0; h < 2; ++h)
            codes[h] = _mm_sub_epi8(codes[h], _mm_set1_epi8((char)quant_code_bias(wtype)));
    }
    const __m256 d1 = _mm256_set1_ps(quant_second_scale(wtype, block));
    for (int k = 0; k < 4; ++k) {
        const __m128i eight = k % 2 == 0 ? codes[k / 2] : _mm_srli_si128(codes[k / 2], 8);
        __m256 weight = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eight)), k < 2 ? d : d1);
        if (quant_has_min(wtype))
            weight = _mm256_add_ps(weight, _mm256_set1_ps(load_f32(block + 4)));
        (*(k < 2 ? lo : hi))[k % 2] = weight;
    }
}
#endif /* PAK_X86_VARIANTS */

#endif
