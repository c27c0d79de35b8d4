/* `tgc import hf DIR -o MODEL.tg --weights W.safetensors` (docs/checkpoints.md). */
#include "cli/import_cmd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "runtime/io/hf.h"
#include "runtime/io/run_files.h"
#include "support/diag.h"
#include "support/file.h"
#include "support/util.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };
enum { OPT_OUT = 1, OPT_WEIGHTS, OPT_HELP };

/* The model's name: the stem of its file, as the front end names it. */
static char *stem(const char *path)
{
    const char *s = strrchr(path, '/');
    s = s ? s + 1 : path;
    char *n = xstrdup(s);
    char *dot = strrchr(n, '.');
    if (dot && dot != n) *dot = 0;
    return n;
}

static bool write_text(const char *path, const strbuf *b, diag *d)
{
    char why[256];
    bool ok = file_write_atomic(path, b->s, b->len, why, sizeof why);
    if (!ok) diag_error(d, (src_loc){.file = path}, "cannot write: %s", why);
    return ok;
}

int cli_import(int argc, char **argv, void (*help_fn)(FILE *))
{
    static const cli_opt lo[] = {{"output", true, false, OPT_OUT}, {"o", true, false, OPT_OUT},
                                 {"weights", true, false, OPT_WEIGHTS}, {"help", false, true, OPT_HELP},
                                 {"h", false, true, OPT_HELP}};
    const char *pos[2] = {NULL, NULL}, *out = NULL, *weights = NULL;
    int npos = 0;
    cli_args a;
    cli_args_init(&a, "import", argc, argv, lo, (int)ARRAY_LEN(lo));
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
    const char *dir = pos[1];
    diag d;
    diag_init(&d, stderr);
    /* Every file the import writes, the tokenizer's copies beside the weights included. */
    char *tok_out[HF_TOKENIZER_FILES];
    for (int i = 0; i < HF_TOKENIZER_FILES; i++) tok_out[i] = hf_import_tokenizer_path(weights, i);
    rt_run_file in[] = {{"DIR", dir}}, outs[] = {{"-o", out}, {"--weights", weights},
                                                 {"--weights' vocab.json copy", tok_out[0]},
                                                 {"--weights' merges.txt copy", tok_out[1]},
                                                 {"--weights' tokenizer.model copy", tok_out[2]}};
    bool ok = rt_files_check(in, 1, outs, (const bool[]){false, false, false, false, false}, 5, NULL, 0, &d);
    for (int i = 0; i < HF_TOKENIZER_FILES; i++) free(tok_out[i]);
    hf_model m;
    ok = ok && hf_config_read(dir, &m, &d);
    char *name = stem(out);
    const char *tok = NULL;
    ok = ok && hf_import(dir, &m, name, weights, &tok, &d);
    if (ok) {
        strbuf b;
        sb_init(&b);
        hf_model_write_tg(&m, dir, &b);
        ok = write_text(out, &b, &d);
        sb_free(&b);
    }
    if (ok)
        fprintf(stderr, "tgc import: %s model (%lld layer%s, hidden %lld, %lld heads, %lld key/value heads, vocabulary "
                "%lld, %s embeddings) -> %s, weights %s%s%s\n", m.model_type, (long long)m.layers, m.layers == 1 ? "" : "s",
                (long long)m.hidden, (long long)m.heads, (long long)m.kv_heads, (long long)m.vocab,
                m.tied ? "tied" : "untied", out, weights, tok ? ", tokenizer " : " (no tokenizer files found)",
                tok ? tok : "");
    free(name);
    diag_finish(&d);
    diag_free(&d);
    return ok ? EXIT_OK : EXIT_INPUT;
}
