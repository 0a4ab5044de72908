/* Fused sampling mask (pyagent/sampling.h): argument checks, scratch memory and dispatch. */
#include <math.h>
#include <pthread.h>
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#include <immintrin.h> /* the AVX-512 variant of mask_impl.h uses a few intrinsics */
#endif
#include <float.h>
#include <stdint.h>
#include <stdlib.h>

#include "pyagent/common.h"
#include "pyagent/sampling.h"
#include "common/variant.h"
#include "sampling/vecmath.h"
#include "sampling/select.h"

/* Scratch of one thread, sized for one row and reused for each of its rows. */
typedef struct {
    uint32_t *keys; /* vocab + pak_num_blocks(vocab, PAK_BLOCK) entries: candidate keys */
    uint32_t *tmp;  /* as many: radix-sort buffer */
    double *w;      /* vocab entries: candidate weights */
    float *bmax;    /* pak_num_blocks(vocab, PAK_BLOCK) entries: per-block maxima */
    float *cval;    /* vocab + 16 entries: top-k candidate values */
    int32_t *cidx;  /* as many: their token ids */
} pak_scratch;

/* Where a row's kept tokens go when `on`: idx holds up to cap ids and val their logits; count is
 * how many, or -1 when they were not recorded (more than cap, or a row the mask did not write). */
typedef struct {
    int32_t *idx;
    float *val;
    int64_t cap;
    int64_t count;
    int on;
} pak_kept;

/* Threads per call are capped at PAK_MAX_THREADS and get at least PAK_LOGITS_PER_THREAD logits. */
#define PAK_MAX_THREADS 64
#define PAK_LOGITS_PER_THREAD (INT64_C(1) << 17)

/* Values per block of the block maxima of the top-p path. */
#define PAK_BLOCK 64

/* Most keys sorted by rank (mask_impl.h, rank_sort_desc); more go to pak_sort_desc. */
#define PAK_RANK_SORT_MAX 128

/* The top-k pass prefetches this many values ahead: the row usually comes from L3 or memory, and
 * its branches on candidates keep the hardware prefetcher from running far enough ahead. */
#define PAK_PREFETCH_AHEAD 2048

/* The top-k pass shrinks its candidate buffer when it holds more than pak_shrink_trigger(k) values,
 * down to about pak_shrink_most(k) of them (ties permitting). */
static int64_t pak_shrink_trigger(int64_t k)
{
    return 2 * k + 64;
}

static int64_t pak_shrink_most(int64_t k)
{
    return k + k / 4 + 8;
}

#define PAK_IMPL "sampling/mask_impl.h"
#include "common/variants.h"

typedef int (*pak_row_fn)(float *restrict, int64_t, float, int32_t, float, float, int, const pak_scratch *,
                          pak_kept *);

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
    int32_t *kept, *kept_count;
    float *kept_values;
    int64_t kept_cap;
    pak_row_fn row_fn;
    int on_caller; /* runs on the calling thread (uses its cached scratch) */
    int rc;
    int64_t err_row;
} pak_job;

static void scratch_free(pak_scratch *sc)
{
    free(sc->keys);
    free(sc->tmp);
    free(sc->w);
    free(sc->bmax);
    free(sc->cval);
    free(sc->cidx);
    *sc = (pak_scratch){0};
}

/* Allocate scratch for rows of n values; PAK_ENOMEM (and nothing held) on failure. */
static int scratch_alloc(pak_scratch *sc, int64_t n)
{
    const size_t nb = (size_t)pak_num_blocks(n, PAK_BLOCK);
    /* the keys also hold the block maxima, which can outnumber the values of a short row */
    sc->keys = malloc(((size_t)n + nb) * sizeof *sc->keys);
    sc->tmp = malloc(((size_t)n + nb) * sizeof *sc->tmp);
    sc->w = malloc((size_t)n * sizeof *sc->w + 1);
    sc->bmax = malloc(nb * sizeof *sc->bmax);
    sc->cval = malloc(((size_t)n + 16) * sizeof *sc->cval);
    sc->cidx = malloc(((size_t)n + 16) * sizeof *sc->cidx);
    if (sc->keys && sc->tmp && sc->w && sc->bmax && sc->cval && sc->cidx)
        return PAK_OK;
    scratch_free(sc);
    return PAK_ENOMEM;
}

