/* The tensor-parallel pass (--tensor-model-parallel-size t): rewrites the
 * serial forward graph into the program of one TP rank, Megatron-style.
 *
 *  - column-parallel linear: weight and bias split by output features
 *    (dim 0); the input enters through tp_copy (identity forward, all-reduce
 *    backward); the output stays split on its last dim, or is gathered
 *    (tp_gather) with gather_output;
 *  - row-parallel linear: weight split by input features (dim 1); the input
 *    is already split (input_is_parallel) or enters through tp_scatter; the
 *    partial products are summed by tp_reduce and the bias, not split, is
 *    added once after it;
 *  - vocab-parallel embedding: rows split; each rank looks up the tokens of
 *    its vocabulary range (zero elsewhere) and tp_reduce sums;
 *  - everything in between follows the split by the op's axis rule
 *    (ops.def's axis column, ir/axis.c): elementwise ops keep it, reshapes
 *    move it by how the dims factor (the split moves to the outermost
 *    factor: [s, b, 3h] -> [s, b, n, 3d] splits heads, whatever b is),
 *    permutes move it, slices keep it along other dims, batched matmuls over
 *    split batch dims, softmax and rope over split heads.
 *
 * Every value carries its split in node->shard (dim, group tp). A split
 * that an op cannot keep (a norm over a split hidden dim, a softmax over a
 * split last dim, an op without an axis rule, a dimension that does not
 * divide by t) is an error at the op's source location naming the node.
 * Autodiff, which runs next, derives the backward collectives from the
 * gradient rules of the communication ops.
 *
 * Cross-entropy over vocab-split logits is the vocab-parallel
 * cross-entropy, which never gathers them (docs/parallel.md).
 *
 * Grouped-query attention splits whole query groups, as Megatron does: each
 * rank holds g/t key/value heads and the n/t query heads that read them; a t
 * that does not divide g is refused, naming both sizes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rebuild.h"
#include "support/util.h"

typedef rb_ctx tp_ctx; /* aux: the split dim of each parameter, -2 undecided */

#define split rb_split
#define set_split rb_set_split
#define tp_fail rb_fail
#define emit rb_emit
#define comm rb_comm
#define LAST_DIM(x) ((x)->shape.dim[(x)->shape.rank - 1])

/* ---- parameters: the split each one's uses ask for ------------------------- */

static bool want(tp_ctx *c, const ir_node *p, int dim, const ir_node *user)
{
    if (!(p->flags & IR_NF_PARAM)) return true;
    int8_t *w = &c->aux[p->id];
    if (*w == -2 || *w == dim) { *w = (int8_t)dim; return true; }
    return tp_fail(c, user, "parameter '%s' is split along dim %d by one use and %s by this one", p->name, *w,
                   dim < 0 ? "not split" : "along another dim");
}

/* Parameters whose dim 0 is the vocabulary (aux bit): a vocab-parallel
 * embedding's weight, and the weight of a column-parallel linear whose
 * output is the logits of a cross-entropy. */
#define TP_VOCAB 0x40

static void plan_vocab(tp_ctx *c)
{
    for (int i = 0; i < c->old->nnodes; i++) {
        const ir_node *n = c->old->nodes[i], *w = NULL, *b = NULL;
        if (n->op == IR_OP_EMBEDDING && strcmp(ir_attr_sym(n, "parallel"), "vocab") == 0) w = n->src[1];
        if (n->op == IR_OP_CROSS_ENTROPY && n->src[0]->op == IR_OP_LINEAR &&
            strcmp(ir_attr_sym(n->src[0], "parallel"), "column") == 0 && !ir_attr_bool(n->src[0], "gather_output")) {
            w = n->src[0]->src[1];
            b = n->src[0]->nsrc == 3 ? n->src[0]->src[2] : NULL; /* the LM head's bias */
        }
        if (w && (w->flags & IR_NF_PARAM) && c->aux[w->id] == 0) c->aux[w->id] |= TP_VOCAB;
        if (b && (b->flags & IR_NF_PARAM) && c->aux[b->id] == 0) c->aux[b->id] |= TP_VOCAB;
    }
}

