/* The `mpi` communicator: one process per rank (runtime/comm/comm_mpi.h,
 * docs/parallel.md "`mpi`: one process per rank").
 *
 * Sub-communicators: MPI_Comm_split of MPI_COMM_WORLD per group kind, with
 * the group index as colour and the group rank as key (Megatron's order,
 * runtime/comm/comm.h), so rank j of a group's MPI communicator is group
 * member j. Point-to-point messages of the interface go on a duplicate of
 * the world; abort notices on another.
 *
 * Determinism. The interface promises the bits of the `local`
 * communicator: every element reduced as ((x0 op x1) op x2) ... in group
 * order. MPI_Allreduce promises no order (and MPI_MAX drops NaN), so the
 * reductions are our own, over point-to-point messages:
 *
 *   all_reduce      the elements are cut into g slices; every rank sends
 *                   slice j to member j (MPI_Isend / MPI_Irecv), reduces
 *                   the g copies of its own slice in group order, then
 *                   sends the result to every member — a direct
 *                   reduce-scatter + all-gather. Each rank sends and
 *                   receives 2 N (g-1)/g bytes, the ring volume, in
 *                   2 (g-1) messages per phase (latency O(g), where MPI's
 *                   tuned trees have O(log g)); the reduction work is
 *                   N/g elements per rank;
 *   reduce_scatter  the first phase alone (reduce_scatter_v too: piece j,
 *                   of its own size, to member j);
 *   all_gather      each rank sends its block to every member;
 *   broadcast       the root sends to every member ((g-1) N bytes at the
 *                   root; broadcasts are rare: tgc's initialisation is
 *                   deterministic, not broadcast);
 *   barrier         an empty message between every pair.
 *
 * Transfers go in parts of at most chunk_bytes (32 MiB): MPI counts are
 * ints, and reductions go through a scratch buffer of that size, grown once
 * to the largest need, so after the first step nothing is allocated.
 * Messages carry a tag per (kind, phase): ranks in different collectives
 * never match each other's messages, and a message of another size than
 * expected is a mismatch error.
 *
 * Waiting: every request is nonblocking and completed by a polling loop
 * (MPI_Testsome, then spinning, then yielding, then sleeping up to 1 ms,
 * so oversubscribed ranks leave the cores to the others) with the
 * communicator's deadline: a timeout names the ranks whose messages did
 * not come.
 *
 * Failure. MPI_ERRORS_RETURN is set, MPI errors become
 * TGC_COMM_ERR_BACKEND with MPI's error string. The first failure of a
 * rank (an error, a timeout, tgc_comm_abort) sends an abort notice to every
 * other rank; each rank keeps a receive for it posted and tests it in every
 * wait, so pending and later calls everywhere return TGC_COMM_ERR_ABORTED
 * naming the failed rank, as with `local`. A rank that cannot answer (a
 * busy loop, a lost process) is ended by MPI_Abort, which a watchdog
 * thread calls abort_grace_s after the failure (time for every rank to
 * report), as does tgc_comm_mpi_finalize. A process that dies (a signal,
 * exit without MPI_Finalize) is mpirun's to notice: it ends the job and
 * names the rank. */
#include "runtime/comm/comm_mpi.h"

#include <stdlib.h>

bool tgc_comm_mpi_launched(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return true;
    }
    return false;
}

tgc_comm *tgc_comm_mpi_new(const tgc_topology *topo, diag *d) { return tgc_comm_mpi_new_opts(topo, NULL, d); }

#if !TGC_HAVE_MPI

static void cmpi_missing(diag *d)
{
    if (d) diag_error_plain(d, "comm: tgc was built without MPI (install libopenmpi-dev and reconfigure)");
}

bool tgc_comm_mpi_available(void) { return false; }

int tgc_comm_mpi_world(int *rank, int *size, diag *d)
{
    cmpi_missing(d);
    return -1;
}

tgc_comm *tgc_comm_mpi_new_opts(const tgc_topology *topo, const tgc_comm_mpi_options *opt, diag *d)
{
    cmpi_missing(d);
    return NULL;
}

int tgc_comm_mpi_finalize(void) { return 0; }

#else /* TGC_HAVE_MPI */

#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define CMPI_DEFAULT_CHUNK ((size_t)32 << 20) /* bytes per message and of reduction scratch */
#define CMPI_BLOCK 256                        /* elements per step of the reduction accumulator */
#define CMPI_REASON_MAX 480
#define CMPI_DEFAULT_GRACE 1.0

/* Tags on the group communicators, one per (kind, phase). */
enum { TAG_AR_SCATTER = 1, TAG_AR_GATHER, TAG_RS, TAG_AG, TAG_BCAST, TAG_BARRIER, TAG_RSV };
enum { TAG_ABORT = 1 }; /* on the notice communicator */

typedef struct cmpi_notice {
    int rank;
    char reason[CMPI_REASON_MAX];
} cmpi_notice;

typedef struct cmpi_group {
    MPI_Comm comm;
    int size, me;
    int *members; /* global ranks in group order */
} cmpi_group;

typedef struct cmpi_state {
    int rank, n, tag_ub;
    size_t chunk; /* bytes: the largest message, the most scratch */
    MPI_Comm p2p, ctl; /* duplicates of the world: the interface's messages, abort notices */
    cmpi_group grp[TGC_COMM_GROUP_COUNT];
    /* The requests of one exchange (at most 2 (n - 1)): the peer's global
     * rank, and the bytes a receive expects (SIZE_MAX for a send). */
    int nreq;
    MPI_Request *reqs;
    MPI_Status *stats;
    int *done, *peer;
    size_t *want;
    const void **src; /* the g copies of a slice, in group order */
    unsigned char *scratch;
    size_t scratch_cap;
    /* failure: set once (failed_rank and reason before the flag) */
    pthread_mutex_t fail_mu;
    atomic_int failed;
    int failed_rank;
    char reason[CMPI_REASON_MAX];
    MPI_Request notice_req; /* the posted receive of an abort notice */
    cmpi_notice notice_in, notice_out;
    MPI_Request *notice_sends;
} cmpi_state;

