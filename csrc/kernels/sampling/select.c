/* Scalar helpers of the sampling mask (see select.h). */
#include <math.h>

#include "sampling/select.h"

#define RADIX_BITS 11
#define RADIX_SIZE (1 << RADIX_BITS)
#define RADIX_PASSES 3

static void insertion_sort_desc(uint32_t *keys, int64_t n)
{
    for (int64_t i = 1; i < n; ++i) {
        const uint32_t k = keys[i];
        int64_t j = i;
        for (; j > 0 && keys[j - 1] < k; --j)
            keys[j] = keys[j - 1];
        keys[j] = k;
    }
}

void pak_sort_desc(uint32_t *keys, uint32_t *tmp, int64_t n)
{
    if (n < 64) {
        insertion_sort_desc(keys, n);
        return;
    }
    /* Sorting ~key ascending sorts key descending; all three digit histograms in one pass. */
    uint32_t hist[RADIX_PASSES][RADIX_SIZE] = {{0}};
    for (int64_t i = 0; i < n; ++i) {
        const uint32_t d = ~keys[i];
        for (int p = 0; p < RADIX_PASSES; ++p)
            ++hist[p][(d >> (RADIX_BITS * p)) & (RADIX_SIZE - 1)];
    }
    uint32_t *src = keys, *dst = tmp;
    for (int p = 0; p < RADIX_PASSES; ++p) {
        const int shift = RADIX_BITS * p;
        uint32_t *h = hist[p];
        if (h[(~src[0] >> shift) & (RADIX_SIZE - 1)] == (uint32_t)n)
            continue; /* every key has the same digit: this pass would not move anything */
        uint32_t offset = 0;
        for (int b = 0; b < RADIX_SIZE; ++b) {
            const uint32_t c = h[b];
            h[b] = offset;
            offset += c;
        }
        for (int64_t i = 0; i < n; ++i)
            dst[h[(~src[i] >> shift) & (RADIX_SIZE - 1)]++] = src[i];
        uint32_t *swap = src;
        src = dst;
        dst = swap;
    }
    if (src != keys)
        memcpy(keys, src, (size_t)n * sizeof *keys);
}

uint32_t pak_select_desc(uint32_t *keys, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n - 1;
    const int64_t target = k - 1;
    while (hi - lo > 16) {
        /* median of three as pivot, then a three-way partition: > pivot | == pivot | < pivot */
        const uint32_t a = keys[lo], b = keys[lo + (hi - lo) / 2], c = keys[hi];
        const uint32_t pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
        int64_t gt = lo, i = lo, lt = hi;
        while (i <= lt) {
            const uint32_t v = keys[i];
            if (v > pivot) {
                keys[i++] = keys[gt];
                keys[gt++] = v;
            } else if (v < pivot) {
                keys[i] = keys[lt];
                keys[lt--] = v;
            } else {
                ++i;
            }
        }
        if (target < gt)
            hi = gt - 1;
        else if (target > lt)
            lo = lt + 1;
        else
            return pivot;
    }
    insertion_sort_desc(keys + lo, hi - lo + 1);
    return keys[target];
}

int64_t pak_gather_at_least(const float *x, int64_t n, int64_t blk, const float *bmax, float g,
                            uint32_t *keys)
{
    int64_t count = 0;
    const int64_t nb = pak_num_blocks(n, blk);
    for (int64_t b = 0; b < nb; ++b) {
        if (!(bmax[b] >= g))
            continue;
        for (int64_t j = 16 * blk * (b / 16) + b % 16, v = 0; v < blk && j < n; ++v, j += 16) {
            keys[count] = pak_key(x[j]);
            count += x[j] >= g;
        }
    }
    return count;
}

float pak_top_p_level(const uint32_t *keys, const double *w, int64_t n, double target)
{
    double cum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        cum += w[i];
        if (cum >= target)
            return pak_unkey(keys[i]);
    }
    return -INFINITY;
}

double pak_seq_sum(const double *w, int64_t n)
{
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i)
        sum += w[i];
    return sum;
}

float pak_min_p_threshold(float m, double log_min_p)
{
    const double md = m;
    float v = (float)(md + log_min_p);
    while (!((double)v - md >= log_min_p))
        v = nextafterf(v, INFINITY);
    for (;;) {
        const float lower = nextafterf(v, -INFINITY);
        if (!((double)lower - md >= log_min_p))
            return v;
        v = lower;
    }
}
