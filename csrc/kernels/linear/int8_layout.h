/* Internal to the int8 path (pyagent/linear_int8.h): the GGUF block formats it reads and where each
 * field of a block lies in a group of interleaved rows.
 *
 * A group holds PAK_INT8_GROUP_ROWS rows of `nb` blocks each as sections, one per field of the GGUF
 * block, in the order of `sections` below: section s holds, for block 0, 1, ..., nb - 1, that field
 * of the 16 rows side by side: a field of 4n bytes as n columns of 16 rows x 4 bytes (64 bytes per
 * column), a float16 field as 16 rows x 2 bytes.
 */
#ifndef PAK_LINEAR_INT8_LAYOUT_H
#define PAK_LINEAR_INT8_LAYOUT_H

#include <stdint.h>
#include <string.h>

#include "pyagent/linear_int8.h"

#define G_ROWS PAK_INT8_GROUP_ROWS
#define COLUMN_BYTES (G_ROWS * 4) /* one 4-byte column of a group's 16 rows */
#define HALF_BYTES (G_ROWS * 2)   /* one float16 field of a group's 16 rows */

/* GGML type ids of the formats the int8 path reads. */
enum {
    I8_Q4_0 = 2,
    I8_Q4_1 = 3,
    I8_Q5_0 = 6,
    I8_Q5_1 = 7,
    I8_Q8_0 = 8,
    I8_Q4_K = 12,
    I8_Q5_K = 13,
    I8_Q6_K = 14
};

#define I8_MAX_SECTIONS 5

typedef struct {
    int block;        /* weights per GGUF block: 32 or 256 */
    int block_bytes;  /* bytes per GGUF block */
    int sections;
    int field_bytes[I8_MAX_SECTIONS];  /* bytes of each section's field per row and block */
    int field_offset[I8_MAX_SECTIONS]; /* where that field starts in the GGUF block */
} i8_format;

/* The format of GGML type `wtype`, or NULL. */
static inline const i8_format *i8_format_of(int wtype)
{
    static const i8_format q4_0 = {32, 18, 2, {16, 2}, {2, 0}};
    static const i8_format q4_1 = {32, 20, 3, {16, 2, 2}, {4, 0, 2}};
    static const i8_format q5_0 = {32, 22, 3, {16, 4, 2}, {6, 2, 0}};
    static const i8_format q5_1 = {32, 24, 4, {16, 4, 2, 2}, {8, 4, 0, 2}};
    static const i8_format q8_0 = {32, 34, 2, {32, 2}, {2, 0}};
    static const i8_format q4_k = {256, 144, 4, {128, 12, 2, 2}, {16, 4, 0, 2}};
    static const i8_format q5_k = {256, 176, 5, {128, 32, 12, 2, 2}, {48, 16, 4, 0, 2}};
    static const i8_format q6_k = {256, 210, 4, {128, 64, 16, 2}, {0, 128, 192, 208}};
    switch (wtype) {
    case I8_Q4_0: return &q4_0;
    case I8_Q4_1: return &q4_1;
    case I8_Q5_0: return &q5_0;
    case I8_Q5_1: return &q5_1;
    case I8_Q8_0: return &q8_0;
    case I8_Q4_K: return &q4_k;
    case I8_Q5_K: return &q5_k;
    case I8_Q6_K: return &q6_k;
    default: return NULL;
    }
}

/* Start of section s in a group of nb blocks. */
static inline int64_t i8_section(const i8_format *f, int64_t nb, int s)
{
    int64_t offset = 0;
    for (int t = 0; t < s; ++t)
        offset += (int64_t)f->field_bytes[t];
    return offset * G_ROWS * nb;
}

/* Where a group's results go: row m's column c of y, float32 or bfloat16, is element m * ldy + c. */
typedef struct {
    void *y;
    int y_f32;
    int64_t ldy;
} i8_out;

/* The float32 value of an IEEE half (exact). */
static inline float i8_half(const uint8_t *p)
{
    const uint32_t h = (uint32_t)p[0] | (uint32_t)p[1] << 8;
    const uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    uint32_t bits;
    if (exponent == 0x1fu) {
        bits = sign | 0x7f800000u | mantissa << 13;
    } else if (exponent != 0) {
        bits = sign | (exponent + 112u) << 23 | mantissa << 13;
    } else if (mantissa == 0) {
        bits = sign;
    } else { /* subnormal: normalize */
        int shift = 0;
        uint32_t m = mantissa;
        while (!(m & 0x400u)) {
            m <<= 1;
            ++shift;
        }
        bits = sign | (uint32_t)(113 - shift) << 23 | (m & 0x3ffu) << 13;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

#endif
