/* Greedy token selection (pyagent/greedy.h): the dispatch over rows. */
#include <math.h>
#include <stdint.h>
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#include <immintrin.h> /* the AVX-512 variant uses a few intrinsics (sampling/vecops_impl.h) */
#endif

#include "pyagent/common.h"
#include "pyagent/greedy.h"
#include "common/variant.h"
#include "sampling/vecmath.h"

#define PAK_IMPL "sampling/greedy_impl.h"
#include "common/variants.h"

typedef int64_t (*pak_greedy_fn)(const float *restrict, int64_t);

static pak_greedy_fn pick_greedy_fn(void)
{
    switch (pak_isa_active()) {
#if PAK_X86_VARIANTS
    case PAK_ISA_AVX512:
        return greedy_row_avx512;
    case PAK_ISA_AVX2:
        return greedy_row_avx2;
#endif
    default:
        return greedy_row_generic;
    }
}

int pak_greedy_f32(const float *logits, int64_t num_rows, int64_t vocab, int64_t *tokens, int64_t *err_row)
{
    if (err_row)
        *err_row = -1;
    if (num_rows < 0 || vocab < 0 || (num_rows > 0 && (vocab == 0 || !logits || !tokens)))
        return PAK_EINVAL;
    const pak_greedy_fn row_fn = pick_greedy_fn();
    for (int64_t r = 0; r < num_rows; ++r) {
        tokens[r] = row_fn(logits + r * vocab, vocab);
        if (tokens[r] < 0) {
            if (err_row)
                *err_row = r;
            return PAK_EVALUE;
        }
    }
    return PAK_OK;
}
