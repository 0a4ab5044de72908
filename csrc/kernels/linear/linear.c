/* Batch-invariant linear layers (pyagent/linear.h): the fixed summation order, its instruction-set
 * variants, the tiling, and a small persistent pool of helper threads.
 *
 * The order: 16 float32 lanes. float32 rows are read in chunks of 16; lane j adds x[c + j] * w[c + j]
 * with a fused multiply-add. bfloat16 rows are read in chunks of 32; lane j adds the product of
 * elements 2j + 1, then of 2j (the order of the AVX-512 BF16 dot-product instruction). A short last
 * chunk is padded with zeros. The lanes are then summed as (j, j + 8), (j, j + 4), (j, j + 2), (0, 1).
 * Every variant below computes exactly this, whatever the tile shape, so tiling and threads never
 * change a result. The AVX-512 tiles sum the lanes of 16 accumulators at once, level by level of
 * the tree; a block of BLOCK_ROWS weight rows stays in L1 while every input tile passes over it, and
 * rows too long for that are summed in slices of whole chunks, the accumulators stored between
 * slices (exactly, so the order and the bits are those of one pass). The AVX2 variants run the same
 * tiles with each accumulator's 16 lanes in two vectors of 8, as sub-tiles that fit 16 registers.
 *
 * Block-quantized weights are decoded, a panel of rows at a time, into a dense float32 or bfloat16
 * buffer that the dense tiles then read, so they give the bits of the dense product on the decoded
 * matrix. The panel fits in the core's caches and is decoded once for every input row of the call;
 * up to DIRECT_ROWS input rows (decode steps, speculative verification) the blocks are decoded into
 * registers instead, which measured faster than a panel's store and reload: by tiles of 4 x 4 for up
 * to 4 rows, by columns of one weight row against every input row for more (AVX2: for one or two
 * rows only, see below).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pyagent/common.h"
#include "pyagent/linear.h"
#include "common/bf16.h"
#include "common/pool.h"
#include "common/profile.h"
#include "common/variant.h"
#include "linear/quant_blocks.h"

#if PAK_X86_VARIANTS
#include <immintrin.h>
#endif

#define LANES 16
#define MR 4          /* input rows per tile */
#define NR 4          /* weight rows per tile */
#define BLOCK_ROWS 12 /* weight rows kept in L1 while every input tile passes over them */
#define L1_BYTES (36 * 1024) /* those rows and an input tile, per slice of the inner dimension */
#define SPILL_ROWS 64 /* input rows whose partial sums a panel keeps between slices */
#define NB (4 * BLOCK_ROWS) /* weight rows per work item of the helper threads */
#define PANEL_BYTES (96 * 1024) /* decoded weight rows a worker keeps on its stack */
#define DIRECT_ROWS 16 /* up to this many input rows, quantized blocks are decoded in registers (AVX-512) */

/* ---------------------------------------------------------------------------------------------
 * Scalar helpers and the portable variant. */

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
                lane[j] = i < k ? fmaf(pak_bf16_to_f32(x[i]), pak_bf16_to_f32(w[i]), lane[j]) : lane[j] + 0.0f;
    return reduce_lanes(lane);
}

/* What one call computes; each worker takes ranges of weight rows. */
typedef struct linear_job linear_job;

/* Products of every input row with the dense weight rows [n0, n1), `w` pointing at row n0. */
typedef void (*panel_fn)(const linear_job *job, const void *w, int64_t n0, int64_t n1);

/* Decode `count` stored rows of `in` quantized weights into dense rows (float32 or bfloat16). */
typedef void (*decode_fn)(int wtype, const uint8_t *rows, int64_t row_bytes, int64_t count, int64_t in, void *dense);

struct linear_job {
    const void *x;
    const void *w;
    void *y;
    int64_t rows, out, in;
    int y_f32;          /* bfloat16 inputs: 1 stores float32 sums, 0 rounds them to bfloat16 */
    int64_t row_bytes;  /* bytes of one stored weight row */
    int64_t dense_row;  /* bytes of one dense (decoded) weight row */
    panel_fn panel;
    int wtype;          /* quantized weights only: */
    decode_fn decode;
    panel_fn direct;    /* decodes into registers (few enough input rows for the variant), or NULL */
    uint8_t *scratch;   /* per-worker decode buffers when a panel does not fit on the stack, else NULL */
    void (*run)(const linear_job *job, int64_t n0, int64_t n1, int worker);
};

static void panel_f32_generic(const linear_job *job, const void *w_rows, int64_t n0, int64_t n1)
{
    const float *x = job->x, *w = w_rows;
    float *y = job->y;
    for (int64_t m = 0; m < job->rows; ++m)
        for (int64_t n = n0; n < n1; ++n)
            y[m * job->out + n] = dot_f32_generic(x + m * job->in, w + (n - n0) * job->in, job->in);
}

/* Store one bfloat16-input result as the job asks: float32, or rounded to bfloat16. */
static inline void store_bf16_result(const linear_job *job, int64_t index, float value)
{
    if (job->y_f32)
        ((float *)job->y)[index] = value;
    else
        ((uint16_t *)job->y)[index] = pak_f32_to_bf16(value);
}

static void panel_bf16_generic(const linear_job *job, const void *w_rows, int64_t n0, int64_t n1)
{
    const uint16_t *x = job->x, *w = w_rows;
    for (int64_t m = 0; m < job->rows; ++m)
        for (int64_t n = n0; n < n1; ++n)
            store_bf16_result(job, m * job->out + n, dot_bf16_generic(x + m * job->in, w + (n - n0) * job->in, job->in));
}

static void decode_f32_generic(int wtype, const uint8_t *rows, int64_t row_bytes, int64_t count, int64_t in,
                               void *dense)
{
    const int64_t block_bytes = quant_block_bytes(wtype);
    float *out = dense;
    for (int64_t r = 0; r < count; ++r)
        for (int64_t b = 0; b < in / QUANT_BLOCK; ++b)
            decode_block_scalar(wtype, rows + r * row_bytes + b * block_bytes, out + r * in + b * QUANT_BLOCK);
}

