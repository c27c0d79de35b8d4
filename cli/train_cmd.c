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
#include "runtime/io/blend.h"
#include "runtime/io/run_files.h"
#include "runtime/comm/comm_mpi.h"
#include "runtime/train/train.h"
#include "support/util.h"
#include "tokenizer/tokenizer.h"

#define MAX_SETS 64

/* --data-path's words are a usage matter (the datasets are read later). */
static bool data_path_check(const rt_train_opts *o)
{
    diag d;
    diag_init(&d, stderr);
    tgc_blend_spec spec;
    bool ok = tgc_blend_spec_parse(o->ndata_path, o->data_path, &spec, &d);
    if (ok) tgc_blend_spec_free(&spec);
    diag_free(&d);
    return ok;
}

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
    o->data_path = c->data_path;
    for (o->ndata_path = 0; c->data_path && c->data_path[o->ndata_path];) o->ndata_path++;
    if (o->ndata_path && !data_path_check(o)) return 2;
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
    o->backend = strcmp(c->backend, "cuda") == 0 ? RT_BACKEND_CUDA : strcmp(c->backend, "sim") == 0 ? RT_BACKEND_SIM
                                                                                              : RT_BACKEND_CPU;
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
    o->overlap_grad_reduce = c->overlap_grad_reduce;
    o->overlap_param_gather = c->overlap_param_gather;
    o->trace_path = c->trace;
    o->mpi = strcmp(c->comm, "mpi") == 0 || (strcmp(c->comm, "auto") == 0 && tgc_comm_mpi_launched());
    if (o->mpi && (o->overlap_grad_reduce || o->overlap_param_gather)) {
        fprintf(stderr, "tgc: error: --%s runs on rank threads (a communication thread each); under mpirun it is "
                "not implemented yet: drop it\n", o->overlap_grad_reduce ? "overlap-grad-reduce" : "overlap-param-gather");
        return 2;
    }
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

/* Runs every pass on g; NULL (g freed) after reporting. */
static ir_graph *run_passes(ir_graph *g, const tgc_config *c, diag *d)
{
    const char *dbg = getenv("TGC_DEBUG");
    if (!tgc_config_run_passes(g, c, true, dbg && atoi(dbg) >= 3 ? dump_after : NULL, d)) {
        ir_graph_free(g);
        return NULL;
    }
    return g;
}

/* Loads MODEL and runs every pass on it; *lowered, when not NULL, gets
 * the text IR before the passes (what a plan recompiles from). */
