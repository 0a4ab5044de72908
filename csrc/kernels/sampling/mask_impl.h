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

/* Record token j (logit v) as kept: appended while there is room, past the capacity the list is
 * unknown. */
PAK_INLINE void PAK_V(keep_token)(pak_kept *kept, int64_t j, float v)
{
    if (kept->count >= 0 && kept->count < kept->cap) {
        kept->idx[kept->count] = (int32_t)j;
        kept->val[kept->count++] = v;
    } else {
        kept->count = -1;
    }
}

/* One step of apply_threshold: the count <= 16 values at x + j (16 in the main loop, where the
 * copies then compile to vector moves). */
PAK_INLINE void PAK_V(threshold16)(float *restrict x, int64_t j, int64_t count, float theta, float t, int scale,
                                   pak_kept *kept, pak_v16i *ok)
{
    const pak_v16f neg_inf = PAK_NEG_INF16;
    pak_v16f v = pak_load16(x + j, count);
    const pak_v16i keep = v >= theta;
    if (!scale) {
        v = pak_select16(keep, v, neg_inf);
    } else if (PAK_V(any)(keep)) { /* the division is slow: skip vectors where nothing is kept */
        v = pak_select16(keep, v / t, neg_inf);
        *ok &= v < INFINITY;
    } else {
        v = neg_inf;
    }
    if (kept->count >= 0) /* recording: the padding past count is -inf, never listed */
        for (unsigned m = PAK_V(lane_mask)(v > -INFINITY); m; m &= m - 1)
            PAK_V(keep_token)(kept, j + __builtin_ctz(m), v[__builtin_ctz(m)]);
    memcpy(x + j, &v, (size_t)count * sizeof(float));
}

/* Overwrite every value below theta with -inf; when `scale`, divide the kept ones by t. The tokens
 * left finite go to *kept while it records (count >= 0). Returns nonzero if a scaled value is NaN
 * or +inf. */
static int PAK_V(apply_threshold)(float *restrict x, int64_t n, float theta, float t, int scale,
                                  pak_kept *kept)
{
    const pak_v16u zero = {0};
    pak_v16i ok = (pak_v16i)zero - 1;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        PAK_V(threshold16)(x, j, 16, theta, t, scale, kept, &ok);
    if (j < n)
        PAK_V(threshold16)(x, j, n - j, theta, t, scale, kept, &ok);
    int bad = 0;
    for (int l = 0; l < 16; ++l)
        bad |= !ok[l];
    return bad;
}

/* How many of val[0 .. n) are >= b (b >= -FLT_MAX). */
static int64_t PAK_V(count_at_least)(const float *restrict val, int64_t n, float b)
{
    const pak_v16i zero = {0};
    pak_v16i acc = zero;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        acc -= pak_load16(val + j, 16) >= b; /* a true lane is -1 */
    if (j < n)
        acc -= pak_load16(val + j, n - j) >= b; /* the padding, -inf, is below b */
    int64_t count = 0;
    for (int l = 0; l < 16; ++l)
        count += acc[l];
    return count;
}

/* A bound b no larger than the k-th largest of val[0 .. n) (n > k >= 1; no NaN) such that at
 * most `most` values are >= b unless ties prevent it. Bisection between the minimum (every value is
 * >= it) and the maximum: by value for the first steps (values near the top are usually spread
 * evenly), then by order-preserving key, so it takes at most about 40 counting passes. */
static float PAK_V(shrink_bound)(const float *restrict val, int64_t n, int64_t k, int64_t most)
{
    const pak_v16i lanes = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const pak_v16f zero = {0.0f};
    pak_v16f lows = zero + val[0], highs = lows;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const pak_v16f v = pak_load16(val + i, 16);
        lows = pak_min16(lows, v);
        highs = pak_max16(highs, v);
    }
    if (i < n) {
        const pak_v16f v = pak_load16(val + i, n - i); /* padding (-inf) is left out of the minimum */
        lows = pak_min16(lows, pak_select16(lanes < (int32_t)(n - i), v, lows));
        highs = pak_max16(highs, v);
    }
    float lo = lows[0], hi = highs[0];
    for (int l = 1; l < 16; ++l) {
        lo = lows[l] < lo ? lows[l] : lo;
        hi = highs[l] > hi ? highs[l] : hi;
    }
    if (PAK_V(count_at_least)(val, n, hi) >= k)
        return hi; /* the maximum is tied at least k times */
    /* invariant: count(>= lo) >= k > count(>= hi) */
    for (int step = 0; pak_key(hi) - pak_key(lo) > 1; ++step) {
        float mid = lo * 0.5f + hi * 0.5f;
        if (step >= 8 || !(mid > lo && mid < hi))
            mid = pak_unkey(pak_key(lo) + (pak_key(hi) - pak_key(lo)) / 2);
        const int64_t c = PAK_V(count_at_least)(val, n, mid);
        if (c < k) {
            hi = mid;
        } else {
            lo = mid;
            if (c <= most)
                break;
        }
    }
    return lo;
}

