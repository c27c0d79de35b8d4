/* Emitters of the row-wise neural-network ops (softmax, norms,
 * cross-entropy, their backwards) and of the optimizer updates. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emit_util.h"
#include "support/util.h"

#define MASKED_LOGIT (-10000.0) /* Megatron's fill value for masked scores */

/* scale * x[r, c] with the causal and padding masks applied. */
static kx *masked_logit(cg_ctx *c)
{
    const ir_node *n = c->n, *x = n->src[0];
    int r = x->shape.rank;
    int64_t cols = LAST(x), sq = r >= 2 ? x->shape.dim[r - 2] : 1;
    kx *z = MUL(F(ir_attr_float(n, "scale")), LD(0, RC(IDX0, cols, IDX1)));
    /* The causal mask is the row limit (cg_emit_softmax): masked logits
     * would get probability exp(-10000 - max) = 0, exactly what the
     * limit writes. */
    (void)sq;
    if (n->nsrc == 2) {
        int64_t rows_per_batch = NUMEL(x) / cols / x->shape.dim[0];
        kx *bidx = IDIV(IDX0, I(rows_per_batch));
        z = SEL(EQ(LD(1, RC(bidx, cols, IDX1)), I(0)), F(MASKED_LOGIT), z);
    }
    return z;
}

bool cg_emit_softmax(cg_ctx *c)
{
    const ir_node *x = c->n->src[0];
    int64_t cols = LAST(x);
    cg_kernel(c, KK_ROW, NUMEL(x) / cols, cols);
    if (ir_attr_bool(c->n, "causal")) {
        int64_t sq = x->shape.dim[x->shape.rank - 2];
        /* Query i sees keys up to i + cols - sq; in a KV-cached run (the
         * cache's cols positions, this run's sq of them from rt.pos) up to
         * i + rt.pos. */
        kx *off = ir_attr_bool(c->n, "pos_offset") ? ADD(kx_rt(B, KRT_POS), I(1)) : I(1 + cols - sq);
        c->k->row_limit = ADD(IMOD(IDX0, I(sq)), off);
    }
    int mx = kernel_add_acc(c->k, KRED_MAX, masked_logit(c));
    int sm = kernel_add_acc(c->k, KRED_SUM, UN(KU_EXP, SUB(masked_logit(c), ACC(mx))));
    kx *y = DIV(UN(KU_EXP, SUB(masked_logit(c), ACC(mx))), ACC(sm));
    kernel_add_out(c->k, c->n->nsrc, RC(IDX0, cols, IDX1), y, false);
    return true;
}

bool cg_emit_softmax_back(cg_ctx *c)
{
    int64_t cols = LAST(c->n);
    cg_kernel(c, KK_ROW, NUMEL(c->n) / cols, cols);
    kx *at = RC(IDX0, cols, IDX1);
    int s = kernel_add_acc(c->k, KRED_SUM, MUL(LD(0, at), LD(1, at)));
    kx *dx = MUL(F(ir_attr_float(c->n, "scale")), MUL(LD(1, at), SUB(LD(0, at), ACC(s))));
    kernel_add_out(c->k, 2, at, dx, false);
    return true;
}

/* ---- layer norm and RMS norm ----------------------------------------------------- */

/* Row statistics of x (argument `xa`) as accumulators: for layernorm the
 * mean (acc 0) and the sum of squared deviations (acc 1); for rmsnorm the
 * sum of squares (acc 0). Returns rstd as an expression. */
static kx *row_rstd(cg_ctx *c, int xa, int64_t cols, bool centred, double eps, kx **mean)
{
    kx *x = LD(xa, RC(IDX0, cols, IDX1));
    kx *ss;
    if (centred) {
        int s = kernel_add_acc(c->k, KRED_SUM, x);
        *mean = MUL(ACC(s), F(1.0 / (double)cols));
        kx *dev = SUB(LD(xa, RC(IDX0, cols, IDX1)), *mean);
        ss = ACC(kernel_add_acc(c->k, KRED_SUM, MUL(dev, dev)));
    } else {
        *mean = F(0.0);
        ss = ACC(kernel_add_acc(c->k, KRED_SUM, MUL(x, x)));
    }
    return UN(KU_RSQRT, ADD(MUL(ss, F(1.0 / (double)cols)), F(eps)));
}

