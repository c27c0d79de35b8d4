/* The `device-local` communicator (docs/parallel.md, "Communicators"):
 * ranks that are threads of one process, like `local`, whose buffers are
 * DEVICE memory of their executors (runtime/exec.h) on any backend — sim,
 * or cuda with several ranks on one GPU. Collectives are done on the
 * device by each rank's own executor (rt_exec_copy / rt_exec_reduce
 * straight between the ranks' buffers, which are valid addresses for every
 * rank of the process), with the bits of `local`: a reduction is
 * ((x0 op x1) op x2) ... in group order, element by element. The ranks
 * rendezvous over a host communicator of the same ranks; point-to-point
 * messages are staged through host memory and sent over it. */
#ifndef TGC_RUNTIME_COMM_DEVICE_H
#define TGC_RUNTIME_COMM_DEVICE_H
#include "runtime/comm/comm.h"

struct rt_exec;

/* A communicator of host's rank and topology whose collectives and
 * messages work on e's device buffers through e's backend, and which
 * rendezvous over `host` (a host-memory communicator of the same ranks,
 * e.g. the local world's; it stays the caller's). Collective over host's
 * world: every rank calls it, each with its own executor; all executors
 * share one backend and device. NULL after reporting to d (which may be
 * NULL); a rank that fails aborts host's world, so the others fail too.
 *
 * Free it (tgc_comm_free) before its executor and its host communicator,
 * after its last call. */
tgc_comm *tgc_comm_device_new(tgc_comm *host, struct rt_exec *e, diag *d);

#endif
