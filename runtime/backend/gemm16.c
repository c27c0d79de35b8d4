/* 16-bit GEMMs on the CPU (runtime/backend/gemm16.h). */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "runtime/backend/gemm16.h"

#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define GEMM16_X86 1
#endif

#include "runtime/backend/onednn.h"
#include "support/util.h"

/* ---- the CPU ------------------------------------------------------------------ */

typedef struct cpu_features {
    bool avx2, f16c, avx512f, avx512bw, avx512_bf16, avx512_fp16;
    char model[64];
    char line[256];
} cpu_features;

#ifdef GEMM16_X86
static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

static cpu_features cpu;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void cpu_detect(void)
{
#ifdef GEMM16_X86
    unsigned a, b, c, d, max = __get_cpuid_max(0, NULL);
    bool os_avx = false, os_avx512 = false;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        bool osxsave = c & (1u << 27), avx = c & (1u << 28);
        cpu.f16c = c & (1u << 29);
        if (osxsave && avx) {
            uint64_t xcr0 = xgetbv0();
            os_avx = (xcr0 & 0x6) == 0x6;              /* XMM and YMM state */
            os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM0-15 high, ZMM16-31 */
        }
        cpu.f16c = cpu.f16c && os_avx;
    }
    if (max >= 7 && __get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        cpu.avx2 = os_avx && (b & (1u << 5));
        cpu.avx512f = os_avx512 && (b & (1u << 16));
        cpu.avx512bw = cpu.avx512f && (b & (1u << 30));
        cpu.avx512_fp16 = cpu.avx512bw && (d & (1u << 23));
        unsigned sub = a;
        if (sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) cpu.avx512_bf16 = cpu.avx512bw && (a & (1u << 5));
    }
    unsigned brand[12] = {0};
    if (__get_cpuid_max(0x80000000u, NULL) >= 0x80000004u) {
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002u + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2], &brand[4 * i + 3]);
    }
    char raw[49];
    memcpy(raw, brand, 48);
    raw[48] = 0;
    const char *m = raw + strspn(raw, " ");
    snprintf(cpu.model, sizeof cpu.model, "%s", *m ? m : "unknown x86-64 CPU");
    for (size_t n = strlen(cpu.model); n > 0 && cpu.model[n - 1] == ' '; n--) cpu.model[n - 1] = 0;
#else
    snprintf(cpu.model, sizeof cpu.model, "a non-x86 CPU");
#endif
    snprintf(cpu.line, sizeof cpu.line, "%s (%savx2 %sf16c %savx512f %savx512_bf16 %savx512_fp16)", cpu.model,
             cpu.avx2 ? "" : "no ", cpu.f16c ? "" : "no ", cpu.avx512f ? "" : "no ", cpu.avx512_bf16 ? "" : "no ",
             cpu.avx512_fp16 ? "" : "no ");
}

static const cpu_features *features(void)
{
    pthread_once(&cpu_once, cpu_detect);
    return &cpu;
}

bool rt_cpu_has_avx512_bf16(void) { return features()->avx512_bf16; }
bool rt_cpu_has_avx512_fp16(void) { return features()->avx512_fp16; }
const char *rt_cpu_describe(void) { return features()->line; }

/* ---- conversions ------------------------------------------------------------- */

/* Scalar forms: the reference the vector forms agree with bit for bit, and
 * the tails. */
static inline float bf16_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* a quiet NaN, sign kept */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float f16_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0) {
        float f = (float)m * 0x1p-24f; /* zero or subnormal, exact */
        memcpy(&u, &f, 4);
        u |= sign;
    } else if (e == 31) {
        u = sign | 0x7f800000u | (m << 13);
    } else {
        u = sign | ((e + 112u) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* What F16C's vcvtps2ph does under round-to-nearest-even. */
static inline uint16_t f32_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x3ffu)); /* quiet NaN */
    if (u >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to infinity */
    if (u < 0x38800000u) { /* below 2^-14: a subnormal; the FPU rounds |f| + 0.5 at 2^-24 */
        float a, t;
        memcpy(&a, &u, 4);
        t = a + 0.5f;
        uint32_t v;
        memcpy(&v, &t, 4);
        return (uint16_t)(sign | (v - 0x3f000000u));
    }
    u += 0xc8000fffu + ((u >> 13) & 1u); /* exponent rebias (-112 << 23) and the rounding */
    return (uint16_t)(sign | (u >> 13));
}

