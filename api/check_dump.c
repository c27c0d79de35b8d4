/* tgc_check and tgc_dump_ir (include/tgc.h): `tgc check` and `tgc
 * dump-ir`'s work after their arguments: the model loaded with its
 * overrides, verified, summarised; the passes run one by one and the IR
 * (or the pipeline schedule, or a rank's compiled step) printed. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "codegen/step.h"
#include "passes/pass.h"
#include "passes/pipeline.h"
#include "runtime/io/trace.h"
#include "support/file.h"
#include "support/util.h"
#include "tgc.h"

/* ---- check ---------------------------------------------------------------- */

static void human(double v, char *buf, size_t n)
{
    const char *unit[] = {"", "K", "M", "G", "T", "P"};
    int u = 0;
    while (v >= 1000.0 && u < 5) { v /= 1000.0; u++; }
    snprintf(buf, n, u ? "%.2f%s" : "%.0f%s", v, unit[u]);
}

static void print_params(const ir_graph *g, const char *param_groups, FILE *out)
{
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = g->nodes[i];
        if (!(n->flags & IR_NF_PARAM)) continue;
        char type[128];
        ir_type_str(n->dtype, &n->shape, type, sizeof type);
        const char *init = ir_attr_sym(n, "init");
        fprintf(out, "%-48s %-22s %12lld  %s", n->name, type, (long long)ir_shape_numel(&n->shape), init);
        if (strcmp(init, "normal") == 0) fprintf(out, "(%g)", ir_attr_float(n, "std"));
        pass_param_group grp; /* as the optimizer pass will group it */
        pass_param_group_of(n, param_groups, &grp);
        fprintf(out, "  %s", grp.no_decay ? "no_decay" : "decay");
        if (grp.rule >= 0) fprintf(out, " lr_mult=%g wd_mult=%g", grp.lr_mult, grp.wd_mult);
        fprintf(out, "\n");
    }
}

/* What compile and run refuse, check refuses too: text IR with no loss or
 * no parameters (the front end says the same of a .tg model). */
static bool check_trainable(const ir_graph *g, const char *path, diag *d)
{
    const char *why = ir_graph_untrainable(g);
    const ir_node *loss = ir_graph_loss(g);
    if (why)
        diag_error(d, loss && loss->loc.file ? loss->loc : (src_loc){diag_intern(path), 0, 0}, "model '%s' %s",
                   g->model, why);
    return !why;
}

static void print_summary(const ir_graph *g, FILE *out)
{
    int64_t tokens = ir_graph_tokens(g);
    double fwd = (double)ir_graph_forward_flops(g);
    char p[32], f[32];
    human((double)ir_graph_param_count(g), p, sizeof p);
    human(tokens ? 3.0 * fwd / (double)tokens : 0.0, f, sizeof f);
    strbuf after; /* IR that passes went through: its op count is of that graph */
    sb_init(&after);
    for (int i = 0; i < g->npasses_run; i++) sb_printf(&after, "%s%s", i ? ", " : " (the IR after ", g->passes_run[i]);
    if (g->npasses_run) sb_putc(&after, ')');
    fprintf(out, "%s: ok: %d layers, %s parameters (%lld), %sFLOP per token (forward + backward), %d ops%s\n",
            g->model, g->num_layers, p, (long long)ir_graph_param_count(g), f, g->nnodes, after.s ? after.s : "");
    sb_free(&after);
}

tgc_status tgc_check(const tgc_options *opts, const tgc_check_args *args_in, FILE *out)
{
    api_call a;
    api_call_begin(&a);
    tgc_check_args args;
    if (!api_args_copy(&args, sizeof args, args_in, "tgc_check", &a)) return api_call_end(&a, TGC_EINVAL);
    if (!args.model || !out) {
        fprintf(a.f, "tgc: error: tgc_check: args->model and out must be given\n");
        return api_call_end(&a, TGC_EINVAL);
    }
    strbuf joined;
    sb_init(&joined);
    for (int i = 0; args.param_groups && args.param_groups[i]; i++) {
        char err[512];
        if (!pass_param_groups_check(args.param_groups[i], err, sizeof err)) {
            sb_free(&joined);
            return api_call_end(&a, api_usage(&a, "check", "--param-group: %s", err));
        }
        sb_printf(&joined, "%s%s", i ? ";" : "", args.param_groups[i]);
    }
    int nsets;
    const fe_override *sets = api_options_sets(opts, &nsets);
    ir_graph *g = api_model_load(args.model, sets, nsets, &a.d);
    if (g && (!api_param_groups_match(g, joined.s, &a.d) || !check_trainable(g, args.model, &a.d))) {
        ir_graph_free(g);
        g = NULL;
    }
    if (g && args.params) print_params(g, joined.s, out);
    sb_free(&joined);
    if (!g) return api_call_end(&a, TGC_ERROR);
    print_summary(g, out);
    ir_graph_free(g);
    return api_call_end(&a, TGC_OK);
}

