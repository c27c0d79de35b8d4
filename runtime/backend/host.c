#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
/* The host backends (runtime/backend/backend.h): `cpu` and `sim` run the
 * same generated C kernels (a shared object, runtime/backend/cpu.h) and
 * the same CBLAS GEMMs, so they agree bit for bit. They differ in where
 * the buffers live:
 *   cpu  64-byte aligned host memory, which the communicators may read
 *        directly (no copies through the interface);
 *   sim  the simulated device: every buffer is a mapping of its own that
 *        is PROT_NONE except while a backend operation that uses it runs
 *        (a run: its executor's buffers; a copy, reduce, upload or
 *        download: the buffers it names, another rank's included, as
 *        the device communicator's copies need). Host code that reads or writes a
 *        device buffer instead of going through upload / download faults
 *        in the tests, which is what the backend exists to catch. */
#include "runtime/backend/backend.h"
#include "runtime/backend/blas.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "runtime/backend/gemm16.h"
#include "runtime/backend/graph.h"
#include "runtime/backend/half.h"
#include "runtime/exec.h"
#include "support/util.h"

/* ---- the kernels: a shared object of the generated C --------------------------- */

static bool host_open(rt_exec *e, const rt_exec_options *o, diag *d)
{
    const cg_program *p = e->prog;
    e->so = rt_cc_load(e->source, &o->cc, d);
    if (!e->so) return false;
    e->fn = xcalloc((size_t)p->nkernels + 1, sizeof *e->fn);
    for (int k = 0; k < p->nkernels; k++) {
        e->fn[k] = (rt_kernel_fn)rt_so_sym(e->so, p->kernels[k]->name);
        if (!e->fn[k]) {
            diag_error_plain(d, "kernel '%s' is missing from '%s'", p->kernels[k]->name, rt_so_path(e->so));
            return false;
        }
    }
    /* The 16-bit GEMMs' workspace and oneDNN primitives (e->dev), made
     * here once for the plan, never inside a step. */
    rt_gemm16 *g16 = NULL;
    if (!rt_gemm16_new(p, &g16, d)) return false;
    e->dev = g16;
    return true;
}

static void host_close(rt_exec *e)
{
    rt_graphs_free(e->graphs, NULL, NULL); /* sim's graphs are the snapshots alone */
    e->graphs = NULL;
    rt_gemm16_free(e->dev);
    e->dev = NULL;
    free(e->fn);
    e->fn = NULL;
    rt_so_close(e->so);
    e->so = NULL;
}

void rt_cpu_gemm(const cg_gemm *g, void *a, void *b, void *c)
{
    if (g->dtype == IR_BF16 || g->dtype == IR_F16) { /* outside a plan: the conversion path */
        char why[256];
        bool ok = rt_gemm16_run(NULL, -1, g, a, b, c, why, sizeof why);
        TGC_ASSERT(ok);
        return;
    }
    enum CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans, tb = g->tb ? CblasTrans : CblasNoTrans;
    for (int64_t i = 0; i < g->batch; i++) {
        if (g->dtype == IR_F64)
            rt_dgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, g->alpha, (double *)a + i * g->stride_a,
                        (int)g->lda, (double *)b + i * g->stride_b, (int)g->ldb, g->beta,
                        (double *)c + i * g->stride_c, (int)g->ldc);
        else
            rt_sgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, (float)g->alpha,
                        (float *)a + i * g->stride_a, (int)g->lda, (float *)b + i * g->stride_b, (int)g->ldb,
                        (float)g->beta, (float *)c + i * g->stride_c, (int)g->ldc);
    }
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Instruction i on its pointer block (rt_graph_instr_ptrs) with the
 * run-time scalars at rt. */
static int host_instr(rt_exec *e, int i, void *const *ptrs, const rt_scalars *rt)
{
    const cg_instr *in = &e->prog->instrs[i];
    if (in->kind == CG_GEMM) {
        void *const *gp = ptrs;
        if (in->gemm.dtype == IR_BF16 || in->gemm.dtype == IR_F16) {
            if (!rt_gemm16_run(e->dev, i, &in->gemm, gp[0], gp[1], gp[2], e->err, sizeof e->err))
                return RT_EXEC_ERR_DEVICE;
        } else
            rt_cpu_gemm(&in->gemm, gp[0], gp[1], gp[2]);
    } else if (in->kind == CG_COMM) {
        if (!e->comm) return -1; /* a parallel plan run without its ranks */
        return rt_exec_run_comm_on(e, &in->comm, i, ptrs[0], ptrs[1]);
    } else
        e->fn[in->kernel](ptrs, rt);
    return 0;
}

