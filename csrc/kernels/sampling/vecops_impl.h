/* Internal: per-variant vector primitives shared by the sampling kernels; included by each
 * *_impl.h, so once per instruction-set variant (no include guard on purpose). */

/* Variant-specific primitives: AVX-512 intrinsics where they beat what the vector extensions
 * compile to (same results bit for bit), portable vector code otherwise. */
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
#endif
