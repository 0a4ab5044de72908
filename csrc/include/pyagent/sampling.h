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
 * A row with 0 < k < vocab is read once: a running bound, never above the k-th largest value seen
 * so far, sends the few values that can still be in the top k to a small buffer while the row is
 * overwritten with -inf, and every later step works on that buffer before the kept values are
 * written back. Other rows take a pass for the maximum, one more for top-p's total mass, and one
 * writing the result.
 *
 * Errors: PAK_EPARAM (t not finite, p or q outside [0, 1] or NaN) is detected before anything is
 * written; PAK_EVALUE (a NaN or +inf logit, or +inf after scaling) reports the first such row,
 * after the rows before it were processed (later rows may have been too); that row's contents are
 * then unspecified (partly masked or scaled). *err_row (may be NULL) gets the row.
 * Rows are split among up to num_threads threads (fewer when there is little work: about 2^17
 * logits per thread at least); <= 1 runs on the calling thread only. Each thread needs O(vocab)
 * scratch memory (PAK_ENOMEM if it cannot be allocated); the calling thread keeps its scratch for
 * the next call with the same vocab.
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

/* pak_sampling_mask_f32 with flags, and optionally the kept tokens of each row for a selector that
 * then skips the rest (pak_sampling_mask_f32 is this with flags == 0 and kept == NULL).
 *
 * kept int32 and kept_values float32 [num_rows, kept_capacity], kept_count int32 [num_rows]
 * (kept_count NULL: nothing is recorded, and the other two must be NULL too; they may be NULL when
 * kept_capacity is 0): kept_count[r] = c >= 0 says that the logits of row r that are not -inf after
 * the call are exactly those of the tokens kept[r * kept_capacity + i], i < c, listed in increasing
 * order, with the values kept_values[r * kept_capacity + i]. -1 says they were not recorded: more
 * than kept_capacity, a row the mask left as it was, or a failed row. Rows with top-k always record
 * theirs (when they fit); rows with top-p or min-p alone do too. */
int pak_sampling_mask_ex_f32(float *logits, int64_t num_rows, int64_t vocab,
                             const float *temperature, const int32_t *top_k,
                             const float *top_p, const float *min_p, int flags, int num_threads,
                             int32_t *kept, float *kept_values, int32_t *kept_count,
                             int64_t kept_capacity, int64_t *err_row);

#endif
