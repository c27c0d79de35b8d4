/* The `device-local` communicator (runtime/comm/comm_device.h,
 * docs/parallel.md "Communicators"): ranks that are threads of one process
 * whose buffers are device memory of their executors.
 *
 * A collective has the three phases of `local` (runtime/comm/comm_local.c),
 * with the work done on the device:
 *
 *   arrive   each rank waits for its own stream (rt_exec_sync: what it
 *            issued on its buffers is done), then publishes its call — the
 *            device addresses of its send and receive buffers, count, type,
 *            op, root, backend and device — to its group by an all-gather
 *            of bytes over the host communicator, which brings the host's
 *            deadline, abort and mismatch handling with it. Every member
 *            then checks the same descriptions, so all agree on a mismatch;
 *   work     each rank does its share with its OWN executor (rt_exec_copy,
 *            rt_exec_reduce) straight between the ranks' buffers: the
 *            addresses of the others' buffers are valid for it (one
 *            process, one device). An all-reduce reduces one slice of the
 *            elements, (x0 op x1) op x2 ... in group order, into a device
 *            scratch buffer of the rank (grown once to the largest slice)
 *            and copies it into every member's buffer; then rt_exec_sync;
 *   depart   a barrier of the group, after which no rank reads another's
 *            buffers. Like local's it has no deadline and ignores aborts (a
 *            rank past `arrive` does bounded work, and returning early
 *            would let a caller free a buffer another rank still reads), so
 *            it is not the host communicator's, which an abort ends, but a
 *            condition variable per group in state the ranks share: rank 0
 *            makes it when the communicators are created and broadcasts its
 *            address over the host (one process), the last to free it frees
 *            it. A rank whose device work failed says so at the barrier, so
 *            every member of the group fails the call.
 *
 * The results are local's bits: the backend's reduce is local's loop
 * (a + b; max: x > a or x NaN takes x), applied in the same order. bf16 and
 * f16 reduce in f32 and round once (runtime/comm/comm.h): their slices go
 * through host memory and comm.c's steps, local's own.
 *
 * Point-to-point messages go through host memory: the sender downloads
 * into a staging buffer and sends it over the host communicator with the
 * caller's tag, the receiver receives into one and uploads. Staging
 * buffers grow to the largest message, once.
 *
 * Failures of the host calls are this communicator's errors, with the
 * host's message and culprit; the host world is failed with them (it
 * failed itself, or tgc_comm_abort reaches it through the abort entry). */
#include "runtime/comm/comm_device.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec.h"

#define DEV_MAGIC 0x746763646576636cull /* "tgcdevcl": a device-local call's description */
#define DEV_SLICE_ALIGN 64               /* bytes: all-reduce slices start on cache lines */

/* The depart barrier of one group. */
typedef struct dev_group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool live; /* mu and cv initialised */
    int size, arrived;
    uint64_t gen;      /* completed rounds */
    int bad, last_bad; /* the first member whose work failed in this / the last round, or -1 */
} dev_group;

/* What the ranks of one world share (made by rank 0). */
typedef struct dev_shared {
    atomic_int refs; /* communicators not yet freed */
    dev_group *groups[TGC_COMM_GROUP_COUNT];
    int ngroups[TGC_COMM_GROUP_COUNT];
} dev_shared;

/* One rank's call as its group sees it (host bytes, gathered). */
typedef struct dev_desc {
    uint64_t magic;
    uint64_t count;
    int32_t kind, dtype, op, root;
    int32_t device, pieces; /* pieces: reduce_scatter_v, this member's piece [lo, lo + n) of count */
    uint64_t lo, n;
    const rt_backend_ops *be;
    const void *send;
    void *recv;
} dev_desc;