static void bf16_f32_scalar(const uint16_t *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = bf16_f32(x[i]);
}
static void f32_bf16_scalar(const float *x, uint16_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = f32_bf16(x[i]);
}
static void f16_f32_scalar(const uint16_t *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = f16_f32(x[i]);
}
static void f32_f16_scalar(const float *x, uint16_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = f32_f16(x[i]);
}

#ifdef GEMM16_X86
__attribute__((target("avx2"))) static void bf16_f32_avx2(const uint16_t *x, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
    bf16_f32_scalar(x + i, y + i, n - i);
}

__attribute__((target("avx2"))) static inline __m256i rne_bf16_avx2(__m256 v)
{
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    return _mm256_blendv_epi8(r, q, _mm256_castps_si256(nan));
}

__attribute__((target("avx2"))) static void f32_bf16_avx2(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i lo = rne_bf16_avx2(_mm256_loadu_ps(x + i)), hi = rne_bf16_avx2(_mm256_loadu_ps(x + i + 8));
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
        _mm256_storeu_si256((__m256i *)(y + i), p);
    }
    f32_bf16_scalar(x + i, y + i, n - i);
}

__attribute__((target("avx512f"))) static void bf16_f32_avx512(const uint16_t *x, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(x + i)));
        _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
    }
    bf16_f32_scalar(x + i, y + i, n - i);
}

/* Integer rounding, not vcvtneps2bf16 (which flushes subnormal inputs to
 * zero): every machine rounds the same. */
__attribute__((target("avx512f"))) static void f32_bf16_avx512(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512i u = _mm512_castps_si512(v);
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
        __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
        __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        _mm256_storeu_si256((__m256i *)(y + i), _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, nan, q)));
    }
    f32_bf16_scalar(x + i, y + i, n - i);
}

__attribute__((target("avx,f16c"))) static void f16_f32_f16c(const uint16_t *x, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    f16_f32_scalar(x + i, y + i, n - i);
}

__attribute__((target("avx,f16c"))) static void f32_f16_f16c(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    f32_f16_scalar(x + i, y + i, n - i);
}
#endif

/* Whether the vector forms may run: tests turn them off (TGC_GEMM16_SCALAR=1)
 * to compare the two bit for bit. */
static bool vector_ok(void)
{
    static int v = -1;
    if (v < 0) {
        const char *s = getenv("TGC_GEMM16_SCALAR");
        v = !(s && strcmp(s, "0") != 0);
    }
    return v;
}

void rt_bf16_to_f32(const uint16_t *x, float *y, int64_t n)
{
#ifdef GEMM16_X86
    const cpu_features *f = features();
    if (vector_ok() && f->avx512f) { bf16_f32_avx512(x, y, n); return; }
    if (vector_ok() && f->avx2) { bf16_f32_avx2(x, y, n); return; }
#endif
    bf16_f32_scalar(x, y, n);
}

void rt_f32_to_bf16(const float *x, uint16_t *y, int64_t n)
{
#ifdef GEMM16_X86
    const cpu_features *f = features();
    if (vector_ok() && f->avx512f) { f32_bf16_avx512(x, y, n); return; }
    if (vector_ok() && f->avx2) { f32_bf16_avx2(x, y, n); return; }
#endif
    f32_bf16_scalar(x, y, n);
}

void rt_f16_to_f32(const uint16_t *x, float *y, int64_t n)
{
#ifdef GEMM16_X86
    if (vector_ok() && features()->f16c) { f16_f32_f16c(x, y, n); return; }
#endif
    f16_f32_scalar(x, y, n);
}

void rt_f32_to_f16(const float *x, uint16_t *y, int64_t n)
{
#ifdef GEMM16_X86
    if (vector_ok() && features()->f16c) { f32_f16_f16c(x, y, n); return; }
#endif
    f32_f16_scalar(x, y, n);
}

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

/* fp32 elements the conversion path needs for one batch element of g. */
static int64_t convert_floats(const cg_gemm *g) { return g->m * g->k + g->k * g->n + g->m * g->n; }