static bool emit_norm(cg_ctx *c, bool centred)
{
    const ir_node *n = c->n;
    int64_t cols = LAST(n);
    cg_kernel(c, KK_ROW, NUMEL(n) / cols, cols);
    kx *mean, *rstd = row_rstd(c, 0, cols, centred, ir_attr_float(n, "eps"), &mean);
    kx *xhat = MUL(SUB(LD(0, RC(IDX0, cols, IDX1)), mean), rstd);
    kx *y = MUL(xhat, LD(1, IDX1));
    if (centred) y = ADD(y, LD(2, IDX1));
    kernel_add_out(c->k, n->nsrc, RC(IDX0, cols, IDX1), y, false);
    return true;
}

bool cg_emit_layernorm(cg_ctx *c) { return emit_norm(c, true); }
bool cg_emit_rmsnorm(cg_ctx *c) { return emit_norm(c, false); }

/* dx of a norm, operands (dy, x, w): with g = dy * w and xhat the
 * normalised x, dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) for
 * layernorm and rstd * (g - xhat * mean(g * xhat)) for rmsnorm. */
static bool emit_norm_dx(cg_ctx *c, bool centred)
{
    const ir_node *n = c->n;
    int64_t cols = LAST(n);
    double inv = 1.0 / (double)cols;
    cg_kernel(c, KK_ROW, NUMEL(n) / cols, cols);
    kx *mean, *rstd = row_rstd(c, 1, cols, centred, ir_attr_float(n, "eps"), &mean);
#define XHAT MUL(SUB(LD(1, RC(IDX0, cols, IDX1)), mean), rstd)
#define G MUL(LD(0, RC(IDX0, cols, IDX1)), LD(2, IDX1))
    int sg = centred ? kernel_add_acc(c->k, KRED_SUM, G) : -1;
    int sgx = kernel_add_acc(c->k, KRED_SUM, MUL(G, XHAT));
    kx *dx = SUB(G, MUL(XHAT, MUL(ACC(sgx), F(inv))));
    if (centred) dx = SUB(dx, MUL(ACC(sg), F(inv)));
#undef XHAT
#undef G
    kernel_add_out(c->k, 3, RC(IDX0, cols, IDX1), MUL(rstd, dx), false);
    return true;
}

bool cg_emit_layernorm_dx(cg_ctx *c) { return emit_norm_dx(c, true); }
bool cg_emit_rmsnorm_dx(cg_ctx *c) { return emit_norm_dx(c, false); }

/* dw of a norm, operands (dy, x): the column sum of dy * xhat. Two
 * kernels: row statistics into the workspace, then the column sum. */
static bool emit_norm_dw(cg_ctx *c, bool centred)
{
    const ir_node *n = c->n, *x = n->src[1];
    int64_t cols = LAST(x), rows = NUMEL(x) / cols;
    ir_dtype t = cg_ctype(n);
    kernel *k = cg_kernel_bare(c, KK_ROW, rows, cols);
    int xa = cg_arg_node(c, x, NUMEL(x), false);
    int64_t ws_at = c->ws;
    int st = cg_arg_ws(c, t, 2 * rows, true);
    kx *mean, *rstd = row_rstd(c, xa, cols, centred, ir_attr_float(n, "eps"), &mean);
    kernel_add_out(k, st, MUL(IDX0, I(2)), mean, true);
    kernel_add_out(k, st, ADD(MUL(IDX0, I(2)), I(1)), rstd, true);

    cg_kernel_bare(c, KK_COL, rows, cols);
    int dya = cg_arg_node(c, n->src[0], NUMEL(x), false);
    int xb = cg_arg_node(c, x, NUMEL(x), false);
    int sa = cg_arg_ws_at(c, t, 2 * rows, ws_at); /* what the first kernel wrote */
    int out = cg_arg_node(c, n, cols, true);
    kx *xhat = MUL(SUB(LD(xb, RC(IDX0, cols, IDX1)), LD(sa, MUL(IDX0, I(2)))), LD(sa, ADD(MUL(IDX0, I(2)), I(1))));
    kernel_add_out(c->k, out, IDX1, MUL(LD(dya, RC(IDX0, cols, IDX1)), xhat), false);
    return true;
}

bool cg_emit_layernorm_dw(cg_ctx *c) { return emit_norm_dw(c, true); }
bool cg_emit_rmsnorm_dw(cg_ctx *c) { return emit_norm_dw(c, false); }

/* ---- cross-entropy ------------------------------------------------------------- */

static kx *label_ok(cg_ctx *c, kx *lab, int64_t vocab, int64_t ignore)
{
    return AND(AND(NE(lab, I(ignore)), LE(I(0), lab)), LT(lab, I(vocab)));
}

