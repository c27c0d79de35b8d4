/* The fused LM head and cross-entropy (ops.def lm_head_ce, docs/fusion.md):
 * per chunk of the vocabulary, a library GEMM of the chunk's logits into a
 * [rows, chunk] workspace scratch and generated row kernels that consume
 * them; the [rows, V] logits never exist.
 *
 * Forward, chunk j of rows [v0, v0 + cw) of w:
 *   S = x w[v0:v0+cw]^T                      GEMM into the scratch
 *   max_j, sumexp_j (about max_j), target_j  a row kernel, into [3][chunks][rows]
 * then one row kernel over the chunks: M = max_j max_j,
 * lse = M + log sum_j sumexp_j exp(max_j - M), the row loss lse - target
 * (0 where the label does not count), lse into the node's result 1; and the
 * mean over the counted rows, cross_entropy's.
 *
 * Backward, chunk j: S recomputed by the same GEMM; in place
 * S = (exp(S - lse) - onehot) * d loss / count (0 on ignored rows), the
 * cross_entropy_back formula; dx (+)= S w[v0:v0+cw] (beta 1 after the
 * first chunk) and dw[v0:v0+cw] = S^T x, both GEMMs; with a bias,
 * db[v0:v0+cw] = the column sums of S (a column kernel). The forward's
 * and the backward's logits add the bias in the row kernels.
 *
 * The chunk: the `chunk` attribute (--lm-head-chunk) when set, else the
 * rule: the widest chunk whose scratch stays within 4 MiB (so that the
 * GEMM's output is still in cache when the row kernel reads it) and
 * within a quarter of the vocabulary (so that the scratch is a quarter of
 * the logits at most), rounded down to a multiple of 128 rows, at least
 * 128, then evened out over the chunks that makes; V itself where that
 * is V or more. */
#include <string.h>

#include "emit_util.h"
#include "support/util.h"

#define LMHEAD_SCRATCH_BYTES (4 << 20)

int64_t cg_lm_head_chunk(int64_t rows, int64_t vocab, int64_t esz, int64_t attr)
{
    if (attr > 0) return attr < vocab ? attr : vocab;
    int64_t c = LMHEAD_SCRATCH_BYTES / (rows * esz);
    if (c > vocab / 4) c = vocab / 4;
    c = c / 128 * 128;
    if (c < 128) c = 128;
    if (c >= vocab) return vocab;
    int64_t n = (vocab + c - 1) / c;
    c = ((vocab + n - 1) / n + 127) / 128 * 128;
    return c < vocab ? c : vocab;
}

static kx *label_ok(cg_ctx *c, kx *lab, int64_t vocab, int64_t ignore)
{
    return AND(AND(NE(lab, I(ignore)), LE(I(0), lab)), LT(lab, I(vocab)));
}

typedef struct lm_dims {
    const ir_node *x, *w, *labels, *bias; /* bias: NULL for a head without one */
    int64_t rows, h, vocab, chunk, nchunks, ignore;
    bool par;       /* vocab-parallel: w holds rows [rank * vocab, (rank + 1) * vocab) of the padded vocabulary */
    int64_t gvocab; /* the whole vocabulary (columns at or past it are padding, left out) */
    ir_dtype st; /* the GEMMs' and the scratch's dtype: x's storage (16 bits under mixed precision) */
    int64_t esz;
} lm_dims;

static lm_dims dims_of(cg_ctx *c, const ir_node *x, const ir_node *w, const ir_node *labels, const ir_node *bias)
{
    lm_dims d = {.x = x, .w = w, .labels = labels, .bias = bias, .h = LAST(x), .vocab = w->shape.dim[0],
                 .ignore = ir_attr_int(c->n, "ignore_index"), .st = ir_storage_dtype(c->g, x)};
    d.rows = NUMEL(x) / d.h;
    d.esz = ir_dtype_size(d.st);
    d.chunk = cg_lm_head_chunk(d.rows, d.vocab, d.esz, ir_attr_int(c->n, "chunk"));
    d.nchunks = (d.vocab + d.chunk - 1) / d.chunk;
    d.gvocab = ir_attr_int(c->n, "vocab");
    d.par = d.gvocab > 0;
    if (!d.par) d.gvocab = d.vocab;
    return d;
}

