/* cuBLASLt without a GPU (issue 7, part 3d).
 *
 * 1. Descriptors: every GEMM of the CUDA-target program of every sample
 *    (and GPT split for t = 2, with and without sequence parallelism) gets
 *    its cuBLASLt descriptors; each attribute is read back and checked
 *    against the program's GEMM through the row-major -> column-major swap.
 * 2. Epilogue choices: every linear with a bias is one GEMM with
 *    EPILOGUE_BIAS and no bias kernel; every bias gradient of a linear is
 *    the BGRADB output of its weight-gradient GEMM and its colsum kernel is
 *    gone; other colsums (norm biases) stay kernels.
 * 3. The same computation: both programs of each serial sample run one
 *    training step on the CPU from the same buffers. The CPU program's
 *    GEMMs are a row-major reference; the CUDA program's GEMMs are a
 *    column-major GEMM with cuBLASLt's epilogue semantics driven only by
 *    the values read back from the descriptors (and the bias/aux pointers
 *    stored in them). Gradients, updated parameters and the loss agree.
 *
 * 4. On a GPU (the same binary where one is visible): rt_lt_run of every
 *    transpose case, a batched GEMM and each epilogue against the same
 *    column-major reference on the host.
 *
 * Exits 77 (skipped) when libcublasLt cannot be loaded. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#include "../unit/capture.h"
#include "../unit/check.h"
#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "passes/pass.h"
#include "runtime/backend/cpu.h"
#include "runtime/backend/cublaslt.h"
#include "runtime/backend/cuda.h"
#include "runtime/exec.h"
#include "support/file.h"
#include "support/util.h"

enum { A_, B_, C_, D_ };

static const char *samples_dir = "samples";

/* ---- building graphs -------------------------------------------------------- */

/* fuse: run the fuse pass's fusions (all) or none; precision: f32, or
 * bf16 / f16 storage (mixed precision). */
static ir_graph *build_prec(const char *sample, int tp, bool sp, bool fuse, ir_dtype precision)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.tg", samples_dir, sample);
    size_t len;
    char why[256];
    char *text = file_read(path, FILE_MODEL, &len, why, sizeof why);
    if (!text) {
        fprintf(stderr, "cannot read %s\n", path);
        return NULL;
    }
    static const fe_override sets[] = {{"layers", "1", false}, {"hidden", "64", false}, {"heads", "2", false},
                                       {"seq", "16", false},   {"batch", "2", false},   {"vocab", "64", false}};
    diag d;
    diag_init(&d, stderr);
    ir_graph *g = fe_compile(path, text, len, sets, (int)ARRAY_LEN(sets), &d);
    free(text);
    pass_options po;
    pass_options_defaults(&po);
    po.tp = tp;
    po.sequence_parallel = sp;
    po.fuse = fuse ? PASS_FUSE_ALL : 0;
    po.precision = precision;
    /* SGD: the update is linear in the gradient, so parameters compare as
     * tightly as gradients (Adam's first step is sign(g)). */
    po.optimizer = "sgd";
    const pass_info *list[64];
    int n = pass_count();
    for (int i = 0; i < n; i++) list[i] = pass_at(i);
    pass_ctx ctx = {.d = &d, .verify_each = true, .opts = &po};
    if (g && !pass_run_list(g, list, n, &ctx, NULL, NULL)) {
        ir_graph_free(g);
        g = NULL;
    }
    diag_free(&d);
    return g;
}

static ir_graph *build(const char *sample, int tp, bool sp, bool fuse)
{
    return build_prec(sample, tp, sp, fuse, IR_F32);
}

/* ---- 1. descriptors ------------------------------------------------------------ */

/* The attributes of one GEMM against the program's: cuBLASLt's A is the
 * program's B (transposed iff tb), its B the program's A (iff ta), C and
 * D are the program's C seen column-major, [n, m]. */
static void check_info(const cg_gemm *g, const rt_lt_info *o, const void *bias, const void *aux)
{
    CHECK(o->transa == (g->tb ? CUBLAS_OP_T : CUBLAS_OP_N));
    CHECK(o->transb == (g->ta ? CUBLAS_OP_T : CUBLAS_OP_N));
    CHECK(o->compute == CUBLAS_COMPUTE_32F);
    CHECK(o->scale_type == CUDA_R_32F);
    int type = g->dtype == IR_BF16 ? CUDA_R_16BF : g->dtype == IR_F16 ? CUDA_R_16F : CUDA_R_32F;
    for (int i = 0; i < 4; i++) {
        CHECK(o->type[i] == type);
        CHECK(o->batch[i] == g->batch);
    }
    /* op(A) is [n, k], op(B) [k, m], D [n, m]. */
    uint64_t an = o->transa == CUBLAS_OP_T ? o->cols[A_] : o->rows[A_];
    uint64_t ak = o->transa == CUBLAS_OP_T ? o->rows[A_] : o->cols[A_];
    uint64_t bk = o->transb == CUBLAS_OP_T ? o->cols[B_] : o->rows[B_];
    uint64_t bm = o->transb == CUBLAS_OP_T ? o->rows[B_] : o->cols[B_];
    CHECK(an == (uint64_t)g->n && ak == (uint64_t)g->k && bk == (uint64_t)g->k && bm == (uint64_t)g->m);
    CHECK(o->rows[C_] == (uint64_t)g->n && o->cols[C_] == (uint64_t)g->m);
    CHECK(o->rows[D_] == (uint64_t)g->n && o->cols[D_] == (uint64_t)g->m);
    CHECK(o->ld[A_] == g->ldb && o->ld[B_] == g->lda && o->ld[C_] == g->ldc && o->ld[D_] == g->ldc);
    /* A column-major leading dimension covers its rows. */
    for (int i = 0; i < 4; i++) CHECK((uint64_t)o->ld[i] >= o->rows[i]);
    if (g->batch > 1) {
        CHECK(o->stride[A_] == g->stride_b && o->stride[B_] == g->stride_a);
        CHECK(o->stride[C_] == g->stride_c && o->stride[D_] == g->stride_c);
    }
    CHECK(o->cg_epi == g->epilogue);
    static const int lt_epi[CG_EPI_COUNT] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS,
                                             CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU_BGRAD,
                                             CUBLASLT_EPILOGUE_BGRADB};
    CHECK(o->epilogue == lt_epi[g->epilogue]);
    CHECK(o->bias == (g->epilogue != CG_EPI_NONE ? bias : NULL));
    bool has_aux = g->epilogue == CG_EPI_GELU_AUX_BIAS || g->epilogue == CG_EPI_DGELU_BGRAD;
    CHECK(o->aux == (has_aux ? aux : NULL));
    if (has_aux) CHECK(o->aux_ld == g->ldaux && o->aux_ld % 8 == 0 && (uint64_t)o->aux_ld >= o->rows[D_]);
}

