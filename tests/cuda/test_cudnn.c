/* --attention-backend cudnn without a GPU (runtime/backend/cudnn.h,
 * docs/attention.md "cuDNN").
 *
 * 1. The record: a graph compiled with each --attention-backend reads it
 *    back from its passes line.
 * 2. The static choice: which attention parameters cuDNN is given, and the
 *    reason for each it is not (dtype, dropout, padding mask, KV cache,
 *    non-square causal, head dims, heads).
 * 3. The refusals of explicit cudnn on whole programs: another backend,
 *    fp32 storage, dropout, bert's padding mask; gpt and llama (grouped-
 *    query heads) in bf16 without dropout pass; auto never refuses.
 * 4. The library: dlopen and cudnnGetVersion (9.0 or newer), and every
 *    operation descriptor of the forward and backward graphs of the
 *    programs' attention kernels (and of grouped- and multi-query, f16,
 *    d = 128 shapes) finalizes, which checks the attribute names, types,
 *    shapes and data types of the SDPA pattern without a handle.
 * 5. A handle: without a device cudnnCreate fails with a message; on a
 *    GPU the heuristics find an engine for each graph, within the
 *    workspace cap.
 * 6. The graphs' mathematics: the same operation list, evaluated on the
 *    host in double (rt_dnn_attn_eval: matmuls, pointwise ops, reductions,
 *    reshapes as strided views), against attention written out here: the
 *    forward's o and lse, the backward's dq, dk, dv, causal MHA (with and
 *    without the fp32 dQ accumulator), grouped-query with s_q != s_k,
 *    multi-query; within 1e-12. What it cannot check is cuDNN's reading
 *    of the graph: that needs a GPU (scripts/gpu_check.sh cudnn).
 *
 * Parts 1-3 need no library; the test exits 77 (skipped) after them when
 * libcudnn cannot be loaded. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/capture.h"
#include "../unit/check.h"
#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "passes/pass.h"
#include "runtime/backend/cudnn.h"
#include "support/file.h"
#include "support/util.h"

static const char *samples_dir = "samples";

static ir_graph *build(const char *sample, ir_dtype precision, int backend, bool dropout)
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
    fe_override sets[8] = {{"layers", "1", false}, {"hidden", "64", false}, {"heads", "2", false},
                           {"seq", "16", false},   {"batch", "2", false},   {"vocab", "64", false}};
    int nsets = 6;
    if (strcmp(sample, "llama") == 0) sets[2].value = "4", sets[nsets++] = (fe_override){"kv_heads", "2", false};
    if (strcmp(sample, "llama") != 0 && !dropout) sets[nsets++] = (fe_override){"pdrop", "0", false};
    if (strcmp(sample, "llama") == 0) sets[1].value = "128"; /* head dim 32 */
    diag d;
    diag_init(&d, stderr);
    ir_graph *g = fe_compile(path, text, len, sets, nsets, &d);
    free(text);
    pass_options po;
    pass_options_defaults(&po);
    po.precision = precision;
    po.attention_backend = backend;
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

/* ---- 1. the choice, on each attention op ----------------------------------------- */

/* Every attention and attention_back op carries the --attention-backend the
 * attention pass ran with (unfused: there are none). */
static void check_record(void)
{
    static const int b[] = {PASS_ATTENTION_AUTO, PASS_ATTENTION_TGC, PASS_ATTENTION_CUDNN, PASS_ATTENTION_UNFUSED};
    for (size_t i = 0; i < ARRAY_LEN(b); i++) {
        ir_graph *g = build("gpt", IR_BF16, b[i], false);
        CHECK(g != NULL);
        if (!g) continue;
        int ops = 0;
        for (int j = 0; j < g->nnodes; j++) {
            const ir_node *n = g->nodes[j];
            if (n->op != IR_OP_ATTENTION && n->op != IR_OP_ATTENTION_BACK) continue;
            ops++;
            CHECK(rt_attention_backend(n) == b[i]);
        }
        CHECK((ops > 0) == (b[i] != PASS_ATTENTION_UNFUSED));
        ir_graph_free(g);
    }
    int v = -1;
    CHECK(pass_attention_backend_parse("cudnn", &v) && v == PASS_ATTENTION_CUDNN);
    CHECK(!pass_attention_backend_parse("cuDNN", &v));
}

