/* `tgc plan`: what a configuration costs before anything runs
 * (docs/planner.md).
 *
 *   tgc plan MODEL [run options]     memory per rank (measured from the
 *                                    compiled plan; what this tgc does not
 *                                    compile yet, analytically; with
 *                                    --backend cuda|sim the backend's own
 *                                    bytes and the sum per device), the
 *                                    paper's activation formulas beside it,
 *                                    the checkpoint count, FLOPs
 *   tgc plan MODEL --search ...      the parallel-configuration planner
 *   tgc plan [MODEL] --calibrate     this machine's sgemm rate
 *
 * This file scans the command line (the run's options into a tgc_options,
 * plan's own into a tgc_planner_args); the report is tgc_planner_report's
 * (include/tgc.h). */
#include "cli/plan_cmd.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cli/config.h"
#include "cli/overrides.h"
#include "cli/util.h"
#include "tgc.h"

#define MAX_SETS 64

/* ---- the options only plan has ------------------------------------------------ */

typedef enum { POPT_FLAG, POPT_INT, POPT_FLOAT } popt_kind;

typedef struct popt {
    const char *name;
    popt_kind kind;
    size_t offset;
    const char *help;
} popt;

#define PO(f) offsetof(tgc_planner_args, f)
static const popt popts[] = {
    {"search", POPT_FLAG, PO(search), "rank the parallel configurations of --gpus GPUs (needs --gpu-memory and "
                                      "--global-batch-size)"},
    {"gpus", POPT_INT, PO(gpus), "GPUs n = t p d"},
    {"devices", POPT_INT, PO(devices), "with --backend cuda or sim: the devices the ranks are placed on (rank r on "
                                       "device r mod N, as tgc run places them; 1), for the memory per device"},
    {"gpu-memory", POPT_FLOAT, PO(gpu_memory), "memory of one GPU, GiB"},
    {"gpus-per-node", POPT_INT, PO(gpus_per_node), "GPUs per node (8); tensor parallelism stays inside a node"},
    {"intra-node-gbps", POPT_FLOAT, PO(intra_node_gbps), "GB/s (gigabytes) per GPU between GPUs of a node (300: NVLink 3)"},
    {"inter-node-gbps", POPT_FLOAT, PO(inter_node_gbps), "GB/s per GPU between nodes (25: a 200 Gb/s InfiniBand adapter)"},
    {"hbm-gbps", POPT_FLOAT, PO(hbm_gbps), "GB/s of a GPU's memory, for the non-GEMM kernels (2000: A100 80GB)"},
    {"top", POPT_INT, PO(top), "configurations printed (10)"},
    {"max-micro-batch", POPT_INT, PO(max_micro_batch), "the largest micro-batch size tried (64)"},
    {"no-sequence-parallel", POPT_FLAG, PO(no_sequence_parallel), "--search: only configurations without sequence parallelism"},
    {"calibrate", POPT_FLAG, PO(calibrate), "time this machine's sgemm at square and transformer-shaped sizes; "
                                            "with --search, the planner's compute rate"},
};

void cli_plan_usage(FILE *out)
{
    fputs("\noptions of tgc plan:\n", out);
    for (size_t i = 0; i < N_OF(popts); i++)
        fprintf(out, "  --%s%s\n      %s\n", popts[i].name,
                popts[i].kind == POPT_INT ? " N" : popts[i].kind == POPT_FLOAT ? " X" : "", popts[i].help);
}

static int plan_usage_error(const char *fmt, const char *name, const char *arg)
{
    fprintf(stderr, "tgc plan: error: --%s", name);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'tgc plan --help'.\n");
    return 2;
}

static int set_popt(tgc_planner_args *o, const popt *p, const char *val)
{
    char *field = (char *)o + p->offset;
    if (p->kind == POPT_INT) {
        int64_t v;
        if (!tgc_parse_i64(val, &v) || v < 1) return plan_usage_error(": '%s' is not a positive integer", p->name, val);
        *(int64_t *)field = v;
    } else {
        double v;
        if (!tgc_parse_double(val, &v) || !(v > 0.0) || !isfinite(v))
            return plan_usage_error(": '%s' is not a positive number", p->name, val);
        *(double *)field = v;
    }
    return 0;
}

/* plan's own options, beside the run's (tgc_config_parse_cmd's extra). */
static int plan_cli_opts(cli_opt *lo)
{
    int n = 0;
    for (size_t k = 0; k < N_OF(popts); k++)
        lo[n++] = (cli_opt){popts[k].name, popts[k].kind != POPT_FLAG, false, TGC_CMDLINE_ID_MIN + (int)k};
    return n;
}

static int plan_on_opt(void *user, int id, const char *given, const char *value)
{
    (void)given;
    tgc_planner_args *o = user;
    const popt *p = &popts[id - TGC_CMDLINE_ID_MIN];
    if (p->kind != POPT_FLAG) return set_popt(o, p, value);
    *(int *)((char *)o + p->offset) = 1;
    return 0;
}

int cli_plan(int argc, char **argv, void (*help_fn)(FILE *))
{
    tgc_planner_args x = TGC_PLANNER_ARGS_INIT;
    int nsets = 0, npos = 0;
    cli_override sets[MAX_SETS];
    const char *pos[1] = {NULL};
    bool help = false;
    cli_opt extra[N_OF(popts)];
    /* What the passes read and the model's batch (plan compiles as tgc run
     * does), and the two run options its figures use; the other run
     * options (data, logs, checkpoints, ...) would do nothing here. */
    static const char *const run_opts[] = {"peak-tflops", "comm", "backend", NULL};
    tgc_cmdline cl = {.only = run_opts, .extra = extra, .nextra = plan_cli_opts(extra), .on_extra = plan_on_opt,
                      .user = &x, .uses = 1u << TGC_OPTION_PASSES | 1u << TGC_OPTION_MODEL};
    tgc_options *o = NULL;
    int rc = tgc_options_new(&o) == TGC_OK ? 0 : 1;
    if (rc == 0) rc = cli_options_parse_cmd(o, argc, argv, &cl, pos, &npos, 1, sets, &nsets, MAX_SETS, &help);
    if (rc == 0 && help) help_fn(stdout);
    else if (rc == 0) {
        x.model = npos == 1 ? pos[0] : NULL;
        tgc_status st = tgc_planner_report(o, &x, stdout);
        rc = st == TGC_OK ? 0 : st == TGC_EUSAGE ? 2 : 1;
    }
    tgc_options_free(o);
    cli_overrides_free(sets, nsets);
    return rc;
}
