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
 * Under tensor parallelism the tp pass has made the head vocab-parallel
 * already (Megatron's vocab-parallel cross-entropy):
 *
 *   logits = linear(x, w[, b]) parallel=column       [..., V/t] per rank
 *   mx     = all_reduce(vocab_parallel_max(logits)) reduce=max
 *   se     = all_reduce(vocab_parallel_sumexp(logits, mx))
 *   tg     = all_reduce(vocab_parallel_target(logits, labels))
 *   loss   = vocab_parallel_cross_entropy(logits, labels, mx, se, tg) vocab=V
 *
 * and that chain becomes lm_head_ce(x, w, labels[, b]) vocab=V: each rank's
 * chunk loop covers its shard of the vocabulary and the op all-reduces the
 * row max, sum of exp and label logit itself; the padding of the
 * vocabulary stays out of the loss. x is the tp_copy (or sp_gather) into
 * the head, whose gradient rule all-reduces (reduce-scatters) dx.
 *
 * It fires only where the logits and every reduction have no other reader
 * and are no output; elsewhere the graph stays as written. With
 * --no-fused-lm-head the pass is off (its gate). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pass.h"
#include "support/util.h"

/* The matched pattern: the loss, the head's linear and (under TP) the
 * vocab-parallel reductions between them, each removed by the rewrite. */
typedef struct lm_match {
    ir_node *loss, *linear, *labels;
    ir_node *dead[7]; /* vocab_parallel_{max,sumexp,target} and their all-reduces */
    int ndead;
    int64_t vocab; /* vocab-parallel: the whole vocabulary; 0 serial */
} lm_match;

static bool private_to(const ir_node *n, const int *users, int readers)
{
    return users[n->id] == readers && !(n->flags & (IR_NF_OUTPUT | IR_NF_LOSS));
}

/* logits = linear(x, w[, b]) with no gather, read by `readers` nodes only;
 * `split`: the column-parallel head of the tp pass (logits split along the
 * vocabulary), else a whole one. */
static bool head_linear(const ir_node *l, const int *users, int readers, bool split)
{
    if (l->op != IR_OP_LINEAR || !private_to(l, users, readers) || ir_attr_bool(l, "gather_output")) return false;
    const char *par = ir_attr_sym(l, "parallel");
    if (strcmp(par, "none") != 0 && strcmp(par, "column") != 0) return false;
    bool is_split = l->shard.dim == l->shape.rank - 1;
    if (is_split != split || (!split && (l->shard.dim >= 0 || l->src[1]->shard.dim >= 0))) return false;
    return l->src[0]->shape.rank >= 2 && l->dtype == l->src[0]->dtype;
}

/* an all_reduce over tp of the given reduction, of an op `op` node read only by it */
static ir_node *reduced(ir_node *a, ir_op op, const char *reduce, const int *users, int readers)
{
    if (a->op != IR_OP_ALL_REDUCE || !private_to(a, users, readers) || strcmp(ir_attr_sym(a, "group"), "tp") != 0 ||
        strcmp(ir_attr_sym(a, "reduce"), reduce) != 0)
        return NULL;
    ir_node *v = a->src[0];
    return v->op == op && private_to(v, users, 1) ? v : NULL;
}

/* cross_entropy(linear(x, w[, b]), labels), or the tp pass's
 * vocab_parallel_cross_entropy(logits, labels, all_reduce(max(logits)),
 * all_reduce(sumexp(logits, that max)), all_reduce(target(logits, labels))). */
static bool match(ir_node *n, const int *users, lm_match *m)
{
    memset(m, 0, sizeof *m);
    m->loss = n;
    if (n->op == IR_OP_CROSS_ENTROPY) {
        m->linear = n->src[0], m->labels = n->src[1];
        return head_linear(m->linear, users, 1, false);
    }
    if (n->op != IR_OP_VP_CROSS_ENTROPY) return false;
    ir_node *l = n->src[0];
    m->linear = l, m->labels = n->src[1], m->vocab = ir_attr_int(n, "vocab");
    ir_node *mx = reduced(n->src[2], IR_OP_VP_MAX, "max", users, 2);
    ir_node *se = reduced(n->src[3], IR_OP_VP_SUMEXP, "sum", users, 1);
    ir_node *tg = reduced(n->src[4], IR_OP_VP_TARGET, "sum", users, 1);
    if (!mx || !se || !tg || mx->src[0] != l || se->src[0] != l || se->src[1] != n->src[2] || tg->src[0] != l ||
        tg->src[1] != m->labels || !head_linear(l, users, 4, true))
        return false;
    ir_node *dead[] = {mx, n->src[2], se, n->src[3], tg, n->src[4]};
    memcpy(m->dead, dead, sizeof dead);
    m->ndead = (int)ARRAY_LEN(dead);
    return true;
}

static bool rewrite(ir_graph *g, const lm_match *m, int64_t chunk, diag *d)
{
    ir_node *ce = m->loss, *l = m->linear;
    int64_t ignore = ir_attr_int(ce, "ignore_index");
    ir_node *shell = ir_node_alloc(g, IR_OP_LM_HEAD_CE, l->nsrc == 3 ? 4 : 3);
    shell->src[0] = l->src[0], shell->src[1] = l->src[1], shell->src[2] = m->labels;
    if (l->nsrc == 3) shell->src[3] = l->src[2];
    ir_dtype type = ce->dtype;
    ce->op = IR_OP_LM_HEAD_CE;
    ce->nsrc = shell->nsrc;
    ce->src = shell->src;
    ce->attrs = shell->attrs;
    ir_attr_set_int(ce, "ignore_index", ignore);
    ir_attr_set_int(ce, "chunk", chunk);
    ir_attr_set_int(ce, "vocab", m->vocab);
    char err[512];
    if (!ir_op_get(IR_OP_LM_HEAD_CE)->shape(ce, err, sizeof err) || ce->dtype != type || ce->shape.rank != 0) {
        diag_error(d, ce->loc, "lmhead: fusing '%%%s': %s", ce->name, err);
        return false;
    }
    return true;
}

bool pass_lmhead(ir_graph *g, pass_ctx *ctx)
{
    if (ctx->opts && !ctx->opts->fused_lm_head) return true;
    int64_t chunk = ctx->opts ? ctx->opts->lm_head_chunk : 0;
    int *users = xcalloc((size_t)g->nnodes + 1, sizeof *users);
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i]->nsrc; k++) users[g->nodes[i]->src[k]->id]++;
    bool *keep = xmalloc(((size_t)g->nnodes + 1) * sizeof *keep);
    for (int i = 0; i < g->nnodes; i++) keep[i] = true;
    bool ok = true;
    for (int i = 0; ok && i < g->nnodes; i++) {
        lm_match m;
        if (!match(g->nodes[i], users, &m)) continue;
        ok = rewrite(g, &m, chunk, ctx->d);
        keep[m.linear->id] = false;
        for (int k = 0; k < m.ndead; k++) keep[m.dead[k]->id] = false;
    }
    if (ok) ir_graph_compact(g, keep);
    free(keep);
    free(users);
    return ok;
}

