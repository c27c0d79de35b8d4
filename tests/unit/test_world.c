/* The world a run is in (runtime/train/world.h): every launcher's
 * variables, their errors, and the device of a rank. */
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "check.h"
#include "runtime/train/world.h"

static const char *const vars[] = {
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "CUDA_VISIBLE_DEVICES",
};

static void clear(void)
{
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
}

/* torchrun's four variables (NULL: unset). */
static void torchrun(const char *rank, const char *size, const char *lr, const char *ls)
{
    clear();
    if (rank) setenv("RANK", rank, 1);
    if (size) setenv("WORLD_SIZE", size, 1);
    if (lr) setenv("LOCAL_RANK", lr, 1);
    if (ls) setenv("LOCAL_WORLD_SIZE", ls, 1);
}

static bool has(const char *text, const char *part)
{
    bool ok = text && strstr(text, part);
    if (!ok) fprintf(stderr, "expected \"%s\" in \"%s\"\n", part, text ? text : "(null)");
    return ok;
}

/* Detection fails and its message contains msg. */
static void expect_error(bool mpi, int needed, const char *msg)
{
    capture cap;
    cap_init(&cap);
    rt_world_info w;
    CHECK(!rt_world_detect(mpi, needed, &w, &cap.d));
    CHECK(cap.d.nerrors == 1);
    CHECK(has(cap_text(&cap), msg));
    CHECK(!w.peer_reports);
    cap_free(&cap);
}

/* Detection fails with an error counted and nothing printed. */
static void expect_silent_error(bool mpi, int needed)
{
    capture cap;
    cap_init(&cap);
    rt_world_info w;
    CHECK(!rt_world_detect(mpi, needed, &w, &cap.d));
    CHECK(cap.d.nerrors == 1);
    CHECK(strlen(cap_text(&cap)) == 0);
    CHECK(w.peer_reports);
    cap_free(&cap);
}

static rt_world_info detect_ok(bool mpi, int needed)
{
    capture cap;
    cap_init(&cap);
    rt_world_info w = {.kind = (rt_world_kind)-1};
    bool ok = rt_world_detect(mpi, needed, &w, &cap.d);
    CHECK(ok);
    if (!ok) fprintf(stderr, "%s", cap_text(&cap));
    cap_free(&cap);
    return w;
}

#define CHECK_WORLD(w, k, r, n, lr, ls)                                                                \
    CHECK((w).kind == (k) && (w).rank == (r) && (w).size == (n) && (w).local_rank == (lr) &&         \
          (w).local_size == (ls))

static void check_single_and_threads(void)
{
    clear();
    rt_world_info w = detect_ok(false, 1);
    CHECK_WORLD(w, RT_WORLD_SINGLE, 0, 1, 0, 1);
    CHECK_STR(rt_world_kind_name(w.kind), "single");
    CHECK(!rt_world_is_processes(&w));
    w = detect_ok(false, 8);
    CHECK_WORLD(w, RT_WORLD_THREADS, 0, 8, 0, 8);
    CHECK_STR(rt_world_kind_name(w.kind), "threads");
    /* Threads: rank % devices. */
    CHECK(rt_world_device(&w, 5, 2) == 1);
    CHECK(rt_world_device(&w, 5, 8) == 5);
    CHECK(rt_world_device(&w, 3, 0) == -1);
    expect_error(false, 0, "the plan needs 0 ranks");
}

static void check_torchrun(void)
{
    torchrun("5", "8", "1", "4");
    rt_world_info w = detect_ok(false, 8);
    CHECK_WORLD(w, RT_WORLD_ENV, 5, 8, 1, 4);
    CHECK_STR(rt_world_kind_name(w.kind), "env");
    CHECK(rt_world_is_processes(&w));
    /* Processes: the LOCAL rank, whatever rank is asked about. */
    CHECK(rt_world_device(&w, 5, 4) == 1);
    CHECK(rt_world_device(&w, 0, 8) == 1);
    CHECK(rt_world_device(&w, 5, 1) == 0);
    /* Neither local variable: one node. */
    torchrun("2", "4", NULL, NULL);
    w = detect_ok(false, 4);
    CHECK_WORLD(w, RT_WORLD_ENV, 2, 4, 2, 4);
    /* The torchrun variables are ignored under mpirun. */
    torchrun("9", "x", NULL, NULL);
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    w = detect_ok(true, 2);
    CHECK_WORLD(w, RT_WORLD_MPI, 1, 2, 1, 2);

    torchrun("4", "4", "0", "4");
    expect_error(false, 4, "RANK=4 is outside the world of WORLD_SIZE=4 ranks");
    torchrun("one", "4", "0", "4");
    expect_error(false, 4, "RANK=one is not a number");
    torchrun("-1", "4", "0", "4");
    expect_error(false, 4, "RANK=-1 is not a number");
    torchrun("1", "0", "0", "4");
    expect_error(false, 4, "WORLD_SIZE=0 must be at least 1");
    torchrun("1", "99999999999", "0", "4");
    expect_error(false, 4, "WORLD_SIZE=99999999999 is too large");
    torchrun("1", "4", "2x", "4");
    expect_error(false, 4, "LOCAL_RANK=2x is not a number");
    torchrun("1", "4", "1", "1");
    expect_error(false, 4, "LOCAL_RANK=1 is outside the node's LOCAL_WORLD_SIZE=1 processes");
    torchrun("3", "4", "3", "8");
    expect_error(false, 4, "LOCAL_WORLD_SIZE=8 is larger than the world (WORLD_SIZE=4)");
    torchrun("1", "4", "2", "4");
    expect_error(false, 4, "LOCAL_RANK=2 is larger than the global rank (RANK=1)");
    torchrun("1", "4", "1", NULL);
    expect_error(false, 4, "LOCAL_RANK is set but LOCAL_WORLD_SIZE is not");
    torchrun("1", NULL, NULL, NULL);
    expect_error(false, 4, "RANK is set but WORLD_SIZE is not");
    torchrun(NULL, "4", NULL, NULL);
    expect_error(false, 4, "WORLD_SIZE is set but RANK is not");
    torchrun("0", "4", "0", "4");
    expect_error(false, 2, "torchrun started 4 processes (WORLD_SIZE=4) but the plan needs t x d x p = 2");
    /* The other processes fail too, silently: their lines would interleave with rank 0's. */
    torchrun("1", "4", "1", "4");
    expect_silent_error(false, 2);
    torchrun("0", "1", "0", "1");
    expect_error(false, 8, "torchrun started 1 process (WORLD_SIZE=1) but the plan needs t x d x p = 8");
}

