/* What the communicator tests share (test_comm.c, test_comm_device.c,
 * test_comm_staged.c): clocks, the data every rank fills its buffers with,
 * the per-rank checks; and, for the communicators over a fake executor
 * (device-local, staged), the suite that makes every call twice with the
 * same data — on the communicator under test and on a second local world
 * over host copies — and compares the results bit for bit, and the failure
 * cases (a rank that aborts, fails, calls another collective, never calls)
 * with the checks both make of them.
 *
 * The CHECK counters of check.h are not thread-safe, so rank threads count
 * their own failures (RCHECK) and the main thread checks the totals. */
#ifndef TGC_TEST_COMM_TEST_H
#define TGC_TEST_COMM_TEST_H

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "runtime/comm/comm.h"
#include "runtime/exec.h"

#define MAX_RANKS 16 /* the largest world of these tests (test_comm.c) */
#define GUARD 64 /* bytes past each result of the communicator under test that must stay untouched */
#define ARRAY_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ---- helpers -------------------------------------------------------------------- */

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static inline uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static inline size_t dt_size(tgc_comm_dtype dt)
{
    return dt == TGC_COMM_F32 ? 4 : dt == TGC_COMM_F64 ? 8 : dt == TGC_COMM_BF16 || dt == TGC_COMM_F16 ? 2 : 1;
}

/* Element e of rank r's data for `seed`: values over many magnitudes, so a
 * sum in another order gives other bits. */
static inline uint64_t val_bits(int seed, int rank, size_t e)
{
    return mix(mix((uint64_t)seed * 1000003u + (uint64_t)rank) ^ (uint64_t)e);
}
static inline float f32_of_bits(uint64_t h)
{
    return ldexpf((float)((int)(h & 0xffff) - 32768), (int)((h >> 16) % 24) - 12);
}
static inline double f64_of_bits(uint64_t h)
{
    return ldexp((double)((int64_t)(h & 0xffffffffffull) - (1ll << 39)), (int)((h >> 40) % 40) - 20);
}
/* A finite 16-bit pattern: bf16 of every exponent of f32_of_bits's range,
 * f16 with exponents 2^-14 .. 2^9 (sums of 16 ranks stay finite). */
static inline uint16_t b16_of_bits(tgc_comm_dtype dt, uint64_t h)
{
    if (dt == TGC_COMM_BF16) {
        float v = f32_of_bits(h);
        uint32_t u;
        memcpy(&u, &v, 4);
        return (uint16_t)(u >> 16); /* truncated: a bf16 value */
    }
    return (uint16_t)((h & 0x8000u) | ((1u + (unsigned)((h >> 16) % 24)) << 10) | ((h >> 32) & 0x3ffu));
}
static inline uint16_t val_b16(tgc_comm_dtype dt, int seed, int rank, size_t e)
{
    return b16_of_bits(dt, val_bits(seed, rank, e));
}
static inline float val_f32(int seed, int rank, size_t e) { return f32_of_bits(val_bits(seed, rank, e)); }
static inline double val_f64(int seed, int rank, size_t e) { return f64_of_bits(val_bits(seed, rank, e)); }

/* Elements 0 .. count-1 of rank r's data for `seed` (val_f32 / val_f64, a
 * byte of val_bits); with `special`, also NaNs with a payload naming the
 * rank (max keeps the last NaN in group order, so the payload tells the
 * order), infinities and signed zeros. */
static inline void fill(tgc_comm_dtype dt, int seed, int rank, size_t count, bool special, void *out)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t h = val_bits(seed, rank, i);
        int kind = special ? (int)(h >> 60) : 15; /* 0..15: 0-1 NaN, 2 +inf, 3 -inf, 4 -0, 5 +0 */
        if (dt == TGC_COMM_F32) {
            float v = f32_of_bits(h);
            if (kind <= 1) {
                uint32_t bits = 0x7fc00000u | (uint32_t)(rank + 1) | (kind ? 0x80000000u : 0);
                memcpy(&v, &bits, 4);
            } else if (kind <= 5)
                v = kind == 2 ? INFINITY : kind == 3 ? -INFINITY : kind == 4 ? -0.0f : 0.0f;
            ((float *)out)[i] = v;
        } else if (dt == TGC_COMM_F64) {
            double v = f64_of_bits(h);
            if (kind <= 1) {
                uint64_t bits = 0x7ff8000000000000ull | (uint64_t)(rank + 1) | (kind ? 1ull << 63 : 0);
                memcpy(&v, &bits, 8);
            } else if (kind <= 5)
                v = kind == 2 ? INFINITY : kind == 3 ? -INFINITY : kind == 4 ? -0.0 : 0.0;
            ((double *)out)[i] = v;
        } else if (dt == TGC_COMM_BF16 || dt == TGC_COMM_F16) {
            bool bf = dt == TGC_COMM_BF16;
            uint16_t v = b16_of_bits(dt, h);
            if (kind <= 1)
                v = (uint16_t)((bf ? 0x7fc0u : 0x7e00u) | (unsigned)(rank + 1) | (kind ? 0x8000u : 0));
            else if (kind <= 5)
                v = kind == 2 ? (bf ? 0x7f80 : 0x7c00) : kind == 3 ? (bf ? 0xff80 : 0xfc00) : kind == 4 ? 0x8000 : 0;
            ((uint16_t *)out)[i] = v;
        } else
            ((unsigned char *)out)[i] = (unsigned char)h;
    }
}

