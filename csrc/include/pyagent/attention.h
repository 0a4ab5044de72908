/* pyagent/attention.h: causal attention computed directly over a paged KV cache.
 *
 * Layout (pyagent_core.interfaces.attention): kv_cache is [2, num_blocks, block_size, num_kv_heads,
 * head_size] (index 0 keys, 1 values); slot = block * block_size + offset. The new tokens of all
 * sequences are concatenated: sequence s owns tokens query_start_loc[s] .. query_start_loc[s + 1] - 1,
 * at positions seq_lens[s] - query_len .. seq_lens[s] - 1; position p of s lives in block
 * block_tables[s * max_blocks + p / block_size], offset p % block_size.
 *
 * q, out: [num_tokens, num_heads, head_size]; k, v: [num_tokens, num_kv_heads, head_size]; every
 * tensor contiguous, row-major, of one element type (PAK_ATTN_F32 or PAK_ATTN_BF16). Query head h
 * reads key/value head h / (num_heads / num_kv_heads).
 *
 * One call: (1) checks every index it will use, writing nothing on error; (2) copies k[t] and v[t]
 * to slot slot_mapping[t] of the cache; (3) attends. Each new token sees every cached position of its
 * sequence and the new tokens up to itself (causal) or, with tree_mask (bytes 0/1, [num_tokens,
 * tree_width], row-major), the cached positions and the j-th new token of its sequence where
 * tree_mask[t * tree_width + j] is non-zero. With window > 0 (a sliding window) it sees, of those,
 * only positions j with pos - window < j <= pos, pos being the token's position in the text: its
 * position in the sequence, or with tree_mask ctx + n - 1, where ctx = seq_len - query_len and n
 * counts the new tokens of its sequence its tree_mask row sets (its depth in the draft tree); a new
 * key's position is the same function of its own row. window 0: no window.
 * Scores are q . k * scale, then with soft_cap > 0 soft_cap * tanh(score / soft_cap) (soft_cap 0:
 * uncapped); softmax and the weighted sum of values run in float32 with a running maximum and sum
 * (bfloat16 is widened on load; the output is rounded to nearest even). A token that sees no
 * position gets zeros.
 *
 * Work items are (sequence, kv head, tile of up to ~64 query rows); all query heads of a kv head in
 * a tile share each key/value load. Items are spread over the caller and up to num_threads - 1 of
 * the persistent helper threads the linear kernel uses, when there is enough work; <= 1 runs on the
 * calling thread only. A token's output does not depend on the thread count.
 *
 * Errors (nothing written): PAK_EINVAL (NULL pointer, bad size or dtype, a negative window, a
 * negative or non-finite soft_cap or scale), PAK_EPARAM (query_start_loc
 * not starting at 0, decreasing or not ending at num_tokens; a sequence shorter than its new tokens
 * or longer than its block-table row; a query length above tree_width; *err_index = the sequence),
 * PAK_EINDEX (a block id outside [0, num_blocks): *err_index = the sequence; a slot outside the cache:
 * *err_index = num_seqs + the token), PAK_ENOMEM (scratch memory).
 */
#ifndef PYAGENT_ATTENTION_H
#define PYAGENT_ATTENTION_H

#include <stdint.h>

enum pak_attn_dtype {
    PAK_ATTN_F32 = 0,
    PAK_ATTN_BF16 = 1
};

int pak_paged_attention(void *out, const void *q, const void *k, const void *v, void *kv_cache,
                        int dtype, int64_t num_tokens, int64_t num_heads, int64_t num_kv_heads,
                        int64_t head_size, int64_t num_blocks, int64_t block_size,
                        const int32_t *block_tables, int64_t max_blocks, const int64_t *slot_mapping,
                        const int32_t *seq_lens, const int32_t *query_start_loc, int64_t num_seqs,
                        const uint8_t *tree_mask, int64_t tree_width, float scale, int64_t window,
                        float soft_cap, int num_threads, int64_t *err_index);

/* A prepared call (pyagent/program.h runs these among other ops): one layer's tensors and constants,
 * fixed when prepared, and the step's batch layout, which the host rewrites before each step. */
typedef struct {
    const int32_t *block_tables;
    int64_t max_blocks;
    const int64_t *slot_mapping;
    int64_t num_tokens;
    const int32_t *seq_lens;
    const int32_t *query_start_loc;
    int64_t num_seqs;
    const uint8_t *tree_mask;
    int64_t tree_width;
    int64_t err_index; /* written by a call that fails, as pak_paged_attention's *err_index */
} pak_attn_batch;

typedef struct {
    void *out;
    const void *q, *k, *v;
    void *kv_cache;
    int dtype;
    int64_t num_tokens, num_heads, num_kv_heads, head_size, num_blocks, block_size;
    float scale;
    int64_t window;
    float soft_cap;
    int num_threads;
    pak_attn_batch *batch;
} pak_attn_call;

/* pak_paged_attention with call's tensors and constants and its batch's layout. PAK_EPARAM (with
 * batch->err_index = -1) when the batch does not hold call->num_tokens new tokens (the rows of q, k, v
 * and out); otherwise pak_paged_attention's status. */
int pak_paged_attention_call(const pak_attn_call *call);

#endif
