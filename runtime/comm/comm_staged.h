/* The `staged` communicator: host buffers over a communicator on device
 * buffers (docs/parallel.md, "Communicators").
 *
 * A world of processes started by torchrun has no host communicator of
 * its own (no MPI): NCCL, on device buffers, is all it has. What the
 * training loop keeps on the host (the mean loss, the agreement to stop,
 * checkpoint parts, trace spans) goes over this one: every call copies its
 * host buffers into device scratch memory of the rank's executor, runs the
 * device communicator's call on the scratch, waits for it and copies the
 * result back — rt_exec_write, the call, rt_exec_sync (first
 * tgc_comm_nccl_sync over nccl, which polls for its errors, aborts and the
 * deadline), rt_exec_read. The scratch buffer grows once to the largest
 * call, then is reused.
 *
 * Results are dev's: over `device-local` the bits of `local`, over `nccl`
 * NCCL's. Tags are passed to dev; nccl does not transmit them, so over
 * nccl the messages between two ranks must be received in the order they
 * were sent, a send returns only once its receive was posted (the call
 * waits for the stream), and a rank cannot send to itself (use sendrecv).
 * Code that receives in send order per peer (runtime/io/checkpoint.c,
 * runtime/io/trace.c) works over every dev.
 *
 * Errors: a failed call of dev is this communicator's error with dev's
 * message and culprit (tgc_comm_last_culprit); a failed copy or scratch
 * allocation on the executor is TGC_COMM_ERR_BACKEND / _NOMEM of this
 * rank, and fails dev's world (tgc_comm_abort goes through to dev). */
#ifndef TGC_RUNTIME_COMM_STAGED_H
#define TGC_RUNTIME_COMM_STAGED_H
#include "runtime/comm/comm.h"
#include "support/diag.h"

struct rt_exec;

/* A communicator of dev's rank and topology on HOST buffers, staging
 * through device scratch of e (e's device must be the one dev's buffers
 * live on). Backend name "staged(<dev's name>)"; the timeout is dev's
 * (every wait is dev's). Not collective; on a failure after dev exists
 * dev's world is aborted so the other ranks do not wait for this one.
 * NULL after reporting to d (may be NULL). dev and e stay the caller's:
 * free this communicator (tgc_comm_free) before either. */
tgc_comm *tgc_comm_staged_new(tgc_comm *dev, struct rt_exec *e, diag *d);

#endif
