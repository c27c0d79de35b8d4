/* `tgc data prep|info|dump`: Megatron-LM indexed datasets from the command
 * line (docs/data.md). */
#include "cli/data_cmd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "runtime/io/data.h"
#include "runtime/plan.h"
#include "support/file.h"
#include "support/util.h"
#include "tokenizer/tokenizer.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };

static int data_usage_error(const char *sub, const char *fmt, const char *arg)
{
    fprintf(stderr, "tgc data%s%s: error: ", *sub ? " " : "", sub);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'tgc data --help'.\n");
    return EXIT_USAGE;
}

/* ---- prep ------------------------------------------------------------------ */

typedef struct prep_opts {
    const char *output;
    tgc_tokenizer_opts tok; /* --tokenizer-type (--tokenizer) and its files */
    bool append_eod, split_paragraphs;
} prep_opts;

/* What prep has gathered: the token stream and one sequence per document. */
typedef struct prep_state {
    const prep_opts *o;
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

static int prep_run(const prep_opts *o, const char **inputs, int ninputs)
{
    diag d;
    diag_init(&d, stderr);
    prep_state st = {.o = o};
    tgc_tokenizer *tk = tokenizer_open(&o->tok, &d);
    bool ok = tk != NULL;
    int64_t vocab = ok ? tgc_tokenizer_vocab_size(tk) : 0;
    st.eod = ok ? tgc_tokenizer_eod(tk) : -1;
    if (ok && o->append_eod && st.eod < 0) {
        bool bpe = tgc_tokenizer_kind_of(tk) == TGC_TOKENIZER_GPT2BPE;
        diag_error(&d, (src_loc){.file = bpe ? o->tok.vocab_file : o->tok.model}, "--append-eod: the %s has no %s",
                   bpe ? "vocabulary" : "SentencePiece model", bpe ? "<|endoftext|>" : "</s> (eos) piece");
        ok = false;
    }
    /* the byte tokenizer's end of document is one past the bytes */
    if (ok && o->append_eod && st.eod >= vocab) vocab = st.eod + 1;
    st.tokenizer = tk;
    for (int i = 0; ok && i < ninputs; i++) ok = prep_file(&st, inputs[i], &d);
    tgc_data_dtype dtype = tgc_data_optimal_dtype(vocab);
    if (ok) ok = prep_write(&st, dtype, &d);
    if (ok) {
        printf("%s: %lld documents, %lld tokens (%s, vocabulary %lld", o->output, (long long)st.ndocs,
               (long long)st.ntok, tgc_data_dtype_name(dtype), (long long)vocab);
        if (o->append_eod) printf(", end of document %lld", (long long)st.eod);
        if (st.skipped) printf(", %lld empty skipped", (long long)st.skipped);
        printf("): wrote %s.bin and %s.idx\n", o->output, o->output);
    }
    tgc_tokenizer_free(tk);
    free(st.tok);
    free(st.lens);
    diag_finish(&d);
    diag_free(&d);
    return ok ? EXIT_OK : EXIT_INPUT;
}

static int data_prep(int argc, char **argv)
{
    static const cli_opt lo[] = {
        {"output", true, false, 'o'}, {"o", true, false, 'o'}, {"tokenizer-type", true, false, 't'},
        {"tokenizer", true, false, 't'}, {"vocab-file", true, false, 'v'}, {"merge-file", true, false, 'm'},
        {"tokenizer-model", true, false, 'M'}, {"append-eod", false, false, 'e'},
        {"split-paragraphs", false, false, 'p'}};
    prep_opts o = {0};
    const char **inputs = xmalloc((size_t)argc * sizeof *inputs);
    int ninputs = 0, ch, rc = EXIT_OK;
    cli_args a;
    cli_args_init(&a, "data prep", argc, argv, lo, (int)ARRAY_LEN(lo));
    while (rc == EXIT_OK && (ch = cli_args_next(&a)) != CLI_ARGS_END) {
        const char *arg = a.value;
        switch (ch) {
        case CLI_ARGS_ERROR: rc = EXIT_USAGE; break;
        case CLI_ARGS_POSITIONAL: inputs[ninputs++] = a.value; break;
        case 'o': o.output = arg; break;
        case 't': {
            tgc_tokenizer_kind k;
            if (!tgc_tokenizer_parse_type(arg, &k)) {
                fprintf(stderr, "tgc data prep: error: %s '%s': expected %s\nTry 'tgc data --help'.\n", a.given, arg,
                        TGC_TOKENIZER_TYPES);
                rc = EXIT_USAGE;
            }
            o.tok.type = arg;
            break;
        }
        case 'v': o.tok.vocab_file = arg; break;
        case 'm': o.tok.merge_file = arg; break;
        case 'M': o.tok.model = arg; break;
        case 'e': o.append_eod = true; break;
        case 'p': o.split_paragraphs = true; break;
        }
    }
    char why[512];
    if (rc == EXIT_OK && !ninputs) rc = data_usage_error("prep", "missing TEXT: give one or more text files%s", "");
    if (rc == EXIT_OK && (!o.output || !*o.output)) rc = data_usage_error("prep", "missing -o PREFIX%s", "");
    if (rc == EXIT_OK && !tgc_tokenizer_opts_check(&o.tok, why, sizeof why)) rc = data_usage_error("prep", "%s", why);
    if (rc == EXIT_OK) rc = prep_run(&o, inputs, ninputs);
    free(inputs);
    return rc;
}

/* ---- info and dump ---------------------------------------------------------- */

typedef struct view_opts {
    const char *path;
    int64_t vocab, start, count;
    bool documents;
} view_opts;

static int view_parse(const char *sub, int argc, char **argv, view_opts *o)
{
    static const cli_opt info_opts[] = {{"vocab", true, false, 'v'}, {"documents", false, false, 'D'}};
    static const cli_opt dump_opts[] = {
        {"vocab", true, false, 'v'}, {"start", true, false, 's'}, {"count", true, false, 'n'}};
    bool dump = strcmp(sub, "dump") == 0;
    int ch;
    *o = (view_opts){.count = -1};
    cli_args a;
    cli_args_init(&a, dump ? "data dump" : "data info", argc, argv, dump ? dump_opts : info_opts,
                  dump ? (int)ARRAY_LEN(dump_opts) : (int)ARRAY_LEN(info_opts));
    while ((ch = cli_args_next(&a)) != CLI_ARGS_END) {
        int64_t *num = ch == 'v' ? &o->vocab : ch == 's' ? &o->start : ch == 'n' ? &o->count : NULL;
        if (ch == CLI_ARGS_ERROR) return EXIT_USAGE;
        if (ch == CLI_ARGS_POSITIONAL) {
            if (o->path) return data_usage_error(sub, "unexpected argument '%s'", a.value);
            o->path = a.value;
        } else if (num) {
            if (!parse_i64(a.value, num) || *num < 0)
                return cli_usage_error(dump ? "data dump" : "data info", "%s '%s': expected an integer >= 0", a.given,
                                       a.value);
        } else if (ch == 'D') o->documents = true;
    }
    if (!o->path)
        return data_usage_error(sub, "missing PATH (a dataset prefix, a .idx/.bin, an llm.c or %s)", "text file");
    return EXIT_OK;
}

static int data_info(int argc, char **argv)
{
    view_opts o;
    int rc = view_parse("info", argc, argv, &o);
    if (rc) return rc;
    diag d;
    diag_init(&d, stderr);
    tgc_data *data = tgc_data_open(o.path, o.vocab, &d);
    if (data) {
        tgc_data_format f = tgc_data_format_of(data);
        printf("format: %s\n", tgc_data_format_name(f));
        if (tgc_data_idx_path(data)) printf("files: %s %s\n", tgc_data_idx_path(data), tgc_data_bin_path(data));
        else printf("file: %s\n", tgc_data_bin_path(data));
        printf("dtype: %s\n", tgc_data_dtype_name(tgc_data_dtype_of(data)));
        printf("documents: %lld\n", (long long)tgc_data_ndocuments(data));
        printf("sequences: %lld\n", (long long)tgc_data_nsequences(data));
        printf("tokens: %lld\n", (long long)tgc_data_ntokens(data));
        for (int64_t k = 0; o.documents && k < tgc_data_ndocuments(data); k++) {
            int64_t a = tgc_data_document_start(data, k), b = tgc_data_document_start(data, k + 1);
            printf("document %lld: tokens %lld..%lld (%lld)\n", (long long)k, (long long)a, (long long)b,
                   (long long)(b - a));
        }
    }
    tgc_data_close(data);
    diag_finish(&d);
    diag_free(&d);
    return data ? EXIT_OK : EXIT_INPUT;
}

/* The documents of the window [start, end) of the stream, a line each:
 * those with a token in it, and the empty ones at a position p of it
 * (start <= p < end, or p = end = ntokens), so that the windows of a
 * partition of the stream print every document once (an empty one as an
 * empty line). */
static void dump_window(const tgc_data *data, int64_t start, int64_t end)
{
    int64_t n = tgc_data_ntokens(data), ndoc = tgc_data_ndocuments(data);
    for (int64_t k = 0; k < ndoc; k++) {
        int64_t a = tgc_data_document_start(data, k), b = tgc_data_document_start(data, k + 1);
        if (b < start) continue;
        if (a > end || (a == end && end < n)) break;
        if (a == b ? a < start : b <= start) continue;
        int64_t lo = a > start ? a : start, hi = b < end ? b : end;
        for (int64_t i = lo; i < hi; i++) printf(i == lo ? "%d" : " %d", tgc_data_token(data, i));
        putchar('\n');
    }
}

/* Tokens start .. start+count-1, space-separated, a line per document. */
static int data_dump(int argc, char **argv)
{
    view_opts o;
    int rc = view_parse("dump", argc, argv, &o);
    if (rc) return rc;
    diag d;
    diag_init(&d, stderr);
    tgc_data *data = tgc_data_open(o.path, o.vocab, &d);
    rc = data ? EXIT_OK : EXIT_INPUT;
    int64_t n = data ? tgc_data_ntokens(data) : 0;
    if (data && o.start >= n) {
        diag_error(&d, (src_loc){.file = o.path}, "--start %lld is beyond the last token (%lld tokens)",
                   (long long)o.start, (long long)n);
        rc = EXIT_INPUT;
    }
    if (rc == EXIT_OK) {
        if (o.count != 0) dump_window(data, o.start, o.count < 0 || o.count > n - o.start ? n : o.start + o.count);
        if (fflush(stdout) != 0) rc = EXIT_INPUT;
    }
    tgc_data_close(data);
    diag_finish(&d);
    diag_free(&d);
    return rc;
}

int cli_data(int argc, char **argv, void (*help_fn)(FILE *))
{
    if (argc < 2) return data_usage_error("", "missing a subcommand: prep, info or dump%s", "");
    const char *sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0) {
        help_fn(stdout);
        return EXIT_OK;
    }
    for (int i = 2; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { help_fn(stdout); return EXIT_OK; }
    if (strcmp(sub, "prep") == 0) return data_prep(argc - 1, argv + 1);
    if (strcmp(sub, "info") == 0) return data_info(argc - 1, argv + 1);
    if (strcmp(sub, "dump") == 0) return data_dump(argc - 1, argv + 1);
    return data_usage_error("", "unknown subcommand '%s': expected prep, info or dump", sub);
}
