/* `tgc export CKPT -o FILE.safetensors` and `tgc export --format hf
 * CKPT|WEIGHTS --model MODEL -o DIR` (docs/checkpoints.md). */
#include "cli/export_cmd.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/load.h"

#include "runtime/io/checkpoint.h"
#include "runtime/io/hf.h"
#include "runtime/io/run_files.h"
#include "support/diag.h"
#include "support/util.h"
#include "tokenizer/tokenizer.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };
#define MAX_SETS 64
/* ID_SET .. ID_SET + CLI_MODEL_OPTS_MAX: cli_model_opts */
enum {
    ID_SET = 1, ID_OUT = 100, ID_FORMAT, ID_MODEL, ID_SHARD, ID_DTYPE, ID_TOK_TYPE, ID_VOCAB, ID_MERGES, ID_TOK_MODEL,
    ID_HELP
};

typedef struct export_opts {
    const char *ckpt, *out, *format, *model, *shard, *dtype;
    hf_tokenizer tok;
    fe_override sets[MAX_SETS];
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
            if (o->ckpt) return cli_usage_error("export", "unexpected argument '%s'", a.value);
            o->ckpt = a.value;
        } else if (ch == ID_OUT) o->out = a.value;
        else if (ch == ID_FORMAT) o->format = a.value;
        else if (ch == ID_MODEL) o->model = a.value;
        else if (ch == ID_SHARD) o->shard = a.value;
        else if (ch == ID_DTYPE) o->dtype = a.value;
        else if (ch == ID_TOK_TYPE) o->tok.type = a.value;
        else if (ch == ID_VOCAB) o->tok.vocab_file = a.value;
        else if (ch == ID_MERGES) o->tok.merge_file = a.value;
        else if (ch == ID_TOK_MODEL) o->tok.model_file = a.value;
        else if (ch == ID_HELP) { help_fn(stdout); return -1; }
        else rc = cli_model_opt_add("export", ch, ID_SET, a.value, o->sets, &o->nsets, MAX_SETS);
    }
    if (rc) return rc;
    bool hf = o->format && strcmp(o->format, "hf") == 0;
    if (o->format && !hf && strcmp(o->format, "safetensors") != 0)
        return cli_usage_error("export", "--format '%s': expected safetensors (the default: one file of tgc's "
                               "tensors) or hf (a Hugging Face directory)", o->format);
    if (!o->ckpt)
        return cli_usage_error("export", "missing %s", hf ? "CKPT|WEIGHTS (a --save directory, an iter_N, or a "
                               "safetensors file of tgc's tensors)" : "CKPT (a --save directory or its iter_N)");
    if (!o->out) return cli_usage_error("export", "missing %s", hf ? "-o DIR" : "-o FILE.safetensors");
    if (!hf && (o->model || o->shard || o->dtype || o->tok.type || o->tok.vocab_file || o->tok.merge_file ||
                o->tok.model_file ||
                o->nsets))
        return cli_usage_error("export", "--model, --max-shard-size, --dtype, the tokenizer and model options "
                               "belong to --format hf");
    if (o->dtype && strcmp(o->dtype, "f32") != 0 && strcmp(o->dtype, "bf16") != 0 && strcmp(o->dtype, "f16") != 0)
        return cli_usage_error("export", "--dtype '%s': expected f32, bf16 or f16", o->dtype);
    if (hf && !o->model)
        return cli_usage_error("export", "--format hf needs --model MODEL (the .tg model the weights were trained "
                               "with, and its --set options), which gives config.json");
    const hf_tokenizer *t = &o->tok;
    if (t->type && strcmp(t->type, "GPT2BPETokenizer") == 0) {
        if (!t->vocab_file || !t->merge_file || t->model_file)
            return cli_usage_error("export", "--tokenizer-type GPT2BPETokenizer takes --vocab-file and --merge-file");
    } else if (t->type && strcmp(t->type, "SentencePieceTokenizer") == 0) {
        if (!t->model_file || t->vocab_file || t->merge_file)
            return cli_usage_error("export", "--tokenizer-type SentencePieceTokenizer takes --tokenizer-model");
    } else if (t->type) {
        return cli_usage_error("export", "--tokenizer-type '%s': expected GPT2BPETokenizer or SentencePieceTokenizer",
                               t->type);
    } else if (t->vocab_file || t->merge_file || t->model_file) {
        return cli_usage_error("export", "--vocab-file, --merge-file and --tokenizer-model need --tokenizer-type");
    }
    return EXIT_OK;
}

/* The tokenizer a weights file of `tgc import hf` records (file names
 * beside it, tgc_tokenizer_from_safetensors), unless the command line
 * gives one; *store holds the paths. */
static bool tokenizer_from_meta(const char *wpath, hf_tokenizer *tok, tgc_tokenizer_meta *store, diag *d)
{
    if (tok->type) return true;
    tgc_tokenizer_opts o;
    bool found;
    if (!tgc_tokenizer_from_safetensors(wpath, &o, store, &found, d)) return false;
    if (found) *tok = (hf_tokenizer){store->type, store->vocab_file, store->merge_file, store->model};
    return true;
}

