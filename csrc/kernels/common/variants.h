/* Internal: compile one kernel body once per instruction-set variant.
 *
 * Define PAK_IMPL as the body's header (e.g. "sampling/mask_impl.h"), then include this file: it
 * includes the body with PAK_VARIANT set to generic and, where PAK_X86_VARIANTS, to avx2 and avx512
 * inside the matching `#pragma GCC target`. No include guard: each area includes it once.
 * An area whose body calls fmaf (to be vectorized as fused multiply-adds) defines PAK_AVX2_FMA first:
 * its AVX2 variant is then compiled for AVX2 with FMA, as every AVX2 CPU pyagent runs on has it.
 */
#define PAK_VARIANT generic
#include PAK_IMPL
#undef PAK_VARIANT

#if PAK_X86_VARIANTS
#pragma GCC push_options
#ifdef PAK_AVX2_FMA
#pragma GCC target("avx2,fma")
#else
#pragma GCC target("avx2")
#endif
#define PAK_VARIANT avx2
#include PAK_IMPL
#undef PAK_VARIANT
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,prefer-vector-width=512")
#define PAK_VARIANT avx512
#include PAK_IMPL
#undef PAK_VARIANT
#pragma GCC pop_options
#endif

#undef PAK_IMPL
