/* Training data: text and llm.c token files written to a temp dir, exact
 * batches in the [s, B] layout with wrap-around, row shares, the shuffled
 * order, and every error message; Megatron indexed datasets (back to back
 * and with gaps) across document boundaries. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capture.h"
#include "check.h"
#include "runtime/io/data.h"

static char tmpdir[64];

static const char *tmp_path(const char *name)
{
    static char buf[256];
    snprintf(buf, sizeof buf, "%s/%s", tmpdir, name);
    return buf;
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    if (n) CHECK(fwrite(p, 1, n, f) == n);
    fclose(f);
}

/* An llm.c file: the header (magic, version, count) and `ntok` uint16 tokens. */
static void write_llmc(const char *path, int32_t magic, int32_t version, int32_t count, const uint16_t *tok,
                       int ntok)
{
    unsigned char *buf = calloc(1, TGC_LLMC_HEADER_BYTES + 2 * (size_t)ntok);
    int32_t h[3] = {magic, version, count};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++) buf[4 * i + k] = (unsigned char)((uint32_t)h[i] >> (8 * k));
    for (int i = 0; i < ntok; i++) {
        buf[TGC_LLMC_HEADER_BYTES + 2 * i] = (unsigned char)(tok[i] & 0xff);
        buf[TGC_LLMC_HEADER_BYTES + 2 * i + 1] = (unsigned char)(tok[i] >> 8);
    }
    write_bytes(path, buf, TGC_LLMC_HEADER_BYTES + 2 * (size_t)ntok);
    free(buf);
}


/* Opening `path` fails with exactly "PATH: error: MSG\n". */
static void expect_open_error(const char *name, int64_t vocab, const char *msg)
{
    capture c;
    cap_init(&c);
    char path[256], want[512];
    snprintf(path, sizeof path, "%s", tmp_path(name));
    tgc_data *d = tgc_data_open(path, vocab, &c.d);
    CHECK(d == NULL);
    snprintf(want, sizeof want, "%s: error: %s\n", path, msg);
    CHECK_STR(cap_text(&c), want);
    CHECK(c.d.nerrors == 1);
    tgc_data_close(d);
    cap_free(&c);
}

static void test_text_batches(void)
{
    const char *path = tmp_path("ten.txt");
    write_bytes(path, "abcdefghij", 10);
    capture c;
    cap_init(&c);
    tgc_data *d = tgc_data_open(path, 256, &c.d);
    CHECK(d != NULL);
    if (!d) { cap_free(&c); return; }
    CHECK(tgc_data_format_of(d) == TGC_DATA_TEXT && tgc_data_ntokens(d) == 10);
    CHECK(tgc_data_token(d, 3) == 'd');
    /* s = 3: samples "abcd", "defg", "ghij". B = 2 wraps at step 1. */
    CHECK(tgc_data_nsamples(d, 3) == 3 && tgc_data_nsamples(d, 9) == 1 && tgc_data_nsamples(d, 10) == 0);
    static const char *want[3][2] = {{"abcd", "defg"}, {"ghij", "abcd"}, {"defg", "ghij"}};
    int32_t tok[6], lab[6];
    for (int step = 0; step < 3; step++) {
        tgc_data_batch(d, step, 3, 2, tok, lab);
        for (int t = 0; t < 3; t++)
            for (int b = 0; b < 2; b++) {
                CHECK(tok[t * 2 + b] == want[step][b][t]);
                CHECK(lab[t * 2 + b] == want[step][b][t + 1]);
            }
    }
    /* Step 4 = step 1 (6 samples per 2 steps, 3 samples). */
    int32_t tok2[6], lab2[6];
    tgc_data_batch(d, 1, 3, 2, tok, lab);
    tgc_data_batch(d, 4, 3, 2, tok2, lab2);
    CHECK(memcmp(tok, tok2, sizeof tok) == 0 && memcmp(lab, lab2, sizeof lab) == 0);
    /* Rows 1..1 of the batch are column 1 of the whole batch. */
    int32_t rt[3], rl[3];
    tgc_data_batch_rows(d, NULL, 2, 3, 2, 1, 1, rt, rl);
    for (int t = 0; t < 3; t++) CHECK(rt[t] == "ghij"[t] && rl[t] == "ghij"[t + 1]);
    CHECK(tgc_data_check_seq(d, 9, &c.d));
    CHECK(!tgc_data_check_seq(d, 10, &c.d));
    char msg[512];
    snprintf(msg, sizeof msg,
             "%s: error: 10 tokens are too few for one sample of sequence length 10 (needs seq + 1 = 11)\n", path);
    CHECK_STR(cap_text(&c), msg);
    tgc_data_close(d);
    cap_free(&c);
}

