/* Internal to int8.c: the x86 variants of the int8 path, compiled once per variant.
 *
 * int8.c includes this file inside `#pragma GCC target(...)` with:
 *   PAK_VARIANT  the variant's name (its functions are PAK_V(name));
 *   I8_WIDTH     512 (16 rows of a group per vector) or 256 (8: a group in two halves);
 *   I8_VNNI      1: vpdpbusd (I8_DPBUSD, the instruction for the width), 0: vpmaddubsw + vpmaddwd.
 *
 * A vector holds one int32 (or float32) lane per weight row. A 4-byte column of a group (4 codes of
 * each of its rows) is one vector (AVX2: one per half), and one instruction multiplies it with the
 * same 4 activation bytes broadcast to every lane: the lanes' integer sums are exact, so the sums of
 * codes x activations are the portable variant's whatever instruction computes them. The scales then
 * follow pyagent/linear_int8.h's order lane by lane, with one fused multiply-add per step.
 *
 * VNNI multiplies unsigned by signed bytes, so signed codes are handled with an offset: Q4_0's
 * nibbles, Q5_0's and Q6_K's codes are stored unsigned anyway and the bias times the activations' sum
 * is subtracted; Q8_0's signed bytes get 128 added (an xor) and 128 times the sum subtracted. The
 * maddubs form saturates pairs to int16, which codes up to 63 never reach; for Q8_0 it multiplies |w|
 * by the activations with w's sign (no offset).
 *
 * A tile is up to i8_tile_rows input rows against the lanes of one group (AVX2: of one half), every block
 * of the row: its accumulators stay in registers, each block's codes are unpacked once for all the
 * tile's rows, and the group's bytes stay in L1 while the tiles of every input row pass over it.
 */

#if I8_WIDTH == 512
typedef __m512i I8V(vi);
typedef __m512 I8V(vf);
#define LANES8 16
#define vi_load(p) _mm512_loadu_si512((const void *)(p))
#define vi_set1 _mm512_set1_epi32
#define vi_zero _mm512_setzero_si512
#define vi_and _mm512_and_si512
#define vi_or _mm512_or_si512
#define vi_xor _mm512_xor_si512
#define vi_add _mm512_add_epi32
#define vi_sub _mm512_sub_epi32
#define vi_mullo _mm512_mullo_epi32
#define vi_srli _mm512_srli_epi32
#define vi_slli _mm512_slli_epi32
#define vi_srai _mm512_srai_epi32
#define vi_maddubs _mm512_maddubs_epi16
#define vi_madd16 _mm512_madd_epi16
#define vi_abs8 _mm512_abs_epi8
#define vi_sign8(a, w) _mm512_mask_sub_epi8((a), _mm512_movepi8_mask(w), _mm512_setzero_si512(), (a))
#define vf_zero _mm512_setzero_ps
#define vf_set1 _mm512_set1_ps
#define vf_mul _mm512_mul_ps
#define vf_fma _mm512_fmadd_ps
#define vf_fnma _mm512_fnmadd_ps
#define vf_from_i _mm512_cvtepi32_ps
#define vf_half(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define vf_store _mm512_storeu_ps
#else
typedef __m256i I8V(vi);
typedef __m256 I8V(vf);
#define LANES8 8
#define vi_load(p) _mm256_loadu_si256((const __m256i *)(p))
#define vi_set1 _mm256_set1_epi32
#define vi_zero _mm256_setzero_si256
#define vi_and _mm256_and_si256
#define vi_or _mm256_or_si256
#define vi_xor _mm256_xor_si256
#define vi_add _mm256_add_epi32
#define vi_sub _mm256_sub_epi32
#define vi_mullo _mm256_mullo_epi32
#define vi_srli _mm256_srli_epi32
#define vi_slli _mm256_slli_epi32
#define vi_srai _mm256_srai_epi32
#define vi_maddubs _mm256_maddubs_epi16
#define vi_madd16 _mm256_madd_epi16
#define vi_abs8 _mm256_abs_epi8
#define vi_sign8 _mm256_sign_epi8
#define vf_zero _mm256_setzero_ps
#define vf_set1 _mm256_set1_ps
#define vf_mul _mm256_mul_ps
#define vf_fma _mm256_fmadd_ps
#define vf_fnma _mm256_fnmadd_ps
#define vf_from_i _mm256_cvtepi32_ps
#define vf_half(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define vf_store _mm256_storeu_ps
#endif

#define VI I8V(vi)
#define VF I8V(vf)

/* The 4 activation bytes at p in every lane. */
PAK_INLINE VI PAK_V(i8_bcast)(const int8_t *p)
{
    int32_t word;
    memcpy(&word, p, 4);
    return vi_set1(word);
}

