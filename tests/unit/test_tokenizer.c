/* tokenizer/tokenizer.h without external files beyond a tiny GPT-2
 * vocabulary written here: the names and aliases, the option checks'
 * messages, ByteTokenizer's encode/decode, GPT2BPETokenizer's decode through
 * the inverse byte map (bytes that are not UTF-8 too), ids outside the
 * vocabulary decoding to <|id N|>, a text file tokenized at open
 * (tgc_data_open_tokenized) and the errors of bad files. The SentencePiece
 * side is checked against Debian's spm tools in tests/tokenizer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capture.h"
#include "check.h"
#include "runtime/io/data.h"
#include "tmpdir.h"
#include "tokenizer/spm.h"
#include "tokenizer/tokenizer.h"

static void write_text(const char *path, const char *s)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fputs(s, f);
    fclose(f);
}

static void test_names(void)
{
    tgc_tokenizer_kind k;
    CHECK(tgc_tokenizer_parse_type("GPT2BPETokenizer", &k) && k == TGC_TOKENIZER_GPT2BPE);
    CHECK(tgc_tokenizer_parse_type("gpt2", &k) && k == TGC_TOKENIZER_GPT2BPE);
    CHECK(tgc_tokenizer_parse_type("bytes", &k) && k == TGC_TOKENIZER_BYTES);
    CHECK(tgc_tokenizer_parse_type("GPTSentencePieceTokenizer", &k) && k == TGC_TOKENIZER_SENTENCEPIECE);
    CHECK(!tgc_tokenizer_parse_type("gpt2bpetokenizer", &k)); /* names are exact */
    CHECK(!tgc_tokenizer_parse_type(NULL, &k));
    CHECK_STR(tgc_tokenizer_kind_name(TGC_TOKENIZER_SENTENCEPIECE), "SentencePieceTokenizer");
    char why[512];
    tgc_tokenizer_opts o = {"HuggingFaceTokenizer", NULL, NULL, NULL};
    CHECK(!tgc_tokenizer_opts_check(&o, why, sizeof why));
    CHECK_STR(why, "--tokenizer-type 'HuggingFaceTokenizer': expected " TGC_TOKENIZER_TYPES);
    o = (tgc_tokenizer_opts){"gpt2", "v.json", NULL, NULL};
    CHECK(!tgc_tokenizer_opts_check(&o, why, sizeof why));
    CHECK_STR(why, "--tokenizer-type GPT2BPETokenizer needs --vocab-file vocab.json and --merge-file merges.txt");
    o = (tgc_tokenizer_opts){"GPT2BPETokenizer", "v.json", "m.txt", "x.model"};
    CHECK(!tgc_tokenizer_opts_check(&o, why, sizeof why));
    CHECK_STR(why, "--tokenizer-model belongs to --tokenizer-type SentencePieceTokenizer, not GPT2BPETokenizer");
    o = (tgc_tokenizer_opts){NULL, NULL, NULL, "x.model"};
    CHECK(!tgc_tokenizer_opts_check(&o, why, sizeof why));
    CHECK(strstr(why, "(the tokenizer is ByteTokenizer without --tokenizer-type)") != NULL);
    o = (tgc_tokenizer_opts){0};
    CHECK(tgc_tokenizer_opts_check(&o, why, sizeof why) && !tgc_tokenizer_opts_given(&o));
}

static void test_bytes(void)
{
    capture c;
    cap_init(&c);
    tgc_tokenizer_opts o = {0};
    tgc_tokenizer *t = tokenizer_open(&o, &c.d);
    CHECK(t && tgc_tokenizer_vocab_size(t) == 256 && tgc_tokenizer_eod(t) == 256);
    if (t) {
        int32_t *ids = NULL;
        int64_t n = 0, cap = 0;
        const unsigned char text[] = {'h', 'i', 0xff, 0};
        CHECK(tokenizer_encode(t, text, 4, &ids, &n, &cap, "x", &c.d) && n == 4);
        CHECK(n == 4 && ids[0] == 'h' && ids[2] == 255 && ids[3] == 0);
        int32_t more[] = {'o', 'k', 256, 300};
        strbuf out;
        sb_init(&out);
        CHECK(tokenizer_decode(t, more, 4, &out, &c.d));
        CHECK_STR(out.s, "ok<|id 256|><|id 300|>");
        sb_free(&out);
        free(ids);
    }
    tgc_tokenizer_free(t);
    cap_free(&c);
}

