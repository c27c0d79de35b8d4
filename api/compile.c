/* Compiling a model to a plan, loading a plan, and a run's options from a
 * configuration: the library's (include/tgc.h) and the command line's
 * (cli/train_cmd.c) one implementation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "codegen/codegen.h"
#include "passes/pass.h"
#include "runtime/comm/comm_mpi.h"
#include "runtime/io/blend.h"
#include "runtime/plan.h"
#include "support/env.h"
#include "support/util.h"

/* --data-path's words are a usage matter (the datasets are read later):
 * words[0..), NULL-terminated; *n their count. */
static bool data_path_check(const char *const *words, int *n, FILE *err)
{
    for (*n = 0; words && words[*n];) ++*n;
    if (!*n) return true;
    diag d;
    diag_init(&d, err);
    tgc_blend_spec spec;
    bool ok = tgc_blend_spec_parse(*n, words, &spec, &d);
    if (ok) tgc_blend_spec_free(&spec);
    diag_free(&d);
    return ok;
}

static rt_backend backend_of(const char *name)
{
    return strcmp(name, "cuda") == 0 ? RT_BACKEND_CUDA : strcmp(name, "sim") == 0 ? RT_BACKEND_SIM : RT_BACKEND_CPU;
}

/* The RT(...) fills of api/options.def's rows, in their order. */
static void train_fill(rt_train_opts *o, const tgc_config *c)
{
#define RT(field, expr) o->field = (expr);
#define OPT(name, alias, kind, field, dflt, use, check, choices, record, fills, help) fills
#include "api/options.def"
}

/* The checks of values no single option can make; 0 or 2 after saying
 * what is wrong. */
static int train_values_check(rt_train_opts *o, const tgc_config *c, FILE *err)
{
    if (c->exit_interval < 0 || !(c->exit_duration_mins >= 0.0) || c->exit_duration_mins > 1e9) { /* NaN too */
        fprintf(err, "tgc: error: --exit-interval %lld and --exit-duration-in-mins %g: expected at least 0\n",
                (long long)c->exit_interval, c->exit_duration_mins);
        return 2;
    }
    if (c->split && !rt_parse_split(c->split, &o->split_train, &o->split_valid)) {
        fprintf(err, "tgc: error: --split %s: expected two or three non-negative weights with a positive "
                "train and valid part, e.g. 98,2 or 969,30,1\n", c->split);
        return 2;
    }
    if (c->eval_interval < 0 || c->eval_iters < 1) {
        fprintf(err, "tgc: error: --eval-interval %lld and --eval-iters %lld: expected at least 0 and 1\n",
                (long long)c->eval_interval, (long long)c->eval_iters);
        return 2;
    }
    if (c->tensorboard_log_interval < 1) {
        fprintf(err, "tgc: error: --tensorboard-log-interval %lld: expected at least 1\n",
                (long long)c->tensorboard_log_interval);
        return 2;
    }
    if (strcmp(c->cuda_graphs, "on") == 0 && o->backend == RT_BACKEND_CPU) {
        fprintf(err, "tgc: error: --cuda-graphs on: the cpu backend has no graphs (--backend cuda; sim models them)\n");
        return 2;
    }
    if (o->mpi && (o->overlap_grad_reduce || o->overlap_param_gather)) {
        fprintf(err, "tgc: error: --%s runs on rank threads (a communication thread each); under mpirun it is "
                "not implemented yet: drop it\n", o->overlap_grad_reduce ? "overlap-grad-reduce" : "overlap-param-gather");
        return 2;
    }
    return 0;
}

/* Returns 0, or 2 after printing why the schedule is wrong (a plan's
 * configuration under the command line's is checked only here). */
int api_train_options(rt_train_opts *o, const tgc_config *c, const char *model, FILE *err)
{
    rt_train_opts_defaults(o);
    o->model_path = model;
    train_fill(o, c);
    int rc = tgc_config_schedule_to(c, &o->sched, err);
    /* --data-path, or Megatron's per-split blends (its messages when mixed). */
    bool per_split = c->train_data_path || c->valid_data_path;
    if (per_split && (c->data_path || c->split || !c->train_data_path)) {
        fprintf(err, "tgc: error: %s\n", c->data_path ? "--data-path (or --data) and --train-data-path/--valid-data-path: "
                "a single data source must be provided in training mode (Megatron's rule)"
                : c->split ? "--split and --train-data-path/--valid-data-path are incompatible: each split has its "
                "own data (Megatron's rule)" : "--valid-data-path needs --train-data-path (the training data)");
        return 2;
    }
    o->data_path = per_split ? c->train_data_path : c->data_path;
    o->valid_data_path = c->valid_data_path;
    if (!data_path_check(o->data_path, &o->ndata_path, err) ||
        !data_path_check(o->valid_data_path, &o->nvalid_data_path, err))
        return 2;
    if (train_values_check(o, c, err)) return 2;
    o->cc.keep_source = env_int("TGC_DEBUG") >= 4; /* TGC_DEBUG >= 4 keeps the generated C */
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
ir_graph *api_run_passes(ir_graph *g, const tgc_config *c, diag *d)
{
    if (!tgc_config_run_passes(g, c, true, env_int("TGC_DEBUG") >= 3 ? dump_after : NULL, d)) {
        ir_graph_free(g);
        return NULL;
    }
    return g;
}

ir_graph *api_compile_graph(ir_graph *g, const tgc_config *c, char **lowered, diag *d)
{
    if (g && !api_param_groups_match(g, c->param_groups, d)) {
        ir_graph_free(g);
        g = NULL;
    }
    if (!g) return NULL;
    if (lowered) *lowered = ir_graph_print(g);
    return api_run_passes(g, c, d);
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
                                const tgc_config *cli, const char *path, diag *d, FILE *err)
{
    strbuf why;
    sb_init(&why);
    if (tgc_config_changes(cli, plan, TGC_USE_PASSES, &why) == 0) { sb_free(&why); return g; }
    if (err) fprintf(err, "tgc: %s: recompiling the plan's lowered IR for %s\n", path, why.s);
    sb_free(&why);
    ir_graph_free(g);
    g = ir_graph_read(p->lowered, strlen(p->lowered), path, d);
    if (g && !ir_graph_verify(g, d)) { ir_graph_free(g); return NULL; }
    return g ? api_run_passes(g, c, d) : NULL;
}

/* A plan's graph, with its configuration under the command line's
 * (cli_options_plan_usage: what each option does there); NULL with *rc 2
 * for options that do not go together, 1 for the rest. */
ir_graph *api_plan_load(const char *path, tgc_config *c, const tgc_config *cli, int *rc, char **lowered, diag *d,
                        FILE *err)
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
        if ((*rc = tgc_config_check_to(c, err)) != 0) {
            fprintf(err, "tgc: note: those are %s's options with the command line's over them\n", path);
            ir_graph_free(g);
            g = NULL;
        }
    }
    if (g) g = plan_recompile(g, p, &plan, c, cli, path, d, err);
    if (g && lowered) *lowered = xstrdup(p->lowered);
    rt_plan_free(p);
    return g;
}

bool api_plan_write(const char *path, const tgc_config *c, const char *lowered, const ir_graph *g,
                    const cg_program *prog, diag *d)
{
    strbuf cfg;
    sb_init(&cfg);
    tgc_config_write(c, &cfg);
    rt_plan plan = {cfg.s, (char *)lowered, ir_graph_print(g), cg_render_c(prog)};
    bool ok = rt_plan_write(path, &plan, tgc_config_plan_schema(), d);
    free(plan.ir);
    free(plan.kernels);
    sb_free(&cfg);
    return ok;
}
