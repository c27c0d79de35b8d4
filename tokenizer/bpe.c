/* GPT-2's byte-level BPE (tokenizer/bpe.h). */
#include "tokenizer/bpe.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "support/file.h"
#include "support/util.h"

/* ---- a string -> int64 table (open addressing) ---------------------------- */

typedef struct bpe_entry {
    char *key; /* NULL = empty slot */
    size_t len;
    int64_t val;
    size_t at; /* vocab.json: the byte offset of the key, for messages */
} bpe_entry;

typedef struct bpe_map {
    bpe_entry *e;
    size_t cap, n; /* cap a power of two */
} bpe_map;

static bpe_entry *map_slot(const bpe_map *m, const char *key, size_t len)
{
    size_t i = (size_t)hash_bytes(key, len, HASH_SEED) & (m->cap - 1);
    while (m->e[i].key && (m->e[i].len != len || memcmp(m->e[i].key, key, len) != 0)) i = (i + 1) & (m->cap - 1);
    return &m->e[i];
}

/* Every allocation the files decide (the tables, their keys) is checked:
 * a vocabulary too large for memory is an error, never the end of the
 * program. */
static bool map_grow(bpe_map *m)
{
    size_t cap = m->cap ? 2 * m->cap : 1024;
    bpe_entry *e = cap <= SIZE_MAX / sizeof *e ? calloc(cap, sizeof *e) : NULL;
    if (!e) return false;
    bpe_map big = {e, cap, m->n};
    for (size_t i = 0; i < m->cap; i++)
        if (m->e[i].key) *map_slot(&big, m->e[i].key, m->e[i].len) = m->e[i];
    free(m->e);
    *m = big;
    return true;
}

enum { MAP_ADDED, MAP_PRESENT, MAP_NOMEM };

/* Inserts key (copied) unless present. */
static int map_put(bpe_map *m, const char *key, size_t len, int64_t val, size_t at)
{
    if (2 * (m->n + 1) > m->cap && !map_grow(m)) return MAP_NOMEM;
    bpe_entry *e = map_slot(m, key, len);
    if (e->key) return MAP_PRESENT;
    char *k = malloc(len + 1);
    if (!k) return MAP_NOMEM;
    memcpy(k, key, len);
    k[len] = 0;
    *e = (bpe_entry){k, len, val, at};
    m->n++;
    return MAP_ADDED;
}

static int64_t map_get(const bpe_map *m, const char *key, size_t len)
{
    if (!m->cap) return -1;
    const bpe_entry *e = map_slot(m, key, len);
    return e->key ? e->val : -1;
}

static void map_free(bpe_map *m)
{
    for (size_t i = 0; i < m->cap; i++) free(m->e[i].key);
    free(m->e);
}

struct tgc_bpe {
    bpe_map vocab, merges; /* token -> id; "A B" -> rank */
    int64_t vocab_size;
    const bpe_entry **by_id; /* id -> its vocab entry (NULL: no token has the id) */
    int16_t byte_of[512];    /* code point -> the byte it stands for, -1: none */
    char byte_sym[256][3]; /* GPT-2's byte-to-unicode map, as UTF-8 */
    unsigned char byte_len[256];
};

/* bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other
 * 68 to U+0100 onwards in byte order. */
static void bpe_byte_map(tgc_bpe *b)
{
    int extra = 0;
    for (int c = 0; c < 512; c++) b->byte_of[c] = -1;
    for (int c = 0; c < 256; c++) {
        bool self = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
        unsigned cp = self ? (unsigned)c : 256u + (unsigned)extra++;
        if (cp < 0x80) {
            b->byte_sym[c][0] = (char)cp;
            b->byte_len[c] = 1;
        } else {
            b->byte_sym[c][0] = (char)(0xC0 | cp >> 6);
            b->byte_sym[c][1] = (char)(0x80 | (cp & 0x3F));
            b->byte_len[c] = 2;
        }
        b->byte_of[cp] = (int16_t)c;
    }
}

/* ---- vocab.json ----------------------------------------------------------- */

typedef struct json_in {
    const char *path, *s;
    size_t n, i;
    diag *d;
    bool failed;
} json_in;