/* ---- 2. the static choice -------------------------------------------------------- */

static kattn base(void)
{
    return (kattn){.pass = KATT_FWD, .b = 2, .n = 4, .g = 4, .sq = 128, .sk = 128, .d = 64, .dv = 64,
                   .scale = 0.125, .causal = true, .q = 0, .k = 1, .v = 2, .mask = -1, .out = 3, .lse = 4,
                   .dy = -1, .dd = -1, .dq = -1, .dk = -1, .dvo = -1};
}

static void expect_no(kattn A, ir_dtype io, ir_dtype lse, const char *needle)
{
    char why[320] = "";
    bool ok = rt_dnn_attn_supported(&A, io, lse, why, sizeof why);
    CHECK(!ok);
    if (!ok && !strstr(why, needle)) {
        fprintf(stderr, "reason \"%s\" lacks \"%s\"\n", why, needle);
        CHECK(false);
    }
}

static void check_choice(void)
{
    char why[320];
    kattn A = base();
    CHECK(rt_dnn_attn_supported(&A, IR_BF16, IR_F32, why, sizeof why));
    CHECK(rt_dnn_attn_supported(&A, IR_F16, IR_F32, why, sizeof why));
    expect_no(A, IR_F32, IR_F32, "are f32");
    expect_no(A, IR_F64, IR_F64, "are f64");
    expect_no(A, IR_BF16, IR_BF16, "log-sum-exp is bf16");
    A.p = 0.1;
    expect_no(A, IR_BF16, IR_F32, "dropout p=0.1");
    A = base(), A.mask = 5;
    expect_no(A, IR_BF16, IR_F32, "padding mask");
    A = base(), A.pos_offset = true;
    expect_no(A, IR_BF16, IR_F32, "KV cache");
    A = base(), A.sq = 1;
    expect_no(A, IR_BF16, IR_F32, "s_q=1 queries over s_k=128");
    A.causal = false; /* a non-causal s_q != s_k is fine */
    CHECK(rt_dnn_attn_supported(&A, IR_BF16, IR_F32, why, sizeof why));
    A = base(), A.d = A.dv = 36;
    expect_no(A, IR_BF16, IR_F32, "d=36");
    A.d = A.dv = 256;
    expect_no(A, IR_BF16, IR_F32, "d=256");
    A.d = A.dv = 128;
    CHECK(rt_dnn_attn_supported(&A, IR_BF16, IR_F32, why, sizeof why));
    A = base(), A.g = 2; /* grouped-query */
    CHECK(rt_dnn_attn_supported(&A, IR_BF16, IR_F32, why, sizeof why));
    A.g = 1; /* multi-query */
    CHECK(rt_dnn_attn_supported(&A, IR_BF16, IR_F32, why, sizeof why));
    A.g = 3;
    expect_no(A, IR_BF16, IR_F32, "4 query heads do not divide into 3");
}

/* ---- 3. programs ---------------------------------------------------------------- */

static bool plan_ok(const char *sample, ir_dtype prec, int backend, bool dropout, bool cuda, const char *needle)
{
    ir_graph *g = build(sample, prec, backend, dropout);
    CHECK(g != NULL);
    if (!g) return false;
    capture c;
    cap_init(&c);
    cg_program *p = cg_build_target(g, cuda ? CG_TARGET_CUDA : CG_TARGET_CPU, &c.d);
    CHECK(p != NULL);
    bool ok = p && rt_dnn_plan_check(g, p, cuda ? "cuda" : "cpu", cuda, &c.d);
    const char *text = cap_text(&c);
    if (needle && (!text || !strstr(text, needle))) {
        fprintf(stderr, "%s: the message\n%s\nlacks \"%s\"\n", sample, text ? text : "", needle);
        CHECK(false);
    }
    if (!needle && !ok) fprintf(stderr, "%s: unexpected refusal:\n%s\n", sample, text ? text : "");
    cap_free(&c);
    if (p) cg_program_free(p);
    ir_graph_free(g);
    return ok;
}