/* Checks in a rank thread: rk is any struct with `int rank, fails`. */
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

/* The same calls and bytes, to the bit (test_comm's formulas have their own,
 * with a tolerance). */
static inline bool stats_identical(const tgc_comm_stats *a, const tgc_comm_stats *b)
{
    for (int k = 0; k < TGC_COMM_KIND_COUNT; k++)
        for (int g = 0; g < TGC_COMM_GROUP_COUNT; g++)
            if (a->calls[k][g] != b->calls[k][g] || a->bytes[k][g] != b->bytes[k][g]) return false;
    return true;
}

/* ---- the comparison against local: per-rank state --------------------------------- */

typedef struct cmp_rank cmp_rank;
typedef struct cmp_suite cmp_suite;

/* How a test file runs the comparison suite. */
typedef struct cmp_config {
    const char *label;                         /* printed before "(t,d,p): N results compared" */
    int (*rank)(tgc_comm *host, void *suite);  /* the rank function: makes ut, runs the calls */
    const rt_backend_ops *be;                  /* the fake executors' backend */
    bool device_buffers; /* ut's buffers are device memory of the executor (else host memory) */
    bool large_p2p;      /* the point-to-point part sends a large message too */
} cmp_config;

struct cmp_rank {
    int rank, fails;
    rt_exec e;               /* a fake executor: the backend's operations only use e->be and e->err */
    tgc_comm *ut, *ref;      /* the communicator under test; local on host copies */
    tgc_comm *dev;           /* for a staged ut: the device-local communicator under it */
    bool device_buffers;     /* from cmp_config */
    diag d;
    long calls;              /* results compared */
};

struct cmp_suite {
    cmp_config cfg;
    tgc_comm_local_world *ref;
    const size_t *counts;
    int ncounts, seed;
    cmp_rank ranks[MAX_RANKS];
};

/* A buffer for ut holding host[0 .. bytes) followed by GUARD bytes of 0xee:
 * device memory of rk->e (device_buffers) or host memory. */