/* --dtype, else the precision a checkpoint was trained in (its
 * "precision" metadata: bf16 or fp16 mixed precision), else f32. */
static tgc_st_dtype export_dtype(const char *opt, const char *precision)
{
    const char *v = opt ? opt : precision ? precision : "f32";
    return strcmp(v, "bf16") == 0 ? TGC_ST_BF16 : strcmp(v, "f16") == 0 || strcmp(v, "fp16") == 0 ? TGC_ST_F16
                                                                                                    : TGC_ST_F32;
}

static int export_hf(export_opts *o, diag *d)
{
    int64_t max_shard = 5000000000LL;
    if (o->shard && !hf_parse_size(o->shard, &max_shard)) {
        diag_error_plain(d, "--max-shard-size '%s': expected a size such as 5GB, 500MB, 2GiB or a number of bytes",
                         o->shard);
        return EXIT_USAGE;
    }
    rt_run_file in[] = {{"CKPT|WEIGHTS", o->ckpt}, {"--model", o->model}}, outs[] = {{"-o", o->out}};
    if (!rt_files_check(in, 2, outs, (const bool[]){true}, 1, NULL, 0, d)) return EXIT_INPUT;
    ir_graph *g = cli_load_model(o->model, o->sets, o->nsets, d);
    hf_model m;
    bool ok = g && hf_model_from_graph(g, &m, d);
    tgc_st_file *w = ok ? rt_ckpt_open_weights(o->ckpt, d) : NULL;
    tgc_tokenizer_meta keep = {0};
    tgc_st_dtype dtype = TGC_ST_F32;
    ok = w != NULL;
    if (ok) {
        /* DIR's files are replaced: the weights being read may not be among them. */
        const char *wp = tgc_st_path(w), *slash = strrchr(wp, '/');
        char *wdir = slash ? xstrdup(wp) : xstrdup(".");
        if (slash) wdir[slash == wp ? 1 : slash - wp] = 0;
        if (rt_files_same(wdir, o->out)) {
            diag_error_plain(d, "export --format hf: -o %s is the directory of the weights it reads (%s); give the "
                             "Hugging Face model a directory of its own", o->out, wp);
            ok = false;
        }
        free(wdir);
    }
    if (ok) { /* w is open only when ok */
        const char *bos = tgc_st_meta(w, "tgc.bos_token_id"), *eos = tgc_st_meta(w, "tgc.eos_token_id");
        if ((bos && !parse_i64(bos, &m.bos)) || (eos && !parse_i64(eos, &m.eos))) {
            diag_error_plain(d, "export: %s: tgc.bos_token_id '%s' or tgc.eos_token_id '%s' is not an integer",
                             tgc_st_path(w), bos ? bos : "", eos ? eos : "");
            ok = false;
        }
    }
    if (ok) {
        ok = tokenizer_from_meta(tgc_st_path(w), &o->tok, &keep, d);
        dtype = export_dtype(o->dtype, tgc_st_meta(w, "precision"));
        ok = ok && hf_export(w, &m, o->out, max_shard, dtype, &o->tok, d);
    }
    if (ok)
        fprintf(stderr, "tgc export: %s (%s, %lld layer%s, hidden %lld, vocabulary %lld) -> %s in %s%s%s\n",
                tgc_st_path(w), m.model_type, (long long)m.layers, m.layers == 1 ? "" : "s", (long long)m.hidden,
                (long long)m.vocab, o->out, dtype == TGC_ST_BF16 ? "bf16" : dtype == TGC_ST_F16 ? "f16" : "f32",
                o->tok.type ? ", tokenizer " : "", o->tok.type ? o->tok.type : "");
    tgc_tokenizer_meta_free(&keep);
    tgc_st_close(w);
    ir_graph_free(g);
    return ok ? EXIT_OK : EXIT_INPUT;
}

int cli_export(int argc, char **argv, void (*help_fn)(FILE *))
{
    export_opts o = {0};
    int rc = parse(&o, argc, argv, help_fn);
    if (rc == EXIT_OK) {
        diag d;
        diag_init(&d, stderr);
        if (o.format && strcmp(o.format, "hf") == 0) rc = export_hf(&o, &d);
        else {
            /* -o is not the checkpoint nor inside it, and is writable, before anything is read. */
            rt_run_file in[] = {{"CKPT", o.ckpt}}, outs[] = {{"-o", o.out}};
            bool ok = rt_files_check(in, 1, outs, (const bool[]){false}, 1, NULL, 0, &d) &&
                      rt_ckpt_export(o.ckpt, o.out, &d);
            rc = ok ? EXIT_OK : EXIT_INPUT;
        }
        diag_finish(&d);
        diag_free(&d);
    }
    for (int i = 0; i < o.nsets; i++) free((char *)o.sets[i].name);
    return rc < 0 ? EXIT_OK : rc;
}
