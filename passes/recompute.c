/* Activation recomputation (docs/recompute.md): Megatron-LM's
 * --recompute-granularity full | selective on the post-autodiff graph.
 *
 * A recomputed forward value is not kept for the backward: the backward's
 * readers of it read a clone instead, `<name>.recompute`, placed just before
 * its first backward reader (node order is execution order). The original
 * then dies with its last forward reader, and memplan's liveness hands its
 * bytes to later values; the clone lives only through the backward part
 * that reads it. A clone is the same op with the same attributes, type,
 * shard, stage and location as the original, reading the clones of its
 * recomputed operands and the originals of the kept ones, so it computes
 * the same bits: dropout keeps its key, and a mask is a function of (seed,
 * step, key, global index) alone (codegen/emit.c), never of the node.
 *
 *  selective  the attention core of every attention: the QK^T bmm (and a
 *             scale between it and the softmax), the softmax, the attention
 *             dropout, the bmm with V. Q, K and V themselves stay, as do the
 *             layer's other values (the paper's section 5: the 5as/h term of
 *             sbh(34 + 5as/h) goes, the 34 stays). A fused attention op (the
 *             attention pass's, docs/attention.md) is no such core: it keeps
 *             only its output and row log-sum-exp, O(s) each, and its
 *             backward already recomputes the scores tile by tile, so there
 *             is no s x s term to drop and selective leaves it kept (as
 *             Megatron does with flash attention). Full recomputation clones
 *             it with the rest of its layer (same key: the same mask).
 *  full       whole transformer layers (the block instances NAME.<i>.… of
 *             the model's top-level loop, as pp.c finds them), from the
 *             input of their group: with method uniform the layers of each
 *             model chunk are cut into groups of N and only each group's
 *             input is kept; with block the first N layers of each chunk are
 *             recomputed (one group per layer) and the others kept whole.
 *             A group's output, which the next group reads, is the next
 *             group's kept input. Pipeline sends and receives are never
 *             recomputed; tensor-parallel collectives are, on every rank at
 *             the same point, as Megatron re-runs them.
 *
 * Outputs and the loss are kept (they live to the end anyway). The pass
 * needs the backward graph: the nodes after the loss gradient's seed (the
 * `full` autodiff flags `seed`, named grad.<loss>) are the backward, the
 * ones before it the forward. */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pass.h"
#include "support/util.h"

bool pass_recompute_parse(const char *granularity, int *out)
{
    static const char *const names[] = {[PASS_RECOMPUTE_NONE] = "none", [PASS_RECOMPUTE_SELECTIVE] = "selective",
                                        [PASS_RECOMPUTE_FULL] = "full"};
    for (int i = 0; i < (int)ARRAY_LEN(names); i++)
        if (granularity && strcmp(granularity, names[i]) == 0) {
            *out = i;
            return true;
        }
    return false;
}

typedef struct rc_ctx {
    ir_graph *g;
    diag *d;
    int nfwd;        /* nodes [0, nfwd) are the forward, from the seed on the backward */
    bool *redo;      /* per forward node: recomputed in the backward */
    ir_node **clone; /* per forward node: its clone, once made */
    ir_node **order; /* the new node order */
    int norder;
    int nclones;
} rc_ctx;

/* ---- selective: the attention core ------------------------------------------- */

/* Forward users of forward nodes, CSR (off[i] .. off[i+1]). */
static void users_build(const ir_graph *g, int n, int **off_out, int **use_out)
{
    int *off = xcalloc((size_t)n + 2, sizeof *off);
    for (int i = 0; i < n; i++)
        for (int s = 0; s < g->nodes[i]->nsrc; s++) off[g->nodes[i]->src[s]->id + 2]++;
    for (int i = 0; i < n; i++) off[i + 2] += off[i + 1];
    int *use = xmalloc(((size_t)off[n + 1] + 1) * sizeof *use);
    for (int i = 0; i < n; i++)
        for (int s = 0; s < g->nodes[i]->nsrc; s++) use[off[g->nodes[i]->src[s]->id + 1]++] = i;
    *off_out = off;
    *use_out = use;
}

/* The forward user of x with op `op` reading x as operand `slot`, or NULL. */
static ir_node *user_of(const rc_ctx *c, const int *off, const int *use, const ir_node *x, ir_op op, int slot)
{
    for (int u = off[x->id]; u < off[x->id + 1]; u++) {
        ir_node *n = c->g->nodes[use[u]];
        if (n->op == op && n->nsrc > slot && n->src[slot] == x) return n;
    }
    return NULL;
}

