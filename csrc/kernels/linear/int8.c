/* The int8 path of pyagent/linear_int8.h: activation quantization, the variants' dispatch, threads.
 *
 * A call quantizes every input row once (into the caller's scratch, or a buffer of its own), then
 * splits the weight groups of every part among the helper threads (common/pool.h). Each group runs
 * against every input row in the active variant: the portable one here (int8_scalar.h), the x86 ones
 * from int8_impl.h, AMX (int8_amx.c) for many rows where it is proven usable. All give the same
 * bits, so nothing depends on the variant, the tiling or the threads.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pyagent/common.h"
#include "pyagent/linear_int8.h"
#include "common/pool.h"
#include "common/profile.h"
#include "common/variant.h"
#include "linear/int8_amx.h"
#include "linear/int8_layout.h"
#include "linear/int8_scalar.h"

#if PAK_X86_VARIANTS
#include <immintrin.h>
#endif

/* Rows [0, rows) of quantized activations `act` against one group (`valid` of its rows used), the
 * results into columns col .. col + valid - 1 of y. */
typedef void (*i8_group_fn)(int wtype, const uint8_t *group, int64_t in, const void *act, int64_t rows,
                            const i8_out *o, int64_t col, int valid);

/* ---------------------------------------------------------------------------------------------
 * The portable variant. */

static void i8_group_generic(int wtype, const uint8_t *group, int64_t in, const void *act, int64_t rows,
                             const i8_out *o, int64_t col, int valid)
{
    const i8_format *f = i8_format_of(wtype);
    const int64_t nb = in / f->block, per = f->block / 32; /* activation blocks per weight block */
    uint8_t block[256];
    for (int r = 0; r < valid; ++r)
        for (int64_t m = 0; m < rows; ++m) {
            const pak_int8_act32 *a = (const pak_int8_act32 *)act + m * (in / 32);
            float y = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
                i8_gather_block(f, wtype, group, nb, r, b, block);
                y = per == 1 ? i8_block32_scalar(wtype, block, a + b, y)
                             : i8_block256_scalar(wtype, block, a + per * b, y);
            }
            if (o->y_f32)
                ((float *)o->y)[m * o->ldy + col + r] = y;
            else
                ((uint16_t *)o->y)[m * o->ldy + col + r] = pak_f32_to_bf16(y);
        }
}

/* ---------------------------------------------------------------------------------------------
 * The x86 variants. */

#if PAK_X86_VARIANTS
#define I8V(name) PAK_V(name)
#define I8_MR 8 /* the most input rows per tile */
#define I8_AHEAD 16384 /* bytes the products ask for ahead of the block they multiply (int8_impl.h) */

#define PAK_VARIANT avx512vnni
#define I8_WIDTH 512
#define I8_VNNI 1
#define I8_DPBUSD _mm512_dpbusd_epi32
#define I8_DPWSSD _mm512_dpwssd_epi32
#define I8_TARGET _Pragma("GCC target(\"avx512f,avx512bw,avx512dq,avx512vl,avx512vnni\")")
#include "linear/int8_variant.h"

#define PAK_VARIANT avx512
#define I8_WIDTH 512
#define I8_VNNI 0
#define I8_TARGET _Pragma("GCC target(\"avx512f,avx512bw,avx512dq,avx512vl\")")
#include "linear/int8_variant.h"

#define PAK_VARIANT avxvnni
#define I8_WIDTH 256
#define I8_VNNI 1
#define I8_DPBUSD _mm256_dpbusd_avx_epi32
#define I8_DPWSSD _mm256_dpwssd_avx_epi32
#define I8_TARGET _Pragma("GCC target(\"avx2,fma,f16c,avxvnni\")")
#include "linear/int8_variant.h"

/* The AVX-VNNI code with AVX-512 VNNI's encoding of the same instructions on 256-bit vectors: what the
 * avx2 variant runs on CPUs that have AVX-512 VNNI but not AVX-VNNI (AMD Zen 4), where tests force it. */
#define PAK_VARIANT vnni256
#define I8_WIDTH 256
#define I8_VNNI 1
#define I8_DPBUSD _mm256_dpbusd_epi32
#define I8_DPWSSD _mm256_dpwssd_epi32
#define I8_TARGET _Pragma("GCC target(\"avx2,fma,f16c,avx512f,avx512vl,avx512vnni,prefer-vector-width=256\")")
#include "linear/int8_variant.h"

