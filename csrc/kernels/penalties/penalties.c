/* Repetition / frequency / presence penalties from token counts (pyagent/penalties.h).
 *
 * Both loops touch only the tokens a request has seen, through the list of tokens present, so their
 * cost grows with the number of distinct tokens in the context, not with the vocabulary. They are
 * scalar: the work is a gather over scattered tokens, which vectors do not speed up; the apply
 * loop has no branch that depends on the logits, so the cache misses on them overlap. It trusts
 * the lists (only pak_penalty_counts_update writes them) and reads the output counts only when a
 * frequency or presence penalty needs them. */
#include <math.h>
#include <stdint.h>

#include "pyagent/common.h"
#include "pyagent/penalties.h"

/* x < 0 ? x * rp : x / rp without a branch: x is usually a cache miss, and a mispredicted branch on
 * it would make the next misses wait for this one. */
static inline float repetition_penalty(float x, float rp)
{
    const float scaled[2] = {x / rp, x * rp};
    return scaled[x < 0.0f];
}

/* Drop token t from a present list of *count entries: swapped with the last entry. */
static void present_remove(int32_t *list, int32_t *count, int32_t t)
{
    for (int32_t i = 0; i < *count; ++i) {
        if (list[i] == t) {
            list[i] = list[--*count];
            return;
        }
    }
}

int pak_penalty_counts_update(int32_t *seen, int32_t *out, uint64_t *bits, int32_t *present,
                              int32_t *num_present, int64_t num_slots, int64_t vocab,
                              const int32_t *slots, const int32_t *tokens, const int32_t *d_seen,
                              const int32_t *d_out, int64_t n, int64_t *err_index)
{
    if (err_index)
        *err_index = -1;
    if (num_slots < 0 || vocab < 0 || vocab > INT32_MAX || n < 0
        || (n > 0 && (!seen || !out || !bits || !present || !num_present || !slots || !tokens || !d_seen
                      || !d_out)))
        return PAK_EINVAL;
    for (int64_t i = 0; i < n; ++i) {
        if (slots[i] < 0 || slots[i] >= num_slots || tokens[i] < 0 || tokens[i] >= vocab) {
            if (err_index)
                *err_index = i;
            return PAK_EINDEX;
        }
    }
    for (int64_t i = 0; i < n; ++i) {
        const int64_t at = (int64_t)slots[i] * vocab + tokens[i];
        seen[at] += d_seen[i];
        out[at] += d_out[i];
    }
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; ++i) {
        const int64_t at = (int64_t)slots[i] * vocab + tokens[i];
        if (seen[at] < 0 || out[at] < 0)
            bad = i;
    }
    if (bad >= 0) { /* undo every delta: the counts are left as they were */
        for (int64_t i = 0; i < n; ++i) {
            const int64_t at = (int64_t)slots[i] * vocab + tokens[i];
            seen[at] -= d_seen[i];
            out[at] -= d_out[i];
        }
        if (err_index)
            *err_index = bad;
        return PAK_EPARAM;
    }
    const int64_t words = (vocab + 63) / 64;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t at = (int64_t)slots[i] * vocab + tokens[i];
        uint64_t *word = bits + (int64_t)slots[i] * words + tokens[i] / 64;
        const uint64_t bit = UINT64_C(1) << (tokens[i] % 64);
        int32_t *list = present + (int64_t)slots[i] * vocab;
        if (seen[at] > 0 && !(*word & bit)) {
            *word |= bit;
            list[num_present[slots[i]]++] = tokens[i];
        } else if (seen[at] == 0 && (*word & bit)) {
            *word &= ~bit;
            present_remove(list, &num_present[slots[i]], tokens[i]);
        }
    }
    return PAK_OK;
}

int pak_penalties_apply_f32(float *logits, int64_t num_rows, int64_t vocab, const int32_t *out,
                            const int32_t *present, const int32_t *num_present, int64_t num_slots,
                            const int32_t *slots, const float *repetition, const float *frequency,
                            const float *presence, int64_t *err_row)
{
    if (err_row)
        *err_row = -1;
    if (num_rows < 0 || vocab < 0 || num_slots < 0
        || (num_rows > 0 && vocab > 0 && (!logits || !out || !present || !num_present || !slots)))
        return PAK_EINVAL;
    for (int64_t r = 0; r < num_rows; ++r) {
        int rc = PAK_OK;
        if (slots[r] < 0 || slots[r] >= num_slots)
            rc = PAK_EINDEX;
        else if ((repetition && !(isfinite(repetition[r]) && repetition[r] > 0.0f))
                 || (frequency && !isfinite(frequency[r])) || (presence && !isfinite(presence[r])))
            rc = PAK_EPARAM;
        if (rc != PAK_OK) {
            if (err_row)
                *err_row = r;
            return rc;
        }
    }
    for (int64_t r = 0; r < num_rows; ++r) {
        const float rp = repetition ? repetition[r] : 1.0f;
        const float fp = frequency ? frequency[r] : 0.0f;
        const float pp = presence ? presence[r] : 0.0f;
        if (rp == 1.0f && fp == 0.0f && pp == 0.0f)
            continue;
        float *x = logits + r * vocab;
        const int32_t *o = out + (int64_t)slots[r] * vocab;
        const int32_t *list = present + (int64_t)slots[r] * vocab;
        const int64_t count = num_present[slots[r]] < vocab ? num_present[slots[r]] : vocab;
        for (int64_t i = 0; i < count; ++i) { /* start every miss at once */
            const uint32_t j = (uint32_t)list[i];
            __builtin_prefetch(x + (j < (uint64_t)vocab ? j : 0), 1);
        }
        if (fp == 0.0f && pp == 0.0f) { /* the usual case: no output counts to read */
            for (int64_t i = 0; i < count; ++i) {
                const uint32_t j = (uint32_t)list[i];
                if (j < (uint64_t)vocab) /* always, for lists kept by pak_penalty_counts_update */
                    x[j] = repetition_penalty(x[j], rp);
            }
            continue;
        }
        for (int64_t i = 0; i < count; ++i) {
            const uint32_t j = (uint32_t)list[i];
            if (j >= (uint64_t)vocab)
                continue;
            float v = x[j];
            if (rp != 1.0f)
                v = repetition_penalty(v, rp);
            if (o[j] > 0) {
                v = v - fp * (float)o[j];
                v = v - pp;
            }
            x[j] = v;
        }
    }
    return PAK_OK;
}
