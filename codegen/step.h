/* The compiled step of one rank (docs/pipeline.md, "The rank's program").
 *
 * Codegen turns a memory-planned, schedule-annotated graph into a program
 * of kernels, GEMMs and collectives (codegen.h); this turns that program
 * and the schedule pass's lists (passes/pipeline.h) into what one rank runs
 * for one training step, as a linear list of step instructions:
 *
 *   begin          the values made once per step (a tied weight sent to
 *                  the last stage, constants), with their transfers
 *   recv / send    a chunk's stage-boundary values of one micro-batch, to
 *                  or from another virtual stage, under the micro-batch's
 *                  slot; a send right before a receive is one send+recv
 *                  (paired: a communicator whose sends block)
 *   fwd c.j @k     bind slot k, feed micro-batch j's inputs, run the
 *                  forward of chunk c, add the loss
 *   bwd c.j @k     bind slot k, run the backward of chunk c, add the
 *                  micro-batch's gradients and summed values into the
 *                  step's (the first one of the step assigns); the last
 *                  one of a chunk under --overlap-grad-reduce stops at each
 *                  bucket's ready point and launches its reduction
 *   end            what reads the sums (a tied weight's gradient sent back)
 *   reduce         each gradient bucket's data-parallel reduction and 1/M
 *   optimizer      the update, the distributed optimizer's all-gather of
 *                  the parameters, the gradient norm
 *   loss           the mean loss over the micro-batches and replicas
 *
 * Every decision is made here, before a run: the slot each micro-batch
 * binds (the most a chunk holds at once under the list), which backward
 * assigns and which adds, where each bucket is final, and where the end
 * phase, the reduction and the update fall. Slots, the values pinned for
 * the step, the sums over the micro-batches and the scratch gradients of
 * micro-batches j > 0 are buffers of one arena of their own (the step
 * arena) at offsets fixed here; `tgc dump-ir --rank R` prints it all and
 * golden tests pin it. The serial plan is the case p = 1, m = 1, d = 1.
 *
 * Numbering: replica k's micro-batch j is the global micro-batch
 * g = k*m + j of M = m*d (its rows, and the dropout step step*M + g). */
#ifndef TGC_CODEGEN_STEP_H
#define TGC_CODEGEN_STEP_H
#include <stdbool.h>
#include <stdint.h>

#include "codegen/codegen.h"
#include "passes/pipeline.h"

/* Instruction indices of the codegen program. */
typedef struct cg_seg {
    int *ins;
    int n;
} cg_seg;

/* A stage-boundary transfer: codegen instruction `instr` (CG_SEND /
 * CG_RECV) moves node `node` (the pp_send's operand, or the pp_recv) to or
 * from virtual stage vpeer, tagged with the pp_send's node id. */
typedef struct cg_xfer {
    int instr, node, vpeer, tag;
    bool send;
} cg_xfer;

typedef struct cg_xlist {
    cg_xfer *x;
    int n;
} cg_xlist;

/* A value whose per-micro-batch results are summed over the step: into the
 * step arena at `acc` (the end phase reads the sum there), or, acc < 0, a
 * gradient into its own place of the gradient buffer. bucket: the
 * gradient's bucket when that bucket is reduced at a ready point of this
 * chunk's backward (overlap), else -1. */
typedef struct cg_accum {
    int node;
    int64_t acc, count;
    ir_dtype dtype;
    int bucket;
} cg_accum;

/* A contiguous run of the gradient buffer, in elements. */
typedef struct cg_range {
    int64_t off, n;
} cg_range;

/* A data-parallel reduction bucket (the schedule pass's bucket(k)): its
 * ranges of this rank's gradient buffer, merged where they touch, and the
 * instruction of chunk `chunk`'s backward after which its gradients are
 * final (chunk -1: after the end phase). */
typedef struct cg_bucket {
    int chunk, ready;
    cg_range *r;
    int nr;
    int64_t elems;
} cg_bucket;

/* A slot: one in-flight micro-batch's activation arena (stash) and input
 * buffer, offsets in the step arena (-1: the executor's own buffers, which
 * the first slot of chunk 0 uses; the serial plan has that slot alone). */
typedef struct cg_slot {
    int chunk;
    int64_t stash, input;
} cg_slot;

/* A node read in place of its arena value: during a micro-batch at `mb`,
 * during the step-level phases at `step` (step arena offsets). */
typedef struct cg_pin {
    int node;
    int64_t mb, step, bytes;
    bool summed; /* a sum over the micro-batches (else a value made once per step) */
} cg_pin;

