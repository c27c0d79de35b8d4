/* tgc_export (include/tgc.h): `tgc export`'s work, a checkpoint's
 * weights as one safetensors file, or with a model as a Hugging Face
 * model directory (docs/checkpoints.md). */
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/hf.h"
#include "runtime/io/run_files.h"
#include "support/util.h"
#include "tgc.h"
#include "tokenizer/tokenizer.h"

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

static tgc_status export_hf(const tgc_options *opts, const tgc_export_args *o, FILE *out, diag *d)
{
    int64_t max_shard = 5000000000LL;
    if (o->max_shard_size && !hf_parse_size(o->max_shard_size, &max_shard)) {
        diag_error_plain(d, "--max-shard-size '%s': expected a size such as 5GB, 500MB, 2GiB or a number of bytes",
                         o->max_shard_size);
        return TGC_EUSAGE;
    }
    rt_run_file in[] = {{"CKPT|WEIGHTS", o->ckpt}, {"--model", o->model}}, outs[] = {{"-o", o->out}};
    if (!rt_files_check(in, 2, outs, (const bool[]){true}, 1, NULL, 0, d)) return TGC_ERROR;
    int nsets;
    const fe_override *sets = api_options_sets(opts, &nsets);
    ir_graph *g = api_model_load(o->model, sets, nsets, d);
    hf_tokenizer tok = {o->tokenizer_type, o->vocab_file, o->merge_file, o->tokenizer_model};
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
        ok = tokenizer_from_meta(tgc_st_path(w), &tok, &keep, d);
        dtype = export_dtype(o->dtype, tgc_st_meta(w, "precision"));
        ok = ok && hf_export(w, &m, o->out, max_shard, dtype, &tok, d);
    }
    if (ok)
        fprintf(out, "tgc export: %s (%s, %lld layer%s, hidden %lld, vocabulary %lld) -> %s in %s%s%s\n",
                tgc_st_path(w), m.model_type, (long long)m.layers, m.layers == 1 ? "" : "s", (long long)m.hidden,
                (long long)m.vocab, o->out, dtype == TGC_ST_BF16 ? "bf16" : dtype == TGC_ST_F16 ? "f16" : "f32",
                tok.type ? ", tokenizer " : "", tok.type ? tok.type : "");
    tgc_tokenizer_meta_free(&keep);
    tgc_st_close(w);
    ir_graph_free(g);
    return ok ? TGC_OK : TGC_ERROR;
}

/* The arguments' combinations (what `tgc export` checks of its command
 * line first). */
static tgc_status export_check(const tgc_export_args *o, int nsets, api_call *a)
{
    if (!o->ckpt || !o->out) {
        fprintf(a->f, "tgc: error: tgc_export: args->ckpt and args->out must be given\n");
        return TGC_EINVAL;
    }
    bool tok = o->tokenizer_type || o->vocab_file || o->merge_file || o->tokenizer_model;
    if (!o->hf && (o->model || o->max_shard_size || o->dtype || tok || nsets))
        return api_usage(a, "export", "--model, --max-shard-size, --dtype, the tokenizer and model options belong "
                         "to --format hf");
    if (o->dtype && strcmp(o->dtype, "f32") != 0 && strcmp(o->dtype, "bf16") != 0 && strcmp(o->dtype, "f16") != 0)
        return api_usage(a, "export", "--dtype '%s': expected f32, bf16 or f16", o->dtype);
    if (o->hf && !o->model)
        return api_usage(a, "export", "--format hf needs --model MODEL (the .tg model the weights were trained with, "
                         "and its --set options), which gives config.json");
    const char *t = o->tokenizer_type;
    if (t && strcmp(t, "GPT2BPETokenizer") == 0) {
        if (!o->vocab_file || !o->merge_file || o->tokenizer_model)
            return api_usage(a, "export", "--tokenizer-type GPT2BPETokenizer takes --vocab-file and --merge-file");
    } else if (t && strcmp(t, "SentencePieceTokenizer") == 0) {
        if (!o->tokenizer_model || o->vocab_file || o->merge_file)
            return api_usage(a, "export", "--tokenizer-type SentencePieceTokenizer takes --tokenizer-model");
    } else if (t) {
        return api_usage(a, "export", "--tokenizer-type '%s': expected GPT2BPETokenizer or SentencePieceTokenizer", t);
    } else if (tok) {
        return api_usage(a, "export", "--vocab-file, --merge-file and --tokenizer-model need --tokenizer-type");
    }
    return TGC_OK;
}

tgc_status tgc_export(const tgc_options *opts, const tgc_export_args *args, FILE *out)
{
    api_call a;
    api_call_begin(&a);
    tgc_export_args x;
    if (!api_args_copy(&x, sizeof x, args, "tgc_export", &a)) return api_call_end(&a, TGC_EINVAL);
    int nsets;
    api_options_sets(opts, &nsets);
    tgc_status st = export_check(&x, nsets, &a);
    if (st != TGC_OK) return api_call_end(&a, st);
    if (x.hf) return api_call_end(&a, export_hf(opts, &x, out ? out : stderr, &a.d));
    /* -o is not the checkpoint nor inside it, and is writable, before anything is read. */
    rt_run_file in[] = {{"CKPT", x.ckpt}}, outs[] = {{"-o", x.out}};
    bool ok = rt_files_check(in, 1, outs, (const bool[]){false}, 1, NULL, 0, &a.d) && rt_ckpt_export(x.ckpt, x.out, &a.d);
    return api_call_end(&a, ok ? TGC_OK : TGC_ERROR);
}
