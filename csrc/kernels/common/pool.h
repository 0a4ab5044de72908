/* Internal: the persistent helper threads shared by the kernels (linear layers, paged attention).
 *
 * A call splits items [0, count) into chunks of `grain` that the calling thread and the helpers
 * claim from one counter, a few chunks per claim, fewer as the call nears its end; helpers spin for
 * a while between calls (a model's kernels come back to back), then sleep. Results must not depend on
 * which thread ran a chunk: each kernel computes an item the same way wherever it runs.
 */
#ifndef PAK_COMMON_POOL_H
#define PAK_COMMON_POOL_H

#include <stdint.h>

#define PAK_POOL_MAX_THREADS 64

/* Work on items [begin, end) as `worker`: 0 for the calling thread, 1 + i for helper i (so a
 * kernel can keep per-worker scratch indexed by it, below the call's `threads`). */
typedef void (*pak_pool_fn)(const void *ctx, int64_t begin, int64_t end, int worker);

/* Run fn over [0, count) in chunks of `grain` on the caller and up to threads - 1 helpers, and
 * return when every chunk is done. fn gets ranges of one or more whole chunks (begin a multiple of
 * grain; end one too, or count). Runs fn(ctx, 0, count, 0) on the caller alone when threads <= 1,
 * when there is a single chunk, or when another thread's call holds the helpers. */
void pak_pool_run(pak_pool_fn fn, const void *ctx, int64_t count, int64_t grain, int threads);

#endif
