/* One instruction-set variant of the LoRA kernel (pyagent/lora.h); included by lora.c once per
 * variant with PAK_VARIANT defined (no include guard on purpose). Vectors of 16 float32 lanes with the
 * variant's fused multiply-add (PAK_V(fma16)); several independent sums at once hide its latency
 * without changing any sum's order. */

/* Elements [at, at + 16) of a float32 or bfloat16 row as 16 float32 lanes. */
PAK_INLINE lora_v16 PAK_V(load_full)(const void *p, int bf16, int64_t at)
{
    lora_v16 v;
    if (bf16) {
        const uint16_t *src = (const uint16_t *)p + at;
        for (int i = 0; i < LANES; ++i)
            v[i] = pak_bf16_to_f32(src[i]);
    } else {
        memcpy(&v, (const float *)p + at, sizeof v);
    }
    return v;
}

/* Elements [at, at + n) of a float32 or bfloat16 row as 16 float32 lanes (n <= LANES), the rest zero. */
PAK_INLINE lora_v16 PAK_V(load16)(const void *p, int bf16, int64_t at, int64_t n)
{
    if (n == LANES)
        return PAK_V(load_full)(p, bf16, at);
    float lanes[LANES];
    if (bf16) {
        const uint16_t *src = (const uint16_t *)p + at;
        for (int64_t i = 0; i < n; ++i)
            lanes[i] = pak_bf16_to_f32(src[i]);
    } else {
        memcpy(lanes, (const float *)p + at, (size_t)n * sizeof(float));
    }
    for (int64_t i = n; i < LANES; ++i)
        lanes[i] = 0.0f;
    lora_v16 v;
    memcpy(&v, lanes, sizeof v);
    return v;
}

/* x . w[j] for the `count` (1 to DOTS) rows w[j] = w + j * row_size of `in` elements each, in the
 * 16-lane order of pyagent/linear.h (a short last chunk padded with zeros), into sums[j]. */
PAK_INLINE void PAK_V(dots)(const void *x, const void *w, int64_t row_size, int bf16, int64_t in, int count, float *sums)
{
    lora_v16 lane[DOTS] = {{0}};
    const int64_t size = bf16 ? 2 : 4;
    int64_t c = 0;
    if (count == DOTS)
        for (; c + LANES <= in; c += LANES) {
            const lora_v16 xs = PAK_V(load_full)(x, bf16, c);
            for (int j = 0; j < DOTS; ++j)
                lane[j] = PAK_V(fma16)(xs, PAK_V(load_full)((const char *)w + j * row_size * size, bf16, c), lane[j]);
        }
    for (; c < in; c += LANES) {
        const int64_t n = in - c < LANES ? in - c : LANES;
        const lora_v16 xs = PAK_V(load16)(x, bf16, c, n);
        for (int j = 0; j < count; ++j)
            lane[j] = PAK_V(fma16)(xs, PAK_V(load16)((const char *)w + j * row_size * size, bf16, c, n), lane[j]);
    }
    for (int j = 0; j < count; ++j) {
        float lanes[LANES];
        memcpy(lanes, &lane[j], sizeof lanes);
        sums[j] = pak_sum_lanes(lanes);
    }
}

/* The shrink of one group of rows for slice k: u[t, k, j] for j < rank. */
static void PAK_V(shrink)(const lora_job *job, const lora_group *group, int64_t k)
{
    const int64_t s = group->slot, in = job->in, rank = job->ranks[s * job->slices + k], size = job->bf16 ? 2 : 4;
    const char *a = (const char *)job->a + ((s * job->slices + k) * job->max_rank) * in * size;
    for (int64_t g = group->begin; g < group->end; ++g) {
        const int64_t t = job->order[g];
        float *u = job->u + (t * job->slices + k) * job->max_rank;
        const char *x = (const char *)job->x + t * in * size;
        for (int64_t j = 0; j < rank; j += DOTS) {
            const int count = rank - j < DOTS ? (int)(rank - j) : DOTS;
            if (job->bf16) /* two copies, each with its dtype known */
                PAK_V(dots)(x, a + j * in * size, in, 1, in, count, u + j);
            else
                PAK_V(dots)(x, a + j * in * size, in, 0, in, count, u + j);
        }
    }
}

/* acc[c] = sum_{j < rank} u[j] * b[j, c0 + c] as a chain of fused multiply-adds from 0, for the
 * n <= COLUMNS columns from c0 (b rows of `out` elements). */
PAK_INLINE void PAK_V(expand_columns)(const float *u, const void *b, int bf16, int64_t out, int64_t rank, int64_t c0,
                                      int64_t n, float *acc)
{
    lora_v16 sum[COLUMNS / LANES];
    const int64_t vectors = (n + LANES - 1) / LANES;
    for (int64_t v = 0; v < vectors; ++v)
        sum[v] = (lora_v16){0};
    const int64_t full = n / LANES;
    for (int64_t j = 0; j < rank; ++j) {
        const lora_v16 uj = (lora_v16){0} + u[j];
        if (full == COLUMNS / LANES)
            for (int64_t v = 0; v < COLUMNS / LANES; ++v)
                sum[v] = PAK_V(fma16)(uj, PAK_V(load_full)(b, bf16, j * out + c0 + v * LANES), sum[v]);
        else
            for (int64_t v = 0; v < vectors; ++v) {
                const int64_t at = c0 + v * LANES, width = n - v * LANES < LANES ? n - v * LANES : LANES;
                sum[v] = PAK_V(fma16)(uj, PAK_V(load16)(b, bf16, j * out + at, width), sum[v]);
            }
    }
    memcpy(acc, sum, (size_t)vectors * sizeof(lora_v16));
}

/* The expand of one group of rows for columns [c0, c1) of slice k (c1 - c0 <= COLUMNS). */
static void PAK_V(expand)(const lora_job *job, const lora_group *group, int64_t k, int64_t c0, int64_t c1)
{
    const int64_t s = group->slot, out = job->out, n = c1 - c0, rank = job->ranks[s * job->slices + k];
    const float scale = job->scales[s * job->slices + k];
    const char *b = (const char *)job->b + s * job->max_rank * out * (job->bf16 ? 2 : 4);
    _Alignas(64) float acc[COLUMNS];
    for (int64_t g = group->begin; g < group->end; ++g) {
        const int64_t t = job->order[g];
        const float *u = job->u + (t * job->slices + k) * job->max_rank;
        if (job->bf16) /* two copies, each with its dtype known */
            PAK_V(expand_columns)(u, b, 1, out, rank, c0, n, acc);
        else
            PAK_V(expand_columns)(u, b, 0, out, rank, c0, n, acc);
        if (job->bf16) {
            uint16_t *y = (uint16_t *)job->y + t * out + c0;
            for (int64_t c = 0; c < n; ++c)
                y[c] = pak_f32_to_bf16(pak_bf16_to_f32(y[c]) + acc[c] * scale);
        } else {
            float *y = (float *)job->y + t * out + c0;
            for (int64_t c = 0; c < n; ++c)
                y[c] = y[c] + acc[c] * scale;
        }
    }
}
