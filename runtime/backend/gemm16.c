/* 16-bit GEMMs on the CPU (runtime/backend/gemm16.h). */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "runtime/backend/gemm16.h"
#include "runtime/backend/blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/half.h"
#include "runtime/backend/onednn.h"
#include "support/env.h"
#include "support/util.h"

/* ---- the OpenMP team of the calling thread ---------------------------------------
 * tgc links no OpenMP runtime (runtime/exec.c finds omp_set_num_threads at
 * run time): the one OpenBLAS brings (libgomp) runs the conversions, through
 * the entry point GCC's own `#pragma omp parallel` calls. Without one they
 * run on the calling thread. */

typedef void (*gomp_parallel_fn)(void (*fn)(void *), void *data, unsigned nthreads, unsigned flags);
static gomp_parallel_fn gomp_parallel;
static int (*omp_thread_num)(void), (*omp_num_threads)(void);
static pthread_once_t omp_once = PTHREAD_ONCE_INIT;

static void omp_resolve(void)
{
    char why[512];
    rt_blas_load(why, sizeof why); /* OpenBLAS's OpenMP build brings libgomp */
    *(void **)&gomp_parallel = dlsym(RTLD_DEFAULT, "GOMP_parallel");
    *(void **)&omp_thread_num = dlsym(RTLD_DEFAULT, "omp_get_thread_num");
    *(void **)&omp_num_threads = dlsym(RTLD_DEFAULT, "omp_get_num_threads");
    if (!omp_thread_num || !omp_num_threads) gomp_parallel = NULL;
}

/* rows x cols elements, row r at src + r * lds (elements), to or from dst
 * + r * ldd. */
typedef struct conv_job {
    ir_dtype t;
    bool widen; /* 16-bit -> f32 */
    const void *src;
    void *dst;
    int64_t rows, cols, lds, ldd;
} conv_job;

static void conv_rows(const conv_job *j, int64_t lo, int64_t hi)
{
    for (int64_t r = lo; r < hi; r++) {
        if (j->widen) {
            const uint16_t *x = (const uint16_t *)j->src + r * j->lds;
            float *y = (float *)j->dst + r * j->ldd;
            if (j->t == IR_BF16) rt_bf16_to_f32(x, y, j->cols);
            else rt_f16_to_f32(x, y, j->cols);
        } else {
            const float *x = (const float *)j->src + r * j->lds;
            uint16_t *y = (uint16_t *)j->dst + r * j->ldd;
            if (j->t == IR_BF16) rt_f32_to_bf16(x, y, j->cols);
            else rt_f32_to_f16(x, y, j->cols);
        }
    }
}

static void conv_thunk(void *p)
{
    const conv_job *j = p;
    int64_t t = omp_thread_num(), nt = omp_num_threads();
    conv_rows(j, j->rows * t / nt, j->rows * (t + 1) / nt);
}

static void convert(const conv_job *j)
{
    if (j->rows <= 0 || j->cols <= 0) return;
    if (j->rows > 1 && j->rows * j->cols >= (1 << 15)) {
        pthread_once(&omp_once, omp_resolve);
        if (gomp_parallel) {
            gomp_parallel(conv_thunk, (void *)j, 0, 0);
            return;
        }
    }
    conv_rows(j, 0, j->rows);
}

/* ---- the conversion path ---------------------------------------------------------- */

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The conversion path works on tiles of C, mt rows by nt columns, so that
 * its workspace stays under a cap (a GPT-2 logits GEMM, [4096, 768] x
 * [768, 50304], would need 1 GB converted whole): B's column block
 * (k x nt) is converted once per tile column, A's row block (mt x k) once
 * per tile. Every element of C is still one sgemm dot product over all of
 * k, rounded once. The cap is 16 Mi floats (64 MiB), or
 * $TGC_GEMM16_WORKSPACE floats (tests make it small to exercise tiling). */
#define GEMM16_CAP_FLOATS ((int64_t)1 << 24)

static int64_t cap_floats(void)
{
    int64_t v = env_int("TGC_GEMM16_WORKSPACE");
    return v > 0 ? v : GEMM16_CAP_FLOATS;
}