/* ---- dump-ir -------------------------------------------------------------- */

typedef struct dump_opts {
    const char *format;  /* text, dot, json, schedule */
    const char *after;   /* NULL: after the last pass */
    bool after_all;
    strbuf out;
    pass_options popts;
    pass_given given[TGC_CONFIG_GIVEN_MAX + 1]; /* the options given, checked against IR's passes line */
    int ngiven;
    char kv_option[40]; /* "--kv-cache T" when given */
    const char *trace;   /* --trace: the simulated schedule as a Chrome trace */
    int64_t rank;        /* --rank R: rank R's compiled step instead of the IR (-1: the IR) */
    bool overlap_grads;  /* --overlap-grad-reduce, for --rank */
    double tf, tb;       /* --pp-times */
    bool traced;
    diag *d;
} dump_opts;

/* After the schedule pass: each rank's instruction list and the simulated
 * figures (as comments after text IR, so the output still reads back), and
 * the Chrome trace of the simulated step. */
static void dump_schedule(dump_opts *o, const ir_graph *g, bool print)
{
    pipe_schedule s;
    if (!pipe_schedule_from_graph(g, &o->popts, &s, o->d)) return;
    pipe_sim sim;
    char err[2048];
    if (!pipe_simulate(&s, o->tf, o->tb, &sim, err, sizeof err)) {
        diag_error_plain(o->d, "pipeline schedule: %s", err);
    } else {
        bool alone = strcmp(o->format, "schedule") == 0;
        char *lists = pipe_schedule_print(&s, true), *figures = pipe_sim_print(&s, &sim);
        for (int k = 0; print && (alone || strcmp(o->format, "text") == 0) && k < 2; k++)
            for (char *line = k ? figures : lists, *nl; *line; line = nl + 1) {
                nl = strchr(line, '\n');
                sb_printf(&o->out, "%s%.*s\n", alone ? "" : "# ", (int)(nl - line), line);
            }
        free(lists);
        free(figures);
        if (o->trace) {
            size_t n = 0;
            for (int r = 0; r < s.p; r++) n += (size_t)s.len[r];
            rt_trace *t = rt_trace_new(n);
            rt_trace_schedule(t, &s, &sim, 1000.0); /* one time unit = 1 ms */
            if (!rt_trace_write(t, o->trace, err, sizeof err)) diag_error_plain(o->d, "%s", err);
            rt_trace_free(t);
            o->traced = true;
        }
    }
    pipe_sim_free(&sim, s.p);
    pipe_schedule_free(&s);
}

static void dump_append(dump_opts *o, const char *pass, const ir_graph *g)
{
    if (strcmp(o->format, "schedule") == 0) return;
    char *s = strcmp(o->format, "dot") == 0 ? ir_graph_dot(g)
            : strcmp(o->format, "json") == 0 ? ir_graph_json(g) : ir_graph_print(g);
    if (o->after_all && strcmp(o->format, "text") == 0) sb_printf(&o->out, "# ---- after %s ----\n", pass);
    sb_puts(&o->out, s);
    free(s);
}

static void dump_after(const char *pass, const ir_graph *g, void *user)
{
    dump_opts *o = user;
    bool print = o->rank < 0 && (o->after_all || (o->after && strcmp(o->after, pass) == 0));
    if (print) dump_append(o, pass, g);
    if (strcmp(pass, "schedule") == 0 && (print || o->trace)) dump_schedule(o, g, print);
}

/* The text onto out, or atomically into the file path (opts' -o). */
static bool write_output(const char *path, const char *text, FILE *out, diag *d)
{
    if (!path || strcmp(path, "-") == 0) {
        if (fputs(text, out) >= 0 && fflush(out) == 0) return true;
        diag_error_plain(d, "cannot write the %s: %s", out == stdout ? "standard output" : "output", strerror(errno));
        clearerr(out);
        return false;
    }
    char why[256];
    if (!file_write_atomic(path, text, strlen(text), why, sizeof why)) {
        diag_error_plain(d, "cannot write '%s': %s", path, why);
        return false;
    }
    return true;
}

