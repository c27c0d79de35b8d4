/* Every generated CUDA kernel against its C twin, one kernel at a time, on
 * a machine with a GPU (exit 77, skipped, without one).
 *
 * The CPU executor's program runs one training step instruction by
 * instruction (C kernels and CBLAS GEMMs), so every kernel sees the inputs
 * of a real step. Before each kernel its argument ranges are copied to the
 * device and its CUDA twin (codegen/render_cuda.c, compiled by NVRTC,
 * loaded with the driver API through dlopen) runs twice from the same
 * inputs: the two results must be bit-identical (fixed-order reductions,
 * the last-block tickets reset), and equal the C kernel's within the
 * rounding of the math library and of summation order (16-bit stores:
 * within one unit of bf16 / f16 rounding). The CPU's result goes on as
 * the step's state, so a difference is charged to the one kernel that
 * made it.
 *
 *   kernel_check SAMPLES_DIR [SAMPLE [--set NAME=VALUE ...] [--bf16|--fp16]]
 *
 * Without a sample it runs a fixed list (every sample small, GPT with
 * bf16, fp16, and with 65,536 softmax rows, beyond one grid row per
 * block). Prints per configuration the kernels checked by loop shape and
 * the largest differences; every failing kernel by name. */
#include <cuda.h>
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/attn.h"
#include "step_case.h"
#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "passes/pass.h"
#include "runtime/exec.h"
#include "runtime/backend/nvrtc.h"
#include "support/file.h"
#include "support/util.h"

/* ---- the driver API, opened with dlopen ---------------------------------------- */

static struct {
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
    CUresult (*CtxSynchronize)(void);
    CUresult (*GetErrorName)(CUresult, const char **);
} cu;

static char arch[16];

static bool cu_check(CUresult r, const char *what, const char *ctx)
{
    if (r == CUDA_SUCCESS) return true;
    const char *name = "?";
    if (cu.GetErrorName) cu.GetErrorName(r, &name);
    fprintf(stderr, "%s (%s): %s\n", what, ctx, name);
    return false;
}
#define CU(call, ctx) cu_check(cu.call, #call, ctx)

