/* Unit tests of the device-local communicator (runtime/comm/comm_device.h):
 * rank threads of a local world, each with a fake executor on the device
 * simulator (or cpu), whose buffers are device memory. Every call is made
 * twice with the same data — on the device communicator over device
 * buffers, and on a second local world over host copies — and the results
 * must agree bit for bit (memcmp), as must the statistics. The sim
 * buffers are really inaccessible to host code (a child process that
 * reads one dies), so a direct touch by the communicator would fault.
 * Then aborts, a failing rank, mismatched calls and backends, a timeout and
 * bad creations.
 *
 * The CHECK counters of check.h are not thread-safe, so rank threads count
 * their own failures (RCHECK) and the main thread checks the totals. */
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "runtime/comm/comm.h"
#include "runtime/comm/comm_device.h"
#include "runtime/exec.h"

#define MAX_RANKS 8
#define GUARD 64 /* bytes past each device result that must stay untouched */
#define ARRAY_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ---- helpers -------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static size_t dt_size(tgc_comm_dtype dt) { return dt == TGC_COMM_F32 ? 4 : dt == TGC_COMM_F64 ? 8 : 1; }

/* Element i of rank r's data for `seed`: values over many magnitudes (a
 * sum in another order gives other bits); with `special`, also NaNs with
 * a payload naming the rank (max keeps the last NaN in group order, so the
 * payload tells the order), infinities and signed zeros. */
static void fill(tgc_comm_dtype dt, int seed, int rank, size_t count, bool special, void *out)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t h = mix(mix((uint64_t)seed * 1000003u + (uint64_t)rank) ^ i);
        int kind = special ? (int)(h >> 60) : 15; /* 0..15: 0-1 NaN, 2 +inf, 3 -inf, 4 -0, 5 +0 */
        if (dt == TGC_COMM_F32) {
            float v = ldexpf((float)((int)(h & 0xffff) - 32768), (int)((h >> 16) % 24) - 12);
            if (kind <= 1) {
                uint32_t bits = 0x7fc00000u | (uint32_t)(rank + 1) | (kind ? 0x80000000u : 0);
                memcpy(&v, &bits, 4);
            } else if (kind <= 5)
                v = kind == 2 ? INFINITY : kind == 3 ? -INFINITY : kind == 4 ? -0.0f : 0.0f;
            ((float *)out)[i] = v;
        } else if (dt == TGC_COMM_F64) {
            double v = ldexp((double)((int64_t)(h & 0xffffffffffull) - (1ll << 39)), (int)((h >> 40) % 40) - 20);
            if (kind <= 1) {
                uint64_t bits = 0x7ff8000000000000ull | (uint64_t)(rank + 1) | (kind ? 1ull << 63 : 0);
                memcpy(&v, &bits, 8);
            } else if (kind <= 5)
                v = kind == 2 ? INFINITY : kind == 3 ? -INFINITY : kind == 4 ? -0.0 : 0.0;
            ((double *)out)[i] = v;
        } else
            ((unsigned char *)out)[i] = (unsigned char)h;
    }
}

/* ---- per-rank state ------------------------------------------------------------- */

typedef struct rank_state {
    int rank, fails;
    rt_exec e;          /* a fake executor: the backend's operations only use e->be and e->err */
    tgc_comm *dev, *ref; /* the communicator under test; local on host copies */
    diag d;
    long calls;         /* calls compared */
} rank_state;

typedef struct suite {
    const rt_backend_ops *be;
    tgc_comm_local_world *ref;
    const size_t *counts;
    int ncounts, seed;
    rank_state ranks[MAX_RANKS];
} suite;

#define RCHECK(rk, cond)                                                                          \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "%s:%d: rank %d: check failed: %s\n", __FILE__, __LINE__, (rk)->rank, #cond); \
            (rk)->fails++;                                                                        \
        }                                                                                         \
    } while (0)

