/* `tgc compile` and `tgc run`: their command lines, and the figures they
 * print; everything else is the library's, through its public API
 * (include/tgc.h, docs/api.md): the options filled from argv, the model
 * compiled (the plan written), the reports, the plan loaded, the trainer
 * run. The library writes its diagnostics to standard error as they come
 * (tgc_set_diagnostics), so the messages are those it makes. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/config.h"
#include "cli/overrides.h"
#include "cli/train_cmd.h"
#include "cli/util.h"
#include "tgc.h"

#define MAX_SETS 64

/* The command's exit status for a library call's. */
static int exit_status(tgc_status st) { return st == TGC_OK ? 0 : st == TGC_EUSAGE ? 2 : 1; }

/* A command line of compile or run into *o (--set and the model flags
 * also into sets, for the command's own messages). */
static int parse(tgc_options **o, int argc, char **argv, const char **model, cli_override *sets, int *nsets,
                 bool *help)
{
    const char *pos[2];
    int npos = 0;
    tgc_set_diagnostics(stderr);
    if (tgc_options_new(o) != TGC_OK) return 1;
    tgc_options_reset(*o, "quiet"); /* tgc run's default: progress lines (a plan's --quiet stays) */
    tgc_options_set_origin(*o, "from the command line");
    int rc = cli_options_parse_cmd(*o, argc, argv, NULL, pos, &npos, 1, sets, nsets, MAX_SETS, help);
    if (rc || *help) return rc;
    if (npos != 1) {
        fprintf(stderr, "tgc %s: error: expected one %s\nTry 'tgc %s --help'.\n", argv[0],
                strcmp(argv[0], "run") == 0 ? "PLAN or MODEL" : "MODEL", argv[0]);
        return 2;
    }
    *model = pos[0];
    return 0; /* the cross-option checks: tgc_options_check, tgc_run_check (over a plan's options) */
}

/* --micro-batch-size sets a model's `batch` hyperparameter (the library
 * adds it; a plan has its own): refused here with --set batch too, in the
 * command's words. */
static int micro_batch_check(const char *cmd, const tgc_options *o, const cli_override *sets, int nsets)
{
    const char *mbs = tgc_options_get(o, "micro-batch-size");
    int64_t b = 0; /* the option table has read it: a positive integer when given */
    if (mbs && !tgc_parse_i64(mbs, &b)) b = 0;
    return b ? cli_override_batch_check(cmd, sets, nsets, b) : 0;
}

static bool option_on(const tgc_options *o, const char *name)
{
    const char *v = tgc_options_get(o, name);
    return v && strcmp(v, "true") == 0;
}

/* The report options are tgc_plan_report's arguments, not the compile's. */
typedef struct reports {
    bool kernels, gemms, fusion;
    char *arch; /* --cuda-arch, or NULL: sm_80 */
} reports;

static void reports_take(tgc_options *o, reports *r)
{
    r->kernels = option_on(o, "kernel-report");
    r->gemms = option_on(o, "gemm-report");
    r->fusion = option_on(o, "fusion-report");
    const char *arch = tgc_options_get(o, "cuda-arch");
    r->arch = arch ? strdup(arch) : NULL;
    static const char *const names[] = {"kernel-report", "gemm-report", "fusion-report", "cuda-arch"};
    for (size_t i = 0; i < N_OF(names); i++) tgc_options_reset(o, names[i]);
}

static int compile_checks(tgc_options *o, cli_override *sets, int *nsets)
{
    bool cuda = strcmp(tgc_options_get(o, "backend"), "cuda") == 0;
    if (option_on(o, "kernel-report") && !cuda)
        return cli_usage_error("compile", "--kernel-report reports the CUDA kernels; add --backend cuda");
    if (option_on(o, "gemm-report") && !cuda)
        return cli_usage_error("compile", "--gemm-report reports the cuBLASLt GEMMs; add --backend cuda");
    if (!tgc_options_get(o, "output") && !option_on(o, "kernel-report") && !option_on(o, "fusion-report") &&
        !option_on(o, "gemm-report"))
        return cli_usage_error("compile", "missing -o PLAN");
    return micro_batch_check("compile", o, sets, *nsets);
}

static void print_figures(const tgc_plan *plan, const char *output)
{
    tgc_plan_figures f;
    if (tgc_plan_figures_get(plan, &f) != TGC_OK) return;
    printf("%s: %d kernels and %d GEMMs per step; parameters %lld bytes, activations %lld bytes "
           "(peak of the plan), workspace %lld bytes\n", output, f.kernels, f.gemms, (long long)f.param_bytes,
           (long long)f.act_bytes, (long long)f.workspace_bytes);
    printf("%s: norm/dropout/residual activations %lld bytes per rank%s\n", output, (long long)f.region_bytes,
           f.sequence_parallel ? " (split along the sequence)" : "");
}

int cli_compile(int argc, char **argv, void (*help_fn)(FILE *))
{
    tgc_options *o = NULL;
    cli_override sets[MAX_SETS];
    int nsets = 0;
    bool help = false;
    const char *model = NULL;
    int rc = parse(&o, argc, argv, &model, sets, &nsets, &help);
    if (help) {
        help_fn(stdout);
        rc = -1;
    }
    if (rc == 0) rc = exit_status(tgc_options_check(o));
    if (rc == 0) rc = compile_checks(o, sets, &nsets);
    reports r = {0};
    tgc_plan *plan = NULL;
    if (rc == 0) {
        char *output = tgc_options_get(o, "output") ? strdup(tgc_options_get(o, "output")) : NULL;
        reports_take(o, &r);
        rc = exit_status(tgc_compile_file(model, o, &plan)); /* and the plan written to -o */
        if (rc == 0 && output) print_figures(plan, output);
        free(output);
    }
    if (rc == 0 && r.kernels) rc = exit_status(tgc_plan_report(plan, TGC_REPORT_KERNELS, r.arch, stdout));
    if (rc == 0 && r.gemms) rc = exit_status(tgc_plan_report(plan, TGC_REPORT_GEMMS, NULL, stdout));
    if (rc == 0 && r.fusion) rc = exit_status(tgc_plan_report(plan, TGC_REPORT_FUSION, NULL, stdout));
    free(r.arch);
    tgc_plan_free(plan);
    tgc_options_free(o);
    cli_overrides_free(sets, nsets);
    return rc < 0 ? 0 : rc;
}