/* false when there is no driver or no device (the test is skipped). */
static bool cu_open(void)
{
    /* $TGC_LIBCUDA: another driver library (a stub that runs no kernel
     * exercises this harness on a machine without a GPU). */
    const char *lib = getenv("TGC_LIBCUDA");
    void *h = dlopen(lib && *lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return false;
#define SYM(f, name) (*(void **)&cu.f = dlsym(h, name)) != NULL
    bool ok = SYM(Init, "cuInit") && SYM(DeviceGetCount, "cuDeviceGetCount") && SYM(DeviceGet, "cuDeviceGet") &&
              SYM(DeviceGetAttribute, "cuDeviceGetAttribute") &&
              SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") && SYM(CtxSetCurrent, "cuCtxSetCurrent") &&
              SYM(ModuleLoadData, "cuModuleLoadData") && SYM(ModuleUnload, "cuModuleUnload") &&
              SYM(ModuleGetFunction, "cuModuleGetFunction") && SYM(MemAlloc, "cuMemAlloc_v2") &&
              SYM(MemFree, "cuMemFree_v2") && SYM(MemcpyHtoD, "cuMemcpyHtoD_v2") &&
              SYM(MemcpyDtoH, "cuMemcpyDtoH_v2") && SYM(LaunchKernel, "cuLaunchKernel") &&
              SYM(CtxSynchronize, "cuCtxSynchronize") && SYM(GetErrorName, "cuGetErrorName");
#undef SYM
    int n = 0, major = 0, minor = 0;
    CUdevice dev;
    CUcontext ctx;
    if (!ok || cu.Init(0) != CUDA_SUCCESS || cu.DeviceGetCount(&n) != CUDA_SUCCESS || n < 1) return false;
    ok = CU(DeviceGet(&dev, 0), "device 0") &&
         CU(DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "device 0") &&
         CU(DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "device 0") &&
         CU(DevicePrimaryCtxRetain(&ctx, dev), "device 0") && CU(CtxSetCurrent(ctx), "device 0");
    snprintf(arch, sizeof arch, "sm_%d%d", major, minor);
    return ok;
}

/* ---- one configuration ----------------------------------------------------------- */

/* Host regions (buffers, workspace, state) and their device mirrors. */
typedef struct region {
    unsigned char *host;
    size_t bytes;
    CUdeviceptr dev;
} region;

static CUdeviceptr dev_of(const region *r, int nr, const void *p)
{
    const unsigned char *q = p;
    for (int i = 0; i < nr; i++)
        if (q >= r[i].host && q < r[i].host + r[i].bytes) return r[i].dev + (CUdeviceptr)(q - r[i].host);
    TGC_ASSERT(!"a kernel argument outside every buffer");
    return 0;
}

typedef struct tally {
    int checked[KK_ATTN + 1], failed, nondet;
    double worst_rel;
    const char *worst;
} tally;

/* Tolerances: fp32 results differ by math-library ulps and summation
 * order; a 16-bit store by one unit of its rounding. */
static bool close_enough(const karg *a, double h, double dv, double scale, double widen, double *rel)
{
    if (isnan(h) || isnan(dv)) { *rel = isnan(h) && isnan(dv) ? 0 : INFINITY; return *rel == 0; }
    if (isinf(h) || isinf(dv)) { *rel = h == dv ? 0 : INFINITY; return h == dv; }
    double rtol = a->dtype == IR_BF16 ? 8e-3 : a->dtype == IR_F16 ? 1e-3 : a->dtype == IR_F64 ? 1e-10 : 1e-4;
    rtol *= widen;
    double err = fabs(h - dv), tol = rtol * fabs(h) + rtol * 0.05 * scale + 1e-30;
    *rel = err / (fabs(h) + 0.05 * scale + 1e-30);
    return err <= tol;
}

static double elem(const karg *a, const unsigned char *p, int64_t i) { return step_elem(a->dtype, p, i); }

/* Runs kernel k on the device twice from the host's pre-kernel state and
 * compares with the C kernel (run by the caller afterwards). */
static bool check_kernel(rt_exec *e, int k, CUfunction f, const region *r, int nr, unsigned char **before,
                         unsigned char **got, tally *t)
{
    const kernel *kn = e->prog->kernels[k];
    void **io = e->io + (size_t)k * KMAX_ARGS;
    CUdeviceptr ptr[KMAX_ARGS];
    void *params[KMAX_ARGS + 1];
    size_t bytes[KMAX_ARGS];
    for (int a = 0; a < kn->nargs; a++) {
        ptr[a] = dev_of(r, nr, io[a]);
        params[a] = &ptr[a];
        bytes[a] = (size_t)kn->args[a].numel * (size_t)ir_dtype_size(kn->args[a].dtype);
        memcpy(before[a], io[a], bytes[a]);
    }
    /* The kernels read the run-time scalars from a device copy (render_cuda.c). */
    static CUdeviceptr rt_dev;
    if (!rt_dev && !CU(MemAlloc(&rt_dev, sizeof e->rt), "the run-time scalars")) return false;
    if (!CU(MemcpyHtoD(rt_dev, &e->rt, sizeof e->rt), "the run-time scalars")) return false;
    params[kn->nargs] = &rt_dev;
    unsigned grid[3], block[3], shmem;
    cg_cuda_launch_dims(kn, grid, block, &shmem);
    bool ok = true;
    for (int run = 0; run < 2 && ok; run++) {
        for (int a = 0; a < kn->nargs && ok; a++) ok = CU(MemcpyHtoD(ptr[a], before[a], bytes[a]), kn->name);
        ok = ok &&
             CU(LaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], shmem, NULL, params, NULL),
                kn->name) &&
             CU(CtxSynchronize(), kn->name);
        for (int a = 0; a < kn->nargs && ok; a++) {
            if (!kn->args[a].output) continue;
            unsigned char *dst = got[a] + (run ? bytes[a] : 0);
            ok = CU(MemcpyDtoH(dst, ptr[a], bytes[a]), kn->name);
            if (run && memcmp(got[a], dst, bytes[a]) != 0) {
                fprintf(stderr, "  %s (%s): two runs differ in output a%d\n", kn->name, kn->comment, a);
                t->nondet++;
                ok = false;
            }
        }
    }
    return ok;
}