typedef struct dev_rank {
    tgc_comm *host;
    rt_exec *e;
    dev_shared *sh;
    dev_group *grp[TGC_COMM_GROUP_COUNT]; /* this rank's groups' depart barriers */
    int device;                           /* rt_exec_device(e) */
    dev_desc *descs;                      /* room for the world's */
    void *scratch;                        /* device memory of e */
    size_t scratch_bytes;
    unsigned char *stage[2]; /* host staging: what is sent, what is received */
    size_t stage_cap[2];
    float *acc;              /* 16-bit reductions: the f32 accumulator on the host */
    size_t acc_cap;          /* elements */
    atomic_int marked; /* tgc_comm_abort went through this communicator */
} dev_rank;

/* ---- the shared state ---------------------------------------------------------- */

static void shared_free(dev_shared *sh)
{
    if (!sh) return;
    for (int k = 0; k < TGC_COMM_GROUP_COUNT; k++) {
        for (int i = 0; sh->groups[k] && i < sh->ngroups[k]; i++) {
            dev_group *g = &sh->groups[k][i];
            if (!g->live) continue;
            pthread_mutex_destroy(&g->mu);
            pthread_cond_destroy(&g->cv);
        }
        free(sh->groups[k]);
    }
    free(sh);
}

static dev_shared *shared_new(const tgc_topology *topo)
{
    dev_shared *sh = calloc(1, sizeof *sh);
    if (!sh) return NULL;
    atomic_init(&sh->refs, tgc_topology_size(topo));
    for (int k = 0; k < TGC_COMM_GROUP_COUNT; k++) {
        int count = tgc_topology_group_count(topo, (tgc_comm_group)k);
        if (!(sh->groups[k] = calloc((size_t)count, sizeof *sh->groups[k]))) goto fail;
        sh->ngroups[k] = count;
        for (int i = 0; i < count; i++) {
            dev_group *g = &sh->groups[k][i];
            g->size = tgc_topology_group_size(topo, (tgc_comm_group)k);
            g->bad = g->last_bad = -1;
            if (pthread_mutex_init(&g->mu, NULL)) goto fail;
            if (pthread_cond_init(&g->cv, NULL)) {
                pthread_mutex_destroy(&g->mu);
                goto fail;
            }
            g->live = true;
        }
    }
    return sh;
fail:
    shared_free(sh);
    return NULL;
}

static void shared_unref(dev_shared *sh)
{
    if (sh && atomic_fetch_sub(&sh->refs, 1) == 1) shared_free(sh);
}

/* The depart barrier: no deadline, no abort (see the top). bad: this
 * rank's global rank when its work failed, else -1. Returns the first
 * failed member of the round, or -1. */
static int group_depart(dev_group *g, int bad)
{
    pthread_mutex_lock(&g->mu);
    uint64_t round = g->gen;
    if (bad >= 0 && g->bad < 0) g->bad = bad;
    if (++g->arrived == g->size) {
        g->last_bad = g->bad;
        g->bad = -1;
        g->arrived = 0;
        g->gen++;
        pthread_cond_broadcast(&g->cv);
    }
    /* Round + 1 cannot complete before every member has left this one,
     * so last_bad is still this round's when a waiter wakes. */
    while (g->gen == round) pthread_cond_wait(&g->cv, &g->mu);
    int first = g->last_bad;
    pthread_mutex_unlock(&g->mu);
    return first;
}

/* ---- errors ---------------------------------------------------------------------- */

/* A failed host call as this communicator's error: the host's message
 * without its "rank R: KIND(GROUP): " prefix, and its culprit. */
static int dev_host_fail(tgc_comm *c, dev_rank *r, int rc) { return tgc_comm_fail_from(c, r->host, rc); }

/* A failed operation of this rank's executor. */
static int dev_device_fail(tgc_comm *c, dev_rank *r, const char *what)
{
    return tgc_comm_fail(c, TGC_COMM_ERR_BACKEND, tgc_comm_rank(c), "%s on %s: %s", what,
                         rt_exec_backend_name(r->e), rt_exec_error(r->e));
}

/* After an abort through this communicator: the host's verdict at once
 * (its world is failed, so any call on it returns promptly). */
