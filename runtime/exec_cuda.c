/* The GPU backend of the executor (docs/cuda.md, "Runtime").
 *
 * One rank = one device, one stream, one device arena. At build time the
 * CUDA source of the program is compiled by NVRTC for the device's
 * architecture, loaded with the runtime's library API, and every kernel
 * argument, GEMM operand and collective buffer is bound to its place in the
 * arena, so a step is a plain walk over the instructions: a cudaLaunchKernel
 * per kernel (arguments prepared once), an rt_lt_run per GEMM, a tgc_comm
 * call per collective (NCCL on the same stream). A step's host <-> device
 * traffic is the inputs going in (async, from pinned memory) and the
 * watched scalars (loss, gradient norm) coming back, then one stream
 * synchronisation. */
#include "runtime/exec_cuda.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/cuda.h"
#include "support/util.h"

#ifndef TGC_HAVE_CUDA

bool rt_exec_cuda_init(rt_exec *e, int device, const rt_cc_options *cc, diag *d)
{
    (void)e, (void)device, (void)cc;
    rt_cuda_device_count(d); /* says that this tgc was built without the toolkit */
    return false;
}
/* Unreachable: no executor gets a GPU side without the toolkit. */
void rt_exec_cuda_free(rt_exec *e) { (void)e; }
int rt_exec_cuda_step(rt_exec *e) { (void)e; return RT_EXEC_ERR_DEVICE; }
bool rt_exec_cuda_upload(rt_exec *e) { (void)e; return false; }
bool rt_exec_cuda_download(rt_exec *e, ir_mem m) { (void)e, (void)m; return false; }
bool rt_exec_cuda_watch(rt_exec *e, const ir_node *n) { (void)e, (void)n; return false; }
bool rt_exec_cuda_profile_begin(rt_exec *e) { (void)e; return false; }
void *rt_exec_cuda_stream(const rt_exec *e) { (void)e; return NULL; }
int rt_exec_cuda_device(const rt_exec *e) { (void)e; return -1; }
const char *rt_exec_cuda_desc(const rt_exec *e) { (void)e; return ""; }
bool rt_exec_cuda_fetch(rt_exec *e, cg_bind b, size_t bytes, void *dst)
{
    (void)e, (void)b, (void)bytes, (void)dst;
    return false;
}

#else

#include "runtime/comm_nccl.h"
#include "runtime/cublaslt.h"
#include "runtime/nvrtc.h"

#define ARENA_ALIGN 256               /* every region starts on a 256-byte boundary (cuBLASLt wants 16+) */
#define LT_WORKSPACE ((size_t)RT_CUDA_LT_WORKSPACE)
#define MAX_WATCH 8
#define ARGS_PER_KERNEL (KMAX_ARGS + 1) /* the pointers, then the run-time scalars */
#define GEMM_PTRS 5                     /* a, b, c, bias, aux */

typedef struct watch {
    const ir_node *n;
    void *pinned; /* staging: the device copies into pinned memory, asynchronously */
    size_t bytes;
} watch;

struct rt_exec_cuda {
    const rt_cuda_api *cu;
    int device;
    rt_cuda_device_info info;
    char arch[16];
    char desc[512]; /* rt_exec_device_desc */
    cudaStream_t stream;
    unsigned char *arena; /* the one device allocation */
    size_t arena_bytes;
    unsigned char *dbuf[IR_MEM_COUNT], *dws, *dstate, *dlt;
    cudaLibrary_t lib;
    cudaKernel_t *kfn; /* per kernel */
    dim3 *grid, *block;
    unsigned *shmem;
    void **dio;   /* per kernel, KMAX_ARGS device pointers */
    void **kargs; /* per kernel, ARGS_PER_KERNEL launch arguments: &dio[...], then &e->rt */
    rt_lt *lt;
    rt_lt_gemm **gemm; /* per instruction (NULL but for GEMMs) */
    void **gptr;       /* per instruction, GEMM_PTRS device pointers */
    cudaEvent_t *ev;   /* profiling: one before each instruction and one after the last */
    bool sync_each;    /* TGC_CUDA_SYNC=1: synchronise and check after every instruction */
    watch watch[MAX_WATCH];
    int nwatch;
};

