/* Internal to int8.c: compile int8_impl.h for one more x86 variant, which int8.c describes first with
 * PAK_VARIANT, I8_WIDTH, I8_VNNI (and then I8_DPBUSD, I8_DPWSSD: the VNNI instructions for the width)
 * and I8_TARGET (a _Pragma naming the variant's `GCC target`). No include guard: once per variant. */
#pragma GCC push_options
I8_TARGET
#include "linear/int8_impl.h"
#pragma GCC pop_options

#undef PAK_VARIANT
#undef I8_WIDTH
#undef I8_VNNI
#undef I8_DPBUSD
#undef I8_DPWSSD
#undef I8_TARGET
