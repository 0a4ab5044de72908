/* pyagent/sampling.h: the fused temperature / top-k / top-p / min-p mask.
 *
 * logits: float32 [num_rows, vocab], contiguous, row-major, modified in place. Every parameter
 * array has num_rows entries and may be NULL, which disables that step for every row.
 *
 * Per row, in this order (each step sees what the previous ones left):
 *   1. temperature t: when t > 0 and t != 1, every logit x becomes x / t (IEEE float division);
 *      t <= 0 (greedy by convention) or t == 1 leaves logits unscaled. t must be finite.
 *   2. top_k k: when 0 < k < vocab, tokens whose logit is below the k-th largest logit become -inf;
 *      tokens tied with the k-th largest are all kept. k <= 0 or k >= vocab disables it.
 *   3. top_p p in [0, 1]: over the probabilities of the tokens still kept (softmax of the remaining
 *      logits), walk the logits in descending order and keep every token down to the first one at
 *      which the cumulative probability reaches p, plus all tokens tied with that one. p == 0 keeps
 *      the top token(s); p == 1 disables it. If rounding leaves the sum short of p, all are kept.
 *   4. min_p q in [0, 1]: keep a token only if x - max >= log(q) (in double precision), i.e.
 *      prob >= q * max_prob. q == 0 disables it; q == 1 keeps only the tokens tied with the max.
 * Removed tokens become -inf; kept logits hold their (temperature-scaled) values. A row of only
 * -inf logits is left as it is. Probabilities for top-p are exp(x - max) computed in float32 by a
 * fixed polynomial (about 1e-7 relative error) and summed in double in a fixed order, so every
 * instruction-set variant, and the pure-torch fallback, give bit-identical results.
 *
 * Errors: PAK_EPARAM (t not finite, p or q outside [0, 1] or NaN) is detected before anything is
 * written; PAK_EVALUE (a NaN or +inf logit, or +inf after scaling) reports the first such row,
 * after the rows before it were processed (later rows may have been too) and that row possibly
 * scaled. *err_row (may be NULL) gets the row.
 * Rows are split among up to num_threads threads (fewer when there is little work: about 2^17
 * logits per thread at least); <= 1 runs on the calling thread only. Each thread allocates O(vocab)
 * scratch memory (PAK_ENOMEM if that fails).
 */
#ifndef PYAGENT_SAMPLING_H
#define PYAGENT_SAMPLING_H

#include <stdint.h>

int pak_sampling_mask_f32(float *logits, int64_t num_rows, int64_t vocab,
                          const float *temperature, const int32_t *top_k,
                          const float *top_p, const float *min_p, int num_threads,
                          int64_t *err_row);

/* Flags of pak_sampling_mask_ex_f32. PAK_MASK_TEMPERATURE_LAST: apply the temperature after
 * min-p instead of first (top-p and min-p then see unscaled logits; kept logits are divided by t at
 * the end; a NaN or +inf result is PAK_EVALUE for that row). Other bits must be 0. */
enum pak_mask_flags {
    PAK_MASK_TEMPERATURE_LAST = 1
};

/* pak_sampling_mask_f32 with flags (pak_sampling_mask_f32 is this with flags == 0). */
int pak_sampling_mask_ex_f32(float *logits, int64_t num_rows, int64_t vocab,
                             const float *temperature, const int32_t *top_k,
                             const float *top_p, const float *min_p, int flags, int num_threads,
                             int64_t *err_row);

#endif