/* The 256 byte symbols (bytes_to_unicode) in byte order, then "he", "ll",
 * "hell", "Ġw" and <|endoftext|>, with a hole at id 262. */
static void write_gpt2_with(const char *vocab, const char *merges, const char *more, const char *merges_text)
{
    strbuf v;
    sb_init(&v);
    sb_putc(&v, '{');
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        unsigned cp = self ? (unsigned)b : 256u + (unsigned)extra++;
        if (cp == '"' || cp == '\\') sb_printf(&v, "\"\\%c\": %d, ", (char)cp, b);
        else sb_printf(&v, "\"\\u%04x\": %d, ", cp, b);
    }
    sb_puts(&v, "\"he\": 256, \"ll\": 257, \"hell\": 258, \"\\u0120w\": 259, \"<|endoftext|>\": 263");
    sb_puts(&v, more);
    sb_puts(&v, "}");
    write_text(vocab, v.s);
    sb_free(&v);
    write_text(merges, merges_text);
}

#define GPT2_MERGES "#version: 0.2\nh e\nl l\nhe ll\n\xc4\xa0 w\n" /* U+0120 is the space's symbol */

static void write_gpt2(const char *vocab, const char *merges) { write_gpt2_with(vocab, merges, "", GPT2_MERGES); }

/* What the tokenizers library refuses, and ids that would size the table
 * by a number in the file: each refused with its place, never an exit. */
