/* pyagent/gumbel.h: Gumbel-max token selection with a counter-based random stream.
 *
 * For row r the chosen token is the j maximising (double)logits[r, j] + g(seeds[r], steps[r], j)
 * over the finite logits (the lowest j among equal scores; -inf logits are never chosen), where
 *   key   = mix64(seed + (step + 1) * G),  h = mix64(key + (j + 1) * G),  G = 0x9E3779B97F4A7C15,
 *   u     = ((h >> 11) + 0.5) * 2^-53 in (0, 1),
 *   g     = -log(-log(u)) with log a fixed double-precision polynomial (pak_log of gumbel.c),
 * mix64 being the splitmix64 finaliser. A row's draw depends only on its seed, its step and its
 * logits, not on its position in the batch; the noise is computed for the finite logits only, so
 * a row masked down to k tokens costs one pass to find them plus O(k). The pure-torch fallback
 * (pyagent_kernels/_gumbel_torch.py) repeats every operation and chooses the same tokens.
 *
 * Errors: PAK_EVALUE (*err_row = the first such row, nothing written) when a row holds NaN or
 * +inf, or only -inf (nothing can be chosen).
 */
#ifndef PYAGENT_GUMBEL_H
#define PYAGENT_GUMBEL_H

#include <stdint.h>

int pak_gumbel_sample_f32(const float *logits, int64_t num_rows, int64_t vocab, const uint64_t *seeds,
                          const uint64_t *steps, int64_t *tokens, int64_t *err_row);

/* pak_gumbel_sample_f32 that looks only at each row's kept tokens where a mask listed them (see
 * pak_sampling_mask_ex_f32 in pyagent/sampling.h): kept int32 [num_rows, kept_capacity], kept_values
 * float32 [num_rows, kept_capacity] or NULL, kept_count int32 [num_rows] (kept_count NULL: every row
 * is scanned; kept may be NULL when kept_capacity is 0). For kept_count[r] = c >= 0 the row's
 * finite logits must be among the ids kept[r * kept_capacity + i], i < c (any order; the caller
 * vouches that every other logit of the row is -inf), with those logits in kept_values (which then
 * spares reading the row) or else read from the row, so the choice is the same as over the whole
 * row at O(c) cost; c = -1 scans the whole row. An id outside [0, vocab) is PAK_EINDEX (*err_row =
 * the row), c > kept_capacity PAK_EINVAL. With advance_steps != 0, every steps[r] grows by 1 once
 * all rows succeeded (a draw consumes a step). */
int pak_gumbel_sample_kept_f32(const float *logits, int64_t num_rows, int64_t vocab, const uint64_t *seeds,
                               uint64_t *steps, const int32_t *kept, const float *kept_values,
                               const int32_t *kept_count, int64_t kept_capacity, int64_t *tokens,
                               int advance_steps, int64_t *err_row);

#endif
