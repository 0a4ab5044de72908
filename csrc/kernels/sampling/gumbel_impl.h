/* One instruction-set variant of the Gumbel-max row kernel; included by gumbel.c once per variant
 * with PAK_VARIANT defined (no include guard on purpose). Only the skip over -inf differs between
 * variants; the scores are computed in scalar double precision, identically everywhere. */

#include "sampling/vecops_impl.h"

/* Token of one row (semantics in pyagent/gumbel.h), or -1 for NaN / +inf / nothing finite. */
static int64_t PAK_V(gumbel_row)(const float *restrict x, int64_t n, uint64_t key)
{
    int64_t best = -1;
    double best_score = -INFINITY;
    const pak_v16f neg_inf = PAK_NEG_INF16;
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        const int64_t count = n - j0 < 16 ? n - j0 : 16;
        const pak_v16f v = pak_load16(x + j0, count);
        /* lanes that are not -inf: finite values, +inf and NaN */
        if (!PAK_V(any)(~(v == neg_inf)))
            continue;
        for (int64_t j = j0; j < j0 + count; ++j) {
            if (x[j] == -INFINITY)
                continue;
            if (!(x[j] < INFINITY))
                return -1;
            const double score = (double)x[j] + pak_gumbel_noise(key, (uint64_t)j);
            if (score > best_score || best < 0) {
                best = j;
                best_score = score;
            }
        }
    }
    return best;
}
