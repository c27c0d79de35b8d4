/* The `mpi` communicator (runtime/comm/comm_mpi.c) under mpirun: the conformance
 * cases of tests/unit/test_comm.c, run with one process per rank, and its
 * failures. Driven by tests/mpi/failure.sh and tests/CMakeLists.txt:
 *
 *   test_comm_mpi suite       every collective on every group of several
 *                             topologies of the world's size, checked
 *                             against the serial fold and, bit for bit,
 *                             against the `local` communicator run on the
 *                             same inputs; statistics against the formulas;
 *                             NaN, infinities and signed zeros;
 *   test_comm_mpi api         without mpirun: the singleton world, errors
 *                             of creation, the launcher test, and (built
 *                             without MPI) the "built without MPI" report;
 *   test_comm_mpi abort | timeout | mismatch | recv-size | kill | exit | size
 *                             one failure each; failure.sh checks what every
 *                             rank printed and that the job ended in time.
 *
 * The conformance cases are test_comm.c's own functions: the file is
 * included with its main renamed, so the two tests cannot drift apart. */
#define main test_comm_local_main
#include "../unit/test_comm.c"
#undef main

#include <float.h>
#include <signal.h>
#include <unistd.h>

#include "runtime/comm/comm_mpi.h"
#include "support/diag.h"

/* ---- the conformance suite ------------------------------------------------------------- */

/* A rank function as tgc_comm_local_world_run calls it: a rank that fails
 * aborts the world. */
static int run_rank(tgc_comm *c, tgc_comm_rank_fn fn, void *arg)
{
    int rc = fn(c, arg);
    if (rc) {
        char why[64];
        snprintf(why, sizeof why, "its rank function returned %d", rc);
        tgc_comm_abort(c, tgc_comm_rank(c), why);
    }
    return rc;
}

/* The hashes of every rank's results under `local` (topology topo), known
 * to rank 0 and broadcast to all (a byte broadcast: no arithmetic of the
 * communicator under test is trusted for the reference). */
typedef struct reference {
    uint64_t hash[MAX_RANKS], ar_hash[MAX_RANKS][TGC_COMM_GROUP_COUNT];
} reference;

static const size_t suite_counts[] = {0, 1, 7, 33, 1000, 4099};

static void suite_local(const tgc_topology *topo, reference *ref)
{
    suite *s = calloc(1, sizeof *s);
    tgc_comm_local_world *w = tgc_comm_local_world_new_topo(topo, NULL, NULL);
    CHECK(s && w);
    if (!s || !w) return;
    s->counts = suite_counts, s->ncounts = (int)ARRAY_COUNT(suite_counts), s->seed = 1;
    CHECK(tgc_comm_local_world_run(w, suite_rank, s) == 0);
    for (int r = 0; r < tgc_topology_size(topo); r++) {
        ref->hash[r] = s->ranks[r].hash;
        memcpy(ref->ar_hash[r], s->ranks[r].ar_hash, sizeof ref->ar_hash[r]);
    }
    tgc_comm_local_world_free(w);
    free(s);
}

/* The suite `runs` times on the mpi communicator for topology (t, d, p),
 * with messages of at most `chunk` bytes (0: the default; a small one
 * sends every larger transfer in parts). */
