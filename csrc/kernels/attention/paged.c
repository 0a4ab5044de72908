/* Paged attention (pyagent/attention.h): index checks, cache write, work items, threads and
 * instruction-set dispatch. The per-variant attention code is in paged_impl.h. */
/* Multiply-adds fuse where the variant has FMA (the build turns contraction off elsewhere): every
 * token's scores and sums go through the same code, so its output still does not depend on the
 * batch, only on the instruction-set variant. */
#pragma GCC optimize("fp-contract=fast")

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pyagent/attention.h"
#include "pyagent/common.h"
#include "common/bf16.h"
#include "common/pool.h"
#include "common/profile.h"
#include "common/variant.h"
#include "sampling/vecmath.h"

#define PAK_ATTN_ROWS 64                  /* query rows (tokens x group heads) per work item */
#define PAK_ATTN_CHUNK 16                 /* positions scored together (at most one block's) */
#define PAK_ATTN_WORK_PER_THREAD (1 << 11) /* (query row, position) pairs a thread must get */

typedef uint16_t pak_v16h __attribute__((vector_size(32)));
typedef float pak_v4f __attribute__((vector_size(16)));

/* The call's arguments, as the work items need them. */
typedef struct {
    void *out;
    const void *q;
    const char *cache;
    int bf16;
    int64_t num_heads, num_kv_heads, head_size, padded, block_size, max_blocks, plane_bytes;
    const int32_t *block_tables, *seq_lens, *query_start_loc;
    const uint8_t *tree_mask;
    int64_t tree_width;
    float scale;
    int64_t window;           /* sliding window, 0: none */
    float soft_cap;           /* score cap, 0: none */
    const int64_t *tree_pos;  /* with a tree mask and a window: each new token's position in the text */
} pak_attn;

/* New tokens first .. first + count - 1 (all of sequence seq) against kv head `head`. */
typedef struct {
    int64_t seq, first, count, head;
} pak_item;

/* Per-thread float32 scratch: scaled queries, accumulators, running max / sum, chunk weights, and
 * the widened key / value rows of a chunk. */
typedef struct {
    float *q, *acc, *m, *l, *p, *k, *v;
} pak_attn_scratch;

PAK_INLINE float pak_hsum16(pak_v16f v)
{
    pak_v8f lo, hi;
    memcpy(&lo, &v, sizeof lo);
    memcpy(&hi, (const char *)&v + sizeof lo, sizeof hi);
    lo += hi;
    pak_v4f a, b;
    memcpy(&a, &lo, sizeof a);
    memcpy(&b, (const char *)&lo + sizeof a, sizeof b);
    a += b;
    return (a[0] + a[2]) + (a[1] + a[3]);
}

/* The first position of the chunk grid (chunks of PAK_ATTN_CHUNK from each block's start) at or
 * before `pos`: every row starts its keys there, so a token's chunks, hence its rounding, do not
 * depend on the other tokens of its work item. */
static int64_t chunk_start(int64_t pos, int64_t block_size)
{
    const int64_t offset = pos % block_size;
    return pos - offset + offset / PAK_ATTN_CHUNK * PAK_ATTN_CHUNK;
}

#define PAK_IMPL "attention/paged_impl.h"
#include "common/variants.h"

typedef void (*pak_attend_fn)(const pak_attn *, const pak_item *, const pak_attn_scratch *);

static pak_attend_fn pick_attend_fn(void)
{
    switch (pak_isa_active()) {
#if PAK_X86_VARIANTS
    case PAK_ISA_AVX512:
        return attend_avx512;
    case PAK_ISA_AVX2:
        return attend_avx2;
#endif
    default:
        return attend_generic;
    }
}

/* Check query_start_loc, seq_lens, the block-table entries that will be read and the slots. */
static int check_indices(int64_t num_tokens, int64_t num_blocks, int64_t block_size,
                         const int32_t *block_tables, int64_t max_blocks, const int64_t *slot_mapping,
                         const int32_t *seq_lens, const int32_t *query_start_loc, int64_t num_seqs,
                         const uint8_t *tree_mask, int64_t tree_width, int64_t *err_index)
{
    if (query_start_loc[0] != 0 || query_start_loc[num_seqs] != num_tokens) {
        *err_index = query_start_loc[0] != 0 ? 0 : num_seqs - 1;
        return PAK_EPARAM;
    }
    for (int64_t s = 0; s < num_seqs; ++s) {
        const int64_t query_len = (int64_t)query_start_loc[s + 1] - query_start_loc[s];
        const int64_t blocks = ((int64_t)seq_lens[s] + block_size - 1) / block_size;
        *err_index = s;
        if (query_len < 0 || seq_lens[s] < query_len || blocks > max_blocks
            || (tree_mask && query_len > tree_width))
            return PAK_EPARAM;
        for (int64_t b = 0; b < blocks; ++b) {
            const int32_t block = block_tables[s * max_blocks + b];
            if (block < 0 || block >= num_blocks)
                return PAK_EINDEX;
        }
    }
    for (int64_t t = 0; t < num_tokens; ++t) {
        if (slot_mapping[t] < 0 || slot_mapping[t] >= num_blocks * block_size) {
            *err_index = num_seqs + t;
            return PAK_EINDEX;
        }
    }
    *err_index = -1;
    return PAK_OK;
}