/* ---- errors: every failure names the call and what it was for ---------------- */

/* The call's name without its arguments: CU(e, Malloc, ctx, &p, n). */
#define CU(e, fn, context, ...) rt_cuda_ok((e)->cuda->cu->fn(__VA_ARGS__), "cuda" #fn, context, (e)->err, sizeof (e)->err)

/* "kernel k3_softmax of node layers.0.attn.softmax (softmax, gpt.tg:31:9)" and alike. */
static const char *describe_instr(const rt_exec *e, int i, char *buf, size_t n)
{
    const cg_instr *in = &e->prog->instrs[i];
    const ir_node *node = in->node >= 0 && in->node < e->g->nnodes ? e->g->nodes[in->node] : NULL;
    char what[160];
    if (in->kind == CG_KERNEL) snprintf(what, sizeof what, "kernel %s", e->prog->kernels[in->kernel]->name);
    else if (in->kind == CG_GEMM) snprintf(what, sizeof what, "GEMM (instruction %d)", i);
    else snprintf(what, sizeof what, "collective (instruction %d)", i);
    if (!node) snprintf(buf, n, "%s", what);
    else if (node->loc.line > 0)
        snprintf(buf, n, "%s of node %s (%s, %s:%d:%d)", what, node->name, ir_op_name(node->op),
                 node->loc.file ? node->loc.file : "?", node->loc.line, node->loc.col);
    else snprintf(buf, n, "%s of node %s (%s)", what, node->name, ir_op_name(node->op));
    return buf;
}

/* ---- the device arena --------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t align_up(size_t x) { return (x + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1); }

/* The memory plan's buffers (by kind), the kernels' workspace, the optimizer
 * state and cuBLASLt's workspace, each a region of one cudaMalloc. */
static bool arena_new(rt_exec *e, diag *d)
{
    struct rt_exec_cuda *c = e->cuda;
    const ir_graph *g = e->g;
    size_t off[IR_MEM_COUNT + 3], at = 0;
    for (int m = IR_MEM_INPUT; m < IR_MEM_COUNT; m++) {
        off[m] = at;
        at = align_up(at + (size_t)g->mem_size[m]);
    }
    off[IR_MEM_COUNT] = at; /* kernels' workspace */
    at = align_up(at + (size_t)e->prog->workspace_bytes);
    off[IR_MEM_COUNT + 1] = at; /* optimizer state */
    at = align_up(at + (size_t)e->state_bytes);
    off[IR_MEM_COUNT + 2] = at; /* cuBLASLt */
    at += LT_WORKSPACE;
    c->arena_bytes = at;
    char ctx[160];
    snprintf(ctx, sizeof ctx, "the arena of %.1f MiB on device %d, %.1f MiB free", (double)at / 1048576.0,
             c->device, (double)c->info.mem_free / 1048576.0);
    void *p = NULL;
    if (!CU(e, Malloc, ctx, &p, at)) {
        diag_error_plain(d, "%s", e->err);
        return false;
    }
    c->arena = p;
    e->alloc_bytes = (int64_t)at;
    for (int m = IR_MEM_INPUT; m < IR_MEM_COUNT; m++) c->dbuf[m] = c->arena + off[m];
    c->dws = c->arena + off[IR_MEM_COUNT];
    c->dstate = c->arena + off[IR_MEM_COUNT + 1];
    c->dlt = c->arena + off[IR_MEM_COUNT + 2];
    /* Zero, as the CPU's buffers start: gradients, the activation arena and
     * the optimizer state are read before they are first written by some
     * programs (accumulation, beta = 1 GEMMs). */
    if (!CU(e, MemsetAsync, "zeroing the arena", c->arena, 0, at, c->stream) ||
        !CU(e, StreamSynchronize, "zeroing the arena", c->stream)) {
        diag_error_plain(d, "%s", e->err);
        return false;
    }
    return true;
}

