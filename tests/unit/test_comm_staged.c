/* Unit tests of the staged communicator (runtime/comm/comm_staged.h):
 * host buffers staged through device scratch over a device communicator.
 * Rank threads of a local world, each with a fake executor on the device
 * simulator (whose memory host code cannot touch); `dev` is the
 * device-local communicator over that local world, so the whole stack
 * staged(device-local(local)) runs here. Every call is made twice with
 * the same host data — on the staged communicator and on a second local
 * world — and the results must agree bit for bit (memcmp), with the bytes
 * past every result untouched and the statistics equal; a second pass
 * grows no scratch buffer. Then aborts, a failing rank, mismatched calls,
 * a failed upload, a device fault in dev, a timeout, byte reductions, bad
 * creations and the error mapping over an unconnected nccl communicator.
 *
 * The CHECK counters of check.h are not thread-safe, so rank threads count
 * their own failures (RCHECK) and the main thread checks the totals. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "runtime/comm/comm.h"
#include "runtime/comm/comm_device.h"
#include "runtime/comm/comm_nccl.h"
#include "runtime/comm/comm_staged.h"
#include "runtime/exec.h"

#define MAX_RANKS 8
#define GUARD 64 /* bytes past each host result that must stay untouched */
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
 * a payload naming the rank, infinities and signed zeros. */
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
    rt_exec e;                /* a fake executor: the backend's operations only use e->be and e->err */
    tgc_comm *dev, *st, *ref; /* device-local; staged over it (under test); local on host copies */
    diag d;
    long calls; /* results compared */
} rank_state;

typedef struct suite {
    tgc_comm_local_world *ref;
    const size_t *counts;
    int ncounts, seed;
    rank_state ranks[MAX_RANKS];
} suite;

