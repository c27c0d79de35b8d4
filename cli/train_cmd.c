/* `tgc compile` and `tgc run`: the training pipeline from the command line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/config.h"
#include "cli/fusion_report.h"
#include "cli/gemm_report.h"
#include "cli/kernel_report.h"
#include "cli/load.h"
#include "cli/train_cmd.h"
#include "codegen/codegen.h"
#include "passes/pass.h"
#include "runtime/plan.h"
#include "runtime/run_files.h"
#include "runtime/comm_mpi.h"
#include "runtime/train.h"
#include "support/util.h"

#define MAX_SETS 64

/* Returns 0, or 2 after printing why the schedule is wrong (a plan's
 * configuration under the command line's is checked only here). */
static int train_options_from(rt_train_opts *o, const tgc_config *c, const char *model)
{
    rt_train_opts_defaults(o);
    o->model_path = model;
    o->iters = c->train_iters;
    o->seed = c->seed;
    o->log_interval = c->log_interval;
    int rc = tgc_config_schedule(c, &o->sched);
    o->data = c->data;
    o->inputs = c->inputs;
    o->shuffle = c->shuffle;
    o->log_path = c->log;
    o->export_path = c->export_path;
    o->init_from = c->init_from;
    o->export_grads = c->export_grads;
    o->save_dir = c->save;
    o->load_dir = c->load;
    o->save_interval = c->save_interval;
    o->exit_interval = c->exit_interval;
    o->exit_duration_mins = c->exit_duration_mins;
    if (c->exit_interval < 0 || !(c->exit_duration_mins >= 0.0) || c->exit_duration_mins > 1e9) { /* NaN too */
        fprintf(stderr, "tgc: error: --exit-interval %lld and --exit-duration-in-mins %g: expected at least 0\n",
                (long long)c->exit_interval, c->exit_duration_mins);
        return 2;
    }
    o->eval_interval = c->eval_interval;
    o->eval_iters = c->eval_iters;
    if (c->split && !rt_parse_split(c->split, &o->split_train, &o->split_valid)) {
        fprintf(stderr, "tgc: error: --split %s: expected two or three non-negative weights with a positive "
                "train and valid part, e.g. 98,2 or 969,30,1\n", c->split);
        return 2;
    }
    if (c->eval_interval < 0 || c->eval_iters < 1) {
        fprintf(stderr, "tgc: error: --eval-interval %lld and --eval-iters %lld: expected at least 0 and 1\n",
                (long long)c->eval_interval, (long long)c->eval_iters);
        return 2;
    }
    o->quiet = c->quiet;
    o->comm_stats = c->comm_stats;
    o->loss_scale = c->loss_scale;
    o->initial_loss_scale = c->initial_loss_scale;
    o->min_loss_scale = c->min_loss_scale;
    o->loss_scale_window = c->loss_scale_window;
    o->hysteresis = c->hysteresis;
    o->cc.no_cache = c->no_kernel_cache;
    o->backend = strcmp(c->backend, "cuda") == 0 ? RT_BACKEND_CUDA : RT_BACKEND_CPU;
    o->check_numerics = c->check_numerics;
    o->peak_tflops = c->peak_tflops;
    o->memory_limit = (int64_t)(c->memory_limit_gib * 1073741824.0);
    o->calibrate_peak = c->calibrate_peak;
    o->no_memory_check = c->no_memory_check;
    o->dp = c->dp;
    o->micro_batch = c->micro_batch_size;
    o->global_batch = c->global_batch_size;
    o->pipeline_schedule = c->pipeline_schedule;
    o->dist_opt = c->use_distributed_optimizer;
    o->trace_path = c->trace;
    o->mpi = strcmp(c->comm, "mpi") == 0 || (strcmp(c->comm, "auto") == 0 && tgc_comm_mpi_launched());
    const char *dbg = getenv("TGC_DEBUG");
    o->cc.keep_source = dbg && atoi(dbg) >= 4; /* TGC_DEBUG >= 4 keeps the generated C */
    return rc;
}

/* TGC_DEBUG >= 3: the IR after every pass, on standard error. */
static void dump_after(const char *name, const ir_graph *g, void *user)
{
    (void)user;
    char *text = ir_graph_print(g);
    fprintf(stderr, "# ---- after %s ----\n%s", name, text);
    free(text);
}

