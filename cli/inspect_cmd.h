#ifndef TGC_CLI_INSPECT_CMD_H
#define TGC_CLI_INSPECT_CMD_H
#include <stdio.h>

/* `tgc inspect PLAN`: a compiled plan summarised: model, configuration,
 * ranks, and per rank the program and memory per kind (docs/tools.md).
 * help_fn prints the command's help. Returns the exit code. */
int cli_inspect(int argc, char **argv, void (*help_fn)(FILE *));

#endif
