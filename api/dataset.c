/* tgc_data_prep, tgc_data_info and tgc_data_dump (include/tgc.h): `tgc
 * data prep|info|dump`'s work, Megatron-LM indexed datasets made and
 * looked into (docs/data.md). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "runtime/io/data.h"
#include "runtime/plan.h"
#include "support/file.h"
#include "support/util.h"
#include "tgc.h"
#include "tokenizer/tokenizer.h"

/* ---- prep ------------------------------------------------------------------ */

/* What prep has gathered: the token stream and one sequence per document. */
typedef struct prep_state {
    const tgc_data_prep_args *o;
    const tgc_tokenizer *tokenizer;
    int64_t eod;
    int32_t *tok;
    int64_t ntok, cap;
    int64_t *lens; /* tokens per document */
    int64_t ndocs, dcap, skipped;
} prep_state;

static void prep_push(prep_state *st, int32_t v)
{
    if (st->ntok == st->cap) {
        st->cap = st->cap ? 2 * st->cap : 4096;
        st->tok = xrealloc(st->tok, (size_t)st->cap * sizeof *st->tok);
    }
    st->tok[st->ntok++] = v;
}

/* Tokenizes text[0 .. n) as one document (an empty one is skipped). */
static bool prep_document(prep_state *st, const unsigned char *text, size_t n, const char *where, diag *d)
{
    int64_t first = st->ntok;
    if (!tokenizer_encode(st->tokenizer, text, n, &st->tok, &st->ntok, &st->cap, where, d)) return false;
    if (st->ntok == first) { st->skipped++; return true; }
    if (st->o->append_eod) prep_push(st, (int32_t)st->eod);
    if (st->ntok - first > INT32_MAX) {
        diag_error(d, (src_loc){.file = where}, "a document of %lld tokens does not fit Megatron's int32 sequence "
                   "lengths", (long long)(st->ntok - first));
        return false;
    }
    if (st->ndocs == st->dcap) {
        st->dcap = st->dcap ? 2 * st->dcap : 256;
        st->lens = xrealloc(st->lens, (size_t)st->dcap * sizeof *st->lens);
    }
    st->lens[st->ndocs++] = st->ntok - first;
    return true;
}

static bool blank_line(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return false;
    return true;
}

/* One document per file, or per paragraph (runs of non-blank lines). */
static bool prep_file(prep_state *st, const char *path, diag *d)
{
    size_t n;
    char why[256];
    unsigned char *text = (unsigned char *)file_read(path, FILE_TEXT, &n, why, sizeof why);
    if (!text) {
        diag_error(d, (src_loc){.file = path}, "cannot read: %s", why);
        return false;
    }
    bool ok = true;
    if (!st->o->split_paragraphs) ok = prep_document(st, text, n, path, d);
    else {
        size_t start = 0;
        bool open = false;
        for (size_t i = 0; ok && i < n;) {
            const unsigned char *nl = memchr(text + i, '\n', n - i);
            size_t end = nl ? (size_t)(nl - text) + 1 : n;
            bool blank = blank_line(text + i, end - i - (nl ? 1 : 0));
            if (!blank && !open) { start = i; open = true; }
            if (blank && open) { ok = prep_document(st, text + start, i - start, path, d); open = false; }
            i = end;
        }
        if (ok && open) ok = prep_document(st, text + start, n - start, path, d);
    }
    free(text);
    return ok;
}

static void put_le(strbuf *b, uint64_t v, int bytes)
{
    for (int k = 0; k < bytes; k++) sb_putc(b, (char)(v >> (8 * k) & 0xff));
}

