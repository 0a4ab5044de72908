/* Scalar helpers of the sampling mask (see select.h). */
#include <float.h>
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

float pak_div_preimage(float b, float t)
{
    const float target = b / t;
    uint32_t lo = pak_key(-FLT_MAX), hi = pak_key(b); /* the predicate holds at hi */
    if (pak_unkey(lo) / t >= target)
        return pak_unkey(lo);
    while (hi - lo > 1) { /* it fails at lo and holds at hi; y / t is non-decreasing in y */
        const uint32_t mid = lo + (hi - lo) / 2;
        if (pak_unkey(mid) / t >= target)
            hi = mid;
        else
            lo = mid;
    }
    return pak_unkey(hi);
}