/* S [rows, cw] = x w[v0:v0+cw]^T into the scratch at byte s_at. */
static void chunk_logits(cg_ctx *c, const lm_dims *d, int64_t v0, int64_t cw, int64_t s_at)
{
    cg_gemm_bound(c, (cg_gemm){.dtype = d->st, .tb = true, .m = d->rows, .n = cw, .k = d->h, .lda = d->h,
                               .ldb = d->h, .ldc = cw, .alpha = 1.0,
                               .a = {CG_BIND_NODE, d->x->id, 0},
                               .b = {CG_BIND_NODE, d->w->id, v0 * d->h * d->esz},
                               .c = {CG_BIND_WS, -1, s_at}});
}

/* Logit (r, col) of the chunk at v0 (width cw): the scratch (argument sa),
 * plus the bias (argument ba, or -1) of vocabulary row v0 + col. */
static kx *logit(cg_ctx *c, int sa, int ba, int64_t v0, int64_t cw, kx *col)
{
    kx *l = LD(sa, RC(IDX0, cw, col));
    return ba < 0 ? l : ADD(l, LD(ba, ADD(col, I(v0))));
}

/* Under vocab-parallel TP (vocab > 0) the chunk's first column's global
 * index, and the row limit that leaves the padding columns out. */
static kx *chunk_base(cg_ctx *c, const lm_dims *d, int64_t v0)
{
    return d->par ? ADD(MUL(kx_rt(B, KRT_TP_RANK), I(d->vocab)), I(v0)) : I(v0);
}

static void chunk_limit(cg_ctx *c, const lm_dims *d, int64_t v0, int64_t cw)
{
    if (d->par) c->k->row_limit = MINF(I(cw), MAXF(I(0), SUB(I(d->gvocab), chunk_base(c, d, v0))));
}