/* Per-row max and sum of exp of logits (argument la) as acc 0 and 1. */
static void logsumexp_accs(cg_ctx *c, int la, int64_t vocab)
{
    int mx = kernel_add_acc(c->k, KRED_MAX, LD(la, RC(IDX0, vocab, IDX1)));
    kernel_add_acc(c->k, KRED_SUM, UN(KU_EXP, SUB(LD(la, RC(IDX0, vocab, IDX1)), ACC(mx))));
}

bool cg_emit_cross_entropy(cg_ctx *c)
{
    const ir_node *n = c->n, *l = n->src[0];
    int64_t vocab = LAST(l), rows = NUMEL(l) / vocab, ignore = ir_attr_int(n, "ignore_index");
    ir_dtype t = cg_ctype(n);
    /* 1: per-row loss into the workspace. */
    kernel *k = cg_kernel_bare(c, KK_ROW, rows, vocab);
    int la = cg_arg_node(c, l, NUMEL(l), false), ta = cg_arg_node(c, n->src[1], rows, false);
    int64_t ws_at = c->ws;
    int wa = cg_arg_ws(c, t, rows, true);
    logsumexp_accs(c, la, vocab);
    kx *lab = LD(ta, IDX0);
    kx *ok = label_ok(c, lab, vocab, ignore);
    kx *loss = SUB(ADD(UN(KU_LOG, ACC(1)), ACC(0)), LD(la, ADD(MUL(IDX0, I(vocab)), SEL(ok, lab, I(0)))));
    kernel_add_out(k, wa, IDX0, SEL(ok, loss, F(0.0)), true);
    /* 2: the mean over the rows whose label counts. */
    cg_kernel_bare(c, KK_ROW, 1, rows);
    int wb = cg_arg_ws_at(c, t, rows, ws_at); /* what the first kernel wrote */
    int tb = cg_arg_node(c, n->src[1], rows, false), out = cg_arg_node(c, n, 1, true);
    int s = kernel_add_acc(c->k, KRED_SUM, LD(wb, IDX1));
    int cnt = kernel_add_acc(c->k, KRED_SUM, UN(KU_TOF, label_ok(c, LD(tb, IDX1), vocab, ignore)));
    kernel_add_out(c->k, out, I(0), DIV(ACC(s), MAXF(ACC(cnt), F(1.0))), true);
    return true;
}

/* The first kernel of a cross-entropy gradient (operands d loss, ..., labels
 * at 0 and 2): d loss / (number of counted labels) into the workspace,
 * whose offset it returns. */
static int64_t ce_grad_scale(cg_ctx *c, int64_t rows, int64_t vocab, int64_t ignore)
{
    const ir_node *n = c->n;
    kernel *k = cg_kernel_bare(c, KK_ROW, 1, rows);
    int da = cg_arg_node(c, n->src[0], 1, false), ta = cg_arg_node(c, n->src[2], rows, false);
    int64_t ws_at = c->ws;
    int wa = cg_arg_ws(c, cg_ctype(n), 1, true);
    int cnt = kernel_add_acc(k, KRED_SUM, UN(KU_TOF, label_ok(c, LD(ta, IDX1), vocab, ignore)));
    kernel_add_out(k, wa, I(0), DIV(LD(da, I(0)), MAXF(ACC(cnt), F(1.0))), true);
    return ws_at;
}

bool cg_emit_cross_entropy_back(cg_ctx *c)
{
    const ir_node *n = c->n, *l = n->src[1];
    int64_t vocab = LAST(l), rows = NUMEL(l) / vocab, ignore = ir_attr_int(n, "ignore_index");
    ir_dtype t = cg_ctype(n);
    int64_t ws_at = ce_grad_scale(c, rows, vocab, ignore);
    /* 2: (softmax - onehot) * that, zero on ignored rows. */
    cg_kernel_bare(c, KK_ROW, rows, vocab);
    int la = cg_arg_node(c, l, NUMEL(l), false), tb = cg_arg_node(c, n->src[2], rows, false);
    int wb = cg_arg_ws_at(c, t, 1, ws_at); /* what the first kernel wrote */
    int out = cg_arg_node(c, n, NUMEL(n), true);
    logsumexp_accs(c, la, vocab);
    kx *lab = LD(tb, IDX0);
    kx *p = DIV(UN(KU_EXP, SUB(LD(la, RC(IDX0, vocab, IDX1)), ACC(0))), ACC(1));
    kx *g = MUL(LD(wb, I(0)), SUB(p, UN(KU_TOF, EQ(IDX1, lab))));
    kernel_add_out(c->k, out, RC(IDX0, vocab, IDX1), SEL(label_ok(c, lab, vocab, ignore), g, F(0.0)), false);
    return true;
}

/* ---- the optimizer: one pass over the flat buffers ------------------------------ */

