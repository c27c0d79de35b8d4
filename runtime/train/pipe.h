/* The pipeline runtime (docs/pipeline.md, "Execution"): one training step
 * of one rank of a 3D plan as its schedule list says -- m micro-batches
 * through the rank's model chunks with gradient accumulation, the stage
 * boundaries as point-to-point messages, the data-parallel gradient
 * reduction, and the update.
 *
 * The rank runs the instructions of its pipeline stage only (memplan laid
 * every stage out from offset 0), in phases (each node's phase(...), which
 * the schedule pass set):
 *   begin    values the same for every micro-batch (a tied weight sent to
 *            the last stage, constants), computed once per step into
 *            buffers of their own (pinned);
 *   F(c, j)  the forward of chunk c on micro-batch j, and B(c, j) its
 *            backward (recomputation included), on an activation arena and
 *            input buffer of their own per in-flight micro-batch (a slot:
 *            as many per chunk as the schedule holds at once);
 *   end      what reads the gradients summed over the micro-batches (a
 *            tied weight's gradient sent back to the first stage and
 *            added), then the data-parallel all-reduce and the scaling by
 *            1/M, bucket by bucket (the schedule pass's bucket(K); with
 *            --overlap-grad-reduce each on a communication thread as soon
 *            as the bucket is final, during the backward);
 *   update   the gradient norm (summed over the pipeline group) and the
 *            optimizer.
 * Parameter gradients of micro-batch j > 0 are written to a scratch buffer
 * and added to the gradient buffer after each B(c, j); other values the end
 * phase reads are summed into accumulators of their own.
 *
 * Micro-batch numbering: replica k's micro-batch j is the global
 * micro-batch g = k*m + j of M = m*d; its rows of the global batch are
 * [g*b, (g+1)*b), and its dropout masks are those of step number
 * step*M + g (the kernels' rt.step), so any (t, p, d) split of the same
 * global batch into the same micro-batches trains the same model. */
#ifndef TGC_RT_PIPE_H
#define TGC_RT_PIPE_H
#include <stdbool.h>
#include <stdint.h>

#include "codegen/step.h"
#include "passes/pipeline.h"
#include "runtime/exec.h"
#include "runtime/io/trace.h"

typedef struct rt_pipe rt_pipe;

/* Fills input node n's value (dst: host memory of its size, which the
 * pipeline then copies to the device) with global micro-batch g of step. */
typedef void (*rt_pipe_feed_fn)(void *ctx, const ir_node *n, void *dst, int64_t step, int64_t g);

typedef struct rt_pipe_opts {
    const pipe_schedule *sched; /* every pipeline rank's list (kept by the caller) */
    int pp_rank, dp_rank, dp_size;
    bool dist_opt;              /* shard the update over the data-parallel group */
    rt_pipe_feed_fn feed;
    void *feed_ctx;
    /* The ranks' communicator on host memory (the mean loss); NULL: the
     * executor's, when its buffers are host memory. */
    tgc_comm *host_comm;
    /* --overlap-grad-reduce: each gradient bucket's data-parallel reduction
     * runs on a communication thread as soon as the bucket is final, while
     * the backward goes on; --overlap-param-gather: the distributed
     * optimizer's all-gather of the updated parameters too, waited for
     * before they are next read (the next step, an evaluation,
     * rt_pipe_wait). overlap_comm: that thread's communicator, the same
     * ranks and buffers as the executor's, used by the thread alone (NULL:
     * no thread; everything on the compute thread, with the same buckets
     * and the same bits). On a backend with streams (cuda) there is no
     * thread: overlap_comm enqueues on overlap_stream, the executor's
     * side_stream, which waits for the compute stream's work at each
     * bucket's ready point (stream_wait). */
    bool overlap_grad_reduce, overlap_param_gather;
    tgc_comm *overlap_comm;
    void *overlap_stream;
} rt_pipe_opts;

/* The rank's compiled step (codegen/step.h: cg_step_build) for e's program
 * and the options, its step arena allocated and every slot bound. e has its
 * communicator and tensor-parallel rank set. NULL after reporting an error. */
rt_pipe *rt_pipe_new(rt_exec *e, const rt_pipe_opts *o, diag *d);
void rt_pipe_free(rt_pipe *pp);

/* One training step: the rank's compiled step; returns rt_exec_run's codes. */
int rt_pipe_step(rt_pipe *pp, int64_t step, double lr, double wd);
/* An evaluation: iters global batches of the feed's validation data (the
 * feed callback gets k = 0 .. iters-1 as its step), forward only, dropout
 * off; *loss is their mean loss (NAN on a rank without the loss). Every
 * rank calls it at once; returns rt_exec_run's codes. */
int rt_pipe_eval(rt_pipe *pp, int64_t iters, double *loss);
/* After a step: the mean loss over the step's micro-batches and replicas
 * (NAN on a rank without the loss), and whether this rank holds it. */
double rt_pipe_loss(const rt_pipe *pp);
bool rt_pipe_has_loss(const rt_pipe *pp);
/* The distributed optimizer leaves each replica its shard of the summed
 * gradients: this all-gathers them (for --export-grads; collective over the
 * data-parallel group). 0 or a communicator status. */
int rt_pipe_gather_grads(rt_pipe *pp);
/* Waits for the communication thread's parameter all-gather of the last
 * step (--overlap-param-gather): call it before reading the parameters
 * outside a step (a checkpoint, an export). 0 or a communicator status. */
int rt_pipe_wait(rt_pipe *pp);
/* The gradient norm of the last update (every rank). */
double rt_pipe_grad_norm(const rt_pipe *pp);
/* Bytes the pipeline allocated beside the executor's buffers (slots,
 * scratch gradients, accumulators, pinned values). */
int64_t rt_pipe_bytes(const rt_pipe *pp);
/* What rt_pipe_new would allocate beside the executor for pipeline rank
 * pp_rank of graph g under schedule s (rt_pipe_bytes), and per chunk the
 * micro-batches held at once (slots[v]; may be NULL), without compiling or
 * allocating: `tgc plan`'s prediction. paired: sends paired with receives
 * (the mpi communicator). -1 after reporting an error. */
int64_t rt_pipe_predict(const ir_graph *g, const pipe_schedule *s, int pp_rank, bool paired, int *slots, diag *d);
/* The most micro-batches whose activations chunk c held at once. */
int rt_pipe_slots(const rt_pipe *pp, int c);
/* The compiled step it runs. */
const cg_step *rt_pipe_program(const rt_pipe *pp);

/* --trace: records a span per schedule instruction (forward, backward,
 * send, receive, the reductions, the update) into t, row rank. */
void rt_pipe_trace(rt_pipe *pp, rt_trace *t, int row);

#endif