static int dev_marked(tgc_comm *c, dev_rank *r, tgc_comm_group g)
{
    int rc = tgc_comm_barrier(r->host, g);
    if (rc) return dev_host_fail(c, r, rc);
    return tgc_comm_fail(c, TGC_COMM_ERR_ABORTED, tgc_comm_rank(c), "aborted");
}

/* A group of one has no rendezvous; a host barrier of it reports an
 * abort of the world, as local's fast path does. */
static int dev_host_check(tgc_comm *c, dev_rank *r, tgc_comm_group g)
{
    int rc = tgc_comm_barrier(r->host, g);
    return rc ? dev_host_fail(c, r, rc) : TGC_COMM_OK;
}

/* ---- buffers ---------------------------------------------------------------------- */

/* Grows the device scratch buffer to `bytes` (monotonically: once to the
 * largest slice this rank ever reduces). */
static int dev_scratch(tgc_comm *c, dev_rank *r, size_t bytes)
{
    if (bytes <= r->scratch_bytes) return TGC_COMM_OK;
    /* rt_exec_alloc reports to a diag; e->err keeps the reason for ours. */
    diag quiet;
    diag_init(&quiet, NULL);
    quiet.max_errors = 0;
    void *p = rt_exec_alloc(r->e, (int64_t)bytes, "the device-local communicator's scratch buffer", &quiet);
    diag_free(&quiet);
    if (!p)
        return tgc_comm_fail(c, TGC_COMM_ERR_NOMEM, tgc_comm_rank(c), "no device memory for a scratch buffer of %zu bytes on %s: %s",
                             bytes, rt_exec_backend_name(r->e), rt_exec_error(r->e));
    rt_exec_release(r->e, r->scratch);
    r->scratch = p;
    r->scratch_bytes = bytes;
    return TGC_COMM_OK;
}

static int dev_stage(tgc_comm *c, dev_rank *r, int k, size_t bytes)
{
    if (bytes <= r->stage_cap[k]) return TGC_COMM_OK;
    unsigned char *p = realloc(r->stage[k], bytes);
    if (!p)
        return tgc_comm_fail(c, TGC_COMM_ERR_NOMEM, tgc_comm_rank(c), "no memory for a host staging buffer of %zu bytes",
                             bytes);
    r->stage[k] = p;
    r->stage_cap[k] = bytes;
    return TGC_COMM_OK;
}

/* Host room for a 16-bit reduction of n elements: a staged operand (stage
 * 0) and the f32 accumulator, each grown once to the largest. */
static int dev_acc(tgc_comm *c, dev_rank *r, size_t n)
{
    int rc = dev_stage(c, r, 0, n * 2);
    if (rc || n <= r->acc_cap) return rc;
    float *p = realloc(r->acc, n * sizeof *p);
    if (!p)
        return tgc_comm_fail(c, TGC_COMM_ERR_NOMEM, tgc_comm_rank(c), "no memory for a host accumulator of %zu bytes",
                             n * sizeof *p);
    r->acc = p;
    r->acc_cap = n;
    return TGC_COMM_OK;
}

/* ---- the rendezvous ------------------------------------------------------------- */

static void desc_describe(const dev_desc *s, char *buf, size_t cap)
{
    static const char *const ops[] = {"sum", "max"};
    const char *kind = tgc_comm_kind_name((tgc_comm_kind)s->kind);
    const char *dt = tgc_comm_dtype_name((tgc_comm_dtype)s->dtype);
    unsigned long long n = (unsigned long long)s->count;
    if (s->kind == TGC_COMM_ALL_REDUCE || s->kind == TGC_COMM_REDUCE_SCATTER)
        snprintf(buf, cap, "%s(%s) of %llu %s", kind, ops[s->op & 1], n, dt);
    else if (s->kind == TGC_COMM_BROADCAST)
        snprintf(buf, cap, "%s from %d of %llu %s", kind, s->root, n, dt);
    else
        snprintf(buf, cap, "%s of %llu %s", kind, n, dt);
}