typedef struct tiles {
    int64_t mt, nt;
} tiles;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static tiles tile_dims(const cg_gemm *g, int64_t cap)
{
    tiles t = {g->m, g->n};
    if (g->m * g->k + g->k * g->n + g->m * g->n <= cap) return t;
    int64_t k = g->k > 0 ? g->k : 1;
    t.nt = min64(g->n, max64(16, cap / 2 / k));           /* B's block: about half the cap */
    t.mt = min64(g->m, max64(16, (cap - k * t.nt) / (k + t.nt))); /* A's block and C's tile: the rest */
    return t;
}

/* fp32 elements the conversion path needs for g: its tiles' A, B and C. */
static int64_t convert_floats(const cg_gemm *g, int64_t cap)
{
    tiles t = tile_dims(g, cap);
    return t.mt * g->k + g->k * t.nt + t.mt * t.nt;
}

static void gemm_convert(float *ws, int64_t cap, const cg_gemm *g, const void *a, const void *b, void *c)
{
    if (g->m <= 0 || g->n <= 0) return;
    tiles t = tile_dims(g, cap);
    enum CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans, tb = g->tb ? CblasTrans : CblasNoTrans;
    float *fa = ws, *fb = fa + t.mt * g->k, *fc = fb + g->k * t.nt;
    for (int64_t i = 0; i < g->batch; i++) {
        const uint16_t *A = (const uint16_t *)a + i * g->stride_a, *B = (const uint16_t *)b + i * g->stride_b;
        uint16_t *C = (uint16_t *)c + i * g->stride_c;
        for (int64_t c0 = 0; c0 < g->n; c0 += t.nt) {
            int64_t nt = min64(t.nt, g->n - c0);
            /* op(B)[:, c0 .. c0+nt): B stored [n, k] (tb) has it as rows, [k, n] as columns. */
            int64_t br = g->tb ? nt : g->k, bc = g->tb ? g->k : nt;
            const uint16_t *Bt = g->tb ? B + c0 * g->ldb : B + c0;
            convert(&(conv_job){g->dtype, true, Bt, fb, br, bc, g->ldb, bc});
            for (int64_t r0 = 0; r0 < g->m; r0 += t.mt) {
                int64_t mt = min64(t.mt, g->m - r0);
                /* op(A)[r0 .. r0+mt, :]: A stored [k, m] (ta) has it as columns. */
                int64_t ar = g->ta ? g->k : mt, ac = g->ta ? mt : g->k;
                const uint16_t *At = g->ta ? A + r0 : A + r0 * g->lda;
                uint16_t *Ct = C + r0 * g->ldc + c0;
                convert(&(conv_job){g->dtype, true, At, fa, ar, ac, g->lda, ac});
                if (g->beta != 0.0) convert(&(conv_job){g->dtype, true, Ct, fc, mt, nt, g->ldc, nt});
                rt_sgemm(CblasRowMajor, ta, tb, (int)mt, (int)nt, (int)g->k, (float)g->alpha, fa,
                            (int)max64(ac, 1), fb, (int)max64(bc, 1), (float)g->beta, fc, (int)nt);
                convert(&(conv_job){g->dtype, false, fc, Ct, mt, nt, nt, g->ldc});
            }
        }
    }
}

/* Callers outside a plan: one workspace for the process, grown on demand. */
static struct {
    pthread_mutex_t mu;
    float *p;
    int64_t n;
} shared_ws = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* ---- the path ----------------------------------------------------------------- */

const char *rt_gemm16_path_name(rt_gemm16_path p) { return p == RT_GEMM16_ONEDNN ? "onednn" : "convert"; }

/* oneDNN offers a t matmul here: the CPU has the instructions, libdnnl
 * opens, and it makes a primitive (oneDNN 2.6 has none for f16 on an
 * AVX512_FP16 CPU: "unimplemented"), probed once per type on a small GEMM. */