#define RCHECK(rk, cond)                                                                                   \
    do {                                                                                                   \
        if (!(cond)) {                                                                                     \
            fprintf(stderr, "%s:%d: rank %d: check failed: %s\n", __FILE__, __LINE__, (rk)->rank, #cond); \
            (rk)->fails++;                                                                                 \
        }                                                                                                  \
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

/* A host buffer of bytes + GUARD: a copy of src (NULL: 0x5a) and a guard of 0xee. */
static unsigned char *host_buf(const void *src, size_t bytes)
{
    unsigned char *p = malloc(bytes + GUARD);
    if (src) memcpy(p, src, bytes);
    else memset(p, 0x5a, bytes);
    memset(p + bytes, 0xee, GUARD);
    return p;
}

/* got (bytes + GUARD, from host_buf) equals want and its guard is intact; frees got. */
static void host_check(rank_state *rk, unsigned char *got, const void *want, size_t bytes)
{
    RCHECK(rk, memcmp(got, want, bytes) == 0);
    bool guard_ok = true;
    for (size_t i = 0; i < GUARD; i++) guard_ok = guard_ok && got[bytes + i] == 0xee;
    RCHECK(rk, guard_ok);
    free(got);
    rk->calls++;
}

/* ---- each call on both communicators ---------------------------------------------- */

static void t_all_reduce(rank_state *rk, tgc_comm_group gk, tgc_comm_dtype dt, tgc_comm_op op, size_t count, int seed)
{
    size_t bytes = count * dt_size(dt);
    unsigned char *ref = malloc(bytes + 1);
    fill(dt, seed, rk->rank, count, op == TGC_COMM_MAX, ref);
    unsigned char *h = host_buf(ref, bytes);
    RCHECK_OK(rk, rk->st, tgc_comm_all_reduce(rk->st, gk, h, count, dt, op));
    RCHECK_OK(rk, rk->ref, tgc_comm_all_reduce(rk->ref, gk, ref, count, dt, op));
    host_check(rk, h, ref, bytes);
    free(ref);
}

static void t_reduce_scatter(rank_state *rk, tgc_comm_group gk, tgc_comm_dtype dt, tgc_comm_op op, size_t count,
                             int seed, bool in_place)
{
    int g = tgc_comm_group_size(rk->ref, gk), me = tgc_comm_group_rank(rk->ref, gk);
    size_t bytes = count * dt_size(dt), full = bytes * (size_t)g;
    unsigned char *rs = malloc(full + 1), *rr = malloc(bytes + 1);
    fill(dt, seed, rk->rank, count * (size_t)g, op == TGC_COMM_MAX, rs);
    memset(rr, 0x5a, bytes + 1);
    unsigned char *hs = host_buf(rs, full), *hr = in_place ? NULL : host_buf(NULL, bytes);
    RCHECK_OK(rk, rk->st,
              tgc_comm_reduce_scatter(rk->st, gk, hs, in_place ? hs + (size_t)me * bytes : hr, count, dt, op));
    RCHECK_OK(rk, rk->ref,
              tgc_comm_reduce_scatter(rk->ref, gk, rs, in_place ? rs + (size_t)me * bytes : rr, count, dt, op));
    host_check(rk, hs, rs, full); /* in place: the whole send buffer, the rest untouched */
    if (!in_place) host_check(rk, hr, rr, bytes);
    free(rs);
    free(rr);
}

static void t_all_gather(rank_state *rk, tgc_comm_group gk, tgc_comm_dtype dt, size_t count, int seed, bool in_place)
{
    int g = tgc_comm_group_size(rk->ref, gk), me = tgc_comm_group_rank(rk->ref, gk);
    size_t bytes = count * dt_size(dt), full = bytes * (size_t)g;
    unsigned char *rs = malloc(bytes + 1), *rr = malloc(full + 1);
    fill(dt, seed, rk->rank, count, false, rs);
    memset(rr, 0x5a, full + 1);
    if (in_place) memcpy(rr + (size_t)me * bytes, rs, bytes);
    unsigned char *hr = host_buf(rr, full), *hs = in_place ? NULL : host_buf(rs, bytes);
    RCHECK_OK(rk, rk->st, tgc_comm_all_gather(rk->st, gk, in_place ? hr + (size_t)me * bytes : hs, hr, count, dt));
    RCHECK_OK(rk, rk->ref, tgc_comm_all_gather(rk->ref, gk, in_place ? rr + (size_t)me * bytes : rs, rr, count, dt));
    host_check(rk, hr, rr, full);
    if (!in_place) host_check(rk, hs, rs, bytes); /* the send buffer is only read */
    free(rs);
    free(rr);
}

static void t_broadcast(rank_state *rk, tgc_comm_group gk, tgc_comm_dtype dt, size_t count, int seed, int root)
{
    size_t bytes = count * dt_size(dt);
    unsigned char *ref = malloc(bytes + 1);
    fill(dt, seed, rk->rank, count, false, ref);
    unsigned char *h = host_buf(ref, bytes);
    RCHECK_OK(rk, rk->st, tgc_comm_broadcast(rk->st, gk, h, count, dt, root));
    RCHECK_OK(rk, rk->ref, tgc_comm_broadcast(rk->ref, gk, ref, count, dt, root));
    host_check(rk, h, ref, bytes);
    free(ref);
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
    RCHECK_OK(rk, rk->st, tgc_comm_barrier(rk->st, gk));
    RCHECK_OK(rk, rk->ref, tgc_comm_barrier(rk->ref, gk));
}

/* Point-to-point on a ring of the world: two tags received in the other
 * order (dev is device-local, which keeps tags), a large message, a
 * sendrecv with one tag and one with a tag per message, and an empty
 * message. */
static void t_p2p(rank_state *rk, int seed)
{
    int n = tgc_comm_size(rk->ref), r = rk->rank, next = (r + 1) % n, prev = (r + n - 1) % n;
    enum { NA = 5, NB = 9, NC = 13, NL = 3001 };
    float a[NA];
    double b[NB], *l = malloc(NL * sizeof *l);
    unsigned char c[NC], cr[NC];
    fill(TGC_COMM_F32, seed, r, NA, true, a);
    fill(TGC_COMM_F64, seed + 1, r, NB, false, b);
    fill(TGC_COMM_BYTE, seed + 2, r, NC, false, c);
    fill(TGC_COMM_F64, seed + 3, r, NL, false, l);
    memset(cr, 0x33, sizeof cr);
    unsigned char *ha = host_buf(a, sizeof a), *hb = host_buf(b, sizeof b), *hl = host_buf(l, NL * sizeof *l);
    unsigned char *hc = host_buf(c, sizeof c), *hcr = host_buf(cr, sizeof cr), *hz = host_buf(c, 0);
    RCHECK_OK(rk, rk->st, tgc_comm_send(rk->st, ha, NA, TGC_COMM_F32, next, 7));
    RCHECK_OK(rk, rk->st, tgc_comm_send(rk->st, hb, NB, TGC_COMM_F64, next, 8));
    RCHECK_OK(rk, rk->st, tgc_comm_send(rk->st, hz, 0, TGC_COMM_BYTE, next, 9));
    RCHECK_OK(rk, rk->st, tgc_comm_send(rk->st, hl, NL, TGC_COMM_F64, next, 10));
    RCHECK_OK(rk, rk->st, tgc_comm_recv(rk->st, hb, NB, TGC_COMM_F64, prev, 8));
    RCHECK_OK(rk, rk->st, tgc_comm_recv(rk->st, ha, NA, TGC_COMM_F32, prev, 7));
    RCHECK_OK(rk, rk->st, tgc_comm_recv(rk->st, hz, 0, TGC_COMM_BYTE, prev, 9));
    RCHECK_OK(rk, rk->st, tgc_comm_recv(rk->st, hl, NL, TGC_COMM_F64, prev, 10));
    RCHECK_OK(rk, rk->st, tgc_comm_sendrecv(rk->st, hc, NC, next, hcr, NC, prev, TGC_COMM_BYTE, 11));
    RCHECK_OK(rk, rk->st,
              tgc_comm_sendrecv_tags(rk->st, hcr, NC, next, 40 + r, hc, NC, prev, 40 + prev, TGC_COMM_BYTE));
    RCHECK_OK(rk, rk->ref, tgc_comm_send(rk->ref, a, NA, TGC_COMM_F32, next, 7));
    RCHECK_OK(rk, rk->ref, tgc_comm_send(rk->ref, b, NB, TGC_COMM_F64, next, 8));
    RCHECK_OK(rk, rk->ref, tgc_comm_send(rk->ref, c, 0, TGC_COMM_BYTE, next, 9));
    RCHECK_OK(rk, rk->ref, tgc_comm_send(rk->ref, l, NL, TGC_COMM_F64, next, 10));
    RCHECK_OK(rk, rk->ref, tgc_comm_recv(rk->ref, b, NB, TGC_COMM_F64, prev, 8));
    RCHECK_OK(rk, rk->ref, tgc_comm_recv(rk->ref, a, NA, TGC_COMM_F32, prev, 7));
    RCHECK_OK(rk, rk->ref, tgc_comm_recv(rk->ref, c, 0, TGC_COMM_BYTE, prev, 9));
    RCHECK_OK(rk, rk->ref, tgc_comm_recv(rk->ref, l, NL, TGC_COMM_F64, prev, 10));
    RCHECK_OK(rk, rk->ref, tgc_comm_sendrecv(rk->ref, c, NC, next, cr, NC, prev, TGC_COMM_BYTE, 11));
    RCHECK_OK(rk, rk->ref, tgc_comm_sendrecv_tags(rk->ref, cr, NC, next, 40 + r, c, NC, prev, 40 + prev, TGC_COMM_BYTE));
    /* What arrived is prev's data (n = 1: one's own). */
    float want_a[NA];
    fill(TGC_COMM_F32, seed, prev, NA, true, want_a);
    RCHECK(rk, memcmp(a, want_a, sizeof a) == 0);
    host_check(rk, ha, a, sizeof a);
    host_check(rk, hb, b, sizeof b);
    host_check(rk, hl, l, NL * sizeof *l);
    host_check(rk, hc, c, sizeof c);
    host_check(rk, hcr, cr, sizeof cr);
    host_check(rk, hz, c, 0);
    free(l);
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
    rk->e = (rt_exec){.be = &rt_backend_sim};
    diag_init(&rk->d, stderr);
    rk->ref = tgc_comm_local_world_comm(s->ref, r);
    rk->dev = tgc_comm_device_new(host, &rk->e, &rk->d);
    rk->st = rk->dev ? tgc_comm_staged_new(rk->dev, &rk->e, &rk->d) : NULL;
    RCHECK(rk, rk->st != NULL);
    if (!rk->st) return 1;
    RCHECK(rk, strcmp(tgc_comm_backend(rk->st), "staged(device-local)") == 0);
    RCHECK(rk, tgc_comm_rank(rk->st) == r && tgc_comm_size(rk->st) == tgc_comm_size(host));
    RCHECK(rk, tgc_comm_timeout(rk->st) == tgc_comm_timeout(host));
    for (int g = 0; g < TGC_COMM_GROUP_COUNT; g++) {
        RCHECK(rk, tgc_comm_group_size(rk->st, (tgc_comm_group)g) == tgc_comm_group_size(host, (tgc_comm_group)g));
        RCHECK(rk, tgc_comm_group_rank(rk->st, (tgc_comm_group)g) == tgc_comm_group_rank(host, (tgc_comm_group)g));
    }
    for (int g = 0; g < TGC_COMM_GROUP_COUNT; g++) t_group(rk, s, (tgc_comm_group)g);
    t_p2p(rk, s->seed + 5000);
    /* The largest calls again: no scratch buffer grows (not staged's,
     * not dev's). */
    int64_t allocated = rt_exec_allocated(&rk->e);
    t_group(rk, s, TGC_COMM_WORLD);
    t_p2p(rk, s->seed + 6000);
    RCHECK(rk, rt_exec_allocated(&rk->e) == allocated);
    /* The generic layer counts the staged communicator's calls as local's. */
    RCHECK(rk, stats_equal(tgc_comm_stats_get(rk->st), tgc_comm_stats_get(rk->ref)));
    RCHECK(rk, tgc_comm_stats_calls(tgc_comm_stats_get(rk->st), TGC_COMM_ALL_REDUCE) > 0);
    RCHECK(rk, tgc_comm_stats_calls(tgc_comm_stats_get(rk->dev), TGC_COMM_ALL_REDUCE) ==
                   tgc_comm_stats_calls(tgc_comm_stats_get(rk->st), TGC_COMM_ALL_REDUCE));
    RCHECK(rk, rk->d.nerrors == 0);
    tgc_comm_free(rk->st);
    tgc_comm_free(rk->dev);
    RCHECK(rk, rt_exec_allocated(&rk->e) == 0); /* both gave their scratch back */
    diag_free(&rk->d);
    return 0;
}

static void test_suite(int t, int d, int p, int seed)
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
    s->ref = ref, s->counts = counts, s->ncounts = (int)ARRAY_COUNT(counts), s->seed = seed;
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
    printf("staged(device-local) (%d,%d,%d): %ld results compared, %d failed, %.2f s\n", t, d, p, calls, fails,
           now_s() - t0);
    free(s);
    tgc_comm_local_world_free(host);
    tgc_comm_local_world_free(ref);
}

/* ---- failures ------------------------------------------------------------------------- */

typedef struct fault_case {
    int mode;
    int rc[MAX_RANKS], after[MAX_RANKS], culprit[MAX_RANKS];
    bool made[MAX_RANKS];
    char msg[MAX_RANKS][512];
    double secs[MAX_RANKS];
} fault_case;

enum { F_ABORT, F_RETURN, F_MISMATCH, F_UPLOAD, F_DEVICE, F_TIMEOUT, F_BYTE, F_NO_EXEC };

/* sim whose upload or reduce fails on one executor once armed. */
static rt_backend_ops faulty_sim;
static _Atomic(rt_exec *) faulty_up, faulty_red;

static bool faulty_upload(rt_exec *e, void *dst, const void *src, size_t bytes)
{
    if (e == atomic_load(&faulty_up)) {
        snprintf(e->err, sizeof e->err, "injected upload fault");
        return false;
    }
    return rt_backend_sim.upload(e, dst, src, bytes);
}

static bool faulty_reduce(rt_exec *e, void *dst, const void *src, int64_t n, ir_dtype t, rt_reduce_op op)
{
    if (e == atomic_load(&faulty_red)) {
        snprintf(e->err, sizeof e->err, "injected device fault");
        return false;
    }
    return rt_backend_sim.reduce(e, dst, src, n, t, op);
}

#define FAULT_COUNT 4099 /* every rank of 4 reduces a slice in device-local */

static int fault_rank(tgc_comm *host, void *arg)
{
    fault_case *fc = arg;
    int r = tgc_comm_rank(host);
    rt_exec e = {.be = &faulty_sim};
    tgc_comm *dev = tgc_comm_device_new(host, &e, NULL);
    tgc_comm *c = dev ? tgc_comm_staged_new(dev, fc->mode == F_NO_EXEC && r == 1 ? NULL : &e, NULL) : NULL;
    fc->made[r] = c != NULL;
    if (!c) {
        tgc_comm_free(dev);
        return 0;
    }
    float *buf = calloc(FAULT_COUNT, sizeof *buf);
    for (int i = 0; i < FAULT_COUNT; i++) buf[i] = (float)(i % 7);
    if (fc->mode == F_UPLOAD && r == 1) atomic_store(&faulty_up, &e);
    if (fc->mode == F_DEVICE && r == 1) atomic_store(&faulty_red, &e);
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
        tgc_comm_free(c);
        tgc_comm_free(dev);
        free(buf);
        return fc->mode == F_RETURN ? 5 : 0;
    } else if (fc->mode == F_BYTE) {
        rc = tgc_comm_all_reduce(c, TGC_COMM_WORLD, buf, 5, TGC_COMM_BYTE, TGC_COMM_SUM);
        int rc2 = tgc_comm_reduce_scatter(c, TGC_COMM_TP, buf, buf, 1, TGC_COMM_BYTE, TGC_COMM_MAX);
        if (rc2 != TGC_COMM_ERR_ARG) rc = -2;
    } else {
        size_t count = fc->mode == F_MISMATCH && r == 1 ? 6 : fc->mode == F_DEVICE ? FAULT_COUNT : 5;
        rc = tgc_comm_all_reduce(c, TGC_COMM_WORLD, buf, count, TGC_COMM_F32, TGC_COMM_SUM);
    }
    fc->rc[r] = rc;
    fc->secs[r] = now_s() - t0;
    fc->culprit[r] = tgc_comm_last_culprit(c);
    snprintf(fc->msg[r], sizeof fc->msg[r], "%s", tgc_comm_error(c));
    /* Later calls fail at once too. */
    fc->after[r] = tgc_comm_all_reduce(c, TGC_COMM_TP, buf, 5, TGC_COMM_F32, TGC_COMM_MAX);
    if (r == 1) atomic_store(&faulty_up, NULL), atomic_store(&faulty_red, NULL);
    tgc_comm_free(c);
    tgc_comm_free(dev);
    free(buf);
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
        CHECK(fc.culprit[r] == 3);
        CHECK(fc.secs[r] < 10.0); /* promptly, not after the 120 s timeout */
        CHECK(fc.after[r] == TGC_COMM_ERR_ABORTED);
    }
    CHECK(fc.rc[3] == TGC_COMM_OK && fc.after[3] == TGC_COMM_ERR_ABORTED);
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
        CHECK(strstr(fc.msg[r], ": all_reduce(world): rank 3 failed: its rank function returned 5") != NULL);
        CHECK(fc.culprit[r] == 3);
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
        CHECK(fc.rc[r] == TGC_COMM_ERR_MISMATCH);
        CHECK(strstr(fc.msg[r], want) != NULL);
        CHECK(fc.culprit[r] == 1);
        CHECK(fc.after[r] == TGC_COMM_ERR_ABORTED);
    }
}