static void test_llmc_batches(void)
{
    enum { N = 50 };
    uint16_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)(1000 * i + 7); /* > 255: both bytes matter */
    /* Recognised by its magic whatever the name says. */
    const char *path = tmp_path("tokens.txt");
    write_llmc(path, TGC_LLMC_MAGIC, TGC_LLMC_VERSION, N, tok, N);
    capture c;
    cap_init(&c);
    tgc_data *d = tgc_data_open(path, 50304, &c.d);
    CHECK(d != NULL && c.d.nerrors == 0);
    if (!d) { cap_free(&c); return; }
    CHECK(tgc_data_format_of(d) == TGC_DATA_LLMC && tgc_data_ntokens(d) == N);
    enum { S = 8, B = 4 };
    const int64_t ns = (N - 1) / S; /* 6 */
    CHECK(tgc_data_nsamples(d, S) == ns);
    int32_t t[S * B], l[S * B];
    for (int64_t step = 0; step < 5; step++) {
        tgc_data_batch(d, step, S, B, t, l);
        int ok = 1;
        for (int b = 0; b < B; b++) {
            int64_t sample = (step * B + b) % ns;
            for (int i = 0; i < S; i++) {
                ok &= t[i * B + b] == tok[sample * S + i];
                ok &= l[i * B + b] == tok[sample * S + i + 1];
            }
        }
        CHECK(ok);
    }
    /* Two halves of the batch (two data-parallel ranks) make the whole. */
    int32_t h0[S * 2], h1[S * 2], g0[S * 2], g1[S * 2];
    tgc_data_batch(d, 3, S, B, t, l);
    tgc_data_batch_rows(d, NULL, 3, S, B, 0, 2, h0, g0);
    tgc_data_batch_rows(d, NULL, 3, S, B, 2, 2, h1, g1);
    int ok = 1;
    for (int i = 0; i < S; i++)
        for (int b = 0; b < 2; b++) {
            ok &= h0[i * 2 + b] == t[i * B + b] && g0[i * 2 + b] == l[i * B + b];
            ok &= h1[i * 2 + b] == t[i * B + 2 + b] && g1[i * 2 + b] == l[i * B + 2 + b];
        }
    CHECK(ok);
    tgc_data_close(d);
    cap_free(&c);
}

static void test_shuffle(void)
{
    enum { N = 1001, S = 10 };
    unsigned char text[N];
    for (int i = 0; i < N; i++) text[i] = (unsigned char)(i % 251);
    const char *path = tmp_path("shuffle.txt");
    write_bytes(path, text, N);
    capture c;
    cap_init(&c);
    tgc_data *d = tgc_data_open(path, 256, &c.d);
    CHECK(d != NULL);
    if (!d) { cap_free(&c); return; }
    int64_t ns = tgc_data_nsamples(d, S); /* 100 */
    tgc_data_order *o = tgc_data_order_new(ns, 5), *o2 = tgc_data_order_new(ns, 5), *o3 = tgc_data_order_new(ns, 6);
    int perm_ok = 1, same = 1, moved = 0, epochs_differ = 0, seeds_differ = 0;
    for (int e = 0; e < 3; e++) {
        char seen[100] = {0};
        for (int64_t j = 0; j < ns; j++) {
            int64_t s = tgc_data_order_sample(o, e * ns + j);
            perm_ok &= s >= 0 && s < ns && !seen[s];
            if (s >= 0 && s < ns) seen[s] = 1;
            moved += s != j;
            seeds_differ += s != tgc_data_order_sample(o3, e * ns + j);
            if (e) epochs_differ += s != tgc_data_order_sample(o, (e - 1) * ns + j);
        }
    }
    /* Random access in another order gives the same stream. */
    for (int64_t j = 3 * ns - 1; j >= 0; j--) same &= tgc_data_order_sample(o2, j) == tgc_data_order_sample(o, j);
    CHECK(perm_ok && same);
    CHECK(moved > 250 && epochs_differ > 150 && seeds_differ > 250);
    /* A shuffled batch holds the samples the order names. */
    int32_t t[S * 3], l[S * 3];
    tgc_data_batch_rows(d, o, 40, S, 3, 0, 3, t, l);
    int ok = 1;
    for (int b = 0; b < 3; b++) {
        int64_t s = tgc_data_order_sample(o, 40 * 3 + b);
        for (int i = 0; i < S; i++) ok &= t[i * 3 + b] == text[s * S + i] && l[i * 3 + b] == text[s * S + i + 1];
    }
    CHECK(ok);
    tgc_data_order_free(o);
    tgc_data_order_free(o2);
    tgc_data_order_free(o3);
    tgc_data_close(d);
    cap_free(&c);
}

