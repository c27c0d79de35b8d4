/* The pipeline-parallel pass (--pipeline-model-parallel-size p, with v
 * model chunks per rank): cuts the model into p*v virtual stages and routes
 * every value that crosses a cut through pp_send / pp_recv
 * (docs/pipeline.md).
 *
 *  - The layers are the block instances of the model's top-level loop,
 *    named NAME.<i>.… by the front end (`as layers[i]`); they are split
 *    into p*v contiguous chunks of equal layer counts (Megatron's rule), or
 *    of nearly equal forward FLOPs with --pp-balance flops. Chunk k is
 *    virtual stage k = c*p + r: model chunk c of pipeline rank r
 *    (node->chunk = c, node->stage = r).
 *  - A node outside the layers that depends on a layer runs on the latest
 *    stage among its operands (the final norm, the LM head and the loss end
 *    on the last stage); one that does not runs on the earliest stage that
 *    uses it (the embedding lands on the first stage, a parameter with the
 *    layer that reads it).
 *  - Each value used on a later stage is sent once to each stage that uses
 *    it: X.pp_send.S on X's stage, X.pp_recv.S on stage S. Autodiff, which
 *    runs next, sends the gradients back through the ops' gradient rules.
 *  - A parameter used on two stages -- GPT's word embedding, tied to the LM
 *    head -- stays one parameter on the first: the last stage receives it
 *    like any value, so the gradient autodiff sends back is summed into the
 *    one gradient of the first stage, and both uses always see the same
 *    weight. Such a transfer is marked per_step=true: the runtime sends
 *    the weight once per step and its gradient once, summed over the
 *    micro-batches (Megatron instead keeps a copy on the last stage and
 *    all-reduces the two gradients: the same bytes, and a second copy of
 *    the weight and its optimizer state).
 *  - With t > 1 the paper's scatter-gather: an activation replicated over
 *    the TP group is split along its last dim before the send (each TP
 *    rank sends 1/t) and all-gathered after the receive (tp_scatter /
 *    tp_gather, whose gradients do the same backwards). Values split
 *    already (sequence parallelism) are sent as they are.
 *    --no-scatter-gather sends whole activations. */
#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"
#include "rebuild.h"
#include "support/util.h"

typedef struct pp_ctx {
    rb_ctx rb;          /* the rebuild: old id -> node of the new graph */
    const ir_graph *g;  /* the graph being partitioned */
    int p, v, K, L;
    bool sg;            /* scatter-gather */
    int *layer;         /* old id -> global layer index, -1 outside the layers */
    int *first;         /* chunk k holds layers [first[k], first[k+1]) */
    int *vs;            /* old id -> virtual stage */
    bool *inv;          /* old id -> the same for every micro-batch (parameters and constants only) */
    ir_node ***recv;    /* old id -> per stage: the value as received there */
    ir_node **scatter;  /* old id -> its tp_scatter (made once, sent to every stage) */
} pp_ctx;

/* An error about the model as a whole (no one node to point at). */
static bool pp_fail(pp_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool pp_fail(pp_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->rb.err, sizeof c->rb.err, fmt, ap);
    va_end(ap);
    diag_error_plain(c->rb.d, "%s: %s", c->rb.what, c->rb.err);
    return false;
}

/* ---- the layers ------------------------------------------------------------ */

/* Finds the model's layers (ir_graph_find_layers). */
static bool find_layers(pp_ctx *c)
{
    bool found = ir_graph_find_layers(c->g, c->g->nnodes, c->layer);
    if (!found)
        pp_fail(c, "cannot find the model's %d layers: expected nodes named NAME.<i>.<rest> for i = 0 .. %d, as a "
                "top-level loop's `as NAME[i]` names them", c->L, c->L - 1);
    return found;
}

/* ---- the partition ----------------------------------------------------------- */

/* Chunks of equal forward FLOPs: the contiguous split of the layers into K
 * chunks (at least one layer each) whose largest chunk is smallest, the
 * layers before the first layer counting into chunk 0 and those after the
 * last into chunk K-1. Dynamic programming over (chunks, layers). */
