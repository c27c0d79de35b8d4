/* The `nccl` communicator (runtime/comm/comm_nccl.h).
 *
 * Without a GPU: libnccl loads, a world gets its ncclUniqueId, and on
 * communicators that never connected the argument checks, the error
 * messages and the abort path behave like every tgc_comm's; joining
 * reports the missing device instead of crashing; join_env checks
 * torchrun's variables against the caller's rank and world; join_host over
 * a `local` host world agrees on failure after one all-reduce instead of
 * waiting for the id.
 * With a GPU (the same binary on a machine that has one): a world of one
 * rank per visible device, one thread each, runs every operation on device
 * buffers and checks the values and the statistics — three times, once per
 * bootstrap (join, join_host over a `local` host world, join_env with
 * NCCL_COMM_ID from MASTER_ADDR and TGC_NCCL_PORT).
 *
 * Exits 77 (skipped) when libnccl cannot be loaded. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../unit/capture.h"
#include "../unit/check.h"
#include "runtime/comm/comm_nccl.h"
#include "runtime/backend/cuda.h"

/* ---- without a GPU ------------------------------------------------------------ */

typedef struct pair {
    tgc_nccl_world *w;
    tgc_comm *c[2];
} pair;

/* A fresh world of two unconnected TP ranks: an error is fatal to a world. */
static bool pair_new(pair *p)
{
    tgc_topology t = {2, 1, 1};
    capture cap;
    cap_init(&cap);
    p->w = tgc_nccl_world_new(&t, &cap.d);
    if (!p->w) fprintf(stderr, "%s", cap_text(&cap));
    cap_free(&cap);
    p->c[0] = p->w ? tgc_comm_nccl_unconnected(p->w, 0) : NULL;
    p->c[1] = p->w ? tgc_comm_nccl_unconnected(p->w, 1) : NULL;
    return p->c[0] && p->c[1];
}

static void pair_free(pair *p)
{
    tgc_comm_free(p->c[0]);
    tgc_comm_free(p->c[1]);
    tgc_nccl_world_free(p->w);
}

static bool has(const char *text, const char *part)
{
    bool ok = text && strstr(text, part);
    if (!ok) fprintf(stderr, "expected \"%s\" in \"%s\"\n", part, text ? text : "(null)");
    return ok;
}

/* One bad call on rank 0: its status and message; then rank 1 learns that
 * rank 0 failed. */
#define EXPECT_ARG(call, msg)                                                                       \
    do {                                                                                           \
        pair p;                                                                                    \
        CHECK(pair_new(&p));                                                                       \
        if (!p.c[0]) break;                                                                        \
        tgc_comm *c = p.c[0];                                                                      \
        CHECK((call) == TGC_COMM_ERR_ARG);                                                         \
        CHECK(has(tgc_comm_error(c), msg));                                                        \
        float x = 0;                                                                               \
        CHECK(tgc_comm_all_reduce(p.c[1], TGC_COMM_WORLD, &x, 1, TGC_COMM_F32, TGC_COMM_SUM) ==    \
              TGC_COMM_ERR_ABORTED);                                                               \
        CHECK(has(tgc_comm_error(p.c[1]), "rank 1: all_reduce(world): rank 0 failed: "));          \
        pair_free(&p);                                                                             \
    } while (0)

