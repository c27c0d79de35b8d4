#ifndef TGC_CLI_DATA_CMD_H
#define TGC_CLI_DATA_CMD_H
#include <stdio.h>

/* `tgc data prep TEXT... -o PREFIX`: tokenize text files into a Megatron
 * indexed dataset (PREFIX.bin, PREFIX.idx); `tgc data info PATH` and
 * `tgc data dump PATH`: what a dataset holds (docs/data.md). help_fn
 * prints the command's help. Returns the exit code. */
int cli_data(int argc, char **argv, void (*help_fn)(FILE *));

#endif
