/* Token indexes for speculative proposers (pyagent/spec_decode.h).
 *
 * Tokens live in a power-of-two ring addressed by absolute position, so a store can evict from the
 * front without moving anything; a history is the same ring that only grows. Each position links
 * to the previous position of the same token, and a small open-addressing table maps every token to
 * its latest position: the occurrences of a token, newest first, are one pointer chase each.
 * Links into evicted positions are never followed, since every walk stops below `start`.
 *
 * Matching walks the occurrences of the pattern's last token, newest first, measuring each common
 * suffix; this visits the same end positions in the same order as a backward scan of the whole
 * text would (so hits and their order are those of the scan) and stops early once a full-length
 * match has filled max_hits.
 */
#include <stdlib.h>
#include <string.h>

#include "pyagent/common.h"
#include "spec_decode/token_index.h"

static uint64_t table_hash(int32_t token)
{
    return (uint64_t)(uint32_t)token * 0x9E3779B97F4A7C15ull;
}

/* Slot of `token` in the latest-position table: its own, or the empty one where it would go. */
static int64_t table_find(const pak_token_index *index, int32_t token)
{
    const int64_t mask = index->table_slots - 1;
    int64_t slot = (int64_t)(table_hash(token) >> 32) & mask;
    while (index->keys[slot] != -1 && index->keys[slot] != token)
        slot = (slot + 1) & mask;
    return slot;
}

static int table_grow(pak_token_index *index)
{
    const int64_t old_slots = index->table_slots;
    const int64_t slots = old_slots ? 2 * old_slots : 64;
    int32_t *keys = malloc((size_t)slots * sizeof *keys);
    int64_t *latest = malloc((size_t)slots * sizeof *latest);
    if (keys == NULL || latest == NULL) {
        free(keys);
        free(latest);
        return PAK_ENOMEM;
    }
    memset(keys, 0xff, (size_t)slots * sizeof *keys); /* every key -1 */
    int32_t *old_keys = index->keys;
    int64_t *old_latest = index->latest;
    index->keys = keys;
    index->latest = latest;
    index->table_slots = slots;
    for (int64_t i = 0; i < old_slots; ++i) {
        if (old_keys[i] == -1)
            continue;
        const int64_t slot = table_find(index, old_keys[i]);
        keys[slot] = old_keys[i];
        latest[slot] = old_latest[i];
    }
    free(old_keys);
    free(old_latest);
    return PAK_OK;
}

/* Make room for `live` tokens in the ring, keeping the live ones at their positions. */
static int ring_reserve(pak_token_index *index, int64_t live)
{
    if (live <= index->slots)
        return PAK_OK;
    int64_t slots = index->slots ? index->slots : 64;
    while (slots < live)
        slots *= 2;
    int32_t *tokens = malloc((size_t)slots * sizeof *tokens);
    int64_t *prev = malloc((size_t)slots * sizeof *prev);
    if (tokens == NULL || prev == NULL) {
        free(tokens);
        free(prev);
        return PAK_ENOMEM;
    }
    for (int64_t p = index->start; p < index->end; ++p) {
        tokens[p & (slots - 1)] = index->tokens[p & (index->slots - 1)];
        prev[p & (slots - 1)] = index->prev[p & (index->slots - 1)];
    }
    free(index->tokens);
    free(index->prev);
    index->tokens = tokens;
    index->prev = prev;
    index->slots = slots;
    return PAK_OK;
}

/* Undo the appends of positions [end, index->end): the latest-position table points back to
 * where it pointed before (a token new to the table keeps its key, with no live position). */
static void append_rollback(pak_token_index *index, int64_t end)
{
    while (index->end > end) {
        const int64_t p = --index->end;
        const int32_t token = pak_ti_token(index, p);
        if (token >= 0)
            index->latest[table_find(index, token)] = index->prev[p & (index->slots - 1)];
    }
}

int pak_ti_append(pak_token_index *index, const int32_t *tokens, int64_t n)
{
    if (n == 0)
        return PAK_OK;
    const int rc = ring_reserve(index, index->end - index->start + n);
    if (rc != PAK_OK)
        return rc;
    const int64_t first = index->end;
    const int64_t mask = index->slots - 1;
    for (int64_t i = 0; i < n; ++i) {
        const int32_t token = tokens[i];
        const int64_t p = index->end;
        index->tokens[p & mask] = token;
        index->prev[p & mask] = -1;
        if (token >= 0) {
            if (2 * (index->table_used + 1) > index->table_slots && table_grow(index) != PAK_OK) {
                append_rollback(index, first);
                return PAK_ENOMEM;
            }
            const int64_t slot = table_find(index, token);
            if (index->keys[slot] == -1) {
                index->keys[slot] = token;
                index->latest[slot] = -1;
                ++index->table_used;
            }
            index->prev[p & mask] = index->latest[slot];
            index->latest[slot] = p;
        }
        ++index->end;
    }
    return PAK_OK;
}

pak_token_index *pak_token_index_new(int64_t capacity)
{
    if (capacity < 0)
        return NULL;
    pak_token_index *index = calloc(1, sizeof *index);
    if (index != NULL)
        index->capacity = capacity;
    return index;
}

void pak_token_index_free(pak_token_index *index)
{
    if (index == NULL)
        return;
    free(index->tokens);
    free(index->prev);
    free(index->keys);
    free(index->latest);
    free(index->sizes);
    free(index->draft_tokens);
    free(index->draft_parents);
    free(index->draft_buckets);
    free(index->draft_cond);
    free(index);
}

