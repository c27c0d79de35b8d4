/* The `cuda` backend (runtime/backend/backend.h, docs/cuda.md "Runtime").
 *
 * One executor = one device, one stream. At open the CUDA source of the
 * program (and the backend's own reduce / scale kernels) is compiled by
 * NVRTC for the device's architecture and loaded with the runtime's
 * library API; every buffer is a cudaMalloc of its own. A run is a plain
 * walk over the instructions: a cudaLaunchKernel per kernel (its argument
 * pointers are the executor's resolved device addresses), an rt_lt_run per
 * GEMM, a communicator call per collective (NCCL or the device-local
 * communicator, on the same stream). Everything is issued on the stream;
 * download and sync wait for it. */
#include "runtime/backend/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/backend/cuda.h"
#include "runtime/exec.h"
#include "support/env.h"
#include "support/util.h"

/* cuBLASLt's workspace: 32 MiB, NVIDIA's advice for Hopper. */
#define LT_WORKSPACE ((size_t)32 << 20)

/* The backend's kernels beside the program's: dst op= src and x *= s, the
 * same float operations, element by element, as the host backends. */
static const char builtin_src[] =
    "\nextern \"C\" __global__ void tgc_be_reduce_f32(float *a, const float *x, long long n, int op)\n"
    "{ for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {\n"
    "    float u = a[i], v = x[i]; a[i] = op == 0 ? __fadd_rn(u, v) : ((v > u || v != v) ? v : u); } }\n"
    "extern \"C\" __global__ void tgc_be_reduce_f64(double *a, const double *x, long long n, int op)\n"
    "{ for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {\n"
    "    double u = a[i], v = x[i]; a[i] = op == 0 ? __dadd_rn(u, v) : ((v > u || v != v) ? v : u); } }\n"
    "extern \"C\" __global__ void tgc_be_scale_f32(float *a, long long n, float s)\n"
    "{ for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)\n"
    "    a[i] = __fmul_rn(a[i], s); }\n"
    "extern \"C\" __global__ void tgc_be_scale_f64(double *a, long long n, double s)\n"
    "{ for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)\n"
    "    a[i] = __dmul_rn(a[i], s); }\n"
    /* bf16 / f16 (uint16 bit patterns): widened, combined in f32, rounded to
     * nearest even once, as the host backends do (runtime/backend/host.c):
     * bf16 by integer rounding (NaN kept quiet), f16 by cvt.rn.f16.f32. */
    "__device__ __forceinline__ float tgc_be_w16(unsigned short h, int bf)\n"
    "{ if (bf) return __uint_as_float((unsigned)h << 16);\n"
    "  float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h)); return f; }\n"
    "__device__ __forceinline__ unsigned short tgc_be_n16(float f, int bf)\n"
    "{ if (bf) { unsigned u = __float_as_uint(f);\n"
    "    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);\n"
    "    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }\n"
    "  unsigned short h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n"
    "extern \"C\" __global__ void tgc_be_reduce_16(unsigned short *a, const unsigned short *x, long long n, int op, int bf)\n"
    "{ for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {\n"
    "    float u = tgc_be_w16(a[i], bf), v = tgc_be_w16(x[i], bf);\n"
    "    a[i] = tgc_be_n16(op == 0 ? __fadd_rn(u, v) : ((v > u || v != v) ? v : u), bf); } }\n"
    "extern \"C\" __global__ void tgc_be_scale_16(unsigned short *a, long long n, float s, int bf)\n"
    "{ for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)\n"
    "    a[i] = tgc_be_n16(__fmul_rn(tgc_be_w16(a[i], bf), s), bf); }\n";

const char *rt_cuda_backend_source(void) { return builtin_src; }

#ifndef TGC_HAVE_CUDA

static bool nocuda_open(rt_exec *e, const rt_exec_options *o, diag *d)
{
    (void)e, (void)o;
    rt_cuda_device_count(d); /* says that this tgc was built without the toolkit */
    return false;
}
static void nocuda_close(rt_exec *e) { (void)e; }

const rt_backend_ops rt_backend_cuda = {.name = "cuda", .target = CG_TARGET_CUDA, .device_memory = true, .nccl = true, .graphs = true,
                                        .device_count = rt_cuda_device_count, .open = nocuda_open,
                                        .close = nocuda_close, .extra_bytes = (int64_t)LT_WORKSPACE, .extra_what = "cuBLASLt's workspace"};

