/* The model's hyperparameters on a command line: --set NAME=VALUE and the
 * model flags (tgc_model_flag: --num-layers, ...), which every command
 * that takes a model scans, keeps as the command line wrote them (for its
 * own messages) and hands to the library (tgc_options_set). */
#ifndef TGC_CLI_OVERRIDES_H
#define TGC_CLI_OVERRIDES_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cli/args.h"

/* One override: --set NAME=VALUE (flag false), or a model flag (name the
 * flag without its dashes). name is malloc'd (cli_overrides_free). */
typedef struct cli_override {
    const char *name;
    const char *value;
    bool flag;
} cli_override;

/* The options that set a model's hyperparameters, for a command's option
 * table: --set NAME=VALUE (id `base`, repeatable) and every model flag
 * (ids base + 1 + i). Writes them to out; returns how many. */
enum { CLI_MODEL_OPTS_MAX = 16 };
int cli_model_opts(cli_opt *out, int base);
/* Whether id is one of cli_model_opts(.., base)'s. */
bool cli_model_opt_is(int id, int base);
/* Adds the override an option of cli_model_opts gave; 0, or 2 after the
 * usage error. */
int cli_model_opt_add(const char *cmd, int id, int base, const char *value, cli_override *sets, int *nsets,
                      int maxsets);
void cli_overrides_free(cli_override *sets, int n);
/* An override as the command line wrote it: "--set k=v" or "--num-layers 2". */
void cli_override_str(const cli_override *o, char *buf, size_t n);
/* --micro-batch-size b beside --set batch: 2 after the usage error naming
 * both, else 0 (the library sets a model's `batch` from the option). */
int cli_override_batch_check(const char *cmd, const cli_override *sets, int nsets, int64_t b);
/* The overrides onto opts (tgc_options_set "set" or the model flag); 0,
 * or 2 after the library's message. */
typedef struct tgc_options tgc_options;
int cli_overrides_apply(tgc_options *opts, const cli_override *sets, int nsets);
/* The help lines of those options. */
void cli_model_opts_usage(FILE *out);

#endif