/* Host mirrors: pinned for the inputs (copied every step), plain calloc for
 * the rest (pages of a mirror never read stay untouched). */
static bool mirrors_new(rt_exec *e, diag *d)
{
    const ir_graph *g = e->g;
    void *p = NULL;
    size_t in_bytes = (size_t)g->mem_size[IR_MEM_INPUT] ? (size_t)g->mem_size[IR_MEM_INPUT] : 1;
    if (!CU(e, MallocHost, "the pinned input buffer", &p, in_bytes)) {
        diag_error_plain(d, "%s", e->err);
        return false;
    }
    memset(p, 0, in_bytes);
    e->buf[IR_MEM_INPUT] = p;
    for (int m = IR_MEM_INPUT + 1; m < IR_MEM_COUNT; m++) e->buf[m] = xcalloc((size_t)g->mem_size[m] + 1, 1);
    e->state = xcalloc((size_t)e->state_bytes + 1, 1);
    return true;
}

/* ---- kernels ------------------------------------------------------------------ */

static bool kernels_load(rt_exec *e, const rt_cc_options *cc, diag *d)
{
    struct rt_exec_cuda *c = e->cuda;
    const cg_program *p = e->prog;
    rt_nvrtc_options no = {.arch = c->arch, .no_cache = cc->no_cache, .keep_source = cc->keep_source};
    double t0 = now_s();
    rt_cubin *bin = rt_nvrtc_compile(e->source, &no, d);
    if (!bin) return false;
    size_t len = strlen(c->desc);
    snprintf(c->desc + len, sizeof c->desc - len, "; %d kernels for %s (%s %.1f s)", p->nkernels, c->arch,
             rt_cubin_cached(bin) ? "NVRTC cache," : "NVRTC,", now_s() - t0);
    char ctx[512];
    snprintf(ctx, sizeof ctx, "the %d kernels compiled for %s on device %d (%s)", p->nkernels, c->arch, c->device,
             c->info.name);
    bool ok = CU(e, LibraryLoadData, ctx, &c->lib, rt_cubin_data(bin), NULL, NULL, 0, NULL, NULL, 0);
    rt_cubin_free(bin);
    if (!ok) {
        diag_error_plain(d, "%s", e->err);
        return false;
    }
    c->kfn = xcalloc((size_t)p->nkernels + 1, sizeof *c->kfn);
    c->grid = xcalloc((size_t)p->nkernels + 1, sizeof *c->grid);
    c->block = xcalloc((size_t)p->nkernels + 1, sizeof *c->block);
    c->shmem = xcalloc((size_t)p->nkernels + 1, sizeof *c->shmem);
    for (int k = 0; k < p->nkernels; k++) {
        const kernel *kn = p->kernels[k];
        snprintf(ctx, sizeof ctx, "kernel %s (%s)", kn->name, kn->comment ? kn->comment : "");
        if (!CU(e, LibraryGetKernel, ctx, &c->kfn[k], c->lib, kn->name)) {
            diag_error_plain(d, "%s", e->err);
            return false;
        }
        unsigned grid[3], block[3];
        cg_cuda_launch_dims(kn, grid, block, &c->shmem[k]);
        c->grid[k] = (dim3){grid[0], grid[1], grid[2]};
        c->block[k] = (dim3){block[0], block[1], block[2]};
        /* Above 48 KiB a kernel must opt in to its dynamic shared memory. */
        if (c->shmem[k] > 48u * 1024u &&
            !CU(e, KernelSetAttributeForDevice, ctx, c->kfn[k], cudaFuncAttributeMaxDynamicSharedMemorySize,
                (int)c->shmem[k], c->device)) {
            diag_error_plain(d, "%s", e->err);
            return false;
        }
    }
    return true;
}

/* ---- binding ------------------------------------------------------------------ */