/* What the process knows of failures, for the watchdog and finalize: they
 * outlive the communicators. */
static struct {
    pthread_mutex_t mu;
    atomic_bool any_failed; /* = failed, read without the lock */
    bool we_init, failed;
    int rank, failed_rank;
    char reason[CMPI_REASON_MAX];
    struct timespec fail_time;
    double grace;
} g_mpi = {.mu = PTHREAD_MUTEX_INITIALIZER, .grace = CMPI_DEFAULT_GRACE};

bool tgc_comm_mpi_available(void) { return true; }

/* ---- time ------------------------------------------------------------------------- */

static double cmpi_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void cmpi_sleep(double s)
{
    if (!(s > 0)) return;
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* The polling loop's pause after `iter` fruitless tests: spin, then yield,
 * then sleep 1 us doubling to 1 ms. */
static void cmpi_backoff(unsigned iter)
{
    if (iter < 64) return;
    if (iter < 256) {
        sched_yield();
        return;
    }
    unsigned k = iter - 256;
    cmpi_sleep(k >= 10 ? 1e-3 : 1e-6 * (double)(1u << k));
}

/* ---- the end of the job ---------------------------------------------------------------- */

/* Ends every process of the job (does not return). Once per process: the
 * watchdog and finalize may both get here, and MPI_Abort is not safe to
 * enter twice; the second caller waits to be killed. */
static void cmpi_abort_job(void)
{
    static atomic_flag aborting = ATOMIC_FLAG_INIT;
    if (atomic_flag_test_and_set(&aborting))
        for (;;) cmpi_sleep(3600);
    pthread_mutex_lock(&g_mpi.mu);
    fprintf(stderr, "tgc: rank %d: ending the MPI job: rank %d failed: %s\n", g_mpi.rank, g_mpi.failed_rank,
            g_mpi.reason);
    pthread_mutex_unlock(&g_mpi.mu);
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _Exit(1); /* MPI_Abort does not return; in case it does */
}

static void cmpi_wait_grace(void)
{
    pthread_mutex_lock(&g_mpi.mu);
    double end = (double)g_mpi.fail_time.tv_sec + g_mpi.fail_time.tv_nsec * 1e-9 + g_mpi.grace;
    pthread_mutex_unlock(&g_mpi.mu);
    cmpi_sleep(end - cmpi_now());
}

static void *cmpi_watchdog(void *arg)
{
    (void)arg;
    cmpi_wait_grace();
    cmpi_abort_job();
    return NULL;
}

/* Records the process's first failure and starts the watchdog. */
static void cmpi_process_failed(int rank, const char *reason)
{
    pthread_mutex_lock(&g_mpi.mu);
    bool first = !g_mpi.failed;
    if (first) {
        g_mpi.failed = true;
        g_mpi.failed_rank = rank;
        snprintf(g_mpi.reason, sizeof g_mpi.reason, "%s", reason);
        clock_gettime(CLOCK_MONOTONIC, &g_mpi.fail_time);
        atomic_store(&g_mpi.any_failed, true);
    }
    pthread_mutex_unlock(&g_mpi.mu);
    if (!first) return;
    pthread_t tid;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr)) return; /* finalize still ends the job */
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_create(&tid, &attr, cmpi_watchdog, NULL);
    pthread_attr_destroy(&attr);
}

/* ---- failing ---------------------------------------------------------------------------- */

static int cmpi_fail_call(tgc_comm *c, int err, int culprit, const char *call)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(err, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", err);
    return tgc_comm_fail(c, TGC_COMM_ERR_BACKEND, culprit, "%s failed: %s", call, s);
}

/* Marks this communicator failed (the first time only: true). */
static bool cmpi_mark_failed(cmpi_state *m, int rank, const char *reason)
{
    pthread_mutex_lock(&m->fail_mu);
    bool first = !atomic_load_explicit(&m->failed, memory_order_relaxed);
    if (first) {
        m->failed_rank = rank;
        snprintf(m->reason, sizeof m->reason, "%s", reason);
        atomic_store_explicit(&m->failed, 1, memory_order_release);
    }
    pthread_mutex_unlock(&m->fail_mu);
    if (first) cmpi_process_failed(rank, reason);
    return first;
}

/* TGC_COMM_ERR_ABORTED naming the failed rank once this rank failed or
 * another rank's notice arrived. A failure seen by another communicator of
 * the process counts too: the job is ending, and no MPI call may progress
 * the requests a failed call abandoned (their buffers are the caller's). */
