/* The world of torchrun's processes (runtime/train/world.h): one rank per
 * process and a GPU each, NCCL bootstrapped from the environment torchrun
 * sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR) and nothing else (no
 * MPI): the host's traffic is staged through NCCL. */
#include "runtime/train/world.h"

#include "runtime/backend/backend.h"
#include "runtime/comm/comm_nccl.h"
#include "runtime/comm/comm_staged.h"
#include "runtime/exec.h"

static bool torchrun_start(rt_world *w, diag *d)
{
    if (!w->spec.backend->nccl) {
        diag_error_plain(d, "--backend %s under torchrun (RANK=%d, WORLD_SIZE=%d): its processes talk over NCCL "
                            "only, which needs --backend cuda; without torchrun the ranks run as threads of one "
                            "process on any backend",
                         w->spec.backend->name, w->info.rank, w->info.size);
        return false;
    }
    w->first = w->info.rank;
    w->nlocal = 1;
    w->host_ranks = w->info.local_size;
    return true;
}

/* A GPU of its own for every process of this node. */
static bool torchrun_place(rt_world *w, int visible, diag *d)
{
    w->gpu_each = true;
    return !(w->spec.backend->nccl && visible > 0) || rt_world_check_devices(&w->info, visible, d);
}

/* After the executor: its NCCL communicator, and the host's staged over it. */
static bool torchrun_connect(rt_world *w, rt_exec *const *ex, diag *d)
{
    if (!rt_world_refuse_overlap(w, d)) return false;
    rt_exec *e = ex[0];
    if (!(w->dev[0] = tgc_comm_nccl_join_env(w->spec.topo, w->first, rt_exec_device(e), rt_exec_stream(e), d)))
        return false;
    return (w->host = tgc_comm_staged_new(w->dev[0], e, d)) != NULL;
}

static tgc_comm *torchrun_rank_comm(rt_world *w, int r, rt_exec *e, tgc_comm *host, diag *d)
{
    (void)r, (void)e, (void)host, (void)d;
    return w->dev[0];
}

static tgc_comm *torchrun_host_comm(rt_world *w, int r)
{
    (void)r;
    return w->host;
}

static int torchrun_run(rt_world *w, rt_world_rank_fn fn, void *ctx) { return fn(ctx, w->first, w->host); }

/* The staged communicator goes before its NCCL communicator and executor. */
static void torchrun_release(rt_world *w)
{
    tgc_comm_free(w->host);
    w->host = NULL;
}

const rt_world_ops rt_world_torchrun_ops = {
    .where = "torchrun processes",
    .processes = true,
    .start = torchrun_start,
    .place = torchrun_place,
    .connect = torchrun_connect,
    .rank_comm = torchrun_rank_comm,
    .host_comm = torchrun_host_comm,
    .run = torchrun_run,
    .release = torchrun_release,
};
