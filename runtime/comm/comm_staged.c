/* The `staged` communicator (runtime/comm/comm_staged.h, docs/parallel.md
 * "Communicators"): host buffers over a device communicator.
 *
 * One device scratch buffer per rank, laid out per call so that dev's
 * collective runs in place where that is natural:
 *
 *   all_reduce, broadcast   [ buf ]
 *   all_gather              [ block 0 | ... | block g-1 ]  this rank's block
 *                           is uploaded at its place, then gathered in place
 *   reduce_scatter          [ the whole send ], reduced in place into this
 *                           rank's block (reduce_scatter_v: its piece)
 *   send / recv             [ message ]
 *   sendrecv                [ send | pad to 256 | receive ]
 *
 * then: upload (rt_exec_write: on cuda an async copy on the executor's
 * stream and a wait), dev's call on the scratch, the wait (over nccl
 * tgc_comm_nccl_sync, then rt_exec_sync) and the download of the result.
 * The buffer grows to the largest call (a fresh allocation, the old one
 * released; sizes only grow), starting at STAGED_MIN_BYTES at creation,
 * so the per-step calls on a few scalars allocate nothing. */
#include "runtime/comm/comm_staged.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm/comm_nccl.h"
#include "runtime/exec.h"

#define STAGED_MIN_BYTES 256 /* the scratch at creation */
#define STAGED_ALIGN 256     /* where a sendrecv's receive starts */

typedef struct staged {
    tgc_comm *dev;
    rt_exec *e;
    bool nccl; /* dev is nccl: wait with tgc_comm_nccl_sync */
    unsigned char *scratch; /* device memory of e */
    size_t scratch_bytes;
    atomic_int marked; /* tgc_comm_abort went through this communicator */
    tgc_comm_vtable vt; /* ours, with the name below */
    char name[64];
} staged;

/* ---- errors ------------------------------------------------------------------------ */

static int staged_device_fail(tgc_comm *c, staged *s, const char *what, size_t bytes)
{
    return tgc_comm_fail(c, TGC_COMM_ERR_BACKEND, tgc_comm_rank(c), "%s (%zu bytes) on %s: %s", what, bytes,
                         rt_exec_backend_name(s->e), rt_exec_error(s->e));
}

/* After an abort through this communicator (this rank failed, e.g. an
 * upload): dev's verdict, before touching the executor again — dev's world
 * is failed, so a barrier on it returns at once naming the failed rank. */
static int staged_marked(tgc_comm *c, staged *s, tgc_comm_group g)
{
    int rc = tgc_comm_barrier(s->dev, g);
    if (rc) return tgc_comm_fail_from(c, s->dev, rc);
    return tgc_comm_fail(c, TGC_COMM_ERR_ABORTED, tgc_comm_rank(c), "aborted");
}

/* ---- the scratch buffer -------------------------------------------------------------- */

static int staged_grow(tgc_comm *c, staged *s, size_t bytes)
{
    if (bytes <= s->scratch_bytes) return TGC_COMM_OK;
    diag quiet; /* rt_exec_alloc reports to a diag; e->err keeps the reason for ours */
    diag_init(&quiet, NULL);
    quiet.max_errors = 0;
    void *p = rt_exec_alloc(s->e, (int64_t)bytes, "the staged communicator's scratch buffer", &quiet);
    diag_free(&quiet);
    if (!p)
        return tgc_comm_fail(c, TGC_COMM_ERR_NOMEM, tgc_comm_rank(c),
                             "no device memory for a staging buffer of %zu bytes on %s: %s", bytes,
                             rt_exec_backend_name(s->e), rt_exec_error(s->e));
    rt_exec_release(s->e, s->scratch);
    s->scratch = p;
    s->scratch_bytes = bytes;
    return TGC_COMM_OK;
}

static int staged_up(tgc_comm *c, staged *s, size_t off, const void *host, size_t bytes)
{
    if (!rt_exec_write(s->e, s->scratch + off, host, bytes))
        return staged_device_fail(c, s, "copying the host buffer to the device", bytes);
    return TGC_COMM_OK;
}

/* After dev's call `rc`: its error as ours, or the wait for its work and
 * the download of `bytes` at `off` into host (none when host is NULL). */
static int staged_finish(tgc_comm *c, staged *s, int rc, size_t off, void *host, size_t bytes)
{
    if (rc) return tgc_comm_fail_from(c, s->dev, rc);
    if (s->nccl && (rc = tgc_comm_nccl_sync(s->dev))) return tgc_comm_fail_from(c, s->dev, rc);
    if (!rt_exec_sync(s->e)) return staged_device_fail(c, s, "waiting for the device communicator's work", bytes);
    if (host && !rt_exec_read(s->e, s->scratch + off, host, bytes))
        return staged_device_fail(c, s, "copying the result to the host", bytes);
    return TGC_COMM_OK;
}

/* ---- the calls -------------------------------------------------------------------------- */

