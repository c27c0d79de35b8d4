/* The `nccl` communicator (runtime/comm/comm_nccl.h): NCCL opened with dlopen,
 * non-blocking communicators polled with a deadline, sub-communicators per
 * group kind by ncclCommSplit. */
#include "runtime/comm/comm_nccl.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/cublaslt.h"
#include "support/env.h"
#include "support/util.h"

/* ---- the rendezvous address of one process per rank (both builds) --------------- */

/* A TCP port in a variable: 1 .. 65535, digits only. */
static bool env_port(const char *name, const char *v, int *port, diag *d)
{
    long x = 0;
    const char *p = v;
    for (; *p >= '0' && *p <= '9' && x <= 65535; p++) x = x * 10 + (*p - '0');
    if (p == v || *p || x < 1 || x > 65535) {
        diag_error_plain(d, "NCCL: %s=%s is not a TCP port (1 to 65535)", name, v);
        return false;
    }
    *port = (int)x;
    return true;
}

bool tgc_comm_nccl_env_addr(char *buf, size_t size, diag *d)
{
    const char *id = getenv("NCCL_COMM_ID");
    if (id && *id) {
        if ((size_t)snprintf(buf, size, "%s", id) >= size) {
            diag_error_plain(d, "NCCL: NCCL_COMM_ID=%s is too long", id);
            return false;
        }
        return true;
    }
    const char *addr = getenv("MASTER_ADDR"), *mport = getenv("MASTER_PORT"), *tport = env_text("TGC_NCCL_PORT");
    if (!addr || !*addr) {
        diag_error_plain(d, "NCCL: neither NCCL_COMM_ID nor MASTER_ADDR is set: one process per rank needs rank 0's "
                            "host (MASTER_ADDR, as torchrun sets it, with MASTER_PORT or TGC_NCCL_PORT) or "
                            "NCCL_COMM_ID=host:port");
        return false;
    }
    size_t len = strlen(addr);
    bool bracketed = len > 2 && addr[0] == '[' && addr[len - 1] == ']';
    for (const char *p = addr + bracketed; p < addr + len - bracketed; p++)
        if (*p == ' ' || *p == '\t' || *p == '/' || *p == '[' || *p == ']') {
            diag_error_plain(d, "NCCL: MASTER_ADDR=%s is not a host name or address", addr);
            return false;
        }
    int port;
    if (tport && *tport) {
        if (!env_port("TGC_NCCL_PORT", tport, &port, d)) return false;
    } else if (!mport || !*mport) {
        diag_error_plain(d, "NCCL: MASTER_ADDR=%s is set but MASTER_PORT is not (NCCL's bootstrap listens on "
                            "MASTER_PORT + 1, or on TGC_NCCL_PORT)", addr);
        return false;
    } else {
        if (!env_port("MASTER_PORT", mport, &port, d)) return false;
        if (port == 65535) {
            diag_error_plain(d, "NCCL: MASTER_PORT=65535 leaves no port after it for NCCL's bootstrap "
                                "(set TGC_NCCL_PORT)");
            return false;
        }
        port++; /* MASTER_PORT itself is torchrun's store */
    }
    /* An IPv6 literal goes in brackets: [addr]:port. */
    bool v6 = !bracketed && strchr(addr, ':') != NULL;
    if ((size_t)snprintf(buf, size, "%s%s%s:%d", v6 ? "[" : "", addr, v6 ? "]" : "", port) >= size) {
        diag_error_plain(d, "NCCL: MASTER_ADDR=%s is too long", addr);
        return false;
    }
    return true;
}

#ifndef TGC_HAVE_CUDA

static const char no_cuda[] = "NCCL: tgc was built without the CUDA toolkit";

bool tgc_nccl_load(diag *d)
{
    if (d) diag_error_plain(d, "%s", no_cuda);
    return false;
}
int tgc_nccl_version(void) { return 0; }
tgc_nccl_world *tgc_nccl_world_new(const tgc_topology *topo, diag *d)
{
    (void)topo;
    tgc_nccl_load(d);
    return NULL;
}
void tgc_nccl_world_free(tgc_nccl_world *w) { (void)w; }
tgc_comm *tgc_comm_nccl_join(tgc_nccl_world *w, int rank, int device, void *stream, diag *d)
{
    (void)w, (void)rank, (void)device, (void)stream;
    tgc_nccl_load(d);
    return NULL;
}
tgc_comm *tgc_comm_nccl_join_env(const tgc_topology *topo, int rank, int device, void *stream, diag *d)
{
    (void)topo, (void)rank, (void)device, (void)stream;
    tgc_nccl_load(d);
    return NULL;
}
tgc_comm *tgc_comm_nccl_join_host(tgc_comm *host, int device, void *stream, diag *d)
{
    (void)host, (void)device, (void)stream;
    tgc_nccl_load(d);
    return NULL;
}
int tgc_comm_nccl_sync(tgc_comm *c)
{
    (void)c;
    return TGC_COMM_ERR_UNSUPPORTED;
}
tgc_comm *tgc_comm_nccl_unconnected(tgc_nccl_world *w, int rank)
{
    (void)w, (void)rank;
    return NULL;
}

