/* One instruction-set variant of the mixer kernels; included by mixers.c once per variant with
 * PAK_VARIANT defined (no include guard on purpose). The loops over channels, state entries and
 * value columns are element-wise (the compiler vectorizes them for the variant without changing a
 * bit); the dot products keep 16 independent lanes summed by a fixed tree, so every variant gives
 * the same bits. */

/* sum_i a[i] * b[i] in 16 lanes (lane j takes i = 16k + j), then the fixed tree. */
PAK_INLINE float PAK_V(dot)(const float *restrict a, const float *restrict b, int64_t n)
{
    float lane[PAK_LANES] = {0};
    int64_t i = 0;
    for (; i + PAK_LANES <= n; i += PAK_LANES)
        for (int j = 0; j < PAK_LANES; ++j)
            lane[j] += a[i + j] * b[i + j];
    for (int j = 0; i + j < n; ++j)
        lane[j] += a[i + j] * b[i + j];
    return pak_sum_lanes(lane);
}

/* Every new token of sequence s through the convolution, channels side by side. */
static void PAK_V(conv_seq)(const pak_conv_job *job, int64_t s)
{
    const int64_t C = job->channels, W = job->width, keep = W - 1;
    const int64_t lo = job->query_start_loc[s], n = job->query_start_loc[s + 1] - lo;
    float *restrict state = job->state + job->state_slots[s] * C * keep;
    if (job->seq_lens[s] == n)
        memset(state, 0, (size_t)(C * keep) * sizeof(float));
    float *restrict acc = job->scratch + s * C;
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t c = 0; c < C; ++c)
            acc[c] = 0.0f;
        for (int64_t j = 0; j < W; ++j) {
            const int64_t rel = t - keep + j; /* input index relative to the first new token */
            const float *restrict w = job->weight_t + j * C;
            if (rel >= 0) {
                const float *restrict u = job->x + (lo + rel) * C;
                for (int64_t c = 0; c < C; ++c)
                    acc[c] += w[c] * u[c];
            } else {
                for (int64_t c = 0; c < C; ++c)
                    acc[c] += w[c] * state[c * keep + keep + rel];
            }
        }
        float *restrict out = job->out + (lo + t) * C;
        for (int64_t c = 0; c < C; ++c) {
            float v = job->bias ? acc[c] + job->bias[c] : acc[c];
            out[c] = job->silu ? v / (1.0f + expf(-v)) : v;
        }
    }
    /* keep the W - 1 latest inputs: shift what stays, then copy the new ones */
    for (int64_t c = 0; c < C; ++c) {
        float *restrict row = state + c * keep;
        for (int64_t k = 0; k < keep; ++k) {
            const int64_t rel = n - keep + k;
            row[k] = rel >= 0 ? job->x[(lo + rel) * C + c] : row[k + n];
        }
    }
}

/* Head h of sequence s through the selective scan. */
static void PAK_V(ssd_head)(const pak_ssd_job *job, int64_t s, int64_t h)
{
    const int64_t H = job->heads, P = job->head_dim, N = job->state_size, G = job->groups;
    const int64_t group = h / (H / G);
    const int64_t lo = job->query_start_loc[s], n = job->query_start_loc[s + 1] - lo;
    float *restrict S = job->state + (job->state_slots[s] * H + h) * P * N;
    if (job->seq_lens[s] == n)
        memset(S, 0, (size_t)(P * N) * sizeof(float));
    const float A = job->A[h], D = job->D[h], bias = job->dt_bias[h];
    for (int64_t t = lo; t < lo + n; ++t) {
        const float raw = job->dt[t * H + h] + bias;
        float delta = raw > 20.0f ? raw : log1pf(expf(raw));
        delta = delta < job->dt_min ? job->dt_min : delta > job->dt_max ? job->dt_max : delta;
        const float decay = expf(delta * A);
        const float *restrict B = job->B + (t * G + group) * N;
        const float *restrict Cv = job->C + (t * G + group) * N;
        const float *restrict x = job->x + (t * H + h) * P;
        float *restrict y = job->y + (t * H + h) * P;
        for (int64_t p = 0; p < P; ++p) {
            float *restrict row = S + p * N;
            const float xp = x[p];
            for (int64_t i = 0; i < N; ++i)
                row[i] = row[i] * decay + (delta * B[i]) * xp;
            y[p] = PAK_V(dot)(row, Cv, N) + D * xp;
        }
    }
}