/* acc + the sums of 4 products of unsigned codes u (at most 63) and signed activations s, per lane. */
PAK_INLINE VI PAK_V(i8_dot)(VI acc, VI u, VI s)
{
#if I8_VNNI
    return I8_DPBUSD(acc, u, s);
#else
    return vi_add(acc, vi_madd16(vi_maddubs(u, s), vi_set1(0x00010001)));
#endif
}

/* acc + the sums of the 2 products of signed 16-bit halves of u and s, per lane. */
PAK_INLINE VI PAK_V(i8_dot16)(VI acc, VI u, VI s)
{
#if I8_VNNI
    return I8_DPWSSD(acc, u, s);
#else
    return vi_add(acc, vi_madd16(u, s));
#endif
}

/* As i8_dot for signed codes w; the sum is offset by Q8_OFFSET times the activations' sum. */
#if I8_VNNI
#define Q8_OFFSET 128
#else
#define Q8_OFFSET 0
#endif
PAK_INLINE VI PAK_V(i8_dot_signed)(VI acc, VI w, VI s)
{
#if I8_VNNI
    return I8_DPBUSD(acc, vi_xor(w, vi_set1((int)0x80808080u)), s);
#else
    return vi_add(acc, vi_madd16(vi_maddubs(vi_abs8(w), vi_sign8(s, w)), vi_set1(0x00010001)));
#endif
}

/* v shifted left by n bits (right by -n) in each 32-bit lane; n is a constant after inlining. */
PAK_INLINE VI PAK_V(i8_shift)(VI v, int n)
{
    return n >= 0 ? vi_slli(v, n) : vi_srli(v, -n);
}

/* Store a row's lanes: `valid` of them from column `col` of y's row `m`. */
PAK_INLINE void PAK_V(i8_store)(const i8_out *o, int64_t m, int64_t col, int valid, VF v)
{
    float lanes[LANES8];
    vf_store(lanes, v);
    if (o->y_f32) {
        float *dst = (float *)o->y + m * o->ldy + col;
        for (int r = 0; r < valid; ++r)
            dst[r] = lanes[r];
    } else {
        uint16_t *dst = (uint16_t *)o->y + m * o->ldy + col;
        for (int r = 0; r < valid; ++r)
            dst[r] = pak_f32_to_bf16(lanes[r]);
    }
}

/* --- codes: the unsigned codes of one column of a group, per format ------------------------------- */

/* Q4_0, Q4_1, Q5_0, Q5_1: column v (bytes 4k .. 4k + 3 of the block's 16) gives the codes of weights
 * 4k .. 4k + 3 (*lo) and 16 + 4k .. (*hi); 5-bit codes take bits 2k and 2k + 1 of each byte of the
 * rearranged word of high bits to bit 4. Q4_K and Q5_K's chunk c (sub-blocks 2c, 2c + 1) work the
 * same way with bits 2c and 2c + 1 of Q5_K's high bytes. */
PAK_INLINE void PAK_V(i8_nibble_codes)(VI v, int five, VI high, int k, VI *lo, VI *hi)
{
    const VI low4 = vi_set1(0x0f0f0f0f), bit4 = vi_set1(0x10101010);
    *lo = vi_and(v, low4);
    *hi = vi_and(vi_srli(v, 4), low4);
    if (five) {
        *lo = vi_or(*lo, vi_and(PAK_V(i8_shift)(high, 4 - 2 * k), bit4));
        *hi = vi_or(*hi, vi_and(PAK_V(i8_shift)(high, 3 - 2 * k), bit4));
    }
}

/* Q6_K: the codes of part p (0..3) from the column of ql's low (p even) or high halves and qh's. */
PAK_INLINE VI PAK_V(i8_q6_codes)(VI low, VI high, int p)
{
    const VI low4 = vi_set1(0x0f0f0f0f), two = vi_set1(0x03030303);
    const VI nibble = p < 2 ? vi_and(low, low4) : vi_and(vi_srli(low, 4), low4);
    return vi_or(nibble, vi_slli(vi_and(vi_srli(high, 2 * p), two), 4));
}

/* Q4_K's and Q5_K's 6-bit scale (minimum: 1) of sub-block i per lane, from the 3 columns of the
 * 12 bytes of scales (get_scale_min_k4 lane by lane). */
PAK_INLINE VI PAK_V(i8_scale_k4)(const VI *col, int i, int minimum)
{
    const VI six = vi_set1(63), four = vi_set1(15), two = vi_set1(3);
    if (i < 4)
        return vi_and(vi_srli(col[minimum], 8 * i), six);
    const VI low = vi_and(vi_srli(col[2], 8 * (i - 4) + 4 * minimum), four);
    return vi_or(low, vi_slli(vi_and(vi_srli(col[minimum], 8 * (i - 4) + 6), two), 4));
}

/* Q6_K's signed 8-bit scale s per lane: byte s % 4 of its column. */
PAK_INLINE VI PAK_V(i8_scale_q6)(VI column, int s)
{
    return vi_srai(vi_slli(column, 24 - 8 * (s % 4)), 24);
}

