/* The world a run is in: how many ranks, which one this process is, and
 * where its GPU is (docs/cuda.md, "NCCL worlds").
 *
 * Detected once, from the environment and what the command line asked:
 *   - RT_WORLD_MPI: `--comm mpi` (or auto under mpirun): one process per
 *     rank. Rank and size from OpenMPI's OMPI_COMM_WORLD_RANK / _SIZE /
 *     _LOCAL_RANK / _LOCAL_SIZE, else MPICH Hydra's PMI_RANK / PMI_SIZE /
 *     MPI_LOCALRANKID / MPI_LOCALNRANKS; none of them: the singleton world
 *     of one process (MPI_Init without mpirun).
 *   - RT_WORLD_ENV: torchrun's variables, RANK and WORLD_SIZE both set (and
 *     LOCAL_RANK, LOCAL_WORLD_SIZE: both or neither; neither means one node,
 *     local = global). One process per rank.
 *   - RT_WORLD_THREADS: ranks_needed > 1 otherwise: every rank a thread of
 *     this process.
 *   - RT_WORLD_SINGLE: one rank, one thread.
 * Nothing here initialises MPI or touches a device. */
#ifndef TGC_RUNTIME_TRAIN_WORLD_H
#define TGC_RUNTIME_TRAIN_WORLD_H
#include <stdbool.h>

#include "runtime/comm/comm.h"
#include "support/diag.h"

typedef enum { RT_WORLD_SINGLE, RT_WORLD_THREADS, RT_WORLD_MPI, RT_WORLD_ENV } rt_world_kind;

typedef struct {
    rt_world_kind kind;
    int rank, size;             /* this process's rank (0 for threads) and the world's ranks */
    int local_rank, local_size; /* among the processes of this node; threads: 0 and size */
    /* After rt_world_detect's false: this process said nothing, the world's
     * rank 0 reports the error (a world of the wrong size). A launcher ends
     * every process once one exits with a failure, so such a process should
     * leave with success and let rank 0's failure end the job: exiting first
     * with a failure can get rank 0 killed before its message is out. */
    bool peer_reports;
} rt_world_info;

/* "single", "threads", "mpi", "env". */
const char *rt_world_kind_name(rt_world_kind k);

/* Whether this process was started by several processes' launcher, i.e.
 * whether each rank is its own process (MPI, ENV). */
bool rt_world_is_processes(const rt_world_info *w);

/* Fills *w. mpi_flag: the run uses the mpi communicator (mpirun started
 * it); ranks_needed: the plan's t x d x p (>= 1). False after reporting to
 * d: a malformed variable (not a number, negative, RANK >= WORLD_SIZE,
 * LOCAL_RANK >= LOCAL_WORLD_SIZE, ...), only one of a pair set, or a
 * world size other than ranks_needed, e.g.
 *   torchrun started 4 processes (WORLD_SIZE=4) but the plan needs t x d x p = 2 */
bool rt_world_detect(bool mpi_flag, int ranks_needed, rt_world_info *w, diag *d);

/* The device of `rank` among `devices` (> 0) visible GPUs: in a world of
 * processes, the process's local rank (rank must be w->rank) modulo
 * devices; in threads, rank % devices. -1 if devices < 1. */
int rt_world_device(const rt_world_info *w, int rank, int devices);

/* Whether every rank of w can have a GPU of its own for NCCL among
 * `devices` visible ones (NCCL refuses two ranks on one GPU). False after
 * reporting to d: no GPU, or more local ranks than GPUs, e.g.
 *   torchrun started 4 processes on this node (LOCAL_WORLD_SIZE=4) but it has 2 visible GPUs ...
 * A world of threads with fewer GPUs than ranks is reported the same way;
 * its caller may instead let the ranks share GPUs without NCCL. */
bool rt_world_check_devices(const rt_world_info *w, int devices, diag *d);

/* ---- worlds as an interface ---------------------------------------------------------
 *
 * The ranks of this process, started one way (docs/parallel.md, "Worlds"):
 * one table of operations per way, each in a file of its own —
 *   world_single.c   one rank on the calling thread;
 *   world_threads.c  every rank a thread of this process (the local
 *                    communicator; NCCL when each rank has a GPU);
 *   world_mpi.c      one process per rank under mpirun (the mpi communicator);
 *   world_torchrun.c one process per rank under torchrun (NCCL bootstrapped
 *                    from the environment, the host's traffic staged through it).
 * The trainer calls the operations in this order: rt_world_new,
 * rt_world_start, rt_world_place, (its executors), rt_world_connect, then
 * rt_world_run as often as it runs steps (rank_comm and overlap_comm on each
 * rank's thread, once), and rt_world_release, rt_world_free_rank for every
 * local rank, rt_world_free at the end. Nothing outside these files asks
 * which world it is in. */
struct rt_exec;
struct rt_backend_ops;

/* What a world is started for. */
typedef struct rt_world_spec {
    const tgc_topology *topo;              /* the ranks (t x d x p); outlives the world */
    const struct rt_backend_ops *backend; /* where the ranks' buffers are */
    /* --overlap-grad-reduce or --overlap-param-gather with d > 1 in a
     * pipeline: the option's name (each rank then needs a second
     * communicator, for its communication thread); NULL: none. */
    const char *overlap;
} rt_world_spec;

typedef struct rt_world rt_world;
/* What every rank runs: its global rank and its communicator on host
 * buffers (NULL on a single rank); 0, or non-zero for a failure. */