/* Copy k[t] and v[t] (every kv head) to slot slot_mapping[t] of the key and value planes. */
static void write_cache(char *cache, const char *k, const char *v, const int64_t *slot_mapping,
                        int64_t num_tokens, int64_t row_bytes, int64_t plane_bytes)
{
    for (int64_t t = 0; t < num_tokens; ++t) {
        char *dst = cache + slot_mapping[t] * row_bytes;
        memcpy(dst, k + t * row_bytes, (size_t)row_bytes);
        memcpy(dst + plane_bytes, v + t * row_bytes, (size_t)row_bytes);
    }
}

/* Work items, sequence by sequence, tile by tile, kv head by kv head; *work gets the number of
 * (query row, position) pairs they score, for choosing the thread count. NULL if out of memory. */
static pak_item *make_items(const pak_attn *a, int64_t num_seqs, int64_t *num_items, int64_t *work)
{
    const int64_t group = a->num_heads / a->num_kv_heads;
    const int64_t tile = group >= PAK_ATTN_ROWS ? 1 : PAK_ATTN_ROWS / group;
    int64_t n = 0;
    for (int64_t s = 0; s < num_seqs; ++s)
        n += (a->query_start_loc[s + 1] - a->query_start_loc[s] + tile - 1) / tile * a->num_kv_heads;
    pak_item *items = malloc((size_t)(n > 0 ? n : 1) * sizeof *items);
    if (!items)
        return NULL;
    *num_items = 0;
    *work = 0;
    for (int64_t s = 0; s < num_seqs; ++s) {
        const int64_t lo = a->query_start_loc[s], hi = a->query_start_loc[s + 1];
        for (int64_t first = lo; first < hi; first += tile) {
            const int64_t count = hi - first < tile ? hi - first : tile;
            const int64_t span = a->window && a->window + count < a->seq_lens[s] ? a->window + count : a->seq_lens[s];
            *work += count * group * a->num_kv_heads * span;
            for (int64_t h = 0; h < a->num_kv_heads; ++h)
                items[(*num_items)++] = (pak_item){s, first, count, h};
        }
    }
    return items;
}

/* With a tree mask: each new token's position in the text (attention.h), ctx + its row's count of
 * its sequence's new tokens - 1. NULL if out of memory. */
static int64_t *tree_positions(const pak_attn *a, int64_t num_seqs, int64_t num_tokens)
{
    int64_t *pos = malloc((size_t)(num_tokens > 0 ? num_tokens : 1) * sizeof *pos);
    if (!pos)
        return NULL;
    for (int64_t s = 0; s < num_seqs; ++s) {
        const int64_t lo = a->query_start_loc[s], hi = a->query_start_loc[s + 1];
        for (int64_t t = lo; t < hi; ++t) {
            int64_t seen = 0;
            for (int64_t j = 0; j < hi - lo; ++j)
                seen += a->tree_mask[t * a->tree_width + j] != 0;
            pos[t] = a->seq_lens[s] - (hi - lo) + seen - 1;
        }
    }
    return pos;
}

/* What the workers of one call share: the items, and a scratch region per worker. */
typedef struct {
    const pak_attn *attn;
    const pak_item *items;
    pak_attend_fn attend;
    float *scratch;
    int64_t rows, scratch_floats;
} pak_attn_job;

static int64_t scratch_floats(int64_t rows, int64_t padded)
{
    return (2 * rows + 2 * PAK_ATTN_CHUNK) * padded + (2 + PAK_ATTN_CHUNK) * rows;
}

/* Items [begin, end) on worker `worker`'s scratch. */
static void run_items(const void *ctx, int64_t begin, int64_t end, int worker)
{
    const pak_attn_job *job = ctx;
    const int64_t padded = job->attn->padded, rows = job->rows;
    float *cursor = job->scratch + worker * job->scratch_floats;
    pak_attn_scratch sc;
    sc.q = cursor, cursor += rows * padded;
    sc.acc = cursor, cursor += rows * padded;
    sc.m = cursor, cursor += rows;
    sc.l = cursor, cursor += rows;
    sc.p = cursor, cursor += rows * PAK_ATTN_CHUNK;
    sc.k = cursor, cursor += PAK_ATTN_CHUNK * padded;
    sc.v = cursor;
    for (int64_t i = begin; i < end; ++i)
        job->attend(job->attn, &job->items[i], &sc);
}

