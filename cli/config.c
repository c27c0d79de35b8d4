/* The command line's side of the option table (api/config.c has the
 * table): the scanner's options of each command, and the help text. */
#include "config.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/load.h"
#include "frontend/frontend.h"
#include "support/util.h"
#include "tgc.h"

static void choices_str(const char *const *choices, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; choices[i] && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? "|" : "", choices[i]);
}

void tgc_config_usage(FILE *out)
{
    for (int i = 0; i < tgc_config_nopts(); i++) {
        const tgc_opt_def *o = tgc_config_opt_at(i);
        char name[96];
        snprintf(name, sizeof name, "--%s%s%s%s", o->name, o->alias ? ", " : "",
                 o->alias ? (strlen(o->alias) == 1 ? "-" : "--") : "", o->alias ? o->alias : "");
        const char *arg = o->kind == TGC_OPT_FLAG ? "" : o->kind == TGC_OPT_INT ? " N" : o->kind == TGC_OPT_FLOAT ? " X"
                        : o->kind == TGC_OPT_CHOICE ? " CHOICE" : o->kind == TGC_OPT_STR ? " PATH"
                        : o->kind == TGC_OPT_WORDS ? " [WEIGHT] PATH ..." : " SPEC";
        char all[128] = "";
        if (o->choices) choices_str(o->choices, all, sizeof all);
        fprintf(out, "  %s%s\n      %s%s%s%s\n", name, arg, o->help, o->choices ? " (" : "", all,
                o->choices ? ")" : "");
    }
    cli_model_opts_usage(out);
}


enum { ID_SET = 1, ID_HELP = 900, ID_OPT = 1000 }; /* --set and the model flags: ID_SET, ID_SET + 1, ... */

static bool option_taken(const tgc_cmdline *cl, const tgc_opt_def *o)
{
    if (!cl || (!cl->only && !cl->uses)) return true;
    if (cl->uses & (1u << o->use)) return true;
    for (int i = 0; cl->only && cl->only[i]; i++)
        if (strcmp(cl->only[i], o->name) == 0) return true;
    return false;
}

/* The scanner's table: the configuration's options (those cl takes), -h,
 * --help, --set and the model flags, and cl's own. */
static int config_cli_opts(const tgc_cmdline *cl, cli_opt *lo)
{
    int k = 0;
    for (int i = 0; i < tgc_config_nopts(); i++) {
        if (!option_taken(cl, tgc_config_opt_at(i))) continue;
        bool value = tgc_config_opt_at(i)->kind != TGC_OPT_FLAG, list = tgc_config_opt_at(i)->kind == TGC_OPT_LIST;
        lo[k++] = (cli_opt){tgc_config_opt_at(i)->name, value, list, ID_OPT + i};
        if (tgc_config_opt_at(i)->alias) lo[k++] = (cli_opt){tgc_config_opt_at(i)->alias, value, list, ID_OPT + i};
    }
    lo[k++] = (cli_opt){"help", false, true, ID_HELP};
    lo[k++] = (cli_opt){"h", false, true, ID_HELP};
    k += cli_model_opts(lo + k, ID_SET);
    for (int i = 0; cl && i < cl->nextra; i++) {
        TGC_ASSERT(cl->extra[i].id >= TGC_CMDLINE_ID_MIN && cl->extra[i].id < ID_HELP);
        lo[k++] = cl->extra[i];
    }
    return k;
}

/* Where a scan's options go: a configuration, or the library's options
 * (include/tgc.h). Each returns 0, or 2 after the usage error. */
typedef struct row_sink {
    int (*set)(void *to, int row, const char *value);
    int (*words)(void *to, int row, const char *const *w, int n);
    int (*model)(void *to, const fe_override *o); /* --set or a model flag, checked; NULL: kept in sets only */
    void *to;
} row_sink;

static int scan(const row_sink *sink, int argc, char **argv, const tgc_cmdline *cl, const char **pos, int *npos,
                int maxpos, fe_override *sets, int *nsets, int maxsets, bool *help)
{
    cli_opt lo[2 * TGC_CONFIG_NOPTS_MAX + 2 + CLI_MODEL_OPTS_MAX + TGC_CMDLINE_EXTRA_MAX];
    TGC_ASSERT(!cl || cl->nextra <= TGC_CMDLINE_EXTRA_MAX);
    cli_args a;
    cli_args_init(&a, argv[0], argc, argv, lo, config_cli_opts(cl, lo));
    *npos = 0;
    *help = false;
    for (int id; (id = cli_args_next(&a)) != CLI_ARGS_END;) {
        int rc = 0;
        if (id == CLI_ARGS_ERROR) return 2;
        if (id == CLI_ARGS_POSITIONAL) {
            if (*npos >= maxpos) return cli_usage_error(argv[0], "unexpected argument '%s'", a.value);
            pos[(*npos)++] = a.value;
        } else if (id == ID_HELP) *help = true;
        else if (cli_model_opt_is(id, ID_SET)) {
            rc = cli_model_opt_add(argv[0], id, ID_SET, a.value, sets, nsets, maxsets);
            if (rc == 0 && sink->model) rc = sink->model(sink->to, &sets[*nsets - 1]);
        } else if (id < ID_HELP) rc = cl->on_extra(cl->user, id, a.given, a.value);
        else if (tgc_config_opt_at(id - ID_OPT)->kind == TGC_OPT_WORDS) {
            /* The value and the arguments after it up to the next option. */
            int n = 1;
            const char **w = xmalloc(2 * sizeof *w);
            w[0] = a.value;
            for (const char *next; (next = cli_args_next_word(&a));) {
                w = xrealloc(w, (size_t)(n + 2) * sizeof *w);
                w[n++] = next;
            }
            rc = sink->words(sink->to, id - ID_OPT, w, n);
            free(w);
        } else rc = sink->set(sink->to, id - ID_OPT, a.value);
        if (rc) return rc;
    }
    return 0;
}