static void test_errors(void)
{
    expect_open_error("missing.txt", 256, "cannot open: No such file or directory");
    write_bytes(tmp_path("empty.txt"), "", 0);
    expect_open_error("empty.txt", 256, "empty token file");
    write_bytes(tmp_path("one.txt"), "x", 1);
    expect_open_error("one.txt", 256, "only 1 token: one sample needs at least 2 (seq + 1)");
    write_bytes(tmp_path("high.txt"), "hello world", 11);
    expect_open_error("high.txt", 110, "token 111 at position 4 is out of range for vocabulary 110");

    uint16_t tok[6] = {1, 2, 3, 4, 50257, 6};
    write_llmc(tmp_path("magic.bin"), 20240521, 1, 6, tok, 6);
    expect_open_error("magic.bin", 50304, "not an llm.c token file: magic 20240521 (expected 20240520)");
    write_llmc(tmp_path("version.bin"), TGC_LLMC_MAGIC, 2, 6, tok, 6);
    expect_open_error("version.bin", 50304, "unsupported llm.c token file version 2 (expected 1)");
    write_llmc(tmp_path("zero.bin"), TGC_LLMC_MAGIC, 1, 0, tok, 0);
    expect_open_error("zero.bin", 50304, "llm.c header declares 0 tokens (expected at least 1)");
    write_llmc(tmp_path("short.bin"), TGC_LLMC_MAGIC, 1, 10, tok, 6);
    expect_open_error("short.bin", 50304,
                      "file size 1036 bytes does not match the llm.c header: 10 tokens need 1024 + 2 * 10 = "
                      "1044 bytes");
    write_llmc(tmp_path("long.bin"), TGC_LLMC_MAGIC, 1, 5, tok, 6);
    expect_open_error("long.bin", 50304,
                      "file size 1036 bytes does not match the llm.c header: 5 tokens need 1024 + 2 * 5 = "
                      "1034 bytes");
    write_llmc(tmp_path("vocab.bin"), TGC_LLMC_MAGIC, 1, 6, tok, 6);
    expect_open_error("vocab.bin", 50257, "token 50257 at position 4 is out of range for vocabulary 50257");
    unsigned char hdr[100] = {0};
    hdr[0] = TGC_LLMC_MAGIC & 0xff, hdr[1] = (TGC_LLMC_MAGIC >> 8) & 0xff, hdr[2] = (TGC_LLMC_MAGIC >> 16) & 0xff;
    hdr[3] = (unsigned char)(TGC_LLMC_MAGIC >> 24);
    write_bytes(tmp_path("hdr.dat"), hdr, sizeof hdr);
    expect_open_error("hdr.dat", 50304, "truncated llm.c header: 100 bytes (expected at least 1024)");
    write_bytes(tmp_path("tiny.bin"), "ab", 2);
    expect_open_error("tiny.bin", 256, "not an llm.c token file: only 2 bytes");
    /* vocab <= 0 skips the range check. */
    capture c;
    cap_init(&c);
    tgc_data *d = tgc_data_open(tmp_path("vocab.bin"), 0, &c.d);
    CHECK(d && c.d.nerrors == 0 && tgc_data_token(d, 4) == 50257);
    tgc_data_close(d);
    cap_free(&c);
}

/* ---- Megatron indexed datasets --------------------------------------------- */

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int k = 0; k < n; k++) p[k] = (unsigned char)(v >> (8 * k));
}

/* PREFIX.idx + PREFIX.bin: int16 tokens, the sequences `len` with `gap`
 * padding bytes before each; one document per sequence. Returns the
 * token stream's length (the tokens are 1000 + i). */
static int write_megatron(const char *prefix, const int *len, int nseq, int gap)
{
    unsigned char idx[512], bin[1024];
    size_t at = 0, b = 0;
    memcpy(idx, "MMIDIDX\0\0", 9);
    put_le(idx + 9, 1, 8);
    idx[17] = TGC_DTYPE_INT16;
    put_le(idx + 18, (uint64_t)nseq, 8);
    put_le(idx + 26, (uint64_t)nseq + 1, 8);
    at = 34;
    int tok = 0;
    for (int k = 0; k < nseq; k++) put_le(idx + at + 4 * k, (uint64_t)len[k], 4);
    at += 4 * (size_t)nseq;
    for (int k = 0; k < nseq; k++) {
        b += (size_t)gap;
        put_le(idx + at + 8 * k, b, 8);
        for (int i = 0; i < len[k]; i++, b += 2) put_le(bin + b, (uint64_t)(1000 + tok++), 2);
    }
    at += 8 * (size_t)nseq;
    for (int k = 0; k <= nseq; k++) put_le(idx + at + 8 * k, (uint64_t)k, 8);
    at += 8 * ((size_t)nseq + 1);
    char path[300];
    snprintf(path, sizeof path, "%.250s.idx", prefix);
    write_bytes(path, idx, at);
    snprintf(path, sizeof path, "%.250s.bin", prefix);
    write_bytes(path, bin, b);
    return tok;
}