static void *dresolve(const rt_exec *e, cg_bind b)
{
    const struct rt_exec_cuda *c = e->cuda;
    switch (b.kind) {
    case CG_BIND_NODE: {
        const ir_node *n = e->g->nodes[b.node];
        TGC_ASSERT(n->mem > IR_MEM_NONE && n->mem < IR_MEM_COUNT);
        return c->dbuf[n->mem] + n->mem_offset;
    }
    case CG_BIND_WS: return c->dws + b.offset;
    case CG_BIND_STATE: return c->dstate + (int64_t)b.node * e->g->mem_size[IR_MEM_PARAM] + b.offset;
    }
    return NULL;
}

/* Which epilogue operands a GEMM has (cuBLASLt reads or writes them). */
static bool epi_has_bias(cg_epilogue x) { return x != CG_EPI_NONE; }
static bool epi_has_aux(cg_epilogue x) { return x == CG_EPI_GELU_AUX_BIAS || x == CG_EPI_DGELU_BGRAD; }

static bool bind_all(rt_exec *e, diag *d)
{
    struct rt_exec_cuda *c = e->cuda;
    const cg_program *p = e->prog;
    c->dio = xcalloc((size_t)p->nkernels * KMAX_ARGS + 1, sizeof *c->dio);
    c->kargs = xcalloc((size_t)p->nkernels * ARGS_PER_KERNEL + 1, sizeof *c->kargs);
    for (int k = 0; k < p->nkernels; k++) {
        int n = p->kernels[k]->nargs;
        void **io = c->dio + (size_t)k * KMAX_ARGS, **args = c->kargs + (size_t)k * ARGS_PER_KERNEL;
        for (int a = 0; a < n; a++) {
            io[a] = dresolve(e, p->binds[k][a]);
            args[a] = &io[a];
        }
        args[n] = &e->rt; /* by value: the kernel's last parameter has rt_scalars' layout */
    }
    c->gemm = xcalloc((size_t)p->ninstrs + 1, sizeof *c->gemm);
    c->gptr = xcalloc((size_t)p->ninstrs * GEMM_PTRS + 1, sizeof *c->gptr);
    e->comm_ptr = xcalloc((size_t)p->ninstrs * 2 + 1, sizeof *e->comm_ptr);
    for (int i = 0; i < p->ninstrs; i++) {
        const cg_instr *in = &p->instrs[i];
        if (in->kind == CG_COMM) {
            e->comm_ptr[2 * i] = dresolve(e, in->comm.src);
            e->comm_ptr[2 * i + 1] = dresolve(e, in->comm.dst);
        }
        if (in->kind != CG_GEMM) continue;
        const cg_gemm *gm = &in->gemm;
        void **gp = c->gptr + (size_t)i * GEMM_PTRS;
        gp[0] = dresolve(e, gm->a);
        gp[1] = dresolve(e, gm->b);
        gp[2] = dresolve(e, gm->c);
        gp[3] = epi_has_bias(gm->epilogue) ? dresolve(e, gm->bias) : NULL;
        gp[4] = epi_has_aux(gm->epilogue) ? dresolve(e, gm->aux) : NULL;
        if (!(c->gemm[i] = rt_lt_gemm_new(gm, d))) {
            char what[512];
            diag_error_plain(d, "cannot describe the %s to cuBLASLt", describe_instr(e, i, what, sizeof what));
            return false;
        }
    }
    return true;
}

static bool has_gemm(const cg_program *p)
{
    for (int i = 0; i < p->ninstrs; i++)
        if (p->instrs[i].kind == CG_GEMM) return true;
    return false;
}

static bool select_device(rt_exec *e, int device, diag *d)
{
    struct rt_exec_cuda *c = e->cuda;
    int count = rt_cuda_device_count(d);
    if (count <= 0) return false;
    if (device < 0 || device >= count) {
        diag_error_plain(d, "CUDA device %d does not exist: this machine has %d", device, count);
        return false;
    }
    if (!rt_cuda_device_query(device, &c->info, d)) return false;
    c->cu = rt_cuda_load(d);
    rt_cuda_arch(&c->info, c->arch, sizeof c->arch);
    const rt_cuda_device_info *in = &c->info;
    snprintf(c->desc, sizeof c->desc, "device %d: %s (%s, %d SMs, %.1f of %.1f GiB free), CUDA driver %d.%d, runtime %d.%d",
             device, in->name, c->arch, in->sms, (double)in->mem_free / 1073741824.0,
             (double)in->mem_total / 1073741824.0, in->driver_version / 1000, in->driver_version % 1000 / 10,
             in->runtime_version / 1000, in->runtime_version % 1000 / 10);
    return c->cu != NULL;
}

