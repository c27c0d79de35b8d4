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
#include "comm_test.h"
#include "runtime/comm/comm_device.h"
#include "runtime/comm/comm_nccl.h"
#include "runtime/comm/comm_staged.h"

/* ---- the suite: every call on both communicators ---------------------------------- */

static int suite_rank(tgc_comm *host, void *arg)
{
    cmp_suite *s = arg;
    cmp_rank *rk = cmp_rank_start(s, host);
    rk->dev = tgc_comm_device_new(host, &rk->e, &rk->d);
    rk->ut = rk->dev ? tgc_comm_staged_new(rk->dev, &rk->e, &rk->d) : NULL;
    if (!cmp_check_comm(rk, host, "staged(device-local)")) return 1;
    cmp_calls(rk, s, s->seed + 5000);
    /* The largest calls again: no scratch buffer grows (not staged's,
     * not dev's). */
    int64_t allocated = rt_exec_allocated(&rk->e);
    cmp_group(rk, s, TGC_COMM_WORLD);
    cmp_p2p(rk, s->seed + 6000, true);
    RCHECK(rk, rt_exec_allocated(&rk->e) == allocated);
    cmp_check_stats(rk);
    RCHECK(rk, tgc_comm_stats_calls(tgc_comm_stats_get(rk->dev), TGC_COMM_ALL_REDUCE) ==
                   tgc_comm_stats_calls(tgc_comm_stats_get(rk->ut), TGC_COMM_ALL_REDUCE));
    RCHECK(rk, rk->d.nerrors == 0);
    tgc_comm_free(rk->ut);
    tgc_comm_free(rk->dev);
    RCHECK(rk, rt_exec_allocated(&rk->e) == 0); /* both gave their scratch back */
    diag_free(&rk->d);
    return 0;
}

/* Host buffers (with a guard past each), staged through sim's memory; the
 * point-to-point part sends a large message too. */
static void test_suite(int t, int d, int p, int seed)
{
    static const cmp_config cfg = {.label = "staged(device-local)", .rank = suite_rank, .be = &rt_backend_sim,
                                   .large_p2p = true};
    cmp_run_suite(&cfg, t, d, p, seed);
}

/* ---- failures ------------------------------------------------------------------------- */

/* Every rank on faulty_sim (F_UPLOAD: rank 1's upload fails, F_DEVICE:
 * its reduce inside dev); F_NO_EXEC: rank 1's staged communicator has no
 * executor. */
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
    int ret = fault_calls(fc, c, buf);
    if (r == 1) atomic_store(&faulty_up, NULL), atomic_store(&faulty_red, NULL);
    tgc_comm_free(c);
    tgc_comm_free(dev);
    free(buf);
    return ret;
}

static void test_abort(void)
{
    fault_case fc;
    run_fault(&fc, fault_rank, F_ABORT, 120, 0);
    check_abort(&fc, true);
    CHECK(fc.rc[3] == TGC_COMM_OK && fc.after[3] == TGC_COMM_ERR_ABORTED);
}

static void test_failing_rank(void)
{
    fault_case fc;
    run_fault(&fc, fault_rank, F_RETURN, 120, 5);
    check_failing_rank(&fc, ": all_reduce(world): rank 3 failed: its rank function returned 5", true);
}

static void test_mismatch(void)
{
    fault_case fc;
    run_fault(&fc, fault_rank, F_MISMATCH, 120, 0);
    check_mismatch(&fc, true);
}

/* Rank 1's upload into its scratch fails: it reports its executor's
 * error, the others (waiting in dev) learn of it promptly. */
static void test_upload_fault(void)
{
    fault_case fc;
    run_fault(&fc, fault_rank, F_UPLOAD, 120, 0);
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
    run_fault(&fc, fault_rank, F_DEVICE, 120, 0);
    check_device_fault(&fc, "rank 1: all_reduce(world): the collective's device work on sim: injected device fault",
                       true);
}

static void test_timeout(void)
{
    fault_case fc;
    run_fault(&fc, fault_rank, F_TIMEOUT, 1, 0);
    check_timeout(&fc, true);
}

/* Byte reductions are invalid (the generic layer), on every rank. */
static void test_byte_reduce(void)
{
    fault_case fc;
    run_fault(&fc, fault_rank, F_BYTE, 120, 0);
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
    run_fault(&fc, fault_rank, F_NO_EXEC, 120, 0);
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
    faulty_sim_init();
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