/* Batches and random access, back to back and with gaps, across document
 * boundaries and empty documents: token i of the stream is 1000 + i. */
static void test_megatron(void)
{
    static const int len[] = {3, 0, 5, 1, 7, 0, 4};
    const char *names[2] = {"mm", "mmgap"};
    for (int g = 0; g < 2; g++) {
        char prefix[300];
        snprintf(prefix, sizeof prefix, "%s", tmp_path(names[g]));
        int n = write_megatron(prefix, len, 7, g ? 6 : 0);
        capture c;
        cap_init(&c);
        tgc_data *d = tgc_data_open(prefix, 2000, &c.d);
        CHECK(d && c.d.nerrors == 0);
        if (!d) { cap_free(&c); continue; }
        CHECK(tgc_data_format_of(d) == TGC_DATA_MEGATRON && tgc_data_dtype_of(d) == TGC_DTYPE_INT16);
        CHECK(tgc_data_ntokens(d) == n && n == 20 && tgc_data_ndocuments(d) == 7 && tgc_data_nsequences(d) == 7);
        for (int i = 0; i < n; i++) CHECK(tgc_data_token(d, i) == 1000 + i);
        int64_t starts[8] = {0, 3, 3, 8, 9, 16, 16, 20};
        for (int k = 0; k <= 7; k++) CHECK(tgc_data_document_start(d, k) == starts[k]);
        /* s = 4: samples 0..3 start at 0, 4, 8, 12; step 1 of B = 3 takes
         * samples 3, 0 (wrapped) and 1; rows 1..2 of it in [s, 2]. */
        int32_t tok[4 * 3], lab[4 * 3];
        tgc_data_batch(d, 1, 4, 3, tok, lab);
        int64_t want_sample[3] = {3, 0, 1};
        for (int b = 0; b < 3; b++)
            for (int t = 0; t < 4; t++) {
                CHECK(tok[t * 3 + b] == 1000 + want_sample[b] * 4 + t);
                CHECK(lab[t * 3 + b] == 1000 + want_sample[b] * 4 + t + 1);
            }
        tgc_data_batch_rows(d, NULL, 1, 4, 3, 1, 2, tok, lab);
        for (int b = 0; b < 2; b++)
            for (int t = 0; t < 4; t++) CHECK(tok[t * 2 + b] == 1000 + want_sample[b + 1] * 4 + t);
        tgc_data_close(d);
        /* The same dataset by its .idx and its .bin. */
        char path[310];
        snprintf(path, sizeof path, "%s.bin", prefix);
        d = tgc_data_open(path, 0, &c.d);
        CHECK(d && tgc_data_format_of(d) == TGC_DATA_MEGATRON && tgc_data_ntokens(d) == 20);
        tgc_data_close(d);
        snprintf(path, sizeof path, "%s.idx", prefix);
        d = tgc_data_open(path, 0, &c.d);
        CHECK(d && tgc_data_token(d, 19) == 1019);
        tgc_data_close(d);
        /* A vocabulary below a token names its position and document. */
        d = tgc_data_open(prefix, 1009, &c.d);
        CHECK(d == NULL);
        char want[400];
        snprintf(want, sizeof want, "%s.bin: error: token 1009 at position 9 (document 4) is out of range for "
                 "vocabulary 1009\n", prefix);
        CHECK_STR(cap_text(&c), want);
        cap_free(&c);
    }
    CHECK(strcmp(tgc_data_dtype_name(TGC_DTYPE_UINT16), "uint16") == 0 && tgc_data_dtype_size(TGC_DTYPE_INT64) == 8);
    CHECK(tgc_data_dtype_name(0) == NULL && tgc_data_dtype_name(9) == NULL);
}

static void cleanup(void)
{
    static const char *names[] = {"ten.txt", "tokens.txt", "shuffle.txt", "empty.txt", "one.txt", "high.txt",
                                  "magic.bin", "version.bin", "zero.bin", "short.bin", "long.bin", "vocab.bin",
                                  "hdr.dat", "tiny.bin", "mm.idx", "mm.bin", "mmgap.idx", "mmgap.bin"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(tmp_path(names[i]));
    CHECK(rmdir(tmpdir) == 0);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tgc_test_data_XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    test_text_batches();
    test_llmc_batches();
    test_shuffle();
    test_errors();
    test_megatron();
    cleanup();
    CHECK_DONE();
}
