/* The CUDA attention kernels (codegen/attn_cuda.c) run, without a GPU,
 * against the C kernels (attn_c.c) they mirror.
 *
 * There is no GPU here, so the kernels' text, as NVRTC gets it, is compiled
 * by the host C++ compiler under a small emulation of the CUDA execution
 * model: a block is CG_ATTN_THREADS POSIX threads, __shared__ arrays are
 * shared by them, __syncthreads is a barrier of the block, __shfl_xor_sync
 * an exchange through memory between two barriers of the warp, and the
 * blocks of the grid run one after another. Each attention kernel of a
 * training step then runs on the exact inputs the C kernel had (the step
 * is executed one instruction at a time on the cpu backend), into scratch
 * buffers, and its outputs must equal the C kernel's to 1e-5 of their
 * largest value (the sums run in other orders; expf differs in its last
 * bits): the tiling, the masks, the online softmax, the dropout index, the
 * grouped heads and the edge tiles of the CUDA kernels, checked.
 *
 * Under bf16 / f16 storage the CUDA kernels are the tensor-core ones
 * (mma.sync m16n8k16): the shim's tgc_mma_16816_* then play the warp's
 * tensor-core product from the fragments each lane holds, read where the
 * PTX ISA's layouts put them, so a fragment built wrong in the kernel
 * shows; their results must equal the C kernels' within 1e-2 (bf16) or
 * 2e-3 (f16) of the largest value: the C kernels keep P and dS in fp32,
 * the tensor-core ones round them to 16 bits for the products. Two cases
 * run again with the CUDA prelude's own pre-sm_80 product (warp shuffles).
 *
 * usage: test_attn_emulate CXX (the host C++ compiler; exit 77, skipped,
 * without one). */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../unit/check.h"
#include "attn_case.h"
#include "emu.h"
#include "codegen/attn.h"
#include "codegen/codegen.h"
#include "passes/pass.h"
#include "runtime/exec.h"
#include "support/proc.h"
#include "support/util.h"

extern const char tgc_philox_src[];

static const attn_case cases[] = {
    {"gqa_mask_dropout", "f32", 2, 4, 2, 70, 70, 24, "scale=0.2 causal=true p=0.2 key=5", true, IR_F32, 0, NULL},
    {"plain_nonsquare", "f32", 2, 2, 2, 7, 9, 5, "scale=0.4", false, IR_F32, 0, NULL},
    {"mqa_d64", "f32", 1, 4, 1, 40, 40, 64, "scale=0.125 causal=true p=0.1 key=9", false, IR_F32, 0, NULL},
    {"pos_offset", "f32", 1, 2, 2, 3, 37, 8, "scale=0.4 causal=true pos_offset=true", false, IR_F32, 30, NULL},
    {"f64", "f64", 1, 2, 2, 33, 33, 16, "scale=0.3 causal=true p=0.1 key=3", true, IR_F32, 0, NULL},
    /* 16-bit storage: the tensor-core kernels (mma.sync m16n8k16) */
    {"bf16_gqa_mask_dropout", "f32", 2, 4, 2, 70, 70, 24, "scale=0.2 causal=true p=0.2 key=5", true, IR_BF16, 0, NULL},
    {"f16_gqa_nonsquare", "f32", 1, 2, 1, 9, 20, 16, "scale=0.3 p=0.2 key=4", true, IR_F16, 0, NULL},
    {"bf16_plain_nonsquare", "f32", 2, 2, 2, 7, 9, 5, "scale=0.4", false, IR_BF16, 0, NULL},
    {"f16_mqa_d64", "f32", 1, 4, 1, 40, 40, 64, "scale=0.125 causal=true p=0.1 key=9", false, IR_F16, 0, NULL},
    {"bf16_pos_offset", "f32", 1, 2, 2, 3, 37, 8, "scale=0.4 causal=true pos_offset=true", false, IR_BF16, 30, NULL},
    {"f16_d128_mask", "f32", 1, 2, 1, 20, 33, 128, "scale=0.09", true, IR_F16, 0, NULL},
    /* The attention pass's layouts: q, k, v and the output read and written in place */
    {"sbnd_gqa_mask_dropout", "f32", 2, 4, 2, 70, 70, 24, "scale=0.2 causal=true p=0.2 key=5", true, IR_F32, 0, "sbnd"},
    {"packed_causal_dropout", "f32", 2, 2, 2, 33, 33, 16, "scale=0.3 causal=true p=0.1 key=3", false, IR_F32, 0, "packed"},
    {"bf16_sbnd_gqa_nonsquare", "f32", 1, 2, 1, 9, 20, 16, "scale=0.3 p=0.2 key=4", true, IR_BF16, 0, "sbnd"},
    {"f16_packed_d64", "f32", 1, 4, 4, 40, 40, 64, "scale=0.125 causal=true p=0.1 key=9", false, IR_F16, 0, "packed"},
};

