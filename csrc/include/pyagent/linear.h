/* pyagent/linear.h: batch-invariant matrix products for the model's linear layers.
 *
 * y[m, n] = sum_k x[m, k] * w[n, k] for x [rows, in], w [out, in] and y [rows, out], all contiguous
 * and row-major (the layout of torch's F.linear without bias).
 *
 * Every output element is computed in one fixed order that depends only on `in`: 16 float32 lanes
 * accumulate the products of their share of the row with fused multiply-adds, then the lanes are
 * summed in a fixed tree. Which other rows share the call, where the row sits, how the work is
 * tiled and how many threads run it never change a single bit of the result, so a sequence's
 * tokens do not depend on its batch. All instruction-set variants follow the same order and give the
 * same bits for normal numbers (the AVX-512 BF16 instruction treats subnormal inputs as zero).
 *
 * bfloat16 inputs are multiplied exactly in float32; the float32 sums are stored as they are or
 * rounded to the nearest bfloat16 (ties to even) once at the end.
 * threads: how many threads may share the call (1 or more). The helpers are started on first use
 * and wait between calls, spinning briefly, then sleeping; a helper that cannot be started, or a
 * pool busy with a call from another thread, only means fewer threads for this call.
 * Returns PAK_OK, or PAK_EINVAL for a NULL pointer with a non-zero size or a negative size (and, for
 * quantized weights, an unknown wtype or an `in` that is not a multiple of 32).
 */
#ifndef PYAGENT_LINEAR_H
#define PYAGENT_LINEAR_H

#include <stdint.h>

int pak_linear_f32(const float *x, const float *w, float *y, int64_t rows, int64_t out, int64_t in,
                   int threads);

/* bfloat16 x and w; y is float32 when y_f32 is non-zero (the sums unrounded, e.g. for logits),
 * else bfloat16. */
int pak_linear_bf16(const uint16_t *x, const uint16_t *w, void *y, int y_f32, int64_t rows, int64_t out,
                    int64_t in, int threads);

/* Block-quantized weights: llama.cpp's GGUF formats with each block's float16 scales widened to
 * float32 (exactly), so the kernel broadcasts them straight from memory. Each row of w is in / 32
 * blocks of 32 weights; a block of `wtype` (the values are GGML type ids) holds:
 *   PAK_WEIGHT_Q4_0 (2): float32 d, 16 bytes of 4-bit q (20 bytes); weight = d * (q - 8)
 *   PAK_WEIGHT_Q4_1 (3): float32 d, float32 m, 16 bytes of 4-bit q (24 bytes); weight = d * q + m
 *   PAK_WEIGHT_Q5_0 (6): float32 d, 32-bit h, 16 bytes of 4-bit l (24 bytes); weight = d * (q - 16)
 *   PAK_WEIGHT_Q5_1 (7): float32 d, float32 m, 32-bit h, 16 bytes of 4-bit l (28 bytes);
 *                        weight = d * q + m
 *   PAK_WEIGHT_Q8_0 (8): float32 d, 32 signed bytes q (36 bytes); weight = d * q
 *   PAK_WEIGHT_Q6_K (14): float32 d0, float32 d1, 32 signed bytes q (40 bytes); weight j = d0 * q
 *                        for j < 16, d1 * q for the others
 * In the 4-bit formats byte j holds weight j in its low half and weight j + 16 in its high half,
 * as in GGUF; the 5-bit formats hold the low 4 bits l of each code so, and bit j of the little-
 * endian word h is bit 4 of weight j's code q. The K-quants' super-blocks of 256 weights are split
 * into such blocks with each sub-block's scale and minimum multiplied out (exactly: d * scale, and
 * dmin * min negated, in float32): Q4_K becomes Q4_1 blocks, Q5_K Q5_1 blocks and Q6_K the blocks
 * above, codes minus 32, one scale per 16 weights. Each weight is computed in float32 with one
 * rounding per operation (no fused multiply-add), as the gguf package's dequantization does, then
 * for bfloat16 rounded to the nearest bfloat16; the product then runs exactly as pak_linear_f32 /
 * pak_linear_bf16 on those values, so the result is bit-identical to dequantizing the whole matrix
 * first. `in` must be a multiple of 32. */
enum pak_weight_type {
    PAK_WEIGHT_Q4_0 = 2,
    PAK_WEIGHT_Q4_1 = 3,
    PAK_WEIGHT_Q5_0 = 6,
    PAK_WEIGHT_Q5_1 = 7,
    PAK_WEIGHT_Q8_0 = 8,
    PAK_WEIGHT_Q6_K = 14
};

/* Bytes of one row of `in` weights of `wtype` as above; 0 for an unknown type or `in` not a
 * positive multiple of 32. */
int64_t pak_weight_row_bytes(int wtype, int64_t in);

int pak_linear_quant_f32(const float *x, const uint8_t *w, int wtype, float *y, int64_t rows, int64_t out,
                         int64_t in, int threads);

int pak_linear_quant_bf16(const uint16_t *x, const uint8_t *w, int wtype, void *y, int y_f32, int64_t rows,
                          int64_t out, int64_t in, int threads);

/* 1 when pak_linear_bf16 uses the AVX-512 BF16 dot-product instruction on this CPU, else 0. */
int pak_linear_bf16_native(void);

#endif