static bool run_dump(const char *model, const fe_override *sets, int nsets, dump_opts *o, const pass_info **list,
                     int n, const char *outpath, FILE *out, diag *d)
{
    o->d = d;
    ir_graph *g = api_model_load(model, sets, nsets, d);
    bool ok = false;
    if (g) {
        sb_init(&o->out);
        dump_after(PASS_LOWER, g, o);
        pass_ctx ctx = {.d = d, .verify_each = true, .opts = &o->popts, .given = o->given, .ngiven = o->ngiven};
        if (!(o->after && strcmp(o->after, PASS_LOWER) == 0) &&
            pass_run_list(g, list, n, &ctx, dump_after, o)) {
            if (o->rank >= 0) {
                char *prog = cg_step_dump(g, &o->popts, o->rank, o->overlap_grads, d);
                if (prog) sb_puts(&o->out, prog);
                free(prog);
            } else if (!o->after && !o->after_all) dump_append(o, "", g);
            if (o->trace && !o->traced) diag_error_plain(d, "--trace: the schedule pass did not run");
        }
        if (d->nerrors == 0) ok = write_output(outpath, o->out.s ? o->out.s : "", out, d);
        sb_free(&o->out);
        ir_graph_free(g);
    }
    return ok && d->nerrors == 0;
}

/* The passes' options as the configuration gives them; what dump-ir does
 * not take keeps tgc run's defaults. */
static tgc_status dump_pass_options(const tgc_config *c, int64_t kv_positions, pass_options *po, api_call *a)
{
    const int64_t deg[] = {c->tp, c->pp, c->dp, c->vp};
    static const char *const names[] = {"tensor-model-parallel-size", "pipeline-model-parallel-size",
                                        "data-parallel-size", "num-virtual-stages-per-pipeline-rank"};
    for (int i = 0; i < 4; i++)
        if (deg[i] < 1 || deg[i] > (1 << 24))
            return api_usage(a, "dump-ir", "--%s %lld: expected a positive integer", names[i], (long long)deg[i]);
    if (c->recompute_num_layers < 1)
        return api_usage(a, "dump-ir", "--recompute-num-layers 0: expected a positive integer");
    if (c->fuse && c->no_fuse) return api_usage(a, "dump-ir", "--fuse and --no-fuse exclude each other");
    char err[256];
    unsigned fusions;
    if (c->fuse && !pass_fuse_parse(c->fuse, &fusions, err, sizeof err))
        return api_usage(a, "dump-ir", "--fuse: %s", err);
    pass_options all;
    tgc_config_pass_options(c, &all);
    /* The options dump-ir does not take keep tgc run's and compile's
     * defaults (c holds them), so the IR it prints trains as the model. */
    *po = all;
    po->kv_positions = kv_positions;
    return TGC_OK;
}

/* The combinations of --after, --after-all and --format. */
static tgc_status dump_check_output(dump_opts *o, const pass_info **list, int n, api_call *a)
{
    if (o->after && o->after_all) return api_usage(a, "dump-ir", "--after and --after-all exclude each other");
    if (o->rank >= 0 && (o->after_all || strcmp(o->format, "text") != 0 || (o->after && strcmp(o->after, "schedule") != 0)))
        return api_usage(a, "dump-ir", "--rank prints a rank's program (the schedule pass's, compiled): it takes "
                         "--after schedule or no --after, and no %s", o->after_all ? "--after-all" : o->after &&
                         strcmp(o->after, "schedule") != 0 ? "other --after" : "--format");
    if (o->rank >= 0) o->after = NULL; /* every pass runs: the program needs memplan's offsets */
    if (o->after_all && strcmp(o->format, "json") == 0)
        return api_usage(a, "dump-ir", "--after-all prints text or dot; use --after PASS with --format json");
    if (strcmp(o->format, "schedule") == 0) {
        if (o->after_all || (o->after && strcmp(o->after, "schedule") != 0))
            return api_usage(a, "dump-ir", "--format schedule prints the lists of the schedule pass; drop %s",
                             o->after_all ? "--after-all" : "--after");
        o->after = "schedule";
    }
    if (o->after && strcmp(o->after, PASS_LOWER) != 0) {
        bool found = false;
        for (int i = 0; i < n; i++) found |= strcmp(list[i]->name, o->after) == 0;
        if (!found) return api_usage(a, "dump-ir", "--after %s: that pass is not in the pipeline being run", o->after);
    }
    return TGC_OK;
}

