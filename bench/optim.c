/* The optimizer update against the memory's bandwidth (docs/performance.md,
 * "The optimizer update"): GPT-2 124M (samples/gpt.tg with 12 layers,
 * hidden 768, vocab 50304, 1024 positions) compiled as `tgc run` compiles
 * it, fp32 or --bf16, and its generated AdamW / Adam / SGD kernel timed
 * alone on the executor's own flat buffers (parameters, gradients, the
 * optimizer state and, under --bf16, the fp32 master weights). In the same
 * run a STREAM-like copy and triad over as many bytes as the update moves,
 * and an empty OpenMP parallel region (the cost of one fork-join).
 *
 * usage: build/bench_optim [--bf16] [--optimizer adamw|adam|sgd] [--reps N] [--model FILE]
 * Run from the source tree (the model defaults to samples/gpt.tg).
 * Prints the machine (CPU model, cores, OpenMP threads, ISA), then per
 * kernel the bytes it moves, its GB/s, and the ratio to the copy's. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/config.h"
#include "api/internal.h"
#include "bench/bench_common.h"
#include "runtime/exec.h"
#include "support/diag.h"

/* In place, as the update writes its parameters and moments: a = a + s b
 * reads two arrays and writes one it has read (no write-allocate). */
static void add_inplace(float *restrict a, const float *restrict b, float s, int64_t n)
{
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) a[i] = a[i] + s * b[i];
}

/* The copy with streaming (non-temporal) stores: no read for ownership of
 * the destination. gcc ignores OpenMP's nontemporal clause, so SSE's
 * _mm_stream_ps (the x86-64 baseline) writes it. */
#if defined(__SSE__)
#include <xmmintrin.h>
static void copy_nt(float *restrict a, const float *restrict b, int64_t n)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n / 4 * 4; i += 4) _mm_stream_ps(a + i, _mm_load_ps(b + i));
    _mm_sfence();
    for (int64_t i = n / 4 * 4; i < n; i++) a[i] = b[i];
}
#endif

