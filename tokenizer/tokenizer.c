/* Tokenizers under Megatron's names (tokenizer/tokenizer.h). */
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/safetensors.h"
#include "support/file.h"
#include "tokenizer/bpe.h"
#include "tokenizer/spm.h"

struct tgc_tokenizer {
    tgc_tokenizer_kind kind;
    tgc_bpe *bpe;
    tgc_spm *spm;
    int64_t vocab, eod;
};

static const struct {
    const char *name;
    tgc_tokenizer_kind kind;
} type_names[] = {
    {"ByteTokenizer", TGC_TOKENIZER_BYTES},
    {"bytes", TGC_TOKENIZER_BYTES},
    {"GPT2BPETokenizer", TGC_TOKENIZER_GPT2BPE},
    {"gpt2", TGC_TOKENIZER_GPT2BPE},
    {"SentencePieceTokenizer", TGC_TOKENIZER_SENTENCEPIECE},
    {"GPTSentencePieceTokenizer", TGC_TOKENIZER_SENTENCEPIECE},
    {"sentencepiece", TGC_TOKENIZER_SENTENCEPIECE},
};

bool tgc_tokenizer_parse_type(const char *name, tgc_tokenizer_kind *k)
{
    for (size_t i = 0; name && i < ARRAY_LEN(type_names); i++)
        if (strcmp(name, type_names[i].name) == 0) {
            *k = type_names[i].kind;
            return true;
        }
    return false;
}

const char *tgc_tokenizer_kind_name(tgc_tokenizer_kind k)
{
    return k == TGC_TOKENIZER_GPT2BPE ? "GPT2BPETokenizer"
         : k == TGC_TOKENIZER_SENTENCEPIECE ? "SentencePieceTokenizer" : "ByteTokenizer";
}

bool tgc_tokenizer_opts_given(const tgc_tokenizer_opts *o)
{
    return o->type || o->vocab_file || o->merge_file || o->model;
}

bool tgc_tokenizer_opts_check(const tgc_tokenizer_opts *o, char *why, size_t cap)
{
    tgc_tokenizer_kind k = TGC_TOKENIZER_BYTES;
    if (o->type && !tgc_tokenizer_parse_type(o->type, &k)) {
        snprintf(why, cap, "--tokenizer-type '%s': expected %s", o->type, TGC_TOKENIZER_TYPES);
        return false;
    }
    const char *name = tgc_tokenizer_kind_name(k);
    bool bpe = k == TGC_TOKENIZER_GPT2BPE, spm = k == TGC_TOKENIZER_SENTENCEPIECE;
    if (bpe && (!o->vocab_file || !o->merge_file))
        snprintf(why, cap, "--tokenizer-type %s needs --vocab-file vocab.json and --merge-file merges.txt", name);
    else if (!bpe && (o->vocab_file || o->merge_file))
        snprintf(why, cap, "--vocab-file and --merge-file belong to --tokenizer-type GPT2BPETokenizer%s%s",
                 o->type ? ", not " : " (the tokenizer is ByteTokenizer without --tokenizer-type)",
                 o->type ? name : "");
    else if (spm && !o->model)
        snprintf(why, cap, "--tokenizer-type %s needs --tokenizer-model FILE.model", name);
    else if (!spm && o->model)
        snprintf(why, cap, "--tokenizer-model belongs to --tokenizer-type SentencePieceTokenizer%s%s",
                 o->type ? ", not " : " (the tokenizer is ByteTokenizer without --tokenizer-type)",
                 o->type ? name : "");
    else return true;
    return false;
}

/* A SentencePiece model from the n bytes of the file path. */
static tgc_spm *spm_parse(const char *path, const char *bytes, size_t n, diag *d)
{
    char why[512];
    tgc_spm *m = n ? tgc_spm_load(bytes, n, why, sizeof why) : NULL;
    if (!n) snprintf(why, sizeof why, "the file is empty");
    if (!m) diag_error(d, (src_loc){.file = path}, "not a SentencePiece model (libsentencepiece: %s)", why);
    else if (tgc_spm_size(m) <= 0 || tgc_spm_size(m) > INT32_MAX) {
        diag_error(d, (src_loc){.file = path}, "a SentencePiece model of %lld pieces", (long long)tgc_spm_size(m));
        tgc_spm_free(m);
        m = NULL;
    }
    return m;
}