static const char *const shfl_cases[] = {"bf16_plain_nonsquare", "f16_gqa_nonsquare"};

/* The emulation of the CUDA execution model the kernels use. */
static const char shim[] =
    "#include <math.h>\n#include <stdint.h>\n#include <pthread.h>\n"
    "struct emu_dim { unsigned x, y, z; };\n"
    "static thread_local emu_dim threadIdx;\nstatic emu_dim blockIdx, gridDim, blockDim;\n"
    "#define __global__\n#define __launch_bounds__(a, b)\n#define __shared__ static\n"
    "static pthread_barrier_t emu_bar, emu_wbar[32];\nstatic double emu_x[1024];\n"
    "static inline void __syncthreads(void) { pthread_barrier_wait(&emu_bar); }\n"
    "template <typename T> static T __shfl_xor_sync(unsigned, T v, int o)\n{\n"
    "    const int t = (int)threadIdx.x;\n    emu_x[t] = (double)v;\n    pthread_barrier_wait(&emu_wbar[t >> 5]);\n"
    "    const T r = (T)emu_x[t ^ o];\n    pthread_barrier_wait(&emu_wbar[t >> 5]);\n    return r;\n}\n"
    "template <typename T> static T __shfl_sync(unsigned, T v, int src)\n{\n"
    "    const int t = (int)threadIdx.x;\n    emu_x[t] = (double)v;\n    pthread_barrier_wait(&emu_wbar[t >> 5]);\n"
    "    const T r = (T)emu_x[(t & ~31) + src];\n    pthread_barrier_wait(&emu_wbar[t >> 5]);\n    return r;\n}\n"
    "static inline float tgc_max(float a, float b) { return fmaxf(a, b); }\n"
    "static inline double tgc_max(double a, double b) { return fmax(a, b); }\n"
    "static inline float tgc_clamp_lof(float x, float lo) { return x < lo ? lo : x; }\n"
    "static inline double tgc_clamp_lo(double x, double lo) { return x < lo ? lo : x; }\n"
    "struct emu_arg { void *const *io; const struct tgc_rt *rt; unsigned t; };\n"
    "template <void (*F)(void *const *, const struct tgc_rt *)> static void *emu_thread(void *p)\n{\n"
    "    const emu_arg *a = (const emu_arg *)p;\n    threadIdx = {a->t, 0, 0};\n    F(a->io, a->rt);\n"
    "    return nullptr;\n}\n"
    "template <void (*F)(void *const *, const struct tgc_rt *)>\n"
    "static void emu_launch(void *const *io, const struct tgc_rt *rt, const unsigned *g, unsigned nt)\n{\n"
    "    pthread_barrier_init(&emu_bar, nullptr, nt);\n"
    "    for (unsigned w = 0; w < nt / 32; w++) pthread_barrier_init(&emu_wbar[w], nullptr, 32);\n"
    "    gridDim = {g[0], g[1], g[2]};\n    blockDim = {nt, 1, 1};\n"
    "    for (unsigned z = 0; z < g[2]; z++)\n        for (unsigned y = 0; y < g[1]; y++)\n"
    "            for (unsigned x = 0; x < g[0]; x++) {\n                blockIdx = {x, y, z};\n"
    "                pthread_t th[1024];\n                emu_arg a[1024];\n"
    "                for (unsigned t = 0; t < nt; t++) {\n                    a[t] = {io, rt, t};\n"
    "                    pthread_create(&th[t], nullptr, emu_thread<F>, &a[t]);\n                }\n"
    "                for (unsigned t = 0; t < nt; t++) pthread_join(th[t], nullptr);\n            }\n"
    "    pthread_barrier_destroy(&emu_bar);\n"
    "    for (unsigned w = 0; w < nt / 32; w++) pthread_barrier_destroy(&emu_wbar[w]);\n}\n";

