/* What the C benchmarks in bench/ share: a monotonic clock, the machine
 * line (CPU model, cores, OpenMP threads, ISA) and the empty OpenMP
 * parallel region whose cost is one fork-join. Header-only: each
 * benchmark is one program. */
#ifndef TGC_BENCH_COMMON_H
#define TGC_BENCH_COMMON_H
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static inline double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "machine: MODEL, N cores online, T OpenMP threads, ISA: ..." */
static inline void bench_machine(void)
{
    char model[256] = "unknown", line[4096];
    bool avx2 = false, avx512f = false, avx512bf16 = false;
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) snprintf(model, sizeof model, "%s", c + 2);
            model[strcspn(model, "\n")] = 0;
        } else if (strncmp(line, "flags", 5) == 0) {
            avx2 = strstr(line, " avx2") != NULL;
            avx512f = strstr(line, " avx512f") != NULL;
            avx512bf16 = strstr(line, " avx512_bf16") != NULL;
        }
    }
    if (f) fclose(f);
    printf("machine: %s, %d cores online, %d OpenMP threads, ISA: %s\n", model, omp_get_num_procs(),
           omp_get_max_threads(), avx512bf16 ? "AVX-512 + BF16" : avx512f ? "AVX-512" : avx2 ? "AVX2" : "SSE");
}

/* STREAM's copy and triad, on the OpenMP threads (static schedule: each
 * thread the block it first touched). */
static inline void bench_copy(float *restrict a, const float *restrict b, int64_t n)
{
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) a[i] = b[i];
}

static inline void bench_triad(float *restrict a, const float *restrict b, const float *restrict c, float s, int64_t n)
{
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}

static volatile int bench_sink;

/* n empty parallel regions (each a fork and a join of the team). */
static inline void bench_empty_regions(int n)
{
    for (int j = 0; j < n; j++) {
#pragma omp parallel
        {
            if (omp_get_thread_num() == 0) bench_sink++;
        }
    }
}

/* Best time of stmt over reps runs after a warm-up (a GNU statement expression). */
#define BENCH_BEST(reps, stmt)                                                                                 \
    ({                                                                                                         \
        stmt;                                                                                                  \
        double best_ = 1e30;                                                                                   \
        for (int r_ = 0; r_ < (reps); r_++) {                                                                  \
            double t0_ = bench_now_s();                                                                        \
            stmt;                                                                                              \
            double dt_ = bench_now_s() - t0_;                                                                  \
            if (dt_ < best_) best_ = dt_;                                                                      \
        }                                                                                                      \
        best_;                                                                                                 \
    })

#endif