static tgc_spm *spm_open(const char *path, diag *d)
{
    size_t n;
    char why[512];
    char *bytes = file_read(path, FILE_TEXT, &n, why, sizeof why);
    if (!bytes) {
        diag_error(d, (src_loc){.file = path}, "cannot read the SentencePiece model: %s", why);
        return NULL;
    }
    tgc_spm *m = spm_parse(path, bytes, n, d);
    free(bytes);
    return m;
}

bool tokenizer_files_check(tgc_tokenizer_kind k, const char *const path[2], const char *const bytes[2],
                           const size_t len[2], diag *d)
{
    if (k == TGC_TOKENIZER_GPT2BPE) {
        tgc_bpe *b = tgc_bpe_parse(path[0], bytes[0], len[0], path[1], bytes[1], len[1], d);
        tgc_bpe_free(b);
        return b != NULL;
    }
    if (k == TGC_TOKENIZER_SENTENCEPIECE) {
        tgc_spm *m = spm_parse(path[0], bytes[0], len[0], d);
        if (m) tgc_spm_free(m);
        return m != NULL;
    }
    return true;
}

tgc_tokenizer *tokenizer_open(const tgc_tokenizer_opts *o, diag *d)
{
    char why[512];
    if (!tgc_tokenizer_opts_check(o, why, sizeof why)) {
        diag_error_plain(d, "%s", why);
        return NULL;
    }
    tgc_tokenizer *t = xcalloc(1, sizeof *t);
    if (o->type) tgc_tokenizer_parse_type(o->type, &t->kind);
    bool ok = true;
    switch (t->kind) {
    case TGC_TOKENIZER_BYTES:
        t->vocab = 256;
        t->eod = 256; /* one past the bytes: a vocabulary of 257 with --append-eod */
        break;
    case TGC_TOKENIZER_GPT2BPE:
        t->bpe = tgc_bpe_load(o->vocab_file, o->merge_file, d);
        ok = t->bpe != NULL;
        if (ok) {
            t->vocab = tgc_bpe_vocab_size(t->bpe);
            t->eod = tgc_bpe_lookup(t->bpe, "<|endoftext|>");
        }
        break;
    case TGC_TOKENIZER_SENTENCEPIECE:
        t->spm = spm_open(o->model, d);
        ok = t->spm != NULL;
        if (ok) {
            t->vocab = tgc_spm_size(t->spm);
            t->eod = tgc_spm_eos(t->spm);
        }
        break;
    }
    if (!ok) {
        tgc_tokenizer_free(t);
        return NULL;
    }
    return t;
}

void tgc_tokenizer_free(tgc_tokenizer *t)
{
    if (!t) return;
    tgc_bpe_free(t->bpe);
    if (t->spm) tgc_spm_free(t->spm);
    free(t);
}

tgc_tokenizer_kind tgc_tokenizer_kind_of(const tgc_tokenizer *t) { return t->kind; }
int64_t tgc_tokenizer_vocab_size(const tgc_tokenizer *t) { return t ? t->vocab : 0; }
int64_t tgc_tokenizer_eod(const tgc_tokenizer *t) { return t ? t->eod : -1; }

bool tgc_tokenizer_has_id(const tgc_tokenizer *t, int64_t id)
{
    if (t->kind == TGC_TOKENIZER_GPT2BPE) return tgc_bpe_has_id(t->bpe, id);
    return id >= 0 && id < t->vocab;
}

bool tokenizer_encode(const tgc_tokenizer *t, const unsigned char *text, size_t n, int32_t **out, int64_t *len,
                          int64_t *cap, const char *where, diag *d)
{
    if (t->kind == TGC_TOKENIZER_GPT2BPE) return tgc_bpe_encode(t->bpe, text, n, out, len, cap, where, d);
    if (t->kind == TGC_TOKENIZER_SENTENCEPIECE) {
        char why[512];
        if (tgc_spm_encode(t->spm, (const char *)text, n, out, len, cap, why, sizeof why)) return true;
        diag_error(d, (src_loc){.file = where}, "SentencePiece cannot encode the text: %s", why);
        return false;
    }
    if ((int64_t)n > *cap - *len) { /* sized by the text: a failure is reported, never an exit */
        int64_t want = *cap ? *cap : 1024;
        while (want - *len < (int64_t)n) want *= 2;
        int32_t *p = realloc(*out, (size_t)want * sizeof **out);
        if (!p) {
            diag_error(d, (src_loc){.file = where}, "out of memory for %lld tokens", (long long)want);
            return false;
        }
        *out = p;
        *cap = want;
    }
    for (size_t i = 0; i < n; i++) (*out)[(*len)++] = text[i];
    return true;
}