typedef struct epi_counts {
    int gemms, bias, bgradb, gelu, dgelu;
} epi_counts;

/* Descriptors of every GEMM of p, bound to fake device addresses. */
static epi_counts check_descriptors(const cg_program *p, const char *what)
{
    epi_counts n = {0};
    for (int i = 0; i < p->ninstrs; i++) {
        const cg_instr *in = &p->instrs[i];
        if (in->kind != CG_GEMM) continue;
        const cg_gemm *g = &in->gemm;
        capture cap;
        cap_init(&cap);
        rt_lt_gemm *m = rt_lt_gemm_new(g, &cap.d);
        CHECK(m != NULL);
        if (!m) {
            fprintf(stderr, "%s: instruction %d: %s", what, i, cap_text(&cap));
            cap_free(&cap);
            continue;
        }
        const void *bias = (const void *)(uintptr_t)(0x10000 + 256 * i);
        void *aux = (void *)(uintptr_t)(0x90000000u + 256u * (unsigned)i);
        if (g->epilogue != CG_EPI_NONE) CHECK(rt_lt_gemm_bind(m, bias, aux, &cap.d));
        rt_lt_info o;
        CHECK(rt_lt_gemm_info(m, &o, &cap.d));
        check_info(g, &o, bias, aux);
        n.gemms++;
        n.bias += g->epilogue == CG_EPI_BIAS;
        n.bgradb += g->epilogue == CG_EPI_BGRADB;
        n.gelu += g->epilogue == CG_EPI_GELU_AUX_BIAS;
        n.dgelu += g->epilogue == CG_EPI_DGELU_BGRAD;
        rt_lt_gemm_free(m);
        cap_free(&cap);
    }
    return n;
}

/* ---- 2. the epilogue choices ------------------------------------------------------- */

static const cg_instr *gemm_of(const cg_program *p, int node)
{
    for (int i = 0; i < p->ninstrs; i++)
        if (p->instrs[i].kind == CG_GEMM && p->instrs[i].node == node) return &p->instrs[i];
    return NULL;
}

static int instrs_of(const cg_program *p, int node, cg_instr_kind kind)
{
    int n = 0;
    for (int i = 0; i < p->ninstrs; i++) n += p->instrs[i].kind == kind && p->instrs[i].node == node;
    return n;
}

/* The weight-gradient matmul dy^T x that reads dy, or NULL. */
static const ir_node *wgrad_of(const ir_graph *g, const ir_node *dy)
{
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *m = g->nodes[i];
        if (m->op == IR_OP_MATMUL && m->src[0] == dy && ir_attr_bool(m, "transpose_a")) return m;
    }
    return NULL;
}

/* The weight gradient of a linear: matmul(dy, x) transpose_a, shaped like
 * its weight. */
static const ir_node *wgrad_of_linear(const ir_graph *g, const ir_node *lin)
{
    const ir_node *w = lin->src[1];
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *m = g->nodes[i];
        if (m->op == IR_OP_MATMUL && m->src[1] == lin->src[0] && ir_attr_bool(m, "transpose_a") &&
            m->shape.rank == 2 && m->shape.dim[0] == w->shape.dim[0] && m->shape.dim[1] == w->shape.dim[1])
            return m;
    }
    return NULL;
}

static bool is_absorbed(const cg_program *cuda, const cg_program *cpu, int node)
{
    return instrs_of(cpu, node, CG_KERNEL) > 0 && instrs_of(cuda, node, CG_KERNEL) == 0 &&
           !gemm_of(cuda, node) && !gemm_of(cpu, node);
}

static bool gelu_tanh(const ir_node *x) { return strcmp(ir_attr_sym(x, "approx"), "tanh") == 0; }

/* A linear with a bias: EPILOGUE_BIAS instead of the bias kernel, and its
 * weight gradient dW = dy^T x takes its bias gradient colsum(dy) (BGRADB). */
static void check_bias_linear(const ir_graph *g, const cg_program *cuda, const cg_program *cpu, const ir_node *x,
                              const char *what)
{
    const cg_instr *in = gemm_of(cuda, x->id);
    CHECK(in && in->gemm.epilogue == CG_EPI_BIAS && in->gemm.bias.node == x->src[2]->id);
    CHECK(in && in->gemm.c.node == x->id);
    CHECK(instrs_of(cuda, x->id, CG_KERNEL) == 0); /* the bias kernel is gone */
    CHECK(instrs_of(cpu, x->id, CG_KERNEL) == 1);  /* ... which the CPU program has */
    const ir_node *dw = wgrad_of_linear(g, x), *dy = dw ? dw->src[0] : NULL;
    CHECK(dy && dw);
    if (!dy || !dw) {
        fprintf(stderr, "%s: no weight gradient for linear %%%s\n", what, x->name);
        return;
    }
    const cg_instr *wi = gemm_of(cuda, dw->id);
    CHECK(wi && wi->gemm.epilogue == CG_EPI_BGRADB);
    if (!wi) return;
    const ir_node *db = g->nodes[wi->gemm.bias.node];
    CHECK(db->op == IR_OP_COLSUM && db->src[0] == dy);
    CHECK(is_absorbed(cuda, cpu, db->id));
}

/* The patterns of a graph against the CUDA program's choices. Returns the
 * number of linears with a bias. */
