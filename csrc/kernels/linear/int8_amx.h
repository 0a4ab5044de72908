/* Internal to the int8 path: AMX tiles for products of many rows (int8_amx.c), where proven usable.
 *
 * The tile products give each block's (or sub-block's) exact integer sums for 16 input rows x 16
 * weight rows at once; int8_impl.h's tile driver unpacks a group's codes for them and applies the
 * scales in the order of every other variant, so AMX changes no bit. */
#ifndef PAK_LINEAR_INT8_AMX_H
#define PAK_LINEAR_INT8_AMX_H

#include <stdint.h>

/* Products of fewer input rows run on the vector variants. */
#define I8_AMX_MIN_ROWS 16

/* c[m * 16 + n] = sum_k a[m * a_stride + k] * b[(k / 4) * 64 + 4 * n + k % 4] for m < rows (at most
 * 16), n < 16 and k < depth (16 or 32): signed bytes, exact int32 sums. */
typedef void (*i8_tile_sums_fn)(const int8_t *a, int64_t a_stride, int rows, const int8_t *b, int depth,
                                int32_t *c);

/* The tile products the int8 path should use now: AMX's where it is usable and allowed, the C
 * emulation where tests asked for it, else NULL. */
i8_tile_sums_fn i8_amx_tiles(void);

/* Return the calling thread's tiles to their initial state (after a group's products). */
void i8_amx_release(i8_tile_sums_fn tiles);

#endif