static void check_programs(void)
{
    const int C = PASS_ATTENTION_CUDNN, A = PASS_ATTENTION_AUTO;
    CHECK(!plan_ok("gpt", IR_BF16, C, false, false, "runs on --backend cuda, not cpu"));
    CHECK(!plan_ok("gpt", IR_F32, C, false, true, "its q, k and v are f32"));
    CHECK(!plan_ok("gpt", IR_BF16, C, true, true, "dropout p=0.1"));
    CHECK(!plan_ok("bert", IR_BF16, C, false, true, "padding mask"));
    CHECK(plan_ok("gpt", IR_BF16, C, false, true, NULL));
    CHECK(plan_ok("gpt", IR_F16, C, false, true, NULL));
    CHECK(plan_ok("llama", IR_BF16, C, false, true, NULL));
    /* auto: cuDNN where it can, tgc's kernels elsewhere, never an error */
    CHECK(plan_ok("gpt", IR_F32, A, true, true, NULL));
    CHECK(plan_ok("bert", IR_BF16, A, true, false, NULL));
}

/* ---- 6. the graphs' mathematics --------------------------------------------------- */

/* Attention written out in double: the forward's o and lse, the backward's
 * dq, dk, dv, causal (s_q = s_k) or not, query head h reading key/value
 * head h / (n / g). */
static void reference(const kattn *A, const double *q, const double *k, const double *v, const double *dy,
                      double *o, double *lse, double *dq, double *dk, double *dv)
{
    int64_t B = A->b, N = A->n, G = A->g, SQ = A->sq, SK = A->sk, D = A->d, DV = A->dv, grp = N / G;
    double *p = xmalloc((size_t)SK * sizeof *p), *dp = xmalloc((size_t)SK * sizeof *dp);
    memset(dq, 0, (size_t)(B * N * SQ * D) * sizeof *dq);
    memset(dk, 0, (size_t)(B * G * SK * D) * sizeof *dk);
    memset(dv, 0, (size_t)(B * G * SK * DV) * sizeof *dv);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < N; h++)
            for (int64_t i = 0; i < SQ; i++) {
                const double *qi = q + ((b * N + h) * SQ + i) * D;
                const double *kh = k + (b * G + h / grp) * SK * D, *vh = v + (b * G + h / grp) * SK * DV;
                double m = -INFINITY, l = 0;
                for (int64_t j = 0; j < SK; j++) {
                    double z = 0;
                    for (int64_t c = 0; c < D; c++) z += qi[c] * kh[j * D + c];
                    p[j] = A->causal && j > i ? -INFINITY : A->scale * z;
                    if (p[j] > m) m = p[j];
                }
                for (int64_t j = 0; j < SK; j++) l += exp(p[j] - m);
                double L = m + log(l), *oi = o + ((b * N + h) * SQ + i) * DV;
                lse[(b * N + h) * SQ + i] = L;
                const double *dyi = dy + ((b * N + h) * SQ + i) * DV;
                double Di = 0;
                for (int64_t c = 0; c < DV; c++) oi[c] = 0;
                for (int64_t j = 0; j < SK; j++) {
                    p[j] = exp(p[j] - L);
                    dp[j] = 0;
                    for (int64_t c = 0; c < DV; c++) {
                        oi[c] += p[j] * vh[j * DV + c];
                        dp[j] += dyi[c] * vh[j * DV + c];
                    }
                    Di += p[j] * dp[j];
                }
                for (int64_t j = 0; j < SK; j++) {
                    double ds = A->scale * p[j] * (dp[j] - Di);
                    for (int64_t c = 0; c < D; c++) {
                        dq[((b * N + h) * SQ + i) * D + c] += ds * kh[j * D + c];
                        dk[((b * G + h / grp) * SK + j) * D + c] += ds * qi[c];
                    }
                    for (int64_t c = 0; c < DV; c++) dv[((b * G + h / grp) * SK + j) * DV + c] += p[j] * dyi[c];
                }
            }
    free(p);
    free(dp);
}

