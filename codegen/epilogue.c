/* The choice of cuBLASLt epilogues (codegen/epilogue.h) on a memory-planned
 * graph. The patterns:
 *
 *   linear(x, w, b)                          -> one GEMM, EPILOGUE_BIAS
 *   matmul(dy, x) transpose_a  +  colsum(dy) -> one GEMM, BGRADB writing the
 *                                               bias gradient (dW and db of a linear)
 *   y = linear(x, w); bias_gelu(y, b)        -> GELU_AUX_BIAS (aux = y + b in y's buffer)
 *   p = matmul(dz, w2); bias_gelu_back(p, y, b); colsum(that)
 *                                            -> DGELU_BGRAD (reads aux from y's buffer)
 *
 * The last two come from the fuse pass and are chosen together: once the
 * forward GEMM leaves y + b in y's buffer, every reader of y must be a
 * fused backward that expects exactly that. cuBLASLt's GELU is the tanh
 * approximation, so only approx=tanh qualifies. Only fp32 GEMMs take
 * epilogues (fp64 graphs are the gradient checks').
 *
 * Where the GEMM runs. Its outputs are nodes at several places of the
 * schedule, and the memory plan reuses activation memory by liveness over
 * the node order (a fused kernel runs, and reads, at the last node of its
 * run). So the GEMM runs at the first place, among its own and its
 * outputs', where that changes nothing the plan relies on:
 *   - an output written before its own place overlaps no value live from
 *     there to its place (early_write_ok);
 *   - an output written after its own place has no reader in between
 *     (late_write_ok);
 *   - an input read after its usual place was not overwritten in between
 *     (bytes_kept).
 * A node the GEMM computes must not be inside a fused kernel with nodes it
 * does not compute (run_absorbable): a fused kernel is all or nothing. */
#include "codegen/epilogue.h"

#include <stdlib.h>
#include <string.h>

#include "support/env.h"
#include "support/util.h"

const char *cg_epilogue_name(cg_epilogue e)
{
    static const char *const names[CG_EPI_COUNT] = {"none", "bias", "gelu_aux_bias", "dgelu_bgrad", "bgradb"};
    return (unsigned)e < CG_EPI_COUNT ? names[e] : "?";
}

typedef struct epi_ctx {
    const ir_graph *g;
    cg_epi_plan *p;
    int *run_end;   /* per node: where its fused kernel runs (itself when not fused) */
    int *last;      /* per node: the last place its buffer is read (views extend their base) */
    int *use_start; /* readers of node i: uses[use_start[i] .. use_start[i + 1]) */
    int *uses;
} epi_ctx;

/* One epilogue GEMM: the nodes it computes, what it reads, and where. */
#define EPI_MAX 4
typedef struct epi_group {
    cg_epi_choice choice;
    const ir_node *outs[EPI_MAX]; /* written, each normally at its own place */
    int nouts;
    const ir_node *ins[EPI_MAX]; /* read ... */
    int read_at[EPI_MAX];        /* ... normally at these places */
    int nins;
    const ir_node *absorbed[EPI_MAX]; /* the nodes that emit nothing (besides the GEMM's own) */
    int nabsorbed;
} epi_group;

static const ir_node *base_of(const ir_node *n)
{
    while (n->op == IR_OP_RESHAPE && n->mem == n->src[0]->mem && n->mem_offset == n->src[0]->mem_offset)
        n = n->src[0];
    return n;
}

