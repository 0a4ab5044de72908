/* One instruction-set variant of the sampling-mask row kernel; included by mask.c once per variant
 * with PAK_VARIANT defined (no include guard on purpose). Only the streaming loops differ between
 * variants; floating-point work uses the fixed 16-lane vectors of vecmath.h and no contracted
 * multiply-adds, so every variant rounds identically and produces bit-identical results. */

#include "sampling/vecops_impl.h"

/* Scale sixteen values in place (when `scale`; `count` < 16 touches only the first `count`), flag
 * NaN / +inf in *ok (lanes cleared), and return their order-preserving keys (padding: -inf). */
PAK_INLINE pak_v16u PAK_V(scan16)(float *restrict x, int64_t count, float t, int scale, pak_v16i *ok)
{
    pak_v16f v = pak_load16(x, count);
    if (scale) {
        v = v / t;
        memcpy(x, &v, (size_t)(count < 16 ? count : 16) * sizeof(float));
    }
    *ok &= v < INFINITY;
    return pak_key16(v);
}

/* Pass over the row: optional scaling, per-block maxima into bmax, the row maximum returned.
 * Blocks are lane-strided (select.h, pak_gather_at_least): a chunk of 16 * blk values is read as
 * blk vectors of 16 and lane l's running maximum is the maximum of block 16 * chunk + l, so no
 * horizontal reduction is needed per block. Maxima are taken over order-preserving integer keys
 * (exact). */
PAK_INLINE float PAK_V(scan_row)(float *restrict x, int64_t n, float t, int scale, int64_t blk,
                                 float *restrict bmax, int *bad)
{
    const pak_v16u zero = {0};
    pak_v16i ok = (pak_v16i)zero - 1;
    pak_v16u row_max = zero;
    for (int64_t start = 0, b = 0; start < n; start += 16 * blk, b += 16) {
        pak_v16u block_max = zero;
        if (start + 16 * blk <= n) {
            /* four independent running maxima over a full chunk (16 * blk is a multiple of 64),
             * merged at the end, keep the loop from waiting on one dependency chain */
            pak_v16u acc[4] = {zero, zero, zero, zero};
            for (int64_t j = start; j < start + 16 * blk; j += 64)
                for (int a = 0; a < 4; ++a)
                    acc[a] = PAK_V(umax)(acc[a], PAK_V(scan16)(x + j + 16 * a, 16, t, scale, &ok));
            block_max = PAK_V(umax)(PAK_V(umax)(acc[0], acc[1]), PAK_V(umax)(acc[2], acc[3]));
        } else {
            for (int64_t j = start; j < n; j += 16)
                block_max = PAK_V(umax)(block_max, PAK_V(scan16)(x + j, n - j, t, scale, &ok));
        }
        row_max = PAK_V(umax)(row_max, block_max);
        const pak_v16f values = pak_unkey16((const uint32_t *)&block_max, 16);
        memcpy(bmax + b, &values, sizeof values);
    }
    for (int l = 0; l < 16; ++l)
        *bad |= !ok[l];
    return pak_unkey(pak_hmax16u(row_max));
}

/* Accumulate one chunk of 16 values into the sums of mass_scan. */
PAK_INLINE void PAK_V(mass_chunk)(pak_v16f v, float m, const pak_v16f *g, pak_v8d *total, pak_v16f *part)
{
    const pak_v16f zero = {0.0f};
    const pak_v16f w = pak_expf_nonpos16(v - m);
    total[0] += pak_low8d(w);
    total[1] += pak_high8d(w);
    for (int i = 0; i < PAK_NLEVELS; ++i)
        part[i] += pak_select16(v >= g[i], w, zero);
}

/* Sum of exp(x - m) over the row, in double: 16 lanes over consecutive chunks of 16, then lanes
 * 0..15 in order. above[i] approximates (float sums) the part of it from values >= g[i]. */
