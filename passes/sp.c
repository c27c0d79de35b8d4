/* The sequence-parallel pass (--sequence-parallel, after tp): the regions
 * outside the tensor-parallel ones — norms, dropout, residual adds, the
 * bias of a row-parallel linear — work on [s/t, b, h], each TP rank on its
 * block of the sequence, as in the paper's section on sequence parallelism.
 *
 *  - leaving a TP region, tp_reduce (all-reduce) becomes sp_scatter
 *    (reduce-scatter along s): the result is split on dim 0;
 *  - entering one, tp_copy of a sequence-split value becomes sp_gather
 *    (all-gather along s);
 *  - a replicated activation meeting a split one (the position embedding
 *    added to the word embedding) enters through sp_split (each rank keeps
 *    its block; all-gather backward);
 *  - a replicated parameter used inside a split region (norm weights and
 *    biases, row-parallel biases) enters through tp_copy, so autodiff sums
 *    its gradient over the TP group;
 *  - an op of a split region must work on each position alone: its axis
 *    rule (ops.def) keeps dim 0 as dim 0, or the op is refused.
 *
 * Which values run over the sequence, and on which dim, is followed from
 * the sources (the `tokens` and `labels` inputs, arange positions) through
 * every op by its axis rule (rb_seq_follow, shared with the kvcache pass),
 * never taken from a size: a row-parallel result whose dim 0 is the
 * sequence is scattered, one that does not run over the sequence stays an
 * all-reduce, and one whose sequence is on another dim, on two dims, or
 * was lost through an op that mixes it is refused, naming the node.
 *
 * Autodiff then gives the duals: all-gather <-> reduce-scatter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rebuild.h"
#include "support/util.h"

#define SEQ 0 /* the sequence dim of the [s, b, h] layout */

typedef struct sp_ctx {
    rb_ctx rb;
    rb_seq *seq; /* per old node id: its sequence axes */
    int scattered;
} sp_ctx;

/* Split along the sequence: an activation split on dim 0 (a parameter
 * split on dim 0 is a tensor-parallel split of its rows). */
static bool seq_split(const ir_node *n)
{
    return n->shard.dim == SEQ && !(ir_op_get(n->op)->flags & IR_OPF_LEAF);
}

/* A row-parallel result (tp_reduce of n's operand) is scattered along the
 * sequence when its dim 0, and no other, runs over it. */
static bool sp_reduce(sp_ctx *c, const ir_node *n, ir_node *x)
{
    rb_seq a = c->seq[n->id];
    const char *op = ir_op_name(n->op);
    if (a.q == RB_SEQ_LOST || a.k == RB_SEQ_LOST) {
        char at[256] = "";
        if (a.lost->loc.file)
            snprintf(at, sizeof at, " at %s:%d:%d", a.lost->loc.file, a.lost->loc.line, a.lost->loc.col);
        return rb_fail(&c->rb, n, "%s '%%%s': cannot tell which dim of its value runs over the sequence: %s "
                       "'%%%s'%s mixes, cuts or has no rule for the sequence axis (ir/ops.def's axis column)",
                       op, n->name, ir_op_name(a.lost->op), a.lost->name, at);
    }
    if (a.q == RB_SEQ_NONE) return rb_copy(&c->rb, n, x->shard.dim);
    if (a.k >= 0)
        return rb_fail(&c->rb, n, "%s '%%%s': its value runs over the sequence on dims %d and %d; sequence "
                       "parallelism splits one, dim 0 ([s, b, h])", op, n->name, a.q, a.k);
    if (a.q != SEQ)
        return rb_fail(&c->rb, n, "%s '%%%s': its value runs over the sequence on dim %d; sequence parallelism "
                       "splits dim 0 ([s, b, h])", op, n->name, a.q);
    int64_t s = x->shape.dim[SEQ];
    if (s % c->rb.t != 0)
        return rb_fail(&c->rb, n, "the sequence length %lld does not divide by %lld", (long long)s,
                       (long long)c->rb.t);
    c->scattered++;
    return (c->rb.map[n->id] = rb_comm(&c->rb, IR_OP_SP_SCATTER, x, n, SEQ, n->name)) != NULL;
}

/* Brings operand i (x in the new graph) of n, whose result is split on
 * the sequence, into the split region. The dim of x that n's axis rule
 * puts on the result's dim 0 runs over the sequence: dim 0 enters through
 * sp_split (each rank keeps its block); no such dim, a replicated operand
 * (a norm weight, a bias), through tp_copy when float, so its gradient is
 * summed over the group. */
