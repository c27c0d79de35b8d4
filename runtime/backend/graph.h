/* Captured runs (--cuda-graphs, docs/cuda.md "CUDA graphs"): the part of
 * graph capture that does not depend on the backend.
 *
 * A run (rt_exec_run: instructions idx[0 .. n-1] under the current
 * bindings) is keyed by its bindings and its instruction list. The first
 * call with a key runs as usual (a warm-up: cuBLASLt chooses its
 * algorithms, cuDNN builds its variant packs); the second is captured
 * into a graph, which the backend then launches; later calls replay it.
 * What a captured launch depends on is fixed at capture: the argument
 * pointers of every instruction (snapshotted here, compared before each
 * replay: a run whose pointers moved is captured again, and one that
 * moves every time runs uncaptured) and the address of the run-time
 * scalars' device copy, e->rt_dev, which the backend refreshes from e->rt
 * before each replay. Everything else a step changes (the learning rate,
 * the step, the loss scale, the inputs in their fixed buffers) goes
 * through those. */
#ifndef TGC_RT_GRAPH_H
#define TGC_RT_GRAPH_H
#include <stdbool.h>
#include <stdint.h>

struct rt_exec;

/* The most runs one executor captures (a pipeline has one per chunk,
 * pass and activation slot); later keys run uncaptured. */
#define RT_GRAPH_MAX 256
/* Captures of one key after which a run whose pointers keep moving stays uncaptured. */
#define RT_GRAPH_RECAPTURES 3

typedef struct rt_graph {
    const void *cur; /* the key: the bindings (e->cur), n and idx (NULL: 0 .. n-1) */
    int n;
    int *idx;
    void **ptrs;  /* the instructions' pointers at capture, in run order */
    int64_t nptrs;
    int captures;
    bool ready;   /* captured: obj holds it and ptrs its pointers */
    bool eager;   /* runs uncaptured from now on */
    void *obj;    /* the backend's graph (cudaGraphExec_t; sim: none) */
} rt_graph;

typedef struct rt_graphs {
    rt_graph *g;
    int n, cap;
    int64_t captured, replayed; /* counts, for the run's summary and the tests */
} rt_graphs;

typedef enum rt_graph_do { RT_GRAPH_EAGER, RT_GRAPH_CAPTURE, RT_GRAPH_REPLAY } rt_graph_do;

rt_graphs *rt_graphs_new(void);
/* drop(obj, ctx) releases each backend graph. */
void rt_graphs_free(rt_graphs *gs, void (*drop)(void *obj, void *ctx), void *ctx);

/* The runs that are captured now (TGC_DEBUG >= 1 prints it with the counts). */
int rt_graphs_ready(const rt_graphs *gs);

/* What the backend does with this run of e: run it as usual, capture it
 * into *out (when (*out)->obj is not NULL, the stale graph to drop first;
 * then rt_graph_captured) or replay (*out)->obj. */
rt_graph_do rt_graph_lookup(rt_graphs *gs, const struct rt_exec *e, const int *idx, int n, rt_graph **out);
/* Records e's current pointers for g's instructions, g->obj set by the caller. */
void rt_graph_captured(rt_graph *g, const struct rt_exec *e);
/* A capture that failed: the key runs uncaptured from now on. */
void rt_graph_give_up(rt_graph *g);

/* Instruction i's pointer block under e's bindings: a kernel's KMAX_ARGS
 * arguments, a GEMM's RT_GEMM_PTRS operands, a collective's source and
 * destination; *count set to its length. */
void *const *rt_graph_instr_ptrs(const struct rt_exec *e, int i, int *count);

#endif