static double PAK_V(mass_scan)(const float *restrict x, int64_t n, float m, const float *restrict g,
                               double *restrict above)
{
    const pak_v16f zero = {0.0f};
    pak_v8d total[2] = {{0.0}, {0.0}};
    pak_v16f part[PAK_NLEVELS], gv[PAK_NLEVELS];
    for (int i = 0; i < PAK_NLEVELS; ++i) {
        part[i] = zero;
        gv[i] = zero + g[i];
    }
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        PAK_V(mass_chunk)(pak_load16(x + j, 16), m, gv, total, part);
    if (j < n)
        PAK_V(mass_chunk)(pak_load16(x + j, n - j), m, gv, total, part);
    for (int i = 0; i < PAK_NLEVELS; ++i) {
        above[i] = 0.0;
        for (int l = 0; l < 16; ++l)
            above[i] += part[i][l];
    }
    double z = total[0][0];
    for (int l = 1; l < 16; ++l)
        z += total[l / 8][l % 8];
    return z;
}

/* w[i] = exp(value(keys[i]) - m), computed in float and stored as double. */
static void PAK_V(weights)(const uint32_t *restrict keys, int64_t n, float m, double *restrict w)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const pak_v16f e = pak_expf_nonpos16(pak_unkey16(keys + i, 16) - m);
        const pak_v8d low = pak_low8d(e), high = pak_high8d(e);
        memcpy(w + i, &low, sizeof low);
        memcpy(w + i + 8, &high, sizeof high);
    }
    if (i < n) {
        const pak_v16f e = pak_expf_nonpos16(pak_unkey16(keys + i, n - i) - m);
        const pak_v8d halves[2] = {pak_low8d(e), pak_high8d(e)};
        memcpy(w + i, halves, (size_t)(n - i) * sizeof(double));
    }
}

/* Overwrite every value below theta with -inf; when `scale`, divide the kept ones by t. Returns
 * nonzero if a scaled value is NaN or +inf. */
static int PAK_V(apply_threshold)(float *restrict x, int64_t n, float theta, float t, int scale)
{
    if (!scale) {
        for (int64_t j = 0; j < n; ++j)
            x[j] = x[j] >= theta ? x[j] : -INFINITY;
        return 0;
    }
    const pak_v16f neg_inf = PAK_NEG_INF16;
    const pak_v16u zero = {0};
    pak_v16i ok = (pak_v16i)zero - 1;
    for (int64_t j = 0; j < n; j += 16) {
        const int64_t count = n - j < 16 ? n - j : 16;
        pak_v16f v = pak_load16(x + j, count);
        const pak_v16i keep = v >= theta;
        if (PAK_V(any)(keep)) { /* the division is slow: skip vectors where nothing is kept */
            v = pak_select16(keep, v / t, neg_inf);
            ok &= v < INFINITY;
        } else {
            v = neg_inf;
        }
        memcpy(x + j, &v, (size_t)count * sizeof(float));
    }
    int bad = 0;
    for (int l = 0; l < 16; ++l)
        bad |= !ok[l];
    return bad;
}

/* Threshold after top-k (0 < k < n) and, when use_p, top-p over the top-k survivors. The k-th
 * largest of the per-block maxima bounds the k-th largest value from below, so only blocks whose
 * maximum reaches it are gathered and sorted. */
