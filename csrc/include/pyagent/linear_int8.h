/* pyagent/linear_int8.h: integer products of int8-quantized activations with block-quantized weights.
 *
 * y[m, n] ~ sum_k x[m, k] * w[n, k] the way llama.cpp computes it: each row of x is quantized once
 * per call into int8 blocks, every block of weights is multiplied with its block of activations in
 * exact integer arithmetic, and the float scales are applied to those integer sums in one fixed
 * order. Integer sums are exact, so every instruction-set variant (AVX-512 VNNI, AVX-512 BW, AVX-VNNI,
 * AVX2, portable C; AMX where it is proven usable) gives the same bits, and a row's result never
 * depends on the other rows, the tiling or the thread count.
 *
 * Activations (float32 or bfloat16, widened exactly), per row, in blocks of 32 values as llama.cpp's
 * Q8_0 (gguf.quants' quantize_blocks): amax = max |x|, d = amax / 127, id = d ? 1 / d : 0,
 * q = roundf(x * id) (halves away from zero), all in float32; d is kept in float32 (not float16), with
 * s = the sum of the block's q, ds = d * s (llama.cpp's Q8_1 keeps d * s too) and the sums of its two
 * halves (pak_int8_act32). The K-quants take these blocks too (llama.cpp uses Q8_K for them, one scale
 * per 256 values): each sub-block is then a block of its own; on SmolLM2's Q4_K_M the perplexity of the
 * engine's test text is +0.35% over the exact product's (engine/tests/models/test_model_precision.py).
 *
 * Weights: a GGUF tensor's blocks, unchanged but for where they lie (the byte count is the file's):
 * rows in groups of PAK_INT8_GROUP_ROWS (the last group padded with zero rows), each group holding
 * its rows' blocks field by field ("sections"), every field with its 16 rows side by side: a field
 * of 4n bytes per row as n columns of 16 rows x 4 bytes, a float16 field as 16 rows x 2 bytes. For
 * each block of a group, in this order of sections (GGUF field names):
 *   Q4_0: qs, d               Q4_1: qs, d, m            Q8_0: qs, d
 *   Q5_0: qs, qh', d          Q5_1: qs, qh', d, m
 *   Q4_K: qs, scales, d, dmin     Q5_K: qs, qh, scales, d, dmin     Q6_K: ql, qh, scales, d
 * A section holds the field of every block of the group, block after block. qh' is Q5_0's and
 * Q5_1's word of high bits rearranged: bit 2k of its byte i is the high bit of weight 4k + i, bit
 * 2k + 1 that of weight 16 + 4k + i. A group of one block per row is thus 16 x (GGUF block bytes).
 *
 * The order (per output element; fma: one rounding; every product below rounded once):
 *   32-weight formats, blocks b = 0, 1, ...: y = fma(wd_b * ad_b, I_b, y), and for Q4_1 and Q5_1 then
 *     y = fma(wm_b, ds_b, y); I_b = sum_j c_j q_j with the weight's signed code c_j (Q4_0: nibble - 8,
 *     Q5_0: code - 16, Q4_1 and Q5_1: the unsigned code, Q8_0: the signed byte), wd and wm the
 *     block's float16 scale and minimum, ad_b and ds_b the activation block's d and ds;
 *   K-quants, each sub-block in turn (8 of 32 weights per super-block for Q4_K and Q5_K, 16 of 16 for
 *     Q6_K, whose pairs share an activation block): as a block of its own with the scale D = d * sc
 *     and, for Q4_K and Q5_K, the minimum M = -(dmin * m) (both exact in float32: a float16 times a
 *     6- or 8-bit integer), d and dmin the super-block's float16 scales, sc and m the sub-block's
 *     integer scale and minimum: y = fma(D * ad, I, y), then y = fma(M, ds, y) for Q4_K and Q5_K;
 *     I sums the sub-block's codes (Q4_K, Q5_K: unsigned; Q6_K: code - 32) times the activations;
 *   y starts at +0; I is an exact integer converted to float32 (exactly) where it is used; bfloat16
 *   results are y rounded once to the nearest bfloat16 (ties to even).
 */
#ifndef PYAGENT_LINEAR_INT8_H
#define PYAGENT_LINEAR_INT8_H

#include <stdint.h>

enum {
    PAK_INT8_GROUP_ROWS = 16 /* weight rows interleaved in one group */
};

/* One block of 32 activations (48 bytes). */
typedef struct {
    float d;          /* scale: value ~ d * q */
    int32_t s;        /* sum of q */
    float ds;         /* d * s, rounded once */
    int16_t half[2];  /* sums of q[0..15] and q[16..31] */
    int8_t q[32];
} pak_int8_act32;

