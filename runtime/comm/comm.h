/* Communicators: the collectives and point-to-point messages of ranks,
 * over rank groups in Megatron-LM's order (docs/parallel.md,
 * "Communicators").
 *
 * A world of n = t * d * p ranks (tensor, data, pipeline) is laid out with
 * TP ranks adjacent, then DP, then PP:
 *
 *     rank = tp + t * (dp + d * pp)
 *
 * so a TP group is t consecutive ranks, a DP group strides t and a PP group
 * strides t * d — the order of Megatron's initialize_model_parallel.
 *
 * One interface, several implementations (a vtable): `local` (every rank a
 * thread of one process, runtime/comm/comm_local.c), `mpi` (one process per rank
 * under mpirun, runtime/comm/comm_mpi.c), `nccl` (device buffers on a CUDA
 * stream, runtime/comm/comm_nccl.c), `device-local` (rank threads whose
 * buffers are device memory of their executors, runtime/comm/comm_device.c)
 * and `staged` (host buffers over a device communicator, staged through
 * device scratch: runtime/comm/comm_staged.c).
 * Each rank holds its own tgc_comm. Every call is blocking and collective
 * over its group (or matched point-to-point), returns TGC_COMM_OK or an
 * error code, never aborts the process; tgc_comm_error() gives a message
 * naming the rank and the operation. An error is fatal to the world: the
 * first failure (a bad argument, a timeout, mismatched calls, or
 * tgc_comm_abort) makes every pending and later call on every rank return
 * an error naming the failed rank.
 *
 * Buffers are the caller's; the ranks of a group must pass buffers that do
 * not overlap one another (in `local` all ranks share one address space).
 * Collectives allocate nothing. */
#ifndef TGC_RUNTIME_COMM_H
#define TGC_RUNTIME_COMM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "support/diag.h"

/* ---- status codes ----------------------------------------------------- */

enum {
    TGC_COMM_OK = 0,
    TGC_COMM_ERR_ARG,         /* invalid argument (group, dtype, count, peer, root) */
    TGC_COMM_ERR_MISMATCH,    /* the ranks of a group made different calls */
    TGC_COMM_ERR_TIMEOUT,     /* a peer did not arrive before the deadline */
    TGC_COMM_ERR_ABORTED,     /* another rank failed or called tgc_comm_abort */
    TGC_COMM_ERR_NOMEM,       /* an allocation failed (message buffers) */
    TGC_COMM_ERR_UNSUPPORTED, /* the implementation lacks the operation */
    TGC_COMM_ERR_BACKEND,     /* the library below (MPI, NCCL) failed */
    TGC_COMM_STATUS_COUNT
};
/* "ok", "invalid argument", ... */
const char *tgc_comm_status_name(int status);

/* ---- groups, types, operations ---------------------------------------- */

typedef enum tgc_comm_group {
    TGC_COMM_WORLD, /* all n ranks */
    TGC_COMM_TP,    /* the t ranks of a tensor-parallel group (adjacent) */
    TGC_COMM_DP,    /* the d ranks of a data-parallel group (stride t) */
    TGC_COMM_PP,    /* the p stages of a pipeline (stride t * d) */
    TGC_COMM_GROUP_COUNT
} tgc_comm_group;

typedef enum tgc_comm_dtype {
    TGC_COMM_F32,  /* reductions and data movement */
    TGC_COMM_F64,  /* reductions and data movement */
    TGC_COMM_BYTE, /* data movement only (all_gather, broadcast, send, recv) */
    TGC_COMM_BF16, /* reductions (in f32, rounded once: below) and data movement */
    TGC_COMM_F16,  /* IEEE half: the same */
    TGC_COMM_DTYPE_COUNT
} tgc_comm_dtype;

typedef enum tgc_comm_op {
    TGC_COMM_SUM,
    TGC_COMM_MAX, /* NaN-propagating: a NaN anywhere gives NaN */
    TGC_COMM_OP_COUNT
} tgc_comm_op;

/* What the statistics count. A sendrecv counts as one send and one recv. */
typedef enum tgc_comm_kind {
    TGC_COMM_ALL_REDUCE,
    TGC_COMM_ALL_GATHER,
    TGC_COMM_REDUCE_SCATTER,
    TGC_COMM_BROADCAST,
    TGC_COMM_SEND,
    TGC_COMM_RECV,
    TGC_COMM_BARRIER,
    TGC_COMM_KIND_COUNT
} tgc_comm_kind;