static void suite_mpi(int t, int d, int p, int runs, size_t chunk)
{
    tgc_topology topo;
    CHECK(tgc_topology_init(&topo, t, d, p) == TGC_COMM_OK);
    tgc_comm_mpi_options opt = {.timeout_s = 60, .chunk_bytes = chunk};
    diag dg;
    diag_init(&dg, stderr);
    tgc_comm *c = tgc_comm_mpi_new_opts(&topo, &opt, &dg);
    diag_free(&dg);
    CHECK(c != NULL);
    if (!c) return;
    int rank = tgc_comm_rank(c);
    CHECK(strcmp(tgc_comm_backend(c), "mpi") == 0);
    suite *s = calloc(1, sizeof *s);
    uint64_t first = 0;
    double t0 = now_s();
    for (int run = 0; run < runs; run++) {
        memset(s, 0, sizeof *s);
        s->counts = suite_counts, s->ncounts = (int)ARRAY_COUNT(suite_counts), s->seed = 1;
        tgc_comm_stats_reset(c);
        CHECK(run_rank(c, suite_rank, s) == 0);
        rank_state *rk = &s->ranks[rank];
        CHECK(rk->fails == 0);
        CHECK(stats_equal(tgc_comm_stats_get(c), &rk->expect));
        if (run == 0) first = rk->hash;
        CHECK(rk->hash == first); /* the same bits every run */
    }
    double secs = now_s() - t0;
    reference ref;
    memset(&ref, 0, sizeof ref);
    if (rank == 0) suite_local(&topo, &ref);
    CHECK(tgc_comm_broadcast(c, TGC_COMM_WORLD, &ref, sizeof ref, TGC_COMM_BYTE, 0) == TGC_COMM_OK);
    /* Bit for bit what `local` gives this rank, every result of every call. */
    CHECK(s->ranks[rank].hash == ref.hash[rank]);
    for (int g = 0; g < TGC_COMM_GROUP_COUNT; g++) CHECK(s->ranks[rank].ar_hash[g] == ref.ar_hash[rank][g]);
    if (rank == 0)
        printf("mpi suite t=%d d=%d p=%d%s: %d run(s) in %.2f s, equal to local\n", t, d, p,
               chunk ? ", small chunks" : "", runs, secs);
    free(s);
    tgc_comm_free(c);
}

/* Values that test the reductions' edge cases: NaN anywhere gives NaN in
 * max, infinities of both signs, signed zeros (max(-0, 0) keeps the first
 * seen), and sums that overflow. */
#define SPECIAL_COUNT 64
static double special(int rank, int e)
{
    static const double v[] = {NAN, INFINITY, -INFINITY, -0.0, 0.0, 1.0, -1.0, 1e308, -1e308, 3.5, DBL_MIN};
    int n = (int)(sizeof v / sizeof v[0]);
    return v[(e * 7 + rank * 3 + (e / n) * rank) % n];
}

typedef struct special_out {
    float f[MAX_RANKS][4][SPECIAL_COUNT];
    double d[MAX_RANKS][4][SPECIAL_COUNT];
} special_out;

/* all_reduce sum and max, and reduce_scatter sum and max, in f32 and f64. */
static int special_rank(tgc_comm *c, void *arg)
{
    special_out *o = arg;
    int r = tgc_comm_rank(c), g = tgc_comm_size(c), rc = 0;
    size_t blk = SPECIAL_COUNT / (size_t)g;
    for (int k = 0; k < 4 && !rc; k++) {
        tgc_comm_op op = k & 1 ? TGC_COMM_MAX : TGC_COMM_SUM;
        float fs[SPECIAL_COUNT];
        double ds[SPECIAL_COUNT];
        for (int e = 0; e < SPECIAL_COUNT; e++) fs[e] = (float)special(r, e), ds[e] = special(r, e);
        if (k < 2) {
            memcpy(o->f[r][k], fs, sizeof fs);
            memcpy(o->d[r][k], ds, sizeof ds);
            rc = tgc_comm_all_reduce(c, TGC_COMM_WORLD, o->f[r][k], SPECIAL_COUNT, TGC_COMM_F32, op);
            if (!rc) rc = tgc_comm_all_reduce(c, TGC_COMM_WORLD, o->d[r][k], SPECIAL_COUNT, TGC_COMM_F64, op);
        } else {
            rc = tgc_comm_reduce_scatter(c, TGC_COMM_WORLD, fs, o->f[r][k], blk, TGC_COMM_F32, op);
            if (!rc) rc = tgc_comm_reduce_scatter(c, TGC_COMM_WORLD, ds, o->d[r][k], blk, TGC_COMM_F64, op);
        }
    }
    return rc;
}

static bool same_f(float a, float b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0; }
static bool same_d(double a, double b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0; }