static void json_error(json_in *j, const char *what)
{
    if (j->failed) return;
    int line = 1, col = 1;
    for (size_t k = 0; k < j->i && k < j->n; k++) {
        if (j->s[k] == '\n') { line++; col = 1; }
        else col++;
    }
    diag_error(j->d, (src_loc){.file = j->path, .line = line, .col = col}, "%s", what);
    j->failed = true;
}

static void json_ws(json_in *j)
{
    while (j->i < j->n && strchr(" \t\r\n", j->s[j->i])) j->i++;
}

static bool json_hex4(json_in *j, unsigned *out)
{
    *out = 0;
    for (int k = 0; k < 4; k++, j->i++) {
        char c = j->i < j->n ? j->s[j->i] : 0;
        int v = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (v < 0) { json_error(j, "bad \\u escape: expected 4 hex digits"); return false; }
        *out = *out << 4 | (unsigned)v;
    }
    return true;
}

static void utf8_put(strbuf *b, unsigned cp)
{
    if (cp < 0x80) sb_putc(b, (char)cp);
    else if (cp < 0x800) { sb_putc(b, (char)(0xC0 | cp >> 6)); sb_putc(b, (char)(0x80 | (cp & 0x3F))); }
    else if (cp < 0x10000) {
        sb_putc(b, (char)(0xE0 | cp >> 12));
        sb_putc(b, (char)(0x80 | (cp >> 6 & 0x3F)));
        sb_putc(b, (char)(0x80 | (cp & 0x3F)));
    } else {
        sb_putc(b, (char)(0xF0 | cp >> 18));
        sb_putc(b, (char)(0x80 | (cp >> 12 & 0x3F)));
        sb_putc(b, (char)(0x80 | (cp >> 6 & 0x3F)));
        sb_putc(b, (char)(0x80 | (cp & 0x3F)));
    }
}

