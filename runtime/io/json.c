/* A strict JSON reader into an arena tree (runtime/io/json.h). */
#include "runtime/io/json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/file.h"
#include "support/util.h"

typedef struct jp {
    const char *file, *start, *p, *end;
    const char *line_start;
    int line;
    json_doc *doc;
    diag *d;
    bool ok;
    strbuf str;
} jp;

static src_loc jp_loc(const jp *j, const char *at)
{
    /* Columns count bytes, as the diagnostics' caret does. */
    int line = j->line;
    const char *ls = j->line_start;
    if (at < ls) { /* an earlier position on an earlier line: recount */
        line = 1;
        ls = j->start;
        for (const char *q = j->start; q < at; q++)
            if (*q == '\n') { line++; ls = q + 1; }
    }
    return (src_loc){.file = j->file, .line = line, .col = (int)(at - ls) + 1};
}

static void jp_fail_at(jp *j, const char *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void jp_fail_at(jp *j, const char *at, const char *fmt, ...)
{
    if (!j->ok) return;
    j->ok = false;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    diag_error(j->d, jp_loc(j, at), "invalid JSON: %s", msg);
}

/* A byte as messages show it: 'a', or '\x00' for one that is not printable ASCII. */
static const char *jp_byte_text(unsigned char c, char buf[8])
{
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') snprintf(buf, 8, "'%c'", c);
    else snprintf(buf, 8, "'\\x%02x'", c);
    return buf;
}

static void jp_ws(jp *j)
{
    while (j->p < j->end) {
        char c = *j->p;
        if (c == '\n') { j->line++; j->line_start = j->p + 1; }
        else if (c != ' ' && c != '\t' && c != '\r') return;
        j->p++;
    }
}

static json_value *jp_new(jp *j, json_kind k, const char *at)
{
    json_value *v = arena_alloc(&j->doc->mem, sizeof *v);
    v->kind = k;
    v->loc = jp_loc(j, at);
    return v;
}

/* The valid UTF-8 sequence's length at p (lead byte >= 0x80), 0 if none. */
static int jp_utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0], lo = 0x80, hi = 0xBF;
    int n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!n || end - p < n) return 0;
    if (c == 0xE0) lo = 0xA0;
    else if (c == 0xED) hi = 0x9F;
    else if (c == 0xF0) lo = 0x90;
    else if (c == 0xF4) hi = 0x8F;
    if (p[1] < lo || p[1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return n;
}

static void jp_put_utf8(strbuf *b, uint32_t cp)
{
    if (cp < 0x80) sb_putc(b, (char)cp);
    else if (cp < 0x800) { sb_putc(b, (char)(0xC0 | cp >> 6)); sb_putc(b, (char)(0x80 | (cp & 63))); }
    else if (cp < 0x10000) {
        sb_putc(b, (char)(0xE0 | cp >> 12));
        sb_putc(b, (char)(0x80 | ((cp >> 6) & 63)));
        sb_putc(b, (char)(0x80 | (cp & 63)));
    } else {
        sb_putc(b, (char)(0xF0 | cp >> 18));
        sb_putc(b, (char)(0x80 | ((cp >> 12) & 63)));
        sb_putc(b, (char)(0x80 | ((cp >> 6) & 63)));
        sb_putc(b, (char)(0x80 | (cp & 63)));
    }
}

static int jp_hex4(const char *p, const char *end)
{
    if (end - p < 4) return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (x < 0) return -1;
        v = v * 16 + x;
    }
    return v;
}

