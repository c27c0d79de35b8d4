/* OpenBLAS, opened with its kernels chosen for this CPU
 * (runtime/backend/blas.h). */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "runtime/backend/blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/half.h"

typedef void (*sgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint, blasint,
                         float, const float *, blasint, const float *, blasint, float, float *, blasint);
typedef void (*dgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint, blasint,
                         double, const double *, blasint, const double *, blasint, double, double *, blasint);

static struct {
    sgemm_fn sgemm;
    dgemm_fn dgemm;
    const char *(*config)(void), *(*corename)(void);
    int (*parallel)(void);
    bool preloaded;    /* the process had OpenBLAS before tgc opened it */
    char env_was[64];  /* OPENBLAS_CORETYPE as tgc found it ("" unset) */
    char error[512];
} blas;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

/* The library file CMake found (the OpenMP build), then the soname. */
static const char *const candidates[] = {
#ifdef TGC_OPENBLAS_LIB
    TGC_OPENBLAS_LIB,
#endif
    "libopenblas.so.0", "libopenblas.so"};

static void load(void)
{
    const char *env = getenv("OPENBLAS_CORETYPE"), *core = rt_cpu_openblas_core();
    snprintf(blas.env_was, sizeof blas.env_was, "%s", env ? env : "");
    blas.preloaded = dlsym(RTLD_DEFAULT, "openblas_get_corename") != NULL;
    if (!env && core && !blas.preloaded) setenv("OPENBLAS_CORETYPE", core, 0);
    void *h = NULL;
    char tried[400] = "";
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates && !h; i++) {
        h = dlopen(candidates[i], RTLD_NOW | RTLD_GLOBAL);
        if (!h) {
            size_t u = strlen(tried);
            snprintf(tried + u, sizeof tried - u, "%s%s", u ? "; " : "", dlerror());
        }
    }
    if (!h) {
        snprintf(blas.error, sizeof blas.error,
                 "cannot open OpenBLAS, which the CPU GEMMs need (Debian: libopenblas0-openmp): %s", tried);
        return;
    }
    *(void **)&blas.sgemm = dlsym(h, "cblas_sgemm");
    *(void **)&blas.dgemm = dlsym(h, "cblas_dgemm");
    *(void **)&blas.config = dlsym(h, "openblas_get_config");
    *(void **)&blas.corename = dlsym(h, "openblas_get_corename");
    *(void **)&blas.parallel = dlsym(h, "openblas_get_parallel");
    if (!blas.sgemm || !blas.dgemm) {
        blas.sgemm = NULL;
        snprintf(blas.error, sizeof blas.error, "the BLAS opened has no cblas_sgemm / cblas_dgemm");
        return;
    }
    if (blas.parallel && blas.parallel() == 1)
        fprintf(stderr, "tgc: warning: the loaded OpenBLAS is its pthreads build; tgc needs the OpenMP build "
                        "(Debian: libopenblas0-openmp): generated kernels run on one thread\n");
    const char *now = blas.corename ? blas.corename() : NULL;
    if (now && !strcmp(now, "Prescott") && rt_cpu_has_avx2())
        fprintf(stderr,
                "tgc: warning: OpenBLAS runs its Prescott (SSE3) kernels on %s, several times slower than the "
                "CPU allows (%s): set OPENBLAS_CORETYPE=%s before the process loads OpenBLAS\n",
                rt_cpu_describe(), blas.preloaded ? "the process loaded OpenBLAS before tgc" : "OPENBLAS_CORETYPE",
                core ? core : "Haswell");
}

bool rt_blas_load(char *why, size_t n)
{
    pthread_once(&load_once, load);
    if (blas.sgemm) return true;
    snprintf(why, n, "%s", blas.error);
    return false;
}

bool rt_blas_is_pthreads(void)
{
    pthread_once(&load_once, load);
    return blas.sgemm && blas.parallel && blas.parallel() == 1;
}

static void need(void)
{
    char why[512];
    if (rt_blas_load(why, sizeof why)) return;
    fprintf(stderr, "tgc: error: %s\n", why);
    abort();
}

void rt_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k,
              float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    if (!blas.sgemm) need();
    blas.sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void rt_dgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k,
              double alpha, const double *a, int lda, const double *b, int ldb, double beta, double *c, int ldc)
{
    if (!blas.dgemm) need();
    blas.dgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static char line[640];
static pthread_once_t line_once = PTHREAD_ONCE_INIT;

static void describe(void)
{
    char why[512];
    if (!rt_blas_load(why, sizeof why)) {
        snprintf(line, sizeof line, "none (%s)", why);
        return;
    }
    if (!blas.config || !blas.corename) {
        snprintf(line, sizeof line, "a CBLAS that is not OpenBLAS (no openblas_get_config)");
        return;
    }
    int p = blas.parallel ? blas.parallel() : -1;
    const char *threads = p == 2 ? "OpenMP threads" : p == 1 ? "pthreads threads" : p == 0 ? "sequential" : "threads unknown";
    const char *mine = rt_cpu_openblas_core();
    char src[200];
    if (blas.preloaded)
        snprintf(src, sizeof src, "loaded by the process before tgc%s%s", mine ? "; tgc's choice: " : "", mine ? mine : "");
    else if (blas.env_was[0])
        snprintf(src, sizeof src, "OPENBLAS_CORETYPE=%s from the environment%s%s", blas.env_was,
                 mine ? "; tgc's choice: " : "", mine ? mine : "");
    else if (mine)
        snprintf(src, sizeof src, "OPENBLAS_CORETYPE=%s, tgc's choice for this CPU", mine);
    else
        snprintf(src, sizeof src, "OpenBLAS's own choice");
    snprintf(line, sizeof line, "%s, %s; core %s (%s)", blas.config(), threads, blas.corename(), src);
}

const char *rt_blas_describe(void)
{
    pthread_once(&line_once, describe);
    return line;
}
