/* The memory's bandwidth and the cost of a fork-join, with the OpenMP
 * threads tgc's kernels get (OMP_NUM_THREADS): what bench/train_bench.py
 * divides a step's non-GEMM bytes by (docs/performance.md, "What limits
 * each configuration").
 *
 * usage: build/bench_stream [--mib N] [--reps R]
 * Prints the machine line, then
 *   copy: G GB/s        a[i] = b[i] over 2 arrays of N MiB (STREAM's counting:
 *                       each array read or written once, 8 bytes per element)
 *   triad: G GB/s       a[i] = b[i] + s c[i] (12 bytes per element)
 *   fork-join: U us     one empty `#pragma omp parallel` region
 * each the best of R repetitions. */
#include <stdint.h>
#include <stdlib.h>

#include "bench/bench_common.h"

/* Pages touched by the threads that will use them (first touch), each
 * element a defined value. */
static void fill(float *restrict a, float v, int64_t n)
{
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) a[i] = v;
}

int main(int argc, char **argv)
{
    long mib = 256, reps = 10;
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        long *v = strcmp(argv[i], "--mib") == 0 ? &mib : strcmp(argv[i], "--reps") == 0 ? &reps : NULL;
        if (v && i + 1 < argc) {
            *v = strtol(argv[++i], &end, 10);
            if (*end == 0 && *v >= 1 && *v <= 65536) continue;
            fprintf(stderr, "bench_stream: %s '%s': a whole number from 1 to 65536\n", argv[i - 1], argv[i]);
            return 2;
        }
        fprintf(stderr, "usage: %s [--mib N] [--reps R]\n", argv[0]);
        return 2;
    }
    bench_machine();
    int64_t n = (int64_t)mib << 18; /* floats per array */
    float *a = aligned_alloc(64, (size_t)n * 4), *b = aligned_alloc(64, (size_t)n * 4);
    float *c = aligned_alloc(64, (size_t)n * 4);
    if (!a || !b || !c) {
        fprintf(stderr, "bench_stream: out of memory for 3 arrays of %ld MiB\n", mib);
        return 1;
    }
    fill(a, 0.0f, n), fill(b, 1.0f, n), fill(c, 2.0f, n);
    double tc = BENCH_BEST((int)reps, bench_copy(a, b, n));
    double tt = BENCH_BEST((int)reps, bench_triad(a, b, c, 3.0f, n));
    double tf = BENCH_BEST((int)reps, bench_empty_regions(1000)) / 1000.0;
    printf("copy: %.2f GB/s (a = b, 2 arrays of %ld MiB, %d threads)\n", 8.0 * (double)n / tc * 1e-9, mib,
           omp_get_max_threads());
    printf("triad: %.2f GB/s (a = b + s c, 3 arrays of %ld MiB)\n", 12.0 * (double)n / tt * 1e-9, mib);
    printf("fork-join: %.3f us (an empty parallel region, %d threads)\n", tf * 1e6, omp_get_max_threads());
    printf("check: %g\n", (double)a[n - 1]); /* 1 + 3 * 2: the loops ran */
    free(a), free(b), free(c);
    return 0;
}