bool cg_emit_lm_head_ce(cg_ctx *c)
{
    const ir_node *n = c->n;
    lm_dims d = dims_of(c, n->src[0], n->src[1], n->src[2], n->nsrc > 3 ? n->src[3] : NULL);
    TGC_ASSERT(ir_storage_dtype(c->g, d.w) == d.st);
    ir_dtype t = cg_ctype(n);
    int64_t T = d.rows, nch = d.nchunks, tsz = ir_dtype_size(t);
    int64_t s_at = cg_ws_reserve(c, T * d.chunk * d.esz);
    int64_t st_at = cg_ws_reserve(c, 3 * nch * T * tsz); /* [max, sumexp, target][chunk][row] */
    int64_t red_at = cg_ws_reserve(c, 3 * T * tsz);      /* [max, sumexp, target][row] over the chunks (and ranks) */
    int64_t loss_at = cg_ws_reserve(c, T * tsz);
    for (int64_t j = 0; j < nch; j++) {
        int64_t v0 = j * d.chunk, cw = v0 + d.chunk <= d.vocab ? d.chunk : d.vocab - v0;
        chunk_logits(c, &d, v0, cw, s_at);
        kernel *k = cg_kernel_bare(c, KK_ROW, T, cw);
        chunk_limit(c, &d, v0, cw);
        int sa = cg_arg_ws_at(c, d.st, T * cw, s_at), la = cg_arg_node(c, d.labels, T, false);
        int ba = d.bias ? cg_arg_node(c, d.bias, d.vocab, false) : -1;
        int out = kernel_add_arg(k, t, 3 * nch * T, true);
        c->p->binds[c->p->nkernels - 1][out] = (cg_bind){CG_BIND_WS, -1, st_at};
        int mx = kernel_add_acc(k, KRED_MAX, logit(c, sa, ba, v0, cw, IDX1));
        int se = kernel_add_acc(k, KRED_SUM, UN(KU_EXP, SUB(logit(c, sa, ba, v0, cw, IDX1), ACC(mx))));
        kx *lab = LD(la, IDX0), *at = SUB(lab, chunk_base(c, &d, v0));
        kx *in = AND(label_ok(c, lab, d.gvocab, d.ignore), AND(LE(I(0), at), LT(at, I(cw))));
        kx *tgt = SEL(in, logit(c, sa, ba, v0, cw, SEL(in, SUB(LD(la, IDX0), chunk_base(c, &d, v0)), I(0))), F(0.0));
        kernel_add_out(k, out, ADD(IDX0, I(j * T)), ACC(mx), true);
        kernel_add_out(k, out, ADD(IDX0, I((nch + j) * T)), ACC(se), true);
        kernel_add_out(k, out, ADD(IDX0, I((2 * nch + j) * T)), tgt, true);
    }
#define AT(part) ADD(MUL(ADD(IDX1, I((part) * nch)), I(T)), IDX0)
    /* The row max over the chunks (all-reduced over the ranks' shards). */
    kernel *k = cg_kernel_bare(c, KK_ROW, T, nch);
    int sa = cg_arg_ws_at(c, t, 3 * nch * T, st_at);
    int rm = kernel_add_arg(k, t, T, true);
    c->p->binds[c->p->nkernels - 1][rm] = (cg_bind){CG_BIND_WS, -1, red_at};
    kernel_add_out(k, rm, IDX0, ACC(kernel_add_acc(k, KRED_MAX, LD(sa, AT(0)))), true);
    cg_bind red_m = {CG_BIND_WS, -1, red_at}, red_st = {CG_BIND_WS, -1, red_at + T * tsz};
    if (d.par) cg_comm_push(c, CG_ALL_REDUCE, T, red_m, red_m)->comm.max = true;
    /* The sum of exp about that max, and the label's logit (all-reduced). */
    k = cg_kernel_bare(c, KK_ROW, T, nch);
    sa = cg_arg_ws_at(c, t, 3 * nch * T, st_at);
    int ma = cg_arg_ws_at(c, t, T, red_at);
    int ro = kernel_add_arg(k, t, 2 * T, true);
    c->p->binds[c->p->nkernels - 1][ro] = red_st;
    int se = kernel_add_acc(k, KRED_SUM, MUL(LD(sa, AT(1)), UN(KU_EXP, SUB(LD(sa, AT(0)), LD(ma, IDX0)))));
    int tg = kernel_add_acc(k, KRED_SUM, LD(sa, AT(2)));
    kernel_add_out(k, ro, IDX0, ACC(se), true);
    kernel_add_out(k, ro, ADD(IDX0, I(T)), ACC(tg), true);
#undef AT
    if (d.par) cg_comm_instr(c, CG_ALL_REDUCE, 2 * T, red_st, red_st);
    /* Each row's log-sum-exp (kept for the backward) and loss. */
    k = cg_kernel_bare(c, KK_MAP, T, 0);
    int ra = cg_arg_ws_at(c, t, 3 * T, red_at), la = cg_arg_node(c, d.labels, T, false);
    int lse = cg_arg_result(c, n, 1, true);
    int rl = kernel_add_arg(k, t, T, true);
    c->p->binds[c->p->nkernels - 1][rl] = (cg_bind){CG_BIND_WS, -1, loss_at};
    kx *l = ADD(LD(ra, IDX0), UN(KU_LOG, LD(ra, ADD(IDX0, I(T)))));
    kernel_add_out(k, lse, IDX0, l, false);
    kx *row = SUB(ADD(LD(ra, IDX0), UN(KU_LOG, LD(ra, ADD(IDX0, I(T))))), LD(ra, ADD(IDX0, I(2 * T))));
    kernel_add_out(k, rl, IDX0, SEL(label_ok(c, LD(la, IDX0), d.gvocab, d.ignore), row, F(0.0)), false);
    /* The mean over the rows whose label counts. */
    cg_kernel_bare(c, KK_ROW, 1, T);
    int wb = cg_arg_ws_at(c, t, T, loss_at);
    int tb = cg_arg_node(c, d.labels, T, false), out = cg_arg_node(c, n, 1, true);
    int s = kernel_add_acc(c->k, KRED_SUM, LD(wb, IDX1));
    int cnt = kernel_add_acc(c->k, KRED_SUM, UN(KU_TOF, label_ok(c, LD(tb, IDX1), d.gvocab, d.ignore)));
    kernel_add_out(c->k, out, I(0), DIV(ACC(s), MAXF(ACC(cnt), F(1.0))), true);
    return true;
}

