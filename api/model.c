/* Loading a model for the library and the command line: a .tg file
 * through the front end or text IR through the IR reader (api/internal.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "passes/pass.h"
#include "runtime/plan.h"
#include "support/file.h"
#include "support/util.h"

static bool is_ir_input(const char *path, const char *text)
{
    size_t n = strlen(path);
    if (n > 3 && strcmp(path + n - 3, ".ir") == 0) return true;
    while (*text == ' ' || *text == '\n' || *text == '\t' || *text == '\r') text++;
    return strncmp(text, "tgc-ir", 6) == 0;
}

void api_override_str(const fe_override *o, char *buf, size_t n)
{
    snprintf(buf, n, o->flag ? "--%s %s" : "--set %s=%s", o->name, o->value);
}

ir_graph *api_model_load(const char *path, const fe_override *sets, int nsets, diag *d)
{
    size_t len;
    char why[256];
    char *text = file_read(path, FILE_MODEL, &len, why, sizeof why);
    if (!text) {
        diag_error_plain(d, "cannot read '%s': %s", path, why);
        return NULL;
    }
    const char *shown = strcmp(path, "-") == 0 ? "<stdin>" : path;
    ir_graph *g = api_model_load_text(path, shown, text, len, sets, nsets, d);
    free(text);
    return g;
}

ir_graph *api_model_load_text(const char *path, const char *shown, const char *text, size_t len,
                              const fe_override *sets, int nsets, diag *d)
{
    if (memchr(text, 0, len)) {
        diag_error_plain(d, "'%s' is not a text file (it contains a NUL byte)", shown);
        return NULL;
    }
    rt_plan_look plan = rt_plan_sniff_text(text, len);
    if (plan != RT_PLAN_NONE) { /* by content, whatever the name */
        diag_error_plain(d, "'%s' is %s, not a model (a .tg file or text IR)", shown,
                         plan == RT_PLAN_HEADER ? "a compiled plan" : "a damaged compiled plan (its header is not "
                         "'tgc-plan')");
        return NULL;
    }
    ir_graph *g;
    if (is_ir_input(path, text)) {
        if (nsets) {
            char given[256];
            api_override_str(&sets[0], given, sizeof given);
            diag_error_plain(d, "%s: overrides apply to .tg models, and '%s' is text IR", given, shown);
            return NULL;
        }
        g = ir_graph_read(text, len, shown, d);
    } else {
        g = fe_compile(shown, text, len, sets, nsets, d);
    }
    if (g && !ir_graph_verify(g, d)) {
        ir_graph_free(g);
        return NULL;
    }
    return g;
}

bool api_param_groups_match(const ir_graph *g, const char *groups, diag *d)
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