static int check_choices(const ir_graph *g, const cg_program *cuda, const cg_program *cpu, epi_counts n,
                         const char *what)
{
    int linears = 0, colsums = 0, fused_colsums = 0, gelus = 0, gelu_backs = 0;
    ir_op bias_gelu = IR_OP_COUNT, bias_gelu_back = IR_OP_COUNT;
    ir_op_lookup("bias_gelu", &bias_gelu);
    ir_op_lookup("bias_gelu_back", &bias_gelu_back);
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *x = g->nodes[i];
        if (x->op == IR_OP_LINEAR && x->nsrc == 3) {
            linears++;
            check_bias_linear(g, cuda, cpu, x, what);
        }
        if (x->op == IR_OP_COLSUM) {
            colsums++;
            bool fused = is_absorbed(cuda, cpu, x->id);
            fused_colsums += fused;
            /* Only the gradient of a bias next to a GEMM is fused: its input
             * is a weight gradient's dy (BGRADB) or a bias_gelu_back that a
             * DGELU_BGRAD GEMM computes. */
            bool dgelu = x->src[0]->op == bias_gelu_back && is_absorbed(cuda, cpu, x->src[0]->id);
            CHECK(fused == (wgrad_of(g, x->src[0]) != NULL || dgelu));
        }
        if (x->op == bias_gelu && gelu_tanh(x)) {
            /* Megatron's bias_gelu after a bias-free linear: GELU_AUX_BIAS,
             * aux in the linear's own buffer. */
            gelus++;
            const cg_instr *in = gemm_of(cuda, x->src[0]->id);
            CHECK(x->src[0]->op == IR_OP_LINEAR && in && in->gemm.epilogue == CG_EPI_GELU_AUX_BIAS);
            CHECK(in && in->gemm.c.node == x->id && in->gemm.aux.node == x->src[0]->id &&
                  in->gemm.bias.node == x->src[1]->id);
            CHECK(is_absorbed(cuda, cpu, x->id));
        }
        if (x->op == bias_gelu_back && gelu_tanh(x)) {
            gelu_backs++;
            const cg_instr *in = gemm_of(cuda, x->src[0]->id);
            CHECK(x->src[0]->op == IR_OP_MATMUL && in && in->gemm.epilogue == CG_EPI_DGELU_BGRAD);
            CHECK(in && in->gemm.c.node == x->id && in->gemm.aux.node == x->src[1]->id);
            CHECK(in && g->nodes[in->gemm.bias.node]->op == IR_OP_COLSUM &&
                  g->nodes[in->gemm.bias.node]->src[0] == x);
            CHECK(is_absorbed(cuda, cpu, x->id));
        }
    }
    CHECK(n.bias == linears);
    CHECK(n.gelu == gelus && n.dgelu == gelu_backs);
    CHECK(n.bgradb + n.dgelu == fused_colsums);
    /* Nothing else changed: node by node, the same GEMMs and kernels but
     * for the bias kernels of the BIAS linears and the absorbed nodes. */
    int ck = 0, gk = 0, cg = 0, gg = 0, absorbed = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *x = g->nodes[i];
        CHECK((gemm_of(cuda, i) != NULL) == (gemm_of(cpu, i) != NULL));
        if (is_absorbed(cuda, cpu, i)) {
            absorbed++;
            continue;
        }
        bool bias_linear = x->op == IR_OP_LINEAR && x->nsrc == 3;
        CHECK(instrs_of(cpu, i, CG_KERNEL) == instrs_of(cuda, i, CG_KERNEL) + bias_linear);
        CHECK(instrs_of(cpu, i, CG_COMM) == instrs_of(cuda, i, CG_COMM));
    }
    CHECK(absorbed == fused_colsums + gelus + gelu_backs);
    for (int i = 0; i < cpu->ninstrs; i++) ck += cpu->instrs[i].kind == CG_KERNEL, cg += cpu->instrs[i].kind == CG_GEMM;
    for (int i = 0; i < cuda->ninstrs; i++) gk += cuda->instrs[i].kind == CG_KERNEL, gg += cuda->instrs[i].kind == CG_GEMM;
    CHECK(cg == gg);
    printf("%-24s %3d GEMMs: %2d BIAS, %2d BGRADB (of %d colsums), %d GELU_AUX_BIAS, %d DGELU_BGRAD; kernels %d -> %d\n",
           what, gg, n.bias, n.bgradb, colsums, n.gelu, n.dgelu, ck, gk);
    return linears;
}

/* ---- 3. running both programs on the CPU ---------------------------------------------- */

typedef struct mini {
    const ir_graph *g;
    cg_program *p;
    rt_so *so;
    rt_kernel_fn *fn;
    unsigned char *buf[IR_MEM_COUNT], *ws, *state;
    int64_t state_bytes;
    rt_lt_gemm **lt; /* per instruction (CUDA program) */
    rt_scalars rt;
} mini;

static void *resolve(const mini *e, cg_bind b)
{
    switch (b.kind) {
    case CG_BIND_NODE: { /* offset: a result of a multi-result op (fused attention's log-sum-exp, dk, dv) */
        const ir_node *n = e->g->nodes[b.node];
        return e->buf[n->mem] + n->mem_offset + b.offset;
    }
    case CG_BIND_WS: return e->ws + b.offset;
    case CG_BIND_STATE: return e->state + (int64_t)b.node * e->g->mem_size[IR_MEM_PARAM] + b.offset;
    }
    return NULL;
}

static bool mini_init(mini *e, const ir_graph *g, cg_program *p)
{
    memset(e, 0, sizeof *e);
    e->g = g;
    e->p = p;
    diag d;
    diag_init(&d, stderr);
    char *src = cg_render_c(p);
    /* Single-threaded kernels (the sanitizer build's flags kept): this test
     * links no OpenMP runtime (tgc does, through OpenBLAS), and closing the
     * last kernel library would unload one under its idle worker threads. */
    char flags[512];
    const char *env = getenv("TGC_KERNEL_CFLAGS");
    snprintf(flags, sizeof flags, "%s -fno-openmp", env ? env : "");
    rt_cc_options cc = {.extra_flags = flags};
    e->so = rt_cc_load(src, &cc, &d);
    free(src);
    diag_free(&d);
    if (!e->so) return false;
    e->fn = xcalloc((size_t)p->nkernels + 1, sizeof *e->fn);
    for (int k = 0; k < p->nkernels; k++)
        if (!(e->fn[k] = (rt_kernel_fn)rt_so_sym(e->so, p->kernels[k]->name))) return false;
    for (int m = IR_MEM_INPUT; m < IR_MEM_COUNT; m++) e->buf[m] = xcalloc((size_t)g->mem_size[m] + 64, 1);
    e->ws = xcalloc((size_t)p->workspace_bytes + 64, 1);
    e->state_bytes = p->state_slots * g->mem_size[IR_MEM_PARAM];
    e->state = xcalloc((size_t)e->state_bytes + 64, 1);
    e->lt = xcalloc((size_t)p->ninstrs + 1, sizeof *e->lt);
    e->rt.tp_size = 1;
    e->rt.loss_scale_float = 1.0f;
    e->rt.loss_scale_double = 1.0;
    e->rt.seed = 1234;
    e->rt.lr_float = 0.01f, e->rt.lr_double = 0.01;
    return true;
}

static void mini_free(mini *e)
{
    for (int m = 0; m < IR_MEM_COUNT; m++) free(e->buf[m]);
    for (int i = 0; e->lt && i < e->p->ninstrs; i++) rt_lt_gemm_free(e->lt[i]);
    free(e->lt);
    free(e->ws);
    free(e->state);
    free(e->fn);
    rt_so_close(e->so);
}