static inline unsigned char *cmp_put(cmp_rank *rk, const void *host, size_t bytes)
{
    if (!rk->device_buffers) {
        unsigned char *p = malloc(bytes + GUARD);
        memcpy(p, host, bytes);
        memset(p + bytes, 0xee, GUARD);
        return p;
    }
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

/* The buffer p of cmp_put (bytes + GUARD) equals want and its guard is
 * intact; releases it. */
static inline void cmp_check(cmp_rank *rk, unsigned char *p, const void *want, size_t bytes)
{
    if (!p) return;
    unsigned char *got = p;
    if (rk->device_buffers) {
        got = malloc(bytes + GUARD);
        RCHECK(rk, rt_exec_read(&rk->e, p, got, bytes + GUARD));
    }
    RCHECK(rk, memcmp(got, want, bytes) == 0);
    bool guard_ok = true;
    for (size_t i = 0; i < GUARD; i++) guard_ok = guard_ok && got[bytes + i] == 0xee;
    RCHECK(rk, guard_ok);
    free(got);
    if (rk->device_buffers) rt_exec_release(&rk->e, p);
    rk->calls++;
}

/* ---- each call on both communicators ---------------------------------------------- */

static inline void cmp_all_reduce(cmp_rank *rk, tgc_comm_group gk, tgc_comm_dtype dt, tgc_comm_op op, size_t count,
                                  int seed)
{
    size_t bytes = count * dt_size(dt);
    unsigned char *h = malloc(bytes + 1);
    fill(dt, seed, rk->rank, count, op == TGC_COMM_MAX, h);
    unsigned char *u = cmp_put(rk, h, bytes);
    RCHECK_OK(rk, rk->ut, tgc_comm_all_reduce(rk->ut, gk, u, count, dt, op));
    RCHECK_OK(rk, rk->ref, tgc_comm_all_reduce(rk->ref, gk, h, count, dt, op));
    cmp_check(rk, u, h, bytes);
    free(h);
}

static inline void cmp_reduce_scatter(cmp_rank *rk, tgc_comm_group gk, tgc_comm_dtype dt, tgc_comm_op op,
                                      size_t count, int seed, bool in_place)
{
    int g = tgc_comm_group_size(rk->ref, gk), me = tgc_comm_group_rank(rk->ref, gk);
    size_t bytes = count * dt_size(dt), full = bytes * (size_t)g;
    unsigned char *hs = malloc(full + 1), *hr = malloc(bytes + 1);
    fill(dt, seed, rk->rank, count * (size_t)g, op == TGC_COMM_MAX, hs);
    memset(hr, 0x5a, bytes + 1);
    unsigned char *us = cmp_put(rk, hs, full), *ur = in_place ? NULL : cmp_put(rk, hr, bytes);
    unsigned char *urecv = in_place ? (us ? us + (size_t)me * bytes : NULL) : ur;
    RCHECK_OK(rk, rk->ut, tgc_comm_reduce_scatter(rk->ut, gk, us, urecv, count, dt, op));
    unsigned char *hrecv = in_place ? hs + (size_t)me * bytes : hr;
    RCHECK_OK(rk, rk->ref, tgc_comm_reduce_scatter(rk->ref, gk, hs, hrecv, count, dt, op));
    cmp_check(rk, us, hs, full); /* in place: the whole send buffer, the rest untouched */
    if (!in_place) cmp_check(rk, ur, hr, bytes);
    free(hs);
    free(hr);
}

/* Uneven pieces, some empty, in place: only this member's piece is
 * specified, compared with the reference's. */
static inline void cmp_reduce_scatter_v(cmp_rank *rk, tgc_comm_group gk, tgc_comm_dtype dt, size_t count, int seed)
{
    int g = tgc_comm_group_size(rk->ref, gk), me = tgc_comm_group_rank(rk->ref, gk);
    size_t pieces[MAX_RANKS], total = 0, lo = 0, es = dt_size(dt);
    for (int r = 0; r < g; r++) {
        pieces[r] = (r + seed) % 3 == 1 ? 0 : count * (size_t)(r % 3 + 1) / 2 + (size_t)r;
        if (r == me) lo = total;
        total += pieces[r];
    }
    unsigned char *h = malloc(total * es + 1);
    fill(dt, seed, rk->rank, total, false, h);
    unsigned char *u = cmp_put(rk, h, total * es);
    RCHECK_OK(rk, rk->ut, tgc_comm_reduce_scatter_v(rk->ut, gk, u, pieces, dt, TGC_COMM_SUM));
    RCHECK_OK(rk, rk->ref, tgc_comm_reduce_scatter_v(rk->ref, gk, h, pieces, dt, TGC_COMM_SUM));
    if (u) {
        unsigned char *got = u;
        if (rk->device_buffers) {
            got = malloc(total * es + GUARD);
            RCHECK(rk, rt_exec_read(&rk->e, u, got, total * es + GUARD));
        }
        RCHECK(rk, memcmp(got + lo * es, h + lo * es, pieces[me] * es) == 0);
        bool guard_ok = true;
        for (size_t i = 0; i < GUARD; i++) guard_ok = guard_ok && got[total * es + i] == 0xee;
        RCHECK(rk, guard_ok);
        if (rk->device_buffers) {
            free(got);
            rt_exec_release(&rk->e, u);
        } else {
            free(u);
        }
        rk->calls++;
    }
    free(h);
}

static inline void cmp_all_gather(cmp_rank *rk, tgc_comm_group gk, tgc_comm_dtype dt, size_t count, int seed,
                                  bool in_place)
{
    int g = tgc_comm_group_size(rk->ref, gk), me = tgc_comm_group_rank(rk->ref, gk);
    size_t bytes = count * dt_size(dt), full = bytes * (size_t)g;
    unsigned char *hs = malloc(bytes + 1), *hr = malloc(full + 1);
    fill(dt, seed, rk->rank, count, false, hs);
    memset(hr, 0x5a, full + 1);
    if (in_place) memcpy(hr + (size_t)me * bytes, hs, bytes);
    unsigned char *ur = cmp_put(rk, hr, full), *us = in_place ? NULL : cmp_put(rk, hs, bytes);
    unsigned char *usend = in_place ? (ur ? ur + (size_t)me * bytes : NULL) : us;
    RCHECK_OK(rk, rk->ut, tgc_comm_all_gather(rk->ut, gk, usend, ur, count, dt));
    RCHECK_OK(rk, rk->ref, tgc_comm_all_gather(rk->ref, gk, in_place ? hr + (size_t)me * bytes : hs, hr, count, dt));
    cmp_check(rk, ur, hr, full);
    if (!in_place) cmp_check(rk, us, hs, bytes); /* the send buffer is only read */
    free(hs);
    free(hr);
}

static inline void cmp_broadcast(cmp_rank *rk, tgc_comm_group gk, tgc_comm_dtype dt, size_t count, int seed,
                                 int root)
{
    size_t bytes = count * dt_size(dt);
    unsigned char *h = malloc(bytes + 1);
    fill(dt, seed, rk->rank, count, false, h);
    unsigned char *u = cmp_put(rk, h, bytes);
    RCHECK_OK(rk, rk->ut, tgc_comm_broadcast(rk->ut, gk, u, count, dt, root));
    RCHECK_OK(rk, rk->ref, tgc_comm_broadcast(rk->ref, gk, h, count, dt, root));
    cmp_check(rk, u, h, bytes);
    free(h);
}

/* Every collective on group gk for every count and type, then a barrier. */
static inline void cmp_group(cmp_rank *rk, const cmp_suite *s, tgc_comm_group gk)
{
    static const tgc_comm_dtype types[] = {TGC_COMM_F32, TGC_COMM_F64, TGC_COMM_BF16, TGC_COMM_F16};
    int g = tgc_comm_group_size(rk->ref, gk);
    for (int c = 0; c < s->ncounts; c++) {
        size_t count = s->counts[c];
        int seed = s->seed + 97 * c + 13 * (int)gk;
        for (size_t t = 0; t < ARRAY_COUNT(types); t++) {
            cmp_all_reduce(rk, gk, types[t], TGC_COMM_SUM, count, seed + 1);
            cmp_all_reduce(rk, gk, types[t], TGC_COMM_MAX, count, seed + 2);
            cmp_reduce_scatter(rk, gk, types[t], TGC_COMM_SUM, count, seed + 3, false);
            cmp_reduce_scatter(rk, gk, types[t], TGC_COMM_MAX, count, seed + 4, true);
            cmp_reduce_scatter_v(rk, gk, types[t], count, seed + 9);
            cmp_all_gather(rk, gk, types[t], count, seed + 5, c % 2 == 0);
            cmp_broadcast(rk, gk, types[t], count, seed + 6, (c + (int)t) % g);
        }
        cmp_all_gather(rk, gk, TGC_COMM_BYTE, count, seed + 7, c % 2 == 1);
        cmp_broadcast(rk, gk, TGC_COMM_BYTE, count, seed + 8, g - 1);
    }
    RCHECK_OK(rk, rk->ut, tgc_comm_barrier(rk->ut, gk));
    RCHECK_OK(rk, rk->ref, tgc_comm_barrier(rk->ref, gk));
}

/* Point-to-point on a ring of the world: two tags received in the other
 * order (ut keeps tags), with `large` a large message, a sendrecv with one
 * tag and one with a tag per message, and an empty message. */
static inline void cmp_p2p(cmp_rank *rk, int seed, bool large)
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
    unsigned char *ua = cmp_put(rk, a, sizeof a), *ub = cmp_put(rk, b, sizeof b);
    unsigned char *ul = large ? cmp_put(rk, l, NL * sizeof *l) : NULL;
    unsigned char *uc = cmp_put(rk, c, sizeof c), *ucr = cmp_put(rk, cr, sizeof cr), *uz = cmp_put(rk, c, 0);
    tgc_comm *ut = rk->ut, *ref = rk->ref;
    RCHECK_OK(rk, ut, tgc_comm_send(ut, ua, NA, TGC_COMM_F32, next, 7));
    RCHECK_OK(rk, ut, tgc_comm_send(ut, ub, NB, TGC_COMM_F64, next, 8));
    RCHECK_OK(rk, ut, tgc_comm_send(ut, uz, 0, TGC_COMM_BYTE, next, 9));
    if (large) RCHECK_OK(rk, ut, tgc_comm_send(ut, ul, NL, TGC_COMM_F64, next, 10));
    RCHECK_OK(rk, ut, tgc_comm_recv(ut, ub, NB, TGC_COMM_F64, prev, 8));
    RCHECK_OK(rk, ut, tgc_comm_recv(ut, ua, NA, TGC_COMM_F32, prev, 7));
    RCHECK_OK(rk, ut, tgc_comm_recv(ut, uz, 0, TGC_COMM_BYTE, prev, 9));
    if (large) RCHECK_OK(rk, ut, tgc_comm_recv(ut, ul, NL, TGC_COMM_F64, prev, 10));
    RCHECK_OK(rk, ut, tgc_comm_sendrecv(ut, uc, NC, next, ucr, NC, prev, TGC_COMM_BYTE, 11));
    RCHECK_OK(rk, ut, tgc_comm_sendrecv_tags(ut, ucr, NC, next, 40 + r, uc, NC, prev, 40 + prev, TGC_COMM_BYTE));
    RCHECK_OK(rk, ref, tgc_comm_send(ref, a, NA, TGC_COMM_F32, next, 7));
    RCHECK_OK(rk, ref, tgc_comm_send(ref, b, NB, TGC_COMM_F64, next, 8));
    RCHECK_OK(rk, ref, tgc_comm_send(ref, c, 0, TGC_COMM_BYTE, next, 9));
    if (large) RCHECK_OK(rk, ref, tgc_comm_send(ref, l, NL, TGC_COMM_F64, next, 10));
    RCHECK_OK(rk, ref, tgc_comm_recv(ref, b, NB, TGC_COMM_F64, prev, 8));
    RCHECK_OK(rk, ref, tgc_comm_recv(ref, a, NA, TGC_COMM_F32, prev, 7));
    RCHECK_OK(rk, ref, tgc_comm_recv(ref, c, 0, TGC_COMM_BYTE, prev, 9));
    if (large) RCHECK_OK(rk, ref, tgc_comm_recv(ref, l, NL, TGC_COMM_F64, prev, 10));
    RCHECK_OK(rk, ref, tgc_comm_sendrecv(ref, c, NC, next, cr, NC, prev, TGC_COMM_BYTE, 11));
    RCHECK_OK(rk, ref, tgc_comm_sendrecv_tags(ref, cr, NC, next, 40 + r, c, NC, prev, 40 + prev, TGC_COMM_BYTE));
    /* What arrived is prev's data (n = 1: one's own). */
    float want_a[NA];
    fill(TGC_COMM_F32, seed, prev, NA, true, want_a);
    RCHECK(rk, memcmp(a, want_a, sizeof a) == 0);
    cmp_check(rk, ua, a, sizeof a);
    cmp_check(rk, ub, b, sizeof b);
    cmp_check(rk, ul, l, NL * sizeof *l); /* nothing without `large` */
    cmp_check(rk, uc, c, sizeof c);
    cmp_check(rk, ucr, cr, sizeof cr);
    cmp_check(rk, uz, c, 0);
    free(l);
}