/* Liveness as the memory plan computes it, and the readers of each node. */
static void epi_analyse(epi_ctx *e)
{
    const ir_graph *g = e->g;
    int n = g->nnodes, total = 0;
    e->run_end = xmalloc((size_t)(n + 1) * sizeof *e->run_end);
    ir_graph_fuse_runs(g, e->run_end, NULL);
    e->last = xmalloc((size_t)(n + 1) * sizeof *e->last);
    e->use_start = xcalloc((size_t)n + 2, sizeof *e->use_start);
    for (int i = 0; i < n; i++) e->last[i] = i;
    for (int i = 0; i < n; i++) {
        const ir_node *u = g->nodes[i];
        const ir_node *self = base_of(u);
        if (u->flags & (IR_NF_LOSS | IR_NF_OUTPUT)) e->last[self->id] = n;
        for (int s = 0; s < u->nsrc; s++) {
            const ir_node *b = base_of(u->src[s]);
            if (e->last[b->id] < e->run_end[i]) e->last[b->id] = e->run_end[i];
            e->use_start[u->src[s]->id + 1]++;
            total++;
        }
        if (self != u && e->last[self->id] < e->last[u->id]) e->last[self->id] = e->last[u->id];
    }
    for (int i = 0; i < n; i++) e->use_start[i + 1] += e->use_start[i];
    e->uses = xmalloc((size_t)(total + 1) * sizeof *e->uses);
    int *fill = xmalloc((size_t)(n + 1) * sizeof *fill);
    memcpy(fill, e->use_start, (size_t)n * sizeof *fill);
    for (int i = 0; i < n; i++) {
        const ir_node *u = g->nodes[i];
        for (int s = 0; s < u->nsrc; s++) e->uses[fill[u->src[s]->id]++] = i;
    }
    free(fill);
}

#define LAST_DIM(x) ((x)->shape.dim[(x)->shape.rank - 1])

/* As stored (16 bits under mixed precision). */
static int64_t bytes_of(const ir_graph *g, const ir_node *n) { return ir_shape_numel(&n->shape) * ir_storage_size(g, n); }

static int nuses(const epi_ctx *e, const ir_node *n) { return e->use_start[n->id + 1] - e->use_start[n->id]; }
static const ir_node *use(const epi_ctx *e, const ir_node *n, int k)
{
    return e->g->nodes[e->uses[e->use_start[n->id] + k]];
}

static bool overlap(const epi_ctx *e, const ir_node *x, const ir_node *y)
{
    if (x->mem != y->mem || x->mem == IR_MEM_NONE) return false;
    return x->mem_offset < y->mem_offset + bytes_of(e->g, y) && y->mem_offset < x->mem_offset + bytes_of(e->g, x);
}

/* w written at place `at`, before its own: no other value whose buffer is
 * held at some point of [at, w) shares a byte with it. Values outside the
 * activation arena hold theirs all along. */
static bool early_write_ok(const epi_ctx *e, const ir_node *w, int at)
{
    if (w->mem == IR_MEM_NONE) return false;
    for (int i = 0; i < w->id; i++) {
        const ir_node *x = e->g->nodes[i];
        if (x == w || base_of(x) != x || !overlap(e, x, w)) continue;
        if (x->mem != IR_MEM_ACT || e->last[i] >= at) return false;
    }
    return true;
}

static bool in_set(const ir_node *n, const ir_node *const *set, int nset)
{
    for (int k = 0; k < nset; k++)
        if (set[k] == n) return true;
    return false;
}

/* x's bytes untouched from place `from` to `at`: no node placed in
 * (from, at] took them (the plan gave them away after x's last read). */
static bool bytes_kept(const epi_ctx *e, const ir_node *x, int from, int at)
{
    x = base_of(x);
    for (int i = from + 1; i <= at && i < e->g->nnodes; i++) {
        const ir_node *y = e->g->nodes[i];
        if (y != x && base_of(y) == y && overlap(e, x, y)) return false;
    }
    return true;
}

/* w written at place `at`, after its own: nothing but the group reads it
 * before, and its bytes are still its own there. */
static bool late_write_ok(const epi_ctx *e, const epi_group *grp, const ir_node *w, int at)
{
    if (w->mem == IR_MEM_NONE) return false;
    for (int k = 0; k < nuses(e, w); k++) {
        const ir_node *u = use(e, w, k);
        if (e->run_end[u->id] <= at && !in_set(u, grp->absorbed, grp->nabsorbed)) return false;
    }
    return bytes_kept(e, w, w->id, at);
}

