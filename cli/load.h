#ifndef TGC_CLI_LOAD_H
#define TGC_CLI_LOAD_H
#include <stdio.h>

#include "cli/args.h"
#include "frontend/frontend.h"
#include "ir/ir.h"

/* Loads a model: a .tg file through the front end, or text IR (a .ir file,
 * or any input starting with "tgc-ir") through the IR reader, then runs the
 * verifier. "-" reads standard input. A compiled plan, intact or damaged
 * (told by its content, runtime/plan.h), is refused as one rather than
 * parsed as a model. Errors go to d; NULL on failure. */
ir_graph *cli_load_model(const char *path, const fe_override *sets, int nsets, diag *d);

/* The options that set a model's hyperparameters, for a command's option
 * table: --set NAME=VALUE (id `base`, repeatable) and every model flag of
 * fe_model_flags (ids base + 1 + i). Writes them to out; returns how many. */
enum { CLI_MODEL_OPTS_MAX = 16 };
int cli_model_opts(cli_opt *out, int base);
/* Whether id is one of cli_model_opts(.., base)'s. */
bool cli_model_opt_is(int id, int base);
/* Adds the override an option of cli_model_opts gave (its name a copy the
 * caller frees); 0, or 2 after the usage error. */
int cli_model_opt_add(const char *cmd, int id, int base, const char *value, fe_override *sets, int *nsets,
                      int maxsets);
/* An override as the command line wrote it: "--set k=v" or "--num-layers 2". */
void cli_override_str(const fe_override *o, char *buf, size_t n);
/* --micro-batch-size b: the model's `batch` hyperparameter, after the
 * command line's overrides (cli_model_opt_add leaves it a place); 0, or 2
 * after the usage error when --set batch is given too. */
int cli_override_batch(const char *cmd, fe_override *sets, int *nsets, int maxsets, int64_t b);
/* Every --param-group of groups (joined by ';') takes at least one
 * parameter of g; false after reporting each that takes none to d. */
bool cli_param_groups_match(const ir_graph *g, const char *groups, diag *d);
/* The help lines of those options. */
void cli_model_opts_usage(FILE *out);

/* A compiled plan's graph and configuration (into *c), checked as `tgc run
 * PLAN` checks it (framing, checksum, IR, verifier, kernels); NULL after
 * reporting. The developer commands' (inspect): tgc run's is tgc_plan_load. */
#include "api/config.h"
ir_graph *cli_plan_load(const char *path, tgc_config *c, diag *d);

#endif
