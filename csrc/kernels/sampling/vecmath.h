/* Internal: 16-lane vector types (GCC vector extensions), loads, exp(x) for x <= 0 and tanh in float.
 *
 * The vectors are lowered to whatever the enclosing target provides (4 x SSE2, 2 x AVX2 or one
 * AVX-512 register), and every lane does the same IEEE operations, so results do not depend on the
 * instruction set. pak_expf_nonpos16 is a fixed sequence of float operations (Cody-Waite reduction
 * by ln 2, degree-7 Taylor polynomial in Horner form, scaling by 2^n built from exponent bits);
 * compiled with -ffp-contract=off it rounds identically everywhere. The pure-torch fallback
 * (pyagent_kernels/_sampling_torch.py, exp_nonpos) repeats it operation by operation, which is what
 * makes the C kernel and the fallback agree bit for bit. Error: a few float ulp. Inputs below -87
 * (including -inf) give 0.
 */
#ifndef PAK_VECMATH_H
#define PAK_VECMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/variant.h"

typedef float pak_v16f __attribute__((vector_size(64)));
typedef int32_t pak_v16i __attribute__((vector_size(64)));
typedef uint32_t pak_v16u __attribute__((vector_size(64)));
typedef float pak_v8f __attribute__((vector_size(32)));
typedef double pak_v8d __attribute__((vector_size(64)));

#define PAK_EXP_MIN (-87.0f)
#define PAK_LOG2E 0x1.715476p+0f
#define PAK_SHIFTER 0x1.8p+23f /* 1.5 * 2^23: adding it rounds to an integer kept in the low bits */
#define PAK_SHIFTER_BITS 0x4B400000
#define PAK_LN2_HI 0x1.62e4p-1f /* n * PAK_LN2_HI is exact for |n| < 2^8 */
#define PAK_LN2_LO 0x1.7f7d1cp-20f
#define PAK_NEG_INF16 {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, \
                       -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,  \
                       -INFINITY, -INFINITY}

/* Lane-wise mask ? a : b, for a mask from a comparison (all bits set or clear per lane). */
PAK_INLINE pak_v16f pak_select16(pak_v16i mask, pak_v16f a, pak_v16f b)
{
    return (pak_v16f)((mask & (pak_v16i)a) | (~mask & (pak_v16i)b));
}

PAK_INLINE pak_v16f pak_expf_nonpos16(pak_v16f x)
{
    const pak_v16f zero = {0.0f};
    const pak_v16i ok = x >= PAK_EXP_MIN;
    const pak_v16f xc = pak_select16(ok, x, zero + PAK_EXP_MIN);
    const pak_v16f t = xc * PAK_LOG2E + PAK_SHIFTER;
    const pak_v16f n = t - PAK_SHIFTER;
    const pak_v16f r = (xc - n * PAK_LN2_HI) - n * PAK_LN2_LO;
    pak_v16f q = r * 0x1.a01a02p-13f + 0x1.6c16c2p-10f; /* 1/7!, 1/6! */
    q = q * r + 0x1.111112p-7f;                         /* 1/5! */
    q = q * r + 0x1.555556p-5f;                         /* 1/4! */
    q = q * r + 0x1.555556p-3f;                         /* 1/3! */
    q = q * r + 0.5f;
    q = q * r + 1.0f;
    q = q * r + 1.0f;
    const pak_v16i scale_bits = ((pak_v16i)t - PAK_SHIFTER_BITS + 127) << 23; /* 2^n, n in [-126, 0] */
    return pak_select16(ok, q * (pak_v16f)scale_bits, zero);
}

/* tanh(x) lane by lane: (1 - e) / (1 + e) with e = exp(-2|x|) from pak_expf_nonpos16, and x's sign.
 * Absolute error a few float ulp of 1 (so relatively coarser for |x| below ~1e-3); |x| above ~43.5
 * gives exactly +-1; NaN stays NaN. */