static int staged_all_reduce(tgc_comm *c, tgc_comm_group g, void *buf, size_t count, tgc_comm_dtype dt,
                             tgc_comm_op op)
{
    staged *s = tgc_comm_impl(c);
    if (atomic_load(&s->marked)) return staged_marked(c, s, g);
    size_t bytes = count * tgc_comm_dtype_size(dt);
    int rc = staged_grow(c, s, bytes);
    if (!rc) rc = staged_up(c, s, 0, buf, bytes);
    if (rc) return rc;
    rc = tgc_comm_all_reduce(s->dev, g, s->scratch, count, dt, op);
    return staged_finish(c, s, rc, 0, buf, bytes);
}

static int staged_all_gather(tgc_comm *c, tgc_comm_group g, const void *send, void *recv, size_t count,
                             tgc_comm_dtype dt)
{
    staged *s = tgc_comm_impl(c);
    if (atomic_load(&s->marked)) return staged_marked(c, s, g);
    size_t bytes = count * tgc_comm_dtype_size(dt), mine = bytes * (size_t)tgc_comm_group_rank(c, g);
    size_t full = bytes * (size_t)tgc_comm_group_size(c, g);
    /* In place on the host too (send inside recv): send is uploaded before
     * recv is written. */
    int rc = staged_grow(c, s, full);
    if (!rc) rc = staged_up(c, s, mine, send, bytes);
    if (rc) return rc;
    rc = tgc_comm_all_gather(s->dev, g, s->scratch + mine, s->scratch, count, dt);
    return staged_finish(c, s, rc, 0, recv, full);
}

static int staged_reduce_scatter(tgc_comm *c, tgc_comm_group g, const void *send, void *recv, size_t count,
                                 tgc_comm_dtype dt, tgc_comm_op op)
{
    staged *s = tgc_comm_impl(c);
    if (atomic_load(&s->marked)) return staged_marked(c, s, g);
    size_t bytes = count * tgc_comm_dtype_size(dt), mine = bytes * (size_t)tgc_comm_group_rank(c, g);
    size_t full = bytes * (size_t)tgc_comm_group_size(c, g);
    int rc = staged_grow(c, s, full);
    if (!rc) rc = staged_up(c, s, 0, send, full);
    if (rc) return rc;
    rc = tgc_comm_reduce_scatter(s->dev, g, s->scratch, s->scratch + mine, count, dt, op);
    return staged_finish(c, s, rc, mine, recv, bytes);
}

static int staged_reduce_scatter_v(tgc_comm *c, tgc_comm_group g, void *buf, const size_t *counts, size_t lo,
                                   tgc_comm_dtype dt, tgc_comm_op op)
{
    staged *s = tgc_comm_impl(c);
    if (atomic_load(&s->marked)) return staged_marked(c, s, g);
    size_t es = tgc_comm_dtype_size(dt), total = 0;
    for (int j = 0; j < tgc_comm_group_size(c, g); j++) total += counts[j];
    int rc = staged_grow(c, s, total * es);
    if (!rc) rc = staged_up(c, s, 0, buf, total * es);
    if (rc) return rc;
    rc = tgc_comm_reduce_scatter_v(s->dev, g, s->scratch, counts, dt, op);
    size_t piece = lo * es, bytes = counts[tgc_comm_group_rank(c, g)] * es;
    return staged_finish(c, s, rc, piece, (unsigned char *)buf + piece, bytes);
}

static int staged_broadcast(tgc_comm *c, tgc_comm_group g, void *buf, size_t count, tgc_comm_dtype dt, int root)
{
    staged *s = tgc_comm_impl(c);
    if (atomic_load(&s->marked)) return staged_marked(c, s, g);
    size_t bytes = count * tgc_comm_dtype_size(dt);
    bool is_root = tgc_comm_group_rank(c, g) == root;
    int rc = staged_grow(c, s, bytes);
    if (!rc && is_root) rc = staged_up(c, s, 0, buf, bytes);
    if (rc) return rc;
    rc = tgc_comm_broadcast(s->dev, g, s->scratch, count, dt, root);
    return staged_finish(c, s, rc, 0, is_root ? NULL : buf, bytes);
}

static int staged_send(tgc_comm *c, const void *buf, size_t bytes, int peer, int tag)
{
    staged *s = tgc_comm_impl(c);
    if (atomic_load(&s->marked)) return staged_marked(c, s, TGC_COMM_WORLD);
    int rc = staged_grow(c, s, bytes);
    if (!rc) rc = staged_up(c, s, 0, buf, bytes);
    if (rc) return rc;
    rc = tgc_comm_send(s->dev, s->scratch, bytes, TGC_COMM_BYTE, peer, tag);
    return staged_finish(c, s, rc, 0, NULL, bytes);
}

static int staged_recv(tgc_comm *c, void *buf, size_t bytes, int peer, int tag)
{
    staged *s = tgc_comm_impl(c);
    if (atomic_load(&s->marked)) return staged_marked(c, s, TGC_COMM_WORLD);
    int rc = staged_grow(c, s, bytes);
    if (rc) return rc;
    rc = tgc_comm_recv(s->dev, s->scratch, bytes, TGC_COMM_BYTE, peer, tag);
    return staged_finish(c, s, rc, 0, buf, bytes);
}