int64_t pak_token_index_len(const pak_token_index *index)
{
    if (index == NULL)
        return PAK_EINVAL;
    return index->end - index->start;
}

int64_t pak_token_index_extend(pak_token_index *index, const int32_t *tokens, int64_t n)
{
    if (index == NULL || index->capacity != 0 || n < 0 || (n > 0 && tokens == NULL))
        return PAK_EINVAL;
    return pak_ti_append(index, tokens, n);
}

/* Room for one more sequence size at the back of the sizes queue. */
static int sizes_reserve(pak_token_index *index)
{
    if (index->sizes_head + index->sizes_count < index->sizes_slots)
        return PAK_OK;
    if (index->sizes_head > 0) {
        memmove(index->sizes, index->sizes + index->sizes_head, (size_t)index->sizes_count * sizeof *index->sizes);
        index->sizes_head = 0;
        return PAK_OK;
    }
    const int64_t slots = index->sizes_slots ? 2 * index->sizes_slots : 16;
    int64_t *sizes = realloc(index->sizes, (size_t)slots * sizeof *sizes);
    if (sizes == NULL)
        return PAK_ENOMEM;
    index->sizes = sizes;
    index->sizes_slots = slots;
    return PAK_OK;
}

int64_t pak_token_index_add_sequence(pak_token_index *index, const int32_t *tokens, int64_t n)
{
    if (index == NULL || index->capacity == 0 || n < 0 || (n > 0 && tokens == NULL))
        return PAK_EINVAL;
    if (index->capacity < 2 || n == 0)
        return PAK_OK;
    const int64_t kept = n < index->capacity - 1 ? n : index->capacity - 1;
    const int64_t size = kept + 1;
    const int64_t live = index->end - index->start;
    /* reserve everything before evicting (ring, table, queue), so that the appends cannot fail
     * and running out of memory changes nothing */
    int rc = ring_reserve(index, live + size < index->capacity ? live + size : index->capacity);
    while (rc == PAK_OK && 2 * (index->table_used + kept) > index->table_slots)
        rc = table_grow(index);
    if (rc == PAK_OK)
        rc = sizes_reserve(index);
    if (rc != PAK_OK)
        return rc;
    while (index->sizes_count > 0 && index->end - index->start + size > index->capacity) {
        index->start += index->sizes[index->sizes_head++];
        --index->sizes_count;
    }
    const int32_t separator = -1;
    pak_ti_append(index, tokens + (n - kept), kept);
    pak_ti_append(index, &separator, 1);
    index->sizes[index->sizes_head + index->sizes_count++] = size;
    return PAK_OK;
}

int64_t pak_token_index_read(const pak_token_index *index, int64_t start, int64_t n, int32_t *out)
{
    if (index == NULL || start < 0 || n < 0 || (n > 0 && out == NULL))
        return PAK_EINVAL;
    const int64_t live = index->end - index->start;
    if (start >= live)
        return 0;
    if (n > live - start)
        n = live - start;
    for (int64_t i = 0; i < n; ++i)
        out[i] = pak_ti_token(index, index->start + start + i);
    return n;
}

int64_t pak_ti_match(const pak_token_index *text, const pak_token_index *pattern, int64_t min_len,
                     int64_t max_len, int64_t max_hits, int64_t *hits, int64_t *match_len)
{
    *match_len = 0;
    const int64_t text_len = text->end - text->start;
    const int64_t pattern_len = pattern->end - pattern->start;
    if (pattern_len < min_len || text_len < 2 || text->table_slots == 0)
        return 0;
    const int64_t cap = max_len < pattern_len ? max_len : pattern_len;
    const int64_t pattern_last = pattern->end - 1;
    const int32_t last = pak_ti_token(pattern, pattern_last);
    if (last < 0)
        return 0;
    const int64_t slot = table_find(text, last);
    if (text->keys[slot] == -1)
        return 0;
    int64_t best = min_len - 1;
    int64_t count = 0;
    for (int64_t p = text->latest[slot]; p >= text->start; p = text->prev[p & (text->slots - 1)]) {
        if (p > text->end - 2) /* the continuation text[p + 1] must exist */
            continue;
        const int64_t e = p + 1 - text->start;
        const int64_t limit = cap < e ? cap : e;
        int64_t m = 1;
        while (m < limit) {
            const int32_t token = pak_ti_token(text, p - m);
            if (token < 0 || token != pak_ti_token(pattern, pattern_last - m))
                break;
            ++m;
        }
        if (m > best) {
            best = m;
            hits[0] = e;
            count = 1;
        } else if (m == best && count > 0 && count < max_hits) {
            hits[count++] = e;
        }
        if (best == cap && count == max_hits)
            break;
    }
    if (count > 0)
        *match_len = best;
    return count;
}

int64_t pak_token_index_match(const pak_token_index *text, const pak_token_index *pattern, int64_t min_len,
                              int64_t max_len, int64_t max_hits, int64_t *hits, int64_t *match_len)
{
    if (text == NULL || pattern == NULL || hits == NULL || match_len == NULL || min_len < 1 || max_len < min_len
        || max_hits < 1)
        return PAK_EINVAL;
    return pak_ti_match(text, pattern, min_len, max_len, max_hits, hits, match_len);
}