/* The optimizer ops see every parameter (operands 0..k-1) and gradient
 * (k..2k-1); memplan lays both out contiguously, group by group, so one
 * loop covers them. Returns the span in elements. */
static int64_t flat_span(cg_ctx *c, int first, int count)
{
    const ir_node *n = c->n;
    int64_t lo = INT64_MAX, hi = 0;
    int64_t esz = ir_storage_size(c->g, n->src[first]); /* 16 bits under mixed precision */
    for (int i = first; i < first + count; i++) {
        const ir_node *p = n->src[i];
        int64_t end = p->mem_offset + NUMEL(p) * esz;
        if (p->mem_offset < lo) lo = p->mem_offset;
        if (end > hi) hi = end;
    }
    return (hi - lo) / esz;
}

static const ir_node *lowest(const ir_node *n, int first, int count)
{
    const ir_node *best = n->src[first];
    for (int i = first; i < first + count; i++)
        if (n->src[i]->mem_offset < best->mem_offset) best = n->src[i];
    return best;
}

static int by_place(const void *a, const void *b)
{
    const ir_node *x = *(const ir_node *const *)a, *y = *(const ir_node *const *)b;
    if (x->mem != y->mem) return x->mem < y->mem ? -1 : 1;
    return x->mem_offset < y->mem_offset ? -1 : x->mem_offset > y->mem_offset;
}

/* The operands sorted by place, and where each run of operands that sit
 * next to each other (as memplan packs them) starts; returns the runs. */
static int norm_runs(const ir_graph *g, const ir_node *n, const ir_node **sorted, int *start)
{
    memcpy(sorted, n->src, (size_t)n->nsrc * sizeof *sorted);
    qsort(sorted, (size_t)n->nsrc, sizeof *sorted, by_place);
    int runs = 0;
    for (int i = 0; i < n->nsrc; i++) {
        const ir_node *p = i ? sorted[i - 1] : NULL;
        int64_t end = p ? p->mem_offset + NUMEL(p) * ir_storage_size(g, p) : -1;
        /* A run sums everything in its span. The padding between gradients
         * (64-byte aligned) is never written and stays 0; in the activation
         * arena it holds stale values of other tensors, so there only
         * operands that touch make a run. */
        if (p && (p->mem == IR_MEM_GRAD || p->mem == IR_MEM_PARAM)) end = (end + 63) & ~(int64_t)63;
        if (!p || p->mem != sorted[i]->mem || sorted[i]->mem_offset != end) start[runs++] = i;
    }
    start[runs] = n->nsrc;
    return runs;
}

/* The L2 norm of every operand: one reduction per run of adjacent
 * operands (all gradients are one run in a serial plan) into the
 * workspace, their sum, with group=tp an all-reduce of the sum over the
 * TP group, and the square root. */
bool cg_emit_global_norm(cg_ctx *c)
{
    const ir_node *n = c->n;
    const ir_node **sorted = xmalloc((size_t)n->nsrc * sizeof *sorted);
    int *start = xmalloc(((size_t)n->nsrc + 1) * sizeof *start);
    int runs = norm_runs(c->g, n, sorted, start);
    ir_dtype t = cg_ctype(n);
    int64_t ws = cg_ws_reserve(c, runs * ir_dtype_size(t));
    /* sharded (the distributed optimizer): of the gradients, only this
     * rank's shard [shard_lo, shard_hi) of the flat buffer counts. */
    bool sharded = ir_attr_bool(n, "sharded");
    for (int r = 0; r < runs; r++) {
        const ir_node *first = sorted[start[r]], *last = sorted[start[r + 1] - 1];
        int64_t span = (last->mem_offset - first->mem_offset) / ir_storage_size(c->g, first) + NUMEL(last);
        cg_kernel_bare(c, KK_ROW, 1, span);
        int g = cg_arg_node(c, first, span, false);
        int out = kernel_add_arg(c->k, t, runs, true);
        c->p->binds[c->p->nkernels - 1][out] = (cg_bind){CG_BIND_WS, -1, ws};
        kx *sq = MUL(LD(g, IDX1), LD(g, IDX1));
        if (sharded && first->mem == IR_MEM_GRAD) {
            kx *at = ADD(IDX1, I(first->mem_offset / ir_storage_size(c->g, first)));
            sq = SEL(LT(at, kx_rt(B, KRT_SHARD_LO)), F(0.0), SEL(LT(at, kx_rt(B, KRT_SHARD_HI)), sq, F(0.0)));
        }
        int s = kernel_add_acc(c->k, KRED_SUM, sq);
        kernel_add_out(c->k, out, I(r), ACC(s), true);
    }
    /* group=tp / pp / dp / dp_pp: the sum of squares is all-reduced over
     * those groups before the square root. */
    const char *grp = ir_attr_sym(n, "group");
    bool tp = strcmp(grp, "tp") == 0, pp = strcmp(grp, "pp") == 0 || strcmp(grp, "dp_pp") == 0;
    bool dp = strcmp(grp, "dp") == 0 || strcmp(grp, "dp_pp") == 0;
    cg_kernel_bare(c, KK_ROW, 1, runs);
    int in = cg_arg_ws_at(c, t, runs, ws);
    int out = cg_arg_node(c, n, 1, true);
    int s = kernel_add_acc(c->k, KRED_SUM, LD(in, IDX1));
    kernel_add_out(c->k, out, I(0), tp || pp || dp ? ACC(s) : UN(KU_SQRT, ACC(s)), true);
    if (tp || pp || dp) {
        cg_bind self = {CG_BIND_NODE, n->id, 0};
        if (dp) cg_comm_push(c, CG_ALL_REDUCE, 1, self, self)->comm.group = CG_GROUP_DP;
        if (tp || pp) cg_comm_push(c, CG_ALL_REDUCE, 1, self, self)->comm.group = pp ? CG_GROUP_PP : CG_GROUP_TP;
        cg_kernel_bare(c, KK_MAP, 1, 0);
        int a = cg_arg_node(c, n, 1, false), o = cg_arg_node(c, n, 1, true);
        kernel_add_out(c->k, o, IDX0, UN(KU_SQRT, LD(a, IDX0)), false);
    }
    free(sorted);
    free(start);
    return true;
}

