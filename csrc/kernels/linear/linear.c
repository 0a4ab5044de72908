/* Batch-invariant linear layers (pyagent/linear.h): the fixed summation order, its instruction-set
 * variants, the tiling, and a small persistent pool of helper threads.
 *
 * The order: 16 float32 lanes. float32 rows are read in chunks of 16; lane j adds x[c + j] * w[c + j]
 * with a fused multiply-add. bfloat16 rows are read in chunks of 32; lane j adds the product of
 * elements 2j + 1, then of 2j (the order of the AVX-512 BF16 dot-product instruction). A short last
 * chunk is padded with zeros. The lanes are then summed as (j, j + 8), (j, j + 4), (j, j + 2), (0, 1).
 * Every variant below computes exactly this, whatever the tile shape, so tiling and threads never
 * change a result.
 */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pyagent/common.h"
#include "pyagent/linear.h"
#include "common/variant.h"

#if PAK_X86_VARIANTS
#include <immintrin.h>
#endif

#define LANES 16
#define MR 4          /* input rows per tile */
#define NR 4          /* weight rows per tile */
#define NB 64         /* weight rows kept in cache while every input row passes over them */
#define MAX_THREADS 64
#define SPIN_ROUNDS 30000

/* ---------------------------------------------------------------------------------------------
 * Scalar helpers and the portable variant. */

static inline float bf16_to_f32(uint16_t h)
{
    const uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((bits >> 16) | 0x40u); /* NaN stays a (quiet) NaN */
    bits += 0x7fffu + ((bits >> 16) & 1u);     /* round to nearest, ties to even */
    return (uint16_t)(bits >> 16);
}

static inline float reduce_lanes(const float *lane)
{
    float a[8], b[4], c[2];
    for (int i = 0; i < 8; ++i)
        a[i] = lane[i] + lane[i + 8];
    for (int i = 0; i < 4; ++i)
        b[i] = a[i] + a[i + 4];
    for (int i = 0; i < 2; ++i)
        c[i] = b[i] + b[i + 2];
    return c[0] + c[1];
}

static float dot_f32_generic(const float *x, const float *w, int64_t k)
{
    float lane[LANES] = {0};
    for (int64_t c = 0; c < k; c += LANES)
        for (int j = 0; j < LANES; ++j) {
            const int64_t i = c + j;
            lane[j] = i < k ? fmaf(x[i], w[i], lane[j]) : lane[j] + 0.0f;
        }
    return reduce_lanes(lane);
}

static float dot_bf16_generic(const uint16_t *x, const uint16_t *w, int64_t k)
{
    float lane[LANES] = {0};
    for (int64_t c = 0; c < k; c += 2 * LANES)
        for (int j = 0; j < LANES; ++j)
            for (int64_t i = c + 2 * j + 1; i >= c + 2 * j; --i)
                lane[j] = i < k ? fmaf(bf16_to_f32(x[i]), bf16_to_f32(w[i]), lane[j]) : lane[j] + 0.0f;
    return reduce_lanes(lane);
}

/* What one call computes; each thread takes a range of weight rows. */
typedef struct {
    const void *x;
    const void *w;
    void *y;
    int64_t rows, out, in;
    int y_f32; /* bfloat16 inputs: 1 stores float32 sums, 0 rounds them to bfloat16 */
    void (*run)(const void *job, int64_t n0, int64_t n1);
} linear_job;

static void run_f32_generic(const void *arg, int64_t n0, int64_t n1)
{
    const linear_job *job = arg;
    const float *x = job->x, *w = job->w;
    float *y = job->y;
    for (int64_t m = 0; m < job->rows; ++m)
        for (int64_t n = n0; n < n1; ++n)
            y[m * job->out + n] = dot_f32_generic(x + m * job->in, w + n * job->in, job->in);
}

/* Store one bfloat16-input result as the job asks: float32, or rounded to bfloat16. */
static inline void store_bf16_result(const linear_job *job, int64_t index, float value)
{
    if (job->y_f32)
        ((float *)job->y)[index] = value;
    else
        ((uint16_t *)job->y)[index] = f32_to_bf16(value);
}

static void run_bf16_generic(const void *arg, int64_t n0, int64_t n1)
{
    const linear_job *job = arg;
    const uint16_t *x = job->x, *w = job->w;
    for (int64_t m = 0; m < job->rows; ++m)
        for (int64_t n = n0; n < n1; ++n)
            store_bf16_result(job, m * job->out + n, dot_bf16_generic(x + m * job->in, w + n * job->in, job->in));
}