static void specials_mpi(void)
{
    int rank = 0, n = 0;
    CHECK(tgc_comm_mpi_world(&rank, &n, NULL) == 0);
    tgc_topology topo = {1, n, 1};
    tgc_comm *c = tgc_comm_mpi_new(&topo, NULL);
    CHECK(c != NULL);
    if (!c) return;
    special_out *mine = calloc(1, sizeof *mine), *ref = calloc(1, sizeof *ref);
    CHECK(run_rank(c, special_rank, mine) == 0);
    if (rank == 0) {
        tgc_comm_local_world *w = tgc_comm_local_world_new_topo(&topo, NULL, NULL);
        CHECK(tgc_comm_local_world_run(w, special_rank, ref) == 0);
        tgc_comm_local_world_free(w);
    }
    CHECK(tgc_comm_broadcast(c, TGC_COMM_WORLD, ref, sizeof *ref, TGC_COMM_BYTE, 0) == TGC_COMM_OK);
    int bad = 0, nans = 0;
    size_t blk = SPECIAL_COUNT / (size_t)n;
    for (int k = 0; k < 4; k++)
        for (size_t e = 0; e < (k < 2 ? SPECIAL_COUNT : blk); e++) {
            bad += !same_f(mine->f[rank][k][e], ref->f[rank][k][e]) + !same_d(mine->d[rank][k][e], ref->d[rank][k][e]);
            nans += isnan(mine->d[rank][k][e]);
        }
    CHECK(bad == 0);
    CHECK(nans > 0); /* the cases do reach NaN */
    if (rank == 0) printf("mpi specials over %d ranks: %d mismatches, %d NaN results\n", n, bad, nans);
    free(mine);
    free(ref);
    tgc_comm_free(c);
}

static int mode_suite(void)
{
    int rank = 0, n = 0;
    CHECK(tgc_comm_mpi_world(&rank, &n, NULL) == 0);
    /* The last suite of 4 (or n) ranks sends in 1004-byte parts: the 1000-
     * and 4099-element cases go in several, not all whole elements. */
    if (n == 8) {
        suite_mpi(2, 2, 2, 5, 0);
        suite_mpi(8, 1, 1, 1, 0);
        suite_mpi(2, 1, 4, 1, 0);
        suite_mpi(1, 8, 1, 1, 0);
    } else if (n == 4) {
        suite_mpi(2, 2, 1, 3, 0);
        suite_mpi(4, 1, 1, 1, 0);
        suite_mpi(1, 2, 2, 1, 0);
        suite_mpi(1, 1, 4, 1, 0);
        suite_mpi(2, 1, 2, 1, 0);
        suite_mpi(1, 4, 1, 1, 0);
        suite_mpi(2, 2, 1, 1, 1004);
    } else {
        suite_mpi(1, n, 1, 2, 0);
        suite_mpi(n, 1, 1, 1, 0);
        suite_mpi(1, n, 1, 1, 1004);
    }
    specials_mpi();
    return 0;
}

/* ---- failures ---------------------------------------------------------------------------------- */

/* The communicator of a failure case: short deadlines and grace. */
static tgc_comm *fault_comm(int t, int d, int p, double timeout)
{
    tgc_topology topo = {t, d, p};
    tgc_comm_mpi_options opt = {.timeout_s = timeout, .abort_grace_s = 0.5};
    diag dg;
    diag_init(&dg, stderr);
    tgc_comm *c = tgc_comm_mpi_new_opts(&topo, &opt, &dg);
    diag_free(&dg);
    return c;
}

/* Prints what rank r saw; "checks passed" only when every check held. */
static void fault_report(const char *mode, const fault_case *fc, int r, int fails_before)
{
    printf("%s: rank %d returned after %.3f s: %s\n", mode, r, fc->secs[r], fc->msg[r]);
    if (check_failures == fails_before) printf("%s: rank %d: checks passed\n", mode, r);
    fflush(stdout);
}

/* test_comm.c's abort case: rank 3 fails while rank 0 waits in a world
 * barrier, rank 1 in a DP all-reduce with it, rank 2 in a receive from it. */
static int mode_abort(void)
{
    tgc_comm *c = fault_comm(2, 2, 1, 120);
    if (!c) return 1;
    int r = tgc_comm_rank(c), before = check_failures;
    fault_case fc;
    memset(&fc, 0, sizeof fc);
    run_rank(c, abort_rank, &fc);
    if (r == 3) return 0;
    CHECK(fc.rc[r] == TGC_COMM_ERR_ABORTED);
    CHECK(strstr(fc.msg[r], "rank 3 failed: injected fault") != NULL);
    CHECK(fc.secs[r] < 10.0); /* promptly, not after the 120 s timeout */
    CHECK(fc.after[r] == TGC_COMM_ERR_ABORTED);
    if (r == 1) CHECK_STR(fc.msg[1], "rank 1: all_reduce(dp): rank 3 failed: injected fault");
    fault_report("abort", &fc, r, before);
    return 0;
}