/* A parameter group's run of the flat buffer: from element `start` on, the
 * scheduled learning rate and weight decay are scaled by lr_mult / wd_mult
 * (wd_mult 0 for no_decay parameters), as memplan grouped them. */
typedef struct opt_seg {
    int64_t start;
    double lr_mult, wd_mult;
} opt_seg;

static int by_offset(const void *a, const void *b)
{
    int64_t x = (*(const ir_node *const *)a)->mem_offset, y = (*(const ir_node *const *)b)->mem_offset;
    return (x > y) - (x < y);
}

/* The segments of the k parameters, in buffer order; returns their count. */
static int opt_segments(cg_ctx *c, int k, opt_seg **out)
{
    const ir_node **ps = arena_alloc(c->b.mem, (size_t)k * sizeof *ps);
    opt_seg *seg = arena_alloc(c->b.mem, (size_t)k * sizeof *seg);
    for (int i = 0; i < k; i++) ps[i] = c->n->src[i];
    qsort(ps, (size_t)k, sizeof *ps, by_offset);
    int64_t esz = ir_storage_size(c->g, ps[0]);
    int n = 0;
    for (int i = 0; i < k; i++) {
        double lr = ir_attr_float(ps[i], "lr_mult");
        double wd = (ps[i]->flags & IR_NF_NO_DECAY) ? 0.0 : ir_attr_float(ps[i], "wd_mult");
        if (n && seg[n - 1].lr_mult == lr && seg[n - 1].wd_mult == wd) continue;
        seg[n++] = (opt_seg){(ps[i]->mem_offset - ps[0]->mem_offset) / esz, lr, wd};
    }
    *out = seg;
    return n;
}

/* The run-time scalar (KRT_LR or KRT_WD) times the multiplier of element
 * i's segment: a chain of index comparisons, one per change of value. */
static kx *opt_scaled(cg_ctx *c, const opt_seg *seg, int n, kx_rt_slot which)
{
    kx *e = NULL;
    double head = 0.0;
    for (int i = n - 1; i >= 0; i--) {
        double m = which == KRT_WD ? seg[i].wd_mult : seg[i].lr_mult;
        if (e && m == head) continue;
        kx *v = m == 0.0 ? F(0.0) : m == 1.0 ? kx_rt(B, which) : MUL(kx_rt(B, which), F(m));
        e = e ? SEL(LT(IDX0, I(seg[i + 1].start)), v, e) : v;
        head = m;
    }
    return e;
}

/* Binds params (in and out), grads, and the norm; returns the clip factor
 * expression, computed once before the loop, and the per-element learning
 * rate and weight decay. */
/* Mixed precision keeps fp32 master weights in this optimizer-state slot;
 * the 16-bit parameters are the rounded copy written back each step. */
#define MASTER_SLOT 2