/* Loads MODEL and runs every pass on it. */
static ir_graph *compile_model(const char *model, const fe_override *sets, int nsets, const tgc_config *c, diag *d)
{
    ir_graph *g = cli_load_model(model, sets, nsets, d);
    if (!g) return NULL;
    const char *dbg = getenv("TGC_DEBUG");
    if (!tgc_config_run_passes(g, c, true, dbg && atoi(dbg) >= 3 ? dump_after : NULL, d)) {
        ir_graph_free(g);
        return NULL;
    }
    return g;
}

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
    /* --micro-batch-size sets the model's `batch` hyperparameter. */
    if (c->micro_batch_size && *nsets < MAX_SETS) {
        char *kv = xmalloc(64);
        snprintf(kv, 64, "batch%c%lld", 0, (long long)c->micro_batch_size);
        sets[(*nsets)++] = (fe_override){kv, kv + 6};
    }
    return tgc_config_check(c);
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
    if (rc) { free_sets(sets, nsets); return rc; }
    diag d;
    diag_init(&d, stderr);
    /* -o must not be the model, and must be writable before the passes run. */
    rt_run_file in[] = {{"the model", model}}, out[] = {{"-o", c.output}};
    bool out_ok = !c.output || rt_files_check(in, 1, out, (const bool[]){false}, 1, NULL, 0, &d);
    ir_graph *g = out_ok ? compile_model(model, sets, nsets, &c, &d) : NULL;
    cg_program *prog = g && c.output ? cg_build(g, &d) : NULL;
    rc = g && !c.output ? 0 : 1; /* a report without -o writes no plan */
    if (prog) {
        strbuf cfg;
        sb_init(&cfg);
        tgc_config_write(&c, &cfg);
        rt_plan plan = {cfg.s, ir_graph_print(g), cg_render_c(prog)};
        if (rt_plan_write(c.output, &plan, &d)) {
            int gemms = 0;
            for (int i = 0; i < prog->ninstrs; i++) gemms += prog->instrs[i].kind == CG_GEMM;
            printf("%s: %d kernels and %d GEMMs per step; parameters %lld bytes, activations %lld bytes "
                   "(peak of the plan), workspace %lld bytes\n", c.output, prog->nkernels, gemms,
                   (long long)g->mem_size[IR_MEM_PARAM], (long long)g->mem_size[IR_MEM_ACT],
                   (long long)prog->workspace_bytes);
            printf("%s: norm/dropout/residual activations %lld bytes per rank%s\n", c.output,
                   (long long)memplan_region_bytes(g), c.sequence_parallel ? " (split along the sequence)" : "");
            rc = 0;
        }
        free(plan.ir);
        free(plan.kernels);
        sb_free(&cfg);
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
        ir_graph *g0 = compile_model(model, sets, nsets, &plain, &d);
        rc = g0 ? cli_fusion_report(g0, g, stdout, &d) : 1;
        ir_graph_free(g0);
    }
    cg_program_free(prog);
    ir_graph_free(g);
    diag_finish(&d);
    diag_free(&d);
    free_sets(sets, nsets);
    return rc;
}

/* A plan's graph, with its configuration under the command line's. */
static ir_graph *load_plan(const char *path, tgc_config *c, const tgc_config *cli, diag *d)
{
    rt_plan *p = rt_plan_read(path, d);
    if (!p) return NULL;
    tgc_config_defaults(c);
    bool ok = true;
    for (char *line = p->config, *nl; ok && *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl) { ok = false; break; }
        *nl = 0;
        ok = tgc_config_read_line(c, line);
        if (!ok) diag_error_plain(d, "%s: corrupt plan: bad configuration line '%s'", path, line);
    }
    tgc_config_overlay(c, cli);
    ir_graph *g = ok ? ir_graph_read(p->ir, strlen(p->ir), path, d) : NULL;
    if (g && !ir_graph_verify(g, d)) { ir_graph_free(g); g = NULL; }
    cg_program *prog = g ? cg_build(g, d) : NULL;
    if (prog) {
        char *src = cg_render_c(prog);
        if (strcmp(src, p->kernels) != 0) {
            diag_error_plain(d, "%s: the plan's kernels differ from what this tgc generates from its IR; the plan "
                             "was made by another version of tgc: recompile the model", path);
            ir_graph_free(g);
            g = NULL;
        }
        free(src);
        cg_program_free(prog);
    } else if (g) {
        ir_graph_free(g);
        g = NULL;
    }
    rt_plan_free(p);
    return g;
}

ir_graph *cli_plan_load(const char *path, tgc_config *c, diag *d)
{
    tgc_config none; /* no command-line options over the plan's */
    tgc_config_defaults(&none);
    return load_plan(path, c, &none, d);
}

int cli_run(int argc, char **argv, void (*help_fn)(FILE *))
{
    tgc_config cli, c;
    fe_override sets[MAX_SETS];
    int nsets = 0;
    bool help = false;
    const char *model = NULL;
    int rc = parse(&cli, argc, argv, &model, sets, &nsets, &help);
    if (help) { help_fn(stdout); free_sets(sets, nsets); return 0; }
    if (rc == 0 && cli.fusion_report) {
        fprintf(stderr, "tgc run: error: --fusion-report is an option of tgc compile\nTry 'tgc compile --help'.\n");
        rc = 2;
    }
    if (rc) { free_sets(sets, nsets); return rc; }
    diag d;
    diag_init(&d, stderr);
    ir_graph *g;
    int refused = 0; /* what compile accepts but the runtime cannot run yet */
    if (rt_plan_sniff(model)) {
        if (nsets) diag_error_plain(&d, "--set applies to models; '%s' is a compiled plan", model);
        if (cli.param_groups) diag_error_plain(&d, "--param-group is compiled into a plan; '%s' is one", model);
        if (cli.fuse || cli.no_fuse)
            diag_error_plain(&d, "--%s is compiled into a plan; '%s' is one", cli.fuse ? "fuse" : "no-fuse", model);
        g = nsets || cli.param_groups || cli.fuse || cli.no_fuse ? NULL : load_plan(model, &c, &cli, &d);
        if (g) refused = tgc_config_check_run(&c);
    } else {
        c = cli;
        refused = tgc_config_check_run(&c);
        g = refused ? NULL : compile_model(model, sets, nsets, &c, &d);
    }
    rc = refused ? refused : 1;
    if (g && !refused) {
        rt_train_opts o;
        rc = train_options_from(&o, &c, model);
        if (rc == 0) rc = rt_train(g, &o, &d);
    }
    ir_graph_free(g);
    diag_finish(&d);
    diag_free(&d);
    free_sets(sets, nsets);
    return rc;
}
