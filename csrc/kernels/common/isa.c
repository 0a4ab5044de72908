/* Instruction-set detection and selection for every kernel area (see pyagent/common.h). */
#include <stdatomic.h>

#include "pyagent/common.h"
#include "common/variant.h"

static _Atomic int active_isa = -1;

int pak_isa_supported(int isa)
{
    if (isa == PAK_ISA_GENERIC)
        return 1;
#if PAK_X86_VARIANTS
    __builtin_cpu_init();
    if (isa == PAK_ISA_AVX2)
        return __builtin_cpu_supports("avx2") != 0;
    if (isa == PAK_ISA_AVX512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
               && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#endif
    return 0;
}

static int best_isa(void)
{
    int isa = PAK_ISA_AVX512;
    while (isa > PAK_ISA_GENERIC && !pak_isa_supported(isa))
        --isa;
    return isa;
}

int pak_isa_active(void)
{
    int isa = atomic_load_explicit(&active_isa, memory_order_relaxed);
    if (isa < 0) {
        isa = best_isa();
        atomic_store_explicit(&active_isa, isa, memory_order_relaxed);
    }
    return isa;
}

int pak_isa_select(int isa)
{
    if (isa < 0)
        isa = best_isa();
    if (!pak_isa_supported(isa))
        return PAK_EUNSUPPORTED;
    atomic_store_explicit(&active_isa, isa, memory_order_relaxed);
    return PAK_OK;
}

const char *pak_isa_name(int isa)
{
    switch (isa) {
    case PAK_ISA_GENERIC:
        return "generic";
    case PAK_ISA_AVX2:
        return "avx2";
    case PAK_ISA_AVX512:
        return "avx512";
    default:
        return "unknown";
    }
}