/* Every member checks the same gathered descriptions: the first member
 * whose call differs from member 0's is the culprit on every rank. */
static int dev_check_descs(tgc_comm *c, dev_rank *r, tgc_comm_group gk, int g)
{
    const dev_desc *a = &r->descs[0];
    const tgc_topology *topo = tgc_comm_topology(c);
    int m0 = tgc_topology_group_member(topo, tgc_comm_rank(c), gk, 0);
    for (int i = 0; i < g; i++) {
        const dev_desc *b = &r->descs[i];
        int mi = tgc_topology_group_member(topo, tgc_comm_rank(c), gk, i);
        if (b->magic != DEV_MAGIC)
            return tgc_comm_fail(c, TGC_COMM_ERR_MISMATCH, mi,
                                 "rank %d called a collective of the host communicator, not of the device-local one", mi);
        if (i == 0) continue;
        if (b->be != a->be)
            return tgc_comm_fail(c, TGC_COMM_ERR_MISMATCH, mi,
                                 "rank %d computes on %s but rank %d on %s (the device-local communicator needs one backend)",
                                 mi, b->be->name, m0, a->be->name);
        if (b->device != a->device)
            return tgc_comm_fail(c, TGC_COMM_ERR_MISMATCH, mi,
                                 "rank %d is on device %d but rank %d on device %d (the device-local communicator needs "
                                 "one device; use nccl across devices)",
                                 mi, b->device, m0, a->device);
        /* reduce_scatter_v: the pieces tile the buffer in group order. */
        bool pieces = b->pieces == a->pieces && (!b->pieces || b->lo == r->descs[i - 1].lo + r->descs[i - 1].n);
        if (b->kind == a->kind && b->count == a->count && b->dtype == a->dtype && b->op == a->op && b->root == a->root &&
            pieces)
            continue;
        char da[96], db[96];
        desc_describe(a, da, sizeof da);
        desc_describe(b, db, sizeof db);
        return tgc_comm_fail(c, TGC_COMM_ERR_MISMATCH, mi, "rank %d called %s but rank %d called %s", mi, db, m0, da);
    }
    return TGC_COMM_OK;
}

/* The work of member `me` of a group of g on the descriptions s. */
typedef bool (*dev_work_fn)(dev_rank *r, const dev_desc *s, int g, int me);

static int dev_collective(tgc_comm *c, tgc_comm_group gk, dev_desc *mine, size_t scratch, dev_work_fn work)
{
    dev_rank *r = tgc_comm_impl(c);
    if (atomic_load(&r->marked)) return dev_marked(c, r, gk);
    if (!rt_exec_sync(r->e)) return dev_device_fail(c, r, "waiting for the rank's device work");
    int rc = dev_scratch(c, r, scratch);
    if (rc) return rc;
    mine->magic = DEV_MAGIC;
    mine->be = r->e->be;
    mine->device = r->device;
    rc = tgc_comm_all_gather(r->host, gk, mine, r->descs, sizeof *mine, TGC_COMM_BYTE);
    if (rc) return dev_host_fail(c, r, rc);
    int g = tgc_comm_group_size(c, gk), me = tgc_comm_group_rank(c, gk);
    if ((rc = dev_check_descs(c, r, gk, g))) return rc; /* every member fails alike: nobody works */
    bool ok = work(r, r->descs, g, me);
    ok = ok && rt_exec_sync(r->e);
    int bad = group_depart(r->grp[gk], ok ? -1 : tgc_comm_rank(c));
    if (!ok) return dev_device_fail(c, r, "the collective's device work");
    if (bad >= 0)
        return tgc_comm_fail(c, TGC_COMM_ERR_ABORTED, bad, "rank %d failed: its device work in this %s failed", bad,
                             tgc_comm_kind_name(tgc_comm_current_kind(c)));
    return TGC_COMM_OK;
}

/* ---- the work of each collective ----------------------------------------------- */

