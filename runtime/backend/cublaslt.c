/* cuBLASLt, opened with dlopen (runtime/backend/cublaslt.h).
 *
 * Layouts. A program GEMM is row-major: C[m, n] = alpha op(A) op(B) (+ beta C).
 * A row-major [r, c] matrix with leading dimension L is, to a column-major
 * library, the [c, r] matrix with the same L. So cuBLASLt computes
 * C^T[n, m] = op(B)^T op(A)^T:
 *
 *   cuBLASLt A  = program B, transa = tb, stored [tb ? k : n, tb ? n : k], ld = ldb
 *   cuBLASLt B  = program A, transb = ta, stored [ta ? m : k, ta ? k : m], ld = lda
 *   cuBLASLt C, D = program C, stored [n, m], ld = ldc
 *   cuBLASLt (M, N, K) = (n, m, k); batch strides likewise swap for A and B.
 *
 * Epilogues in those terms (codegen.h): a bias of length n is cuBLASLt's
 * row-vector of length M (EPILOGUE_BIAS broadcasts it over D's columns);
 * the bias gradient of the program's A operand is a reduction of
 * cuBLASLt's B over K (BGRADB); DGELU_BGRAD reduces D over N, giving n
 * values. The aux matrix (GELU input) is D-shaped, [n, m] with ld ldaux. */
#include "runtime/backend/cublaslt.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "support/env.h"
#include "support/util.h"

#define LT_ERR_MAX 512

static void report(diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(diag *d, const char *fmt, ...)
{
    char buf[LT_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (d) diag_error_plain(d, "%s", buf);
}

/* ---- finding a CUDA library -------------------------------------------------- */

static void *open_in(const char *dir, const char *sub, const char *name, strbuf *tried)
{
    if (!dir || !*dir) return NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s%s/%s", dir, sub, name);
    sb_printf(tried, ", %s", path);
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

void *rt_cuda_dlopen(const char *const *sonames, const char *what, char *err, size_t cap)
{
    strbuf tried;
    sb_init(&tried);
    void *h = NULL;
    /* The sonames first: LD_LIBRARY_PATH, the loader cache and rpaths decide,
     * as they would for a linked library. */
    for (int i = 0; sonames[i] && !h; i++) {
        sb_printf(&tried, "%s%s", i ? ", " : "", sonames[i]);
        h = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
    }
#ifdef TGC_CUDA_LIBDIR
    const char *configured = TGC_CUDA_LIBDIR;
#else
    const char *configured = NULL;
#endif
    const char *dirs[3][2] = {{getenv("CUDA_HOME"), "/lib64"}, {getenv("CUDA_PATH"), "/lib64"}, {configured, ""}};
    for (int k = 0; k < 3 && !h; k++)
        for (int i = 0; sonames[i] && !h; i++) h = open_in(dirs[k][0], dirs[k][1], sonames[i], &tried);
    if (!h) {
        const char *why = dlerror();
        snprintf(err, cap, "cannot load %s (tried %s)%s%s; install the CUDA toolkit or set CUDA_HOME", what,
                 tried.s, why ? ": " : "", why ? why : "");
    }
    sb_free(&tried);
    return h;
}


#ifndef TGC_HAVE_CUDA

/* ---- built without the toolkit ------------------------------------------------- */

static const char no_cuda[] = "cuBLASLt: tgc was built without the CUDA toolkit";

bool rt_lt_load(diag *d)
{
    report(d, "%s", no_cuda);
    return false;
}
rt_lt_gemm *rt_lt_gemm_new(const cg_gemm *g, diag *d)
{
    (void)g;
    report(d, "%s", no_cuda);
    return NULL;
}
void rt_lt_gemm_describe(const rt_lt_gemm *m, FILE *out)
{
    (void)m;
    fprintf(out, "%s\n", no_cuda);
}
void rt_lt_gemm_free(rt_lt_gemm *m) { (void)m; }
rt_lt *rt_lt_new(void *stream, void *workspace, size_t workspace_bytes, diag *d)
{
    (void)stream, (void)workspace, (void)workspace_bytes;
    report(d, "%s", no_cuda);
    return NULL;
}
int rt_lt_run(rt_lt *lt, rt_lt_gemm *m, const void *a, const void *b, void *c, const void *bias, void *aux)
{
    (void)lt, (void)m, (void)a, (void)b, (void)c, (void)bias, (void)aux;
    return -1;
}
const char *rt_lt_error(const rt_lt *lt)
{
    (void)lt;
    return no_cuda;
}
void rt_lt_free(rt_lt *lt) { (void)lt; }
bool rt_lt_gemm_info(const rt_lt_gemm *m, rt_lt_info *out, diag *d)
{
    (void)m, (void)out;
    report(d, "%s", no_cuda);
    return false;
}
bool rt_lt_gemm_bind(rt_lt_gemm *m, const void *bias, void *aux, diag *d)
{
    (void)m, (void)bias, (void)aux;
    report(d, "%s", no_cuda);
    return false;
}

#else

#include <cublasLt.h>

/* ---- the library ------------------------------------------------------------------ */

/* Every function used, with the header's own prototype. */
#define LT_FUNCS(X)                                                                                            \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetVersion) X(cublasLtGetStatusString)                      \
    X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)                 \
    X(cublasLtMatmulDescGetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)             \
    X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatrixLayoutGetAttribute) X(cublasLtMatmulPreferenceCreate)  \
    X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)                                 \
    X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

