/* `tgc import hf DIR -o MODEL.tg --weights W.safetensors` (docs/checkpoints.md):
 * the arguments, then tgc_import_hf (include/tgc.h). */
#include "cli/import_cmd.h"

#include <string.h>

#include "cli/args.h"
#include "tgc.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };
enum { OPT_OUT = 1, OPT_WEIGHTS, OPT_HELP };

int cli_import(int argc, char **argv, void (*help_fn)(FILE *))
{
    static const cli_opt lo[] = {{"output", true, false, OPT_OUT}, {"o", true, false, OPT_OUT},
                                 {"weights", true, false, OPT_WEIGHTS}, {"help", false, true, OPT_HELP},
                                 {"h", false, true, OPT_HELP}};
    const char *pos[2] = {NULL, NULL}, *out = NULL, *weights = NULL;
    int npos = 0;
    cli_args a;
    cli_args_init(&a, "import", argc, argv, lo, (int)(sizeof lo / sizeof lo[0]));
    for (int ch; (ch = cli_args_next(&a)) != CLI_ARGS_END;) {
        if (ch == CLI_ARGS_ERROR) return EXIT_USAGE;
        if (ch == CLI_ARGS_POSITIONAL) {
            if (npos == 2) return cli_usage_error("import", "unexpected argument '%s'", a.value);
            pos[npos++] = a.value;
        } else if (ch == OPT_OUT) out = a.value;
        else if (ch == OPT_WEIGHTS) weights = a.value;
        else if (ch == OPT_HELP) { help_fn(stdout); return EXIT_OK; }
    }
    if (!pos[0]) return cli_usage_error("import", "missing the format: tgc import hf DIR -o MODEL.tg --weights W.safetensors");
    if (strcmp(pos[0], "hf") != 0)
        return cli_usage_error("import", "unknown format '%s' (tgc imports 'hf': a Hugging Face checkpoint directory)",
                               pos[0]);
    if (!pos[1]) return cli_usage_error("import", "missing DIR (a Hugging Face checkpoint: config.json and model.safetensors)");
    if (!out) return cli_usage_error("import", "missing -o MODEL.tg");
    if (!weights) return cli_usage_error("import", "missing --weights W.safetensors");
    tgc_import_info m;
    if (tgc_import_hf(pos[1], out, weights, &m) != TGC_OK) return EXIT_INPUT; /* its messages: on standard error as made */
    fprintf(stderr, "tgc import: %s model (%lld layer%s, hidden %lld, %lld heads, %lld key/value heads, vocabulary "
            "%lld, %s embeddings) -> %s, weights %s%s%s\n", m.model_type, (long long)m.layers, m.layers == 1 ? "" : "s",
            (long long)m.hidden, (long long)m.heads, (long long)m.kv_heads, (long long)m.vocab,
            m.tied ? "tied" : "untied", out, weights, m.tokenizer[0] ? ", tokenizer " : " (no tokenizer files found)",
            m.tokenizer);
    return EXIT_OK;
}