static bool compare_kernel(rt_exec *e, int k, unsigned char **got, tally *t)
{
    const kernel *kn = e->prog->kernels[k];
    void **io = e->io + (size_t)k * KMAX_ARGS;
    bool ok = true;
    /* The tensor-core attention kernels round P and dS to 16 bits before
     * their products (the C kernels keep them in fp32): under the emulation
     * (test_attn_emulate.c) that is up to 2.2e-2 (bf16) and 2.9e-3 (f16)
     * by this measure, so 5 units of the 16-bit tolerance. */
    const double widen = kn->kind == KK_ATTN && cg_attn_tensor_cores(kn) ? 5 : 1;
    for (int a = 0; a < kn->nargs; a++) {
        const karg *g = &kn->args[a];
        if (!g->output) continue;
        double scale = 0, worst = 0;
        int64_t at = -1;
        for (int64_t i = 0; i < g->numel; i++) {
            double v = fabs(elem(g, io[a], i));
            if (isfinite(v) && v > scale) scale = v;
        }
        for (int64_t i = 0; i < g->numel; i++) {
            double h = elem(g, io[a], i), dv = elem(g, got[a], i), rel;
            bool good = close_enough(g, h, dv, scale, widen, &rel);
            if (rel > worst) worst = rel;
            if (!good && at < 0) at = i;
        }
        if (worst > t->worst_rel) { t->worst_rel = worst; t->worst = kn->comment; }
        if (at >= 0) {
            fprintf(stderr, "  %s (%s) a%d[%lld]: CPU %.9g, GPU %.9g (largest relative difference %.3g)\n",
                    kn->name, kn->comment, a, (long long)at, elem(g, io[a], at), elem(g, got[a], at), worst);
            ok = false;
        }
    }
    return ok;
}

/* $TGC_KERNEL_CHECK_CUBINS=DIR keeps each configuration's cubin as
 * DIR/NAME.cubin, and runs from it where NVRTC is missing (a GPU machine
 * without the toolkit, given cubins compiled elsewhere for its arch). */
static rt_cubin *cubin_for(const char *src, const char *name, diag *d, const void **data, size_t *size)
{
    const char *dir = getenv("TGC_KERNEL_CHECK_CUBINS");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.%s.cubin", dir ? dir : ".", name, arch);
    if (!rt_nvrtc_available(NULL)) {
        size_t n = 0;
        char why[256];
        char *bin = dir ? file_read(path, FILE_CACHE, &n, why, sizeof why) : NULL;
        if (!bin) diag_error_plain(d, "no NVRTC, and no cubin '%s'", path);
        *data = bin;
        *size = n;
        return NULL;
    }
    rt_nvrtc_options no = {.arch = arch};
    rt_cubin *bin = rt_nvrtc_compile(src, &no, d);
    *data = bin ? rt_cubin_data(bin) : NULL;
    *size = bin ? rt_cubin_size(bin) : 0;
    FILE *f = bin && dir ? fopen(path, "wb") : NULL;
    if (f) {
        fwrite(*data, 1, *size, f);
        fclose(f);
    }
    return bin;
}