static ir_dtype dev_ir_dtype(int dt) { return dt == TGC_COMM_F64 ? IR_F64 : IR_F32; }
static rt_reduce_op dev_reduce_op(int op) { return op == TGC_COMM_MAX ? RT_REDUCE_MAX : RT_REDUCE_SUM; }

/* All-reduce slices: per member at most `per` elements, a multiple of 64
 * bytes; member i's starts at i * per. */
static size_t slice_per(size_t count, size_t es, int g)
{
    size_t align = DEV_SLICE_ALIGN / es;
    size_t per = (count + (size_t)g - 1) / (size_t)g;
    per = (per + align - 1) / align * align;
    return per < count ? per : count;
}

/* dst = s[0].src_off op s[1].src_off op ... (n elements at byte offset off of every send). */
static bool reduce_into(dev_rank *r, const dev_desc *s, int g, size_t off, size_t n, void *dst)
{
    size_t es = tgc_comm_dtype_size((tgc_comm_dtype)s[0].dtype);
    tgc_comm_dtype dt = (tgc_comm_dtype)s[0].dtype;
    if (tgc_comm_dtype_is16(dt)) {
        /* In f32 on the host, rounded once (comm.h): local's bits. Each
         * member's slice is staged through host memory (the backends'
         * reduce works in the element type, which would round each step). */
        for (int i = 0; i < g; i++) {
            if (!rt_exec_read(r->e, (const unsigned char *)s[i].send + off, r->stage[0], n * es)) return false;
            if (i == 0) tgc_comm_acc_init(r->acc, r->stage[0], n, dt);
            else tgc_comm_acc_add(r->acc, r->stage[0], n, dt, (tgc_comm_op)s[0].op);
        }
        tgc_comm_acc_store(r->acc, r->stage[0], n, dt);
        return rt_exec_write(r->e, dst, r->stage[0], n * es);
    }
    ir_dtype t = dev_ir_dtype(s[0].dtype);
    rt_reduce_op op = dev_reduce_op(s[0].op);
    if (!rt_exec_copy(r->e, dst, (const unsigned char *)s[0].send + off, n * es)) return false;
    for (int i = 1; i < g; i++)
        if (!rt_exec_reduce(r->e, dst, (const unsigned char *)s[i].send + off, (int64_t)n, t, op)) return false;
    return true;
}

static bool work_all_reduce(dev_rank *r, const dev_desc *s, int g, int me)
{
    size_t count = (size_t)s[0].count, es = tgc_comm_dtype_size((tgc_comm_dtype)s[0].dtype);
    size_t per = slice_per(count, es, g);
    size_t lo = per * (size_t)me < count ? per * (size_t)me : count;
    size_t n = count - lo < per ? count - lo : per;
    if (!n) return true;
    /* Through the scratch buffer: in place, the slice of every buffer is
     * read before any is written. */
    if (!reduce_into(r, s, g, lo * es, n, r->scratch)) return false;
    for (int i = 0; i < g; i++)
        if (!rt_exec_copy(r->e, (unsigned char *)s[i].recv + lo * es, r->scratch, n * es)) return false;
    return true;
}

static bool work_reduce_scatter(dev_rank *r, const dev_desc *s, int g, int me)
{
    size_t count = (size_t)s[0].count, es = tgc_comm_dtype_size((tgc_comm_dtype)s[0].dtype);
    if (!count) return true;
    /* In place, recv is this rank's block of its own send: the scratch
     * buffer holds the sum until every block was read. */
    return reduce_into(r, s, g, (size_t)me * count * es, count, r->scratch) &&
           rt_exec_copy(r->e, s[me].recv, r->scratch, count * es);
}

static bool work_reduce_scatter_v(dev_rank *r, const dev_desc *s, int g, int me)
{
    size_t es = tgc_comm_dtype_size((tgc_comm_dtype)s[0].dtype), lo = (size_t)s[me].lo, n = (size_t)s[me].n;
    if (!n) return true;
    /* In place: the other members read only their own pieces. */
    return reduce_into(r, s, g, lo * es, n, r->scratch) &&
           rt_exec_copy(r->e, (unsigned char *)s[me].recv + lo * es, r->scratch, n * es);
}