static void decode_bf16_generic(int wtype, const uint8_t *rows, int64_t row_bytes, int64_t count, int64_t in,
                                void *dense)
{
    const int64_t block_bytes = quant_block_bytes(wtype);
    uint16_t *out = dense;
    float weights[QUANT_BLOCK];
    for (int64_t r = 0; r < count; ++r)
        for (int64_t b = 0; b < in / QUANT_BLOCK; ++b) {
            decode_block_scalar(wtype, rows + r * row_bytes + b * block_bytes, weights);
            for (int j = 0; j < QUANT_BLOCK; ++j)
                out[r * in + b * QUANT_BLOCK + j] = pak_f32_to_bf16(weights[j]);
        }
}

/* Dense weights: the rows in blocks of NB, each block kept in cache while every input row passes
 * (the AVX-512 panels block them further). */
static void run_dense(const linear_job *job, int64_t n0, int64_t n1, int worker)
{
    (void)worker;
    for (int64_t nb = n0; nb < n1; nb += NB) {
        const int64_t ne = nb + NB < n1 ? nb + NB : n1;
        job->panel(job, (const uint8_t *)job->w + nb * job->row_bytes, nb, ne);
    }
}

/* Quantized weights: a panel of rows decoded into the worker's buffer, then the dense tiles. */
static void run_quantized(const linear_job *job, int64_t n0, int64_t n1, int worker)
{
    if (job->direct != NULL) {
        job->direct(job, (const uint8_t *)job->w + n0 * job->row_bytes, n0, n1);
        return;
    }
    _Alignas(64) uint8_t stack[PANEL_BYTES];
    uint8_t *buffer = job->scratch != NULL ? job->scratch + (int64_t)worker * job->dense_row * NR : stack;
    int64_t step = job->scratch != NULL ? NR : PANEL_BYTES / job->dense_row;
    if (step >= BLOCK_ROWS) /* whole blocks of rows that stay in L1, else whole tiles */
        step -= step % BLOCK_ROWS;
    else if (step > NR)
        step -= step % NR;
    for (int64_t nb = n0; nb < n1; nb += step) {
        const int64_t ne = nb + step < n1 ? nb + step : n1;
        job->decode(job->wtype, (const uint8_t *)job->w + nb * job->row_bytes, job->row_bytes, ne - nb, job->in, buffer);
        job->panel(job, buffer, nb, ne);
    }
}

/* ---------------------------------------------------------------------------------------------
 * x86 variants: an MR x NR tile of accumulators over weight rows streamed once per input tile.
 *
 * The macros below serve both vector widths; `sfx` (512 or 256) names a width's types and helpers.
 * An accumulator's 16 lanes are one vector acc<sfx> on AVX-512, and on AVX2 two parts (lanes 0..7 and
 * 8..15) declared with the suffix PARTS<sfx> (empty, or [2]), reached with PART<sfx>(h) (nothing, or
 * [h]) in a loop FOR_PARTS<sfx>(h) (none, or over the two). A chunk of inputs (16 float32 or 32
 * bfloat16 values) is loaded in as many parts chunk<sfx>, part h going to part h of the
 * accumulators: lane by lane the same fused multiply-adds in the same order whatever the width.
 * reduce_lanes<sfx> sums the lanes of accumulators, decode_block<sfx> decodes a quantized block into
 * its weights 0..15 and 16..31. */
#if PAK_X86_VARIANTS

#define AVX512 "avx512f,avx512bw,avx512dq,avx512vl"
#define TILE_INLINE static inline __attribute__((always_inline))

typedef __m512 acc512;
typedef __m512i chunk512;
#define PARTS512
#define PART512(h)
#define FOR_PARTS512(h)
#define zero512 _mm512_setzero_ps

/* One level of the lane tree for the vectors v[0..count) of type `vec` at once: each pair (s, t)
 * becomes one vector holding both halves' sums, add(lo, hi) in the order of the tree; an odd last
 * vector pairs with itself. */
#define REDUCE_LEVEL(v, count, vec, add, lo, hi)                                                       \
    do {                                                                                               \
        for (int p = 0; 2 * p < (count); ++p) {                                                        \
            const vec s = (v)[2 * p], t = 2 * p + 1 < (count) ? (v)[2 * p + 1] : s;                    \
            (v)[p] = add(lo, hi);                                                                      \
        }                                                                                              \
        (count) = ((count) + 1) / 2;                                                                   \
    } while (0)

/* The lane sums of the n accumulators v[0..n) (n constant after inlining) into sums[0..n), without
 * one horizontal sum each: the 16 lanes are summed as (j, j + 8), (j, j + 4), (j, j + 2), (0, 1),
 * each level on whole vectors, 16 accumulators finishing in one. Lane 4b + c of final vector u then
 * holds accumulator 16u + 4c + b. Clobbers v. */
__attribute__((target(AVX512))) TILE_INLINE void reduce_lanes512(__m512 *v, int n, float *sums)
{
    int count = n;
    REDUCE_LEVEL(v, count, __m512, _mm512_add_ps, _mm512_shuffle_f32x4(s, t, _MM_SHUFFLE(1, 0, 1, 0)),
                 _mm512_shuffle_f32x4(s, t, _MM_SHUFFLE(3, 2, 3, 2)));
    REDUCE_LEVEL(v, count, __m512, _mm512_add_ps, _mm512_shuffle_f32x4(s, t, _MM_SHUFFLE(2, 0, 2, 0)),
                 _mm512_shuffle_f32x4(s, t, _MM_SHUFFLE(3, 1, 3, 1)));
    REDUCE_LEVEL(v, count, __m512, _mm512_add_ps,
                 _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(s), _mm512_castps_pd(t))),
                 _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(s), _mm512_castps_pd(t))));
    REDUCE_LEVEL(v, count, __m512, _mm512_add_ps, _mm512_shuffle_ps(s, t, _MM_SHUFFLE(2, 0, 2, 0)),
                 _mm512_shuffle_ps(s, t, _MM_SHUFFLE(3, 1, 3, 1)));
    float lanes[(n + LANES - 1) / LANES * LANES];
    for (int u = 0; u < count; ++u)
        _mm512_storeu_ps(lanes + u * LANES, v[u]);
    for (int k = 0; k < n; ++k)
        sums[k] = lanes[k / LANES * LANES + 4 * (k % 4) + k % LANES / 4];
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

/* Start an mr x nr tile of accumulators at inner element k0: zeros at 0, else the partial sums a
 * previous slice left in `spill` (row i, column j at spill[i * BLOCK_ROWS + j]). */