/* What tgc run refuses before loading anything: the options of tgc
 * compile (the option table's, in its order); over a plan, --set too. */
static int run_refusals(const tgc_options *o, const char *model, const cli_override *sets, int nsets)
{
    static const struct { const char *name; bool flag; } compile_only[] = {
        {"cuda-arch", false}, {"gemm-report", true}, {"kernel-report", true}, {"fusion-report", true}, {"output", false}};
    char why[1024] = "";
    size_t len = 0;
    int n = 0;
    for (size_t i = 0; i < N_OF(compile_only) && len < sizeof why; i++) {
        if (!tgc_options_given(o, compile_only[i].name)) continue;
        const char *v = compile_only[i].flag ? NULL : tgc_options_get(o, compile_only[i].name);
        len += (size_t)snprintf(why + len, sizeof why - len, "%s--%s%s%s", n++ ? ", " : "", compile_only[i].name,
                                v ? " " : "", v ? v : "");
    }
    if (n) {
        fprintf(stderr, "tgc run: error: %s %s of tgc compile\nTry 'tgc run --help'.\n", why,
                n > 1 ? "are options" : "is an option");
        return 2;
    }
    if (nsets && tgc_file_is_plan(model)) {
        char given[256];
        cli_override_str(&sets[0], given, sizeof given);
        fprintf(stderr, "tgc: error: %s: overrides apply to models; '%s' is a compiled plan\n", given, model);
        return 2;
    }
    return 0;
}

/* SIGINT and SIGTERM while the plan is compiled or loaded and the ranks
 * made (minutes, for a large model): recorded, so that the run stops
 * before its first step saying so, instead of ending without a word; the
 * trainer's own handling (tgc_trainer_run) takes over for the steps. */
static volatile sig_atomic_t setup_signal;

static void on_setup_signal(int sig)
{
    if (!setup_signal) setup_signal = sig;
}

typedef struct setup_handlers {
    struct sigaction old_int, old_term;
} setup_handlers;

static void setup_handlers_install(setup_handlers *h)
{
    struct sigaction sa = {.sa_handler = on_setup_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &h->old_int);
    sigaction(SIGTERM, &sa, &h->old_term);
}

/* The handlers put back; the signal that came meanwhile (0: none), said. */
static int setup_handlers_restore(const setup_handlers *h)
{
    sigaction(SIGINT, &h->old_int, NULL);
    sigaction(SIGTERM, &h->old_term, NULL);
    int sig = setup_signal;
    if (sig)
        fprintf(stderr, "tgc run: stopped by %s before the first step\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    return sig;
}

/* The plan (loaded with o over its options, or the model compiled) on
 * its ranks, trained to --train-iters: the exit status (0 on a process
 * that leaves a launcher's world of the wrong size to rank 0's report). */
static int run(const char *model, const tgc_options *o)
{
    tgc_plan *plan = NULL;
    tgc_trainer *tr = NULL;
    int leave = 0, signal = 0;
    tgc_status st;
    setup_handlers sh;
    setup_handlers_install(&sh);
    if (tgc_file_is_plan(model)) { /* by content: a damaged plan is reported as one */
        st = tgc_plan_load(model, o, &plan);
        if (st == TGC_OK) st = tgc_run_check(plan, NULL, &leave);
    } else {
        st = tgc_run_check(NULL, o, &leave);
        if (st == TGC_OK) st = tgc_compile_file(model, o, &plan);
    }
    if (st == TGC_OK && !setup_signal) st = tgc_trainer_new(plan, NULL, &tr);
    int early = setup_handlers_restore(&sh);
    if (early) {
        tgc_trainer_free(tr); /* no step ran: nothing trained to write */
        tgc_plan_free(plan);
        return 128 + early;
    }
    if (st == TGC_OK) st = tgc_trainer_run(tr, &signal);
    tgc_status end = tgc_trainer_free(tr); /* the outputs (--export, --trace) and the figures */
    if (st == TGC_OK) st = end;
    tgc_plan_free(plan);
    return leave ? 0 : signal ? 128 + signal : exit_status(st);
}

int cli_run(int argc, char **argv, void (*help_fn)(FILE *))
{
    tgc_options *o = NULL;
    cli_override sets[MAX_SETS];
    int nsets = 0;
    bool help = false;
    const char *model = NULL;
    int rc = parse(&o, argc, argv, &model, sets, &nsets, &help);
    if (help) {
        help_fn(stdout);
        cli_options_plan_usage(stdout);
    } else if (rc == 0) {
        rc = run_refusals(o, model, sets, nsets);
        /* --micro-batch-size sets a model's `batch` (a plan has its own). */
        if (rc == 0 && !tgc_file_is_plan(model)) rc = micro_batch_check("run", o, sets, nsets);
        if (rc == 0) rc = run(model, o);
    }
    tgc_options_free(o);
    cli_overrides_free(sets, nsets);
    return help ? 0 : rc;
}