/* ---- a rank of the suite, and the suite on one topology ------------------------------ */

/* Host's rank of s: its executor, its diag and its local twin (the rank
 * function makes ut). */
static inline cmp_rank *cmp_rank_start(cmp_suite *s, tgc_comm *host)
{
    int r = tgc_comm_rank(host);
    cmp_rank *rk = &s->ranks[r];
    rk->rank = r;
    rk->e = (rt_exec){.be = s->cfg.be};
    rk->device_buffers = s->cfg.device_buffers;
    diag_init(&rk->d, stderr);
    rk->ref = tgc_comm_local_world_comm(s->ref, r);
    return rk;
}

/* ut was made, is the backend `name`, and has host's rank, size, timeout and
 * groups; false when it was not made. */
static inline bool cmp_check_comm(cmp_rank *rk, tgc_comm *host, const char *name)
{
    RCHECK(rk, rk->ut != NULL);
    if (!rk->ut) return false;
    RCHECK(rk, strcmp(tgc_comm_backend(rk->ut), name) == 0);
    RCHECK(rk, tgc_comm_rank(rk->ut) == rk->rank && tgc_comm_size(rk->ut) == tgc_comm_size(host));
    RCHECK(rk, tgc_comm_timeout(rk->ut) == tgc_comm_timeout(host));
    for (int g = 0; g < TGC_COMM_GROUP_COUNT; g++) {
        RCHECK(rk, tgc_comm_group_size(rk->ut, (tgc_comm_group)g) == tgc_comm_group_size(host, (tgc_comm_group)g));
        RCHECK(rk, tgc_comm_group_rank(rk->ut, (tgc_comm_group)g) == tgc_comm_group_rank(host, (tgc_comm_group)g));
    }
    return true;
}