/* Megatron's padded vocabulary: a multiple of 128 * t. */
static int64_t padded_vocab(int64_t v, int64_t t) { return (v + 128 * t - 1) / (128 * t) * (128 * t); }

static bool plan_params(tp_ctx *c)
{
    bool ok = true;
    for (int i = 0; i < c->old->nnodes && ok; i++) {
        const ir_node *n = c->old->nodes[i];
        if (n->op == IR_OP_LINEAR) {
            const char *par = ir_attr_sym(n, "parallel");
            int wd = strcmp(par, "column") == 0 ? 0 : strcmp(par, "row") == 0 ? 1 : -1;
            ok = want(c, n->src[1], wd, n) && (n->nsrc < 3 || want(c, n->src[2], wd == 0 ? 0 : -1, n));
        } else if (n->op == IR_OP_EMBEDDING) {
            ok = want(c, n->src[1], strcmp(ir_attr_sym(n, "parallel"), "vocab") == 0 ? 0 : -1, n);
        } else {
            for (int s = 0; s < n->nsrc && ok; s++) ok = want(c, n->src[s], -1, n);
        }
    }
    return ok;
}

static bool copy_leaf(tp_ctx *c, const ir_node *n)
{
    ir_shape s = n->shape;
    int dim = n->flags & IR_NF_PARAM ? c->aux[n->id] : -1;
    if (dim == -2) dim = -1; /* a parameter no op uses: whole */
    int64_t rows = 0;
    if (dim >= 0 && (dim & TP_VOCAB)) {
        dim &= ~TP_VOCAB;
        if (padded_vocab(s.dim[0], c->t) != s.dim[0]) rows = s.dim[0];
        s.dim[0] = padded_vocab(s.dim[0], c->t);
    }
    if (dim >= 0) {
        if (s.dim[dim] % c->t != 0)
            return tp_fail(c, n, "dimension %d of parameter '%s' (%lld) does not divide by %lld", dim, n->name,
                           (long long)s.dim[dim], (long long)c->t);
        s.dim[dim] /= c->t;
    }
    if (!rb_copy_leaf(c, n, &s, dim)) return false;
    if (rows) ir_attr_set_int(c->map[n->id], "rows", rows);
    return true;
}

/* ---- grouped-query attention ------------------------------------------------- */

/* The column-parallel linear that x comes from through one-operand ops
 * (reshape, slice, rope, permute), or NULL. */
static const ir_node *column_source(const ir_node *x)
{
    for (int steps = 0; steps < 32 && x->nsrc == 1; steps++) x = x->src[0];
    if (x->op != IR_OP_LINEAR || strcmp(ir_attr_sym(x, "parallel"), "column") != 0) return NULL;
    return x;
}

/* A repeat_interleave of key/value heads made by a column-parallel linear
 * (k and v of grouped-query attention) gives each rank whole query groups:
 * t must divide its g heads (then also the g * r query heads). */
static bool check_query_groups(tp_ctx *c)
{
    for (int i = 0; i < c->old->nnodes; i++) {
        const ir_node *n = c->old->nodes[i];
        if (n->op != IR_OP_REPEAT_INTERLEAVE || !column_source(n->src[0])) continue;
        int axis = (int)ir_attr_int(n, "axis");
        int64_t g = n->src[0]->shape.dim[axis], heads = n->shape.dim[axis];
        if (g % c->t != 0) /* one error: every layer would say the same */
            return tp_fail(c, n, "num-query-groups %lld is not divisible by tensor-model-parallel size %lld "
                           "(repeat_interleave '%%%s' shares %lld key/value heads among %lld query heads; each "
                           "rank takes whole query groups)", (long long)g, (long long)c->t, n->name, (long long)g,
                           (long long)heads);
    }
    return true;
}

/* ---- the ops that create or remove a split --------------------------------- */

/* A value the model marks (output, loss) that tp computes as a partial sum
 * and its reduction: the marks belong to the reduced value r, the one that
 * stands for n, never to the partial y. Returns r. */
