/* pyagent/mixers.h: the recurrent sequence mixers beside attention, one token after another.
 *
 * Layout (pyagent_core.interfaces.mixer): the new tokens of all sequences are concatenated; sequence
 * s owns tokens query_start_loc[s] .. query_start_loc[s + 1] - 1, the last query_len of its
 * seq_lens[s] positions. A recurrent state is float32 [num_slots, ...]; sequence s uses slot
 * state_slots[s]. A sequence whose context is empty (seq_lens[s] == query_len) starts from the zero
 * state whatever its slot holds; otherwise the slot holds the state after its context. The call
 * leaves each slot holding the state after all of its sequence's tokens and changes no other slot.
 * Every tensor is float32, contiguous and row-major; outputs must not overlap inputs.
 *
 * pak_short_conv: x, out [num_tokens, channels]; weight [channels, width] (width >= 2); bias
 *   [channels] or NULL; state [num_slots, channels, width - 1], the width - 1 latest inputs, oldest
 *   first. out[t, c] = act(sum_j weight[c, j] * u[t - width + 1 + j, c], then + bias[c]), u the
 *   sequence's inputs (zeros before its first token), the sum taken j = 0, 1, ... in turn; act is
 *   the identity (activation 0) or SiLU (1: v / (1 + expf(-v))).
 * pak_ssd: Mamba2's selective scan. x, y [num_tokens, heads, head_dim]; dt [num_tokens, heads];
 *   A, D, dt_bias [heads]; B, C [num_tokens, groups, state_size] (head h reads group
 *   h / (heads / groups)); state [num_slots, heads, head_dim, state_size]. Per token and head:
 *   delta = min(max(softplus(dt + dt_bias), dt_min), dt_max) (softplus(v) = v above 20, else
 *   log1pf(expf(v))), decay = expf(delta * A), then for every p and n
 *   S[p, n] = S[p, n] * decay + (delta * B[n]) * x[p], and
 *   y[p] = sum_n S[p, n] * C[n] + D * x[p], the sum in 16 lanes (lane j takes n = 16i + j, a
 *   zero-padded last group) added as pyagent/linear.h's tree.
 * pak_gated_delta: the gated delta rule. q, k [num_tokens, key_heads, key_dim]; v, o [num_tokens,
 *   value_heads, value_dim] (value head h reads key head h / (value_heads / key_heads)); g, beta
 *   [num_tokens, value_heads]; state [num_slots, value_heads, key_dim, value_dim]. Per token and
 *   value head: S *= expf(g); m[j] = sum_i S[i, j] * k[i]; d[j] = (v[j] - m[j]) * beta;
 *   S[i, j] += k[i] * d[j]; o[j] = sum_i S[i, j] * (q[i] * scale); the sums over i taken
 *   i = 0, 1, ... in turn.
 * pak_mla: multi-head latent attention, absorbed. q_nope [num_tokens, heads, nope]; q_pe
 *   [num_tokens, heads, rope]; latent [num_tokens, size]; k_pe [num_tokens, rope]; w_uk [heads,
 *   nope, size]; w_uv [heads, v_dim, size]; cache [num_blocks, block_size, size + rope] (slot =
 *   block * block_size + offset; position p of sequence s in block block_tables[s * max_blocks +
 *   p / block_size]); out [num_tokens, heads, v_dim]. First every new row [latent[t], k_pe[t]] is
 *   written at slot_mapping[t]; then per new token (at position p) and head: a[l] = sum_n
 *   q_nope[n] * w_uk[n, l] (n in turn); score_j = scale * (a . c_j + q_pe . r_j) for positions
 *   j <= p (the dot products in 16 lanes and the tree above), c_j and r_j the cached latent and
 *   rotated key; weights softmax(score) (two passes: the maximum, then expf(score - max) summed
 *   in turn); o[l] = sum_j w_j * c_j[l] / total (j in turn); out[v] = sum_l o[l] * w_uv[v, l]
 *   (16 lanes and the tree).
 *
 * Work items (a sequence's head; for pak_mla a token's group of up to 8 heads, which share each read
 * of a cached row) are spread over the caller and up to num_threads - 1 of the persistent helper
 * threads the linear kernel uses; results do not depend on the thread count nor on the other
 * sequences of the batch.
 *
 * Errors (nothing written): PAK_EINVAL (NULL pointer, bad size, unknown activation, heads not a
 * multiple of groups, a non-finite scale), PAK_EPARAM (query_start_loc not starting at 0,
 * decreasing or not ending at num_tokens, a sequence shorter than its new tokens or, for pak_mla,
 * longer than its block-table row: *err_index = the sequence), PAK_EINDEX (a state slot outside
 * [0, num_slots) or used twice: *err_index = the sequence; a block id outside [0, num_blocks):
 * *err_index = the sequence; a slot outside the cache: *err_index = num_seqs + the token),
 * PAK_ENOMEM (scratch memory).
 */
#ifndef PYAGENT_MIXERS_H
#define PYAGENT_MIXERS_H

#include <stdint.h>

enum pak_conv_activation {
    PAK_CONV_NONE = 0,
    PAK_CONV_SILU = 1
};

int pak_short_conv(const float *x, const float *weight, const float *bias, float *state, float *out,
                   int64_t num_tokens, int64_t channels, int64_t width, int64_t num_slots,
                   const int32_t *query_start_loc, const int32_t *seq_lens, const int64_t *state_slots,
                   int64_t num_seqs, int activation, int num_threads, int64_t *err_index);

int pak_ssd(const float *x, const float *dt, const float *A, const float *B, const float *C, const float *D,
            const float *dt_bias, float *state, float *y, int64_t num_tokens, int64_t heads, int64_t head_dim,
            int64_t groups, int64_t state_size, int64_t num_slots, const int32_t *query_start_loc,
            const int32_t *seq_lens, const int64_t *state_slots, int64_t num_seqs, float dt_min, float dt_max,
            int num_threads, int64_t *err_index);

int pak_gated_delta(const float *q, const float *k, const float *v, const float *g, const float *beta,
                    float *state, float *o, int64_t num_tokens, int64_t key_heads, int64_t key_dim,
                    int64_t value_heads, int64_t value_dim, int64_t num_slots, const int32_t *query_start_loc,
                    const int32_t *seq_lens, const int64_t *state_slots, int64_t num_seqs, float scale,
                    int num_threads, int64_t *err_index);

int pak_mla(const float *q_nope, const float *q_pe, const float *latent, const float *k_pe, const float *w_uk,
            const float *w_uv, float *cache, float *out, int64_t num_tokens, int64_t heads, int64_t nope,
            int64_t rope, int64_t size, int64_t v_dim, int64_t num_blocks, int64_t block_size,
            const int32_t *block_tables, int64_t max_blocks, const int64_t *slot_mapping, const int32_t *seq_lens,
            const int32_t *query_start_loc, int64_t num_seqs, float scale, int num_threads, int64_t *err_index);

#endif