typedef struct lt_api {
#define LT_MEMBER(fn) __typeof__(&fn) fn;
    LT_FUNCS(LT_MEMBER)
#undef LT_MEMBER
} lt_api;

static lt_api api;
static bool api_ok;
static char api_err[LT_ERR_MAX];
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

#define LT_STR2(x) #x
#define LT_STR(x) LT_STR2(x)

static void lt_load_once(void)
{
    static const char *const names[] = {"libcublasLt.so." LT_STR(CUBLAS_VER_MAJOR), "libcublasLt.so", NULL};
    /* The message stays in api_err, so every later call can repeat it. */
    void *h = rt_cuda_dlopen(names, "cuBLASLt (libcublasLt)", api_err, sizeof api_err);
    if (!h) return;
#define LT_RESOLVE(fn)                                                                                         \
    if (!(*(void **)&api.fn = dlsym(h, #fn))) {                                                                \
        snprintf(api_err, sizeof api_err, "cuBLASLt: the library lacks %s (too old?)", #fn);                   \
        return;                                                                                                \
    }
    LT_FUNCS(LT_RESOLVE)
#undef LT_RESOLVE
    /* The handle stays open for the life of the process, as a linked
     * library would. */
    api_ok = true;
}

bool rt_lt_load(diag *d)
{
    pthread_once(&api_once, lt_load_once);
    if (!api_ok) report(d, "%s", api_err);
    return api_ok;
}

static const char *lt_status(cublasStatus_t s)
{
    const char *m = api.cublasLtGetStatusString ? api.cublasLtGetStatusString(s) : NULL;
    return m ? m : "unknown cuBLAS status";
}

/* ---- descriptors ---------------------------------------------------------------------- */

enum { LT_A, LT_B, LT_C, LT_D };

struct rt_lt_gemm {
    cg_gemm g;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t lay[4];
    float alpha_f, beta_f;
    double alpha_d, beta_d;
    const void *bias;
    void *aux;
    /* The cached algorithm, for these operands' alignment on this lt. */
    bool have_algo;
    cublasLtMatmulAlgo_t algo;
    unsigned align;
    const rt_lt *algo_lt;
};

struct rt_lt {
    cublasLtHandle_t h;
    cudaStream_t stream;
    void *ws;
    size_t ws_bytes;
    cublasLtMatmulPreference_t pref;
    char err[LT_ERR_MAX];
};

static cublasLtEpilogue_t lt_epilogue(cg_epilogue e)
{
    switch (e) {
    case CG_EPI_BIAS: return CUBLASLT_EPILOGUE_BIAS;
    case CG_EPI_GELU_AUX_BIAS: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case CG_EPI_DGELU_BGRAD: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case CG_EPI_BGRADB: return CUBLASLT_EPILOGUE_BGRADB;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
    }
}

static cg_epilogue cg_epilogue_of(int e)
{
    for (int k = CG_EPI_BIAS; k < CG_EPI_COUNT; k++)
        if ((int)lt_epilogue((cg_epilogue)k) == e) return (cg_epilogue)k;
    return e == CUBLASLT_EPILOGUE_DEFAULT ? CG_EPI_NONE : CG_EPI_COUNT;
}

static bool epi_needs_aux(cg_epilogue e) { return e == CG_EPI_GELU_AUX_BIAS || e == CG_EPI_DGELU_BGRAD; }

/* The program-level checks, each naming the offending value. */
static bool gemm_check(const cg_gemm *g, diag *d)
{
    if (g->dtype != IR_F32 && g->dtype != IR_F64 && g->dtype != IR_BF16 && g->dtype != IR_F16) {
        report(d, "cuBLASLt: GEMMs are f32, f64, bf16 or f16, not %s", ir_dtype_name(g->dtype));
        return false;
    }
    if (g->m < 1 || g->n < 1 || g->k < 1 || g->batch < 1) {
        report(d, "cuBLASLt: empty GEMM m=%lld n=%lld k=%lld batch=%lld", (long long)g->m, (long long)g->n,
               (long long)g->k, (long long)g->batch);
        return false;
    }
    int64_t need_a = g->ta ? g->m : g->k, need_b = g->tb ? g->k : g->n;
    if (g->lda < need_a || g->ldb < need_b || g->ldc < g->n) {
        report(d, "cuBLASLt: leading dimensions lda=%lld ldb=%lld ldc=%lld below the rows (%lld, %lld, %lld)",
               (long long)g->lda, (long long)g->ldb, (long long)g->ldc, (long long)need_a, (long long)need_b,
               (long long)g->n);
        return false;
    }
    if ((unsigned)g->epilogue >= CG_EPI_COUNT) {
        report(d, "cuBLASLt: invalid epilogue %d", (int)g->epilogue);
        return false;
    }
    if (g->epilogue != CG_EPI_NONE && (g->batch != 1 || g->dtype == IR_F64)) {
        report(d, "cuBLASLt: epilogue %s on a %s GEMM of batch %lld (only unbatched f32, bf16 or f16)",
               cg_epilogue_name(g->epilogue), ir_dtype_name(g->dtype), (long long)g->batch);
        return false;
    }
    if (epi_needs_aux(g->epilogue) && (g->ldaux < g->n || g->ldaux % 8 != 0)) {
        report(d, "cuBLASLt: aux leading dimension %lld must be >= n=%lld and a multiple of 8",
               (long long)g->ldaux, (long long)g->n);
        return false;
    }
    return true;
}

static bool tf32_allowed(void)
{
    return env_flag("TGC_CUDA_TF32");
}

#define LT_TRY(call, what)                                                                                     \
    do {                                                                                                       \
        cublasStatus_t st_ = (call);                                                                           \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                                                    \
            report(d, "cuBLASLt: %s failed: %s", what, lt_status(st_));                                       \
            goto fail;                                                                                         \
        }                                                                                                      \
    } while (0)

static cublasStatus_t layout_new(cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows, int64_t cols,
                                 int64_t ld, int64_t batch, int64_t stride)
{
    cublasStatus_t st = api.cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld);
    if (st != CUBLAS_STATUS_SUCCESS || batch == 1) return st;
    int32_t b = (int32_t)batch;
    st = api.cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = api.cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                  sizeof stride);
    return st;
}