/* A JSON string at j->i (the opening quote), decoded to UTF-8 into out. */
static bool json_string(json_in *j, strbuf *out)
{
    out->len = 0;
    if (out->s) out->s[0] = 0;
    if (j->i >= j->n || j->s[j->i] != '"') { json_error(j, "expected a string"); return false; }
    for (j->i++; j->i < j->n && j->s[j->i] != '"';) {
        char c = j->s[j->i++];
        if ((unsigned char)c < 0x20) { j->i--; json_error(j, "control character in a string"); return false; }
        if (c != '\\') { sb_putc(out, c); continue; }
        char e = j->i < j->n ? j->s[j->i++] : 0;
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *at = e ? strchr(from, e) : NULL;
        if (at) { sb_putc(out, to[at - from]); continue; }
        if (e != 'u') { j->i--; json_error(j, "bad escape in a string"); return false; }
        unsigned cp, lo;
        if (!json_hex4(j, &cp)) return false;
        if (cp >= 0xD800 && cp < 0xDC00) {
            if (j->i + 1 < j->n && j->s[j->i] == '\\' && j->s[j->i + 1] == 'u') {
                j->i += 2;
                if (!json_hex4(j, &lo)) return false;
                if (lo < 0xDC00 || lo > 0xDFFF) { json_error(j, "unpaired surrogate in a \\u escape"); return false; }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else { json_error(j, "unpaired surrogate in a \\u escape"); return false; }
        }
        utf8_put(out, cp);
    }
    if (j->i >= j->n) { json_error(j, "unterminated string"); return false; }
    j->i++;
    return true;
}

/* {"token": id, ...} */
static bool bpe_read_vocab(tgc_bpe *b, const char *path, const char *s, size_t n, diag *d)
{
    json_in j = {path, s, n, 0, d, false};
    strbuf key;
    sb_init(&key);
    json_ws(&j);
    if (j.i >= n || s[j.i] != '{') json_error(&j, "expected '{': vocab.json is an object of token -> id");
    else j.i++;
    json_ws(&j);
    bool first = true;
    while (!j.failed && j.i < n && s[j.i] != '}') {
        if (!first) {
            if (s[j.i] != ',') { json_error(&j, "expected ',' or '}'"); break; }
            j.i++;
            json_ws(&j);
        }
        first = false;
        size_t at = j.i;
        if (!json_string(&j, &key)) break;
        json_ws(&j);
        if (j.i >= n || s[j.i] != ':') { json_error(&j, "expected ':'"); break; }
        j.i++;
        json_ws(&j);
        char *end;
        errno = 0;
        long long id = j.i < n && (s[j.i] == '-' || (s[j.i] >= '0' && s[j.i] <= '9')) ? strtoll(s + j.i, &end, 10) : -1;
        if (id < 0 || id > INT32_MAX || errno || (*end && strchr(".eE", *end))) {
            json_error(&j, "expected a token id (an integer 0..2147483647)");
            break;
        }
        j.i = (size_t)(end - s);
        int put = map_put(&b->vocab, key.s ? key.s : "", key.len, id, at);
        if (put != MAP_ADDED) {
            j.i = at;
            json_error(&j, put == MAP_NOMEM ? "out of memory for the vocabulary" : "duplicate token in the vocabulary");
            break;
        }
        if (id + 1 > b->vocab_size) b->vocab_size = id + 1;
        json_ws(&j);
    }
    if (!j.failed && j.i >= n) json_error(&j, "unexpected end of file: expected '}'");
    if (!j.failed) {
        j.i++;
        json_ws(&j);
        if (j.i < n) json_error(&j, "trailing characters after the vocabulary object");
    }
    if (!j.failed && b->vocab.n == 0) json_error(&j, "the vocabulary is empty");
    sb_free(&key);
    return !j.failed;
}

/* The table id -> token: every id below the entry count plus
 * BPE_ID_SLACK (so the table is sized by the file, not by its largest
 * number), no id given twice (decoding would be ambiguous). Errors name
 * the key at its line of vocab.json. */
static bool bpe_index_ids(tgc_bpe *b, const char *path, const char *s, size_t n, diag *d)
{
    json_in j = {path, s, n, 0, d, false};
    const bpe_entry *far = NULL;
    for (size_t i = 0; i < b->vocab.cap; i++) {
        const bpe_entry *e = &b->vocab.e[i];
        if (e->key && e->val >= (int64_t)b->vocab.n + BPE_ID_SLACK && (!far || e->at < far->at)) far = e;
    }
    if (far) {
        char what[256];
        snprintf(what, sizeof what, "token \"%.64s\" has id %" PRId64 ", beyond the vocabulary's %zu entries (ids are "
                 "0 .. entries - 1, with at most %d unused)", far->key, far->val, b->vocab.n, BPE_ID_SLACK);
        j.i = far->at;
        json_error(&j, what);
        return false;
    }
    b->by_id = calloc((size_t)b->vocab_size, sizeof *b->by_id);
    if (!b->by_id) {
        diag_error(d, (src_loc){.file = path}, "out of memory for a vocabulary of %" PRId64 " ids", b->vocab_size);
        return false;
    }
    const bpe_entry *dup = NULL, *other = NULL;
    for (size_t i = 0; i < b->vocab.cap; i++) {
        const bpe_entry *e = &b->vocab.e[i], *was = e->key ? b->by_id[e->val] : NULL;
        if (!e->key) continue;
        if (!was) { b->by_id[e->val] = e; continue; }
        const bpe_entry *late = was->at > e->at ? was : e, *early = was->at > e->at ? e : was;
        if (!dup || late->at < dup->at) { dup = late; other = early; }
    }
    if (dup) {
        char what[256];
        snprintf(what, sizeof what, "token \"%.64s\" has id %" PRId64 ", which token \"%.64s\" has already", dup->key,
                 dup->val, other->key);
        j.i = dup->at;
        json_error(&j, what);
        return false;
    }
    return true;
}

/* Whether the n bytes at sym are a token of the vocabulary; else reported
 * at path:line. */
static bool bpe_known(const tgc_bpe *b, const char *sym, size_t n, const char *what, const char *path, int line, diag *d)
{
    if (map_get(&b->vocab, sym, n) >= 0) return true;
    diag_error(d, (src_loc){.file = path, .line = line, .col = 1}, "the merge's %s '%.*s' is not in the vocabulary",
               what, (int)(n > 64 ? 64 : n), sym);
    return false;
}

/* One merge "A B" per line, the first line "#version: ..." optional; A, B
 * and AB tokens of the vocabulary (as the tokenizers library requires). */
static bool bpe_read_merges(tgc_bpe *b, const char *path, const char *s, size_t n, diag *d)
{
    int line = 0;
    int64_t rank = 0;
    strbuf joined;
    sb_init(&joined);
    bool ok = true;
    for (size_t i = 0; ok && i < n;) {
        const char *at = s + i, *nl = memchr(at, '\n', n - i);
        size_t len = nl ? (size_t)(nl - at) : n - i;
        i += len + 1;
        line++;
        if (len && at[len - 1] == '\r') len--;
        if ((line == 1 && len >= 8 && strncmp(at, "#version", 8) == 0) || len == 0) continue;
        const char *sp = memchr(at, ' ', len);
        if (!sp || sp == at || sp + 1 == at + len || memchr(sp + 1, ' ', (size_t)(at + len - sp - 1))) {
            diag_error(d, (src_loc){.file = path, .line = line, .col = 1},
                       "expected a merge 'A B' (two symbols separated by one space)");
            ok = false;
            break;
        }
        joined.len = 0;
        sb_putn(&joined, at, (size_t)(sp - at));
        sb_putn(&joined, sp + 1, (size_t)(at + len - sp - 1));
        ok = bpe_known(b, at, (size_t)(sp - at), "first symbol", path, line, d) &&
             bpe_known(b, sp + 1, (size_t)(at + len - sp - 1), "second symbol", path, line, d) &&
             bpe_known(b, joined.s, joined.len, "result", path, line, d);
        if (ok && map_put(&b->merges, at, len, rank++, 0) == MAP_NOMEM) { /* a repeated merge keeps its first rank */
            diag_error(d, (src_loc){.file = path, .line = line, .col = 1}, "out of memory for the merges");
            ok = false;
        }
    }
    sb_free(&joined);
    return ok;
}

tgc_bpe *tgc_bpe_parse(const char *vocab_path, const char *vs, size_t vn, const char *merges_path, const char *ms,
                       size_t mn, diag *d)
{
    tgc_bpe *b = calloc(1, sizeof *b);
    if (!b) {
        diag_error(d, (src_loc){.file = vocab_path}, "out of memory for the tokenizer");
        return NULL;
    }
    bpe_byte_map(b);
    if (bpe_read_vocab(b, vocab_path, vs, vn, d) && bpe_index_ids(b, vocab_path, vs, vn, d) &&
        bpe_read_merges(b, merges_path, ms, mn, d))
        return b;
    tgc_bpe_free(b);
    return NULL;
}

tgc_bpe *tgc_bpe_load(const char *vocab_path, const char *merges_path, diag *d)
{
    size_t vn, mn;
    char why[256];
    char *vs = file_read(vocab_path, FILE_TEXT, &vn, why, sizeof why);
    if (!vs) {
        diag_error(d, (src_loc){.file = vocab_path}, "cannot read the vocabulary: %s", why);
        return NULL;
    }
    char *ms = file_read(merges_path, FILE_TEXT, &mn, why, sizeof why);
    if (!ms) {
        diag_error(d, (src_loc){.file = merges_path}, "cannot read the merges: %s", why);
        free(vs);
        return NULL;
    }
    tgc_bpe *b = tgc_bpe_parse(vocab_path, vs, vn, merges_path, ms, mn, d);
    free(vs);
    free(ms);
    return b;
}

void tgc_bpe_free(tgc_bpe *b)
{
    if (!b) return;
    map_free(&b->vocab);
    map_free(&b->merges);
    free(b->by_id);
    free(b);
}

int64_t tgc_bpe_vocab_size(const tgc_bpe *b) { return b->vocab_size; }
int64_t tgc_bpe_lookup(const tgc_bpe *b, const char *token) { return map_get(&b->vocab, token, strlen(token)); }

/* ---- the pre-tokenizer ---------------------------------------------------- */

enum { CL_SPACE, CL_LETTER, CL_NUMBER, CL_OTHER };

/* The class of a code point as the Python `regex` module sees GPT-2's
 * pattern: \p{L} (Lu Ll Lt Lm Lo), \p{N} (Nd Nl No), \s (Unicode's
 * White_Space: U+0009..U+000D, U+0085 and the categories Zs Zl Zp), else
 * other. */
static int bpe_class_of(utf8proc_int32_t cp)
{
    if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x85) return CL_SPACE;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: return CL_LETTER;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: return CL_NUMBER;
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP: return CL_SPACE;
    default: return CL_OTHER;
    }
}

