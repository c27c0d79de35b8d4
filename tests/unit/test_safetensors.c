/* safetensors: round trips, the exact bytes and determinism of the writer,
 * lookups, every class of malformed file, and (where python3 runs) a
 * cross-check against tests/scripts/st_check.py, an independent reader and
 * writer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capture.h"
#include "check.h"
#include "runtime/io/safetensors.h"
#include "support/file.h"
#include "support/proc.h"
#include "support/util.h"

#include "tmpdir.h"


/* A file of the length field `n`, the header text and a body. */
static void write_raw(const char *path, uint64_t n, const char *header, const void *body, size_t body_len)
{
    FILE *f = fopen(path, "wb");
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(n >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    if (body_len) fwrite(body, 1, body_len, f);
    fclose(f);
}

static char *slurp(const char *path, size_t *n)
{
    char why[256];
    char *s = file_read(path, FILE_CACHE, n, why, sizeof why);
    CHECK(s != NULL);
    return s;
}

static const float wte[6] = {0.5f, -1.25f, 2.0f, 3.5f, -0.0f, 1e-3f};
static const int64_t step_val = 42;
static const uint16_t bias_bf16[3] = {0x3f80, 0xc000, 0x0001};
static const unsigned char mask[5] = {1, 0, 1, 1, 0};
static const double zz[2] = {1.0 / 3.0, -2.5};

static int make_tensors(tgc_st_tensor *t)
{
    static const int64_t s_wte[2] = {3, 2}, s_bias[1] = {3}, s_mask[1] = {5}, s_z[1] = {2}, s_empty[2] = {0, 4};
    int n = 0;
    t[n++] = (tgc_st_tensor){"wte", TGC_ST_F32, 2, s_wte, wte};
    t[n++] = (tgc_st_tensor){"step", TGC_ST_I64, 0, NULL, &step_val};
    t[n++] = (tgc_st_tensor){"h.0.ln.bias", TGC_ST_BF16, 1, s_bias, bias_bf16};
    t[n++] = (tgc_st_tensor){"mask", TGC_ST_U8, 1, s_mask, mask};
    t[n++] = (tgc_st_tensor){"z", TGC_ST_F64, 1, s_z, zz};
    t[n++] = (tgc_st_tensor){"empty", TGC_ST_F32, 2, s_empty, NULL};
    return n;
}

static void test_roundtrip(void)
{
    tgc_st_tensor t[8];
    int n = make_tensors(t);
    const tgc_st_kv meta[] = {{"step", "100"}, {"model", "gpt"}};
    const char *path = tmp_path("rt.safetensors");
    capture c;
    cap_init(&c);
    CHECK(tgc_st_write(path, t, n, meta, 2, &c.d));
    CHECK(access(tmp_path("rt.safetensors.tmp"), F_OK) != 0);
    tgc_st_file *f = tgc_st_open(path, &c.d);
    CHECK(f != NULL && c.d.nerrors == 0);
    if (!f) { cap_free(&c); return; }
    static const char *names[] = {"empty", "h.0.ln.bias", "mask", "step", "wte", "z"};
    CHECK(tgc_st_count(f) == 6);
    for (int i = 0; i < 6 && i < tgc_st_count(f); i++) CHECK_STR(tgc_st_at(f, i)->name, names[i]);
    for (int i = 0; i < n; i++) {
        const tgc_st_info *info = tgc_st_find(f, t[i].name);
        CHECK(info && info->dtype == t[i].dtype && info->rank == t[i].rank);
        if (!info) continue;
        for (int k = 0; k < t[i].rank; k++) CHECK(info->shape[k] == t[i].shape[k]);
        CHECK(info->nbytes == 0 || memcmp(info->data, t[i].data, (size_t)info->nbytes) == 0);
        /* The writer aligns every tensor to its element size. */
        CHECK((uintptr_t)info->data % (uintptr_t)tgc_st_dtype_size(info->dtype) == 0);
        CHECK(tgc_st_expect(f, t[i].name, t[i].dtype, t[i].rank, t[i].shape, &c.d) == info->data);
    }
    CHECK(tgc_st_find(f, "nope") == NULL);
    CHECK(tgc_st_meta_count(f) == 3);
    CHECK_STR(tgc_st_meta(f, "format"), "pt");
    CHECK_STR(tgc_st_meta(f, "step"), "100");
    CHECK_STR(tgc_st_meta_at(f, 1).key, "model");
    CHECK(tgc_st_meta(f, "nope") == NULL);
    /* Data order: 8-byte elements first, then 4, 2, 1, each by name. */
    CHECK(tgc_st_find(f, "step")->begin == 0 && tgc_st_find(f, "z")->begin == 8);
    CHECK(tgc_st_find(f, "empty")->begin == 24 && tgc_st_find(f, "wte")->begin == 24);
    CHECK(tgc_st_find(f, "h.0.ln.bias")->begin == 48 && tgc_st_find(f, "mask")->begin == 54);
    CHECK(c.d.nerrors == 0);
    tgc_st_close(f);
    cap_free(&c);
}

static void test_exact_bytes(void)
{
    const float a[2] = {1.0f, 2.0f};
    const int64_t shape[1] = {2};
    const tgc_st_tensor t = {"a", TGC_ST_F32, 1, shape, a};
    const char *path = tmp_path("exact.safetensors");
    capture c;
    cap_init(&c);
    CHECK(tgc_st_write(path, &t, 1, NULL, 0, &c.d));
    size_t n;
    char *s = slurp(path, &n);
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
                      "\"data_offsets\":[0,8]}}";
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    CHECK(s && n == 8 + padded + 8);
    if (s && n == 8 + padded + 8) {
        CHECK((unsigned char)s[0] == padded && s[1] == 0 && s[7] == 0);
        CHECK(memcmp(s + 8, hdr, hl) == 0);
        for (size_t i = 8 + hl; i < 8 + padded; i++) CHECK(s[i] == ' ');
        CHECK(memcmp(s + 8 + padded, a, 8) == 0);
    }
    free(s);

    /* The same tensors in another order give the same bytes. */
    tgc_st_tensor t1[8], t2[8];
    int k = make_tensors(t1);
    for (int i = 0; i < k; i++) t2[i] = t1[k - 1 - i];
    const tgc_st_kv m1[] = {{"b", "2"}, {"a", "1"}}, m2[] = {{"a", "1"}, {"b", "2"}};
    CHECK(tgc_st_write(tmp_path("d1.safetensors"), t1, k, m1, 2, &c.d));
    CHECK(tgc_st_write(tmp_path("d2.safetensors"), t2, k, m2, 2, &c.d));
    size_t n1, n2;
    char *s1 = slurp(tmp_path("d1.safetensors"), &n1), *s2 = slurp(tmp_path("d2.safetensors"), &n2);
    CHECK(s1 && s2 && n1 == n2 && memcmp(s1, s2, n1) == 0);
    free(s1);
    free(s2);

    /* No tensors at all is a valid file. */
    CHECK(tgc_st_write(tmp_path("d1.safetensors"), NULL, 0, NULL, 0, &c.d));
    tgc_st_file *f = tgc_st_open(tmp_path("d1.safetensors"), &c.d);
    CHECK(f && tgc_st_count(f) == 0 && tgc_st_find(f, "a") == NULL && tgc_st_meta_count(f) == 1);
    tgc_st_close(f);
    CHECK(c.d.nerrors == 0);
    cap_free(&c);
}

static void test_write_errors(void)
{
    const int64_t shape[1] = {1};
    const float v = 1;
    const tgc_st_tensor dup[2] = {{"x", TGC_ST_F32, 1, shape, &v}, {"x", TGC_ST_F32, 1, shape, &v}};
    const char *path = tmp_path("bad.safetensors");
    capture c;
    cap_init(&c);
    CHECK(!tgc_st_write(path, dup, 2, NULL, 0, &c.d));
    const tgc_st_kv meta[2] = {{"k", "1"}, {"k", "2"}};
    CHECK(!tgc_st_write(path, dup, 1, meta, 2, &c.d));
    CHECK(!tgc_st_write(tmp_path("no/such/dir.safetensors"), dup, 1, NULL, 0, &c.d));
    char want[1024];
    snprintf(want, sizeof want,
             "%s: error: duplicate tensor name 'x'\n"
             "%s: error: duplicate metadata key 'k'\n"
             "%s/no/such/dir.safetensors: error: cannot write: No such file or directory\n",
             path, path, tmpdir);
    CHECK_STR(cap_text(&c), want);
    CHECK(access(path, F_OK) != 0 && access(tmp_path("bad.safetensors.tmp"), F_OK) != 0);
    cap_free(&c);
}

static void test_lookup_errors(void)
{
    tgc_st_tensor t[8];
    int n = make_tensors(t);
    const char *path = tmp_path("lk.safetensors");
    capture c;
    cap_init(&c);
    CHECK(tgc_st_write(path, t, n, NULL, 0, &c.d));
    tgc_st_file *f = tgc_st_open(path, &c.d);
    CHECK(f != NULL);
    if (!f) { cap_free(&c); return; }
    CHECK(tgc_st_expect(f, "wpe", TGC_ST_F32, 2, (int64_t[]){3, 2}, &c.d) == NULL);
    CHECK(tgc_st_expect(f, "wte", TGC_ST_F32, 2, (int64_t[]){2, 3}, &c.d) == NULL);
    CHECK(tgc_st_expect(f, "wte", TGC_ST_F32, 3, (int64_t[]){3, 2, 1}, &c.d) == NULL);
    CHECK(tgc_st_expect(f, "wte", TGC_ST_BF16, 2, (int64_t[]){3, 2}, &c.d) == NULL);
    CHECK(tgc_st_expect(f, "step", TGC_ST_I64, 1, (int64_t[]){1}, &c.d) == NULL);
    char want[1024];
    snprintf(want, sizeof want,
             "%s: error: tensor 'wpe' not found (the file holds 6 tensors)\n"
             "%s: error: tensor 'wte' has shape [3, 2], expected [2, 3]\n"
             "%s: error: tensor 'wte' has shape [3, 2], expected [3, 2, 1]\n"
             "%s: error: tensor 'wte' has dtype F32, expected BF16\n"
             "%s: error: tensor 'step' has shape [], expected [1]\n",
             path, path, path, path, path);
    CHECK_STR(cap_text(&c), want);
    tgc_st_close(f);
    cap_free(&c);
}

/* Opening `path` fails with exactly "PATH: error: MSG\n". */
static void expect_open_error(const char *path, const char *msg)
{
    capture c;
    cap_init(&c);
    tgc_st_file *f = tgc_st_open(path, &c.d);
    CHECK(f == NULL);
    char want[1024];
    snprintf(want, sizeof want, "%s: error: %s\n", path, msg);
    CHECK_STR(cap_text(&c), want);
    tgc_st_close(f);
    cap_free(&c);
}

/* A file whose header is `json` (length field = its length) and whose body
 * is `body_len` zero bytes; opening it fails with msg. */
static void expect_header_error(const char *json, size_t body_len, const char *msg)
{
    const char *path = tmp_path("h.safetensors");
    char *body = calloc(1, body_len + 1);
    write_raw(path, strlen(json), json, body, body_len);
    free(body);
    expect_open_error(path, msg);
}

#define T8 "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

static void test_open_errors(void)
{
    const char *path = tmp_path("h.safetensors");
    expect_open_error(tmp_path("missing.safetensors"), "cannot open: No such file or directory");
    FILE *fp = fopen(path, "wb");
    fputs("abc", fp);
    fclose(fp);
    expect_open_error(path, "too short for a safetensors file: 3 bytes");
    write_raw(path, 1000, "{}", NULL, 0);
    expect_open_error(path, "header length 1000 exceeds the file's 2 bytes after the length field");
    write_raw(path, 1ull << 62, "{}", NULL, 0);
    expect_open_error(path, "header length 4611686018427387904 exceeds the file's 2 bytes after the length field "
                            "(or the 100 MB limit)");
    expect_header_error("", 0, "invalid safetensors header at byte 8: the header must be a JSON object starting with '{'");
    expect_header_error(" {}", 0, "invalid safetensors header at byte 8: the header must be a JSON object starting with '{'");
    expect_header_error("{" T8, 8, "invalid safetensors header at byte 61: expected '}', found the end of the header");
    expect_header_error("{" T8 ",}", 8, "invalid safetensors header at byte 62: expected '\"', found '}'");
    expect_header_error("{" T8 "} x", 8, "invalid safetensors header at byte 63: unexpected byte 0x78 after the JSON object");
    expect_header_error("{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
                        "invalid safetensors header at byte 22: unknown dtype 'F33' of tensor 'a'");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
                        "invalid safetensors header at byte 37: expected a non-negative integer");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.0]}}", 8,
                        "invalid safetensors header at byte 58: expected a non-negative integer");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", 8,
                        "invalid safetensors header at byte 37: expected a non-negative integer");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,99999999999999999999]}}", 8,
                        "invalid safetensors header at byte 58: integer out of range");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
                        "invalid safetensors header at byte 53: shape has more than 8 elements");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8,
                        "invalid safetensors header at byte 55: data_offsets of tensor 'a' must be [begin, end]");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
                        "invalid safetensors header at byte 55: data_offsets of tensor 'a' end before they begin");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8,
                        "invalid safetensors header at byte 40: tensor 'a' lacks \"data_offsets\"");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
                        "invalid safetensors header at byte 28: duplicate field 'dtype' in tensor 'a'");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8,
                        "invalid safetensors header at byte 61: unknown field 'x' in tensor 'a'");
    expect_header_error("{" T8 "," T8 "}", 8, "duplicate tensor 'a' in the header");
    expect_header_error("{\"__metadata__\":{\"k\":1}," T8 "}", 8,
                        "invalid safetensors header at byte 29: metadata value of 'k' is not a string");
    expect_header_error("{\"__metadata__\":{},\"__metadata__\":{}}", 0,
                        "invalid safetensors header at byte 42: duplicate key '__metadata__'");
    expect_header_error("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "duplicate metadata key 'k' in the header");
    expect_header_error("{\"a\xff\":{}}", 0, "invalid safetensors header at byte 11: invalid UTF-8");
    expect_header_error("{\"a\xc0\xaf\":{}}", 0, "invalid safetensors header at byte 11: invalid UTF-8");
    expect_header_error("{\"a\nb\":{}}", 0, "invalid safetensors header at byte 11: control character 0x0a in a string");
    expect_header_error("{\"\\ud800\":{}}", 0, "invalid safetensors header at byte 16: unpaired surrogate in \\u escape");
    expect_header_error("{\"a\\u0000\":{}}", 0, "invalid safetensors header at byte 17: NUL character in a string");
    expect_header_error("{\"a\\q\":{}}", 0, "invalid safetensors header at byte 12: invalid escape '\\q'");
    expect_header_error("{\"a", 0, "invalid safetensors header at byte 11: unterminated string");
    expect_header_error("{\"a\"\x01", 0, "invalid safetensors header at byte 12: expected ':', found byte 0x01");
    /* Offsets: size mismatch, overlap, gap, trailing bytes, truncation. */
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
                        "tensor 'a': data_offsets [0, 8] hold 8 bytes, but F32 [3] needs 12");
    expect_header_error("{" T8 ",\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", 8,
                        "tensor 'b': data_offsets begin at 4, but the previous tensor ends at 8 (overlap)");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
                        "tensor 'a': data_offsets begin at 4, but the previous tensor ends at 0 (gap)");
    expect_header_error("{" T8 "}", 9, "1 bytes after the last tensor's data");
    expect_header_error("{" T8 "}", 5, "truncated: tensor 'a' ends at byte 8 of a data buffer of 5 bytes");
}