bool rt_exec_cuda_init(rt_exec *e, int device, const rt_cc_options *cc, diag *d)
{
    struct rt_exec_cuda *c = e->cuda = xcalloc(1, sizeof *e->cuda);
    c->device = device;
    const char *sync = getenv("TGC_CUDA_SYNC");
    c->sync_each = sync && atoi(sync) > 0;
    if (!select_device(e, device, d)) return false;
    if (!CU(e, SetDevice, "selecting the rank's device", device) ||
        !CU(e, StreamCreateWithFlags, "the rank's stream", &c->stream, cudaStreamNonBlocking)) {
        diag_error_plain(d, "%s", e->err);
        return false;
    }
    if (!kernels_load(e, cc, d) || !arena_new(e, d) || !mirrors_new(e, d)) return false;
    if (has_gemm(e->prog)) {
        if (!rt_lt_load(d) || !(c->lt = rt_lt_new(c->stream, c->dlt, LT_WORKSPACE, d))) return false;
    }
    if (!bind_all(e, d)) return false;
    e->err[0] = 0;
    return true;
}

void rt_exec_cuda_free(rt_exec *e)
{
    struct rt_exec_cuda *c = e->cuda;
    if (!c) return;
    const rt_cuda_api *cu = c->cu;
    /* Teardown after a failed step runs on a broken context: every call's
     * status is ignored, everything is released that can be. */
    if (cu) {
        cu->SetDevice(c->device);
        if (c->stream) cu->StreamSynchronize(c->stream);
        for (int i = 0; c->ev && i <= e->prog->ninstrs; i++)
            if (c->ev[i]) cu->EventDestroy(c->ev[i]);
    }
    for (int i = 0; c->gemm && i < e->prog->ninstrs; i++)
        if (c->gemm[i]) rt_lt_gemm_free(c->gemm[i]);
    if (c->lt) rt_lt_free(c->lt);
    if (cu) {
        if (c->lib) cu->LibraryUnload(c->lib);
        if (c->arena) cu->Free(c->arena);
        if (e->buf[IR_MEM_INPUT]) cu->FreeHost(e->buf[IR_MEM_INPUT]);
        for (int w = 0; w < c->nwatch; w++) cu->FreeHost(c->watch[w].pinned);
        if (c->stream) cu->StreamDestroy(c->stream);
    }
    e->buf[IR_MEM_INPUT] = NULL; /* the rest is exec.c's to free */
    free(c->ev);
    free(c->kfn);
    free(c->grid);
    free(c->block);
    free(c->shmem);
    free(c->dio);
    free(c->kargs);
    free(c->gemm);
    free(c->gptr);
    free(c);
    e->cuda = NULL;
}

/* ---- host <-> device ------------------------------------------------------------ */

bool rt_exec_cuda_upload(rt_exec *e)
{
    struct rt_exec_cuda *c = e->cuda;
    int64_t pbytes = e->g->mem_size[IR_MEM_PARAM];
    return CU(e, SetDevice, "uploading the parameters", c->device) &&
           CU(e, Memcpy, "the parameters to the device", c->dbuf[IR_MEM_PARAM], e->buf[IR_MEM_PARAM], (size_t)pbytes,
              cudaMemcpyHostToDevice) &&
           CU(e, Memcpy, "the optimizer state to the device", c->dstate, e->state, (size_t)e->state_bytes,
              cudaMemcpyHostToDevice);
}

