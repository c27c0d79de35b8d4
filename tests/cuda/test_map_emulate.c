/* The CUDA MAP kernels (codegen/render_cuda.c) run, without a GPU, against
 * the C kernels of the same plan, on the inputs of a training step.
 *
 * The CUDA text of every MAP kernel, as NVRTC gets it, is compiled by the
 * host C++ compiler under an emulation of its launch: a MAP kernel has no
 * barrier and no shared memory, so the blocks of the grid and the threads
 * of each block run one after another in one host thread, each with its
 * own blockIdx / threadIdx. The step runs one instruction at a time on the
 * cpu backend; before each MAP kernel its outputs are copied, and the CUDA
 * kernel runs from those copies three times:
 *
 *   aligned     on the step's own buffers (16-byte aligned: the vector
 *               loop takes every whole vector, the scalar loop the tail);
 *   one SM      the same with the grid of a one-SM device (8 blocks: the
 *               grid-stride loops take several turns);
 *   misaligned  every argument copied one element off a 16-byte boundary
 *               (the run-time test sends everything down the scalar loop).
 *
 * The three must give the same bits, and equal the C kernel's result
 * within the math library's rounding (1e-5 of the largest value; 16-bit
 * stores one unit of their rounding). The sizes are odd (hidden 34, 7
 * positions, 3 sequences) so that no length is a multiple of the vector
 * width and every tail runs. Prints per configuration the kernels checked,
 * how many took the vector loop, and the largest difference.
 *
 *   test_map_emulate CXX SAMPLES_DIR (exit 77, skipped, without CXX) */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../unit/check.h"
#include "codegen/codegen.h"
#include "codegen/render_expr.h"
#include "emu.h"
#include "step_case.h"

static const char *cxx = "c++";
static char dir[] = "/tmp/tgc-map-emu-XXXXXX";

static const char shim[] =
    "struct emu_dim { unsigned x, y, z; };\n"
    "static emu_dim threadIdx, blockIdx, gridDim, blockDim;\n"
    "#define __global__\n#define __launch_bounds__(a, b)\n"
    "static inline float tgc_max(float a, float b) { return fmaxf(a, b); }\n"
    "static inline double tgc_max(double a, double b) { return fmax(a, b); }\n"
    "static inline float tgc_clamp_lof(float x, float lo) { return x < lo ? lo : x; }\n"
    "static inline double tgc_clamp_lo(double x, double lo) { return x < lo ? lo : x; }\n";

/* Every MAP kernel of p with a launcher emu_NAME(io, rt, grid, block) that
 * runs the blocks and threads in turn; the loaded library, or NULL. */
static void *build_maps(const cg_program *p, const char *src, const char *tag)
{
    strbuf sb;
    sb_init(&sb);
    sb_puts(&sb, "#include <math.h>\n#include <stdlib.h>\n");
    emu_host_prelude(&sb);
    cg_cuda_vec_prelude(&sb);
    sb_puts(&sb, shim);
    for (int k = 0; k < p->nkernels; k++) {
        const kernel *kn = p->kernels[k];
        if (kn->kind != KK_MAP) continue;
        char *t = emu_kernel_text(src, kn->name);
        CHECK(t != NULL);
        if (!t) continue;
        sb_puts(&sb, t);
        free(t);
        sb_printf(&sb, "extern \"C\" void emu_%s(void *const *io, const struct tgc_rt *rt, unsigned g, unsigned nt)\n{\n"
                       "    gridDim = {g, 1, 1};\n    blockDim = {nt, 1, 1};\n"
                       "    for (unsigned b = 0; b < g; b++)\n        for (unsigned t = 0; t < nt; t++) {\n"
                       "            blockIdx = {b, 0, 0};\n            threadIdx = {t, 0, 0};\n            %s(",
                  kn->name, kn->name);
        for (int a = 0; a < kn->nargs; a++)
            sb_printf(&sb, "(%s%s *)io[%d], ", kn->args[a].output ? "" : "const ", cg_rx_ctype(kn->args[a].dtype), a);
        sb_puts(&sb, "rt);\n        }\n}\n");
    }
    return emu_compile(cxx, dir, tag, sb.s);
}

typedef void (*emu_fn)(void *const *io, const rt_scalars *rt, unsigned grid, unsigned block);

