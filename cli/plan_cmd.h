#ifndef TGC_CLI_PLAN_CMD_H
#define TGC_CLI_PLAN_CMD_H
#include <stdio.h>

/* `tgc plan MODEL [run options]`: memory per rank and FLOPs before running;
 * `--search`: the parallel-configuration planner; `--calibrate`: this
 * machine's GEMM rate (docs/planner.md). help_fn prints the command's help.
 * Returns the exit code. */
int cli_plan(int argc, char **argv, void (*help_fn)(FILE *));

/* The options only `tgc plan` has (the run's options are listed apart). */
void cli_plan_usage(FILE *out);

#endif