static bool work_all_gather(dev_rank *r, const dev_desc *s, int g, int me)
{
    size_t bytes = (size_t)s[0].count * tgc_comm_dtype_size((tgc_comm_dtype)s[0].dtype);
    unsigned char *recv = s[me].recv;
    for (int i = 0; i < g && bytes; i++) {
        unsigned char *dst = recv + (size_t)i * bytes;
        if (dst != s[i].send && !rt_exec_copy(r->e, dst, s[i].send, bytes)) return false;
    }
    return true;
}

static bool work_broadcast(dev_rank *r, const dev_desc *s, int g, int me)
{
    (void)g;
    const dev_desc *root = &s[s[0].root];
    size_t bytes = (size_t)root->count * tgc_comm_dtype_size((tgc_comm_dtype)root->dtype);
    return me == root->root || rt_exec_copy(r->e, s[me].recv, root->send, bytes);
}

/* ---- the collectives ------------------------------------------------------------ */

static dev_desc dev_call(int kind, const void *send, void *recv, size_t count, tgc_comm_dtype dt, int op, int root)
{
    dev_desc s;
    memset(&s, 0, sizeof s); /* the padding is gathered too */
    s.kind = kind, s.send = send, s.recv = recv, s.count = count, s.dtype = dt, s.op = op, s.root = root;
    return s;
}

static int dev_all_reduce(tgc_comm *c, tgc_comm_group g, void *buf, size_t count, tgc_comm_dtype dt, tgc_comm_op op)
{
    dev_rank *r = tgc_comm_impl(c);
    int gs = tgc_comm_group_size(c, g);
    if (gs == 1) return dev_host_check(c, r, g);
    size_t es = tgc_comm_dtype_size(dt);
    int rc = tgc_comm_dtype_is16(dt) ? dev_acc(c, r, slice_per(count, es, gs)) : TGC_COMM_OK;
    if (rc) return rc;
    dev_desc s = dev_call(TGC_COMM_ALL_REDUCE, buf, buf, count, dt, op, 0);
    return dev_collective(c, g, &s, slice_per(count, es, gs) * es, work_all_reduce);
}

static int dev_all_gather(tgc_comm *c, tgc_comm_group g, const void *send, void *recv, size_t count,
                          tgc_comm_dtype dt)
{
    dev_rank *r = tgc_comm_impl(c);
    if (tgc_comm_group_size(c, g) == 1) {
        int rc = dev_host_check(c, r, g);
        if (!rc && send != recv && !rt_exec_copy(r->e, recv, send, count * tgc_comm_dtype_size(dt)))
            rc = dev_device_fail(c, r, "copying the block");
        return rc;
    }
    dev_desc s = dev_call(TGC_COMM_ALL_GATHER, send, recv, count, dt, 0, 0);
    return dev_collective(c, g, &s, 0, work_all_gather);
}

static int dev_reduce_scatter(tgc_comm *c, tgc_comm_group g, const void *send, void *recv, size_t count,
                              tgc_comm_dtype dt, tgc_comm_op op)
{
    dev_rank *r = tgc_comm_impl(c);
    size_t es = tgc_comm_dtype_size(dt);
    if (tgc_comm_group_size(c, g) == 1) {
        int rc = dev_host_check(c, r, g);
        if (!rc && send != recv && !rt_exec_copy(r->e, recv, send, count * es))
            rc = dev_device_fail(c, r, "copying the block");
        return rc;
    }
    int rc = tgc_comm_dtype_is16(dt) ? dev_acc(c, r, count) : TGC_COMM_OK;
    if (rc) return rc;
    dev_desc s = dev_call(TGC_COMM_REDUCE_SCATTER, send, recv, count, dt, op, 0);
    return dev_collective(c, g, &s, count * es, work_reduce_scatter);
}

