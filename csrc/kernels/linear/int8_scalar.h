/* Internal to int8.c: the portable variant of the int8 path, and the activation quantization every
 * variant shares.
 *
 * The portable variant follows the GGUF formats' definitions literally: it gathers each row's block
 * back from its group into the GGUF bytes, decodes every code, sums code x activation in int32 and
 * applies the scales in the order of pyagent/linear_int8.h. The x86 variants (int8_impl.h) must give
 * its bits.
 */
#ifndef PAK_LINEAR_INT8_SCALAR_H
#define PAK_LINEAR_INT8_SCALAR_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/bf16.h"
#include "linear/int8_layout.h"

/* ---------------------------------------------------------------------------------------------
 * Activations. */

/* Row `m`'s value k of x as float32 (bfloat16 widened exactly). */
static inline float i8_input(const void *x, int x_bf16, int64_t index)
{
    return x_bf16 ? pak_bf16_to_f32(((const uint16_t *)x)[index]) : ((const float *)x)[index];
}

/* v clamped to [low, high]; NaN becomes 0. */
static inline float i8_clamp(float v, float low, float high)
{
    return v >= low ? (v <= high ? v : high) : (v < low ? low : 0.0f);
}

/* roundf's rounding (halves away from zero) of |v| <= 2^22, without a library call. */
static inline int i8_round_away(float v)
{
    const int t = (int)v;          /* toward zero */
    const float rest = v - (float)t; /* exact */
    return t + (rest >= 0.5f) - (rest <= -0.5f);
}

/* One block of 32 values as llama.cpp's Q8_0, the scale kept in float32. */
static inline void i8_quantize32(const void *x, int x_bf16, int64_t start, pak_int8_act32 *out)
{
    float v[32], amax = 0.0f;
    for (int j = 0; j < 32; ++j) {
        v[j] = i8_input(x, x_bf16, start + j);
        const float ax = fabsf(v[j]);
        amax = ax > amax ? ax : amax; /* NaN never wins */
    }
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t half[2] = {0, 0};
    for (int j = 0; j < 32; ++j) {
        const int q = i8_round_away(i8_clamp(v[j] * id, -127.0f, 127.0f));
        out->q[j] = (int8_t)q;
        half[j / 16] += q;
    }
    out->d = d;
    out->s = half[0] + half[1];
    out->ds = d * (float)out->s;
    out->half[0] = (int16_t)half[0];
    out->half[1] = (int16_t)half[1];
}

/* ---------------------------------------------------------------------------------------------
 * The portable product. */

/* Row r's GGUF block b from a group of nb blocks (Q5_0's and Q5_1's word of high bits put back in
 * GGUF's order). */
static inline void i8_gather_block(const i8_format *f, int wtype, const uint8_t *group, int64_t nb, int r,
                                   int64_t b, uint8_t *block)
{
    for (int s = 0; s < f->sections; ++s) {
        const int bytes = f->field_bytes[s];
        const uint8_t *field = group + i8_section(f, nb, s) + b * G_ROWS * bytes;
        uint8_t *dst = block + f->field_offset[s];
        if (bytes % 4 == 0) {
            for (int t = 0; t < bytes / 4; ++t)
                memcpy(dst + 4 * t, field + t * COLUMN_BYTES + 4 * r, 4);
        } else {
            memcpy(dst, field + 2 * r, 2);
        }
    }
    if (wtype == I8_Q5_0 || wtype == I8_Q5_1) {
        uint8_t *word = block + (wtype == I8_Q5_0 ? 2 : 4);
        uint32_t high = 0;
        for (int k = 0; k < 4; ++k)
            for (int i = 0; i < 4; ++i) {
                high |= (uint32_t)((word[i] >> (2 * k)) & 1) << (4 * k + i);
                high |= (uint32_t)((word[i] >> (2 * k + 1)) & 1) << (16 + 4 * k + i);
            }
        for (int i = 0; i < 4; ++i)
            word[i] = (uint8_t)(high >> (8 * i));
    }
}

