/* Dead-code elimination: drops computed values that reach neither the loss
 * nor a value marked output. Leaves (inputs, parameters), collectives and
 * side-effecting ops stay: the data loader feeds every input, a
 * collective's partners on other ranks wait for it, and a side effect (an
 * optimizer update, a custom op's backward declaration) is the point. A graph with neither a loss nor an output is a
 * forward-only model whose every value is kept. */
#include <stdlib.h>

#include "pass.h"
#include "support/util.h"

static bool is_root(const ir_node *n)
{
    /* Dropout (and bias_dropout_add, attention and its backward) is marked
     * side-effecting so CSE never merges two masks; its mask is a pure
     * function of (seed, step, key, index), so a dead one can go. */
    if (n->op == IR_OP_DROPOUT || n->op == IR_OP_DROPOUT_BACK || n->op == IR_OP_BIAS_DROPOUT_ADD ||
        n->op == IR_OP_ATTENTION || n->op == IR_OP_ATTENTION_BACK)
        return n->flags & (IR_NF_LOSS | IR_NF_OUTPUT);
    return (n->flags & (IR_NF_LOSS | IR_NF_OUTPUT)) || (ir_op_get(n->op)->flags & (IR_OPF_LEAF | IR_OPF_COLLECTIVE | IR_OPF_SIDE_EFFECT));
}

bool pass_dce(ir_graph *g, pass_ctx *ctx)
{
    (void)ctx;
    bool any_root = false;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->flags & (IR_NF_LOSS | IR_NF_OUTPUT)) any_root = true;
    if (!any_root) return true;
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