static int dev_reduce_scatter_v(tgc_comm *c, tgc_comm_group g, void *buf, const size_t *counts, size_t lo,
                                tgc_comm_dtype dt, tgc_comm_op op)
{
    dev_rank *r = tgc_comm_impl(c);
    int gs = tgc_comm_group_size(c, g);
    if (gs == 1) return dev_host_check(c, r, g);
    size_t es = tgc_comm_dtype_size(dt), total = 0, n = counts[tgc_comm_group_rank(c, g)];
    for (int i = 0; i < gs; i++) total += counts[i];
    int rc = tgc_comm_dtype_is16(dt) ? dev_acc(c, r, n) : TGC_COMM_OK;
    if (rc) return rc;
    dev_desc s = dev_call(TGC_COMM_REDUCE_SCATTER, buf, buf, total, dt, op, 0);
    s.pieces = 1, s.lo = lo, s.n = n;
    return dev_collective(c, g, &s, n * es, work_reduce_scatter_v);
}

static int dev_broadcast(tgc_comm *c, tgc_comm_group g, void *buf, size_t count, tgc_comm_dtype dt, int root)
{
    dev_rank *r = tgc_comm_impl(c);
    if (tgc_comm_group_size(c, g) == 1) return dev_host_check(c, r, g);
    dev_desc s = dev_call(TGC_COMM_BROADCAST, buf, buf, count, dt, 0, root);
    return dev_collective(c, g, &s, 0, work_broadcast);
}

static int dev_barrier(tgc_comm *c, tgc_comm_group g)
{
    dev_rank *r = tgc_comm_impl(c);
    int rc = tgc_comm_barrier(r->host, g);
    return rc ? dev_host_fail(c, r, rc) : TGC_COMM_OK;
}

/* ---- point-to-point: staged through host memory ---------------------------------- */

static int dev_send(tgc_comm *c, const void *buf, size_t bytes, int peer, int tag)
{
    dev_rank *r = tgc_comm_impl(c);
    if (atomic_load(&r->marked)) return dev_marked(c, r, TGC_COMM_WORLD);
    int rc = dev_stage(c, r, 0, bytes);
    if (rc) return rc;
    if (!rt_exec_read(r->e, buf, r->stage[0], bytes)) return dev_device_fail(c, r, "copying the message to the host");
    rc = tgc_comm_send(r->host, r->stage[0], bytes, TGC_COMM_BYTE, peer, tag);
    return rc ? dev_host_fail(c, r, rc) : TGC_COMM_OK;
}

static int dev_recv(tgc_comm *c, void *buf, size_t bytes, int peer, int tag)
{
    dev_rank *r = tgc_comm_impl(c);
    if (atomic_load(&r->marked)) return dev_marked(c, r, TGC_COMM_WORLD);
    int rc = dev_stage(c, r, 1, bytes);
    if (rc) return rc;
    rc = tgc_comm_recv(r->host, r->stage[1], bytes, TGC_COMM_BYTE, peer, tag);
    if (rc) return dev_host_fail(c, r, rc);
    if (!rt_exec_write(r->e, buf, r->stage[1], bytes)) return dev_device_fail(c, r, "copying the message to the device");
    return TGC_COMM_OK;
}

static int dev_sendrecv(tgc_comm *c, const void *send, size_t send_bytes, int dst, int stag, void *recv,
                        size_t recv_bytes, int src, int rtag)
{
    dev_rank *r = tgc_comm_impl(c);
    if (atomic_load(&r->marked)) return dev_marked(c, r, TGC_COMM_WORLD);
    int rc = dev_stage(c, r, 0, send_bytes);
    if (!rc) rc = dev_stage(c, r, 1, recv_bytes);
    if (rc) return rc;
    if (!rt_exec_read(r->e, send, r->stage[0], send_bytes))
        return dev_device_fail(c, r, "copying the message to the host");
    rc = tgc_comm_sendrecv_tags(r->host, r->stage[0], send_bytes, dst, stag, r->stage[1], recv_bytes, src, rtag,
                                TGC_COMM_BYTE);
    if (rc) return dev_host_fail(c, r, rc);
    if (!rt_exec_write(r->e, recv, r->stage[1], recv_bytes))
        return dev_device_fail(c, r, "copying the message to the device");
    return TGC_COMM_OK;
}

