/* pyagent/program.h: a run of prepared kernel calls in one call from Python.
 *
 * A caller that makes the same kernel calls every step (a decoder layer's norm, products, RoPE and
 * SwiGLU on buffers it keeps) describes each call once as a pak_op: the entry point (`kind`) and its
 * arguments as that entry point takes them, split by type and kept in order: the pointers in `p`,
 * the integers in `n`, the one float (pak_add_rms_norm's eps) in `f`. pak_run_ops then makes the
 * calls in order, exactly as if each entry point had been called on its own (the same code, so the
 * same bits), and stops at the first that fails.
 *
 *   kind                        p                               n
 *   PAK_OP_LINEAR_F32           x, w, y                         rows, out, in, threads
 *   PAK_OP_LINEAR_BF16          x, w, y                         y_f32, rows, out, in, threads
 *   PAK_OP_LINEAR_QUANT_F32     x, w, y                         wtype, rows, out, in, threads
 *   PAK_OP_LINEAR_QUANT_BF16    x, w, y                         wtype, y_f32, rows, out, in, threads
 *   PAK_OP_LINEAR_INT8          x, parts, y, scratch            x_bf16, nparts, y_f32, rows, in, threads
 *   PAK_OP_ADD_RMS_NORM         hidden, delta, weight, out      dtype, rows, dim, threads   (f: eps)
 *   PAK_OP_ROPE_SPLIT           qkv, cos, sin, q, k, v          dtype, tokens, heads, kv_heads, dim, threads
 *   PAK_OP_SILU_MUL             gate_up, out                    dtype, tokens, inter, threads
 *   PAK_OP_PAGED_ATTENTION      call (a pak_attn_call *, pyagent/attention.h)
 */
#ifndef PYAGENT_PROGRAM_H
#define PYAGENT_PROGRAM_H

#include <stdint.h>

enum pak_op_kind {
    PAK_OP_LINEAR_F32 = 1,
    PAK_OP_LINEAR_BF16 = 2,
    PAK_OP_LINEAR_QUANT_F32 = 3,
    PAK_OP_LINEAR_QUANT_BF16 = 4,
    PAK_OP_LINEAR_INT8 = 5,
    PAK_OP_ADD_RMS_NORM = 6,
    PAK_OP_ROPE_SPLIT = 7,
    PAK_OP_SILU_MUL = 8,
    PAK_OP_PAGED_ATTENTION = 9
};

typedef struct {
    int kind;
    void *p[6];
    int64_t n[6];
    float f;
} pak_op;

/* Run ops[0], ..., ops[count - 1] in order. Returns PAK_OK, or the status of the first op that failed
 * (PAK_EINVAL for an unknown kind) with its index in *failed (-1 when none failed). */
int pak_run_ops(const pak_op *ops, int64_t count, int64_t *failed);

#endif
