/* One instruction-set variant of the greedy row; included by greedy.c once per variant with
 * PAK_VARIANT defined (no include guard on purpose). */

#include "sampling/vecops_impl.h"

/* The lowest index of the row's largest value, or -1 when the row holds NaN or +inf or only -inf:
 * one pass for the largest value (and whether anything is not below +inf), one to find it. */
static int64_t PAK_V(greedy_row)(const float *restrict x, int64_t n)
{
    pak_v16f best = PAK_NEG_INF16;
    pak_v16i bad = {0};
    const int64_t whole = n / 16 * 16;
    for (int64_t j0 = 0; j0 <= n - 16; j0 += 16) {
        pak_v16f v;
        memcpy(&v, x + j0, sizeof v);
        bad |= ~(v < INFINITY); /* NaN and +inf */
        best = pak_select16(v > best, v, best);
    }
    if (whole < n) {
        const pak_v16f v = pak_load16(x + whole, n - whole); /* padding: -inf */
        bad |= ~(v < INFINITY);
        best = pak_select16(v > best, v, best);
    }
    if (PAK_V(any)(bad))
        return -1;
    float top = best[0];
    for (int l = 1; l < 16; ++l)
        top = best[l] > top ? best[l] : top;
    if (top == -INFINITY)
        return -1;
    int64_t j = 0;
    for (; j <= n - 16; j += 16) {
        pak_v16f v;
        memcpy(&v, x + j, sizeof v);
        const unsigned hit = PAK_V(lane_mask)(v == top);
        if (hit)
            return j + __builtin_ctz(hit);
    }
    while (x[j] != top) /* top lies in the tail */
        ++j;
    return j;
}