int rt_host_run(rt_exec *e, const int *idx, int n)
{
    for (int j = 0; j < n; j++) {
        int i = idx ? idx[j] : j, c;
        double t0 = e->instr_ns ? now_ns() : 0.0;
        int rc = host_instr(e, i, rt_graph_instr_ptrs(e, i, &c), &e->rt);
        if (rc) return rc;
        if (e->instr_ns) e->instr_ns[i] += now_ns() - t0;
        if (e->check) {
            rc = rt_exec_check_instr(e, i);
            if (rc) return rc;
        }
    }
    return 0;
}

/* ---- operations on host memory (both backends; sim wraps them) ------------------- */

static bool h_copy(rt_exec *e, void *dst, const void *src, size_t bytes)
{
    (void)e;
    if (bytes && dst != src) memmove(dst, src, bytes);
    return true;
}

static bool h_zero(rt_exec *e, void *dst, size_t bytes)
{
    (void)e;
    if (bytes) memset(dst, 0, bytes);
    return true;
}

/* The communicators' reduction (runtime/comm/comm_local.c): a + b, or a
 * max that propagates NaN, element by element in index order. */
#define DEFINE_REDUCE(NAME, T)                                                         \
    static void NAME(T *restrict a, const T *restrict x, int64_t n, rt_reduce_op op)  \
    {                                                                                  \
        if (op == RT_REDUCE_SUM)                                                       \
            for (int64_t i = 0; i < n; i++) a[i] += x[i];                              \
        else                                                                           \
            for (int64_t i = 0; i < n; i++) a[i] = (x[i] > a[i] || x[i] != x[i]) ? x[i] : a[i];             \
    }
DEFINE_REDUCE(reduce_f32, float)
DEFINE_REDUCE(reduce_f64, double)

/* 16-bit elements (bf16, f16): widened, combined in f32, rounded to nearest
 * even once per call, in blocks on the stack. */
#define H16_BLOCK 256
static void widen16(ir_dtype t, const uint16_t *x, float *y, int64_t n)
{
    if (t == IR_BF16) rt_bf16_to_f32(x, y, n);
    else rt_f16_to_f32(x, y, n);
}
static void narrow16(ir_dtype t, const float *x, uint16_t *y, int64_t n)
{
    if (t == IR_BF16) rt_f32_to_bf16(x, y, n);
    else rt_f32_to_f16(x, y, n);
}

static void reduce_16(ir_dtype t, uint16_t *a, const uint16_t *x, int64_t n, rt_reduce_op op)
{
    float fa[H16_BLOCK], fx[H16_BLOCK];
    for (int64_t b = 0; b < n; b += H16_BLOCK) {
        int64_t m = n - b < H16_BLOCK ? n - b : H16_BLOCK;
        widen16(t, a + b, fa, m);
        widen16(t, x + b, fx, m);
        reduce_f32(fa, fx, m, op);
        narrow16(t, fa, a + b, m);
    }
}

static void scale_16(ir_dtype t, uint16_t *x, int64_t n, float s)
{
    float f[H16_BLOCK];
    for (int64_t b = 0; b < n; b += H16_BLOCK) {
        int64_t m = n - b < H16_BLOCK ? n - b : H16_BLOCK;
        widen16(t, x + b, f, m);
        for (int64_t i = 0; i < m; i++) f[i] *= s;
        narrow16(t, f, x + b, m);
    }
}

static bool h_reduce(rt_exec *e, void *dst, const void *src, int64_t n, ir_dtype t, rt_reduce_op op)
{
    if (t == IR_F64) reduce_f64(dst, src, n, op);
    else if (t == IR_F32) reduce_f32(dst, src, n, op);
    else if (t == IR_BF16 || t == IR_F16) reduce_16(t, dst, src, n, op);
    else {
        snprintf(e->err, sizeof e->err, "a reduction of %s elements", ir_dtype_name(t));
        return false;
    }
    return true;
}