/* Where a group's sections start, for lanes `half`; and the stream of bytes to ask for ahead of the
 * products: `ahead` + b x `step` for block b, `step` being a block's bytes in the group (I8_AHEAD
 * past the group's share of block b, so reaching into the next group near the end). */
typedef struct {
    const uint8_t *qs, *qh, *scales, *d, *m;
    const uint8_t *ahead;
    int64_t step;
} I8V(sections);

/* Ask for block b's share of the bytes I8_AHEAD ahead. A decode step's products stream their weights
 * once; asking as the blocks are multiplied keeps loads in flight beside the products, where asking
 * for a whole group at its start held the products back until memory answered (measured on this
 * host, one thread, 121 products of 576 x 1536: Q4_1 12.2 -> 21-22 GB/s, Q8_0 15.5 -> 17.6, Q4_K
 * 10.5 -> 15.2, Q6_K 9.6 -> 14.1; of 8, 12, 16 and 32 KiB ahead, 12 and 16 were best and alike).
 * Prefetches never fault. */
PAK_INLINE void PAK_V(i8_ask_ahead)(const I8V(sections) *at, int64_t b)
{
    for (int64_t offset = 0; offset < at->step; offset += 64)
        __builtin_prefetch(at->ahead + b * at->step + offset, 0, 3);
}

/* The sections' starts alone. */
PAK_INLINE I8V(sections) PAK_V(i8_section_starts)(int wtype, const uint8_t *group, int64_t nb, int half)
{
    const int64_t lane = half * LANES8 * 4, rows = nb * G_ROWS;
    const int64_t halves = half * LANES8 * 2;
    switch (wtype) {
    case I8_Q4_0:
    case I8_Q4_1:
        return (I8V(sections)){group + lane, NULL, NULL, group + rows * 16 + halves, group + rows * 18 + halves};
    case I8_Q5_0:
    case I8_Q5_1:
        return (I8V(sections)){group + lane, group + rows * 16 + lane, NULL, group + rows * 20 + halves,
                               group + rows * 22 + halves};
    case I8_Q8_0:
        return (I8V(sections)){group + lane, NULL, NULL, group + rows * 32 + halves, NULL};
    case I8_Q4_K:
        return (I8V(sections)){group + lane, NULL, group + rows * 128 + lane, group + rows * 140 + halves,
                               group + rows * 142 + halves};
    case I8_Q5_K:
        return (I8V(sections)){group + lane, group + rows * 128 + lane, group + rows * 160 + lane,
                               group + rows * 172 + halves, group + rows * 174 + halves};
    default: /* Q6_K: ql, qh, scales, d */
        return (I8V(sections)){group + lane, group + rows * 128 + lane, group + rows * 192 + lane,
                               group + rows * 208 + halves, NULL};
    }
}

PAK_INLINE I8V(sections) PAK_V(i8_sections)(int wtype, const uint8_t *group, int64_t nb, int half)
{
    I8V(sections) at = PAK_V(i8_section_starts)(wtype, group, nb, half);
    at.ahead = group + I8_AHEAD;
    at.step = (int64_t)i8_format_of(wtype)->block_bytes * G_ROWS;
    return at;
}

/* --- 32-weight formats ------------------------------------------------------------------------- */

/* Q4_0, Q4_1, Q5_0, Q5_1: mr input rows (activation blocks a[i][b]) against lanes `half` of a group
 * of nb blocks; y[i] receives the rows' sums. */
PAK_INLINE void PAK_V(i8_tile_nibbles)(int wtype, const uint8_t *group, int64_t nb, int half, int mr,
                                       const pak_int8_act32 *const *a, VF *y)
{
    const int five = wtype == I8_Q5_0 || wtype == I8_Q5_1, has_min = wtype == I8_Q4_1 || wtype == I8_Q5_1;
    const int bias = wtype == I8_Q4_0 ? 8 : wtype == I8_Q5_0 ? 16 : 0;
    const I8V(sections) at = PAK_V(i8_sections)(wtype, group, nb, half);
    for (int i = 0; i < mr; ++i)
        y[i] = vf_zero();
    for (int64_t b = 0; b < nb; ++b) {
        PAK_V(i8_ask_ahead)(&at, b);
        VI acc[I8_MR]; /* start at -bias x the activations' sum: the sums of signed codes */
        for (int i = 0; i < mr; ++i)
            acc[i] = bias ? vi_set1(-bias * a[i][b].s) : vi_zero();
        const VI high = five ? vi_load(at.qh + b * COLUMN_BYTES) : vi_zero();
        for (int k = 0; k < 4; ++k) {
            VI lo, hi;
            PAK_V(i8_nibble_codes)(vi_load(at.qs + (b * 4 + k) * COLUMN_BYTES), five, high, k, &lo, &hi);
            for (int i = 0; i < mr; ++i) {
                acc[i] = PAK_V(i8_dot)(acc[i], lo, PAK_V(i8_bcast)(a[i][b].q + 4 * k));
                acc[i] = PAK_V(i8_dot)(acc[i], hi, PAK_V(i8_bcast)(a[i][b].q + 16 + 4 * k));
            }
        }
        const VF wd = vf_half(at.d + b * HALF_BYTES);
        const VF wm = has_min ? vf_half(at.m + b * HALF_BYTES) : vf_zero();
        for (int i = 0; i < mr; ++i) {
            const VF ad = vf_set1(a[i][b].d);
            y[i] = vf_fma(vf_mul(wd, ad), vf_from_i(acc[i]), y[i]);
            if (has_min)
                y[i] = vf_fma(wm, vf_set1(a[i][b].ds), y[i]);
        }
    }
}