#define RCHECK_OK(rk, c, rc)                                                                      \
    do {                                                                                          \
        int rc_ = (rc);                                                                           \
        if (rc_ != TGC_COMM_OK) {                                                                 \
            fprintf(stderr, "%s:%d: rank %d: %s (%s)\n", __FILE__, __LINE__, (rk)->rank,          \
                    tgc_comm_status_name(rc_), tgc_comm_error(c));                                \
            (rk)->fails++;                                                                        \
        }                                                                                         \
    } while (0)

/* A device buffer holding host[0 .. bytes) followed by GUARD bytes of 0xee. */
static unsigned char *dev_put(rank_state *rk, const void *host, size_t bytes)
{
    unsigned char *p = rt_exec_alloc(&rk->e, (int64_t)(bytes + GUARD), "a test buffer", &rk->d);
    unsigned char guard[GUARD];
    memset(guard, 0xee, sizeof guard);
    RCHECK(rk, p != NULL);
    if (!p) return NULL;
    RCHECK(rk, rk->e.be->host_memory || rt_sim_owns(p));
    RCHECK(rk, rt_exec_write(&rk->e, p, host, bytes));
    RCHECK(rk, rt_exec_write(&rk->e, p + bytes, guard, GUARD));
    return p;
}

/* The device buffer p (bytes + GUARD) equals want and its guard is intact;
 * releases it. */
static void dev_check(rank_state *rk, unsigned char *p, const void *want, size_t bytes)
{
    if (!p) return;
    unsigned char *got = malloc(bytes + GUARD);
    RCHECK(rk, rt_exec_read(&rk->e, p, got, bytes + GUARD));
    RCHECK(rk, memcmp(got, want, bytes) == 0);
    bool guard_ok = true;
    for (size_t i = 0; i < GUARD; i++) guard_ok = guard_ok && got[bytes + i] == 0xee;
    RCHECK(rk, guard_ok);
    free(got);
    rt_exec_release(&rk->e, p, (int64_t)(bytes + GUARD));
    rk->calls++;
}

/* ---- each call on both communicators ---------------------------------------------- */

static void t_all_reduce(rank_state *rk, tgc_comm_group gk, tgc_comm_dtype dt, tgc_comm_op op, size_t count, int seed)
{
    size_t bytes = count * dt_size(dt);
    unsigned char *h = malloc(bytes + 1);
    fill(dt, seed, rk->rank, count, op == TGC_COMM_MAX, h);
    unsigned char *d = dev_put(rk, h, bytes);
    RCHECK_OK(rk, rk->dev, tgc_comm_all_reduce(rk->dev, gk, d, count, dt, op));
    RCHECK_OK(rk, rk->ref, tgc_comm_all_reduce(rk->ref, gk, h, count, dt, op));
    dev_check(rk, d, h, bytes);
    free(h);
}

static void t_reduce_scatter(rank_state *rk, tgc_comm_group gk, tgc_comm_dtype dt, tgc_comm_op op, size_t count,
                             int seed, bool in_place)
{
    int g = tgc_comm_group_size(rk->ref, gk), me = tgc_comm_group_rank(rk->ref, gk);
    size_t bytes = count * dt_size(dt), full = bytes * (size_t)g;
    unsigned char *hs = malloc(full + 1), *hr = malloc(bytes + 1);
    fill(dt, seed, rk->rank, count * (size_t)g, op == TGC_COMM_MAX, hs);
    memset(hr, 0x5a, bytes + 1);
    unsigned char *ds = dev_put(rk, hs, full), *dr = in_place ? NULL : dev_put(rk, hr, bytes);
    unsigned char *drecv = in_place ? (ds ? ds + (size_t)me * bytes : NULL) : dr;
    RCHECK_OK(rk, rk->dev, tgc_comm_reduce_scatter(rk->dev, gk, ds, drecv, count, dt, op));
    unsigned char *hrecv = in_place ? hs + (size_t)me * bytes : hr;
    RCHECK_OK(rk, rk->ref, tgc_comm_reduce_scatter(rk->ref, gk, hs, hrecv, count, dt, op));
    dev_check(rk, ds, hs, full); /* in place: the whole send buffer, the rest untouched */
    if (!in_place) dev_check(rk, dr, hr, bytes);
    free(hs);
    free(hr);
}