static bool h_scale(rt_exec *e, void *x, int64_t n, double s, ir_dtype t)
{
    if (t == IR_F64) {
        double *p = x;
        for (int64_t i = 0; i < n; i++) p[i] *= s;
    } else if (t == IR_F32) {
        float *p = x, f = (float)s;
        for (int64_t i = 0; i < n; i++) p[i] *= f;
    } else if (t == IR_BF16 || t == IR_F16) {
        scale_16(t, x, n, (float)s);
    } else {
        snprintf(e->err, sizeof e->err, "a scaling of %s elements", ir_dtype_name(t));
        return false;
    }
    return true;
}

static bool h_sync(rt_exec *e)
{
    (void)e;
    return true;
}

static void *h_stream(const rt_exec *e)
{
    (void)e;
    return NULL;
}

static int h_device(const rt_exec *e)
{
    (void)e;
    return -1;
}

static const char *h_describe(const rt_exec *e)
{
    (void)e;
    return "";
}

/* ---- cpu ------------------------------------------------------------------------ */

static void *cpu_alloc(rt_exec *e, size_t bytes)
{
    size_t n = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, n ? n : 64);
    if (!p) {
        snprintf(e->err, sizeof e->err, "out of memory allocating %zu bytes", n);
        return NULL;
    }
    memset(p, 0, n ? n : 64);
    return p;
}

static void cpu_release(rt_exec *e, void *p)
{
    (void)e;
    free(p);
}

static bool cpu_upload(rt_exec *e, void *dst, const void *src, size_t bytes) { return h_copy(e, dst, src, bytes); }
static bool cpu_download(rt_exec *e, void *dst, const void *src, size_t bytes) { return h_copy(e, dst, src, bytes); }

const rt_backend_ops rt_backend_cpu = {
    .name = "cpu", .target = CG_TARGET_CPU, .host_memory = true, .open = host_open, .close = host_close,
    .alloc = cpu_alloc, .release = cpu_release, .upload = cpu_upload, .download = cpu_download, .copy = h_copy,
    .zero = h_zero, .reduce = h_reduce, .scale = h_scale, .run = rt_host_run, .sync = h_sync,
    .stream = h_stream, .device = h_device, .describe = h_describe,
};

/* ---- sim: the simulated device ----------------------------------------------------- */

/* Every buffer is a mapping with its own count of the operations that
 * have it open: a run opens its executor's buffers, a copy, reduce,
 * upload or download the one or two it names (a communicator's copy from
 * another rank's buffer included). Only a count's 0 <-> 1 changes call
 * mprotect, so an operation costs the buffers it touches, never every
 * rank's: the protection used to be process-wide, each first enter and
 * last leave changing every buffer of every rank, which made a step of
 * each of d ranks cost d^2 system calls (dp 128 ran 30 times slower
 * than cpu). */
typedef struct sim_owner sim_owner;
typedef struct sim_map {
    void *p;
    size_t len;
    int open;         /* operations that have it open */
    sim_owner *owner; /* the executor that allocated it */
} sim_map;

struct sim_owner {
    const rt_exec *e;
    int runs;         /* its runs in progress (nested) */
    sim_map **maps;
    int n, cap;
};

