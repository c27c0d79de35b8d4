/* Hugging Face checkpoints <-> tgc (runtime/io/hf.h): the tokenizer's
 * files, checked with tgc's loader and carried beside the weights
 * (vocab.json and merges.txt, tokenizer.model, or a tokenizer.json made
 * into GPT-2's two). */
#include "runtime/io/hf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/hf_impl.h"
#include "runtime/io/json.h"
#include "support/file.h"
#include "tokenizer/tokenizer.h"

/* ---- files ---------------------------------------------------------------------- */

/* Writes n bytes to path atomically (file_write_atomic). */
bool hf_write_file(const char *path, const void *data, size_t n, diag *d)
{
    char why[256];
    bool ok = file_write_atomic(path, data, n, why, sizeof why);
    if (!ok) diag_error(d, (src_loc){.file = path}, "cannot write: %s", why);
    return ok;
}

/* A tokenizer's files (from[1] NULL for SentencePiece: one file), read
 * once (a symlink followed: the hub cache's snapshots link into blobs),
 * loaded from those bytes with tgc's own loader and only then written to
 * to[]: what tgc carries, tgc reads back. made[] (non-NULL) holds files
 * derived here instead of read; from[] names them in messages. */
bool hf_carry_tokenizer(bool bpe, const char *const from[2], const strbuf *made, const char *const to[2], diag *d)
{
    char *text[2] = {NULL, NULL}, why[256];
    const char *bytes[2] = {NULL, NULL};
    size_t len[2] = {0, 0};
    int n = bpe ? 2 : 1;
    bool ok = true;
    for (int i = 0; ok && i < n; i++) {
        if (made) {
            bytes[i] = made[i].s ? made[i].s : "";
            len[i] = made[i].len;
        } else if (!(bytes[i] = text[i] = file_read(from[i], FILE_TEXT, &len[i], why, sizeof why))) {
            diag_error(d, (src_loc){.file = from[i]}, "cannot read: %s", why);
            ok = false;
        }
    }
    ok = ok && tokenizer_files_check(bpe ? TGC_TOKENIZER_GPT2BPE : TGC_TOKENIZER_SENTENCEPIECE, from, bytes, len, d);
    for (int i = 0; ok && i < n; i++) ok = hf_write_file(to[i], bytes[i], len[i], d);
    free(text[0]);
    free(text[1]);
    return ok;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* ---- tokenizer.json (the `tokenizers` library's file) -------------------------------- */

/* A JSON string as Python's json.dumps(..., ensure_ascii=False) writes it. */
static void py_json_string(strbuf *b, const char *s)
{
    sb_putc(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': sb_puts(b, "\\\""); break;
        case '\\': sb_puts(b, "\\\\"); break;
        case '\n': sb_puts(b, "\\n"); break;
        case '\r': sb_puts(b, "\\r"); break;
        case '\t': sb_puts(b, "\\t"); break;
        case '\b': sb_puts(b, "\\b"); break;
        case '\f': sb_puts(b, "\\f"); break;
        default:
            if (*p < 0x20) sb_printf(b, "\\u%04x", *p);
            else sb_putc(b, (char)*p);
        }
    }
    sb_putc(b, '"');
}

typedef struct tj_token {
    const char *key;
    int64_t id;
} tj_token;

static int tj_token_by_key(const void *a, const void *b)
{
    return strcmp(((const tj_token *)a)->key, ((const tj_token *)b)->key);
}

/* Member key of obj is absent, null, or the string want (want NULL: absent or null only; "" also matches null). */
static void tj_want_str(hf_cfg *c, const json_value *obj, const char *where, const char *key, const char *want)
{
    const json_value *v = json_get(obj, key);
    if (!v || v->kind == JSON_NULL) return;
    if (!want || v->kind != JSON_STRING || strcmp(v->str, want) != 0)
        hf_cfg_error(c, v, "%s.%s is %s%s%s: tgc's GPT2BPETokenizer (GPT-2's byte-level BPE) has %s%s%s", where, key,
                  v->kind == JSON_STRING ? "\"" : "", v->kind == JSON_STRING ? v->str : json_kind_name(v->kind),
                  v->kind == JSON_STRING ? "\"" : "", want ? "\"" : "none", want ? want : "", want ? "\"" : "");
}

static void tj_want_bool(hf_cfg *c, const json_value *obj, const char *where, const char *key, bool want)
{
    const json_value *v = json_get(obj, key);
    if (v && v->kind != JSON_NULL && (v->kind != JSON_BOOL || v->b != want))
        hf_cfg_error(c, v, "%s.%s is %s: tgc's GPT2BPETokenizer (GPT-2's byte-level BPE) has %s", where, key,
                  v->kind == JSON_BOOL ? (v->b ? "true" : "false") : json_kind_name(v->kind), want ? "true" : "false");
}

/* A component (pre_tokenizer, decoder, post_processor) that is absent, null
 * or {"type": "ByteLevel", ...} with GPT-2's options. */
static void tj_byte_level(hf_cfg *c, const json_value *root, const char *key, bool null_ok)
{
    const json_value *v = json_get(root, key);
    if ((!v || v->kind == JSON_NULL) && null_ok) return;
    const json_value *t = v && v->kind == JSON_OBJECT ? json_get(v, "type") : NULL;
    if (!t || t->kind != JSON_STRING || strcmp(t->str, "ByteLevel") != 0) {
        hf_cfg_error(c, t ? t : v, "%s is %s%s%s, not GPT-2's ByteLevel: tgc carries a tokenizer.json only as "
                  "GPT2BPETokenizer (byte-level BPE)", key, t && t->kind == JSON_STRING ? "\"" : "",
                  t && t->kind == JSON_STRING ? t->str : v ? json_kind_name(v->kind) : "absent",
                  t && t->kind == JSON_STRING ? "\"" : "");
        return;
    }
    if (strcmp(key, "pre_tokenizer") == 0) {
        tj_want_bool(c, v, key, "add_prefix_space", false);
        tj_want_bool(c, v, key, "use_regex", true);
    }
}

/* model.merges as merges.txt lines: each one a pair of tokens without
 * spaces or line breaks (what merges.txt can hold, one a line), else
 * refused at its entry. */
static void tj_merges(hf_cfg *cp, const json_value *m, strbuf *merges)
{
    for (int i = 0; cp->ok && i < m->n; i++) {
        const json_value *e = m->items[i];
        const char *a = NULL, *b = NULL;
        if (e->kind == JSON_STRING) { /* "a b" (tokenizers before 0.20) */
            const char *sp = strchr(e->str, ' ');
            if (sp && sp != e->str && sp[1] && !strchr(sp + 1, ' ') && !strpbrk(e->str, "\r\n")) {
                sb_puts(merges, e->str);
                sb_putc(merges, '\n');
                continue;
            }
        } else if (e->kind == JSON_ARRAY && e->n == 2 && e->items[0]->kind == JSON_STRING &&
                   e->items[1]->kind == JSON_STRING) { /* ["a", "b"] (0.20 and later) */
            a = e->items[0]->str;
            b = e->items[1]->str;
        }
        if (!a || !*a || !*b || strpbrk(a, " \r\n") || strpbrk(b, " \r\n")) {
            hf_cfg_error(cp, e, "model.merges[%d] is not a pair of tokens without spaces or line breaks (merges.txt's "
                      "\"a b\", one a line)", i);
            break;
        }
        sb_printf(merges, "%s %s\n", a, b);
    }
}

/* tokenizer.json's byte-level BPE as GPT-2's slow files, byte for byte as
 * transformers' GPT2Tokenizer.save_vocabulary writes them: vocab.json
 * (json.dumps(vocab, indent=2, sort_keys=True, ensure_ascii=False)) and
 * merges.txt ("#version: 0.2", then the merges by rank). Anything that
 * makes its encoding differ from GPT2BPETokenizer's is refused by name. */
static bool tokenizer_json_bpe(const char *path, strbuf *vocab, strbuf *merges, diag *d)
{
    json_doc *doc = json_read_file(path, d);
    if (!doc) return false;
    hf_cfg c = {doc->root, diag_intern(path), d, true};
    const json_value *root = doc->root, *model = json_get(root, "model");
    if (root->kind != JSON_OBJECT || !model || model->kind != JSON_OBJECT)
        hf_cfg_error(&c, root, "tokenizer.json has no \"model\" object");
    const json_value *type = c.ok ? json_get(model, "type") : NULL;
    if (c.ok && (!type || type->kind != JSON_STRING || strcmp(type->str, "BPE") != 0))
        hf_cfg_error(&c, type ? type : model, "model.type is %s%s%s: tgc carries a tokenizer.json only as "
                  "GPT2BPETokenizer (model.type \"BPE\")", type && type->kind == JSON_STRING ? "\"" : "",
                  type && type->kind == JSON_STRING ? type->str : "absent", type && type->kind == JSON_STRING ? "\"" : "");
    if (c.ok) {
        const json_value *norm = json_get(root, "normalizer");
        if (norm && norm->kind != JSON_NULL) {
            const json_value *nt = json_get(norm, "type");
            hf_cfg_error(&c, norm, "normalizer is %s%s%s: GPT-2's byte-level BPE has none (null)",
                      nt && nt->kind == JSON_STRING ? "\"" : "", nt && nt->kind == JSON_STRING ? nt->str : "set",
                      nt && nt->kind == JSON_STRING ? "\"" : "");
        }
        tj_byte_level(&c, root, "pre_tokenizer", false);
        tj_byte_level(&c, root, "decoder", true);
        tj_byte_level(&c, root, "post_processor", true);
        tj_want_str(&c, model, "model", "dropout", NULL);
        tj_want_str(&c, model, "model", "continuing_subword_prefix", "");
        tj_want_str(&c, model, "model", "end_of_word_suffix", "");
        tj_want_bool(&c, model, "model", "byte_fallback", false);
        tj_want_bool(&c, model, "model", "ignore_merges", false);
    }
    const json_value *v = c.ok ? json_get(model, "vocab") : NULL, *m = c.ok ? json_get(model, "merges") : NULL;
    if (c.ok && (!v || v->kind != JSON_OBJECT)) hf_cfg_error(&c, v ? v : model, "model.vocab is not an object");
    if (c.ok && (!m || m->kind != JSON_ARRAY)) hf_cfg_error(&c, m ? m : model, "model.merges is not an array");
    for (int i = 0; c.ok && i < v->n; i++)
        if (v->items[i]->kind != JSON_NUMBER || !v->items[i]->is_int || v->items[i]->i < 0)
            hf_cfg_error(&c, v->items[i], "model.vocab[\"%s\"] is not a token id (an integer >= 0)", v->keys[i]);
    /* An added token must be the vocabulary's own: GPT-2's slow files have no others. */
    const json_value *added = c.ok ? json_get(root, "added_tokens") : NULL;
    for (int i = 0; c.ok && added && added->kind == JSON_ARRAY && i < added->n; i++) {
        const json_value *a = added->items[i], *content = json_get(a, "content"), *id = json_get(a, "id");
        const json_value *in = content && content->kind == JSON_STRING ? json_get(v, content->str) : NULL;
        if (!in || !id || id->kind != JSON_NUMBER || !id->is_int || in->i != id->i)
            hf_cfg_error(&c, a, "added token %s%s%s is not in model.vocab with its id: GPT2BPETokenizer's vocab.json "
                      "has no added tokens", content && content->kind == JSON_STRING ? "\"" : "",
                      content && content->kind == JSON_STRING ? content->str : "?",
                      content && content->kind == JSON_STRING ? "\"" : "");
    }
    if (c.ok) {
        tj_token *tok = xcalloc((size_t)v->n + 1, sizeof *tok);
        for (int i = 0; i < v->n; i++) tok[i] = (tj_token){v->keys[i], v->items[i]->i};
        qsort(tok, (size_t)v->n, sizeof *tok, tj_token_by_key); /* UTF-8's byte order: Python's code points */
        sb_puts(vocab, v->n ? "{" : "{}");
        for (int i = 0; i < v->n; i++) {
            sb_puts(vocab, i ? ",\n  " : "\n  ");
            py_json_string(vocab, tok[i].key);
            sb_printf(vocab, ": %" PRId64, tok[i].id);
        }
        sb_puts(vocab, v->n ? "\n}\n" : "\n");
        free(tok);
        sb_puts(merges, "#version: 0.2\n");
    }
    if (c.ok) tj_merges(&c, m, merges);
    json_free(doc);
    return c.ok;
}

static const char *const hf_tokenizer_suffix[3] = {".vocab.json", ".merges.txt", ".tokenizer.model"};

char *hf_import_tokenizer_path(const char *weights, int i)
{
    size_t n = strlen(weights);
    size_t stem = n > 12 && strcmp(weights + n - 12, ".safetensors") == 0 ? n - 12 : n;
    strbuf to;
    sb_init(&to);
    sb_putn(&to, weights, stem);
    sb_puts(&to, hf_tokenizer_suffix[i]);
    return to.s;
}

/* The tokenizer files of dir, checked with tgc's loader and copied next
 * to out (hf_import_tokenizer_path), recorded in meta (file names beside
 * out); a tokenizer.json alone becomes GPT-2's vocab.json and merges.txt
 * (tokenizer_json_bpe). */
bool hf_import_tokenizer(const char *dir, const hf_model *m, const char *out, tgc_st_kv *meta, int *nmeta,
                         char **keep, int *nkeep, const char **type, diag *d)
{
    char *vocab = path_join(dir, "vocab.json"), *merges = path_join(dir, "merges.txt"),
         *spm = path_join(dir, "tokenizer.model"), *tj = path_join(dir, "tokenizer.json");
    bool bpe = hf_file_exists(vocab) && hf_file_exists(merges), sp = hf_file_exists(spm), fast = false;
    if (bpe && sp) bpe = m->family == HF_GPT2;
    strbuf made[2];
    sb_init(&made[0]);
    sb_init(&made[1]);
    bool ok = true;
    if (!bpe && !sp && hf_file_exists(tj)) {
        ok = fast = bpe = tokenizer_json_bpe(tj, &made[0], &made[1], d);
        if (!ok) diag_note(d, (src_loc){.file = diag_intern(tj)}, "the import carries a tokenizer.json only as "
                           "GPT-2's vocab.json and merges.txt; without tokenizer.json the model imports with no "
                           "tokenizer");
    }
    *type = !ok ? NULL : bpe ? "GPT2BPETokenizer" : sp ? "SentencePieceTokenizer" : NULL;
    char *to[2] = {hf_import_tokenizer_path(out, bpe ? 0 : 2), bpe ? hf_import_tokenizer_path(out, 1) : NULL};
    const char *from[2] = {bpe ? vocab : spm, bpe ? merges : NULL};
    if (fast) from[0] = to[0], from[1] = to[1]; /* the derived files, named as they would be written */
    const char *key[2] = {bpe ? "tgc.vocab_file" : "tgc.tokenizer_model", bpe ? "tgc.merge_file" : NULL};
    if (*type) {
        meta[(*nmeta)++] = (tgc_st_kv){"tgc.tokenizer_type", *type};
        ok = hf_carry_tokenizer(bpe, from, fast ? made : NULL, (const char *const *)to, d);
    }
    for (int i = 0; *type && ok && i < 2 && to[i]; i++) {
        keep[(*nkeep)++] = xstrdup(base_name(to[i]));
        meta[(*nmeta)++] = (tgc_st_kv){key[i], keep[*nkeep - 1]};
    }
    if (!ok && *type && fast)
        diag_note(d, (src_loc){.file = diag_intern(tj)}, "the files derived from this tokenizer.json do not load "
                  "(nothing was written)");
    else if (!ok && *type)
        diag_note(d, (src_loc){.file = diag_intern(from[0])}, "the tokenizer files are refused: fix or remove them to "
                  "import the model without a tokenizer");
    free(to[0]);
    free(to[1]);
    sb_free(&made[0]);
    sb_free(&made[1]);
    free(vocab);
    free(merges);
    free(spm);
    free(tj);
    return ok;
}