/* The row-major reference of a program GEMM (what OpenBLAS computes). */
static void gemm_rowmajor(const cg_gemm *g, const float *a, const float *b, float *c)
{
    for (int64_t t = 0; t < g->batch; t++) {
        const float *A = a + t * g->stride_a, *Bm = b + t * g->stride_b;
        float *C = c + t * g->stride_c;
        for (int64_t i = 0; i < g->m; i++)
            for (int64_t j = 0; j < g->n; j++) {
                double acc = 0;
                for (int64_t k = 0; k < g->k; k++) {
                    float x = g->ta ? A[k * g->lda + i] : A[i * g->lda + k];
                    float y = g->tb ? Bm[j * g->ldb + k] : Bm[k * g->ldb + j];
                    acc += (double)x * y;
                }
                C[i * g->ldc + j] = (float)(g->alpha * acc + (g->beta != 0 ? g->beta * C[i * g->ldc + j] : 0));
            }
    }
}

static float gelu_f(float x)
{
    const float c = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

static float dgelu_f(float x)
{
    const float c = 0.7978845608028654f;
    float u = c * (x + 0.044715f * x * x * x), t = tanhf(u);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * 0.044715f * x * x);
}

/* cuBLASLt's column-major GEMM with its epilogues, driven by what the
 * descriptors hold: D = alpha op(A) op(B) + beta C, op(A) [M, K]. */
static void gemm_lt(const rt_lt_info *o, double alpha, double beta, const float *A, const float *Bm, float *D)
{
    int64_t M = (int64_t)o->rows[D_], N = (int64_t)o->cols[D_];
    bool ta = o->transa == CUBLAS_OP_T, tb = o->transb == CUBLAS_OP_T;
    int64_t K = ta ? (int64_t)o->rows[A_] : (int64_t)o->cols[A_];
    int64_t lda = o->ld[A_], ldb = o->ld[B_], ldd = o->ld[D_];
    float *bias = (float *)o->bias, *aux = (float *)o->aux;
    for (int32_t t = 0; t < o->batch[D_]; t++) {
        const float *a = A + t * o->stride[A_], *b = Bm + t * o->stride[B_];
        float *d = D + t * o->stride[D_];
        for (int64_t j = 0; j < N; j++)
            for (int64_t i = 0; i < M; i++) {
                double acc = 0;
                for (int64_t k = 0; k < K; k++) {
                    float x = ta ? a[i * lda + k] : a[k * lda + i];
                    float y = tb ? b[k * ldb + j] : b[j * ldb + k];
                    acc += (double)x * y;
                }
                float v = (float)(alpha * acc + (beta != 0 ? beta * d[j * ldd + i] : 0));
                switch (o->epilogue) {
                case CUBLASLT_EPILOGUE_BIAS: v += bias[i]; break;
                case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
                    v += bias[i];
                    aux[j * o->aux_ld + i] = v;
                    v = gelu_f(v);
                    break;
                case CUBLASLT_EPILOGUE_DGELU_BGRAD: v *= dgelu_f(aux[j * o->aux_ld + i]); break;
                default: break;
                }
                d[j * ldd + i] = v;
            }
        if (o->epilogue == CUBLASLT_EPILOGUE_BGRADB) /* sum of op(B) [K, N] over K */
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) s += tb ? b[k * ldb + j] : b[j * ldb + k];
                bias[j] = (float)s;
            }
        if (o->epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD) /* sum of D over N */
            for (int64_t i = 0; i < M; i++) {
                double s = 0;
                for (int64_t j = 0; j < N; j++) s += d[j * ldd + i];
                bias[i] = (float)s;
            }
    }
}

static bool mini_step(mini *e, bool lt)
{
    void *io[KMAX_ARGS];
    for (int i = 0; i < e->p->ninstrs; i++) {
        const cg_instr *in = &e->p->instrs[i];
        if (in->kind == CG_COMM) return false; /* serial programs only */
        if (in->kind == CG_KERNEL) {
            const kernel *k = e->p->kernels[in->kernel];
            for (int a = 0; a < k->nargs; a++) io[a] = resolve(e, e->p->binds[in->kernel][a]);
            e->fn[in->kernel](io, &e->rt);
            continue;
        }
        const cg_gemm *g = &in->gemm;
        void *a = resolve(e, g->a), *b = resolve(e, g->b), *c = resolve(e, g->c);
        if (!lt) {
            gemm_rowmajor(g, a, b, c);
            continue;
        }
        diag d;
        diag_init(&d, stderr);
        if (!e->lt[i] && !(e->lt[i] = rt_lt_gemm_new(g, &d))) return false;
        void *bias = g->epilogue != CG_EPI_NONE ? resolve(e, g->bias) : NULL;
        void *aux = g->epilogue == CG_EPI_GELU_AUX_BIAS || g->epilogue == CG_EPI_DGELU_BGRAD ? resolve(e, g->aux) : NULL;
        rt_lt_info o;
        bool ok = (g->epilogue == CG_EPI_NONE || rt_lt_gemm_bind(e->lt[i], bias, aux, &d)) &&
                  rt_lt_gemm_info(e->lt[i], &o, &d);
        diag_free(&d);
        if (!ok) return false;
        /* cuBLASLt's A is the program's B. */
        gemm_lt(&o, g->alpha, g->beta, b, a, c);
    }
    return true;
}

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Parameters uniform in [-0.2, 0.2); integer inputs 0 or 1 (valid tokens,
 * token types, labels and masks of every sample). */
static void fill(mini *e, uint64_t seed)
{
    for (int i = 0; i < e->g->nnodes; i++) {
        const ir_node *n = e->g->nodes[i];
        if (!(n->flags & (IR_NF_PARAM | IR_NF_INPUT))) continue;
        unsigned char *p = e->buf[n->mem] + n->mem_offset;
        int64_t count = ir_shape_numel(&n->shape);
        for (int64_t j = 0; j < count; j++) {
            uint64_t r = lcg(&seed);
            switch (n->dtype) {
            case IR_F32: ((float *)p)[j] = (float)((double)(r % 100000) / 250000.0 - 0.2); break;
            case IR_I32: ((int32_t *)p)[j] = (int32_t)(r & 1); break;
            case IR_U8: p[j] = (unsigned char)(1 - (r % 8 == 0)); break;
            default: break;
            }
        }
    }
}

/* max |x - y| / (max |y| + tiny) over a buffer of floats. */
static double rel_diff(const float *x, const float *y, int64_t n)
{
    double dmax = 0, ymax = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)x[i] - y[i]);
        if (!(d <= dmax)) dmax = d; /* NaN sticks */
        if (fabs(y[i]) > ymax) ymax = fabs(y[i]);
    }
    return dmax / ymax;
}