/* Value head h of sequence s through the gated delta rule; m and d are value_dim floats of scratch. */
static void PAK_V(delta_head)(const pak_delta_job *job, int64_t s, int64_t h, float *restrict m, float *restrict d)
{
    const int64_t Hk = job->key_heads, K = job->key_dim, Hv = job->value_heads, V = job->value_dim;
    const int64_t kh = h / (Hv / Hk);
    const int64_t lo = job->query_start_loc[s], n = job->query_start_loc[s + 1] - lo;
    float *restrict S = job->state + (job->state_slots[s] * Hv + h) * K * V;
    if (job->seq_lens[s] == n)
        memset(S, 0, (size_t)(K * V) * sizeof(float));
    for (int64_t t = lo; t < lo + n; ++t) {
        const float decay = expf(job->g[t * Hv + h]), beta = job->beta[t * Hv + h];
        const float *restrict q = job->q + (t * Hk + kh) * K;
        const float *restrict k = job->k + (t * Hk + kh) * K;
        const float *restrict v = job->v + (t * Hv + h) * V;
        float *restrict o = job->o + (t * Hv + h) * V;
        for (int64_t j = 0; j < V; ++j)
            m[j] = 0.0f;
        for (int64_t i = 0; i < K; ++i) {
            float *restrict row = S + i * V;
            const float ki = k[i];
            for (int64_t j = 0; j < V; ++j) {
                row[j] = row[j] * decay;
                m[j] += row[j] * ki;
            }
        }
        for (int64_t j = 0; j < V; ++j)
            d[j] = (v[j] - m[j]) * beta;
        for (int64_t j = 0; j < V; ++j)
            o[j] = 0.0f;
        for (int64_t i = 0; i < K; ++i) {
            float *restrict row = S + i * V;
            const float ki = k[i], qi = q[i] * job->scale;
            for (int64_t j = 0; j < V; ++j) {
                row[j] += ki * d[j];
                o[j] += row[j] * qi;
            }
        }
    }
}

/* Heads [h0, h1) of new token t (sequence s) attending over the latent cache; a holds (h1 - h0) * size
 * floats of scratch, w (h1 - h0) * longest. Every cached row is read once for the group's heads. */
static void PAK_V(mla_item)(const pak_mla_job *job, int64_t t, int64_t s, int64_t h0, int64_t h1,
                            float *restrict a, float *restrict w)
{
    const int64_t L = job->size, R = job->rope, Nn = job->nope, Vd = job->v_dim, width = L + R;
    const int64_t lo = job->query_start_loc[s], n = job->query_start_loc[s + 1] - lo;
    const int64_t pos = job->seq_lens[s] - n + (t - lo), stride = job->scratch_stride;
    const int32_t *table = job->block_tables + s * job->max_blocks;
    float top[PAK_MLA_GROUP], total[PAK_MLA_GROUP];
    for (int64_t h = h0; h < h1; ++h) {
        float *restrict ah = a + (h - h0) * L;
        const float *restrict qn = job->q_nope + (t * job->heads + h) * Nn;
        const float *restrict wk = job->w_uk + h * Nn * L;
        for (int64_t l = 0; l < L; ++l)
            ah[l] = 0.0f;
        for (int64_t i = 0; i < Nn; ++i) {
            const float q = qn[i];
            const float *restrict row = wk + i * L;
            for (int64_t l = 0; l < L; ++l)
                ah[l] += q * row[l];
        }
        top[h - h0] = -INFINITY;
        total[h - h0] = 0.0f;
    }
    for (int64_t j = 0; j <= pos; ++j) {
        const float *row = job->cache + ((int64_t)table[j / job->block_size] * job->block_size
                                         + j % job->block_size) * width;
        for (int64_t h = h0; h < h1; ++h) {
            const float *qp = job->q_pe + (t * job->heads + h) * R;
            const float score = job->scale * (PAK_V(dot)(a + (h - h0) * L, row, L) + PAK_V(dot)(qp, row + L, R));
            w[(h - h0) * stride + j] = score;
            top[h - h0] = score > top[h - h0] ? score : top[h - h0];
        }
    }
    for (int64_t h = h0; h < h1; ++h) {
        float *restrict wh = w + (h - h0) * stride, *restrict ah = a + (h - h0) * L;
        for (int64_t j = 0; j <= pos; ++j) {
            wh[j] = expf(wh[j] - top[h - h0]);
            total[h - h0] += wh[j];
        }
        for (int64_t l = 0; l < L; ++l) /* a now accumulates the latent-space output */
            ah[l] = 0.0f;
    }
    for (int64_t j = 0; j <= pos; ++j) {
        const float *restrict row = job->cache + ((int64_t)table[j / job->block_size] * job->block_size
                                                  + j % job->block_size) * width;
        for (int64_t h = h0; h < h1; ++h) {
            float *restrict ah = a + (h - h0) * L;
            const float weight = w[(h - h0) * stride + j];
            for (int64_t l = 0; l < L; ++l)
                ah[l] += weight * row[l];
        }
    }
    for (int64_t h = h0; h < h1; ++h) {
        float *restrict ah = a + (h - h0) * L;
        for (int64_t l = 0; l < L; ++l)
            ah[l] = ah[l] / total[h - h0];
        float *restrict out = job->out + (t * job->heads + h) * Vd;
        const float *restrict wv = job->w_uv + h * Vd * L;
        for (int64_t v = 0; v < Vd; ++v)
            out[v] = PAK_V(dot)(ah, wv + v * L, L);
    }
}
