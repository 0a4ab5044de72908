/* pyagent/penalties.h: repetition, frequency and presence penalties from per-request token counts.
 *
 * State (owned by the caller, one slot per request, reused across steps):
 *   seen  int32 [num_slots, vocab]: how often each token occurs in the penalised context (prompt and
 *         output, or their last N tokens with a penalty window);
 *   out   int32 [num_slots, vocab]: how often each token occurs among the output tokens of that context;
 *   bits  uint64 [num_slots, ceil(vocab / 64)]: bit j % 64 of word j / 64 set iff seen[j] > 0;
 *   present int32 [num_slots, vocab] and num_present int32 [num_slots]: the tokens whose bit is set,
 *         in present[slot, 0 .. num_present[slot]) (in the order they appeared; a token that leaves
 *         is replaced by the last one), so the apply step visits only the tokens that occur instead
 *         of the whole vocabulary, without a branch per token.
 * The counts are built once per request and then updated incrementally (one call per step adds each
 * row's new token and removes the token that left its window); they are never recounted from the
 * whole history.
 */
#ifndef PYAGENT_PENALTIES_H
#define PYAGENT_PENALTIES_H

#include <stdint.h>

/* Add d_seen[i] to seen[slots[i], tokens[i]] and d_out[i] to out[slots[i], tokens[i]] for i in
 * [0, n), keeping bits and the present lists in step with seen (entries in order: a token whose count
 * becomes positive is appended, one whose count drops to 0 is swapped with the last and dropped).
 * Every slot and token is checked first (PAK_EINDEX, *err_index = the first bad i, nothing
 * written). If the summed deltas leave a count negative, the counts are restored and PAK_EPARAM
 * names the first i touching such a count. Counts must stay below 2^31 (not checked). */
int pak_penalty_counts_update(int32_t *seen, int32_t *out, uint64_t *bits, int32_t *present,
                              int32_t *num_present, int64_t num_slots, int64_t vocab,
                              const int32_t *slots, const int32_t *tokens, const int32_t *d_seen,
                              const int32_t *d_out, int64_t n, int64_t *err_index);

/* Penalise row r of logits (float32 [num_rows, vocab], in place) with the counts of slot slots[r]:
 * for every token j with seen[j] > 0, in this order,
 *   repetition rp (HF semantics): x = x < 0 ? x * rp : x / rp  (rp == 1 leaves x unchanged);
 *   when out[j] > 0: x = x - fp * (float)out[j], then x = x - pp  (frequency, presence: OpenAI).
 * Tokens that do not occur are not touched; which tokens occur is read from the present lists alone
 * (seen and bits are not read: keep the lists as pak_penalty_counts_update leaves them; out is read
 * only for fp, pp != 0). Any of repetition / frequency / presence may be NULL
 * (1, 0, 0 for every row). Parameters are checked first (PAK_EPARAM, *err_row = the row: rp must be
 * finite and > 0, fp and pp finite), slots too (PAK_EINDEX); nothing is written then. */
int pak_penalties_apply_f32(float *logits, int64_t num_rows, int64_t vocab, const int32_t *out,
                            const int32_t *present, const int32_t *num_present, int64_t num_slots,
                            const int32_t *slots, const float *repetition, const float *frequency,
                            const float *presence, int64_t *err_row);

#endif
