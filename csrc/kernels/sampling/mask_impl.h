/* One instruction-set variant of the sampling-mask row kernel; included by mask.c once per variant
 * with PAK_VARIANT defined (no include guard on purpose). Only the streaming loops differ between
 * variants; floating-point work uses the fixed 16-lane vectors of vecmath.h and no contracted
 * multiply-adds, so every variant rounds identically and produces bit-identical results. */

/* Scale a block in place (when `scale`), flag NaN / +inf in *bad, return its maximum. The maximum
 * is taken over order-preserving integer keys, an exact reduction the compiler may vectorize. */
PAK_INLINE float PAK_V(scan_block)(float *restrict x, int64_t len, float t, int scale, int *bad)
{
    uint32_t key_max = 0;
    int b = 0;
    for (int64_t j = 0; j < len; ++j) {
        float v = x[j];
        if (scale) {
            v = v / t;
            x[j] = v;
        }
        const uint32_t k = pak_key(v);
        key_max = k > key_max ? k : key_max;
        b |= !(v < INFINITY);
    }
    *bad |= b;
    return pak_unkey(key_max);
}

/* Pass over the row: optional scaling, per-block maxima into bmax, the row maximum returned. */
PAK_INLINE float PAK_V(scan_row)(float *restrict x, int64_t n, float t, int scale, int64_t blk,
                                 float *restrict bmax, int *bad)
{
    float m = -INFINITY;
    for (int64_t start = 0, b = 0; start < n; start += blk, ++b) {
        const int64_t len = n - start < blk ? n - start : blk;
        const float bm = PAK_V(scan_block)(x + start, len, t, scale, bad);
        bmax[b] = bm;
        m = bm > m ? bm : m;
    }
    return m;
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

/* Overwrite every value below theta with -inf. */
static void PAK_V(apply_threshold)(float *restrict x, int64_t n, float theta)
{
    for (int64_t j = 0; j < n; ++j)
        x[j] = x[j] >= theta ? x[j] : -INFINITY;
}

/* Threshold after top-k (0 < k < n) and, when use_p, top-p over the top-k survivors. The k-th
 * largest of the per-block maxima bounds the k-th largest value from below, so only blocks whose
 * maximum reaches it are gathered and sorted. */
static float PAK_V(top_k_threshold)(const float *restrict x, int64_t n, int32_t k, int use_p, float p,
                                    float m, int64_t blk, const pak_scratch *sc)
{
    const int64_t nb = (n + blk - 1) / blk;
    float bound = -INFINITY;
    if (nb >= k) {
        for (int64_t b = 0; b < nb; ++b)
            sc->keys[b] = pak_key(sc->bmax[b]);
        pak_sort_desc(sc->keys, sc->tmp, nb);
        bound = pak_unkey(sc->keys[k - 1]);
    }
    const int64_t nc = pak_gather_at_least(x, n, blk, sc->bmax, bound, sc->keys);
    pak_sort_desc(sc->keys, sc->tmp, nc);
    const float theta_k = pak_unkey(sc->keys[k - 1]);
    if (!use_p)
        return theta_k;
    int64_t nk = k;
    while (nk < nc && pak_unkey(sc->keys[nk]) == theta_k)
        ++nk;
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

/* The whole mask for one row (semantics in pyagent/sampling.h). */
static int PAK_V(mask_row)(float *restrict x, int64_t n, float t, int32_t k, float p, float min_p,
                           const pak_scratch *sc)
{
    const int use_k = k > 0 && k < n;
    const int use_p = p < 1.0f;
    const int64_t blk = pak_block_size(n, use_k ? k : 0);
    int bad = 0;
    const float m = (t > 0.0f && t != 1.0f) ? PAK_V(scan_row)(x, n, t, 1, blk, sc->bmax, &bad)
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
    if (theta > -INFINITY)
        PAK_V(apply_threshold)(x, n, theta);
    return PAK_OK;
}