bool rt_gemm16_onednn_offers(ir_dtype t, char *why, size_t cap)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static int known[2] = {-1, -1};
    static char reason[2][512];
    int i = t == IR_F16;
    pthread_mutex_lock(&lock);
    if (known[i] < 0) {
        bool isa = t == IR_BF16 ? rt_cpu_has_avx512_bf16() : rt_cpu_has_avx512_fp16();
        char lib[256];
        if (!isa) {
            snprintf(reason[i], sizeof reason[i], "this CPU, %s, lacks %s, which oneDNN's %s matmul needs",
                     rt_cpu_describe(), t == IR_BF16 ? "AVX512_BF16" : "AVX512_FP16", ir_dtype_name(t));
            known[i] = 0;
        } else if (!rt_onednn_available(lib, sizeof lib)) {
            snprintf(reason[i], sizeof reason[i], "%s", lib);
            known[i] = 0;
        } else {
            cg_gemm g = {.dtype = t, .m = 16, .n = 16, .k = 16, .lda = 16, .ldb = 16, .ldc = 16, .batch = 1,
                         .alpha = 1.0, .stride_a = 256, .stride_b = 256, .stride_c = 256};
            char w[400];
            rt_onednn_gemm *probe = rt_onednn_gemm_new(&g, w, sizeof w);
            known[i] = probe != NULL;
            if (!probe)
                snprintf(reason[i], sizeof reason[i], "oneDNN %s makes no %s matmul on this CPU (%s): %s",
                         rt_onednn_version(), ir_dtype_name(t), rt_cpu_describe(), w);
            rt_onednn_gemm_free(probe);
        }
    }
    int ok = known[i];
    if (!ok) snprintf(why, cap, "%s", reason[i]);
    pthread_mutex_unlock(&lock);
    return ok;
}

bool rt_gemm16_choose(ir_dtype t, rt_gemm16_path *path, char *why, size_t cap)
{
    const char *var = t == IR_BF16 ? "TGC_CPU_BF16_GEMM" : "TGC_CPU_F16_GEMM", *env = env_text(var);
    char no[512];
    if (!env || !*env || strcmp(env, "auto") == 0) {
        *path = rt_gemm16_onednn_offers(t, no, sizeof no) ? RT_GEMM16_ONEDNN : RT_GEMM16_CONVERT;
        return true;
    }
    if (strcmp(env, "convert") == 0) {
        *path = RT_GEMM16_CONVERT;
        return true;
    }
    if (strcmp(env, "onednn") == 0) {
        if (!rt_gemm16_onednn_offers(t, no, sizeof no)) {
            snprintf(why, cap, "%s=onednn: %s; unset %s or set it to convert", var, no, var);
            return false;
        }
        *path = RT_GEMM16_ONEDNN;
        return true;
    }
    snprintf(why, cap, "%s='%s': expected onednn, convert or auto", var, env);
    return false;
}

/* ---- a plan's GEMMs -------------------------------------------------------------- */

struct rt_gemm16 {
    float *ws;
    int64_t ws_floats, cap; /* cap: the tiling's, when the plan was made */
    int n;                   /* instructions */
    unsigned char *path;     /* per instruction */
    rt_onednn_gemm **prim;   /* per instruction: the oneDNN primitive, or NULL */
};

/* The path of t was forced to onednn: a primitive it cannot make is an error. */
static bool forced(ir_dtype t)
{
    const char *env = env_text(t == IR_BF16 ? "TGC_CPU_BF16_GEMM" : "TGC_CPU_F16_GEMM");
    return env && strcmp(env, "onednn") == 0;
}

static bool is16(ir_dtype t) { return t == IR_BF16 || t == IR_F16; }