enum { RUN_ALIGNED, RUN_ONE_SM, RUN_MISALIGNED, NRUNS };

/* Runs kernel k (instruction i, not yet run) three ways into out[run][a],
 * from the outputs' state before the kernel. */
static void emulate(rt_exec *e, int k, emu_fn fn, unsigned char *out[NRUNS][KMAX_ARGS], unsigned char **mis)
{
    const kernel *kn = e->prog->kernels[k];
    void **io = e->io + (size_t)k * KMAX_ARGS;
    for (int run = 0; run < NRUNS; run++) {
        void *args[KMAX_ARGS];
        for (int a = 0; a < kn->nargs; a++) {
            size_t sz = (size_t)ir_dtype_size(kn->args[a].dtype), bytes = (size_t)kn->args[a].numel * sz;
            if (run == RUN_MISALIGNED) {
                /* One element past a 16-byte boundary (mis[a] is 64-byte aligned). */
                args[a] = mis[a] + sz;
                memcpy(args[a], io[a], bytes);
            } else {
                args[a] = io[a];
            }
            if (kn->args[a].output) {
                memcpy(out[run][a], io[a], bytes);
                if (run != RUN_MISALIGNED) args[a] = out[run][a];
            }
        }
        unsigned grid[3], block[3], shmem;
        cg_cuda_launch_dims_for(kn, run == RUN_ONE_SM ? 1 : 0, grid, block, &shmem);
        fn(args, &e->rt, grid[0], block[0]);
        if (run == RUN_MISALIGNED)
            for (int a = 0; a < kn->nargs; a++)
                if (kn->args[a].output)
                    memcpy(out[run][a], args[a], (size_t)kn->args[a].numel * (size_t)ir_dtype_size(kn->args[a].dtype));
    }
}

static double worst_seen;

/* The emulated results against the C kernel's (now in io). */
static bool compare(const rt_exec *e, int k, unsigned char *out[NRUNS][KMAX_ARGS])
{
    const kernel *kn = e->prog->kernels[k];
    void *const *io = e->io + (size_t)k * KMAX_ARGS;
    bool ok = true;
    for (int a = 0; a < kn->nargs; a++) {
        const karg *g = &kn->args[a];
        if (!g->output) continue;
        size_t bytes = (size_t)g->numel * (size_t)ir_dtype_size(g->dtype);
        for (int run = 1; run < NRUNS; run++)
            if (memcmp(out[0][a], out[run][a], bytes) != 0) {
                fprintf(stderr, "  %s (%s) a%d: the %s run differs from the aligned one\n", kn->name, kn->comment,
                        a, run == RUN_ONE_SM ? "one-SM" : "misaligned");
                ok = false;
            }
        double big = 0, diff = 0;
        int64_t at = -1;
        for (int64_t j = 0; j < g->numel; j++) {
            double y = step_elem(g->dtype, io[a], j);
            if (isfinite(y)) big = fmax(big, fabs(y));
        }
        const double tol = g->dtype == IR_BF16 ? 8e-3 : g->dtype == IR_F16 ? 1e-3 : g->dtype == IR_F64 ? 1e-12 : 1e-5;
        for (int64_t j = 0; j < g->numel; j++) {
            double x = step_elem(g->dtype, out[0][a], j), y = step_elem(g->dtype, io[a], j);
            if (x == y || (isnan(x) && isnan(y))) continue;
            double d = isfinite(x) && isfinite(y) ? fabs(x - y) : INFINITY;
            if (d > diff) diff = d;
            if (d > tol * (fabs(y) + big) && at < 0) at = j;
        }
        double rel = diff / fmax(big, 1e-30);
        if (rel > worst_seen) worst_seen = rel;
        if (at >= 0) {
            fprintf(stderr, "  %s (%s) a%d[%lld]: C %.9g, CUDA %.9g\n", kn->name, kn->comment, a, (long long)at,
                    step_elem(g->dtype, io[a], at), step_elem(g->dtype, out[0][a], at));
            ok = false;
        }
    }
    return ok;
}