static const char shim_mma[] =
    /* mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.f32 of a warp: each
     * lane leaves its fragments in the warp's scratch; then each computes
     * its four results reading A and B where the PTX ISA's fragment layouts
     * put them (gr = lane / 4, tq = lane % 4; A[r][k] in lane 4 (r % 8) +
     * (k % 8) / 2, register r / 8 + 2 (k / 8), half k % 2; B[k][n] in lane
     * 4 n + (k % 8) / 2, register k / 8, half k % 2; result u is row
     * gr + 8 (u / 2), column 2 tq + u % 2), products summed in fp32. */
    "static uint32_t emu_fa[1024][4], emu_fb[1024][2];\n"
    "static float emu_half(bool f16, uint32_t r, int k)\n{\n"
    "    const uint16_t h = (uint16_t)(r >> (16 * (k & 1)));\n"
    "    return f16 ? tgc_ld_f16(h) : tgc_ld_bf16(h);\n}\n"
    "static void emu_mma(bool f16, float *c, const uint32_t *a, const uint32_t *b)\n{\n"
    "    const int t = (int)threadIdx.x, lane = t & 31, base = t - lane, gr = lane >> 2, tq = lane & 3;\n"
    "    for (int r = 0; r < 4; r++) emu_fa[t][r] = a[r];\n"
    "    emu_fb[t][0] = b[0];\n    emu_fb[t][1] = b[1];\n"
    "    pthread_barrier_wait(&emu_wbar[t >> 5]);\n"
    "    float d[4];\n"
    "    for (int u = 0; u < 4; u++) {\n"
    "        const int row = gr + 8 * (u >> 1), col = 2 * tq + (u & 1);\n"
    "        float acc = 0;\n"
    "        for (int k = 0; k < 16; k++) {\n"
    "            const float x = emu_half(f16, emu_fa[base + 4 * (row % 8) + (k % 8) / 2][row / 8 + 2 * (k / 8)], k);\n"
    "            const float y = emu_half(f16, emu_fb[base + 4 * col + (k % 8) / 2][k / 8], k);\n"
    "            acc = fmaf(x, y, acc);\n"
    "        }\n"
    "        d[u] = c[u] + acc;\n"
    "    }\n"
    "    pthread_barrier_wait(&emu_wbar[t >> 5]);\n"
    "    for (int u = 0; u < 4; u++) c[u] = d[u];\n}\n"
    "static inline void tgc_mma_16816_bf16(float *c, const uint32_t *a, const uint32_t *b) { emu_mma(false, c, a, b); }\n"
    "static inline void tgc_mma_16816_f16(float *c, const uint32_t *a, const uint32_t *b) { emu_mma(true, c, a, b); }\n";

typedef void (*emu_fn)(void *const *io, const rt_scalars *rt, const unsigned *grid, unsigned nt);

static const char *cxx = "c++";
static char dir[] = "/tmp/tgc-attn-emu-XXXXXX";

/* Compiles the attention kernels of CUDA program p (source src) with the
 * shim; returns the loaded library, or NULL. With shfl the warp-level
 * product is the prelude's own pre-sm_80 one (attn_cuda.c: the same
 * fragments gathered by __shfl_sync), else the shim's. */
