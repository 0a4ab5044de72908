/* The fused per-token operations of a decoder layer (pyagent/layer_ops.h).
 *
 * Plain C compiled once for every CPU: the loops are element-wise (the compiler may vectorize them
 * without changing a bit) except the sum of squares, which keeps 16 independent lanes and a fixed
 * tree. exp is the 16-lane float polynomial of sampling/vecmath.h.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "pyagent/common.h"
#include "pyagent/layer_ops.h"
#include "common/bf16.h"
#include "common/pool.h"
#include "common/profile.h"
#include "common/lanes.h"
#include "common/variant.h"
#include "sampling/vecmath.h"

#define LANES 16

#define CHUNK 256
#define SHARED_VALUES 16384 /* values of the rows a thread gets at a time (and half of what a call shares) */
#define MAX_HEAD 1024
#define PAK_IMPL "layer_ops/layer_ops_impl.h"
#include "common/variants.h"

#if PAK_X86_VARIANTS
#define PAK_LAYER_PICK(fn) \
    (pak_isa_active() == PAK_ISA_AVX512 ? fn##_avx512 : pak_isa_active() == PAK_ISA_AVX2 ? fn##_avx2 : fn##_generic)
#else
#define PAK_LAYER_PICK(fn) fn##_generic
#endif

static int check(int dtype, int64_t a, int64_t b)
{
    return (dtype == PAK_LAYER_F32 || dtype == PAK_LAYER_BF16) && a >= 0 && b >= 0 ? PAK_OK : PAK_EINVAL;
}

/* A call's arguments; each op's pool function below runs rows [begin, end) of them. */
typedef struct {
    const void *in, *delta, *weight, *cos, *sin;
    void *hidden, *out, *k, *v;
    int bf16;
    int64_t dim, heads, kv_heads;
    float eps;
} layer_job;

/* ptr advanced to row `begin` of rows of `width` elements (NULL stays NULL). */
#define AT(ptr, width) ((ptr) == NULL ? NULL : (char *)(ptr) + begin * (width) * (job->bf16 ? 2 : 4))

static void norm_range(const void *ctx, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const layer_job *job = ctx;
    PAK_LAYER_PICK(norm_rows)(AT(job->hidden, job->dim), AT(job->delta, job->dim), job->weight, AT(job->out, job->dim),
                              job->bf16, end - begin, job->dim, job->eps);
}

static void rope_range(const void *ctx, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const layer_job *job = ctx;
    PAK_LAYER_PICK(rope_rows)(AT(job->in, (job->heads + 2 * job->kv_heads) * job->dim), AT(job->cos, job->dim),
                              AT(job->sin, job->dim), AT(job->out, job->heads * job->dim),
                              AT(job->k, job->kv_heads * job->dim), AT(job->v, job->kv_heads * job->dim), job->bf16,
                              end - begin, job->heads, job->kv_heads, job->dim);
}

static void silu_range(const void *ctx, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const layer_job *job = ctx;
    PAK_LAYER_PICK(silu_rows)(AT(job->in, 2 * job->dim), AT(job->out, job->dim), job->bf16, end - begin, job->dim);
}

#undef AT

/* Run `fn` over `rows` rows of `width` values each: on the calling thread when they are few, else in
 * chunks of rows on up to `threads` threads (each row alone, so the same bits either way). */
static void run_job(pak_pool_fn fn, const layer_job *job, int64_t rows, int64_t width, int threads)
{
    const int64_t grain = SHARED_VALUES / width > 0 ? SHARED_VALUES / width : 1;
    pak_pool_run(fn, job, rows, grain, rows * width < 2 * SHARED_VALUES ? 1 : threads);
}

int pak_add_rms_norm(void *hidden, const void *delta, const void *weight, void *out, int dtype, int64_t rows,
                     int64_t dim, float eps, int threads)
{
    const int64_t started = pak_profile_begin();
    if (check(dtype, rows, dim) != PAK_OK)
        return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_EINVAL);
    if (rows == 0 || dim == 0)
        return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_OK);
    if (hidden == NULL || weight == NULL || out == NULL)
        return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_EINVAL);
    const layer_job job = {.delta = delta, .weight = weight, .hidden = hidden, .out = out,
                           .bf16 = dtype == PAK_LAYER_BF16, .dim = dim, .eps = eps};
    run_job(norm_range, &job, rows, dim, threads);
    return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_OK);
}

int pak_rope_split(const void *qkv, const void *cos, const void *sin, void *q, void *k, void *v, int dtype,
                   int64_t tokens, int64_t heads, int64_t kv_heads, int64_t dim, int threads)
{
    const int64_t started = pak_profile_begin();
    if (check(dtype, tokens, heads) != PAK_OK || kv_heads < 0 || dim < 0 || dim % 2 != 0 || dim > MAX_HEAD)
        return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_EINVAL);
    if (tokens == 0 || (heads + 2 * kv_heads) * dim == 0)
        return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_OK);
    if (qkv == NULL || cos == NULL || sin == NULL || q == NULL || k == NULL || v == NULL)
        return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_EINVAL);
    const layer_job job = {.in = qkv, .cos = cos, .sin = sin, .out = q, .k = k, .v = v,
                           .bf16 = dtype == PAK_LAYER_BF16, .dim = dim, .heads = heads, .kv_heads = kv_heads};
    run_job(rope_range, &job, tokens, (heads + 2 * kv_heads) * dim, threads);
    return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_OK);
}

int pak_silu_mul(const void *gate_up, void *out, int dtype, int64_t tokens, int64_t inter, int threads)
{
    const int64_t started = pak_profile_begin();
    if (check(dtype, tokens, inter) != PAK_OK)
        return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_EINVAL);
    if (tokens == 0 || inter == 0)
        return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_OK);
    if (gate_up == NULL || out == NULL)
        return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_EINVAL);
    const layer_job job = {.in = gate_up, .out = out, .bf16 = dtype == PAK_LAYER_BF16, .dim = inter};
    run_job(silu_range, &job, tokens, 2 * inter, threads);
    return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_OK);
}