/* \uXXXX (p at the 'u'), a surrogate pair joined. */
static bool jp_unicode(jp *j)
{
    const char *at = j->p - 1;
    int hi = jp_hex4(j->p + 1, j->end);
    if (hi < 0) { jp_fail_at(j, at, "\\u needs four hex digits"); return false; }
    j->p += 5;
    uint32_t cp = (uint32_t)hi;
    if (hi >= 0xDC00 && hi <= 0xDFFF) { jp_fail_at(j, at, "unpaired surrogate in a \\u escape"); return false; }
    if (hi >= 0xD800 && hi <= 0xDBFF) {
        int lo = j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u' ? jp_hex4(j->p + 2, j->end) : -1;
        if (lo < 0xDC00 || lo > 0xDFFF) { jp_fail_at(j, at, "unpaired surrogate in a \\u escape"); return false; }
        j->p += 6;
        cp = 0x10000 + (((uint32_t)hi - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
    }
    if (cp == 0) { jp_fail_at(j, at, "NUL character in a string"); return false; }
    jp_put_utf8(&j->str, cp);
    return true;
}

/* A string into j->str (p at the opening quote). */
static bool jp_string(jp *j)
{
    const char *open = j->p++;
    j->str.len = 0;
    sb_putn(&j->str, "", 0);
    while (j->p < j->end) {
        unsigned char c = (unsigned char)*j->p;
        if (c == '"') { j->p++; return true; }
        if (c < 0x20) { jp_fail_at(j, j->p, "control character 0x%02x in a string", c); return false; }
        if (c >= 0x80) {
            int n = jp_utf8_len((const unsigned char *)j->p, (const unsigned char *)j->end);
            if (!n) { jp_fail_at(j, j->p, "invalid UTF-8"); return false; }
            sb_putn(&j->str, j->p, (size_t)n);
            j->p += n;
            continue;
        }
        j->p++;
        if (c != '\\') { sb_putc(&j->str, (char)c); continue; }
        if (j->p >= j->end) break;
        static const char names[] = "\"\\/bfnrtu", values[] = "\"\\/\b\f\n\r\t";
        const char *esc = *j->p ? strchr(names, *j->p) : NULL;
        char bt[8];
        if (!esc) {
            jp_fail_at(j, j->p - 1, "invalid escape: a backslash then %s", jp_byte_text((unsigned char)*j->p, bt));
            return false;
        }
        if (*esc == 'u') {
            if (!jp_unicode(j)) return false;
            continue;
        }
        sb_putc(&j->str, values[esc - names]);
        j->p++;
    }
    jp_fail_at(j, open, "unterminated string");
    return false;
}

static json_value *jp_number(jp *j)
{
    const char *at = j->p, *q = j->p;
    if (q < j->end && *q == '-') q++;
    const char *digits = q;
    while (q < j->end && *q >= '0' && *q <= '9') q++;
    bool integral = true;
    if (q == digits || (*digits == '0' && q - digits > 1)) { jp_fail_at(j, at, "malformed number"); return NULL; }
    if (q < j->end && *q == '.') {
        integral = false;
        const char *f = ++q;
        while (q < j->end && *q >= '0' && *q <= '9') q++;
        if (q == f) { jp_fail_at(j, at, "malformed number"); return NULL; }
    }
    if (q < j->end && (*q == 'e' || *q == 'E')) {
        integral = false;
        q++;
        if (q < j->end && (*q == '+' || *q == '-')) q++;
        const char *e = q;
        while (q < j->end && *q >= '0' && *q <= '9') q++;
        if (q == e) { jp_fail_at(j, at, "malformed number"); return NULL; }
    }
    char buf[64];
    size_t n = (size_t)(q - at);
    if (n >= sizeof buf) { jp_fail_at(j, at, "number too long"); return NULL; }
    memcpy(buf, at, n);
    buf[n] = 0;
    json_value *v = jp_new(j, JSON_NUMBER, at);
    v->num = strtod(buf, NULL);
    if (!isfinite(v->num)) { jp_fail_at(j, at, "number out of range"); return NULL; }
    if (integral) {
        errno = 0;
        long long x = strtoll(buf, NULL, 10);
        v->is_int = errno == 0;
        v->i = (int64_t)x;
    }
    j->p = q;
    return v;
}

static json_value *jp_value(jp *j, int depth);

static _Thread_local uint64_t key_compares;

uint64_t json_key_compares(void) { return key_compares; }

/* FNV-1a with a final mix, so that the table's low bits depend on every byte. */
static uint64_t jp_key_hash(const char *key)
{
    uint64_t h = hash_bytes(key, strlen(key), HASH_SEED);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
}

/* The member index of key (hash h) in obj, or -1; *empty (when the object
 * has a table) gets the free slot where it would go. */
static int jp_find(const json_value *obj, const char *key, uint64_t h, uint32_t **empty)
{
    if (!obj->slots) {
        for (int i = 0; i < obj->n; i++)
            if (obj->hashes[i] == h && (key_compares++, strcmp(obj->keys[i], key) == 0)) return i;
        return -1;
    }
    uint32_t mask = obj->nslots - 1;
    for (uint32_t s = (uint32_t)h & mask;; s = (s + 1) & mask) {
        uint32_t k = obj->slots[s];
        if (!k) {
            if (empty) *empty = &obj->slots[s];
            return -1;
        }
        if (obj->hashes[k - 1] == h && (key_compares++, strcmp(obj->keys[k - 1], key) == 0)) return (int)k - 1;
    }
}

/* Keeps the table at most half full: built once the object outgrows a
 * scan, doubled as it grows. */
static void jp_table_grow(jp *j, json_value *v)
{
    if (v->n <= JSON_SCAN_MAX || (uint64_t)v->n * 2 <= v->nslots) return;
    uint32_t ns = v->nslots ? 2 * v->nslots : 32;
    while ((uint64_t)ns < (uint64_t)v->n * 2) ns *= 2;
    v->slots = arena_alloc(&j->doc->mem, (size_t)ns * sizeof *v->slots);
    v->nslots = ns;
    for (int i = 0; i < v->n; i++) {
        uint32_t s = (uint32_t)v->hashes[i] & (ns - 1);
        while (v->slots[s]) s = (s + 1) & (ns - 1);
        v->slots[s] = (uint32_t)i + 1;
    }
}

static void *jp_regrow(jp *j, void *old, int n, int cap, size_t size)
{
    void *p = arena_alloc(&j->doc->mem, (size_t)cap * size);
    if (n) memcpy(p, old, (size_t)n * size);
    return p;
}

static void jp_push(jp *j, json_value *v, json_value *item, const char *key, uint64_t h, int *cap)
{
    if (v->n == *cap) {
        int nc = *cap ? 2 * *cap : 8;
        v->items = jp_regrow(j, v->items, v->n, nc, sizeof *v->items);
        if (v->kind == JSON_OBJECT) {
            v->keys = jp_regrow(j, v->keys, v->n, nc, sizeof *v->keys);
            v->hashes = jp_regrow(j, v->hashes, v->n, nc, sizeof *v->hashes);
        }
        *cap = nc;
    }
    v->items[v->n] = item;
    if (!key) { v->n++; return; }
    v->keys[v->n] = key;
    v->hashes[v->n++] = h;
    if (v->slots && (uint64_t)v->n * 2 <= v->nslots) {
        uint32_t *slot = NULL;
        jp_find(v, key, h, &slot); /* absent: the duplicate check ran */
        *slot = (uint32_t)v->n;
        return;
    }
    jp_table_grow(j, v);
}

static json_value *jp_array(jp *j, int depth)
{
    json_value *v = jp_new(j, JSON_ARRAY, j->p++);
    int cap = 0;
    jp_ws(j);
    if (j->p < j->end && *j->p == ']') { j->p++; return v; }
    for (;;) {
        json_value *item = jp_value(j, depth + 1);
        if (!item) return NULL;
        jp_push(j, v, item, NULL, 0, &cap);
        jp_ws(j);
        if (j->p < j->end && *j->p == ',') { j->p++; continue; }
        if (j->p < j->end && *j->p == ']') { j->p++; return v; }
        jp_fail_at(j, j->p, "expected ',' or ']' in an array");
        return NULL;
    }
}

static json_value *jp_object(jp *j, int depth)
{
    json_value *v = jp_new(j, JSON_OBJECT, j->p++);
    int cap = 0;
    jp_ws(j);
    if (j->p < j->end && *j->p == '}') { j->p++; return v; }
    for (;;) {
        jp_ws(j);
        const char *at = j->p;
        if (j->p >= j->end || *j->p != '"') { jp_fail_at(j, j->p, "expected a string key in an object"); return NULL; }
        if (!jp_string(j)) return NULL;
        const char *key = arena_strndup(&j->doc->mem, j->str.s, j->str.len);
        uint64_t h = jp_key_hash(key);
        if (jp_find(v, key, h, NULL) >= 0) { jp_fail_at(j, at, "duplicate key \"%s\"", key); return NULL; }
        jp_ws(j);
        if (j->p >= j->end || *j->p != ':') { jp_fail_at(j, j->p, "expected ':' after key \"%s\"", key); return NULL; }
        j->p++;
        json_value *item = jp_value(j, depth + 1);
        if (!item) return NULL;
        jp_push(j, v, item, key, h, &cap);
        jp_ws(j);
        if (j->p < j->end && *j->p == ',') { j->p++; continue; }
        if (j->p < j->end && *j->p == '}') { j->p++; return v; }
        jp_fail_at(j, j->p, "expected ',' or '}' in an object");
        return NULL;
    }
}

static bool jp_word(jp *j, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n) != 0) return false;
    j->p += n;
    return true;
}