/* Every group's collectives, then point-to-point. */
static inline void cmp_calls(cmp_rank *rk, const cmp_suite *s, int p2p_seed)
{
    for (int g = 0; g < TGC_COMM_GROUP_COUNT; g++) cmp_group(rk, s, (tgc_comm_group)g);
    cmp_p2p(rk, p2p_seed, s->cfg.large_p2p);
}

/* The generic layer counts ut's calls as local's. */
static inline void cmp_check_stats(cmp_rank *rk)
{
    RCHECK(rk, stats_identical(tgc_comm_stats_get(rk->ut), tgc_comm_stats_get(rk->ref)));
    RCHECK(rk, tgc_comm_stats_calls(tgc_comm_stats_get(rk->ut), TGC_COMM_ALL_REDUCE) > 0);
}

/* The suite on a (t, d, p) world of rank threads: cfg->rank on each, with a
 * second local world for the references. */
static inline void cmp_run_suite(const cmp_config *cfg, int t, int d, int p, int seed)
{
    static const size_t counts[] = {0, 1, 7, 33, 1000, 4099};
    tgc_topology topo;
    CHECK(tgc_topology_init(&topo, t, d, p) == TGC_COMM_OK);
    tgc_comm_local_options opt = {.timeout_s = 60};
    tgc_comm_local_world *host = tgc_comm_local_world_new_topo(&topo, &opt, NULL);
    tgc_comm_local_world *ref = tgc_comm_local_world_new_topo(&topo, &opt, NULL);
    CHECK(host && ref);
    if (!host || !ref) return;
    cmp_suite *s = calloc(1, sizeof *s);
    s->cfg = *cfg, s->ref = ref, s->counts = counts, s->ncounts = (int)ARRAY_COUNT(counts), s->seed = seed;
    double t0 = now_s();
    CHECK(tgc_comm_local_world_run(host, cfg->rank, s) == 0);
    int n = tgc_topology_size(&topo), fails = 0;
    long calls = 0;
    for (int r = 0; r < n; r++) {
        fails += s->ranks[r].fails;
        calls += s->ranks[r].calls;
        CHECK(s->ranks[r].fails == 0);
    }
    CHECK(calls > 0);
    printf("%s (%d,%d,%d): %ld results compared, %d failed, %.2f s\n", cfg->label, t, d, p, calls, fails,
           now_s() - t0);
    free(s);
    tgc_comm_local_world_free(host);
    tgc_comm_local_world_free(ref);
}