typedef enum cg_sop {
    CG_SOP_BEGIN, CG_SOP_RECV, CG_SOP_SEND, CG_SOP_SENDRECV, CG_SOP_FWD, CG_SOP_BWD, CG_SOP_END,
    CG_SOP_REDUCE, CG_SOP_OPT, CG_SOP_LOSS,
    CG_SOP_MARK, /* nothing to run: a schedule instruction whose work another did (a trace span) */
    CG_SOP_COUNT
} cg_sop;

/* One step instruction. recv / send: the transfers of chunk's forward
 * (bwd false) or backward list with virtual stage peer, under slot; a
 * send+recv adds the receive's (chunk2, mb2, slot2, peer2, bwd2). fwd /
 * bwd: chunk, mb, slot; first: the step's first backward of the chunk
 * (its sums are assigned, not added); last: its last (under overlap, the
 * chunk's buckets go at their ready points). sched: the schedule-list
 * instruction it comes from (-1: none), for traces. */
typedef struct cg_sinstr {
    cg_sop op;
    int chunk, mb, slot, peer;
    bool bwd, first, last;
    int chunk2, mb2, slot2, peer2;
    bool bwd2;
    int sched, sched2;
} cg_sinstr;

typedef struct cg_step_opts {
    const pipe_schedule *sched; /* every pipeline rank's list */
    int pp_rank;
    int dp_size;
    bool paired;           /* sends paired with the next receive (mpi, nccl) */
    bool overlap_grads;    /* --overlap-grad-reduce: buckets reduced at their ready points */
    bool dist_opt;         /* --use-distributed-optimizer */
} cg_step_opts;

typedef struct cg_step {
    const pipe_schedule *sched; /* the caller's */
    int r, p, v, m, d;
    bool paired, overlap_grads, dist_opt;
    /* The codegen program's instructions by phase and chunk. */
    cg_seg begin, end, opt;
    cg_seg *fwd, *bwd;      /* per chunk, compute only */
    cg_xlist *fx, *bx;      /* per chunk: the forward's / the backward's transfers */
    cg_accum **acc;         /* per chunk: what bwd c.j adds into */
    int *nacc;
    int **inputs;           /* per chunk: its input nodes, -1-terminated */
    int loss, loss_chunk;   /* the loss node on this rank, -1 */
    int norm;               /* the gradient norm the update reads */
    cg_bucket *bk;
    int nbk;
    int **order;            /* per chunk: its buckets by ready point, -1-terminated */
    int64_t grad_bytes;     /* this stage's gradient region */
    ir_dtype grad_t;        /* its storage dtype */
    /* The step arena. */
    int *nslot;             /* per chunk: micro-batches held at once */
    cg_slot *slot;          /* per chunk, nslot[c] each, chunk 0's first */
    int nslots;
    int *slot0;             /* per chunk: its first slot's index */
    cg_pin *pin;
    int npin;
    int64_t scratch;        /* the gradients of micro-batches j > 0 (-1: one micro-batch) */
    int64_t arena_bytes;
    /* The program: the step, and an evaluation of one global batch
     * (forwards only, every chunk on its first slot). */
    cg_sinstr *ins, *eval;
    int nins, neval;
} cg_step;

/* The step of pipeline rank o->pp_rank of program prog (of graph g). NULL
 * after reporting to d a graph the step cannot run (no phase annotations,
 * a per-micro-batch value read once per step, a bucket across chunks,
 * ...). prog NULL: the buffers only (slots, pins, sums: what a run
 * allocates), for `tgc plan` and the memory check. */
cg_step *cg_step_build(const ir_graph *g, const cg_program *prog, const cg_step_opts *o, diag *d);
void cg_step_free(cg_step *s);

/* The rank's program as text: the step arena's buffers with their offsets
 * and sizes, the buckets, then one step instruction per line. */
char *cg_step_print(const ir_graph *g, const cg_step *s);

/* `tgc dump-ir --rank R`: the program of rank R (Megatron's order: tp
 * fastest, then dp, then pp) of a graph through memplan, compiled for the
 * CPU, under the passes' options po (the schedule, d, the distributed
 * optimizer) and --overlap-grad-reduce; the local communicator's terms
 * (sends not paired). NULL after reporting to d. */
char *cg_step_dump(const ir_graph *g, const pass_options *po, int64_t rank, bool overlap_grads, diag *d);

/* One instruction as a short name ("fwd 0.3", "send+recv ..."); cat gets
 * its trace category. */
void cg_sinstr_name(const cg_step *s, const cg_sinstr *in, char *buf, size_t n, const char **cat);

#endif