static ir_graph *compile_model(const char *model, const fe_override *sets, int nsets, const tgc_config *c,
                               char **lowered, diag *d)
{
    ir_graph *g = cli_load_model(model, sets, nsets, d);
    if (g && !cli_param_groups_match(g, c->param_groups, d)) {
        ir_graph_free(g);
        g = NULL;
    }
    if (!g) return NULL;
    if (lowered) *lowered = ir_graph_print(g);
    return run_passes(g, c, d);
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
    char *lowered = NULL;
    /* -o must not be the model, and must be writable before the passes run. */
    rt_run_file in[] = {{"the model", model}}, out[] = {{"-o", c.output}};
    bool out_ok = !c.output || rt_files_check(in, 1, out, (const bool[]){false}, 1, NULL, 0, &d);
    ir_graph *g = out_ok ? compile_model(model, sets, nsets, &c, &lowered, &d) : NULL;
    cg_program *prog = g && c.output ? cg_build(g, &d) : NULL;
    rc = g && !c.output ? 0 : 1; /* a report without -o writes no plan */
    if (prog) {
        strbuf cfg;
        sb_init(&cfg);
        tgc_config_write(&c, &cfg);
        rt_plan plan = {cfg.s, lowered, ir_graph_print(g), cg_render_c(prog)};
        if (rt_plan_write(c.output, &plan, tgc_config_plan_schema(), &d)) {
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
        ir_graph *g0 = compile_model(model, sets, nsets, &plain, NULL, &d);
        rc = g0 ? cli_fusion_report(g0, g, stdout, &d) : 1;
        ir_graph_free(g0);
    }
    cg_program_free(prog);
    ir_graph_free(g);
    free(lowered);
    diag_finish(&d);
    diag_free(&d);
    free_sets(sets, nsets);
    return rc;
}

/* The plan's `name value` lines over the defaults. */
static bool plan_config(char *config, tgc_config *c, const char *path, diag *d)
{
    tgc_config_defaults(c);
    for (char *line = config, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (!nl || !tgc_config_read_line(c, line)) {
            diag_error_plain(d, "%s: corrupt plan: bad configuration line '%s'", path, line);
            return false;
        }
    }
    return true;
}

/* The plan's own graph, verified, and its kernels what this tgc generates
 * from it (else another version of tgc made it). */
static ir_graph *plan_graph(const rt_plan *p, const char *path, diag *d)
{
    ir_graph *g = ir_graph_read(p->ir, strlen(p->ir), path, d);
    if (g && !ir_graph_verify(g, d)) { ir_graph_free(g); return NULL; }
    cg_program *prog = g ? cg_build(g, d) : NULL;
    if (!prog) { ir_graph_free(g); return NULL; }
    char *src = cg_render_c(prog);
    if (strcmp(src, p->kernels) != 0) {
        diag_error_plain(d, "%s: the plan's kernels differ from what this tgc generates from its IR; the plan "
                         "was made by another version of tgc: recompile the model", path);
        ir_graph_free(g);
        g = NULL;
    }
    free(src);
    cg_program_free(prog);
    return g;
}

/* Options that change the model itself cannot apply to a plan: refused
 * when they differ from what it was compiled with (its micro-batch is
 * the model's `batch` where --micro-batch-size was not given). */
static bool plan_model_options(const tgc_config *plan, const tgc_config *cli, const ir_graph *g, const char *path,
                               diag *d)
{
    tgc_config was = *plan;
    for (int i = 0; i < g->nhparams && !was.micro_batch_size; i++)
        if (strcmp(g->hparams[i].name, "batch") == 0 && !g->hparams[i].is_float)
            was.micro_batch_size = g->hparams[i].i;
    strbuf why;
    sb_init(&why);
    bool ok = tgc_config_changes(cli, &was, TGC_USE_MODEL, &why) == 0;
    if (!ok)
        diag_error_plain(d, "%s: %s changes the model the plan was compiled from; give it to tgc compile MODEL "
                         "(or run the model)", path, why.s);
    sb_free(&why);
    return ok;
}

/* The options the passes read, where the command line changes them,
 * recompile the plan from its lowered IR; g is the plan's own graph. */
static ir_graph *plan_recompile(ir_graph *g, const rt_plan *p, const tgc_config *plan, const tgc_config *c,
                                const tgc_config *cli, const char *path, diag *d)
{
    strbuf why;
    sb_init(&why);
    if (tgc_config_changes(cli, plan, TGC_USE_PASSES, &why) == 0) { sb_free(&why); return g; }
    fprintf(stderr, "tgc: %s: recompiling the plan's lowered IR for %s\n", path, why.s);
    sb_free(&why);
    ir_graph_free(g);
    g = ir_graph_read(p->lowered, strlen(p->lowered), path, d);
    if (g && !ir_graph_verify(g, d)) { ir_graph_free(g); return NULL; }
    return g ? run_passes(g, c, d) : NULL;
}

/* A plan's graph, with its configuration under the command line's
 * (tgc_config_plan_usage: what each option does there); NULL with *rc 2
 * for options that do not go together, 1 for the rest. */
static ir_graph *load_plan(const char *path, tgc_config *c, const tgc_config *cli, int *rc, diag *d)
{
    *rc = 1;
    rt_plan *p = rt_plan_read(path, tgc_config_plan_schema(), d);
    if (!p) return NULL;
    tgc_config plan;
    ir_graph *g = plan_config(p->config, &plan, path, d) ? plan_graph(p, path, d) : NULL;
    if (g && !plan_model_options(&plan, cli, g, path, d)) { ir_graph_free(g); g = NULL; }
    if (g) {
        *c = plan;
        tgc_config_overlay(c, cli);
        if ((*rc = tgc_config_check(c)) != 0) {
            fprintf(stderr, "tgc: note: those are %s's options with the command line's over them\n", path);
            ir_graph_free(g);
            g = NULL;
        }
    }
    if (g) g = plan_recompile(g, p, &plan, c, cli, path, d);
    rt_plan_free(p);
    return g;
}

ir_graph *cli_plan_load(const char *path, tgc_config *c, diag *d)
{
    tgc_config none; /* no command-line options over the plan's */
    tgc_config_defaults(&none);
    int rc;
    return load_plan(path, c, &none, &rc, d);
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
    tgc_config cli, c;
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
    diag d;
    diag_init(&d, stderr);
    ir_graph *g = NULL;
    int refused = 0; /* options that do not go together; what compile accepts but the runtime cannot run yet */
    if (rt_plan_sniff(model) != RT_PLAN_NONE) { /* by content: a damaged plan is reported as one */
        g = load_plan(model, &c, &cli, &rc, &d);
        refused = g ? tgc_config_check_run(&c) : rc == 2 ? 2 : 0;
    } else {
        c = cli;
        refused = add_micro_batch("run", &c, sets, &nsets);
        if (!refused) refused = tgc_config_check(&c);
        if (!refused) refused = tgc_config_check_run(&c);
        g = refused ? NULL : compile_model(model, sets, nsets, &c, NULL, &d);
    }
    rc = refused ? refused : 1;
    if (g && !refused) {
        rt_train_opts o;
        rc = train_options_from(&o, &c, model);
        tgc_tokenizer_opts to = {c.tokenizer_type, c.vocab_file, c.merge_file, c.tokenizer_model};
        tgc_tokenizer *tk = NULL;
        char why[512];
        if (rc == 0 && tgc_tokenizer_opts_given(&to)) {
            if (!tgc_tokenizer_opts_check(&to, why, sizeof why)) {
                fprintf(stderr, "tgc: error: %s\n", why);
                rc = 2;
            } else if (!o.data) {
                fprintf(stderr, "tgc: error: --tokenizer-type, --vocab-file, --merge-file and --tokenizer-model "
                        "tokenize --data text; this run has no --data\n");
                rc = 2;
            } else if (!(tk = tgc_tokenizer_open(&to, &d))) rc = 1;
        }
        o.tokenizer = tk;
        if (rc == 0) rc = rt_train(g, &o, &d);
        tgc_tokenizer_free(tk);
    }
    ir_graph_free(g);
    diag_finish(&d);
    diag_free(&d);
    free_sets(sets, nsets);
    return rc;
}
