/* Batched LoRA across adapters (pyagent/lora.h): the rows grouped by slot, then every group's
 * shrink and expand, spread over the helper threads of common/pool.h.
 *
 * A call sorts the row indices by slot (a stable counting sort into `order`), so each adapter's
 * rows form one group whatever order they came in; the shrink then runs per (group, slice), DOTS rows
 * of A against each input row at once, and the expand per (group, slice, block of COLUMNS outputs),
 * the block's sums in registers over the rank and its B values staying in L1 while every row of the
 * group passes. Every row is computed by itself in the order the header documents, so grouping and
 * threads change no bit.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pyagent/common.h"
#include "pyagent/lora.h"
#include "common/bf16.h"
#include "common/lanes.h"
#include "common/pool.h"
#include "common/profile.h"
#include "common/variant.h"

#if PAK_X86_VARIANTS
#include <immintrin.h>
#endif

#define LANES 16
#define DOTS 4               /* rows of A summed at once against one input row (independent FMA chains) */
#define COLUMNS 128          /* outputs per expand item, their sums held in registers */
#define STACK_SLOTS 64       /* up to this many slots (and expand blocks), the grouping needs no malloc */
#define MIN_WORK (1 << 16)   /* multiply-adds per helper thread below which a phase runs on its caller */

/* The rows order[begin .. end) of one slot. */
typedef struct {
    int64_t slot, begin, end;
} lora_group;

/* Columns [c0, c1) of slice k: one expand block. */
typedef struct {
    int64_t k, c0, c1;
} lora_block;

typedef struct lora_job lora_job;

struct lora_job {
    const void *x;
    void *y;
    int bf16;
    int64_t in, out, slices, max_rank;
    const void *a, *b;
    const float *scales;
    const int32_t *ranks;
    float *u;
    const int32_t *order;
    const lora_group *groups;
    int64_t num_groups;
    const lora_block *blocks;
    int64_t num_blocks;
    void (*shrink)(const lora_job *job, const lora_group *group, int64_t k);
    void (*expand)(const lora_job *job, const lora_group *group, int64_t k, int64_t c0, int64_t c1);
};

/* 16 fused multiply-adds c + a * b, one rounding each, per variant: the portable one lane by lane
 * (fmaf), the x86 ones as two 8-lane or one 16-lane instruction (the same bits). */
typedef float lora_v16 __attribute__((vector_size(64)));

static inline lora_v16 fma16_generic(lora_v16 a, lora_v16 b, lora_v16 c)
{
    for (int l = 0; l < LANES; ++l)
        c[l] = fmaf(a[l], b[l], c[l]);
    return c;
}

#if PAK_X86_VARIANTS
__attribute__((target("avx2,fma"))) static inline lora_v16 fma16_avx2(lora_v16 a, lora_v16 b, lora_v16 c)
{
    __m256 lo[3], hi[3];
    memcpy(lo, &a, 32), memcpy(hi, (char *)&a + 32, 32);
    memcpy(lo + 1, &b, 32), memcpy(hi + 1, (char *)&b + 32, 32);
    memcpy(lo + 2, &c, 32), memcpy(hi + 2, (char *)&c + 32, 32);
    lo[2] = _mm256_fmadd_ps(lo[0], lo[1], lo[2]);
    hi[2] = _mm256_fmadd_ps(hi[0], hi[1], hi[2]);
    memcpy(&c, lo + 2, 32), memcpy((char *)&c + 32, hi + 2, 32);
    return c;
}

__attribute__((target("avx512f"))) static inline lora_v16 fma16_avx512(lora_v16 a, lora_v16 b, lora_v16 c)
{
    return (lora_v16)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
}
#endif

#define PAK_AVX2_FMA
#define PAK_IMPL "lora/lora_impl.h"
#include "common/variants.h"

/* Whether slot s's adapter touches slice k. */
static inline int active(const lora_job *job, int64_t s, int64_t k)
{
    return job->ranks[s * job->slices + k] > 0 && job->scales[s * job->slices + k] != 0.0f;
}

static void run_shrink(const void *ctx, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const lora_job *job = ctx;
    for (int64_t i = begin; i < end; ++i) {
        const lora_group *group = &job->groups[i / job->slices];
        const int64_t k = i % job->slices;
        if (active(job, group->slot, k))
            job->shrink(job, group, k);
    }
}

static void run_expand(const void *ctx, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const lora_job *job = ctx;
    for (int64_t i = begin; i < end; ++i) {
        const lora_group *group = &job->groups[i / job->num_blocks];
        const lora_block *block = &job->blocks[i % job->num_blocks];
        if (active(job, group->slot, block->k))
            job->expand(job, group, block->k, block->c0, block->c1);
    }
}

static void pick_variant(lora_job *job)
{
    job->shrink = shrink_generic;
    job->expand = expand_generic;
#if PAK_X86_VARIANTS
    if (pak_isa_active() == PAK_ISA_AVX512) {
        job->shrink = shrink_avx512;
        job->expand = expand_avx512;
    } else if (pak_isa_active() == PAK_ISA_AVX2) {
        job->shrink = shrink_avx2;
        job->expand = expand_avx2;
    }
#endif
}

/* Threads for a phase of `work` multiply-adds. */
static int threads_for(int64_t work, int threads)
{
    const int64_t useful = work / MIN_WORK;
    return useful < 1 ? 1 : useful < threads ? (int)useful : threads;
}