static void run_config(const char *samples, const config *c, int index)
{
    ir_graph *g = build(samples, c);
    CHECK(g != NULL);
    if (!g) return;
    diag d;
    diag_init(&d, stderr);
    rt_cc_options cc = {0};
    rt_exec *e = rt_exec_new(g, &cc, &d);
    CHECK(e != NULL);
    if (!e) { ir_graph_free(g); diag_free(&d); return; }
    rt_exec_init_params(e, 1234);
    fill_inputs(e);
    e->rt.seed = 77;
    step_rt(e, c->precision);
    const cg_program *p = e->prog;
    char *src = cg_render_cuda(p);
    char tag[64];
    snprintf(tag, sizeof tag, "%s.%d", c->sample, index);
    void *h = build_maps(p, src, tag);
    free(src);
    CHECK(h != NULL);
    size_t most = 64;
    for (int k = 0; k < p->nkernels; k++)
        for (int a = 0; a < p->kernels[k]->nargs; a++) {
            size_t b = (size_t)p->kernels[k]->args[a].numel * (size_t)ir_dtype_size(p->kernels[k]->args[a].dtype);
            if (b > most) most = b;
        }
    unsigned char *out[NRUNS][KMAX_ARGS], *mis[KMAX_ARGS];
    for (int a = 0; a < KMAX_ARGS; a++) {
        for (int run = 0; run < NRUNS; run++) out[run][a] = aligned_alloc(64, (most + 64) / 64 * 64);
        mis[a] = aligned_alloc(64, (most + 128) / 64 * 64);
    }
    int checked = 0, vectorised = 0, failed = 0;
    worst_seen = 0;
    for (int i = 0; h && i < p->ninstrs; i++) {
        const cg_instr *in = &p->instrs[i];
        const kernel *kn = in->kind == CG_KERNEL ? p->kernels[in->kernel] : NULL;
        if (!kn || kn->kind != KK_MAP) { CHECK(rt_exec_run(e, &i, 1) == 0); continue; }
        char sym[96];
        snprintf(sym, sizeof sym, "emu_%s", kn->name);
        emu_fn fn = (emu_fn)(uintptr_t)dlsym(h, sym);
        CHECK(fn != NULL);
        if (!fn) break;
        emulate(e, in->kernel, fn, out, mis);
        CHECK(rt_exec_run(e, &i, 1) == 0);
        bool vec[KMAX_ARGS];
        if (cg_cuda_map_vec(kn, vec)) {
            /* The step's buffers are 16-byte aligned (passes/memplan.c):
             * the aligned run took the vector loop unless one argument is
             * a view at an odd offset. */
            bool al = true;
            for (int a = 0; a < kn->nargs; a++)
                if (vec[a] && ((uintptr_t)e->io[(size_t)in->kernel * KMAX_ARGS + a] & 15)) al = false;
            vectorised += al;
        }
        checked++;
        failed += !compare(e, in->kernel, out);
    }
    printf("%s%s: %d map kernels, %d through the vector loop, %d differ; largest difference %.3g of the largest "
           "value\n", c->sample, c->precision == IR_BF16 ? " bf16" : c->precision == IR_F16 ? " fp16" : "", checked,
           vectorised, failed, worst_seen);
    CHECK(failed == 0);
    /* Most elementwise kernels of a step read and write at i. */
    CHECK(vectorised * 2 > checked);
    for (int a = 0; a < KMAX_ARGS; a++) {
        for (int run = 0; run < NRUNS; run++) free(out[run][a]);
        free(mis[a]);
    }
    if (h) dlclose(h);
    rt_exec_free(e);
    ir_graph_free(g);
    diag_free(&d);
}

#define ODD {"layers", "1"}, {"hidden", "34"}, {"heads", "2"}, {"seq", "7"}, {"batch", "3"}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: test_map_emulate CXX SAMPLES_DIR\n");
        return 2;
    }
    cxx = argv[1];
    if (access(cxx, X_OK) != 0) {
        printf("no C++ compiler '%s': skipped\n", cxx);
        return 77;
    }
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    static const config all[] = {
        {"gpt", {ODD}, IR_F32},
        {"gpt", {ODD}, IR_BF16},
        {"gpt", {ODD}, IR_F16},
        {"llama", {{"layers", "1"}, {"hidden", "36"}, {"heads", "2"}, {"seq", "7"}, {"batch", "3"}}, IR_F32},
    };
    for (size_t i = 0; i < ARRAY_LEN(all); i++) run_config(argv[2], &all[i], (int)i);
    CHECK_DONE();
}