/* Bytes of one group of PAK_INT8_GROUP_ROWS rows of `in` weights of GGML type `wtype` (2, 3, 6, 7, 8,
 * 12, 13 or 14) in the layout above: 16 times the GGUF row; 0 for another type or an `in` that is
 * not a positive multiple of the type's block. */
int64_t pak_int8_group_bytes(int wtype, int64_t in);

/* Quantize rows x [rows, in] (float32, or bfloat16 when x_bf16) into `out`: `rows` x in / 32
 * pak_int8_act32, row after row. PAK_EINVAL for an `in` that is not a positive multiple of 32, or NULL
 * pointers. */
int pak_int8_quantize(const void *x, int x_bf16, int64_t rows, int64_t in, pak_int8_act32 *out);

/* One weight matrix of a product, or one part of a matrix stacked from parts of different types:
 * `out` rows of type `wtype`, in groups at `w` (ceil(out / 16) groups of pak_int8_group_bytes). */
typedef struct {
    const uint8_t *w;
    int wtype;
    int64_t out;
} pak_int8_part;

/* Scratch bytes pak_linear_int8 needs for `rows` rows of `in` activations and these parts (the
 * quantized activations); 0 when the parts need none or do not fit `in`. */
int64_t pak_int8_scratch_bytes(const pak_int8_part *parts, int nparts, int64_t rows, int64_t in);

/* y [rows, sum of the parts' out] = x [rows, in] times the parts' rows stacked, by the order above.
 * x is float32, or bfloat16 when x_bf16; y float32 when y_f32 is non-zero, else bfloat16. scratch:
 * pak_int8_scratch_bytes bytes (8-byte aligned), or NULL to allocate them for the call. threads: as
 * pyagent/linear.h. Returns PAK_OK, PAK_EINVAL (NULL pointer, negative size, unknown type, `in` not
 * a multiple of a part's block), PAK_ENOMEM. */
int pak_linear_int8(const void *x, int x_bf16, const pak_int8_part *parts, int nparts, void *y, int y_f32,
                    int64_t rows, int64_t in, void *scratch, int threads);

/* Which integer dot product the x86 variants use: PAK_INT8_DOT_AUTO (VNNI where the CPU has it:
 * AVX-512 VNNI for the avx512 variant, AVX-VNNI for avx2) or PAK_INT8_DOT_MADDUBS (the AVX2 / AVX-512 BW
 * multiply-add pairs: tests and benchmarks). Returns the previous choice, or PAK_EINVAL. */
enum pak_int8_dot {
    PAK_INT8_DOT_AUTO = 0,
    PAK_INT8_DOT_MADDUBS = 1
};
int pak_int8_dot_select(int dot);

/* The dot-product instruction the active variant uses now: "vnni512", "vnni256" (VEX AVX-VNNI, or
 * AVX-512 VNNI on 256-bit vectors where only that is present), "maddubs512", "maddubs256", "scalar". */
const char *pak_int8_dot_name(void);

/* AMX (Intel Advanced Matrix Extensions) for products of many rows: 1 when it is in use, else 0.
 * The first call decides, once per process: the CPU must advertise AMX-TILE and AMX-INT8, Linux must
 * grant the tile data permission (arch_prctl ARCH_REQ_XCOMP_PERM), and a forked child must load a
 * tile configuration, multiply tiles and release them without a signal. Any failure means no AMX,
 * never a crash; pak_int8_amx_reason says which step failed. */
int pak_int8_amx_usable(void);

/* Why AMX is or is not used: "usable", "not compiled", "not advertised", "permission denied: ...",
 * "probe failed: ...". */
const char *pak_int8_amx_reason(void);

/* Whether products of many rows may use AMX: PAK_INT8_AMX_ALLOW (where usable; the default),
 * PAK_INT8_AMX_OFF, or PAK_INT8_AMX_EMULATE (tests: the AMX path with its tile products computed in
 * C, on any CPU with AVX-512). Returns the previous mode, or PAK_EINVAL. */
enum pak_int8_amx {
    PAK_INT8_AMX_OFF = 0,
    PAK_INT8_AMX_ALLOW = 1,
    PAK_INT8_AMX_EMULATE = 2
};
int pak_int8_amx_select(int mode);

/* The probe's isolation, for tests: run instruction `which` in a forked child the way the AMX probe
 * runs its tile instructions (0: a harmless one, 1: ud2, which raises SIGILL) and return 1 when the
 * child finished normally, 0 when it died of a signal or could not be run; the caller never sees
 * the signal. */
int pak_int8_probe_child(int which);

#endif