/* Q8_0, as i8_tile_nibbles. */
PAK_INLINE void PAK_V(i8_tile_q8_0)(const uint8_t *group, int64_t nb, int half, int mr,
                                    const pak_int8_act32 *const *a, VF *y)
{
    const I8V(sections) at = PAK_V(i8_sections)(I8_Q8_0, group, nb, half);
    for (int i = 0; i < mr; ++i)
        y[i] = vf_zero();
    for (int64_t b = 0; b < nb; ++b) {
        PAK_V(i8_ask_ahead)(&at, b);
        VI acc[I8_MR];
        for (int i = 0; i < mr; ++i)
            acc[i] = Q8_OFFSET ? vi_set1(-Q8_OFFSET * a[i][b].s) : vi_zero();
        for (int k = 0; k < 8; ++k) {
            const VI w = vi_load(at.qs + (b * 8 + k) * COLUMN_BYTES);
            for (int i = 0; i < mr; ++i)
                acc[i] = PAK_V(i8_dot_signed)(acc[i], w, PAK_V(i8_bcast)(a[i][b].q + 4 * k));
        }
        const VF wd = vf_half(at.d + b * HALF_BYTES);
        for (int i = 0; i < mr; ++i)
            y[i] = vf_fma(vf_mul(wd, vf_set1(a[i][b].d)), vf_from_i(acc[i]), y[i]);
    }
}

/* --- K-quants ---------------------------------------------------------------------------------- */

/* Q4_K and Q5_K, as i8_tile_nibbles over super-blocks: a[i][8b + j] is row i's activation block of
 * sub-block j of super-block b; each sub-block is then a block with the scale d * sc and the minimum
 * -(dmin * m) (exact products). */
PAK_INLINE void PAK_V(i8_tile_q45_k)(int wtype, const uint8_t *group, int64_t nb, int half, int mr,
                                     const pak_int8_act32 *const *a, VF *y)
{
    const int five = wtype == I8_Q5_K;
    const I8V(sections) at = PAK_V(i8_sections)(wtype, group, nb, half);
    for (int i = 0; i < mr; ++i)
        y[i] = vf_zero();
    for (int64_t b = 0; b < nb; ++b) {
        PAK_V(i8_ask_ahead)(&at, b);
        const VI cols[3] = {vi_load(at.scales + (b * 3) * COLUMN_BYTES),
                            vi_load(at.scales + (b * 3 + 1) * COLUMN_BYTES),
                            vi_load(at.scales + (b * 3 + 2) * COLUMN_BYTES)};
        const VF wd = vf_half(at.d + b * HALF_BYTES), wm = vf_half(at.m + b * HALF_BYTES);
        for (int c = 0; c < 4; ++c) { /* sub-blocks 2c (low nibbles) and 2c + 1 (high) */
            VI acc[2][I8_MR];
            for (int i = 0; i < mr; ++i)
                acc[0][i] = acc[1][i] = vi_zero();
            for (int k = 0; k < 8; ++k) {
                VI codes[2];
                const VI high = five ? vi_load(at.qh + (b * 8 + k) * COLUMN_BYTES) : vi_zero();
                PAK_V(i8_nibble_codes)(vi_load(at.qs + (b * 32 + c * 8 + k) * COLUMN_BYTES), five, high, c, &codes[0],
                                       &codes[1]);
                for (int h = 0; h < 2; ++h)
                    for (int i = 0; i < mr; ++i)
                        acc[h][i] = PAK_V(i8_dot)(acc[h][i], codes[h], PAK_V(i8_bcast)(a[i][8 * b + 2 * c + h].q + 4 * k));
            }
            for (int h = 0; h < 2; ++h) {
                const int j = 2 * c + h;
                const VF scale = vf_mul(wd, vf_from_i(PAK_V(i8_scale_k4)(cols, j, 0)));
                const VF minimum = vf_mul(wm, vf_from_i(PAK_V(i8_scale_k4)(cols, j, 1)));
                for (int i = 0; i < mr; ++i) {
                    const pak_int8_act32 *act = &a[i][8 * b + j];
                    y[i] = vf_fma(vf_mul(scale, vf_set1(act->d)), vf_from_i(acc[h][i]), y[i]);
                    y[i] = vf_fnma(minimum, vf_set1(act->ds), y[i]);
                }
            }
        }
    }
}