PAK_INLINE pak_v16f pak_tanhf16(pak_v16f x)
{
    const pak_v16i sign = (pak_v16i)x & INT32_MIN;
    const pak_v16f magnitude = (pak_v16f)((pak_v16i)x & INT32_MAX);
    const pak_v16f e = pak_expf_nonpos16(magnitude * -2.0f);
    const pak_v16f t = (1.0f - e) / (1.0f + e);
    return (pak_v16f)((pak_v16i)pak_select16(magnitude == magnitude, t, x) | sign);
}

/* Sixteen floats; lanes past `count` (< 16) read as -inf. */
PAK_INLINE pak_v16f pak_load16(const float *x, int64_t count)
{
    pak_v16f v = PAK_NEG_INF16;
    memcpy(&v, x, (size_t)(count < 16 ? count : 16) * sizeof(float));
    return v;
}

/* Sixteen int32 values; lanes past `count` (< 16) read as 0. */
PAK_INLINE pak_v16i pak_load16i(const int32_t *x, int64_t count)
{
    pak_v16i v = {0};
    memcpy(&v, x, (size_t)(count < 16 ? count : 16) * sizeof(int32_t));
    return v;
}

/* Lane-wise minimum and maximum of floats (of the two, the first when they compare equal or NaN). */
PAK_INLINE pak_v16f pak_min16(pak_v16f a, pak_v16f b)
{
    return pak_select16(b < a, b, a);
}

PAK_INLINE pak_v16f pak_max16(pak_v16f a, pak_v16f b)
{
    return pak_select16(b > a, b, a);
}

/* Sixteen order-preserving keys (see pak_key in select.h) back to their values; lanes past `count`
 * (< 16) read as -inf. */
PAK_INLINE pak_v16f pak_unkey16(const uint32_t *keys, int64_t count)
{
    pak_v16f v = PAK_NEG_INF16;
    pak_v16u k = (pak_v16u)v;
    k = ~k; /* the key of -inf: pak_key flips every bit of a negative value */
    memcpy(&k, keys, (size_t)(count < 16 ? count : 16) * sizeof(uint32_t));
    const pak_v16u negative = (k >> 31) - 1u; /* all ones where the key encodes a negative value */
    return (pak_v16f)((negative & ~k) | (~negative & (k & 0x7FFFFFFFu)));
}

/* Order-preserving keys of sixteen floats (pak_key of select.h, lane by lane). */
PAK_INLINE pak_v16u pak_key16(pak_v16f v)
{
    const pak_v16i u = (pak_v16i)v;
    return (pak_v16u)(u ^ ((u >> 31) | INT32_MIN));
}

/* Lane-wise unsigned maximum. */
PAK_INLINE pak_v16u pak_max16u(pak_v16u a, pak_v16u b)
{
    const pak_v16u greater = (pak_v16u)(a > b);
    return (greater & a) | (~greater & b);
}

/* The largest of sixteen unsigned lanes. */
PAK_INLINE uint32_t pak_hmax16u(pak_v16u v)
{
    const pak_v16u half = {8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7};
    const pak_v16u quarter = {4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11};
    const pak_v16u eighth = {2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13};
    const pak_v16u sixteenth = {1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14};
    v = pak_max16u(v, __builtin_shuffle(v, half));
    v = pak_max16u(v, __builtin_shuffle(v, quarter));
    v = pak_max16u(v, __builtin_shuffle(v, eighth));
    v = pak_max16u(v, __builtin_shuffle(v, sixteenth));
    return v[0];
}

/* Lanes 0-7 and 8-15 of a float vector, widened to double. */
PAK_INLINE pak_v8d pak_low8d(pak_v16f v)
{
    pak_v8f half;
    memcpy(&half, &v, sizeof half);
    return __builtin_convertvector(half, pak_v8d);
}

PAK_INLINE pak_v8d pak_high8d(pak_v16f v)
{
    pak_v8f half;
    memcpy(&half, (const char *)&v + sizeof half, sizeof half);
    return __builtin_convertvector(half, pak_v8d);
}

#endif
