/* Internal to linear.c: the block formats of pyagent/linear.h, decoded to float32 weights.
 *
 * Every decoder computes the gguf package's float32 values: one rounding per multiply and per add
 * (the build compiles with -ffp-contract=off, so no multiply-add is fused). A block holds
 * QUANT_BLOCK weights; the AVX-512 decoder returns them as two vectors of 16 (weights 0..15 and
 * 16..31), the AVX2 one as two pairs of vectors of 8, the scalar one fills an array. A 4-bit block
 * has only 16 distinct weights, so the AVX-512 decoder computes those 16 once and looks each weight
 * up by its 4-bit code; AVX2 has no 16-entry permute, so its decoder converts every code.
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
    case PAK_WEIGHT_Q8_0: return 4 + QUANT_BLOCK;
    default: return 0;
    }
}

/* Bytes before a block's codes: its float32 scale, and for Q4_1 its float32 minimum. */
static inline int quant_codes_offset(int wtype)
{
    return wtype == PAK_WEIGHT_Q4_1 ? 8 : 4;
}

static inline float load_f32(const uint8_t *p)
{
    float f;
    memcpy(&f, p, sizeof f);
    return f;
}

/* The QUANT_BLOCK weights of one block, portable C. */
static inline void decode_block_scalar(int wtype, const uint8_t *block, float *weights)
{
    const float d = load_f32(block);
    const uint8_t *codes = block + quant_codes_offset(wtype);
    for (int j = 0; j < QUANT_BLOCK; ++j) {
        const int nibble = j < QUANT_BLOCK / 2 ? codes[j] & 0xf : codes[j - QUANT_BLOCK / 2] >> 4;
        switch (wtype) {
        case PAK_WEIGHT_Q4_0:
            weights[j] = d * (float)(nibble - 8);
            break;
        case PAK_WEIGHT_Q4_1: {
            const float product = d * (float)nibble;
            weights[j] = product + load_f32(block + 4);
            break;
        }
        default: /* PAK_WEIGHT_Q8_0 */
            weights[j] = d * (float)(int8_t)codes[j];
        }
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
    if (wtype == PAK_WEIGHT_Q8_0) {
        const __m128i *codes = (const __m128i *)(block + 4);
        *lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(codes))), d);
        *hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(codes + 1))), d);
        return;
    }
    /* table[c]: the weight of code c; the permute reads only the low 4 bits of each index */
    const __m512 codes16 = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 table;
    if (wtype == PAK_WEIGHT_Q4_1)
        table = _mm512_add_ps(_mm512_mul_ps(codes16, d), _mm512_set1_ps(load_f32(block + 4)));
    else
        table = _mm512_mul_ps(_mm512_sub_ps(codes16, _mm512_set1_ps(8.0f)), d);
    const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(block + quant_codes_offset(wtype))));
    *lo = _mm512_permutexvar_ps(bytes, table);
    *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table);
}

#define QUANT_AVX2 "avx2,fma"

/* One block of `wtype` as weights 0..7, 8..15 (*lo) and 16..23, 24..31 (*hi): each code widened to
 * a signed 32-bit integer (4-bit codes: the low halves of the bytes, then the high halves; Q4_0's
 * minus 8 exactly, in bytes) and converted exactly, then scaled (and shifted) as above. */
__attribute__((target(QUANT_AVX2))) static inline __attribute__((always_inline)) void
decode_block256(int wtype, const uint8_t *block, __m256 (*lo)[2], __m256 (*hi)[2])
{
    const __m256 d = _mm256_set1_ps(load_f32(block));
    const __m128i *bytes = (const __m128i *)(block + quant_codes_offset(wtype));
    __m128i codes[2]; /* weights 0..15 and 16..31 as signed bytes */
    if (wtype == PAK_WEIGHT_Q8_0) {
        codes[0] = _mm_loadu_si128(bytes);
        codes[1] = _mm_loadu_si128(bytes + 1);
    } else {
        const __m128i packed = _mm_loadu_si128(bytes), low4 = _mm_set1_epi8(0xf);
        codes[0] = _mm_and_si128(packed, low4);
        codes[1] = _mm_and_si128(_mm_srli_epi16(packed, 4), low4);
        if (wtype == PAK_WEIGHT_Q4_0)
            for (int h = 0; h < 2; ++h)
                codes[h] = _mm_sub_epi8(codes[h], _mm_set1_epi8(8));
    }
    for (int k = 0; k < 4; ++k) {
        const __m128i eight = k % 2 == 0 ? codes[k / 2] : _mm_srli_si128(codes[k / 2], 8);
        __m256 weight = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eight)), d);
        if (wtype == PAK_WEIGHT_Q4_1)
            weight = _mm256_add_ps(weight, _mm256_set1_ps(load_f32(block + 4)));
        (*(k < 2 ? lo : hi))[k % 2] = weight;
    }
}
#endif /* PAK_X86_VARIANTS */

#endif
