/* The world of one rank on the calling thread (runtime/train/world.h): no
 * communicator at all. */
#include "runtime/train/world.h"

static bool single_start(rt_world *w, diag *d)
{
    (void)d;
    w->first = 0;
    w->nlocal = w->host_ranks = w->n;
    return true;
}

/* --overlap-* needs d > 1, so more than one rank: never asked here. */
static bool single_connect(rt_world *w, struct rt_exec *const *ex, diag *d)
{
    (void)ex;
    return rt_world_refuse_overlap(w, d);
}

static tgc_comm *single_rank_comm(rt_world *w, int r, struct rt_exec *e, tgc_comm *host, diag *d)
{
    (void)w, (void)r, (void)e, (void)d;
    return host; /* NULL */
}

static int single_run(rt_world *w, rt_world_rank_fn fn, void *ctx)
{
    (void)w;
    return fn(ctx, 0, NULL);
}

const rt_world_ops rt_world_single_ops = {
    .where = "threads of this process",
    .start = single_start,
    .connect = single_connect,
    .rank_comm = single_rank_comm,
    .run = single_run,
};