/* A node the GEMM computes: in no fused kernel, or in one whose every node
 * the same GEMM computes (bias_gelu_back + colsum fused by the generic
 * pass), since a fused kernel is all or nothing. */
static bool run_absorbable(const epi_ctx *e, const epi_group *grp, const ir_node *n)
{
    if (n->fuse < 0) return true;
    int lo = n->id, hi = n->id;
    while (lo > 0 && e->g->nodes[lo - 1]->fuse == n->fuse) lo--;
    while (hi + 1 < e->g->nnodes && e->g->nodes[hi + 1]->fuse == n->fuse) hi++;
    for (int i = lo; i <= hi; i++)
        if (!in_set(e->g->nodes[i], grp->absorbed, grp->nabsorbed)) return false;
    return true;
}

static bool place_ok(const epi_ctx *e, const epi_group *grp, int at)
{
    for (int k = 0; k < grp->nouts; k++) {
        const ir_node *w = grp->outs[k];
        if (w->id > at && !early_write_ok(e, w, at)) return false;
        if (w->id < at && !late_write_ok(e, grp, w, at)) return false;
    }
    for (int k = 0; k < grp->nins; k++)
        if (grp->read_at[k] < at && !bytes_kept(e, grp->ins[k], grp->read_at[k], at)) return false;
    return true;
}

/* Records the group at the first place that works; false if none does. */
static bool place(epi_ctx *e, epi_group *grp)
{
    for (int k = 0; k < grp->nabsorbed; k++)
        if (e->p->absorbed[grp->absorbed[k]->id] >= 0 || !run_absorbable(e, grp, grp->absorbed[k])) return false;
    /* The places: the GEMM's own, then those of the nodes it computes, in
     * schedule order; never before its inputs exist. */
    int gemm = grp->choice.gemm, best = -1;
    int cand[EPI_MAX + 1], ncand = 0;
    cand[ncand++] = gemm;
    for (int k = 0; k < grp->nabsorbed; k++) {
        int at = grp->absorbed[k]->id, j = ncand++;
        for (; j > 0 && cand[j - 1] > at; j--) cand[j] = cand[j - 1];
        cand[j] = at;
    }
    for (int k = 0; k < ncand && best < 0; k++)
        if (cand[k] >= gemm && place_ok(e, grp, cand[k])) best = cand[k];
    if (best < 0) return false;
    e->p->at[best] = grp->choice;
    if (best != gemm) e->p->absorbed[gemm] = best;
    /* Including the node at `best` when the GEMM runs at its place: a fused
     * run it heads is then known to be absorbed whole. */
    for (int k = 0; k < grp->nabsorbed; k++) e->p->absorbed[grp->absorbed[k]->id] = best;
    return true;
}

static bool f32_gemm_node(const epi_ctx *e, const ir_node *n)
{
    return n->dtype == IR_F32 && n->mem != IR_MEM_NONE && e->p->at[n->id].epi == CG_EPI_NONE &&
           e->p->absorbed[n->id] < 0;
}

static void add_in(epi_group *grp, const ir_node *x, int at)
{
    grp->ins[grp->nins] = x;
    grp->read_at[grp->nins++] = at;
}

/* linear(x, w, b): the bias add goes into the GEMM, at the linear. */
static void choose_bias(epi_ctx *e)
{
    for (int i = 0; i < e->g->nnodes; i++) {
        const ir_node *n = e->g->nodes[i];
        if (n->op != IR_OP_LINEAR || n->nsrc != 3 || !f32_gemm_node(e, n) || n->src[2]->dtype != IR_F32) continue;
        e->p->at[i] = (cg_epi_choice){CG_EPI_BIAS, i, i, n->src[2]->id, -1};
    }
}

