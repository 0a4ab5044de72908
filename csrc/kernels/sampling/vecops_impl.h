/* Internal: per-variant vector primitives shared by the sampling kernels; included by each
 * *_impl.h, so once per instruction-set variant (no include guard on purpose). */

/* Variant-specific primitives: AVX-512 intrinsics where they beat what the vector extensions
 * compile to (same results bit for bit), portable vector code otherwise. A "lane mask" is an
 * unsigned int whose bit l stands for lane l. */
#define PAK_VECOPS_IS_avx512 1
#if PAK_CAT(PAK_VECOPS_IS, PAK_VARIANT)
PAK_INLINE pak_v16u PAK_V(umax)(pak_v16u a, pak_v16u b)
{
    return (pak_v16u)_mm512_max_epu32((__m512i)a, (__m512i)b);
}

PAK_INLINE int PAK_V(any)(pak_v16i mask)
{
    return _mm512_test_epi32_mask((__m512i)mask, (__m512i)mask) != 0;
}

/* The lane mask of v >= b. */
PAK_INLINE unsigned PAK_V(ge_mask)(pak_v16f v, float b)
{
    return _mm512_cmp_ps_mask((__m512)v, _mm512_set1_ps(b), _CMP_GE_OQ);
}

/* The lane mask of a comparison result (lanes all ones or all zeros). */
PAK_INLINE unsigned PAK_V(lane_mask)(pak_v16i m)
{
    return _mm512_test_epi32_mask((__m512i)m, (__m512i)m);
}

/* Read the 64 values at x into v and overwrite them with -inf; keep[a] gets the lane mask of
 * v[a] >= bound, and *bad is set if any value is NaN or +inf. Returns whether any lane is kept. */
PAK_INLINE int PAK_V(take64)(float *restrict x, float bound, pak_v16f v[4], unsigned keep[4], int *bad)
{
    const __m512 b = _mm512_set1_ps(bound), inf = _mm512_set1_ps(INFINITY);
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
    __mmask16 any = 0, nonfinite = 0;
    for (int a = 0; a < 4; ++a) {
        const __m512 w = _mm512_loadu_ps(x + 16 * a);
        const __mmask16 k = _mm512_cmp_ps_mask(w, b, _CMP_GE_OQ);
        nonfinite |= _mm512_cmp_ps_mask(w, inf, _CMP_NLT_UQ);
        _mm512_storeu_ps(x + 16 * a, neg_inf);
        v[a] = (pak_v16f)w;
        keep[a] = k;
        any |= k;
    }
    *bad |= nonfinite != 0;
    return any != 0;
}

/* Append the lanes of v and ids set in the lane mask `keep` to val and idx, in lane order; return
 * how many. Writes 16 entries at val and idx (those past the count are scratch). */
PAK_INLINE int PAK_V(compress16)(unsigned keep, pak_v16f v, pak_v16i ids, float *restrict val,
                                 int32_t *restrict idx)
{
    _mm512_storeu_ps(val, _mm512_maskz_compress_ps((__mmask16)keep, (__m512)v));
    _mm512_storeu_si512(idx, _mm512_maskz_compress_epi32((__mmask16)keep, (__m512i)ids));
    return __builtin_popcount(keep & 0xFFFFu);
}
#else
PAK_INLINE pak_v16u PAK_V(umax)(pak_v16u a, pak_v16u b)
{
    return pak_max16u(a, b);
}

PAK_INLINE int PAK_V(any)(pak_v16i mask)
{
    int any = 0;
    for (int l = 0; l < 16; ++l)
        any |= mask[l];
    return any != 0;
}

PAK_INLINE unsigned PAK_V(lane_mask)(pak_v16i m)
{
    unsigned mask = 0;
    for (int l = 0; l < 16; ++l)
        mask |= (unsigned)(m[l] & 1) << l;
    return mask;
}

PAK_INLINE unsigned PAK_V(ge_mask)(pak_v16f v, float b)
{
    return PAK_V(lane_mask)(v >= b);
}

PAK_INLINE int PAK_V(take64)(float *restrict x, float bound, pak_v16f v[4], unsigned keep[4], int *bad)
{
    const pak_v16f neg_inf = PAK_NEG_INF16;
    const pak_v16i zero = {0};
    pak_v16i any = zero, nonfinite = zero;
    for (int a = 0; a < 4; ++a) {
        memcpy(&v[a], x + 16 * a, sizeof v[a]);
        any |= v[a] >= bound;
        nonfinite |= ~(v[a] < INFINITY);
        memcpy(x + 16 * a, &neg_inf, sizeof neg_inf);
    }
    *bad |= PAK_V(any)(nonfinite);
    if (!PAK_V(any)(any))
        return 0;
    for (int a = 0; a < 4; ++a)
        keep[a] = PAK_V(ge_mask)(v[a], bound);
    return 1;
}

PAK_INLINE int PAK_V(compress16)(unsigned keep, pak_v16f v, pak_v16i ids, float *restrict val,
                                 int32_t *restrict idx)
{
    int count = 0;
    for (int l = 0; l < 16; ++l) { /* branch-free: every lane is written, kept ones advance */
        val[count] = v[l];
        idx[count] = ids[l];
        count += (keep >> l) & 1;
    }
    return count;
}
#endif