/* The update's common part: binds the parameters (their fp32 master copy
 * under mixed precision: *pa, the weights read; *mo, where the master is
 * written, -1 without), the gradients and the norm. Returns the factor
 * the gradients are multiplied by — 1/loss_scale (the Float16Optimizer's
 * unscale), times the clip factor from the unscaled norm — and in *finite
 * whether the norm is finite: an overflow skips the step, every buffer
 * keeping its value. */
/* The index of element i in an optimizer-state buffer: i, or under the
 * distributed optimizer (sharded), i's place in this rank's shard. */
static kx *state_idx(cg_ctx *c)
{
    return ir_attr_bool(c->n, "sharded") ? SUB(IDX0, kx_rt(B, KRT_SHARD_LO)) : IDX0;
}

static kx *opt_begin(cg_ctx *c, int64_t *span, int *pa, int *pout, int *ga, kx **lr, kx **wd, int *mo, kx **finite)
{
    const ir_node *n = c->n;
    int k = n->nsrc / 2;
    *span = flat_span(c, 0, k);
    cg_kernel_bare(c, KK_MAP, *span, 0);
    if (ir_attr_bool(n, "sharded")) {
        /* This rank updates its shard of the flat buffers only; its
         * optimizer state holds just that shard. */
        TGC_ASSERT(lowest(n, 0, k)->mem_offset == 0);
        c->k->map_lo = kx_rt(B, KRT_SHARD_LO);
        c->k->map_hi = MINF(kx_rt(B, KRT_SHARD_HI), I(*span));
        c->p->sharded_state = true;
    }
    bool mixed = c->g->precision != IR_F32;
    *pa = mixed ? cg_arg_state(c, MASTER_SLOT, lowest(n, 0, k), *span) : cg_arg_node(c, lowest(n, 0, k), *span, false);
    *ga = cg_arg_node(c, lowest(n, k, k), *span, false);
    int na = cg_arg_node(c, n->src[n->nsrc - 1], 1, false);
    *pout = cg_arg_node(c, lowest(n, 0, k), *span, true);
    *mo = -1;
    if (mixed) {
        *mo = cg_arg_state(c, MASTER_SLOT, lowest(n, 0, k), *span);
        c->k->args[*mo].output = true;
        c->p->master_slot = MASTER_SLOT;
    }
    opt_seg *seg;
    int nseg = opt_segments(c, k, &seg);
    *lr = opt_scaled(c, seg, nseg, KRT_LR);
    *wd = opt_scaled(c, seg, nseg, KRT_WD);
    kx *inv_scale = DIV(F(1.0), kx_rt(B, KRT_LOSS_SCALE)), *norm = LD(na, I(0));
    *finite = EQ(SUB(norm, norm), F(0.0)); /* false for inf and nan */
    double clip = ir_attr_float(n, "clip");
    if (clip <= 0.0) return inv_scale;
    return MUL(inv_scale, MINF(F(1.0), DIV(F(clip), ADD(MUL(norm, inv_scale), F(1e-6)))));
}

/* Writes v to output arg at idx, or keeps old when the step is skipped. */
static void opt_out(cg_ctx *c, int arg, kx *idx, kx *v, kx *old, kx *finite)
{
    kernel_add_out(c->k, arg, idx, SEL(finite, v, old), false);
}

/* Adam's bias correction 1 - beta^t to float precision. 1 - powf(beta, t)
 * would not do: beta = 0.999 rounds to float with an error of 1e-5 relative
 * to 1 - beta, which the early steps feel. Instead -expm1(t ln beta) with
 * ln beta from double and Kahan's expm1(x) = (u - 1) x / log(u), u = exp(x),
 * for -1 <= x < 0 (u == 1: -x); below -1, 1 - u is well conditioned. */
static kx *one_minus_pow(cg_ctx *c, double beta, kx *t)
{
    if (beta == 0.0) return F(1.0);
    kx *x = MUL(t, F(log(beta)));
    kx *u = UN(KU_EXP, x);
    kx *kahan = DIV(MUL(SUB(F(1.0), u), x), UN(KU_LOG, u));
    return SEL(LT(x, F(-1.0)), SUB(F(1.0), u), SEL(EQ(u, F(1.0)), UN(KU_NEG, x), kahan));
}

/* The updates of torch.optim.Adam / AdamW / SGD (PyTorch 1.13's
 * single-tensor forms). The weight decay comes from the schedule at run
 * time (KRT_WD); the node's weight_decay attribute records the configured
 * value for readers of the IR. */