static void t_all_gather(rank_state *rk, tgc_comm_group gk, tgc_comm_dtype dt, size_t count, int seed, bool in_place)
{
    int g = tgc_comm_group_size(rk->ref, gk), me = tgc_comm_group_rank(rk->ref, gk);
    size_t bytes = count * dt_size(dt), full = bytes * (size_t)g;
    unsigned char *hs = malloc(bytes + 1), *hr = malloc(full + 1);
    fill(dt, seed, rk->rank, count, false, hs);
    memset(hr, 0x5a, full + 1);
    if (in_place) memcpy(hr + (size_t)me * bytes, hs, bytes);
    unsigned char *dr = dev_put(rk, hr, full), *ds = in_place ? NULL : dev_put(rk, hs, bytes);
    unsigned char *dsend = in_place ? (dr ? dr + (size_t)me * bytes : NULL) : ds;
    RCHECK_OK(rk, rk->dev, tgc_comm_all_gather(rk->dev, gk, dsend, dr, count, dt));
    RCHECK_OK(rk, rk->ref, tgc_comm_all_gather(rk->ref, gk, in_place ? hr + (size_t)me * bytes : hs, hr, count, dt));
    dev_check(rk, dr, hr, full);
    if (!in_place) dev_check(rk, ds, hs, bytes); /* the send buffer is only read */
    free(hs);
    free(hr);
}

static void t_broadcast(rank_state *rk, tgc_comm_group gk, tgc_comm_dtype dt, size_t count, int seed, int root)
{
    size_t bytes = count * dt_size(dt);
    unsigned char *h = malloc(bytes + 1);
    fill(dt, seed, rk->rank, count, false, h);
    unsigned char *d = dev_put(rk, h, bytes);
    RCHECK_OK(rk, rk->dev, tgc_comm_broadcast(rk->dev, gk, d, count, dt, root));
    RCHECK_OK(rk, rk->ref, tgc_comm_broadcast(rk->ref, gk, h, count, dt, root));
    dev_check(rk, d, h, bytes);
    free(h);
}

static void t_group(rank_state *rk, const suite *s, tgc_comm_group gk)
{
    static const tgc_comm_dtype types[] = {TGC_COMM_F32, TGC_COMM_F64};
    int g = tgc_comm_group_size(rk->ref, gk);
    for (int c = 0; c < s->ncounts; c++) {
        size_t count = s->counts[c];
        int seed = s->seed + 97 * c + 13 * (int)gk;
        for (size_t t = 0; t < ARRAY_COUNT(types); t++) {
            t_all_reduce(rk, gk, types[t], TGC_COMM_SUM, count, seed + 1);
            t_all_reduce(rk, gk, types[t], TGC_COMM_MAX, count, seed + 2);
            t_reduce_scatter(rk, gk, types[t], TGC_COMM_SUM, count, seed + 3, false);
            t_reduce_scatter(rk, gk, types[t], TGC_COMM_MAX, count, seed + 4, true);
            t_all_gather(rk, gk, types[t], count, seed + 5, c % 2 == 0);
            t_broadcast(rk, gk, types[t], count, seed + 6, (c + (int)t) % g);
        }
        t_all_gather(rk, gk, TGC_COMM_BYTE, count, seed + 7, c % 2 == 1);
        t_broadcast(rk, gk, TGC_COMM_BYTE, count, seed + 8, g - 1);
    }
    RCHECK_OK(rk, rk->dev, tgc_comm_barrier(rk->dev, gk));
    RCHECK_OK(rk, rk->ref, tgc_comm_barrier(rk->ref, gk));
}

/* Point-to-point on a ring of the world: two tags received in the other
 * order, a sendrecv with one tag and one with a tag per message, and an
 * empty message. */