bool rt_gemm16_new(const cg_program *p, rt_gemm16 **out, diag *d)
{
    *out = NULL;
    bool used[2] = {false, false}; /* bf16, f16 */
    for (int i = 0; i < p->ninstrs; i++)
        if (p->instrs[i].kind == CG_GEMM && is16(p->instrs[i].gemm.dtype)) used[p->instrs[i].gemm.dtype == IR_F16] = true;
    if (!used[0] && !used[1]) return true;
    rt_gemm16_path want[2] = {RT_GEMM16_CONVERT, RT_GEMM16_CONVERT};
    const ir_dtype types[2] = {IR_BF16, IR_F16};
    for (int t = 0; t < 2; t++) { /* only the types the plan has: an f16 plan ignores TGC_CPU_BF16_GEMM */
        char why[512];
        if (used[t] && !rt_gemm16_choose(types[t], &want[t], why, sizeof why)) {
            diag_error_plain(d, "%s", why);
            return false;
        }
    }
    rt_gemm16 *s = xcalloc(1, sizeof *s);
    s->n = p->ninstrs;
    s->cap = cap_floats();
    s->path = xcalloc((size_t)p->ninstrs, 1);
    s->prim = xcalloc((size_t)p->ninstrs, sizeof *s->prim);
    bool ok = true;
    for (int i = 0; ok && i < p->ninstrs; i++) {
        const cg_gemm *g = &p->instrs[i].gemm;
        if (p->instrs[i].kind != CG_GEMM || !is16(g->dtype)) continue;
        rt_gemm16_path path = want[g->dtype == IR_F16];
        if (path == RT_GEMM16_ONEDNN) {
            char why[512];
            s->prim[i] = rt_onednn_gemm_new(g, why, sizeof why);
            if (!s->prim[i] && !forced(g->dtype)) {
                path = RT_GEMM16_CONVERT; /* auto: a shape oneDNN has no matmul for converts */
            } else if (!s->prim[i]) {
                diag_error_plain(d, "oneDNN refused the %s GEMM [%lld x %lld] x [%lld x %lld] (batch %lld): %s",
                                 ir_dtype_name(g->dtype), (long long)g->m, (long long)g->k, (long long)g->k,
                                 (long long)g->n, (long long)g->batch, why);
                ok = false;
            }
        }
        if (path == RT_GEMM16_CONVERT) s->ws_floats = max64(s->ws_floats, convert_floats(g, s->cap));
        s->path[i] = (unsigned char)path;
    }
    if (ok && s->ws_floats > 0) {
        s->ws = aligned_alloc(64, ((size_t)s->ws_floats * sizeof(float) + 63) & ~(size_t)63);
        if (!s->ws) {
            diag_error_plain(d, "out of memory allocating the 16-bit GEMMs' fp32 workspace (%lld bytes)",
                             (long long)s->ws_floats * 4);
            ok = false;
        }
    }
    if (!ok) {
        rt_gemm16_free(s);
        return false;
    }
    *out = s;
    return true;
}

void rt_gemm16_free(rt_gemm16 *s)
{
    if (!s) return;
    for (int i = 0; i < s->n; i++) rt_onednn_gemm_free(s->prim[i]);
    free(s->prim);
    free(s->path);
    free(s->ws);
    free(s);
}

rt_gemm16_path rt_gemm16_path_of(const rt_gemm16 *s, int i) { return (rt_gemm16_path)s->path[i]; }

int64_t rt_gemm16_workspace_bytes(const rt_gemm16 *s) { return s ? s->ws_floats * 4 : 0; }

bool rt_gemm16_run(rt_gemm16 *s, int i, const cg_gemm *g, const void *a, const void *b, void *c, char *why,
                   size_t cap)
{
    TGC_ASSERT(is16(g->dtype));
    if (s) {
        TGC_ASSERT(i >= 0 && i < s->n);
        if (s->prim[i]) return rt_onednn_gemm_run(s->prim[i], g, a, b, c, why, cap);
        TGC_ASSERT(convert_floats(g, s->cap) <= s->ws_floats);
        gemm_convert(s->ws, s->cap, g, a, b, c);
        return true;
    }
    int64_t wcap = cap_floats(), need = convert_floats(g, wcap);
    pthread_mutex_lock(&shared_ws.mu);
    if (need > shared_ws.n) {
        free(shared_ws.p);
        shared_ws.p = xmalloc((size_t)need * sizeof(float));
        shared_ws.n = need;
    }
    gemm_convert(shared_ws.p, wcap, g, a, b, c);
    pthread_mutex_unlock(&shared_ws.mu);
    return true;
}
