/* Internal: the counters of pyagent/profile.h, for the kernels' entry points and the pool.
 *
 * A counted entry point starts with `const int64_t started = pak_profile_begin();` and returns
 * through `return pak_profile_return(PAK_PROFILE_<AREA>, started, rc);`. pak_profile_begin returns 0
 * while counting is off, and the call is then not counted.
 */
#ifndef PAK_COMMON_PROFILE_H
#define PAK_COMMON_PROFILE_H

#include <stdatomic.h>
#include <stdint.h>

#include "pyagent/profile.h"

extern atomic_int pak_profile_on;

/* Monotonic nanoseconds. */
int64_t pak_profile_now(void);

/* The start of a counted call: now, or 0 while counting is off. */
static inline int64_t pak_profile_begin(void)
{
    return atomic_load_explicit(&pak_profile_on, memory_order_relaxed) ? pak_profile_now() : 0;
}

/* Count a call of `area` begun at `started` (nothing when it was begun while counting was off). */
void pak_profile_end(int area, int64_t started);

/* pak_profile_end, then `rc`: an entry point's `return pak_profile_return(AREA, started, rc);`. */
static inline int pak_profile_return(int area, int64_t started, int rc)
{
    pak_profile_end(area, started);
    return rc;
}

/* Count a call that shared its work with helpers: `handoff_ns` of the caller's time went to handing
 * it over and waiting for them. */
void pak_profile_handoff(int64_t handoff_ns);

#endif