/* ---- failures ------------------------------------------------------------------------- */

/* What each rank of a failure case saw. test_comm.c uses rc, after, msg and
 * secs; mode, culprit and made are the device-local and staged tests'. */
typedef struct fault_case {
    int mode;
    int rc[MAX_RANKS], after[MAX_RANKS], culprit[MAX_RANKS];
    bool made[MAX_RANKS];
    char msg[MAX_RANKS][512];
    double secs[MAX_RANKS];
} fault_case;

/* The modes of fault_calls (a test file makes the ones it runs). */
enum { F_ABORT, F_RETURN, F_MISMATCH, F_TIMEOUT, F_NO_EXEC, F_DEVICE, F_BACKENDS, F_UPLOAD, F_BYTE };

#define FAULT_COUNT 4099 /* every rank of 4 reduces a slice */

/* Rank c's result of a call begun at t0: status, time, culprit, message. */
static inline void fault_note(fault_case *fc, tgc_comm *c, int rc, double t0)
{
    int r = tgc_comm_rank(c);
    fc->rc[r] = rc;
    fc->secs[r] = now_s() - t0;
    fc->culprit[r] = tgc_comm_last_culprit(c);
    snprintf(fc->msg[r], sizeof fc->msg[r], "%s", tgc_comm_error(c));
}

/* sim whose upload or reduce fails on the executor armed in faulty_up /
 * faulty_red (faulty_sim_init makes it). */
static rt_backend_ops faulty_sim;
static _Atomic(rt_exec *) faulty_up, faulty_red;

