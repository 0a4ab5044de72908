/* One instruction-set variant of the paged-attention work item; included by paged.c once per
 * variant with PAK_VARIANT defined (no include guard on purpose). The 16-lane vector code is lowered
 * to SSE2, AVX2 or AVX-512 by the including pragma. */

/* A row of head_size elements widened to float32 and zero-padded to the padded size. */
PAK_INLINE void PAK_V(widen_row)(float *restrict dst, const char *restrict src, const pak_attn *a)
{
    const int64_t size = a->head_size;
    int64_t d = 0;
    if (a->bf16) {
        const uint16_t *bits = (const uint16_t *)src;
        for (; d + 16 <= size; d += 16) {
            pak_v16h half;
            memcpy(&half, bits + d, sizeof half);
            const pak_v16u wide = __builtin_convertvector(half, pak_v16u) << 16;
            memcpy(dst + d, &wide, sizeof wide);
        }
        for (; d < size; ++d) {
            const uint32_t wide = (uint32_t)bits[d] << 16;
            memcpy(dst + d, &wide, sizeof wide);
        }
    } else {
        memcpy(dst, src, (size_t)size * sizeof(float));
        d = size;
    }
    for (; d < a->padded; ++d)
        dst[d] = 0.0f;
}

/* `count` cache rows (keys or values of one head, `stride` bytes apart) as float32 rows: read in
 * place for float32 caches whose head size is a multiple of 16, else widened into `buf`.
 * *row_stride gets the distance between the returned rows, in floats. */
static const float *PAK_V(stage)(float *buf, const char *src, int64_t count, int64_t stride,
                                 const pak_attn *a, int64_t *row_stride)
{
    if (!a->bf16 && a->head_size == a->padded) {
        *row_stride = stride / (int64_t)sizeof(float);
        return (const float *)src;
    }
    for (int64_t j = 0; j < count; ++j)
        PAK_V(widen_row)(buf + j * a->padded, src + j * stride, a);
    *row_stride = a->padded;
    return buf;
}

/* lanes[j] = the 16 lane-wise partial sums of q . keys[j] over the head (chunks of 16 in order),
 * for j < count; zero for the others (their rows are not read). */
PAK_INLINE void PAK_V(partial_dots)(pak_v16f *restrict lanes, const float *q, const float *keys, int64_t key_stride,
                                    int64_t count, int64_t padded)
{
    for (int64_t j = 0; j < PAK_ATTN_CHUNK; ++j)
        lanes[j] = (pak_v16f){0.0f};
    for (int64_t d = 0; d < padded; d += 16) {
        pak_v16f x;
        memcpy(&x, q + d, sizeof x);
        for (int64_t j = 0; j < count; ++j) {
            pak_v16f y;
            memcpy(&y, keys + j * key_stride + d, sizeof y);
            lanes[j] += x * y;
        }
    }
}

/* Lane j of the result: the 16 lanes of v[j] summed in pak_hsum16's order ((l, l + 8), then
 * (l, l + 4), then (0 + 2) + (1 + 3)), for the 16 vectors at once. */
