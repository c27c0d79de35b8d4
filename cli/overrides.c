#include "cli/overrides.h"

#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "tgc.h"

int cli_model_opts(cli_opt *out, int base)
{
    int n = 0;
    out[n++] = (cli_opt){"set", true, true, base};
    for (int i = 0; tgc_model_flag(i); i++) {
        if (n == CLI_MODEL_OPTS_MAX) abort(); /* a programmer error: more flags than the tables hold */
        out[n++] = (cli_opt){tgc_model_flag(i), !tgc_model_flag_is_switch(i), false, base + 1 + i};
    }
    return n;
}

bool cli_model_opt_is(int id, int base)
{
    int nflags = 0;
    while (tgc_model_flag(nflags)) nflags++;
    return id >= base && id <= base + nflags;
}

int cli_model_opt_add(const char *cmd, int id, int base, const char *value, cli_override *sets, int *nsets,
                      int maxsets)
{
    /* One place stays free, as the library keeps one for --micro-batch-size's `batch`. */
    if (*nsets >= maxsets - 1) return cli_usage_error(cmd, "more than %d --set and model-flag overrides", maxsets - 1);
    if (id > base) {
        int i = id - base - 1; /* a switch given: its hyperparameter 1 */
        sets[(*nsets)++] = (cli_override){cli_xstrdup(tgc_model_flag(i)), tgc_model_flag_is_switch(i) ? "true" : value,
                                          true};
        return 0;
    }
    const char *eq = strchr(value, '=');
    if (!eq || eq == value || !eq[1]) return cli_usage_error(cmd, "--set '%s': expected NAME=VALUE", value);
    /* argv strings live for the whole run; split a copy. */
    char *name = cli_xstrdup(value);
    name[eq - value] = 0;
    sets[(*nsets)++] = (cli_override){name, name + (eq - value) + 1, false};
    return 0;
}

void cli_overrides_free(cli_override *sets, int n)
{
    for (int i = 0; i < n; i++) free((char *)sets[i].name);
}

void cli_override_str(const cli_override *o, char *buf, size_t n)
{
    for (int i = 0; o->flag && tgc_model_flag(i); i++)
        if (tgc_model_flag_is_switch(i) && strcmp(tgc_model_flag(i), o->name) == 0) {
            snprintf(buf, n, "--%s", o->name); /* a switch, given */
            return;
        }
    snprintf(buf, n, o->flag ? "--%s %s" : "--set %s=%s", o->name, o->value);
}

void cli_model_opts_usage(FILE *out)
{
    fprintf(out, "  --set NAME=VALUE\n      override a hyperparameter of the model (repeatable)\n");
    for (int i = 0; tgc_model_flag(i); i++)
        fprintf(out, "  --%s%s\n      Megatron-LM's model option: sets the hyperparameter the model binds to it%s "
                "(hparam NAME = ... flag %s; docs/dsl.md)\n", tgc_model_flag(i), tgc_model_flag_is_switch(i) ? "" : " X",
                tgc_model_flag_is_switch(i) ? " to 1" : "", tgc_model_flag(i));
}

int cli_override_batch_check(const char *cmd, const cli_override *sets, int nsets, int64_t b)
{
    for (int i = 0; i < nsets; i++)
        if (!sets[i].flag && strcmp(sets[i].name, "batch") == 0)
            return cli_usage_error(cmd, "--micro-batch-size %lld and --set batch=%s both set hyperparameter 'batch'; "
                                   "give one", (long long)b, sets[i].value);
    return 0;
}

int cli_overrides_apply(tgc_options *opts, const cli_override *sets, int nsets)
{
    for (int i = 0; i < nsets; i++) {
        tgc_status st;
        if (sets[i].flag) st = tgc_options_set(opts, sets[i].name, sets[i].value);
        else {
            size_t n = strlen(sets[i].name) + strlen(sets[i].value) + 2;
            char *kv = cli_xmalloc(n);
            snprintf(kv, n, "%s=%s", sets[i].name, sets[i].value);
            st = tgc_options_set(opts, "set", kv);
            free(kv);
        }
        if (st != TGC_OK) return 2;
    }
    return 0;
}