static int cmpi_check_failed(tgc_comm *c, cmpi_state *m)
{
    if (!atomic_load_explicit(&m->failed, memory_order_acquire) && atomic_load(&g_mpi.any_failed)) {
        pthread_mutex_lock(&g_mpi.mu);
        int rank = g_mpi.failed_rank;
        char reason[CMPI_REASON_MAX];
        snprintf(reason, sizeof reason, "%s", g_mpi.reason);
        pthread_mutex_unlock(&g_mpi.mu);
        cmpi_mark_failed(m, rank, reason);
    }
    if (!atomic_load_explicit(&m->failed, memory_order_acquire)) {
        int flag = 0;
        if (m->notice_req == MPI_REQUEST_NULL || MPI_Test(&m->notice_req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
            !flag)
            return TGC_COMM_OK;
        m->notice_in.reason[CMPI_REASON_MAX - 1] = 0;
        cmpi_mark_failed(m, m->notice_in.rank, m->notice_in.reason);
    }
    return tgc_comm_fail(c, TGC_COMM_ERR_ABORTED, m->failed_rank, "rank %d failed: %s", m->failed_rank, m->reason);
}

/* The vtable's abort: the first failure is sent to every other rank. A
 * short push gets the notices out over transports that need progress from
 * the sender; the receivers need none (their receive is posted). */
static void cmpi_abort(tgc_comm *c, int rank, const char *reason)
{
    cmpi_state *m = tgc_comm_impl(c);
    if (!cmpi_mark_failed(m, rank, reason)) return;
    m->notice_out.rank = rank;
    snprintf(m->notice_out.reason, sizeof m->notice_out.reason, "%s", reason);
    int k = 0;
    for (int r = 0; r < m->n; r++) {
        if (r == m->rank) continue;
        if (MPI_Isend(&m->notice_out, (int)sizeof m->notice_out, MPI_BYTE, r, TAG_ABORT, m->ctl,
                      &m->notice_sends[k]) == MPI_SUCCESS)
            k++;
    }
    double end = cmpi_now() + 0.2;
    for (unsigned iter = 0; k > 0; iter++) {
        int flag = 0;
        if (MPI_Testall(k, m->notice_sends, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS || flag || cmpi_now() > end)
            break;
        cmpi_backoff(iter);
    }
}

/* ---- the exchange engine ----------------------------------------------------------------- */

static int cmpi_post_send(tgc_comm *c, cmpi_state *m, MPI_Comm comm, const void *buf, size_t bytes, int dest,
                         int global, int tag)
{
    int k = m->nreq++;
    m->peer[k] = global, m->want[k] = SIZE_MAX;
    int err = MPI_Isend(buf, (int)bytes, MPI_BYTE, dest, tag, comm, &m->reqs[k]);
    if (err == MPI_SUCCESS) return TGC_COMM_OK;
    m->reqs[k] = MPI_REQUEST_NULL;
    return cmpi_fail_call(c, err, m->rank, "MPI_Isend");
}

static int cmpi_post_recv(tgc_comm *c, cmpi_state *m, MPI_Comm comm, void *buf, size_t bytes, int src, int global,
                         int tag)
{
    int k = m->nreq++;
    m->peer[k] = global, m->want[k] = bytes;
    int err = MPI_Irecv(buf, (int)bytes, MPI_BYTE, src, tag, comm, &m->reqs[k]);
    if (err == MPI_SUCCESS) return TGC_COMM_OK;
    m->reqs[k] = MPI_REQUEST_NULL;
    return cmpi_fail_call(c, err, m->rank, "MPI_Irecv");
}

/* A completed request k: its error, or a received size other than expected. */
static int cmpi_check_done(tgc_comm *c, cmpi_state *m, int k, const MPI_Status *st, bool in_status)
{
    int err = in_status ? st->MPI_ERROR : MPI_SUCCESS;
    bool recv = m->want[k] != SIZE_MAX;
    if (err != MPI_SUCCESS) {
        int cls = 0;
        MPI_Error_class(err, &cls);
        if (cls == MPI_ERR_TRUNCATE)
            return tgc_comm_fail(c, TGC_COMM_ERR_MISMATCH, m->peer[k],
                                 "rank %d sent more than the %zu bytes expected (different calls?)", m->peer[k],
                                 m->want[k]);
        return cmpi_fail_call(c, err, m->peer[k], recv ? "MPI_Irecv" : "MPI_Isend");
    }
    if (!recv) return TGC_COMM_OK;
    int got = 0;
    MPI_Get_count(st, MPI_BYTE, &got);
    if ((size_t)got != m->want[k])
        return tgc_comm_fail(c, TGC_COMM_ERR_MISMATCH, m->peer[k],
                             "rank %d sent %d bytes, expected %zu (different calls?)", m->peer[k], got, m->want[k]);
    return TGC_COMM_OK;
}

/* One round of MPI_Testsome over the exchange; *left counts the requests
 * not yet complete, *progress is set when some completed. */
static int cmpi_test(tgc_comm *c, cmpi_state *m, int *left, bool *progress)
{
    int out = 0;
    int err = MPI_Testsome(m->nreq, m->reqs, &out, m->done, m->stats);
    if (err != MPI_SUCCESS && err != MPI_ERR_IN_STATUS) return cmpi_fail_call(c, err, m->rank, "MPI_Testsome");
    if (out == MPI_UNDEFINED) {
        *left = 0;
        return TGC_COMM_OK;
    }
    *progress = out > 0;
    *left -= out;
    for (int i = 0; i < out; i++) {
        int rc = cmpi_check_done(c, m, m->done[i], &m->stats[i], err == MPI_ERR_IN_STATUS);
        if (rc) return rc;
    }
    return TGC_COMM_OK;
}

/* The timeout error: the ranks whose requests are still pending. */
static int cmpi_timeout(tgc_comm *c, cmpi_state *m)
{
    int missing = 0, first = -1;
    char list[128] = "";
    size_t len = 0;
    for (int k = 0; k < m->nreq; k++) {
        if (m->reqs[k] == MPI_REQUEST_NULL) continue;
        bool seen = false;
        for (int j = 0; j < k && !seen; j++) seen = m->reqs[j] != MPI_REQUEST_NULL && m->peer[j] == m->peer[k];
        if (seen) continue;
        if (first < 0) first = m->peer[k];
        if (missing++ < 8 && len < sizeof list)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", missing > 1 ? ", " : "", m->peer[k]);
    }
    if (missing <= 1)
        return tgc_comm_fail(c, TGC_COMM_ERR_TIMEOUT, first, "timed out after %g s waiting for rank %d",
                             tgc_comm_timeout(c), first);
    return tgc_comm_fail(c, TGC_COMM_ERR_TIMEOUT, first, "timed out after %g s waiting for ranks %s%s",
                         tgc_comm_timeout(c), list, missing > 8 ? ", ..." : "");
}

/* Completes every posted request, or fails: an error, another rank's
 * failure, the deadline. Requests left pending on failure are abandoned:
 * the world is dead, and no MPI call of this communicator progresses them
 * any more. */
static int cmpi_wait(tgc_comm *c, cmpi_state *m, int rc)
{
    double deadline = cmpi_now() + tgc_comm_timeout(c);
    int left = m->nreq;
    for (unsigned iter = 0; !rc && left > 0; iter++) {
        bool progress = false;
        if ((rc = cmpi_test(c, m, &left, &progress)) || left == 0) break;
        if (progress) iter = 0;
        if ((rc = cmpi_check_failed(c, m))) break;
        if (cmpi_now() > deadline) {
            rc = cmpi_timeout(c, m);
            break;
        }
        cmpi_backoff(iter);
    }
    m->nreq = 0;
    return rc;
}

/* ---- reductions ------------------------------------------------------------------------ */

/* dst[0, n) = the g sources reduced in group order, element by element,
 * exactly as the local communicator does; dst may be one of the sources. */
#define CMPI_DEFINE_REDUCE(NAME, T)                                                       \
    static void NAME(const void *const *src, int g, size_t n, int op, void *dstv)         \
    {                                                                                     \
        T acc[CMPI_BLOCK];                                                                \
        T *dst = dstv;                                                                    \
        for (size_t b = 0; b < n; b += CMPI_BLOCK) {                                      \
            size_t m = n - b < CMPI_BLOCK ? n - b : CMPI_BLOCK;                           \
            memcpy(acc, (const T *)src[0] + b, m * sizeof(T));                            \
            for (int r = 1; r < g; r++) {                                                 \
                const T *x = (const T *)src[r] + b;                                       \
                if (op == TGC_COMM_SUM)                                                   \
                    for (size_t j = 0; j < m; j++) acc[j] += x[j];                        \
                else                                                                      \
                    for (size_t j = 0; j < m; j++)                                        \
                        acc[j] = (x[j] > acc[j] || x[j] != x[j]) ? x[j] : acc[j];         \
            }                                                                             \
            memcpy(dst + b, acc, m * sizeof(T));                                          \
        }                                                                                 \
    }
CMPI_DEFINE_REDUCE(cmpi_reduce_f32, float)
CMPI_DEFINE_REDUCE(cmpi_reduce_f64, double)

static void cmpi_reduce(const cmpi_state *m, int g, size_t n, tgc_comm_dtype dt, tgc_comm_op op, void *dst)
{
    if (tgc_comm_dtype_is16(dt)) /* in f32, rounded once: local's bits (comm.h) */
        tgc_comm_reduce16((const void *const *)m->src, g, 0, n, dt, op, dst);
    else if (dt == TGC_COMM_F32)
        cmpi_reduce_f32(m->src, g, n, op, dst);
    else
        cmpi_reduce_f64(m->src, g, n, op, dst);
}

/* Room for `bytes` of scratch (<= m->chunk), grown once. */
static int cmpi_scratch(tgc_comm *c, cmpi_state *m, size_t bytes)
{
    if (bytes <= m->scratch_cap) return TGC_COMM_OK;
    unsigned char *p = realloc(m->scratch, bytes);
    if (!p) return tgc_comm_fail(c, TGC_COMM_ERR_NOMEM, m->rank, "no memory for %zu bytes of scratch", bytes);
    m->scratch = p, m->scratch_cap = bytes;
    return TGC_COMM_OK;
}

/* Elements per chunk of a reduction over g ranks: g slices of it fit the
 * scratch buffer (m->chunk >= 8 n bytes: at least g elements). */
static size_t cmpi_chunk(const cmpi_state *m, size_t es, int g) { return m->chunk / es / (size_t)g * (size_t)g; }

/* One chunk of an all-reduce: n elements at buf. */
static int cmpi_all_reduce_chunk(tgc_comm *c, cmpi_state *m, const cmpi_group *g, unsigned char *buf, size_t n,
                                tgc_comm_dtype dt, tgc_comm_op op)
{
    size_t es = tgc_comm_dtype_size(dt), per = (n + (size_t)g->size - 1) / (size_t)g->size;
#define SLICE_LO(j) ((size_t)(j) * per < n ? (size_t)(j) * per : n)
#define SLICE_LEN(j) (n - SLICE_LO(j) < per ? n - SLICE_LO(j) : per)
    size_t lo = SLICE_LO(g->me), len = SLICE_LEN(g->me);
    int rc = TGC_COMM_OK;
    /* Phase 1: slice j to member j; the g copies of this rank's slice. */
    for (int j = 0; j < g->size && !rc; j++) {
        m->src[j] = j == g->me ? (const void *)(buf + lo * es) : (const void *)(m->scratch + (size_t)j * per * es);
        if (j == g->me) continue;
        rc = cmpi_post_send(c, m, g->comm, buf + SLICE_LO(j) * es, SLICE_LEN(j) * es, j, g->members[j], TAG_AR_SCATTER);
        if (!rc)
            rc = cmpi_post_recv(c, m, g->comm, m->scratch + (size_t)j * per * es, len * es, j, g->members[j],
                               TAG_AR_SCATTER);
    }
    if ((rc = cmpi_wait(c, m, rc))) return rc;
    cmpi_reduce(m, g->size, len, dt, op, buf + lo * es);
    /* Phase 2: the reduced slice to every member. */
    for (int j = 0; j < g->size && !rc; j++) {
        if (j == g->me) continue;
        rc = cmpi_post_send(c, m, g->comm, buf + lo * es, len * es, j, g->members[j], TAG_AR_GATHER);
        if (!rc)
            rc = cmpi_post_recv(c, m, g->comm, buf + SLICE_LO(j) * es, SLICE_LEN(j) * es, j, g->members[j],
                               TAG_AR_GATHER);
    }
#undef SLICE_LO
#undef SLICE_LEN
    return cmpi_wait(c, m, rc);
}

/* ---- the collectives --------------------------------------------------------------------------- */

static int cmpi_all_reduce(tgc_comm *c, tgc_comm_group gk, void *buf, size_t count, tgc_comm_dtype dt,
                          tgc_comm_op op)
{
    cmpi_state *m = tgc_comm_impl(c);
    const cmpi_group *g = &m->grp[gk];
    int rc = cmpi_check_failed(c, m);
    if (rc || g->size == 1 || count == 0) return rc;
    size_t es = tgc_comm_dtype_size(dt), chunk = cmpi_chunk(m, es, g->size);
    size_t first = count < chunk ? count : chunk;
    rc = cmpi_scratch(c, m, ((first + (size_t)g->size - 1) / (size_t)g->size) * (size_t)g->size * es);
    for (size_t off = 0; off < count && !rc; off += chunk)
        rc = cmpi_all_reduce_chunk(c, m, g, (unsigned char *)buf + off * es, count - off < chunk ? count - off : chunk,
                                  dt, op);
    return rc;
}

static int cmpi_reduce_scatter(tgc_comm *c, tgc_comm_group gk, const void *send, void *recv, size_t count,
                              tgc_comm_dtype dt, tgc_comm_op op)
{
    cmpi_state *m = tgc_comm_impl(c);
    const cmpi_group *g = &m->grp[gk];
    size_t es = tgc_comm_dtype_size(dt);
    int rc = cmpi_check_failed(c, m);
    if (rc) return rc;
    if (g->size == 1) {
        if (count && send != recv) memmove(recv, send, count * es);
        return rc;
    }
    const unsigned char *in = send;
    size_t chunk = cmpi_chunk(m, es, g->size) / (size_t)g->size; /* elements of each block per round */
    rc = cmpi_scratch(c, m, (count < chunk ? count : chunk) * (size_t)g->size * es);
    for (size_t off = 0; off < count && !rc; off += chunk) {
        size_t n = count - off < chunk ? count - off : chunk;
        for (int j = 0; j < g->size && !rc; j++) {
            const unsigned char *block = in + ((size_t)j * count + off) * es;
            m->src[j] = j == g->me ? (const void *)block : (const void *)(m->scratch + (size_t)j * n * es);
            if (j == g->me) continue;
            rc = cmpi_post_send(c, m, g->comm, block, n * es, j, g->members[j], TAG_RS);
            if (!rc)
                rc = cmpi_post_recv(c, m, g->comm, m->scratch + (size_t)j * n * es, n * es, j, g->members[j], TAG_RS);
        }
        if (!(rc = cmpi_wait(c, m, rc))) cmpi_reduce(m, g->size, n, dt, op, (unsigned char *)recv + off * es);
    }
    return rc;
}

/* Round by round (chunk elements of every piece at most): every member
 * sends the part of piece j it holds to member j and reduces the copies of
 * its own piece in group order, in place. */
static int cmpi_reduce_scatter_v(tgc_comm *c, tgc_comm_group gk, void *buf, const size_t *counts, size_t lo,
                                 tgc_comm_dtype dt, tgc_comm_op op)
{
    cmpi_state *m = tgc_comm_impl(c);
    const cmpi_group *g = &m->grp[gk];
    size_t es = tgc_comm_dtype_size(dt), most = 0, mine = counts[g->me];
    int rc = cmpi_check_failed(c, m);
    if (rc || g->size == 1) return rc;
    for (int j = 0; j < g->size; j++) most = counts[j] > most ? counts[j] : most;
    unsigned char *at = buf;
    size_t chunk = cmpi_chunk(m, es, g->size) / (size_t)g->size;
    rc = cmpi_scratch(c, m, (mine < chunk ? mine : chunk) * (size_t)g->size * es);
    for (size_t off = 0; off < most && !rc; off += chunk) {
        size_t n = mine > off ? (mine - off < chunk ? mine - off : chunk) : 0;
        for (size_t j = 0, from = 0; j < (size_t)g->size && !rc; from += counts[j], j++) {
            size_t nj = counts[j] > off ? (counts[j] - off < chunk ? counts[j] - off : chunk) : 0;
            if ((int)j == g->me) {
                m->src[j] = at + (lo + off) * es;
                continue;
            }
            m->src[j] = m->scratch + j * n * es;
            if (nj) rc = cmpi_post_send(c, m, g->comm, at + (from + off) * es, nj * es, (int)j, g->members[j], TAG_RSV);
            if (!rc && n)
                rc = cmpi_post_recv(c, m, g->comm, m->scratch + j * n * es, n * es, (int)j, g->members[j], TAG_RSV);
        }
        if (!(rc = cmpi_wait(c, m, rc)) && n) cmpi_reduce(m, g->size, n, dt, op, at + (lo + off) * es);
    }
    return rc;
}

static int cmpi_all_gather(tgc_comm *c, tgc_comm_group gk, const void *send, void *recv, size_t count,
                          tgc_comm_dtype dt)
{
    cmpi_state *m = tgc_comm_impl(c);
    const cmpi_group *g = &m->grp[gk];
    size_t bytes = count * tgc_comm_dtype_size(dt);
    unsigned char *out = recv;
    int rc = cmpi_check_failed(c, m);
    if (rc) return rc;
    if (bytes && out + (size_t)g->me * bytes != send) memmove(out + (size_t)g->me * bytes, send, bytes);
    for (size_t off = 0; off < bytes && !rc; off += m->chunk) {
        size_t len = bytes - off < m->chunk ? bytes - off : m->chunk;
        for (int j = 0; j < g->size && !rc; j++) {
            if (j == g->me) continue;
            rc = cmpi_post_send(c, m, g->comm, (const unsigned char *)send + off, len, j, g->members[j], TAG_AG);
            if (!rc) rc = cmpi_post_recv(c, m, g->comm, out + (size_t)j * bytes + off, len, j, g->members[j], TAG_AG);
        }
        rc = cmpi_wait(c, m, rc);
    }
    return rc;
}

static int cmpi_broadcast(tgc_comm *c, tgc_comm_group gk, void *buf, size_t count, tgc_comm_dtype dt, int root)
{
    cmpi_state *m = tgc_comm_impl(c);
    const cmpi_group *g = &m->grp[gk];
    size_t bytes = count * tgc_comm_dtype_size(dt);
    int rc = cmpi_check_failed(c, m);
    for (size_t off = 0; off < bytes && !rc && g->size > 1; off += m->chunk) {
        size_t len = bytes - off < m->chunk ? bytes - off : m->chunk;
        unsigned char *p = (unsigned char *)buf + off;
        if (g->me != root)
            rc = cmpi_post_recv(c, m, g->comm, p, len, root, g->members[root], TAG_BCAST);
        else
            for (int j = 0; j < g->size && !rc; j++)
                if (j != root) rc = cmpi_post_send(c, m, g->comm, p, len, j, g->members[j], TAG_BCAST);
        rc = cmpi_wait(c, m, rc);
    }
    return rc;
}

static int cmpi_barrier(tgc_comm *c, tgc_comm_group gk)
{
    cmpi_state *m = tgc_comm_impl(c);
    const cmpi_group *g = &m->grp[gk];
    int rc = cmpi_check_failed(c, m);
    for (int j = 0; j < g->size && !rc; j++) {
        if (j == g->me) continue;
        rc = cmpi_post_send(c, m, g->comm, NULL, 0, j, g->members[j], TAG_BARRIER);
        if (!rc) rc = cmpi_post_recv(c, m, g->comm, NULL, 0, j, g->members[j], TAG_BARRIER);
    }
    return g->size > 1 && !rc ? cmpi_wait(c, m, rc) : rc;
}

/* ---- point-to-point ------------------------------------------------------------------------------ */

/* One message of at most m->chunk bytes each way (either side may be
 * absent: a peer < 0). The receive is probed first (MPI_Improbe) so a
 * message of another size is reported with both sizes, as `local` does. */
static int cmpi_p2p_round(tgc_comm *c, cmpi_state *m, const void *sbuf, size_t slen, int dst, void *rbuf, size_t rlen,
                         int src, int stag, int rtag)
{
    int rc = dst >= 0 ? cmpi_post_send(c, m, m->p2p, sbuf, slen, dst, dst, stag) : TGC_COMM_OK;
    bool probing = src >= 0;
    double deadline = cmpi_now() + tgc_comm_timeout(c);
    int left = m->nreq;
    for (unsigned iter = 0; !rc && (probing || left > 0); iter++) {
        bool progress = false;
        if (probing) {
            int flag = 0, got = 0, err;
            MPI_Message msg;
            MPI_Status st;
            if ((err = MPI_Improbe(src, rtag, m->p2p, &flag, &msg, &st)) != MPI_SUCCESS) {
                rc = cmpi_fail_call(c, err, m->rank, "MPI_Improbe");
                break;
            }
            if (flag) {
                MPI_Get_count(&st, MPI_BYTE, &got);
                if ((size_t)got != rlen) {
                    rc = tgc_comm_fail(c, TGC_COMM_ERR_MISMATCH, src, "rank %d sent %d bytes with tag %d, expected %zu",
                                       src, got, rtag, rlen);
                    break;
                }
                int k = m->nreq++;
                m->peer[k] = src, m->want[k] = rlen, left++, probing = false, progress = true;
                if ((err = MPI_Imrecv(rbuf, got, MPI_BYTE, &msg, &m->reqs[k])) != MPI_SUCCESS) {
                    m->reqs[k] = MPI_REQUEST_NULL;
                    rc = cmpi_fail_call(c, err, m->rank, "MPI_Imrecv");
                    break;
                }
            }
        }
        if (left > 0 && (rc = cmpi_test(c, m, &left, &progress))) break;
        if (!probing && left == 0) break;
        if (progress) iter = 0;
        if ((rc = cmpi_check_failed(c, m))) break;
        if (cmpi_now() > deadline) {
            if (probing || (src >= 0 && m->reqs[m->nreq - 1] != MPI_REQUEST_NULL))
                rc = tgc_comm_fail(c, TGC_COMM_ERR_TIMEOUT, src, "timed out after %g s waiting for rank %d (tag %d)",
                                   tgc_comm_timeout(c), src, rtag);
            else
                rc = tgc_comm_fail(c, TGC_COMM_ERR_TIMEOUT, dst,
                                   "timed out after %g s: rank %d did not receive the message (tag %d)",
                                   tgc_comm_timeout(c), dst, stag);
            break;
        }
        cmpi_backoff(iter);
    }
    m->nreq = 0;
    return rc;
}

static int cmpi_check_tag(tgc_comm *c, const cmpi_state *m, int tag)
{
    if (tag > m->tag_ub)
        return tgc_comm_fail(c, TGC_COMM_ERR_ARG, m->rank, "tag %d exceeds MPI's largest tag %d", tag, m->tag_ub);
    return TGC_COMM_OK;
}

/* Messages over m->chunk go as several, in order (one tag, one pair: MPI
 * does not let them overtake each other). */
static size_t cmpi_rounds(const cmpi_state *m, size_t bytes) { return bytes ? (bytes + m->chunk - 1) / m->chunk : 1; }

static int cmpi_sendrecv(tgc_comm *c, const void *send, size_t send_bytes, int dst, int stag, void *recv,
                         size_t recv_bytes, int src, int rtag)
{
    cmpi_state *m = tgc_comm_impl(c);
    int rc = cmpi_check_failed(c, m);
    if (!rc) rc = cmpi_check_tag(c, m, stag);
    if (!rc) rc = cmpi_check_tag(c, m, rtag);
    size_t ns = dst >= 0 ? cmpi_rounds(m, send_bytes) : 0, nr = src >= 0 ? cmpi_rounds(m, recv_bytes) : 0;
    for (size_t i = 0; !rc && (i < ns || i < nr); i++) {
        size_t so = i * m->chunk, ro = i * m->chunk;
        size_t sl = i < ns ? (send_bytes - so < m->chunk ? send_bytes - so : m->chunk) : 0;
        size_t rl = i < nr ? (recv_bytes - ro < m->chunk ? recv_bytes - ro : m->chunk) : 0;
        rc = cmpi_p2p_round(c, m, i < ns ? (const unsigned char *)send + so : NULL, sl, i < ns ? dst : -1,
                           i < nr ? (unsigned char *)recv + ro : NULL, rl, i < nr ? src : -1, stag, rtag);
    }
    return rc;
}

/* A send returns when MPI has the message (small ones at once, large ones
 * once the receiver takes them): see comm.h on sendrecv. */
static int cmpi_send(tgc_comm *c, const void *buf, size_t bytes, int peer, int tag)
{
    return cmpi_sendrecv(c, buf, bytes, peer, tag, NULL, 0, -1, tag);
}

static int cmpi_recv(tgc_comm *c, void *buf, size_t bytes, int peer, int tag)
{
    return cmpi_sendrecv(c, NULL, 0, -1, tag, buf, bytes, peer, tag);
}

/* ---- creation and release ------------------------------------------------------------------------ */

static void cmpi_free(tgc_comm *c);

static const tgc_comm_vtable cmpi_vtable = {
    .name = "mpi",
    .all_reduce = cmpi_all_reduce,
    .all_gather = cmpi_all_gather,
    .reduce_scatter = cmpi_reduce_scatter,
    .reduce_scatter_v = cmpi_reduce_scatter_v,
    .broadcast = cmpi_broadcast,
    .send = cmpi_send,
    .recv = cmpi_recv,
    .sendrecv = cmpi_sendrecv,
    .barrier = cmpi_barrier,
    .abort = cmpi_abort,
    .free = cmpi_free,
};

static void cmpi_error(diag *d, int err, const char *call)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(err, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", err);
    if (d) diag_error_plain(d, "comm: %s failed: %s", call, s);
}

int tgc_comm_mpi_world(int *rank, int *size, diag *d)
{
    int init = 0, fin = 0, err;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (fin) {
        if (d) diag_error_plain(d, "comm: MPI was already finalized");
        return -1;
    }
    if (!init) {
        int provided = 0;
        if ((err = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided)) != MPI_SUCCESS) {
            cmpi_error(d, err, "MPI_Init_thread");
            return -1;
        }
        pthread_mutex_lock(&g_mpi.mu);
        g_mpi.we_init = true;
        pthread_mutex_unlock(&g_mpi.mu);
    }
    /* Errors come back as codes (TGC_COMM_ERR_BACKEND), not aborts. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if ((err = MPI_Comm_rank(MPI_COMM_WORLD, rank)) != MPI_SUCCESS ||
        (err = MPI_Comm_size(MPI_COMM_WORLD, size)) != MPI_SUCCESS) {
        cmpi_error(d, err, "MPI_Comm_rank");
        return -1;
    }
    pthread_mutex_lock(&g_mpi.mu);
    g_mpi.rank = *rank;
    pthread_mutex_unlock(&g_mpi.mu);
    return 0;
}

/* Releases the MPI objects and memory of a state (any part may be unset). */
static void cmpi_state_free(cmpi_state *m, bool release_mpi)
{
    if (!m) return;
    if (release_mpi) {
        if (m->notice_req != MPI_REQUEST_NULL) {
            MPI_Status st;
            int cancelled = 0;
            MPI_Cancel(&m->notice_req);
            MPI_Wait(&m->notice_req, &st);
            MPI_Test_cancelled(&st, &cancelled);
            /* A notice that came in the meantime still fails the world. */
            if (!cancelled) cmpi_process_failed(m->notice_in.rank, m->notice_in.reason);
        }
        for (int k = 0; k < TGC_COMM_GROUP_COUNT; k++)
            if (m->grp[k].comm != MPI_COMM_NULL) MPI_Comm_free(&m->grp[k].comm);
        if (m->p2p != MPI_COMM_NULL) MPI_Comm_free(&m->p2p);
        if (m->ctl != MPI_COMM_NULL) MPI_Comm_free(&m->ctl);
    }
    for (int k = 0; k < TGC_COMM_GROUP_COUNT; k++) free(m->grp[k].members);
    free(m->reqs);
    free(m->stats);
    free(m->done);
    free(m->peer);
    free(m->want);
    free(m->src);
    free(m->notice_sends);
    free(m->scratch);
    pthread_mutex_destroy(&m->fail_mu);
    free(m);
}

/* After a failure the world's requests may still be pending: nothing of MPI
 * is touched (MPI_Abort will end the job), only memory is freed. */
static void cmpi_free(tgc_comm *c)
{
    cmpi_state *m = tgc_comm_impl(c);
    cmpi_state_free(m, !atomic_load_explicit(&m->failed, memory_order_acquire) && !atomic_load(&g_mpi.any_failed));
    tgc_comm_destroy(c);
}

static cmpi_state *cmpi_state_new(int rank, int n)
{
    cmpi_state *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->rank = rank, m->n = n;
    m->p2p = m->ctl = MPI_COMM_NULL;
    m->notice_req = MPI_REQUEST_NULL;
    for (int k = 0; k < TGC_COMM_GROUP_COUNT; k++) m->grp[k].comm = MPI_COMM_NULL;
    pthread_mutex_init(&m->fail_mu, NULL);
    atomic_init(&m->failed, 0);
    size_t nr = 2 * (size_t)n;
    m->reqs = calloc(nr, sizeof *m->reqs);
    m->stats = calloc(nr, sizeof *m->stats);
    m->done = calloc(nr, sizeof *m->done);
    m->peer = calloc(nr, sizeof *m->peer);
    m->want = calloc(nr, sizeof *m->want);
    m->src = calloc((size_t)n, sizeof *m->src);
    m->notice_sends = calloc((size_t)n, sizeof *m->notice_sends);
    if (!m->reqs || !m->stats || !m->done || !m->peer || !m->want || !m->src || !m->notice_sends) {
        cmpi_state_free(m, false);
        return NULL;
    }
    for (size_t i = 0; i < nr; i++) m->reqs[i] = MPI_REQUEST_NULL;
    return m;
}

/* The sub-communicator of every group kind; -1 after reporting. */
static int cmpi_groups_init(cmpi_state *m, const tgc_topology *topo, diag *d)
{
    for (int k = 0; k < TGC_COMM_GROUP_COUNT; k++) {
        cmpi_group *g = &m->grp[k];
        tgc_comm_group gk = (tgc_comm_group)k;
        int color = tgc_topology_group_index(topo, m->rank, gk), key = tgc_topology_group_rank(topo, m->rank, gk);
        int err = MPI_Comm_split(MPI_COMM_WORLD, color, key, &g->comm), me = -1, size = -1;
        if (err != MPI_SUCCESS) {
            g->comm = MPI_COMM_NULL;
            cmpi_error(d, err, "MPI_Comm_split");
            return -1;
        }
        MPI_Comm_rank(g->comm, &me);
        MPI_Comm_size(g->comm, &size);
        g->size = tgc_topology_group_size(topo, gk);
        g->me = key;
        if (me != key || size != g->size) { /* cannot happen with a conforming MPI */
            if (d) diag_error_plain(d, "comm: MPI_Comm_split gave rank %d of %d for the %s group, expected %d of %d",
                                    me, size, tgc_comm_group_name(gk), key, g->size);
            return -1;
        }
        if (!(g->members = calloc((size_t)g->size, sizeof *g->members))) {
            if (d) diag_error_plain(d, "comm: out of memory creating an MPI communicator");
            return -1;
        }
        tgc_topology_group_members(topo, m->rank, gk, g->members);
    }
    return 0;
}

/* The world duplicates, the largest tag and the posted notice receive. */
static int cmpi_channels_init(cmpi_state *m, diag *d)
{
    int err, flag = 0, *ub = NULL;
    if ((err = MPI_Comm_dup(MPI_COMM_WORLD, &m->p2p)) != MPI_SUCCESS ||
        (err = MPI_Comm_dup(MPI_COMM_WORLD, &m->ctl)) != MPI_SUCCESS) {
        cmpi_error(d, err, "MPI_Comm_dup");
        return -1;
    }
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    m->tag_ub = flag && ub ? *ub : 32767; /* the least the standard allows */
    if ((err = MPI_Irecv(&m->notice_in, (int)sizeof m->notice_in, MPI_BYTE, MPI_ANY_SOURCE, TAG_ABORT, m->ctl,
                         &m->notice_req)) != MPI_SUCCESS) {
        m->notice_req = MPI_REQUEST_NULL;
        cmpi_error(d, err, "MPI_Irecv");
        return -1;
    }
    return 0;
}

/* The timeout and grace of opt / the environment; -1 after reporting. */
static int cmpi_options(const tgc_comm_mpi_options *opt, double *timeout, double *grace, diag *d)
{
    *timeout = TGC_COMM_DEFAULT_TIMEOUT;
    *grace = opt && opt->abort_grace_s != 0 ? opt->abort_grace_s : CMPI_DEFAULT_GRACE;
    if (opt && opt->timeout_s != 0) {
        *timeout = opt->timeout_s;
    } else if (tgc_comm_timeout_from_env(timeout)) {
        if (d) diag_error_plain(d, "comm: TGC_COMM_TIMEOUT must be a positive number of seconds");
        return -1;
    }
    if (!(*timeout > 0 && *timeout <= 1e9)) {
        if (d) diag_error_plain(d, "comm: invalid timeout %g s", *timeout);
        return -1;
    }
    if (!(*grace > 0 && *grace <= 3600)) {
        if (d) diag_error_plain(d, "comm: invalid abort grace %g s (0 < grace <= 3600)", *grace);
        return -1;
    }
    return 0;
}

tgc_comm *tgc_comm_mpi_new_opts(const tgc_topology *topo, const tgc_comm_mpi_options *opt, diag *d)
{
    tgc_topology t;
    double timeout, grace;
    int rank = 0, size = 0;
    if (!topo || tgc_topology_init(&t, topo->t, topo->d, topo->p)) {
        if (d) diag_error_plain(d, "comm: invalid topology (each of t, d, p must be >= 1, n <= %d)",
                                TGC_COMM_MAX_RANKS);
        return NULL;
    }
    if (cmpi_options(opt, &timeout, &grace, d) || tgc_comm_mpi_world(&rank, &size, d)) return NULL;
    int n = tgc_topology_size(&t);
    if (size != n) {
        if (d)
            diag_error_plain(d, "comm: the MPI world has %d process%s but t=%d x d=%d x p=%d needs %d (mpirun -np %d)",
                             size, size == 1 ? "" : "es", t.t, t.d, t.p, n, n);
        return NULL;
    }
    cmpi_state *m = cmpi_state_new(rank, n);
    if (!m) {
        if (d) diag_error_plain(d, "comm: out of memory creating an MPI communicator");
        return NULL;
    }
    m->chunk = opt && opt->chunk_bytes ? opt->chunk_bytes : CMPI_DEFAULT_CHUNK;
    if (m->chunk > INT_MAX) m->chunk = (size_t)INT_MAX; /* an MPI count */
    if (m->chunk < 8 * (size_t)n) m->chunk = 8 * (size_t)n;
    /* Collective over the world: every process gets here unless the
     * arguments or the environment differ between them. */
    if (cmpi_channels_init(m, d) || cmpi_groups_init(m, &t, d)) {
        cmpi_state_free(m, true);
        return NULL;
    }
    tgc_comm *c = tgc_comm_create(&cmpi_vtable, m, &t, rank);
    if (!c) {
        cmpi_state_free(m, true);
        if (d) diag_error_plain(d, "comm: out of memory creating an MPI communicator");
        return NULL;
    }
    tgc_comm_set_timeout(c, timeout);
    pthread_mutex_lock(&g_mpi.mu);
    g_mpi.grace = grace;
    pthread_mutex_unlock(&g_mpi.mu);
    return c;
}

int tgc_comm_mpi_finalize(void)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!init || fin) return 0;
    pthread_mutex_lock(&g_mpi.mu);
    bool failed = g_mpi.failed, ours = g_mpi.we_init;
    pthread_mutex_unlock(&g_mpi.mu);
    if (failed) {
        cmpi_wait_grace();
        cmpi_abort_job();
    }
    if (!ours) return 0;
    return MPI_Finalize() == MPI_SUCCESS ? 0 : -1;
}

#endif /* TGC_HAVE_MPI */