static void test_gpt2_refusals(void)
{
    static const struct {
        const char *more, *merges, *want;
    } cases[] = {
        {",\n\"zz\": 2147483647", GPT2_MERGES,
         "vocab.json:2:1: error: token \"zz\" has id 2147483647, beyond the vocabulary's 262 entries"},
        {",\n\"zz\": 1286", GPT2_MERGES, "vocab.json:2:1: error: token \"zz\" has id 1286, beyond"},
        {",\n\"zz\": 256", GPT2_MERGES, "vocab.json:2:1: error: token \"zz\" has id 256, which token \"he\" has already"},
        {"", GPT2_MERGES "he zz\n", "merges.txt:6:1: error: the merge's second symbol 'zz' is not in the vocabulary"},
        {"", GPT2_MERGES "h l\n", "merges.txt:6:1: error: the merge's result 'hl' is not in the vocabulary"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        write_gpt2_with(tmp_path("vocab.json"), tmp_path("merges.txt"), cases[i].more, cases[i].merges);
        capture c;
        cap_init(&c);
        tgc_tokenizer_opts o = {"GPT2BPETokenizer", tmp_path("vocab.json"), tmp_path("merges.txt"), NULL};
        tgc_tokenizer *t = tokenizer_open(&o, &c.d);
        CHECK(t == NULL);
        CHECK(strstr(cap_text(&c), cases[i].want) != NULL);
        if (!strstr(cap_text(&c), cases[i].want)) fprintf(stderr, "case %zu: %s\n", i, cap_text(&c));
        tgc_tokenizer_free(t);
        cap_free(&c);
    }
    /* Ids within the allowance above the entry count load. */
    write_gpt2_with(tmp_path("vocab.json"), tmp_path("merges.txt"), ",\n\"zz\": 1285", GPT2_MERGES);
    capture c;
    cap_init(&c);
    tgc_tokenizer_opts o = {"GPT2BPETokenizer", tmp_path("vocab.json"), tmp_path("merges.txt"), NULL};
    tgc_tokenizer *t = tokenizer_open(&o, &c.d);
    CHECK(t != NULL && tgc_tokenizer_vocab_size(t) == 1286);
    tgc_tokenizer_free(t);
    cap_free(&c);
}

static void test_gpt2(void)
{
    write_gpt2(tmp_path("vocab.json"), tmp_path("merges.txt"));
    capture c;
    cap_init(&c);
    tgc_tokenizer_opts o = {"GPT2BPETokenizer", tmp_path("vocab.json"), tmp_path("merges.txt"), NULL};
    tgc_tokenizer *t = tokenizer_open(&o, &c.d);
    CHECK(t != NULL);
    if (!t) {
        fprintf(stderr, "%s", cap_text(&c));
        cap_free(&c);
        return;
    }
    CHECK(tgc_tokenizer_vocab_size(t) == 264 && tgc_tokenizer_eod(t) == 263);
    CHECK(tgc_tokenizer_has_id(t, 259) && !tgc_tokenizer_has_id(t, 262) && !tgc_tokenizer_has_id(t, 264));
    const char *text = "hello w\xff\n";
    int32_t *ids = NULL;
    int64_t n = 0, cap = 0;
    CHECK(tokenizer_encode(t, (const unsigned char *)text, strlen(text), &ids, &n, &cap, "x", &c.d));
    /* "hello" is one piece: "hell" "o"; " w" another: "Ġw" (the merge of U+0120 and w); then 0xff, "\n" */
    CHECK(n == 5 && ids[0] == 258 && ids[1] == 'o' && ids[2] == 259 && ids[3] == 255 && ids[4] == 10);
    strbuf out;
    sb_init(&out);
    CHECK(tokenizer_decode(t, ids, n, &out, &c.d));
    CHECK(out.len == strlen(text) && memcmp(out.s, text, out.len) == 0); /* byte-level: lossless */
    out.len = 0;
    int32_t odd[] = {256, 262, 263, 259};
    CHECK(tokenizer_decode(t, odd, 4, &out, &c.d));
    sb_putc(&out, 0);
    CHECK_STR(out.s, "he<|id 262|><|endoftext|> w");
    sb_free(&out);
    free(ids);

    /* A text file tokenized at open: the stream is the tokens. */
    write_text(tmp_path("t.txt"), "hello hello\n");
    tgc_data *data = tgc_data_open_tokenized(tmp_path("t.txt"), 300, t, &c.d);
    CHECK(data != NULL);
    if (data) {
        int32_t *want = NULL;
        int64_t wn = 0, wcap = 0;
        CHECK(tokenizer_encode(t, (const unsigned char *)"hello hello\n", 12, &want, &wn, &wcap, "x", &c.d));
        CHECK(tgc_data_ntokens(data) == wn);
        for (int64_t i = 0; i < wn && i < tgc_data_ntokens(data); i++) CHECK(tgc_data_token(data, i) == want[i]);
        CHECK(tgc_data_dtype_of(data) == TGC_DTYPE_INT32);
        free(want);
    }
    tgc_data_close(data);
    /* ... and checked against the model's vocabulary. */
    data = tgc_data_open_tokenized(tmp_path("t.txt"), 258, t, &c.d);
    CHECK(data == NULL && strstr(cap_text(&c), "token 258 at position 0 is out of range for vocabulary 258"));
    tgc_tokenizer_free(t);
    cap_free(&c);
}

static void test_bad_files(void)
{
    capture c;
    cap_init(&c);
    write_text(tmp_path("bad.model"), "not a protobuf at all");
    tgc_tokenizer_opts o = {"SentencePieceTokenizer", NULL, NULL, tmp_path("bad.model")};
    CHECK(tokenizer_open(&o, &c.d) == NULL);
    CHECK(strstr(cap_text(&c), "bad.model: error: not a SentencePiece model (libsentencepiece: ") != NULL);
    o.model = tmp_path("none.model");
    CHECK(tokenizer_open(&o, &c.d) == NULL);
    CHECK(strstr(cap_text(&c), "none.model: error: cannot read the SentencePiece model: No such file") != NULL);
    write_text(tmp_path("v.json"), "[1, 2]");
    o = (tgc_tokenizer_opts){"gpt2", tmp_path("v.json"), tmp_path("merges.txt"), NULL};
    CHECK(tokenizer_open(&o, &c.d) == NULL);
    CHECK(strstr(cap_text(&c), "v.json:1:1: error: expected '{'") != NULL);
    o = (tgc_tokenizer_opts){"gpt2", NULL, NULL, NULL};
    CHECK(tokenizer_open(&o, &c.d) == NULL);
    CHECK(strstr(cap_text(&c), "needs --vocab-file vocab.json and --merge-file merges.txt") != NULL);
    cap_free(&c);
}

/* The work libsentencepiece does on a text, in its quadratic term: the
 * sum over the pieces tgc_spm_encode hands it of the squared length of
 * each piece's longest run without white space. The pieces must cover the
 * text in order, each cut at a character boundary. */
static double spm_work(const char *t, size_t n, size_t *pieces)
{
    double work = 0;
    *pieces = 0;
    for (size_t i = 0; i < n;) {
        size_t k = tgc_spm_piece(t, n, i, TGC_SPM_MAX_RUN), run = 0, longest = 0;
        CHECK(k >= 1 && i + k <= n);
        if (k < 1 || i + k > n) return -1;
        CHECK(i + k == n || ((unsigned char)t[i + k] & 0xC0) != 0x80);
        for (size_t j = i; j < i + k; j++) {
            run = strchr(" \t\n\r\f\v", t[j]) && t[j] ? 0 : run + 1;
            if (run > longest) longest = run;
        }
        work += (double)longest * (double)longest;
        i += k;
        ++*pieces;
    }
    return work;
}

/* Runs of combining marks (U+0301, two bytes each) grow the work linearly,
 * not quadratically; ordinary text is one piece, encoded whole. */
static void test_spm_pieces(void)
{
    size_t small = 1 << 16, big = 8 * small, np;
    char *t = malloc(big + 8);
    CHECK(t != NULL);
    if (!t) return;
    for (size_t i = 0; i < big; i += 2) memcpy(t + i, "\xcc\x81", 2);
    double w1 = spm_work(t, small, &np), w8 = spm_work(t, big, &np);
    CHECK(w1 > 0 && w8 <= 8.5 * w1); /* whole, the work would grow 64 times */
    CHECK(np >= big / TGC_SPM_MAX_RUN);
    for (size_t i = 0; i < big; i++) t[i] = i % 7 == 6 ? ' ' : 'a' + (char)(i % 7);
    CHECK(spm_work(t, big, &np) > 0 && np == 1);
    /* A long run among words: the words before it whole, the run cut, the rest after it. */
    memset(t, 'x', 3 * TGC_SPM_MAX_RUN);
    memcpy(t, "ab ", 3);
    memcpy(t + 3 * TGC_SPM_MAX_RUN - 3, " cd", 3);
    CHECK(tgc_spm_piece(t, 3 * TGC_SPM_MAX_RUN, 0, TGC_SPM_MAX_RUN) == 3);
    CHECK(tgc_spm_piece(t, 3 * TGC_SPM_MAX_RUN, 3, TGC_SPM_MAX_RUN) == TGC_SPM_MAX_RUN);
    CHECK(spm_work(t, 3 * TGC_SPM_MAX_RUN, &np) > 0 && np == 4); /* two cuts, then the run's end with " cd" */
    free(t);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tgc_test_tokenizer_XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    test_names();
    test_bytes();
    test_gpt2();
    test_bad_files();
    test_gpt2_refusals();
    test_spm_pieces();
    const char *files[] = {"vocab.json", "merges.txt", "t.txt", "bad.model", "v.json"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) unlink(tmp_path(files[i]));
    CHECK(rmdir(tmpdir) == 0);
    CHECK_DONE();
}
