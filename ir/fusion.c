/* Fusion groups as runs of nodes (ir.h): the one definition that the
 * printer, the memory plan, codegen and the fusion report share. A run, not
 * a group id, is the unit so that any reordering a later pass makes stays
 * correct: a group split in two becomes two kernels, each writing what the
 * other reads. */
#include "ir.h"

void ir_graph_fuse_runs(const ir_graph *g, int *end, bool *written)
{
    for (int i = g->nnodes - 1; i >= 0; i--) {
        const ir_node *n = g->nodes[i];
        bool same = i + 1 < g->nnodes && n->fuse >= 0 && g->nodes[i + 1]->fuse == n->fuse;
        end[i] = same ? end[i + 1] : i;
    }
    if (!written) return;
    for (int i = 0; i < g->nnodes; i++)
        written[i] = g->nodes[i]->fuse < 0 || (g->nodes[i]->flags & (IR_NF_OUTPUT | IR_NF_LOSS));
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *u = g->nodes[i];
        for (int k = 0; k < u->nsrc; k++) {
            if (!u->src[k]) continue; /* a malformed graph being printed */
            int s = u->src[k]->id;
            if (s >= 0 && s < g->nnodes && end[s] < i) written[s] = true;
        }
    }
}