/* Marks, for every softmax fed by a bmm (through at most one scale) whose
 * result (through at most one dropout) a bmm reads as its left operand,
 * the bmm, scale, softmax, dropout and bmm. Other softmaxes are no
 * attention core and stay. */
static void mark_selective(rc_ctx *c)
{
    int *off, *use;
    users_build(c->g, c->nfwd, &off, &use);
    for (int i = 0; i < c->nfwd; i++) {
        ir_node *sm = c->g->nodes[i];
        if (sm->op != IR_OP_SOFTMAX) continue;
        ir_node *scale = sm->src[0]->op == IR_OP_SCALE ? sm->src[0] : NULL;
        ir_node *qk = scale ? scale->src[0] : sm->src[0];
        ir_node *drop = user_of(c, off, use, sm, IR_OP_DROPOUT, 0);
        ir_node *pv = user_of(c, off, use, drop ? drop : sm, IR_OP_BMM, 0);
        if (qk->op != IR_OP_BMM || !pv) continue;
        ir_node *core[] = {qk, scale, sm, drop, pv};
        for (size_t k = 0; k < ARRAY_LEN(core); k++)
            if (core[k]) c->redo[core[k]->id] = true;
    }
    free(off);
    free(use);
}

/* ---- full: whole layers ------------------------------------------------------- */

/* layer[i] for every forward node: the global index of the layer it belongs
 * to, or -1 (ir_graph_find_layers, the rule of the pp pass). */
static bool find_layers(const rc_ctx *c, int *layer)
{
    return ir_graph_find_layers(c->g, c->nfwd, layer);
}

/* group[l]: the first layer of layer l's group, or -1 when l is kept. A
 * model chunk (the pp pass's stage and chunk; the whole model without a
 * pipeline) starts its groups afresh, as Megatron's per-chunk
 * checkpointing does. */
static void groups_of(const rc_ctx *c, const int *layer, int L, int64_t n, bool block, int *group)
{
    const ir_graph *g = c->g;
    int *stage = xmalloc((size_t)L * sizeof *stage), *chunk = xmalloc((size_t)L * sizeof *chunk);
    for (int l = 0; l < L; l++) stage[l] = chunk[l] = INT_MIN;
    for (int i = 0; i < c->nfwd; i++)
        if (layer[i] >= 0 && stage[layer[i]] == INT_MIN) {
            stage[layer[i]] = g->nodes[i]->stage;
            chunk[layer[i]] = g->nodes[i]->chunk;
        }
    int64_t local = 0;
    for (int l = 0; l < L; l++) {
        local = l > 0 && stage[l] == stage[l - 1] && chunk[l] == chunk[l - 1] ? local + 1 : 0;
        if (block) group[l] = local < n ? l : -1;
        else group[l] = l - (int)(local % n);
    }
    free(stage);
    free(chunk);
}

static bool never_recomputed(const ir_node *n)
{
    return (ir_op_get(n->op)->flags & IR_OPF_LEAF) || n->op == IR_OP_PP_SEND || n->op == IR_OP_PP_RECV ||
           (n->flags & (IR_NF_OUTPUT | IR_NF_LOSS));
}

static bool mark_full(rc_ctx *c, const pass_options *o)
{
    const ir_graph *g = c->g;
    int L = g->num_layers;
    int *layer = xmalloc(((size_t)c->nfwd + 1) * sizeof *layer);
    if (!find_layers(c, layer)) {
        diag_error_plain(c->d, "recompute: --recompute-granularity full: cannot find the model's %d layers: "
                         "expected nodes named NAME.<i>.<rest> for i = 0 .. %d, as a top-level loop's "
                         "`as NAME[i]` names them", L, L - 1);
        free(layer);
        return false;
    }
    int *group = xmalloc((size_t)L * sizeof *group);
    groups_of(c, layer, L, o->recompute_layers, o->recompute_block, group);
    for (int i = 0; i < c->nfwd; i++)
        c->redo[i] = layer[i] >= 0 && group[layer[i]] >= 0 && !never_recomputed(g->nodes[i]);
    /* A value a node outside its group reads (the group's output, the next
     * group's input) is kept; the clones inside the group then read that
     * original, which stays live anyway. */
    for (int i = 0; i < c->nfwd; i++) {
        const ir_node *u = g->nodes[i];
        int gu = layer[i] >= 0 ? group[layer[i]] : -1;
        for (int s = 0; s < u->nsrc; s++) {
            int x = u->src[s]->id;
            if (c->redo[x] && (gu < 0 || gu != group[layer[x]])) c->redo[x] = false;
        }
    }
    free(group);
    free(layer);
    return true;
}

/* ---- the rewrite ---------------------------------------------------------------- */