#else

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include <nccl.h>

#include "runtime/backend/cuda.h"

#define NCCL_ERR_MAX 512

/* ---- the library -------------------------------------------------------------- */

#define NCCL_FUNCS(X)                                                                                          \
    X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRankConfig) X(ncclCommSplit) X(ncclCommFinalize)        \
    X(ncclCommDestroy) X(ncclCommAbort) X(ncclCommGetAsyncError) X(ncclGetErrorString) X(ncclGetLastError)     \
    X(ncclAllReduce) X(ncclAllGather) X(ncclReduceScatter) X(ncclReduce) X(ncclBroadcast) X(ncclSend)          \
    X(ncclRecv) X(ncclGroupStart) X(ncclGroupEnd)

typedef struct nccl_api {
#define NCCL_MEMBER(fn) __typeof__(&fn) fn;
    NCCL_FUNCS(NCCL_MEMBER)
#undef NCCL_MEMBER
    /* From libcudart (already loaded by runtime/backend/cuda.c): the one query
     * its table lacks, to wait on a stream without blocking forever. */
    cudaError_t (*StreamQuery)(cudaStream_t);
} nccl_api;

static nccl_api api;
static bool api_ok;
static int api_version;
static char api_err[NCCL_ERR_MAX];
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void nccl_load_once(void)
{
    static const char *const names[] = {"libnccl.so.2", "libnccl.so", NULL};
    void *h = rt_cuda_dlopen(names, "NCCL (libnccl)", api_err, sizeof api_err);
    if (!h) return;
#define NCCL_RESOLVE(fn)                                                                                       \
    if (!(*(void **)&api.fn = dlsym(h, #fn))) {                                                                \
        snprintf(api_err, sizeof api_err, "NCCL: the library lacks %s (NCCL >= 2.19 is needed)", #fn);        \
        return;                                                                                                \
    }
    NCCL_FUNCS(NCCL_RESOLVE)
#undef NCCL_RESOLVE
    if (api.ncclGetVersion(&api_version) != ncclSuccess) api_version = 0;
    api_ok = true;
}

bool tgc_nccl_load(diag *d)
{
    pthread_once(&api_once, nccl_load_once);
    if (!api_ok && d) diag_error_plain(d, "%s", api_err);
    return api_ok;
}

int tgc_nccl_version(void) { return api_ok ? api_version : 0; }

/* ---- the world and the ranks ------------------------------------------------------ */

struct tgc_nccl_world {
    tgc_topology topo;
    int n;
    ncclUniqueId id;
    double timeout;
    pthread_mutex_t mu;
    atomic_int aborted; /* set (release) after failed_rank and reason */
    int failed_rank;
    char reason[NCCL_ERR_MAX];
};

typedef struct nccl_rank {
    struct tgc_nccl_world *w;
    bool owns_world; /* one process per rank: the world is this rank's */
    int rank;
    ncclComm_t comm[TGC_COMM_GROUP_COUNT]; /* a group as large as the world shares comm[WORLD] */
    bool connected, dead;                  /* dead: the communicators were aborted */
    pthread_t owner;                       /* the thread that joined (and uses the communicators) */
    cudaStream_t stream;
    const rt_cuda_api *cu;                 /* libcudart (runtime/backend/cuda.h) */
    float *one;                            /* device scratch of the barrier's all-reduce */
} nccl_rank;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap(void)
{
    struct timespec ts = {0, 100000}; /* 0.1 ms: polling NCCL's progress */
    nanosleep(&ts, NULL);
}

/* ncclCommAbort on every communicator of this rank, once (from its thread). */
static void rank_abort_comms(nccl_rank *r)
{
    if (r->dead) return;
    r->dead = true;
    for (int g = TGC_COMM_GROUP_COUNT - 1; g >= 0; g--) {
        if (!r->comm[g] || (g != TGC_COMM_WORLD && r->comm[g] == r->comm[TGC_COMM_WORLD])) continue;
        api.ncclCommAbort(r->comm[g]);
    }
    memset(r->comm, 0, sizeof r->comm);
}

static void world_mark_failed(struct tgc_nccl_world *w, int rank, const char *reason)
{
    pthread_mutex_lock(&w->mu);
    if (!atomic_load_explicit(&w->aborted, memory_order_relaxed)) {
        w->failed_rank = rank;
        snprintf(w->reason, sizeof w->reason, "%s", reason);
        atomic_store_explicit(&w->aborted, 1, memory_order_release);
    }
    pthread_mutex_unlock(&w->mu);
}

/* TGC_COMM_ERR_ABORTED once the world failed, after aborting this rank's
 * communicators (a pending operation of theirs may wait for the failed rank
 * forever). */
static int check_abort(tgc_comm *c, nccl_rank *r)
{
    struct tgc_nccl_world *w = r->w;
    if (!atomic_load_explicit(&w->aborted, memory_order_acquire)) return TGC_COMM_OK;
    rank_abort_comms(r);
    return tgc_comm_fail(c, TGC_COMM_ERR_ABORTED, w->failed_rank, "rank %d failed: %s", w->failed_rank, w->reason);
}

static int nccl_fail(tgc_comm *c, nccl_rank *r, ncclComm_t comm, const char *call, ncclResult_t res)
{
    const char *last = comm ? api.ncclGetLastError(comm) : NULL;
    int rc = tgc_comm_fail(c, TGC_COMM_ERR_BACKEND, r->rank, "%s: %s%s%s", call, api.ncclGetErrorString(res),
                           last && *last ? ": " : "", last && *last ? last : "");
    /* A communicator that failed cannot be trusted with another call. */
    rank_abort_comms(r);
    return rc;
}

/* Waits for a non-blocking call of comm to complete: its async state
 * leaves ncclInProgress. */
static int wait_comm(tgc_comm *c, nccl_rank *r, ncclComm_t comm, const char *call, ncclResult_t res)
{
    double deadline = now_s() + tgc_comm_timeout(c);
    while (res == ncclInProgress) {
        int rc = check_abort(c, r);
        if (rc) return rc;
        if (now_s() > deadline) {
            rank_abort_comms(r);
            return tgc_comm_fail(c, TGC_COMM_ERR_TIMEOUT, r->rank, "%s did not complete in %g s", call,
                                 tgc_comm_timeout(c));
        }
        nap();
        if (api.ncclCommGetAsyncError(comm, &res) != ncclSuccess) res = ncclInternalError;
    }
    return res == ncclSuccess ? TGC_COMM_OK : nccl_fail(c, r, comm, call, res);
}

/* ---- the operations ------------------------------------------------------------------ */

static ncclDataType_t nccl_type(tgc_comm_dtype t)
{
    switch (t) {
    case TGC_COMM_F64: return ncclFloat64;
    case TGC_COMM_BYTE: return ncclUint8;
    case TGC_COMM_BF16: return ncclBfloat16; /* NCCL >= 2.10 */
    case TGC_COMM_F16: return ncclFloat16;
    default: return ncclFloat32;
    }
}

static ncclRedOp_t nccl_op(tgc_comm_op op) { return op == TGC_COMM_MAX ? ncclMax : ncclSum; }

/* The communicator of group g, or an error when this rank is not usable. */
static ncclComm_t rank_comm(tgc_comm *c, nccl_rank *r, tgc_comm_group g, int *rc)
{
    *rc = check_abort(c, r);
    if (*rc) return NULL;
    if (!r->connected || r->dead || !r->comm[g]) {
        *rc = tgc_comm_fail(c, TGC_COMM_ERR_BACKEND, r->rank, "not connected%s",
                            r->dead ? " (its NCCL communicators were aborted)" : "");
        return NULL;
    }
    return r->comm[g];
}

static int nccl_all_reduce(tgc_comm *c, tgc_comm_group g, void *buf, size_t count, tgc_comm_dtype dt, tgc_comm_op op)
{
    nccl_rank *r = tgc_comm_impl(c);
    int rc;
    ncclComm_t comm = rank_comm(c, r, g, &rc);
    if (!comm) return rc;
    ncclResult_t res = api.ncclAllReduce(buf, buf, count, nccl_type(dt), nccl_op(op), comm, r->stream);
    return wait_comm(c, r, comm, "ncclAllReduce", res);
}

static int nccl_all_gather(tgc_comm *c, tgc_comm_group g, const void *send, void *recv, size_t count,
                           tgc_comm_dtype dt)
{
    nccl_rank *r = tgc_comm_impl(c);
    int rc;
    ncclComm_t comm = rank_comm(c, r, g, &rc);
    if (!comm) return rc;
    ncclResult_t res = api.ncclAllGather(send, recv, count, nccl_type(dt), comm, r->stream);
    return wait_comm(c, r, comm, "ncclAllGather", res);
}

static int nccl_reduce_scatter(tgc_comm *c, tgc_comm_group g, const void *send, void *recv, size_t count,
                               tgc_comm_dtype dt, tgc_comm_op op)
{
    nccl_rank *r = tgc_comm_impl(c);
    int rc;
    ncclComm_t comm = rank_comm(c, r, g, &rc);
    if (!comm) return rc;
    ncclResult_t res = api.ncclReduceScatter(send, recv, count, nccl_type(dt), nccl_op(op), comm, r->stream);
    return wait_comm(c, r, comm, "ncclReduceScatter", res);
}

/* Uneven pieces: one grouped ncclReduce per non-empty piece, rooted at its
 * member (the split's rank is the group rank), in place. */
static int nccl_reduce_scatter_v(tgc_comm *c, tgc_comm_group g, void *buf, const size_t *counts, size_t lo,
                                 tgc_comm_dtype dt, tgc_comm_op op)
{
    (void)lo;
    nccl_rank *r = tgc_comm_impl(c);
    int rc;
    ncclComm_t comm = rank_comm(c, r, g, &rc);
    if (!comm) return rc;
    size_t es = tgc_comm_dtype_size(dt), at = 0;
    ncclResult_t res = api.ncclGroupStart();
    for (int j = 0; j < tgc_comm_group_size(c, g) && (res == ncclSuccess || res == ncclInProgress); at += counts[j++]) {
        void *piece = (unsigned char *)buf + at * es;
        if (counts[j]) res = api.ncclReduce(piece, piece, counts[j], nccl_type(dt), nccl_op(op), j, comm, r->stream);
    }
    if (res == ncclSuccess || res == ncclInProgress) res = api.ncclGroupEnd();
    return wait_comm(c, r, comm, "ncclReduce", res);
}

static int nccl_broadcast(tgc_comm *c, tgc_comm_group g, void *buf, size_t count, tgc_comm_dtype dt, int root)
{
    nccl_rank *r = tgc_comm_impl(c);
    int rc;
    ncclComm_t comm = rank_comm(c, r, g, &rc);
    if (!comm) return rc;
    /* root is a position in the group: the split's rank (key = group rank). */
    ncclResult_t res = api.ncclBroadcast(buf, buf, count, nccl_type(dt), root, comm, r->stream);
    return wait_comm(c, r, comm, "ncclBroadcast", res);
}

/* Point-to-point on bytes over the world communicator (its ranks are the
 * global ranks). */
static int nccl_p2p(tgc_comm *c, const void *send, size_t send_bytes, int dst, void *recv, size_t recv_bytes,
                    int src)
{
    nccl_rank *r = tgc_comm_impl(c);
    int rc;
    ncclComm_t comm = rank_comm(c, r, TGC_COMM_WORLD, &rc);
    if (!comm) return rc;
    bool both = dst >= 0 && src >= 0;
    ncclResult_t res = ncclSuccess;
    if (both) res = api.ncclGroupStart();
    if (res == ncclSuccess && dst >= 0) res = api.ncclSend(send, send_bytes, ncclUint8, dst, comm, r->stream);
    if ((res == ncclSuccess || res == ncclInProgress) && src >= 0)
        res = api.ncclRecv(recv, recv_bytes, ncclUint8, src, comm, r->stream);
    if (both && (res == ncclSuccess || res == ncclInProgress)) res = api.ncclGroupEnd();
    return wait_comm(c, r, comm, both ? "ncclSend/ncclRecv" : dst >= 0 ? "ncclSend" : "ncclRecv", res);
}

static int nccl_send(tgc_comm *c, const void *buf, size_t bytes, int peer, int tag)
{
    (void)tag; /* NCCL matches messages in order; tags are not sent */
    if (peer == tgc_comm_rank(c))
        return tgc_comm_fail(c, TGC_COMM_ERR_ARG, peer, "a send to itself would never be matched (use sendrecv)");
    return nccl_p2p(c, buf, bytes, peer, NULL, 0, -1);
}

static int nccl_recv(tgc_comm *c, void *buf, size_t bytes, int peer, int tag)
{
    (void)tag;
    if (peer == tgc_comm_rank(c))
        return tgc_comm_fail(c, TGC_COMM_ERR_ARG, peer, "a receive from itself would never be matched (use sendrecv)");
    return nccl_p2p(c, NULL, 0, -1, buf, bytes, peer);
}

static int nccl_sendrecv(tgc_comm *c, const void *send, size_t send_bytes, int dst, int stag, void *recv,
                         size_t recv_bytes, int src, int rtag)
{
    (void)stag;
    (void)rtag;
    return nccl_p2p(c, send, send_bytes, dst, recv, recv_bytes, src);
}

/* Until the stream has run everything enqueued, or an error, the deadline
 * or an abort. */
static int wait_stream(tgc_comm *c, nccl_rank *r, const char *what)
{
    double deadline = now_s() + tgc_comm_timeout(c);
    for (;;) {
        int rc = check_abort(c, r);
        if (rc) return rc;
        for (int g = 0; g < TGC_COMM_GROUP_COUNT; g++) {
            ncclResult_t st = ncclSuccess;
            if (r->comm[g] && api.ncclCommGetAsyncError(r->comm[g], &st) == ncclSuccess && st != ncclSuccess &&
                st != ncclInProgress)
                return nccl_fail(c, r, r->comm[g], what, st);
        }
        cudaError_t q = api.StreamQuery(r->stream);
        if (q == cudaSuccess) return TGC_COMM_OK;
        if (q != cudaErrorNotReady) {
            char msg[256];
            rt_cuda_ok(q, "cudaStreamQuery", what, msg, sizeof msg);
            return tgc_comm_fail(c, TGC_COMM_ERR_BACKEND, r->rank, "%s", msg);
        }
        if (now_s() > deadline) {
            rank_abort_comms(r);
            return tgc_comm_fail(c, TGC_COMM_ERR_TIMEOUT, r->rank, "%s: the stream did not finish in %g s "
                                 "(a peer is missing?)", what, tgc_comm_timeout(c));
        }
        nap();
    }
}

/* An all-reduce of one element, then a wait for it on the host. */
static int nccl_barrier(tgc_comm *c, tgc_comm_group g)
{
    nccl_rank *r = tgc_comm_impl(c);
    int rc;
    ncclComm_t comm = rank_comm(c, r, g, &rc);
    if (!comm) return rc;
    ncclResult_t res = api.ncclAllReduce(r->one, r->one, 1, ncclFloat32, ncclSum, comm, r->stream);
    rc = wait_comm(c, r, comm, "ncclAllReduce (barrier)", res);
    return rc ? rc : wait_stream(c, r, "barrier");
}

/* Marks the world failed. The rank's own thread aborts its communicators
 * now; on another thread that waits for the owner's next call or poll. */
static void nccl_abort(tgc_comm *c, int rank, const char *reason)
{
    nccl_rank *r = tgc_comm_impl(c);
    world_mark_failed(r->w, rank, reason);
    if (r->connected && pthread_equal(pthread_self(), r->owner)) rank_abort_comms(r);
}

static void rank_free(nccl_rank *r)
{
    if (r->one) r->cu->Free(r->one);
    if (!r->dead)
        for (int g = TGC_COMM_GROUP_COUNT - 1; g >= 0; g--) {
            ncclComm_t comm = r->comm[g];
            if (!comm || (g != TGC_COMM_WORLD && comm == r->comm[TGC_COMM_WORLD])) continue;
            /* Finalize flushes pending work (non-blocking: poll it); a
             * communicator that does not finish in time is aborted. */
            ncclResult_t res = api.ncclCommFinalize(comm), st = res;
            double deadline = now_s() + r->w->timeout;
            while (res == ncclSuccess && st == ncclInProgress && now_s() < deadline) {
                nap();
                if (api.ncclCommGetAsyncError(comm, &st) != ncclSuccess) break;
            }
            if (st == ncclSuccess) api.ncclCommDestroy(comm);
            else api.ncclCommAbort(comm);
        }
    if (r->owns_world) tgc_nccl_world_free(r->w);
    free(r);
}

static void nccl_free(tgc_comm *c)
{
    rank_free(tgc_comm_impl(c));
    tgc_comm_destroy(c);
}

static const tgc_comm_vtable nccl_vtable = {
    .name = "nccl",
    .all_reduce = nccl_all_reduce,
    .all_gather = nccl_all_gather,
    .reduce_scatter = nccl_reduce_scatter,
    .reduce_scatter_v = nccl_reduce_scatter_v,
    .broadcast = nccl_broadcast,
    .send = nccl_send,
    .recv = nccl_recv,
    .sendrecv = nccl_sendrecv,
    .barrier = nccl_barrier,
    .abort = nccl_abort,
    .free = nccl_free,
};

int tgc_comm_nccl_sync(tgc_comm *c)
{
    if (!c || strcmp(tgc_comm_backend(c), "nccl") != 0) return TGC_COMM_ERR_ARG;
    nccl_rank *r = tgc_comm_impl(c);
    int rc;
    if (!rank_comm(c, r, TGC_COMM_WORLD, &rc)) return rc;
    return wait_stream(c, r, "sync");
}

/* ---- bootstrap ------------------------------------------------------------------------ */

static struct tgc_nccl_world *world_alloc(const tgc_topology *topo, diag *d)
{
    tgc_topology t;
    if (!topo || tgc_topology_init(&t, topo->t, topo->d, topo->p)) {
        diag_error_plain(d, "NCCL: invalid topology (each of t, d, p must be >= 1, n <= %d)", TGC_COMM_MAX_RANKS);
        return NULL;
    }
    double timeout = TGC_COMM_DEFAULT_TIMEOUT;
    if (tgc_comm_timeout_from_env(&timeout)) {
        diag_error_plain(d, "NCCL: TGC_COMM_TIMEOUT must be a positive number of seconds");
        return NULL;
    }
    if (!tgc_nccl_load(d)) return NULL;
    struct tgc_nccl_world *w = xcalloc(1, sizeof *w);
    w->topo = t;
    w->n = tgc_topology_size(&t);
    w->timeout = timeout;
    w->failed_rank = -1;
    atomic_init(&w->aborted, 0);
    pthread_mutex_init(&w->mu, NULL);
    return w;
}

tgc_nccl_world *tgc_nccl_world_new(const tgc_topology *topo, diag *d)
{
    struct tgc_nccl_world *w = world_alloc(topo, d);
    if (!w) return NULL;
    ncclResult_t res = api.ncclGetUniqueId(&w->id);
    if (res != ncclSuccess) {
        diag_error_plain(d, "NCCL: ncclGetUniqueId: %s", api.ncclGetErrorString(res));
        tgc_nccl_world_free(w);
        return NULL;
    }
    return w;
}

void tgc_nccl_world_free(tgc_nccl_world *w)
{
    if (!w) return;
    pthread_mutex_destroy(&w->mu);
    free(w);
}

static nccl_rank *rank_new(struct tgc_nccl_world *w, int rank)
{
    nccl_rank *r = xcalloc(1, sizeof *r);
    r->w = w;
    r->rank = rank;
    return r;
}

/* Reports a failed join with what the communicator layer recorded. */
static tgc_comm *join_fail(tgc_comm *c, diag *d, const char *what)
{
    diag_error_plain(d, "NCCL: %s: %s", what, tgc_comm_error(c));
    /* The others must not wait for this rank; a half-made communicator is
     * aborted, not finalized. */
    nccl_rank *r = tgc_comm_impl(c);
    world_mark_failed(r->w, r->rank, tgc_comm_error(c));
    rank_abort_comms(r);
    tgc_comm_free(c);
    return NULL;
}

/* The world communicator, the group splits and the barrier's scratch. */
static tgc_comm *connect_rank(tgc_comm *c, nccl_rank *r, diag *d)
{
    struct tgc_nccl_world *w = r->w;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t res = api.ncclCommInitRankConfig(&r->comm[TGC_COMM_WORLD], w->n, w->id, r->rank, &cfg);
    if (res != ncclSuccess && res != ncclInProgress) {
        tgc_comm_fail(c, TGC_COMM_ERR_BACKEND, r->rank, "ncclCommInitRankConfig: %s", api.ncclGetErrorString(res));
        return join_fail(c, d, "creating the world communicator");
    }
    if (wait_comm(c, r, r->comm[TGC_COMM_WORLD], "ncclCommInitRankConfig", res))
        return join_fail(c, d, "creating the world communicator");
    /* Every rank splits in the same order: TP, DP, PP (collective over the world). */
    for (int g = TGC_COMM_TP; g < TGC_COMM_GROUP_COUNT; g++) {
        if (tgc_topology_group_size(&w->topo, (tgc_comm_group)g) == w->n) {
            r->comm[g] = r->comm[TGC_COMM_WORLD];
            continue;
        }
        int color = tgc_topology_group_index(&w->topo, r->rank, (tgc_comm_group)g);
        int key = tgc_topology_group_rank(&w->topo, r->rank, (tgc_comm_group)g);
        ncclConfig_t scfg = NCCL_CONFIG_INITIALIZER;
        scfg.blocking = 0;
        res = api.ncclCommSplit(r->comm[TGC_COMM_WORLD], color, key, &r->comm[g], &scfg);
        if (res != ncclSuccess && res != ncclInProgress) {
            tgc_comm_fail(c, TGC_COMM_ERR_BACKEND, r->rank, "ncclCommSplit: %s", api.ncclGetErrorString(res));
            return join_fail(c, d, "splitting the groups");
        }
        /* The split is complete when both communicators are. */
        if (wait_comm(c, r, r->comm[TGC_COMM_WORLD], "ncclCommSplit", res) ||
            wait_comm(c, r, r->comm[g], "ncclCommSplit", ncclInProgress))
            return join_fail(c, d, "splitting the groups");
    }
    char msg[256];
    if (!rt_cuda_ok(r->cu->Malloc((void **)&r->one, sizeof(float)), "cudaMalloc", "the barrier's scratch", msg,
                    sizeof msg)) {
        r->one = NULL;
        tgc_comm_fail(c, TGC_COMM_ERR_BACKEND, r->rank, "%s", msg);
        return join_fail(c, d, "allocating the barrier's scratch");
    }
    r->connected = true;
    return c;
}

/* A rank's communicator before it connects: the device selected on this
 * thread, the CUDA runtime loaded. NULL after reporting (freeing w when it
 * is the rank's own). */
static tgc_comm *prepare(struct tgc_nccl_world *w, bool owns, int rank, int device, void *stream, diag *d)
{
    if (rank < 0 || rank >= w->n) {
        diag_error_plain(d, "NCCL: rank %d outside the world of %d ranks", rank, w->n);
        if (owns) tgc_nccl_world_free(w);
        return NULL;
    }
    const rt_cuda_api *cu = rt_cuda_load(d);
    if (cu && !api.StreamQuery) {
        void *h = dlopen(rt_cuda_library_path(), RTLD_NOW | RTLD_NOLOAD);
        if (h) *(void **)&api.StreamQuery = dlsym(h, "cudaStreamQuery");
    }
    char msg[256];
    if (!cu || !api.StreamQuery || !rt_cuda_ok(cu->SetDevice(device), "cudaSetDevice", "joining NCCL", msg, sizeof msg)) {
        if (cu) diag_error_plain(d, "NCCL: rank %d: %s", rank, api.StreamQuery ? msg : "cudaStreamQuery is missing");
        if (owns) tgc_nccl_world_free(w);
        return NULL;
    }
    nccl_rank *r = rank_new(w, rank);
    r->owns_world = owns;
    r->owner = pthread_self();
    r->cu = cu;
    r->stream = (cudaStream_t)stream;
    tgc_comm *c = tgc_comm_create(&nccl_vtable, r, &w->topo, rank);
    if (!c) {
        r->owns_world = false;
        rank_free(r);
        if (owns) tgc_nccl_world_free(w);
        diag_error_plain(d, "NCCL: out of memory");
        return NULL;
    }
    tgc_comm_set_timeout(c, w->timeout);
    return c;
}

static tgc_comm *join(struct tgc_nccl_world *w, bool owns, int rank, int device, void *stream, diag *d)
{
    tgc_comm *c = prepare(w, owns, rank, device, stream, d);
    return c ? connect_rank(c, tgc_comm_impl(c), d) : NULL;
}

tgc_comm *tgc_comm_nccl_join(tgc_nccl_world *w, int rank, int device, void *stream, diag *d)
{
    if (!w) {
        diag_error_plain(d, "NCCL: no world");
        return NULL;
    }
    return join(w, false, rank, device, stream, d);
}

/* A variable that, when set, must be the number `want`: false after
 * reporting what it says against what the caller has. */
static bool env_agrees(const char *name, long want, const char *what, diag *d)
{
    const char *v = getenv(name);
    if (!v || !*v) return true;
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x != want) {
        diag_error_plain(d, "NCCL: %s=%s but %s is %ld", name, v, what, want);
        return false;
    }
    return true;
}

tgc_comm *tgc_comm_nccl_join_env(const tgc_topology *topo, int rank, int device, void *stream, diag *d)
{
    char addr[300];
    if (!tgc_comm_nccl_env_addr(addr, sizeof addr, d)) return NULL;
    struct tgc_nccl_world *w = world_alloc(topo, d);
    if (!w) return NULL;
    /* torchrun's variables, where set, must say what the caller was told. */
    bool ok = env_agrees("RANK", rank, "this process's rank", d) &&
              env_agrees("WORLD_SIZE", w->n, "the plan's t x d x p", d);
    if (ok) {
        diag quiet;
        FILE *null = fopen("/dev/null", "w");
        diag_init(&quiet, null ? null : stderr);
        int devices = rt_cuda_device_count(&quiet);
        diag_free(&quiet);
        if (null) fclose(null);
        const char *lr = getenv("LOCAL_RANK"), *vis = getenv("CUDA_VISIBLE_DEVICES");
        if (devices > 0 && (device < 0 || device >= devices)) {
            diag_error_plain(d, "NCCL: %s%s%sdevice %d, but this process sees %d GPU%s%s%s%s", lr ? "LOCAL_RANK=" : "",
                             lr ? lr : "", lr ? ": " : "", device, devices, devices == 1 ? "" : "s",
                             vis ? " (CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "", vis ? ")" : "");
            ok = false;
        }
    }
    if (!ok) {
        tgc_nccl_world_free(w);
        return NULL;
    }
    /* With NCCL_COMM_ID set, every process gets the same id and rank 0
     * serves the bootstrap at that address. */
    const char *cur = getenv("NCCL_COMM_ID"); /* set already: read only (ranks on threads in a test) */
    if ((!cur || strcmp(cur, addr) != 0) && setenv("NCCL_COMM_ID", addr, 1) != 0) {
        diag_error_plain(d, "NCCL: cannot set NCCL_COMM_ID=%s", addr);
        tgc_nccl_world_free(w);
        return NULL;
    }
    ncclResult_t res = api.ncclGetUniqueId(&w->id);
    if (res != ncclSuccess) {
        diag_error_plain(d, "NCCL: ncclGetUniqueId with NCCL_COMM_ID=%s: %s", addr, api.ncclGetErrorString(res));
        tgc_nccl_world_free(w);
        return NULL;
    }
    return join(w, true, rank, device, stream, d);
}

tgc_comm *tgc_comm_nccl_join_host(tgc_comm *host, int device, void *stream, diag *d)
{
    if (!host) {
        diag_error_plain(d, "NCCL: no host communicator to exchange the NCCL id over");
        return NULL;
    }
    int rank = tgc_comm_rank(host), n = tgc_comm_size(host);
    /* Every process prepares on its own (the library, the device, rank 0's
     * id); then all learn whether all are ready, naming the first that is
     * not, so none waits in ncclCommInitRank for a rank that will never
     * come. */
    struct tgc_nccl_world *w = world_alloc(tgc_comm_topology(host), d);
    tgc_comm *c = w ? prepare(w, true, rank, device, stream, d) : NULL;
    if (c && rank == 0) {
        ncclResult_t res = api.ncclGetUniqueId(&w->id);
        if (res != ncclSuccess) {
            diag_error_plain(d, "NCCL: rank 0: ncclGetUniqueId: %s", api.ncclGetErrorString(res));
            tgc_comm_free(c);
            c = NULL;
        }
    }
    double first_bad = c ? 0.0 : (double)(n - rank); /* the max over ranks names the lowest */
    if (tgc_comm_all_reduce(host, TGC_COMM_WORLD, &first_bad, 1, TGC_COMM_F64, TGC_COMM_MAX) != TGC_COMM_OK) {
        diag_error_plain(d, "NCCL: rank %d: telling the others it is ready over the %s communicator: %s", rank,
                         tgc_comm_backend(host), tgc_comm_error(host));
        if (c) tgc_comm_free(c);
        return NULL;
    }
    if (first_bad != 0.0) {
        if (c) {
            diag_error_plain(d, "NCCL: rank %d: rank %d could not prepare NCCL (its own message says why)", rank,
                             n - (int)first_bad);
            tgc_comm_free(c);
        }
        return NULL;
    }
    /* The id's bytes travel over the host communicator. */
    unsigned char id[sizeof(ncclUniqueId)];
    if (rank == 0) memcpy(id, &w->id, sizeof id);
    if (tgc_comm_broadcast(host, TGC_COMM_WORLD, id, sizeof id, TGC_COMM_BYTE, 0) != TGC_COMM_OK) {
        diag_error_plain(d, "NCCL: rank %d: the NCCL id did not arrive over the %s communicator: %s", rank,
                         tgc_comm_backend(host), tgc_comm_error(host));
        tgc_comm_free(c);
        return NULL;
    }
    memcpy(&w->id, id, sizeof id);
    return connect_rank(c, tgc_comm_impl(c), d);
}

tgc_comm *tgc_comm_nccl_unconnected(tgc_nccl_world *w, int rank)
{
    if (!w || rank < 0 || rank >= w->n) return NULL;
    nccl_rank *r = rank_new(w, rank);
    tgc_comm *c = tgc_comm_create(&nccl_vtable, r, &w->topo, rank);
    if (!c) {
        free(r);
        return NULL;
    }
    tgc_comm_set_timeout(c, w->timeout);
    return c;
}

#endif
