/* tgc_import_hf (include/tgc.h): a Hugging Face checkpoint directory as
 * a .tg model and safetensors weights (docs/checkpoints.md). */
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "runtime/io/hf.h"
#include "runtime/io/run_files.h"
#include "support/file.h"
#include "support/util.h"
#include "tgc.h"

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

/* Every file the import writes, the tokenizer's copies beside the
 * weights included, against the input and each other. */
static bool outputs_check(const char *dir, const char *out, const char *weights, diag *d)
{
    char *tok_out[HF_TOKENIZER_FILES];
    for (int i = 0; i < HF_TOKENIZER_FILES; i++) tok_out[i] = hf_import_tokenizer_path(weights, i);
    rt_run_file in[] = {{"DIR", dir}}, outs[] = {{"-o", out}, {"--weights", weights},
                                                 {"--weights' vocab.json copy", tok_out[0]},
                                                 {"--weights' merges.txt copy", tok_out[1]},
                                                 {"--weights' tokenizer.model copy", tok_out[2]}};
    bool ok = rt_files_check(in, 1, outs, (const bool[]){false, false, false, false, false}, 5, NULL, 0, d);
    for (int i = 0; i < HF_TOKENIZER_FILES; i++) free(tok_out[i]);
    return ok;
}

tgc_status tgc_import_hf(const char *dir, const char *model_out, const char *weights_out, tgc_import_info *info)
{
    if (info) memset(info, 0, sizeof *info);
    api_call a;
    api_call_begin(&a);
    if (!dir || !model_out || !weights_out) {
        fprintf(a.f, "tgc: error: tgc_import_hf: dir, model_out and weights_out must be given\n");
        return api_call_end(&a, TGC_EINVAL);
    }
    hf_model m;
    bool ok = outputs_check(dir, model_out, weights_out, &a.d) && hf_config_read(dir, &m, &a.d);
    char *name = stem(model_out);
    const char *tok = NULL;
    ok = ok && hf_import(dir, &m, name, weights_out, &tok, &a.d);
    free(name);
    if (ok) {
        strbuf b;
        sb_init(&b);
        hf_model_write_tg(&m, dir, &b);
        ok = write_text(model_out, &b, &a.d);
        sb_free(&b);
    }
    if (ok && info) {
        snprintf(info->model_type, sizeof info->model_type, "%s", m.model_type);
        info->layers = m.layers, info->hidden = m.hidden, info->heads = m.heads, info->kv_heads = m.kv_heads;
        info->vocab = m.vocab, info->tied = m.tied;
        snprintf(info->tokenizer, sizeof info->tokenizer, "%s", tok ? tok : "");
    }
    return api_call_end(&a, ok ? TGC_OK : TGC_ERROR);
}
