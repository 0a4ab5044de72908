/* pyagent/profile.h: where a step's time goes, counted inside the kernels.
 *
 * While counting is on, every call of a step's kernels (the linear products, the layer operations,
 * paged attention, LoRA and the mixers) adds its wall time on the calling thread to its area's
 * counter, and every call that shares its work with the helper threads (common/pool.h) adds the time
 * its caller spent handing the work over and waiting for the helpers' last chunks (the calling
 * thread's time in the call minus the time it spent computing chunks itself). Counting costs one
 * atomic load per call while it is off, two clock reads per call while it is on. The counters are
 * process-wide: count one thread's steps at a time.
 */
#ifndef PYAGENT_PROFILE_H
#define PYAGENT_PROFILE_H

#include <stdint.h>

enum pak_profile_area {
    PAK_PROFILE_LINEAR = 0,    /* pak_linear_* */
    PAK_PROFILE_ATTENTION = 1, /* pak_paged_attention */
    PAK_PROFILE_LAYER_OPS = 2, /* pak_add_rms_norm, pak_rope_split, pak_silu_mul */
    PAK_PROFILE_LORA = 3,      /* pak_lora_apply */
    PAK_PROFILE_MIXERS = 4,    /* pak_short_conv, pak_ssd, pak_gated_delta, pak_mla */
    PAK_PROFILE_AREAS = 5
};

typedef struct {
    int64_t calls[5];       /* kernel calls per area */
    int64_t ns[5];          /* wall nanoseconds inside them, per area */
    int64_t shared_calls;   /* calls that shared their work with helper threads */
    int64_t handoff_ns;     /* of the time above, what callers spent handing work over and waiting */
} pak_profile_counters;

/* Start counting from zero (on != 0) or stop (0; the counters keep their values). */
void pak_profile_enable(int on);

/* The counters now. */
void pak_profile_read(pak_profile_counters *out);

#endif
