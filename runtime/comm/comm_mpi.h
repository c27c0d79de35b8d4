/* The `mpi` communicator: one process per rank, launched by mpirun
 * (OpenMPI), behind the interface of runtime/comm/comm.h (docs/parallel.md,
 * "Communicators" and "`mpi`: one process per rank").
 *
 * Everything here builds without MPI: tgc_comm_mpi_available() is then
 * false and tgc_comm_mpi_new reports "built without MPI". MPI is
 * initialised only by the calls below that say so, never at start-up, so
 * tgc runs unchanged without mpirun; a process started without mpirun
 * that asks for the communicator gets OpenMPI's singleton world of one
 * rank. */
#ifndef TGC_RUNTIME_COMM_MPI_H
#define TGC_RUNTIME_COMM_MPI_H
#include <stdbool.h>
#include <stddef.h>

#include "runtime/comm/comm.h"
#include "support/diag.h"

/* Whether tgc was built with MPI (TGC_HAVE_MPI). */
bool tgc_comm_mpi_available(void);

/* Whether an MPI launcher started this process, from the environment alone
 * (mpirun's OMPI_COMM_WORLD_SIZE or PMIX_RANK, Hydra's PMI_RANK); it never
 * initialises MPI. A caller uses it to pick the mpi communicator by default. */
bool tgc_comm_mpi_launched(void);

/* Initialises MPI if it is not yet (MPI_THREAD_MULTIPLE requested) and
 * gives this process's rank and the world size. -1 after reporting to d
 * (which may be NULL): built without MPI, MPI already finalized, or MPI
 * failing to start. */
int tgc_comm_mpi_world(int *rank, int *size, diag *d);

typedef struct tgc_comm_mpi_options {
    double timeout_s;     /* every wait's deadline, > 0; 0: TGC_COMM_TIMEOUT or TGC_COMM_DEFAULT_TIMEOUT */
    double abort_grace_s; /* after a failure, MPI_Abort ends the job this much later; 0: 1 s */
    size_t chunk_bytes;   /* the largest MPI message and the reduction scratch (larger transfers go
                           * in parts); 0: 32 MiB; raised to at least 8 bytes per rank */
} tgc_comm_mpi_options;

/* The communicator of this process (its MPI_COMM_WORLD rank) for topo:
 * initialises MPI when needed and creates the sub-communicators of every
 * group kind (collective over MPI_COMM_WORLD: every process calls it, in the
 * same order as its other tgc_comm_mpi_new calls). NULL after reporting to
 * d: built without MPI, a world size other than t * d * p, a bad
 * TGC_COMM_TIMEOUT, an MPI error. Freed with tgc_comm_free. */
tgc_comm *tgc_comm_mpi_new(const tgc_topology *topo, diag *d);
tgc_comm *tgc_comm_mpi_new_opts(const tgc_topology *topo, const tgc_comm_mpi_options *opt, diag *d);

/* Ends MPI if tgc initialised it: MPI_Finalize when no communicator of this
 * process saw a failure. After a failure it does not return: once the grace
 * has passed since the failure it calls MPI_Abort, which ends every
 * process of the job (MPI_Finalize would wait for ranks that may never
 * come). Returns 0, or -1 if MPI_Finalize reported an error. A no-op
 * without MPI or when MPI was never initialised. */
int tgc_comm_mpi_finalize(void);

#endif