/* The arguments' own checks (what `tgc dump-ir` checks as it scans them). */
static tgc_status dump_args_check(const tgc_dump_ir_args *x, const pass_info **list, int *n, api_call *a)
{
    static const char *const formats[] = {"text", "dot", "json", "schedule"};
    bool format = false;
    for (size_t i = 0; i < ARRAY_LEN(formats); i++) format |= strcmp(x->format, formats[i]) == 0;
    if (!format)
        return api_usage(a, "dump-ir", "--format '%s': expected text, dot, json or schedule", x->format);
    if (x->after && strcmp(x->after, PASS_LOWER) != 0 && !pass_lookup(x->after)) {
        fprintf(a->f, "tgc dump-ir: error: --after: unknown pass '%s'; the passes are: %s\n", x->after, pass_names());
        return TGC_EUSAGE;
    }
    if (!(x->pp_forward > 0 && x->pp_forward < 1e9 && x->pp_backward > 0 && x->pp_backward < 1e9))
        return api_usage(a, "dump-ir", "--pp-times '%g,%g': expected two positive numbers TF,TB (e.g. 1,2)",
                         x->pp_forward, x->pp_backward);
    if (x->kv_cache < 0)
        return api_usage(a, "dump-ir", "--kv-cache '%lld': expected a positive number of positions",
                         (long long)x->kv_cache);
    if (x->rank < -1 || x->rank > (1 << 24))
        return api_usage(a, "dump-ir", "--rank '%lld': expected a rank number (0, 1, ...)", (long long)x->rank);
    *n = 0;
    if (!x->passes) {
        for (int i = 0; i < pass_count(); i++) list[(*n)++] = pass_at(i);
        return TGC_OK;
    }
    for (int i = 0; x->passes[i]; i++) {
        const pass_info *p = pass_lookup(x->passes[i]);
        if (!p || *n == 64) {
            fprintf(a->f, "tgc dump-ir: error: --passes: unknown pass '%s'; the passes are: %s\n", x->passes[i],
                    pass_names());
            return TGC_EUSAGE;
        }
        list[(*n)++] = p;
    }
    return TGC_OK;
}

tgc_status tgc_dump_ir(const tgc_options *opts, const tgc_dump_ir_args *args_in, FILE *out)
{
    api_call a;
    api_call_begin(&a);
    tgc_dump_ir_args x;
    if (!api_args_copy(&x, sizeof x, args_in, "tgc_dump_ir", &a)) return api_call_end(&a, TGC_EINVAL);
    if (!x.model || !out) {
        fprintf(a.f, "tgc: error: tgc_dump_ir: args->model and out must be given\n");
        return api_call_end(&a, TGC_EINVAL);
    }
    if (!x.format) x.format = "text";
    /* What an older caller's struct lacks keeps the command line's defaults. */
    if (args_in->size <= offsetof(tgc_dump_ir_args, pp_forward)) x.pp_forward = 1.0;
    if (args_in->size <= offsetof(tgc_dump_ir_args, pp_backward)) x.pp_backward = 2.0;
    if (args_in->size <= offsetof(tgc_dump_ir_args, rank)) x.rank = -1;
    const pass_info *list[64];
    int n = 0;
    tgc_status st = dump_args_check(&x, list, &n, &a);
    if (st != TGC_OK) return api_call_end(&a, st);
    const tgc_config *c = api_options_config(opts);
    dump_opts o = {.format = x.format, .after = x.after, .after_all = x.after_all, .tf = x.pp_forward,
                   .tb = x.pp_backward, .rank = x.rank};
    st = dump_pass_options(c, x.kv_cache, &o.popts, &a);
    o.ngiven = tgc_config_pass_given(c, o.given, TGC_CONFIG_GIVEN_MAX);
    if (x.kv_cache) { /* dump-ir's own option, read by the kvcache pass */
        snprintf(o.kv_option, sizeof o.kv_option, "--kv-cache %lld", (long long)x.kv_cache);
        o.given[o.ngiven++] = (pass_given){"kvcache", "positions", o.kv_option};
    }
    o.trace = c->trace;
    o.overlap_grads = c->overlap_grad_reduce;
    fe_override sets[API_OVERRIDES_MAX];
    int nsets = 0;
    char batch[32];
    if (st == TGC_OK) st = api_model_overrides(opts, "dump-ir", x.model, sets, &nsets,
                                               batch, sizeof batch, &a);
    if (st == TGC_OK) st = dump_check_output(&o, list, n, &a);
    if (st == TGC_OK && !run_dump(x.model, sets, nsets, &o, list, n, c->output, out, &a.d)) st = TGC_ERROR;
    return api_call_end(&a, st);
}