static struct {
    pthread_mutex_t mu;
    sim_map **maps; /* sorted by address */
    int n, cap;
    sim_owner **owners;
    int nowners;
    uint64_t nprotect;
} sim = {.mu = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local sim_owner *sim_last; /* a rank thread's executor, found again in O(1) */

static size_t page_round(size_t bytes)
{
    size_t pg = 4096;
    return (bytes + pg - 1) / pg * pg;
}

/* The index of the first map starting after p. */
static int sim_upper(const void *p)
{
    int lo = 0, hi = sim.n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if ((const char *)sim.maps[mid]->p <= (const char *)p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static sim_map *sim_lookup(const void *p)
{
    int i = sim_upper(p) - 1;
    if (i < 0) return NULL;
    sim_map *m = sim.maps[i];
    return (const char *)p < (const char *)m->p + m->len ? m : NULL;
}

static void sim_count(sim_map *m, int delta)
{
    bool was = m->open > 0;
    m->open += delta;
    TGC_ASSERT(m->open >= 0);
    if (was == (m->open > 0)) return;
    sim.nprotect++;
    if (mprotect(m->p, m->len, m->open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
        perror("tgc: sim: mprotect");
        abort();
    }
}

static sim_owner *sim_owner_of(const rt_exec *e, bool make)
{
    if (sim_last && sim_last->e == e) return sim_last;
    for (int i = 0; i < sim.nowners; i++)
        if (sim.owners[i]->e == e) return sim_last = sim.owners[i];
    if (!make) return NULL;
    sim_owner *o = xcalloc(1, sizeof *o);
    o->e = e;
    sim.owners = xrealloc(sim.owners, (size_t)(sim.nowners + 1) * sizeof *sim.owners);
    sim.owners[sim.nowners++] = o;
    return sim_last = o;
}

static void sim_owner_drop(sim_owner *o)
{
    for (int i = 0; i < sim.nowners; i++)
        if (sim.owners[i] == o) sim.owners[i] = sim.owners[--sim.nowners];
    if (sim_last == o) sim_last = NULL;
    free(o->maps);
    free(o);
    if (sim.nowners == 0) {
        free(sim.owners);
        sim.owners = NULL;
    }
}

/* Opens (delta 1) or closes (-1) the maps holding a and b (either may be
 * host memory or NULL). */
static void sim_open_ptrs(const void *a, const void *b, int delta)
{
    pthread_mutex_lock(&sim.mu);
    sim_map *ma = a ? sim_lookup(a) : NULL, *mb = b ? sim_lookup(b) : NULL;
    if (ma) sim_count(ma, delta);
    if (mb && mb != ma) sim_count(mb, delta);
    pthread_mutex_unlock(&sim.mu);
}

/* Opens or closes every buffer of e, for a run of its program: those it
 * allocated and those it borrows from another executor (a generator's
 * decoding program runs on the prefill program's weights and caches). */
static void sim_open_exec(const rt_exec *e, int delta)
{
    pthread_mutex_lock(&sim.mu);
    sim_owner *o = sim_owner_of(e, true);
    o->runs += delta;
    for (int i = 0; i < o->n; i++) sim_count(o->maps[i], delta);
    for (int m = 0; m < IR_MEM_COUNT; m++) {
        sim_map *b = e->borrowed & (1u << m) && e->buf[m] ? sim_lookup(e->buf[m]) : NULL;
        if (b && b->owner != o) sim_count(b, delta);
    }
    pthread_mutex_unlock(&sim.mu);
}

uint64_t rt_sim_protect_count(void)
{
    pthread_mutex_lock(&sim.mu);
    uint64_t n = sim.nprotect;
    pthread_mutex_unlock(&sim.mu);
    return n;
}

bool rt_sim_owns(const void *p)
{
    pthread_mutex_lock(&sim.mu);
    bool in = sim_lookup(p) != NULL;
    pthread_mutex_unlock(&sim.mu);
    return in;
}

/* A mapping of its own, zero like every fresh anonymous page; open as
 * many times as its executor's runs in progress. */
static void *sim_alloc(rt_exec *e, size_t bytes)
{
    size_t len = page_round(bytes ? bytes : 1);
    pthread_mutex_lock(&sim.mu);
    sim_owner *o = sim_owner_of(e, true);
    void *p = mmap(NULL, len, o->runs ? PROT_READ | PROT_WRITE : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        pthread_mutex_unlock(&sim.mu);
        snprintf(e->err, sizeof e->err, "sim: out of memory mapping %zu bytes of the simulated device", len);
        return NULL;
    }
    sim_map *m = xmalloc(sizeof *m);
    *m = (sim_map){p, len, o->runs, o};
    if (sim.n == sim.cap) {
        sim.cap = sim.cap ? 2 * sim.cap : 64;
        sim.maps = xrealloc(sim.maps, (size_t)sim.cap * sizeof *sim.maps);
    }
    int at = sim_upper(p);
    memmove(sim.maps + at + 1, sim.maps + at, (size_t)(sim.n - at) * sizeof *sim.maps);
    sim.maps[at] = m;
    sim.n++;
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 16;
        o->maps = xrealloc(o->maps, (size_t)o->cap * sizeof *o->maps);
    }
    o->maps[o->n++] = m;
    pthread_mutex_unlock(&sim.mu);
    return p;
}

static void sim_release(rt_exec *e, void *p)
{
    (void)e;
    if (!p) return;
    pthread_mutex_lock(&sim.mu);
    int at = sim_upper(p) - 1;
    if (at >= 0 && sim.maps[at]->p == p) {
        sim_map *m = sim.maps[at];
        sim_owner *o = m->owner;
        munmap(p, m->len);
        memmove(sim.maps + at, sim.maps + at + 1, (size_t)(sim.n - at - 1) * sizeof *sim.maps);
        sim.n--;
        for (int i = 0; i < o->n; i++)
            if (o->maps[i] == m) o->maps[i] = o->maps[--o->n];
        free(m);
        if (o->n == 0 && o->runs == 0) sim_owner_drop(o);
    }
    if (sim.n == 0) {
        free(sim.maps);
        sim.maps = NULL;
        sim.cap = 0;
    }
    pthread_mutex_unlock(&sim.mu);
}

#define SIM_WRAP(A, B, CALL)       \
    do {                           \
        sim_open_ptrs(A, B, 1);    \
        bool ok_ = (CALL);         \
        sim_open_ptrs(A, B, -1);   \
        return ok_;                \
    } while (0)

static bool sim_upload(rt_exec *e, void *dst, const void *src, size_t bytes) { SIM_WRAP(dst, src, h_copy(e, dst, src, bytes)); }
static bool sim_download(rt_exec *e, void *dst, const void *src, size_t bytes) { SIM_WRAP(dst, src, h_copy(e, dst, src, bytes)); }
static bool sim_copy(rt_exec *e, void *dst, const void *src, size_t bytes) { SIM_WRAP(dst, src, h_copy(e, dst, src, bytes)); }
static bool sim_zero(rt_exec *e, void *dst, size_t bytes) { SIM_WRAP(dst, NULL, h_zero(e, dst, bytes)); }
static bool sim_reduce(rt_exec *e, void *dst, const void *src, int64_t n, ir_dtype t, rt_reduce_op op)
{
    SIM_WRAP(dst, src, h_reduce(e, dst, src, n, t, op));
}
static bool sim_scale(rt_exec *e, void *x, int64_t n, double s, ir_dtype t) { SIM_WRAP(x, NULL, h_scale(e, x, n, s, t)); }

/* --cuda-graphs on the simulated device: a model of capture and replay
 * (docs/cuda.md "CUDA graphs"). A captured run is its instruction list and
 * every instruction's pointers as they were at capture (graph.c keeps
 * them); a replay launches exactly those, in that order, with the kernels
 * reading the run-time scalars from their device copy e->rt_dev, which is
 * uploaded from e->rt first, as the cuda backend does. A per-step value
 * that reached a kernel any other way would be stale in the replay: the
 * tests train with and without graphs and compare bit for bit. */
static int sim_replay(rt_exec *e, const rt_graph *g)
{
    memcpy(e->rt_dev, &e->rt, sizeof e->rt); /* the upload before the launch */
    int64_t at = 0;
    for (int j = 0; j < g->n; j++) {
        int i = g->idx ? g->idx[j] : j, c;
        rt_graph_instr_ptrs(e, i, &c);
        int rc = host_instr(e, i, g->ptrs + at, e->rt_dev);
        if (rc) return rc;
        at += c;
    }
    return 0;
}

static int sim_run(rt_exec *e, const int *idx, int n)
{
    rt_graph *g = NULL;
    rt_graph_do what = e->graphs && !e->check && !e->instr_ns ? rt_graph_lookup(e->graphs, e, idx, n, &g) : RT_GRAPH_EAGER;
    sim_open_exec(e, 1);
    if (what == RT_GRAPH_CAPTURE) rt_graph_captured(g, e); /* recorded, then launched */
    int rc = what == RT_GRAPH_EAGER ? rt_host_run(e, idx, n) : sim_replay(e, g);
    sim_open_exec(e, -1);
    return rc;
}

const rt_backend_ops rt_backend_sim = {
    .name = "sim", .target = CG_TARGET_CPU, .host_memory = false, .graphs = true, .open = host_open, .close = host_close,
    .alloc = sim_alloc, .release = sim_release, .upload = sim_upload, .download = sim_download, .copy = sim_copy,
    .zero = sim_zero, .reduce = sim_reduce, .scale = sim_scale, .run = sim_run, .sync = h_sync,
    .stream = h_stream, .device = h_device, .describe = h_describe,
};

const rt_backend_ops *rt_backend_by_name(const char *name)
{
    const rt_backend_ops *all[] = {&rt_backend_cpu, &rt_backend_sim, &rt_backend_cuda};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        if (strcmp(all[i]->name, name) == 0) return all[i];
    return NULL;
}
