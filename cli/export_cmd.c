/* `tgc export CKPT -o FILE.safetensors` and `tgc export --format hf
 * CKPT|WEIGHTS --model MODEL -o DIR` (docs/checkpoints.md): the arguments,
 * then tgc_export (include/tgc.h), which checks how they combine. */
#include "cli/export_cmd.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/overrides.h"
#include "tgc.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };
#define MAX_SETS 64
/* ID_SET .. ID_SET + CLI_MODEL_OPTS_MAX: cli_model_opts */
enum {
    ID_SET = 1, ID_OUT = 100, ID_FORMAT, ID_MODEL, ID_SHARD, ID_DTYPE, ID_TOK_TYPE, ID_VOCAB, ID_MERGES, ID_TOK_MODEL,
    ID_HELP
};

typedef struct export_opts {
    tgc_export_args x;
    const char *format;
    cli_override sets[MAX_SETS];
    int nsets;
} export_opts;

static int parse(export_opts *o, int argc, char **argv, void (*help_fn)(FILE *))
{
    cli_opt lo[14 + CLI_MODEL_OPTS_MAX] = {
        {"output", true, false, ID_OUT}, {"o", true, false, ID_OUT}, {"format", true, false, ID_FORMAT},
        {"model", true, false, ID_MODEL}, {"max-shard-size", true, false, ID_SHARD}, {"dtype", true, false, ID_DTYPE},
        {"tokenizer-type", true, false, ID_TOK_TYPE}, {"vocab-file", true, false, ID_VOCAB},
        {"merge-file", true, false, ID_MERGES}, {"tokenizer-model", true, false, ID_TOK_MODEL},
        {"help", false, true, ID_HELP}, {"h", false, true, ID_HELP}};
    int nlo = 12 + cli_model_opts(lo + 12, ID_SET);
    cli_args a;
    cli_args_init(&a, "export", argc, argv, lo, nlo);
    int rc = EXIT_OK;
    for (int ch; rc == EXIT_OK && (ch = cli_args_next(&a)) != CLI_ARGS_END;) {
        if (ch == CLI_ARGS_ERROR) return EXIT_USAGE;
        if (ch == CLI_ARGS_POSITIONAL) {
            if (o->x.ckpt) return cli_usage_error("export", "unexpected argument '%s'", a.value);
            o->x.ckpt = a.value;
        } else if (ch == ID_OUT) o->x.out = a.value;
        else if (ch == ID_FORMAT) o->format = a.value;
        else if (ch == ID_MODEL) o->x.model = a.value;
        else if (ch == ID_SHARD) o->x.max_shard_size = a.value;
        else if (ch == ID_DTYPE) o->x.dtype = a.value;
        else if (ch == ID_TOK_TYPE) o->x.tokenizer_type = a.value;
        else if (ch == ID_VOCAB) o->x.vocab_file = a.value;
        else if (ch == ID_MERGES) o->x.merge_file = a.value;
        else if (ch == ID_TOK_MODEL) o->x.tokenizer_model = a.value;
        else if (ch == ID_HELP) { help_fn(stdout); return -1; }
        else rc = cli_model_opt_add("export", ch, ID_SET, a.value, o->sets, &o->nsets, MAX_SETS);
    }
    if (rc) return rc;
    bool hf = o->format && strcmp(o->format, "hf") == 0;
    if (o->format && !hf && strcmp(o->format, "safetensors") != 0)
        return cli_usage_error("export", "--format '%s': expected safetensors (the default: one file of tgc's "
                               "tensors) or hf (a Hugging Face directory)", o->format);
    o->x.hf = hf;
    if (!o->x.ckpt)
        return cli_usage_error("export", "missing %s", hf ? "CKPT|WEIGHTS (a --save directory, an iter_N, or a "
                               "safetensors file of tgc's tensors)" : "CKPT (a --save directory or its iter_N)");
    if (!o->x.out) return cli_usage_error("export", "missing %s", hf ? "-o DIR" : "-o FILE.safetensors");
    return EXIT_OK;
}

int cli_export(int argc, char **argv, void (*help_fn)(FILE *))
{
    export_opts o = {.x = TGC_EXPORT_ARGS_INIT};
    int rc = parse(&o, argc, argv, help_fn);
    tgc_options *opts = NULL;
    if (rc == EXIT_OK) rc = tgc_options_new(&opts) == TGC_OK ? cli_overrides_apply(opts, o.sets, o.nsets) : EXIT_INPUT;
    if (rc == EXIT_OK) {
        tgc_status st = tgc_export(opts, &o.x, stderr); /* what it wrote: a line on standard error */
        rc = st == TGC_OK ? EXIT_OK : st == TGC_EUSAGE ? EXIT_USAGE : EXIT_INPUT;
    }
    tgc_options_free(opts);
    cli_overrides_free(o.sets, o.nsets);
    return rc < 0 ? EXIT_OK : rc;
}