#define PAK_VARIANT avx2
#define I8_WIDTH 256
#define I8_VNNI 0
#define I8_TARGET _Pragma("GCC target(\"avx2,fma,f16c\")")
#include "linear/int8_variant.h"
#endif /* PAK_X86_VARIANTS */

/* ---------------------------------------------------------------------------------------------
 * Choosing a variant. */

static _Atomic int dot_mode = PAK_INT8_DOT_AUTO;

int pak_int8_dot_select(int dot)
{
    if (dot != PAK_INT8_DOT_AUTO && dot != PAK_INT8_DOT_MADDUBS)
        return PAK_EINVAL;
    return atomic_exchange(&dot_mode, dot);
}

typedef struct {
    i8_group_fn group;
    const char *name;
} i8_variant;

static i8_variant choose(void)
{
#if PAK_X86_VARIANTS
    __builtin_cpu_init();
    const int isa = pak_isa_active(), vnni = atomic_load(&dot_mode) == PAK_INT8_DOT_AUTO;
    if (isa == PAK_ISA_AVX512) {
        if (vnni && __builtin_cpu_supports("avx512vnni"))
            return (i8_variant){i8_group_avx512vnni, "vnni512"};
        return (i8_variant){i8_group_avx512, "maddubs512"};
    }
    if (isa == PAK_ISA_AVX2 && __builtin_cpu_supports("fma")) {
        if (vnni && __builtin_cpu_supports("avxvnni"))
            return (i8_variant){i8_group_avxvnni, "vnni256"};
        if (vnni && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl"))
            return (i8_variant){i8_group_vnni256, "vnni256"};
        return (i8_variant){i8_group_avx2, "maddubs256"};
    }
#endif
    return (i8_variant){i8_group_generic, "scalar"};
}

const char *pak_int8_dot_name(void)
{
    return choose().name;
}

/* ---------------------------------------------------------------------------------------------
 * Entry points. */

int64_t pak_int8_group_bytes(int wtype, int64_t in)
{
    const i8_format *f = i8_format_of(wtype);
    if (f == NULL || in <= 0 || in % f->block != 0)
        return 0;
    return in / f->block * f->block_bytes * G_ROWS;
}

/* Bytes of the quantized activations of `rows` rows of `in` values. */
static int64_t act_bytes(int64_t rows, int64_t in)
{
    return rows * (in / 32) * (int64_t)sizeof(pak_int8_act32);
}

typedef struct {
    const void *x;
    int x_bf16;
    int64_t in;
    pak_int8_act32 *out;
} quantize_job;

static void quantize_rows(const void *ctx, int64_t m0, int64_t m1, int worker)
{
    (void)worker;
    const quantize_job *job = ctx;
#if PAK_X86_VARIANTS
    if (pak_isa_active() == PAK_ISA_AVX512) {
        i8_quantize32_rows_avx512(job->x, job->x_bf16, job->in, m0, m1, job->out);
        return;
    }
#endif
    const int64_t nb = job->in / 32;
    for (int64_t m = m0; m < m1; ++m)
        for (int64_t b = 0; b < nb; ++b)
            i8_quantize32(job->x, job->x_bf16, m * job->in + b * 32, job->out + m * nb + b);
}

static void quantize(const void *x, int x_bf16, int64_t rows, int64_t in, pak_int8_act32 *out, int threads)
{
    const quantize_job job = {x, x_bf16, in, out};
    if (rows * in < (1 << 16))
        threads = 1;
    pak_pool_run(quantize_rows, &job, rows, 8, threads);
}

int pak_int8_quantize(const void *x, int x_bf16, int64_t rows, int64_t in, pak_int8_act32 *out)
{
    if (rows < 0 || in <= 0 || in % 32 != 0)
        return PAK_EINVAL;
    if (rows > 0 && (x == NULL || out == NULL))
        return PAK_EINVAL;
    quantize(x, x_bf16, rows, in, out, 1);
    return PAK_OK;
}

/* Whether every part is valid for `in`. */
static int parts_valid(const pak_int8_part *parts, int nparts, int64_t in)
{
    for (int p = 0; p < nparts; ++p)
        if (parts[p].out < 0 || pak_int8_group_bytes(parts[p].wtype, in) == 0 || (parts[p].out > 0 && parts[p].w == NULL))
            return 0;
    return 1;
}

int64_t pak_int8_scratch_bytes(const pak_int8_part *parts, int nparts, int64_t rows, int64_t in)
{
    if (parts == NULL || nparts <= 0 || rows < 0 || !parts_valid(parts, nparts, in))
        return 0;
    return (act_bytes(rows, in) + 63) / 64 * 64;
}

typedef struct {
    const pak_int8_part *parts;
    int nparts;
    int64_t rows, in;
    const pak_int8_act32 *act;
    i8_out out;
    i8_group_fn group;
    i8_tile_sums_fn tiles; /* AMX's tile products (or their emulation) for this call, or NULL */
} product_job;

static void run_groups(const void *ctx, int64_t g0, int64_t g1, int worker)
{
    (void)worker;
    const product_job *job = ctx;
    int p = 0;
    int64_t first = 0, col = 0; /* part p's first group and first column */
    for (int64_t g = g0; g < g1; ++g) {
        while (g >= first + (job->parts[p].out + G_ROWS - 1) / G_ROWS) {
            first += (job->parts[p].out + G_ROWS - 1) / G_ROWS;
            col += job->parts[p].out;
            ++p;
        }
        const pak_int8_part *part = &job->parts[p];
        const int64_t index = g - first, left = part->out - index * G_ROWS;
        const int64_t group_bytes = pak_int8_group_bytes(part->wtype, job->in);
        const uint8_t *group = part->w + index * group_bytes;
        const int valid = left < G_ROWS ? (int)left : G_ROWS;
#if PAK_X86_VARIANTS
        if (job->tiles != NULL) {
            i8_group_tiles_avx512(part->wtype, group, job->in, job->act, job->rows, &job->out, col + index * G_ROWS,
                                  valid, job->tiles);
            continue;
        }
#endif
        job->group(part->wtype, group, job->in, job->act, job->rows, &job->out, col + index * G_ROWS, valid);
    }
#if PAK_X86_VARIANTS
    if (job->tiles != NULL)
        i8_amx_release(job->tiles);
#endif
}

int pak_linear_int8(const void *x, int x_bf16, const pak_int8_part *parts, int nparts, void *y, int y_f32,
                    int64_t rows, int64_t in, void *scratch, int threads)
{
    const int64_t started = pak_profile_begin();
    if (rows < 0 || nparts < 0 || (nparts > 0 && parts == NULL) || !parts_valid(parts, nparts, in))
        return pak_profile_return(PAK_PROFILE_LINEAR, started, PAK_EINVAL);
    int64_t out = 0, groups = 0;
    for (int p = 0; p < nparts; ++p) {
        out += parts[p].out;
        groups += (parts[p].out + G_ROWS - 1) / G_ROWS;
    }
    if (rows == 0 || out == 0)
        return pak_profile_return(PAK_PROFILE_LINEAR, started, PAK_OK);
    if (x == NULL || y == NULL)
        return pak_profile_return(PAK_PROFILE_LINEAR, started, PAK_EINVAL);
    void *owned = NULL;
    if (scratch == NULL) {
        owned = scratch = aligned_alloc(64, (size_t)pak_int8_scratch_bytes(parts, nparts, rows, in));
        if (scratch == NULL)
            return pak_profile_return(PAK_PROFILE_LINEAR, started, PAK_ENOMEM);
    }
    product_job job = {.parts = parts, .nparts = nparts, .rows = rows, .in = in, .act = scratch,
                       .out = {y, y_f32 != 0, out}, .group = choose().group};
    quantize(x, x_bf16, rows, in, scratch, threads);
    if (rows >= I8_AMX_MIN_ROWS && pak_isa_active() == PAK_ISA_AVX512)
        job.tiles = i8_amx_tiles();
    if (rows * out * in < (1 << 16)) /* too little work to share */
        threads = 1;
    pak_pool_run(run_groups, &job, groups, 1, threads);
    free(owned);
    return pak_profile_return(PAK_PROFILE_LINEAR, started, PAK_OK);
}
