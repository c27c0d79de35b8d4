/* The `local` communicator: every rank is a thread of one process
 * (runtime/comm/comm.h, docs/parallel.md "Communicators").
 *
 * Collectives are a rendezvous of the group's threads on the callers' own
 * buffers, with no copy through the library and no allocation:
 *
 *   arrive   each rank publishes its call (buffers, count, type, op, root)
 *            in its slot of the group and waits for all (mutex + condition
 *            variable, with a deadline); the last to arrive checks that
 *            every rank made the same call;
 *   work     each rank does its share straight between the published
 *            buffers — an all-reduce reduces one slice of the elements,
 *            (x0 op x1) op x2 ... in group order, and writes the result into
 *            every rank's buffer;
 *   depart   a second barrier, after which no rank reads another's buffers
 *            and each may return.
 *
 * The depart barrier has no deadline and ignores aborts: every rank that
 * passed `arrive` is inside this file doing bounded work, and leaving
 * early would let a caller free a buffer another thread still reads.
 *
 * Point-to-point messages go through a mailbox per receiving rank with a
 * queue of `depth` buffered messages per sender (eager sends). A message
 * buffer grows to the largest message sent through it, once; afterwards
 * sends and receives allocate nothing.
 *
 * Failure: tgc_comm_abort (or any error, through runtime/comm/comm.c) sets the
 * world's abort flag and wakes every waiter; every wait re-checks the flag,
 * so pending and later calls fail at once, naming the failed rank. */
#include "runtime/comm/comm.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LOCAL_REASON_MAX 512
#define LOCAL_DEFAULT_DEPTH 8
#define LOCAL_BLOCK 256       /* elements per step of the reduction accumulator */
#define LOCAL_SLICE_ALIGN 64  /* bytes: reduction slices start on cache lines */

typedef struct local_slot {
    const void *send;
    void *recv;
    size_t count;
    int kind, dtype, op, root;
    const size_t *counts; /* reduce_scatter_v: the pieces (count is their sum); else NULL */
    size_t lo;            /* reduce_scatter_v: where this member's piece starts */
    uint64_t round; /* the value of gen when this slot arrived */
} local_slot;

typedef struct local_group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool live; /* mu and cv initialised */
    int size, arrived;
    uint64_t gen;     /* completed phases (arrive and depart each count one) */
    int mismatch;     /* culprit rank of the last arrive, or -1 */
    char mismatch_msg[256];
    int *members;     /* global ranks in group order */
    local_slot *slots;
    const void **src; /* the slots' send buffers (set by the last to arrive) */
} local_group;

enum { MSG_FREE, MSG_FILLING, MSG_FULL, MSG_DRAINING };

typedef struct local_msg {
    unsigned char *data;
    size_t bytes, cap;
    uint64_t seq;
    int tag, state;
} local_msg;

typedef struct local_queue { /* messages from one rank to another */
    local_msg *msgs;         /* depth of them */
    uint64_t next_seq;
} local_queue;

typedef struct local_mailbox { /* of one receiving rank */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool live;
    local_queue **from; /* per sending rank, created by the sender on first use */
} local_mailbox;

typedef struct local_rank {
    struct tgc_comm_local_world *w;
    int rank;
    local_group *grp[TGC_COMM_GROUP_COUNT];
    int me[TGC_COMM_GROUP_COUNT]; /* position in each group */
} local_rank;

struct tgc_comm_local_world {
    tgc_topology topo;
    int n, depth;
    local_group *groups[TGC_COMM_GROUP_COUNT];
    int ngroups[TGC_COMM_GROUP_COUNT];
    local_mailbox *mbox;
    local_rank *ranks;
    tgc_comm **comms;
    pthread_mutex_t abort_mu;
    bool abort_mu_live;
    atomic_int aborted; /* set (release) after failed_rank and reason */
    int failed_rank;
    char reason[LOCAL_REASON_MAX];
};

/* ---- waiting and failing ------------------------------------------------------ */

static struct timespec local_deadline(double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    time_t whole = (time_t)seconds;
    long nsec = ts.tv_nsec + (long)((seconds - (double)whole) * 1e9);
    ts.tv_sec += whole + nsec / 1000000000L;
    ts.tv_nsec = nsec % 1000000000L;
    return ts;
}