#define TILE_BEGIN(sfx, acc, mr, nr, k0, spill)                                                        \
    for (int i = 0; i < (mr); ++i)                                                                     \
        for (int j = 0; j < (nr); ++j)                                                                 \
            FOR_PARTS##sfx(h)                                                                          \
                (acc)[i][j] PART##sfx(h) = (k0) == 0 ? zero##sfx() : (spill)[i * BLOCK_ROWS + j] PART##sfx(h);

/* End a tile at inner element k1: at the end of the row, sum each accumulator's lanes and store the
 * result at y0 + i * out + j; else keep the partial sums in `spill` for the next slice. */
#define TILE_END(sfx, job, y0, acc, mr, nr, k1, spill, store)                                          \
    if ((k1) < (job)->in) {                                                                            \
        for (int i = 0; i < (mr); ++i)                                                                 \
            for (int j = 0; j < (nr); ++j)                                                             \
                FOR_PARTS##sfx(h)                                                                      \
                    (spill)[i * BLOCK_ROWS + j] PART##sfx(h) = (acc)[i][j] PART##sfx(h);               \
    } else {                                                                                           \
        acc##sfx flat[(mr) * (nr)] PARTS##sfx;                                                         \
        float sums[(mr) * (nr)];                                                                       \
        for (int i = 0; i < (mr); ++i)                                                                 \
            for (int j = 0; j < (nr); ++j)                                                             \
                FOR_PARTS##sfx(h)                                                                      \
                    flat[i * (nr) + j] PART##sfx(h) = (acc)[i][j] PART##sfx(h);                        \
        reduce_lanes##sfx(flat, (mr) * (nr), sums);                                                    \
        for (int i = 0; i < (mr); ++i)                                                                 \
            for (int j = 0; j < (nr); ++j)                                                             \
                store(job, (y0) + i * (job)->out + j, sums[i * (nr) + j]);                             \
    }

/* DEFINE_TILE(name, isa, sfx, elem, per_chunk, tail, load_full, load_tail, step, store): an mr x nr
 * tile (compile-time sizes after inlining, up to MR x NR) of y = x w^T over the inner elements
 * [k0, k1), a slice of whole chunks but for the row's last, whose tail chunk is loaded padded with
 * zeros: load_full(p, h) loads part h of the chunk at p, load_tail(tail(count), p, h) part h of its
 * first count elements (tail(count) is a mask or the count). */
