#ifndef TGC_CLI_TRAIN_CMD_H
#define TGC_CLI_TRAIN_CMD_H
#include <stdio.h>

#include "cli/config.h"
#include "ir/ir.h"

/* `tgc compile MODEL -o PLAN [options]` and `tgc run PLAN|MODEL [options]`;
 * help_fn prints the command's help. Return the exit code. */
int cli_compile(int argc, char **argv, void (*help_fn)(FILE *));
int cli_run(int argc, char **argv, void (*help_fn)(FILE *));

/* A compiled plan's graph and configuration (into *c), checked as `tgc run
 * PLAN` checks it (framing, checksum, IR, verifier, kernels); NULL after
 * reporting. */
ir_graph *cli_plan_load(const char *path, tgc_config *c, diag *d);

#endif