/* Rank 1's upload into its scratch fails: it reports its executor's
 * error, the others (waiting in dev) learn of it promptly. */
static void test_upload_fault(void)
{
    fault_case fc;
    run_fault(&fc, F_UPLOAD, 120, 0);
    for (int r = 0; r < 4; r++) {
        printf("upload fault: rank %d returned after %.3f s: %s\n", r, fc.secs[r], fc.msg[r]);
        CHECK(fc.secs[r] < 10.0);
        CHECK(fc.culprit[r] == 1);
        CHECK(fc.after[r] == TGC_COMM_ERR_ABORTED);
    }
    CHECK(fc.rc[1] == TGC_COMM_ERR_BACKEND);
    CHECK_STR(fc.msg[1], "rank 1: all_reduce(world): copying the host buffer to the device (20 bytes) on sim: "
                         "injected upload fault");
    for (int r = 0; r < 4; r++) {
        if (r == 1) continue;
        CHECK(fc.rc[r] == TGC_COMM_ERR_ABORTED);
        CHECK(strstr(fc.msg[r], "rank 1 failed: copying the host buffer to the device (20 bytes) on sim: injected "
                                "upload fault") != NULL);
    }
}

/* Rank 1's device fails inside dev's all-reduce: dev's error, with its
 * culprit, on every rank. */