static void t_p2p(rank_state *rk, int seed)
{
    int n = tgc_comm_size(rk->ref), r = rk->rank, next = (r + 1) % n, prev = (r + n - 1) % n;
    float a[5];
    double b[9];
    unsigned char c[13], cr[13];
    fill(TGC_COMM_F32, seed, r, 5, true, a);
    fill(TGC_COMM_F64, seed + 1, r, 9, false, b);
    fill(TGC_COMM_BYTE, seed + 2, r, 13, false, c);
    unsigned char *da = dev_put(rk, a, sizeof a), *db = dev_put(rk, b, sizeof b);
    unsigned char *dc = dev_put(rk, c, sizeof c), *dcr = dev_put(rk, c, sizeof c), *dz = dev_put(rk, c, 0);
    RCHECK_OK(rk, rk->dev, tgc_comm_send(rk->dev, da, 5, TGC_COMM_F32, next, 7));
    RCHECK_OK(rk, rk->dev, tgc_comm_send(rk->dev, db, 9, TGC_COMM_F64, next, 8));
    RCHECK_OK(rk, rk->dev, tgc_comm_send(rk->dev, dz, 0, TGC_COMM_BYTE, next, 9));
    RCHECK_OK(rk, rk->dev, tgc_comm_recv(rk->dev, db, 9, TGC_COMM_F64, prev, 8));
    RCHECK_OK(rk, rk->dev, tgc_comm_recv(rk->dev, da, 5, TGC_COMM_F32, prev, 7));
    RCHECK_OK(rk, rk->dev, tgc_comm_recv(rk->dev, dz, 0, TGC_COMM_BYTE, prev, 9));
    RCHECK_OK(rk, rk->dev, tgc_comm_sendrecv(rk->dev, dc, 13, next, dcr, 13, prev, TGC_COMM_BYTE, 11));
    RCHECK_OK(rk, rk->dev,
              tgc_comm_sendrecv_tags(rk->dev, dcr, 13, next, 40 + r, dc, 13, prev, 40 + prev, TGC_COMM_BYTE));
    RCHECK_OK(rk, rk->ref, tgc_comm_send(rk->ref, a, 5, TGC_COMM_F32, next, 7));
    RCHECK_OK(rk, rk->ref, tgc_comm_send(rk->ref, b, 9, TGC_COMM_F64, next, 8));
    RCHECK_OK(rk, rk->ref, tgc_comm_send(rk->ref, c, 0, TGC_COMM_BYTE, next, 9));
    RCHECK_OK(rk, rk->ref, tgc_comm_recv(rk->ref, b, 9, TGC_COMM_F64, prev, 8));
    RCHECK_OK(rk, rk->ref, tgc_comm_recv(rk->ref, a, 5, TGC_COMM_F32, prev, 7));
    RCHECK_OK(rk, rk->ref, tgc_comm_recv(rk->ref, c, 0, TGC_COMM_BYTE, prev, 9));
    RCHECK_OK(rk, rk->ref, tgc_comm_sendrecv(rk->ref, c, 13, next, cr, 13, prev, TGC_COMM_BYTE, 11));
    RCHECK_OK(rk, rk->ref, tgc_comm_sendrecv_tags(rk->ref, cr, 13, next, 40 + r, c, 13, prev, 40 + prev, TGC_COMM_BYTE));
    /* What arrived is prev's data (n = 1: one's own). */
    float want_a[5];
    fill(TGC_COMM_F32, seed, prev, 5, true, want_a);
    RCHECK(rk, memcmp(a, want_a, sizeof a) == 0);
    dev_check(rk, da, a, sizeof a);
    dev_check(rk, db, b, sizeof b);
    dev_check(rk, dc, c, sizeof c);
    dev_check(rk, dcr, cr, sizeof cr);
    dev_check(rk, dz, c, 0);
}

