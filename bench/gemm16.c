/* The CPU's 16-bit GEMM rate against fp32 sgemm (docs/performance.md,
 * "16-bit GEMMs on the CPU"): GPT-2 124M's GEMM shapes (s = 1024 tokens,
 * h = 768; forward, and the two backward GEMMs of each) through OpenBLAS
 * cblas_sgemm, the bf16 and f16 conversion paths, and oneDNN's bf16 / f16
 * matmul where the CPU has the instructions (runtime/backend/gemm16.h).
 * Each is timed as the best of repetitions over at least min_seconds.
 *
 * usage: build/bench_gemm16 [MIN_SECONDS] [--quick]
 *   --quick  a smaller s (256) for a fast look
 * Prints a markdown table headed by the machine (CPU model and flags,
 * cores, OpenMP threads, oneDNN's version). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/backend/gemm16.h"
#include "runtime/backend/blas.h"
#include "runtime/backend/half.h"
#include "runtime/backend/onednn.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct shape {
    const char *name;
    bool ta, tb;
    int64_t m, n, k;
} shape;

static uint32_t seed = 1;
static float rnd(void)
{
    seed = seed * 1664525u + 1013904223u;
    return (float)(seed >> 8) / 16777216.0f - 0.5f;
}

typedef void (*gemm_fn)(void *ctx, const cg_gemm *g, void *a, void *b, void *c);

static double best_rate(gemm_fn fn, void *ctx, const cg_gemm *g, void *a, void *b, void *c, double min_s)
{
    fn(ctx, g, a, b, c); /* warm-up: threads, pages, primitives */
    double best = 0.0, start = now_s();
    for (int rep = 0; rep < 2 || now_s() - start < min_s; rep++) {
        double t0 = now_s();
        fn(ctx, g, a, b, c);
        double dt = now_s() - t0;
        if (best == 0.0 || dt < best) best = dt;
    }
    return 2.0 * (double)g->m * (double)g->n * (double)g->k / best;
}

static void run_sgemm(void *ctx, const cg_gemm *g, void *a, void *b, void *c)
{
    (void)ctx;
    rt_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans, (int)g->m,
                (int)g->n, (int)g->k, 1.0f, a, (int)g->lda, b, (int)g->ldb, 0.0f, c, (int)g->ldc);
}

static void run_plan(void *ctx, const cg_gemm *g, void *a, void *b, void *c)
{
    char why[256];
    if (!rt_gemm16_run(ctx, 0, g, a, b, c, why, sizeof why)) {
        fprintf(stderr, "bench_gemm16: %s\n", why);
        exit(1);
    }
}

static void run_onednn(void *ctx, const cg_gemm *g, void *a, void *b, void *c)
{
    char why[256];
    if (!rt_onednn_gemm_run(ctx, g, a, b, c, why, sizeof why)) {
        fprintf(stderr, "bench_gemm16: %s\n", why);
        exit(1);
    }
}

/* oneDNN's f32 matmul of g (OpenBLAS's alternative), or 0 where it makes none. */
static double rate_onednn_f32(const cg_gemm *g, void *a, void *b, void *c, double min_s)
{
    char why[512];
    rt_onednn_gemm *p = rt_onednn_gemm_new(g, why, sizeof why);
    if (!p) return 0.0;
    double r = best_rate(run_onednn, p, g, a, b, c, min_s);
    rt_onednn_gemm_free(p);
    return r;
}

/* The rate of g through the path `path` (a plan of one GEMM), or 0 when
 * that path cannot run here. */
static double rate16(const cg_gemm *g, const char *path, void *a, void *b, void *c, double min_s)
{
    setenv(g->dtype == IR_BF16 ? "TGC_CPU_BF16_GEMM" : "TGC_CPU_F16_GEMM", path, 1);
    rt_gemm16_path p;
    char why[512];
    bool ok = rt_gemm16_choose(g->dtype, &p, why, sizeof why);
    unsetenv(g->dtype == IR_BF16 ? "TGC_CPU_BF16_GEMM" : "TGC_CPU_F16_GEMM");
    if (!ok) return 0.0;
    setenv(g->dtype == IR_BF16 ? "TGC_CPU_BF16_GEMM" : "TGC_CPU_F16_GEMM", path, 1);
    cg_instr in;
    memset(&in, 0, sizeof in);
    in.kind = CG_GEMM;
    in.gemm = *g;
    cg_program prog;
    memset(&prog, 0, sizeof prog);
    prog.instrs = &in;
    prog.ninstrs = 1;
    diag d;
    diag_init(&d, NULL);
    d.max_errors = 0;
    rt_gemm16 *s = NULL;
    ok = rt_gemm16_new(&prog, &s, &d);
    diag_free(&d);
    if (!ok || !s) {
        unsetenv(g->dtype == IR_BF16 ? "TGC_CPU_BF16_GEMM" : "TGC_CPU_F16_GEMM");
        return 0.0;
    }
    double r = best_rate(run_plan, s, g, a, b, c, min_s);
    rt_gemm16_free(s);
    unsetenv(g->dtype == IR_BF16 ? "TGC_CPU_BF16_GEMM" : "TGC_CPU_F16_GEMM");
    return r;
}