static void test_device_fault(void)
{
    fault_case fc;
    run_fault(&fc, F_DEVICE, 120, 0);
    for (int r = 0; r < 4; r++) {
        printf("device fault: rank %d returned after %.3f s: %s\n", r, fc.secs[r], fc.msg[r]);
        CHECK(fc.secs[r] < 10.0);
        CHECK(fc.culprit[r] == 1);
    }
    CHECK(fc.rc[1] == TGC_COMM_ERR_BACKEND);
    CHECK(strstr(fc.msg[1], "rank 1: all_reduce(world): the collective's device work on sim: injected device fault") !=
          NULL);
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
        CHECK(fc.culprit[r] == 3);
        CHECK(fc.secs[r] > 0.9 && fc.secs[r] < 15.0);
        CHECK(fc.after[r] == TGC_COMM_ERR_ABORTED);
    }
    CHECK(timeouts >= 1);
}

/* Byte reductions are invalid (the generic layer), on every rank. */
static void test_byte_reduce(void)
{
    fault_case fc;
    run_fault(&fc, F_BYTE, 120, 0);
    for (int r = 0; r < 4; r++) {
        printf("byte reduce: rank %d: %s\n", r, fc.msg[r]);
        CHECK(fc.rc[r] == TGC_COMM_ERR_ARG);
        CHECK(strstr(fc.msg[r], "cannot reduce raw bytes") != NULL);
    }
}

