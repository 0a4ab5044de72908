/* Internal: scalar bfloat16 <-> float32 conversions shared by the kernels. */
#ifndef PAK_BF16_H
#define PAK_BF16_H

#include <stdint.h>
#include <string.h>

/* The float32 value of a bfloat16 (exact). */
static inline float pak_bf16_to_f32(uint16_t h)
{
    const uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* The nearest bfloat16 (ties to even), as torch rounds; NaN stays a quiet NaN. */
static inline uint16_t pak_f32_to_bf16(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((bits >> 16) | 0x40u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

#endif
