/* The counters of pyagent/profile.h (see common/profile.h). */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "common/profile.h"

atomic_int pak_profile_on;

static struct {
    _Atomic int64_t calls[PAK_PROFILE_AREAS], ns[PAK_PROFILE_AREAS];
    _Atomic int64_t shared_calls, handoff_ns;
} counters;

int64_t pak_profile_now(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

void pak_profile_end(int area, int64_t started)
{
    if (started == 0)
        return;
    atomic_fetch_add_explicit(&counters.calls[area], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&counters.ns[area], pak_profile_now() - started, memory_order_relaxed);
}

void pak_profile_handoff(int64_t handoff_ns)
{
    atomic_fetch_add_explicit(&counters.shared_calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&counters.handoff_ns, handoff_ns, memory_order_relaxed);
}

void pak_profile_enable(int on)
{
    if (on) {
        for (int area = 0; area < PAK_PROFILE_AREAS; ++area) {
            atomic_store(&counters.calls[area], 0);
            atomic_store(&counters.ns[area], 0);
        }
        atomic_store(&counters.shared_calls, 0);
        atomic_store(&counters.handoff_ns, 0);
    }
    atomic_store(&pak_profile_on, on != 0);
}

void pak_profile_read(pak_profile_counters *out)
{
    for (int area = 0; area < PAK_PROFILE_AREAS; ++area) {
        out->calls[area] = atomic_load(&counters.calls[area]);
        out->ns[area] = atomic_load(&counters.ns[area]);
    }
    out->shared_calls = atomic_load(&counters.shared_calls);
    out->handoff_ns = atomic_load(&counters.handoff_ns);
}