const char *tgc_comm_group_name(tgc_comm_group g); /* "world", "tp", "dp", "pp" */
const char *tgc_comm_dtype_name(tgc_comm_dtype t); /* "f32", "f64", "byte", "bf16", "f16" */
const char *tgc_comm_kind_name(tgc_comm_kind k);   /* "all_reduce", ... */
size_t tgc_comm_dtype_size(tgc_comm_dtype t);      /* 4, 8, 1, 2, 2; 0 if invalid */

/* 16-bit reductions (bf16, f16: uint16 bit patterns). Every communicator
 * reduces them the same way, so they agree bit for bit: each element is
 * widened to f32 (exactly), reduced ((x0 op x1) op x2) ... in f32 in group
 * order, and rounded to nearest even once (f16 overflows to infinity; MAX
 * is exact and keeps NaN). These are the steps, on n elements: acc =
 * x widened; acc = acc op x widened; y = acc rounded. */
bool tgc_comm_dtype_is16(tgc_comm_dtype t);
void tgc_comm_acc_init(float *acc, const void *x, size_t n, tgc_comm_dtype t);
void tgc_comm_acc_add(float *acc, const void *x, size_t n, tgc_comm_dtype t, tgc_comm_op op);
void tgc_comm_acc_store(const float *acc, void *y, size_t n, tgc_comm_dtype t);
/* dst[0, n) = elements [off, off + n) of the g sources src[0 .. g-1]
 * reduced as above, in blocks (no allocation); dst may be the same
 * elements of a source. */
void tgc_comm_reduce16(const void *const *src, int g, size_t off, size_t n, tgc_comm_dtype t, tgc_comm_op op,
                       void *dst);

/* ---- topology --------------------------------------------------------- */

/* The most ranks a world may have. */
#define TGC_COMM_MAX_RANKS (1 << 20)

typedef struct tgc_topology {
    int t, d, p; /* tensor, data and pipeline parallel sizes, each >= 1 */
} tgc_topology;

typedef struct tgc_coords {
    int tp, dp, pp;
} tgc_coords;

/* Sets *topo; TGC_COMM_ERR_ARG if a size is < 1 or the product exceeds
 * TGC_COMM_MAX_RANKS. */
int tgc_topology_init(tgc_topology *topo, int t, int d, int p);
int tgc_topology_size(const tgc_topology *topo); /* n = t * d * p */
tgc_coords tgc_topology_coords(const tgc_topology *topo, int rank);
int tgc_topology_rank(const tgc_topology *topo, tgc_coords c);
/* Ranks in each group of kind g (t, d, p or n). */
int tgc_topology_group_size(const tgc_topology *topo, tgc_comm_group g);
/* How many groups of kind g the world has (n / group size). */
int tgc_topology_group_count(const tgc_topology *topo, tgc_comm_group g);
/* Which of those groups `rank` belongs to, 0 .. group_count - 1: TP groups
 * are numbered by dp + d * pp, DP groups by tp + t * pp, PP groups by
 * tp + t * dp (the order Megatron creates them in). */
int tgc_topology_group_index(const tgc_topology *topo, int rank, tgc_comm_group g);
/* The position of `rank` within its group of kind g (its tp, dp or pp
 * coordinate; the rank itself for WORLD). */
int tgc_topology_group_rank(const tgc_topology *topo, int rank, tgc_comm_group g);
/* The global rank of member i (0-based, group order) of rank's group. */
int tgc_topology_group_member(const tgc_topology *topo, int rank, tgc_comm_group g, int i);
/* Writes the members of rank's group of kind g in group order into out
 * (room for group_size ints); returns the group size. */
int tgc_topology_group_members(const tgc_topology *topo, int rank, tgc_comm_group g, int *out);

/* ---- the communicator ------------------------------------------------- */

typedef struct tgc_comm tgc_comm;

