/* Counts OpenMP parallel regions (fork-joins) by where they were opened:
 * an LD_PRELOAD library that wraps libgomp's entry points for
 * `#pragma omp parallel` (with and without a combined loop) and, at exit,
 * prints on standard error
 *   forkjoin: total N kernels K openblas B other O threads T
 * where `kernels` are regions opened by tgc's generated kernels (a shared
 * object the runtime dlopens), `openblas` by the BLAS, `other` by the
 * rest (tgc itself), and T the process's threads at exit (a process that
 * opened no region prints nothing). bench/train_bench.py runs a step count of 1 and of 2
 * under it: the difference is one step's fork-joins.
 *
 * usage: LD_PRELOAD=build/libtgc_forkjoin_count.so build/tgc run ...
 * (A measuring tool for benchmarks, never linked into tgc.) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WHO_KERNELS, WHO_OPENBLAS, WHO_OTHER, WHO_COUNT };
static atomic_long counts[WHO_COUNT];

/* Call sites seen, with their library's class (a few hundred in a plan). */
#define SITES 4096
static struct {
    void *pc;
    int who;
} sites[SITES];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static int classify(void *pc)
{
    Dl_info info;
    if (!dladdr(pc, &info) || !info.dli_fname) return WHO_OTHER;
    const char *base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    if (strstr(base, "openblas")) return WHO_OPENBLAS;
    /* The kernels: k<hash>.so, in the cache or in the private directory it was just compiled in (runtime/backend/cpu.c). */
    if (base[0] == 'k' && strstr(base, ".so")) return WHO_KERNELS;
    return WHO_OTHER;
}

static void count(void *pc)
{
    uintptr_t h = ((uintptr_t)pc >> 4) % SITES;
    int who = WHO_OTHER;
    pthread_mutex_lock(&lock);
    for (int probe = 0; probe < SITES; probe++, h = (h + 1) % SITES) {
        if (sites[h].pc == pc) {
            who = sites[h].who;
            break;
        }
        if (!sites[h].pc) {
            sites[h].pc = pc;
            who = sites[h].who = classify(pc);
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    atomic_fetch_add(&counts[who], 1);
}

static void *next(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "forkjoin: no %s in the OpenMP runtime\n", name);
        _Exit(70);
    }
    return f;
}

typedef void (*region_fn)(void *);

void GOMP_parallel(region_fn fn, void *data, unsigned nthreads, unsigned flags)
{
    static void (*real)(region_fn, void *, unsigned, unsigned);
    if (!real) real = next("GOMP_parallel");
    count(__builtin_return_address(0));
    real(fn, data, nthreads, flags);
}

/* The combined `parallel for` entry points: with a chunk size, and without (runtime schedules). */
#define LOOP_CHUNK(NAME)                                                                                        \
    void NAME(region_fn fn, void *data, unsigned nthreads, long start, long end, long incr, long chunk,        \
              unsigned flags)                                                                                  \
    {                                                                                                          \
        static void (*real)(region_fn, void *, unsigned, long, long, long, long, unsigned);                   \
        if (!real) real = next(#NAME);                                                                         \
        count(__builtin_return_address(0));                                                                    \
        real(fn, data, nthreads, start, end, incr, chunk, flags);                                              \
    }
#define LOOP_RUNTIME(NAME)                                                                                      \
    void NAME(region_fn fn, void *data, unsigned nthreads, long start, long end, long incr, unsigned flags)    \
    {                                                                                                          \
        static void (*real)(region_fn, void *, unsigned, long, long, long, unsigned);                         \
        if (!real) real = next(#NAME);                                                                         \
        count(__builtin_return_address(0));                                                                    \
        real(fn, data, nthreads, start, end, incr, flags);                                                     \
    }
LOOP_CHUNK(GOMP_parallel_loop_static)
LOOP_CHUNK(GOMP_parallel_loop_dynamic)
LOOP_CHUNK(GOMP_parallel_loop_guided)
LOOP_CHUNK(GOMP_parallel_loop_nonmonotonic_dynamic)
LOOP_CHUNK(GOMP_parallel_loop_nonmonotonic_guided)
LOOP_RUNTIME(GOMP_parallel_loop_runtime)
LOOP_RUNTIME(GOMP_parallel_loop_nonmonotonic_runtime)
LOOP_RUNTIME(GOMP_parallel_loop_maybe_nonmonotonic_runtime)

/* The process's threads now (/proc/self/status): at exit, the OpenMP
 * pool's workers are still there, so with one pool for the kernels and the
 * BLAS this is OMP_NUM_THREADS (plus any thread tgc keeps, none in a
 * serial run); a BLAS with a pool of its own would add its threads. */
static long threads_now(void)
{
    char line[256];
    long n = -1;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "Threads:", 8) == 0) n = atol(line + 8);
    if (f) fclose(f);
    return n;
}

__attribute__((destructor)) static void report(void)
{
    long k = atomic_load(&counts[WHO_KERNELS]), b = atomic_load(&counts[WHO_OPENBLAS]),
         o = atomic_load(&counts[WHO_OTHER]);
    if (k + b + o == 0) return; /* a child without OpenMP (the C compiler) */
    fprintf(stderr, "forkjoin: total %ld kernels %ld openblas %ld other %ld threads %ld\n", k + b + o, k, b, o,
            threads_now());
}