/* The calling thread keeps its scratch between calls (one vocabulary size at a time), so a call
 * on it allocates nothing; worker threads allocate their own. */
static __thread pak_scratch cached_scratch;
static __thread int64_t cached_vocab = -1;

static void *run_job(void *arg)
{
    pak_job *job = arg;
    pak_scratch own = {0};
    pak_scratch *sc = &own;
    if (job->on_caller) {
        if (cached_vocab != job->vocab) {
            scratch_free(&cached_scratch);
            cached_vocab = scratch_alloc(&cached_scratch, job->vocab) == PAK_OK ? job->vocab : -1;
        }
        sc = &cached_scratch;
        job->rc = cached_vocab == job->vocab ? PAK_OK : PAK_ENOMEM;
    } else {
        job->rc = scratch_alloc(sc, job->vocab);
    }
    job->err_row = job->rc == PAK_OK ? -1 : job->row_begin;
    for (int64_t r = job->row_begin; r < job->row_end && job->rc == PAK_OK; ++r) {
        pak_kept kept = {job->kept ? job->kept + r * job->kept_cap : NULL,
                         job->kept_values ? job->kept_values + r * job->kept_cap : NULL, job->kept_cap, -1,
                         job->kept_count != NULL};
        job->rc = job->row_fn(job->logits + r * job->vocab, job->vocab,
                              job->temperature ? job->temperature[r] : 1.0f, job->top_k ? job->top_k[r] : 0,
                              job->top_p ? job->top_p[r] : 1.0f, job->min_p ? job->min_p[r] : 0.0f,
                              job->t_last, sc, &kept);
        if (job->kept_count)
            job->kept_count[r] = (int32_t)(job->rc == PAK_OK ? kept.count : -1);
        if (job->rc != PAK_OK)
            job->err_row = r;
    }
    if (!job->on_caller)
        scratch_free(sc);
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
                                    num_threads, NULL, NULL, NULL, 0, err_row);
}

int pak_sampling_mask_ex_f32(float *logits, int64_t num_rows, int64_t vocab,
                             const float *temperature, const int32_t *top_k,
                             const float *top_p, const float *min_p, int flags, int num_threads,
                             int32_t *kept, float *kept_values, int32_t *kept_count,
                             int64_t kept_capacity, int64_t *err_row)
{
    if (err_row)
        *err_row = -1;
    if (num_rows < 0 || vocab < 0 || vocab > INT32_MAX || (num_rows > 0 && vocab > 0 && !logits)
        || (flags & ~PAK_MASK_TEMPERATURE_LAST) || kept_capacity < 0 || kept_capacity > INT32_MAX
        || ((kept || kept_values) && !kept_count)
        || (kept_count && kept_capacity > 0 && (!kept || !kept_values)))
        return PAK_EINVAL;
    const int64_t bad = first_bad_param_row(num_rows, temperature, top_p, min_p);
    if (bad >= 0) {
        if (err_row)
            *err_row = bad;
        return PAK_EPARAM;
    }
    if (num_rows == 0)
        return PAK_OK;
    if (vocab == 0) {
        for (int64_t r = 0; kept_count && r < num_rows; ++r)
            kept_count[r] = 0;
        return PAK_OK;
    }
    const int count = thread_count(num_threads, num_rows, vocab);
    pak_job jobs[PAK_MAX_THREADS];
    pthread_t threads[PAK_MAX_THREADS];
    int started[PAK_MAX_THREADS] = {0};
    for (int i = 0; i < count; ++i) {
        jobs[i] = (pak_job){logits, vocab, num_rows * i / count, num_rows * (i + 1) / count,
                            temperature, top_p, min_p, top_k, (flags & PAK_MASK_TEMPERATURE_LAST) != 0,
                            kept, kept_count, kept_values, kept_capacity, pick_row_fn(), i == 0, PAK_OK, -1};
        if (i > 0)
            started[i] = pthread_create(&threads[i], NULL, run_job, &jobs[i]) == 0;
    }
    run_job(&jobs[0]);
    for (int i = 1; i < count; ++i) {
        if (started[i])
            pthread_join(threads[i], NULL);
        else
            run_job(&jobs[i]); /* the thread could not be started: do its rows here (own scratch) */
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