/* Q6_K, as i8_tile_q45_k: sub-block s (16 weights, scale s) of half n = s / 8 is part p = s % 8 / 2
 * (ql's low or high halves, of bytes 0..31 or 32..63 of the half's 64, with qh's bits 2p and 2p + 1)
 * of positions l = 16 (s % 2) .. + 15; its activations are half s % 2 of block 8b + s / 2. */
PAK_INLINE void PAK_V(i8_tile_q6_k)(const uint8_t *group, int64_t nb, int half, int mr,
                                    const pak_int8_act32 *const *a, VF *y)
{
    const I8V(sections) at = PAK_V(i8_sections)(I8_Q6_K, group, nb, half);
    for (int i = 0; i < mr; ++i)
        y[i] = vf_zero();
    for (int64_t b = 0; b < nb; ++b) {
        PAK_V(i8_ask_ahead)(&at, b);
        const VF wd = vf_half(at.d + b * HALF_BYTES);
        for (int s = 0; s < 16; ++s) {
            const int n = s / 8, p = s % 8 / 2, first = 4 * (s % 2);
            VI acc[I8_MR]; /* start at -32 x the activations' sum: the sums of codes - 32 */
            for (int i = 0; i < mr; ++i)
                acc[i] = vi_set1(-32 * a[i][8 * b + s / 2].half[s % 2]);
            for (int k = first; k < first + 4; ++k) {
                const VI code = PAK_V(i8_q6_codes)(vi_load(at.qs + (b * 32 + n * 16 + (p & 1) * 8 + k) * COLUMN_BYTES),
                                                   vi_load(at.qh + (b * 16 + n * 8 + k) * COLUMN_BYTES), p);
                for (int i = 0; i < mr; ++i)
                    acc[i] = PAK_V(i8_dot)(acc[i], code, PAK_V(i8_bcast)(a[i][8 * b + s / 2].q + 4 * k));
            }
            const VF scale = vf_mul(wd, vf_from_i(PAK_V(i8_scale_q6)(vi_load(at.scales + (b * 4 + s / 4) * COLUMN_BYTES), s)));
            for (int i = 0; i < mr; ++i)
                y[i] = vf_fma(vf_mul(scale, vf_set1(a[i][8 * b + s / 2].d)), vf_from_i(acc[i]), y[i]);
        }
    }
}

/* --- one group against every input row --------------------------------------------------------- */

/* Input rows per tile (as many as the registers hold: accumulators and sums per row, the unpacked codes
 * shared; at most I8_MR): for the 32-weight formats, Q4_K and Q5_K, and Q6_K. */
#if I8_WIDTH == 512
#define MR_32 8
#define MR_K 4
#define MR_Q6 6
#else
#define MR_32 4
#define MR_K 2
#define MR_Q6 2
#endif

PAK_INLINE int PAK_V(i8_tile_rows)(int wtype)
{
    return wtype == I8_Q4_K || wtype == I8_Q5_K ? MR_K : wtype == I8_Q6_K ? MR_Q6 : MR_32;
}

#define I8_TILE_CASE(call, r, most)                                                                   \
    case r:                                                                                           \
        call((r) < (most) ? (r) : (most));                                                            \
        break;
/* call(r) with r = mr as a constant (mr <= most <= I8_MR). */
#define I8_TILE_SWITCH(call, mr, most)                                                                \
    switch (mr) {                                                                                     \
        I8_TILE_CASE(call, 1, most) I8_TILE_CASE(call, 2, most) I8_TILE_CASE(call, 3, most)           \
        I8_TILE_CASE(call, 4, most) I8_TILE_CASE(call, 5, most) I8_TILE_CASE(call, 6, most)           \
        I8_TILE_CASE(call, 7, most)                                                                   \
    default:                                                                                          \
        call(most);                                                                                   \
    }

/* Rows [0, rows) of the activations against one group of `wtype` (valid rows: `valid`), results
 * into columns col .. col + valid - 1 of y. */
