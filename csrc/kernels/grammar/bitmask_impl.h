/* One instruction-set variant of the token-bitmask kernels; included by bitmask.c once per variant
 * with PAK_VARIANT defined (no include guard on purpose). The 32-token select loops are written so
 * that GCC vectorizes them for whichever instruction set the including pragma enables. */

static void PAK_V(mask_row_f32)(float *restrict row, const int32_t *restrict words, int64_t vocab)
{
    const int64_t full = vocab / 32;
    for (int64_t w = 0; w < full; ++w) {
        const uint32_t bits = (uint32_t)words[w];
        float *restrict p = row + 32 * w;
        if (bits == UINT32_MAX)
            continue;
        for (int b = 0; b < 32; ++b)
            p[b] = (bits & (UINT32_C(1) << b)) ? p[b] : -INFINITY;
    }
    const int rem = (int)(vocab - 32 * full);
    if (rem > 0) {
        const uint32_t bits = (uint32_t)words[full];
        float *restrict p = row + 32 * full;
        for (int b = 0; b < rem; ++b)
            p[b] = (bits & (UINT32_C(1) << b)) ? p[b] : -INFINITY;
    }
}

static void PAK_V(mask_row_16)(uint16_t *restrict row, const int32_t *restrict words, int64_t vocab,
                               uint16_t neg_inf)
{
    const int64_t full = vocab / 32;
    for (int64_t w = 0; w < full; ++w) {
        const uint32_t bits = (uint32_t)words[w];
        uint16_t *restrict p = row + 32 * w;
        if (bits == UINT32_MAX)
            continue;
        for (int b = 0; b < 32; ++b)
            p[b] = (bits & (UINT32_C(1) << b)) ? p[b] : neg_inf;
    }
    const int rem = (int)(vocab - 32 * full);
    if (rem > 0) {
        const uint32_t bits = (uint32_t)words[full];
        uint16_t *restrict p = row + 32 * full;
        for (int b = 0; b < rem; ++b)
            p[b] = (bits & (UINT32_C(1) << b)) ? p[b] : neg_inf;
    }
}

static void PAK_V(bitmask_f32)(float *logits, const int32_t *bitmask, int64_t num_rows, int64_t vocab,
                               const pak_rows *rows)
{
    const int64_t words = (vocab + 31) / 32;
    const int64_t n = rows->count < 0 ? num_rows : rows->count;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t r = pak_row_at(rows, i);
        PAK_V(mask_row_f32)(logits + r * vocab, bitmask + r * words, vocab);
    }
}

static void PAK_V(bitmask_16)(uint16_t *logits, const int32_t *bitmask, int64_t num_rows, int64_t vocab,
                              const pak_rows *rows, uint16_t neg_inf)
{
    const int64_t words = (vocab + 31) / 32;
    const int64_t n = rows->count < 0 ? num_rows : rows->count;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t r = pak_row_at(rows, i);
        PAK_V(mask_row_16)(logits + r * vocab, bitmask + r * words, vocab, neg_inf);
    }
}
