/* The BLAS behind the CPU GEMMs: OpenBLAS's OpenMP build (one thread pool
 * with the generated kernels), opened with dlopen at the first use, with
 * its kernels chosen for this CPU.
 *
 * OpenBLAS picks its kernels once, when it is loaded, from
 * OPENBLAS_CORETYPE or its own table of CPU models; for a model missing
 * from that table it falls back to Prescott's SSE3 kernels, 4 to 6 times
 * slower on an AVX-512 CPU (runtime/backend/half.c, rt_cpu_openblas_core).
 * A process cannot set that variable for a library it is linked with (its
 * constructor runs before main, and libc resets the environment after a
 * preinit function), so tgc links no BLAS: rt_blas_load sets
 * OPENBLAS_CORETYPE from cpuid, unless the environment has it, and then
 * opens OpenBLAS. Where the process had OpenBLAS already (a program that
 * links it), that one is used, and a Prescott fallback on a CPU with AVX2
 * is warned about. */
#ifndef TGC_RT_BLAS_H
#define TGC_RT_BLAS_H
#include <stdbool.h>
#include <stddef.h>

#include <cblas.h>

/* Opens OpenBLAS once per process (later calls return the first answer);
 * false, with the reason in why: no OpenBLAS to open. */
bool rt_blas_load(char *why, size_t n);

/* cblas_sgemm and cblas_dgemm of the loaded OpenBLAS (loaded here if it is
 * not; a process that cannot load it stops with the reason: every entry
 * point that runs GEMMs calls rt_blas_load first and reports it). */
void rt_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k,
              float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
void rt_dgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k,
              double alpha, const double *a, int lda, const double *b, int ldb, double beta, double *c, int ldc);

/* The loaded OpenBLAS is its pthreads build (openblas_get_parallel() == 1):
 * tgc is built against the OpenMP build, whose threads are the kernels' own
 * team; the pthreads build (the same soname, e.g. Ubuntu 24.04's
 * libopenblas0-pthread) makes two pools, and OpenMP kernels beside it were
 * seen to crash, so the kernels then run on one thread (warned once, at
 * the load). */
bool rt_blas_is_pthreads(void);

/* One line: OpenBLAS's build, its threads, the core it runs and why, e.g.
 * "OpenBLAS 0.3.21 ... MAX_THREADS=64, OpenMP threads; core Cooperlake
 *  (OPENBLAS_CORETYPE=Cooperlake, tgc's choice for this CPU)". */
const char *rt_blas_describe(void);

#endif
