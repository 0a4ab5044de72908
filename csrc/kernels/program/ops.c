/* pak_run_ops of pyagent/program.h: each op is a call of its entry point with the op's arguments. */
#include <stddef.h>
#include <stdint.h>

#include "pyagent/attention.h"
#include "pyagent/common.h"
#include "pyagent/layer_ops.h"
#include "pyagent/linear.h"
#include "pyagent/linear_int8.h"
#include "pyagent/program.h"

static int run_op(const pak_op *op)
{
    void *const *p = op->p;
    const int64_t *n = op->n;
    switch (op->kind) {
    case PAK_OP_LINEAR_F32:
        return pak_linear_f32(p[0], p[1], p[2], n[0], n[1], n[2], (int)n[3]);
    case PAK_OP_LINEAR_BF16:
        return pak_linear_bf16(p[0], p[1], p[2], (int)n[0], n[1], n[2], n[3], (int)n[4]);
    case PAK_OP_LINEAR_QUANT_F32:
        return pak_linear_quant_f32(p[0], p[1], (int)n[0], p[2], n[1], n[2], n[3], (int)n[4]);
    case PAK_OP_LINEAR_QUANT_BF16:
        return pak_linear_quant_bf16(p[0], p[1], (int)n[0], p[2], (int)n[1], n[2], n[3], n[4], (int)n[5]);
    case PAK_OP_LINEAR_INT8:
        return pak_linear_int8(p[0], (int)n[0], p[1], (int)n[1], p[2], (int)n[2], n[3], n[4], p[3], (int)n[5]);
    case PAK_OP_ADD_RMS_NORM:
        return pak_add_rms_norm(p[0], p[1], p[2], p[3], (int)n[0], n[1], n[2], op->f, (int)n[3]);
    case PAK_OP_ROPE_SPLIT:
        return pak_rope_split(p[0], p[1], p[2], p[3], p[4], p[5], (int)n[0], n[1], n[2], n[3], n[4], (int)n[5]);
    case PAK_OP_SILU_MUL:
        return pak_silu_mul(p[0], p[1], (int)n[0], n[1], n[2], (int)n[3]);
    case PAK_OP_PAGED_ATTENTION:
        return pak_paged_attention_call(p[0]);
    default:
        return PAK_EINVAL;
    }
}

int pak_run_ops(const pak_op *ops, int64_t count, int64_t *failed)
{
    int64_t ignored;
    failed = failed != NULL ? failed : &ignored;
    *failed = -1;
    if (count < 0 || (count > 0 && ops == NULL))
        return PAK_EINVAL;
    for (int64_t i = 0; i < count; ++i) {
        const int rc = run_op(&ops[i]);
        if (rc != PAK_OK) {
            *failed = i;
            return rc;
        }
    }
    return PAK_OK;
}