static bool stats_equal(const tgc_comm_stats *a, const tgc_comm_stats *b)
{
    for (int k = 0; k < TGC_COMM_KIND_COUNT; k++)
        for (int g = 0; g < TGC_COMM_GROUP_COUNT; g++)
            if (a->calls[k][g] != b->calls[k][g] || a->bytes[k][g] != b->bytes[k][g]) return false;
    return true;
}

static int suite_rank(tgc_comm *host, void *arg)
{
    suite *s = arg;
    int r = tgc_comm_rank(host);
    rank_state *rk = &s->ranks[r];
    rk->rank = r;
    rk->e = (rt_exec){.be = s->be};
    diag_init(&rk->d, stderr);
    rk->ref = tgc_comm_local_world_comm(s->ref, r);
    rk->dev = tgc_comm_device_new(host, &rk->e, &rk->d);
    RCHECK(rk, rk->dev != NULL);
    if (!rk->dev) return 1;
    RCHECK(rk, strcmp(tgc_comm_backend(rk->dev), "device-local") == 0);
    RCHECK(rk, tgc_comm_rank(rk->dev) == r && tgc_comm_size(rk->dev) == tgc_comm_size(host));
    RCHECK(rk, tgc_comm_timeout(rk->dev) == tgc_comm_timeout(host));
    for (int g = 0; g < TGC_COMM_GROUP_COUNT; g++) {
        RCHECK(rk, tgc_comm_group_size(rk->dev, (tgc_comm_group)g) == tgc_comm_group_size(host, (tgc_comm_group)g));
        RCHECK(rk, tgc_comm_group_rank(rk->dev, (tgc_comm_group)g) == tgc_comm_group_rank(host, (tgc_comm_group)g));
    }
    for (int g = 0; g < TGC_COMM_GROUP_COUNT; g++) t_group(rk, s, (tgc_comm_group)g);
    t_p2p(rk, s->seed + 5000);
    /* The generic layer counts the device communicator's calls as local's. */
    RCHECK(rk, stats_equal(tgc_comm_stats_get(rk->dev), tgc_comm_stats_get(rk->ref)));
    RCHECK(rk, tgc_comm_stats_calls(tgc_comm_stats_get(rk->dev), TGC_COMM_ALL_REDUCE) > 0);
    RCHECK(rk, rk->d.nerrors == 0);
    tgc_comm_free(rk->dev);
    diag_free(&rk->d);
    return 0;
}

static void test_suite(const rt_backend_ops *be, int t, int d, int p, int seed)
{
    static const size_t counts[] = {0, 1, 7, 33, 1000, 4099};
    tgc_topology topo;
    CHECK(tgc_topology_init(&topo, t, d, p) == TGC_COMM_OK);
    tgc_comm_local_options opt = {.timeout_s = 60};
    tgc_comm_local_world *host = tgc_comm_local_world_new_topo(&topo, &opt, NULL);
    tgc_comm_local_world *ref = tgc_comm_local_world_new_topo(&topo, &opt, NULL);
    CHECK(host && ref);
    if (!host || !ref) return;
    suite *s = calloc(1, sizeof *s);
    s->be = be, s->ref = ref, s->counts = counts, s->ncounts = (int)ARRAY_COUNT(counts), s->seed = seed;
    double t0 = now_s();
    CHECK(tgc_comm_local_world_run(host, suite_rank, s) == 0);
    int n = tgc_topology_size(&topo), fails = 0;
    long calls = 0;
    for (int r = 0; r < n; r++) {
        fails += s->ranks[r].fails;
        calls += s->ranks[r].calls;
        CHECK(s->ranks[r].fails == 0);
    }
    CHECK(calls > 0);
    printf("%s (%d,%d,%d): %ld results compared, %d failed, %.2f s\n", be->name, t, d, p, calls, fails,
           now_s() - t0);
    free(s);
    tgc_comm_local_world_free(host);
    tgc_comm_local_world_free(ref);
}

/* ---- the simulator really hides its memory ---------------------------------------- */

