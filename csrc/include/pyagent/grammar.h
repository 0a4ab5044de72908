/* pyagent/grammar.h: token-bitmask kernels for structured output (grammar backends).
 *
 * logits:  [num_rows, vocab], contiguous, row-major.
 * bitmask: int32 [num_rows, ceil(vocab / 32)], contiguous; bit (j % 32) of word (j / 32) set means
 *          token j is allowed. Bits past `vocab` in the last word are ignored.
 * Every disallowed logit is overwritten with -inf in place; allowed logits are not touched.
 * indices: NULL masks every row; otherwise `num_indices` row numbers (int32 when index_bytes is 4,
 *          int64 when it is 8). Row r of logits is masked with row r of bitmask; rows not listed are
 *          left untouched; a row listed twice is masked twice (same result).
 * Every index is checked before anything is written: an index outside [0, num_rows) returns
 * PAK_EINDEX with *err_index set to its position in `indices` (err_index may be NULL).
 */
#ifndef PYAGENT_GRAMMAR_H
#define PYAGENT_GRAMMAR_H

#include <stdint.h>

/* float32 logits. */
int pak_token_bitmask_f32(float *logits, const int32_t *bitmask, int64_t num_rows, int64_t vocab,
                          const void *indices, int64_t num_indices, int index_bytes,
                          int64_t *err_index);

/* 16-bit logits (bfloat16 or float16): `neg_inf_bits` is the -inf bit pattern of the format
 * (0xFF80 for bfloat16, 0xFC00 for float16). */
int pak_token_bitmask_16(uint16_t *logits, const int32_t *bitmask, int64_t num_rows, int64_t vocab,
                         const void *indices, int64_t num_indices, int index_bytes,
                         uint16_t neg_inf_bits, int64_t *err_index);

#endif