bool rt_exec_cuda_download(rt_exec *e, ir_mem m)
{
    struct rt_exec_cuda *c = e->cuda;
    TGC_ASSERT(m > IR_MEM_NONE && m < IR_MEM_COUNT);
    char ctx[64];
    snprintf(ctx, sizeof ctx, "the %s buffer to the host", ir_mem_name(m));
    return CU(e, SetDevice, ctx, c->device) &&
           CU(e, Memcpy, ctx, e->buf[m], c->dbuf[m], (size_t)e->g->mem_size[m], cudaMemcpyDeviceToHost);
}

bool rt_exec_cuda_watch(rt_exec *e, const ir_node *n)
{
    struct rt_exec_cuda *c = e->cuda;
    for (int w = 0; w < c->nwatch; w++)
        if (c->watch[w].n == n) return true;
    TGC_ASSERT(c->nwatch < MAX_WATCH && n->mem > IR_MEM_NONE && n->mem < IR_MEM_COUNT);
    watch *w = &c->watch[c->nwatch];
    w->n = n;
    w->bytes = (size_t)(ir_shape_numel(&n->shape) * ir_dtype_size(n->dtype));
    char ctx[300];
    snprintf(ctx, sizeof ctx, "staging for %s", n->name);
    if (!CU(e, SetDevice, ctx, c->device) || !CU(e, MallocHost, ctx, &w->pinned, w->bytes ? w->bytes : 1)) return false;
    c->nwatch++;
    return true;
}

void *rt_exec_cuda_stream(const rt_exec *e) { return e->cuda->stream; }

int rt_exec_cuda_device(const rt_exec *e) { return e->cuda->device; }

const char *rt_exec_cuda_desc(const rt_exec *e) { return e->cuda->desc; }

/* --check-numerics: what an instruction wrote, after it finished. */
bool rt_exec_cuda_fetch(rt_exec *e, cg_bind b, size_t bytes, void *dst)
{
    struct rt_exec_cuda *c = e->cuda;
    return CU(e, StreamSynchronize, "--check-numerics", c->stream) &&
           CU(e, Memcpy, "--check-numerics: an instruction's output to the host", dst, dresolve(e, b), bytes,
              cudaMemcpyDeviceToHost);
}

/* ---- the step ------------------------------------------------------------------- */

bool rt_exec_cuda_profile_begin(rt_exec *e)
{
    struct rt_exec_cuda *c = e->cuda;
    if (c->ev) return true;
    int n = e->prog->ninstrs + 1;
    c->ev = xcalloc((size_t)n, sizeof *c->ev);
    if (!CU(e, SetDevice, "profiling events", c->device)) return false;
    for (int i = 0; i < n; i++)
        if (!CU(e, EventCreate, "profiling events", &c->ev[i])) return false;
    return true;
}

/* A failed call during instruction i: the message names it. */
static int fail_instr(rt_exec *e, cudaError_t st, const char *call, int i, const char *extra)
{
    char what[512], ctx[700];
    snprintf(ctx, sizeof ctx, "%s%s", describe_instr(e, i, what, sizeof what), extra ? extra : "");
    rt_cuda_ok(st, call, ctx, e->err, sizeof e->err);
    return RT_EXEC_ERR_DEVICE;
}

static int run_instr(rt_exec *e, int i)
{
    struct rt_exec_cuda *c = e->cuda;
    const cg_instr *in = &e->prog->instrs[i];
    if (in->kind == CG_KERNEL) {
        int k = in->kernel;
        cudaError_t st = c->cu->LaunchKernel((const void *)c->kfn[k], c->grid[k], c->block[k],
                                             c->kargs + (size_t)k * ARGS_PER_KERNEL, c->shmem[k], c->stream);
        return st == cudaSuccess ? 0 : fail_instr(e, st, "cudaLaunchKernel", i, NULL);
    }
    if (in->kind == CG_GEMM) {
        void **gp = c->gptr + (size_t)i * GEMM_PTRS;
        if (rt_lt_run(c->lt, c->gemm[i], gp[0], gp[1], gp[2], gp[3], gp[4]) == 0) return 0;
        char what[512];
        snprintf(e->err, sizeof e->err, "cuBLASLt (%s): %s", describe_instr(e, i, what, sizeof what),
                 rt_lt_error(c->lt));
        return RT_EXEC_ERR_DEVICE;
    }
    if (!e->comm) return -1; /* a parallel plan run without its ranks */
    return rt_exec_run_comm(e, &in->comm, i);
}

