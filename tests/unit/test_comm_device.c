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
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm_test.h"
#include "runtime/comm/comm_device.h"

/* ---- the suite: every call on both communicators ---------------------------------- */

static int suite_rank(tgc_comm *host, void *arg)
{
    cmp_suite *s = arg;
    cmp_rank *rk = cmp_rank_start(s, host);
    rk->ut = tgc_comm_device_new(host, &rk->e, &rk->d);
    if (!cmp_check_comm(rk, host, "device-local")) return 1;
    cmp_calls(rk, s, s->seed + 5000);
    cmp_check_stats(rk);
    RCHECK(rk, rk->d.nerrors == 0);
    tgc_comm_free(rk->ut);
    diag_free(&rk->d);
    return 0;
}

/* Device buffers: every result is read back from the executor's memory. */
static void test_suite(const rt_backend_ops *be, int t, int d, int p, int seed)
{
    cmp_config cfg = {.label = be->name, .rank = suite_rank, .be = be, .device_buffers = true};
    cmp_run_suite(&cfg, t, d, p, seed);
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
    rt_exec_release(&e, p);
    diag_free(&d);
}

/* ---- the cost of an operation does not grow with the ranks ---------------------- */

/* A write and a copy on one rank's buffers change the protection of
 * those buffers alone, however many other ranks have buffers on the
 * simulated device: it was process-wide (every buffer changed on each
 * operation), so a step of d ranks cost d^2 mprotect calls. */
static uint64_t sim_ops_cost(int ranks)
{
    rt_exec *e = xcalloc((size_t)ranks, sizeof *e);
    float **p = xcalloc((size_t)ranks, sizeof *p), v[4] = {1, 2, 3, 4};
    diag d;
    diag_init(&d, stderr);
    for (int r = 0; r < ranks; r++) {
        e[r].be = &rt_backend_sim;
        p[r] = rt_exec_alloc(&e[r], sizeof v, "a rank's buffer", &d);
        CHECK(p[r] != NULL);
    }
    uint64_t before = rt_sim_protect_count();
    CHECK(rt_exec_write(&e[0], p[0], v, sizeof v));
    CHECK(rt_exec_copy(&e[0], p[0], p[ranks - 1], sizeof v)); /* another rank's buffer, as comm_device copies */
    uint64_t cost = rt_sim_protect_count() - before;
    for (int r = 0; r < ranks; r++) rt_exec_release(&e[r], p[r]);
    diag_free(&d);
    free(p);
    free(e);
    return cost;
}

static void test_sim_cost(void)
{
    uint64_t few = sim_ops_cost(2), many = sim_ops_cost(256);
    CHECK(few > 0);
    CHECK(few <= 6);
    CHECK(many == few);
}

/* ---- failures ------------------------------------------------------------------------- */

/* F_BACKENDS: rank 0 computes on cpu; F_DEVICE: rank 1's reduce fails
 * (faulty_sim); F_NO_EXEC: rank 1 has no executor. */
static int fault_rank(tgc_comm *host, void *arg)
{
    fault_case *fc = arg;
    int r = tgc_comm_rank(host);
    rt_exec e = {.be = fc->mode == F_BACKENDS && r == 0 ? &rt_backend_cpu
                       : fc->mode == F_DEVICE                ? &faulty_sim
                                                             : &rt_backend_sim};
    if (fc->mode == F_DEVICE && r == 1) atomic_store(&faulty_red, &e);
    tgc_comm *c = tgc_comm_device_new(host, fc->mode == F_NO_EXEC && r == 1 ? NULL : &e, NULL);
    fc->made[r] = c != NULL;
    if (!c) return 0;
    diag d;
    diag_init(&d, stderr);
    float x[6] = {1, 2, 3, 4, 5, 6};
    float *buf = rt_exec_alloc(&e, FAULT_COUNT * sizeof(float), "a test buffer", &d);
    rt_exec_write(&e, buf, x, sizeof x);
    int ret = fault_calls(fc, c, buf);
    rt_exec_release(&e, buf);
    tgc_comm_free(c);
    diag_free(&d);
    if (fc->mode == F_DEVICE && r == 1) atomic_store(&faulty_red, NULL);
    return ret;
}

static void test_abort(void)
{
    fault_case fc;
    run_fault(&fc, fault_rank, F_ABORT, 120, 0);
    check_abort(&fc, false);
}

static void test_failing_rank(void)
{
    fault_case fc;
    run_fault(&fc, fault_rank, F_RETURN, 120, 5);
    check_failing_rank(&fc, "rank 3 failed: its rank function returned 5", false);
    for (int r = 0; r < 3; r++)
        CHECK(strncmp(fc.msg[r], "rank ", 5) == 0 && strstr(fc.msg[r], ": all_reduce(world): rank 3 failed") != NULL);
}

static void test_mismatch(void)
{
    fault_case fc;
    run_fault(&fc, fault_rank, F_MISMATCH, 120, 0);
    check_mismatch(&fc, false);
    run_fault(&fc, fault_rank, F_BACKENDS, 120, 0);
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
    faulty_sim_init();
    fault_case fc;
    run_fault(&fc, fault_rank, F_DEVICE, 120, 0);
    check_device_fault(&fc, "injected device fault", false);
}

static void test_timeout(void)
{
    fault_case fc;
    run_fault(&fc, fault_rank, F_TIMEOUT, 1, 0);
    check_timeout(&fc, false);
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
    run_fault(&fc, fault_rank, F_NO_EXEC, 120, 0);
    for (int r = 0; r < 4; r++) CHECK(!fc.made[r]);
    CHECK(now_s() - t0 < 10.0);
}

int main(void)
{
    test_sim_faults();
    test_sim_cost();
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
