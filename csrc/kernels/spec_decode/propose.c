/* A request's draft from its history and a store (pyagent/spec_decode.h).
 *
 * Append the request's new tokens, calibrate with its previous draft, match, count the winning
 * hits' continuations into a small trie (nodes numbered in insertion order, hits newest first),
 * score its nodes and choose the draft. The trie has at most max_hits x budget nodes; children are
 * kept in a sibling list, which is short (one child per distinct continuation token). The hits, the
 * trie and the ranking live in a scratch that grows to the largest draft asked for and is reused,
 * so a call allocates nothing once warm.
 */
#include <math.h>
#include <stdlib.h>

#include "pyagent/common.h"
#include "spec_decode/token_index.h"

typedef struct {
    int32_t token;
    int32_t parent;       /* -1: a child of the root */
    int32_t depth;        /* 1 for children of the root */
    int32_t count;        /* continuations passing through the node */
    int32_t first_child;  /* -1: none */
    int32_t next_sibling; /* -1: none */
    int32_t bucket;       /* calibration bucket of the extended match length */
    double share;         /* count / parent's count (or / hits) */
    double score;         /* estimated probability that the target accepts the node */
} trie_node;

typedef struct {
    trie_node *nodes;
    int32_t size;
    int32_t root_child;   /* first child of the root, -1: none */
} trie;

/* Bucket of an extended match length (pyagent/spec_decode.h). */
static int32_t length_bucket(int64_t length)
{
    static const int64_t upper[] = {10, 12, 16, 24, 32, 48, 64};
    if (length <= 8)
        return length < 1 ? 0 : (int32_t)(length - 1);
    for (int32_t b = 0; b < 7; ++b)
        if (length <= upper[b])
            return 8 + b;
    return PAK_DRAFT_BUCKETS - 1;
}

static int32_t trie_child(trie *t, int32_t node, int32_t token)
{
    int32_t *link = node < 0 ? &t->root_child : &t->nodes[node].first_child;
    while (*link != -1) {
        if (t->nodes[*link].token == token)
            return *link;
        link = &t->nodes[*link].next_sibling;
    }
    const int32_t child = t->size++;
    t->nodes[child] = (trie_node){token, node, node < 0 ? 1 : t->nodes[node].depth + 1, 0, -1, -1, 0, 0.0, 0.0};
    *link = child;
    return child;
}

/* Count text[e .. e + budget - 1] (cut at a negative id or the text's end) for every hit e. */
static void trie_fill(trie *t, const pak_token_index *text, const int64_t *hits, int64_t num_hits, int64_t budget)
{
    t->size = 0;
    t->root_child = -1;
    for (int64_t h = 0; h < num_hits; ++h) {
        int32_t node = -1;
        const int64_t begin = text->start + hits[h];
        const int64_t stop = begin + budget < text->end ? begin + budget : text->end;
        for (int64_t p = begin; p < stop; ++p) {
            const int32_t token = pak_ti_token(text, p);
            if (token < 0)
                break;
            node = trie_child(t, node, token);
            ++t->nodes[node].count;
        }
    }
}

/* Scores in number order (a parent always comes before its children). */
static void trie_score(trie *t, int64_t num_hits, int64_t match_len, const pak_draft_calibration *calibration)
{
    for (int32_t i = 0; i < t->size; ++i) {
        trie_node *node = &t->nodes[i];
        const trie_node *parent = node->parent < 0 ? NULL : &t->nodes[node->parent];
        node->bucket = length_bucket(match_len + node->depth - 1);
        node->share = (double)node->count / (parent == NULL ? (double)num_hits : (double)parent->count);
        const double rate = calibration->accepted[node->bucket] / calibration->tried[node->bucket];
        const double chance = node->share * rate;
        node->score = (parent == NULL ? 1.0 : parent->score) * (chance < 1.0 ? chance : 1.0);
    }
}

/* Whether node i ranks before node j: higher score, then shallower, then a lower number. */
static int ranks_before(const trie *t, int32_t i, int32_t j)
{
    const trie_node *x = &t->nodes[i], *y = &t->nodes[j];
    if (x->score != y->score)
        return x->score > y->score;
    if (x->depth != y->depth)
        return x->depth < y->depth;
    return i < j;
}

/* The `budget` best-ranked nodes reached by at least `threshold` continuations, in number order
 * (an insertion into a ranked list of at most `budget`, then an insertion sort by number). A parent
 * never ranks below its child (its score is no lower, and it is shallower), so the set is closed. */
