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

#endif