static int check(const void *x, const void *y, int dtype, const int32_t *slots, int64_t rows, int64_t in, int64_t out,
                 const void *a, const void *b, const float *scales, const int32_t *ranks, const int64_t *starts,
                 int64_t slices, int64_t max_loras, int64_t max_rank, const float *u, const int32_t *order)
{
    if ((dtype != PAK_LORA_F32 && dtype != PAK_LORA_BF16) || rows < 0 || in < 0 || out < 0 || slices < 1
        || max_loras < 0 || max_rank < 0 || starts == NULL)
        return PAK_EINVAL;
    if (rows > 0 && (x == NULL || y == NULL || slots == NULL || u == NULL || order == NULL))
        return PAK_EINVAL;
    if (max_loras > 0 && (scales == NULL || ranks == NULL || (max_rank > 0 && (a == NULL || b == NULL))))
        return PAK_EINVAL;
    if (starts[0] != 0 || starts[slices] != out)
        return PAK_EINVAL;
    for (int64_t k = 0; k < slices; ++k)
        if (starts[k + 1] < starts[k])
            return PAK_EINVAL;
    for (int64_t t = 0; t < rows; ++t)
        if (slots[t] < -1 || slots[t] >= max_loras)
            return PAK_EINDEX;
    for (int64_t i = 0; i < max_loras * slices; ++i)
        if (ranks[i] < 0 || ranks[i] > max_rank || !isfinite(scales[i]))
            return PAK_EPARAM;
    return PAK_OK;
}

int pak_lora_apply(const void *x, void *y, int dtype, const int32_t *slots, int64_t rows, int64_t in, int64_t out,
                   const void *a, const void *b, const float *scales, const int32_t *ranks, const int64_t *starts,
                   int64_t slices, int64_t max_loras, int64_t max_rank, float *u, int32_t *order, int threads)
{
    const int64_t started = pak_profile_begin();
    const int rc = check(x, y, dtype, slots, rows, in, out, a, b, scales, ranks, starts, slices, max_loras, max_rank,
                         u, order);
    if (rc != PAK_OK)
        return pak_profile_return(PAK_PROFILE_LORA, started, rc);
    if (rows == 0 || max_loras == 0 || max_rank == 0 || out == 0)
        return pak_profile_return(PAK_PROFILE_LORA, started, PAK_OK);
    int64_t num_blocks = 0;
    for (int64_t k = 0; k < slices; ++k)
        num_blocks += (starts[k + 1] - starts[k] + COLUMNS - 1) / COLUMNS;
    const int64_t max_groups = max_loras < rows ? max_loras : rows;
    int64_t stack_count[STACK_SLOTS + 1];
    lora_group stack_groups[STACK_SLOTS];
    lora_block stack_blocks[STACK_SLOTS];
    const int small = max_loras <= STACK_SLOTS && num_blocks <= STACK_SLOTS;
    int64_t *count = small ? stack_count : malloc(((size_t)max_loras + 1) * sizeof *count);
    lora_group *groups = small ? stack_groups : malloc((size_t)max_groups * sizeof *groups);
    lora_block *blocks = small ? stack_blocks : malloc((size_t)num_blocks * sizeof *blocks);
    if (count == NULL || groups == NULL || blocks == NULL) {
        free(count);
        free(groups);
        free(blocks);
        return pak_profile_return(PAK_PROFILE_LORA, started, PAK_ENOMEM);
    }
    memset(count, 0, ((size_t)max_loras + 1) * sizeof *count);
    /* Stable counting sort of the rows that use a slot, by slot. */
    for (int64_t t = 0; t < rows; ++t)
        if (slots[t] >= 0)
            ++count[slots[t] + 1];
    int64_t num_groups = 0;
    for (int64_t s = 0; s < max_loras; ++s) {
        if (count[s + 1] > 0)
            groups[num_groups++] = (lora_group){s, count[s], count[s] + count[s + 1]};
        count[s + 1] += count[s];
    }
    for (int64_t t = 0; t < rows; ++t)
        if (slots[t] >= 0)
            order[count[slots[t]]++] = (int32_t)t;
    int64_t n = 0;
    for (int64_t k = 0; k < slices; ++k)
        for (int64_t c = starts[k]; c < starts[k + 1]; c += COLUMNS)
            blocks[n++] = (lora_block){k, c, c + COLUMNS < starts[k + 1] ? c + COLUMNS : starts[k + 1]};
    lora_job job = {x, y, dtype == PAK_LORA_BF16, in, out, slices, max_rank, a, b, scales, ranks, u, order,
                    groups, num_groups, blocks, num_blocks, NULL, NULL};
    pick_variant(&job);
    int64_t shrink_work = 0, expand_work = 0;
    for (int64_t g = 0; g < num_groups; ++g)
        for (int64_t k = 0; k < slices; ++k)
            if (active(&job, groups[g].slot, k)) {
                const int64_t r = ranks[groups[g].slot * slices + k], size = groups[g].end - groups[g].begin;
                shrink_work += size * r * in;
                expand_work += size * r * (starts[k + 1] - starts[k]);
            }
    if (shrink_work > 0) {
        pak_pool_run(run_shrink, &job, num_groups * slices, 1, threads_for(shrink_work, threads));
        pak_pool_run(run_expand, &job, num_groups * num_blocks, 1, threads_for(expand_work, threads));
    }
    if (!small) {
        free(count);
        free(groups);
        free(blocks);
    }
    return pak_profile_return(PAK_PROFILE_LORA, started, PAK_OK);
}