/* Rank 3 is busy elsewhere: the others time out naming it, and the job
 * ends without it. */
static int mode_timeout(void)
{
    tgc_comm *c = fault_comm(2, 2, 1, 1);
    if (!c) return 1;
    int r = tgc_comm_rank(c), before = check_failures;
    if (r == 3) {
        sleep(60);
        return 0;
    }
    fault_case fc;
    memset(&fc, 0, sizeof fc);
    run_rank(c, timeout_rank, &fc);
    CHECK(fc.rc[r] == TGC_COMM_ERR_TIMEOUT || fc.rc[r] == TGC_COMM_ERR_ABORTED);
    CHECK(strstr(fc.msg[r], "rank 3") != NULL);
    CHECK(strstr(fc.msg[r], "timed out after 1 s") != NULL);
    CHECK(fc.secs[r] > 0.95 && fc.secs[r] < 15.0);
    CHECK(fc.after[r] == TGC_COMM_ERR_ABORTED);
    fault_report("timeout", &fc, r, before);
    return 0;
}

/* Ranks 0 and 1 all-reduce 5 and 6 elements: a message of the wrong size
 * is a mismatch naming the sender; the other rank is told. */
static int mode_mismatch(void)
{
    tgc_comm *c = fault_comm(1, 2, 1, 30);
    if (!c) return 1;
    int r = tgc_comm_rank(c), before = check_failures;
    float x[6] = {0};
    fault_case fc;
    memset(&fc, 0, sizeof fc);
    double t0 = now_s();
    int rc = tgc_comm_all_reduce(c, TGC_COMM_WORLD, x, r == 0 ? 5 : 6, TGC_COMM_F32, TGC_COMM_SUM);
    fault_record(&fc, c, rc, t0);
    if (r == 1) {
        CHECK(rc == TGC_COMM_ERR_MISMATCH);
        CHECK_STR(fc.msg[1], "rank 1: all_reduce(world): rank 0 sent 8 bytes, expected 12 (different calls?)");
    } else {
        CHECK(rc == TGC_COMM_ERR_ABORTED);
        CHECK(strstr(fc.msg[0], "rank 0 failed: rank 0 sent 8 bytes, expected 12") != NULL);
    }
    CHECK(fc.secs[r] < 10.0);
    fault_report("mismatch", &fc, r, before);
    return 0;
}

/* test_comm.c's receive of another size than was sent: the same message. */
static int mode_recv_size(void)
{
    tgc_comm *c = fault_comm(1, 2, 1, 30);
    if (!c) return 1;
    int r = tgc_comm_rank(c), before = check_failures;
    fault_case fc;
    memset(&fc, 0, sizeof fc);
    CHECK(run_rank(c, size_mismatch_rank, fc.msg[r]) == 0);
    if (r == 0) CHECK_STR(fc.msg[0], "rank 0: recv: rank 1 sent 8 bytes with tag 0, expected 4");
    fault_report("recv-size", &fc, r, before);
    return 0;
}

/* Rank 2 dies (SIGKILL, or exit without MPI_Finalize) while the others
 * all-reduce with it: mpirun ends the job and names it. */
static int mode_die(bool kill_it)
{
    tgc_comm *c = fault_comm(1, 4, 1, 120);
    if (!c) return 1;
    int r = tgc_comm_rank(c);
    double x[1000] = {0};
    if (r == 2) {
        sleep_ms(300);
        if (kill_it) raise(SIGKILL);
        exit(3);
    }
    int rc = tgc_comm_all_reduce(c, TGC_COMM_WORLD, x, 1000, TGC_COMM_F64, TGC_COMM_SUM);
    printf("%s: rank %d: all_reduce returned %d: %s\n", kill_it ? "kill" : "exit", r, rc, tgc_comm_error(c));
    return 0;
}

/* A world of another size than the topology's: reported on every rank. */
static int mode_size(void)
{
    tgc_comm *c = fault_comm(2, 2, 1, 30);
    CHECK(c == NULL);
    return c ? 0 : 1;
}

/* ---- without mpirun ------------------------------------------------------------------------------ */