static ir_node *tp_move_flags(ir_node *y, ir_node *r, const ir_node *n)
{
    const unsigned marks = IR_NF_OUTPUT | IR_NF_LOSS;
    y->flags &= ~marks;
    if (r) r->flags |= n->flags & marks;
    return r;
}

static bool tp_linear(tp_ctx *c, const ir_node *n)
{
    ir_node *x = c->map[n->src[0]->id], *w = c->map[n->src[1]->id];
    ir_node *b = n->nsrc == 3 ? c->map[n->src[2]->id] : NULL;
    const char *par = ir_attr_sym(n, "parallel");
    int last = n->shape.rank - 1;
    char name[1024];
    if (strcmp(par, "column") == 0) {
        if (split(x)) return tp_fail(c, n, "the input of a column-parallel linear is already split");
        ir_node *srcs[3] = {comm(c, IR_OP_TP_COPY, x, n, -1, NULL), w, b};
        if (!srcs[0]) return false;
        bool gather = ir_attr_bool(n, "gather_output");
        snprintf(name, sizeof name, "%s%s", n->name, gather ? ".split" : "");
        ir_node *y = emit(c, n, IR_OP_LINEAR, n->nsrc, srcs, name, n->loc);
        if (!y) return false;
        set_split(y, last);
        c->map[n->id] = gather ? comm(c, IR_OP_TP_GATHER, y, n, -1, n->name) : y;
        return c->map[n->id] != NULL;
    }
    if (strcmp(par, "row") == 0) {
        if (!split(x) || x->shard.dim != last) {
            if (ir_attr_bool(n, "input_is_parallel") || split(x))
                return tp_fail(c, n, "the input of this row-parallel linear is not split along its last dim");
            if (!(x = comm(c, IR_OP_TP_SCATTER, x, n, last, NULL))) return false;
        }
        ir_node *srcs[2] = {x, w};
        snprintf(name, sizeof name, "%s.partial", n->name);
        ir_node *y = emit(c, n, IR_OP_LINEAR, 2, srcs, name, n->loc);
        if (!y) return false;
        set_split(y, -1);
        /* The bias is added once, after the sum over the group. */
        snprintf(name, sizeof name, "%s%s", n->name, b ? ".reduced" : "");
        ir_node *r = comm(c, IR_OP_TP_REDUCE, y, n, -1, name);
        if (r && b) {
            ir_node *bs[2] = {r, b};
            r = emit(c, NULL, IR_OP_BIAS_ADD, 2, bs, n->name, n->loc);
        }
        c->map[n->id] = tp_move_flags(y, r, n);
        return r != NULL;
    }
    if (split(x)) return tp_fail(c, n, "a linear on a split value needs parallel=column or parallel=row");
    ir_node *srcs[3] = {x, w, b};
    return (c->map[n->id] = emit(c, n, IR_OP_LINEAR, n->nsrc, srcs, n->name, n->loc)) != NULL;
}

static bool tp_embedding(tp_ctx *c, const ir_node *n)
{
    ir_node *srcs[2] = {c->map[n->src[0]->id], c->map[n->src[1]->id]};
    if (!split(srcs[1])) return (c->map[n->id] = emit(c, n, IR_OP_EMBEDDING, 2, srcs, n->name, n->loc)) != NULL;
    /* Each rank looks up the tokens of its vocabulary range; the sum over
     * the group assembles every row. */
    char name[1024];
    snprintf(name, sizeof name, "%s.partial", n->name);
    ir_node *y = emit(c, n, IR_OP_EMBEDDING, 2, srcs, name, n->loc);
    if (!y) return false;
    c->map[n->id] = tp_move_flags(y, comm(c, IR_OP_TP_REDUCE, y, n, -1, n->name), n);
    return c->map[n->id] != NULL;
}