int pak_paged_attention(void *out, const void *q, const void *k, const void *v, void *kv_cache,
                        int dtype, int64_t num_tokens, int64_t num_heads, int64_t num_kv_heads,
                        int64_t head_size, int64_t num_blocks, int64_t block_size,
                        const int32_t *block_tables, int64_t max_blocks, const int64_t *slot_mapping,
                        const int32_t *seq_lens, const int32_t *query_start_loc, int64_t num_seqs,
                        const uint8_t *tree_mask, int64_t tree_width, float scale, int64_t window,
                        float soft_cap, int num_threads, int64_t *err_index)
{
    const int64_t started = pak_profile_begin();
    int64_t ignored;
    err_index = err_index ? err_index : &ignored;
    *err_index = -1;
    if ((dtype != PAK_ATTN_F32 && dtype != PAK_ATTN_BF16) || num_tokens < 0 || num_seqs < 0
        || num_heads <= 0 || num_kv_heads <= 0 || num_heads % num_kv_heads || head_size <= 0
        || num_blocks < 0 || block_size <= 0 || max_blocks < 0 || tree_width < 0 || !query_start_loc
        || (num_seqs > 0 && (!seq_lens || (max_blocks > 0 && !block_tables))) || !isfinite(scale)
        || window < 0 || !(soft_cap >= 0.0f && isfinite(soft_cap)))
        return pak_profile_return(PAK_PROFILE_ATTENTION, started, PAK_EINVAL);
    if (num_tokens > 0 && (!out || !q || !k || !v || !kv_cache || !slot_mapping))
        return pak_profile_return(PAK_PROFILE_ATTENTION, started, PAK_EINVAL);
    int rc = check_indices(num_tokens, num_blocks, block_size, block_tables, max_blocks, slot_mapping,
                           seq_lens, query_start_loc, num_seqs, tree_mask, tree_width, err_index);
    if (rc != PAK_OK || num_tokens == 0)
        return pak_profile_return(PAK_PROFILE_ATTENTION, started, rc);
    const int64_t elem = dtype == PAK_ATTN_BF16 ? 2 : 4, row_bytes = num_kv_heads * head_size * elem;
    pak_attn attn = {out, q, kv_cache, dtype == PAK_ATTN_BF16, num_heads, num_kv_heads, head_size,
                     (head_size + 15) / 16 * 16, block_size, max_blocks,
                     num_blocks * block_size * row_bytes, block_tables, seq_lens, query_start_loc,
                     tree_mask, tree_width, scale, window, soft_cap, NULL};
    int64_t *tree_pos = NULL;
    if (tree_mask && window && !(tree_pos = tree_positions(&attn, num_seqs, num_tokens)))
        return pak_profile_return(PAK_PROFILE_ATTENTION, started, PAK_ENOMEM);
    attn.tree_pos = tree_pos;
    int64_t num_items, work;
    pak_item *items = make_items(&attn, num_seqs, &num_items, &work);
    if (!items) {
        free(tree_pos);
        return pak_profile_return(PAK_PROFILE_ATTENTION, started, PAK_ENOMEM);
    }
    write_cache(kv_cache, k, v, slot_mapping, num_tokens, row_bytes, attn.plane_bytes);
    const int64_t group = num_heads / num_kv_heads;
    int64_t threads = num_threads < PAK_POOL_MAX_THREADS ? num_threads : PAK_POOL_MAX_THREADS;
    threads = threads < work / PAK_ATTN_WORK_PER_THREAD ? threads : work / PAK_ATTN_WORK_PER_THREAD;
    threads = threads < num_items ? threads : num_items;
    threads = threads < 1 ? 1 : threads;
    pak_attn_job job = {&attn, items, pick_attend_fn(), NULL,
                        group >= PAK_ATTN_ROWS ? group : PAK_ATTN_ROWS / group * group, 0};
    job.scratch_floats = (scratch_floats(job.rows, attn.padded) + 15) / 16 * 16; /* a worker's own cache lines */
    job.scratch = aligned_alloc(64, (size_t)(threads * job.scratch_floats) * sizeof(float));
    if (!job.scratch) {
        free(items);
        free(tree_pos);
        return pak_profile_return(PAK_PROFILE_ATTENTION, started, PAK_ENOMEM);
    }
    pak_pool_run(run_items, &job, num_items, 1, (int)threads);
    free(job.scratch);
    free(items);
    free(tree_pos);
    return pak_profile_return(PAK_PROFILE_ATTENTION, started, PAK_OK);
}

int pak_paged_attention_call(const pak_attn_call *call)
{
    if (!call || !call->batch)
        return PAK_EINVAL;
    pak_attn_batch *batch = call->batch;
    if (batch->num_tokens != call->num_tokens) {
        batch->err_index = -1;
        return PAK_EPARAM;
    }
    return pak_paged_attention(call->out, call->q, call->k, call->v, call->kv_cache, call->dtype, call->num_tokens,
                               call->num_heads, call->num_kv_heads, call->head_size, call->num_blocks,
                               call->block_size, batch->block_tables, batch->max_blocks, batch->slot_mapping,
                               batch->seq_lens, batch->query_start_loc, batch->num_seqs, batch->tree_mask,
                               batch->tree_width, call->scale, call->window, call->soft_cap, call->num_threads,
                               &batch->err_index);
}
