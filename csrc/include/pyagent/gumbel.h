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

#endif
