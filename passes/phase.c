/* Phases and gradient buckets (docs/pipeline.md, "Phases" and "Gradient
 * buckets"), computed once by the schedule pass and kept on the nodes
 * (phase(...) and bucket(...) in the text IR), which the schedule builder
 * (passes/pipeline.c) and the pipeline runtime (runtime/train/pipe.c) read
 * instead of classifying the nodes themselves. */
#include <stdlib.h>
#include <string.h>

#include "passes/pipeline.h"
#include "support/util.h"

/* The gradient norm and the updates (the op table's IR_OPF_OPTIMIZER). */
static bool in_opt_step(const ir_node *n) { return ir_op_has(n->op, IR_OPF_OPTIMIZER); }

static bool per_step(const ir_node *n)
{
    return (n->op == IR_OP_PP_SEND || n->op == IR_OP_PP_RECV) && ir_attr_bool(n, "per_step");
}

/* The backward is what the loss reaches after it in program order (the
 * gradient seed and everything autodiff appended, recomputation clones
 * included, which the backward runs where the schedule put them). The
 * begin phase: what depends on parameters and constants only (no input,
 * no dropout, no per-micro-batch receive), and the per-step receives of
 * the forward. The end phase: what reads an update's result or a per-step
 * transfer of the backward, and their users. */
static void set_phases(ir_graph *g)
{
    int n = g->nnodes;
    bool *bwd = xcalloc((size_t)n + 1, 3), *inv = bwd + n + 1, *end = inv + n + 1;
    const ir_node *loss = ir_graph_loss(g);
    int after = loss ? loss->id : n;
    for (int i = 0; i < n; i++) {
        ir_node *u = g->nodes[i];
        bool leaf = ir_op_get(u->op)->flags & IR_OPF_LEAF;
        bwd[i] = i > after;
        inv[i] = leaf && u->op != IR_OP_INPUT;
        for (int k = 0; k < u->nsrc; k++) {
            bwd[i] |= bwd[u->src[k]->id];
            end[i] |= end[u->src[k]->id];
        }
        if (!leaf) {
            inv[i] = u->op != IR_OP_DROPOUT && !(u->op == IR_OP_PP_RECV && !per_step(u));
            for (int k = 0; k < u->nsrc; k++) inv[i] &= inv[u->src[k]->id];
            if (u->op == IR_OP_PP_RECV && per_step(u) && !bwd[i]) inv[i] = true;
        }
        end[i] |= in_opt_step(u) || (per_step(u) && bwd[i]);
        if (u->op == IR_OP_PARAM || u->op == IR_OP_INPUT) u->phase = IR_PHASE_NONE;
        else u->phase = in_opt_step(u) ? IR_PHASE_OPT : end[i] ? IR_PHASE_END : inv[i] ? IR_PHASE_BEGIN
                        : bwd[i] ? IR_PHASE_BWD : IR_PHASE_FWD;
    }
    free(bwd);
}

static int cmp_id(const void *a, const void *b)
{
    int x = (*(ir_node *const *)a)->id, y = (*(ir_node *const *)b)->id;
    return (x > y) - (x < y);
}

/* Per update (one per pipeline rank), its gradients in the order the
 * backward produces them, into buckets of at least `elems` elements (0:
 * 40 MiB of them; Megatron's rule: a bucket closes once it holds that
 * many), numbered from 0
 * on each rank. A bucket holds gradients of one chunk made in one phase
 * (the backward, or the end phase for a gradient added there), so it is
 * final at one point of the rank's schedule. */
static void set_buckets(ir_graph *g, int64_t elems)
{
    for (int i = 0; i < g->nnodes; i++) g->nodes[i]->bucket = -1;
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *u = g->nodes[i];
        if (!ir_node_is_update(u)) continue;
        int k = u->nsrc / 2, nb = 0;
        ir_node **gr = xmalloc((size_t)(k ? k : 1) * sizeof *gr);
        for (int j = 0; j < k; j++) gr[j] = u->src[k + j];
        qsort(gr, (size_t)k, sizeof *gr, cmp_id);
        int64_t held = 0, cap = elems > 0 ? elems : k ? PIPE_BUCKET_DEFAULT_BYTES / ir_storage_size(g, gr[0]) : 1;
        const ir_node *prev = NULL;
        for (int j = 0; j < k; j++) {
            ir_node *x = gr[j];
            if (x->bucket >= 0) continue; /* a gradient two updates read keeps its first bucket */
            bool cut = prev && (held >= cap || x->chunk != prev->chunk || x->phase != prev->phase);
            if (cut) nb++, held = 0;
            x->bucket = nb;
            held += ir_shape_numel(&x->shape);
            prev = x;
        }
        free(gr);
    }
}

bool pipe_annotate(ir_graph *g, int64_t bucket_elems, diag *d)
{
    (void)d;
    set_phases(g);
    set_buckets(g, bucket_elems);
    return true;
}

bool pipe_graph_annotated(const ir_graph *g)
{
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->phase != IR_PHASE_NONE) return true;
    return g->nnodes == 0;
}