static void check_unconnected(void)
{
    float buf[8] = {0};
    EXPECT_ARG(tgc_comm_all_reduce(c, (tgc_comm_group)7, buf, 8, TGC_COMM_F32, TGC_COMM_SUM), "invalid group 7");
    EXPECT_ARG(tgc_comm_all_reduce(c, TGC_COMM_TP, buf, 8, TGC_COMM_BYTE, TGC_COMM_SUM), "cannot reduce raw bytes");
    EXPECT_ARG(tgc_comm_all_reduce(c, TGC_COMM_TP, buf, 8, TGC_COMM_F32, (tgc_comm_op)5), "invalid reduction op 5");
    EXPECT_ARG(tgc_comm_all_gather(c, TGC_COMM_TP, buf, buf, SIZE_MAX / 4, TGC_COMM_F32), "overflow");
    EXPECT_ARG(tgc_comm_all_reduce(c, TGC_COMM_TP, NULL, 8, TGC_COMM_F32, TGC_COMM_SUM), "buf is NULL");
    EXPECT_ARG(tgc_comm_broadcast(c, TGC_COMM_TP, buf, 8, TGC_COMM_F32, 2), "root 2 outside the group of 2 ranks");
    EXPECT_ARG(tgc_comm_send(c, buf, 8, TGC_COMM_F32, 5, 0), "destination rank 5 outside the world of 2 ranks");
    EXPECT_ARG(tgc_comm_send(c, buf, 8, TGC_COMM_F32, 0, 0), "a send to itself would never be matched");
    EXPECT_ARG(tgc_comm_recv(c, buf, 8, TGC_COMM_F32, 1, -3), "negative tag -3");

    /* A valid call reaches NCCL's side: not connected (a backend error). */
    pair p;
    CHECK(pair_new(&p));
    if (p.c[0]) {
        CHECK_STR(tgc_comm_backend(p.c[0]), "nccl");
        CHECK(tgc_comm_group_size(p.c[0], TGC_COMM_TP) == 2 && tgc_comm_group_rank(p.c[1], TGC_COMM_TP) == 1);
        CHECK(tgc_comm_barrier(p.c[0], TGC_COMM_TP) == TGC_COMM_ERR_BACKEND);
        CHECK(has(tgc_comm_error(p.c[0]), "rank 0: barrier(tp): not connected"));
        CHECK(tgc_comm_stats_calls(tgc_comm_stats_get(p.c[0]), TGC_COMM_BARRIER) == 0);
        pair_free(&p);
    }
    /* bf16 / f16 reductions pass the argument checks and reach NCCL's side
     * (ncclBfloat16 / ncclFloat16): not connected, not an invalid dtype. */
    for (int t = 0; t < 2; t++) {
        CHECK(pair_new(&p));
        if (!p.c[0]) continue;
        uint16_t h[8] = {0};
        CHECK(tgc_comm_all_reduce(p.c[0], TGC_COMM_TP, h, 8, t ? TGC_COMM_F16 : TGC_COMM_BF16, TGC_COMM_SUM) ==
              TGC_COMM_ERR_BACKEND);
        CHECK(has(tgc_comm_error(p.c[0]), "not connected"));
        pair_free(&p);
    }
    /* tgc_comm_abort: every later call of every rank fails, naming it. */
    CHECK(pair_new(&p));
    if (p.c[0]) {
        CHECK(tgc_comm_abort(p.c[1], 1, "the test stops it") == TGC_COMM_OK);
        CHECK(tgc_comm_barrier(p.c[0], TGC_COMM_WORLD) == TGC_COMM_ERR_ABORTED);
        CHECK(has(tgc_comm_error(p.c[0]), "rank 1 failed: the test stops it"));
        CHECK(tgc_comm_abort(p.c[0], 0, "second") == TGC_COMM_OK); /* the first abort wins */
        CHECK(tgc_comm_barrier(p.c[1], TGC_COMM_WORLD) == TGC_COMM_ERR_ABORTED);
        CHECK(has(tgc_comm_error(p.c[1]), "rank 1 failed: the test stops it"));
        pair_free(&p);
    }
}

