/* Pipeline schedules (docs/pipeline.md): per pipeline rank, the ordered
 * list of instructions of one training step -- receive, forward of model
 * chunk c on micro-batch j, send, the backward counterparts, the gradient
 * reductions and the optimizer step -- for GPipe, 1F1B (PipeDream-Flush)
 * and interleaved 1F1B, in Megatron-LM's order; and a simulator that runs
 * the lists with given forward/backward times and zero-cost communication.
 *
 * Numbering: p pipeline ranks, v model chunks per rank, K = p*v virtual
 * stages; chunk c of rank r is virtual stage s = c*p + r (Megatron's
 * layout). The IR carries the rank in node->stage and the chunk in
 * node->chunk; pp_send/pp_recv name virtual stages (to_stage/from_stage).
 *
 * (Not the learning-rate schedule: that is runtime/train/schedule.h.) */
#ifndef TGC_PASSES_PIPELINE_H
#define TGC_PASSES_PIPELINE_H
#include <stdbool.h>
#include <stddef.h>

#include "pass.h"

typedef enum pipe_kind { PIPE_GPIPE, PIPE_1F1B, PIPE_INTERLEAVED } pipe_kind;

/* "gpipe", "1f1b", "interleaved" <-> pipe_kind. */
bool pipe_kind_from(const char *name, pipe_kind *out);
const char *pipe_kind_name(pipe_kind k);

typedef enum pipe_op {
    PIPE_FWD,         /* forward of (chunk, mb) */
    PIPE_BWD,         /* backward of (chunk, mb) */
    PIPE_RECV_FWD,    /* the input activations of (chunk, mb), from virtual stage `peer` */
    PIPE_SEND_FWD,    /* the output activations of (chunk, mb), to `peer` */
    PIPE_RECV_BWD,    /* the gradient of (chunk, mb)'s output, from `peer` */
    PIPE_SEND_BWD,    /* the gradient of (chunk, mb)'s input, to `peer` */
    /* Step-level values that cross stages (the tied embedding / LM-head
     * weight): sent once at the start of the step, their gradient,
     * accumulated over the micro-batches, sent back once at the end. */
    PIPE_SEND_WEIGHT,
    PIPE_RECV_WEIGHT,
    PIPE_SEND_WGRAD,
    PIPE_RECV_WGRAD,
    PIPE_ALLREDUCE_DP, /* the gradients over the data-parallel group (d > 1) */
    PIPE_OPTIMIZER,    /* the optimizer step */
    PIPE_OP_COUNT
} pipe_op;

typedef struct pipe_instr {
    int op;    /* pipe_op */
    int chunk; /* model chunk of this rank; for the weight ops, the local chunk that holds the value */
    int mb;    /* micro-batch, -1 for step-level ops */
    int peer;  /* the other virtual stage of a send/receive, -1 otherwise */
} pipe_instr;

/* Which virtual stages exchange what: fwd[a*K+b] when stage a sends
 * per-micro-batch values to b (a < b); bwd[b*K+a] when the gradient of some
 * of them comes back; weight[a*K+b] for step-level values (a tied weight),
 * wgrad[b*K+a] for their gradients. */
typedef struct pipe_topo {
    int K;
    bool *fwd, *bwd, *weight, *wgrad;
} pipe_topo;

/* The chain of a plain transformer: s -> s+1, gradients back. */
void pipe_topo_chain(pipe_topo *t, int K);
void pipe_topo_free(pipe_topo *t);

typedef struct pipe_schedule {
    pipe_kind kind;
    int p, v, m, d; /* ranks, chunks per rank, micro-batches, data-parallel replicas */
    int *len;       /* per rank: number of instructions */
    pipe_instr **ins;
    int fallbacks;  /* receives placed right before their use because Megatron's
                       order had no place for them (0 for a chain) */
} pipe_schedule;

/* Builds every rank's list. Errors (interleaved with m not a multiple of
 * p, v > 1 without interleaving, ...) are written to err and return false. */
bool pipe_build(pipe_schedule *s, pipe_kind kind, int p, int v, int m, int d, const pipe_topo *topo, char *err,
                size_t errlen);
void pipe_schedule_free(pipe_schedule *s);

/* "F0.3" style: compact, one line per rank (compute and step-level ops);
 * verbose adds every rank's full list, one instruction per line. */
char *pipe_schedule_print(const pipe_schedule *s, bool verbose);
/* One instruction as text ("recv-fwd F1.3 <- s1 (rank 1)"). */
void pipe_instr_str(const pipe_schedule *s, const pipe_instr *in, char *buf, size_t n);

/* ---- the simulator ----------------------------------------------------------
 * Every rank runs its list in order; a forward takes tf, a backward tb,
 * everything else no time. Sends never block; a receive waits until its
 * send has happened. Before running, the lists are checked: every (chunk,
 * micro-batch) forward and backward exactly once per rank, a forward after
 * its inputs were received, a backward after its forward and its gradients,
 * sends after what they send, messages on each (rank, rank, direction)
 * channel received in the order they are sent (NCCL matches in order). */
typedef struct pipe_sim {
    double tf, tb;
    double total;  /* when the last instruction of any rank ends */
    double ideal;  /* one rank's compute: m*v*(tf+tb) */
    double bubble; /* (total - ideal) / ideal: the paper's bubble time fraction */
    double *idle;  /* per rank: idle time / total */
    int *peak;     /* per rank: most (chunk, micro-batch) activations held at once
                      (forwards done minus backwards done) */
    double **start, **end; /* per rank, per instruction */
} pipe_sim;

/* False with a message when a list is invalid or the ranks deadlock (the
 * message says which ranks wait on what). */
bool pipe_simulate(const pipe_schedule *s, double tf, double tb, pipe_sim *out, char *err, size_t errlen);
void pipe_sim_free(pipe_sim *sim, int p);
/* The figures: step time, bubble against its formula, idle share and peak
 * activations per rank. */
char *pipe_sim_print(const pipe_schedule *s, const pipe_sim *sim);

/* ---- from the IR ------------------------------------------------------------ */

/* Checks that every operand on another virtual stage arrives through a
 * pp_send -> pp_recv pair between exactly those stages (reported at the
 * node), then reads which stages exchange what from the pp_send nodes of
 * the forward graph. */
bool pipe_topo_from_graph(const ir_graph *g, int p, int v, pipe_topo *t, diag *d);
/* The data-parallel gradient reduction's default bucket: 40 MiB of gradients. */
#define PIPE_BUCKET_DEFAULT_BYTES ((int64_t)40 << 20)
/* The schedule pass's annotations (passes/phase.c, docs/pipeline.md):
 * every node's phase, and every parameter gradient's bucket, of at least
 * bucket_elems elements (0: PIPE_BUCKET_DEFAULT_BYTES of them), filled in
 * the order the backward produces them. pipe_graph_annotated: whether the
 * graph has its phases (the schedule pass ran). */
bool pipe_annotate(ir_graph *g, int64_t bucket_elems, diag *d);
bool pipe_graph_annotated(const ir_graph *g);
/* The schedule the options ask for on graph g (m from the batch sizes).
 * Errors go to d. */
bool pipe_schedule_from_graph(const ir_graph *g, const pass_options *o, pipe_schedule *s, diag *d);

#endif
