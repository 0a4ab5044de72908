/* Internal: scalar helpers of the sampling mask shared by every instruction-set variant. */
#ifndef PAK_SELECT_H
#define PAK_SELECT_H

#include <stdint.h>
#include <string.h>

#include "common/variant.h"

/* Candidate thresholds m - d tried by the top-p-only path to avoid sorting the whole row. */
#define PAK_NLEVELS 10
static const float pak_levels[PAK_NLEVELS] = {1.0f, 2.0f, 3.0f, 4.0f, 6.0f, 8.0f, 10.0f, 13.0f, 16.0f, 32.0f};

/* Map a float to a uint32 whose unsigned order is the float order (-0.0 just below +0.0). */
PAK_INLINE uint32_t pak_key(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (u & UINT32_C(0x80000000)) ? ~u : (u | UINT32_C(0x80000000));
}

PAK_INLINE float pak_unkey(uint32_t k)
{
    const uint32_t u = (k & UINT32_C(0x80000000)) ? (k & UINT32_C(0x7FFFFFFF)) : ~k;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Sort keys in descending order (LSD radix sort; tmp holds n entries). */
void pak_sort_desc(uint32_t *keys, uint32_t *tmp, int64_t n);

/* Number of lane-strided blocks of `blk` values over n values: 16 per chunk of 16 * blk values
 * (the last chunk may be partial; its empty blocks have maximum -inf). Block b holds the values
 * x[16 * blk * (b / 16) + b % 16 + 16 * v], v = 0 .. blk - 1, that lie below n. */
PAK_INLINE int64_t pak_num_blocks(int64_t n, int64_t blk)
{
    return 16 * ((n + 16 * blk - 1) / (16 * blk));
}

/* Write the keys of every x[j] >= g to keys (capacity n), skipping blocks whose maximum (bmax) is
 * below g; return how many were written. */
int64_t pak_gather_at_least(const float *x, int64_t n, int64_t blk, const float *bmax, float g,
                            uint32_t *keys);

/* Over keys sorted descending with weights w, the value at the first position where the running
 * sum reaches target, or -INFINITY if it never does. */
float pak_top_p_level(const uint32_t *keys, const double *w, int64_t n, double target);

/* Sequential sum w[0] + w[1] + ... + w[n-1]. */
double pak_seq_sum(const double *w, int64_t n);

/* The smallest float v with (double)v - (double)m >= log_min_p (m finite, log_min_p <= 0). */
float pak_min_p_threshold(float m, double log_min_p);

/* The smallest finite float y with y / t >= b / t (IEEE float division; b finite, t > 0 finite):
 * a bound on unscaled values that keeps every value whose scaled value reaches b's. */
float pak_div_preimage(float b, float t);

#endif