static int run_config(const char *dir, const config *c, int index)
{
    ir_graph *g = build(dir, c);
    if (!g) return 1;
    diag d;
    diag_init(&d, stderr);
    rt_cc_options cc = {0};
    rt_exec *e = rt_exec_new(g, &cc, &d);
    if (!e) { ir_graph_free(g); diag_free(&d); return 1; }
    rt_exec_init_params(e, 1234);
    fill_inputs(e);
    step_rt(e, c->precision);
    const cg_program *p = e->prog;
    char *src = cg_render_cuda(p);
    char name[64];
    snprintf(name, sizeof name, "%s.%d", c->sample, index);
    const void *image = NULL;
    size_t image_size = 0;
    rt_cubin *bin = cubin_for(src, name, &d, &image, &image_size);
    free(src);
    CUmodule mod = NULL;
    int fails = 0;
    if (!image || !CU(ModuleLoadData(&mod, image), c->sample)) fails++;
    if (bin) rt_cubin_free(bin);
    else free((void *)image);
    /* Device mirrors of every host region. */
    region r[IR_MEM_COUNT + 2];
    int nr = 0;
    for (int m = 0; m < IR_MEM_COUNT; m++)
        if (e->buf[m]) r[nr++] = (region){e->buf[m], (size_t)g->mem_size[m] + 1, 0};
    r[nr++] = (region){e->ws, (size_t)p->workspace_bytes + 1, 0};
    r[nr++] = (region){e->state, (size_t)e->state_bytes + 1, 0};
    for (int i = 0; i < nr && !fails; i++) fails += !CU(MemAlloc(&r[i].dev, r[i].bytes), "a buffer");
    size_t most = 1;
    for (int k = 0; k < p->nkernels; k++)
        for (int a = 0; a < p->kernels[k]->nargs; a++) {
            size_t b = (size_t)p->kernels[k]->args[a].numel * (size_t)ir_dtype_size(p->kernels[k]->args[a].dtype);
            if (b > most) most = b;
        }
    unsigned char *before[KMAX_ARGS], *got[KMAX_ARGS];
    for (int a = 0; a < KMAX_ARGS; a++) { before[a] = xmalloc(most); got[a] = xmalloc(2 * most); }
    tally t = {{0}, 0, 0, 0, ""};
    for (int i = 0; i < p->ninstrs && !fails; i++) {
        const cg_instr *in = &p->instrs[i];
        if (in->kind == CG_GEMM) {
            rt_cpu_gemm(&in->gemm, e->gemm_ptr[3 * i], e->gemm_ptr[3 * i + 1], e->gemm_ptr[3 * i + 2]);
            continue;
        }
        if (in->kind != CG_KERNEL) { fprintf(stderr, "a collective in a serial plan\n"); fails++; break; }
        int k = in->kernel;
        CUfunction f;
        bool ok = CU(ModuleGetFunction(&f, mod, p->kernels[k]->name), p->kernels[k]->name) &&
                  check_kernel(e, k, f, r, nr, before, got, &t);
        e->fn[k](e->io + (size_t)k * KMAX_ARGS, &e->rt);
        ok = ok && compare_kernel(e, k, got, &t);
        t.checked[p->kernels[k]->kind]++;
        t.failed += !ok;
    }
    printf("%s%s: %d map, %d row, %d col, %d scatter kernels on %s: %d differ (%d not deterministic); largest "
           "relative difference %.3g (%s)\n", c->sample, c->precision == IR_BF16 ? " bf16" : c->precision == IR_F16 ?
           " fp16" : "", t.checked[KK_MAP], t.checked[KK_ROW], t.checked[KK_COL], t.checked[KK_SCATTER_ADD], arch,
           t.failed, t.nondet, t.worst_rel, t.worst);
    for (int a = 0; a < KMAX_ARGS; a++) { free(before[a]); free(got[a]); }
    for (int i = 0; i < nr; i++)
        if (r[i].dev) cu.MemFree(r[i].dev);
    if (mod) cu.ModuleUnload(mod);
    rt_exec_free(e);
    ir_graph_free(g);
    diag_free(&d);
    return fails + t.failed;
}

#define SMALL {"layers", "2"}, {"hidden", "64"}, {"heads", "2"}, {"seq", "32"}, {"batch", "4"}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "samples";
    if (!cu_open()) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    if (!rt_nvrtc_available(NULL) && !getenv("TGC_KERNEL_CHECK_CUBINS")) {
        printf("NVRTC cannot be loaded: skipped\n");
        return 77;
    }
    static const config all[] = {
        {"gpt", {SMALL}, IR_F32},
        {"gpt", {{NULL, NULL}}, IR_F32},
        {"gpt", {SMALL}, IR_BF16},
        {"gpt", {SMALL}, IR_F16},
        {"bert", {SMALL}, IR_F32},
        {"llama", {SMALL}, IR_F32},
        {"custom_op", {SMALL}, IR_F32},
        /* 64 x 4 heads x 256 positions = 65,536 softmax rows: more rows
         * than one grid holds, so blocks take several rows. */
        {"gpt", {{"layers", "1"}, {"batch", "64"}}, IR_F32},
    };
    int fails = 0;
    if (argc > 2) {
        config c = {argv[2], {{NULL, NULL}}, IR_F32};
        int n = 0;
        for (int i = 3; i < argc; i++) {
            if (strcmp(argv[i], "--bf16") == 0) c.precision = IR_BF16;
            else if (strcmp(argv[i], "--fp16") == 0) c.precision = IR_F16;
            else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc && n < 7) {
                char *kv = argv[++i], *eq = strchr(kv, '=');
                if (!eq) { fprintf(stderr, "--set %s: expected NAME=VALUE\n", kv); return 2; }
                *eq = 0;
                c.sets[n][0] = kv;
                c.sets[n++][1] = eq + 1;
            }
        }
        fails = run_config(dir, &c, 0);
    } else {
        for (size_t i = 0; i < ARRAY_LEN(all); i++) fails += run_config(dir, &all[i], (int)i);
    }
    return fails ? 1 : 0;
}