bool cg_emit_adamw(cg_ctx *c)
{
    const ir_node *n = c->n;
    int64_t span;
    int pa, pout, ga, master;
    kx *lr, *wdi, *finite;
    kx *clip = opt_begin(c, &span, &pa, &pout, &ga, &lr, &wdi, &master, &finite);
    int ma = cg_arg_state(c, 0, lowest(n, 0, n->nsrc / 2), span);
    int va = cg_arg_state(c, 1, lowest(n, 0, n->nsrc / 2), span);
    int mo = cg_arg_state(c, 0, lowest(n, 0, n->nsrc / 2), span);
    int vo = cg_arg_state(c, 1, lowest(n, 0, n->nsrc / 2), span);
    c->k->args[mo].output = c->k->args[vo].output = true;
    double b1 = ir_attr_float(n, "beta1"), b2 = ir_attr_float(n, "beta2"), eps = ir_attr_float(n, "eps");
    bool decoupled = ir_attr_bool(n, "decoupled");
    int aclip = kernel_add_acc(c->k, KRED_SUM, clip);
    kx *t = ADD(UN(KU_TOF, kx_rt(B, KRT_OPT_STEP)), F(1.0));
    int bc1 = kernel_add_acc(c->k, KRED_SUM, one_minus_pow(c, b1, t));
    int bc2 = kernel_add_acc(c->k, KRED_SUM, one_minus_pow(c, b2, t));
    kx *si = state_idx(c);
    kx *p = LD(pa, master >= 0 ? si : IDX0);
    kx *g = MUL(LD(ga, IDX0), ACC(aclip));
    if (!decoupled) g = ADD(g, MUL(wdi, p));
    kx *m = ADD(MUL(F(b1), LD(ma, si)), MUL(F(1.0 - b1), g));
    kx *v = ADD(MUL(F(b2), LD(va, si)), MUL(F(1.0 - b2), MUL(g, g)));
    kx *pd = decoupled ? MUL(p, SUB(F(1.0), MUL(lr, wdi))) : p;
    kx *denom = ADD(DIV(UN(KU_SQRT, v), UN(KU_SQRT, ACC(bc2))), F(eps));
    kx *pn = SUB(pd, MUL(DIV(lr, ACC(bc1)), DIV(m, denom)));
    opt_out(c, pout, IDX0, pn, p, finite);
    if (master >= 0) opt_out(c, master, si, pn, p, finite);
    opt_out(c, mo, si, m, LD(ma, si), finite);
    opt_out(c, vo, si, v, LD(va, si), finite);
    return true;
}

bool cg_emit_sgd(cg_ctx *c)
{
    const ir_node *n = c->n;
    int64_t span;
    int pa, pout, ga, master;
    kx *lr, *wdi, *finite;
    kx *clip = opt_begin(c, &span, &pa, &pout, &ga, &lr, &wdi, &master, &finite);
    double mom = ir_attr_float(n, "momentum"), damp = ir_attr_float(n, "dampening");
    int aclip = kernel_add_acc(c->k, KRED_SUM, clip);
    kx *si = state_idx(c);
    kx *p = LD(pa, master >= 0 ? si : IDX0);
    kx *g = ADD(MUL(LD(ga, IDX0), ACC(aclip)), MUL(wdi, p));
    if (mom != 0.0) {
        int ba = cg_arg_state(c, 0, lowest(n, 0, n->nsrc / 2), span);
        int bo = cg_arg_state(c, 0, lowest(n, 0, n->nsrc / 2), span);
        c->k->args[bo].output = true;
        kx *first = EQ(kx_rt(B, KRT_OPT_STEP), I(0));
        kx *buf = SEL(first, g, ADD(MUL(F(mom), LD(ba, si)), MUL(F(1.0 - damp), g)));
        opt_out(c, bo, si, buf, LD(ba, si), finite);
        g = ir_attr_bool(n, "nesterov") ? ADD(g, MUL(F(mom), buf)) : buf;
    }
    opt_out(c, pout, IDX0, SUB(p, MUL(lr, g)), p, finite);
    if (master >= 0) opt_out(c, master, si, SUB(p, MUL(lr, g)), p, finite);
    return true;
}

/* ---- vocab-parallel cross-entropy: the local parts ------------------------------- */

#define TP_RANK kx_rt(B, KRT_TP_RANK)

/* Columns past the vocabulary (the padding of the last ranks) are left out
 * of the row reductions: the row limit is the local count of real columns. */
static void vocab_limit(cg_ctx *c, int64_t v)
{
    int64_t vocab = ir_attr_int(c->n, "vocab");
    if (!vocab) return;
    kx *left = SUB(I(vocab), MUL(TP_RANK, I(v)));
    c->k->row_limit = MINF(I(v), MAXF(I(0), left));
}

