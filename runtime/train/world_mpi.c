/* The world of mpirun's processes (runtime/train/world.h): one rank per
 * process, talking over the mpi communicator on host buffers; on a GPU,
 * NCCL bootstrapped through it. */
#include "runtime/train/world.h"

#include "runtime/backend/backend.h"
#include "runtime/comm/comm_mpi.h"
#include "runtime/comm/comm_nccl.h"
#include "runtime/exec.h"
#include "support/util.h"

static bool mpi_start(rt_world *w, diag *d)
{
    int r, n;
    if (tgc_comm_mpi_world(&r, &n, d) < 0) return false;
    /* rt_world_detect compared the world's size with the plan's. */
    TGC_ASSERT(n == w->n);
    w->first = r;
    w->nlocal = 1;
    w->host_ranks = rt_world_host_ranks(true, w->n);
    return (w->host = tgc_comm_mpi_new(w->spec.topo, d)) != NULL;
}

/* A GPU of its own for every process of this node (NCCL). */
static bool mpi_place(rt_world *w, int visible, diag *d)
{
    w->gpu_each = true;
    return !(w->spec.backend->nccl && visible > 0) || rt_world_check_devices(&w->info, visible, d);
}

static bool mpi_connect(rt_world *w, struct rt_exec *const *ex, diag *d)
{
    (void)ex;
    return rt_world_refuse_overlap(w, d);
}

static tgc_comm *mpi_rank_comm(rt_world *w, int r, rt_exec *e, tgc_comm *host, diag *d)
{
    (void)w, (void)r;
    if (!host || e->be->host_memory) return host;
    if (e->be->nccl) return tgc_comm_nccl_join_host(host, rt_exec_device(e), rt_exec_stream(e), d);
    diag_error_plain(d, "--backend %s under mpirun: the simulated device's ranks are threads of one process "
                        "(run without mpirun)", rt_exec_backend_name(e));
    return NULL;
}

static tgc_comm *mpi_host_comm(rt_world *w, int r)
{
    (void)r;
    return w->host;
}

static int mpi_run(rt_world *w, rt_world_rank_fn fn, void *ctx) { return fn(ctx, w->first, w->host); }

/* After the executors and their communicators: MPI ends with the process's
 * communicator (MPI_Abort instead after a failure). */
static int mpi_free(rt_world *w)
{
    if (w->host) tgc_comm_free(w->host);
    w->host = NULL;
    return tgc_comm_mpi_finalize() != 0 ? 1 : 0;
}

const rt_world_ops rt_world_mpi_ops = {
    .where = "MPI processes",
    .processes = true,
    .start = mpi_start,
    .place = mpi_place,
    .connect = mpi_connect,
    .rank_comm = mpi_rank_comm,
    .host_comm = mpi_host_comm,
    .run = mpi_run,
    .free = mpi_free,
};