#else

#include "passes/pass.h"
#include "runtime/backend/cublaslt.h"
#include "runtime/backend/cuda_graph.h"
#include "runtime/backend/cudnn.h"
#include "runtime/backend/nvrtc.h"
#include "runtime/comm/comm_nccl.h"

typedef struct cuda_dev {
    const rt_cuda_api *cu;
    int device;
    rt_cuda_device_info info;
    char arch[16];
    char desc[1024]; /* rt_exec_device_desc */
    cudaStream_t stream;
    cudaLibrary_t lib;
    cudaKernel_t *kfn; /* per kernel */
    cudaKernel_t reduce[3], scale[3]; /* [0] f32, [1] f64, [2] bf16 / f16: the backend's own */
    dim3 *grid, *block;
    unsigned *shmem;
    void *lt_ws;
    rt_lt *lt;
    rt_lt_gemm **gemm; /* per instruction (NULL but for GEMMs) */
    cudaEvent_t *ev;   /* profiling: one before each instruction and one after the last */
    cudaStream_t side; /* side_stream: a second stream (overlap), made on first use */
    cudaEvent_t fence; /* stream_wait's event */
    bool sync_each;    /* TGC_CUDA_SYNC=1: synchronise and check after every instruction */
    bool graph_warned; /* --cuda-graphs: a capture failed, said once */
    size_t ws_bytes;   /* lt_ws: cuBLASLt's and cuDNN's (one stream: never both at once) */
    /* cuDNN's fused attention (--attention-backend cudnn|auto), per
     * instruction: the call that replaces a forward kernel, or the whole
     * backward at its dK/dV kernel, whose D_i (ROW) and dQ kernels are
     * then skipped (dnn_skip 2 and 1: the ROW kernel still runs under
     * --check-kernels, which compares its output). */
    rt_dnn *dnn;
    rt_dnn_call **dnn_call;
    int *dnn_o, *dnn_dq; /* the backward's kernels whose arguments hold o and dq */
    unsigned char *dnn_skip;
} cuda_dev;

#define DEV(e) ((cuda_dev *)(e)->dev)

/* The call's name without its arguments: CU(e, Malloc, ctx, &p, n). */
#define CU(e, fn, context, ...) rt_cuda_ok(DEV(e)->cu->fn(__VA_ARGS__), "cuda" #fn, context, (e)->err, sizeof (e)->err)

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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- opening: the device, the kernels, the GEMM descriptors ---------------------- */