static bool tp_reshape(tp_ctx *c, const ir_node *n)
{
    ir_node *x = c->map[n->src[0]->id];
    if (!split(x)) return (c->map[n->id] = emit(c, n, IR_OP_RESHAPE, 1, &x, n->name, n->loc)) != NULL;
    int j = ir_axis_map(n, 0, x->shard.dim);
    if (j < 0)
        return tp_fail(c, n, "this reshape mixes the split dim %d of its input with the dims outside it",
                       x->shard.dim);
    if (n->shape.dim[j] % c->t != 0)
        return tp_fail(c, n, "the split moves to dim %d of the reshape's result, of size %lld, which does not divide "
                       "by %lld (e.g. the number of attention heads)", j, (long long)n->shape.dim[j], (long long)c->t);
    ir_shape s = n->shape; /* the serial graph's resolved shape */
    s.dim[j] /= c->t;
    ir_node *m = ir_node_begin(c->g, IR_OP_RESHAPE, 1, &x, n->loc);
    ir_attr_set_ints(m, "shape", s.dim, s.rank);
    m->flags = n->flags;
    ir_node *r = ir_node_end(c->g, m, n->name, c->err, sizeof c->err);
    if (!r) return tp_fail(c, n, "%s", c->err);
    set_split(r, j);
    c->map[n->id] = r;
    return true;
}

/* ---- the ops that keep a split ------------------------------------------------ */

/* The split of n's result by its axis rule (ops.def), or -2 after
 * reporting why n cannot keep its operands' splits. An operand that is not
 * split but has a dim landing on the result's split dim would be combined
 * whole with the other operands' blocks: refused too. */
static int result_split(tp_ctx *c, const ir_node *n, ir_node **srcs)
{
    int dims[64];
    for (int i = 0; i < n->nsrc; i++) dims[i] = srcs[i]->shard.dim;
    int j = rb_follow(c, n, dims, false, "the split");
    for (int i = 0; j >= 0 && i < n->nsrc; i++)
        for (int e = 0; dims[i] < 0 && e < srcs[i]->shape.rank; e++)
            if (ir_axis_map(n, i, e) == j)
                return tp_fail(c, n, "%s '%%%s': operand %d is not split, but its dim %d meets the split dim %d of "
                               "the other operands", ir_op_name(n->op), n->name, i, e, j), -2;
    return j;
}

/* op(srcs) named NAME.SUFFIX, all-reduced over the group with `reduce`. */
static ir_node *vp_reduced(tp_ctx *c, const ir_node *n, ir_op op, int nsrc, ir_node **srcs, const char *suffix,
                           const char *reduce, int64_t vocab)
{
    char name[1024];
    snprintf(name, sizeof name, "%s.%s", n->name, suffix);
    ir_node *local = ir_node_begin(c->g, op, nsrc, srcs, n->loc);
    /* The vocabulary's columns end before the padding (when there is some). */
    if (vocab && vocab != LAST_DIM(srcs[0]) * c->t) ir_attr_set_int(local, "vocab", vocab);
    local = ir_node_end(c->g, local, name, c->err, sizeof c->err);
    if (!local) { tp_fail(c, n, "%s", c->err); return NULL; }
    snprintf(name, sizeof name, "%s.%s.all", n->name, suffix);
    ir_node *m = ir_node_begin(c->g, IR_OP_ALL_REDUCE, 1, &local, n->loc);
    ir_attr_set_sym(m, "group", "tp");
    ir_attr_set_sym(m, "reduce", reduce);
    ir_node *r = ir_node_end(c->g, m, name, c->err, sizeof c->err);
    if (!r) tp_fail(c, n, "%s", c->err);
    return r;
}

/* Cross-entropy over vocab-split logits without gathering them (Megatron's
 * vocab-parallel cross-entropy): the row max, the sum of exp(l - max) and
 * the target logit are each reduced over the group; only [s, b] values
 * move, never [s, b, V]. */