static void balance_flops(pp_ctx *c)
{
    int L = c->L, K = c->K;
    double *cost = xcalloc((size_t)L + 2, sizeof *cost), pre = 0, post = 0;
    bool *after = xcalloc((size_t)c->g->nnodes + 1, 1);
    for (int i = 0; i < c->g->nnodes; i++) {
        const ir_node *n = c->g->nodes[i];
        double f = (double)ir_node_flops(n);
        for (int k = 0; k < n->nsrc; k++) after[i] |= after[n->src[k]->id] || c->layer[n->src[k]->id] >= 0;
        if (c->layer[i] >= 0) cost[c->layer[i]] += f;
        else if (after[i]) post += f;
        else pre += f;
    }
    double *prefix_sum = xcalloc((size_t)L + 1, sizeof *prefix_sum);
    for (int i = 0; i < L; i++)
        prefix_sum[i + 1] = prefix_sum[i] + cost[i] + (i == 0 ? pre : 0) + (i == L - 1 ? post : 0);
    /* best[k][i]: the smallest largest chunk splitting layers [0, i) into k chunks. */
    double *best = xmalloc((size_t)(K + 1) * (size_t)(L + 1) * sizeof *best);
    int *from = xcalloc((size_t)(K + 1) * (size_t)(L + 1), sizeof *from);
    for (int k = 0; k <= K; k++)
        for (int i = 0; i <= L; i++) best[k * (L + 1) + i] = k == 0 && i == 0 ? 0 : 1e300;
    for (int k = 1; k <= K; k++)
        for (int i = k; i <= L - (K - k); i++)
            for (int j = k - 1; j < i; j++) {
                double a = best[(k - 1) * (L + 1) + j], b = prefix_sum[i] - prefix_sum[j], m = a > b ? a : b;
                if (m < best[k * (L + 1) + i]) {
                    best[k * (L + 1) + i] = m;
                    from[k * (L + 1) + i] = j;
                }
            }
    c->first[K] = L;
    for (int k = K, i = L; k > 0; k--) i = c->first[k - 1] = from[k * (L + 1) + i];
    free(cost);
    free(after);
    free(prefix_sum);
    free(best);
    free(from);
}

static bool partition(pp_ctx *c, bool by_flops)
{
    if (by_flops) {
        if (c->L < c->K)
            return pp_fail(c, "%d layers cannot fill %d chunks (p x v = %d x %d) of at least one layer", c->L, c->K,
                           c->p, c->v);
        balance_flops(c);
        return true;
    }
    if (c->L % c->K != 0)
        return pp_fail(c, "%d layers do not divide into %d chunks (p x v = %d x %d); use a layer count that is a "
                       "multiple of %d, or --pp-balance flops", c->L, c->K, c->p, c->v, c->K);
    for (int k = 0; k <= c->K; k++) c->first[k] = k * (c->L / c->K);
    return true;
}

static int chunk_of_layer(const pp_ctx *c, int layer)
{
    int k = 0;
    while (k + 1 < c->K && c->first[k + 1] <= layer) k++;
    return k;
}

/* Every node's virtual stage: a layer's chunk; after the layers, the latest
 * operand's stage; before them, the earliest user's. */
static bool place(pp_ctx *c)
{
    const ir_graph *g = c->g;
    int n = g->nnodes;
    bool *dep = xcalloc((size_t)n + 1, 1);
    int *use = xmalloc(((size_t)n + 1) * sizeof *use);
    for (int i = 0; i < n; i++) {
        const ir_node *x = g->nodes[i];
        c->vs[i] = -1;
        use[i] = INT_MAX;
        if (c->layer[i] >= 0) {
            dep[i] = true;
            c->vs[i] = chunk_of_layer(c, c->layer[i]);
            continue;
        }
        for (int k = 0; k < x->nsrc; k++)
            if (dep[x->src[k]->id]) {
                dep[i] = true;
                if (c->vs[x->src[k]->id] > c->vs[i]) c->vs[i] = c->vs[x->src[k]->id];
            }
    }
    for (int i = n - 1; i >= 0; i--) {
        const ir_node *x = g->nodes[i];
        if (!dep[i]) c->vs[i] = use[i] == INT_MAX ? 0 : use[i];
        for (int k = 0; k < x->nsrc; k++)
            if (c->vs[i] < use[x->src[k]->id]) use[x->src[k]->id] = c->vs[i];
    }
    bool ok = true;
    for (int i = 0; ok && i < n; i++) {
        const ir_node *x = g->nodes[i];
        for (int k = 0; ok && k < x->nsrc; k++)
            if (c->vs[x->src[k]->id] > c->vs[i])
                ok = rb_fail(&c->rb, x, "'%s' (stage %d) uses '%s' of the later stage %d: the layers do not run one "
                             "after the other", x->name, c->vs[i], x->src[k]->name, c->vs[x->src[k]->id]);
        if (ok && (x->flags & IR_NF_LOSS) && c->vs[i] != c->K - 1)
            ok = rb_fail(&c->rb, x, "the loss '%s' does not depend on the last layer, so it cannot run on the last "
                         "stage", x->name);
    }
    free(dep);
    free(use);
    return ok;
}

