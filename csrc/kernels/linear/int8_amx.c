/* AMX for the int8 path (linear/int8_amx.h, pyagent/linear_int8.h): used only where proven usable.
 *
 * A CPU flag is not a promise (on some VMs AMX is advertised and its instructions still raise
 * SIGILL), so the first product of many rows decides once per process, step by step: the build has
 * the AMX code (GCC 11 or later on x86-64), CPUID advertises AMX-TILE and AMX-INT8, the OS enables
 * the tile state (XCR0 bits 17 and 18), Linux grants this process the tile data permission
 * (arch_prctl ARCH_REQ_XCOMP_PERM), and a forked child loads a tile configuration, multiplies tiles
 * and releases them, then exits normally. The child takes any signal, so a failing instruction never
 * reaches this process. Any failed step means no AMX, with the step in pak_int8_amx_reason.
 *
 * Tests can ask for the tile products emulated in C (PAK_INT8_AMX_EMULATE), which runs the AMX
 * path's unpacking and scaling on CPUs without AMX.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pyagent/common.h"
#include "pyagent/linear_int8.h"
#include "common/variant.h"
#include "linear/int8_amx.h"

#if PAK_X86_VARIANTS && defined(__linux__) && __GNUC__ >= 11
#define AMX_COMPILED 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define AMX_COMPILED 0
#endif

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int amx_usable;
static char amx_reason[160] = "not probed";
static _Atomic int amx_mode = PAK_INT8_AMX_ALLOW;

/* Run `body` in a forked child with core dumps off and the default action for the signals a bad
 * instruction raises (not the parent's handlers, e.g. Python's faulthandler); 1 when it exited with
 * status 0. */
static int in_child(void (*body)(void))
{
    const pid_t pid = fork();
    if (pid < 0)
        return 0;
    if (pid == 0) {
        const struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none);
        struct sigaction plain;
        memset(&plain, 0, sizeof plain);
        plain.sa_handler = SIG_DFL;
        const int faults[] = {SIGILL, SIGSEGV, SIGBUS, SIGFPE};
        for (size_t i = 0; i < sizeof faults / sizeof *faults; ++i)
            sigaction(faults[i], &plain, NULL);
        body();
        _exit(0);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void harmless(void)
{
    __asm__ volatile("" ::: "memory");
}

static void illegal(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("ud2");
#else
    raise(SIGILL);
#endif
}

int pak_int8_probe_child(int which)
{
    if (which != 0 && which != 1)
        return 0;
    return in_child(which == 0 ? harmless : illegal);
}

#if AMX_COMPILED
#define AMX_TARGET __attribute__((target("amx-tile,amx-int8,avx512f")))

/* The tile configuration (palette 1): tile 0 the sums (rows x 16 int32), 1 the activations (rows x
 * depth bytes), 2 the codes (depth / 4 rows x 64 bytes). */
typedef struct __attribute__((aligned(64))) {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

static void configure(tile_config *cfg, int rows, int depth)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->palette = 1;
    cfg->rows[0] = (uint8_t)rows;
    cfg->colsb[0] = 64;
    cfg->rows[1] = (uint8_t)rows;
    cfg->colsb[1] = (uint16_t)depth;
    cfg->rows[2] = (uint8_t)(depth / 4);
    cfg->colsb[2] = 64;
}

static __thread int loaded_rows, loaded_depth; /* this thread's tile configuration, 0: none */

AMX_TARGET static void amx_sums(const int8_t *a, int64_t a_stride, int rows, const int8_t *b, int depth, int32_t *c)
{
    if (rows != loaded_rows || depth != loaded_depth) {
        tile_config cfg;
        configure(&cfg, rows, depth);
        _tile_loadconfig(&cfg);
        loaded_rows = rows;
        loaded_depth = depth;
    }
    _tile_zero(0);
    _tile_loadd(1, a, a_stride);
    _tile_loadd(2, b, 64);
    _tile_dpbssd(0, 1, 2);
    _tile_stored(0, c, 64);
}

AMX_TARGET static void amx_release(void)
{
    _tile_release();
    loaded_rows = loaded_depth = 0;
}

/* What the probe's child runs: every instruction the products use, on zeros. */
AMX_TARGET static void amx_probe_body(void)
{
    _Alignas(64) int8_t a[16 * 64] = {0}, b[16 * 64] = {0};
    _Alignas(64) int32_t c[16 * 16];
    amx_sums(a, 64, 16, b, 32, c);
    amx_release();
}

static void probe(void)
{
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(edx & (1u << 24)) || !(edx & (1u << 25))) {
        snprintf(amx_reason, sizeof amx_reason, "not advertised (CPUID has no AMX-TILE and AMX-INT8)");
        return;
    }
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) {
        snprintf(amx_reason, sizeof amx_reason, "not enabled by the OS (no OSXSAVE)");
        return;
    }
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) {
        snprintf(amx_reason, sizeof amx_reason, "not enabled by the OS (XCR0 lacks the tile state)");
        return;
    }
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        snprintf(amx_reason, sizeof amx_reason, "permission denied: arch_prctl(ARCH_REQ_XCOMP_PERM): %s",
                 strerror(errno));
        return;
    }
    if (!in_child(amx_probe_body)) {
        snprintf(amx_reason, sizeof amx_reason, "probe failed: a child running the tile instructions did not "
                 "exit normally (e.g. SIGILL)");
        return;
    }
    amx_usable = 1;
    snprintf(amx_reason, sizeof amx_reason, "usable");
}
#else
static void probe(void)
{
    snprintf(amx_reason, sizeof amx_reason, "not compiled (needs GCC 11 or later on x86-64 Linux)");
}
#endif

/* The tile products in C, for tests on CPUs without AMX. */
static void emulated_sums(const int8_t *a, int64_t a_stride, int rows, const int8_t *b, int depth, int32_t *c)
{
    for (int m = 0; m < rows; ++m)
        for (int n = 0; n < 16; ++n) {
            int32_t sum = 0;
            for (int k = 0; k < depth; ++k)
                sum += a[m * a_stride + k] * b[(k / 4) * 64 + 4 * n + k % 4];
            c[m * 16 + n] = sum;
        }
}

int pak_int8_amx_usable(void)
{
    pthread_once(&probe_once, probe);
    return amx_usable;
}

const char *pak_int8_amx_reason(void)
{
    pthread_once(&probe_once, probe);
    return amx_reason;
}

int pak_int8_amx_select(int mode)
{
    if (mode != PAK_INT8_AMX_OFF && mode != PAK_INT8_AMX_ALLOW && mode != PAK_INT8_AMX_EMULATE)
        return PAK_EINVAL;
    return atomic_exchange(&amx_mode, mode);
}

i8_tile_sums_fn i8_amx_tiles(void)
{
    const int mode = atomic_load(&amx_mode);
    if (mode == PAK_INT8_AMX_EMULATE)
        return emulated_sums;
#if AMX_COMPILED
    if (mode == PAK_INT8_AMX_ALLOW && pak_int8_amx_usable())
        return amx_sums;
#endif
    return NULL;
}

void i8_amx_release(i8_tile_sums_fn tiles)
{
#if AMX_COMPILED
    if (tiles == amx_sums)
        amx_release();
#else
    (void)tiles;
#endif
}
