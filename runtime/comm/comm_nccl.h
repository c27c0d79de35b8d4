/* The `nccl` communicator: tgc_comm (runtime/comm/comm.h) over DEVICE buffers
 * with NCCL (docs/cuda.md, "NCCL").
 *
 * libnccl is opened with dlopen (libnccl.so.2, then the CUDA toolkit's
 * directories, as runtime/backend/cublaslt.h does); tgc links no CUDA library.
 * Each rank has one NCCL communicator over the world and one per group
 * kind (TP, DP, PP), made by ncclCommSplit with color = the group's index
 * (tgc_topology_group_index) and key = the rank's position in it, so group
 * ranks are in tgc's group order. A group as large as the world shares
 * the world's communicator.
 *
 * Semantics that differ from `local`:
 *   - every call is enqueued on the rank's CUDA stream (given at join) and
 *     returns once enqueued: results are ready for later work on that
 *     stream. tgc_comm_barrier and tgc_comm_nccl_sync also wait for the
 *     stream on the host, polling with the deadline (tgc_comm_timeout);
 *   - reductions are NCCL's: every rank of a group gets the same bits, but
 *     the order of the sum depends on NCCL's algorithm, not on group order,
 *     and MAX's treatment of NaN is NCCL's; bf16 and f16 are NCCL's
 *     ncclBfloat16 / ncclFloat16 (NCCL 2.10 or later for bf16), summed
 *     by NCCL's kernels, which round to 16 bits at each step of the ring
 *     or tree rather than once;
 *   - point-to-point messages between two ranks match in the order they
 *     were posted; tags are not transmitted. A plain send may block until
 *     its receive is posted: exchange with tgc_comm_sendrecv (an NCCL
 *     group of both). A rank cannot tgc_comm_send to itself (use sendrecv).
 *
 * Failure. Communicators are created non-blocking (ncclConfig_t.blocking
 * = 0): every NCCL call that reports ncclInProgress is polled with
 * ncclCommGetAsyncError until it completes, the deadline passes
 * (TGC_COMM_ERR_TIMEOUT) or the world is aborted. tgc_comm_abort marks the
 * world failed; each rank calls ncclCommAbort on its own communicators at
 * its next call or poll (ncclCommAbort frees the communicator, so only
 * the thread using it may call it), and every later call returns
 * TGC_COMM_ERR_ABORTED naming the failed rank. In a world of processes
 * the other processes learn of a failure from NCCL (a remote error) or
 * their deadline. NCCL errors are TGC_COMM_ERR_BACKEND with
 * ncclGetErrorString and ncclGetLastError in the message.
 *
 * Bootstrap, three ways (docs/cuda.md, "NCCL worlds"):
 *   - one process, a thread per rank (one GPU each): tgc_nccl_world_new
 *     makes the ncclUniqueId; each rank's thread calls tgc_comm_nccl_join
 *     (collective: all n threads must call it);
 *   - one process per rank with a host communicator (mpirun: the `mpi`
 *     tgc_comm): tgc_comm_nccl_join_host. Rank 0 makes the id and
 *     broadcasts its bytes over the host communicator; rank and topology
 *     are the host's;
 *   - one process per rank from the environment (torchrun):
 *     tgc_comm_nccl_join_env. Every process derives one address, rank 0's
 *     (tgc_comm_nccl_env_addr), sets NCCL_COMM_ID to it and calls it: with
 *     NCCL_COMM_ID set, ncclGetUniqueId gives every process the same id
 *     and rank 0 serves the bootstrap at that address.
 * Without the CUDA toolkit every function reports "built without the CUDA
 * toolkit". */
#ifndef TGC_RUNTIME_COMM_NCCL_H
#define TGC_RUNTIME_COMM_NCCL_H
#include <stdbool.h>
#include <stddef.h>

#include "runtime/comm/comm.h"
#include "support/diag.h"

/* dlopen libnccl once (thread-safe); false + error if missing. Needs no GPU. */
bool tgc_nccl_load(diag *d);
/* NCCL's version code (e.g. 22809), 0 if it is not loaded. */
int tgc_nccl_version(void);

typedef struct tgc_nccl_world tgc_nccl_world;

/* The shared state of the ranks of one process: the topology, the
 * ncclUniqueId and the abort flag. NULL after reporting (bad topology,
 * NCCL missing or failing, a bad TGC_COMM_TIMEOUT). */
tgc_nccl_world *tgc_nccl_world_new(const tgc_topology *topo, diag *d);
/* Frees the world; call after every rank's communicator was freed. */
void tgc_nccl_world_free(tgc_nccl_world *w);

/* Rank `rank` joins from its own thread: selects `device` on the thread,
 * creates the NCCL communicators (world, then the TP, DP and PP splits)
 * and returns the rank's tgc_comm (freed by tgc_comm_free). stream is the
 * cudaStream_t every call is enqueued on. NULL after reporting. */
tgc_comm *tgc_comm_nccl_join(tgc_nccl_world *w, int rank, int device, void *stream, diag *d);

/* The bootstrap address of one process per rank, from the environment,
 * into buf: NCCL_COMM_ID when set; else MASTER_ADDR with TGC_NCCL_PORT
 * when set, else MASTER_PORT + 1 (MASTER_PORT itself is torchrun's own
 * store), as "host:port" ("[addr]:port" for an IPv6 literal). False after
 * reporting a missing or malformed variable by name and value. Needs
 * neither NCCL nor a GPU (both builds). */
bool tgc_comm_nccl_env_addr(char *buf, size_t size, diag *d);

/* One process per rank, from the environment: the address of
 * tgc_comm_nccl_env_addr becomes NCCL_COMM_ID (see above). RANK and
 * WORLD_SIZE, where set, must equal rank and the topology's size, and
 * device must be a visible GPU (the message names LOCAL_RANK when it is
 * set). Collective over the world's processes. The communicator owns its
 * private world. NULL after reporting. */
tgc_comm *tgc_comm_nccl_join_env(const tgc_topology *topo, int rank, int device, void *stream, diag *d);

/* One process per rank with a host communicator (any tgc_comm over host
 * memory: `mpi` under mpirun; `local` in tests): rank and topology are
 * host's. Every rank prepares (libnccl, the device, rank 0's
 * ncclUniqueId), then an all-reduce over host tells every rank whether all
 * are ready — if not, every rank returns NULL naming the lowest rank that
 * failed, instead of waiting in NCCL's initialisation; then rank 0
 * broadcasts the id's bytes (TGC_COMM_BYTE) over host and every rank joins
 * with it. Collective over host's world. NULL after reporting. */
tgc_comm *tgc_comm_nccl_join_host(tgc_comm *host, int device, void *stream, diag *d);

/* Waits on the host until every call enqueued so far on c's stream has
 * finished, polling for NCCL errors, the deadline and aborts. A status
 * like the calls'; the error is in tgc_comm_error. */
int tgc_comm_nccl_sync(tgc_comm *c);

/* For tests of the argument checks and the abort path on machines without
 * a GPU: a communicator of `rank` in `w` that never connected. Arguments
 * are checked as usual; a valid call fails with TGC_COMM_ERR_BACKEND
 * ("not connected"). */
tgc_comm *tgc_comm_nccl_unconnected(tgc_nccl_world *w, int rank);

#endif
