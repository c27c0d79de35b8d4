/* The world of rank threads (runtime/train/world.h): every rank a thread of
 * this process, talking over the local communicator on host buffers; on a
 * device, NCCL where each rank has a GPU of its own, else the device-local
 * communicator over the host one (ranks sharing a GPU). --overlap-* gives
 * each rank's communication thread a second world of its own. */
#include "runtime/train/world.h"

#include <stdlib.h>

#include "runtime/backend/backend.h"
#include "runtime/comm/comm_device.h"
#include "runtime/comm/comm_nccl.h"
#include "runtime/exec.h"
#include "support/util.h"

typedef struct threads {
    tgc_comm_local_world *local;
    tgc_comm_local_world *local2; /* --overlap-*: the communication threads' world (rt_pipe_opts.overlap_comm) */
    tgc_nccl_world *nccl;         /* a GPU each: the NCCL world the ranks join */
    tgc_nccl_world *nccl2;        /* --overlap-* with a GPU each: the NCCL world of the ranks' second streams */
} threads;

static bool threads_start(rt_world *w, diag *d)
{
    threads *T = w->impl = xcalloc(1, sizeof *T);
    w->first = 0;
    w->nlocal = w->host_ranks = w->n;
    if (!(T->local = tgc_comm_local_world_new_topo(w->spec.topo, NULL, d))) return false;
    /* Host memory or the simulator: the ranks' threads share it. */
    if (w->spec.overlap && !w->spec.backend->device_memory &&
        !(T->local2 = tgc_comm_local_world_new_topo(w->spec.topo, NULL, d)))
        return false;
    return true;
}

/* Threads on a GPU each talk over NCCL; ranks sharing one, device-locally. */
static bool threads_place(rt_world *w, int visible, diag *d)
{
    threads *T = w->impl;
    const rt_backend_ops *be = w->spec.backend;
    (void)visible;
    if (be->nccl && w->devices >= w->n && !(T->nccl = tgc_nccl_world_new(w->spec.topo, d))) return false;
    w->gpu_each = T->nccl != NULL;
    if (w->spec.overlap && T->nccl && be->side_stream && !(T->nccl2 = tgc_nccl_world_new(w->spec.topo, d)))
        return false;
    return true;
}

/* After the executors: a missing device is theirs to report. */
static bool threads_connect(rt_world *w, struct rt_exec *const *ex, diag *d)
{
    threads *T = w->impl;
    (void)ex;
    if (!w->spec.overlap || T->local2 || T->nccl2) return true;
    diag_error_plain(d, "--%s on --backend %s needs a device per rank (NCCL on a second stream); the %d ranks share "
                        "%d: drop it", w->spec.overlap, w->spec.backend->name, w->n, w->devices);
    return false;
}

static tgc_comm *threads_rank_comm(rt_world *w, int r, rt_exec *e, tgc_comm *host, diag *d)
{
    threads *T = w->impl;
    if (e->be->host_memory) return host;
    if (T->nccl) return tgc_comm_nccl_join(T->nccl, r, rt_exec_device(e), rt_exec_stream(e), d);
    return tgc_comm_device_new(host, e, d);
}

/* The pipeline's communication thread talks over a world of its own. */
static bool threads_overlap_comm(rt_world *w, int r, rt_exec *e, tgc_comm **ocp, void **stream)
{
    threads *T = w->impl;
    int li = rt_world_local(w, r);
    tgc_comm *oc = T->local2 ? tgc_comm_local_world_comm(T->local2, r) : NULL;
    void *ostream = *stream = T->nccl2 ? e->be->side_stream(e) : NULL; /* a GPU each: NCCL on a second stream */
    if (oc && !e->be->host_memory && !(oc = w->ocomm[li] = tgc_comm_device_new(oc, e, NULL))) return false;
    if (T->nccl2 &&
        (!ostream || !(oc = w->ocomm[li] = tgc_comm_nccl_join(T->nccl2, r, rt_exec_device(e), ostream, NULL))))
        return false;
    *ocp = oc;
    return true;
}

static tgc_comm *threads_host_comm(rt_world *w, int r)
{
    threads *T = w->impl;
    return tgc_comm_local_world_comm(T->local, r);
}

typedef struct trampoline {
    rt_world_rank_fn fn;
    void *ctx;
} trampoline;

static int thread_main(tgc_comm *comm, void *arg)
{
    trampoline *t = arg;
    return t->fn(t->ctx, tgc_comm_rank(comm), comm);
}

static int threads_run(rt_world *w, rt_world_rank_fn fn, void *ctx)
{
    threads *T = w->impl;
    trampoline t = {fn, ctx};
    return tgc_comm_local_world_run(T->local, thread_main, &t) == 0 ? 0 : 1;
}

/* The rank threads may wait for this one's messages: stop them now. */
static void threads_fail(rt_world *w, int r, tgc_comm *dev, tgc_comm *host)
{
    threads *T = w->impl;
    int li = rt_world_local(w, r);
    tgc_comm *oc = w->ocomm[li] ? w->ocomm[li] : T->local2 ? tgc_comm_local_world_comm(T->local2, r) : NULL;
    if (dev) tgc_comm_abort(dev, r, "the rank failed");
    if (host != dev) tgc_comm_abort(host, r, "the rank failed");
    if (oc) tgc_comm_abort(oc, r, "the rank failed"); /* the communication threads' world too */
}

static int threads_free(rt_world *w)
{
    threads *T = w->impl;
    if (!T) return 0;
    tgc_nccl_world_free(T->nccl);
    tgc_nccl_world_free(T->nccl2);
    tgc_comm_local_world_free(T->local);
    tgc_comm_local_world_free(T->local2);
    free(T);
    return 0;
}

const rt_world_ops rt_world_threads_ops = {
    .where = "threads of this process",
    .start = threads_start,
    .place = threads_place,
    .connect = threads_connect,
    .rank_comm = threads_rank_comm,
    .overlap_comm = threads_overlap_comm,
    .host_comm = threads_host_comm,
    .run = threads_run,
    .fail = threads_fail,
    .free = threads_free,
};