/* The class of the character at t[i] (i < n) and its length in bytes. A
 * byte that does not start a valid UTF-8 sequence (a stray continuation
 * byte, a truncated or overlong sequence, a surrogate, beyond U+10FFFF) is
 * a character of its own of class other: the piece Python's decoder with
 * errors="surrogateescape" gives it (U+DC80 + byte, category Cs). */
static int bpe_char(const unsigned char *t, size_t n, size_t i, size_t *len)
{
    utf8proc_int32_t cp = t[i];
    utf8proc_ssize_t m = 1;
    if (cp >= 0x80) m = utf8proc_iterate(t + i, (utf8proc_ssize_t)(n - i), &cp);
    if (m <= 0) { *len = 1; return CL_OTHER; }
    *len = (size_t)m;
    return bpe_class_of(cp);
}

size_t tgc_bpe_piece(const unsigned char *t, size_t n, size_t i)
{
    static const char *const contractions[] = {"s", "t", "re", "ve", "m", "ll", "d"};
    if (t[i] == '\'') /* 's|'t|'re|'ve|'m|'ll|'d */
        for (size_t k = 0; k < ARRAY_LEN(contractions); k++) {
            size_t m = strlen(contractions[k]);
            if (i + 1 + m <= n && memcmp(t + i + 1, contractions[k], m) == 0) return 1 + m;
        }
    size_t j = i, len;
    if (t[j] == ' ' && j + 1 < n && bpe_char(t, n, j + 1, &len) != CL_SPACE) j++; /* the optional leading space */
    int cl = bpe_char(t, n, j, &len);
    if (cl != CL_SPACE) { /* ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+ */
        while (j < n && bpe_char(t, n, j, &len) == cl) j += len;
        return j - i;
    }
    size_t last = j; /* \s+(?!\S) | \s+ */
    while (j < n && bpe_char(t, n, j, &len) == CL_SPACE) {
        last = j;
        j += len;
    }
    if (j < n && last > i) j = last; /* before a non-space, leave the last space to the next piece */
    return j - i;
}