/* Drop the candidates below b, keeping their order; returns how many are left. */
static int64_t PAK_V(compact)(float *restrict val, int32_t *restrict idx, int64_t n, float b)
{
    int64_t count = 0, i = 0;
    for (; i + 16 <= n; i += 16) { /* writes land at or before the chunk being read */
        const pak_v16f v = pak_load16(val + i, 16);
        count += PAK_V(compress16)(PAK_V(ge_mask)(v, b), v, pak_load16i(idx + i, 16), val + count,
                                   idx + count);
    }
    if (i < n) {
        const pak_v16f v = pak_load16(val + i, n - i); /* the padding, -inf, is below b */
        count += PAK_V(compress16)(PAK_V(ge_mask)(v, b), v, pak_load16i(idx + i, n - i), val + count,
                                   idx + count);
    }
    return count;
}

/* The one pass over a top-k row: every value becomes -inf, and those that may be among the k
 * largest go, with their ids, to the candidate buffer (in id order). A running bound, never above
 * the k-th largest value seen so far, rejects the others; whenever the buffer holds more than
 * pak_shrink_trigger(k) values, shrink_bound raises the bound and the buffer is compacted. With
 * `scale` (temperature first) the bound is found on unscaled values and lowered to the smallest
 * value whose scaled value reaches the scaled bound. Returns the number of candidates; sets *bad
 * for a NaN or +inf value. */
static int64_t PAK_V(candidate_pass)(float *restrict x, int64_t n, int64_t k, float t, int scale,
                                     const pak_scratch *sc, int *bad)
{
    const pak_v16f neg_inf = PAK_NEG_INF16;
    const pak_v16i lanes = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    float *restrict val = sc->cval;
    int32_t *restrict idx = sc->cidx;
    int64_t trigger = pak_shrink_trigger(k), count = 0;
    const int64_t most = pak_shrink_most(k);
    float bound = -FLT_MAX; /* -inf is never a candidate */
    for (int64_t j = 0; j < n; j += 64) {
        if (j + 64 <= n) {
            pak_v16f v[4];
            unsigned keep[4];
            if (j + PAK_PREFETCH_AHEAD < n)
                __builtin_prefetch(x + j + PAK_PREFETCH_AHEAD, 1);
            if (!PAK_V(take64)(x + j, bound, v, keep, bad))
                continue;
            /* Once the bound is tight the candidates of a block usually sit in one vector: compress
             * that one. Otherwise compress all four: a branch per vector would mispredict, and each
             * miss stalls the stream of loads more than the spare compresses cost. */
            const unsigned which =
                (keep[0] != 0) | (keep[1] != 0) << 1 | (keep[2] != 0) << 2 | (keep[3] != 0) << 3;
            if ((which & (which - 1)) == 0) {
                const int a = __builtin_ctz(which);
                count += PAK_V(compress16)(keep[a], v[a], lanes + (int32_t)(j + 16 * a), val + count,
                                           idx + count);
            } else {
                for (int a = 0; a < 4; ++a)
                    count += PAK_V(compress16)(keep[a], v[a], lanes + (int32_t)(j + 16 * a), val + count,
                                               idx + count);
            }
        } else {
            for (int64_t i = j; i < n; i += 16) {
                const int64_t len = n - i < 16 ? n - i : 16;
                const pak_v16f v = pak_load16(x + i, len);
                *bad |= PAK_V(any)(~(v < INFINITY));
                memcpy(x + i, &neg_inf, (size_t)len * sizeof(float));
                count += PAK_V(compress16)(PAK_V(ge_mask)(v, bound), v, lanes + (int32_t)i, val + count,
                                           idx + count);
            }
        }
        if (count > trigger) {
            const float b = PAK_V(shrink_bound)(val, count, k, most);
            bound = scale ? pak_div_preimage(b, t) : b;
            count = PAK_V(compact)(val, idx, count, bound);
            while (2 * count > trigger + most && trigger < n)
                trigger *= 2; /* ties kept it from shrinking: grow rather than shrink again and again */
        }
    }
    return count;
}

/* Sort keys[0 .. n) descending into out, n <= PAK_RANK_SORT_MAX: a key goes to the position given by
 * the number of keys above it, counted with vector compares (no data-dependent branches; O(n^2 / 16),
 * cheaper than a comparison sort for the few keys of a top-k set). Equal keys share a position and
 * leave the next ones empty, which then take the key before them. */
static void PAK_V(rank_sort_desc)(const uint32_t *restrict keys, int64_t n, uint32_t *restrict out)
{
    memset(out, 0, (size_t)n * sizeof *out); /* 0 is no key of a value that is not NaN */
    for (int64_t c = 0; c < n; c += 16) { /* the ranks of keys c .. c + 15 at once */
        const int64_t len = n - c < 16 ? n - c : 16;
        pak_v16u chunk = {0};
        memcpy(&chunk, keys + c, (size_t)len * sizeof *keys);
        pak_v16i rank = {0};
        for (int64_t j = 0; j < n; ++j)
            rank -= keys[j] > chunk;
        for (int64_t l = 0; l < len; ++l)
            out[rank[l]] = chunk[l];
    }
    for (int64_t i = 1; i < n; ++i)
        out[i] = out[i] ? out[i] : out[i - 1];
}

