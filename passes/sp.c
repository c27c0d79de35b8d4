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
 * Autodiff then gives the duals: all-gather <-> reduce-scatter. */
#include <stdio.h>
#include <string.h>

#include "rebuild.h"

#define SEQ 0 /* the sequence dim of the [s, b, h] layout */

/* Split along the sequence: an activation split on dim 0 (a parameter
 * split on dim 0 is a tensor-parallel split of its rows). */
static bool seq_split(const ir_node *n)
{
    return n->shard.dim == SEQ && !(ir_op_get(n->op)->flags & IR_OPF_LEAF);
}

/* A float activation of the [s, ...] layout that can be split on s. */
static bool seq_shaped(rb_ctx *c, const ir_node *n, int64_t s)
{
    return ir_dtype_is_float(n->dtype) && n->shape.rank >= 2 && n->shape.dim[0] == s && !(n->flags & IR_NF_PARAM);
}

static bool sp_comm_swap(rb_ctx *c, const ir_node *n, ir_node *x, int64_t s)
{
    if (n->op == IR_OP_TP_REDUCE && x->shape.rank >= 2 && x->shape.dim[0] == s) {
        if (s % c->t != 0)
            return rb_fail(c, n, "the sequence length %lld does not divide by %lld", (long long)s, (long long)c->t);
        return (c->map[n->id] = rb_comm(c, IR_OP_SP_SCATTER, x, n, SEQ, n->name)) != NULL;
    }
    if (n->op == IR_OP_TP_COPY && seq_split(x))
        return (c->map[n->id] = rb_comm(c, IR_OP_SP_GATHER, x, n, -1, NULL)) != NULL;
    return rb_copy(c, n, x->shard.dim);
}

/* Brings operand i of n into the split region: sp_split for a replicated
 * activation, tp_copy for a parameter (its gradient is then summed). */
static ir_node *enter(rb_ctx *c, const ir_node *n, ir_node *x, int64_t s)
{
    if (seq_split(x) || rb_split(x)) return x;
    if (seq_shaped(c, x, s)) return rb_comm(c, IR_OP_SP_SPLIT, x, n, SEQ, NULL);
    if (!ir_dtype_is_float(x->dtype)) return x;
    return rb_comm(c, IR_OP_TP_COPY, x, n, -1, NULL);
}

static bool sp_node(rb_ctx *c, const ir_node *n, int64_t s)
{
    const ir_op_info *info = ir_op_get(n->op);
    if (info->flags & IR_OPF_LEAF) return rb_copy_leaf(c, n, &n->shape, n->shard.dim);
    ir_node *srcs[64];
    if (n->nsrc > 64) return rb_fail(c, n, "%s has too many operands", info->name);
    bool any = false;
    for (int i = 0; i < n->nsrc; i++) {
        srcs[i] = c->map[n->src[i]->id];
        any |= seq_split(srcs[i]);
    }
    if (n->op == IR_OP_TP_REDUCE || n->op == IR_OP_TP_COPY) return sp_comm_swap(c, n, srcs[0], s);
    if (!any) return rb_copy(c, n, n->shard.dim);
    /* The ops of the split regions work on each position of the sequence
     * alone: their axis rule (ops.def) keeps dim 0 as dim 0. */
    int dims[64];
    for (int i = 0; i < n->nsrc; i++) dims[i] = seq_split(srcs[i]) ? SEQ : -1;
    int j = rb_follow(c, n, dims, false, "the sequence-split dim");
    if (j == -2) return false;
    if (j == -1) return rb_copy(c, n, n->shard.dim);
    if (j != SEQ)
        return rb_fail(c, n, "%s '%%%s' moves the sequence-split dim 0 to dim %d (put it inside a tensor-parallel "
                       "region)", info->name, n->name, j);
    for (int i = 0; i < n->nsrc; i++)
        if (!(srcs[i] = enter(c, n, srcs[i], s))) return false;
    ir_node *m = rb_emit(c, n, n->op, n->nsrc, srcs, n->name, n->loc);
    if (!m) return false;
    rb_set_split(m, SEQ);
    c->map[n->id] = m;
    return true;
}

/* The sequence length: dim 0 of the first row-parallel result. */
static int64_t seq_len(const ir_graph *g)
{
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == IR_OP_TP_REDUCE && g->nodes[i]->shape.rank >= 2) return g->nodes[i]->shape.dim[0];
    return 0;
}

bool pass_sp(ir_graph *g, pass_ctx *ctx)
{
    if (!ctx->opts || !ctx->opts->sequence_parallel) return true;
    int64_t t = ctx->opts->tp;
    if (t <= 1) {
        diag_error_plain(ctx->d, "--sequence-parallel needs --tensor-model-parallel-size > 1");
        return false;
    }
    rb_ctx c;
    char what[64];
    snprintf(what, sizeof what, "sequence parallelism (--tp %lld)", (long long)t);
    rb_begin(&c, g, t, what, ctx->d);
    c.hint = " (put it inside a tensor-parallel region)";
    int64_t s = seq_len(g);
    bool ok = true;
    for (int i = 0; ok && i < g->nnodes; i++) ok = sp_node(&c, g->nodes[i], s);
    return rb_end(&c, ok);
}