static ir_node *enter(sp_ctx *c, const ir_node *n, int i, ir_node *x)
{
    if (seq_split(x) || rb_split(x)) return x;
    for (int d = 0; d < x->shape.rank; d++) {
        if (ir_axis_map(n, i, d) != SEQ) continue;
        if (d == SEQ) return rb_comm(&c->rb, IR_OP_SP_SPLIT, x, n, SEQ, NULL);
        rb_fail(&c->rb, n, "%s '%%%s': operand %d ('%%%s') meets the sequence-split dim 0 with its dim %d; "
                "sp_split splits dim 0", ir_op_name(n->op), n->name, i, n->src[i]->name, d);
        return NULL;
    }
    if (!ir_dtype_is_float(x->dtype)) return x;
    return rb_comm(&c->rb, IR_OP_TP_COPY, x, n, -1, NULL);
}

static bool sp_split_op(sp_ctx *c, const ir_node *n, ir_node **srcs)
{
    const ir_op_info *info = ir_op_get(n->op);
    /* The ops of the split regions work on each position of the sequence
     * alone: their axis rule (ops.def) keeps dim 0 as dim 0. */
    int dims[64];
    for (int i = 0; i < n->nsrc; i++) dims[i] = seq_split(srcs[i]) ? SEQ : -1;
    int j = rb_follow(&c->rb, n, dims, false, "the sequence-split dim");
    if (j == -2) return false;
    if (j == -1) return rb_copy(&c->rb, n, n->shard.dim);
    if (j != SEQ)
        return rb_fail(&c->rb, n, "%s '%%%s' moves the sequence-split dim 0 to dim %d (put it inside a "
                       "tensor-parallel region)", info->name, n->name, j);
    for (int i = 0; i < n->nsrc; i++)
        if (!(srcs[i] = enter(c, n, i, srcs[i]))) return false;
    ir_node *m = rb_emit(&c->rb, n, n->op, n->nsrc, srcs, n->name, n->loc);
    if (!m) return false;
    rb_set_split(m, SEQ);
    c->rb.map[n->id] = m;
    return true;
}

static bool sp_node(sp_ctx *c, const ir_node *n)
{
    const ir_op_info *info = ir_op_get(n->op);
    if (info->flags & IR_OPF_LEAF) {
        c->seq[n->id] = rb_seq_source(n);
        return rb_copy_leaf(&c->rb, n, &n->shape, n->shard.dim);
    }
    ir_node *srcs[64];
    rb_seq in[64];
    if (n->nsrc > 64) return rb_fail(&c->rb, n, "%s has too many operands", info->name);
    bool any = false;
    for (int i = 0; i < n->nsrc; i++) {
        srcs[i] = c->rb.map[n->src[i]->id];
        in[i] = c->seq[n->src[i]->id];
        any |= seq_split(srcs[i]);
    }
    c->seq[n->id] = rb_seq_follow(n, in);
    if (n->op == IR_OP_TP_REDUCE) return sp_reduce(c, n, srcs[0]);
    if (n->op == IR_OP_TP_COPY && seq_split(srcs[0]))
        return (c->rb.map[n->id] = rb_comm(&c->rb, IR_OP_SP_GATHER, srcs[0], n, -1, NULL)) != NULL;
    if (n->op == IR_OP_TP_COPY) return rb_copy(&c->rb, n, srcs[0]->shard.dim);
    if (!any) return rb_copy(&c->rb, n, n->shard.dim);
    return sp_split_op(c, n, srcs);
}

bool pass_sp(ir_graph *g, pass_ctx *ctx)
{
    if (!ctx->opts || !ctx->opts->sequence_parallel) return true;
    int64_t t = ctx->opts->tp;
    if (t <= 1) {
        diag_error_plain(ctx->d, "--sequence-parallel needs --tensor-model-parallel-size > 1");
        return false;
    }
    sp_ctx c = {0};
    char what[64];
    snprintf(what, sizeof what, "sequence parallelism (--tp %lld)", (long long)t);
    rb_begin(&c.rb, g, t, what, ctx->d);
    c.rb.hint = " (put it inside a tensor-parallel region)";
    c.seq = xmalloc(((size_t)g->nnodes + 1) * sizeof *c.seq);
    bool ok = true;
    for (int i = 0; ok && i < g->nnodes; i++) ok = sp_node(&c, g->nodes[i]);
    if (ok && !c.scattered) {
        diag_error_plain(ctx->d, "%s: no row-parallel result of model '%s' runs over the sequence along dim 0 "
                         "(followed from the inputs 'tokens' and 'labels' and arange positions): "
                         "--sequence-parallel would change nothing", what, g->model);
        ok = false;
    }
    free(c.seq);
    return rb_end(&c.rb, ok);
}
