/* Suffix matching for speculative proposers (pyagent/spec_decode.h).
 *
 * One backward scan over the text: at every end position whose last token equals the pattern's
 * last token, the common suffix is measured (capped at max_len). Scanning from the end means the
 * hits of the best length come out most recent first; a longer match restarts the hit list.
 * The scan is O(text_len * average common suffix); it is a single pass with no allocation, which
 * for the histories a proposer sees (thousands of tokens) takes microseconds.
 */
#include <stddef.h>
#include <stdint.h>

#include "pyagent/common.h"
#include "pyagent/spec_decode.h"

int64_t pak_suffix_match_i32(const int32_t *text, int64_t text_len, const int32_t *pattern,
                             int64_t pattern_len, int64_t min_len, int64_t max_len, int64_t max_hits,
                             int64_t *hits, int64_t *match_len)
{
    if (text_len < 0 || pattern_len < 0 || min_len < 1 || max_len < min_len || max_hits < 1
        || match_len == NULL || hits == NULL || (text_len > 0 && text == NULL)
        || (pattern_len > 0 && pattern == NULL))
        return PAK_EINVAL;
    *match_len = 0;
    if (pattern_len < min_len || text_len < 2)
        return 0;
    const int64_t cap = max_len < pattern_len ? max_len : pattern_len;
    const int32_t last = pattern[pattern_len - 1];
    if (last < 0)
        return 0;
    const int32_t *pend = pattern + pattern_len;
    int64_t best = min_len - 1;
    int64_t count = 0;
    for (int64_t e = text_len - 1; e >= 1; --e) {
        if (text[e - 1] != last)
            continue;
        const int64_t limit = cap < e ? cap : e;
        int64_t m = 1;
        while (m < limit && text[e - 1 - m] == pend[-1 - m] && text[e - 1 - m] >= 0)
            ++m;
        if (m > best) {
            best = m;
            hits[0] = e;
            count = 1;
        } else if (m == best && count > 0 && count < max_hits) {
            hits[count++] = e;
        }
    }
    if (count > 0)
        *match_len = best;
    return count;
}
