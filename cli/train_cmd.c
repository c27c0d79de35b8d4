/* `tgc compile` and `tgc run`: their command lines, reports and figures;
 * the pipelines are the library's (api/run.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "cli/config.h"
#include "cli/fusion_report.h"
#include "cli/gemm_report.h"
#include "cli/kernel_report.h"
#include "cli/load.h"
#include "cli/train_cmd.h"
#include "runtime/plan.h"
#include "support/util.h"

#define MAX_SETS 64

static int parse(tgc_config *c, int argc, char **argv, const char **model, fe_override *sets, int *nsets,
                 bool *help)
{
    const char *pos[2];
    int npos = 0;
    tgc_config_defaults(c);
    int rc = tgc_config_parse(c, argc, argv, pos, &npos, 1, sets, nsets, MAX_SETS, help);
    if (rc || *help) return rc;
    if (npos != 1) {
        fprintf(stderr, "tgc %s: error: expected one %s\nTry 'tgc %s --help'.\n", argv[0],
                strcmp(argv[0], "run") == 0 ? "PLAN or MODEL" : "MODEL", argv[0]);
        return 2;
    }
    *model = pos[0];
    return 0; /* the cross-option checks: tgc_config_check, over a plan's options where there is one */
}

/* --micro-batch-size sets a model's `batch` hyperparameter (a plan has its own). */
static int add_micro_batch(const char *cmd, const tgc_config *c, fe_override *sets, int *nsets)
{
    return c->micro_batch_size ? cli_override_batch(cmd, sets, nsets, MAX_SETS, c->micro_batch_size) : 0;
}

static void free_sets(fe_override *sets, int n)
{
    for (int i = 0; i < n; i++) free((char *)sets[i].name);
}

int cli_compile(int argc, char **argv, void (*help_fn)(FILE *))
{
    tgc_config c;
    fe_override sets[MAX_SETS];
    int nsets = 0;
    bool help = false;
    const char *model = NULL;
    int rc = parse(&c, argc, argv, &model, sets, &nsets, &help);
    if (help) { help_fn(stdout); free_sets(sets, nsets); return 0; }
    if (rc == 0) rc = tgc_config_check(&c);
    if (rc == 0 && c.kernel_report && strcmp(c.backend, "cuda") != 0) {
        fprintf(stderr, "tgc compile: error: --kernel-report reports the CUDA kernels; add --backend cuda\n"
                        "Try 'tgc compile --help'.\n");
        rc = 2;
    }
    if (rc == 0 && c.gemm_report && strcmp(c.backend, "cuda") != 0) {
        fprintf(stderr, "tgc compile: error: --gemm-report reports the cuBLASLt GEMMs; add --backend cuda\n"
                        "Try 'tgc compile --help'.\n");
        rc = 2;
    }
    if (rc == 0 && !c.output && !c.kernel_report && !c.fusion_report && !c.gemm_report) {
        fprintf(stderr, "tgc compile: error: missing -o PLAN\nTry 'tgc compile --help'.\n");
        rc = 2;
    }
    if (rc == 0) rc = add_micro_batch("compile", &c, sets, &nsets);
    if (rc) { free_sets(sets, nsets); return rc; }
    diag d;
    diag_init(&d, stderr);
    ir_graph *g = NULL;
    api_plan_figures fig;
    rc = api_compile(model, sets, nsets, &c, &g, &fig, &d) ? 0 : 1;
    if (rc == 0 && c.output) {
        printf("%s: %d kernels and %d GEMMs per step; parameters %lld bytes, activations %lld bytes "
               "(peak of the plan), workspace %lld bytes\n", c.output, fig.kernels, fig.gemms, fig.param_bytes,
               fig.act_bytes, fig.workspace_bytes);
        printf("%s: norm/dropout/residual activations %lld bytes per rank%s\n", c.output, fig.region_bytes,
               c.sequence_parallel ? " (split along the sequence)" : "");
    }
    /* NVRTC needs no GPU: sm_80 is the oldest architecture the kernels target. */
    if (rc == 0 && c.kernel_report)
        rc = cli_kernel_report(g, model, c.cuda_arch ? c.cuda_arch : "sm_80", c.no_kernel_cache, stdout, &d);
    if (rc == 0 && c.gemm_report) rc = cli_gemm_report(g, model, stdout, &d);
    if (rc == 0 && c.fusion_report) {
        /* The same model with no fusion, for comparison. */
        tgc_config plain = c;
        plain.fuse = NULL;
        plain.no_fuse = true;
        ir_graph *g0 = api_compile_model(model, sets, nsets, &plain, NULL, &d);
        rc = g0 ? cli_fusion_report(g0, g, stdout, &d) : 1;
        ir_graph_free(g0);
    }
    ir_graph_free(g);
    diag_finish(&d);
    diag_free(&d);
    free_sets(sets, nsets);
    return rc;
}

ir_graph *cli_plan_load(const char *path, tgc_config *c, diag *d)
{
    tgc_config none; /* no command-line options over the plan's */
    tgc_config_defaults(&none);
    int rc;
    return api_plan_load(path, c, &none, &rc, NULL, d, stderr);
}

/* What tgc run refuses before loading anything: the options of tgc
 * compile; over a plan, --set too. */
static int run_refusals(const tgc_config *cli, const char *model, const fe_override *sets, int nsets)
{
    strbuf why;
    sb_init(&why);
    int rc = 0;
    int n = tgc_config_changes(cli, NULL, TGC_USE_COMPILE, &why);
    if (n) {
        fprintf(stderr, "tgc run: error: %s %s of tgc compile\nTry 'tgc run --help'.\n", why.s,
                n > 1 ? "are options" : "is an option");
        rc = 2;
    } else if (nsets && rt_plan_sniff(model) != RT_PLAN_NONE) {
        char given[256];
        cli_override_str(&sets[0], given, sizeof given);
        fprintf(stderr, "tgc: error: %s: overrides apply to models; '%s' is a compiled plan\n", given, model);
        rc = 2;
    }
    sb_free(&why);
    return rc;
}

int cli_run(int argc, char **argv, void (*help_fn)(FILE *))
{
    tgc_config cli;
    fe_override sets[MAX_SETS];
    int nsets = 0;
    bool help = false;
    const char *model = NULL;
    int rc = parse(&cli, argc, argv, &model, sets, &nsets, &help);
    if (help) {
        help_fn(stdout);
        tgc_config_plan_usage(stdout);
        free_sets(sets, nsets);
        return 0;
    }
    if (rc == 0) rc = run_refusals(&cli, model, sets, nsets);
    if (rc) { free_sets(sets, nsets); return rc; }
    /* --micro-batch-size sets a model's `batch` (a plan has its own). */
    if (rt_plan_sniff(model) == RT_PLAN_NONE) rc = add_micro_batch("run", &cli, sets, &nsets);
    if (rc) { free_sets(sets, nsets); return rc; }
    diag d;
    diag_init(&d, stderr);
    rc = api_run(model, &cli, sets, nsets, &d, stderr);
    diag_finish(&d);
    diag_free(&d);
    free_sets(sets, nsets);
    return rc;
}
