/* Gumbel-max token selection (pyagent/gumbel.h): the random stream and the dispatch. */
#include <math.h>
#include <stdint.h>
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#include <immintrin.h> /* the AVX-512 variant uses a few intrinsics (sampling/vecops_impl.h) */
#endif

#include "pyagent/common.h"
#include "pyagent/gumbel.h"
#include "common/variant.h"
#include "sampling/vecmath.h"

#define PAK_GOLDEN UINT64_C(0x9E3779B97F4A7C15)
#define PAK_LN2 0x1.62e42fefa39efp-1

/* The splitmix64 finaliser. */
static inline uint64_t pak_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* The noise uses log(x) for a positive normal x: x = m * 2^e with m in [sqrt(1/2), sqrt(2)),
 * log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, summed to s^19 in Horner form (relative
 * error ~1e-16). A fixed sequence of double operations (no library log), so the torch fallback
 * (_gumbel_torch.py, log_poly) repeats it exactly. */
typedef uint64_t pak_v8u64 __attribute__((vector_size(64)));
typedef int64_t pak_v8i64 __attribute__((vector_size(64)));

/* pak_mix64 on eight lanes. */
PAK_INLINE pak_v8u64 pak_mix64x8(pak_v8u64 z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* pak_log on eight lanes, operation for operation (so every lane rounds as the scalar function
 * does); frexp becomes exponent-bit arithmetic, exact for the positive normal inputs it gets. */
PAK_INLINE pak_v8d pak_log8(pak_v8d x)
{
    const pak_v8i64 bits = (pak_v8i64)x;
    pak_v8i64 e = ((bits >> 52) & 0x7FF) - 1022;
    pak_v8d m = (pak_v8d)((bits & INT64_C(0x800FFFFFFFFFFFFF)) | INT64_C(0x3FE0000000000000));
    const pak_v8i64 low = m < 0x1.6a09e667f3bcdp-1; /* all ones where m < sqrt(1/2) */
    m = (pak_v8d)((low & (pak_v8i64)(m * 2.0)) | (~low & (pak_v8i64)m));
    e = e + low;
    const pak_v8d f = m - 1.0;
    const pak_v8d s = f / (2.0 + f);
    const pak_v8d s2 = s * s;
    const pak_v8d zero = {0.0};
    pak_v8d q = zero + 1.0 / 19.0;
    q = q * s2 + 1.0 / 17.0;
    q = q * s2 + 1.0 / 15.0;
    q = q * s2 + 1.0 / 13.0;
    q = q * s2 + 1.0 / 11.0;
    q = q * s2 + 1.0 / 9.0;
    q = q * s2 + 1.0 / 7.0;
    q = q * s2 + 1.0 / 5.0;
    q = q * s2 + 1.0 / 3.0;
    q = q * s2 + 1.0;
    return __builtin_convertvector(e, pak_v8d) * PAK_LN2 + (2.0 * s) * q;
}

/* Gumbel(0, 1) noise of tokens j (eight lanes) under a row's key: -log(-log(u)) with
 * h = mix64(key + (j + 1) * G) and u = ((h >> 11) + 0.5) * 2^-53. */
PAK_INLINE pak_v8d pak_gumbel_noise8(uint64_t key, pak_v8u64 j)
{
    const pak_v8u64 h = pak_mix64x8(key + (j + 1) * PAK_GOLDEN);
    const pak_v8d u = (__builtin_convertvector(h >> 11, pak_v8d) + 0.5) * 0x1p-53;
    return -pak_log8(-pak_log8(u));
}

#define PAK_IMPL "sampling/gumbel_impl.h"
#include "common/variants.h"

typedef int64_t (*pak_gumbel_fn)(const float *restrict, int64_t, uint64_t);
typedef int64_t (*pak_gumbel_listed_fn)(const float *restrict, int64_t, uint64_t, const int32_t *,
                                        const float *, int64_t);

static pak_gumbel_fn pick_gumbel_fn(void)
{
    switch (pak_isa_active()) {
#if PAK_X86_VARIANTS
    case PAK_ISA_AVX512:
        return gumbel_row_avx512;
    case PAK_ISA_AVX2:
        return gumbel_row_avx2;
#endif
    default:
        return gumbel_row_generic;
    }
}

static pak_gumbel_listed_fn pick_listed_fn(void)
{
    switch (pak_isa_active()) {
#if PAK_X86_VARIANTS
    case PAK_ISA_AVX512:
        return gumbel_listed_avx512;
    case PAK_ISA_AVX2:
        return gumbel_listed_avx2;
#endif
    default:
        return gumbel_listed_generic;
    }
}

int pak_gumbel_sample_f32(const float *logits, int64_t num_rows, int64_t vocab, const uint64_t *seeds,
                          const uint64_t *steps, int64_t *tokens, int64_t *err_row)
{
    /* with advance_steps == 0 the steps are only read */
    return pak_gumbel_sample_kept_f32(logits, num_rows, vocab, seeds, (uint64_t *)steps, NULL, NULL, NULL,
                                      0, tokens, 0, err_row);
}

int pak_gumbel_sample_kept_f32(const float *logits, int64_t num_rows, int64_t vocab, const uint64_t *seeds,
                               uint64_t *steps, const int32_t *kept, const float *kept_values,
                               const int32_t *kept_count, int64_t kept_capacity, int64_t *tokens,
                               int advance_steps, int64_t *err_row)
{
    if (err_row)
        *err_row = -1;
    if (num_rows < 0 || vocab < 0 || vocab > INT32_MAX || kept_capacity < 0
        || ((kept || kept_values) && !kept_count) || (kept_count && kept_capacity > 0 && !kept)
        || (num_rows > 0 && (!seeds || !steps || !tokens || (vocab > 0 && !logits))))
        return PAK_EINVAL;
    const pak_gumbel_fn row_fn = pick_gumbel_fn();
    const pak_gumbel_listed_fn listed_fn = pick_listed_fn();
    for (int64_t r = 0; r < num_rows; ++r) {
        const uint64_t key = pak_mix64(seeds[r] + (steps[r] + 1) * PAK_GOLDEN);
        const int64_t count = kept_count ? kept_count[r] : -1;
        if (count > kept_capacity)
            return PAK_EINVAL;
        if (vocab == 0)
            tokens[r] = -1;
        else if (count >= 0)
            tokens[r] = listed_fn(logits + r * vocab, vocab, key, kept ? kept + r * kept_capacity : NULL,
                                  kept_values ? kept_values + r * kept_capacity : NULL, count);
        else
            tokens[r] = row_fn(logits + r * vocab, vocab, key);
        if (tokens[r] < 0) {
            if (err_row)
                *err_row = r;
            return tokens[r] == -2 ? PAK_EINDEX : PAK_EVALUE;
        }
    }
    if (advance_steps) /* only once every row succeeded */
        for (int64_t r = 0; r < num_rows; ++r)
            steps[r] += 1;
    return PAK_OK;
}