static void check_diag(tgc_comm *(*make)(const tgc_topology *, diag *), const tgc_topology *topo, const char *want)
{
    char *text = NULL;
    size_t len = 0;
    diag dg;
    diag_init(&dg, open_memstream(&text, &len));
    CHECK(make(topo, &dg) == NULL);
    fclose(dg.out);
    printf("api: %s", text ? text : "(nothing)\n");
    CHECK(text && strstr(text, want) != NULL);
    diag_free(&dg);
    free(text);
}

static int mode_api(void)
{
    char *saved = getenv("OMPI_COMM_WORLD_SIZE") ? strdup(getenv("OMPI_COMM_WORLD_SIZE")) : NULL;
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    CHECK(tgc_comm_mpi_launched());
    unsetenv("OMPI_COMM_WORLD_SIZE");
    if (saved) setenv("OMPI_COMM_WORLD_SIZE", saved, 1);
    free(saved);
    tgc_topology one = {1, 1, 1}, two = {2, 1, 1};
    if (!tgc_comm_mpi_available()) {
        check_diag(tgc_comm_mpi_new, &one, "tgc was built without MPI");
        CHECK(tgc_comm_mpi_finalize() == 0);
        return 0;
    }
    if (tgc_comm_mpi_launched()) {
        printf("api: started by a launcher; the singleton checks need a plain start\n");
        return 0;
    }
    /* Not launched: OpenMPI's singleton world of one rank. */
    setenv("TGC_COMM_TIMEOUT", "soon", 1);
    check_diag(tgc_comm_mpi_new, &one, "TGC_COMM_TIMEOUT must be a positive number of seconds");
    unsetenv("TGC_COMM_TIMEOUT");
    check_diag(tgc_comm_mpi_new, &two, "the MPI world has 1 process but t=2 x d=1 x p=1 needs 2 (mpirun -np 2)");
    tgc_comm *c = tgc_comm_mpi_new(&one, NULL);
    CHECK(c != NULL);
    if (!c) return 1;
    CHECK(tgc_comm_rank(c) == 0 && tgc_comm_size(c) == 1);
    CHECK(tgc_comm_timeout(c) == TGC_COMM_DEFAULT_TIMEOUT);
    float x[3] = {1, NAN, 3}, y[3] = {0};
    CHECK(tgc_comm_all_reduce(c, TGC_COMM_TP, x, 3, TGC_COMM_F32, TGC_COMM_MAX) == TGC_COMM_OK);
    CHECK(x[0] == 1 && isnan(x[1]) && x[2] == 3);
    CHECK(tgc_comm_all_gather(c, TGC_COMM_DP, x, y, 3, TGC_COMM_F32) == TGC_COMM_OK);
    CHECK(y[0] == 1 && y[2] == 3);
    CHECK(tgc_comm_sendrecv(c, x, 3, 0, y, 3, 0, TGC_COMM_F32, 7) == TGC_COMM_OK); /* to itself */
    CHECK(tgc_comm_barrier(c, TGC_COMM_WORLD) == TGC_COMM_OK);
    CHECK(y[0] == 1 && isnan(y[1]) && y[2] == 3);
    tgc_comm_free(c);
    printf("api: singleton world checked\n");
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "suite";
    unsetenv("TGC_COMM_TIMEOUT");
    int rc = !strcmp(mode, "suite")       ? mode_suite()
             : !strcmp(mode, "api")       ? mode_api()
             : !strcmp(mode, "abort")     ? mode_abort()
             : !strcmp(mode, "timeout")   ? mode_timeout()
             : !strcmp(mode, "mismatch")  ? mode_mismatch()
             : !strcmp(mode, "recv-size") ? mode_recv_size()
             : !strcmp(mode, "kill")      ? mode_die(true)
             : !strcmp(mode, "exit")      ? mode_die(false)
             : !strcmp(mode, "size")      ? mode_size()
                                          : -1;
    if (rc < 0) {
        fprintf(stderr, "test_comm_mpi: unknown mode '%s'\n", mode);
        return 2;
    }
    fflush(stdout);
    /* After a failure this ends the job (MPI_Abort) and does not return. */
    if (tgc_comm_mpi_finalize() != 0) rc = 1;
    printf("%d checks, %d failed\n", check_count, check_failures);
    return rc || check_failures ? 1 : 0;
}
