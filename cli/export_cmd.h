#ifndef TGC_CLI_EXPORT_CMD_H
#define TGC_CLI_EXPORT_CMD_H
#include <stdio.h>

/* `tgc export CKPT -o FILE.safetensors`: the model weights of a checkpoint
 * (a `tgc run --save` directory or one of its iter_N directories), verified
 * against their checksums, written with the logical names and shapes and
 * the metadata "format": "pt" that Hugging Face's loaders expect
 * (docs/checkpoints.md). help_fn prints the command's help. Returns the
 * exit code. */
int cli_export(int argc, char **argv, void (*help_fn)(FILE *));

#endif
