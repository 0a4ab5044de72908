/* pyagent/greedy.h: greedy token selection, the argmax of each row.
 *
 * For row r of logits float32 [num_rows, vocab] (contiguous, row-major), tokens[r] gets the lowest
 * index j holding the row's largest value (torch's max over a row answers the same index). A row
 * that holds a NaN or +inf, or only -inf, has no token to choose: PAK_EVALUE, *err_row (may be NULL)
 * = the first such row, and tokens[r] of the rows before it written. Comparisons only, so every
 * instruction-set variant chooses the same token. PAK_EINVAL for NULL pointers, negative sizes or a
 * vocab of 0 with rows to choose in.
 */
#ifndef PYAGENT_GREEDY_H
#define PYAGENT_GREEDY_H

#include <stdint.h>

int pak_greedy_f32(const float *logits, int64_t num_rows, int64_t vocab, int64_t *tokens, int64_t *err_row);

#endif