static void check_same_step(const char *sample, bool fuse)
{
    ir_graph *g = build(sample, 1, false, fuse);
    CHECK(g != NULL);
    if (!g) return;
    diag d;
    diag_init(&d, stderr);
    cg_program *pc = cg_build_target(g, CG_TARGET_CPU, &d), *pg = cg_build_target(g, CG_TARGET_CUDA, &d);
    diag_free(&d);
    mini cpu, gpu;
    bool ok = pc && pg && mini_init(&cpu, g, pc) && mini_init(&gpu, g, pg);
    CHECK(ok);
    if (ok) {
        fill(&cpu, 42);
        fill(&gpu, 42);
        CHECK(mini_step(&cpu, false));
        CHECK(mini_step(&gpu, true));
        double worst_grad = 0, worst_param = 0, worst_act = 0;
        for (int i = 0; i < g->nnodes; i++) {
            const ir_node *n = g->nodes[i];
            if (n->dtype != IR_F32 || n->mem == IR_MEM_NONE) continue;
            int64_t count = ir_shape_numel(&n->shape);
            if (n->mem == IR_MEM_GRAD || n->mem == IR_MEM_PARAM) {
                const float *x = (const float *)(gpu.buf[n->mem] + n->mem_offset);
                const float *y = (const float *)(cpu.buf[n->mem] + n->mem_offset);
                double r = rel_diff(x, y, count);
                if (n->mem == IR_MEM_GRAD && r > worst_grad) worst_grad = r;
                if (n->mem == IR_MEM_PARAM && r > worst_param) worst_param = r;
                if (!(r < 1e-5)) fprintf(stderr, "%s: %%%s differs by %g (relative)\n", sample, n->name, r);
                CHECK(r < 1e-5);
            }
            if (n->flags & IR_NF_LOSS) {
                float lx = *(const float *)(gpu.buf[n->mem] + n->mem_offset);
                float ly = *(const float *)(cpu.buf[n->mem] + n->mem_offset);
                worst_act = fabs((double)lx - ly) / fabs((double)ly);
                CHECK(isfinite(ly) && ly > 0 && worst_act < 1e-6);
            }
        }
        printf("%-9s %-7s one step, CUDA program vs CPU program: grads %.2g, params %.2g, loss %.2g (relative)\n",
               sample, fuse ? "fused" : "unfused", worst_grad, worst_param, worst_act);
        mini_free(&cpu);
        mini_free(&gpu);
    }
    cg_program_free(pc);
    cg_program_free(pg);
    ir_graph_free(g);
}

/* ---- the pieces on their own ------------------------------------------------------------- */

/* Every transpose combination and a batched GEMM: the column-major GEMM
 * driven by the descriptors equals the row-major one. */
static void check_layouts(void)
{
    uint64_t seed = 7;
    for (int v = 0; v < 5; v++) {
        cg_gemm g = {.dtype = IR_F32, .ta = v & 1, .tb = (v >> 1) & 1, .m = 5, .n = 7, .k = 3, .alpha = 0.5,
                     .batch = v == 4 ? 3 : 1};
        g.lda = (g.ta ? g.m : g.k) + (v == 3), g.ldb = (g.tb ? g.k : g.n) + 2 * (v == 3), g.ldc = g.n + (v == 3);
        g.stride_a = 64, g.stride_b = 64, g.stride_c = 64;
        float a[256], b[256], c1[256] = {0}, c2[256] = {0};
        for (int i = 0; i < 256; i++) a[i] = (float)(lcg(&seed) % 17) - 8, b[i] = (float)(lcg(&seed) % 13) - 6;
        diag d;
        diag_init(&d, stderr);
        rt_lt_gemm *m = rt_lt_gemm_new(&g, &d);
        rt_lt_info o;
        CHECK(m && rt_lt_gemm_info(m, &o, &d));
        if (m) {
            gemm_rowmajor(&g, a, b, c1);
            gemm_lt(&o, g.alpha, g.beta, b, a, c2);
            CHECK(memcmp(c1, c2, sizeof c1) == 0);
        }
        rt_lt_gemm_free(m);
        diag_free(&d);
    }
}

static void check_errors(void)
{
    capture cap;
    cap_init(&cap);
    cg_gemm g = {.dtype = IR_I32, .m = 2, .n = 2, .k = 2, .lda = 2, .ldb = 2, .ldc = 2, .batch = 1, .alpha = 1};
    CHECK(rt_lt_gemm_new(&g, &cap.d) == NULL);
    CHECK(strstr(cap_text(&cap), "f32, f64, bf16 or f16, not i32") != NULL);
    g.dtype = IR_F32, g.ldb = 1;
    CHECK(rt_lt_gemm_new(&g, &cap.d) == NULL);
    CHECK(strstr(cap_text(&cap), "ldb=1") != NULL);
    g.ldb = 2, g.epilogue = CG_EPI_GELU_AUX_BIAS, g.ldaux = 4;
    CHECK(rt_lt_gemm_new(&g, &cap.d) == NULL);
    CHECK(strstr(cap_text(&cap), "aux leading dimension 4") != NULL);
    g.epilogue = CG_EPI_BIAS, g.batch = 2;
    CHECK(rt_lt_gemm_new(&g, &cap.d) == NULL);
    CHECK(strstr(cap_text(&cap), "batch 2") != NULL);
    g.batch = 1;
    rt_lt_gemm *m = rt_lt_gemm_new(&g, &cap.d);
    CHECK(m != NULL);
    if (m) {
        CHECK(!rt_lt_gemm_bind(m, NULL, NULL, &cap.d));
        CHECK(strstr(cap_text(&cap), "epilogue bias needs a bias pointer") != NULL);
        char *line = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&line, &len);
        rt_lt_gemm_describe(m, f);
        fclose(f);
        CHECK_STR(line, "cublasLt m=2 n=2 k=2 op=NN lda=2 ldb=2 ldc=2 batch=1 f32 compute=32F epilogue=BIAS\n");
        free(line);
        rt_lt_gemm_free(m);
    }
    /* TF32 is opt-in. */
    setenv("TGC_CUDA_TF32", "1", 1);
    g.epilogue = CG_EPI_NONE;
    m = rt_lt_gemm_new(&g, &cap.d);
    rt_lt_info o;
    CHECK(m && rt_lt_gemm_info(m, &o, &cap.d) && o.compute == CUBLAS_COMPUTE_32F_FAST_TF32);
    rt_lt_gemm_free(m);
    unsetenv("TGC_CUDA_TF32");
    cap_free(&cap);
}

/* 16-bit GEMMs: bf16 / f16 A, B, C, D with fp32 compute and scale (TF32
 * or not), every layout of check_info, batched; epilogues on unbatched ones
 * with a 16-bit bias and aux; f64 refuses an epilogue. */