static bool desc_set(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t a, const void *v, size_t size,
                     diag *d)
{
    cublasStatus_t st = api.cublasLtMatmulDescSetAttribute(op, a, v, size);
    if (st != CUBLAS_STATUS_SUCCESS) report(d, "cuBLASLt: setting matmul attribute %d failed: %s", (int)a, lt_status(st));
    return st == CUBLAS_STATUS_SUCCESS;
}

rt_lt_gemm *rt_lt_gemm_new(const cg_gemm *g, diag *d)
{
    if (!rt_lt_load(d) || !gemm_check(g, d)) return NULL;
    if (g->batch > INT32_MAX) {
        report(d, "cuBLASLt: batch %lld does not fit its 32-bit count", (long long)g->batch);
        return NULL;
    }
    rt_lt_gemm *m = xcalloc(1, sizeof *m);
    m->g = *g;
    m->alpha_f = (float)g->alpha, m->beta_f = (float)g->beta;
    m->alpha_d = g->alpha, m->beta_d = g->beta;
    bool f64 = g->dtype == IR_F64, b16 = g->dtype == IR_BF16 || g->dtype == IR_F16;
    cudaDataType_t t = f64 ? CUDA_R_64F : g->dtype == IR_BF16 ? CUDA_R_16BF : g->dtype == IR_F16 ? CUDA_R_16F : CUDA_R_32F;
    /* 16-bit A, B, C, D: fp32 accumulation and fp32 alpha / beta, D rounded
     * once (to nearest); TF32 concerns fp32 inputs only. */
    cublasComputeType_t ct = f64 ? CUBLAS_COMPUTE_64F
                             : !b16 && tf32_allowed() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    LT_TRY(api.cublasLtMatmulDescCreate(&m->op, ct, f64 ? CUDA_R_64F : CUDA_R_32F), "cublasLtMatmulDescCreate");
    cublasOperation_t ta = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = lt_epilogue(g->epilogue);
    if (!desc_set(m->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta, d) ||
        !desc_set(m->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb, d) ||
        !desc_set(m->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi, d))
        goto fail;
    if (epi_needs_aux(g->epilogue) && !desc_set(m->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &g->ldaux,
                                                sizeof g->ldaux, d))
        goto fail;
    /* A 16-bit GEMM's epilogue: the bias (or bias gradient) and aux are
     * 16-bit like D (what cuBLASLt defaults to; set so that it is stated). */
    if (b16 && g->epilogue != CG_EPI_NONE) {
        int32_t bt = (int32_t)t;
        if (!desc_set(m->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt, d)) goto fail;
        if (epi_needs_aux(g->epilogue) &&
            !desc_set(m->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &bt, sizeof bt, d))
            goto fail;
    }
    /* The swap of the header comment: cuBLASLt's A is the program's B. */
    LT_TRY(layout_new(&m->lay[LT_A], t, g->tb ? g->k : g->n, g->tb ? g->n : g->k, g->ldb, g->batch, g->stride_b),
           "the layout of A");
    LT_TRY(layout_new(&m->lay[LT_B], t, g->ta ? g->m : g->k, g->ta ? g->k : g->m, g->lda, g->batch, g->stride_a),
           "the layout of B");
    LT_TRY(layout_new(&m->lay[LT_C], t, g->n, g->m, g->ldc, g->batch, g->stride_c), "the layout of C");
    LT_TRY(layout_new(&m->lay[LT_D], t, g->n, g->m, g->ldc, g->batch, g->stride_c), "the layout of D");
    return m;
fail:
    rt_lt_gemm_free(m);
    return NULL;
}