static void check_bootstrap_errors(bool have_gpu)
{
    capture cap;
    cap_init(&cap);
    tgc_topology bad = {0, 1, 1};
    CHECK(tgc_nccl_world_new(&bad, &cap.d) == NULL);
    CHECK(has(cap_text(&cap), "NCCL: invalid topology"));
    unsetenv("NCCL_COMM_ID");
    unsetenv("MASTER_ADDR");
    tgc_topology one = {1, 1, 1};
    CHECK(tgc_comm_nccl_join_env(&one, 0, 0, NULL, &cap.d) == NULL);
    CHECK(has(cap_text(&cap), "neither NCCL_COMM_ID nor MASTER_ADDR is set"));
    /* torchrun's variables must agree with what the caller joins as. */
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    setenv("RANK", "1", 1);
    CHECK(tgc_comm_nccl_join_env(&one, 0, 0, NULL, &cap.d) == NULL);
    CHECK(has(cap_text(&cap), "NCCL: RANK=1 but this process's rank is 0"));
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "4", 1);
    CHECK(tgc_comm_nccl_join_env(&one, 0, 0, NULL, &cap.d) == NULL);
    CHECK(has(cap_text(&cap), "NCCL: WORLD_SIZE=4 but the plan's t x d x p is 1"));
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    CHECK(getenv("NCCL_COMM_ID") == NULL); /* set only on the way to joining */
    CHECK(tgc_comm_nccl_join_host(NULL, 0, NULL, &cap.d) == NULL);
    CHECK(has(cap_text(&cap), "NCCL: no host communicator"));
    tgc_nccl_world *w = tgc_nccl_world_new(&one, &cap.d);
    CHECK(w != NULL);
    CHECK(tgc_comm_nccl_join(w, 3, 0, NULL, &cap.d) == NULL);
    CHECK(has(cap_text(&cap), "rank 3 outside the world of 1 ranks"));
    if (!have_gpu) {
        /* No device: a report, not a crash (what it says depends on whether
         * libcudart or the driver is missing). */
        int before = cap.d.nerrors;
        CHECK(tgc_comm_nccl_join(w, 0, 0, NULL, &cap.d) == NULL);
        CHECK(cap.d.nerrors > before);
    }
    tgc_nccl_world_free(w);
    cap_free(&cap);
}

/* join_host over a `local` host world of two threads, without a GPU: no
 * rank can prepare, every rank says so after one all-reduce of readiness
 * and none waits for the id's broadcast. */
typedef struct host_try {
    int ok, failed;
    pthread_mutex_t mu;
} host_try;

static int host_rank(tgc_comm *host, void *arg)
{
    host_try *t = arg;
    capture cap;
    cap_init(&cap);
    tgc_comm *c = tgc_comm_nccl_join_host(host, tgc_comm_rank(host), NULL, &cap.d);
    const tgc_comm_stats *st = tgc_comm_stats_get(host);
    bool good = c == NULL && cap.d.nerrors >= 1 && tgc_comm_stats_calls(st, TGC_COMM_ALL_REDUCE) == 1 &&
                tgc_comm_stats_calls(st, TGC_COMM_BROADCAST) == 0;
    if (!good) fprintf(stderr, "rank %d: join_host: %s\n", tgc_comm_rank(host), cap_text(&cap));
    if (c) tgc_comm_free(c);
    cap_free(&cap);
    pthread_mutex_lock(&t->mu);
    if (good) t->ok++;
    else t->failed++;
    pthread_mutex_unlock(&t->mu);
    return 0;
}

static void check_host_bootstrap_without_gpu(void)
{
    tgc_topology t = {2, 1, 1};
    tgc_comm_local_world *hw = tgc_comm_local_world_new_topo(&t, NULL, NULL);
    CHECK(hw != NULL);
    if (!hw) return;
    host_try ht = {0, 0, PTHREAD_MUTEX_INITIALIZER};
    CHECK(tgc_comm_local_world_run(hw, host_rank, &ht) == 0);
    CHECK(ht.ok == 2 && ht.failed == 0);
    tgc_comm_local_world_free(hw);
}

/* ---- with GPUs: one rank per device, a thread each ------------------------------------ */

typedef enum { BOOT_WORLD, BOOT_HOST, BOOT_ENV } boot_mode;
static const char *const boot_names[] = {"threads (tgc_comm_nccl_join)", "a host communicator (join_host)",
                                         "NCCL_COMM_ID (join_env)"};

typedef struct gpu_world {
    tgc_nccl_world *w;
    boot_mode mode;
    tgc_comm_local_world *host; /* BOOT_HOST: the id travels over it */
    tgc_topology topo;
    int n;
    int failures;
    pthread_mutex_t mu;
} gpu_world;