static int config_set(void *to, int row, const char *value)
{
    tgc_config *c = to;
    int rc = tgc_config_set_to(c, row, value, stderr);
    c->seen[row] = true;
    return rc;
}

static int config_words(void *to, int row, const char *const *w, int n)
{
    tgc_config *c = to;
    tgc_config_set_words(c, row, w, n);
    c->seen[row] = true;
    return 0;
}

int tgc_config_parse_cmd(tgc_config *c, int argc, char **argv, const tgc_cmdline *cl, const char **pos, int *npos,
                         int maxpos, fe_override *sets, int *nsets, int maxsets, bool *help)
{
    row_sink sink = {config_set, config_words, NULL, c};
    return scan(&sink, argc, argv, cl, pos, npos, maxpos, sets, nsets, maxsets, help);
}

/* The library's options: its messages are the table's (tgc_set_diagnostics
 * writes them to standard error). */
static int options_status(tgc_status st) { return st == TGC_OK ? 0 : 2; }

static int options_set(void *to, int row, const char *value)
{
    return options_status(tgc_options_set(to, tgc_config_opt_at(row)->name, value));
}

static int options_words(void *to, int row, const char *const *w, int n)
{
    return options_status(tgc_options_set_words(to, tgc_config_opt_at(row)->name, w, n));
}

static int options_model(void *to, const fe_override *o)
{
    if (o->flag) return options_status(tgc_options_set(to, o->name, o->value));
    char kv[512];
    snprintf(kv, sizeof kv, "%s=%s", o->name, o->value);
    return options_status(tgc_options_set(to, "set", kv));
}

int cli_options_parse_cmd(tgc_options *o, int argc, char **argv, const tgc_cmdline *cl, const char **pos, int *npos,
                          int maxpos, fe_override *sets, int *nsets, int maxsets, bool *help)
{
    row_sink sink = {options_set, options_words, options_model, o};
    return scan(&sink, argc, argv, cl, pos, npos, maxpos, sets, nsets, maxsets, help);
}

int tgc_config_parse(tgc_config *c, int argc, char **argv, const char **pos, int *npos, int maxpos,
                     fe_override *sets, int *nsets, int maxsets, bool *help)
{
    return tgc_config_parse_cmd(c, argc, argv, NULL, pos, npos, maxpos, sets, nsets, maxsets, help);
}


static void usage_names(FILE *out, tgc_opt_use use)
{
    int col = 4;
    fputs("    ", out);
    for (int i = 0; i < tgc_config_nopts(); i++) {
        if (tgc_config_opt_at(i)->use != use) continue;
        int w = (int)strlen(tgc_config_opt_at(i)->name) + 3;
        if (col > 4 && col + w > 100) {
            fputs("\n    ", out);
            col = 4;
        }
        fprintf(out, "%s--%s", col > 4 ? " " : "", tgc_config_opt_at(i)->name);
        col += w;
    }
    fputc('\n', out);
}

void tgc_config_plan_usage(FILE *out)
{
    fputs("\nover a PLAN (docs/runtime.md, \"Plans\"), the options above are\n", out);
    fputs("  applied over the plan's values at run time:\n", out);
    usage_names(out, TGC_USE_RUNTIME);
    fputs("  compiled in: given with another value than the plan's, they recompile it from its lowered IR\n"
          "  (standard error says so):\n", out);
    usage_names(out, TGC_USE_PASSES);
    fputs("  refused with another value than the plan's (they change the model, as --set does):\n", out);
    usage_names(out, TGC_USE_MODEL);
    fputs("  refused by tgc run, PLAN or MODEL (options of tgc compile):\n", out);
    usage_names(out, TGC_USE_COMPILE);
    fputs("  refused whatever their value, as --set is (they override the model's hyperparameters, fixed\n"
          "  in a plan):\n    ", out);
    for (int i = 0, col = 4; fe_model_flags[i]; i++) {
        int w = (int)strlen(fe_model_flags[i]) + 3;
        if (col > 4 && col + w > 100) {
            fputs("\n    ", out);
            col = 4;
        }
        fprintf(out, "%s--%s", col > 4 ? " " : "", fe_model_flags[i]);
        col += w;
    }
    fputc('\n', out);
}

