/* pyagent/common.h: status codes and instruction-set selection shared by every kernel area.
 *
 * Every kernel returns PAK_OK (0) or one of the negative codes below. The build script feeds this
 * header to cffi's cdef after dropping preprocessor lines, so keep it to plain declarations.
 */
#ifndef PYAGENT_COMMON_H
#define PYAGENT_COMMON_H

#include <stdint.h>

enum pak_status {
    PAK_OK = 0,
    PAK_EINVAL = -1,       /* NULL pointer where data is needed, or a negative / too large size */
    PAK_EINDEX = -2,       /* a row index lies outside [0, num_rows) */
    PAK_EPARAM = -3,       /* a per-row parameter is out of range (see the kernel's header) */
    PAK_EVALUE = -4,       /* logits hold NaN or +inf */
    PAK_ENOMEM = -5,       /* scratch memory could not be allocated */
    PAK_EUNSUPPORTED = -6  /* this build or this CPU cannot run the requested instruction set */
};

enum pak_isa {
    PAK_ISA_GENERIC = 0,   /* portable C, baseline x86-64 (SSE2) or whatever the compiler targets */
    PAK_ISA_AVX2 = 1,      /* x86-64 with AVX2 */
    PAK_ISA_AVX512 = 2     /* x86-64 with AVX-512 F, BW, DQ and VL */
};

/* 1 when this build contains the variant for `isa` and the running CPU supports it, else 0. */
int pak_isa_supported(int isa);

/* The variant the kernels currently dispatch to (the best supported one unless pak_isa_select
 * chose another). */
int pak_isa_active(void);

/* Make every kernel use `isa` (-1: the best supported). PAK_EUNSUPPORTED if it cannot run here. */
int pak_isa_select(int isa);

/* "generic", "avx2", "avx512", or "unknown". */
const char *pak_isa_name(int isa);

#endif