typedef struct gpu_rank {
    gpu_world *gw;
    int rank;
} gpu_rank;

#define GPU_CHECK(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", r->rank, __FILE__, __LINE__, #cond); \
            pthread_mutex_lock(&r->gw->mu);                                                         \
            r->gw->failures++;                                                                     \
            pthread_mutex_unlock(&r->gw->mu);                                                       \
        }                                                                                          \
    } while (0)

enum { N_ELEM = 1000 };

static void *gpu_rank_main(void *arg)
{
    gpu_rank *r = arg;
    int n = r->gw->n, me = r->rank;
    diag d;
    diag_init(&d, stderr);
    const rt_cuda_api *cu = rt_cuda_load(&d);
    cudaStream_t s = NULL;
    /* A blocking stream: its work waits for the plain cudaMemcpy calls (legacy default stream). */
    GPU_CHECK(cu && cu->SetDevice(me) == cudaSuccess && cu->StreamCreateWithFlags(&s, cudaStreamDefault) == cudaSuccess);
    tgc_comm *c = r->gw->mode == BOOT_WORLD  ? tgc_comm_nccl_join(r->gw->w, me, me, s, &d)
                  : r->gw->mode == BOOT_HOST ? tgc_comm_nccl_join_host(tgc_comm_local_world_comm(r->gw->host, me), me, s, &d)
                                             : tgc_comm_nccl_join_env(&r->gw->topo, me, me, s, &d);
    GPU_CHECK(c != NULL);
    if (!c) {
        diag_free(&d);
        return NULL;
    }
    float *dev = NULL, *big = NULL;
    static float host[N_ELEM * 8], back[N_ELEM * 8];
    GPU_CHECK(cu->Malloc((void **)&dev, N_ELEM * sizeof(float)) == cudaSuccess);
    GPU_CHECK(cu->Malloc((void **)&big, (size_t)n * N_ELEM * sizeof(float)) == cudaSuccess);
    float *mine = host + me * N_ELEM;
    /* all_reduce sum and max of rank-dependent values. */
    for (int i = 0; i < N_ELEM; i++) mine[i] = (float)(i % 7) + (float)me;
    cu->Memcpy(dev, mine, N_ELEM * sizeof(float), cudaMemcpyHostToDevice);
    GPU_CHECK(tgc_comm_all_reduce(c, TGC_COMM_WORLD, dev, N_ELEM, TGC_COMM_F32, TGC_COMM_SUM) == TGC_COMM_OK);
    GPU_CHECK(tgc_comm_nccl_sync(c) == TGC_COMM_OK);
    cu->Memcpy(back, dev, N_ELEM * sizeof(float), cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int i = 0; i < N_ELEM; i++) ok &= back[i] == (float)(n * (i % 7)) + (float)(n * (n - 1) / 2);
    GPU_CHECK(ok);
    cu->Memcpy(dev, mine, N_ELEM * sizeof(float), cudaMemcpyHostToDevice);
    GPU_CHECK(tgc_comm_all_reduce(c, TGC_COMM_TP, dev, N_ELEM, TGC_COMM_F32, TGC_COMM_MAX) == TGC_COMM_OK);
    GPU_CHECK(tgc_comm_nccl_sync(c) == TGC_COMM_OK);
    cu->Memcpy(back, dev, N_ELEM * sizeof(float), cudaMemcpyDeviceToHost);
    ok = true;
    for (int i = 0; i < N_ELEM; i++) ok &= back[i] == (float)(i % 7) + (float)(n - 1);
    GPU_CHECK(ok);
    /* all_gather: block r of the result is rank r's. */
    cu->Memcpy(dev, mine, N_ELEM * sizeof(float), cudaMemcpyHostToDevice);
    GPU_CHECK(tgc_comm_all_gather(c, TGC_COMM_WORLD, dev, big, N_ELEM, TGC_COMM_F32) == TGC_COMM_OK);
    GPU_CHECK(tgc_comm_nccl_sync(c) == TGC_COMM_OK);
    cu->Memcpy(back, big, (size_t)n * N_ELEM * sizeof(float), cudaMemcpyDeviceToHost);
    ok = true;
    for (int q = 0; q < n; q++)
        for (int i = 0; i < N_ELEM; i++) ok &= back[q * N_ELEM + i] == (float)(i % 7) + (float)q;
    GPU_CHECK(ok);
    /* reduce_scatter of the gathered buffer: block me of n times the sum. */
    GPU_CHECK(tgc_comm_reduce_scatter(c, TGC_COMM_WORLD, big, dev, N_ELEM, TGC_COMM_F32, TGC_COMM_SUM) == TGC_COMM_OK);
    GPU_CHECK(tgc_comm_nccl_sync(c) == TGC_COMM_OK);
    cu->Memcpy(back, dev, N_ELEM * sizeof(float), cudaMemcpyDeviceToHost);
    ok = true;
    for (int i = 0; i < N_ELEM; i++) ok &= back[i] == (float)n * ((float)(i % 7) + (float)me);
    GPU_CHECK(ok);
    /* reduce_scatter_v of the gathered buffer (unchanged above), uneven
     * pieces, rank 1's empty: this rank's piece is n times the values. */
    size_t pieces[8], lo = 0, at = 0;
    for (int q = 0; q < n && q < 8; q++) {
        pieces[q] = q == 1 ? 0 : q % 2 == 0 ? N_ELEM : N_ELEM / 2;
        if (q == me) lo = at;
        at += pieces[q];
    }
    GPU_CHECK(n <= 8);
    GPU_CHECK(tgc_comm_reduce_scatter_v(c, TGC_COMM_WORLD, big, pieces, TGC_COMM_F32, TGC_COMM_SUM) == TGC_COMM_OK);
    GPU_CHECK(tgc_comm_nccl_sync(c) == TGC_COMM_OK);
    cu->Memcpy(back, big, (size_t)n * N_ELEM * sizeof(float), cudaMemcpyDeviceToHost);
    ok = true;
    for (size_t i = 0; i < pieces[me]; i++) {
        size_t j = lo + i;
        ok &= back[j] == (float)n * ((float)(j % N_ELEM % 7) + (float)(j / N_ELEM));
    }
    GPU_CHECK(ok);
    /* broadcast from the last rank. */
    cu->Memcpy(dev, mine, N_ELEM * sizeof(float), cudaMemcpyHostToDevice);
    GPU_CHECK(tgc_comm_broadcast(c, TGC_COMM_WORLD, dev, N_ELEM, TGC_COMM_F32, n - 1) == TGC_COMM_OK);
    GPU_CHECK(tgc_comm_nccl_sync(c) == TGC_COMM_OK);
    cu->Memcpy(back, dev, N_ELEM * sizeof(float), cudaMemcpyDeviceToHost);
    ok = true;
    for (int i = 0; i < N_ELEM; i++) ok &= back[i] == (float)(i % 7) + (float)(n - 1);
    GPU_CHECK(ok);
    /* sendrecv around the ring (to itself on one rank). */
    cu->Memcpy(dev, mine, N_ELEM * sizeof(float), cudaMemcpyHostToDevice);
    GPU_CHECK(tgc_comm_sendrecv(c, dev, N_ELEM, (me + 1) % n, big, N_ELEM, (me + n - 1) % n, TGC_COMM_F32, 0) ==
              TGC_COMM_OK);
    GPU_CHECK(tgc_comm_barrier(c, TGC_COMM_WORLD) == TGC_COMM_OK);
    cu->Memcpy(back, big, N_ELEM * sizeof(float), cudaMemcpyDeviceToHost);
    ok = true;
    for (int i = 0; i < N_ELEM; i++) ok &= back[i] == (float)(i % 7) + (float)((me + n - 1) % n);
    GPU_CHECK(ok);
    const tgc_comm_stats *st = tgc_comm_stats_get(c);
    GPU_CHECK(tgc_comm_stats_calls(st, TGC_COMM_ALL_REDUCE) == 2 && tgc_comm_stats_calls(st, TGC_COMM_BARRIER) == 1);
    GPU_CHECK(tgc_comm_stats_calls(st, TGC_COMM_SEND) == 1 && tgc_comm_stats_calls(st, TGC_COMM_RECV) == 1);
    GPU_CHECK(tgc_comm_stats_bytes(st, TGC_COMM_SEND) == N_ELEM * sizeof(float));
    if (me == 0) tgc_comm_stats_print(st, "nccl rank 0", stdout);
    cu->Free(dev);
    cu->Free(big);
    tgc_comm_free(c);
    cu->StreamDestroy(s);
    diag_free(&d);
    return NULL;
}