/* A file tgc wrote, cut short, names the tensor whose data is missing. */
static void test_truncated_file(void)
{
    tgc_st_tensor t[8];
    int n = make_tensors(t);
    const char *path = tmp_path("cut.safetensors");
    capture c;
    cap_init(&c);
    CHECK(tgc_st_write(path, t, n, NULL, 0, &c.d));
    size_t len;
    char *s = slurp(path, &len);
    FILE *f = fopen(path, "wb");
    fwrite(s, 1, len - 3, f);
    fclose(f);
    free(s);
    cap_free(&c);
    expect_open_error(path, "truncated: tensor 'mask' ends at byte 59 of a data buffer of 56 bytes");
}

/* JSON the writer never produces: whitespace, escapes, any key order,
 * __metadata__ null, unaligned data. */
static void test_lenient_input(void)
{
    const char *json = " {\n \"b\\u00e9\\ud83d\\ude00\\\"\" : { \"data_offsets\" : [ 0 , 2 ] ,\"shape\": [ ] ,"
                       "\"dtype\":\"F16\"}\t,\"__metadata__\":null,\"c\":{\"shape\":[1],\"dtype\":\"F32\","
                       "\"data_offsets\":[2,6]}}   ";
    const char *path = tmp_path("lenient.safetensors");
    write_raw(path, strlen(json) - 1, json + 1, "\x00\x3c\x00\x00\x80\x3f", 6);
    capture c;
    cap_init(&c);
    tgc_st_file *f = tgc_st_open(path, &c.d);
    CHECK(f != NULL);
    if (f) {
        CHECK(tgc_st_count(f) == 2 && tgc_st_meta_count(f) == 0);
        const tgc_st_info *b = tgc_st_find(f, "b\xc3\xa9\xf0\x9f\x98\x80\"");
        CHECK(b && b->dtype == TGC_ST_F16 && b->rank == 0 && b->nbytes == 2);
        float one;
        const void *p = tgc_st_expect(f, "c", TGC_ST_F32, 1, (int64_t[]){1}, &c.d);
        CHECK(p != NULL);
        if (p) {
            memcpy(&one, p, 4);
            CHECK(one == 1.0f);
        }
    }
    CHECK(c.d.nerrors == 0);
    tgc_st_close(f);
    cap_free(&c);
}