/* ---- BPE ------------------------------------------------------------------ */

typedef struct bpe_work {
    strbuf u;         /* the piece through the byte map */
    size_t *off, *len; /* symbols: u.s[off[k] .. off[k] + len[k]) */
    size_t cap;
    strbuf key;
} bpe_work;

/* Room for a piece of m bytes; false when memory is short. */
static bool bpe_work_grow(bpe_work *w, size_t m)
{
    size_t cap = m <= SIZE_MAX / (2 * sizeof(size_t)) ? 2 * m : 0;
    size_t *off = cap ? realloc(w->off, cap * sizeof *off) : NULL;
    if (off) w->off = off;
    size_t *len = off ? realloc(w->len, cap * sizeof *len) : NULL;
    if (len) w->len = len;
    if (!len) return false;
    w->cap = cap;
    return true;
}

static int64_t bpe_rank(const tgc_bpe *b, bpe_work *w, size_t k)
{
    w->key.len = 0;
    sb_putn(&w->key, w->u.s + w->off[k], w->len[k]);
    sb_putc(&w->key, ' ');
    sb_putn(&w->key, w->u.s + w->off[k + 1], w->len[k + 1]);
    return map_get(&b->merges, w->key.s, w->key.len);
}

/* Merges the piece's symbols by rank; returns the symbol count. */
static size_t bpe_merge(const tgc_bpe *b, bpe_work *w, size_t nsym)
{
    while (nsym > 1) {
        int64_t best = -1;
        size_t at = 0;
        for (size_t k = 0; k + 1 < nsym; k++) {
            int64_t r = bpe_rank(b, w, k);
            if (r >= 0 && (best < 0 || r < best)) { best = r; at = k; }
        }
        if (best < 0) break;
        size_t l1 = w->len[at], l2 = w->len[at + 1], o1 = w->off[at], o2 = w->off[at + 1], out = 0;
        for (size_t k = 0; k < nsym; k++) {
            bool hit = k + 1 < nsym && w->len[k] == l1 && w->len[k + 1] == l2 &&
                       memcmp(w->u.s + w->off[k], w->u.s + o1, l1) == 0 &&
                       memcmp(w->u.s + w->off[k + 1], w->u.s + o2, l2) == 0;
            w->off[out] = w->off[k];
            w->len[out] = w->len[k] + (hit ? w->len[k + 1] : 0);
            out++;
            k += hit;
        }
        nsym = out;
    }
    return nsym;
}