static void check_gpus(int devices, boot_mode mode)
{
    int n = devices > 8 ? 8 : devices;
    tgc_topology t = {n, 1, 1};
    diag d;
    diag_init(&d, stderr);
    gpu_world gw = {.mode = mode, .topo = t, .n = n};
    if (mode == BOOT_WORLD) gw.w = tgc_nccl_world_new(&t, &d);
    if (mode == BOOT_HOST) gw.host = tgc_comm_local_world_new_topo(&t, NULL, &d);
    if (mode == BOOT_ENV) {
        /* Rank 0's address, set before the threads start: join_env then
         * only reads NCCL_COMM_ID (it is process-wide). */
        char port[16], addr[64];
        snprintf(port, sizeof port, "%d", 20000 + (int)(getpid() % 20000));
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        setenv("TGC_NCCL_PORT", port, 1);
        unsetenv("NCCL_COMM_ID");
        CHECK(tgc_comm_nccl_env_addr(addr, sizeof addr, &d));
        setenv("NCCL_COMM_ID", addr, 1);
    }
    diag_free(&d);
    CHECK(mode != BOOT_WORLD || gw.w != NULL);
    CHECK(mode != BOOT_HOST || gw.host != NULL);
    if ((mode == BOOT_WORLD && !gw.w) || (mode == BOOT_HOST && !gw.host)) return;
    pthread_mutex_init(&gw.mu, NULL);
    pthread_t tid[8];
    gpu_rank ranks[8];
    for (int r = 0; r < n; r++) {
        ranks[r] = (gpu_rank){&gw, r};
        pthread_create(&tid[r], NULL, gpu_rank_main, &ranks[r]);
    }
    for (int r = 0; r < n; r++) pthread_join(tid[r], NULL);
    CHECK(gw.failures == 0);
    printf("nccl: %d rank(s) on %d GPU(s), bootstrap over %s: %s\n", n, n, boot_names[mode],
           gw.failures ? "FAILED" : "all operations agree");
    pthread_mutex_destroy(&gw.mu);
    tgc_nccl_world_free(gw.w);
    if (gw.host) tgc_comm_local_world_free(gw.host);
    if (mode == BOOT_ENV) {
        unsetenv("NCCL_COMM_ID");
        unsetenv("MASTER_ADDR");
        unsetenv("TGC_NCCL_PORT");
    }
}

int main(void)
{
    diag d;
    diag_init(&d, stderr);
    if (!tgc_nccl_load(&d)) {
        printf("skipped: libnccl cannot be loaded\n");
        diag_free(&d);
        return 77;
    }
    diag_free(&d);
    CHECK(tgc_nccl_version() >= 21900);
    printf("NCCL %d loaded\n", tgc_nccl_version());
    /* Whether a GPU is here (silently: no device is the normal case). */
    FILE *null = fopen("/dev/null", "w");
    diag quiet;
    diag_init(&quiet, null ? null : stderr);
    int devices = rt_cuda_device_count(&quiet);
    diag_free(&quiet);
    if (null) fclose(null);
    check_unconnected();
    check_bootstrap_errors(devices > 0);
    if (devices > 0) {
        check_gpus(devices, BOOT_WORLD);
        check_gpus(devices, BOOT_HOST);
        check_gpus(devices, BOOT_ENV);
    } else {
        check_host_bootstrap_without_gpu();
        printf("no GPU: the device checks did not run\n");
    }
    CHECK_DONE();
}
