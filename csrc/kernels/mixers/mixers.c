/* The recurrent mixers (pyagent/mixers.h): argument checks, work items, threads and instruction-set
 * dispatch. The per-variant loops are in mixers_impl.h. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pyagent/common.h"
#include "pyagent/mixers.h"
#include "common/lanes.h"
#include "common/pool.h"
#include "common/profile.h"
#include "common/variant.h"

#define PAK_LANES 16
#define PAK_MAX_VALUE_DIM 4096 /* gated delta: m and d live on the stack */
#define PAK_MLA_GROUP 8          /* latent attention: heads that share each read of a cached row */

typedef struct {
    const float *x, *weight_t, *bias;
    float *state, *out, *scratch;
    int64_t channels, width;
    const int32_t *query_start_loc, *seq_lens;
    const int64_t *state_slots;
    int silu;
} pak_conv_job;

typedef struct {
    const float *x, *dt, *A, *B, *C, *D, *dt_bias;
    float *state, *y;
    int64_t heads, head_dim, groups, state_size;
    const int32_t *query_start_loc, *seq_lens;
    const int64_t *state_slots;
    float dt_min, dt_max;
} pak_ssd_job;

typedef struct {
    const float *q, *k, *v, *g, *beta;
    float *state, *o;
    int64_t key_heads, key_dim, value_heads, value_dim;
    const int32_t *query_start_loc, *seq_lens;
    const int64_t *state_slots;
    float scale;
} pak_delta_job;

typedef struct {
    const float *q_nope, *q_pe, *w_uk, *w_uv, *cache;
    float *out, *scratch;
    int64_t heads, nope, rope, size, v_dim, block_size, max_blocks, scratch_floats, scratch_stride, groups;
    const int32_t *block_tables, *seq_lens, *query_start_loc;
    const int64_t *token_seq;
    float scale;
} pak_mla_job;

#define PAK_IMPL "mixers/mixers_impl.h"
#include "common/variants.h"