static void fmt_rate(char *buf, size_t cap, double r, double ref)
{
    if (r <= 0.0) snprintf(buf, cap, "-");
    else snprintf(buf, cap, "%.1f (%.2fx)", r * 1e-9, r / ref);
}

int main(int argc, char **argv)
{
    double min_s = 0.3;
    int64_t s = 1024, h = 768;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) s = 256;
        else min_s = atof(argv[i]);
    }
    /* GPT-2's layer: QKV, the attention output, the MLP up and down
     * projections, forward (x W), the data gradient (dy W^T) and the weight
     * gradient (x^T dy). */
    const shape shapes[] = {
        {"qkv fwd", false, false, s, 3 * h, h},   {"qkv dgrad", false, true, s, h, 3 * h},
        {"qkv wgrad", true, false, h, 3 * h, s},  {"attn-out fwd", false, false, s, h, h},
        {"mlp-up fwd", false, false, s, 4 * h, h}, {"mlp-up dgrad", false, true, s, h, 4 * h},
        {"mlp-up wgrad", true, false, h, 4 * h, s}, {"mlp-down fwd", false, false, s, h, 4 * h},
    };
    char lib[256];
    bool dnnl = rt_onednn_available(lib, sizeof lib);
    const char *omp = getenv("OMP_NUM_THREADS");
    printf("# 16-bit GEMMs on the CPU: GFLOP/s (speed-up over sgemm); GPT-2 124M shapes, s=%lld h=%lld\n",
           (long long)s, (long long)h);
    printf("# CPU: %s; %ld cores online, OMP_NUM_THREADS=%s\n", rt_cpu_describe(), sysconf(_SC_NPROCESSORS_ONLN),
           omp ? omp : "(unset)");
    double load[3] = {0, 0, 0};
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = load[1] = load[2] = 0;
        fclose(la);
    }
    printf("# load average %.2f %.2f %.2f (other work on the machine skews the rates)\n", load[0], load[1], load[2]);
    printf("# oneDNN: %s\n", dnnl ? rt_onednn_version() : lib);
    printf("# paths: convert = fp32 conversion + OpenBLAS sgemm + RNE back; onednn = oneDNN matmul (only with "
           "AVX512_BF16 / AVX512_FP16)\n\n");
    printf("| GEMM | m x n x k | sgemm | f32 onednn | bf16 convert | bf16 onednn | f16 convert | f16 onednn |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *sh = &shapes[i];
        cg_gemm g = {.dtype = IR_F32, .ta = sh->ta, .tb = sh->tb, .m = sh->m, .n = sh->n, .k = sh->k, .batch = 1,
                     .alpha = 1.0};
        g.lda = sh->ta ? sh->m : sh->k, g.ldb = sh->tb ? sh->k : sh->n, g.ldc = sh->n;
        g.stride_a = sh->m * sh->k, g.stride_b = sh->k * sh->n, g.stride_c = sh->m * sh->n;
        size_t na = (size_t)(sh->m * sh->k), nb = (size_t)(sh->k * sh->n), nc = (size_t)(sh->m * sh->n);
        float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4);
        uint16_t *a16 = malloc(na * 2), *b16 = malloc(nb * 2), *c16 = malloc(nc * 2);
        for (size_t j = 0; j < na; j++) a[j] = rnd();
        for (size_t j = 0; j < nb; j++) b[j] = rnd();
        double sg = best_rate(run_sgemm, NULL, &g, a, b, c, min_s);
        char f32dnnl[48];
        fmt_rate(f32dnnl, sizeof f32dnnl, dnnl ? rate_onednn_f32(&g, a, b, c, min_s) : 0.0, sg);
        double r[4];
        for (int t = 0; t < 2; t++) {
            g.dtype = t ? IR_F16 : IR_BF16;
            if (t) rt_f32_to_f16(a, a16, (int64_t)na), rt_f32_to_f16(b, b16, (int64_t)nb);
            else rt_f32_to_bf16(a, a16, (int64_t)na), rt_f32_to_bf16(b, b16, (int64_t)nb);
            r[2 * t] = rate16(&g, "convert", a16, b16, c16, min_s);
            r[2 * t + 1] = rate16(&g, "onednn", a16, b16, c16, min_s);
        }
        char cells[4][48];
        for (int k = 0; k < 4; k++) fmt_rate(cells[k], sizeof cells[k], r[k], sg);
        printf("| %s | %lldx%lldx%lld | %.1f | %s | %s | %s | %s | %s |\n", sh->name, (long long)sh->m,
               (long long)sh->n, (long long)sh->k, sg * 1e-9, f32dnnl, cells[0], cells[1], cells[2], cells[3]);
        fflush(stdout);
        free(a), free(b), free(c), free(a16), free(b16), free(c16);
    }
    return 0;
}