/* The clone of recomputed forward node x, made (after the clones of its
 * recomputed operands) at the current end of the new order. */
static ir_node *clone_of(rc_ctx *c, ir_node *x)
{
    if (c->clone[x->id]) return c->clone[x->id];
    ir_node *m = ir_node_alloc(c->g, x->op, x->nsrc);
    for (int s = 0; s < x->nsrc; s++) {
        ir_node *a = x->src[s];
        m->src[s] = a->id < c->nfwd && c->redo[a->id] ? clone_of(c, a) : a;
    }
    memcpy(m->attrs, x->attrs, (size_t)ir_op_get(x->op)->nattrs * sizeof *m->attrs);
    m->dtype = x->dtype;
    m->shape = x->shape;
    m->flags = x->flags;
    m->loc = x->loc;
    m->shard = x->shard;
    m->stage = x->stage;
    m->chunk = x->chunk;
    const char *base = arena_printf(&c->g->mem, "%s.recompute", x->name), *name = base;
    for (int k = 1; ir_graph_find(c->g, name); k++) name = arena_printf(&c->g->mem, "%s.%d", base, k);
    m->name = name;
    TGC_ASSERT(ir_graph_append_raw(c->g, m));
    c->clone[x->id] = m;
    c->order[c->norder++] = m;
    c->nclones++;
    return m;
}

static bool dropout_keys_set(const rc_ctx *c)
{
    for (int i = 0; i < c->nfwd; i++) {
        const ir_node *n = c->g->nodes[i];
        if (c->redo[i] && (n->op == IR_OP_DROPOUT || n->op == IR_OP_ATTENTION) && ir_attr_int(n, "key") == 0) {
            diag_error(c->d, n->loc, "recompute: %s '%%%s' has no key, so its clone would draw another mask "
                       "(autodiff gives every dropout and attention one)", ir_op_name(n->op), n->name);
            return false;
        }
    }
    return true;
}

/* Walks the graph in order; before each backward node, the clones of the
 * recomputed values it reads. Then the new order replaces the old. */
static void rewrite(rc_ctx *c)
{
    ir_graph *g = c->g;
    int n = g->nnodes, cap = n;
    for (int i = 0; i < c->nfwd; i++) cap += c->redo[i];
    c->order = xmalloc(((size_t)cap + 1) * sizeof *c->order);
    ir_node **old = xmalloc(((size_t)n + 1) * sizeof *old);
    memcpy(old, g->nodes, (size_t)n * sizeof *old);
    for (int i = 0; i < n; i++) {
        ir_node *b = old[i];
        for (int s = 0; i >= c->nfwd && s < b->nsrc; s++)
            if (b->src[s]->id < c->nfwd && c->redo[b->src[s]->id]) b->src[s] = clone_of(c, b->src[s]);
        c->order[c->norder++] = b;
    }
    TGC_ASSERT(c->norder == g->nnodes);
    memcpy(g->nodes, c->order, (size_t)c->norder * sizeof *g->nodes);
    bool *keep = xmalloc((size_t)g->nnodes + 1);
    memset(keep, 1, (size_t)g->nnodes + 1);
    ir_graph_compact(g, keep); /* renumbers, rebuilds the name and CSE maps */
    free(keep);
    free(old);
}

bool pass_recompute(ir_graph *g, pass_ctx *ctx)
{
    pass_options defaults;
    pass_options_defaults(&defaults);
    const pass_options *o = ctx->opts ? ctx->opts : &defaults;
    if (o->recompute == PASS_RECOMPUTE_NONE) return true;
    if (o->recompute_layers < 1) {
        diag_error_plain(ctx->d, "recompute: --recompute-num-layers %lld: expected at least 1",
                         (long long)o->recompute_layers);
        return false;
    }
    const ir_node *loss = ir_graph_loss(g), *s = loss ? ir_graph_seed(g) : NULL;
    if (!s) {
        diag_error_plain(ctx->d, "recompute: the graph has no backward (%s); run autodiff first",
                         loss ? "no node grad.<loss>" : "no loss");
        return false;
    }
    rc_ctx c = {.g = g, .d = ctx->d, .nfwd = s->id};
    c.redo = xcalloc((size_t)c.nfwd + 1, sizeof *c.redo);
    c.clone = xcalloc((size_t)c.nfwd + 1, sizeof *c.clone);
    bool ok = true;
    if (o->recompute == PASS_RECOMPUTE_SELECTIVE) mark_selective(&c);
    else ok = mark_full(&c, o);
    ok = ok && dropout_keys_set(&c);
    if (ok) rewrite(&c);
    free(c.redo);
    free(c.clone);
    free(c.order);
    return ok;
}
