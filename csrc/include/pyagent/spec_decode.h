/* pyagent/spec_decode.h: token indexes and draft building for model-free speculative proposers.
 *
 * A pak_token_index holds a token sequence with, for every position, a link to the previous
 * position holding the same token, and for every token its latest position. Appending a token is
 * O(1); looking for earlier occurrences of a context's end walks only the positions of its last
 * token instead of rescanning the sequence. Two kinds:
 *
 * - capacity 0: a request's history (prompt then output), appended to step by step, never evicted;
 * - capacity > 0: a store of whole sequences (earlier requests' outputs), each followed by a -1
 *   separator, at most `capacity` tokens in all: adding a sequence that does not fit evicts the
 *   oldest ones; one longer than capacity - 1 keeps only its last capacity - 1 tokens.
 *
 * Positions below are relative to the oldest live token (0 .. len - 1).
 *
 * Matching (pak_token_index_match): the largest m in [min_len, max_len] such that the last m tokens
 * of `pattern` equal text[e - m .. e - 1] for some 1 <= e <= len(text) - 1 (so a continuation
 * text[e] exists). `hits` receives up to `max_hits` such e of that length, most recent (largest)
 * first; the return value is how many (0: no match), *match_len the length (0 when none). Passing
 * the same index as text and pattern looks for earlier occurrences of its own end. Negative ids never
 * match anything.
 *
 * Drafting (pak_propose_draft), for one request: append new_count tokens (new_tokens) to its
 * history; if the history holds a draft from its previous call, walk it with the appended tokens to
 * calibrate (below); match the history against itself and, when `store` is not NULL and not empty,
 * against the store (the longer match wins, the history on a tie); count the continuations
 * text[e .. e + budget - 1] of the winning hits (cut at a negative id or the text's end), most
 * recent hit first, into a trie whose nodes are numbered in insertion order; then choose the draft:
 * with `tree`, the `budget` nodes of highest score (ties: the shallower, then the lower number),
 * kept in number order; without, the chain that follows the child reached by the most
 * continuations (ties: the lower number) from the root. A node reached by fewer than min_prob x
 * (number of hits) continuations is never drafted. budget = limit, and with `cap_by_match` at most
 * ceil(spec_factor x match length). Node j is written at index j of tokens / parents (-1: child of
 * the root, else the parent's index in the draft) / scores, which hold at least `limit` entries;
 * the return value is the number of nodes (0: no draft, always when limit <= 0). The draft is
 * remembered by the history. `scratch` (from pak_draft_scratch_new) is working memory reused
 * across calls: one caller at a time.
 *
 * Scores estimate the probability that the target accepts the node. A node at depth d continuing a
 * match of length m extends it to m + d - 1 tokens; its bucket b is that length's (1..8 -> 0..7,
 * 9-10 -> 8, 11-12 -> 9, 13-16 -> 10, 17-24 -> 11, 25-32 -> 12, 33-48 -> 13, 49-64 -> 14, more
 * -> 15) and its branch share f is (its count) / (its parent's count, or the number of hits for a
 * child of the root). Its score is its parent's score (1 for the root) times
 * min(1, f x accepted[b] / tried[b]) of the calibration. Calibrating with a remembered draft: from
 * the root, for each appended token in order, every child j of the current node (in draft order)
 * adds its f to tried[b_j]; the child whose token equals the appended one, if any, adds 1 to its
 * accepted[b] and becomes the current node, otherwise the walk ends (as it does at a leaf).
 *
 * Every function returning int64_t returns a negative pak_status on failure: PAK_EINVAL for NULL
 * pointers with non-zero sizes, negative sizes, min_len < 1, max_len < min_len, max_hits < 1, an
 * append to a store or a sequence added to a history; PAK_EPARAM for min_prob outside [0, 1], a
 * negative spec_factor or a calibration bucket with tried <= 0 or accepted < 0; PAK_ENOMEM when
 * memory runs out (an index keeps its previous contents; when drafting itself runs out, the
 * tokens were appended).
 */
#ifndef PYAGENT_SPEC_DECODE_H
#define PYAGENT_SPEC_DECODE_H

#include <stdint.h>

typedef struct pak_token_index pak_token_index;

enum { PAK_DRAFT_BUCKETS = 16 };

/* Acceptance counts per bucket of extended match length (see above); start from prior pseudo-counts. */
typedef struct {
    double accepted[16];
    double tried[16];
} pak_draft_calibration;

typedef struct {
    int64_t min_len;        /* shortest match worth drafting from (>= 1) */
    int64_t max_len;        /* longest match measured (>= min_len) */
    int64_t max_hits;       /* occurrences of the match whose continuations are counted (>= 1) */
    double spec_factor;     /* with cap_by_match: draft at most ceil(spec_factor x match length) nodes */
    double min_prob;        /* in [0, 1] */
    int32_t tree;           /* 1: best nodes (a tree); 0: the most frequent chain */
    int32_t cap_by_match;   /* 1: apply spec_factor */
} pak_draft_params;

/* A new empty index (NULL when out of memory); capacity 0 for a history, > 0 for a store. */
pak_token_index *pak_token_index_new(int64_t capacity);
void pak_token_index_free(pak_token_index *index);

/* Live tokens. */
int64_t pak_token_index_len(const pak_token_index *index);

/* Append tokens to a history. */
int64_t pak_token_index_extend(pak_token_index *index, const int32_t *tokens, int64_t n);

/* Add one sequence and its separator to a store, evicting the oldest sequences to stay in bounds
 * (nothing happens for an empty sequence or a capacity below 2). */
int64_t pak_token_index_add_sequence(pak_token_index *index, const int32_t *tokens, int64_t n);

/* Copy live tokens [start, start + n) into out; returns how many were copied (n clipped to the end). */
int64_t pak_token_index_read(const pak_token_index *index, int64_t start, int64_t n, int32_t *out);

int64_t pak_token_index_match(const pak_token_index *text, const pak_token_index *pattern, int64_t min_len,
                              int64_t max_len, int64_t max_hits, int64_t *hits, int64_t *match_len);

/* Working memory of pak_propose_draft, grown on demand and kept for the next call. */
typedef struct pak_draft_scratch pak_draft_scratch;

/* A new empty scratch (NULL when out of memory). */
pak_draft_scratch *pak_draft_scratch_new(void);
void pak_draft_scratch_free(pak_draft_scratch *scratch);

int64_t pak_propose_draft(pak_token_index *history, const int32_t *new_tokens, int64_t new_count,
                          const pak_token_index *store, const pak_draft_params *params,
                          pak_draft_calibration *calibration, int64_t limit, pak_draft_scratch *scratch,
                          int32_t *tokens, int32_t *parents, double *scores);

#endif