/* ---------------------------------------------------------------------------------------------
 * AVX-512 variants: an MR x NR tile of accumulators over weight rows streamed once per input tile. */
#if PAK_X86_VARIANTS

#define AVX512 "avx512f,avx512bw,avx512dq,avx512vl"
#define TILE_INLINE static inline __attribute__((always_inline))

__attribute__((target(AVX512))) TILE_INLINE float reduce512(__m512 v)
{
    const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

/* One step of the bfloat16 order on 32 elements held as 16 dwords, without the BF16 instruction:
 * the odd element of each pair (high half of the dword), then the even one (low half). */
__attribute__((target(AVX512))) TILE_INLINE __m512 step_bf16_emulated(__m512 acc, __m512i x, __m512i w)
{
    const __m512i high = _mm512_set1_epi32((int)0xffff0000u);
    acc = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(x, high)),
                          _mm512_castsi512_ps(_mm512_and_si512(w, high)), acc);
    return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(x, 16)),
                           _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), acc);
}

__attribute__((target(AVX512 ",avx512bf16"))) TILE_INLINE __m512 step_bf16_native(__m512 acc, __m512i x, __m512i w)
{
    return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)w);
}

/* DEFINE_TILE(name, isa, elem, per_chunk, mask_t, load_full, load_tail, step, store): an mr x nr tile (compile-time sizes after
 * inlining) of y = x w^T over the whole inner dimension, the tail chunk loaded with a mask. */
#define DEFINE_TILE(name, isa, elem, per_chunk, mask_t, load_full, load_tail, step, store)          \
    __attribute__((target(isa))) TILE_INLINE void name(const linear_job *job, const elem *x,        \
                                                          const elem *w, int64_t y0, int mr, int nr)  \
    {                                                                                                  \
        const int64_t in = job->in;                                                                    \
        __m512 acc[MR][NR];                                                                            \
        for (int i = 0; i < mr; ++i)                                                                   \
            for (int j = 0; j < nr; ++j)                                                               \
                acc[i][j] = _mm512_setzero_ps();                                                       \
        int64_t c = 0;                                                                                 \
        for (; c + (per_chunk) <= in; c += (per_chunk)) {                                              \
            __m512i xv[MR], wv[NR];                                                                    \
            for (int i = 0; i < mr; ++i)                                                               \
                xv[i] = load_full(x + i * in + c);                                                     \
            for (int j = 0; j < nr; ++j) {                                                             \
                wv[j] = load_full(w + j * in + c);                                                     \
                _mm_prefetch((const char *)(w + (j + nr) * in + c), _MM_HINT_T0);                      \
            }                                                                                          \
            for (int i = 0; i < mr; ++i)                                                               \
                for (int j = 0; j < nr; ++j)                                                           \
                    acc[i][j] = step(acc[i][j], xv[i], wv[j]);                                         \
        }                                                                                              \
        if (c < in) {                                                                                  \
            const mask_t mask = (mask_t)((((uint64_t)1) << (in - c)) - 1);                             \
            __m512i xv[MR], wv[NR];                                                                    \
            for (int i = 0; i < mr; ++i)                                                               \
                xv[i] = load_tail(mask, x + i * in + c);                                               \
            for (int j = 0; j < nr; ++j)                                                               \
                wv[j] = load_tail(mask, w + j * in + c);                                               \
            for (int i = 0; i < mr; ++i)                                                               \
                for (int j = 0; j < nr; ++j)                                                           \
                    acc[i][j] = step(acc[i][j], xv[i], wv[j]);                                         \
        }                                                                                              \
        for (int i = 0; i < mr; ++i)                                                                   \
            for (int j = 0; j < nr; ++j)                                                               \
                store(job, y0 + i * job->out + j, reduce512(acc[i][j]));                               \
    }

#define LOAD_F32(p) _mm512_castps_si512(_mm512_loadu_ps(p))
#define LOAD_F32_TAIL(m, p) _mm512_castps_si512(_mm512_maskz_loadu_ps((m), (p)))
#define LOAD_16(p) _mm512_loadu_si512((const void *)(p))
#define LOAD_16_TAIL(m, p) _mm512_maskz_loadu_epi16((m), (p))
#define STEP_F32(acc, x, w) _mm512_fmadd_ps(_mm512_castsi512_ps(x), _mm512_castsi512_ps(w), (acc))
#define STORE_F32(job, index, v) (((float *)(job)->y)[index] = (v))

