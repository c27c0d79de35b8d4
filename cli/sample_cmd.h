#ifndef TGC_CLI_SAMPLE_CMD_H
#define TGC_CLI_SAMPLE_CMD_H
#include <stdio.h>

/* `tgc sample MODEL|PLAN --weights FILE|DIR --prompt TEXT --tokens N
 * [--temperature T] [--top-k K] [--seed S] [--set NAME=VALUE ...]
 * [--no-kv-cache | --check-kv-cache] [--backend cpu|sim|cuda]`:
 * generation from trained weights (docs/sampling.md). The model is
 * compiled forward-only (no autodiff, no optimizer, dropout off, batch 1)
 * as a prefill and a KV-cached decoding step (or, with --no-kv-cache, one
 * forward over the last s tokens per token), run on the backend --backend
 * names. help_fn prints the command's help. Returns the exit code: 0, 1
 * for bad input (model, weights, prompt, device), 2 for bad usage. */
int cli_sample(int argc, char **argv, void (*help_fn)(FILE *));

#endif
