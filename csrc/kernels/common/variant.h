/* Internal: helpers for compiling one kernel body once per instruction-set variant.
 *
 * An area's dispatcher (.c) includes its *_impl.h once per variant through common/variants.h, each
 * time with PAK_VARIANT set to the variant's name and, for the x86 variants, inside
 * `#pragma GCC target(...)`. PAK_V(name)
 * gives each copy's functions distinct names. The x86 variants are built with GCC only; other
 * compilers get the generic variant alone.
 */
#ifndef PAK_VARIANT_H
#define PAK_VARIANT_H

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define PAK_X86_VARIANTS 1
#else
#define PAK_X86_VARIANTS 0
#endif

#if defined(__GNUC__)
#define PAK_INLINE static inline __attribute__((always_inline))
#else
#define PAK_INLINE static inline
#endif

#define PAK_CAT_(a, b) a##_##b
#define PAK_CAT(a, b) PAK_CAT_(a, b)
#define PAK_V(name) PAK_CAT(name, PAK_VARIANT)

#endif