static void check_16bit(void)
{
    setenv("TGC_CUDA_TF32", "1", 1); /* no effect on 16-bit inputs */
    const ir_dtype types[2] = {IR_BF16, IR_F16};
    for (int t = 0; t < 2; t++)
        for (int v = 0; v < 6; v++) {
            cg_gemm g = {.dtype = types[t], .ta = v & 1, .tb = (v >> 1) & 1, .m = 24, .n = 40, .k = 16,
                         .alpha = 1, .beta = v == 5, .batch = v == 4 ? 3 : 1};
            g.lda = g.ta ? g.m : g.k, g.ldb = g.tb ? g.k : g.n, g.ldc = g.n;
            g.stride_a = 24 * 16, g.stride_b = 40 * 16, g.stride_c = 24 * 40;
            if (v == 5) g.epilogue = t ? CG_EPI_GELU_AUX_BIAS : CG_EPI_BIAS, g.ldaux = 40;
            capture cap;
            cap_init(&cap);
            rt_lt_gemm *m = rt_lt_gemm_new(&g, &cap.d);
            CHECK(m != NULL);
            if (!m) {
                fprintf(stderr, "16-bit case %d/%d: %s", t, v, cap_text(&cap));
                cap_free(&cap);
                continue;
            }
            const void *bias = (const void *)(uintptr_t)0x10000;
            void *aux = (void *)(uintptr_t)0x90000000u;
            if (g.epilogue != CG_EPI_NONE) CHECK(rt_lt_gemm_bind(m, bias, aux, &cap.d));
            rt_lt_info o;
            CHECK(rt_lt_gemm_info(m, &o, &cap.d));
            check_info(&g, &o, bias, aux);
            if (v == 5) {
                char *line = NULL;
                size_t len = 0;
                FILE *f = open_memstream(&line, &len);
                rt_lt_gemm_describe(m, f);
                fclose(f);
                CHECK(strstr(line, t ? " f16 compute=32F epilogue=GELU_AUX_BIAS" : " bf16 compute=32F epilogue=BIAS"));
                free(line);
            }
            rt_lt_gemm_free(m);
            cap_free(&cap);
        }
    unsetenv("TGC_CUDA_TF32");
    capture cap;
    cap_init(&cap);
    cg_gemm g = {.dtype = IR_F64, .m = 2, .n = 2, .k = 2, .lda = 2, .ldb = 2, .ldc = 2, .batch = 1, .alpha = 1,
                 .epilogue = CG_EPI_BIAS};
    CHECK(rt_lt_gemm_new(&g, &cap.d) == NULL);
    CHECK(strstr(cap_text(&cap), "only unbatched f32, bf16 or f16") != NULL);
    cap_free(&cap);
}

/* Mixed precision: every GEMM writes its 16-bit C either as a 16-bit GEMM
 * (cg_gemm.dtype bf16, cuBLASLt: with its epilogues, whose bias and aux are
 * 16-bit values too) or, staged, in fp32 into the workspace that the next
 * kernel rounds into C's 16-bit buffer (then without an epilogue). */
static void check_rounding(void)
{
    ir_graph *g = build_prec("gpt", 1, false, false, IR_BF16);
    CHECK(g != NULL);
    if (!g) return;
    diag d;
    diag_init(&d, stderr);
    cg_program *p = cg_build_target(g, CG_TARGET_CUDA, &d);
    diag_free(&d);
    CHECK(p != NULL);
    int gemms = 0, epilogues = 0;
    for (int i = 0; p && i < p->ninstrs; i++) {
        const cg_instr *in = &p->instrs[i];
        if (in->kind != CG_GEMM) continue;
        gemms++;
        epilogues += in->gemm.epilogue != CG_EPI_NONE;
        /* The fused LM head's GEMMs write a chunk of logits into its scratch
         * in the workspace (or dx / dW rows), by design (docs/fusion.md). */
        ir_op op = g->nodes[in->node]->op;
        bool lmhead = op == IR_OP_LM_HEAD_CE || op == IR_OP_LM_HEAD_CE_BACK;
        if (in->gemm.dtype == IR_BF16) {
            CHECK(lmhead || in->gemm.c.kind == CG_BIND_NODE);
            CHECK(in->gemm.epilogue == CG_EPI_NONE || in->gemm.bias.kind == CG_BIND_NODE);
            continue;
        }
        CHECK(in->gemm.dtype == IR_F32 && in->gemm.c.kind == CG_BIND_WS && in->gemm.epilogue == CG_EPI_NONE);
        bool rounded = false;
        if (i + 1 < p->ninstrs && p->instrs[i + 1].kind == CG_KERNEL) {
            const kernel *k = p->kernels[p->instrs[i + 1].kernel];
            const cg_bind *b = p->binds[p->instrs[i + 1].kernel];
            for (int a = 0; a < k->nargs; a++)
                rounded |= k->args[a].output && k->args[a].dtype == IR_BF16 && b[a].kind == CG_BIND_NODE &&
                           b[a].node == in->node;
        }
        CHECK(rounded);
    }
    /* gpt's 4 linears: BIAS and BGRADB each, as in fp32, when the GEMMs are 16-bit. */
    CHECK(gemms > 0 && epilogues == (cg_gemm16_native(CG_TARGET_CUDA) ? 8 : 0));
    cg_program_free(p);
    ir_graph_free(g);
}

/* TGC_CUDA_EPILOGUES=0: the CUDA program is the CPU one. */
static void check_switch(void)
{
    ir_graph *g = build("gpt", 1, false, true);
    CHECK(g != NULL);
    if (!g) return;
    diag d;
    diag_init(&d, stderr);
    setenv("TGC_CUDA_EPILOGUES", "0", 1);
    cg_program *p = cg_build_target(g, CG_TARGET_CUDA, &d), *q = cg_build(g, &d);
    unsetenv("TGC_CUDA_EPILOGUES");
    CHECK(p && q && p->ninstrs == q->ninstrs && p->nkernels == q->nkernels);
    for (int i = 0; p && q && i < p->ninstrs; i++)
        CHECK(p->instrs[i].kind != CG_GEMM || p->instrs[i].gemm.epilogue == CG_EPI_NONE);
    cg_program_free(p);
    cg_program_free(q);
    diag_free(&d);
    ir_graph_free(g);
}

/* ---- 4. on a GPU -------------------------------------------------------------------------- */

typedef struct dev_buf {
    float *host, *dev;
    size_t n;
} dev_buf;

static bool dev_buf_new(const rt_cuda_api *cu, dev_buf *b, size_t n, uint64_t *seed)
{
    b->n = n;
    b->host = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) b->host[i] = (float)((double)(lcg(seed) % 2001) / 1000.0 - 1.0);
    b->dev = NULL;
    return cu->Malloc((void **)&b->dev, n * sizeof(float)) == cudaSuccess &&
           cu->Memcpy(b->dev, b->host, n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess;
}

