/* Token-bitmask kernels (pyagent/grammar.h): argument checks and instruction-set dispatch. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "pyagent/common.h"
#include "pyagent/grammar.h"
#include "common/variant.h"

/* The rows to mask: every row (count < 0) or the entries of an int32 / int64 index array. */
typedef struct {
    const void *indices;
    int64_t count;
    int index_bytes;
} pak_rows;

PAK_INLINE int64_t pak_row_at(const pak_rows *rows, int64_t i)
{
    if (rows->count < 0)
        return i;
    if (rows->index_bytes == 8)
        return ((const int64_t *)rows->indices)[i];
    return ((const int32_t *)rows->indices)[i];
}

#define PAK_IMPL "grammar/bitmask_impl.h"
#include "common/variants.h"

/* Validate sizes, pointers and every index before anything is written. */
static int check_args(const void *logits, const int32_t *bitmask, int64_t num_rows, int64_t vocab,
                      const void *indices, int64_t num_indices, int index_bytes, int64_t *err_index,
                      pak_rows *rows)
{
    if (err_index)
        *err_index = -1;
    if (num_rows < 0 || vocab < 0 || vocab > INT32_MAX)
        return PAK_EINVAL;
    if (num_rows > 0 && vocab > 0 && (logits == NULL || bitmask == NULL))
        return PAK_EINVAL;
    rows->indices = indices;
    rows->count = -1;
    rows->index_bytes = index_bytes;
    if (indices == NULL)
        return PAK_OK;
    if (num_indices < 0 || (index_bytes != 4 && index_bytes != 8))
        return PAK_EINVAL;
    rows->count = num_indices;
    for (int64_t i = 0; i < num_indices; ++i) {
        const int64_t r = pak_row_at(rows, i);
        if (r < 0 || r >= num_rows) {
            if (err_index)
                *err_index = i;
            return PAK_EINDEX;
        }
    }
    return PAK_OK;
}

int pak_token_bitmask_f32(float *logits, const int32_t *bitmask, int64_t num_rows, int64_t vocab,
                          const void *indices, int64_t num_indices, int index_bytes,
                          int64_t *err_index)
{
    pak_rows rows;
    const int rc = check_args(logits, bitmask, num_rows, vocab, indices, num_indices, index_bytes,
                              err_index, &rows);
    if (rc != PAK_OK || vocab == 0)
        return rc;
    switch (pak_isa_active()) {
#if PAK_X86_VARIANTS
    case PAK_ISA_AVX512:
        bitmask_f32_avx512(logits, bitmask, num_rows, vocab, &rows);
        break;
    case PAK_ISA_AVX2:
        bitmask_f32_avx2(logits, bitmask, num_rows, vocab, &rows);
        break;
#endif
    default:
        bitmask_f32_generic(logits, bitmask, num_rows, vocab, &rows);
    }
    return PAK_OK;
}

int pak_token_bitmask_16(uint16_t *logits, const int32_t *bitmask, int64_t num_rows, int64_t vocab,
                         const void *indices, int64_t num_indices, int index_bytes,
                         uint16_t neg_inf_bits, int64_t *err_index)
{
    pak_rows rows;
    const int rc = check_args(logits, bitmask, num_rows, vocab, indices, num_indices, index_bytes,
                              err_index, &rows);
    if (rc != PAK_OK || vocab == 0)
        return rc;
    switch (pak_isa_active()) {
#if PAK_X86_VARIANTS
    case PAK_ISA_AVX512:
        bitmask_16_avx512(logits, bitmask, num_rows, vocab, &rows, neg_inf_bits);
        break;
    case PAK_ISA_AVX2:
        bitmask_16_avx2(logits, bitmask, num_rows, vocab, &rows, neg_inf_bits);
        break;
#endif
    default:
        bitmask_16_generic(logits, bitmask, num_rows, vocab, &rows, neg_inf_bits);
    }
    return PAK_OK;
}