/* y after one GGUF block of a 32-weight format against activation block a. */
static inline float i8_block32_scalar(int wtype, const uint8_t *block, const pak_int8_act32 *a, float y)
{
    int32_t dot = 0;
    if (wtype == I8_Q8_0) {
        for (int j = 0; j < 32; ++j)
            dot += (int8_t)block[2 + j] * a->q[j];
    } else {
        const int five = wtype == I8_Q5_0 || wtype == I8_Q5_1, has_min = wtype == I8_Q4_1 || wtype == I8_Q5_1;
        const uint8_t *qs = block + (five ? 4 : 0) + (has_min ? 4 : 2);
        uint32_t high = 0;
        if (five)
            memcpy(&high, block + (has_min ? 4 : 2), 4);
        const int bias = wtype == I8_Q4_0 ? 8 : wtype == I8_Q5_0 ? 16 : 0;
        for (int j = 0; j < 32; ++j) {
            const int nibble = j < 16 ? qs[j] & 0xf : qs[j - 16] >> 4;
            const int code = nibble | (int)((high >> j) & 1) << 4;
            dot += (code - bias) * a->q[j];
        }
    }
    y = fmaf(i8_half(block) * a->d, (float)dot, y);
    if (wtype == I8_Q4_1 || wtype == I8_Q5_1)
        y = fmaf(i8_half(block + 2), a->ds, y);
    return y;
}

/* Q4_K's and Q5_K's 6-bit scale and minimum of sub-block i from the 12 bytes at p. */
static inline void i8_scale_min_k4(int i, const uint8_t *p, int *scale, int *minimum)
{
    if (i < 4) {
        *scale = p[i] & 63;
        *minimum = p[i + 4] & 63;
    } else {
        *scale = (p[i + 4] & 0xf) | ((p[i - 4] >> 6) << 4);
        *minimum = (p[i + 4] >> 4) | ((p[i] >> 6) << 4);
    }
}

/* y after one GGUF super-block of a K-quant against its 8 activation blocks a[0..7], sub-block after
 * sub-block. */
static inline float i8_block256_scalar(int wtype, const uint8_t *block, const pak_int8_act32 *a, float y)
{
    if (wtype == I8_Q6_K) {
        const uint8_t *ql = block, *qh = block + 128;
        const int8_t *scales = (const int8_t *)(block + 192);
        const float d = i8_half(block + 208);
        for (int s = 0; s < 16; ++s) {
            const pak_int8_act32 *act = a + s / 2;
            int32_t dot = 0;
            for (int idx = 16 * s; idx < 16 * s + 16; ++idx) {
                const int n = idx / 128, part = idx % 128 / 32, l = idx % 32;
                const uint8_t low = ql[64 * n + l + (part & 1) * 32];
                const int nibble = part < 2 ? low & 0xf : low >> 4;
                const int code = (nibble | ((qh[32 * n + l] >> (2 * part)) & 3) << 4) - 32;
                dot += code * act->q[idx % 32];
            }
            const float scale = d * (float)scales[s];
            y = fmaf(scale * act->d, (float)dot, y);
        }
        return y;
    }
    const uint8_t *scales = block + 4, *qh = block + 16, *qs = block + (wtype == I8_Q5_K ? 48 : 16);
    const float d = i8_half(block), dmin = i8_half(block + 2);
    for (int i = 0; i < 8; ++i) {
        int scale, minimum;
        i8_scale_min_k4(i, scales, &scale, &minimum);
        int32_t dot = 0;
        for (int l = 0; l < 32; ++l) {
            const uint8_t byte = qs[32 * (i / 2) + l];
            int code = i % 2 ? byte >> 4 : byte & 0xf;
            if (wtype == I8_Q5_K)
                code |= ((qh[l] >> i) & 1) << 4;
            dot += code * a[i].q[l];
        }
        const float sub_scale = d * (float)scale, sub_min = -(dmin * (float)minimum);
        y = fmaf(sub_scale * a[i].d, (float)dot, y);
        y = fmaf(sub_min, a[i].ds, y);
    }
    return y;
}

#endif