/* The end of a step: with NCCL collectives on the stream, a wait that
 * polls for the other ranks' failures and the deadline (a plain
 * cudaStreamSynchronize would wait forever for a dead peer). */
static int step_sync(rt_exec *e)
{
    struct rt_exec_cuda *c = e->cuda;
    if (e->comm && strcmp(tgc_comm_backend(e->comm), "nccl") == 0) {
        int rc = tgc_comm_nccl_sync(e->comm);
        if (rc) return rc;
    }
    cudaError_t st = c->cu->StreamSynchronize(c->stream);
    if (st == cudaSuccess) return 0;
    rt_cuda_ok(st, "cudaStreamSynchronize", c->sync_each ? "the end of the step"
               : "the end of the step; rerun with TGC_CUDA_SYNC=1 to find the failing kernel",
               e->err, sizeof e->err);
    return RT_EXEC_ERR_DEVICE;
}

/* Per-op device times from the events of the step just synchronised. */
static void profile_collect(rt_exec *e)
{
    struct rt_exec_cuda *c = e->cuda;
    for (int i = 0; i < e->prog->ninstrs; i++) {
        float ms = 0.0f;
        if (c->cu->EventElapsedTime(&ms, c->ev[i], c->ev[i + 1]) == cudaSuccess) e->instr_ns[i] += (double)ms * 1e6;
    }
}

int rt_exec_cuda_step(rt_exec *e)
{
    struct rt_exec_cuda *c = e->cuda;
    const cg_program *p = e->prog;
    const int64_t in_bytes = e->g->mem_size[IR_MEM_INPUT];
    bool profile = e->instr_ns && c->ev;
    /* Rank threads call here: the device is per thread. */
    if (!CU(e, SetDevice, "the step", c->device)) return RT_EXEC_ERR_DEVICE;
    if (in_bytes && !CU(e, MemcpyAsync, "the inputs to the device", c->dbuf[IR_MEM_INPUT], e->buf[IR_MEM_INPUT],
                        (size_t)in_bytes, cudaMemcpyHostToDevice, c->stream))
        return RT_EXEC_ERR_DEVICE;
    for (int i = 0; i < p->ninstrs; i++) {
        if (profile && !CU(e, EventRecord, "profiling", c->ev[i], c->stream)) return RT_EXEC_ERR_DEVICE;
        int rc = run_instr(e, i);
        if (rc) return rc;
        if (c->sync_each) {
            cudaError_t st = c->cu->StreamSynchronize(c->stream);
            if (st == cudaSuccess) st = c->cu->GetLastError();
            if (st != cudaSuccess) return fail_instr(e, st, "cudaStreamSynchronize", i, ", TGC_CUDA_SYNC=1");
        }
        if (e->check && (rc = rt_exec_check_instr(e, i)) != 0) return rc;
    }
    if (profile && !CU(e, EventRecord, "profiling", c->ev[p->ninstrs], c->stream)) return RT_EXEC_ERR_DEVICE;
    for (int w = 0; w < c->nwatch; w++) {
        const ir_node *n = c->watch[w].n;
        if (!CU(e, MemcpyAsync, n->name, c->watch[w].pinned, c->dbuf[n->mem] + n->mem_offset, c->watch[w].bytes,
                cudaMemcpyDeviceToHost, c->stream))
            return RT_EXEC_ERR_DEVICE;
    }
    int rc = step_sync(e);
    if (rc) return rc;
    for (int w = 0; w < c->nwatch; w++) {
        const ir_node *n = c->watch[w].n;
        memcpy(e->buf[n->mem] + n->mem_offset, c->watch[w].pinned, c->watch[w].bytes);
    }
    if (profile) profile_collect(e);
    return 0;
}

#endif
