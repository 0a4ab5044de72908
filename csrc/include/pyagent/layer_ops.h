/* pyagent/layer_ops.h: the small per-token operations of a Llama decoder layer, fused.
 *
 * Between its matrix products a decoder layer runs a handful of cheap element-wise and row-wise
 * operations; done as separate torch calls each costs more in dispatch than in arithmetic. These
 * kernels do each group in one call. Every row (token) is computed on its own, so results never
 * depend on the batch. dtype is PAK_LAYER_F32 or PAK_LAYER_BF16 for every tensor of a call;
 * bfloat16 values are widened to float32, each operation is done in float32 and its result rounded
 * to bfloat16 (nearest, ties to even) where torch would round it.
 *
 * pak_add_rms_norm: with delta, hidden[r] += delta[r] (in place, rounded to the dtype); then
 *   out[r] = hidden[r] * rstd * weight, rstd = 1 / sqrt(mean(hidden[r]^2) + eps), the mean summed
 *   in 16 float32 lanes and a fixed tree as pyagent/linear.h describes. float32: (h * rstd) * w;
 *   bfloat16: w * round(h * rstd), as transformers' Llama RMSNorm does.
 * pak_rope_split: qkv [tokens, (heads + 2 kv_heads) * dim] holds each token's query heads, key
 *   heads and value heads. Rotate-half RoPE turns each query and key head x into
 *   x * cos + rotate_half(x) * sin, rotate_half(x) = (-x[dim/2:], x[:dim/2]), with cos and sin the
 *   token's rows [tokens, dim]; the results go to q [tokens, heads, dim] and k [tokens, kv_heads,
 *   dim], the value heads to v unchanged. Each product and the sum is rounded separately, as torch
 *   computes it, so the results are torch's bit for bit.
 * pak_silu_mul: out[t, i] = silu(g) * u for g = gate_up[t, i], u = gate_up[t, inter + i];
 *   silu(g) = g / (1 + exp(-g)) with exp the fixed float polynomial of the sampling kernels
 *   (a few ulp from the library exp).
 *
 * threads: most threads a call may use (pyagent-kernels' pool, rows shared out when a call has enough
 * of them; 1 or less: the calling thread). Every row is computed alone, so threads do not change a bit.
 *
 * Returns PAK_OK, or PAK_EINVAL for a NULL pointer with a non-zero size, a negative size, an odd
 * dim (rope) or an unknown dtype.
 */
#ifndef PYAGENT_LAYER_OPS_H
#define PYAGENT_LAYER_OPS_H

#include <stdint.h>

enum pak_layer_dtype {
    PAK_LAYER_F32 = 0,
    PAK_LAYER_BF16 = 1
};

int pak_add_rms_norm(void *hidden, const void *delta, const void *weight, void *out, int dtype, int64_t rows,
                     int64_t dim, float eps, int threads);

int pak_rope_split(const void *qkv, const void *cos, const void *sin, void *q, void *k, void *v, int dtype,
                   int64_t tokens, int64_t heads, int64_t kv_heads, int64_t dim, int threads);

int pak_silu_mul(const void *gate_up, void *out, int dtype, int64_t tokens, int64_t inter, int threads);

#endif
