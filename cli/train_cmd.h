#ifndef TGC_CLI_TRAIN_CMD_H
#define TGC_CLI_TRAIN_CMD_H
#include <stdio.h>

/* `tgc compile MODEL -o PLAN [options]` and `tgc run PLAN|MODEL [options]`
 * through the library's public API (include/tgc.h); help_fn prints the
 * command's help. Return the exit code. */
int cli_compile(int argc, char **argv, void (*help_fn)(FILE *));
int cli_run(int argc, char **argv, void (*help_fn)(FILE *));

#endif
