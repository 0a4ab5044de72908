/* One instruction-set variant of the LoRA kernel (pyagent/lora.h); included by lora.c once per
 * variant with PAK_VARIANT defined (no include guard on purpose). The loops over 16 lanes and over a
 * block of columns are element-wise fused multiply-adds (fmaf) that the compiler turns into vector
 * instructions of the variant without changing a bit. */

/* Elements [at, at + n) of a float32 or bfloat16 row as float32 (n <= LANES), the rest of the 16
 * lanes zero. */
PAK_INLINE void PAK_V(load16)(const void *p, int bf16, int64_t at, int64_t n, float *restrict dst)
{
    if (bf16) {
        const uint16_t *src = (const uint16_t *)p + at;
        for (int64_t i = 0; i < n; ++i)
            dst[i] = pak_bf16_to_f32(src[i]);
    } else {
        memcpy(dst, (const float *)p + at, (size_t)n * sizeof(float));
    }
    for (int64_t i = n; i < LANES; ++i)
        dst[i] = 0.0f;
}

/* x . w over `in` elements in the 16-lane order of pyagent/linear.h (a short last chunk padded with
 * zeros); float32 rows are read in place. */
static float PAK_V(dot)(const void *x, const void *w, int bf16, int64_t in)
{
    lora_v16 lane = {0}, xs, ws;
    int64_t c = 0;
    if (!bf16)
        for (; c + LANES <= in; c += LANES) {
            memcpy(&xs, (const float *)x + c, sizeof xs);
            memcpy(&ws, (const float *)w + c, sizeof ws);
            lane = PAK_V(fma16)(xs, ws, lane);
        }
    for (; c < in; c += LANES) {
        const int64_t n = in - c < LANES ? in - c : LANES;
        float xf[LANES], wf[LANES];
        PAK_V(load16)(x, bf16, c, n, xf);
        PAK_V(load16)(w, bf16, c, n, wf);
        memcpy(&xs, xf, sizeof xs);
        memcpy(&ws, wf, sizeof ws);
        lane = PAK_V(fma16)(xs, ws, lane);
    }
    float lanes[LANES];
    memcpy(lanes, &lane, sizeof lanes);
    return sum_lanes(lanes);
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
        for (int64_t j = 0; j < rank; ++j)
            u[j] = PAK_V(dot)(x, a + j * in * size, job->bf16, in);
    }
}

/* The expand of one group of rows for columns [c0, c1) of slice k (c1 - c0 <= COLUMNS). */
static void PAK_V(expand)(const lora_job *job, const lora_group *group, int64_t k, int64_t c0, int64_t c1)
{
    const int64_t s = group->slot, out = job->out, n = c1 - c0, rank = job->ranks[s * job->slices + k];
    const float scale = job->scales[s * job->slices + k];
    float acc[COLUMNS], bj[COLUMNS], yv[COLUMNS];
    for (int64_t g = group->begin; g < group->end; ++g) {
        const int64_t t = job->order[g];
        const float *u = job->u + (t * job->slices + k) * job->max_rank;
        for (int64_t c = 0; c < n; ++c)
            acc[c] = 0.0f;
        for (int64_t j = 0; j < rank; ++j) {
            const int64_t at = (s * job->max_rank + j) * out + c0;
            const float *b = bj;
            if (job->bf16)
                for (int64_t c = 0; c < n; ++c)
                    bj[c] = pak_bf16_to_f32(((const uint16_t *)job->b)[at + c]);
            else
                b = (const float *)job->b + at;
            const float uj = u[j];
            for (int64_t c = 0; c < n; ++c)
                acc[c] = fmaf(uj, b[c], acc[c]);
        }
        if (job->bf16) {
            uint16_t *y = (uint16_t *)job->y + t * out + c0;
            for (int64_t c = 0; c < n; ++c)
                yv[c] = pak_bf16_to_f32(y[c]) + acc[c] * scale;
            for (int64_t c = 0; c < n; ++c)
                y[c] = pak_f32_to_bf16(yv[c]);
        } else {
            float *y = (float *)job->y + t * out + c0;
            for (int64_t c = 0; c < n; ++c)
                y[c] = y[c] + acc[c] * scale;
        }
    }
}
