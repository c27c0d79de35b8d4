/* Dead-code elimination: first the ops with no effect go (docs/fusion.md,
 * "Ops with no effect"): dropout and dropout_back with p = 0, scale by 1,
 * mul by a full constant 1, add of a full constant 0, a permute that keeps
 * every dim in place and a reshape to the same shape. Their readers read
 * their operand instead, so the values are bit for bit the same. A value
 * that is an output or the loss stays as written (autodiff flags each
 * parameter's gradient output, so the one the optimizer pass reads stays).
 * Then it drops computed values that reach neither the loss
 * nor a value marked output. Leaves (inputs, parameters), collectives and
 * side-effecting ops stay: the data loader feeds every input, a
 * collective's partners on other ranks wait for it, and a side effect (an
 * optimizer update, a custom op's backward declaration) is the point. A graph with neither a loss nor an output is a
 * forward-only model whose every value is kept. */
#include <stdlib.h>
#include <string.h>

#include "pass.h"
#include "support/util.h"

/* x where n = op(x) with no effect (another operand, if any, a full
 * constant of the identity), else NULL. The backward's seed is no
 * constant: its 1 is the loss scale at run time. */
static ir_node *noop_source(const ir_node *n)
{
    switch (n->op) {
    case IR_OP_DROPOUT:
    case IR_OP_DROPOUT_BACK: return ir_attr_float(n, "p") == 0.0 ? n->src[0] : NULL;
    case IR_OP_SCALE: return ir_attr_float(n, "alpha") == 1.0 ? n->src[0] : NULL;
    case IR_OP_MUL:
    case IR_OP_ADD: {
        double unit = n->op == IR_OP_MUL ? 1.0 : 0.0;
        for (int k = 0; k < 2; k++)
            if (n->src[k]->op == IR_OP_FULL && !(n->src[k]->flags & IR_NF_SEED) &&
                ir_attr_float(n->src[k], "value") == unit)
                return n->src[1 - k];
        return NULL;
    }
    case IR_OP_PERMUTE: {
        int np;
        const int64_t *perm = ir_attr_ints(n, "perm", &np);
        for (int i = 0; i < np; i++)
            if (perm[i] != i) return NULL;
        return n->src[0];
    }
    case IR_OP_RESHAPE: return n->src[0];
    default: return NULL;
    }
}

static void drop_noops(ir_graph *g)
{
    ir_node **to = xcalloc((size_t)g->nnodes + 1, sizeof *to); /* by id: what readers of a removed op read */
    for (int i = 0; i < g->nnodes; i++) {
        ir_node *n = g->nodes[i];
        for (int k = 0; k < n->nsrc; k++)
            if (to[n->src[k]->id]) n->src[k] = to[n->src[k]->id];
        ir_node *x = noop_source(n);
        if (!x || (n->flags & (IR_NF_OUTPUT | IR_NF_LOSS)) || x->dtype != n->dtype ||
            !ir_shape_eq(&x->shape, &n->shape) || x->shard.dim != n->shard.dim)
            continue;
        to[n->id] = x;
    }
    free(to);
}

static bool is_root(const ir_node *n)
{
    /* Dropout (and bias_dropout_add, attention and its backward) is marked
     * side-effecting so CSE never merges two masks; its mask is a pure
     * function of (seed, step, key, index), so a dead one can go. */
    if (n->op == IR_OP_DROPOUT || n->op == IR_OP_DROPOUT_BACK || n->op == IR_OP_BIAS_DROPOUT_ADD ||
        n->op == IR_OP_ATTENTION || n->op == IR_OP_ATTENTION_BACK)
        return n->flags & (IR_NF_LOSS | IR_NF_OUTPUT);
    /* A constant nothing reads (the identity of a removed no-op) goes too. */
    if (n->op == IR_OP_FULL) return n->flags & (IR_NF_LOSS | IR_NF_OUTPUT);
    return (n->flags & (IR_NF_LOSS | IR_NF_OUTPUT)) || (ir_op_get(n->op)->flags & (IR_OPF_LEAF | IR_OPF_COLLECTIVE | IR_OPF_SIDE_EFFECT));
}

bool pass_dce(ir_graph *g, pass_ctx *ctx)
{
    (void)ctx;
    bool any_root = false;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->flags & (IR_NF_LOSS | IR_NF_OUTPUT)) any_root = true;
    if (!any_root) return true;
    drop_noops(g);
    bool *live = xcalloc((size_t)g->nnodes, sizeof *live);
    for (int i = g->nnodes - 1; i >= 0; i--) {
        const ir_node *n = g->nodes[i];
        if (is_root(n)) live[i] = true;
        if (!live[i]) continue;
        for (int s = 0; s < n->nsrc; s++) live[n->src[s]->id] = true;
    }
    ir_graph_compact(g, live);
    free(live);
    return true;
}