static void gemm_convert(float *ws, const cg_gemm *g, const void *a, const void *b, void *c)
{
    if (g->m <= 0 || g->n <= 0) return;
    int64_t ar = g->ta ? g->k : g->m, ac = g->ta ? g->m : g->k;
    int64_t br = g->tb ? g->n : g->k, bc = g->tb ? g->k : g->n;
    float *fa = ws, *fb = fa + ar * ac, *fc = fb + br * bc;
    enum CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans, tb = g->tb ? CblasTrans : CblasNoTrans;
    for (int64_t i = 0; i < g->batch; i++) {
        const uint16_t *A = (const uint16_t *)a + i * g->stride_a, *B = (const uint16_t *)b + i * g->stride_b;
        uint16_t *C = (uint16_t *)c + i * g->stride_c;
        convert(&(conv_job){g->dtype, true, A, fa, ar, ac, g->lda, ac});
        convert(&(conv_job){g->dtype, true, B, fb, br, bc, g->ldb, bc});
        if (g->beta != 0.0) convert(&(conv_job){g->dtype, true, C, fc, g->m, g->n, g->ldc, g->n});
        cblas_sgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, (float)g->alpha, fa, (int)max64(ac, 1),
                    fb, (int)max64(bc, 1), (float)g->beta, fc, (int)g->n);
        convert(&(conv_job){g->dtype, false, fc, C, g->m, g->n, g->n, g->ldc});
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

bool rt_gemm16_choose(ir_dtype t, rt_gemm16_path *path, char *why, size_t cap)
{
    const char *var = t == IR_BF16 ? "TGC_CPU_BF16_GEMM" : "TGC_CPU_F16_GEMM", *env = getenv(var);
    bool isa = t == IR_BF16 ? rt_cpu_has_avx512_bf16() : rt_cpu_has_avx512_fp16();
    const char *need = t == IR_BF16 ? "AVX512_BF16" : "AVX512_FP16";
    if (!env || !*env || strcmp(env, "auto") == 0) {
        char ignored[256];
        *path = isa && rt_onednn_available(ignored, sizeof ignored) ? RT_GEMM16_ONEDNN : RT_GEMM16_CONVERT;
        return true;
    }
    if (strcmp(env, "convert") == 0) {
        *path = RT_GEMM16_CONVERT;
        return true;
    }
    if (strcmp(env, "onednn") == 0) {
        if (!isa) {
            snprintf(why, cap, "%s=onednn: this CPU, %s, lacks %s, which oneDNN's %s matmul needs; unset %s or set "
                     "it to convert", var, rt_cpu_describe(), need, ir_dtype_name(t), var);
            return false;
        }
        char lib[256];
        if (!rt_onednn_available(lib, sizeof lib)) {
            snprintf(why, cap, "%s=onednn: %s", var, lib);
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
    int64_t ws_floats;
    int n;                   /* instructions */
    unsigned char *path;     /* per instruction */
    rt_onednn_gemm **prim;   /* per instruction: the oneDNN primitive, or NULL */
};

/* The path of t was forced to onednn: a primitive it cannot make is an error. */
static bool forced(ir_dtype t)
{
    const char *env = getenv(t == IR_BF16 ? "TGC_CPU_BF16_GEMM" : "TGC_CPU_F16_GEMM");
    return env && strcmp(env, "onednn") == 0;
}

static bool is16(ir_dtype t) { return t == IR_BF16 || t == IR_F16; }

bool rt_gemm16_new(const cg_program *p, rt_gemm16 **out, diag *d)
{
    *out = NULL;
    bool any = false;
    for (int i = 0; i < p->ninstrs && !any; i++) any = p->instrs[i].kind == CG_GEMM && is16(p->instrs[i].gemm.dtype);
    if (!any) return true;
    rt_gemm16_path want[2];
    const ir_dtype types[2] = {IR_BF16, IR_F16};
    for (int t = 0; t < 2; t++) {
        char why[512];
        if (!rt_gemm16_choose(types[t], &want[t], why, sizeof why)) {
            diag_error_plain(d, "%s", why);
            return false;
        }
    }
    rt_gemm16 *s = xcalloc(1, sizeof *s);
    s->n = p->ninstrs;
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
        if (path == RT_GEMM16_CONVERT) s->ws_floats = max64(s->ws_floats, convert_floats(g));
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
        TGC_ASSERT(convert_floats(g) <= s->ws_floats);
        gemm_convert(s->ws, g, a, b, c);
        return true;
    }
    int64_t need = convert_floats(g);
    pthread_mutex_lock(&shared_ws.mu);
    if (need > shared_ws.n) {
        free(shared_ws.p);
        shared_ws.p = xmalloc((size_t)need * sizeof(float));
        shared_ws.n = need;
    }
    gemm_convert(shared_ws.p, g, a, b, c);
    pthread_mutex_unlock(&shared_ws.mu);
    return true;
}