static float PAK_V(top_k_threshold)(const float *restrict x, int64_t n, int32_t k, int use_p, float p,
                                    float m, int64_t blk, const pak_scratch *sc)
{
    const int64_t nb = pak_num_blocks(n, blk);
    float bound = -INFINITY;
    if (nb >= k) {
        for (int64_t b = 0; b < nb; ++b)
            sc->keys[b] = pak_key(sc->bmax[b]);
        bound = pak_unkey(pak_select_desc(sc->keys, nb, k));
    }
    const int64_t nc = pak_gather_at_least(x, n, blk, sc->bmax, bound, sc->keys);
    const uint32_t key_k = pak_select_desc(sc->keys, nc, k);
    const float theta_k = pak_unkey(key_k);
    if (!use_p)
        return theta_k;
    /* keys[0 .. k) hold the k largest; move the other values tied with the k-th next to them. */
    int64_t nk = k;
    for (int64_t i = k; i < nc; ++i)
        if (sc->keys[i] == key_k) {
            sc->keys[i] = sc->keys[nk];
            sc->keys[nk++] = key_k;
        }
    pak_sort_desc(sc->keys, sc->tmp, nk);
    PAK_V(weights)(sc->keys, nk, m, sc->w);
    return pak_top_p_level(sc->keys, sc->w, nk, (double)p * pak_seq_sum(sc->w, nk));
}

/* Top-p over the values >= level: gather, sort, weigh, walk; -inf if the walk falls short. */
static float PAK_V(top_p_walk)(const float *restrict x, int64_t n, float m, int64_t blk, float level,
                               double target, const pak_scratch *sc)
{
    const int64_t nc = pak_gather_at_least(x, n, blk, sc->bmax, level, sc->keys);
    pak_sort_desc(sc->keys, sc->tmp, nc);
    PAK_V(weights)(sc->keys, nc, m, sc->w);
    return pak_top_p_level(sc->keys, sc->w, nc, target);
}

/* Threshold of top-p alone. The approximate mass above a few levels m - d picks the highest level
 * that should hold the top-p set, so only values above it are sorted; if the walk over them falls
 * short after all, it is redone over every value, so the level never changes the result. */
static float PAK_V(top_p_threshold)(const float *restrict x, int64_t n, float p, float m, int64_t blk,
                                    const pak_scratch *sc)
{
    float g[PAK_NLEVELS];
    double above[PAK_NLEVELS];
    for (int i = 0; i < PAK_NLEVELS; ++i)
        g[i] = m - pak_levels[i];
    const double target = (double)p * PAK_V(mass_scan)(x, n, m, g, above);
    float level = -INFINITY;
    for (int i = 0; i < PAK_NLEVELS && level == -INFINITY; ++i)
        if (above[i] >= target * 1.001)
            level = g[i];
    const float theta = PAK_V(top_p_walk)(x, n, m, blk, level, target, sc);
    if (theta == -INFINITY && level != -INFINITY)
        return PAK_V(top_p_walk)(x, n, m, blk, -INFINITY, target, sc);
    return theta;
}

/* The whole mask for one row (semantics in pyagent/sampling.h); `t_last` divides by the
 * temperature after the masks instead of before. */
static int PAK_V(mask_row)(float *restrict x, int64_t n, float t, int32_t k, float p, float min_p,
                           int t_last, const pak_scratch *sc)
{
    const int use_k = k > 0 && k < n;
    const int use_p = p < 1.0f;
    const int use_t = t > 0.0f && t != 1.0f;
    const int64_t blk = pak_block_size(n, use_k ? k : 0);
    int bad = 0;
    const float m = (use_t && !t_last) ? PAK_V(scan_row)(x, n, t, 1, blk, sc->bmax, &bad)
                                       : PAK_V(scan_row)(x, n, t, 0, blk, sc->bmax, &bad);
    if (bad)
        return PAK_EVALUE;
    if (m == -INFINITY)
        return PAK_OK;
    float theta = -INFINITY;
    if (use_k)
        theta = PAK_V(top_k_threshold)(x, n, k, use_p, p, m, blk, sc);
    else if (use_p)
        theta = PAK_V(top_p_threshold)(x, n, p, m, blk, sc);
    if (min_p > 0.0f) {
        const float tau = pak_min_p_threshold(m, log((double)min_p));
        theta = tau > theta ? tau : theta;
    }
    const int scale_last = use_t && t_last;
    if (theta > -INFINITY || scale_last)
        return PAK_V(apply_threshold)(x, n, theta, t, scale_last) ? PAK_EVALUE : PAK_OK;
    return PAK_OK;
}