int main(int argc, char **argv)
{
    const char *model = "samples/gpt.tg", *optimizer = "adamw";
    bool bf16 = false;
    int reps = 10;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--bf16") == 0) bf16 = true;
        else if (strcmp(argv[i], "--optimizer") == 0 && i + 1 < argc) optimizer = argv[++i];
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) model = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--bf16] [--optimizer adamw|adam|sgd] [--reps N] [--model FILE]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    bench_machine();

    /* GPT-2 124M's parameters; a short sequence keeps the activations small. */
    const fe_override sets[] = {{"layers", "12", false}, {"hidden", "768", false}, {"heads", "12", false},
                                {"vocab", "50304", false}, {"seq", "64", false},   {"batch", "1", false},
                                {"max_pos", "1024", false}};
    diag d;
    diag_init(&d, stderr);
    tgc_config c;
    tgc_config_defaults(&c);
    int io = tgc_config_opt_find("optimizer");
    if (io < 0 || tgc_config_set_to(&c, io, optimizer, stderr) != 0) return 2;
    if (bf16 && tgc_config_set_to(&c, tgc_config_opt_find("bf16"), "true", stderr) != 0) return 2;
    ir_graph *g = api_compile_graph(api_model_load(model, sets, (int)(sizeof sets / sizeof sets[0]), &d), &c, NULL, &d);
    if (!g) {
        diag_finish(&d);
        return 1;
    }
    rt_cc_options cc = {0};
    rt_exec *e = rt_exec_new(g, &cc, &d);
    if (!e || !rt_exec_init_params(e, 1) || (bf16 && !rt_exec_sync_master(e))) {
        diag_finish(&d);
        fprintf(stderr, "bench_optim: %s\n", e ? rt_exec_error(e) : "the executor");
        return 1;
    }
    e->rt.lr_float = 1e-4f, e->rt.lr_double = 1e-4;
    e->rt.wd_float = 0.1f, e->rt.wd_double = 0.1;
    e->rt.loss_scale_float = 1.0f, e->rt.loss_scale_double = 1.0;

    int found = 0;
    for (int i = 0; i < e->prog->ninstrs; i++) {
        const cg_instr *in = &e->prog->instrs[i];
        const ir_node *n = g->nodes[in->node];
        if (in->kind != CG_KERNEL || !ir_node_is_update(n)) continue;
        const kernel *k = e->prog->kernels[in->kernel];
        int64_t bytes = 0, elems = k->n;
        for (int a = 0; a < k->nargs; a++)
            if (k->args[a].numel == elems) bytes += k->args[a].numel * (int64_t)ir_dtype_size(k->args[a].dtype);
        /* Every buffer of the update filled (0x3c3c3c3c: 0.0115 in fp32, 0.0115 in bf16): untouched
         * pages would all read the one zero page, from the cache. */
        for (int a = 0; a < k->nargs; a++)
            if (k->args[a].numel == elems)
                memset(e->io[in->kernel * KMAX_ARGS + a], 0x3c,
                       (size_t)elems * (size_t)ir_dtype_size(k->args[a].dtype));
        /* The copy and triad over the same bytes: copy moves 2 x 4 B per
         * element, triad 3 x 4 B (STREAM's counting: no write-allocate). */
        int64_t nc = bytes / 8, nt = bytes / 12;
        float *a = aligned_alloc(64, (size_t)nc * 4), *b = aligned_alloc(64, (size_t)nc * 4);
        float *x = aligned_alloc(64, (size_t)nt * 4);
        if (!a || !b || !x) {
            fprintf(stderr, "bench_optim: out of memory for the reference loops (%lld bytes)\n",
                    (long long)(8 * nc + 4 * nt));
            return 1;
        }
        memset(a, 0, (size_t)nc * 4), memset(b, 1, (size_t)nc * 4), memset(x, 2, (size_t)nt * 4);
        /* Interleaved, best of each: the three see the same load of the machine. */
        double t = 1e30, tc = 1e30, tt = 1e30, ti = 1e30, tn = 1e30;
        rt_exec_run(e, &i, 1), bench_copy(a, b, nc), bench_triad(x, a, b, 3.0f, nt), add_inplace(x, a, 1e-3f, nt);
        for (int r = 0; r < reps; r++) {
            double t0 = bench_now_s();
            rt_exec_run(e, &i, 1);
            double t1 = bench_now_s();
            bench_copy(a, b, nc);
            double t2 = bench_now_s();
            bench_triad(x, a, b, 3.0f, nt);
            double t3 = bench_now_s();
            add_inplace(x, a, 1e-3f, nt);
            double t4 = bench_now_s();
#if defined(__SSE__)
            copy_nt(a, b, nc);
#endif
            double t5 = bench_now_s();
            t = t1 - t0 < t ? t1 - t0 : t, tc = t2 - t1 < tc ? t2 - t1 : tc, tt = t3 - t2 < tt ? t3 - t2 : tt;
            ti = t4 - t3 < ti ? t4 - t3 : ti, tn = t5 - t4 < tn ? t5 - t4 : tn;
        }
        double gu = (double)bytes / t * 1e-9, gc = (double)(8 * nc) / tc * 1e-9, gt = (double)(12 * nt) / tt * 1e-9;
        double gi = (double)(12 * nt) / ti * 1e-9, gn = (double)(8 * nc) / tn * 1e-9;
        printf("%s%s: %lld elements, %s\n", ir_op_name(n->op), bf16 ? " (bf16, fp32 master)" : " (fp32)",
               (long long)elems, k->comment);
        printf("| kernel | MB moved | ms | GB/s | vs copy | vs in place |\n|---|---:|---:|---:|---:|---:|\n");
        printf("| update (%d args) | %.0f | %.2f | %.1f | %.2f | %.2f |\n", k->nargs, bytes * 1e-6, t * 1e3, gu,
               gu / gc, gu / gi);
        printf("| copy a = b | %.0f | %.2f | %.1f | 1.00 | %.2f |\n", 8.0 * nc * 1e-6, tc * 1e3, gc, gc / gi);
        printf("| triad a = b + s c | %.0f | %.2f | %.1f | %.2f | %.2f |\n", 12.0 * nt * 1e-6, tt * 1e3, gt, gt / gc,
               gt / gi);
        printf("| in place a = a + s b | %.0f | %.2f | %.1f | %.2f | 1.00 |\n", 12.0 * nt * 1e-6, ti * 1e3, gi,
               gi / gc);
#if defined(__SSE__)
        printf("| copy, streaming stores | %.0f | %.2f | %.1f | %.2f | %.2f |\n", 8.0 * nc * 1e-6, tn * 1e3, gn,
               gn / gc, gn / gi);
#endif
        printf("(GB/s count each array read or written once, as STREAM: the update and the in-place loop rewrite\n"
               "what they read, while copy and triad also read their destination for ownership)\n");
        free(a), free(b), free(x);
        found++;
    }
    double tf = BENCH_BEST(3, bench_empty_regions(1000)) / 1000.0;
    printf("empty OpenMP parallel region (fork-join): %.2f us with %d threads\n", tf * 1e6, omp_get_max_threads());
    rt_exec_free(e);
    ir_graph_free(g);
    diag_free(&d);
    if (!found) fprintf(stderr, "bench_optim: the plan has no optimizer kernel\n");
    return found ? 0 : 1;
}