#define DEFINE_TILE(name, isa, sfx, elem, per_chunk, tail, load_full, load_tail, step, store)          \
    __attribute__((target(isa))) TILE_INLINE void name(const linear_job *job, const elem *x,        \
                                                          const elem *w, int64_t y0, int mr, int nr,   \
                                                          int64_t k0, int64_t k1, acc##sfx(*spill) PARTS##sfx) \
    {                                                                                                  \
        const int64_t in = job->in;                                                                    \
        acc##sfx acc[MR][NR] PARTS##sfx;                                                               \
        TILE_BEGIN(sfx, acc, mr, nr, k0, spill)                                                        \
        int64_t c = k0;                                                                                \
        for (; c + (per_chunk) <= k1; c += (per_chunk)) {                                              \
            FOR_PARTS##sfx(h) {                                                                        \
                chunk##sfx wv[NR];                                                                     \
                for (int j = 0; j < nr; ++j)                                                           \
                    wv[j] = load_full(w + j * in + c, h);                                              \
                for (int i = 0; i < mr; ++i) {                                                         \
                    const chunk##sfx xv = load_full(x + i * in + c, h);                                \
                    for (int j = 0; j < nr; ++j)                                                       \
                        acc[i][j] PART##sfx(h) = step(acc[i][j] PART##sfx(h), xv, wv[j]);              \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
        if (c < k1) {                                                                                  \
            const __auto_type mask = tail(k1 - c);                                                     \
            FOR_PARTS##sfx(h) {                                                                        \
                chunk##sfx wv[NR];                                                                     \
                for (int j = 0; j < nr; ++j)                                                           \
                    wv[j] = load_tail(mask, w + j * in + c, h);                                        \
                for (int i = 0; i < mr; ++i) {                                                         \
                    const chunk##sfx xv = load_tail(mask, x + i * in + c, h);                          \
                    for (int j = 0; j < nr; ++j)                                                       \
                        acc[i][j] PART##sfx(h) = step(acc[i][j] PART##sfx(h), xv, wv[j]);              \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
        TILE_END(sfx, job, y0, acc, mr, nr, k1, spill, store)                                          \
    }

#define MASK16(n) ((__mmask16)((((uint64_t)1) << (n)) - 1))
#define MASK32(n) ((__mmask32)((((uint64_t)1) << (n)) - 1))
#define LOAD_F32(p, h) _mm512_castps_si512(_mm512_loadu_ps(p))
#define LOAD_F32_TAIL(m, p, h) _mm512_castps_si512(_mm512_maskz_loadu_ps((m), (p)))
#define LOAD_16(p, h) _mm512_loadu_si512((const void *)(p))
#define LOAD_16_TAIL(m, p, h) _mm512_maskz_loadu_epi16((m), (p))
#define STEP_F32(acc, x, w) _mm512_fmadd_ps(_mm512_castsi512_ps(x), _mm512_castsi512_ps(w), (acc))
#define STORE_F32(job, index, v) (((float *)(job)->y)[index] = (v))

DEFINE_TILE(tile_f32, AVX512, 512, float, LANES, MASK16, LOAD_F32, LOAD_F32_TAIL, STEP_F32, STORE_F32)
DEFINE_TILE(tile_bf16_emulated, AVX512, 512, uint16_t, 2 * LANES, MASK32, LOAD_16, LOAD_16_TAIL,
            step_bf16_emulated, store_bf16_result)
DEFINE_TILE(tile_bf16_native, AVX512 ",avx512bf16", 512, uint16_t, 2 * LANES, MASK32, LOAD_16, LOAD_16_TAIL,
            step_bf16_native, store_bf16_result)

/* Inner elements per slice for dense rows of `elem_bytes`-wide elements: the whole row when
 * BLOCK_ROWS weight rows and an input tile fit in L1_BYTES, else equal slices of whole chunks that do. */
static inline int64_t inner_slice(int64_t in, int64_t elem_bytes, int64_t per_chunk)
{
    const int64_t fit = L1_BYTES / ((BLOCK_ROWS + MR) * elem_bytes);
    if (in <= fit)
        return in;
    const int64_t slices = (in + fit - 1) / fit, size = (in + slices - 1) / slices;
    return (size + per_chunk - 1) / per_chunk * per_chunk;
}

/* One tile of the panel below: r input rows from m, c weight rows from n (constants for the tile). */
#define TILE_CALL(tile, r, c)                                                                       \
    tile(job, x + m * in, w + (n - n0) * stride, m * out + n, r, c, k0, k1,                            \
         spill + (m - mb) * BLOCK_ROWS + (n - nb))

/* Products of every input row with the weight rows [n0, n1), `w_rows` pointing at row n0 (rows
 * `row_stride` elements apart), by blocks of BLOCK_ROWS weight rows that stay in L1 while the input
 * tiles pass over them. A row longer than `slice` elements is summed slice by slice, SPILL_ROWS
 * input rows at a time, each tile's accumulators kept in `spill` between slices: the same lanes
 * adding the same chunks in the same order, so no bit changes. The switch gives the tile function
 * constant sizes so its accumulators live in registers. */
#define DEFINE_PANEL(name, isa, sfx, elem, welem, row_stride, slice, tile)                             \
    __attribute__((target(isa))) static void name(const linear_job *job, const void *w_rows,        \
                                                  int64_t n0, int64_t n1)                              \
    {                                                                                                  \
        const elem *x = job->x;                                                                        \
        const welem *w = w_rows;                                                                       \
        const int64_t in = job->in, out = job->out, stride = (row_stride), kc = (slice);               \
        const int64_t pass = kc < in ? SPILL_ROWS : job->rows;                                         \
        acc##sfx spill[SPILL_ROWS * BLOCK_ROWS] PARTS##sfx;                                            \
        for (int64_t nb = n0; nb < n1; nb += BLOCK_ROWS) {                                             \
            const int64_t ne = nb + BLOCK_ROWS < n1 ? nb + BLOCK_ROWS : n1;                            \
            for (int64_t mb = 0; mb < job->rows; mb += pass) {                                         \
                const int64_t me = mb + pass < job->rows ? mb + pass : job->rows;                      \
                for (int64_t k0 = 0; k0 < in; k0 += kc) {                                              \
                    const int64_t k1 = k0 + kc < in ? k0 + kc : in;                                    \
                    for (int64_t m = mb; m < me; m += MR) {                                            \
                        for (int64_t n = nb; n < ne;) {                                                \
                            const int full = ne - n >= NR;                                             \
                            switch ((me - m < MR ? me - m : MR) * 2 + full) {                          \
                            case 2: TILE_CALL(tile, 1, 1); break;                                      \
                            case 3: TILE_CALL(tile, 1, NR); break;                                     \
                            case 4: TILE_CALL(tile, 2, 1); break;                                      \
                            case 5: TILE_CALL(tile, 2, NR); break;                                     \
                            case 6: TILE_CALL(tile, 3, 1); break;                                      \
                            case 7: TILE_CALL(tile, 3, NR); break;                                     \
                            case 8: TILE_CALL(tile, 4, 1); break;                                      \
                            default: TILE_CALL(tile, 4, NR); break;                                    \
                            }                                                                          \
                            n += full ? NR : 1;                                                        \
                        }                                                                              \
                    }                                                                                  \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
    }

DEFINE_PANEL(panel_f32_avx512, AVX512, 512, float, float, in, inner_slice(in, 4, LANES), tile_f32)
DEFINE_PANEL(panel_bf16_avx512, AVX512, 512, uint16_t, uint16_t, in, inner_slice(in, 2, 2 * LANES),
             tile_bf16_emulated)
DEFINE_PANEL(panel_bf16_native, AVX512 ",avx512bf16", 512, uint16_t, uint16_t, in, inner_slice(in, 2, 2 * LANES),
             tile_bf16_native)

/* Round to the nearest bfloat16, ties to even (weights are finite and never subnormal). */
__attribute__((target(AVX512))) TILE_INLINE __m256i round_bf16(__m512 v)
{
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(rounded, 16));
}

/* A tile over quantized weight rows, decoded block by block into registers: for the few input rows
 * of a decode step, where decoding dominates and a panel's store and reload would double its cost.
 * Each block is CHUNKS chunks of the dense order (float32: 2 of 16, bfloat16: 1 of 32); `weights`
 * turns a decoded block (weights 0..15 and 16..31, as parts) into their parts. */
#define DEFINE_QTILE(name, isa, sfx, elem, chunks, load_x, weights, step, store)                       \
    __attribute__((target(isa))) TILE_INLINE void name(const linear_job *job, const elem *x,        \
                                                          const uint8_t *w, int64_t y0, int mr, int nr, \
                                                          int64_t k0, int64_t k1, acc##sfx(*spill) PARTS##sfx) \
    {                                                                                                  \
        const int64_t in = job->in, block_bytes = quant_block_bytes(job->wtype);                       \
        acc##sfx acc[MR][NR] PARTS##sfx;                                                               \
        TILE_BEGIN(sfx, acc, mr, nr, k0, spill)                                                        \
        for (int64_t b = k0 / QUANT_BLOCK; b < k1 / QUANT_BLOCK; ++b) {                                \
            chunk##sfx xv[MR][chunks] PARTS##sfx, wv[chunks] PARTS##sfx;                               \
            for (int i = 0; i < mr; ++i)                                                               \
                for (int k = 0; k < (chunks); ++k)                                                     \
                    FOR_PARTS##sfx(h)                                                                  \
                        xv[i][k] PART##sfx(h) =                                                        \
                            load_x(x + i * in + b * QUANT_BLOCK + k * (QUANT_BLOCK / (chunks)), h);    \
            for (int j = 0; j < nr; ++j) {                                                             \
                const uint8_t *block = w + j * job->row_bytes + b * block_bytes;                       \
                _mm_prefetch((const char *)(block + 2 * nr * job->row_bytes), _MM_HINT_T0);              \
                acc##sfx lo PARTS##sfx, hi PARTS##sfx;                                                 \
                decode_block##sfx(job->wtype, block, &lo, &hi);                                        \
                weights(wv, lo, hi);                                                                   \
                for (int i = 0; i < mr; ++i)                                                           \
                    for (int k = 0; k < (chunks); ++k)                                                 \
                        FOR_PARTS##sfx(h)                                                              \
                            acc[i][j] PART##sfx(h) =                                                   \
                                step(acc[i][j] PART##sfx(h), xv[i][k] PART##sfx(h), wv[k] PART##sfx(h)); \
            }                                                                                          \
        }                                                                                              \
        TILE_END(sfx, job, y0, acc, mr, nr, k1, spill, store)                                          \
    }

#define WEIGHTS_F32(wv, lo, hi) ((wv)[0] = _mm512_castps_si512(lo), (wv)[1] = _mm512_castps_si512(hi))
#define WEIGHTS_BF16(wv, lo, hi) \
    ((wv)[0] = _mm512_inserti64x4(_mm512_castsi256_si512(round_bf16(lo)), round_bf16(hi), 1))
#define WEIGHTS_BF16_NATIVE(wv, lo, hi) ((wv)[0] = (__m512i)_mm512_cvtne2ps_pbh((hi), (lo)))

DEFINE_QTILE(qtile_f32, AVX512, 512, float, 2, LOAD_F32, WEIGHTS_F32, STEP_F32, STORE_F32)
DEFINE_QTILE(qtile_bf16_emulated, AVX512, 512, uint16_t, 1, LOAD_16, WEIGHTS_BF16, step_bf16_emulated,
             store_bf16_result)
DEFINE_QTILE(qtile_bf16_native, AVX512 ",avx512bf16", 512, uint16_t, 1, LOAD_16, WEIGHTS_BF16_NATIVE,
             step_bf16_native, store_bf16_result)
DEFINE_PANEL(qpanel_f32_avx512, AVX512, 512, float, uint8_t, job->row_bytes, in, qtile_f32)
DEFINE_PANEL(qpanel_bf16_avx512, AVX512, 512, uint16_t, uint8_t, job->row_bytes, in, qtile_bf16_emulated)
DEFINE_PANEL(qpanel_bf16_native, AVX512 ",avx512bf16", 512, uint16_t, uint8_t, job->row_bytes, in,
             qtile_bf16_native)

/* A column of one quantized weight row against mr (compile-time after inlining, up to DIRECT_ROWS)
 * input rows, the inputs read from memory: each block is decoded once for all of them, which for
 * more than MR rows (speculative verification) costs a third to a half of the MR x NR tiles'
 * repeated decoding. */
#define DEFINE_QCOLUMN(name, isa, elem, chunks, load_x, weights, step, store)                       \
    __attribute__((target(isa))) TILE_INLINE void name(const linear_job *job, const elem *x,        \
                                                          const uint8_t *w, int64_t n, int mr)         \
    {                                                                                                  \
        const int64_t in = job->in, block_bytes = quant_block_bytes(job->wtype);                       \
        __m512 acc[DIRECT_ROWS];                                                                       \
        for (int i = 0; i < mr; ++i)                                                                   \
            acc[i] = _mm512_setzero_ps();                                                              \
        for (int64_t b = 0; b < in / QUANT_BLOCK; ++b) {                                               \
            const uint8_t *block = w + b * block_bytes;                                                \
            _mm_prefetch((const char *)(block + 2 * job->row_bytes), _MM_HINT_T0);                     \
            __m512 lo, hi;                                                                             \
            __m512i wv[chunks];                                                                        \
            decode_block512(job->wtype, block, &lo, &hi);                                              \
            weights(wv, lo, hi);                                                                       \
            for (int i = 0; i < mr; ++i)                                                               \
                for (int k = 0; k < (chunks); ++k)                                                     \
                    acc[i] = step(acc[i], load_x(x + i * in + b * QUANT_BLOCK + k * (QUANT_BLOCK / (chunks)), 0), \
                                  wv[k]);                                                              \
        }                                                                                              \
        float sums[DIRECT_ROWS];                                                                       \
        reduce_lanes512(acc, mr, sums);                                                                \
        for (int i = 0; i < mr; ++i)                                                                   \
            store(job, n + i * job->out, sums[i]);                                                     \
    }

DEFINE_QCOLUMN(qcolumn_f32, AVX512, float, 2, LOAD_F32, WEIGHTS_F32, STEP_F32, STORE_F32)
DEFINE_QCOLUMN(qcolumn_bf16_emulated, AVX512, uint16_t, 1, LOAD_16, WEIGHTS_BF16, step_bf16_emulated,
               store_bf16_result)
DEFINE_QCOLUMN(qcolumn_bf16_native, AVX512 ",avx512bf16", uint16_t, 1, LOAD_16, WEIGHTS_BF16_NATIVE,
               step_bf16_native, store_bf16_result)

/* Quantized weight rows [n0, n1) in registers: MR x NR tiles for up to MR input rows, columns of
 * every input row at once for more (up to DIRECT_ROWS). */
#define COLUMN_CASE(column, r)                                                                        \
    case r:                                                                                            \
        for (int64_t n = n0; n < n1; ++n)                                                              \
            column(job, x, w + (n - n0) * job->row_bytes, n, r);                                       \
        break;
#define DEFINE_QDIRECT(name, isa, elem, panel, column)                                              \
    __attribute__((target(isa))) static void name(const linear_job *job, const void *w_rows,        \
                                                  int64_t n0, int64_t n1)                              \
    {                                                                                                  \
        const elem *x = job->x;                                                                        \
        const uint8_t *w = w_rows;                                                                     \
        switch (job->rows) {                                                                           \
        COLUMN_CASE(column, 5) COLUMN_CASE(column, 6) COLUMN_CASE(column, 7) COLUMN_CASE(column, 8)    \
        COLUMN_CASE(column, 9) COLUMN_CASE(column, 10) COLUMN_CASE(column, 11) COLUMN_CASE(column, 12) \
        COLUMN_CASE(column, 13) COLUMN_CASE(column, 14) COLUMN_CASE(column, 15) COLUMN_CASE(column, 16) \
        default: panel(job, w_rows, n0, n1);                                                           \
        }                                                                                              \
    }

DEFINE_QDIRECT(qdirect_f32_avx512, AVX512, float, qpanel_f32_avx512, qcolumn_f32)
DEFINE_QDIRECT(qdirect_bf16_avx512, AVX512, uint16_t, qpanel_bf16_avx512, qcolumn_bf16_emulated)
DEFINE_QDIRECT(qdirect_bf16_native, AVX512 ",avx512bf16", uint16_t, qpanel_bf16_native, qcolumn_bf16_native)

/* Decoders of quantized rows into dense rows, one per output format; `store` writes one block. */
#define DEFINE_DECODE(name, isa, sfx, elem, store)                                                     \
    __attribute__((target(isa))) static void name(int wtype, const uint8_t *rows, int64_t row_bytes, \
                                                  int64_t count, int64_t in, void *dense)               \
    {                                                                                                  \
        const int64_t block_bytes = quant_block_bytes(wtype);                                          \
        elem *out = dense;                                                                             \
        for (int64_t r = 0; r < count; ++r)                                                            \
            for (int64_t b = 0; b < in / QUANT_BLOCK; ++b) {                                           \
                acc##sfx lo PARTS##sfx, hi PARTS##sfx;                                                 \
                decode_block##sfx(wtype, rows + r * row_bytes + b * block_bytes, &lo, &hi);            \
                store(out + r * in + b * QUANT_BLOCK, lo, hi);                                         \
            }                                                                                          \
    }

__attribute__((target(AVX512))) TILE_INLINE void store_block_f32(float *out, __m512 lo, __m512 hi)
{
    _mm512_storeu_ps(out, lo);
    _mm512_storeu_ps(out + LANES, hi);
}

__attribute__((target(AVX512))) TILE_INLINE void store_block_bf16(uint16_t *out, __m512 lo, __m512 hi)
{
    _mm256_storeu_si256((__m256i *)out, round_bf16(lo));
    _mm256_storeu_si256((__m256i *)(out + LANES), round_bf16(hi));
}

__attribute__((target(AVX512 ",avx512bf16"))) TILE_INLINE void store_block_bf16_native(uint16_t *out, __m512 lo,
                                                                                    __m512 hi)
{
    _mm512_storeu_si512((void *)out, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

DEFINE_DECODE(decode_f32_avx512, AVX512, 512, float, store_block_f32)
DEFINE_DECODE(decode_bf16_avx512, AVX512, 512, uint16_t, store_block_bf16)
DEFINE_DECODE(decode_bf16_native, AVX512 ",avx512bf16", 512, uint16_t, store_block_bf16_native)

/* ---------------------------------------------------------------------------------------------
 * AVX2 variants (with FMA): the tiles above on accumulators of two parts, whose fused multiply-adds
 * round lane by lane as AVX-512's do. 16 registers cannot hold an MR x NR tile's 32 parts, so a
 * tile runs as sub-tiles of at most SUB_ACCS accumulators, each over the whole slice on its own:
 * every accumulator still adds the same chunks in the same order. With no 16-entry permute,
 * quantized blocks are decoded code by code (quant_blocks.h), which costs more than on AVX-512, so
 * only products of one or two input rows decode them in registers (the quantized tiles); from three
 * rows on, decoding a panel once and running the dense tiles over it measured faster. */

#define AVX2 "avx2,fma"
#define SUB_ACCS 4         /* accumulators per sub-tile: 8 of the 16 registers */
#define AVX2_DIRECT_ROWS 2 /* the most input rows whose quantized blocks are decoded in registers */

typedef __m256 acc256;
typedef __m256i chunk256; /* a part of a chunk: float32 elements 0..7 or 8..15, bfloat16 0..15 or 16..31 */
#define PARTS256 [2]
#define PART256(h) [h]
#define FOR_PARTS256(h) for (int h = 0; h < 2; ++h)
#define zero256 _mm256_setzero_ps

/* As reduce_lanes512 for accumulators of two parts: (j, j + 8) adds the parts, then each level runs
 * on whole vectors, 8 accumulators finishing in one. Lane 4b + c of final vector u then holds
 * accumulator 8u + 2c + b. */
__attribute__((target(AVX2))) TILE_INLINE void reduce_lanes256(__m256 (*acc)[2], int n, float *sums)
{
    __m256 v[n];
    for (int k = 0; k < n; ++k)
        v[k] = _mm256_add_ps(acc[k][0], acc[k][1]);
    int count = n;
    REDUCE_LEVEL(v, count, __m256, _mm256_add_ps, _mm256_permute2f128_ps(s, t, 0x20),
                 _mm256_permute2f128_ps(s, t, 0x31));
    REDUCE_LEVEL(v, count, __m256, _mm256_add_ps,
                 _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(s), _mm256_castps_pd(t))),
                 _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(s), _mm256_castps_pd(t))));
    REDUCE_LEVEL(v, count, __m256, _mm256_add_ps, _mm256_shuffle_ps(s, t, _MM_SHUFFLE(2, 0, 2, 0)),
                 _mm256_shuffle_ps(s, t, _MM_SHUFFLE(3, 1, 3, 1)));
    float lanes[(n + 7) / 8 * 8];
    for (int u = 0; u < count; ++u)
        _mm256_storeu_ps(lanes + 8 * u, v[u]);
    for (int k = 0; k < n; ++k)
        sums[k] = lanes[k / 8 * 8 + 4 * (k % 2) + k % 8 / 2];
}

/* Part h of the chunk whose first `bytes` bytes are at p, the rest zeros (AVX2 masks only 32-bit
 * elements). */
__attribute__((target(AVX2))) TILE_INLINE __m256i load256_tail(size_t bytes, const void *p, int h)
{
    _Alignas(32) uint8_t padded[2 * sizeof(__m256i)] = {0};
    memcpy(padded, p, bytes);
    return _mm256_load_si256((const __m256i *)padded + h);
}

#define COUNT(n) (n)
#define LOAD_256(p, h) _mm256_loadu_si256((const __m256i *)(p) + (h))
#define LOAD_256_TAIL(n, p, h) load256_tail((size_t)(n) * sizeof *(p), (p), (h))
#define STEP_F32_256(acc, x, w) _mm256_fmadd_ps(_mm256_castsi256_ps(x), _mm256_castsi256_ps(w), (acc))

__attribute__((target(AVX2))) TILE_INLINE __m256 step_bf16_256(__m256 acc, __m256i x, __m256i w)
{
    const __m256i high = _mm256_set1_epi32((int)0xffff0000u);
    acc = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(x, high)),
                          _mm256_castsi256_ps(_mm256_and_si256(w, high)), acc);
    return _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(x, 16)),
                           _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)), acc);
}

/* 16 decoded weights (two parts) rounded to bfloat16 as round_bf16 does, in order in one vector. */
__attribute__((target(AVX2))) TILE_INLINE __m256i round_bf16_256(const __m256 *v)
{
    __m256i rounded[2];
    for (int h = 0; h < 2; ++h) {
        const __m256i bits = _mm256_castps_si256(v[h]);
        const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
        rounded[h] = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
    }
    /* the pack works per 128-bit lane (weights 0..3, 8..11, 4..7, 12..15); the permute restores the order */
    return _mm256_permute4x64_epi64(_mm256_packus_epi32(rounded[0], rounded[1]), _MM_SHUFFLE(3, 1, 2, 0));
}

/* A decoded block as the parts of the dense order's chunks, as WEIGHTS_F32 and WEIGHTS_BF16. */
__attribute__((target(AVX2))) TILE_INLINE void weights_f32_256(__m256i (*wv)[2], const __m256 *lo, const __m256 *hi)
{
    for (int h = 0; h < 2; ++h) {
        wv[0][h] = _mm256_castps_si256(lo[h]);
        wv[1][h] = _mm256_castps_si256(hi[h]);
    }
}

__attribute__((target(AVX2))) TILE_INLINE void weights_bf16_256(__m256i (*wv)[2], const __m256 *lo, const __m256 *hi)
{
    wv[0][0] = round_bf16_256(lo);
    wv[0][1] = round_bf16_256(hi);
}

DEFINE_TILE(subtile_f32_avx2, AVX2, 256, float, LANES, COUNT, LOAD_256, LOAD_256_TAIL, STEP_F32_256, STORE_F32)
DEFINE_TILE(subtile_bf16_avx2, AVX2, 256, uint16_t, 2 * LANES, COUNT, LOAD_256, LOAD_256_TAIL, step_bf16_256,
            store_bf16_result)
DEFINE_QTILE(qsubtile_f32_avx2, AVX2, 256, float, 2, LOAD_256, weights_f32_256, STEP_F32_256, STORE_F32)
DEFINE_QTILE(qsubtile_bf16_avx2, AVX2, 256, uint16_t, 1, LOAD_256, weights_bf16_256, step_bf16_256,
             store_bf16_result)

/* An mr x nr tile (up to MR x NR) as sub-tiles of `sub_rows` input rows (fewer at the end) by as many
 * weight rows as SUB_ACCS accumulators allow, weight rows `w_stride` elements of w apart. The dense
 * tiles take 2 x 2 sub-tiles (1 x 4 for a single row), which load the fewest vectors per multiply-
 * add; the quantized tiles take every input row at once so each block is decoded once. Sub-tile
 * (g, h) is the g-th group of input rows by the h-th group of weight rows, written out call by call
 * rather than looped over so that every size is a constant where the sub-tile is inlined. */
#define SPLIT_PART(part, g, h) part(job, x, w, y0, mr, nr, k0, k1, spill, g, h);
#define DEFINE_SPLIT_TILE(name, elem, welem, w_stride, sub_rows, subtile)                              \
    __attribute__((target(AVX2))) TILE_INLINE void name##_part(const linear_job *job, const elem *x,   \
                                                               const welem *w, int64_t y0, int mr,     \
                                                               int nr, int64_t k0, int64_t k1,         \
                                                               __m256 (*spill)[2], int g, int h)       \
    {                                                                                                  \
        const int i = g * (sub_rows), r = mr - i < (sub_rows) ? mr - i : (sub_rows);                   \
        const int cols = r <= 0 || r >= SUB_ACCS ? 1 : SUB_ACCS / r, j = h * cols;                     \
        if (r > 0 && j < nr)                                                                           \
            subtile(job, x + i * job->in, w + j * (w_stride), y0 + i * job->out + j, r,                \
                    nr - j < cols ? nr - j : cols, k0, k1, spill + i * BLOCK_ROWS + j);                \
    }                                                                                                  \
    __attribute__((target(AVX2))) TILE_INLINE void name(const linear_job *job, const elem *x,          \
                                                        const welem *w, int64_t y0, int mr, int nr,    \
                                                        int64_t k0, int64_t k1, __m256 (*spill)[2])    \
    {                                                                                                  \
        _Static_assert(MR <= 2 * (sub_rows) && NR == 4, "two groups of input rows, four of weight rows"); \
        SPLIT_PART(name##_part, 0, 0) SPLIT_PART(name##_part, 0, 1) SPLIT_PART(name##_part, 0, 2)      \
        SPLIT_PART(name##_part, 0, 3) SPLIT_PART(name##_part, 1, 0) SPLIT_PART(name##_part, 1, 1)      \
        SPLIT_PART(name##_part, 1, 2) SPLIT_PART(name##_part, 1, 3)                                    \
    }

DEFINE_SPLIT_TILE(tile_f32_avx2, float, float, job->in, 2, subtile_f32_avx2)
DEFINE_SPLIT_TILE(tile_bf16_avx2, uint16_t, uint16_t, job->in, 2, subtile_bf16_avx2)
DEFINE_SPLIT_TILE(qtile_f32_avx2, float, uint8_t, job->row_bytes, MR, qsubtile_f32_avx2)
DEFINE_SPLIT_TILE(qtile_bf16_avx2, uint16_t, uint8_t, job->row_bytes, MR, qsubtile_bf16_avx2)

DEFINE_PANEL(panel_f32_avx2, AVX2, 256, float, float, in, inner_slice(in, 4, LANES), tile_f32_avx2)
DEFINE_PANEL(panel_bf16_avx2, AVX2, 256, uint16_t, uint16_t, in, inner_slice(in, 2, 2 * LANES), tile_bf16_avx2)
DEFINE_PANEL(qpanel_f32_avx2, AVX2, 256, float, uint8_t, job->row_bytes, in, qtile_f32_avx2)
DEFINE_PANEL(qpanel_bf16_avx2, AVX2, 256, uint16_t, uint8_t, job->row_bytes, in, qtile_bf16_avx2)

__attribute__((target(AVX2))) TILE_INLINE void store_block_f32_256(float *out, const __m256 *lo, const __m256 *hi)
{
    for (int h = 0; h < 2; ++h) {
        _mm256_storeu_ps(out + 8 * h, lo[h]);
        _mm256_storeu_ps(out + LANES + 8 * h, hi[h]);
    }
}

__attribute__((target(AVX2))) TILE_INLINE void store_block_bf16_256(uint16_t *out, const __m256 *lo,
                                                                     const __m256 *hi)
{
    _mm256_storeu_si256((__m256i *)out, round_bf16_256(lo));
    _mm256_storeu_si256((__m256i *)(out + LANES), round_bf16_256(hi));
}

DEFINE_DECODE(decode_f32_avx2, AVX2, 256, float, store_block_f32_256)
DEFINE_DECODE(decode_bf16_avx2, AVX2, 256, uint16_t, store_block_bf16_256)

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
 * Threads: chunks of NB weight rows on the shared helper pool (common/pool.h). */

static void run_chunk(const void *ctx, int64_t begin, int64_t end, int worker)
{
    const linear_job *job = ctx;
    job->run(job, begin, end, worker);
}

static void run_job(const linear_job *job, int threads)
{
    if (job->rows * job->out * job->in < (1 << 16)) /* too little work to share */
        threads = 1;
    pak_pool_run(run_chunk, job, job->out, NB, threads);
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

/* The functions a product of `elem_bytes`-wide inputs runs on the active instruction set. */
typedef struct {
    panel_fn panel;   /* dense weight rows */
    decode_fn decode; /* quantized rows into dense ones */
    panel_fn direct;  /* quantized rows decoded in registers, or NULL */
    int direct_rows;  /* the most input rows `direct` takes (at most DIRECT_ROWS) */
} linear_variant;

static linear_variant choose_variant(int elem_bytes)
{
    const int f32 = elem_bytes == 4;
#if PAK_X86_VARIANTS
    const int isa = pak_isa_active();
    if (isa == PAK_ISA_AVX512) {
        if (f32)
            return (linear_variant){panel_f32_avx512, decode_f32_avx512, qdirect_f32_avx512, DIRECT_ROWS};
        if (pak_linear_bf16_native())
            return (linear_variant){panel_bf16_native, decode_bf16_native, qdirect_bf16_native, DIRECT_ROWS};
        return (linear_variant){panel_bf16_avx512, decode_bf16_avx512, qdirect_bf16_avx512, DIRECT_ROWS};
    }
    if (isa == PAK_ISA_AVX2 && __builtin_cpu_supports("fma")) /* else the generic code: AVX2 without FMA */
        return f32 ? (linear_variant){panel_f32_avx2, decode_f32_avx2, qpanel_f32_avx2, AVX2_DIRECT_ROWS}
                   : (linear_variant){panel_bf16_avx2, decode_bf16_avx2, qpanel_bf16_avx2, AVX2_DIRECT_ROWS};
#endif
    return f32 ? (linear_variant){panel_f32_generic, decode_f32_generic, NULL, 0}
               : (linear_variant){panel_bf16_generic, decode_bf16_generic, NULL, 0};
}

/* Run a dense product whose inputs are `elem_bytes` wide. */
static int linear_dense(const void *x, const void *w, void *y, int y_f32, int64_t rows, int64_t out, int64_t in,
                        int threads, int elem_bytes)
{
    const int rc = check_sizes(x, w, y, rows, out, in);
    if (rc != PAK_OK || rows == 0 || out == 0)
        return rc;
    const linear_job job = {.x = x, .w = w, .y = y, .rows = rows, .out = out, .in = in, .y_f32 = y_f32,
                            .row_bytes = in * elem_bytes, .dense_row = in * elem_bytes,
                            .panel = choose_variant(elem_bytes).panel, .run = run_dense};
    run_job(&job, threads);
    return PAK_OK;
}

int pak_linear_f32(const float *x, const float *w, float *y, int64_t rows, int64_t out, int64_t in, int threads)
{
    const int64_t started = pak_profile_begin();
    return pak_profile_return(PAK_PROFILE_LINEAR, started, linear_dense(x, w, y, 1, rows, out, in, threads, 4));
}

int pak_linear_bf16(const uint16_t *x, const uint16_t *w, void *y, int y_f32, int64_t rows, int64_t out,
                    int64_t in, int threads)
{
    const int64_t started = pak_profile_begin();
    return pak_profile_return(PAK_PROFILE_LINEAR, started, linear_dense(x, w, y, y_f32 != 0, rows, out, in, threads, 2));
}

int64_t pak_weight_row_bytes(int wtype, int64_t in)
{
    if (in <= 0 || in % QUANT_BLOCK != 0)
        return 0;
    return in / QUANT_BLOCK * quant_block_bytes(wtype);
}

/* Run a product with quantized weights and `elem_bytes`-wide inputs. */
static int linear_quantized(const void *x, const uint8_t *w, int wtype, void *y, int y_f32, int64_t rows,
                            int64_t out, int64_t in, int threads, int elem_bytes)
{
    int rc = check_sizes(x, w, y, rows, out, in);
    if (rc != PAK_OK)
        return rc;
    const int64_t row_bytes = pak_weight_row_bytes(wtype, in);
    if (row_bytes == 0)
        return PAK_EINVAL;
    if (rows == 0 || out == 0)
        return PAK_OK;
    const linear_variant variant = choose_variant(elem_bytes);
    linear_job job = {.x = x, .w = w, .y = y, .rows = rows, .out = out, .in = in, .y_f32 = y_f32,
                      .row_bytes = row_bytes, .dense_row = in * elem_bytes, .panel = variant.panel,
                      .wtype = wtype, .decode = variant.decode, .run = run_quantized,
                      .direct = rows <= variant.direct_rows ? variant.direct : NULL};
    if (job.dense_row > PANEL_BYTES) { /* rows too long for the stack: NR rows per worker on the heap */
        const int workers = threads < 1 ? 1 : threads > PAK_POOL_MAX_THREADS ? PAK_POOL_MAX_THREADS : threads;
        job.scratch = aligned_alloc(64, (size_t)((workers * job.dense_row * NR + 63) / 64 * 64));
        if (job.scratch == NULL)
            return PAK_ENOMEM;
    }
    run_job(&job, threads);
    free(job.scratch);
    return PAK_OK;
}

int pak_linear_quant_f32(const float *x, const uint8_t *w, int wtype, float *y, int64_t rows, int64_t out,
                         int64_t in, int threads)
{
    const int64_t started = pak_profile_begin();
    return pak_profile_return(PAK_PROFILE_LINEAR, started, linear_quantized(x, w, wtype, y, 1, rows, out, in, threads, 4));
}

int pak_linear_quant_bf16(const uint16_t *x, const uint8_t *w, int wtype, void *y, int y_f32, int64_t rows,
                          int64_t out, int64_t in, int threads)
{
    const int64_t started = pak_profile_begin();
    return pak_profile_return(PAK_PROFILE_LINEAR, started, linear_quantized(x, w, wtype, y, y_f32 != 0, rows, out, in, threads, 2));
}