/* ids[0 .. n), every one the tokenizer's, appended to out. */
static bool decode_run(const tgc_tokenizer *t, const int32_t *ids, int64_t n, strbuf *out, diag *d)
{
    if (t->kind == TGC_TOKENIZER_SENTENCEPIECE) {
        char why[512], *text;
        size_t len;
        if (!tgc_spm_decode(t->spm, ids, n, &text, &len, why, sizeof why)) {
            diag_error_plain(d, "SentencePiece cannot decode %lld tokens: %s", (long long)n, why);
            return false;
        }
        sb_putn(out, text, len);
        free(text);
        return true;
    }
    for (int64_t i = 0; i < n; i++) {
        if (t->kind == TGC_TOKENIZER_GPT2BPE) tgc_bpe_decode_one(t->bpe, ids[i], out);
        else sb_putc(out, (char)ids[i]);
    }
    return true;
}

bool tokenizer_decode(const tgc_tokenizer *t, const int32_t *ids, int64_t n, strbuf *out, diag *d)
{
    int64_t run = 0;
    for (int64_t i = 0; i <= n; i++) {
        if (i < n && tgc_tokenizer_has_id(t, ids[i])) continue;
        if (i > run && !decode_run(t, ids + run, i - run, out, d)) return false;
        if (i < n) sb_printf(out, "<|id %ld|>", (long)ids[i]);
        run = i + 1;
    }
    return true;
}

/* ---- a safetensors file's tokenizer ---------------------------------------------- */

bool tgc_tokenizer_from_safetensors(const char *path, tgc_tokenizer_opts *o, tgc_tokenizer_meta *store,
                                    bool *found, diag *d)
{
    *store = (tgc_tokenizer_meta){0};
    *found = false;
    tgc_st_file *f = tgc_st_open(path, d);
    if (!f) return false;
    const char *type = tgc_st_meta(f, "tgc.tokenizer_type");
    bool ok = true;
    tgc_tokenizer_kind k;
    if (type && !tgc_tokenizer_parse_type(type, &k)) {
        diag_error(d, (src_loc){.file = path}, "__metadata__ \"tgc.tokenizer_type\" is '%s': expected %s", type,
                   TGC_TOKENIZER_TYPES);
        ok = false;
    } else if (type) {
        static const char *const keys[] = {"tgc.vocab_file", "tgc.merge_file", "tgc.tokenizer_model"};
        char **dst[] = {&store->vocab_file, &store->merge_file, &store->model};
        store->type = xstrdup(type);
        for (size_t i = 0; ok && i < ARRAY_LEN(keys); i++) {
            const char *v = tgc_st_meta(f, keys[i]);
            if (v && !(*dst[i] = path_beside(path, v))) {
                diag_error(d, (src_loc){.file = path}, "__metadata__ \"%s\" is '%s': a tokenizer file of the "
                           "metadata is a file name beside the weights (no '/', not '..')", keys[i], v);
                ok = false;
            }
        }
        *o = (tgc_tokenizer_opts){store->type, store->vocab_file, store->merge_file, store->model};
        char why[512];
        if (ok && !tgc_tokenizer_opts_check(o, why, sizeof why)) {
            diag_error(d, (src_loc){.file = path}, "the tokenizer in its __metadata__ (tgc.tokenizer_type %s): %s",
                       type, why);
            ok = false;
        }
        *found = ok;
    }
    tgc_st_close(f);
    if (!ok) tgc_tokenizer_meta_free(store);
    return ok;
}

void tgc_tokenizer_meta_free(tgc_tokenizer_meta *m)
{
    free(m->type);
    free(m->vocab_file);
    free(m->merge_file);
    free(m->model);
    *m = (tgc_tokenizer_meta){0};
}
