#include "runtime/backend/graph.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/exec.h"
#include "support/util.h"

rt_graphs *rt_graphs_new(void) { return xcalloc(1, sizeof(rt_graphs)); }

void rt_graphs_free(rt_graphs *gs, void (*drop)(void *obj, void *ctx), void *ctx)
{
    if (!gs) return;
    for (int i = 0; i < gs->n; i++) {
        if (gs->g[i].obj && drop) drop(gs->g[i].obj, ctx);
        free(gs->g[i].idx);
        free(gs->g[i].ptrs);
    }
    free(gs->g);
    free(gs);
}

int rt_graphs_ready(const rt_graphs *gs)
{
    int n = 0;
    for (int i = 0; i < gs->n; i++) n += gs->g[i].ready;
    return n;
}

void *const *rt_graph_instr_ptrs(const rt_exec *e, int i, int *count)
{
    const cg_instr *in = &e->prog->instrs[i];
    if (in->kind == CG_KERNEL) {
        *count = KMAX_ARGS;
        return e->io + (size_t)in->kernel * KMAX_ARGS;
    }
    if (in->kind == CG_GEMM) {
        *count = RT_GEMM_PTRS;
        return e->gemm_ptr + (size_t)i * RT_GEMM_PTRS;
    }
    *count = 2;
    return e->comm_ptr + (size_t)2 * i;
}

/* The pointers of g's instructions under e's bindings: written to out
 * (NULL: only counted), or compared with it. */
static int64_t walk_ptrs(const rt_graph *g, const rt_exec *e, void **out, bool compare, bool *same)
{
    int64_t at = 0;
    for (int j = 0; j < g->n; j++) {
        int c;
        void *const *p = rt_graph_instr_ptrs(e, g->idx ? g->idx[j] : j, &c);
        if (compare) {
            if (memcmp(out + at, p, (size_t)c * sizeof *p) != 0) {
                *same = false;
                return at;
            }
        } else if (out)
            memcpy(out + at, p, (size_t)c * sizeof *p);
        at += c;
    }
    return at;
}

static bool same_key(const rt_graph *g, const rt_exec *e, const int *idx, int n)
{
    if (g->cur != (const void *)e->cur || g->n != n || !g->idx != !idx) return false;
    return !idx || memcmp(g->idx, idx, (size_t)n * sizeof *idx) == 0;
}

rt_graph_do rt_graph_lookup(rt_graphs *gs, const rt_exec *e, const int *idx, int n, rt_graph **out)
{
    *out = NULL;
    rt_graph *g = NULL;
    for (int i = 0; i < gs->n && !g; i++)
        if (same_key(&gs->g[i], e, idx, n)) g = &gs->g[i];
    if (!g) { /* the first call: a warm-up, uncaptured */
        if (gs->n == RT_GRAPH_MAX || n <= 0) return RT_GRAPH_EAGER;
        if (gs->n == gs->cap) {
            gs->cap = gs->cap ? 2 * gs->cap : 8;
            gs->g = xrealloc(gs->g, (size_t)gs->cap * sizeof *gs->g);
        }
        g = &gs->g[gs->n++];
        memset(g, 0, sizeof *g);
        g->cur = e->cur;
        g->n = n;
        if (idx) {
            g->idx = xmalloc((size_t)n * sizeof *idx);
            memcpy(g->idx, idx, (size_t)n * sizeof *idx);
        }
        return RT_GRAPH_EAGER;
    }
    *out = g;
    if (g->eager) return RT_GRAPH_EAGER;
    if (g->ready) {
        bool same = true;
        walk_ptrs(g, e, g->ptrs, true, &same);
        if (same) {
            gs->replayed++;
            return RT_GRAPH_REPLAY;
        }
        g->ready = false; /* a pointer moved: captured again, or given up */
        if (g->captures >= RT_GRAPH_RECAPTURES) {
            g->eager = true;
            return RT_GRAPH_EAGER;
        }
    }
    gs->captured++;
    return RT_GRAPH_CAPTURE;
}

void rt_graph_captured(rt_graph *g, const rt_exec *e)
{
    if (!g->ptrs) {
        g->nptrs = walk_ptrs(g, e, NULL, false, NULL);
        g->ptrs = xmalloc((size_t)(g->nptrs + 1) * sizeof *g->ptrs);
    }
    walk_ptrs(g, e, g->ptrs, false, NULL);
    g->captures++;
    g->ready = true;
}

void rt_graph_give_up(rt_graph *g)
{
    g->ready = false;
    g->eager = true;
}
