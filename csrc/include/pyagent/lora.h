/* pyagent/lora.h: the LoRA deltas of a batch whose rows use different adapters, in one call.
 *
 * A linear layer y = x W^T serving LoRA adapters from fixed slots adds to each row t whose slot
 * s = slots[t] is not -1, for every output n of slice k (the outputs starts[k] <= n < starts[k + 1]):
 *
 *     y[t, n] += scale[s, k] * sum_{j < r} u[t, k, j] * b[s, j, n],   u[t, k, j] = sum_i x[t, i] * a[s, k, j, i]
 *
 * with r = ranks[s, k]: the shrink (x A^T, A [r, in]) then the expand (u B^T, B [out_k, r], stored
 * transposed) of Punica's batched LoRA, the rows grouped by slot so each adapter's matrices are read
 * once per call for all of its rows (SGMV), whatever order the rows come in. A slice is one target of
 * a fused projection (the q, k and v parts of a fused q/k/v matrix; gate and up), or the whole
 * output; scale[s, k] == 0 or ranks[s, k] == 0 says the slot's adapter does not touch slice k,
 * which is then skipped. Rows of slot -1 (the base model) are left alone.
 *
 * Layouts (contiguous, row-major; dtype PAK_LORA_F32 or PAK_LORA_BF16 for x, y, a and b alike):
 *   x [rows, in], y [rows, out] (added to in place), slots int32 [rows] (-1 or a slot < max_loras),
 *   a [max_loras, slices, max_rank, in], b [max_loras, max_rank, out] (slice k of slot s in columns
 *   starts[k] .. starts[k + 1] - 1 of rows 0 .. r - 1), scales float32 [max_loras, slices],
 *   ranks int32 [max_loras, slices] in [0, max_rank], starts int64 [slices + 1] from 0 up to out;
 *   scratch u float32 [rows, slices, max_rank] and order int32 [rows], both overwritten.
 *
 * Order of operations, so a row's bits depend only on its own input and adapter (never on the other
 * rows, their slots, the padding to max_rank, the threads or the instruction set): u as
 * pyagent/linear.h's float32 product (16 lanes of fused multiply-adds, lane j taking elements
 * 16c + j, then the lanes summed as (j, j + 8), (j, j + 4), (j, j + 2), (0, 1)), bfloat16 widened
 * exactly; then acc = fma(u[j], b[j, n], acc) for j = 0 .. r - 1 from acc = 0, then
 * y = y + acc * scale with each operation rounded to float32, and for bfloat16 y rounded once to the
 * nearest bfloat16 (ties to even). u stays in float32.
 *
 * threads: how many threads may share the call (the linear kernel's helper pool; a small call runs
 * on its caller). Returns PAK_OK; PAK_EINVAL for a NULL pointer with a non-zero size, a negative
 * size, an unknown dtype or starts that do not run from 0 up to out without decreasing; PAK_EINDEX
 * for a slot outside [-1, max_loras); PAK_EPARAM for a rank outside [0, max_rank] or a scale that is
 * not finite. Nothing is written when an argument is refused.
 */
#ifndef PYAGENT_LORA_H
#define PYAGENT_LORA_H

#include <stdint.h>

enum pak_lora_dtype {
    PAK_LORA_F32 = 0,
    PAK_LORA_BF16 = 1
};

int pak_lora_apply(const void *x, void *y, int dtype, const int32_t *slots, int64_t rows, int64_t in, int64_t out,
                   const void *a, const void *b, const float *scales, const int32_t *ranks, const int64_t *starts,
                   int64_t slices, int64_t max_loras, int64_t max_rank, float *u, int32_t *order, int threads);

#endif