/* The colsum of node x (a bias gradient), or NULL. */
static const ir_node *colsum_of(const epi_ctx *e, const ir_node *x)
{
    for (int k = 0; k < nuses(e, x); k++) {
        const ir_node *u = use(e, x, k);
        if (u->op == IR_OP_COLSUM && u->dtype == IR_F32 && u->id > x->id && e->p->absorbed[u->id] < 0) return u;
    }
    return NULL;
}

/* matmul(dy, x) transpose_a = dy^T x, and colsum(dy): one GEMM computes
 * both. In cuBLASLt's column-major terms dy is the B operand (transposed)
 * and the bias gradient sums it over the GEMM's k: BGRADB. */
static void choose_bgradb(epi_ctx *e)
{
    for (int i = 0; i < e->g->nnodes; i++) {
        const ir_node *m = e->g->nodes[i];
        if (m->op != IR_OP_MATMUL || !f32_gemm_node(e, m)) continue;
        if (!ir_attr_bool(m, "transpose_a") || ir_attr_bool(m, "transpose_b")) continue;
        const ir_node *cs = colsum_of(e, m->src[0]);
        if (!cs) continue;
        epi_group grp = {.choice = {CG_EPI_BGRADB, i, i, cs->id, -1},
                         .outs = {m, cs}, .nouts = 2, .absorbed = {cs}, .nabsorbed = 1};
        add_in(&grp, m->src[0], i);
        add_in(&grp, m->src[1], i);
        place(e, &grp);
    }
}

/* ---- GELU: the fuse pass's bias_gelu and bias_gelu_back ---------------------- */

static bool gelu_tanh(const ir_node *n)
{
    return ir_op_attr_index(n->op, "approx") >= 0 && strcmp(ir_attr_sym(n, "approx"), "tanh") == 0;
}

/* bias_gelu_back(p, y, b) with p = matmul(dz, w2) read by it alone, and a
 * colsum of the result: one DGELU_BGRAD GEMM. false if the pattern does
 * not hold. */
static bool dgelu_group(const epi_ctx *e, const ir_node *bk, const ir_node *y, const ir_node *b, epi_group *grp)
{
    if (bk->nsrc != 3 || bk->src[1] != y || bk->src[2] != b || !gelu_tanh(bk) || bk->dtype != IR_F32) return false;
    const ir_node *p = bk->src[0];
    if (p->op != IR_OP_MATMUL || !f32_gemm_node(e, p) || ir_attr_bool(p, "transpose_a")) return false;
    if (nuses(e, p) != 1 || (p->flags & (IR_NF_OUTPUT | IR_NF_LOSS))) return false;
    const ir_node *cs = colsum_of(e, bk);
    if (!cs) return false;
    /* The matmul's own buffer is never written: bk's is C. */
    *grp = (epi_group){.choice = {CG_EPI_DGELU_BGRAD, p->id, bk->id, cs->id, y->id},
                       .outs = {bk, cs}, .nouts = 2, .absorbed = {bk, cs}, .nabsorbed = 2};
    add_in(grp, p->src[0], p->id);
    add_in(grp, p->src[1], p->id);
    add_in(grp, y, e->run_end[bk->id]);
    return true;
}

/* The forward group and, for every other reader of y (each must be a
 * fusable backward), its backward group; all placed, or none. */