/* Counters of one rank: calls and bytes moved, per kind and group (send and
 * recv are counted under TGC_COMM_WORLD). Bytes follow ring accounting —
 * what each rank sends over the wire with ring algorithms:
 *   all_reduce of N bytes over g ranks      2 * N * (g - 1) / g
 *   all_gather, reduce_scatter, N = the
 *     full (gathered / unscattered) size        N * (g - 1) / g
 *   broadcast of N bytes                        N  (0 when g = 1)
 *   send, recv of N bytes                       N
 *   barrier                                     0
 * Only calls that succeed are counted. */
typedef struct tgc_comm_stats {
    uint64_t calls[TGC_COMM_KIND_COUNT][TGC_COMM_GROUP_COUNT];
    double bytes[TGC_COMM_KIND_COUNT][TGC_COMM_GROUP_COUNT];
} tgc_comm_stats;

/* The accounted bytes of one call: `bytes` is the per-rank buffer size of
 * all_reduce / broadcast / send / recv, the full gathered size of
 * all_gather and the full input size of reduce_scatter; g the group size. */
double tgc_comm_ring_bytes(tgc_comm_kind kind, size_t bytes, int g);

const tgc_comm_stats *tgc_comm_stats_get(const tgc_comm *c);
void tgc_comm_stats_reset(tgc_comm *c);
/* acc += s, element by element (a sum over ranks). */
void tgc_comm_stats_add(tgc_comm_stats *acc, const tgc_comm_stats *s);
uint64_t tgc_comm_stats_calls(const tgc_comm_stats *s, tgc_comm_kind k); /* over all groups */
double tgc_comm_stats_bytes(const tgc_comm_stats *s, tgc_comm_kind k);   /* over all groups */
/* A table: one line per (kind, group) that was called, then the total.
 * `title` heads it (e.g. "rank 3"). Deterministic: no timings. */
void tgc_comm_stats_print(const tgc_comm_stats *s, const char *title, FILE *out);

int tgc_comm_rank(const tgc_comm *c); /* global rank */
int tgc_comm_size(const tgc_comm *c); /* world size n */
const tgc_topology *tgc_comm_topology(const tgc_comm *c);
int tgc_comm_group_rank(const tgc_comm *c, tgc_comm_group g);
int tgc_comm_group_size(const tgc_comm *c, tgc_comm_group g);
const char *tgc_comm_backend(const tgc_comm *c); /* "local", ... */

/* The deadline of every wait, in seconds (> 0). Implementations start from
 * TGC_COMM_TIMEOUT in the environment, else TGC_COMM_DEFAULT_TIMEOUT. */
#define TGC_COMM_DEFAULT_TIMEOUT 300.0
int tgc_comm_set_timeout(tgc_comm *c, double seconds);
double tgc_comm_timeout(const tgc_comm *c);
/* Reads TGC_COMM_TIMEOUT into *seconds (unchanged when unset);
 * TGC_COMM_ERR_ARG if it is set but not a positive finite number. */
int tgc_comm_timeout_from_env(double *seconds);

/* The message of the last error of this rank ("" after none), e.g.
 *   rank 1: all_reduce(tp): rank 3 failed: injected fault
 * The string lives in c and is overwritten by the next error. */
const char *tgc_comm_error(const tgc_comm *c);
int tgc_comm_last_status(const tgc_comm *c);
/* The rank held responsible for the last error of this rank (-1 before
 * any): a communicator layered on another (runtime/comm/comm_device.h)
 * names the same culprit. */
int tgc_comm_last_culprit(const tgc_comm *c);

/* In-place all-reduce of count elements of buf over group g. Every rank of
 * the group gets the same bits: the reduction is taken in group order,
 * ((x0 op x1) op x2) ..., element by element, in the element type (bf16 and
 * f16 in f32, rounded once: tgc_comm_reduce16). */
int tgc_comm_all_reduce(tgc_comm *c, tgc_comm_group g, void *buf, size_t count, tgc_comm_dtype dt,
                        tgc_comm_op op);
/* recv (group_size * count elements) = the send blocks (count elements
 * each) of the group's ranks, concatenated in group order. In place when
 * send == recv + group_rank * count * element size. */
int tgc_comm_all_gather(tgc_comm *c, tgc_comm_group g, const void *send, void *recv, size_t count,
                        tgc_comm_dtype dt);
/* send holds group_size * count elements; recv (count elements) gets block
 * group_rank of their reduction over the group, in group order (the same
 * bits as all_reduce). In place when recv == send + group_rank * count *
 * element size. */