static void *build(const cg_program *p, const char *src, const char *tag, bool shfl)
{
    strbuf sb;
    sb_init(&sb);
    emu_host_prelude(&sb);
    sb_puts(&sb, shim);
    if (shfl) {
        sb_puts(&sb, "#define TGC_FN static inline\n");
        cg_attn_cuda_prelude(&sb);
    } else {
        sb_puts(&sb, shim_mma);
    }
    for (int k = 0; k < p->nkernels; k++) {
        const kernel *kn = p->kernels[k];
        if (kn->kind != KK_ATTN) continue;
        char *t = emu_kernel_text(src, kn->name);
        CHECK(t != NULL);
        if (!t) continue;
        sb_puts(&sb, t);
        free(t);
        /* A wrapper with one signature: the pointers from io, typed. */
        sb_printf(&sb, "static void w_%s(void *const *io, const struct tgc_rt *rt)\n{\n    %s(", kn->name, kn->name);
        for (int a = 0; a < kn->nargs; a++)
            sb_printf(&sb, "(%s%s *)io[%d], ", kn->args[a].output ? "" : "const ", cg_rx_ctype(kn->args[a].dtype), a);
        sb_puts(&sb, "rt);\n}\n");
        sb_printf(&sb, "extern \"C\" void emu_%s(void *const *io, const struct tgc_rt *rt, const unsigned *g, "
                       "unsigned nt) { emu_launch<w_%s>(io, rt, g, nt); }\n", kn->name, kn->name);
    }
    return emu_compile(cxx, dir, tag, sb.s);
}

/* Element j of an output of dtype t, widened. */
static double elem(const void *p, ir_dtype t, int64_t j)
{
    if (t == IR_F64) return ((const double *)p)[j];
    if (t == IR_F32) return ((const float *)p)[j];
    float f;
    rt_widen16(t, (const uint16_t *)p + j, &f, 1);
    return f;
}