static int local_init_sync(pthread_mutex_t *mu, pthread_cond_t *cv)
{
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr)) return -1;
    int rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (!rc) rc = pthread_cond_init(cv, &attr);
    pthread_condattr_destroy(&attr);
    if (rc) return -1;
    if (pthread_mutex_init(mu, NULL)) {
        pthread_cond_destroy(cv);
        return -1;
    }
    return 0;
}

/* TGC_COMM_ERR_ABORTED naming the failed rank once the world is aborted. */
static int local_check_abort(tgc_comm *c, struct tgc_comm_local_world *w)
{
    if (!atomic_load_explicit(&w->aborted, memory_order_acquire)) return TGC_COMM_OK;
    return tgc_comm_fail(c, TGC_COMM_ERR_ABORTED, w->failed_rank, "rank %d failed: %s", w->failed_rank,
                         w->reason);
}

static void local_wake(pthread_mutex_t *mu, pthread_cond_t *cv)
{
    pthread_mutex_lock(mu);
    pthread_cond_broadcast(cv);
    pthread_mutex_unlock(mu);
}

static void local_abort(tgc_comm *c, int rank, const char *reason)
{
    local_rank *lr = tgc_comm_impl(c);
    struct tgc_comm_local_world *w = lr->w;
    pthread_mutex_lock(&w->abort_mu);
    bool first = !atomic_load_explicit(&w->aborted, memory_order_relaxed);
    if (first) {
        w->failed_rank = rank;
        snprintf(w->reason, sizeof w->reason, "%s", reason);
        atomic_store_explicit(&w->aborted, 1, memory_order_release);
    }
    pthread_mutex_unlock(&w->abort_mu);
    if (!first) return;
    /* Taking each mutex before the broadcast orders it after any waiter's
     * flag check, so no wake-up is lost. */
    for (int k = 0; k < TGC_COMM_GROUP_COUNT; k++)
        for (int i = 0; i < w->ngroups[k]; i++) local_wake(&w->groups[k][i].mu, &w->groups[k][i].cv);
    for (int r = 0; r < w->n; r++) local_wake(&w->mbox[r].mu, &w->mbox[r].cv);
}

/* ---- the rendezvous ------------------------------------------------------------ */

static void slot_describe(const local_slot *s, char *buf, size_t cap)
{
    static const char *const ops[] = {"sum", "max"};
    const char *kind = tgc_comm_kind_name((tgc_comm_kind)s->kind);
    const char *dt = tgc_comm_dtype_name((tgc_comm_dtype)s->dtype);
    if (s->kind == TGC_COMM_BARRIER)
        snprintf(buf, cap, "%s", kind);
    else if (s->kind == TGC_COMM_ALL_REDUCE || s->kind == TGC_COMM_REDUCE_SCATTER)
        snprintf(buf, cap, "%s(%s) of %zu %s", kind, ops[s->op & 1], s->count, dt);
    else if (s->kind == TGC_COMM_BROADCAST)
        snprintf(buf, cap, "%s from %d of %zu %s", kind, s->root, s->count, dt);
    else
        snprintf(buf, cap, "%s of %zu %s", kind, s->count, dt);
}

/* With g->mu held by the last rank to arrive: the first member whose call
 * differs from member 0's (its global rank, described in mismatch_msg),
 * or -1. */
static int group_find_mismatch(local_group *g)
{
    const local_slot *a = &g->slots[0];
    for (int i = 1; i < g->size; i++) {
        const local_slot *b = &g->slots[i];
        bool same_pieces = !a->counts == !b->counts &&
                           (!a->counts || memcmp(a->counts, b->counts, (size_t)g->size * sizeof *a->counts) == 0);
        if (b->kind == a->kind && b->count == a->count && b->dtype == a->dtype && b->op == a->op &&
            b->root == a->root && same_pieces)
            continue;
        char da[96], db[96];
        slot_describe(a, da, sizeof da);
        slot_describe(b, db, sizeof db);
        snprintf(g->mismatch_msg, sizeof g->mismatch_msg, "rank %d called %s but rank %d called %s", g->members[i],
                 db, g->members[0], da);
        return g->members[i];
    }
    return -1;
}

/* With g->mu held: the timeout error naming the members that have not
 * arrived in `round`. */