typedef int (*rt_world_rank_fn)(void *ctx, int rank, tgc_comm *host);

typedef struct rt_world_ops {
    const char *where;   /* the summary's words: "threads of this process", "MPI processes", ... */
    bool processes;      /* one process per rank (the outputs travel over the host communicator) */
    /* Starts this process's ranks: first, nlocal, host_ranks (and MPI,
     * the local world). false after reporting. */
    bool (*start)(rt_world *w, diag *d);
    /* Given the devices (w->devices set; `visible` as the backend counted
     * them, 0 for a host backend): the communicators of GPUs. */
    bool (*place)(rt_world *w, int visible, diag *d);
    /* After the executors (ex: this process's, by local index). */
    bool (*connect)(rt_world *w, struct rt_exec *const *ex, diag *d);
    /* Rank r's communicator on its executor's buffers (host: its host
     * one), on the rank's thread; NULL after reporting (or none at all on
     * a single rank). */
    tgc_comm *(*rank_comm)(rt_world *w, int r, struct rt_exec *e, tgc_comm *host, diag *d);
    /* Rank r's second communicator and stream (--overlap-*), on its
     * thread; NULL: none. false on a failure. */
    bool (*overlap_comm)(rt_world *w, int r, struct rt_exec *e, tgc_comm **oc, void **stream);
    /* Rank r's communicator on host buffers (NULL: none). */
    tgc_comm *(*host_comm)(rt_world *w, int r);
    /* Runs fn on every rank of this process and joins them: 0 or 1. */
    int (*run)(rt_world *w, rt_world_rank_fn fn, void *ctx);
    /* Rank r failed (dev: its communicator on device buffers): the ranks
     * that may wait for its messages are stopped. NULL: a launcher's. */
    void (*fail)(rt_world *w, int r, tgc_comm *dev, tgc_comm *host);
    /* Before the executors are freed (what is staged through them). */
    void (*release)(rt_world *w);
    /* Frees the world's own state: 0, or 1 when ending it failed. */
    int (*free)(rt_world *w);
} rt_world_ops;

struct rt_world {
    const rt_world_ops *ops;
    rt_world_info info;
    rt_world_spec spec;
    int n;                /* the ranks of the run */
    int first, nlocal;    /* this process's ranks: first .. first + nlocal - 1 */
    int host_ranks;       /* the ranks sharing this host's cores */
    int devices;          /* the devices the ranks spread over (0: host backends) */
    bool gpu_each;        /* every rank has a GPU of its own and talks NCCL */
    tgc_comm *host;       /* one process per rank: this rank's communicator on host buffers */
    tgc_comm **dev;       /* per local rank: its communicator on device buffers, when not the host's */
    tgc_comm **ocomm;     /* per local rank: its overlap communicator, when the world made one */
    tgc_comm **oc_used;   /* per local rank: the overlap communicator it uses (owned or not), or NULL */
    void *impl;           /* the world's own state */
};

extern const rt_world_ops rt_world_single_ops, rt_world_threads_ops, rt_world_mpi_ops, rt_world_torchrun_ops;

/* The world of the ranks info describes (rt_world_detect's); nothing is
 * started yet. */
rt_world *rt_world_new(const rt_world_info *info, int n);
bool rt_world_start(rt_world *w, const rt_world_spec *spec, diag *d);
/* Counts the backend's devices (when it has some) and places the ranks on them. */
bool rt_world_place(rt_world *w, diag *d);
bool rt_world_connect(rt_world *w, struct rt_exec *const *ex, diag *d);
/* Rank r's communicator on its device (see rank_comm), kept by the world. */
tgc_comm *rt_world_rank_comm(rt_world *w, int r, struct rt_exec *e, tgc_comm *host, diag *d);
bool rt_world_overlap_comm(rt_world *w, int r, struct rt_exec *e, tgc_comm **oc, void **stream);
int rt_world_run(rt_world *w, rt_world_rank_fn fn, void *ctx);
void rt_world_fail(rt_world *w, int r, tgc_comm *dev, tgc_comm *host);
/* The communicator whose counters --comm-stats prints: rank 0's. */
tgc_comm *rt_world_stats_comm(rt_world *w);
/* What the first local rank's communicators moved (--comm-stats): its
 * rank communicator's counters plus its overlap communicator's. */
void rt_world_stats(rt_world *w, tgc_comm_stats *out);
/* Stops every rank at its next exchange (one process per rank: the
 * others; threads are stopped by rt_world_fail). */
void rt_world_abort(rt_world *w, int rank, const char *why);
/* Whether global rank r is one of this process's, and its local index. */
bool rt_world_has(const rt_world *w, int r);
static inline int rt_world_local(const rt_world *w, int r) { return r - w->first; }
void rt_world_release(rt_world *w);
/* Frees local rank li's communicators (before its executor). */
void rt_world_free_rank(rt_world *w, int li);
/* Frees the world (NULL: nothing): 0, or 1 when ending it failed (MPI_Finalize). */
int rt_world_free(rt_world *w);

/* The ranks that will share this host, before the world starts: under
 * mpirun (mpi_flag) Open MPI's local size, else all n. */
int rt_world_host_ranks(bool mpi_flag, int n);
/* --overlap-* in a world of processes: refused (shared words). */
bool rt_world_refuse_overlap(const rt_world *w, diag *d);

#endif