/* The directory of this source file's ../scripts, or NULL. */
static const char *st_script(void)
{
    static char buf[512];
    const char *src = __FILE__, *slash = strrchr(src, '/');
    size_t n = slash ? (size_t)(slash - src) + 1 : 0;
    snprintf(buf, sizeof buf, "%.*s../scripts/st_check.py", (int)n, src);
    return access(buf, R_OK) == 0 && access("/usr/bin/python3", X_OK) == 0 ? buf : NULL;
}

/* /usr/bin/python3 SCRIPT VERB PATH, its output into out; its exit status. */
static int run_python(const char *script, const char *verb, const char *path, const char *out)
{
    proc_argv a;
    proc_argv_init(&a);
    const char *words[] = {"/usr/bin/python3", script, verb, path};
    for (size_t i = 0; i < ARRAY_LEN(words); i++) proc_argv_add(&a, words[i]);
    char why[256];
    int rc = proc_run(&a, out, why, sizeof why);
    if (rc < 0) fprintf(stderr, "python3: %s\n", why);
    proc_argv_free(&a);
    return rc;
}

static void test_python(void)
{
    const char *script = st_script();
    if (!script) {
        printf("test_python: skipped (no /usr/bin/python3 or st_check.py)\n");
        return;
    }
    tgc_st_tensor t[8];
    int n = make_tensors(t);
    const char *path = tmp_path("py.safetensors"), *out = tmp_path("py.txt");
    capture c;
    cap_init(&c);
    const tgc_st_kv meta[] = {{"note", "caf\xc3\xa9 \"q\""}};
    CHECK(tgc_st_write(path, t, n, meta, 1, &c.d));
    CHECK(run_python(script, "read", path, out) == 0);
    size_t len;
    char *text = slurp(out, &len);
    CHECK_STR(text, "meta format pt\n"
                    "meta note caf\xc3\xa9 \"q\"\n"
                    "empty F32 [0, 4] []\n"
                    "h.0.ln.bias BF16 [3] [1.0, -2.0, 9.183549615799121e-41]\n"
                    "mask U8 [5] [1, 0, 1, 1, 0]\n"
                    "step I64 [] [42]\n"
                    "wte F32 [3, 2] [0.5, -1.25, 2.0, 3.5, -0.0, 0.0010000000474974513]\n"
                    "z F64 [2] [0.3333333333333333, -2.5]\n");
    free(text);
    /* And the other way: a file Python wrote. */
    CHECK(run_python(script, "write", path, tmp_path("py.log")) == 0);
    tgc_st_file *f = tgc_st_open(path, &c.d);
    CHECK(f != NULL);
    if (f) {
        CHECK(tgc_st_count(f) == 6);
        CHECK_STR(tgc_st_meta(f, "source"), "st_check.py");
        const void *p = tgc_st_expect(f, "emb.weight", TGC_ST_F32, 2, (int64_t[]){2, 3}, &c.d);
        CHECK(p && memcmp(p, wte, sizeof wte) == 0);
        p = tgc_st_expect(f, "odd \"name\" \xc3\xa9 \xf0\x9f\x98\x80", TGC_ST_F64, 1, (int64_t[]){2}, &c.d);
        double d2[2];
        if (p) memcpy(d2, p, sizeof d2);
        CHECK(p && d2[0] == 1.0 / 3.0 && d2[1] == -2.5);
        p = tgc_st_expect(f, "step", TGC_ST_I64, 0, NULL, &c.d);
        int64_t sv = 0;
        if (p) memcpy(&sv, p, 8);
        CHECK(sv == -7);
        const tgc_st_info *h = tgc_st_find(f, "half");
        CHECK(h && h->dtype == TGC_ST_F16 && memcmp(h->data, "\x00\x3e\x00\xc0", 4) == 0);
        CHECK(tgc_st_expect(f, "empty", TGC_ST_F32, 2, (int64_t[]){0, 4}, &c.d) != NULL);
    }
    CHECK(c.d.nerrors == 0);
    tgc_st_close(f);
    cap_free(&c);
}

static void cleanup(void)
{
    static const char *names[] = {"rt.safetensors", "exact.safetensors", "d1.safetensors", "d2.safetensors",
                                  "lk.safetensors", "h.safetensors", "cut.safetensors", "lenient.safetensors",
                                  "py.safetensors", "py.txt", "py.log"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(tmp_path(names[i]));
    CHECK(rmdir(tmpdir) == 0);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tgc_test_st_XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    test_roundtrip();
    test_exact_bytes();
    test_write_errors();
    test_lookup_errors();
    test_open_errors();
    test_truncated_file();
    test_lenient_input();
    test_python();
    cleanup();
    CHECK_DONE();
}