void rt_lt_gemm_free(rt_lt_gemm *m)
{
    if (!m) return;
    for (int i = 0; i < 4; i++)
        if (m->lay[i]) api.cublasLtMatrixLayoutDestroy(m->lay[i]);
    if (m->op) api.cublasLtMatmulDescDestroy(m->op);
    free(m);
}

/* Sets the epilogue pointers that changed; false with the reason in err. */
static bool bind_ptrs(rt_lt_gemm *m, const void *bias, void *aux, char *err, size_t cap)
{
    cg_epilogue e = m->g.epilogue;
    if (e != CG_EPI_NONE && !bias) {
        snprintf(err, cap, "cuBLASLt: epilogue %s needs a bias pointer", cg_epilogue_name(e));
        return false;
    }
    if (epi_needs_aux(e) && !aux) {
        snprintf(err, cap, "cuBLASLt: epilogue %s needs an aux pointer", cg_epilogue_name(e));
        return false;
    }
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (e != CG_EPI_NONE && bias != m->bias) {
        st = api.cublasLtMatmulDescSetAttribute(m->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
        if (st == CUBLAS_STATUS_SUCCESS) m->bias = bias;
    }
    if (st == CUBLAS_STATUS_SUCCESS && epi_needs_aux(e) && aux != m->aux) {
        st = api.cublasLtMatmulDescSetAttribute(m->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
        if (st == CUBLAS_STATUS_SUCCESS) m->aux = aux;
    }
    if (st != CUBLAS_STATUS_SUCCESS) snprintf(err, cap, "cuBLASLt: setting the epilogue pointers: %s", lt_status(st));
    return st == CUBLAS_STATUS_SUCCESS;
}

bool rt_lt_gemm_bind(rt_lt_gemm *m, const void *bias, void *aux, diag *d)
{
    char err[LT_ERR_MAX];
    if (bind_ptrs(m, bias, aux, err, sizeof err)) return true;
    report(d, "%s", err);
    return false;
}

/* ---- reading the descriptors back ------------------------------------------------------------ */

static bool desc_get(const rt_lt_gemm *m, cublasLtMatmulDescAttributes_t a, void *v, size_t size, diag *d)
{
    size_t written = 0;
    cublasStatus_t st = api.cublasLtMatmulDescGetAttribute(m->op, a, v, size, &written);
    if (st != CUBLAS_STATUS_SUCCESS) report(d, "cuBLASLt: reading matmul attribute %d failed: %s", (int)a, lt_status(st));
    return st == CUBLAS_STATUS_SUCCESS;
}

static bool layout_get(const rt_lt_gemm *m, int i, cublasLtMatrixLayoutAttribute_t a, void *v, size_t size,
                       diag *d)
{
    size_t written = 0;
    cublasStatus_t st = api.cublasLtMatrixLayoutGetAttribute(m->lay[i], a, v, size, &written);
    if (st != CUBLAS_STATUS_SUCCESS)
        report(d, "cuBLASLt: reading layout attribute %d of %c failed: %s", (int)a, "ABCD"[i], lt_status(st));
    return st == CUBLAS_STATUS_SUCCESS;
}

bool rt_lt_gemm_info(const rt_lt_gemm *m, rt_lt_info *o, diag *d)
{
    memset(o, 0, sizeof *o);
    if (!rt_lt_load(d)) return false;
    int32_t ta = 0, tb = 0, ct = 0, st = 0, epi = 0;
    bool ok = desc_get(m, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta, d) &&
              desc_get(m, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb, d) &&
              desc_get(m, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &ct, sizeof ct, d) &&
              desc_get(m, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &st, sizeof st, d) &&
              desc_get(m, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi, d) &&
              desc_get(m, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &o->bias, sizeof o->bias, d) &&
              desc_get(m, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &o->aux, sizeof o->aux, d) &&
              desc_get(m, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &o->aux_ld, sizeof o->aux_ld, d);
    o->transa = ta, o->transb = tb, o->compute = ct, o->scale_type = st, o->epilogue = epi;
    o->cg_epi = cg_epilogue_of(epi);
    for (int i = 0; i < 4 && ok; i++) {
        uint32_t type = 0;
        ok = layout_get(m, i, CUBLASLT_MATRIX_LAYOUT_TYPE, &type, sizeof type, d) &&
             layout_get(m, i, CUBLASLT_MATRIX_LAYOUT_ROWS, &o->rows[i], sizeof o->rows[i], d) &&
             layout_get(m, i, CUBLASLT_MATRIX_LAYOUT_COLS, &o->cols[i], sizeof o->cols[i], d) &&
             layout_get(m, i, CUBLASLT_MATRIX_LAYOUT_LD, &o->ld[i], sizeof o->ld[i], d) &&
             layout_get(m, i, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &o->batch[i], sizeof o->batch[i], d) &&
             layout_get(m, i, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &o->stride[i], sizeof o->stride[i], d);
        o->type[i] = (int)type;
    }
    return ok;
}

static const char *type_name(int t)
{
    return t == CUDA_R_32F ? "f32" : t == CUDA_R_64F ? "f64" : t == CUDA_R_16BF ? "bf16" : t == CUDA_R_16F ? "f16" : "?";
}

static const char *compute_name(int c)
{
    switch (c) {
    case CUBLAS_COMPUTE_32F: return "32F";
    case CUBLAS_COMPUTE_32F_FAST_TF32: return "32F_FAST_TF32";
    case CUBLAS_COMPUTE_64F: return "64F";
    default: return "?";
    }
}

static const char *lt_epilogue_name(int e)
{
    switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "DEFAULT";
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return "DGELU_BGRAD";
    case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
    default: return "?";
    }
}

void rt_lt_gemm_describe(const rt_lt_gemm *m, FILE *out)
{
    rt_lt_info o;
    diag d;
    diag_init(&d, stderr);
    if (!rt_lt_gemm_info(m, &o, &d)) {
        fprintf(out, "cublasLt: (descriptors unreadable)\n");
        diag_free(&d);
        return;
    }
    diag_free(&d);
    /* M, N from D; K from A through its transpose. */
    uint64_t k = o.transa == CUBLAS_OP_T ? o.rows[LT_A] : o.cols[LT_A];
    fprintf(out, "cublasLt m=%llu n=%llu k=%llu op=%c%c lda=%lld ldb=%lld ldc=%lld batch=%d",
            (unsigned long long)o.rows[LT_D], (unsigned long long)o.cols[LT_D], (unsigned long long)k,
            o.transa == CUBLAS_OP_T ? 'T' : 'N', o.transb == CUBLAS_OP_T ? 'T' : 'N', (long long)o.ld[LT_A],
            (long long)o.ld[LT_B], (long long)o.ld[LT_D], (int)o.batch[LT_D]);
    if (o.batch[LT_D] > 1)
        fprintf(out, " strides=%lld,%lld,%lld", (long long)o.stride[LT_A], (long long)o.stride[LT_B],
                (long long)o.stride[LT_D]);
    fprintf(out, " %s compute=%s epilogue=%s", type_name(o.type[LT_D]), compute_name(o.compute),
            lt_epilogue_name(o.epilogue));
    if (epi_needs_aux(o.cg_epi)) fprintf(out, " aux_ld=%lld", (long long)o.aux_ld);
    fputc('\n', out);
}

/* ---- running --------------------------------------------------------------------------------- */

rt_lt *rt_lt_new(void *stream, void *workspace, size_t workspace_bytes, diag *d)
{
    if (!rt_lt_load(d)) return NULL;
    rt_lt *lt = xcalloc(1, sizeof *lt);
    lt->stream = (cudaStream_t)stream;
    lt->ws = workspace;
    lt->ws_bytes = workspace ? workspace_bytes : 0;
    uint64_t ws = lt->ws_bytes;
    LT_TRY(api.cublasLtCreate(&lt->h), "cublasLtCreate (is there a GPU and a driver?)");
    LT_TRY(api.cublasLtMatmulPreferenceCreate(&lt->pref), "cublasLtMatmulPreferenceCreate");
    LT_TRY(api.cublasLtMatmulPreferenceSetAttribute(lt->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
           "setting the workspace size");
    return lt;
fail:
    rt_lt_free(lt);
    return NULL;
}

void rt_lt_free(rt_lt *lt)
{
    if (!lt) return;
    if (lt->pref) api.cublasLtMatmulPreferenceDestroy(lt->pref);
    if (lt->h) api.cublasLtDestroy(lt->h);
    free(lt);
}

const char *rt_lt_error(const rt_lt *lt) { return lt ? lt->err : "cuBLASLt: no handle"; }

static int lt_fail(rt_lt *lt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int lt_fail(rt_lt *lt, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(lt->err, sizeof lt->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* The largest power of two up to 256 dividing every address: what the
 * heuristic's algorithm may assume. */
static unsigned align_of(const void *const *p, int n)
{
    uintptr_t bits = 256;
    for (int i = 0; i < n; i++)
        if (p[i]) bits |= (uintptr_t)p[i];
    return (unsigned)(bits & (~bits + 1));
}

static int lt_choose(rt_lt *lt, rt_lt_gemm *m, unsigned align)
{
    uint32_t al = align;
    cublasLtMatmulPreferenceAttributes_t attrs[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (size_t i = 0; i < ARRAY_LEN(attrs); i++) {
        cublasStatus_t st = api.cublasLtMatmulPreferenceSetAttribute(lt->pref, attrs[i], &al, sizeof al);
        if (st != CUBLAS_STATUS_SUCCESS) return lt_fail(lt, "cuBLASLt: setting the alignment preference: %s", lt_status(st));
    }
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    cublasStatus_t st = api.cublasLtMatmulAlgoGetHeuristic(lt->h, m->op, m->lay[LT_A], m->lay[LT_B], m->lay[LT_C],
                                                           m->lay[LT_D], lt->pref, 1, &r, &found);
    if (st != CUBLAS_STATUS_SUCCESS || found < 1) {
        char line[256] = "";
        FILE *f = fmemopen(line, sizeof line - 1, "w");
        if (f) {
            rt_lt_gemm_describe(m, f);
            fclose(f);
        }
        size_t n = strlen(line);
        if (n && line[n - 1] == '\n') line[n - 1] = 0;
        return lt_fail(lt, "cuBLASLt: no algorithm for %s (workspace %zu bytes, alignment %u): %s", line,
                       lt->ws_bytes, align, st != CUBLAS_STATUS_SUCCESS ? lt_status(st) : "none found");
    }
    m->algo = r.algo;
    m->align = align;
    m->algo_lt = lt;
    m->have_algo = true;
    return 0;
}

int rt_lt_run(rt_lt *lt, rt_lt_gemm *m, const void *a, const void *b, void *c, const void *bias, void *aux)
{
    if (!lt || !m) return lt ? lt_fail(lt, "cuBLASLt: no GEMM") : -1;
    if (!a || !b || !c) return lt_fail(lt, "cuBLASLt: a NULL operand (a=%p b=%p c=%p)", a, b, (void *)c);
    lt->err[0] = 0;
    if (m->g.epilogue != CG_EPI_NONE && !bind_ptrs(m, bias, aux, lt->err, sizeof lt->err)) return -1;
    const void *ptrs[5] = {a, b, c, bias, aux};
    unsigned align = align_of(ptrs, 5);
    if (!m->have_algo || m->align != align || m->algo_lt != lt) {
        int rc = lt_choose(lt, m, align);
        if (rc) return rc;
    }
    bool f64 = m->g.dtype == IR_F64;
    const void *alpha = f64 ? (const void *)&m->alpha_d : (const void *)&m->alpha_f;
    const void *beta = f64 ? (const void *)&m->beta_d : (const void *)&m->beta_f;
    cublasStatus_t st = api.cublasLtMatmul(lt->h, m->op, alpha, b, m->lay[LT_A], a, m->lay[LT_B], beta, c,
                                           m->lay[LT_C], c, m->lay[LT_D], &m->algo, lt->ws, lt->ws_bytes, lt->stream);
    if (st != CUBLAS_STATUS_SUCCESS) return lt_fail(lt, "cuBLASLt: cublasLtMatmul failed: %s", lt_status(st));
    return 0;
}

#endif
