/* The world a run is in (runtime/train/world.h): its detection from the
 * environment, and what every world's table shares. */
#include "runtime/train/world.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/backend.h"
#include "support/util.h"

const char *rt_world_kind_name(rt_world_kind k)
{
    switch (k) {
    case RT_WORLD_SINGLE: return "single";
    case RT_WORLD_THREADS: return "threads";
    case RT_WORLD_MPI: return "mpi";
    case RT_WORLD_ENV: return "env";
    }
    return "?";
}

bool rt_world_is_processes(const rt_world_info *w)
{
    return w && (w->kind == RT_WORLD_MPI || w->kind == RT_WORLD_ENV);
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* A variable that must be a decimal integer >= min: *out, or false after
 * reporting. Unset: *out unchanged, true, *set = false. */
static bool env_int(const char *name, int min, int *out, bool *set, diag *d)
{
    const char *v = env(name);
    *set = v != NULL;
    if (!v) return true;
    long long x = 0;
    const char *p = v;
    for (; *p >= '0' && *p <= '9'; p++) {
        x = x * 10 + (*p - '0');
        if (x > INT_MAX) break;
    }
    if (p == v || *p) {
        if (x > INT_MAX) diag_error_plain(d, "%s=%s is too large", name, v);
        else diag_error_plain(d, "%s=%s is not a number (a whole number >= %d is needed)", name, v, min);
        return false;
    }
    if (x < min) {
        diag_error_plain(d, "%s=%s must be at least %d", name, v, min);
        return false;
    }
    *out = (int)x;
    return true;
}

typedef struct launcher {
    const char *who;                 /* "mpirun", "torchrun" */
    const char *rank, *size;         /* the variables' names */
    const char *local_rank, *local_size;
} launcher;

/* Reads one launcher's four variables. found: RANK/SIZE were set. */
static bool read_launcher(const launcher *l, rt_world_info *w, bool *found, diag *d)
{
    bool has_rank, has_size, has_lr, has_ls;
    int rank = 0, size = 1, lr = 0, ls = 1;
    if (!env_int(l->rank, 0, &rank, &has_rank, d) || !env_int(l->size, 1, &size, &has_size, d) ||
        !env_int(l->local_rank, 0, &lr, &has_lr, d) || !env_int(l->local_size, 1, &ls, &has_ls, d))
        return false;
    *found = has_rank || has_size;
    if (!*found) return true;
    if (has_rank != has_size) {
        diag_error_plain(d, "%s is set but %s is not: a %s world needs both (unset %s to run without one)",
                         has_rank ? l->rank : l->size, has_rank ? l->size : l->rank, l->who,
                         has_rank ? l->rank : l->size);
        return false;
    }
    if (rank >= size) {
        diag_error_plain(d, "%s=%d is outside the world of %s=%d ranks", l->rank, rank, l->size, size);
        return false;
    }
    if (has_lr != has_ls) {
        diag_error_plain(d, "%s is set but %s is not: set both or neither (neither: one node)",
                         has_lr ? l->local_rank : l->local_size, has_lr ? l->local_size : l->local_rank);
        return false;
    }
    if (!has_lr) {
        lr = rank;
        ls = size;
    }
    if (lr >= ls) {
        diag_error_plain(d, "%s=%d is outside the node's %s=%d processes", l->local_rank, lr, l->local_size, ls);
        return false;
    }
    if (ls > size) {
        diag_error_plain(d, "%s=%d is larger than the world (%s=%d)", l->local_size, ls, l->size, size);
        return false;
    }
    if (lr > rank) {
        diag_error_plain(d, "%s=%d is larger than the global rank (%s=%d)", l->local_rank, lr, l->rank, rank);
        return false;
    }
    w->rank = rank;
    w->size = size;
    w->local_rank = lr;
    w->local_size = ls;
    return true;
}

bool rt_world_detect(bool mpi_flag, int ranks_needed, rt_world_info *w, diag *d)
{
    if (!w) return false;
    *w = (rt_world_info){RT_WORLD_SINGLE, 0, 1, 0, 1, false};
    if (ranks_needed < 1) {
        diag_error_plain(d, "the plan needs %d ranks: t x d x p must be at least 1", ranks_needed);
        return false;
    }
    static const launcher ompi = {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                  "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
    static const launcher hydra = {"mpirun", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"};
    static const launcher torchrun = {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
    const launcher *l = NULL;
    bool found = false;
    if (mpi_flag) {
        w->kind = RT_WORLD_MPI;
        if (!read_launcher(&ompi, w, &found, d)) return false;
        if (found) l = &ompi;
        else if (!read_launcher(&hydra, w, &found, d)) return false;
        else if (found) l = &hydra;
        /* Neither: MPI's singleton world, one process. */
    } else {
        if (!read_launcher(&torchrun, w, &found, d)) return false;
        if (found) {
            w->kind = RT_WORLD_ENV;
            l = &torchrun;
        } else {
            w->kind = ranks_needed > 1 ? RT_WORLD_THREADS : RT_WORLD_SINGLE;
            w->size = ranks_needed;
            w->local_size = ranks_needed;
            return true;
        }
    }
    if (w->size != ranks_needed) {
        /* Every process finds it; the first says it (the others' lines would
         * interleave), and the others must not end the job before it does. */
        if (w->rank != 0) {
            w->peer_reports = true;
            d->nerrors++;
            return false;
        }
        if (l)
            diag_error_plain(d, "%s started %d process%s (%s=%d) but the plan needs t x d x p = %d%s", l->who, w->size,
                             w->size == 1 ? "" : "es", l->size, w->size, ranks_needed,
                             l == &torchrun ? " (torchrun --nproc-per-node and --nnodes)" : " (mpirun -np)");
        else
            diag_error_plain(d, "--comm mpi without mpirun runs one process but the plan needs t x d x p = %d "
                                "(start it with mpirun -np %d)", ranks_needed, ranks_needed);
        return false;
    }
    return true;
}

int rt_world_device(const rt_world_info *w, int rank, int devices)
{
    if (!w || devices < 1) return -1;
    int r = rt_world_is_processes(w) ? w->local_rank : rank;
    return r < 0 ? -1 : r % devices;
}

bool rt_world_check_devices(const rt_world_info *w, int devices, diag *d)
{
    if (!w) return false;
    if (devices < 1) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        if (vis) diag_error_plain(d, "no visible GPU (CUDA_VISIBLE_DEVICES=%s)", vis);
        else diag_error_plain(d, "no visible GPU");
        return false;
    }
    switch (w->kind) {
    case RT_WORLD_SINGLE: return true;
    case RT_WORLD_THREADS:
        if (w->size <= devices) return true;
        diag_error_plain(d, "%d ranks need %d GPUs for NCCL (one rank per GPU); this machine has %d visible", w->size,
                         w->size, devices);
        return false;
    case RT_WORLD_MPI:
    case RT_WORLD_ENV:
        if (w->local_size <= devices) return true;
        if (w->kind == RT_WORLD_ENV)
            diag_error_plain(d, "torchrun started %d processes on this node (LOCAL_WORLD_SIZE=%d) but it has %d "
                                "visible GPU%s: NCCL needs one GPU per rank (LOCAL_RANK=%d would share GPU 0)",
                             w->local_size, w->local_size, devices, devices == 1 ? "" : "s", devices);
        else
            diag_error_plain(d, "mpirun started %d processes on this node but it has %d visible GPU%s: NCCL needs "
                                "one GPU per rank (local rank %d would share GPU 0)",
                             w->local_size, devices, devices == 1 ? "" : "s", devices);
        return false;
    }
    return false;
}

/* ---- worlds as an interface ------------------------------------------------------ */

rt_world *rt_world_new(const rt_world_info *info, int n)
{
    static const rt_world_ops *const by_kind[] = {
        [RT_WORLD_SINGLE] = &rt_world_single_ops, [RT_WORLD_THREADS] = &rt_world_threads_ops,
        [RT_WORLD_MPI] = &rt_world_mpi_ops, [RT_WORLD_ENV] = &rt_world_torchrun_ops};
    rt_world *w = xcalloc(1, sizeof *w);
    w->ops = by_kind[info->kind];
    w->info = *info;
    w->n = n;
    return w;
}

bool rt_world_start(rt_world *w, const rt_world_spec *spec, diag *d)
{
    w->spec = *spec;
    if (!w->ops->start(w, d)) return false;
    w->dev = xcalloc((size_t)w->nlocal, sizeof *w->dev);
    w->ocomm = xcalloc((size_t)w->nlocal, sizeof *w->ocomm);
    w->oc_used = xcalloc((size_t)w->nlocal, sizeof *w->oc_used);
    return true;
}

bool rt_world_place(rt_world *w, diag *d)
{
    const rt_backend_ops *be = w->spec.backend;
    int nd = 0;
    if (be->device_count) {
        /* Without a device the first executor says why, after its memory
         * check (which needs none). */
        diag quiet;
        diag_init(&quiet, stderr);
        quiet.max_errors = 0;
        nd = be->device_count(&quiet);
        w->devices = nd > 0 ? nd : 1;
    }
    return !w->ops->place || w->ops->place(w, nd, d);
}

bool rt_world_connect(rt_world *w, struct rt_exec *const *ex, diag *d) { return w->ops->connect(w, ex, d); }

tgc_comm *rt_world_rank_comm(rt_world *w, int r, struct rt_exec *e, tgc_comm *host, diag *d)
{
    tgc_comm *dev = w->ops->rank_comm(w, r, e, host, d);
    if (dev != host) w->dev[rt_world_local(w, r)] = dev;
    return dev;
}

bool rt_world_overlap_comm(rt_world *w, int r, struct rt_exec *e, tgc_comm **oc, void **stream)
{
    *oc = NULL;
    *stream = NULL;
    bool ok = !w->ops->overlap_comm || w->ops->overlap_comm(w, r, e, oc, stream);
    w->oc_used[rt_world_local(w, r)] = ok ? *oc : NULL;
    return ok;
}

int rt_world_run(rt_world *w, rt_world_rank_fn fn, void *ctx) { return w->ops->run(w, fn, ctx); }

void rt_world_fail(rt_world *w, int r, tgc_comm *dev, tgc_comm *host)
{
    if (w->ops->fail) w->ops->fail(w, r, dev, host);
}

tgc_comm *rt_world_stats_comm(rt_world *w)
{
    return w->dev[0] ? w->dev[0] : w->ops->host_comm ? w->ops->host_comm(w, w->first) : NULL;
}

void rt_world_stats(rt_world *w, tgc_comm_stats *out)
{
    memset(out, 0, sizeof *out);
    tgc_comm *c = rt_world_stats_comm(w), *oc = w->nlocal ? w->oc_used[0] : NULL;
    if (c) tgc_comm_stats_add(out, tgc_comm_stats_get(c));
    if (oc && oc != c) tgc_comm_stats_add(out, tgc_comm_stats_get(oc));
}

void rt_world_abort(rt_world *w, int rank, const char *why)
{
    if (w && w->host) tgc_comm_abort(w->host, rank, why);
}

bool rt_world_has(const rt_world *w, int r) { return r >= w->first && r < w->first + w->nlocal; }

void rt_world_release(rt_world *w)
{
    if (w && w->ops->release) w->ops->release(w);
}

void rt_world_free_rank(rt_world *w, int li)
{
    if (!w || !w->dev) return;
    if (w->ocomm[li]) tgc_comm_free(w->ocomm[li]);
    if (w->dev[li]) tgc_comm_free(w->dev[li]); /* before its executor's stream goes */
    w->ocomm[li] = w->dev[li] = w->oc_used[li] = NULL;
}

int rt_world_free(rt_world *w)
{
    if (!w) return 0;
    int rc = w->ops->free ? w->ops->free(w) : 0;
    free(w->dev);
    free(w->ocomm);
    free(w->oc_used);
    free(w);
    return rc;
}

int rt_world_host_ranks(bool mpi_flag, int n)
{
    if (!mpi_flag) return n;
    /* The ranks of this host share its cores (Open MPI says how many there are). */
    const char *s = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int k = s ? atoi(s) : 0;
    return k > 0 ? k : 1;
}

bool rt_world_refuse_overlap(const rt_world *w, diag *d)
{
    if (!w->spec.overlap) return true;
    diag_error_plain(d, "--%s needs the ranks as threads of one process (a second communicator of processes is not "
                        "implemented yet): drop it", w->spec.overlap);
    return false;
}