/* PREFIX.bin and then PREFIX.idx, each atomically. */
static bool prep_write(const prep_state *st, tgc_data_dtype dtype, diag *d)
{
    int w = tgc_data_dtype_size(dtype);
    strbuf bin, idx;
    sb_init(&bin);
    sb_init(&idx);
    for (int64_t i = 0; i < st->ntok; i++) put_le(&bin, (uint64_t)(uint32_t)st->tok[i], w);
    sb_putn(&idx, TGC_MEGATRON_MAGIC, TGC_MEGATRON_MAGIC_BYTES);
    put_le(&idx, TGC_MEGATRON_VERSION, 8);
    put_le(&idx, (uint64_t)dtype, 1);
    put_le(&idx, (uint64_t)st->ndocs, 8);     /* one sequence per document */
    put_le(&idx, (uint64_t)st->ndocs + 1, 8); /* document indices: 0, 1, ..., ndocs */
    for (int64_t k = 0; k < st->ndocs; k++) put_le(&idx, (uint64_t)st->lens[k], 4);
    uint64_t ptr = 0;
    for (int64_t k = 0; k < st->ndocs; k++) {
        put_le(&idx, ptr, 8);
        ptr += (uint64_t)st->lens[k] * (uint64_t)w;
    }
    for (int64_t k = 0; k <= st->ndocs; k++) put_le(&idx, (uint64_t)k, 8);
    size_t n = strlen(st->o->output) + 5;
    char *path = xmalloc(n);
    snprintf(path, n, "%s.bin", st->o->output);
    bool ok = rt_write_atomic(path, bin.s ? bin.s : "", bin.len, d);
    snprintf(path, n, "%s.idx", st->o->output);
    ok = ok && rt_write_atomic(path, idx.s, idx.len, d);
    free(path);
    sb_free(&bin);
    sb_free(&idx);
    return ok;
}

static bool prep_run(const tgc_data_prep_args *o, const tgc_tokenizer_opts *tok_opts, FILE *out, diag *dg)
{
    prep_state st = {.o = o};
    tgc_tokenizer *tk = tokenizer_open(tok_opts, dg);
    bool ok = tk != NULL;
    int64_t vocab = ok ? tgc_tokenizer_vocab_size(tk) : 0;
    st.eod = ok ? tgc_tokenizer_eod(tk) : -1;
    if (ok && o->append_eod && st.eod < 0) {
        bool bpe = tgc_tokenizer_kind_of(tk) == TGC_TOKENIZER_GPT2BPE;
        diag_error(dg, (src_loc){.file = bpe ? tok_opts->vocab_file : tok_opts->model}, "--append-eod: the %s has no %s",
                   bpe ? "vocabulary" : "SentencePiece model", bpe ? "<|endoftext|>" : "</s> (eos) piece");
        ok = false;
    }
    /* the byte tokenizer's end of document is one past the bytes */
    if (ok && o->append_eod && st.eod >= vocab) vocab = st.eod + 1;
    st.tokenizer = tk;
    for (int i = 0; ok && o->inputs[i]; i++) ok = prep_file(&st, o->inputs[i], dg);
    tgc_data_dtype dtype = tgc_data_optimal_dtype(vocab);
    if (ok) ok = prep_write(&st, dtype, dg);
    if (ok) {
        fprintf(out, "%s: %lld documents, %lld tokens (%s, vocabulary %lld", o->output, (long long)st.ndocs,
               (long long)st.ntok, tgc_data_dtype_name(dtype), (long long)vocab);
        if (o->append_eod) fprintf(out, ", end of document %lld", (long long)st.eod);
        if (st.skipped) fprintf(out, ", %lld empty skipped", (long long)st.skipped);
        fprintf(out, "): wrote %s.bin and %s.idx\n", o->output, o->output);
    }
    tgc_tokenizer_free(tk);
    free(st.tok);
    free(st.lens);
    return ok;
}

tgc_status tgc_data_prep(const tgc_data_prep_args *args, FILE *out)
{
    api_call a;
    api_call_begin(&a);
    tgc_data_prep_args o;
    if (!api_args_copy(&o, sizeof o, args, "tgc_data_prep", &a)) return api_call_end(&a, TGC_EINVAL);
    if (!out) {
        fprintf(a.f, "tgc: error: tgc_data_prep: out is NULL\n");
        return api_call_end(&a, TGC_EINVAL);
    }
    tgc_tokenizer_kind k;
    if (o.tokenizer_type && !tgc_tokenizer_parse_type(o.tokenizer_type, &k))
        return api_call_end(&a, api_usage(&a, "data prep", "--tokenizer-type '%s': expected %s", o.tokenizer_type,
                                          TGC_TOKENIZER_TYPES));
    if (!o.inputs || !o.inputs[0])
        return api_call_end(&a, api_usage(&a, "data prep", "missing TEXT: give one or more text files"));
    if (!o.output || !*o.output) return api_call_end(&a, api_usage(&a, "data prep", "missing -o PREFIX"));
    tgc_tokenizer_opts tok = {o.tokenizer_type, o.vocab_file, o.merge_file, o.tokenizer_model};
    char why[512];
    if (!tgc_tokenizer_opts_check(&tok, why, sizeof why)) return api_call_end(&a, api_usage(&a, "data prep", "%s", why));
    return api_call_end(&a, prep_run(&o, &tok, out, &a.d) ? TGC_OK : TGC_ERROR);
}

