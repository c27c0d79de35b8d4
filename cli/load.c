#include "load.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "support/util.h"

ir_graph *cli_load_model(const char *path, const fe_override *sets, int nsets, diag *d)
{
    return api_model_load(path, sets, nsets, d);
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
    return api_param_groups_match(g, groups, d);
}

ir_graph *cli_plan_load(const char *path, tgc_config *c, diag *d)
{
    tgc_config none; /* no command-line options over the plan's */
    tgc_config_defaults(&none);
    int rc;
    return api_plan_load(path, c, &none, &rc, NULL, d, stderr);
}
