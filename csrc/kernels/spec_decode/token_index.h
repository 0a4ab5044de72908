/* Internal layout of pak_token_index, shared by token_index.c and propose.c. */
#ifndef PAK_SPEC_DECODE_TOKEN_INDEX_H
#define PAK_SPEC_DECODE_TOKEN_INDEX_H

#include <stdint.h>

#include "pyagent/spec_decode.h"

struct pak_token_index {
    int32_t *tokens;      /* token at absolute position p in slot p & (slots - 1) */
    int64_t *prev;        /* previous absolute position of the same token, -1 if none (or not indexed) */
    int64_t slots;        /* a power of two >= the live tokens (0 before the first append) */
    int64_t capacity;     /* a store's most live tokens; 0 for a history */
    int64_t start, end;   /* live absolute positions [start, end) */
    int32_t *keys;        /* latest-position table: token per slot, -1 when empty (linear probing) */
    int64_t *latest;
    int64_t table_slots, table_used;
    int64_t *sizes;       /* a store's sequence sizes (separator included), oldest at sizes_head */
    int64_t sizes_head, sizes_count, sizes_slots;
    /* a history's last draft, compared with the tokens that follow it at the next draft */
    int32_t *draft_tokens, *draft_parents, *draft_buckets;
    double *draft_cond;
    int64_t draft_size, draft_room;
    int64_t draft_at;     /* the history's end when the draft was made */
};

/* The token at absolute position p (which must be live). */
static inline int32_t pak_ti_token(const pak_token_index *index, int64_t p)
{
    return index->tokens[p & (index->slots - 1)];
}

/* Append n tokens to any index (no eviction); PAK_OK or PAK_ENOMEM. */
int pak_ti_append(pak_token_index *index, const int32_t *tokens, int64_t n);

/* pak_token_index_match without argument checks (the caller validated them). */
int64_t pak_ti_match(const pak_token_index *text, const pak_token_index *pattern, int64_t min_len,
                     int64_t max_len, int64_t max_hits, int64_t *hits, int64_t *match_len);

#endif