static void test_create(void)
{
    diag d;
    diag_init(&d, stderr);
    rt_exec e = {.be = &rt_backend_sim};
    CHECK(tgc_comm_staged_new(NULL, &e, &d) == NULL);
    CHECK(d.nerrors == 1);
    diag_free(&d);
    /* A rank without an executor fails, and fails dev's world, so the
     * others' first call does not wait for it. */
    fault_case fc;
    run_fault(&fc, F_NO_EXEC, 120, 0);
    CHECK(!fc.made[1]);
    for (int r = 0; r < 4; r++) {
        if (r == 1) continue;
        printf("no executor: rank %d returned after %.3f s: %s\n", r, fc.secs[r], fc.msg[r]);
        CHECK(fc.made[r]);
        CHECK(fc.rc[r] == TGC_COMM_ERR_ABORTED);
        CHECK(strstr(fc.msg[r], "rank 1 failed: could not create its staged communicator") != NULL);
        CHECK(fc.secs[r] < 10.0);
    }
}

/* Over nccl (never connected here: no GPU needed): the name, and dev's
 * error as ours. Skipped where libnccl cannot be loaded. */
static void test_nccl_errors(void)
{
    tgc_topology topo;
    tgc_topology_init(&topo, 1, 2, 1);
    tgc_nccl_world *w = tgc_nccl_world_new(&topo, NULL);
    if (!w) {
        printf("nccl: libnccl not available, skipped\n");
        return;
    }
    rt_exec e = {.be = &rt_backend_sim};
    diag d;
    diag_init(&d, stderr);
    tgc_comm *dev = tgc_comm_nccl_unconnected(w, 1);
    tgc_comm *c = dev ? tgc_comm_staged_new(dev, &e, &d) : NULL;
    CHECK(c != NULL);
    if (c) {
        CHECK_STR(tgc_comm_backend(c), "staged(nccl)");
        CHECK(tgc_comm_rank(c) == 1 && tgc_comm_size(c) == 2);
        double v = 1.5;
        CHECK(tgc_comm_all_reduce(c, TGC_COMM_WORLD, &v, 1, TGC_COMM_F64, TGC_COMM_SUM) == TGC_COMM_ERR_BACKEND);
        printf("nccl: %s\n", tgc_comm_error(c));
        CHECK(strncmp(tgc_comm_error(c), "rank 1: all_reduce(world): not connected", 40) == 0);
        CHECK(tgc_comm_last_culprit(c) == 1);
        CHECK(v == 1.5);
        /* The failure was fatal to dev's world. */
        CHECK(tgc_comm_send(c, &v, 1, TGC_COMM_F64, 0, 3) == TGC_COMM_ERR_ABORTED);
        CHECK(tgc_comm_barrier(dev, TGC_COMM_WORLD) == TGC_COMM_ERR_ABORTED);
        tgc_comm_free(c);
    }
    CHECK(d.nerrors == 0);
    CHECK(rt_exec_allocated(&e) == 0);
    tgc_comm_free(dev);
    tgc_nccl_world_free(w);
    diag_free(&d);
}

int main(void)
{
    faulty_sim = rt_backend_sim;
    faulty_sim.upload = faulty_upload;
    faulty_sim.reduce = faulty_reduce;
    test_suite(1, 1, 1, 1);
    test_suite(2, 1, 1, 2);
    test_suite(1, 3, 1, 3);
    test_suite(2, 2, 1, 4);
    test_suite(2, 1, 2, 5);
    test_suite(2, 2, 2, 6);
    test_abort();
    test_failing_rank();
    test_mismatch();
    test_upload_fault();
    test_device_fault();
    test_timeout();
    test_byte_reduce();
    test_create();
    test_nccl_errors();
    CHECK_DONE();
}