/* ---- abort, free, creation --------------------------------------------------------- */

static void dev_abort(tgc_comm *c, int rank, const char *reason)
{
    dev_rank *r = tgc_comm_impl(c);
    atomic_store(&r->marked, 1);
    tgc_comm_abort(r->host, rank, reason);
}

static void dev_rank_free(dev_rank *r)
{
    if (!r) return;
    if (r->e) rt_exec_release(r->e, r->scratch);
    free(r->stage[0]);
    free(r->stage[1]);
    free(r->acc);
    free(r->descs);
    shared_unref(r->sh);
    free(r);
}

static void dev_free(tgc_comm *c)
{
    dev_rank_free(tgc_comm_impl(c));
    tgc_comm_destroy(c);
}

static const tgc_comm_vtable dev_vtable = {
    .name = "device-local",
    .all_reduce = dev_all_reduce,
    .all_gather = dev_all_gather,
    .reduce_scatter = dev_reduce_scatter,
    .reduce_scatter_v = dev_reduce_scatter_v,
    .broadcast = dev_broadcast,
    .send = dev_send,
    .recv = dev_recv,
    .sendrecv = dev_sendrecv,
    .barrier = dev_barrier,
    .abort = dev_abort,
    .free = dev_free,
};

static void dev_report(diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void dev_report(diag *d, const char *fmt, ...)
{
    if (!d) return;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    diag_error_plain(d, "comm: device-local: %s", msg);
}

tgc_comm *tgc_comm_device_new(tgc_comm *host, struct rt_exec *e, diag *d)
{
    if (!host) {
        dev_report(d, "no host communicator to rendezvous over");
        return NULL;
    }
    int rank = tgc_comm_rank(host), n = tgc_comm_size(host);
    const tgc_topology *topo = tgc_comm_topology(host);
    const char *why = NULL;
    dev_rank *r = NULL;
    dev_shared *sh = NULL;
    if (!e || !e->be)
        why = "no executor";
    else if (!(r = calloc(1, sizeof *r)) || !(r->descs = calloc((size_t)n, sizeof *r->descs)))
        why = "out of memory";
    else if (rank == 0 && !(sh = shared_new(topo)))
        why = "out of memory for the state the ranks share";
    if (why) {
        /* The others wait for rank 0's broadcast below: fail them now. */
        dev_report(d, "rank %d: %s", rank, why);
        tgc_comm_abort(host, rank, "could not create its device-local communicator");
        dev_rank_free(r);
        return NULL;
    }
    r->host = host;
    r->e = e;
    r->device = rt_exec_device(e);
    atomic_init(&r->marked, 0);
    /* One process: rank 0's address of the shared state is every rank's. */
    int rc = tgc_comm_broadcast(host, TGC_COMM_WORLD, &sh, sizeof sh, TGC_COMM_BYTE, 0);
    if (rc) {
        /* A host collective fails on every rank alike, so nobody holds sh. */
        dev_report(d, "%s", tgc_comm_error(host));
        if (rank == 0) shared_free(sh);
        dev_rank_free(r);
        return NULL;
    }
    r->sh = sh;
    for (int k = 0; k < TGC_COMM_GROUP_COUNT; k++)
        r->grp[k] = &sh->groups[k][tgc_topology_group_index(topo, rank, (tgc_comm_group)k)];
    tgc_comm *c = tgc_comm_create(&dev_vtable, r, topo, rank);
    if (!c) {
        dev_report(d, "rank %d: out of memory", rank);
        tgc_comm_abort(host, rank, "could not create its device-local communicator");
        dev_rank_free(r);
        return NULL;
    }
    tgc_comm_set_timeout(c, tgc_comm_timeout(host));
    return c;
}