bool tgc_bpe_encode(const tgc_bpe *b, const unsigned char *text, size_t n, int32_t **out, int64_t *len,
                    int64_t *cap, const char *where, diag *d)
{
    bpe_work w = {0};
    sb_init(&w.u);
    sb_init(&w.key);
    bool ok = true;
    for (size_t i = 0; ok && i < n;) {
        size_t m = tgc_bpe_piece(text, n, i);
        if (m > w.cap && !bpe_work_grow(&w, m)) {
            diag_error(d, (src_loc){.file = where}, "byte %zu: out of memory for a piece of %zu bytes", i, m);
            ok = false;
            break;
        }
        w.u.len = 0;
        for (size_t k = 0; k < m; k++) {
            w.off[k] = w.u.len;
            w.len[k] = b->byte_len[text[i + k]];
            sb_putn(&w.u, b->byte_sym[text[i + k]], w.len[k]);
        }
        size_t nsym = bpe_merge(b, &w, m);
        for (size_t k = 0; k < nsym; k++) {
            int64_t id = map_get(&b->vocab, w.u.s + w.off[k], w.len[k]);
            if (id < 0) {
                diag_error(d, (src_loc){.file = where}, "byte %zu: the BPE symbol '%.*s' is not in the vocabulary",
                           i, (int)w.len[k], w.u.s + w.off[k]);
                ok = false;
                break;
            }
            if (*len == *cap) {
                int64_t want = *cap ? 2 * *cap : 1024;
                int32_t *p = realloc(*out, (size_t)want * sizeof **out);
                if (!p) {
                    diag_error(d, (src_loc){.file = where}, "byte %zu: out of memory for %" PRId64 " tokens", i, want);
                    ok = false;
                    break;
                }
                *out = p;
                *cap = want;
            }
            (*out)[(*len)++] = (int32_t)id;
        }
        i += m;
    }
    sb_free(&w.u);
    sb_free(&w.key);
    free(w.off);
    free(w.len);
    return ok;
}

bool tgc_bpe_has_id(const tgc_bpe *b, int64_t id) { return id >= 0 && id < b->vocab_size && b->by_id[id]; }

/* The token's string through the inverse byte map (bytes_to_unicode's
 * inverse, GPT-2's byte_decoder); a code point outside the map (no GPT-2
 * vocabulary has one) stays as its UTF-8. */
void tgc_bpe_decode_one(const tgc_bpe *b, int64_t id, strbuf *out)
{
    TGC_ASSERT(tgc_bpe_has_id(b, id));
    const unsigned char *s = (const unsigned char *)b->by_id[id]->key;
    size_t n = b->by_id[id]->len;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp = s[i];
        utf8proc_ssize_t m = 1;
        if (cp >= 0x80) m = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (m <= 0) m = 1, cp = -1;
        if (cp >= 0 && cp < 512 && b->byte_of[cp] >= 0) sb_putc(out, (char)b->byte_of[cp]);
        else sb_putn(out, (const char *)s + i, (size_t)m);
        i += (size_t)m;
    }
}
