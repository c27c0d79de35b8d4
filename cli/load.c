#include "load.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "support/file.h"
#include "passes/pass.h"
#include "runtime/plan.h"
#include "support/util.h"

static bool is_ir_input(const char *path, const char *text)
{
    size_t n = strlen(path);
    if (n > 3 && strcmp(path + n - 3, ".ir") == 0) return true;
    while (*text == ' ' || *text == '\n' || *text == '\t' || *text == '\r') text++;
    return strncmp(text, "tgc-ir", 6) == 0;
}

ir_graph *cli_load_model(const char *path, const fe_override *sets, int nsets, diag *d)
{
    size_t len;
    char why[256];
    char *text = file_read(path, FILE_MODEL, &len, why, sizeof why);
    if (!text) {
        diag_error_plain(d, "cannot read '%s': %s", path, why);
        return NULL;
    }
    const char *shown = strcmp(path, "-") == 0 ? "<stdin>" : path;
    if (memchr(text, 0, len)) {
        diag_error_plain(d, "'%s' is not a text file (it contains a NUL byte)", shown);
        free(text);
        return NULL;
    }
    rt_plan_look plan = rt_plan_sniff_text(text, len);
    if (plan != RT_PLAN_NONE) { /* by content, whatever the name */
        diag_error_plain(d, "'%s' is %s, not a model (a .tg file or text IR)", shown,
                         plan == RT_PLAN_HEADER ? "a compiled plan" : "a damaged compiled plan (its header is not "
                         "'tgc-plan')");
        free(text);
        return NULL;
    }
    ir_graph *g;
    if (is_ir_input(path, text)) {
        if (nsets) {
            char given[256];
            cli_override_str(&sets[0], given, sizeof given);
            diag_error_plain(d, "%s: overrides apply to .tg models, and '%s' is text IR", given, shown);
            free(text);
            return NULL;
        }
        g = ir_graph_read(text, len, shown, d);
    } else {
        g = fe_compile(shown, text, len, sets, nsets, d);
    }
    free(text);
    if (g && !ir_graph_verify(g, d)) {
        ir_graph_free(g);
        return NULL;
    }
    return g;
}

int cli_model_opts(cli_opt *out, int base)
{
    int n = 0;
    out[n++] = (cli_opt){"set", true, true, base};
    for (int i = 0; fe_model_flags[i]; i++) {
        TGC_ASSERT(n < CLI_MODEL_OPTS_MAX);
        out[n++] = (cli_opt){fe_model_flags[i], true, false, base + 1 + i};
    }
    return n;
}

bool cli_model_opt_is(int id, int base)
{
    int nflags = 0;
    while (fe_model_flags[nflags]) nflags++;
    return id >= base && id <= base + nflags;
}

int cli_model_opt_add(const char *cmd, int id, int base, const char *value, fe_override *sets, int *nsets,
                      int maxsets)
{
    /* One place stays free for cli_override_batch. */
    if (*nsets >= maxsets - 1) return cli_usage_error(cmd, "more than %d --set and model-flag overrides", maxsets - 1);
    if (id > base) {
        sets[(*nsets)++] = (fe_override){xstrdup(fe_model_flags[id - base - 1]), value, true};
        return 0;
    }
    const char *eq = strchr(value, '=');
    if (!eq || eq == value || !eq[1]) return cli_usage_error(cmd, "--set '%s': expected NAME=VALUE", value);
    /* argv strings live for the whole run; split a copy. */
    char *name = xstrdup(value);
    name[eq - value] = 0;
    sets[(*nsets)++] = (fe_override){name, name + (eq - value) + 1, false};
    return 0;
}

void cli_override_str(const fe_override *o, char *buf, size_t n)
{
    snprintf(buf, n, o->flag ? "--%s %s" : "--set %s=%s", o->name, o->value);
}

void cli_model_opts_usage(FILE *out)
{
    fprintf(out, "  --set NAME=VALUE\n      override a hyperparameter of the model (repeatable)\n");
    for (int i = 0; fe_model_flags[i]; i++)
        fprintf(out, "  --%s X\n      Megatron-LM's model option: sets the hyperparameter the model binds to it "
                "(hparam NAME = ... flag %s; docs/dsl.md)\n", fe_model_flags[i], fe_model_flags[i]);
}

int cli_override_batch(const char *cmd, fe_override *sets, int *nsets, int maxsets, int64_t b)
{
    for (int i = 0; i < *nsets; i++)
        if (!sets[i].flag && strcmp(sets[i].name, "batch") == 0)
            return cli_usage_error(cmd, "--micro-batch-size %lld and --set batch=%s both set hyperparameter 'batch'; "
                                   "give one", (long long)b, sets[i].value);
    TGC_ASSERT(*nsets < maxsets);
    char *kv = xmalloc(64);
    snprintf(kv, 64, "batch%c%lld", 0, (long long)b);
    sets[(*nsets)++] = (fe_override){kv, kv + 6, false};
    return 0;
}

bool cli_param_groups_match(const ir_graph *g, const char *groups, diag *d)
{
    if (!groups || !*groups) return true;
    int nrules = 1;
    for (const char *p = groups; *p; p++) nrules += *p == ';';
    bool *used = xcalloc((size_t)nrules, sizeof *used);
    for (int i = 0; i < g->nnodes; i++) {
        if (!(g->nodes[i]->flags & IR_NF_PARAM)) continue;
        pass_param_group grp;
        pass_param_group_of(g->nodes[i], groups, &grp);
        if (grp.rule >= 0 && grp.rule < nrules) used[grp.rule] = true;
    }
    bool ok = true;
    int rule = 0;
    for (const char *s = groups; *s; rule++) {
        size_t len = strcspn(s, ";");
        if (!used[rule]) {
            diag_error_plain(d, "--param-group %.*s: no parameter of model '%s' is in this group (the glob matches "
                             "none, or a later --param-group takes each it matches); `tgc check MODEL --params` "
                             "lists the parameters", (int)len, s, g->model);
            ok = false;
        }
        s += len + (s[len] == ';');
    }
    free(used);
    return ok;
}