int tgc_comm_reduce_scatter(tgc_comm *c, tgc_comm_group g, const void *send, void *recv, size_t count,
                            tgc_comm_dtype dt, tgc_comm_op op);
/* The reduce-scatter of uneven pieces, in place: buf holds the group's
 * pieces concatenated in group order, piece r of counts[r] elements (any
 * may be 0; every member passes the same counts, group_size of them).
 * Afterwards this member's piece holds their reduction over the group, in
 * group order (the same bits as all_reduce); the rest of buf is
 * unspecified. The distributed optimizer's bucket reduction: a bucket's
 * range cut at the replicas' shard boundaries (docs/pipeline.md). Counted
 * as a reduce_scatter whose bytes are what each rank sends, every piece
 * but its own: (N - counts[me]) elements, N their sum (half the
 * all-reduce's 2 N (g-1)/g over the group). */
int tgc_comm_reduce_scatter_v(tgc_comm *c, tgc_comm_group g, void *buf, const size_t *counts, tgc_comm_dtype dt,
                              tgc_comm_op op);
/* buf of the group member with position `root` (0 .. group_size - 1) is
 * copied into buf of every member. */
int tgc_comm_broadcast(tgc_comm *c, tgc_comm_group g, void *buf, size_t count, tgc_comm_dtype dt, int root);
/* Point-to-point, to or from a global rank, matched by (source, tag) in
 * order: messages from one rank with one tag never overtake each other.
 * The receiver's count must equal the sender's. `local` buffers sends (up
 * to a mailbox depth per pair of ranks); MPI and NCCL may block a send
 * until it is matched, so portable code exchanges with tgc_comm_sendrecv. */
int tgc_comm_send(tgc_comm *c, const void *buf, size_t count, tgc_comm_dtype dt, int peer, int tag);
int tgc_comm_recv(tgc_comm *c, void *buf, size_t count, tgc_comm_dtype dt, int peer, int tag);
/* Sends to `dst` and receives from `src` at once (never deadlocks on a
 * ring); both messages have the same dtype and tag. */
int tgc_comm_sendrecv(tgc_comm *c, const void *send, size_t send_count, int dst, void *recv, size_t recv_count,
                      int src, tgc_comm_dtype dt, int tag);
/* The same with a tag per message (a pipeline stage sends an activation
 * forward and receives a gradient back at once, as Megatron's
 * send_forward_recv_backward). */
int tgc_comm_sendrecv_tags(tgc_comm *c, const void *send, size_t send_count, int dst, int send_tag, void *recv,
                           size_t recv_count, int src, int recv_tag, tgc_comm_dtype dt);
int tgc_comm_barrier(tgc_comm *c, tgc_comm_group g);

/* Marks `rank` as failed with a reason (NULL: "aborted"): every pending and
 * later call on every rank of the world returns TGC_COMM_ERR_ABORTED
 * naming it, promptly (not after the timeout). The first abort wins. Safe
 * from any thread, any number of times. Returns TGC_COMM_OK. */
int tgc_comm_abort(tgc_comm *c, int rank, const char *reason);

/* Releases c (a no-op for `local`, whose world owns its communicators). */
void tgc_comm_free(tgc_comm *c);

/* ---- implementations -------------------------------------------------- */

/* An implementation fills a vtable. Arguments are validated, statistics
 * counted and errors made fatal by the generic layer (runtime/comm/comm.c);
 * an entry reports a failure through tgc_comm_fail and returns its code.
 * A NULL entry means unsupported (TGC_COMM_ERR_UNSUPPORTED). */