DEFINE_TILE(tile_f32, AVX512, float, LANES, __mmask16, LOAD_F32, LOAD_F32_TAIL, STEP_F32, STORE_F32)
DEFINE_TILE(tile_bf16_emulated, AVX512, uint16_t, 2 * LANES, __mmask32, LOAD_16, LOAD_16_TAIL,
            step_bf16_emulated, store_bf16_result)
DEFINE_TILE(tile_bf16_native, AVX512 ",avx512bf16", uint16_t, 2 * LANES, __mmask32, LOAD_16, LOAD_16_TAIL,
            step_bf16_native, store_bf16_result)

/* The driver: weight rows in blocks of NB; every input tile passes over a block while it is cached.
 * The switch gives the tile function constant sizes so its accumulators live in registers. */
#define DEFINE_RUN(name, isa, elem, tile)                                                           \
    __attribute__((target(isa))) static void name(const void *arg, int64_t n0, int64_t n1)          \
    {                                                                                                  \
        const linear_job *job = arg;                                                                   \
        const elem *x = job->x, *w = job->w;                                                           \
        const int64_t in = job->in, out = job->out;                                                    \
        for (int64_t nb = n0; nb < n1; nb += NB) {                                                     \
            const int64_t ne = nb + NB < n1 ? nb + NB : n1;                                            \
            for (int64_t m = 0; m < job->rows; m += MR) {                                              \
                const int64_t mr = job->rows - m < MR ? job->rows - m : MR;                            \
                const elem *xm = x + m * in;                                                           \
                for (int64_t n = nb; n < ne;) {                                                        \
                    const int full = ne - n >= NR;                                                     \
                    const elem *wn = w + n * in;                                                       \
                    const int64_t yt = m * out + n;                                                    \
                    switch (mr * 2 + full) {                                                           \
                    case 2: tile(job, xm, wn, yt, 1, 1); break;                                    \
                    case 3: tile(job, xm, wn, yt, 1, NR); break;                                   \
                    case 4: tile(job, xm, wn, yt, 2, 1); break;                                    \
                    case 5: tile(job, xm, wn, yt, 2, NR); break;                                   \
                    case 6: tile(job, xm, wn, yt, 3, 1); break;                                    \
                    case 7: tile(job, xm, wn, yt, 3, NR); break;                                   \
                    case 8: tile(job, xm, wn, yt, 4, 1); break;                                    \
                    default: tile(job, xm, wn, yt, 4, NR); break;                                  \
                    }                                                                                  \
                    n += full ? NR : 1;                                                                \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
    }

DEFINE_RUN(run_f32_avx512, AVX512, float, tile_f32)
DEFINE_RUN(run_bf16_avx512, AVX512, uint16_t, tile_bf16_emulated)
DEFINE_RUN(run_bf16_native, AVX512 ",avx512bf16", uint16_t, tile_bf16_native)

#endif /* PAK_X86_VARIANTS */

int pak_linear_bf16_native(void)
{
#if PAK_X86_VARIANTS
    __builtin_cpu_init();
    return pak_isa_active() == PAK_ISA_AVX512 && __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

/* ---------------------------------------------------------------------------------------------
 * The helper threads. One call at a time uses them (a concurrent call from another thread runs on
 * its caller alone). A call publishes its job, wakes the helpers, and then the caller and every
 * helper that is awake claim chunks of NB weight rows from one counter until none are left; the
 * caller waits only for chunks that were claimed, so a helper the OS does not schedule costs at
 * most one chunk, never the whole call. Helpers spin for a while between calls (decode steps come
 * back to back), then sleep.
 *
 * The counter `ticket` holds the call's generation (high 32 bits) and the next chunk (low 32 bits).
 * A claim is a compare-and-swap that keeps the generation, so a helper that wakes late cannot claim
 * a chunk of a later call with the job it read for an earlier one; and a successful claim means the
 * call is not finished (its chunk is not done), so the job it reads after claiming is still there. */

static struct {
    pthread_mutex_t busy;  /* held by the call using the helpers */
    pthread_mutex_t lock;  /* guards sleeping */
    pthread_cond_t wake;
    atomic_uint generation;
    _Atomic uint64_t ticket;
    atomic_int sleepers;
    atomic_int done;       /* chunks of the current call finished */
    int helpers;           /* helpers running in this process (reset in a child after fork) */
    unsigned born[MAX_THREADS]; /* the generation each helper was started in */
    const linear_job *job;
    int64_t chunks;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Claim and run chunks of call `generation` until none are left. */
static void claim_chunks(unsigned generation)
{
    for (;;) {
        uint64_t ticket = atomic_load(&pool.ticket);
        if ((unsigned)(ticket >> 32) != generation || (int64_t)(uint32_t)ticket >= pool.chunks)
            return;
        if (!atomic_compare_exchange_weak(&pool.ticket, &ticket, ticket + 1))
            continue;
        const linear_job *job = pool.job;
        const int64_t n0 = (int64_t)(uint32_t)ticket * NB;
        job->run(job, n0, n0 + NB < job->out ? n0 + NB : job->out);
        atomic_fetch_add(&pool.done, 1);
    }
}

static void *helper_main(void *arg)
{
    unsigned seen = pool.born[(intptr_t)arg];
    for (;;) {
        unsigned now;
        int spins = 0;
        while ((now = atomic_load(&pool.generation)) == seen && spins < SPIN_ROUNDS) {
            cpu_relax();
            ++spins;
        }
        if (now == seen) {
            pthread_mutex_lock(&pool.lock);
            atomic_fetch_add(&pool.sleepers, 1);
            while ((now = atomic_load(&pool.generation)) == seen)
                pthread_cond_wait(&pool.wake, &pool.lock);
            atomic_fetch_sub(&pool.sleepers, 1);
            pthread_mutex_unlock(&pool.lock);
        }
        seen = now;
        claim_chunks(now);
    }
    return NULL;
}

/* A child after fork has none of its parent's helpers. */
static void forget_helpers(void)
{
    pool.helpers = 0;
}

static void watch_forks(void)
{
    pthread_atfork(NULL, NULL, forget_helpers);
}

/* Make sure `wanted` helpers run in this process. Called with `busy` held. */
static void start_helpers(int wanted)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, watch_forks);
    while (pool.helpers < wanted) {
        pthread_t id;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pool.born[pool.helpers] = atomic_load(&pool.generation);
        const int rc = pthread_create(&id, &attr, helper_main, (void *)(intptr_t)pool.helpers);
        pthread_attr_destroy(&attr);
        if (rc != 0)
            break;
        ++pool.helpers;
    }
}

static void run_job(const linear_job *job, int threads)
{
    const int64_t chunks = (job->out + NB - 1) / NB;
    const int64_t work = job->rows * job->out * job->in;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    if (threads <= 1 || chunks < 2 || work < (1 << 16) || pthread_mutex_trylock(&pool.busy) != 0) {
        job->run(job, 0, job->out);
        return;
    }
    start_helpers(threads - 1);
    const unsigned generation = atomic_load(&pool.generation) + 1;
    pool.job = job;
    pool.chunks = chunks;
    atomic_store(&pool.done, 0);
    atomic_store(&pool.ticket, (uint64_t)generation << 32);
    atomic_store(&pool.generation, generation);
    if (atomic_load(&pool.sleepers) > 0) {
        pthread_mutex_lock(&pool.lock);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
    }
    claim_chunks(generation);
    while (atomic_load(&pool.done) < chunks)
        cpu_relax();
    pthread_mutex_unlock(&pool.busy);
}

/* ---------------------------------------------------------------------------------------------
 * Entry points. */

static int check_sizes(const void *x, const void *w, const void *y, int64_t rows, int64_t out, int64_t in)
{
    if (rows < 0 || out < 0 || in < 0 || in > INT32_MAX)
        return PAK_EINVAL;
    if (rows > 0 && out > 0 && (y == NULL || (in > 0 && (x == NULL || w == NULL))))
        return PAK_EINVAL;
    return PAK_OK;
}

int pak_linear_f32(const float *x, const float *w, float *y, int64_t rows, int64_t out, int64_t in, int threads)
{
    const int rc = check_sizes(x, w, y, rows, out, in);
    if (rc != PAK_OK || rows == 0 || out == 0)
        return rc;
    linear_job job = {x, w, y, rows, out, in, 1, run_f32_generic};
#if PAK_X86_VARIANTS
    if (pak_isa_active() == PAK_ISA_AVX512)
        job.run = run_f32_avx512;
#endif
    run_job(&job, threads);
    return PAK_OK;
}

int pak_linear_bf16(const uint16_t *x, const uint16_t *w, void *y, int y_f32, int64_t rows, int64_t out,
                    int64_t in, int threads)
{
    const int rc = check_sizes(x, w, y, rows, out, in);
    if (rc != PAK_OK || rows == 0 || out == 0)
        return rc;
    linear_job job = {x, w, y, rows, out, in, y_f32 != 0, run_bf16_generic};
#if PAK_X86_VARIANTS
    if (pak_isa_active() == PAK_ISA_AVX512)
        job.run = pak_linear_bf16_native() ? run_bf16_native : run_bf16_avx512;
#endif
    run_job(&job, threads);
    return PAK_OK;
}
