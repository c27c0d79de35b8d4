/* The lmhead pass (docs/fusion.md, "The LM head and its loss"): after the
 * attention pass, before autodiff, so that the backward of what it makes is
 * the fused op's own gradient rule (grad_lm_head_ce: one lm_head_ce_back),
 * as Liger-kernel's fused linear cross-entropy is an autograd function
 * rather than a rewrite of the backward.
 *
 * It rewrites the loss as the models write it,
 *
 *   logits = linear(x, w[, b])           x [..., h], w [V, h], b [V]
 *   loss   = cross_entropy(logits, labels)
 *
 * into loss = lm_head_ce(x, w, labels[, b]) with cross_entropy's ignore_index
 * and --lm-head-chunk's chunk (0: codegen's rule), in place: the node keeps
 * the loss's name, flags, location, shard, stage and chunk. A tied head (w
 * the word embedding's weight, read by the embedding too) fuses the same:
 * only the logits must be private. The [..., V] logits are never stored,
 * forward or backward.
 *
 * It fires only where the logits have no other reader and are no output,
 * and the linear is not split (under tensor parallelism the tp pass has made
 * the head vocab-parallel already, and the pattern is gone). With
 * --no-fused-lm-head the pass is off (its gate). */
#include <stdlib.h>
#include <string.h>

#include "pass.h"
#include "support/util.h"

static bool fusible(const ir_node *ce, const int *users)
{
    if (ce->op != IR_OP_CROSS_ENTROPY) return false;
    const ir_node *l = ce->src[0];
    if (l->op != IR_OP_LINEAR || users[l->id] != 1 || (l->flags & (IR_NF_OUTPUT | IR_NF_LOSS)))
        return false;
    if (strcmp(ir_attr_sym(l, "parallel"), "none") != 0 && strcmp(ir_attr_sym(l, "parallel"), "column") != 0)
        return false;
    if (ir_attr_bool(l, "gather_output") || l->shard.dim >= 0 || l->src[1]->shard.dim >= 0) return false;
    return l->src[0]->shape.rank >= 2 && l->dtype == l->src[0]->dtype;
}

static bool rewrite(ir_graph *g, ir_node *ce, int64_t chunk, diag *d)
{
    ir_node *l = ce->src[0];
    int64_t ignore = ir_attr_int(ce, "ignore_index");
    ir_node *shell = ir_node_alloc(g, IR_OP_LM_HEAD_CE, l->nsrc == 3 ? 4 : 3);
    shell->src[0] = l->src[0], shell->src[1] = l->src[1], shell->src[2] = ce->src[1];
    if (l->nsrc == 3) shell->src[3] = l->src[2];
    ir_dtype type = ce->dtype;
    ce->op = IR_OP_LM_HEAD_CE;
    ce->nsrc = shell->nsrc;
    ce->src = shell->src;
    ce->attrs = shell->attrs;
    ir_attr_set_int(ce, "ignore_index", ignore);
    ir_attr_set_int(ce, "chunk", chunk);
    char err[512];
    if (!ir_op_get(IR_OP_LM_HEAD_CE)->shape(ce, err, sizeof err) || ce->dtype != type || ce->shape.rank != 0) {
        diag_error(d, ce->loc, "lmhead: fusing '%%%s': %s", ce->name, err);
        return false;
    }
    return true;
}

bool pass_lmhead(ir_graph *g, pass_ctx *ctx)
{
    if (ctx->opts && ctx->opts->no_fused_lm_head) return true;
    int64_t chunk = ctx->opts ? ctx->opts->lm_head_chunk : 0;
    int *users = xcalloc((size_t)g->nnodes + 1, sizeof *users);
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i]->nsrc; k++) users[g->nodes[i]->src[k]->id]++;
    bool *keep = xmalloc(((size_t)g->nnodes + 1) * sizeof *keep);
    for (int i = 0; i < g->nnodes; i++) keep[i] = true;
    bool ok = true;
    for (int i = 0; ok && i < g->nnodes; i++) {
        ir_node *ce = g->nodes[i];
        if (!fusible(ce, users)) continue;
        ir_node *l = ce->src[0];
        ok = rewrite(g, ce, chunk, ctx->d);
        if (ok) keep[l->id] = false;
    }
    if (ok) ir_graph_compact(g, keep);
    free(keep);
    free(users);
    return ok;
}