static double maxdiff(const double *a, const double *b, int64_t n, double *scale)
{
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        if (fabs(a[i] - b[i]) > d || a[i] != a[i] || b[i] != b[i]) d = a[i] != a[i] || b[i] != b[i] ? INFINITY : fabs(a[i] - b[i]);
        if (fabs(b[i]) > s) s = fabs(b[i]);
    }
    *scale = s;
    return d;
}

static void check_eval_case(kattn A, bool dq_accum)
{
    int64_t nq = A.b * A.n * A.sq * A.d, nk = A.b * A.g * A.sk * A.d, nv = A.b * A.g * A.sk * A.dv;
    int64_t no = A.b * A.n * A.sq * A.dv, nl = A.b * A.n * A.sq;
    double *q = xmalloc((size_t)nq * 8), *k = xmalloc((size_t)nk * 8), *v = xmalloc((size_t)nv * 8);
    double *dy = xmalloc((size_t)no * 8), *o = xmalloc((size_t)no * 8), *lse = xmalloc((size_t)nl * 8);
    double *dq = xmalloc((size_t)nq * 8), *dk = xmalloc((size_t)nk * 8), *dv = xmalloc((size_t)nv * 8);
    double *o2 = xmalloc((size_t)no * 8), *lse2 = xmalloc((size_t)nl * 8), *dq2 = xmalloc((size_t)nq * 8);
    double *dk2 = xmalloc((size_t)nk * 8), *dv2 = xmalloc((size_t)nv * 8);
    uint64_t r = 12345;
#define RND() ((double)((r = r * 6364136223846793005ull + 1442695040888963407ull) >> 11) / 9007199254740992.0 - 0.5)
    for (int64_t i = 0; i < nq; i++) q[i] = RND();
    for (int64_t i = 0; i < nk; i++) k[i] = RND();
    for (int64_t i = 0; i < nv; i++) v[i] = RND();
    for (int64_t i = 0; i < no; i++) dy[i] = RND();
#undef RND
    reference(&A, q, k, v, dy, o, lse, dq, dk, dv);
    diag d;
    diag_init(&d, stderr);
    const double *fin[] = {q, k, v}, *bin[] = {q, k, v, o, dy, lse};
    double *fout[] = {o2, lse2}, *bout[] = {dq2, dk2, dv2};
    CHECK(rt_dnn_attn_eval(&A, false, false, fin, fout, &d));
    CHECK(rt_dnn_attn_eval(&A, true, dq_accum, bin, bout, &d));
    diag_free(&d);
    const struct { const char *name; double *a, *b; int64_t n; } cmp[] = {
        {"o", o2, o, no}, {"lse", lse2, lse, nl}, {"dq", dq2, dq, nq}, {"dk", dk2, dk, nk}, {"dv", dv2, dv, nv}};
    for (size_t i = 0; i < ARRAY_LEN(cmp); i++) {
        double s, e = maxdiff(cmp[i].a, cmp[i].b, cmp[i].n, &s);
        if (!(e <= 1e-12 * (s > 1 ? s : 1)))
            fprintf(stderr, "graph %s (b=%lld n=%lld g=%lld s=%lldx%lld d=%lld causal=%d dq_accum=%d): %.3g off, "
                    "largest %.3g\n", cmp[i].name, (long long)A.b, (long long)A.n, (long long)A.g, (long long)A.sq,
                    (long long)A.sk, (long long)A.d, A.causal, dq_accum, e, s);
        CHECK(e <= 1e-12 * (s > 1 ? s : 1));
    }
    free(q), free(k), free(v), free(dy), free(o), free(lse), free(dq), free(dk), free(dv);
    free(o2), free(lse2), free(dq2), free(dk2), free(dv2);
}

static void check_eval(void)
{
    kattn A = base();
    A.b = 2, A.n = 4, A.g = 4, A.sq = A.sk = 12, A.d = A.dv = 8, A.scale = 0.35;
    check_eval_case(A, false); /* causal MHA */
    check_eval_case(A, true);  /* the fp32 dQ accumulator */
    A.causal = false, A.g = 2, A.sq = 5, A.sk = 9, A.d = A.dv = 16;
    check_eval_case(A, false); /* grouped-query, s_q != s_k */
    A.causal = true, A.g = 1, A.sq = A.sk = 7;
    check_eval_case(A, true); /* multi-query */
}

