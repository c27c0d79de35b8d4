#ifndef TGC_CLI_PLOT_CMD_H
#define TGC_CLI_PLOT_CMD_H
#include <stdio.h>

/* `tgc plot LOG.jsonl -o PLOT.svg`: the training (and validation) loss and
 * the learning rate of a run's --log against the step, as an SVG drawn by
 * tgc itself (docs/tools.md). help_fn prints the command's help. Returns
 * the exit code. */
int cli_plot(int argc, char **argv, void (*help_fn)(FILE *));

#endif
