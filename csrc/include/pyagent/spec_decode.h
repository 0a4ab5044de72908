/* pyagent/spec_decode.h: suffix matching for model-free speculative proposers (n-gram, suffix).
 *
 * pak_suffix_match_i32 looks for the longest suffix of `pattern` (at least `min_len`, at most
 * `max_len` tokens) that also ends at an earlier place in `text` and is followed there by at least
 * one more token. An occurrence "ends at" e when text[e - m .. e - 1] equals the last m tokens of
 * the pattern; its continuation starts at text[e], so 1 <= e <= text_len - 1.
 *
 * `hits` receives up to `max_hits` end positions e of the longest match length, most recent
 * (largest e) first; the function returns how many it wrote (0 when no suffix of length >= min_len
 * occurs) and stores the match length in *match_len (0 when there is no hit). A pattern that is
 * the text itself (the per-request case) never matches at e == text_len, so the trivial
 * self-occurrence is excluded by construction. Negative token ids never match anything (use -1 as
 * a separator between concatenated sequences).
 *
 * Returns a negative pak_status for invalid arguments: NULL pointers with non-zero sizes, negative
 * sizes, min_len < 1, max_len < min_len or max_hits < 1 (PAK_EINVAL).
 */
#ifndef PYAGENT_SPEC_DECODE_H
#define PYAGENT_SPEC_DECODE_H

#include <stdint.h>

int64_t pak_suffix_match_i32(const int32_t *text, int64_t text_len, const int32_t *pattern,
                             int64_t pattern_len, int64_t min_len, int64_t max_len, int64_t max_hits,
                             int64_t *hits, int64_t *match_len);

#endif