static void choose_gelu_pair(epi_ctx *e, const ir_node *g, ir_op back_op)
{
    const ir_node *y = g->src[0], *b = g->src[1];
    if (g->nsrc != 2 || !gelu_tanh(g) || g->dtype != IR_F32 || b->dtype != IR_F32) return;
    if (y->op != IR_OP_LINEAR || y->nsrc != 2 || !f32_gemm_node(e, y)) return;
    /* cuBLASLt wants aux's leading dimension a multiple of 8. */
    if (LAST_DIM(y) % 8 != 0 || (y->flags & (IR_NF_OUTPUT | IR_NF_LOSS))) return;
    epi_group fwd = {.choice = {CG_EPI_GELU_AUX_BIAS, y->id, g->id, b->id, y->id},
                     .outs = {y, g}, .nouts = 2, .absorbed = {g}, .nabsorbed = 1};
    add_in(&fwd, y->src[0], y->id);
    add_in(&fwd, y->src[1], y->id);
    add_in(&fwd, b, e->run_end[g->id]);
    epi_group back[EPI_MAX];
    int nback = 0;
    for (int k = 0; k < nuses(e, y); k++) {
        const ir_node *u = use(e, y, k);
        if (u == g) continue;
        if (u->op != back_op || nback == EPI_MAX || !dgelu_group(e, u, y, b, &back[nback])) return;
        nback++;
    }
    /* All or none: the plan is restored when a group finds no place. */
    size_t n = (size_t)e->g->nnodes;
    cg_epi_choice *at = xmalloc((n + 1) * sizeof *at);
    int *absorbed = xmalloc((n + 1) * sizeof *absorbed);
    memcpy(at, e->p->at, n * sizeof *at);
    memcpy(absorbed, e->p->absorbed, n * sizeof *absorbed);
    bool ok = place(e, &fwd);
    for (int k = 0; k < nback && ok; k++) ok = place(e, &back[k]);
    if (!ok) {
        memcpy(e->p->at, at, n * sizeof *at);
        memcpy(e->p->absorbed, absorbed, n * sizeof *absorbed);
    }
    free(at);
    free(absorbed);
}

/* Looked up by name: the fuse pass defines these ops (ir/ops.def); in a
 * graph without them there is nothing to match. */
static void choose_gelu(epi_ctx *e)
{
    ir_op fwd, back;
    if (!ir_op_lookup("bias_gelu", &fwd) || !ir_op_lookup("bias_gelu_back", &back)) return;
    for (int i = 0; i < e->g->nnodes; i++) {
        const ir_node *n = e->g->nodes[i];
        if (n->op == fwd && e->p->absorbed[i] < 0) choose_gelu_pair(e, n, back);
    }
}

static bool epilogues_enabled(void)
{
    return env_flag("TGC_CUDA_EPILOGUES");
}

cg_epi_plan *cg_epi_plan_new(const ir_graph *g, cg_target t)
{
    cg_epi_plan *p = xcalloc(1, sizeof *p);
    p->n = g->nnodes;
    p->at = xcalloc((size_t)g->nnodes + 1, sizeof *p->at);
    p->absorbed = xmalloc(((size_t)g->nnodes + 1) * sizeof *p->absorbed);
    for (int i = 0; i < g->nnodes; i++) {
        p->at[i] = (cg_epi_choice){CG_EPI_NONE, i, i, -1, -1};
        p->absorbed[i] = -1;
    }
    /* Mixed precision: the epilogues of 16-bit GEMMs (a 16-bit bias and
     * aux, cuBLASLt's BIAS_DATA_TYPE / EPILOGUE_AUX_DATA_TYPE) where the
     * target runs them natively; a GEMM staged through fp32 has none. */
    bool half = g->precision == IR_BF16 || g->precision == IR_F16;
    if (t != CG_TARGET_CUDA || !epilogues_enabled() || (half && !cg_gemm16_native(t))) return p;
    epi_ctx e = {.g = g, .p = p};
    epi_analyse(&e);
    /* GELU first: the colsum a DGELU_BGRAD takes must not be offered to the
     * weight gradient that reads the same bias_gelu_back. */
    choose_gelu(&e);
    choose_bias(&e);
    choose_bgradb(&e);
    free(e.run_end);
    free(e.last);
    free(e.use_start);
    free(e.uses);
    return p;
}

void cg_epi_plan_free(cg_epi_plan *p)
{
    if (!p) return;
    free(p->at);
    free(p->absorbed);
    free(p);
}