static void run_case(const attn_case *c, bool shfl)
{
    diag d;
    diag_init(&d, stderr);
    char *text = attn_case_ir(c);
    ir_graph *g = ir_graph_read(text, strlen(text), c->name, &d);
    free(text);
    const pass_info *list[] = {pass_lookup("autodiff"), pass_lookup("memplan")};
    pass_ctx ctx = {.d = &d, .verify_each = true};
    bool ok = g && pass_run_list(g, list, 2, &ctx, NULL, NULL);
    CHECK(ok);
    rt_cc_options cc = {0};
    rt_exec *e = ok ? rt_exec_new(g, &cc, &d) : NULL;
    cg_program *cp = e ? cg_build_target(g, CG_TARGET_CUDA, &d) : NULL;
    char *src = cp ? cg_render_cuda(cp) : NULL;
    char tag[96];
    snprintf(tag, sizeof tag, "%s%s", c->name, shfl ? "_shfl" : "");
    void *h = src ? build(cp, src, tag, shfl) : NULL;
    CHECK(h != NULL);
    if (h && rt_exec_init_params(e, 11)) {
        /* 16-bit storage: the tensor-core kernels round P and dS to 16 bits
         * for their products (the C kernels keep them in fp32), and both
         * round their results to 16 bits. */
        const double tol = c->precision == IR_BF16 ? 1e-2 : c->precision == IR_F16 ? 2e-3 : 1e-5;
        if (c->mask) {
            uint8_t *m = rt_exec_ptr(e, ir_graph_find(g, "m"));
            for (int j = 0; j < c->b * c->s_k; j++) m[j] = !(j % c->s_k == c->s_k - 1 || (j / c->s_k == 1 && j % 3 == 0));
        }
        e->rt.seed = 77;
        e->rt.step = 3;
        e->rt.pos = c->pos;
        int checked = 0;
        for (int i = 0; i < e->prog->ninstrs; i++) {
            CHECK(rt_exec_run(e, &i, 1) == 0);
            const cg_instr *in = &e->prog->instrs[i];
            if (in->kind != CG_KERNEL) continue;
            const kernel *kn = e->prog->kernels[in->kernel];
            if (kn->kind != KK_ATTN) continue;
            /* The same inputs, the outputs into scratch buffers. */
            void *io[KMAX_ARGS], *scratch[KMAX_ARGS] = {0};
            for (int a = 0; a < kn->nargs; a++) {
                io[a] = e->io[in->kernel * KMAX_ARGS + a];
                if (kn->args[a].output) {
                    size_t bytes = (size_t)kn->args[a].numel * (size_t)ir_dtype_size(kn->args[a].dtype);
                    scratch[a] = calloc(1, bytes);
                    memset(scratch[a], 0xff, bytes); /* NaN: an element the kernel misses shows */
                    io[a] = scratch[a];
                }
            }
            char sym[96];
            snprintf(sym, sizeof sym, "emu_%s", kn->name);
            emu_fn fn = (emu_fn)(uintptr_t)dlsym(h, sym);
            CHECK(fn != NULL);
            if (!fn) continue;
            unsigned grid[3], block[3], shmem;
            cg_cuda_launch_dims(kn, grid, block, &shmem);
            fn(io, &e->rt, grid, block[0]);
            for (int a = 0; a < kn->nargs; a++) {
                if (!kn->args[a].output) continue;
                const void *want = e->io[in->kernel * KMAX_ARGS + a];
                double big = 0, diff = 0;
                ir_dtype t = kn->args[a].dtype;
                /* layout=packed: d[q | k | v] is one argument, its q part written by
                 * the dQ kernel, its k and v parts by the dK/dV kernel; the other
                 * part must stay untouched (NaN). */
                const kattn *A = &kn->attn;
                bool packed = A->layout == IR_ATTN_PACKED && (a == A->dq || a == A->dk);
                for (int64_t j = 0; j < kn->args[a].numel; j++) {
                    double x = elem(scratch[a], t, j), y = elem(want, t, j);
                    if (packed && ((j % (3 * A->d)) / A->d == 0) != (A->pass == KATT_DQ)) {
                        if (!isnan(x)) diff = INFINITY;
                        continue;
                    }
                    if (isinf(y) && x == y) continue; /* lse of a row that sees no key */
                    big = fmax(big, fabs(y));
                    diff = isnan(x) ? INFINITY : fmax(diff, fabs(x - y));
                }
                double rel = diff / fmax(big, 1e-30);
                /* kernel_check's measure (tests/cuda/kernel_check.c): the largest
                 * |cuda - c| / (|c| + 0.05 max |c|) */
                double kc = 0;
                for (int64_t j = 0; j < kn->args[a].numel; j++) {
                    double x = elem(scratch[a], t, j), y = elem(want, t, j);
                    if (isinf(y) && x == y) continue;
                    kc = fmax(kc, fabs(x - y) / (fabs(y) + 0.05 * big + 1e-30));
                }
                printf("%-27s %-6s %s arg %d: max |cuda - c| %.2e of %.2e (elementwise %.1e)\n", tag, kn->name,
                       kn->attn.pass == KATT_FWD ? "forward" : kn->attn.pass == KATT_DKV ? "dK, dV " : "dQ     ", a,
                       diff, big, kc);
                if (!(rel < tol)) {
                    fprintf(stderr, "%s: kernel %s argument %d: the CUDA kernel differs by %.3e\n", tag,
                            kn->name, a, rel);
                    check_failures++;
                }
                check_count++;
                free(scratch[a]);
            }
            checked++;
        }
        CHECK(checked == 3); /* forward, dK/dV, dQ */
    }
    if (h) dlclose(h);
    free(src);
    cg_program_free(cp);
    rt_exec_free(e);
    ir_graph_free(g);
    diag_free(&d);
}

int main(int argc, char **argv)
{
    if (argc > 1) cxx = argv[1];
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    for (size_t i = 0; i < ARRAY_LEN(cases); i++)
        if (argc < 3 || strcmp(argv[2], cases[i].name) == 0) run_case(&cases[i], false);
    /* The prelude's pre-sm_80 product (warp shuffles) on two of the cases. */
    for (size_t i = 0; i < ARRAY_LEN(shfl_cases); i++)
        for (size_t j = 0; j < ARRAY_LEN(cases); j++)
            if (strcmp(cases[j].name, shfl_cases[i]) == 0 && (argc < 3 || strcmp(argv[2], cases[j].name) == 0))
                run_case(&cases[j], true);
    CHECK_DONE();
}