static void PAK_V(i8_group)(int wtype, const uint8_t *group, int64_t in, const void *act, int64_t rows,
                            const i8_out *o, int64_t col, int valid)
{
    const int k_quant = wtype == I8_Q4_K || wtype == I8_Q5_K || wtype == I8_Q6_K;
    const int64_t nb = in / (k_quant ? 256 : 32);
    for (int half = 0; half * LANES8 < valid; ++half) {
        const int lanes = valid - half * LANES8 < LANES8 ? valid - half * LANES8 : LANES8;
        const int most = PAK_V(i8_tile_rows)(wtype);
        for (int64_t m0 = 0; m0 < rows; m0 += most) {
            const int mr = rows - m0 < most ? (int)(rows - m0) : most;
            VF y[I8_MR];
            const pak_int8_act32 *a32[I8_MR]; /* each row's activation blocks */
            for (int i = 0; i < mr; ++i)
                a32[i] = (const pak_int8_act32 *)act + (m0 + i) * (in / 32);
#define NIBBLES(r) PAK_V(i8_tile_nibbles)(wtype, group, nb, half, r, a32, y)
#define Q8_0(r) PAK_V(i8_tile_q8_0)(group, nb, half, r, a32, y)
#define Q45_K(r) PAK_V(i8_tile_q45_k)(wtype, group, nb, half, r, a32, y)
#define Q6_K(r) PAK_V(i8_tile_q6_k)(group, nb, half, r, a32, y)
            switch (wtype) {
            case I8_Q4_0:
            case I8_Q4_1:
            case I8_Q5_0:
            case I8_Q5_1: I8_TILE_SWITCH(NIBBLES, mr, MR_32) break;
            case I8_Q8_0: I8_TILE_SWITCH(Q8_0, mr, MR_32) break;
            case I8_Q4_K:
            case I8_Q5_K: I8_TILE_SWITCH(Q45_K, mr, MR_K) break;
            default: I8_TILE_SWITCH(Q6_K, mr, MR_Q6) break;
            }
#undef NIBBLES
#undef Q8_0
#undef Q45_K
#undef Q6_K
            for (int i = 0; i < mr; ++i)
                PAK_V(i8_store)(o, m0 + i, col + half * LANES8, lanes, y[i]);
        }
    }
}

/* --- activations (the AVX-512 variant only; the others use int8_scalar.h's, with the same bits) ---- */

#if I8_WIDTH == 512 && !I8_VNNI
/* 16 values from element `start` of x, float32 (bfloat16 widened exactly). */
PAK_INLINE VF PAK_V(i8_load16)(const void *x, int x_bf16, int64_t start)
{
    if (x_bf16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)x + start))), 16));
    return _mm512_loadu_ps((const float *)x + start);
}

/* v clamped to [low, high], NaN to 0 (i8_clamp). */
PAK_INLINE VF PAK_V(i8_clamp16)(VF v, float low, float high)
{
    const VF clamped = _mm512_min_ps(_mm512_max_ps(v, vf_set1(low)), vf_set1(high));
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), clamped);
}

/* The largest |v| of a block's vectors, NaN never winning (as i8_quantize32's loop). */
PAK_INLINE float PAK_V(i8_amax)(const VF *v, int count)
{
    VF amax = vf_zero();
    for (int i = 0; i < count; ++i) /* maxps returns its second operand when the first is NaN */
        amax = _mm512_max_ps(_mm512_abs_ps(v[i]), amax);
    return _mm512_reduce_max_ps(amax);
}