static json_value *jp_value(jp *j, int depth)
{
    jp_ws(j);
    if (depth > JSON_MAX_DEPTH) { jp_fail_at(j, j->p, "nested deeper than %d levels", JSON_MAX_DEPTH); return NULL; }
    if (j->p >= j->end) { jp_fail_at(j, j->p, "unexpected end of the file"); return NULL; }
    const char *at = j->p;
    char c = *j->p;
    if (c == '{') return jp_object(j, depth);
    if (c == '[') return jp_array(j, depth);
    if (c == '"') {
        if (!jp_string(j)) return NULL;
        json_value *v = jp_new(j, JSON_STRING, at);
        v->str = arena_strndup(&j->doc->mem, j->str.s, j->str.len);
        return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return jp_number(j);
    if (jp_word(j, "true") || jp_word(j, "false")) {
        json_value *v = jp_new(j, JSON_BOOL, at);
        v->b = c == 't';
        return v;
    }
    if (jp_word(j, "null")) return jp_new(j, JSON_NULL, at);
    if (c == 'N' || c == 'I') jp_fail_at(j, at, "NaN and Infinity are not JSON");
    else {
        char bt[8];
        jp_fail_at(j, at, "unexpected character %s (byte %td)", jp_byte_text((unsigned char)c, bt), at - j->start);
    }
    return NULL;
}

/* Parses text, already registered with d as the source named file. */
static json_doc *jp_run(const char *file, const char *text, size_t len, diag *d)
{
    json_doc *doc = xcalloc(1, sizeof *doc);
    arena_init(&doc->mem);
    jp j = {.file = file, .start = text, .p = text, .end = text + len, .line_start = text, .line = 1, .doc = doc,
            .d = d, .ok = true};
    sb_init(&j.str);
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) j.p = j.line_start = text + 3; /* a UTF-8 BOM */
    doc->root = jp_value(&j, 0);
    if (doc->root) {
        jp_ws(&j);
        if (j.p != j.end) jp_fail_at(&j, j.p, "unexpected text after the JSON value");
    }
    sb_free(&j.str);
    if (!j.ok || !doc->root) {
        json_free(doc);
        return NULL;
    }
    return doc;
}

