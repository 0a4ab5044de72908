/* Fused sampling mask (pyagent/sampling.h): argument checks, scratch memory and dispatch. */
#include <math.h>
#include <pthread.h>
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#include <immintrin.h> /* the AVX-512 variant of mask_impl.h uses a few intrinsics */
#endif
#include <stdint.h>
#include <stdlib.h>

#include "pyagent/common.h"
#include "pyagent/sampling.h"
#include "common/variant.h"
#include "sampling/vecmath.h"
#include "sampling/select.h"

/* Scratch of one thread, sized for one row and reused for each of its rows. */
typedef struct {
    uint32_t *keys; /* vocab + pak_num_blocks(vocab, 16) entries: candidate keys */
    uint32_t *tmp;  /* as many: radix-sort buffer */
    double *w;      /* vocab entries: candidate weights */
    float *bmax;    /* pak_num_blocks(vocab, 16) entries: per-block maxima */
} pak_scratch;

/* Threads per call are capped at PAK_MAX_THREADS and get at least PAK_LOGITS_PER_THREAD logits. */
#define PAK_MAX_THREADS 64
#define PAK_LOGITS_PER_THREAD (INT64_C(1) << 17)

/* Values per block of the block maxima: 64, or fewer (down to 16) so that top-k has about 4k
 * blocks; the top-k prefilter needs at least k of them. */
static int64_t pak_block_size(int64_t n, int64_t k)
{
    int64_t blk = 64;
    while (blk > 16 && k > 0 && (n + blk - 1) / blk < 4 * k)
        blk /= 2;
    return blk;
}

#define PAK_IMPL "sampling/mask_impl.h"
#include "common/variants.h"

typedef int (*pak_row_fn)(float *restrict, int64_t, float, int32_t, float, float, int, const pak_scratch *);

static pak_row_fn pick_row_fn(void)
{
    switch (pak_isa_active()) {
#if PAK_X86_VARIANTS
    case PAK_ISA_AVX512:
        return mask_row_avx512;
    case PAK_ISA_AVX2:
        return mask_row_avx2;
#endif
    default:
        return mask_row_generic;
    }
}

/* First row whose parameters are out of range, or -1. */
static int64_t first_bad_param_row(int64_t num_rows, const float *temperature, const float *top_p,
                                   const float *min_p)
{
    for (int64_t r = 0; r < num_rows; ++r) {
        if (temperature && !isfinite(temperature[r]))
            return r;
        if (top_p && !(top_p[r] >= 0.0f && top_p[r] <= 1.0f))
            return r;
        if (min_p && !(min_p[r] >= 0.0f && min_p[r] <= 1.0f))
            return r;
    }
    return -1;
}

/* A contiguous range of rows for one thread; rc and err_row report its first failure. */
typedef struct {
    float *logits;
    int64_t vocab, row_begin, row_end;
    const float *temperature, *top_p, *min_p;
    const int32_t *top_k;
    int t_last;
    pak_row_fn row_fn;
    int rc;
    int64_t err_row;
} pak_job;

static void *run_job(void *arg)
{
    pak_job *job = arg;
    const size_t n = (size_t)job->vocab;
    pak_scratch sc;
    /* the keys also hold the block maxima, which can outnumber the values of a short row */
    const size_t nkeys = n + (size_t)pak_num_blocks(job->vocab, 16);
    sc.keys = malloc(nkeys * sizeof *sc.keys);
    sc.tmp = malloc(nkeys * sizeof *sc.tmp);
    sc.w = malloc(n * sizeof *sc.w);
    sc.bmax = malloc((size_t)pak_num_blocks(job->vocab, 16) * sizeof *sc.bmax);
    job->rc = (sc.keys && sc.tmp && sc.w && sc.bmax) ? PAK_OK : PAK_ENOMEM;
    job->err_row = job->rc == PAK_OK ? -1 : job->row_begin;
    for (int64_t r = job->row_begin; r < job->row_end && job->rc == PAK_OK; ++r) {
        job->rc = job->row_fn(job->logits + r * job->vocab, job->vocab,
                              job->temperature ? job->temperature[r] : 1.0f, job->top_k ? job->top_k[r] : 0,
                              job->top_p ? job->top_p[r] : 1.0f, job->min_p ? job->min_p[r] : 0.0f, job->t_last, &sc);
        if (job->rc != PAK_OK)
            job->err_row = r;
    }
    free(sc.keys);
    free(sc.tmp);
    free(sc.w);
    free(sc.bmax);
    return NULL;
}

/* Threads for a call: at most num_threads, PAK_MAX_THREADS, one per row, and one per
 * PAK_LOGITS_PER_THREAD logits. */
static int thread_count(int num_threads, int64_t num_rows, int64_t vocab)
{
    int64_t t = num_threads < 1 ? 1 : num_threads;
    t = t < PAK_MAX_THREADS ? t : PAK_MAX_THREADS;
    t = t < num_rows ? t : num_rows;
    const int64_t by_work = num_rows * vocab / PAK_LOGITS_PER_THREAD;
    t = t < by_work ? t : by_work;
    return t < 1 ? 1 : (int)t;
}

int pak_sampling_mask_f32(float *logits, int64_t num_rows, int64_t vocab,
                          const float *temperature, const int32_t *top_k,
                          const float *top_p, const float *min_p, int num_threads, int64_t *err_row)
{
    return pak_sampling_mask_ex_f32(logits, num_rows, vocab, temperature, top_k, top_p, min_p, 0,
                                    num_threads, err_row);
}

int pak_sampling_mask_ex_f32(float *logits, int64_t num_rows, int64_t vocab,
                             const float *temperature, const int32_t *top_k,
                             const float *top_p, const float *min_p, int flags, int num_threads,
                             int64_t *err_row)
{
    if (err_row)
        *err_row = -1;
    if (num_rows < 0 || vocab < 0 || vocab > INT32_MAX || (num_rows > 0 && vocab > 0 && !logits)
        || (flags & ~PAK_MASK_TEMPERATURE_LAST))
        return PAK_EINVAL;
    const int64_t bad = first_bad_param_row(num_rows, temperature, top_p, min_p);
    if (bad >= 0) {
        if (err_row)
            *err_row = bad;
        return PAK_EPARAM;
    }
    if (num_rows == 0 || vocab == 0)
        return PAK_OK;
    const int count = thread_count(num_threads, num_rows, vocab);
    pak_job jobs[PAK_MAX_THREADS];
    pthread_t threads[PAK_MAX_THREADS];
    int started[PAK_MAX_THREADS] = {0};
    for (int i = 0; i < count; ++i) {
        jobs[i] = (pak_job){logits, vocab, num_rows * i / count, num_rows * (i + 1) / count,
                            temperature, top_p, min_p, top_k, (flags & PAK_MASK_TEMPERATURE_LAST) != 0,
                            pick_row_fn(), PAK_OK, -1};
        if (i > 0)
            started[i] = pthread_create(&threads[i], NULL, run_job, &jobs[i]) == 0;
    }
    run_job(&jobs[0]);
    for (int i = 1; i < count; ++i) {
        if (started[i])
            pthread_join(threads[i], NULL);
        else
            run_job(&jobs[i]); /* the thread could not be started: do its rows here */
    }
    /* Each job stops at its first failure, so the lowest failing job holds the first failing row. */
    for (int i = 0; i < count; ++i) {
        if (jobs[i].rc != PAK_OK) {
            if (err_row)
                *err_row = jobs[i].err_row;
            return jobs[i].rc;
        }
    }
    return PAK_OK;
}