static inline bool faulty_upload(rt_exec *e, void *dst, const void *src, size_t bytes)
{
    if (e == atomic_load(&faulty_up)) {
        snprintf(e->err, sizeof e->err, "injected upload fault");
        return false;
    }
    return rt_backend_sim.upload(e, dst, src, bytes);
}

static inline bool faulty_reduce(rt_exec *e, void *dst, const void *src, int64_t n, ir_dtype t, rt_reduce_op op)
{
    if (e == atomic_load(&faulty_red)) {
        snprintf(e->err, sizeof e->err, "injected device fault");
        return false;
    }
    return rt_backend_sim.reduce(e, dst, src, n, t, op);
}

static inline void faulty_sim_init(void)
{
    faulty_sim = rt_backend_sim;
    faulty_sim.upload = faulty_upload;
    faulty_sim.reduce = faulty_reduce;
}

/* Rank c's part of the case fc->mode on a world of (2, 2, 1), with buf
 * FAULT_COUNT floats in c's memory: F_ABORT, rank 3 aborts while rank 0
 * waits in a world barrier, rank 1 in a DP all-reduce with rank 3, rank 2
 * in a receive from it; F_RETURN / F_TIMEOUT, rank 3 never calls (fails
 * after the others are waiting, or just leaves); F_BYTE, byte reductions;
 * else a world all-reduce (F_MISMATCH: of 6 elements on rank 1, F_DEVICE:
 * of FAULT_COUNT). Notes the result and a later call's (after). Returns what
 * the rank function returns. */
static inline int fault_calls(fault_case *fc, tgc_comm *c, void *buf)
{
    int r = tgc_comm_rank(c);
    double t0 = now_s();
    int rc = -1;
    if (fc->mode == F_ABORT && r == 3) {
        sleep_ms(200);
        rc = tgc_comm_abort(c, 3, "injected fault");
    } else if (fc->mode == F_ABORT) {
        rc = r == 0   ? tgc_comm_barrier(c, TGC_COMM_WORLD)
             : r == 1 ? tgc_comm_all_reduce(c, TGC_COMM_DP, buf, 5, TGC_COMM_F32, TGC_COMM_SUM)
                      : tgc_comm_recv(c, buf, 5, TGC_COMM_F32, 3, 0);
    } else if ((fc->mode == F_RETURN || fc->mode == F_TIMEOUT) && r == 3) {
        if (fc->mode == F_RETURN) sleep_ms(200);
        return fc->mode == F_RETURN ? 5 : 0;
    } else if (fc->mode == F_BYTE) {
        rc = tgc_comm_all_reduce(c, TGC_COMM_WORLD, buf, 5, TGC_COMM_BYTE, TGC_COMM_SUM);
        int rc2 = tgc_comm_reduce_scatter(c, TGC_COMM_TP, buf, buf, 1, TGC_COMM_BYTE, TGC_COMM_MAX);
        if (rc2 != TGC_COMM_ERR_ARG) rc = -2;
    } else {
        size_t count = fc->mode == F_MISMATCH && r == 1 ? 6 : fc->mode == F_DEVICE ? FAULT_COUNT : 5;
        rc = tgc_comm_all_reduce(c, TGC_COMM_WORLD, buf, count, TGC_COMM_F32, TGC_COMM_SUM);
    }
    fault_note(fc, c, rc, t0);
    /* Later calls fail at once too. */
    fc->after[r] = tgc_comm_all_reduce(c, TGC_COMM_TP, buf, 5, TGC_COMM_F32, TGC_COMM_MAX);
    return 0;
}

/* fn (which calls fault_calls) on every rank of a (2, 2, 1) world with the
 * given timeout; the world's run returns expect_run. */
static inline void run_fault(fault_case *fc, int (*fn)(tgc_comm *, void *), int mode, double timeout, int expect_run)
{
    tgc_topology topo;
    tgc_topology_init(&topo, 2, 2, 1);
    tgc_comm_local_options opt = {.timeout_s = timeout};
    tgc_comm_local_world *w = tgc_comm_local_world_new_topo(&topo, &opt, NULL);
    memset(fc, 0, sizeof *fc);
    fc->mode = mode;
    CHECK(tgc_comm_local_world_run(w, fn, fc) == expect_run);
    tgc_comm_local_world_free(w);
}

/* The checks of the cases; with `culprits`, also that every rank names the
 * failed rank (tgc_comm_last_culprit). */

/* F_ABORT: ranks 0-2 fail promptly (not after the 120 s timeout) naming
 * rank 3's reason, and so do their later calls. */
