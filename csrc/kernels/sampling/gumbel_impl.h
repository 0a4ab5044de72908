/* One instruction-set variant of the Gumbel-max row kernel; included by gumbel.c once per variant
 * with PAK_VARIANT defined (no include guard on purpose). The noise is computed eight tokens at a
 * time in double precision by the same operations in every variant, so every variant (and the
 * torch fallback) chooses the same token. */

#include "sampling/vecops_impl.h"

/* Merge the tokens ids[0 .. count) into the running choice (*best = -1: none yet): the largest
 * (double)logit + noise, the lowest id among equal scores, -inf logits skipped. The logits are
 * values[0 .. count) when given, else x[ids[i]]. Returns 0, -1 for a NaN or +inf logit, -2 for an
 * id outside [0, n). */
static int PAK_V(gumbel_merge)(const float *restrict x, int64_t n, uint64_t key, const int32_t *ids,
                               const float *values, int64_t count, int64_t *best, double *best_score)
{
    for (int64_t i = 0; i < count; i += 8) {
        const int len = count - i < 8 ? (int)(count - i) : 8;
        pak_v8u64 j = {0};
        pak_v8d v = {0.0};
        for (int l = 0; l < len; ++l) {
            if ((uint64_t)(int64_t)ids[i + l] >= (uint64_t)n)
                return -2;
            j[l] = (uint64_t)ids[i + l];
            v[l] = (double)(values ? values[i + l] : x[ids[i + l]]);
        }
        const pak_v8d score = v + pak_gumbel_noise8(key, j);
        for (int l = 0; l < len; ++l) {
            if (v[l] == -INFINITY)
                continue;
            if (!(v[l] < INFINITY))
                return -1;
            const int64_t id = (int64_t)j[l];
            if (*best < 0 || score[l] > *best_score || (score[l] == *best_score && id < *best)) {
                *best = id;
                *best_score = score[l];
            }
        }
    }
    return 0;
}

/* Token of one row (semantics in pyagent/gumbel.h), or -1 for NaN / +inf / nothing finite: the
 * ids of the logits that are not -inf are gathered, 64 at a time, and merged. */
static int64_t PAK_V(gumbel_row)(const float *restrict x, int64_t n, uint64_t key)
{
    const pak_v16f neg_inf = PAK_NEG_INF16;
    const pak_v16i lanes = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    int32_t ids[64 + 16];
    float values[64 + 16];
    int64_t best = -1, count = 0;
    double best_score = -INFINITY;
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        const pak_v16f v = pak_load16(x + j0, n - j0); /* padding: -inf */
        const unsigned listed = PAK_V(lane_mask)(~(v == neg_inf)); /* finite values, +inf and NaN */
        if (!listed)
            continue;
        count += PAK_V(compress16)(listed, v, lanes + (int32_t)j0, values + count, ids + count);
        if (count >= 64) {
            if (PAK_V(gumbel_merge)(x, n, key, ids, values, count, &best, &best_score) < 0)
                return -1;
            count = 0;
        }
    }
    if (PAK_V(gumbel_merge)(x, n, key, ids, values, count, &best, &best_score) < 0)
        return -1;
    return best;
}

/* Token of one row whose finite logits are among ids[0 .. count) (any order), with those logits in
 * values when given: the same choice as gumbel_row at O(count) cost; -1 as there, or -2 for an id
 * outside [0, n). */
static int64_t PAK_V(gumbel_listed)(const float *restrict x, int64_t n, uint64_t key, const int32_t *ids,
                                    const float *values, int64_t count)
{
    int64_t best = -1;
    double best_score = -INFINITY;
    const int rc = PAK_V(gumbel_merge)(x, n, key, ids, values, count, &best, &best_score);
    return rc < 0 ? rc : best;
}
