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

PAK_INLINE float PAK_V(dot)(const float *x, const float *y, int64_t size)
{
    pak_v16f acc = {0.0f};
    for (int64_t d = 0; d < size; d += 16) {
        pak_v16f a, b;
        memcpy(&a, x + d, sizeof a);
        memcpy(&b, y + d, sizeof b);
        acc += a * b;
    }
    return pak_hsum16(acc);
}

/* Scores of query row r (token t at `pos`, sequence with `ctx` cached positions) against the
 * `count` keys from position `key0` into p[0..15] (-inf where not visible or past count); returns
 * their maximum. */
PAK_INLINE float PAK_V(scores)(float *restrict p, const float *q, const float *keys, int64_t key_stride,
                               int64_t count, int64_t key0, int64_t t, int64_t pos, int64_t ctx,
                               const pak_attn *a)
{
    float best = -INFINITY;
    const uint8_t *tree = a->tree_mask ? a->tree_mask + t * a->tree_width : NULL;
    for (int64_t j = 0; j < PAK_ATTN_CHUNK; ++j) {
        const int64_t key = key0 + j;
        const int visible = j < count && (tree ? (key < ctx || tree[key - ctx]) : key <= pos);
        p[j] = visible ? PAK_V(dot)(q, keys + j * key_stride, a->padded) : -INFINITY;
        best = p[j] > best ? p[j] : best;
    }
    return best;
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

    for (int64_t key0 = 0, count; key0 < end; key0 += count) {
        const int64_t offset = key0 % bs;
        count = bs - offset < PAK_ATTN_CHUNK ? bs - offset : PAK_ATTN_CHUNK;
        count = end - key0 < count ? end - key0 : count;
        const char *k_src = a->cache + ((table[key0 / bs] * bs + offset) * a->num_kv_heads + head) * size * elem;
        int64_t k_stride, v_stride;
        const float *keys = PAK_V(stage)(sc->k, k_src, count, pos_bytes, a, &k_stride);
        const float *values = PAK_V(stage)(sc->v, k_src + a->plane_bytes, count, pos_bytes, a, &v_stride);
        for (int64_t r = 0; r < rows; ++r) {
            float *p = sc->p + r * PAK_ATTN_CHUNK, *acc = sc->acc + r * padded;
            const float best = PAK_V(scores)(p, sc->q + r * padded, keys, k_stride, count, key0,
                                             item->first + r / group, first_pos + r / group, ctx, a);
            PAK_V(softmax_step)(p, best, acc, sc->m + r, sc->l + r, padded);
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