/* i8_quantize32, 16 lanes at a time: the same operations, so the same bits. */
static void PAK_V(i8_quantize32_rows)(const void *x, int x_bf16, int64_t in, int64_t m0, int64_t m1,
                                      pak_int8_act32 *out)
{
    const int64_t nb = in / 32;
    for (int64_t m = m0; m < m1; ++m)
        for (int64_t b = 0; b < nb; ++b) {
            const int64_t start = m * in + b * 32;
            const VF v[2] = {PAK_V(i8_load16)(x, x_bf16, start), PAK_V(i8_load16)(x, x_bf16, start + 16)};
            const float amax = PAK_V(i8_amax)(v, 2), d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            pak_int8_act32 *block = out + m * nb + b;
            for (int h = 0; h < 2; ++h) {
                const VF scaled = PAK_V(i8_clamp16)(vf_mul(v[h], vf_set1(id)), -127.0f, 127.0f);
                const VF whole = _mm512_roundscale_ps(scaled, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
                const VF rest = _mm512_sub_ps(scaled, whole);
                VI q = _mm512_cvttps_epi32(whole);
                q = _mm512_mask_add_epi32(q, _mm512_cmp_ps_mask(rest, vf_set1(0.5f), _CMP_GE_OQ), q, vi_set1(1));
                q = _mm512_mask_sub_epi32(q, _mm512_cmp_ps_mask(rest, vf_set1(-0.5f), _CMP_LE_OQ), q, vi_set1(1));
                _mm_storeu_si128((__m128i *)(block->q + 16 * h), _mm512_cvtepi32_epi8(q));
                block->half[h] = (int16_t)_mm512_reduce_add_epi32(q);
            }
            block->d = d;
            block->s = block->half[0] + block->half[1];
            block->ds = d * (float)block->s;
        }
}

#endif

/* --- AMX tiles (the AVX-512 variant only: every CPU with AMX has AVX-512) ---------------------- */

#if I8_WIDTH == 512 && !I8_VNNI
/* The group's signed codes where the tile products read them: code of weight p of row r at
 * codes[(p / 4) * 64 + 4 r + p % 4], i.e. 4-byte columns of the 16 rows in the order of the weights
 * (Q8_0's section of codes is already that). */
static const int8_t *PAK_V(i8_unpack_group)(int wtype, const uint8_t *group, int64_t nb, int8_t *codes)
{
    const I8V(sections) at = PAK_V(i8_sections)(wtype, group, nb, 0);
    const int five = wtype == I8_Q5_0 || wtype == I8_Q5_1 || wtype == I8_Q5_K;
    VI lo, hi;
    switch (wtype) {
    case I8_Q8_0:
        return (const int8_t *)at.qs;
    case I8_Q4_0:
    case I8_Q4_1:
    case I8_Q5_0:
    case I8_Q5_1: {
        const VI bias = _mm512_set1_epi8((char)(wtype == I8_Q4_0 ? 8 : wtype == I8_Q5_0 ? 16 : 0));
        for (int64_t b = 0; b < nb; ++b) {
            const VI high = five ? vi_load(at.qh + b * COLUMN_BYTES) : vi_zero();
            for (int k = 0; k < 4; ++k) {
                PAK_V(i8_nibble_codes)(vi_load(at.qs + (b * 4 + k) * COLUMN_BYTES), five, high, k, &lo, &hi);
                _mm512_storeu_si512(codes + (b * 8 + k) * COLUMN_BYTES, _mm512_sub_epi8(lo, bias));
                _mm512_storeu_si512(codes + (b * 8 + 4 + k) * COLUMN_BYTES, _mm512_sub_epi8(hi, bias));
            }
        }
        return codes;
    }
    case I8_Q4_K:
    case I8_Q5_K:
        for (int64_t b = 0; b < nb; ++b)
            for (int c = 0; c < 4; ++c)
                for (int k = 0; k < 8; ++k) {
                    const VI high = five ? vi_load(at.qh + (b * 8 + k) * COLUMN_BYTES) : vi_zero();
                    PAK_V(i8_nibble_codes)(vi_load(at.qs + (b * 32 + c * 8 + k) * COLUMN_BYTES), five, high, c, &lo, &hi);
                    _mm512_storeu_si512(codes + (b * 64 + c * 16 + k) * COLUMN_BYTES, lo);
                    _mm512_storeu_si512(codes + (b * 64 + c * 16 + 8 + k) * COLUMN_BYTES, hi);
                }
        return codes;
    default: /* Q6_K */
        for (int64_t b = 0; b < nb; ++b)
            for (int n = 0; n < 2; ++n)
                for (int p = 0; p < 4; ++p)
                    for (int k = 0; k < 8; ++k) {
                        const VI code = PAK_V(i8_q6_codes)(
                            vi_load(at.qs + (b * 32 + n * 16 + (p & 1) * 8 + k) * COLUMN_BYTES),
                            vi_load(at.qh + (b * 16 + n * 8 + k) * COLUMN_BYTES), p);
                        _mm512_storeu_si512(codes + (b * 64 + n * 32 + p * 8 + k) * COLUMN_BYTES,
                                            _mm512_sub_epi8(code, _mm512_set1_epi8(32)));
                    }
        return codes;
    }
}

/* A thread's buffer of unpacked codes, grown as needed (the pool's threads live as long as the
 * process; so does each one's buffer). */
static int8_t *PAK_V(i8_codes_buffer)(int64_t bytes)
{
    static __thread int8_t *buffer;
    static __thread int64_t capacity;
    if (bytes > capacity) {
        free(buffer);
        buffer = aligned_alloc(64, (size_t)((bytes + 63) / 64 * 64));
        capacity = buffer != NULL ? bytes : 0;
    }
    return buffer;
}

/* As i8_group, with the integer sums of 16 input rows x the group's 16 rows per block (sub-block)
 * from `sums` (AMX, or its emulation); falls back to i8_group when the buffer cannot be had. */
static void PAK_V(i8_group_tiles)(int wtype, const uint8_t *group, int64_t in, const void *act, int64_t rows,
                                  const i8_out *o, int64_t col, int valid, i8_tile_sums_fn sums)
{
    const int k_quant = wtype == I8_Q4_K || wtype == I8_Q5_K || wtype == I8_Q6_K;
    const int has_min = wtype == I8_Q4_1 || wtype == I8_Q5_1;
    const int64_t nb = in / (k_quant ? 256 : 32), blocks = in / 32;
    int8_t *buffer = PAK_V(i8_codes_buffer)(in * G_ROWS);
    if (buffer == NULL) {
        PAK_V(i8_group)(wtype, group, in, act, rows, o, col, valid);
        return;
    }
    const int8_t *codes = PAK_V(i8_unpack_group)(wtype, group, nb, buffer);
    const I8V(sections) at = PAK_V(i8_sections)(wtype, group, nb, 0);
    _Alignas(64) int32_t c[G_ROWS * G_ROWS];
    for (int64_t m0 = 0; m0 < rows; m0 += G_ROWS) {
        const int mr = rows - m0 < G_ROWS ? (int)(rows - m0) : G_ROWS;
        VF y[G_ROWS];
        for (int i = 0; i < mr; ++i)
            y[i] = vf_zero();
        const pak_int8_act32 *a = (const pak_int8_act32 *)act + m0 * blocks; /* row i's block j: a[i * blocks + j] */
        const int64_t stride = blocks * (int64_t)sizeof *a;
        if (!k_quant) {
            for (int64_t b = 0; b < nb; ++b) {
                sums(a[b].q, stride, mr, codes + b * 8 * COLUMN_BYTES, 32, c);
                const VF wd = vf_half(at.d + b * HALF_BYTES);
                const VF wm = has_min ? vf_half(at.m + b * HALF_BYTES) : vf_zero();
                for (int i = 0; i < mr; ++i) {
                    const VF ad = vf_set1(a[i * blocks + b].d);
                    y[i] = vf_fma(vf_mul(wd, ad), vf_from_i(vi_load(c + G_ROWS * i)), y[i]);
                    if (has_min)
                        y[i] = vf_fma(wm, vf_set1(a[i * blocks + b].ds), y[i]);
                }
            }
        } else if (wtype == I8_Q6_K) {
            for (int64_t b = 0; b < nb; ++b) {
                const VF wd = vf_half(at.d + b * HALF_BYTES);
                for (int s = 0; s < 16; ++s) {
                    const int64_t j = 8 * b + s / 2;
                    sums(a[j].q + 16 * (s % 2), stride, mr, codes + (b * 64 + s * 4) * COLUMN_BYTES, 16, c);
                    const VF scale = vf_mul(wd, vf_from_i(PAK_V(i8_scale_q6)(
                        vi_load(at.scales + (b * 4 + s / 4) * COLUMN_BYTES), s)));
                    for (int i = 0; i < mr; ++i)
                        y[i] = vf_fma(vf_mul(scale, vf_set1(a[i * blocks + j].d)), vf_from_i(vi_load(c + G_ROWS * i)),
                                      y[i]);
                }
            }
        } else {
            for (int64_t b = 0; b < nb; ++b) {
                const VI cols[3] = {vi_load(at.scales + (b * 3) * COLUMN_BYTES),
                                    vi_load(at.scales + (b * 3 + 1) * COLUMN_BYTES),
                                    vi_load(at.scales + (b * 3 + 2) * COLUMN_BYTES)};
                const VF wd = vf_half(at.d + b * HALF_BYTES), wm = vf_half(at.m + b * HALF_BYTES);
                for (int sub = 0; sub < 8; ++sub) {
                    const int64_t j = 8 * b + sub;
                    sums(a[j].q, stride, mr, codes + (b * 64 + sub * 8) * COLUMN_BYTES, 32, c);
                    const VF scale = vf_mul(wd, vf_from_i(PAK_V(i8_scale_k4)(cols, sub, 0)));
                    const VF minimum = vf_mul(wm, vf_from_i(PAK_V(i8_scale_k4)(cols, sub, 1)));
                    for (int i = 0; i < mr; ++i) {
                        y[i] = vf_fma(vf_mul(scale, vf_set1(a[i * blocks + j].d)), vf_from_i(vi_load(c + G_ROWS * i)),
                                      y[i]);
                        y[i] = vf_fnma(minimum, vf_set1(a[i * blocks + j].ds), y[i]);
                    }
                }
            }
        }
        for (int i = 0; i < mr; ++i)
            PAK_V(i8_store)(o, m0 + i, col, valid, y[i]);
    }
}
#endif

#undef LANES8
#undef vi_load
#undef vi_set1
#undef vi_zero
#undef vi_and
#undef vi_or
#undef vi_xor
#undef vi_add
#undef vi_sub
#undef vi_mullo
#undef vi_srli
#undef vi_slli
#undef vi_srai
#undef vi_maddubs
#undef vi_madd16
#undef vi_abs8
#undef vi_sign8
#undef vf_zero
#undef vf_set1
#undef vf_mul
#undef vf_fma
#undef vf_fnma
#undef vf_from_i
#undef vf_half
#undef vf_store
#undef VI
#undef VF
#undef Q8_OFFSET
#undef I8_TILE_CASE
#undef I8_TILE_SWITCH
#undef MR_32
#undef MR_K
#undef MR_Q6
