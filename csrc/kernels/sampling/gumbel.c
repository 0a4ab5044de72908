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

/* log(x) for a positive normal x: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), log(m) = 2 atanh(s),
 * s = (m - 1) / (m + 1), |s| < 0.172, summed to s^19 in Horner form (relative error ~1e-16). A
 * fixed sequence of double operations (no library log), so the torch fallback repeats it exactly. */
static inline double pak_log(double x)
{
    int e;
    double m = frexp(x, &e);
    if (m < 0x1.6a09e667f3bcdp-1) { /* sqrt(1/2) */
        m = m * 2.0;
        e = e - 1;
    }
    const double f = m - 1.0;
    const double s = f / (2.0 + f);
    const double s2 = s * s;
    double q = 1.0 / 19.0;
    q = q * s2 + 1.0 / 17.0;
    q = q * s2 + 1.0 / 15.0;
    q = q * s2 + 1.0 / 13.0;
    q = q * s2 + 1.0 / 11.0;
    q = q * s2 + 1.0 / 9.0;
    q = q * s2 + 1.0 / 7.0;
    q = q * s2 + 1.0 / 5.0;
    q = q * s2 + 1.0 / 3.0;
    q = q * s2 + 1.0;
    return (double)e * PAK_LN2 + (2.0 * s) * q;
}

/* Gumbel(0, 1) noise of token j under a row's key. */
static inline double pak_gumbel_noise(uint64_t key, uint64_t j)
{
    const uint64_t h = pak_mix64(key + (j + 1) * PAK_GOLDEN);
    const double u = ((double)(h >> 11) + 0.5) * 0x1p-53;
    return -pak_log(-pak_log(u));
}

#define PAK_IMPL "sampling/gumbel_impl.h"
#include "common/variants.h"

typedef int64_t (*pak_gumbel_fn)(const float *restrict, int64_t, uint64_t);

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

int pak_gumbel_sample_f32(const float *logits, int64_t num_rows, int64_t vocab, const uint64_t *seeds,
                          const uint64_t *steps, int64_t *tokens, int64_t *err_row)
{
    if (err_row)
        *err_row = -1;
    if (num_rows < 0 || vocab < 0 || vocab > INT32_MAX
        || (num_rows > 0 && (!seeds || !steps || !tokens || (vocab > 0 && !logits))))
        return PAK_EINVAL;
    const pak_gumbel_fn row_fn = pick_gumbel_fn();
    for (int64_t r = 0; r < num_rows; ++r) {
        const uint64_t key = pak_mix64(seeds[r] + (steps[r] + 1) * PAK_GOLDEN);
        tokens[r] = vocab > 0 ? row_fn(logits + r * vocab, vocab, key) : -1;
        if (tokens[r] < 0) {
            if (err_row)
                *err_row = r;
            return PAK_EVALUE;
        }
    }
    return PAK_OK;
}