#if PAK_X86_VARIANTS
#define PAK_MIX_PICK(fn) \
    (pak_isa_active() == PAK_ISA_AVX512 ? fn##_avx512 : pak_isa_active() == PAK_ISA_AVX2 ? fn##_avx2 : fn##_generic)
#else
#define PAK_MIX_PICK(fn) fn##_generic
#endif

/* query_start_loc and seq_lens fit num_tokens; *err_index names the first bad sequence. */
static int check_layout(int64_t num_tokens, const int32_t *query_start_loc, const int32_t *seq_lens,
                        int64_t num_seqs, int64_t *err_index)
{
    if (query_start_loc[0] != 0 || query_start_loc[num_seqs] != num_tokens) {
        *err_index = query_start_loc[0] != 0 ? 0 : num_seqs - 1;
        return PAK_EPARAM;
    }
    for (int64_t s = 0; s < num_seqs; ++s) {
        const int64_t n = (int64_t)query_start_loc[s + 1] - query_start_loc[s];
        if (n < 0 || seq_lens[s] < n) {
            *err_index = s;
            return PAK_EPARAM;
        }
    }
    return PAK_OK;
}

/* Every sequence's slot lies in [0, num_slots), once. */
static int check_slots(const int64_t *state_slots, int64_t num_seqs, int64_t num_slots, int64_t *err_index)
{
    uint8_t *seen = calloc((size_t)(num_slots > 0 ? num_slots : 1), 1);
    if (!seen)
        return PAK_ENOMEM;
    int rc = PAK_OK;
    for (int64_t s = 0; s < num_seqs && rc == PAK_OK; ++s) {
        const int64_t slot = state_slots[s];
        if (slot < 0 || slot >= num_slots || seen[slot]) {
            *err_index = s;
            rc = PAK_EINDEX;
        } else {
            seen[slot] = 1;
        }
    }
    free(seen);
    return rc;
}

/* The layout and slot checks every state kernel starts with. */
static int check_state_call(int64_t num_tokens, int64_t num_slots, const int32_t *query_start_loc,
                            const int32_t *seq_lens, const int64_t *state_slots, int64_t num_seqs,
                            int64_t *err_index)
{
    if (num_tokens < 0 || num_seqs < 0 || num_slots < 0 || !query_start_loc
        || (num_seqs > 0 && (!seq_lens || !state_slots)))
        return PAK_EINVAL;
    int rc = check_layout(num_tokens, query_start_loc, seq_lens, num_seqs, err_index);
    return rc != PAK_OK ? rc : check_slots(state_slots, num_seqs, num_slots, err_index);
}

static int threads_for(int num_threads, int64_t items)
{
    int64_t threads = num_threads < PAK_POOL_MAX_THREADS ? num_threads : PAK_POOL_MAX_THREADS;
    threads = threads < items ? threads : items;
    return threads < 1 ? 1 : (int)threads;
}

static void run_conv(const void *ctx, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    for (int64_t s = begin; s < end; ++s)
        PAK_MIX_PICK(conv_seq)(ctx, s);
}

int pak_short_conv(const float *x, const float *weight, const float *bias, float *state, float *out,
                   int64_t num_tokens, int64_t channels, int64_t width, int64_t num_slots,
                   const int32_t *query_start_loc, const int32_t *seq_lens, const int64_t *state_slots,
                   int64_t num_seqs, int activation, int num_threads, int64_t *err_index)
{
    const int64_t started = pak_profile_begin();
    int64_t ignored;
    err_index = err_index ? err_index : &ignored;
    *err_index = -1;
    if (channels <= 0 || width < 2 || (activation != PAK_CONV_NONE && activation != PAK_CONV_SILU) || !weight
        || (num_slots > 0 && !state) || (num_tokens > 0 && (!x || !out)))
        return pak_profile_return(PAK_PROFILE_MIXERS, started, PAK_EINVAL);
    int rc = check_state_call(num_tokens, num_slots, query_start_loc, seq_lens, state_slots, num_seqs, err_index);
    if (rc != PAK_OK || num_seqs == 0)
        return pak_profile_return(PAK_PROFILE_MIXERS, started, rc);
    float *weight_t = malloc((size_t)(width * channels + num_seqs * channels) * sizeof(float));
    if (!weight_t)
        return pak_profile_return(PAK_PROFILE_MIXERS, started, PAK_ENOMEM);
    for (int64_t c = 0; c < channels; ++c)
        for (int64_t j = 0; j < width; ++j)
            weight_t[j * channels + c] = weight[c * width + j];
    pak_conv_job job = {x, weight_t, bias, state, out, weight_t + width * channels, channels, width,
                        query_start_loc, seq_lens, state_slots, activation == PAK_CONV_SILU};
    pak_pool_run(run_conv, &job, num_seqs, 1, threads_for(num_threads, num_seqs));
    free(weight_t);
    return pak_profile_return(PAK_PROFILE_MIXERS, started, PAK_OK);
}

static void run_ssd(const void *ctx, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const pak_ssd_job *job = ctx;
    for (int64_t i = begin; i < end; ++i)
        PAK_MIX_PICK(ssd_head)(job, i / job->heads, i % job->heads);
}

int pak_ssd(const float *x, const float *dt, const float *A, const float *B, const float *C, const float *D,
            const float *dt_bias, float *state, float *y, int64_t num_tokens, int64_t heads, int64_t head_dim,
            int64_t groups, int64_t state_size, int64_t num_slots, const int32_t *query_start_loc,
            const int32_t *seq_lens, const int64_t *state_slots, int64_t num_seqs, float dt_min, float dt_max,
            int num_threads, int64_t *err_index)
{
    const int64_t started = pak_profile_begin();
    int64_t ignored;
    err_index = err_index ? err_index : &ignored;
    *err_index = -1;
    if (heads <= 0 || head_dim <= 0 || groups <= 0 || heads % groups || state_size <= 0 || !A || !D || !dt_bias
        || (num_slots > 0 && !state) || (num_tokens > 0 && (!x || !dt || !B || !C || !y))
        || isnan(dt_min) || isnan(dt_max) || dt_min > dt_max)
        return pak_profile_return(PAK_PROFILE_MIXERS, started, PAK_EINVAL);
    int rc = check_state_call(num_tokens, num_slots, query_start_loc, seq_lens, state_slots, num_seqs, err_index);
    if (rc != PAK_OK || num_seqs == 0)
        return pak_profile_return(PAK_PROFILE_MIXERS, started, rc);
    pak_ssd_job job = {x, dt, A, B, C, D, dt_bias, state, y, heads, head_dim, groups, state_size,
                       query_start_loc, seq_lens, state_slots, dt_min, dt_max};
    pak_pool_run(run_ssd, &job, num_seqs * heads, 1, threads_for(num_threads, num_seqs * heads));
    return pak_profile_return(PAK_PROFILE_MIXERS, started, PAK_OK);
}

static void run_delta(const void *ctx, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const pak_delta_job *job = ctx;
    float m[job->value_dim], d[job->value_dim];
    for (int64_t i = begin; i < end; ++i)
        PAK_MIX_PICK(delta_head)(job, i / job->value_heads, i % job->value_heads, m, d);
}

int pak_gated_delta(const float *q, const float *k, const float *v, const float *g, const float *beta,
                    float *state, float *o, int64_t num_tokens, int64_t key_heads, int64_t key_dim,
                    int64_t value_heads, int64_t value_dim, int64_t num_slots, const int32_t *query_start_loc,
                    const int32_t *seq_lens, const int64_t *state_slots, int64_t num_seqs, float scale,
                    int num_threads, int64_t *err_index)
{
    const int64_t started = pak_profile_begin();
    int64_t ignored;
    err_index = err_index ? err_index : &ignored;
    *err_index = -1;
    if (key_heads <= 0 || key_dim <= 0 || value_heads <= 0 || value_heads % key_heads || value_dim <= 0
        || value_dim > PAK_MAX_VALUE_DIM || !isfinite(scale) || (num_slots > 0 && !state)
        || (num_tokens > 0 && (!q || !k || !v || !g || !beta || !o)))
        return pak_profile_return(PAK_PROFILE_MIXERS, started, PAK_EINVAL);
    int rc = check_state_call(num_tokens, num_slots, query_start_loc, seq_lens, state_slots, num_seqs, err_index);
    if (rc != PAK_OK || num_seqs == 0)
        return pak_profile_return(PAK_PROFILE_MIXERS, started, rc);
    pak_delta_job job = {q, k, v, g, beta, state, o, key_heads, key_dim, value_heads, value_dim,
                         query_start_loc, seq_lens, state_slots, scale};
    pak_pool_run(run_delta, &job, num_seqs * value_heads, 1, threads_for(num_threads, num_seqs * value_heads));
    return pak_profile_return(PAK_PROFILE_MIXERS, started, PAK_OK);
}

static void run_mla(const void *ctx, int64_t begin, int64_t end, int worker)
{
    const pak_mla_job *job = ctx;
    float *a = job->scratch + worker * job->scratch_floats, *w = a + PAK_MLA_GROUP * job->size;
    for (int64_t i = begin; i < end; ++i) {
        const int64_t t = i / job->groups, h0 = i % job->groups * PAK_MLA_GROUP;
        const int64_t h1 = h0 + PAK_MLA_GROUP < job->heads ? h0 + PAK_MLA_GROUP : job->heads;
        PAK_MIX_PICK(mla_item)(job, t, job->token_seq[t], h0, h1, a, w);
    }
}

int pak_mla(const float *q_nope, const float *q_pe, const float *latent, const float *k_pe, const float *w_uk,
            const float *w_uv, float *cache, float *out, int64_t num_tokens, int64_t heads, int64_t nope,
            int64_t rope, int64_t size, int64_t v_dim, int64_t num_blocks, int64_t block_size,
            const int32_t *block_tables, int64_t max_blocks, const int64_t *slot_mapping, const int32_t *seq_lens,
            const int32_t *query_start_loc, int64_t num_seqs, float scale, int num_threads, int64_t *err_index)
{
    const int64_t started = pak_profile_begin();
    int64_t ignored;
    err_index = err_index ? err_index : &ignored;
    *err_index = -1;
    if (num_tokens < 0 || num_seqs < 0 || heads <= 0 || nope <= 0 || rope <= 0 || size <= 0 || v_dim <= 0
        || num_blocks < 0 || block_size <= 0 || max_blocks < 0 || !query_start_loc || !isfinite(scale)
        || !w_uk || !w_uv || (num_seqs > 0 && (!seq_lens || (max_blocks > 0 && !block_tables)))
        || (num_tokens > 0 && (!q_nope || !q_pe || !latent || !k_pe || !cache || !out || !slot_mapping)))
        return pak_profile_return(PAK_PROFILE_MIXERS, started, PAK_EINVAL);
    int rc = check_layout(num_tokens, query_start_loc, seq_lens, num_seqs, err_index);
    if (rc != PAK_OK)
        return pak_profile_return(PAK_PROFILE_MIXERS, started, rc);
    int64_t longest = 1;
    for (int64_t s = 0; s < num_seqs; ++s) {
        const int64_t blocks = ((int64_t)seq_lens[s] + block_size - 1) / block_size;
        *err_index = s;
        if (blocks > max_blocks)
            return pak_profile_return(PAK_PROFILE_MIXERS, started, PAK_EPARAM);
        for (int64_t b = 0; b < blocks; ++b)
            if (block_tables[s * max_blocks + b] < 0 || block_tables[s * max_blocks + b] >= num_blocks)
                return pak_profile_return(PAK_PROFILE_MIXERS, started, PAK_EINDEX);
        longest = seq_lens[s] > longest ? seq_lens[s] : longest;
    }
    for (int64_t t = 0; t < num_tokens; ++t) {
        if (slot_mapping[t] < 0 || slot_mapping[t] >= num_blocks * block_size) {
            *err_index = num_seqs + t;
            return pak_profile_return(PAK_PROFILE_MIXERS, started, PAK_EINDEX);
        }
    }
    *err_index = -1;
    if (num_tokens == 0)
        return pak_profile_return(PAK_PROFILE_MIXERS, started, PAK_OK);
    const int64_t groups = (heads + PAK_MLA_GROUP - 1) / PAK_MLA_GROUP;
    const int threads = threads_for(num_threads, num_tokens * groups);
    const int64_t stride = (longest + 15) / 16 * 16;
    const int64_t scratch_floats = PAK_MLA_GROUP * (size + stride);
    int64_t *token_seq = malloc((size_t)num_tokens * sizeof *token_seq);
    float *scratch = malloc((size_t)(threads * scratch_floats) * sizeof(float));
    if (!token_seq || !scratch) {
        free(token_seq);
        free(scratch);
        return pak_profile_return(PAK_PROFILE_MIXERS, started, PAK_ENOMEM);
    }
    for (int64_t s = 0; s < num_seqs; ++s)
        for (int64_t t = query_start_loc[s]; t < query_start_loc[s + 1]; ++t)
            token_seq[t] = s;
    const int64_t width = size + rope;
    for (int64_t t = 0; t < num_tokens; ++t) {
        memcpy(cache + slot_mapping[t] * width, latent + t * size, (size_t)size * sizeof(float));
        memcpy(cache + slot_mapping[t] * width + size, k_pe + t * rope, (size_t)rope * sizeof(float));
    }
    pak_mla_job job = {q_nope, q_pe, w_uk, w_uv, cache, out, scratch, heads, nope, rope, size, v_dim, block_size,
                       max_blocks, scratch_floats, stride, groups, block_tables, seq_lens, query_start_loc, token_seq,
                       scale};
    pak_pool_run(run_mla, &job, num_tokens * groups, 1, threads);
    free(token_seq);
    free(scratch);
    return pak_profile_return(PAK_PROFILE_MIXERS, started, PAK_OK);
}
