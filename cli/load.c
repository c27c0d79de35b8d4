#include "load.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
    char *text = read_file(path, &len);
    if (!text) {
        diag_error_plain(d, "cannot read '%s': %s", path, strerror(errno));
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
            diag_error_plain(d, "--set %s=%s: overrides apply to .tg models, and '%s' is text IR", sets[0].name,
                             sets[0].value, shown);
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