static void test_sim_faults(void)
{
    rt_exec e = {.be = &rt_backend_sim};
    diag d;
    diag_init(&d, stderr);
    float v[4] = {1, 2, 3, 4}, back[4] = {0};
    float *p = rt_exec_alloc(&e, sizeof v, "a test buffer", &d);
    CHECK(p != NULL);
    if (!p) return;
    CHECK(rt_sim_owns(p));
    CHECK(rt_exec_write(&e, p, v, sizeof v));
    CHECK(rt_exec_read(&e, p, back, sizeof back));
    CHECK(memcmp(v, back, sizeof v) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        volatile float x = *(volatile float *)p; /* must fault: no backend operation is running */
        (void)x;
        _exit(0);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    CHECK(!(WIFEXITED(st) && WEXITSTATUS(st) == 0));
    CHECK(!WIFSIGNALED(st) || WTERMSIG(st) == SIGSEGV);
    rt_exec_release(&e, p, sizeof v);
    diag_free(&d);
}

/* ---- failures ------------------------------------------------------------------------- */

typedef struct fault_case {
    int mode;
    int rc[MAX_RANKS], after[MAX_RANKS];
    bool made[MAX_RANKS];
    char msg[MAX_RANKS][512];
    double secs[MAX_RANKS];
} fault_case;

enum { F_ABORT, F_RETURN, F_MISMATCH, F_BACKENDS, F_TIMEOUT, F_NO_EXEC, F_DEVICE };

/* sim whose reduce fails on one executor: a device error in the middle of
 * a collective. */
static rt_backend_ops faulty_sim;
static _Atomic(rt_exec *) faulty_exec;

static bool faulty_reduce(rt_exec *e, void *dst, const void *src, int64_t n, ir_dtype t, rt_reduce_op op)
{
    if (e == atomic_load(&faulty_exec)) {
        snprintf(e->err, sizeof e->err, "injected device fault");
        return false;
    }
    return rt_backend_sim.reduce(e, dst, src, n, t, op);
}

#define FAULT_COUNT 4099 /* every rank of 4 reduces a slice */

static int fault_rank(tgc_comm *host, void *arg)
{
    fault_case *fc = arg;
    int r = tgc_comm_rank(host);
    rt_exec e = {.be = fc->mode == F_BACKENDS && r == 0 ? &rt_backend_cpu
                       : fc->mode == F_DEVICE                ? &faulty_sim
                                                             : &rt_backend_sim};
    if (fc->mode == F_DEVICE && r == 1) atomic_store(&faulty_exec, &e);
    tgc_comm *c = tgc_comm_device_new(host, fc->mode == F_NO_EXEC && r == 1 ? NULL : &e, NULL);
    fc->made[r] = c != NULL;
    if (!c) return 0;
    diag d;
    diag_init(&d, stderr);
    float x[6] = {1, 2, 3, 4, 5, 6};
    float *buf = rt_exec_alloc(&e, FAULT_COUNT * sizeof(float), "a test buffer", &d);
    rt_exec_write(&e, buf, x, sizeof x);
    double t0 = now_s();
    int rc = -1;
    if (fc->mode == F_ABORT && r == 3) {
        sleep_ms(200);
        rc = tgc_comm_abort(c, 3, "injected fault");
    } else if (fc->mode == F_ABORT) {
        /* Rank 0 waits in a world barrier, rank 1 in a DP all-reduce with
         * rank 3, rank 2 in a receive from it. */
        rc = r == 0   ? tgc_comm_barrier(c, TGC_COMM_WORLD)
             : r == 1 ? tgc_comm_all_reduce(c, TGC_COMM_DP, buf, 5, TGC_COMM_F32, TGC_COMM_SUM)
                      : tgc_comm_recv(c, buf, 5, TGC_COMM_F32, 3, 0);
    } else if ((fc->mode == F_RETURN || fc->mode == F_TIMEOUT) && r == 3) {
        /* Never calls: fails (after the others are waiting) or just leaves. */
        if (fc->mode == F_RETURN) sleep_ms(200);
        rt_exec_release(&e, buf, FAULT_COUNT * sizeof(float));
        tgc_comm_free(c);
        diag_free(&d);
        return fc->mode == F_RETURN ? 5 : 0;
    } else {
        size_t count = fc->mode == F_MISMATCH && r == 1 ? 6 : fc->mode == F_DEVICE ? FAULT_COUNT : 5;
        rc = tgc_comm_all_reduce(c, TGC_COMM_WORLD, buf, count, TGC_COMM_F32, TGC_COMM_SUM);
    }
    fc->rc[r] = rc;
    fc->secs[r] = now_s() - t0;
    snprintf(fc->msg[r], sizeof fc->msg[r], "%s", tgc_comm_error(c));
    /* Later calls fail at once too. */
    fc->after[r] = tgc_comm_all_reduce(c, TGC_COMM_TP, buf, 5, TGC_COMM_F32, TGC_COMM_MAX);
    rt_exec_release(&e, buf, FAULT_COUNT * sizeof(float));
    tgc_comm_free(c);
    diag_free(&d);
    if (fc->mode == F_DEVICE && r == 1) atomic_store(&faulty_exec, NULL);
    return 0;
}

static void run_fault(fault_case *fc, int mode, double timeout, int expect_run)
{
    tgc_topology topo;
    tgc_topology_init(&topo, 2, 2, 1);
    tgc_comm_local_options opt = {.timeout_s = timeout};
    tgc_comm_local_world *w = tgc_comm_local_world_new_topo(&topo, &opt, NULL);
    memset(fc, 0, sizeof *fc);
    fc->mode = mode;
    CHECK(tgc_comm_local_world_run(w, fault_rank, fc) == expect_run);
    tgc_comm_local_world_free(w);
}

static void test_abort(void)
{
    fault_case fc;
    run_fault(&fc, F_ABORT, 120, 0);
    for (int r = 0; r < 3; r++) {
        printf("abort: rank %d returned after %.3f s: %s\n", r, fc.secs[r], fc.msg[r]);
        CHECK(fc.rc[r] == TGC_COMM_ERR_ABORTED);
        CHECK(strstr(fc.msg[r], "rank 3 failed: injected fault") != NULL);
        CHECK(fc.secs[r] < 10.0); /* promptly, not after the 120 s timeout */
        CHECK(fc.after[r] == TGC_COMM_ERR_ABORTED);
    }
    CHECK_STR(fc.msg[1], "rank 1: all_reduce(dp): rank 3 failed: injected fault");
    CHECK_STR(fc.msg[2], "rank 2: recv: rank 3 failed: injected fault");
}

static void test_failing_rank(void)
{
    fault_case fc;
    run_fault(&fc, F_RETURN, 120, 5);
    for (int r = 0; r < 3; r++) {
        printf("failing rank: rank %d returned after %.3f s: %s\n", r, fc.secs[r], fc.msg[r]);
        CHECK(fc.rc[r] == TGC_COMM_ERR_ABORTED);
        CHECK(strstr(fc.msg[r], "rank 3 failed: its rank function returned 5") != NULL);
        CHECK(strncmp(fc.msg[r], "rank ", 5) == 0 && strstr(fc.msg[r], ": all_reduce(world): rank 3 failed") != NULL);
        CHECK(fc.secs[r] < 10.0);
        CHECK(fc.after[r] == TGC_COMM_ERR_ABORTED);
    }
}

static void test_mismatch(void)
{
    fault_case fc;
    run_fault(&fc, F_MISMATCH, 120, 0);
    const char *want = "rank 1 called all_reduce(sum) of 6 f32 but rank 0 called all_reduce(sum) of 5 f32";
    for (int r = 0; r < 4; r++) {
        printf("mismatch: rank %d: %s\n", r, fc.msg[r]);
        /* Every rank sees the same descriptions, so every rank reports it. */
        CHECK(fc.rc[r] == TGC_COMM_ERR_MISMATCH);
        CHECK(strstr(fc.msg[r], want) != NULL);
        CHECK(fc.after[r] == TGC_COMM_ERR_ABORTED);
    }
    run_fault(&fc, F_BACKENDS, 120, 0);
    for (int r = 0; r < 4; r++) {
        printf("backends: rank %d: %s\n", r, fc.msg[r]);
        CHECK(fc.rc[r] == TGC_COMM_ERR_MISMATCH);
        CHECK(strstr(fc.msg[r], "rank 1 computes on sim but rank 0 on cpu") != NULL);
    }
}

/* Rank 1's device fails in the middle of an all-reduce: it reports the
 * device's error, the others learn of it at the depart barrier. */
static void test_device_fault(void)
{
    faulty_sim = rt_backend_sim;
    faulty_sim.reduce = faulty_reduce;
    fault_case fc;
    run_fault(&fc, F_DEVICE, 120, 0);
    for (int r = 0; r < 4; r++) {
        printf("device fault: rank %d returned after %.3f s: %s\n", r, fc.secs[r], fc.msg[r]);
        CHECK(fc.secs[r] < 10.0);
    }
    CHECK(fc.rc[1] == TGC_COMM_ERR_BACKEND);
    CHECK(strstr(fc.msg[1], "injected device fault") != NULL);
    CHECK(fc.after[1] == TGC_COMM_ERR_ABORTED);
    for (int r = 0; r < 4; r++) {
        if (r == 1) continue;
        CHECK(fc.rc[r] == TGC_COMM_ERR_ABORTED);
        CHECK(strstr(fc.msg[r], "rank 1 failed: its device work in this all_reduce failed") != NULL);
    }
}

static void test_timeout(void)
{
    fault_case fc;
    run_fault(&fc, F_TIMEOUT, 1, 0);
    int timeouts = 0;
    for (int r = 0; r < 3; r++) {
        printf("timeout: rank %d returned after %.3f s: %s\n", r, fc.secs[r], fc.msg[r]);
        CHECK(fc.rc[r] == TGC_COMM_ERR_TIMEOUT || fc.rc[r] == TGC_COMM_ERR_ABORTED);
        timeouts += fc.rc[r] == TGC_COMM_ERR_TIMEOUT;
        CHECK(strstr(fc.msg[r], "rank 3") != NULL);
        CHECK(fc.secs[r] > 0.9 && fc.secs[r] < 15.0);
        CHECK(fc.after[r] == TGC_COMM_ERR_ABORTED);
    }
    CHECK(timeouts >= 1);
}

static void test_create(void)
{
    diag d;
    diag_init(&d, stderr);
    rt_exec e = {.be = &rt_backend_sim};
    CHECK(tgc_comm_device_new(NULL, &e, &d) == NULL);
    CHECK(d.nerrors == 1);
    diag_free(&d);
    /* A rank without an executor fails, and takes the others with it
     * instead of leaving them waiting. */
    fault_case fc;
    double t0 = now_s();
    run_fault(&fc, F_NO_EXEC, 120, 0);
    for (int r = 0; r < 4; r++) CHECK(!fc.made[r]);
    CHECK(now_s() - t0 < 10.0);
}

int main(void)
{
    test_sim_faults();
    test_suite(&rt_backend_sim, 1, 1, 1, 1);
    test_suite(&rt_backend_sim, 2, 1, 1, 2);
    test_suite(&rt_backend_sim, 1, 3, 1, 3);
    test_suite(&rt_backend_sim, 2, 2, 1, 4);
    test_suite(&rt_backend_sim, 2, 1, 2, 5);
    test_suite(&rt_backend_sim, 3, 1, 2, 6);
    test_suite(&rt_backend_sim, 2, 2, 2, 7);
    test_suite(&rt_backend_cpu, 2, 2, 2, 8);
    test_abort();
    test_failing_rank();
    test_mismatch();
    test_device_fault();
    test_timeout();
    test_create();
    CHECK_DONE();
}
