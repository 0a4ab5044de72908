/* One instruction-set variant of the layer operations; included by layer_ops.c once per variant
 * with PAK_VARIANT defined (no include guard on purpose). Rows are processed in chunks of CHUNK
 * float32 values (a multiple of the 16 lanes), in loops of independent element-wise operations that
 * the compiler vectorizes for the variant without changing any result. */

PAK_INLINE void PAK_V(load)(const void *p, int bf16, int64_t at, int64_t n, float *restrict dst)
{
    if (bf16) {
        const uint16_t *src = (const uint16_t *)p + at;
        for (int64_t i = 0; i < n; ++i)
            dst[i] = pak_bf16_to_f32(src[i]);
    } else {
        memcpy(dst, (const float *)p + at, (size_t)n * sizeof(float));
    }
}

PAK_INLINE void PAK_V(store)(const float *restrict src, int bf16, void *p, int64_t at, int64_t n)
{
    if (bf16) {
        uint16_t *dst = (uint16_t *)p + at;
        for (int64_t i = 0; i < n; ++i)
            dst[i] = pak_f32_to_bf16(src[i]);
    } else {
        memcpy((float *)p + at, src, (size_t)n * sizeof(float));
    }
}

/* Values as the dtype stores them: rounded to bfloat16 and widened back, or unchanged. */
PAK_INLINE void PAK_V(round)(float *restrict x, int bf16, int64_t n)
{
    if (bf16)
        for (int64_t i = 0; i < n; ++i)
            x[i] = pak_bf16_to_f32(pak_f32_to_bf16(x[i]));
}

static void PAK_V(norm_rows)(void *hidden, const void *delta, const void *weight, void *out, int bf16,
                             int64_t rows, int64_t dim, float eps)
{
    float h[CHUNK], d[CHUNK], w[CHUNK];
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t base = r * dim;
        float lane[LANES] = {0};
        for (int64_t c = 0; c < dim; c += CHUNK) {
            const int64_t n = dim - c < CHUNK ? dim - c : CHUNK;
            PAK_V(load)(hidden, bf16, base + c, n, h);
            if (delta != NULL) {
                PAK_V(load)(delta, bf16, base + c, n, d);
                for (int64_t i = 0; i < n; ++i)
                    h[i] = h[i] + d[i];
                PAK_V(round)(h, bf16, n);
                PAK_V(store)(h, bf16, hidden, base + c, n);
            }
            for (int64_t i = n; i < (n + LANES - 1) / LANES * LANES; ++i)
                h[i] = 0.0f;
            for (int64_t i = 0; i < n; i += LANES)
                for (int j = 0; j < LANES; ++j)
                    lane[j] += h[i + j] * h[i + j];
        }
        const float rstd = 1.0f / sqrtf(pak_sum_lanes(lane) / (float)dim + eps);
        for (int64_t c = 0; c < dim; c += CHUNK) {
            const int64_t n = dim - c < CHUNK ? dim - c : CHUNK;
            PAK_V(load)(hidden, bf16, base + c, n, h);
            PAK_V(load)(weight, bf16, c, n, w);
            for (int64_t i = 0; i < n; ++i)
                h[i] = h[i] * rstd;
            PAK_V(round)(h, bf16, n);
            if (bf16)
                for (int64_t i = 0; i < n; ++i)
                    h[i] = w[i] * h[i];
            else
                for (int64_t i = 0; i < n; ++i)
                    h[i] = h[i] * w[i];
            PAK_V(store)(h, bf16, out, base + c, n);
        }
    }
}

static void PAK_V(rope_rows)(const void *qkv, const void *cos, const void *sin, void *q, void *k, void *v, int bf16,
                             int64_t tokens, int64_t heads, int64_t kv_heads, int64_t dim)
{
    const int64_t width = (heads + 2 * kv_heads) * dim, half = dim / 2, size = bf16 ? 2 : 4;
    float x[MAX_HEAD], rotated[MAX_HEAD], c[MAX_HEAD], s[MAX_HEAD];
    for (int64_t t = 0; t < tokens; ++t) {
        PAK_V(load)(cos, bf16, t * dim, dim, c);
        PAK_V(load)(sin, bf16, t * dim, dim, s);
        for (int64_t h = 0; h < heads + kv_heads; ++h) {
            PAK_V(load)(qkv, bf16, t * width + h * dim, dim, x);
            for (int64_t i = 0; i < half; ++i) {
                rotated[i] = -x[i + half];
                rotated[i + half] = x[i];
            }
            for (int64_t i = 0; i < dim; ++i) {
                x[i] = x[i] * c[i];
                rotated[i] = rotated[i] * s[i];
            }
            PAK_V(round)(x, bf16, dim);
            PAK_V(round)(rotated, bf16, dim);
            for (int64_t i = 0; i < dim; ++i)
                x[i] = x[i] + rotated[i];
            if (h < heads)
                PAK_V(store)(x, bf16, q, (t * heads + h) * dim, dim);
            else
                PAK_V(store)(x, bf16, k, (t * kv_heads + h - heads) * dim, dim);
        }
        memcpy((char *)v + t * kv_heads * dim * size, (const char *)qkv + (t * width + (heads + kv_heads) * dim) * size,
               (size_t)(kv_heads * dim * size));
    }
}

static void PAK_V(silu_rows)(const void *gate_up, void *out, int bf16, int64_t tokens, int64_t inter)
{
    float g[CHUNK], u[CHUNK];
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t c = 0; c < inter; c += CHUNK) {
            const int64_t n = inter - c < CHUNK ? inter - c : CHUNK;
            PAK_V(load)(gate_up, bf16, t * 2 * inter + c, n, g);
            PAK_V(load)(gate_up, bf16, t * 2 * inter + inter + c, n, u);
            for (int64_t i = 0; i < n; i += LANES) {
                pak_v16f gv;
                memcpy(&gv, g + i, sizeof gv); /* lanes past n hold stale values, never stored */
                /* e = exp(-|g|) <= 1; silu = g / (1 + exp(-g)) = (g >= 0 ? g : g * e) / (1 + e) */
                const pak_v16i negative = gv < 0.0f;
                const pak_v16f e = pak_expf_nonpos16(pak_select16(negative, gv, -gv));
                const pak_v16f silu = pak_select16(negative, gv * e, gv) / (1.0f + e);
                memcpy(g + i, &silu, sizeof silu);
            }
            PAK_V(round)(g, bf16, n);
            for (int64_t i = 0; i < n; ++i)
                g[i] = g[i] * u[i];
            PAK_V(store)(g, bf16, out, t * inter + c, n);
        }
}