static int group_timeout(tgc_comm *c, local_group *g, uint64_t round)
{
    int missing = 0, first = -1;
    char list[128] = "";
    size_t len = 0;
    for (int i = 0; i < g->size; i++) {
        if (g->slots[i].round == round) continue;
        if (first < 0) first = g->members[i];
        if (missing++ < 8 && len < sizeof list)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", missing > 1 ? ", " : "", g->members[i]);
    }
    if (missing == 1)
        return tgc_comm_fail(c, TGC_COMM_ERR_TIMEOUT, first, "timed out after %g s waiting for rank %d",
                             tgc_comm_timeout(c), first);
    return tgc_comm_fail(c, TGC_COMM_ERR_TIMEOUT, first, "timed out after %g s waiting for ranks %s%s",
                         tgc_comm_timeout(c), list, missing > 8 ? ", ..." : "");
}

/* Publishes this rank's call and waits for the group. Every member gets
 * the same verdict: all succeed, or all see the same mismatch. */
static int group_arrive(tgc_comm *c, local_group *g, int me, const local_slot *mine)
{
    local_rank *lr = tgc_comm_impl(c);
    struct timespec dl = local_deadline(tgc_comm_timeout(c));
    bool timed_out = false;
    pthread_mutex_lock(&g->mu);
    int rc = local_check_abort(c, lr->w);
    uint64_t round = g->gen;
    if (!rc) {
        g->slots[me] = *mine;
        g->slots[me].round = round;
        if (++g->arrived == g->size) {
            g->mismatch = group_find_mismatch(g);
            for (int i = 0; i < g->size; i++) g->src[i] = g->slots[i].send;
            g->arrived = 0;
            g->gen++;
            pthread_cond_broadcast(&g->cv);
        }
    }
    while (!rc && g->gen == round) {
        if ((rc = local_check_abort(c, lr->w))) break;
        if (timed_out) {
            rc = group_timeout(c, g, round);
            break;
        }
        timed_out = pthread_cond_timedwait(&g->cv, &g->mu, &dl) == ETIMEDOUT;
    }
    if (!rc && g->mismatch >= 0) rc = tgc_comm_fail(c, TGC_COMM_ERR_MISMATCH, g->mismatch, "%s", g->mismatch_msg);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

/* The second barrier of a collective: no deadline, no abort (see the top). */
static void group_depart(local_group *g)
{
    pthread_mutex_lock(&g->mu);
    uint64_t round = g->gen;
    if (++g->arrived == g->size) {
        g->arrived = 0;
        g->gen++;
        pthread_cond_broadcast(&g->cv);
    }
    while (g->gen == round) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

typedef void (*local_work_fn)(const local_group *g, int me);

static int local_collective(tgc_comm *c, tgc_comm_group gk, const local_slot *mine, local_work_fn work)
{
    local_rank *lr = tgc_comm_impl(c);
    local_group *g = lr->grp[gk];
    int me = lr->me[gk];
    int rc = group_arrive(c, g, me, mine);
    if (!rc && work) { /* a barrier has no work and needs no second phase */
        work(g, me);
        group_depart(g);
    }
    return rc;
}

/* ---- the work of each collective ------------------------------------------------ */

/* dst (or, when dst is NULL, every slot's recv at the same offsets) =
 * the reduction of the slots' send[off, off + n) in group order. */
#define LOCAL_DEFINE_REDUCE(NAME, T)                                                      \
    static void NAME(const local_slot *s, int g, size_t off, size_t n, int op, T *dst)    \
    {                                                                                     \
        T acc[LOCAL_BLOCK];                                                               \
        for (size_t b = 0; b < n; b += LOCAL_BLOCK) {                                     \
            size_t m = n - b < LOCAL_BLOCK ? n - b : LOCAL_BLOCK;                         \
            memcpy(acc, (const T *)s[0].send + off + b, m * sizeof(T));                   \
            for (int r = 1; r < g; r++) {                                                 \
                const T *x = (const T *)s[r].send + off + b;                              \
                if (op == TGC_COMM_SUM)                                                   \
                    for (size_t j = 0; j < m; j++) acc[j] += x[j];                        \
                else                                                                      \
                    for (size_t j = 0; j < m; j++)                                        \
                        acc[j] = (x[j] > acc[j] || x[j] != x[j]) ? x[j] : acc[j];         \
            }                                                                             \
            if (dst)                                                                      \
                memcpy(dst + b, acc, m * sizeof(T));                                      \
            else                                                                          \
                for (int r = 0; r < g; r++) memcpy((T *)s[r].recv + off + b, acc, m * sizeof(T)); \
        }                                                                                 \
    }
LOCAL_DEFINE_REDUCE(local_reduce_f32, float)
LOCAL_DEFINE_REDUCE(local_reduce_f64, double)

static void local_reduce(const local_group *g, size_t off, size_t n, void *dst)
{
    const local_slot *s = g->slots;
    if (tgc_comm_dtype_is16((tgc_comm_dtype)s[0].dtype)) {
        /* In f32, rounded once (comm.h): into member 0's buffer when every
         * member's gets it (all-reduce: in place, each block read by all
         * before it is written), then copied. */
        size_t es = 2;
        void *out = dst ? dst : (unsigned char *)s[0].recv + off * es;
        tgc_comm_reduce16(g->src, g->size, off, n, (tgc_comm_dtype)s[0].dtype, (tgc_comm_op)s[0].op, out);
        if (!dst)
            for (int r = 1; r < g->size; r++) memcpy((unsigned char *)s[r].recv + off * es, out, n * es);
        return;
    }
    if (s[0].dtype == TGC_COMM_F32)
        local_reduce_f32(s, g->size, off, n, s[0].op, dst);
    else
        local_reduce_f64(s, g->size, off, n, s[0].op, dst);
}

/* All-reduce: member `me` reduces its slice of the elements into every
 * member's buffer. */
static void work_all_reduce(const local_group *g, int me)
{
    size_t count = g->slots[0].count;
    size_t align = LOCAL_SLICE_ALIGN / tgc_comm_dtype_size((tgc_comm_dtype)g->slots[0].dtype);
    size_t per = (count + (size_t)g->size - 1) / (size_t)g->size;
    per = (per + align - 1) / align * align;
    size_t lo = per * (size_t)me < count ? per * (size_t)me : count;
    size_t hi = count - lo < per ? count : lo + per;
    local_reduce(g, lo, hi - lo, NULL);
}

static void work_reduce_scatter(const local_group *g, int me)
{
    size_t count = g->slots[0].count;
    local_reduce(g, (size_t)me * count, count, g->slots[me].recv);
}

/* Member me reduces its own piece, in place: the other members read only
 * their pieces of its buffer. */
static void work_reduce_scatter_v(const local_group *g, int me)
{
    const local_slot *s = &g->slots[me];
    size_t es = tgc_comm_dtype_size((tgc_comm_dtype)s->dtype);
    if (s->counts[me]) local_reduce(g, s->lo, s->counts[me], (unsigned char *)s->recv + s->lo * es);
}

static void work_all_gather(const local_group *g, int me)
{
    size_t bytes = g->slots[0].count * tgc_comm_dtype_size((tgc_comm_dtype)g->slots[0].dtype);
    unsigned char *recv = g->slots[me].recv;
    for (int r = 0; r < g->size; r++) {
        unsigned char *dst = recv + (size_t)r * bytes;
        if (bytes && dst != g->slots[r].send) memcpy(dst, g->slots[r].send, bytes);
    }
}

static void work_broadcast(const local_group *g, int me)
{
    const local_slot *root = &g->slots[g->slots[0].root];
    size_t bytes = root->count * tgc_comm_dtype_size((tgc_comm_dtype)root->dtype);
    if (me != root->root && bytes) memcpy(g->slots[me].recv, root->send, bytes);
}

/* ---- the collectives ------------------------------------------------------------ */

static int local_all_reduce(tgc_comm *c, tgc_comm_group g, void *buf, size_t count, tgc_comm_dtype dt,
                            tgc_comm_op op)
{
    local_rank *lr = tgc_comm_impl(c);
    if (lr->grp[g]->size == 1) return local_check_abort(c, lr->w);
    local_slot s = {.send = buf, .recv = buf, .count = count, .kind = TGC_COMM_ALL_REDUCE, .dtype = dt, .op = op};
    return local_collective(c, g, &s, work_all_reduce);
}

static int local_all_gather(tgc_comm *c, tgc_comm_group g, const void *send, void *recv, size_t count,
                            tgc_comm_dtype dt)
{
    local_rank *lr = tgc_comm_impl(c);
    if (lr->grp[g]->size == 1) {
        size_t bytes = count * tgc_comm_dtype_size(dt);
        if (bytes && send != recv) memmove(recv, send, bytes);
        return local_check_abort(c, lr->w);
    }
    local_slot s = {.send = send, .recv = recv, .count = count, .kind = TGC_COMM_ALL_GATHER, .dtype = dt};
    return local_collective(c, g, &s, work_all_gather);
}

static int local_reduce_scatter(tgc_comm *c, tgc_comm_group g, const void *send, void *recv, size_t count,
                                tgc_comm_dtype dt, tgc_comm_op op)
{
    local_rank *lr = tgc_comm_impl(c);
    if (lr->grp[g]->size == 1) {
        size_t bytes = count * tgc_comm_dtype_size(dt);
        if (bytes && send != recv) memmove(recv, send, bytes);
        return local_check_abort(c, lr->w);
    }
    local_slot s = {.send = send, .recv = recv, .count = count, .kind = TGC_COMM_REDUCE_SCATTER, .dtype = dt,
                    .op = op};
    return local_collective(c, g, &s, work_reduce_scatter);
}

static int local_reduce_scatter_v(tgc_comm *c, tgc_comm_group g, void *buf, const size_t *counts, size_t lo,
                                  tgc_comm_dtype dt, tgc_comm_op op)
{
    local_rank *lr = tgc_comm_impl(c);
    if (lr->grp[g]->size == 1) return local_check_abort(c, lr->w);
    size_t total = 0;
    for (int r = 0; r < lr->grp[g]->size; r++) total += counts[r];
    local_slot s = {.send = buf, .recv = buf, .count = total, .kind = TGC_COMM_REDUCE_SCATTER, .dtype = dt,
                    .op = op, .counts = counts, .lo = lo};
    return local_collective(c, g, &s, work_reduce_scatter_v);
}

static int local_broadcast(tgc_comm *c, tgc_comm_group g, void *buf, size_t count, tgc_comm_dtype dt, int root)
{
    local_rank *lr = tgc_comm_impl(c);
    if (lr->grp[g]->size == 1) return local_check_abort(c, lr->w);
    local_slot s = {.send = buf, .recv = buf, .count = count, .kind = TGC_COMM_BROADCAST, .dtype = dt,
                    .root = root};
    return local_collective(c, g, &s, work_broadcast);
}

static int local_barrier(tgc_comm *c, tgc_comm_group g)
{
    local_rank *lr = tgc_comm_impl(c);
    if (lr->grp[g]->size == 1) return local_check_abort(c, lr->w);
    local_slot s = {.kind = TGC_COMM_BARRIER};
    return local_collective(c, g, &s, NULL);
}

/* ---- point-to-point --------------------------------------------------------------- */

static local_queue *local_queue_new(int depth)
{
    local_queue *q = calloc(1, sizeof *q);
    if (q) q->msgs = calloc((size_t)depth, sizeof *q->msgs);
    if (q && !q->msgs) {
        free(q);
        q = NULL;
    }
    return q;
}

static local_msg *queue_free_msg(local_queue *q, int depth)
{
    for (int i = 0; i < depth; i++)
        if (q->msgs[i].state == MSG_FREE) return &q->msgs[i];
    return NULL;
}

/* The oldest full message with `tag`. */
static local_msg *queue_match(local_queue *q, int depth, int tag)
{
    local_msg *best = NULL;
    for (int i = 0; i < depth; i++) {
        local_msg *m = &q->msgs[i];
        if (m->state == MSG_FULL && m->tag == tag && (!best || m->seq < best->seq)) best = m;
    }
    return best;
}

/* Takes a free message of the queue to `peer` (mb->mu held), waiting for
 * the receiver to drain one when all `depth` are in flight. */
static int local_send_claim(tgc_comm *c, local_mailbox *mb, local_queue *q, int peer, local_msg **out)
{
    local_rank *lr = tgc_comm_impl(c);
    struct timespec dl = local_deadline(tgc_comm_timeout(c));
    bool timed_out = false;
    for (;;) {
        int rc = local_check_abort(c, lr->w);
        if (rc) return rc;
        if ((*out = queue_free_msg(q, lr->w->depth))) return TGC_COMM_OK;
        if (timed_out)
            return tgc_comm_fail(c, TGC_COMM_ERR_TIMEOUT, peer,
                                 "timed out after %g s: rank %d received none of %d pending messages",
                                 tgc_comm_timeout(c), peer, lr->w->depth);
        timed_out = pthread_cond_timedwait(&mb->cv, &mb->mu, &dl) == ETIMEDOUT;
    }
}

static int local_send(tgc_comm *c, const void *buf, size_t bytes, int peer, int tag)
{
    local_rank *lr = tgc_comm_impl(c);
    local_mailbox *mb = &lr->w->mbox[peer];
    local_queue *q = mb->from[lr->rank]; /* only this thread sets it */
    if (!q) {
        if (!(q = local_queue_new(lr->w->depth)))
            return tgc_comm_fail(c, TGC_COMM_ERR_NOMEM, lr->rank, "no memory for a mailbox");
        pthread_mutex_lock(&mb->mu);
        mb->from[lr->rank] = q;
        pthread_mutex_unlock(&mb->mu);
    }
    local_msg *m = NULL;
    pthread_mutex_lock(&mb->mu);
    int rc = local_send_claim(c, mb, q, peer, &m);
    if (!rc) {
        m->state = MSG_FILLING, m->tag = tag, m->seq = q->next_seq++, m->bytes = bytes;
    }
    pthread_mutex_unlock(&mb->mu);
    if (rc) return rc;
    if (m->cap < bytes) { /* the message buffer grows once to the largest message */
        unsigned char *p = realloc(m->data, bytes);
        if (!p) {
            pthread_mutex_lock(&mb->mu);
            m->state = MSG_FREE;
            pthread_mutex_unlock(&mb->mu);
            return tgc_comm_fail(c, TGC_COMM_ERR_NOMEM, lr->rank, "no memory for a message of %zu bytes", bytes);
        }
        m->data = p, m->cap = bytes;
    }
    if (bytes) memcpy(m->data, buf, bytes);
    pthread_mutex_lock(&mb->mu);
    m->state = MSG_FULL;
    pthread_cond_broadcast(&mb->cv);
    pthread_mutex_unlock(&mb->mu);
    return TGC_COMM_OK;
}

/* Waits (mb->mu held) for the oldest message from `peer` with `tag`. */
static int local_recv_match(tgc_comm *c, local_mailbox *mb, int peer, int tag, local_msg **out)
{
    local_rank *lr = tgc_comm_impl(c);
    struct timespec dl = local_deadline(tgc_comm_timeout(c));
    bool timed_out = false;
    for (;;) {
        int rc = local_check_abort(c, lr->w);
        if (rc) return rc;
        local_queue *q = mb->from[peer];
        if (q && (*out = queue_match(q, lr->w->depth, tag))) return TGC_COMM_OK;
        if (timed_out)
            return tgc_comm_fail(c, TGC_COMM_ERR_TIMEOUT, peer, "timed out after %g s waiting for rank %d (tag %d)",
                                 tgc_comm_timeout(c), peer, tag);
        timed_out = pthread_cond_timedwait(&mb->cv, &mb->mu, &dl) == ETIMEDOUT;
    }
}

static int local_recv(tgc_comm *c, void *buf, size_t bytes, int peer, int tag)
{
    local_rank *lr = tgc_comm_impl(c);
    local_mailbox *mb = &lr->w->mbox[lr->rank];
    local_msg *m = NULL;
    pthread_mutex_lock(&mb->mu);
    int rc = local_recv_match(c, mb, peer, tag, &m);
    if (!rc && m->bytes != bytes)
        rc = tgc_comm_fail(c, TGC_COMM_ERR_MISMATCH, peer, "rank %d sent %zu bytes with tag %d, expected %zu",
                           peer, m->bytes, tag, bytes);
    if (!rc) m->state = MSG_DRAINING;
    pthread_mutex_unlock(&mb->mu);
    if (rc) return rc;
    if (bytes) memcpy(buf, m->data, bytes);
    pthread_mutex_lock(&mb->mu);
    m->state = MSG_FREE;
    pthread_cond_broadcast(&mb->cv);
    pthread_mutex_unlock(&mb->mu);
    return TGC_COMM_OK;
}

/* Sends are buffered, so send-then-receive cannot deadlock on a ring. */
static int local_sendrecv(tgc_comm *c, const void *send, size_t send_bytes, int dst, int stag, void *recv,
                          size_t recv_bytes, int src, int rtag)
{
    int rc = local_send(c, send, send_bytes, dst, stag);
    return rc ? rc : local_recv(c, recv, recv_bytes, src, rtag);
}

static const tgc_comm_vtable local_vtable = {
    .name = "local",
    .all_reduce = local_all_reduce,
    .all_gather = local_all_gather,
    .reduce_scatter = local_reduce_scatter,
    .reduce_scatter_v = local_reduce_scatter_v,
    .broadcast = local_broadcast,
    .send = local_send,
    .recv = local_recv,
    .sendrecv = local_sendrecv,
    .barrier = local_barrier,
    .abort = local_abort,
    .free = NULL, /* the world owns its communicators */
};

/* ---- the world ---------------------------------------------------------------------- */

static int world_groups_init(struct tgc_comm_local_world *w, tgc_comm_group gk)
{
    int count = tgc_topology_group_count(&w->topo, gk);
    int size = tgc_topology_group_size(&w->topo, gk);
    if (!(w->groups[gk] = calloc((size_t)count, sizeof *w->groups[gk]))) return -1;
    w->ngroups[gk] = count;
    for (int i = 0; i < count; i++) {
        local_group *g = &w->groups[gk][i];
        g->size = size;
        g->mismatch = -1;
        g->members = calloc((size_t)size, sizeof *g->members);
        g->slots = calloc((size_t)size, sizeof *g->slots);
        g->src = calloc((size_t)size, sizeof *g->src);
        if (!g->members || !g->slots || !g->src || local_init_sync(&g->mu, &g->cv)) return -1;
        g->live = true;
        for (int j = 0; j < size; j++) g->slots[j].round = UINT64_MAX;
    }
    /* Members: each rank fills its own position of its group. */
    for (int r = 0; r < w->n; r++) {
        local_group *g = &w->groups[gk][tgc_topology_group_index(&w->topo, r, gk)];
        g->members[tgc_topology_group_rank(&w->topo, r, gk)] = r;
    }
    return 0;
}

static int world_ranks_init(struct tgc_comm_local_world *w, double timeout)
{
    if (!(w->mbox = calloc((size_t)w->n, sizeof *w->mbox))) return -1;
    if (!(w->ranks = calloc((size_t)w->n, sizeof *w->ranks))) return -1;
    if (!(w->comms = calloc((size_t)w->n, sizeof *w->comms))) return -1;
    for (int r = 0; r < w->n; r++) {
        local_mailbox *mb = &w->mbox[r];
        if (!(mb->from = calloc((size_t)w->n, sizeof *mb->from)) || local_init_sync(&mb->mu, &mb->cv)) return -1;
        mb->live = true;
        local_rank *lr = &w->ranks[r];
        lr->w = w;
        lr->rank = r;
        for (int k = 0; k < TGC_COMM_GROUP_COUNT; k++) {
            lr->grp[k] = &w->groups[k][tgc_topology_group_index(&w->topo, r, (tgc_comm_group)k)];
            lr->me[k] = tgc_topology_group_rank(&w->topo, r, (tgc_comm_group)k);
        }
        if (!(w->comms[r] = tgc_comm_create(&local_vtable, lr, &w->topo, r))) return -1;
        tgc_comm_set_timeout(w->comms[r], timeout);
    }
    return 0;
}

tgc_comm_local_world *tgc_comm_local_world_new_topo(const tgc_topology *topo, const tgc_comm_local_options *opt,
                                                    diag *d)
{
    tgc_topology t;
    if (!topo || tgc_topology_init(&t, topo->t, topo->d, topo->p)) {
        if (d) diag_error_plain(d, "comm: invalid topology (each of t, d, p must be >= 1, n <= %d)",
                                TGC_COMM_MAX_RANKS);
        return NULL;
    }
    double timeout = TGC_COMM_DEFAULT_TIMEOUT;
    if (opt && opt->timeout_s != 0) {
        timeout = opt->timeout_s;
    } else if (tgc_comm_timeout_from_env(&timeout)) {
        if (d) diag_error_plain(d, "comm: TGC_COMM_TIMEOUT must be a positive number of seconds");
        return NULL;
    }
    if (!(timeout > 0 && timeout <= 1e9)) {
        if (d) diag_error_plain(d, "comm: invalid timeout %g s", timeout);
        return NULL;
    }
    struct tgc_comm_local_world *w = calloc(1, sizeof *w);
    if (!w) goto nomem;
    w->topo = t;
    w->n = tgc_topology_size(&t);
    w->depth = opt && opt->mailbox_depth > 0 ? opt->mailbox_depth : LOCAL_DEFAULT_DEPTH;
    w->failed_rank = -1;
    atomic_init(&w->aborted, 0);
    if (pthread_mutex_init(&w->abort_mu, NULL)) goto nomem;
    w->abort_mu_live = true;
    for (int k = 0; k < TGC_COMM_GROUP_COUNT; k++)
        if (world_groups_init(w, (tgc_comm_group)k)) goto nomem;
    if (world_ranks_init(w, timeout)) goto nomem;
    return w;
nomem:
    tgc_comm_local_world_free(w);
    if (d) diag_error_plain(d, "comm: out of memory creating a local world");
    return NULL;
}

tgc_comm_local_world *tgc_comm_local_world_new(int n, diag *d)
{
    tgc_topology t = {1, n, 1};
    return tgc_comm_local_world_new_topo(&t, NULL, d);
}

tgc_comm *tgc_comm_local_world_comm(tgc_comm_local_world *w, int rank)
{
    return w && rank >= 0 && rank < w->n ? w->comms[rank] : NULL;
}

static void world_free_mailbox(struct tgc_comm_local_world *w, local_mailbox *mb)
{
    if (mb->from)
        for (int s = 0; s < w->n; s++) {
            local_queue *q = mb->from[s];
            if (!q) continue;
            for (int i = 0; i < w->depth; i++) free(q->msgs[i].data);
            free(q->msgs);
            free(q);
        }
    free(mb->from);
    if (mb->live) {
        pthread_mutex_destroy(&mb->mu);
        pthread_cond_destroy(&mb->cv);
    }
}

void tgc_comm_local_world_free(tgc_comm_local_world *w)
{
    if (!w) return;
    for (int k = 0; k < TGC_COMM_GROUP_COUNT; k++) {
        for (int i = 0; w->groups[k] && i < w->ngroups[k]; i++) {
            local_group *g = &w->groups[k][i];
            free(g->members);
            free(g->slots);
            free(g->src);
            if (g->live) {
                pthread_mutex_destroy(&g->mu);
                pthread_cond_destroy(&g->cv);
            }
        }
        free(w->groups[k]);
    }
    for (int r = 0; w->mbox && r < w->n; r++) world_free_mailbox(w, &w->mbox[r]);
    for (int r = 0; w->comms && r < w->n; r++) tgc_comm_destroy(w->comms[r]);
    free(w->mbox);
    free(w->comms);
    free(w->ranks);
    if (w->abort_mu_live) pthread_mutex_destroy(&w->abort_mu);
    free(w);
}

/* ---- running one thread per rank ------------------------------------------------------ */

typedef struct local_thread {
    tgc_comm *c;
    tgc_comm_rank_fn fn;
    void *arg;
    int rc;
} local_thread;

static void *local_thread_main(void *p)
{
    local_thread *t = p;
    t->rc = t->fn(t->c, t->arg);
    if (t->rc) {
        char why[64];
        snprintf(why, sizeof why, "its rank function returned %d", t->rc);
        tgc_comm_abort(t->c, tgc_comm_rank(t->c), why);
    }
    return NULL;
}

int tgc_comm_local_world_run(tgc_comm_local_world *w, tgc_comm_rank_fn fn, void *arg)
{
    pthread_t *tid = calloc((size_t)w->n, sizeof *tid);
    local_thread *th = calloc((size_t)w->n, sizeof *th);
    int started = 0, result = 0;
    if (!tid || !th) {
        free(tid);
        free(th);
        return TGC_COMM_ERR_NOMEM;
    }
    for (; started < w->n; started++) {
        th[started] = (local_thread){w->comms[started], fn, arg, 0};
        if (pthread_create(&tid[started], NULL, local_thread_main, &th[started])) {
            tgc_comm_abort(w->comms[started], started, "could not start its thread");
            result = TGC_COMM_ERR_BACKEND;
            break;
        }
    }
    for (int r = 0; r < started; r++) {
        pthread_join(tid[r], NULL);
        if (!result && th[r].rc) result = th[r].rc;
    }
    free(tid);
    free(th);
    return result;
}