/* Row max of the local logits. */
bool cg_emit_vp_max(cg_ctx *c)
{
    const ir_node *l = c->n->src[0];
    int64_t v = LAST(l);
    cg_kernel(c, KK_ROW, NUMEL(l) / v, v);
    vocab_limit(c, v);
    int mx = kernel_add_acc(c->k, KRED_MAX, LD(0, RC(IDX0, v, IDX1)));
    kernel_add_out(c->k, 1, IDX0, ACC(mx), true);
    return true;
}

/* Row sum of exp(l - max) over the local logits. */
bool cg_emit_vp_sumexp(cg_ctx *c)
{
    const ir_node *l = c->n->src[0];
    int64_t v = LAST(l);
    cg_kernel(c, KK_ROW, NUMEL(l) / v, v);
    vocab_limit(c, v);
    int s = kernel_add_acc(c->k, KRED_SUM, UN(KU_EXP, SUB(LD(0, RC(IDX0, v, IDX1)), LD(1, IDX0))));
    kernel_add_out(c->k, 2, IDX0, ACC(s), true);
    return true;
}

/* The label's logit where this rank holds that vocabulary row, else 0. */
bool cg_emit_vp_target(cg_ctx *c)
{
    const ir_node *l = c->n->src[0];
    int64_t v = LAST(l);
    cg_kernel(c, KK_MAP, NUMEL(c->n), 0);
    kx *local = SUB(LD(1, IDX0), MUL(TP_RANK, I(v)));
    kx *ok = AND(LE(I(0), local), LT(local, I(v)));
    kernel_add_out(c->k, 2, IDX0, SEL(ok, LD(0, ADD(MUL(IDX0, I(v)), SEL(ok, local, I(0)))), F(0.0)), false);
    return true;
}

/* The mean over counted rows of log(sumexp) + max - target. */
bool cg_emit_vp_cross_entropy(cg_ctx *c)
{
    const ir_node *n = c->n, *lab = n->src[1];
    int64_t rows = NUMEL(lab), vocab = ir_attr_int(n, "vocab"), ignore = ir_attr_int(n, "ignore_index");
    cg_kernel(c, KK_ROW, 1, rows);
    kx *ok = label_ok(c, LD(1, IDX1), vocab, ignore);
    kx *loss = SUB(ADD(UN(KU_LOG, LD(3, IDX1)), LD(2, IDX1)), LD(4, IDX1));
    int s = kernel_add_acc(c->k, KRED_SUM, SEL(ok, loss, F(0.0)));
    int cnt = kernel_add_acc(c->k, KRED_SUM, UN(KU_TOF, label_ok(c, LD(1, IDX1), vocab, ignore)));
    kernel_add_out(c->k, 5, I(0), DIV(ACC(s), MAXF(ACC(cnt), F(1.0))), true);
    return true;
}

/* (d loss, logits, labels, max, sumexp): (softmax - onehot) * d loss /
 * count on the local part; zero on ignored rows. */
bool cg_emit_vp_cross_entropy_back(cg_ctx *c)
{
    const ir_node *n = c->n, *l = n->src[1];
    int64_t v = LAST(l), rows = NUMEL(l) / v, vocab = ir_attr_int(n, "vocab"), ignore = ir_attr_int(n, "ignore_index");
    ir_dtype t = cg_ctype(n);
    int64_t ws_at = ce_grad_scale(c, rows, vocab, ignore);
    cg_kernel_bare(c, KK_MAP, NUMEL(n), 0);
    int la = cg_arg_node(c, l, NUMEL(l), false), tb = cg_arg_node(c, n->src[2], rows, false);
    int ma = cg_arg_node(c, n->src[3], rows, false), sa = cg_arg_node(c, n->src[4], rows, false);
    int wb = cg_arg_ws_at(c, t, 1, ws_at); /* what the first kernel wrote */
    int out = cg_arg_node(c, n, NUMEL(n), true);
    kx *r = IDIV(IDX0, I(v)), *col = IMOD(IDX0, I(v)), *lab = LD(tb, r);
    kx *p = DIV(UN(KU_EXP, SUB(LD(la, IDX0), LD(ma, r))), LD(sa, r));
    kx *hot = UN(KU_TOF, EQ(ADD(MUL(TP_RANK, I(v)), col), lab));
    kx *g = MUL(LD(wb, I(0)), SUB(p, hot));
    kx *real = LT(ADD(MUL(TP_RANK, I(v)), col), I(vocab)); /* not a padding column */
    kernel_add_out(c->k, out, IDX0, SEL(AND(label_ok(c, lab, vocab, ignore), real), g, F(0.0)), false);
    return true;
}