/* ---- the rewrite --------------------------------------------------------------- */

static ir_node *placed(const pp_ctx *c, ir_node *m, int vs, ir_shard shard)
{
    if (m) {
        m->stage = vs % c->p;
        m->chunk = vs / c->p;
        m->shard = shard;
    }
    return m;
}

static ir_node *transfer(pp_ctx *c, ir_op op, ir_node *x, const char *attr, int peer, const ir_node *u, int dst)
{
    char name[1024];
    snprintf(name, sizeof name, "%s.%s.%d", u->name, ir_op_name(op), op == IR_OP_PP_SEND ? peer : dst);
    ir_node *m = ir_node_begin(c->rb.g, op, 1, &x, u->loc);
    ir_attr_set_int(m, attr, peer);
    if (c->inv[u->id]) ir_attr_set_bool(m, "per_step", true);
    ir_node *r = ir_node_end(c->rb.g, m, name, c->rb.err, sizeof c->rb.err);
    if (!r) rb_fail(&c->rb, u, "%s", c->rb.err);
    return placed(c, r, op == IR_OP_PP_SEND ? c->vs[u->id] : dst, x->shard);
}

/* The paper's scatter-gather applies to an activation every TP rank holds
 * whole (after the tp pass) whose last dim splits evenly. */
static bool scatter_gather(const pp_ctx *c, const ir_node *u, const ir_node *x)
{
    return c->sg && c->rb.t > 1 && !(ir_op_get(u->op)->flags & IR_OPF_LEAF) && x->shard.dim < 0 &&
           ir_dtype_is_float(x->dtype) && x->shape.rank > 0 && x->shape.dim[x->shape.rank - 1] % c->rb.t == 0;
}

/* Old node u's value on stage dst: sent once from u's stage to each stage
 * that uses it. */
static ir_node *received(pp_ctx *c, const ir_node *u, int dst)
{
    if (!c->recv[u->id]) c->recv[u->id] = xcalloc((size_t)c->K, sizeof **c->recv);
    ir_node **slot = &c->recv[u->id][dst];
    if (*slot) return *slot;
    ir_node *x = c->rb.map[u->id];
    int src = c->vs[u->id];
    bool sg = scatter_gather(c, u, x);
    if (sg && !c->scatter[u->id]) {
        ir_node *s = rb_comm(&c->rb, IR_OP_TP_SCATTER, x, u, x->shape.rank - 1, NULL);
        c->scatter[u->id] = s ? placed(c, s, src, s->shard) : NULL;
        if (!s) return NULL;
    }
    ir_node *send = transfer(c, IR_OP_PP_SEND, sg ? c->scatter[u->id] : x, "to_stage", dst, u, dst);
    ir_node *r = send ? transfer(c, IR_OP_PP_RECV, send, "from_stage", src, u, dst) : NULL;
    if (r && sg) {
        char name[1024];
        snprintf(name, sizeof name, "%s.tp_gather.%d", u->name, dst);
        r = rb_comm(&c->rb, IR_OP_TP_GATHER, r, u, -1, name);
        r = placed(c, r, dst, x->shard);
    }
    return *slot = r;
}

static bool copy_node(pp_ctx *c, const ir_node *n)
{
    int vs = c->vs[n->id];
    if (ir_op_get(n->op)->flags & IR_OPF_LEAF) {
        if (!rb_copy_leaf(&c->rb, n, &n->shape, n->shard.dim)) return false;
        placed(c, c->rb.map[n->id], vs, n->shard);
        return true;
    }
    ir_node *srcs[64];
    if (n->nsrc > 64) return rb_fail(&c->rb, n, "%s has too many operands", ir_op_name(n->op));
    for (int k = 0; k < n->nsrc; k++) {
        const ir_node *u = n->src[k];
        srcs[k] = c->vs[u->id] == vs ? c->rb.map[u->id] : received(c, u, vs);
        if (!srcs[k]) return false;
    }
    ir_node *m = rb_emit(&c->rb, n, n->op, n->nsrc, srcs, n->name, n->loc);
    c->rb.map[n->id] = placed(c, m, vs, n->shard);
    return m != NULL;
}

/* ---- the pass -------------------------------------------------------------------- */

/* p and v from the options, with Megatron's --num-layers-per-virtual-
 * pipeline-stage N meaning v = layers / (p N). */