static inline void check_abort(const fault_case *fc, bool culprits)
{
    for (int r = 0; r < 3; r++) {
        printf("abort: rank %d returned after %.3f s: %s\n", r, fc->secs[r], fc->msg[r]);
        CHECK(fc->rc[r] == TGC_COMM_ERR_ABORTED);
        CHECK(strstr(fc->msg[r], "rank 3 failed: injected fault") != NULL);
        if (culprits) CHECK(fc->culprit[r] == 3);
        CHECK(fc->secs[r] < 10.0); /* promptly, not after the 120 s timeout */
        CHECK(fc->after[r] == TGC_COMM_ERR_ABORTED);
    }
    CHECK_STR(fc->msg[1], "rank 1: all_reduce(dp): rank 3 failed: injected fault");
    CHECK_STR(fc->msg[2], "rank 2: recv: rank 3 failed: injected fault");
}

/* F_RETURN: ranks 0-2 fail promptly with an error containing want. */
static inline void check_failing_rank(const fault_case *fc, const char *want, bool culprits)
{
    for (int r = 0; r < 3; r++) {
        printf("failing rank: rank %d returned after %.3f s: %s\n", r, fc->secs[r], fc->msg[r]);
        CHECK(fc->rc[r] == TGC_COMM_ERR_ABORTED);
        CHECK(strstr(fc->msg[r], want) != NULL);
        if (culprits) CHECK(fc->culprit[r] == 3);
        CHECK(fc->secs[r] < 10.0);
        CHECK(fc->after[r] == TGC_COMM_ERR_ABORTED);
    }
}

/* F_MISMATCH: every rank sees the same descriptions, so every rank reports it. */
static inline void check_mismatch(const fault_case *fc, bool culprits)
{
    const char *want = "rank 1 called all_reduce(sum) of 6 f32 but rank 0 called all_reduce(sum) of 5 f32";
    for (int r = 0; r < 4; r++) {
        printf("mismatch: rank %d: %s\n", r, fc->msg[r]);
        CHECK(fc->rc[r] == TGC_COMM_ERR_MISMATCH);
        CHECK(strstr(fc->msg[r], want) != NULL);
        if (culprits) CHECK(fc->culprit[r] == 1);
        CHECK(fc->after[r] == TGC_COMM_ERR_ABORTED);
    }
}

/* F_DEVICE: rank 1's device fails in the middle of the all-reduce: it
 * reports an error containing want1, the others learn of it promptly. */
static inline void check_device_fault(const fault_case *fc, const char *want1, bool culprits)
{
    for (int r = 0; r < 4; r++) {
        printf("device fault: rank %d returned after %.3f s: %s\n", r, fc->secs[r], fc->msg[r]);
        CHECK(fc->secs[r] < 10.0);
        if (culprits) CHECK(fc->culprit[r] == 1);
    }
    CHECK(fc->rc[1] == TGC_COMM_ERR_BACKEND);
    CHECK(strstr(fc->msg[1], want1) != NULL);
    CHECK(fc->after[1] == TGC_COMM_ERR_ABORTED);
    for (int r = 0; r < 4; r++) {
        if (r == 1) continue;
        CHECK(fc->rc[r] == TGC_COMM_ERR_ABORTED);
        CHECK(strstr(fc->msg[r], "rank 1 failed: its device work in this all_reduce failed") != NULL);
    }
}

/* F_TIMEOUT with a 1 s timeout: ranks 0-2 time out (or learn of another's
 * timeout) naming rank 3, at least one times out itself. */
static inline void check_timeout(const fault_case *fc, bool culprits)
{
    int timeouts = 0;
    for (int r = 0; r < 3; r++) {
        printf("timeout: rank %d returned after %.3f s: %s\n", r, fc->secs[r], fc->msg[r]);
        CHECK(fc->rc[r] == TGC_COMM_ERR_TIMEOUT || fc->rc[r] == TGC_COMM_ERR_ABORTED);
        timeouts += fc->rc[r] == TGC_COMM_ERR_TIMEOUT;
        CHECK(strstr(fc->msg[r], "rank 3") != NULL);
        if (culprits) CHECK(fc->culprit[r] == 3);
        CHECK(fc->secs[r] > 0.9 && fc->secs[r] < 15.0);
        CHECK(fc->after[r] == TGC_COMM_ERR_ABORTED);
    }
    CHECK(timeouts >= 1);
}

#endif