static int64_t best_tree(const trie *t, int64_t budget, double threshold, int32_t *order)
{
    int64_t n = 0;
    for (int32_t i = 0; i < t->size; ++i) {
        if (!((double)t->nodes[i].count >= threshold && t->nodes[i].count > 0))
            continue;
        if (n == budget && !ranks_before(t, i, order[n - 1]))
            continue;
        int64_t k = n < budget ? n++ : n - 1;
        for (; k > 0 && ranks_before(t, i, order[k - 1]); --k)
            order[k] = order[k - 1];
        order[k] = i;
    }
    for (int64_t a = 1; a < n; ++a) {
        const int32_t node = order[a];
        int64_t k = a;
        for (; k > 0 && order[k - 1] > node; --k)
            order[k] = order[k - 1];
        order[k] = node;
    }
    return n;
}

/* The chain that follows the child with the most continuations (ties: the lower number). */
static int64_t best_chain(const trie *t, int64_t budget, double threshold, int32_t *order)
{
    int64_t n = 0;
    int32_t child = t->root_child;
    while (n < budget && child != -1) {
        int32_t best = child;
        for (int32_t c = child; c != -1; c = t->nodes[c].next_sibling) {
            const trie_node *x = &t->nodes[c], *y = &t->nodes[best];
            if (x->count > y->count || (x->count == y->count && c < best))
                best = c;
        }
        if ((double)t->nodes[best].count < threshold)
            break;
        order[n++] = best;
        child = t->nodes[best].first_child;
    }
    return n;
}

/* Add the tokens appended since the history's last draft to the calibration, then forget the draft. */
static void calibrate(pak_token_index *history, pak_draft_calibration *calibration)
{
    int32_t node = -1;
    for (int64_t p = history->draft_at; p < history->end && history->draft_size > 0; ++p) {
        const int32_t token = pak_ti_token(history, p);
        int32_t next = -1;
        for (int32_t j = 0; j < history->draft_size; ++j) {
            if (history->draft_parents[j] != node)
                continue;
            calibration->tried[history->draft_buckets[j]] += history->draft_cond[j];
            if (history->draft_tokens[j] == token)
                next = j;
        }
        if (next < 0)
            break;
        calibration->accepted[history->draft_buckets[next]] += 1.0;
        node = next;
    }
    history->draft_size = 0;
}

/* Resize the array `ptr` to `count` elements: 1, or 0 when out of memory (then `ptr` is unchanged,
 * still valid, and the caller keeps its old room). */
#define GROW(ptr, count)                                                                          \
    __extension__({                                                                                \
        __typeof__(ptr) grown_ = realloc((ptr), (size_t)(count) * sizeof *(ptr));                  \
        if (grown_ != NULL)                                                                        \
            (ptr) = grown_;                                                                        \
        grown_ != NULL;                                                                            \
    })

/* Write the chosen nodes (number order, closed under parents) as the draft and remember it in the
 * history; returns the node count, or PAK_ENOMEM. */
static int64_t emit(const trie *t, const int32_t *chosen, int64_t n, int32_t *where, pak_token_index *history,
                    int32_t *tokens, int32_t *parents, double *scores)
{
    if (n > history->draft_room) {
        if (!(GROW(history->draft_tokens, n) && GROW(history->draft_parents, n) && GROW(history->draft_buckets, n)
              && GROW(history->draft_cond, n)))
            return PAK_ENOMEM;
        history->draft_room = n;
    }
    for (int64_t k = 0; k < n; ++k)
        where[chosen[k]] = (int32_t)k;
    for (int64_t k = 0; k < n; ++k) {
        const trie_node *node = &t->nodes[chosen[k]];
        tokens[k] = node->token;
        parents[k] = node->parent < 0 ? -1 : where[node->parent];
        scores[k] = node->score;
        history->draft_tokens[k] = node->token;
        history->draft_parents[k] = parents[k];
        history->draft_buckets[k] = node->bucket;
        history->draft_cond[k] = node->share;
    }
    history->draft_size = n;
    history->draft_at = history->end;
    return n;
}

struct pak_draft_scratch {
    int64_t *hits;        /* the history's hits, then the store's (2 x hit_room) */
    int64_t hit_room;
    trie t;
    int32_t *order, *where;
    int64_t node_room;
};

