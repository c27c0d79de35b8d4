/* Unit tests of the communicators (runtime/comm/comm.h): the rank groups in
 * Megatron's order, and the `local` communicator — every collective on
 * every group against a serial computation of the expected bits, across
 * ranks and repeated runs; point-to-point; statistics against the ring
 * formulas; errors, aborts and timeouts.
 *
 * The CHECK counters of check.h are not thread-safe, so rank threads count
 * their own failures (RCHECK) and the main thread checks the totals. */
#include "comm_test.h"

#define REPEATS 20

/* ---- helpers -------------------------------------------------------------------- */

static uint64_t hash_mem(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The 16-bit formats from their definitions (not the runtime's code). */
static double b16_decode(tgc_comm_dtype dt, uint16_t h)
{
    int mbits = dt == TGC_COMM_BF16 ? 7 : 10, ebits = dt == TGC_COMM_BF16 ? 8 : 5, bias = (1 << (ebits - 1)) - 1;
    int e = (h >> mbits) & ((1 << ebits) - 1), m = h & ((1 << mbits) - 1);
    double v = e == (1 << ebits) - 1 ? (m ? NAN : INFINITY)
             : e == 0 ? ldexp((double)m, 1 - bias - mbits) : ldexp((double)((1 << mbits) + m), e - bias - mbits);
    return h & 0x8000 ? -v : v;
}

/* The nearest 16-bit value to a finite x, ties to the even pattern, beyond
 * the largest by half an ulp infinity. */
static uint16_t b16_encode(tgc_comm_dtype dt, double x)
{
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    int top = dt == TGC_COMM_BF16 ? 0x7f7f : 0x7bff, lo = 0, hi = top;
    double a = fabs(x), maxv = b16_decode(dt, (uint16_t)top), ulp = maxv - b16_decode(dt, (uint16_t)(top - 1));
    if (a >= maxv + ulp / 2) return sign | (uint16_t)(top + 1);
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (b16_decode(dt, (uint16_t)mid) <= a) lo = mid;
        else hi = mid - 1;
    }
    if (lo == top) return sign | (uint16_t)lo;
    double dl = a - b16_decode(dt, (uint16_t)lo), dh = b16_decode(dt, (uint16_t)(lo + 1)) - a;
    return sign | (uint16_t)(dl < dh ? lo : dh < dl ? lo + 1 : lo % 2 == 0 ? lo : lo + 1);
}

/* The serial expectation: ((x_m0 op x_m1) op x_m2) ... in group order; bf16
 * and f16 summed in f32 and rounded once, their MAX the pattern of the
 * largest value (NaN wins). */
static void fold(tgc_comm_dtype dt, tgc_comm_op op, const int *members, int g, int seed, size_t off, size_t count,
                 void *out)
{
    for (size_t e = 0; e < count; e++) {
        if (dt == TGC_COMM_BF16 || dt == TGC_COMM_F16) {
            uint16_t best = val_b16(dt, seed, members[0], off + e);
            float acc = (float)b16_decode(dt, best);
            for (int i = 1; i < g; i++) {
                uint16_t h = val_b16(dt, seed, members[i], off + e);
                float x = (float)b16_decode(dt, h);
                if (op == TGC_COMM_SUM) acc += x;
                else if (x > acc || isnan(x)) acc = x, best = h;
            }
            ((uint16_t *)out)[e] = op == TGC_COMM_SUM ? b16_encode(dt, acc) : best;
        } else if (dt == TGC_COMM_F32) {
            float acc = val_f32(seed, members[0], off + e);
            for (int i = 1; i < g; i++) {
                float x = val_f32(seed, members[i], off + e);
                acc = op == TGC_COMM_SUM ? acc + x : (x > acc || isnan(x)) ? x : acc;
            }
            ((float *)out)[e] = acc;
        } else {
            double acc = val_f64(seed, members[0], off + e);
            for (int i = 1; i < g; i++) {
                double x = val_f64(seed, members[i], off + e);
                acc = op == TGC_COMM_SUM ? acc + x : (x > acc || isnan(x)) ? x : acc;
            }
            ((double *)out)[e] = acc;
        }
    }
}

/* ---- per-rank state ------------------------------------------------------------- */

typedef struct rank_state {
    int rank, fails;
    uint64_t hash;                             /* over every result */
    uint64_t ar_hash[TGC_COMM_GROUP_COUNT];    /* over all_reduce results per group kind */
    tgc_comm_stats expect;                     /* the formulas, counted here */
    const size_t *counts;
    int ncounts, seed;
} rank_state;

typedef struct suite {
    rank_state ranks[MAX_RANKS];
    const size_t *counts;
    int ncounts, seed;
} suite;

/* The accounted bytes, written from the formulas of docs/parallel.md. */
static void expect_add(rank_state *rk, tgc_comm_kind k, tgc_comm_group g, size_t n_bytes, int gsize)
{
    double b = 0;
    if (k == TGC_COMM_ALL_REDUCE) b = (double)(2 * n_bytes * (size_t)(gsize - 1)) / gsize;
    if (k == TGC_COMM_ALL_GATHER || k == TGC_COMM_REDUCE_SCATTER) b = (double)(n_bytes * (size_t)(gsize - 1)) / gsize;
    if (k == TGC_COMM_BROADCAST) b = gsize > 1 ? (double)n_bytes : 0;
    if (k == TGC_COMM_SEND || k == TGC_COMM_RECV) b = (double)n_bytes;
    rk->expect.calls[k][g]++;
    rk->expect.bytes[k][g] += b;
}

/* ---- one collective each, checked against fold / fill -------------------------------- */

static void t_all_reduce(rank_state *rk, tgc_comm *c, tgc_comm_group gk, tgc_comm_dtype dt, tgc_comm_op op,
                         size_t count, int seed)
{
    int members[MAX_RANKS], g = tgc_topology_group_members(tgc_comm_topology(c), rk->rank, gk, members);
    size_t bytes = count * dt_size(dt);
    void *buf = malloc(bytes + 1), *want = malloc(bytes + 1);
    fill(dt, seed, rk->rank, count, false, buf);
    fold(dt, op, members, g, seed, 0, count, want);
    RCHECK_OK(rk, c, tgc_comm_all_reduce(c, gk, buf, count, dt, op));
    RCHECK(rk, memcmp(buf, want, bytes) == 0);
    rk->hash = hash_mem(buf, bytes, rk->hash);
    rk->ar_hash[gk] = hash_mem(buf, bytes, rk->ar_hash[gk]);
    expect_add(rk, TGC_COMM_ALL_REDUCE, gk, bytes, g);
    free(buf);
    free(want);
}

static void t_reduce_scatter(rank_state *rk, tgc_comm *c, tgc_comm_group gk, tgc_comm_dtype dt, size_t count,
                             int seed, bool in_place)
{
    int members[MAX_RANKS], g = tgc_topology_group_members(tgc_comm_topology(c), rk->rank, gk, members);
    int me = tgc_comm_group_rank(c, gk);
    size_t bytes = count * dt_size(dt);
    unsigned char *send = malloc(bytes * g + 1), *own = malloc(bytes + 1), *want = malloc(bytes + 1);
    unsigned char *recv = in_place ? send + (size_t)me * bytes : own;
    fill(dt, seed, rk->rank, count * g, false, send);
    /* Block me of the reduction: the same bits an all_reduce gives there. */
    fold(dt, TGC_COMM_SUM, members, g, seed, (size_t)me * count, count, want);
    RCHECK_OK(rk, c, tgc_comm_reduce_scatter(c, gk, send, recv, count, dt, TGC_COMM_SUM));
    RCHECK(rk, memcmp(recv, want, bytes) == 0);
    rk->hash = hash_mem(recv, bytes, rk->hash);
    expect_add(rk, TGC_COMM_REDUCE_SCATTER, gk, bytes * g, g);
    free(send);
    free(own);
    free(want);
}

/* Uneven pieces of about count elements, some empty (the distributed
 * optimizer's bucket ranges cut at shard boundaries): the own piece holds
 * the bits of the all-reduce there; the bytes are every piece but one's own. */
static void t_reduce_scatter_v(rank_state *rk, tgc_comm *c, tgc_comm_group gk, tgc_comm_dtype dt, size_t count,
                               int seed)
{
    int members[MAX_RANKS], g = tgc_topology_group_members(tgc_comm_topology(c), rk->rank, gk, members);
    int me = tgc_comm_group_rank(c, gk);
    size_t pieces[MAX_RANKS], total = 0, lo = 0, es = dt_size(dt);
    for (int r = 0; r < g; r++) {
        pieces[r] = (r + seed) % 3 == 1 ? 0 : count * (size_t)(r % 3 + 1) / 2 + (size_t)r;
        if (r == me) lo = total;
        total += pieces[r];
    }
    unsigned char *buf = malloc(total * es + 1), *want = malloc(pieces[me] * es + 1);
    fill(dt, seed, rk->rank, total, false, buf);
    fold(dt, TGC_COMM_SUM, members, g, seed, lo, pieces[me], want);
    RCHECK_OK(rk, c, tgc_comm_reduce_scatter_v(c, gk, buf, pieces, dt, TGC_COMM_SUM));
    RCHECK(rk, memcmp(buf + lo * es, want, pieces[me] * es) == 0);
    rk->hash = hash_mem(buf + lo * es, pieces[me] * es, rk->hash);
    rk->expect.calls[TGC_COMM_REDUCE_SCATTER][gk]++;
    rk->expect.bytes[TGC_COMM_REDUCE_SCATTER][gk] += g > 1 ? (double)((total - pieces[me]) * es) : 0.0;
    free(buf);
    free(want);
}

static void t_all_gather(rank_state *rk, tgc_comm *c, tgc_comm_group gk, tgc_comm_dtype dt, size_t count, int seed,
                         bool in_place)
{
    int members[MAX_RANKS], g = tgc_topology_group_members(tgc_comm_topology(c), rk->rank, gk, members);
    int me = tgc_comm_group_rank(c, gk);
    size_t bytes = count * dt_size(dt);
    unsigned char *recv = malloc(bytes * g + 1), *own = malloc(bytes + 1), *want = malloc(bytes * g + 1);
    unsigned char *send = in_place ? recv + (size_t)me * bytes : own;
    memset(recv, 0xee, bytes * g + 1);
    fill(dt, seed, rk->rank, count, false, send);
    for (int i = 0; i < g; i++) fill(dt, seed, members[i], count, false, want + (size_t)i * bytes);
    RCHECK_OK(rk, c, tgc_comm_all_gather(c, gk, send, recv, count, dt));
    RCHECK(rk, memcmp(recv, want, bytes * g) == 0);
    RCHECK(rk, recv[bytes * g] == 0xee); /* nothing written past the end */
    rk->hash = hash_mem(recv, bytes * g, rk->hash);
    expect_add(rk, TGC_COMM_ALL_GATHER, gk, bytes * g, g);
    free(recv);
    free(own);
    free(want);
}

static void t_broadcast(rank_state *rk, tgc_comm *c, tgc_comm_group gk, tgc_comm_dtype dt, size_t count, int seed)
{
    int members[MAX_RANKS], g = tgc_topology_group_members(tgc_comm_topology(c), rk->rank, gk, members);
    int root = seed % g;
    size_t bytes = count * dt_size(dt);
    void *buf = malloc(bytes + 1), *want = malloc(bytes + 1);
    fill(dt, seed, rk->rank, count, false, buf);
    fill(dt, seed, members[root], count, false, want);
    RCHECK_OK(rk, c, tgc_comm_broadcast(c, gk, buf, count, dt, root));
    RCHECK(rk, memcmp(buf, want, bytes) == 0);
    rk->hash = hash_mem(buf, bytes, rk->hash);
    expect_add(rk, TGC_COMM_BROADCAST, gk, bytes, g);
    free(buf);
    free(want);
}

/* Every collective on group gk for every count and type. */
static void t_group(rank_state *rk, tgc_comm *c, tgc_comm_group gk)
{
    static const tgc_comm_dtype types[] = {TGC_COMM_F32, TGC_COMM_F64, TGC_COMM_BF16, TGC_COMM_F16};
    int seed = rk->seed * 100 + (int)gk * 10;
    for (int ci = 0; ci < rk->ncounts; ci++) {
        size_t n = rk->counts[ci];
        for (int ti = 0; ti < (int)ARRAY_COUNT(types); ti++) {
            tgc_comm_dtype dt = types[ti];
            t_all_reduce(rk, c, gk, dt, TGC_COMM_SUM, n, seed + 1);
            t_all_reduce(rk, c, gk, dt, TGC_COMM_MAX, n, seed + 2);
            t_reduce_scatter(rk, c, gk, dt, n, seed + 3, false);
            t_reduce_scatter(rk, c, gk, dt, n, seed + 4, true);
            t_reduce_scatter_v(rk, c, gk, dt, n, seed + 10);
            t_all_gather(rk, c, gk, dt, n, seed + 5, false);
            t_all_gather(rk, c, gk, dt, n, seed + 6, true);
            t_broadcast(rk, c, gk, dt, n, seed + 7 + (int)ci);
        }
        t_all_gather(rk, c, gk, TGC_COMM_BYTE, n, seed + 8, false);
        t_broadcast(rk, c, gk, TGC_COMM_BYTE, n, seed + 9 + (int)ci);
        RCHECK_OK(rk, c, tgc_comm_barrier(c, gk));
        expect_add(rk, TGC_COMM_BARRIER, gk, 0, 1);
    }
}

/* Point-to-point: a ring exchange with tags received out of order, a
 * zero-length message, sendrecv, and pipeline neighbours. */
static void t_p2p(rank_state *rk, tgc_comm *c)
{
    int n = tgc_comm_size(c), right = (rk->rank + 1) % n, left = (rk->rank + n - 1) % n;
    double a[13], b[13], got[13], want[13];
    fill(TGC_COMM_F64, 71, rk->rank, 13, false, a);
    fill(TGC_COMM_F64, 72, rk->rank, 13, false, b);
    RCHECK_OK(rk, c, tgc_comm_send(c, a, 13, TGC_COMM_F64, right, 5));
    RCHECK_OK(rk, c, tgc_comm_send(c, NULL, 0, TGC_COMM_BYTE, right, 9));
    RCHECK_OK(rk, c, tgc_comm_send(c, b, 13, TGC_COMM_F64, right, 5));
    RCHECK_OK(rk, c, tgc_comm_recv(c, NULL, 0, TGC_COMM_BYTE, left, 9));
    RCHECK_OK(rk, c, tgc_comm_recv(c, got, 13, TGC_COMM_F64, left, 5)); /* tag 5 in order: a, then b */
    fill(TGC_COMM_F64, 71, left, 13, false, want);
    RCHECK(rk, memcmp(got, want, sizeof got) == 0);
    RCHECK_OK(rk, c, tgc_comm_recv(c, got, 13, TGC_COMM_F64, left, 5));
    fill(TGC_COMM_F64, 72, left, 13, false, want);
    RCHECK(rk, memcmp(got, want, sizeof got) == 0);
    for (int i = 0; i < 3; i++) expect_add(rk, TGC_COMM_SEND, TGC_COMM_WORLD, i == 1 ? 0 : sizeof a, n);
    for (int i = 0; i < 3; i++) expect_add(rk, TGC_COMM_RECV, TGC_COMM_WORLD, i == 0 ? 0 : sizeof a, n);

    float s[1001], r[1001], w[1001];
    fill(TGC_COMM_F32, 73, rk->rank, 1001, false, s);
    fill(TGC_COMM_F32, 73, left, 1001, false, w);
    RCHECK_OK(rk, c, tgc_comm_sendrecv(c, s, 1001, right, r, 1001, left, TGC_COMM_F32, 0));
    RCHECK(rk, memcmp(r, w, sizeof r) == 0);
    expect_add(rk, TGC_COMM_SEND, TGC_COMM_WORLD, sizeof s, n);
    expect_add(rk, TGC_COMM_RECV, TGC_COMM_WORLD, sizeof r, n);

    /* Stage to stage along the pipeline group. */
    const tgc_topology *topo = tgc_comm_topology(c);
    int pp = tgc_comm_group_rank(c, TGC_COMM_PP), p = topo->p;
    if (pp + 1 < p) {
        RCHECK_OK(rk, c, tgc_comm_send(c, s, 1001, TGC_COMM_F32, tgc_topology_group_member(topo, rk->rank, TGC_COMM_PP, pp + 1), 1));
        expect_add(rk, TGC_COMM_SEND, TGC_COMM_WORLD, sizeof s, n);
    }
    if (pp > 0) {
        int prev = tgc_topology_group_member(topo, rk->rank, TGC_COMM_PP, pp - 1);
        RCHECK_OK(rk, c, tgc_comm_recv(c, r, 1001, TGC_COMM_F32, prev, 1));
        fill(TGC_COMM_F32, 73, prev, 1001, false, w);
        RCHECK(rk, memcmp(r, w, sizeof r) == 0);
        expect_add(rk, TGC_COMM_RECV, TGC_COMM_WORLD, sizeof r, n);
    }
}

static int suite_rank(tgc_comm *c, void *arg)
{
    suite *s = arg;
    rank_state *rk = &s->ranks[tgc_comm_rank(c)];
    rk->rank = tgc_comm_rank(c);
    rk->counts = s->counts, rk->ncounts = s->ncounts, rk->seed = s->seed;
    for (int g = 0; g < TGC_COMM_GROUP_COUNT; g++) t_group(rk, c, (tgc_comm_group)g);
    t_p2p(rk, c);
    RCHECK_OK(rk, c, tgc_comm_barrier(c, TGC_COMM_WORLD));
    expect_add(rk, TGC_COMM_BARRIER, TGC_COMM_WORLD, 0, 1);
    return rk->fails;
}

/* ---- the collective suite on one topology -------------------------------------------- */

static bool stats_equal(const tgc_comm_stats *a, const tgc_comm_stats *b)
{
    for (int k = 0; k < TGC_COMM_KIND_COUNT; k++)
        for (int g = 0; g < TGC_COMM_GROUP_COUNT; g++) {
            if (a->calls[k][g] != b->calls[k][g]) return false;
            if (fabs(a->bytes[k][g] - b->bytes[k][g]) > 1e-9 * fabs(b->bytes[k][g])) return false;
        }
    return true;
}

/* Runs the suite `runs` times; every run must give the same bits on each
 * rank, and ranks of one group the same all_reduce results. */
static void test_topology_suite(int t, int d, int p, int runs)
{
    static const size_t counts[] = {0, 1, 7, 33, 1000, 4099};
    tgc_topology topo;
    CHECK(tgc_topology_init(&topo, t, d, p) == TGC_COMM_OK);
    int n = tgc_topology_size(&topo);
    uint64_t first[MAX_RANKS] = {0};
    suite *s = calloc(1, sizeof *s);
    for (int run = 0; run < runs; run++) {
        tgc_comm_local_world *w = tgc_comm_local_world_new_topo(&topo, NULL, NULL);
        CHECK(w != NULL);
        if (!w) break;
        memset(s, 0, sizeof *s);
        s->counts = counts, s->ncounts = (int)ARRAY_COUNT(counts), s->seed = 1;
        CHECK(tgc_comm_local_world_run(w, suite_rank, s) == 0);
        for (int r = 0; r < n; r++) {
            CHECK(s->ranks[r].fails == 0);
            if (run == 0) first[r] = s->ranks[r].hash;
            CHECK(s->ranks[r].hash == first[r]);
            for (int g = 0; g < TGC_COMM_GROUP_COUNT; g++) {
                int m0 = tgc_topology_group_member(&topo, r, (tgc_comm_group)g, 0);
                CHECK(s->ranks[r].ar_hash[g] == s->ranks[m0].ar_hash[g]);
            }
            CHECK(stats_equal(tgc_comm_stats_get(tgc_comm_local_world_comm(w, r)), &s->ranks[r].expect));
        }
        tgc_comm_local_world_free(w);
    }
    free(s);
    printf("local suite t=%d d=%d p=%d: %d run(s)\n", t, d, p, runs);
}

/* ---- topology ------------------------------------------------------------------------ */

/* "[0,1] [2,3] ..." for every group of kind g, in group-index order. */
static void groups_string(const tgc_topology *topo, tgc_comm_group g, char *buf, size_t cap)
{
    size_t len = 0;
    int members[MAX_RANKS];
    buf[0] = 0;
    for (int idx = 0; idx < tgc_topology_group_count(topo, g); idx++) {
        int first = -1; /* the first rank whose group has this index */
        for (int r = 0; r < tgc_topology_size(topo) && first < 0; r++)
            if (tgc_topology_group_index(topo, r, g) == idx) first = r;
        int size = tgc_topology_group_members(topo, first, g, members);
        len += (size_t)snprintf(buf + len, cap - len, "%s[", idx ? " " : "");
        for (int i = 0; i < size; i++) len += (size_t)snprintf(buf + len, cap - len, "%s%d", i ? "," : "", members[i]);
        len += (size_t)snprintf(buf + len, cap - len, "]");
    }
}

static void test_topology(void)
{
    tgc_topology topo;
    char buf[512];
    CHECK(tgc_topology_init(&topo, 2, 2, 2) == TGC_COMM_OK);
    CHECK(tgc_topology_size(&topo) == 8);
    /* Megatron's initialize_model_parallel with 8 GPUs, t = 2, p = 2. */
    groups_string(&topo, TGC_COMM_TP, buf, sizeof buf);
    printf("t=2 d=2 p=2 tp: %s\n", buf);
    CHECK_STR(buf, "[0,1] [2,3] [4,5] [6,7]");
    groups_string(&topo, TGC_COMM_DP, buf, sizeof buf);
    printf("t=2 d=2 p=2 dp: %s\n", buf);
    CHECK_STR(buf, "[0,2] [1,3] [4,6] [5,7]");
    groups_string(&topo, TGC_COMM_PP, buf, sizeof buf);
    printf("t=2 d=2 p=2 pp: %s\n", buf);
    CHECK_STR(buf, "[0,4] [1,5] [2,6] [3,7]");
    groups_string(&topo, TGC_COMM_WORLD, buf, sizeof buf);
    CHECK_STR(buf, "[0,1,2,3,4,5,6,7]");
    /* The example in Megatron's docstring: 16 GPUs, t = 2, p = 4. */
    CHECK(tgc_topology_init(&topo, 2, 2, 4) == TGC_COMM_OK);
    groups_string(&topo, TGC_COMM_DP, buf, sizeof buf);
    CHECK_STR(buf, "[0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]");
    groups_string(&topo, TGC_COMM_TP, buf, sizeof buf);
    CHECK_STR(buf, "[0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]");
    groups_string(&topo, TGC_COMM_PP, buf, sizeof buf);
    CHECK_STR(buf, "[0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]");
    tgc_coords co = tgc_topology_coords(&topo, 13);
    CHECK(co.tp == 1 && co.dp == 0 && co.pp == 3);
    CHECK(tgc_topology_rank(&topo, co) == 13);
    CHECK(tgc_topology_init(&topo, 0, 1, 1) == TGC_COMM_ERR_ARG);
    CHECK(tgc_topology_init(&topo, 1 << 10, 1 << 10, 2) == TGC_COMM_ERR_ARG);
}

/* Every (t, d, p) up to 8 ranks: coordinates round-trip, and each group
 * kind partitions the world with every rank at its coordinate. */
static void test_topology_partitions(void)
{
    for (int t = 1; t <= 8; t++)
        for (int d = 1; t * d <= 8; d++)
            for (int p = 1; t * d * p <= 8; p++) {
                tgc_topology topo;
                tgc_topology_init(&topo, t, d, p);
                int n = t * d * p, members[MAX_RANKS];
                for (int r = 0; r < n; r++) {
                    tgc_coords co = tgc_topology_coords(&topo, r);
                    CHECK(tgc_topology_rank(&topo, co) == r);
                    CHECK(r == co.tp + t * (co.dp + d * co.pp));
                    for (int g = 0; g < TGC_COMM_GROUP_COUNT; g++) {
                        int size = tgc_topology_group_members(&topo, r, (tgc_comm_group)g, members);
                        int me = tgc_topology_group_rank(&topo, r, (tgc_comm_group)g);
                        CHECK(size == tgc_topology_group_size(&topo, (tgc_comm_group)g));
                        CHECK(members[me] == r);
                        for (int i = 0; i < size; i++)
                            CHECK(tgc_topology_group_index(&topo, members[i], (tgc_comm_group)g) ==
                                  tgc_topology_group_index(&topo, r, (tgc_comm_group)g));
                    }
                    CHECK(tgc_topology_group_member(&topo, r, TGC_COMM_DP, 0) == co.tp + t * d * co.pp);
                }
            }
}

/* ---- statistics ------------------------------------------------------------------------- */

static void test_stats_format(void)
{
    tgc_comm_stats s;
    memset(&s, 0, sizeof s);
    s.calls[TGC_COMM_ALL_REDUCE][TGC_COMM_TP] = 3;
    s.bytes[TGC_COMM_ALL_REDUCE][TGC_COMM_TP] = 3 * tgc_comm_ring_bytes(TGC_COMM_ALL_REDUCE, 4096, 4);
    s.calls[TGC_COMM_SEND][TGC_COMM_WORLD] = 1;
    s.bytes[TGC_COMM_SEND][TGC_COMM_WORLD] = tgc_comm_ring_bytes(TGC_COMM_SEND, 10, 8);
    s.calls[TGC_COMM_ALL_GATHER][TGC_COMM_DP] = 1;
    s.bytes[TGC_COMM_ALL_GATHER][TGC_COMM_DP] = tgc_comm_ring_bytes(TGC_COMM_ALL_GATHER, 10, 3);
    CHECK(tgc_comm_ring_bytes(TGC_COMM_ALL_REDUCE, 4096, 4) == 6144);
    CHECK(tgc_comm_ring_bytes(TGC_COMM_REDUCE_SCATTER, 4096, 4) == 3072);
    CHECK(tgc_comm_ring_bytes(TGC_COMM_ALL_REDUCE, 4096, 1) == 0);
    CHECK(tgc_comm_ring_bytes(TGC_COMM_BROADCAST, 4096, 2) == 4096);
    CHECK(tgc_comm_ring_bytes(TGC_COMM_BARRIER, 4096, 2) == 0);
    CHECK(tgc_comm_stats_calls(&s, TGC_COMM_ALL_REDUCE) == 3);
    CHECK(tgc_comm_stats_bytes(&s, TGC_COMM_ALL_REDUCE) == 18432);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    tgc_comm_stats_print(&s, "rank 0", f);
    fclose(f);
    printf("%s", text);
    CHECK_STR(text, "comm stats: rank 0\n"
                    "kind             group         calls              bytes\n"
                    "all_reduce       tp                3              18432\n"
                    "all_gather       dp                1               6.67\n"
                    "send             -                 1                 10\n"
                    "total                              5           18448.67\n");
    free(text);
    tgc_comm_stats sum;
    memset(&sum, 0, sizeof sum);
    tgc_comm_stats_add(&sum, &s);
    tgc_comm_stats_add(&sum, &s);
    CHECK(tgc_comm_stats_calls(&sum, TGC_COMM_ALL_REDUCE) == 6);
}

/* ---- errors, aborts and timeouts ----------------------------------------------------------- */

static void fault_record(fault_case *fc, tgc_comm *c, int rc, double t0)
{
    int r = tgc_comm_rank(c);
    fault_note(fc, c, rc, t0);
    /* Later calls fail at once too. */
    fc->after[r] = tgc_comm_barrier(c, TGC_COMM_TP);
}

/* Rank 3 fails while rank 0 waits in a world barrier, rank 1 in a DP
 * all-reduce with it, rank 2 in a receive from it. */
static int abort_rank(tgc_comm *c, void *arg)
{
    fault_case *fc = arg;
    int r = tgc_comm_rank(c);
    float x[5] = {1, 2, 3, 4, 5};
    double t0 = now_s();
    if (r == 3) {
        sleep_ms(200);
        return tgc_comm_abort(c, 3, "injected fault");
    }
    int rc = r == 0   ? tgc_comm_barrier(c, TGC_COMM_WORLD)
             : r == 1 ? tgc_comm_all_reduce(c, TGC_COMM_DP, x, 5, TGC_COMM_F32, TGC_COMM_SUM)
                      : tgc_comm_recv(c, x, 5, TGC_COMM_F32, 3, 0);
    fault_record(fc, c, rc, t0);
    return 0;
}

static void test_abort(void)
{
    tgc_topology topo;
    tgc_topology_init(&topo, 2, 2, 1);
    tgc_comm_local_options opt = {.timeout_s = 120};
    tgc_comm_local_world *w = tgc_comm_local_world_new_topo(&topo, &opt, NULL);
    fault_case fc;
    memset(&fc, 0, sizeof fc);
    CHECK(tgc_comm_local_world_run(w, abort_rank, &fc) == 0);
    for (int r = 0; r < 3; r++) {
        printf("abort: rank %d returned after %.3f s: %s\n", r, fc.secs[r], fc.msg[r]);
        CHECK(fc.rc[r] == TGC_COMM_ERR_ABORTED);
        CHECK(strstr(fc.msg[r], "rank 3 failed: injected fault") != NULL);
        CHECK(fc.secs[r] < 10.0); /* promptly, not after the 120 s timeout */
        CHECK(fc.after[r] == TGC_COMM_ERR_ABORTED);
    }
    CHECK_STR(fc.msg[1], "rank 1: all_reduce(dp): rank 3 failed: injected fault");
    tgc_comm_local_world_free(w);
}

/* Rank 3 never arrives: the others time out and name it. */
static int timeout_rank(tgc_comm *c, void *arg)
{
    fault_case *fc = arg;
    double x[3] = {1, 2, 3}, t0 = now_s();
    if (tgc_comm_rank(c) == 3) return 0;
    fault_record(fc, c, tgc_comm_all_reduce(c, TGC_COMM_WORLD, x, 3, TGC_COMM_F64, TGC_COMM_MAX), t0);
    return 0;
}

static void test_timeout(void)
{
    tgc_topology topo;
    tgc_topology_init(&topo, 2, 2, 1);
    tgc_comm_local_options opt = {.timeout_s = 2};
    tgc_comm_local_world *w = tgc_comm_local_world_new_topo(&topo, &opt, NULL);
    fault_case fc;
    memset(&fc, 0, sizeof fc);
    CHECK(tgc_comm_local_world_run(w, timeout_rank, &fc) == 0);
    int timeouts = 0;
    for (int r = 0; r < 3; r++) {
        printf("timeout: rank %d returned after %.3f s: %s\n", r, fc.secs[r], fc.msg[r]);
        CHECK(fc.rc[r] == TGC_COMM_ERR_TIMEOUT || fc.rc[r] == TGC_COMM_ERR_ABORTED);
        timeouts += fc.rc[r] == TGC_COMM_ERR_TIMEOUT;
        CHECK(strstr(fc.msg[r], "rank 3") != NULL);
        CHECK(fc.secs[r] > 1.9 && fc.secs[r] < 15.0);
        CHECK(fc.after[r] == TGC_COMM_ERR_ABORTED);
    }
    CHECK(timeouts >= 1);
    tgc_comm_local_world_free(w);
}

static int recv_timeout_rank(tgc_comm *c, void *arg)
{
    fault_case *fc = arg;
    char x[4];
    double t0 = now_s();
    if (tgc_comm_rank(c) == 0) fault_record(fc, c, tgc_comm_recv(c, x, 4, TGC_COMM_BYTE, 1, 3), t0);
    return 0;
}

static void test_recv_timeout(void)
{
    tgc_topology topo = {1, 2, 1};
    tgc_comm_local_options opt = {.timeout_s = 1};
    tgc_comm_local_world *w = tgc_comm_local_world_new_topo(&topo, &opt, NULL);
    fault_case fc;
    memset(&fc, 0, sizeof fc);
    CHECK(tgc_comm_local_world_run(w, recv_timeout_rank, &fc) == 0);
    printf("recv timeout: %s\n", fc.msg[0]);
    CHECK(fc.rc[0] == TGC_COMM_ERR_TIMEOUT);
    CHECK_STR(fc.msg[0], "rank 0: recv: timed out after 1 s waiting for rank 1 (tag 3)");
    tgc_comm_local_world_free(w);
}

/* Ranks that call different collectives all get the same error, and none
 * hangs (a barrier against an all_reduce included). */
static int mismatch_rank(tgc_comm *c, void *arg)
{
    fault_case *fc = arg;
    int r = tgc_comm_rank(c);
    float x[6] = {0};
    double t0 = now_s();
    int rc = r == 0 ? tgc_comm_all_reduce(c, TGC_COMM_WORLD, x, 5, TGC_COMM_F32, TGC_COMM_SUM)
             : r == 1 ? tgc_comm_all_reduce(c, TGC_COMM_WORLD, x, 6, TGC_COMM_F32, TGC_COMM_SUM)
                      : tgc_comm_barrier(c, TGC_COMM_WORLD);
    fault_record(fc, c, rc, t0);
    return 0;
}

static void test_mismatch(void)
{
    tgc_comm_local_world *w = tgc_comm_local_world_new(3, NULL);
    fault_case fc;
    memset(&fc, 0, sizeof fc);
    CHECK(tgc_comm_local_world_run(w, mismatch_rank, &fc) == 0);
    for (int r = 0; r < 3; r++) {
        CHECK(fc.rc[r] == TGC_COMM_ERR_MISMATCH);
        CHECK(strstr(fc.msg[r], "rank 1 called all_reduce(sum) of 6 f32 but rank 0 called all_reduce(sum) of 5 f32"));
    }
    printf("mismatch: %s\n", fc.msg[2]);
    tgc_comm_local_world_free(w);
}

/* A rank function that fails takes the world down with it. */
static int failing_rank(tgc_comm *c, void *arg)
{
    fault_case *fc = arg;
    double t0 = now_s();
    if (tgc_comm_rank(c) == 1) return 7;
    fault_record(fc, c, tgc_comm_barrier(c, TGC_COMM_WORLD), t0);
    return fc->rc[tgc_comm_rank(c)];
}

static void test_failing_rank(void)
{
    tgc_comm_local_options opt = {.timeout_s = 100};
    tgc_topology topo = {1, 3, 1};
    tgc_comm_local_world *w = tgc_comm_local_world_new_topo(&topo, &opt, NULL);
    fault_case fc;
    memset(&fc, 0, sizeof fc);
    CHECK(tgc_comm_local_world_run(w, failing_rank, &fc) == TGC_COMM_ERR_ABORTED); /* rank 0's */
    CHECK(fc.rc[0] == TGC_COMM_ERR_ABORTED && fc.rc[2] == TGC_COMM_ERR_ABORTED);
    CHECK_STR(fc.msg[2], "rank 2: barrier(world): rank 1 failed: its rank function returned 7");
    CHECK(fc.secs[0] < 10 && fc.secs[2] < 10);
    tgc_comm_local_world_free(w);
}

/* Bad arguments return TGC_COMM_ERR_ARG with a message (each on a fresh
 * one-rank world: an error is fatal to its world). */
static int bad_arg_rank(tgc_comm *c, void *arg)
{
    int which = *(int *)arg;
    float x[4] = {0};
    switch (which) {
    case 0: return tgc_comm_all_reduce(c, TGC_COMM_TP, x, 4, TGC_COMM_BYTE, TGC_COMM_SUM);
    case 1: return tgc_comm_all_reduce(c, (tgc_comm_group)9, x, 4, TGC_COMM_F32, TGC_COMM_SUM);
    case 2: return tgc_comm_send(c, x, 4, TGC_COMM_F32, 5, 0);
    case 3: return tgc_comm_broadcast(c, TGC_COMM_DP, x, 4, TGC_COMM_F32, 1);
    case 4: return tgc_comm_all_gather(c, TGC_COMM_PP, NULL, x, 4, TGC_COMM_F32);
    case 5: return tgc_comm_recv(c, x, 4, TGC_COMM_F32, 0, -2);
    default: return tgc_comm_all_reduce(c, TGC_COMM_TP, x, SIZE_MAX / 2, TGC_COMM_F64, TGC_COMM_MAX);
    }
}

static void test_bad_args(void)
{
    static const char *const want[] = {
        "rank 0: all_reduce(tp): cannot reduce raw bytes (use f32, f64, bf16 or f16)",
        "rank 0: all_reduce(world): invalid group 9",
        "rank 0: send: destination rank 5 outside the world of 1 ranks",
        "rank 0: broadcast(dp): root 1 outside the group of 1 ranks",
        "rank 0: all_gather(pp): send is NULL",
        "rank 0: recv: negative tag -2",
        "rank 0: all_reduce(tp): 9223372036854775807 elements overflow the byte count",
    };
    for (int i = 0; i < (int)ARRAY_COUNT(want); i++) {
        tgc_comm_local_world *w = tgc_comm_local_world_new(1, NULL);
        tgc_comm *c = tgc_comm_local_world_comm(w, 0);
        CHECK(tgc_comm_local_world_run(w, bad_arg_rank, &i) == TGC_COMM_ERR_ARG);
        CHECK_STR(tgc_comm_error(c), want[i]);
        CHECK(tgc_comm_barrier(c, TGC_COMM_WORLD) == TGC_COMM_ERR_ABORTED); /* fatal to the world */
        tgc_comm_local_world_free(w);
    }
    CHECK(tgc_comm_local_world_new(0, NULL) == NULL);
    CHECK(tgc_comm_local_world_comm(NULL, 0) == NULL);
}

/* A received message of another size is an error naming the sender. */
static int size_mismatch_rank(tgc_comm *c, void *arg)
{
    char buf[8] = {0};
    if (tgc_comm_rank(c) == 1) return tgc_comm_send(c, buf, 8, TGC_COMM_BYTE, 0, 0);
    int rc = tgc_comm_recv(c, buf, 4, TGC_COMM_BYTE, 1, 0);
    snprintf(arg, 512, "%s", tgc_comm_error(c));
    return rc == TGC_COMM_ERR_MISMATCH ? 0 : 1;
}

static void test_recv_size(void)
{
    char msg[512] = "";
    tgc_comm_local_world *w = tgc_comm_local_world_new(2, NULL);
    CHECK(tgc_comm_local_world_run(w, size_mismatch_rank, msg) == 0);
    CHECK_STR(msg, "rank 0: recv: rank 1 sent 8 bytes with tag 0, expected 4");
    tgc_comm_local_world_free(w);
}

/* MAX propagates NaN; -0 / infinities pass through. */
static int nan_rank(tgc_comm *c, void *arg)
{
    float *out = (float *)arg + 4 * tgc_comm_rank(c);
    float mine[2][4] = {{1, -INFINITY, -0.0f, 3}, {NAN, -5, 0.0f, INFINITY}};
    memcpy(out, mine[tgc_comm_rank(c)], sizeof mine[0]);
    return tgc_comm_all_reduce(c, TGC_COMM_WORLD, out, 4, TGC_COMM_F32, TGC_COMM_MAX);
}

static void test_max_nan(void)
{
    float out[8];
    tgc_comm_local_world *w = tgc_comm_local_world_new(2, NULL);
    CHECK(tgc_comm_local_world_run(w, nan_rank, out) == 0);
    for (int r = 0; r < 2; r++) {
        CHECK(isnan(out[4 * r]));
        CHECK(out[4 * r + 1] == -5);
        CHECK(out[4 * r + 3] == INFINITY);
    }
    CHECK(memcmp(out, out + 4, 4 * sizeof(float)) == 0 || isnan(out[0]));
    tgc_comm_local_world_free(w);
}

/* 16-bit sums round once: bf16 256 + 1 + 1 is 258 in f32, rounded once
 * 258; rounded at each step (256 + 1 ties to 256) it would stay 256. f16
 * 2048 + 1 + 1 likewise. MAX keeps a NaN with its payload and -0 / inf. */
typedef struct b16_case {
    tgc_comm_dtype dt;
    uint16_t in[3][4], out[3][4];
} b16_case;

static int b16_rank(tgc_comm *c, void *arg)
{
    b16_case *bc = arg;
    int r = tgc_comm_rank(c);
    memcpy(bc->out[r], bc->in[r], sizeof bc->in[r]);
    int rc = tgc_comm_all_reduce(c, TGC_COMM_WORLD, bc->out[r], 2, bc->dt, TGC_COMM_SUM);
    return rc ? rc : tgc_comm_all_reduce(c, TGC_COMM_WORLD, bc->out[r] + 2, 2, bc->dt, TGC_COMM_MAX);
}

static void test_round_once(void)
{
    for (int k = 0; k < 2; k++) {
        tgc_comm_dtype dt = k ? TGC_COMM_F16 : TGC_COMM_BF16;
        double big = k ? 2048.0 : 256.0;
        uint16_t nan = k ? 0x7e05 : 0x7fc5, ninf = k ? 0xfc00 : 0xff80;
        b16_case bc = {.dt = dt};
        for (int r = 0; r < 3; r++) {
            bc.in[r][0] = b16_encode(dt, r == 0 ? big : 1.0);
            bc.in[r][1] = b16_encode(dt, r == 0 ? -big : r == 1 ? -1.0 : -1.0);
            bc.in[r][2] = r == 1 ? nan : b16_encode(dt, (double)r);
            bc.in[r][3] = r == 0 ? 0x8000 : ninf;
        }
        tgc_comm_local_world *w = tgc_comm_local_world_new(3, NULL);
        CHECK(tgc_comm_local_world_run(w, b16_rank, &bc) == 0);
        for (int r = 0; r < 3; r++) {
            CHECK(b16_decode(dt, bc.out[r][0]) == big + 2.0);
            CHECK(b16_decode(dt, bc.out[r][1]) == -(big + 2.0));
            CHECK(bc.out[r][2] == nan);    /* the NaN, its payload kept */
            CHECK(bc.out[r][3] == 0x8000); /* -0 > -inf */
        }
        tgc_comm_local_world_free(w);
    }
}

/* TGC_COMM_TIMEOUT sets the default deadline; a bad value is refused. */
static void test_env_timeout(void)
{
    setenv("TGC_COMM_TIMEOUT", "1.5", 1);
    tgc_comm_local_world *w = tgc_comm_local_world_new(2, NULL);
    CHECK(w && tgc_comm_timeout(tgc_comm_local_world_comm(w, 1)) == 1.5);
    tgc_comm_local_world_free(w);
    setenv("TGC_COMM_TIMEOUT", "soon", 1);
    char *text = NULL;
    size_t len = 0;
    diag d;
    diag_init(&d, open_memstream(&text, &len));
    CHECK(tgc_comm_local_world_new(2, &d) == NULL);
    fclose(d.out);
    CHECK(text && strstr(text, "TGC_COMM_TIMEOUT must be a positive number of seconds"));
    diag_free(&d);
    free(text);
    unsetenv("TGC_COMM_TIMEOUT");
    w = tgc_comm_local_world_new(1, NULL);
    CHECK(w && tgc_comm_timeout(tgc_comm_local_world_comm(w, 0)) == TGC_COMM_DEFAULT_TIMEOUT);
    CHECK(strcmp(tgc_comm_backend(tgc_comm_local_world_comm(w, 0)), "local") == 0);
    tgc_comm_local_world_free(w);
}

/* ---- main ---------------------------------------------------------------------------------- */

int main(void)
{
    unsetenv("TGC_COMM_TIMEOUT");
    test_topology();
    test_topology_partitions();
    test_stats_format();
    /* 1, 2, 4 and 8 rank threads; (2,2,2) repeated for bitwise determinism. */
    test_topology_suite(1, 1, 1, 2);
    test_topology_suite(2, 1, 1, 2);
    test_topology_suite(1, 1, 2, 2);
    test_topology_suite(4, 1, 1, 2);
    test_topology_suite(1, 2, 2, 2);
    test_topology_suite(2, 2, 2, REPEATS);
    test_topology_suite(8, 1, 1, 2);
    test_topology_suite(2, 1, 4, 2);
    test_topology_suite(1, 8, 1, 2);
    test_max_nan();
    test_round_once();
    test_recv_size();
    test_bad_args();
    test_mismatch();
    test_failing_rank();
    test_abort();
    test_recv_timeout();
    test_timeout();
    test_env_timeout();
    CHECK_DONE();
}