json_doc *json_parse(const char *file, const char *text, size_t len, diag *d)
{
    return jp_run(diag_add_source(d, file, text, len), text, len, d);
}

typedef struct jp_head_ctx {
    const char *path;
    diag *d;
} jp_head_ctx;

/* The files tgc reads as JSON are objects (or arrays): after a BOM and
 * whitespace comes '{' or '['. A file that starts otherwise is refused
 * from its first bytes, before it is read whole. */
static bool jp_head_ok(const char *head, size_t n, void *ctx)
{
    const jp_head_ctx *h = ctx;
    size_t i = n >= 3 && memcmp(head, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    int line = 1;
    size_t line_start = 0;
    for (; i < n; i++) {
        char c = head[i];
        if (c == '{' || c == '[') return true;
        if (c == '\n') { line++; line_start = i + 1; continue; }
        if (c == ' ' || c == '\t' || c == '\r') continue;
        char bt[8];
        diag_error(h->d, (src_loc){.file = diag_intern(h->path), .line = line, .col = (int)(i - line_start) + 1},
                   "invalid JSON: expected '{' or '[' (a JSON object or array), not %s (byte %zu); the file was "
                   "not read further", jp_byte_text((unsigned char)c, bt), i);
        return false;
    }
    return true; /* only whitespace so far: the parser decides */
}

json_doc *json_read_file(const char *path, diag *d)
{
    char why[256];
    size_t len;
    jp_head_ctx ctx = {path, d};
    errno = 0;
    char *text = file_read_head(path, FILE_JSON, jp_head_ok, &ctx, &len, why, sizeof why);
    if (!text) {
        if (errno != EILSEQ) diag_error(d, (src_loc){.file = diag_intern(path)}, "cannot read: %s", why);
        return NULL;
    }
    return jp_run(diag_adopt_source(d, path, text, len), text, len, d);
}

void json_free(json_doc *doc)
{
    if (!doc) return;
    arena_free(&doc->mem);
    free(doc);
}

const json_value *json_get(const json_value *obj, const char *key)
{
    if (!obj || obj->kind != JSON_OBJECT || !obj->n) return NULL;
    int i = jp_find(obj, key, jp_key_hash(key), NULL);
    return i >= 0 ? obj->items[i] : NULL;
}

const char *json_kind_name(json_kind k)
{
    static const char *const names[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    return (unsigned)k < ARRAY_LEN(names) ? names[k] : "?";
}