static bool dims(pp_ctx *c, const pass_options *o, diag *d)
{
    if (o->pp < 1 || o->vp < 1 || o->vp_layers < 0 || o->pp > 4096 || o->vp > 4096) {
        diag_error_plain(d, "pipeline parallelism: --pp %lld and --vp %lld must be between 1 and 4096",
                         (long long)o->pp, (long long)o->vp);
        return false;
    }
    c->p = (int)o->pp;
    c->v = (int)o->vp;
    if (o->vp_layers > 0 && c->p > 1) {
        int64_t per_rank = (int64_t)c->p * o->vp_layers;
        if (c->L % per_rank != 0 || (o->vp > 1 && c->L / per_rank != o->vp)) {
            diag_error_plain(d, "pipeline parallelism: --num-layers-per-virtual-pipeline-stage %lld: %d layers are "
                             "not %s chunks of %lld layers on each of %d ranks", (long long)o->vp_layers, c->L,
                             o->vp > 1 ? "--vp" : "whole", (long long)o->vp_layers, c->p);
            return false;
        }
        c->v = (int)pass_pp_chunks(o, c->L);
    }
    if (c->v > 1 && c->p == 1) {
        diag_error_plain(d, "pipeline parallelism: %d model chunks per rank need --pp above 1", c->v);
        return false;
    }
    const char *sched = o->pipeline_schedule ? o->pipeline_schedule : "1f1b";
    if (c->v > 1 && strcmp(sched, "interleaved") != 0) {
        diag_error_plain(d, "pipeline parallelism: %d model chunks per rank (--vp) need --pipeline-schedule "
                         "interleaved, not %s", c->v, sched);
        return false;
    }
    c->K = c->p * c->v;
    return true;
}

static bool already(const ir_graph *g, diag *d)
{
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = g->nodes[i];
        if (n->stage >= 0 || n->phase != IR_PHASE_NONE) {
            diag_error(d, n->loc, "pipeline parallelism runs once, before autodiff: '%%%s' %s", n->name,
                       n->stage >= 0 ? "has a stage already" : "has a phase of the training step already");
            return true;
        }
    }
    if (ir_graph_pass_ran(g, "autodiff")) {
        diag_error_plain(d, "pipeline parallelism runs once, before autodiff: the IR's passes line records autodiff");
        return true;
    }
    return false;
}

bool pass_pp(ir_graph *g, pass_ctx *ctx)
{
    pass_options dflt;
    if (!ctx->opts) pass_options_defaults(&dflt);
    const pass_options *o = ctx->opts ? ctx->opts : &dflt;
    if (o->pp <= 1 && o->vp <= 1) return true;
    pp_ctx c = {.g = g, .L = g->num_layers, .sg = !o->no_scatter_gather};
    if (!dims(&c, o, ctx->d) || already(g, ctx->d)) return false;
    if (c.K == 1) return true;
    char what[96];
    if (c.v > 1) snprintf(what, sizeof what, "pipeline parallelism (--pp %d --vp %d)", c.p, c.v);
    else snprintf(what, sizeof what, "pipeline parallelism (--pp %d)", c.p);
    rb_begin(&c.rb, g, o->tp > 1 ? o->tp : 1, what, ctx->d);
    size_t n = (size_t)g->nnodes + 1;
    c.layer = xmalloc(n * sizeof *c.layer);
    c.vs = xmalloc(n * sizeof *c.vs);
    c.first = xcalloc((size_t)c.K + 1, sizeof *c.first);
    c.recv = xcalloc(n, sizeof *c.recv);
    c.scatter = xcalloc(n, sizeof *c.scatter);
    c.inv = xcalloc(n, sizeof *c.inv);
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *u = g->nodes[i];
        bool leaf = ir_op_get(u->op)->flags & IR_OPF_LEAF;
        c.inv[i] = leaf ? u->op != IR_OP_INPUT : u->op != IR_OP_DROPOUT;
        for (int k = 0; !leaf && k < u->nsrc; k++) c.inv[i] &= c.inv[u->src[k]->id];
    }
    bool ok = c.L > 0 || pp_fail(&c, "the model has no layers to split into stages (num_layers is 0: no top-level "
                                 "loop instantiates a block)");
    ok = ok && find_layers(&c) && partition(&c, o->pp_balance_flops) && place(&c);
    for (int i = 0; ok && i < g->nnodes; i++) ok = copy_node(&c, g->nodes[i]);
    for (size_t i = 0; i < n; i++) free(c.recv[i]);
    free(c.recv);
    free(c.scatter);
    free(c.inv);
    free(c.layer);
    free(c.vs);
    free(c.first);
    return rb_end(&c.rb, ok);
}