typedef struct tgc_comm_vtable {
    const char *name;
    int (*all_reduce)(tgc_comm *c, tgc_comm_group g, void *buf, size_t count, tgc_comm_dtype dt,
                      tgc_comm_op op);
    int (*all_gather)(tgc_comm *c, tgc_comm_group g, const void *send, void *recv, size_t count,
                      tgc_comm_dtype dt);
    int (*reduce_scatter)(tgc_comm *c, tgc_comm_group g, const void *send, void *recv, size_t count,
                          tgc_comm_dtype dt, tgc_comm_op op);
    /* lo: this member's piece starts at element lo of buf (the sum of the
     * counts before it). */
    int (*reduce_scatter_v)(tgc_comm *c, tgc_comm_group g, void *buf, const size_t *counts, size_t lo,
                            tgc_comm_dtype dt, tgc_comm_op op);
    int (*broadcast)(tgc_comm *c, tgc_comm_group g, void *buf, size_t count, tgc_comm_dtype dt, int root);
    /* Point-to-point on raw bytes. */
    int (*send)(tgc_comm *c, const void *buf, size_t bytes, int peer, int tag);
    int (*recv)(tgc_comm *c, void *buf, size_t bytes, int peer, int tag);
    int (*sendrecv)(tgc_comm *c, const void *send, size_t send_bytes, int dst, int stag, void *recv,
                    size_t recv_bytes, int src, int rtag);
    int (*barrier)(tgc_comm *c, tgc_comm_group g);
    /* Marks the world failed and wakes every waiting rank. */
    void (*abort)(tgc_comm *c, int rank, const char *reason);
    /* What tgc_comm_free does: releases the implementation's state and
     * then c (tgc_comm_destroy). NULL: c is owned elsewhere (a local
     * world) and tgc_comm_free does nothing. */
    void (*free)(tgc_comm *c);
} tgc_comm_vtable;

/* A communicator for `rank` of topo; impl is the implementation's state.
 * NULL if out of memory. Freed by tgc_comm_destroy. */
tgc_comm *tgc_comm_create(const tgc_comm_vtable *vt, void *impl, const tgc_topology *topo, int rank);
void tgc_comm_destroy(tgc_comm *c);
void *tgc_comm_impl(const tgc_comm *c);
/* Records an error of the current call: `culprit` is the rank held
 * responsible (this rank, a peer that did not arrive, ...). The message is
 * prefixed "rank R: KIND(GROUP): ". Returns code. */
int tgc_comm_fail(tgc_comm *c, int code, int culprit, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Records the failure `code` of a call on `below`, the communicator c is
 * layered on (runtime/comm/comm_device.h, comm_staged.h), as c's error:
 * below's message without its "rank R: KIND(GROUP): " prefix (or the
 * status's name when it recorded none) and below's culprit. Returns code. */
int tgc_comm_fail_from(tgc_comm *c, const tgc_comm *below, int code);
/* The kind and group of the call in progress (for messages). */
tgc_comm_kind tgc_comm_current_kind(const tgc_comm *c);
tgc_comm_group tgc_comm_current_group(const tgc_comm *c);

/* ---- local: ranks as threads of one process ---------------------------- */

typedef struct tgc_comm_local_world tgc_comm_local_world;

typedef struct tgc_comm_local_options {
    double timeout_s;  /* seconds, > 0; 0: TGC_COMM_TIMEOUT or TGC_COMM_DEFAULT_TIMEOUT */
    int mailbox_depth; /* buffered sends per ordered pair of ranks; 0: 8 */
} tgc_comm_local_options;

/* The shared state of n ranks with topology (t=1, d=n, p=1). NULL after
 * reporting to d (which may be NULL) on a bad n, a bad TGC_COMM_TIMEOUT or
 * no memory. */
tgc_comm_local_world *tgc_comm_local_world_new(int n, diag *d);
/* The same for any topology; opt may be NULL. */
tgc_comm_local_world *tgc_comm_local_world_new_topo(const tgc_topology *topo,
                                                    const tgc_comm_local_options *opt, diag *d);
/* The communicator of `rank`, owned by the world; use it from one thread. */
tgc_comm *tgc_comm_local_world_comm(tgc_comm_local_world *w, int rank);
/* Frees everything; call after every rank thread has finished. */
void tgc_comm_local_world_free(tgc_comm_local_world *w);

/* Runs fn(comm of rank r, arg) on n threads, one per rank, and joins them.
 * A rank whose fn returns non-zero is aborted (tgc_comm_abort with that
 * rank), so the others stop instead of waiting for it. Returns 0 when every
 * fn returned 0, else the first non-zero result in rank order (or
 * TGC_COMM_ERR_BACKEND if a thread could not be started). */
typedef int (*tgc_comm_rank_fn)(tgc_comm *c, void *arg);
int tgc_comm_local_world_run(tgc_comm_local_world *w, tgc_comm_rank_fn fn, void *arg);

#endif
