/* The helper threads of common/pool.h. One call at a time uses them (a concurrent call from another
 * thread runs on its caller alone). A call publishes its job, wakes the helpers, and then the caller
 * and every helper that is awake claim chunks from one counter until none are left; the
 * caller waits only for chunks that were claimed, so a helper the OS does not schedule costs at
 * most one chunk, never the whole call. Helpers spin for a while between calls (decode steps come
 * back to back), then sleep.
 *
 * The counter `ticket` holds the call's generation (high 32 bits) and the next chunk (low 32 bits).
 * A claim is a compare-and-swap that keeps the generation, so a helper that wakes late cannot claim
 * a chunk of a later call with the job it read for an earlier one; and a successful claim means the
 * call is not finished (its chunk is not done), so the job it reads after claiming is still there.
 * Claims are guided: each takes 1 / (2 x threads) of the chunks left (at least one), so a call is
 * shared in few claims and ends on single chunks, and the caller waits at most about one chunk for
 * the last helper (a decode step's ~120 products each paid up to an eighth of their work there).
 * While the kernels' counters are on (pyagent/profile.h), a call that had helpers counts its caller's
 * time not spent on chunks (publishing, waking, waiting for the last chunk) as its hand-off. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "common/pool.h"
#include "common/profile.h"

#define SPIN_ROUNDS 30000

static struct {
    pthread_mutex_t busy;  /* held by the call using the helpers */
    pthread_mutex_t lock;  /* guards sleeping */
    pthread_cond_t wake;
    atomic_uint generation;
    _Atomic uint64_t ticket;
    atomic_int sleepers;
    atomic_int done;       /* chunks of the current call finished */
    int helpers;           /* helpers running in this process (reset in a child after fork) */
    int wanted;            /* helpers the current call may use (helpers 0 .. wanted - 1) */
    unsigned born[PAK_POOL_MAX_THREADS]; /* the generation each helper was started in */
    pak_pool_fn fn;        /* the current call's work */
    const void *ctx;
    int64_t count, grain, chunks;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Claim and run chunks of call `generation` until none are left; `worker` is 0 for the caller,
 * 1 + its index for a helper. With `timed`, returns the nanoseconds spent running chunks (else 0). */
static int64_t claim_chunks(unsigned generation, int worker, int timed)
{
    int64_t working = 0;
    for (;;) {
        uint64_t ticket = atomic_load(&pool.ticket);
        const int64_t next = (int64_t)(uint32_t)ticket;
        if ((unsigned)(ticket >> 32) != generation || next >= pool.chunks)
            return working;
        const int64_t share = 2 * ((int64_t)pool.wanted + 1), left = pool.chunks - next;
        const int64_t take = left / share > 1 ? left / share : 1;
        if (!atomic_compare_exchange_weak(&pool.ticket, &ticket, ticket + (uint64_t)take))
            continue;
        const int64_t begin = next * pool.grain, end = (next + take) * pool.grain;
        const int64_t started = timed ? pak_profile_now() : 0;
        pool.fn(pool.ctx, begin, end < pool.count ? end : pool.count, worker);
        if (timed)
            working += pak_profile_now() - started;
        atomic_fetch_add(&pool.done, (int)take);
    }
}

static void *helper_main(void *arg)
{
    const int index = (int)(intptr_t)arg;
    unsigned seen = pool.born[index];
    for (;;) {
        unsigned now;
        int spins = 0;
        while ((now = atomic_load(&pool.generation)) == seen && spins < SPIN_ROUNDS) {
            cpu_relax();
            ++spins;
        }
        if (now == seen) {
            pthread_mutex_lock(&pool.lock);
            atomic_fetch_add(&pool.sleepers, 1);
            while ((now = atomic_load(&pool.generation)) == seen)
                pthread_cond_wait(&pool.wake, &pool.lock);
            atomic_fetch_sub(&pool.sleepers, 1);
            pthread_mutex_unlock(&pool.lock);
        }
        seen = now;
        if (index < pool.wanted)
            claim_chunks(now, 1 + index, 0);
    }
    return NULL;
}

/* A child after fork has none of its parent's helpers. */
static void forget_helpers(void)
{
    pool.helpers = 0;
}

static void watch_forks(void)
{
    pthread_atfork(NULL, NULL, forget_helpers);
}

/* Make sure `wanted` helpers run in this process. Called with `busy` held. */
static void start_helpers(int wanted)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, watch_forks);
    while (pool.helpers < wanted) {
        pthread_t id;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pool.born[pool.helpers] = atomic_load(&pool.generation);
        const int rc = pthread_create(&id, &attr, helper_main, (void *)(intptr_t)pool.helpers);
        pthread_attr_destroy(&attr);
        if (rc != 0)
            break;
        ++pool.helpers;
    }
}

void pak_pool_run(pak_pool_fn fn, const void *ctx, int64_t count, int64_t grain, int threads)
{
    const int64_t chunks = grain > 0 ? (count + grain - 1) / grain : 1;
    if (threads > PAK_POOL_MAX_THREADS)
        threads = PAK_POOL_MAX_THREADS;
    if (threads <= 1 || chunks < 2 || pthread_mutex_trylock(&pool.busy) != 0) {
        fn(ctx, 0, count, 0);
        return;
    }
    const int64_t started = pak_profile_begin(); /* the hand-off: this call's time not spent on chunks */
    start_helpers(threads - 1);
    pool.wanted = threads - 1;
    const unsigned generation = atomic_load(&pool.generation) + 1;
    pool.fn = fn;
    pool.ctx = ctx;
    pool.count = count;
    pool.grain = grain;
    pool.chunks = chunks;
    atomic_store(&pool.done, 0);
    atomic_store(&pool.ticket, (uint64_t)generation << 32);
    atomic_store(&pool.generation, generation);
    if (atomic_load(&pool.sleepers) > 0) {
        pthread_mutex_lock(&pool.lock);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
    }
    const int64_t working = claim_chunks(generation, 0, started != 0);
    while (atomic_load(&pool.done) < chunks)
        cpu_relax();
    pthread_mutex_unlock(&pool.busy);
    if (started != 0)
        pak_profile_handoff(pak_profile_now() - started - working);
}