static void check_mpi(void)
{
    clear();
    setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    rt_world_info w = detect_ok(true, 4);
    CHECK_WORLD(w, RT_WORLD_MPI, 3, 4, 1, 2);
    CHECK_STR(rt_world_kind_name(w.kind), "mpi");
    CHECK(rt_world_device(&w, 3, 2) == 1);
    expect_silent_error(true, 8);
    setenv("OMPI_COMM_WORLD_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
    expect_error(true, 8, "mpirun started 4 processes (OMPI_COMM_WORLD_SIZE=4) but the plan needs t x d x p = 8");
    setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "z", 1);
    expect_error(true, 4, "OMPI_COMM_WORLD_LOCAL_RANK=z is not a number");
    /* Without the mpi flag, OpenMPI's variables do not make a world. */
    w = detect_ok(false, 4);
    CHECK_WORLD(w, RT_WORLD_THREADS, 0, 4, 0, 4);
    /* MPICH's Hydra. */
    clear();
    setenv("PMI_RANK", "1", 1);
    setenv("PMI_SIZE", "2", 1);
    w = detect_ok(true, 2);
    CHECK_WORLD(w, RT_WORLD_MPI, 1, 2, 1, 2);
    /* The singleton: --comm mpi without a launcher. */
    clear();
    w = detect_ok(true, 1);
    CHECK_WORLD(w, RT_WORLD_MPI, 0, 1, 0, 1);
    expect_error(true, 2, "--comm mpi without mpirun runs one process but the plan needs t x d x p = 2");
}

static void expect_devices(const rt_world_info *w, int devices, const char *msg)
{
    capture cap;
    cap_init(&cap);
    bool ok = rt_world_check_devices(w, devices, &cap.d);
    if (msg) {
        CHECK(!ok);
        CHECK(has(cap_text(&cap), msg));
    } else {
        CHECK(ok);
        CHECK(cap.d.nerrors == 0);
    }
    cap_free(&cap);
}

static void check_devices(void)
{
    rt_world_info one = {RT_WORLD_SINGLE, 0, 1, 0, 1, false};
    expect_devices(&one, 1, NULL);
    clear();
    expect_devices(&one, 0, "no visible GPU");
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    expect_devices(&one, 0, "no visible GPU (CUDA_VISIBLE_DEVICES=)");
    rt_world_info th = {RT_WORLD_THREADS, 0, 4, 0, 4, false};
    expect_devices(&th, 4, NULL);
    expect_devices(&th, 2, "4 ranks need 4 GPUs for NCCL (one rank per GPU); this machine has 2 visible");
    /* Two nodes of two processes: two GPUs each suffice. */
    rt_world_info env = {RT_WORLD_ENV, 3, 4, 1, 2, false};
    expect_devices(&env, 2, NULL);
    expect_devices(&env, 1, "torchrun started 2 processes on this node (LOCAL_WORLD_SIZE=2) but it has 1 visible GPU: "
                            "NCCL needs one GPU per rank (LOCAL_RANK=1 would share GPU 0)");
    rt_world_info mpi = {RT_WORLD_MPI, 2, 4, 2, 4, false};
    expect_devices(&mpi, 2, "mpirun started 4 processes on this node but it has 2 visible GPUs");
    clear();
}

int main(void)
{
    check_single_and_threads();
    check_torchrun();
    check_mpi();
    check_devices();
    CHECK_DONE();
}