static bool select_device(rt_exec *e, int device, diag *d)
{
    cuda_dev *c = DEV(e);
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

static bool get_kernel(rt_exec *e, cudaKernel_t *k, const char *name, const char *ctx, diag *d)
{
    if (CU(e, LibraryGetKernel, ctx, k, DEV(e)->lib, name)) return true;
    diag_error_plain(d, "%s", e->err);
    return false;
}

static bool kernels_load(rt_exec *e, const rt_cc_options *cc, diag *d)
{
    cuda_dev *c = DEV(e);
    const cg_program *p = e->prog;
    rt_nvrtc_options no = {.arch = c->arch, .no_cache = cc->no_cache, .keep_source = cc->keep_source};
    size_t n = strlen(e->source);
    char *src = xmalloc(n + sizeof builtin_src);
    memcpy(src, e->source, n);
    memcpy(src + n, builtin_src, sizeof builtin_src);
    double t0 = now_s();
    rt_cubin *bin = rt_nvrtc_compile(src, &no, d);
    free(src);
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
        if (!get_kernel(e, &c->kfn[k], kn->name, ctx, d)) return false;
        unsigned grid[3], block[3];
        cg_cuda_launch_dims_for(kn, c->info.sms, grid, block, &c->shmem[k]);
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
    return get_kernel(e, &c->reduce[0], "tgc_be_reduce_f32", "the backend's reduction", d) &&
           get_kernel(e, &c->reduce[1], "tgc_be_reduce_f64", "the backend's reduction", d) &&
           get_kernel(e, &c->scale[0], "tgc_be_scale_f32", "the backend's scaling", d) &&
           get_kernel(e, &c->scale[1], "tgc_be_scale_f64", "the backend's scaling", d) &&
           get_kernel(e, &c->reduce[2], "tgc_be_reduce_16", "the backend's reduction", d) &&
           get_kernel(e, &c->scale[2], "tgc_be_scale_16", "the backend's scaling", d);
}

/* cuDNN's attention where the recorded --attention-backend asks for it: a
 * plan per shape, built now (never in a step). cudnn: every attention op
 * (rt_dnn_plan_check refused what cuDNN is not given), an error naming the
 * op where no engine takes it; auto: the ops cuDNN takes, the rest (and
 * all of them where libcudnn does not load) stay with tgc's kernels. */
#define DNN_MAX_WS ((size_t)256 << 20)

static const kattn *attn_at(const cg_program *p, int i, katt_pass pass)
{
    const cg_instr *in = &p->instrs[i];
    if (in->kind != CG_KERNEL) return NULL;
    const kernel *k = p->kernels[in->kernel];
    return k->kind == KK_ATTN && k->attn.pass == pass ? &k->attn : NULL;
}

/* The backward's D_i (ROW) kernel before dK/dV instruction i and its dQ
 * kernel after, by instruction; false where they are not so. */
static bool back_parts(const cg_program *p, int i, int *row, int *dq)
{
    *row = *dq = -1;
    int node = p->instrs[i].node;
    for (int j = 0; j < p->ninstrs; j++) {
        const cg_instr *in = &p->instrs[j];
        if (in->node != node || in->kind != CG_KERNEL) continue;
        const kernel *k = p->kernels[in->kernel];
        if (j < i && k->kind == KK_ROW && k->nargs >= 2) *row = j;
        if (j > i && attn_at(p, j, KATT_DQ)) *dq = j;
    }
    return *row >= 0 && *dq >= 0;
}

static bool attn_new(rt_exec *e, diag *d)
{
    cuda_dev *c = DEV(e);
    const cg_program *p = e->prog;
    bool must = false; /* an op asks for cuDNN's (backend=cudnn), not the backend's best (auto) */
    int cand = 0, took = 0, total = 0;
    char why[512], first_why[512] = "";
    for (int i = 0; i < p->ninstrs; i++) {
        const kattn *A = attn_at(p, i, KATT_FWD) ? attn_at(p, i, KATT_FWD) : attn_at(p, i, KATT_DKV);
        int want = rt_attention_backend(e->g->nodes[p->instrs[i].node]);
        if (!A || want == PASS_ATTENTION_TGC) continue;
        must |= want == PASS_ATTENTION_CUDNN;
        const kernel *k = p->kernels[p->instrs[i].kernel];
        total++;
        cand += rt_dnn_attn_supported(A, k->args[A->q].dtype, k->args[A->lse].dtype, why, sizeof why);
    }
    if (!cand) return true;
    size_t len = strlen(c->desc);
    if (!rt_dnn_load(must ? d : NULL) || !(c->dnn = rt_dnn_new(c->stream, c->info.cc_major, must ? d : NULL))) {
        if (must) return false;
        snprintf(c->desc + len, sizeof c->desc - len, "; attention: tgc's kernels (cuDNN not available)");
        return true;
    }
    int n = p->ninstrs + 1;
    c->dnn_call = xcalloc((size_t)n, sizeof *c->dnn_call);
    c->dnn_o = xcalloc((size_t)n, sizeof *c->dnn_o);
    c->dnn_dq = xcalloc((size_t)n, sizeof *c->dnn_dq);
    c->dnn_skip = xcalloc((size_t)n, sizeof *c->dnn_skip);
    for (int i = 0; i < p->ninstrs; i++) {
        bool bwd = attn_at(p, i, KATT_DKV) != NULL;
        const kattn *A = bwd ? attn_at(p, i, KATT_DKV) : attn_at(p, i, KATT_FWD);
        int want = A ? rt_attention_backend(e->g->nodes[p->instrs[i].node]) : PASS_ATTENTION_TGC;
        if (want == PASS_ATTENTION_TGC) continue;
        const kernel *k = p->kernels[p->instrs[i].kernel];
        ir_dtype io = k->args[A->q].dtype;
        int row = -1, dq = -1;
        bool given = rt_dnn_attn_supported(A, io, k->args[A->lse].dtype, why, sizeof why);
        /* The backward's o is the D_i kernel's second argument (emit_attn.c). */
        if (given && bwd && (!back_parts(p, i, &row, &dq) ||
                             p->kernels[p->instrs[row].kernel]->args[1].numel != A->b * A->n * A->sq * A->dv)) {
            snprintf(why, sizeof why, "its backward's kernels are not in the order D_i, dK/dV, dQ");
            given = false;
        }
        rt_dnn_call *call = given ? rt_dnn_call_new(c->dnn, A, io, bwd, DNN_MAX_WS, why, sizeof why) : NULL;
        if (!call) {
            char what[512];
            if (want == PASS_ATTENTION_CUDNN) {
                diag_error_plain(d, "--attention-backend cudnn: the %s: %s", describe_instr(e, i, what, sizeof what),
                                 why);
                return false;
            }
            if (!*first_why)
                snprintf(first_why, sizeof first_why, "%.200s: %.300s", describe_instr(e, i, what, sizeof what), why);
            continue;
        }
        c->dnn_call[i] = call;
        took++;
        size_t at, bytes, ws = rt_dnn_call_workspace(call, &at, &bytes);
        if (ws > c->ws_bytes) c->ws_bytes = ws;
        if (bwd) {
            c->dnn_o[i] = p->instrs[row].kernel;
            c->dnn_dq[i] = p->instrs[dq].kernel;
            c->dnn_skip[row] = 2;
            c->dnn_skip[dq] = 1;
        }
    }
    char one[256] = "";
    for (int i = 0; i < p->ninstrs && !*one; i++)
        if (c->dnn_call[i]) rt_dnn_call_describe(c->dnn_call[i], one, sizeof one);
    len = strlen(c->desc);
    snprintf(c->desc + len, sizeof c->desc - len, "; attention: cuDNN for %d of %d kernels (%s)%s%s", took, total,
             *one ? one : "none", *first_why ? "; tgc's for the rest, first " : "", first_why);
    return true;
}

/* One device workspace for cuBLASLt and cuDNN: they run on one stream,
 * one at a time. */
static bool ws_new(rt_exec *e, diag *d)
{
    cuda_dev *c = DEV(e);
    const cg_program *p = e->prog;
    for (int i = 0; i < p->ninstrs; i++)
        if (p->instrs[i].kind == CG_GEMM && c->ws_bytes < LT_WORKSPACE) c->ws_bytes = LT_WORKSPACE;
    if (!c->ws_bytes) return true;
    char what[96];
    snprintf(what, sizeof what, "the %.1f MiB workspace of cuBLASLt and cuDNN", (double)c->ws_bytes / 1048576.0);
    void *ws = NULL;
    if (!CU(e, Malloc, what, &ws, c->ws_bytes)) {
        diag_error_plain(d, "%s", e->err);
        return false;
    }
    c->lt_ws = ws;
    return true;
}

static bool gemms_new(rt_exec *e, diag *d)
{
    cuda_dev *c = DEV(e);
    const cg_program *p = e->prog;
    bool any = false;
    for (int i = 0; i < p->ninstrs; i++) any |= p->instrs[i].kind == CG_GEMM;
    if (!any) return true;
    if (!rt_lt_load(d) || !(c->lt = rt_lt_new(c->stream, c->lt_ws, LT_WORKSPACE, d))) return false;
    c->gemm = xcalloc((size_t)p->ninstrs + 1, sizeof *c->gemm);
    for (int i = 0; i < p->ninstrs; i++) {
        if (p->instrs[i].kind != CG_GEMM) continue;
        if (!(c->gemm[i] = rt_lt_gemm_new(&p->instrs[i].gemm, d))) {
            char what[512];
            diag_error_plain(d, "cannot describe the %s to cuBLASLt", describe_instr(e, i, what, sizeof what));
            return false;
        }
    }
    return true;
}

static bool cuda_open(rt_exec *e, const rt_exec_options *o, diag *d)
{
    cuda_dev *c = xcalloc(1, sizeof *c);
    e->dev = c;
    c->device = o->device;
    c->sync_each = env_flag("TGC_CUDA_SYNC");
    if (!select_device(e, o->device, d)) return false;
    if (!CU(e, SetDevice, "selecting the rank's device", o->device) ||
        !CU(e, StreamCreateWithFlags, "the rank's stream", &c->stream, cudaStreamNonBlocking)) {
        diag_error_plain(d, "%s", e->err);
        return false;
    }
    return kernels_load(e, &o->cc, d) && attn_new(e, d) && ws_new(e, d) && gemms_new(e, d);
}

static void graph_drop(void *exec, void *cu) { rt_cuda_graph_drop(cu, exec); }

static void cuda_close(rt_exec *e)
{
    cuda_dev *c = DEV(e);
    if (!c) return;
    const rt_cuda_api *cu = c->cu;
    /* Teardown after a failed step runs on a broken context: every call's
     * status is ignored, everything is released that can be. */
    if (cu) {
        cu->SetDevice(c->device);
        if (c->stream) cu->StreamSynchronize(c->stream);
        rt_graphs_free(e->graphs, graph_drop, (void *)cu);
        e->graphs = NULL;
        for (int i = 0; c->ev && i <= e->prog->ninstrs; i++)
            if (c->ev[i]) cu->EventDestroy(c->ev[i]);
        if (c->side) cu->StreamSynchronize(c->side);
    }
    rt_graphs_free(e->graphs, NULL, NULL); /* without a runtime: nothing was captured */
    e->graphs = NULL;
    for (int i = 0; c->gemm && i < e->prog->ninstrs; i++)
        if (c->gemm[i]) rt_lt_gemm_free(c->gemm[i]);
    if (c->lt) rt_lt_free(c->lt);
    for (int i = 0; c->dnn_call && i < e->prog->ninstrs; i++) rt_dnn_call_free(c->dnn_call[i]);
    rt_dnn_free(c->dnn);
    if (cu) {
        if (c->lt_ws) cu->Free(c->lt_ws);
        if (c->lib) cu->LibraryUnload(c->lib);
        if (c->stream) cu->StreamDestroy(c->stream);
        if (c->side) cu->StreamDestroy(c->side);
        if (c->fence) cu->EventDestroy(c->fence);
    }
    free(c->ev);
    free(c->kfn);
    free(c->grid);
    free(c->block);
    free(c->shmem);
    free(c->gemm);
    free(c->dnn_call);
    free(c->dnn_o);
    free(c->dnn_dq);
    free(c->dnn_skip);
    free(c);
    e->dev = NULL;
}

/* ---- memory ------------------------------------------------------------------------ */

static void *cuda_alloc(rt_exec *e, size_t bytes)
{
    cuda_dev *c = DEV(e);
    char ctx[160];
    snprintf(ctx, sizeof ctx, "%.1f MiB on device %d", (double)bytes / 1048576.0, c->device);
    void *p = NULL;
    if (!CU(e, SetDevice, ctx, c->device) || !CU(e, Malloc, ctx, &p, bytes)) return NULL;
    /* Zero, as the host's buffers start: gradients, the activation arena and
     * the optimizer state are read before they are first written by some
     * programs (accumulation, beta = 1 GEMMs). */
    if (!CU(e, MemsetAsync, ctx, p, 0, bytes, c->stream) || !CU(e, StreamSynchronize, ctx, c->stream)) {
        c->cu->Free(p);
        return NULL;
    }
    return p;
}

static void cuda_release(rt_exec *e, void *p)
{
    cuda_dev *c = DEV(e);
    if (c && c->cu && p) c->cu->Free(p);
}

/* Waits for the stream; with NCCL collectives on it, polling for the
 * other ranks' failures and the deadline first (a plain synchronisation
 * would wait forever for a dead peer). */
static bool cuda_sync(rt_exec *e)
{
    cuda_dev *c = DEV(e);
    if (e->comm && strcmp(tgc_comm_backend(e->comm), "nccl") == 0 && tgc_comm_nccl_sync(e->comm) != 0) {
        snprintf(e->err, sizeof e->err, "%s", tgc_comm_error(e->comm));
        return false;
    }
    cudaError_t st = c->cu->StreamSynchronize(c->stream);
    if (st == cudaSuccess) return true;
    rt_cuda_ok(st, "cudaStreamSynchronize",
               c->sync_each ? "the device's work" : "the device's work; rerun with TGC_CUDA_SYNC=1 to find the failing kernel",
               e->err, sizeof e->err);
    return false;
}

static bool cuda_upload(rt_exec *e, void *dst, const void *src, size_t bytes)
{
    cuda_dev *c = DEV(e);
    return CU(e, SetDevice, "a copy to the device", c->device) &&
           CU(e, MemcpyAsync, "a copy to the device", dst, src, bytes, cudaMemcpyHostToDevice, c->stream) &&
           cuda_sync(e); /* the host's buffer may change once this returns */
}

static bool cuda_download(rt_exec *e, void *dst, const void *src, size_t bytes)
{
    cuda_dev *c = DEV(e);
    return CU(e, SetDevice, "a copy to the host", c->device) &&
           CU(e, MemcpyAsync, "a copy to the host", dst, src, bytes, cudaMemcpyDeviceToHost, c->stream) && cuda_sync(e);
}

static bool cuda_copy(rt_exec *e, void *dst, const void *src, size_t bytes)
{
    cuda_dev *c = DEV(e);
    return CU(e, SetDevice, "a copy on the device", c->device) &&
           CU(e, MemcpyAsync, "a copy on the device", dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream);
}

static bool cuda_zero(rt_exec *e, void *dst, size_t bytes)
{
    cuda_dev *c = DEV(e);
    return CU(e, SetDevice, "zeroing", c->device) && CU(e, MemsetAsync, "zeroing", dst, 0, bytes, c->stream);
}

static unsigned blocks_for(int64_t n)
{
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

static bool cuda_reduce(rt_exec *e, void *dst, const void *src, int64_t n, ir_dtype t, rt_reduce_op op)
{
    cuda_dev *c = DEV(e);
    if (t != IR_F32 && t != IR_F64 && t != IR_BF16 && t != IR_F16) {
        snprintf(e->err, sizeof e->err, "a reduction of %s elements", ir_dtype_name(t));
        return false;
    }
    long long nn = n;
    int o = op == RT_REDUCE_MAX, bf = t == IR_BF16, k = t == IR_F64 ? 1 : t == IR_F32 ? 0 : 2;
    void *args[] = {&dst, &src, &nn, &o, &bf};
    return CU(e, SetDevice, "a reduction", c->device) &&
           CU(e, LaunchKernel, "the backend's reduction", (const void *)c->reduce[k],
              (dim3){blocks_for(n), 1, 1}, (dim3){256, 1, 1}, args, 0, c->stream);
}

static bool cuda_scale(rt_exec *e, void *x, int64_t n, double s, ir_dtype t)
{
    cuda_dev *c = DEV(e);
    if (t != IR_F32 && t != IR_F64 && t != IR_BF16 && t != IR_F16) {
        snprintf(e->err, sizeof e->err, "a scaling of %s elements", ir_dtype_name(t));
        return false;
    }
    long long nn = n;
    float sf = (float)s;
    int bf = t == IR_BF16, k = t == IR_F64 ? 1 : t == IR_F32 ? 0 : 2;
    void *args[] = {&x, &nn, t == IR_F64 ? (void *)&s : (void *)&sf, &bf};
    return CU(e, SetDevice, "a scaling", c->device) &&
           CU(e, LaunchKernel, "the backend's scaling", (const void *)c->scale[k], (dim3){blocks_for(n), 1, 1},
              (dim3){256, 1, 1}, args, 0, c->stream);
}

/* ---- running ---------------------------------------------------------------------- */

static bool cuda_profile_begin(rt_exec *e)
{
    cuda_dev *c = DEV(e);
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

/* Instruction i by cuDNN: the forward, or the whole backward. */
static int run_dnn(rt_exec *e, int i)
{
    cuda_dev *c = DEV(e);
    const cg_instr *in = &e->prog->instrs[i];
    const kernel *k = e->prog->kernels[in->kernel];
    const kattn *A = &k->attn;
    void **io = e->io + (size_t)in->kernel * KMAX_ARGS;
    rt_dnn_call *call = c->dnn_call[i];
    size_t at, bytes;
    rt_dnn_call_workspace(call, &at, &bytes);
    if (bytes) {
        cudaError_t st = c->cu->MemsetAsync((char *)c->lt_ws + at, 0, bytes, c->stream);
        if (st != cudaSuccess) return fail_instr(e, st, "cudaMemsetAsync", i, " (cuDNN's dQ accumulator)");
    }
    int rc;
    if (A->pass == KATT_FWD) {
        void *ptrs[RT_DNN_FWD_PTRS] = {io[A->q], io[A->k], io[A->v], io[A->out], io[A->lse]};
        rc = rt_dnn_call_run(c->dnn, call, ptrs, c->lt_ws);
    } else {
        void **row = e->io + (size_t)c->dnn_o[i] * KMAX_ARGS, **dq = e->io + (size_t)c->dnn_dq[i] * KMAX_ARGS;
        const kattn *Q = &e->prog->kernels[c->dnn_dq[i]]->attn;
        void *ptrs[RT_DNN_BWD_PTRS] = {io[A->q], io[A->k], io[A->v], row[1],      io[A->dy],
                                       io[A->lse], dq[Q->dq], io[A->dk], io[A->dvo]};
        rc = rt_dnn_call_run(c->dnn, call, ptrs, c->lt_ws);
    }
    if (rc == 0) return 0;
    char what[512];
    snprintf(e->err, sizeof e->err, "cuDNN (%s): %s", describe_instr(e, i, what, sizeof what), rt_dnn_error(c->dnn));
    return RT_EXEC_ERR_DEVICE;
}

static int run_instr(rt_exec *e, int i)
{
    cuda_dev *c = DEV(e);
    const cg_instr *in = &e->prog->instrs[i];
    if (c->dnn_skip && c->dnn_skip[i] && (c->dnn_skip[i] == 1 || !e->check)) return 0;
    if (c->dnn_call && c->dnn_call[i]) return run_dnn(e, i);
    if (in->kind == CG_KERNEL) {
        int k = in->kernel, n = e->prog->kernels[k]->nargs;
        /* The launch copies its arguments: the pointers of the current
         * bindings, then the address of the run-time scalars' device copy
         * (uploaded before the run: a graph replays these arguments). */
        void *args[KMAX_ARGS + 1];
        void **io = e->io + (size_t)k * KMAX_ARGS;
        for (int a = 0; a < n; a++) args[a] = &io[a];
        args[n] = &e->rt_dev;
        cudaError_t st = c->cu->LaunchKernel((const void *)c->kfn[k], c->grid[k], c->block[k], args, c->shmem[k], c->stream);
        return st == cudaSuccess ? 0 : fail_instr(e, st, "cudaLaunchKernel", i, NULL);
    }
    if (in->kind == CG_GEMM) {
        void **gp = e->gemm_ptr + (size_t)i * RT_GEMM_PTRS;
        if (rt_lt_run(c->lt, c->gemm[i], gp[0], gp[1], gp[2], gp[3], gp[4]) == 0) return 0;
        char what[512];
        snprintf(e->err, sizeof e->err, "cuBLASLt (%s): %s", describe_instr(e, i, what, sizeof what),
                 rt_lt_error(c->lt));
        return RT_EXEC_ERR_DEVICE;
    }
    if (!e->comm) return -1; /* a parallel plan run without its ranks */
    return rt_exec_run_comm(e, &in->comm, i);
}

/* Per-op device times of the run just synchronised. */
static void profile_collect(rt_exec *e, const int *idx, int n)
{
    cuda_dev *c = DEV(e);
    for (int j = 0; j < n; j++) {
        float ms = 0.0f;
        int i = idx ? idx[j] : j;
        if (c->cu->EventElapsedTime(&ms, c->ev[j], c->ev[j + 1]) == cudaSuccess) e->instr_ns[i] += (double)ms * 1e6;
    }
}

/* --cuda-graphs (docs/cuda.md "CUDA graphs"): what one capture issues. */
typedef struct issue_ctx {
    rt_exec *e;
    const int *idx;
    int n;
} issue_ctx;

static int issue_all(void *p)
{
    issue_ctx *ic = p;
    for (int j = 0; j < ic->n; j++) {
        int rc = run_instr(ic->e, ic->idx ? ic->idx[j] : j);
        if (rc) return rc;
    }
    return 0;
}

/* A run the stream can capture: its collectives (if any) are NCCL's, which
 * enqueue on the stream; the device-local communicator waits on the host. */
static bool capturable(const rt_exec *e, const int *idx, int n)
{
    if (e->comm && strcmp(tgc_comm_backend(e->comm), "nccl") == 0) return true;
    for (int j = 0; j < n; j++)
        if (e->prog->instrs[idx ? idx[j] : j].kind == CG_COMM) return false;
    return true;
}

/* The run as a graph: 0 after its launch, RT_EXEC_ERR_DEVICE, or 1 when it
 * runs uncaptured (the first call of a key, or a capture that failed). */
static int graph_run(rt_exec *e, const int *idx, int n)
{
    cuda_dev *c = DEV(e);
    rt_graph *g = NULL;
    rt_graph_do what = rt_graph_lookup(e->graphs, e, idx, n, &g);
    if (what == RT_GRAPH_EAGER) return 1;
    issue_ctx ic = {e, idx, n};
    e->err[0] = 0;
    int rc = rt_cuda_graph_go(c->cu, c->stream, what, &g->obj, issue_all, &ic, e->err, sizeof e->err);
    if (rc == 0 && what == RT_GRAPH_CAPTURE) rt_graph_captured(g, e);
    if (rc <= 0) return rc ? RT_EXEC_ERR_DEVICE : 0;
    rt_graph_give_up(g);
    if (!c->graph_warned)
        fprintf(stderr, "tgc: warning: --cuda-graphs: a run of %d instructions on device %d runs uncaptured: %s\n", n,
                c->device, e->err);
    c->graph_warned = true;
    e->err[0] = 0;
    return 1;
}

static int cuda_run(rt_exec *e, const int *idx, int n)
{
    cuda_dev *c = DEV(e);
    bool profile = e->instr_ns && c->ev && n <= e->prog->ninstrs;
    /* Rank threads call here: the device is per thread. */
    if (!CU(e, SetDevice, "the step", c->device)) return RT_EXEC_ERR_DEVICE;
    /* The run-time scalars of this run, stream-ordered before its kernels
     * (from pageable memory: e->rt may change once this returns). */
    if (!CU(e, MemcpyAsync, "the run-time scalars", e->rt_dev, &e->rt, sizeof e->rt, cudaMemcpyHostToDevice, c->stream))
        return RT_EXEC_ERR_DEVICE;
    if (e->graphs && !profile && !c->sync_each && !e->check && capturable(e, idx, n)) {
        int rc = graph_run(e, idx, n);
        if (rc <= 0) return rc;
    }
    for (int j = 0; j < n; j++) {
        int i = idx ? idx[j] : j;
        if (profile && !CU(e, EventRecord, "profiling", c->ev[j], c->stream)) return RT_EXEC_ERR_DEVICE;
        int rc = run_instr(e, i);
        if (rc) return rc;
        if (c->sync_each) {
            cudaError_t st = c->cu->StreamSynchronize(c->stream);
            if (st == cudaSuccess) st = c->cu->GetLastError();
            if (st != cudaSuccess) return fail_instr(e, st, "cudaStreamSynchronize", i, ", TGC_CUDA_SYNC=1");
        }
        if (e->check && (rc = rt_exec_check_instr(e, i)) != 0) return rc;
    }
    if (profile) {
        if (!CU(e, EventRecord, "profiling", c->ev[n], c->stream) || !cuda_sync(e)) return RT_EXEC_ERR_DEVICE;
        profile_collect(e, idx, n);
    }
    return 0;
}

static void *cuda_stream(const rt_exec *e) { return DEV(e)->stream; }

static void *cuda_side_stream(rt_exec *e)
{
    cuda_dev *c = DEV(e);
    if (!c->side && (!CU(e, SetDevice, "the communication stream", c->device) ||
                     !CU(e, StreamCreateWithFlags, "the communication stream", &c->side, cudaStreamNonBlocking)))
        return NULL;
    return c->side;
}

static bool cuda_stream_wait(rt_exec *e, void *stream)
{
    cuda_dev *c = DEV(e);
    if (!c->fence && !CU(e, EventCreate, "the streams' ordering event", &c->fence)) return false;
    return CU(e, EventRecord, "the streams' ordering event", c->fence, c->stream) &&
           CU(e, StreamWaitEvent, "the streams' ordering event", (cudaStream_t)stream, c->fence, 0u);
}
static int cuda_device(const rt_exec *e) { return DEV(e)->device; }
static const char *cuda_describe(const rt_exec *e) { return DEV(e)->desc; }

const rt_backend_ops rt_backend_cuda = {
    .name = "cuda", .target = CG_TARGET_CUDA, .host_memory = false, .device_memory = true, .nccl = true,
    .graphs = true, .device_count = rt_cuda_device_count, .open = cuda_open, .close = cuda_close,
    .alloc = cuda_alloc, .release = cuda_release, .upload = cuda_upload, .download = cuda_download,
    .copy = cuda_copy, .zero = cuda_zero, .reduce = cuda_reduce, .scale = cuda_scale, .run = cuda_run,
    .sync = cuda_sync, .profile_begin = cuda_profile_begin, .stream = cuda_stream, .side_stream = cuda_side_stream, .stream_wait = cuda_stream_wait, .device = cuda_device,
    .describe = cuda_describe, .extra_bytes = (int64_t)LT_WORKSPACE, .extra_what = "cuBLASLt's workspace",
};

#endif