bool cg_emit_lm_head_ce_back(cg_ctx *c)
{
    const ir_node *n = c->n, *f = n->src[4];
    lm_dims d = dims_of(c, n->src[1], n->src[2], n->src[3], n->nsrc > 5 ? n->src[5] : NULL);
    TGC_ASSERT(ir_storage_dtype(c->g, d.w) == d.st);
    ir_dtype t = cg_ctype(n);
    int64_t T = d.rows;
    /* d loss / (number of counted labels) into the workspace. */
    kernel *k = cg_kernel_bare(c, KK_ROW, 1, T);
    int da = cg_arg_node(c, n->src[0], 1, false), ta = cg_arg_node(c, d.labels, T, false);
    int64_t g_at = c->ws;
    int wa = cg_arg_ws(c, t, 1, true);
    int cnt = kernel_add_acc(k, KRED_SUM, UN(KU_TOF, label_ok(c, LD(ta, IDX1), d.gvocab, d.ignore)));
    kernel_add_out(k, wa, I(0), DIV(LD(da, I(0)), MAXF(ACC(cnt), F(1.0))), true);
    int64_t s_at = cg_ws_reserve(c, T * d.chunk * d.esz);
    int64_t dw_at = ir_result_offset(c->g, n, 1);
    for (int64_t j = 0; j < d.nchunks; j++) {
        int64_t v0 = j * d.chunk, cw = v0 + d.chunk <= d.vocab ? d.chunk : d.vocab - v0;
        chunk_logits(c, &d, v0, cw, s_at);
        /* In place: the chunk's d logits, cross_entropy_back's. */
        k = cg_kernel_bare(c, KK_ROW, T, cw);
        chunk_limit(c, &d, v0, cw); /* the padding's d logits are 0 */
        int sa = cg_arg_ws_at(c, d.st, T * cw, s_at), la = cg_arg_node(c, d.labels, T, false);
        int lse = cg_arg_result(c, f, 1, false), ga = cg_arg_ws_at(c, t, 1, g_at);
        int ba = d.bias ? cg_arg_node(c, d.bias, d.vocab, false) : -1;
        int out = kernel_add_arg(k, d.st, T * cw, true);
        c->p->binds[c->p->nkernels - 1][out] = (cg_bind){CG_BIND_WS, -1, s_at};
        kx *lab = LD(la, IDX0);
        kx *p = UN(KU_EXP, SUB(logit(c, sa, ba, v0, cw, IDX1), LD(lse, IDX0)));
        kx *g = MUL(LD(ga, I(0)), SUB(p, UN(KU_TOF, EQ(ADD(IDX1, chunk_base(c, &d, v0)), lab))));
        kernel_add_out(k, out, RC(IDX0, cw, IDX1), SEL(label_ok(c, lab, d.gvocab, d.ignore), g, F(0.0)), false);
        /* dx (+)= dS w[v0:v0+cw]; dw[v0:v0+cw] = dS^T x. */
        cg_gemm_bound(c, (cg_gemm){.dtype = d.st, .m = T, .n = d.h, .k = cw, .lda = cw, .ldb = d.h, .ldc = d.h,
                                   .alpha = 1.0, .beta = j ? 1.0 : 0.0, .a = {CG_BIND_WS, -1, s_at},
                                   .b = {CG_BIND_NODE, d.w->id, v0 * d.h * d.esz},
                                   .c = {CG_BIND_NODE, n->id, 0}});
        cg_gemm_bound(c, (cg_gemm){.dtype = d.st, .ta = true, .m = cw, .n = d.h, .k = T, .lda = cw, .ldb = d.h,
                                   .ldc = d.h, .alpha = 1.0, .a = {CG_BIND_WS, -1, s_at},
                                   .b = {CG_BIND_NODE, d.x->id, 0},
                                   .c = {CG_BIND_NODE, n->id, dw_at + v0 * d.h * d.esz}});
        if (!d.bias) continue;
        /* db[v0:v0+cw] = the column sums of dS. */
        cg_kernel_bare(c, KK_COL, T, cw);
        int ds = cg_arg_ws_at(c, d.st, T * cw, s_at), db = cg_arg_result(c, n, 2, true);
        kernel_add_out(c->k, db, ADD(IDX1, I(v0)), LD(ds, RC(IDX0, cw, IDX1)), false);
    }
    return true;
}
