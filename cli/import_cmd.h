#ifndef TGC_CLI_IMPORT_CMD_H
#define TGC_CLI_IMPORT_CMD_H
#include <stdio.h>

/* `tgc import hf DIR -o MODEL.tg --weights W.safetensors`: a Hugging Face
 * GPT-2 or LLaMA-family checkpoint as a tgc model and its weights
 * (runtime/io/hf.h, docs/checkpoints.md). help_fn prints the command's
 * help. Returns the exit code. */
int cli_import(int argc, char **argv, void (*help_fn)(FILE *));

#endif