/* max |gpu - host| / max |host| of a buffer the GEMM wrote. */
static double dev_buf_diff(const rt_cuda_api *cu, const dev_buf *b, const float *want)
{
    float *got = xmalloc(b->n * sizeof(float));
    double r = 1.0;
    if (cu->Memcpy(got, b->dev, b->n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess)
        r = rel_diff(got, want, (int64_t)b->n);
    free(got);
    return r;
}

/* One GEMM on the device and on the host from the same inputs. */
static void check_gpu_gemm(const rt_cuda_api *cu, rt_lt *lt, cg_gemm g, const char *what)
{
    uint64_t seed = 99;
    size_t na = (size_t)(g.batch > 1 ? g.stride_a * g.batch : (g.ta ? g.k : g.m) * g.lda);
    size_t nb = (size_t)(g.batch > 1 ? g.stride_b * g.batch : (g.tb ? g.n : g.k) * g.ldb);
    size_t nc = (size_t)(g.batch > 1 ? g.stride_c * g.batch : g.m * g.ldc);
    size_t nbias = (size_t)(g.epilogue == CG_EPI_BGRADB ? g.m : g.n), naux = (size_t)(g.m * g.ldaux);
    dev_buf a, b, c, bias, aux;
    bool ok = dev_buf_new(cu, &a, na, &seed) && dev_buf_new(cu, &b, nb, &seed) && dev_buf_new(cu, &c, nc, &seed) &&
              dev_buf_new(cu, &bias, nbias, &seed) && dev_buf_new(cu, &aux, naux ? naux : 1, &seed);
    CHECK(ok);
    diag d;
    diag_init(&d, stderr);
    rt_lt_gemm *m = ok ? rt_lt_gemm_new(&g, &d) : NULL;
    CHECK(m != NULL);
    bool epi_aux = g.epilogue == CG_EPI_GELU_AUX_BIAS || g.epilogue == CG_EPI_DGELU_BGRAD;
    const void *bias_ptr = g.epilogue != CG_EPI_NONE ? bias.dev : NULL;
    void *aux_ptr = epi_aux ? aux.dev : NULL;
    /* Twice: the second run reuses the cached algorithm. */
    int rc = m ? rt_lt_run(lt, m, a.dev, b.dev, c.dev, bias_ptr, aux_ptr) : -1;
    if (!rc) rc = rt_lt_run(lt, m, a.dev, b.dev, c.dev, bias_ptr, aux_ptr);
    if (rc) fprintf(stderr, "%s: %s\n", what, rt_lt_error(lt));
    CHECK(rc == 0 && cu->DeviceSynchronize() == cudaSuccess);
    rt_lt_info o;
    if (rc == 0 && rt_lt_gemm_info(m, &o, &d)) {
        /* The host reference on host copies: the descriptors hold device pointers. */
        o.bias = g.epilogue != CG_EPI_NONE ? bias.host : NULL;
        o.aux = epi_aux ? aux.host : NULL;
        gemm_lt(&o, g.alpha, g.beta, b.host, a.host, c.host);
        double dc = dev_buf_diff(cu, &c, c.host), db = g.epilogue != CG_EPI_NONE ? dev_buf_diff(cu, &bias, bias.host) : 0;
        double dx = g.epilogue == CG_EPI_GELU_AUX_BIAS ? dev_buf_diff(cu, &aux, aux.host) : 0;
        printf("GPU %-34s C %.1e  bias %.1e  aux %.1e (relative)\n", what, dc, db, dx);
        CHECK(dc < 1e-5 && db < 1e-5 && dx < 1e-5);
    }
    rt_lt_gemm_free(m);
    dev_buf *all[] = {&a, &b, &c, &bias, &aux};
    for (size_t i = 0; i < ARRAY_LEN(all); i++) {
        if (all[i]->dev) cu->Free(all[i]->dev);
        free(all[i]->host);
    }
    diag_free(&d);
}

/* TFLOP/s of a GPT-2 sized linear (8192 tokens, 768 -> 3072), with and
 * without its bias epilogue, exact fp32 and TF32: what the epilogue costs. */
static void bench_gpu(const rt_cuda_api *cu, rt_lt *lt, cudaStream_t s)
{
    const int64_t rows = 8192, in = 768, out = 3072;
    float *x = NULL, *w = NULL, *y = NULL, *b = NULL;
    bool ok = cu->Malloc((void **)&x, (size_t)(rows * in) * 4) == cudaSuccess &&
              cu->Malloc((void **)&w, (size_t)(out * in) * 4) == cudaSuccess &&
              cu->Malloc((void **)&y, (size_t)(rows * out) * 4) == cudaSuccess &&
              cu->Malloc((void **)&b, (size_t)out * 4) == cudaSuccess;
    cudaEvent_t e0 = NULL, e1 = NULL;
    ok = ok && cu->EventCreate(&e0) == cudaSuccess && cu->EventCreate(&e1) == cudaSuccess;
    for (int v = 0; v < 4 && ok; v++) {
        bool tf32 = v >= 2, bias = v & 1;
        if (tf32) setenv("TGC_CUDA_TF32", "1", 1);
        cg_gemm g = {.dtype = IR_F32, .tb = true, .m = rows, .n = out, .k = in, .lda = in, .ldb = in, .ldc = out,
                     .batch = 1, .alpha = 1, .epilogue = bias ? CG_EPI_BIAS : CG_EPI_NONE};
        diag d;
        diag_init(&d, stderr);
        rt_lt_gemm *m = rt_lt_gemm_new(&g, &d);
        unsetenv("TGC_CUDA_TF32");
        diag_free(&d);
        int rc = m ? 0 : -1, iters = 20;
        for (int i = 0; i < 3 && !rc; i++) rc = rt_lt_run(lt, m, x, w, y, bias ? b : NULL, NULL);
        cu->EventRecord(e0, s);
        for (int i = 0; i < iters && !rc; i++) rc = rt_lt_run(lt, m, x, w, y, bias ? b : NULL, NULL);
        cu->EventRecord(e1, s);
        float ms = 0;
        ok = !rc && cu->StreamSynchronize(s) == cudaSuccess && cu->EventElapsedTime(&ms, e0, e1) == cudaSuccess;
        if (ok)
            printf("GPU bench: linear %lldx%lld -> %lld, %s%s: %.3f ms, %.1f TFLOP/s\n", (long long)rows,
                   (long long)in, (long long)out, tf32 ? "TF32" : "fp32", bias ? " + EPILOGUE_BIAS" : "",
                   ms / iters, 2.0 * rows * in * out / (ms / iters * 1e-3) / 1e12);
        rt_lt_gemm_free(m);
    }
    CHECK(ok);
    if (e0) cu->EventDestroy(e0);
    if (e1) cu->EventDestroy(e1);
    float *all[] = {x, w, y, b};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        if (all[i]) cu->Free(all[i]);
}

static void check_gpu(const rt_cuda_api *cu)
{
    diag d;
    diag_init(&d, stderr);
    cudaStream_t s = NULL;
    void *ws = NULL;
    size_t ws_bytes = 32u << 20; /* what cuBLASLt asks on Hopper */
    /* A blocking stream: its work waits for the plain cudaMemcpy calls (legacy default stream). */
    CHECK(cu->SetDevice(0) == cudaSuccess && cu->StreamCreateWithFlags(&s, cudaStreamDefault) == cudaSuccess);
    CHECK(cu->Malloc(&ws, ws_bytes) == cudaSuccess);
    rt_lt *lt = rt_lt_new(s, ws, ws_bytes, &d);
    CHECK(lt != NULL);
    if (lt) {
        for (int v = 0; v < 4; v++) {
            bool ta = v & 1, tb = v & 2;
            cg_gemm g = {.dtype = IR_F32, .ta = ta, .tb = tb, .m = 96, .n = 80, .k = 72, .batch = 1, .alpha = 1};
            g.lda = ta ? g.m : g.k, g.ldb = tb ? g.k : g.n, g.ldc = g.n;
            char what[32];
            snprintf(what, sizeof what, "ta=%d tb=%d", ta, tb);
            check_gpu_gemm(cu, lt, g, what);
        }
        cg_gemm bmm = {.dtype = IR_F32, .tb = true, .m = 32, .n = 40, .k = 16, .lda = 16, .ldb = 16, .ldc = 40,
                       .batch = 6, .stride_a = 32 * 16, .stride_b = 40 * 16, .stride_c = 32 * 40, .alpha = 0.125};
        check_gpu_gemm(cu, lt, bmm, "batched, alpha 0.125");
        /* The epilogues, as the program uses them: a linear (tb), its
         * weight gradient (ta) and the dX of the next linear (no transpose). */
        cg_gemm lin = {.dtype = IR_F32, .tb = true, .m = 128, .n = 256, .k = 64, .lda = 64, .ldb = 64, .ldc = 256,
                       .batch = 1, .alpha = 1, .epilogue = CG_EPI_BIAS};
        check_gpu_gemm(cu, lt, lin, "linear + EPILOGUE_BIAS");
        lin.epilogue = CG_EPI_GELU_AUX_BIAS, lin.ldaux = 256;
        check_gpu_gemm(cu, lt, lin, "linear + GELU_AUX_BIAS");
        cg_gemm dx = {.dtype = IR_F32, .m = 128, .n = 256, .k = 64, .lda = 64, .ldb = 256, .ldc = 256, .batch = 1,
                      .alpha = 1, .epilogue = CG_EPI_DGELU_BGRAD, .ldaux = 256};
        check_gpu_gemm(cu, lt, dx, "dX + DGELU_BGRAD");
        cg_gemm dw = {.dtype = IR_F32, .ta = true, .m = 256, .n = 64, .k = 128, .lda = 256, .ldb = 64, .ldc = 64,
                      .batch = 1, .alpha = 1, .epilogue = CG_EPI_BGRADB};
        check_gpu_gemm(cu, lt, dw, "dW + BGRADB");
        bench_gpu(cu, lt, s);
    }
    rt_lt_free(lt);
    if (ws) cu->Free(ws);
    if (s) cu->StreamDestroy(s);
    diag_free(&d);
}

int main(int argc, char **argv)
{
    if (argc > 1) samples_dir = argv[1];
    unsetenv("TGC_CUDA_TF32");
    unsetenv("TGC_CUDA_EPILOGUES");
    diag d;
    diag_init(&d, stderr);
    if (!rt_lt_load(&d)) {
        printf("skipped: libcublasLt cannot be loaded\n");
        diag_free(&d);
        return 77;
    }
    diag_free(&d);
    check_layouts();
    check_errors();
    check_16bit();
    check_switch();
    check_rounding();

    static const struct { const char *sample; int tp; bool sp; } cases[] = {
        {"gpt", 1, false}, {"bert", 1, false}, {"llama", 1, false}, {"custom_op", 1, false},
        {"gpt", 2, false}, {"gpt", 2, true},
    };
    for (size_t i = 0; i < 2 * ARRAY_LEN(cases); i++) {
        bool fuse = i >= ARRAY_LEN(cases);
        size_t c = i % ARRAY_LEN(cases);
        char what[64];
        snprintf(what, sizeof what, "%s%s%s%s", cases[c].sample, cases[c].tp > 1 ? " --tp 2" : "",
                 cases[c].sp ? " --sp" : "", fuse ? "" : " --no-fuse");
        ir_graph *g = build(cases[c].sample, cases[c].tp, cases[c].sp, fuse);
        CHECK(g != NULL);
        if (!g) continue;
        diag_init(&d, stderr);
        cg_program *cuda = cg_build_target(g, CG_TARGET_CUDA, &d), *cpu = cg_build(g, &d);
        diag_free(&d);
        CHECK(cuda && cpu);
        if (cuda && cpu) {
            epi_counts n = check_descriptors(cuda, what);
            int linears = check_choices(g, cuda, cpu, n, what);
            /* What the samples hold: GPT (one layer) has four linears with a
             * bias, two of them column-parallel; fused, the MLP's first is
             * bias_gelu's (tanh: GELU_AUX_BIAS forward, DGELU_BGRAD
             * backward). LLaMA has no bias. */
            bool gpt = strcmp(cases[c].sample, "gpt") == 0;
            if (gpt && !fuse) CHECK(linears == (cases[c].tp > 1 ? 2 : 4));
            if (gpt && fuse) CHECK(n.gelu == 1 && n.dgelu == 1);
            if (strcmp(cases[c].sample, "llama") == 0) CHECK(linears == 0 && n.bgradb == 0);
            if (strcmp(cases[c].sample, "bert") == 0 && !fuse) CHECK(linears > 0);
        }
        cg_program_free(cuda);
        cg_program_free(cpu);
        ir_graph_free(g);
    }
    for (size_t i = 0; i < 8; i++) check_same_step(cases[i % 4].sample, i >= 4);

    /* Whether a GPU is here (silently: no device is the normal case). */
    FILE *null = fopen("/dev/null", "w");
    diag_init(&d, null ? null : stderr);
    int devices = rt_cuda_device_count(&d);
    diag_free(&d);
    if (null) fclose(null);
    diag_init(&d, stderr);
    const rt_cuda_api *cu = devices > 0 ? rt_cuda_load(&d) : NULL;
    diag_free(&d);
    if (cu) check_gpu(cu);
    else printf("no GPU: rt_lt_run was not exercised\n");
    CHECK_DONE();
}