/* The mask of a row with 0 < k < n (semantics in pyagent/sampling.h) from one pass over it: the
 * thresholds come from the candidates alone, then the kept candidates are written back (divided by
 * t when the temperature comes last) and recorded in *kept. */
static int PAK_V(top_k_row)(float *restrict x, int64_t n, float t, int32_t k, float p, float min_p,
                            int t_last, const pak_scratch *sc, pak_kept *kept)
{
    const int use_t = t > 0.0f && t != 1.0f;
    int bad = 0;
    const int64_t count = PAK_V(candidate_pass)(x, n, k, t, use_t && !t_last, sc, &bad);
    if (bad)
        return PAK_EVALUE;
    float *restrict val = sc->cval;
    if (use_t && !t_last) { /* temperature first: from here on, values are scaled */
        for (int64_t i = 0; i < count; ++i) {
            val[i] = val[i] / t;
            bad |= !(val[i] < INFINITY);
        }
        if (bad)
            return PAK_EVALUE;
    }
    /* the candidates that can be in the top k, sorted (when count >= k, at least k of them) */
    const float b = count > k ? PAK_V(shrink_bound)(val, count, k, k + k / 8 + 1) : -INFINITY;
    int64_t ns = 0;
    for (int64_t i = 0; i < count; ++i) {
        sc->tmp[ns] = pak_key(val[i]);
        ns += val[i] >= b;
    }
    if (ns <= PAK_RANK_SORT_MAX) {
        PAK_V(rank_sort_desc)(sc->tmp, ns, sc->keys);
    } else {
        memcpy(sc->keys, sc->tmp, (size_t)ns * sizeof *sc->keys);
        pak_sort_desc(sc->keys, sc->tmp, ns);
    }
    const float m = ns > 0 ? pak_unkey(sc->keys[0]) : -INFINITY;
    kept->count = kept->on ? 0 : -1;
    if (m == -INFINITY)
        return PAK_OK; /* nothing finite: the row is all -inf */
    float theta = count >= k ? pak_unkey(sc->keys[k - 1]) : -INFINITY;
    if (p < 1.0f) {
        int64_t nk = k < ns ? k : ns; /* the top-k set: every value >= theta */
        while (nk < ns && pak_unkey(sc->keys[nk]) >= theta)
            ++nk;
        PAK_V(weights)(sc->keys, nk, m, sc->w);
        const float theta_p = pak_top_p_level(sc->keys, sc->w, nk, (double)p * pak_seq_sum(sc->w, nk));
        theta = theta_p > theta ? theta_p : theta;
    }
    if (min_p > 0.0f) {
        const float tau = pak_min_p_threshold(m, log((double)min_p));
        theta = tau > theta ? tau : theta;
    }
    const int scale_last = use_t && t_last;
    for (int64_t i = 0; i < count; ++i) {
        float v = val[i];
        if (!(v >= theta))
            continue;
        if (scale_last) {
            v = v / t;
            bad |= !(v < INFINITY);
        }
        x[sc->cidx[i]] = v;
        if (v > -INFINITY && kept->on)
            PAK_V(keep_token)(kept, sc->cidx[i], v);
    }
    return bad ? PAK_EVALUE : PAK_OK;
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
 * temperature after the masks instead of before. Rows with top-k take the one-pass path; the
 * tokens left finite go to *kept where the mask wrote the row (else kept->count is -1). */
static int PAK_V(mask_row)(float *restrict x, int64_t n, float t, int32_t k, float p, float min_p,
                           int t_last, const pak_scratch *sc, pak_kept *kept)
{
    if (k > 0 && k < n)
        return PAK_V(top_k_row)(x, n, t, k, p, min_p, t_last, sc, kept);
    kept->count = -1;
    const int use_t = t > 0.0f && t != 1.0f;
    int bad = 0;
    const float m = (use_t && !t_last) ? PAK_V(scan_row)(x, n, t, 1, PAK_BLOCK, sc->bmax, &bad)
                                       : PAK_V(scan_row)(x, n, t, 0, PAK_BLOCK, sc->bmax, &bad);
    if (bad)
        return PAK_EVALUE;
    if (m == -INFINITY) {
        kept->count = kept->on ? 0 : -1;
        return PAK_OK;
    }
    float theta = -INFINITY;
    if (p < 1.0f)
        theta = PAK_V(top_p_threshold)(x, n, p, m, PAK_BLOCK, sc);
    if (min_p > 0.0f) {
        const float tau = pak_min_p_threshold(m, log((double)min_p));
        theta = tau > theta ? tau : theta;
    }
    const int scale_last = use_t && t_last;
    if (theta > -INFINITY || scale_last) {
        kept->count = kept->on ? 0 : -1;
        return PAK_V(apply_threshold)(x, n, theta, t, scale_last, kept) ? PAK_EVALUE : PAK_OK;
    }
    return PAK_OK;
}