pak_draft_scratch *pak_draft_scratch_new(void)
{
    pak_draft_scratch *scratch = calloc(1, sizeof *scratch);
    if (scratch != NULL)
        scratch->t.root_child = -1;
    return scratch;
}

void pak_draft_scratch_free(pak_draft_scratch *scratch)
{
    if (scratch == NULL)
        return;
    free(scratch->hits);
    free(scratch->t.nodes);
    free(scratch->order);
    free(scratch->where);
    free(scratch);
}

/* Room for 2 x hit_room hits and node_room trie nodes; PAK_OK or PAK_ENOMEM (keeping the old room). */
static int64_t scratch_reserve(pak_draft_scratch *scratch, int64_t hit_room, int64_t node_room)
{
    if (hit_room > scratch->hit_room) {
        if (!GROW(scratch->hits, 2 * hit_room))
            return PAK_ENOMEM;
        scratch->hit_room = hit_room;
    }
    if (node_room > scratch->node_room) {
        if (!(GROW(scratch->t.nodes, node_room) && GROW(scratch->order, node_room) && GROW(scratch->where, node_room)))
            return PAK_ENOMEM;
        scratch->node_room = node_room;
    }
    return PAK_OK;
}

static int64_t check_arguments(const pak_token_index *history, const int32_t *new_tokens, int64_t new_count,
                               const pak_draft_params *params, const pak_draft_calibration *calibration,
                               int64_t limit, const pak_draft_scratch *scratch, const int32_t *tokens,
                               const int32_t *parents, const double *scores)
{
    if (history == NULL || history->capacity != 0 || new_count < 0 || (new_count > 0 && new_tokens == NULL)
        || params == NULL || calibration == NULL || scratch == NULL
        || (limit > 0 && (tokens == NULL || parents == NULL || scores == NULL)))
        return PAK_EINVAL;
    if (params->min_len < 1 || params->max_len < params->min_len || params->max_hits < 1)
        return PAK_EINVAL;
    if (!(params->min_prob >= 0.0 && params->min_prob <= 1.0) || !(params->spec_factor >= 0.0))
        return PAK_EPARAM;
    for (int b = 0; b < PAK_DRAFT_BUCKETS; ++b)
        if (!(calibration->tried[b] > 0.0) || !(calibration->accepted[b] >= 0.0))
            return PAK_EPARAM;
    return PAK_OK;
}

int64_t pak_propose_draft(pak_token_index *history, const int32_t *new_tokens, int64_t new_count,
                          const pak_token_index *store, const pak_draft_params *params,
                          pak_draft_calibration *calibration, int64_t limit, pak_draft_scratch *scratch,
                          int32_t *tokens, int32_t *parents, double *scores)
{
    int64_t rc = check_arguments(history, new_tokens, new_count, params, calibration, limit, scratch, tokens,
                                 parents, scores);
    if (rc != PAK_OK)
        return rc;
    if (new_count > 0 && (rc = pak_ti_append(history, new_tokens, new_count)) != PAK_OK)
        return rc;
    calibrate(history, calibration);
    if (limit <= 0)
        return 0;
    const int64_t hit_room = params->max_hits;
    if ((rc = scratch_reserve(scratch, hit_room, hit_room * limit)) != PAK_OK)
        return rc;
    int64_t *hits = scratch->hits;
    int64_t length;
    int64_t found = pak_ti_match(history, history, params->min_len, params->max_len, params->max_hits, hits, &length);
    const pak_token_index *text = history;
    const int64_t *used = hits;
    if (store != NULL && store->end > store->start) {
        int64_t store_length;
        const int64_t store_found = pak_ti_match(store, history, params->min_len, params->max_len, params->max_hits,
                                                 hits + hit_room, &store_length);
        if (store_length > length) {
            found = store_found, length = store_length, text = store, used = hits + hit_room;
        }
    }
    if (found == 0)
        return 0;
    if (params->cap_by_match) {
        const double cap = ceil(params->spec_factor * (double)length);
        if (cap < (double)limit)
            limit = (int64_t)cap;
    }
    if (limit <= 0)
        return 0;
    trie *t = &scratch->t;
    trie_fill(t, text, used, found, limit);
    trie_score(t, found, length, calibration);
    const double threshold = params->min_prob * (double)found;
    const int64_t n = params->tree ? best_tree(t, limit, threshold, scratch->order)
                                   : best_chain(t, limit, threshold, scratch->order);
    return emit(t, scratch->order, n, scratch->where, history, tokens, parents, scores);
}
