/* The command line's side of the option table (the library has the
 * table: tgc_option_count, tgc_option_info_get): the scanner's options of
 * each command, and the help text. */
#include "cli/config.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/overrides.h"
#include "cli/util.h"
#include "tgc.h"

/* Row i of the table (i in range: a programmer error otherwise). */
static tgc_option_info row(int i)
{
    tgc_option_info o;
    if (tgc_option_info_get(i, &o) != TGC_OK) abort();
    return o;
}

static void choices_str(const char *const *choices, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; choices[i] && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? "|" : "", choices[i]);
}

void cli_options_usage(FILE *out)
{
    for (int i = 0; i < tgc_option_count(); i++) {
        const tgc_option_info r = row(i), *o = &r;
        char name[96];
        snprintf(name, sizeof name, "--%s%s%s%s", o->name, o->alias ? ", " : "",
                 o->alias ? (strlen(o->alias) == 1 ? "-" : "--") : "", o->alias ? o->alias : "");
        const char *arg = o->kind == TGC_OPTION_FLAG ? "" : o->kind == TGC_OPTION_INT ? " N"
                        : o->kind == TGC_OPTION_FLOAT ? " X" : o->kind == TGC_OPTION_CHOICE ? " CHOICE"
                        : o->kind == TGC_OPTION_PATH ? " PATH" : o->kind == TGC_OPTION_WORDS ? " [WEIGHT] PATH ..."
                        : " SPEC";
        char all[128] = "";
        if (o->choices) choices_str(o->choices, all, sizeof all);
        fprintf(out, "  %s%s\n      %s%s%s%s\n", name, arg, o->help, o->choices ? " (" : "", all,
                o->choices ? ")" : "");
    }
    cli_model_opts_usage(out);
}


enum { ID_SET = 1, ID_HELP = 900, ID_OPT = 1000 }; /* --set and the model flags: ID_SET, ID_SET + 1, ... */

static bool option_taken(const tgc_cmdline *cl, const tgc_option_info *o)
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
    for (int i = 0; i < tgc_option_count(); i++) {
        tgc_option_info o = row(i);
        if (!option_taken(cl, &o)) continue;
        bool value = o.kind != TGC_OPTION_FLAG, list = o.kind == TGC_OPTION_LIST;
        lo[k++] = (cli_opt){o.name, value, list, ID_OPT + i};
        if (o.alias) lo[k++] = (cli_opt){o.alias, value, list, ID_OPT + i};
    }
    lo[k++] = (cli_opt){"help", false, true, ID_HELP};
    lo[k++] = (cli_opt){"h", false, true, ID_HELP};
    k += cli_model_opts(lo + k, ID_SET);
    for (int i = 0; cl && i < cl->nextra; i++) {
        if (cl->extra[i].id < TGC_CMDLINE_ID_MIN || cl->extra[i].id >= ID_HELP) abort(); /* a programmer error */
        lo[k++] = cl->extra[i];
    }
    return k;
}

/* A scan's options go onto the library's options: its messages are the
 * table's (tgc_set_diagnostics writes them to standard error). Each
 * returns 0, or 2 after the usage error. */
static int options_status(tgc_status st) { return st == TGC_OK ? 0 : 2; }

int cli_options_parse_cmd(tgc_options *opts, int argc, char **argv, const tgc_cmdline *cl, const char **pos, int *npos,
                          int maxpos, cli_override *sets, int *nsets, int maxsets, bool *help)
{
    if (cl && cl->nextra > TGC_CMDLINE_EXTRA_MAX) abort(); /* a programmer error */
    cli_opt *lo = cli_xmalloc((size_t)(2 * tgc_option_count() + 2 + CLI_MODEL_OPTS_MAX + TGC_CMDLINE_EXTRA_MAX) *
                              sizeof *lo);
    cli_args a;
    cli_args_init(&a, argv[0], argc, argv, lo, config_cli_opts(cl, lo));
    *npos = 0;
    *help = false;
    int rc = 0;
    for (int id; rc == 0 && (id = cli_args_next(&a)) != CLI_ARGS_END;) {
        if (id == CLI_ARGS_ERROR) rc = 2;
        else if (id == CLI_ARGS_POSITIONAL) {
            if (*npos >= maxpos) rc = cli_usage_error(argv[0], "unexpected argument '%s'", a.value);
            else pos[(*npos)++] = a.value;
        } else if (id == ID_HELP) *help = true;
        else if (cli_model_opt_is(id, ID_SET)) {
            rc = cli_model_opt_add(argv[0], id, ID_SET, a.value, sets, nsets, maxsets);
            if (rc == 0) rc = cli_overrides_apply(opts, &sets[*nsets - 1], 1);
        } else if (id < ID_HELP) rc = cl->on_extra(cl->user, id, a.given, a.value);
        else if (row(id - ID_OPT).kind == TGC_OPTION_WORDS) {
            /* The value and the arguments after it up to the next option. */
            int n = 1;
            const char **w = cli_xmalloc(2 * sizeof *w);
            w[0] = a.value;
            for (const char *next; (next = cli_args_next_word(&a));) {
                w = cli_xrealloc(w, (size_t)(n + 2) * sizeof *w);
                w[n++] = next;
            }
            rc = options_status(tgc_options_set_words(opts, row(id - ID_OPT).name, w, n));
            free(w);
        } else rc = options_status(tgc_options_set(opts, row(id - ID_OPT).name, a.value));
    }
    free(lo);
    return rc;
}

static void usage_names(FILE *out, tgc_option_use use)
{
    int col = 4;
    fputs("    ", out);
    for (int i = 0; i < tgc_option_count(); i++) {
        if (row(i).use != use) continue;
        int w = (int)strlen(row(i).name) + 3;
        if (col > 4 && col + w > 100) {
            fputs("\n    ", out);
            col = 4;
        }
        fprintf(out, "%s--%s", col > 4 ? " " : "", row(i).name);
        col += w;
    }
    fputc('\n', out);
}

void cli_options_plan_usage(FILE *out)
{
    fputs("\nover a PLAN (docs/runtime.md, \"Plans\"), the options above are\n", out);
    fputs("  applied over the plan's values at run time:\n", out);
    usage_names(out, TGC_OPTION_RUNTIME);
    fputs("  compiled in: given with another value than the plan's, they recompile it from its lowered IR\n"
          "  (standard error says so):\n", out);
    usage_names(out, TGC_OPTION_PASSES);
    fputs("  refused with another value than the plan's (they change the model, as --set does):\n", out);
    usage_names(out, TGC_OPTION_MODEL);
    fputs("  refused by tgc run, PLAN or MODEL (options of tgc compile):\n", out);
    usage_names(out, TGC_OPTION_COMPILE);
    fputs("  refused whatever their value, as --set is (they override the model's hyperparameters, fixed\n"
          "  in a plan):\n    ", out);
    for (int i = 0, col = 4; tgc_model_flag(i); i++) {
        int w = (int)strlen(tgc_model_flag(i)) + 3;
        if (col > 4 && col + w > 100) {
            fputs("\n    ", out);
            col = 4;
        }
        fprintf(out, "%s--%s", col > 4 ? " " : "", tgc_model_flag(i));
        col += w;
    }
    fputc('\n', out);
}