static bool tp_vocab_parallel_ce(tp_ctx *c, const ir_node *n, ir_node *logits, ir_node *labels)
{
    if (logits->shard.dim != logits->shape.rank - 1)
        return tp_fail(c, n, "cross_entropy needs the logits whole or split along the vocabulary");
    int64_t vocab = n->src[0]->shape.dim[n->src[0]->shape.rank - 1];
    ir_node *mx = vp_reduced(c, n, IR_OP_VP_MAX, 1, &logits, "max", "max", vocab);
    ir_node *se_src[2] = {logits, mx};
    ir_node *se = mx ? vp_reduced(c, n, IR_OP_VP_SUMEXP, 2, se_src, "sumexp", "sum", vocab) : NULL;
    ir_node *tg_src[2] = {logits, labels};
    ir_node *tg = se ? vp_reduced(c, n, IR_OP_VP_TARGET, 2, tg_src, "target", "sum", 0) : NULL;
    if (!tg) return false;
    ir_node *srcs[5] = {logits, labels, mx, se, tg};
    ir_node *m = ir_node_begin(c->g, IR_OP_VP_CROSS_ENTROPY, 5, srcs, n->loc);
    ir_attr_set_int(m, "ignore_index", ir_attr_int(n, "ignore_index"));
    ir_attr_set_int(m, "vocab", vocab);
    m->flags = n->flags;
    ir_node *r = ir_node_end(c->g, m, n->name, c->err, sizeof c->err);
    if (!r) return tp_fail(c, n, "%s", c->err);
    c->map[n->id] = r;
    return true;
}

static bool tp_generic(tp_ctx *c, const ir_node *n)
{
    ir_node *srcs[64];
    if (n->nsrc > 64) return tp_fail(c, n, "%s has too many operands", ir_op_name(n->op));
    for (int i = 0; i < n->nsrc; i++) srcs[i] = c->map[n->src[i]->id];
    if (n->op == IR_OP_CROSS_ENTROPY && split(srcs[0])) return tp_vocab_parallel_ce(c, n, srcs[0], srcs[1]);
    bool any = false;
    for (int i = 0; i < n->nsrc; i++) any |= split(srcs[i]);
    if (!any) return (c->map[n->id] = emit(c, n, n->op, n->nsrc, srcs, n->name, n->loc)) != NULL;
    int d = result_split(c, n, srcs);
    if (d == -2) return false;
    /* A whole differentiable value meeting split ones (a per-head norm's
     * weight, --qk-layernorm) gets from each rank the gradient of that
     * rank's part only: it enters through tp_copy, whose backward sums the
     * parts over the group (as the sp pass does for its regions). */
    for (int i = 0; i < n->nsrc; i++) {
        const ir_node *o = n->src[i];
        bool leaf = ir_op_get(o->op)->flags & IR_OPF_LEAF;
        if (split(srcs[i]) || !ir_dtype_is_float(o->dtype) || (leaf && !(o->flags & IR_NF_PARAM))) continue;
        if (!(srcs[i] = comm(c, IR_OP_TP_COPY, srcs[i], n, -1, NULL))) return false;
    }
    ir_node *m = emit(c, n, n->op, n->nsrc, srcs, n->name, n->loc);
    if (!m) return false;
    set_split(m, d);
    c->map[n->id] = m;
    return true;
}

static bool tp_node(tp_ctx *c, const ir_node *n)
{
    if (ir_op_get(n->op)->flags & IR_OPF_LEAF) return copy_leaf(c, n);
    switch (n->op) {
    case IR_OP_LINEAR: return tp_linear(c, n);
    case IR_OP_EMBEDDING: return tp_embedding(c, n);
    case IR_OP_RESHAPE: return tp_reshape(c, n);
    default: return tp_generic(c, n);
    }
}

bool pass_tp(ir_graph *g, pass_ctx *ctx)
{
    int64_t t = ctx->opts ? ctx->opts->tp : 1;
    if (t <= 1) return true;
    tp_ctx c;
    char what[64];
    snprintf(what, sizeof what, "tensor parallelism (--tp %lld)", (long long)t);
    rb_begin(&c, g, t, what, ctx->d);
    memset(c.aux, -2, (size_t)g->nnodes + 1);
    bool ok = check_query_groups(&c) && plan_params(&c);
    if (ok) plan_vocab(&c);
    for (int i = 0; ok && i < g->nnodes; i++) ok = tp_node(&c, g->nodes[i]);
    return rb_end(&c, ok);
}