/* ---- info and dump ---------------------------------------------------------- */

tgc_status tgc_data_info(const tgc_data_view_args *args, FILE *out)
{
    api_call a;
    api_call_begin(&a);
    tgc_data_view_args o;
    if (!api_args_copy(&o, sizeof o, args, "tgc_data_info", &a)) return api_call_end(&a, TGC_EINVAL);
    if (!o.path || !out) {
        fprintf(a.f, "tgc: error: tgc_data_info: args->path and out must be given\n");
        return api_call_end(&a, TGC_EINVAL);
    }
    tgc_data *data = tgc_data_open(o.path, o.vocab, &a.d);
    if (data) {
        tgc_data_format f = tgc_data_format_of(data);
        fprintf(out, "format: %s\n", tgc_data_format_name(f));
        if (tgc_data_idx_path(data)) fprintf(out, "files: %s %s\n", tgc_data_idx_path(data), tgc_data_bin_path(data));
        else fprintf(out, "file: %s\n", tgc_data_bin_path(data));
        fprintf(out, "dtype: %s\n", tgc_data_dtype_name(tgc_data_dtype_of(data)));
        fprintf(out, "documents: %lld\n", (long long)tgc_data_ndocuments(data));
        fprintf(out, "sequences: %lld\n", (long long)tgc_data_nsequences(data));
        fprintf(out, "tokens: %lld\n", (long long)tgc_data_ntokens(data));
        for (int64_t k = 0; o.documents && k < tgc_data_ndocuments(data); k++) {
            int64_t s = tgc_data_document_start(data, k), e = tgc_data_document_start(data, k + 1);
            fprintf(out, "document %lld: tokens %lld..%lld (%lld)\n", (long long)k, (long long)s, (long long)e,
                    (long long)(e - s));
        }
    }
    bool ok = data != NULL;
    tgc_data_close(data);
    return api_call_end(&a, ok ? TGC_OK : TGC_ERROR);
}

/* The documents of the window [start, end) of the stream, a line each:
 * those with a token in it, and the empty ones at a position p of it
 * (start <= p < end, or p = end = ntokens), so that the windows of a
 * partition of the stream print every document once (an empty one as an
 * empty line). */
static void dump_window(const tgc_data *data, int64_t start, int64_t end, FILE *out)
{
    int64_t n = tgc_data_ntokens(data), ndoc = tgc_data_ndocuments(data);
    for (int64_t k = 0; k < ndoc; k++) {
        int64_t a = tgc_data_document_start(data, k), b = tgc_data_document_start(data, k + 1);
        if (b < start) continue;
        if (a > end || (a == end && end < n)) break;
        if (a == b ? a < start : b <= start) continue;
        int64_t lo = a > start ? a : start, hi = b < end ? b : end;
        for (int64_t i = lo; i < hi; i++) fprintf(out, i == lo ? "%d" : " %d", tgc_data_token(data, i));
        fputc('\n', out);
    }
}

/* Tokens start .. start+count-1, space-separated, a line per document. */
tgc_status tgc_data_dump(const tgc_data_view_args *args, FILE *out)
{
    api_call a;
    api_call_begin(&a);
    tgc_data_view_args o;
    if (!api_args_copy(&o, sizeof o, args, "tgc_data_dump", &a)) return api_call_end(&a, TGC_EINVAL);
    if (!o.path || !out) {
        fprintf(a.f, "tgc: error: tgc_data_dump: args->path and out must be given\n");
        return api_call_end(&a, TGC_EINVAL);
    }
    if (args->size <= offsetof(tgc_data_view_args, count)) o.count = -1;
    tgc_data *data = tgc_data_open(o.path, o.vocab, &a.d);
    tgc_status st = data ? TGC_OK : TGC_ERROR;
    int64_t n = data ? tgc_data_ntokens(data) : 0;
    if (data && o.start >= n) {
        diag_error(&a.d, (src_loc){.file = o.path}, "--start %lld is beyond the last token (%lld tokens)",
                   (long long)o.start, (long long)n);
        st = TGC_ERROR;
    }
    if (st == TGC_OK) {
        if (o.count != 0)
            dump_window(data, o.start, o.count < 0 || o.count > n - o.start ? n : o.start + o.count, out);
        if (fflush(out) != 0) st = TGC_ERROR;
    }
    tgc_data_close(data);
    return api_call_end(&a, st);
}