/* For a program that needs the logits themselves (tgc sample's forward, cut
 * from a compiled training step): each serial lm_head_ce gets its linear
 * and cross_entropy back, appended as <loss>.logits and <loss>.unfused (the
 * loss flag moves there); the fused op, no longer the loss, is left for
 * the cut to drop with the backward that reads it. */
bool pass_lmhead_unfuse(ir_graph *g, diag *d)
{
    int n = g->nnodes;
    for (int i = 0; i < n; i++) {
        ir_node *f = g->nodes[i];
        if (f->op != IR_OP_LM_HEAD_CE || ir_attr_int(f, "vocab") != 0) continue;
        char name[1024], err[512];
        ir_node *src[3] = {f->src[0], f->src[1], f->nsrc > 3 ? f->src[3] : NULL};
        ir_node *l = ir_node_begin(g, IR_OP_LINEAR, src[2] ? 3 : 2, src, f->loc);
        snprintf(name, sizeof name, "%s.logits", f->name);
        if (!(l = ir_node_end(g, l, name, err, sizeof err))) {
            diag_error(d, f->loc, "unfusing '%%%s': %s", f->name, err);
            return false;
        }
        ir_node *cs[2] = {l, f->src[2]};
        ir_node *ce = ir_node_begin(g, IR_OP_CROSS_ENTROPY, 2, cs, f->loc);
        ir_attr_set_int(ce, "ignore_index", ir_attr_int(f, "ignore_index"));
        ce->flags = f->flags;
        snprintf(name, sizeof name, "%s.unfused", f->name);
        if (!(ce = ir_node_end(g, ce, name, err, sizeof err))) {
            diag_error(d, f->loc, "unfusing '%%%s': %s", f->name, err);
            return false;
        }
        f->flags &= ~(unsigned)(IR_NF_LOSS | IR_NF_OUTPUT);
    }
    return true;
}