static int staged_sendrecv(tgc_comm *c, const void *send, size_t send_bytes, int dst, int stag, void *recv,
                           size_t recv_bytes, int src, int rtag)
{
    staged *s = tgc_comm_impl(c);
    if (atomic_load(&s->marked)) return staged_marked(c, s, TGC_COMM_WORLD);
    size_t off = (send_bytes + STAGED_ALIGN - 1) / STAGED_ALIGN * STAGED_ALIGN;
    if (off < send_bytes || off > SIZE_MAX - recv_bytes)
        return tgc_comm_fail(c, TGC_COMM_ERR_ARG, tgc_comm_rank(c), "%zu + %zu bytes overflow the staging buffer",
                             send_bytes, recv_bytes);
    int rc = staged_grow(c, s, off + recv_bytes);
    if (!rc) rc = staged_up(c, s, 0, send, send_bytes);
    if (rc) return rc;
    rc = tgc_comm_sendrecv_tags(s->dev, s->scratch, send_bytes, dst, stag, s->scratch + off, recv_bytes, src, rtag,
                                TGC_COMM_BYTE);
    return staged_finish(c, s, rc, off, recv, recv_bytes);
}

static int staged_barrier(tgc_comm *c, tgc_comm_group g)
{
    staged *s = tgc_comm_impl(c);
    int rc = tgc_comm_barrier(s->dev, g);
    return rc ? tgc_comm_fail_from(c, s->dev, rc) : TGC_COMM_OK;
}

static void staged_abort(tgc_comm *c, int rank, const char *reason)
{
    staged *s = tgc_comm_impl(c);
    atomic_store(&s->marked, 1);
    tgc_comm_abort(s->dev, rank, reason);
}

static void staged_free_impl(staged *s)
{
    if (!s) return;
    if (s->e) rt_exec_release(s->e, s->scratch);
    free(s);
}

static void staged_free(tgc_comm *c)
{
    staged_free_impl(tgc_comm_impl(c));
    tgc_comm_destroy(c);
}

static const tgc_comm_vtable staged_vtable = {
    .name = "staged",
    .all_reduce = staged_all_reduce,
    .all_gather = staged_all_gather,
    .reduce_scatter = staged_reduce_scatter,
    .reduce_scatter_v = staged_reduce_scatter_v,
    .broadcast = staged_broadcast,
    .send = staged_send,
    .recv = staged_recv,
    .sendrecv = staged_sendrecv,
    .barrier = staged_barrier,
    .abort = staged_abort,
    .free = staged_free,
};

/* ---- creation ------------------------------------------------------------------------------- */

static void staged_report(diag *d, tgc_comm *dev, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void staged_report(diag *d, tgc_comm *dev, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* The other ranks would wait for this one's first call. */
    if (dev) tgc_comm_abort(dev, tgc_comm_rank(dev), "could not create its staged communicator");
    if (d) diag_error_plain(d, "comm: staged: %s", msg);
}

tgc_comm *tgc_comm_staged_new(tgc_comm *dev, struct rt_exec *e, diag *d)
{
    if (!dev) {
        staged_report(d, NULL, "no device communicator to stage over");
        return NULL;
    }
    int rank = tgc_comm_rank(dev);
    if (!e || !e->be) {
        staged_report(d, dev, "rank %d: no executor to stage through", rank);
        return NULL;
    }
    staged *s = calloc(1, sizeof *s);
    if (!s) {
        staged_report(d, dev, "rank %d: out of memory", rank);
        return NULL;
    }
    s->dev = dev;
    s->e = e;
    atomic_init(&s->marked, 0);
    s->nccl = strcmp(tgc_comm_backend(dev), "nccl") == 0;
    s->vt = staged_vtable;
    snprintf(s->name, sizeof s->name, "staged(%s)", tgc_comm_backend(dev));
    s->vt.name = s->name;
    diag quiet;
    diag_init(&quiet, NULL);
    quiet.max_errors = 0;
    s->scratch = rt_exec_alloc(e, STAGED_MIN_BYTES, "the staged communicator's scratch buffer", &quiet);
    diag_free(&quiet);
    if (!s->scratch) {
        staged_report(d, dev, "rank %d: no device memory for a staging buffer of %d bytes on %s: %s", rank,
                      STAGED_MIN_BYTES, rt_exec_backend_name(e), rt_exec_error(e));
        free(s);
        return NULL;
    }
    s->scratch_bytes = STAGED_MIN_BYTES;
    tgc_comm *c = tgc_comm_create(&s->vt, s, tgc_comm_topology(dev), rank);
    if (!c) {
        staged_report(d, dev, "rank %d: out of memory", rank);
        staged_free_impl(s);
        return NULL;
    }
    tgc_comm_set_timeout(c, tgc_comm_timeout(dev));
    return c;
}
