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
#include "common/profile.h"
#include "common/lanes.h"
#include "common/variant.h"
#include "sampling/vecmath.h"

#define LANES 16

#define CHUNK 256
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

int pak_add_rms_norm(void *hidden, const void *delta, const void *weight, void *out, int dtype, int64_t rows,
                     int64_t dim, float eps)
{
    const int64_t started = pak_profile_begin();
    if (check(dtype, rows, dim) != PAK_OK)
        return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_EINVAL);
    if (rows == 0 || dim == 0)
        return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_OK);
    if (hidden == NULL || weight == NULL || out == NULL)
        return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_EINVAL);
    PAK_LAYER_PICK(norm_rows)(hidden, delta, weight, out, dtype == PAK_LAYER_BF16, rows, dim, eps);
    return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_OK);
}

int pak_rope_split(const void *qkv, const void *cos, const void *sin, void *q, void *k, void *v, int dtype,
                   int64_t tokens, int64_t heads, int64_t kv_heads, int64_t dim)
{
    const int64_t started = pak_profile_begin();
    if (check(dtype, tokens, heads) != PAK_OK || kv_heads < 0 || dim < 0 || dim % 2 != 0 || dim > MAX_HEAD)
        return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_EINVAL);
    if (tokens == 0 || (heads + 2 * kv_heads) * dim == 0)
        return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_OK);
    if (qkv == NULL || cos == NULL || sin == NULL || q == NULL || k == NULL || v == NULL)
        return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_EINVAL);
    PAK_LAYER_PICK(rope_rows)(qkv, cos, sin, q, k, v, dtype == PAK_LAYER_BF16, tokens, heads, kv_heads, dim);
    return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_OK);
}

int pak_silu_mul(const void *gate_up, void *out, int dtype, int64_t tokens, int64_t inter)
{
    const int64_t started = pak_profile_begin();
    if (check(dtype, tokens, inter) != PAK_OK)
        return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_EINVAL);
    if (tokens == 0 || inter == 0)
        return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_OK);
    if (gate_up == NULL || out == NULL)
        return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_EINVAL);
    PAK_LAYER_PICK(silu_rows)(gate_up, out, dtype == PAK_LAYER_BF16, tokens, inter);
    return pak_profile_return(PAK_PROFILE_LAYER_OPS, started, PAK_OK);
}