PAK_INLINE pak_v16f PAK_V(hsum16x16)(const pak_v16f *v)
{
    pak_v16f x[8], y[4], z[2];
    for (int i = 0; i < 8; ++i)
        x[i] = __builtin_shufflevector(v[2 * i], v[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23)
               + __builtin_shufflevector(v[2 * i], v[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29,
                                         30, 31);
    for (int i = 0; i < 4; ++i)
        y[i] = __builtin_shufflevector(x[2 * i], x[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27)
               + __builtin_shufflevector(x[2 * i], x[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29,
                                         30, 31);
    for (int i = 0; i < 2; ++i)
        z[i] = __builtin_shufflevector(y[2 * i], y[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29)
               + __builtin_shufflevector(y[2 * i], y[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27,
                                         30, 31);
    return __builtin_shufflevector(z[0], z[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)
           + __builtin_shufflevector(z[0], z[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}

/* Scores of query row r (token t at cache position `pos`, sequence with `ctx` cached positions) against
 * the `count` keys from position `key0` into p[0..15] (-inf where not visible or past count); returns
 * their maximum. Positions below `low` are outside the row's window; with a tree mask, new_pos[j] is
 * the text position of the sequence's j-th new token (NULL: no window). Each score is a lane-wise
 * dot product summed as pak_hsum16 sums, sixteen keys at a time, then capped when soft_cap is set. */
PAK_INLINE float PAK_V(scores)(float *restrict p, const float *q, const float *keys, int64_t key_stride,
                               int64_t count, int64_t key0, int64_t t, int64_t pos, int64_t ctx, int64_t low,
                               const int64_t *new_pos, const pak_attn *a)
{
    pak_v16f lanes[PAK_ATTN_CHUNK];
    if (count == PAK_ATTN_CHUNK)
        PAK_V(partial_dots)(lanes, q, keys, key_stride, PAK_ATTN_CHUNK, a->padded);
    else
        PAK_V(partial_dots)(lanes, q, keys, key_stride, count, a->padded);
    const pak_v16i lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    pak_v16i visible;
    if (a->tree_mask == NULL || key0 + count <= ctx) { /* keys up to pos (causal) or every cached key */
        const int64_t seen = a->tree_mask == NULL && pos - key0 + 1 < count ? pos - key0 + 1 : count;
        const int64_t skip = low - key0; /* lanes before it are outside the window */
        visible = (lane < (int32_t)(seen > 0 ? seen : 0)) & (lane >= (int32_t)(skip > 0 ? skip : 0));
    } else {
        const uint8_t *tree = a->tree_mask + t * a->tree_width;
        int32_t bits[PAK_ATTN_CHUNK];
        for (int64_t j = 0; j < PAK_ATTN_CHUNK; ++j)
            bits[j] = j < count && (key0 + j < ctx ? key0 + j >= low
                                    : tree[key0 + j - ctx] && (!new_pos || new_pos[key0 + j - ctx] >= low))
                          ? -1 : 0;
        memcpy(&visible, bits, sizeof visible);
    }
    pak_v16f raw = PAK_V(hsum16x16)(lanes);
    if (a->soft_cap > 0.0f)
        raw = a->soft_cap * pak_tanhf16(raw / a->soft_cap);
    const pak_v16f scores = pak_select16(visible, raw, (pak_v16f){0.0f} - INFINITY);
    memcpy(p, &scores, sizeof scores);
    pak_v16f best = scores;
    best = pak_select16(best > __builtin_shufflevector(best, best, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7),
                        best, __builtin_shufflevector(best, best, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
    best = pak_select16(best > __builtin_shufflevector(best, best, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11),
                        best, __builtin_shufflevector(best, best, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
    best = pak_select16(best > __builtin_shufflevector(best, best, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13),
                        best, __builtin_shufflevector(best, best, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
    return best[0] > best[1] ? best[0] : best[1];
}

/* Online-softmax update of row r for one chunk: rescale the row's state to the new maximum and
 * turn p (scores) into weights exp(score - max). A chunk with nothing visible gets zero weights. */
PAK_INLINE void PAK_V(softmax_step)(float *restrict p, float chunk_max, float *restrict acc, float *m,
                                    float *l, int64_t padded)
{
    pak_v16f scores;
    memcpy(&scores, p, sizeof scores);
    if (chunk_max == -INFINITY) {
        memset(p, 0, sizeof scores);
        return;
    }
    if (chunk_max > *m) {
        const pak_v16f shift = {*m - chunk_max};
        const float corr = pak_expf_nonpos16(shift)[0];
        for (int64_t d = 0; d < padded; ++d)
            acc[d] *= corr;
        *l *= corr;
        *m = chunk_max;
    }
    const pak_v16f weights = pak_expf_nonpos16(scores - *m);
    *l += pak_hsum16(weights);
    memcpy(p, &weights, sizeof weights);
}

/* acc += sum_j p[j] * values[j], accumulating 16 lanes of the row at a time in a register. */
PAK_INLINE void PAK_V(accumulate)(float *restrict acc, const float *restrict p, const float *values,
                                  int64_t value_stride, int64_t count, int64_t padded)
{
    for (int64_t d = 0; d < padded; d += 16) {
        pak_v16f sum;
        memcpy(&sum, acc + d, sizeof sum);
        for (int64_t j = 0; j < count; ++j) {
            pak_v16f x;
            memcpy(&x, values + j * value_stride + d, sizeof x);
            sum += p[j] * x;
        }
        memcpy(acc + d, &sum, sizeof sum);
    }
}

/* One work item: the query rows (tokens x heads of one kv-head group) of a tile of new tokens,
 * against every position they may see, one cache chunk (<= 16 positions of one block) at a time. */
static void PAK_V(attend)(const pak_attn *a, const pak_item *item, const pak_attn_scratch *sc)
{
    const int64_t group = a->num_heads / a->num_kv_heads, size = a->head_size, padded = a->padded;
    const int64_t elem = a->bf16 ? 2 : 4, rows = item->count * group, head = item->head;
    const int64_t seq_len = a->seq_lens[item->seq], lo = a->query_start_loc[item->seq];
    const int64_t ctx = seq_len - (a->query_start_loc[item->seq + 1] - lo);
    const int64_t first_pos = ctx + (item->first - lo);
    const int64_t end = a->tree_mask ? seq_len : first_pos + item->count;
    const int64_t *new_pos = a->tree_pos ? a->tree_pos + lo : NULL;
    int64_t start = 0; /* the first position a row of the item sees, on the chunk grid */
    if (a->window) {
        int64_t earliest = first_pos;
        for (int64_t i = 0; new_pos && i < item->count; ++i)
            earliest = new_pos[item->first - lo + i] < earliest ? new_pos[item->first - lo + i] : earliest;
        start = earliest - a->window + 1 > 0 ? chunk_start(earliest - a->window + 1, a->block_size) : 0;
    }
    const int64_t pos_bytes = a->num_kv_heads * size * elem, bs = a->block_size;
    const int32_t *table = a->block_tables + item->seq * a->max_blocks;

    for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = item->first + r / group, h = head * group + r % group;
        float *q = sc->q + r * padded;
        PAK_V(widen_row)(q, (const char *)a->q + (t * a->num_heads + h) * size * elem, a);
        for (int64_t d = 0; d < padded; ++d)
            q[d] *= a->scale;
        sc->m[r] = -INFINITY;
        sc->l[r] = 0.0f;
    }
    memset(sc->acc, 0, (size_t)(rows * padded) * sizeof(float));

    for (int64_t key0 = start, count; key0 < end; key0 += count) {
        const int64_t offset = key0 % bs;
        count = bs - offset < PAK_ATTN_CHUNK ? bs - offset : PAK_ATTN_CHUNK;
        count = end - key0 < count ? end - key0 : count;
        const char *k_src = a->cache + ((table[key0 / bs] * bs + offset) * a->num_kv_heads + head) * size * elem;
        int64_t k_stride, v_stride;
        const float *keys = PAK_V(stage)(sc->k, k_src, count, pos_bytes, a, &k_stride);
        const float *values = PAK_V(stage)(sc->v, k_src + a->plane_bytes, count, pos_bytes, a, &v_stride);
        for (int64_t r = 0; r < rows; ++r) {
            float *p = sc->p + r * PAK_ATTN_CHUNK, *acc = sc->acc + r * padded;
            const int64_t t = item->first + r / group, pos = first_pos + r / group;
            const int64_t low = a->window ? (new_pos ? new_pos[t - lo] : pos) - a->window + 1 : 0;
            const float best = PAK_V(scores)(p, sc->q + r * padded, keys, k_stride, count, key0, t, pos, ctx,
                                             low, new_pos, a);
            PAK_V(softmax_step)(p, best, acc, sc->m + r, sc->l + r, padded);
            if (count == PAK_ATTN_CHUNK) /* the full chunk's loop unrolled */
                PAK_V(accumulate)(acc, p, values, v_stride, PAK_ATTN_CHUNK, padded);
            else
                PAK_V(accumulate)(acc, p, values, v_stride, count, padded);
        }
    }

    for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = item->first + r / group, h = head * group + r % group;
        const float inv = sc->l[r] > 0.0f ? 1.0f / sc->l[r] : 0.0f;
        const float *acc = sc->acc + r * padded;
        char *dst = (char *)a->out + (t * a->num_heads + h) * size * elem;
        for (int64_t d = 0; d < size; ++d) {
            const float x = acc[d] * inv;
            if (a->bf16)
                ((uint16_t *)dst)[d] = pak_f32_to_bf16(x);
            else
                ((float *)dst)[d] = x;
        }
    }
}