/* ---- 4, 5. the library ------------------------------------------------------------ */

/* Every forward and dK/dV attention kernel of the sample's CUDA program. */
static int program_graphs(const char *sample, ir_dtype prec, rt_dnn *h)
{
    ir_graph *g = build(sample, prec, PASS_ATTENTION_CUDNN, false);
    CHECK(g != NULL);
    if (!g) return 0;
    diag d;
    diag_init(&d, stderr);
    cg_program *p = cg_build_target(g, CG_TARGET_CUDA, &d);
    CHECK(p != NULL);
    int n = 0;
    for (int i = 0; p && i < p->ninstrs; i++) {
        if (p->instrs[i].kind != CG_KERNEL) continue;
        const kernel *k = p->kernels[p->instrs[i].kernel];
        if (k->kind != KK_ATTN || k->attn.pass == KATT_DQ) continue;
        bool bwd = k->attn.pass == KATT_DKV;
        ir_dtype io = k->args[k->attn.q].dtype;
        CHECK(io == prec);
        CHECK(k->args[k->attn.lse].dtype == IR_F32);
        CHECK(rt_dnn_attn_ops_check(&k->attn, io, bwd, &d));
        if (h) {
            char why[512] = "";
            rt_dnn_call *c = rt_dnn_call_new(h, &k->attn, io, bwd, (size_t)256 << 20, why, sizeof why);
            if (!c) fprintf(stderr, "%s: no plan: %s\n", sample, why);
            CHECK(c != NULL);
            rt_dnn_call_free(c);
        }
        n++;
    }
    if (p) cg_program_free(p);
    ir_graph_free(g);
    diag_free(&d);
    return n;
}

static void check_library(void)
{
    CHECK(rt_dnn_version() >= 90000);
    printf("cuDNN %ld\n", rt_dnn_version());
    diag d;
    diag_init(&d, stderr);
    kattn A = base();
    CHECK(rt_dnn_attn_ops_check(&A, IR_BF16, false, &d));
    CHECK(rt_dnn_attn_ops_check(&A, IR_BF16, true, &d));
    A.causal = false, A.g = 2, A.d = A.dv = 128, A.sq = 64, A.sk = 200;
    CHECK(rt_dnn_attn_ops_check(&A, IR_F16, false, &d));
    CHECK(rt_dnn_attn_ops_check(&A, IR_F16, true, &d));
    A.g = 1, A.d = A.dv = 8;
    CHECK(rt_dnn_attn_ops_check(&A, IR_BF16, true, &d));
    diag_free(&d);

    /* A handle needs a device: without one, a clear failure. */
    capture c;
    cap_init(&c);
    rt_dnn *h = rt_dnn_new(NULL, 9, &c.d);
    if (!h) {
        const char *t = cap_text(&c);
        CHECK(t && strstr(t, "cuDNN") && strstr(t, "handle"));
        printf("no device: %s", t ? t : "\n");
    }
    cap_free(&c);
    /* One layer: a forward and a dK/dV kernel in each program. */
    CHECK(program_graphs("gpt", IR_BF16, h) == 2);
    CHECK(program_graphs("gpt", IR_F16, h) == 2);
    CHECK(program_graphs("llama", IR_BF16, h) == 2);
    rt_dnn_free(h);
}

int main(int argc, char **argv)
{
    if (argc > 1) samples_dir = argv[1];
    check_record();
    check_choice();
    check_programs();
    diag d;
    diag_init(&d, stderr);
    bool have = rt_dnn_load(&d);
    diag_free(&d);
    if (!have) {
        printf("%d checks, %d failed; the library's part skipped: libcudnn cannot be loaded\n", check_count,
               check_failures);
        return check_failures ? 1 : 77;
    }
    check_library();
    check_eval();
    CHECK_DONE();
}
