#define _DEFAULT_SOURCE /* madvise (MADV_DONTNEED) */
/* safetensors: a deterministic atomic writer and a mapped, strictly
 * validated reader with its own small JSON parser. */
#include "runtime/io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/arena.h"
#include "support/file.h"
#include "support/util.h"

#define ST_ERROR(d, path, ...) diag_error((d), (src_loc){.file = (path)}, __VA_ARGS__)

static const struct {
    const char *name;
    int size;
} st_dtypes[TGC_ST_DTYPE_COUNT] = {
#define TGC_ST_ROW(n, sz) [TGC_ST_##n] = {#n, sz},
    TGC_ST_DTYPES(TGC_ST_ROW)
#undef TGC_ST_ROW
};

const char *tgc_st_dtype_name(tgc_st_dtype t)
{
    TGC_ASSERT((unsigned)t < TGC_ST_DTYPE_COUNT);
    return st_dtypes[t].name;
}

int tgc_st_dtype_size(tgc_st_dtype t)
{
    TGC_ASSERT((unsigned)t < TGC_ST_DTYPE_COUNT);
    return st_dtypes[t].size;
}

bool tgc_st_dtype_lookup(const char *name, tgc_st_dtype *out)
{
    for (int t = 0; t < TGC_ST_DTYPE_COUNT; t++)
        if (strcmp(st_dtypes[t].name, name) == 0) { *out = (tgc_st_dtype)t; return true; }
    return false;
}

/* prod(shape) * size in bytes; false on a negative dim or overflow. */
static bool st_nbytes(tgc_st_dtype t, int rank, const int64_t *shape, int64_t *out)
{
    int64_t n = tgc_st_dtype_size(t);
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0) return false;
        if (shape[i] && n > INT64_MAX / shape[i]) return false;
        n *= shape[i];
    }
    *out = n;
    return true;
}

/* The length of the valid UTF-8 sequence at p (non-ASCII lead), 0 if none. */
static int st_utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0], lo = 0x80, hi = 0xBF;
    int n;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) n = 3;
    else if (c >= 0xF0 && c <= 0xF4) n = 4;
    else return 0;
    if (c == 0xE0) lo = 0xA0;      /* overlong */
    else if (c == 0xED) hi = 0x9F; /* surrogates */
    else if (c == 0xF0) lo = 0x90; /* overlong */
    else if (c == 0xF4) hi = 0x8F; /* > U+10FFFF */
    if (end - p < n) return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return n;
}

static bool st_utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s);
    while (p < end) {
        if (*p < 0x80) { p++; continue; }
        int n = st_utf8_len(p, end);
        if (!n) return false;
        p += n;
    }
    return true;
}

/* ---- writing ------------------------------------------------------------ */

typedef struct st_out {
    const tgc_st_tensor *t;
    int64_t nbytes;
    int64_t begin;
} st_out;

static int st_out_by_name(const void *a, const void *b)
{
    return strcmp(((const st_out *)a)->t->name, ((const st_out *)b)->t->name);
}

/* Data order: larger elements first (alignment), then by name. */
static int st_out_by_layout(const void *a, const void *b)
{
    const st_out *x = a, *y = b;
    int sx = tgc_st_dtype_size(x->t->dtype), sy = tgc_st_dtype_size(y->t->dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return strcmp(x->t->name, y->t->name);
}

static int st_kv_by_key(const void *a, const void *b)
{
    return strcmp(((const tgc_st_kv *)a)->key, ((const tgc_st_kv *)b)->key);
}

/* JSON string: escapes quotes, backslashes and control characters. */
static void st_put_string(strbuf *b, const char *s)
{
    sb_putc(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') { sb_putc(b, '\\'); sb_putc(b, (char)*p); }
        else if (*p == '\n') sb_puts(b, "\\n");
        else if (*p == '\t') sb_puts(b, "\\t");
        else if (*p < 0x20) sb_printf(b, "\\u%04x", *p);
        else sb_putc(b, (char)*p);
    }
    sb_putc(b, '"');
}

/* Sorted metadata with "format": "pt" added; false on a bad or repeated key. */
static bool st_write_meta(strbuf *b, const char *path, const tgc_st_kv *meta, int nmeta, diag *d)
{
    tgc_st_kv *kv = xmalloc(((size_t)nmeta + 1) * sizeof *kv);
    int n = 0;
    bool has_format = false, ok = true;
    for (int i = 0; i < nmeta; i++) {
        has_format |= strcmp(meta[i].key, "format") == 0;
        kv[n++] = meta[i];
    }
    if (!has_format) kv[n++] = (tgc_st_kv){"format", "pt"};
    qsort(kv, (size_t)n, sizeof *kv, st_kv_by_key);
    sb_puts(b, "{\"__metadata__\":{");
    for (int i = 0; i < n && ok; i++) {
        if (i && strcmp(kv[i - 1].key, kv[i].key) == 0) {
            ST_ERROR(d, path, "duplicate metadata key '%s'", kv[i].key);
            ok = false;
        } else if (!st_utf8_valid(kv[i].key) || !st_utf8_valid(kv[i].value)) {
            ST_ERROR(d, path, "metadata key '%s' or its value is not valid UTF-8", kv[i].key);
            ok = false;
        }
        if (i) sb_putc(b, ',');
        st_put_string(b, kv[i].key);
        sb_putc(b, ':');
        st_put_string(b, kv[i].value);
    }
    sb_putc(b, '}');
    free(kv);
    return ok;
}

/* The padded header; assigns offsets in out[] (sorted by name on return). */
static bool st_write_header(strbuf *b, const char *path, st_out *out, int n, const tgc_st_kv *meta, int nmeta,
                            diag *d)
{
    if (!st_write_meta(b, path, meta, nmeta, d)) return false;
    qsort(out, (size_t)n, sizeof *out, st_out_by_layout);
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        out[i].begin = at;
        at += out[i].nbytes;
    }
    qsort(out, (size_t)n, sizeof *out, st_out_by_name);
    for (int i = 0; i < n; i++) {
        const tgc_st_tensor *t = out[i].t;
        if (i && strcmp(out[i - 1].t->name, t->name) == 0) {
            ST_ERROR(d, path, "duplicate tensor name '%s'", t->name);
            return false;
        }
        if (!*t->name || !st_utf8_valid(t->name) || strcmp(t->name, "__metadata__") == 0) {
            ST_ERROR(d, path, "invalid tensor name '%s'", t->name);
            return false;
        }
        sb_putc(b, ',');
        st_put_string(b, t->name);
        sb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", tgc_st_dtype_name(t->dtype));
        for (int k = 0; k < t->rank; k++) sb_printf(b, "%s%lld", k ? "," : "", (long long)t->shape[k]);
        sb_printf(b, "],\"data_offsets\":[%lld,%lld]}", (long long)out[i].begin,
                  (long long)(out[i].begin + out[i].nbytes));
    }
    sb_putc(b, '}');
    while ((b->len & 7) != 0) sb_putc(b, ' ');
    return true;
}

struct tgc_st_writer {
    char *path;
    file_out *o; /* support/file.h: an exclusive temporary, renamed at the end */
    FILE *f;     /* o's stream */
    int err;      /* the first write error (errno), 0 while none */
    const tgc_st_tensor *base;
    st_out *out; /* in data order */
    int n, next;
    diag *d;
};

tgc_st_writer *tgc_st_writer_open(const char *path, const tgc_st_tensor *tensors, int n, const tgc_st_kv *meta,
                                  int nmeta, diag *d)
{
    TGC_ASSERT(n >= 0 && nmeta >= 0);
    st_out *out = xmalloc(((size_t)n + 1) * sizeof *out);
    for (int i = 0; i < n; i++) {
        const tgc_st_tensor *t = &tensors[i];
        TGC_ASSERT(t->name && (unsigned)t->dtype < TGC_ST_DTYPE_COUNT);
        TGC_ASSERT(t->rank >= 0 && t->rank <= TGC_ST_MAX_RANK && (t->rank == 0 || t->shape));
        out[i].t = t;
        bool sized = st_nbytes(t->dtype, t->rank, t->shape, &out[i].nbytes);
        TGC_ASSERT(sized); /* dims >= 0, no overflow */
    }
    strbuf hdr;
    sb_init(&hdr);
    if (!st_write_header(&hdr, path, out, n, meta, nmeta, d)) {
        sb_free(&hdr);
        free(out);
        return NULL;
    }
    qsort(out, (size_t)n, sizeof *out, st_out_by_layout);
    tgc_st_writer *w = xcalloc(1, sizeof *w);
    w->path = xstrdup(path);
    w->base = tensors;
    w->out = out;
    w->n = n;
    w->d = d;
    char why[256];
    w->o = file_out_begin(path, why, sizeof why);
    if (!w->o) {
        ST_ERROR(d, path, "cannot write: %s", why);
        sb_free(&hdr);
        tgc_st_writer_finish(w, false);
        return NULL;
    }
    w->f = file_out_stream(w->o);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hdr.len >> (8 * i));
    if (fwrite(len8, 1, 8, w->f) != 8 || fwrite(hdr.s, 1, hdr.len, w->f) != hdr.len) w->err = errno ? errno : EIO;
    sb_free(&hdr);
    return w;
}

int tgc_st_writer_next(const tgc_st_writer *w)
{
    return w->next < w->n ? (int)(w->out[w->next].t - w->base) : -1;
}

bool tgc_st_writer_put(tgc_st_writer *w, const void *data)
{
    TGC_ASSERT(w->next < w->n);
    const st_out *o = &w->out[w->next++];
    TGC_ASSERT(data || o->nbytes == 0);
    if (!w->err && o->nbytes && fwrite(data, 1, (size_t)o->nbytes, w->f) != (size_t)o->nbytes)
        w->err = errno ? errno : EIO;
    return !w->err;
}

file_out *tgc_st_writer_close(tgc_st_writer *w)
{
    if (!w) return NULL;
    file_out *o = w->o;
    char why[256];
    if (o && w->next == w->n && !w->err && !file_out_sync(o, why, sizeof why)) {
        ST_ERROR(w->d, w->path, "cannot write: %s", why);
        o = NULL; /* file_out_sync removed it */
    } else if (o && (w->next != w->n || w->err)) {
        if (w->err) ST_ERROR(w->d, w->path, "cannot write: %s", strerror(w->err));
        file_out_abort(o);
        o = NULL;
    }
    free(w->out);
    free(w->path);
    free(w);
    return o;
}

bool tgc_st_writer_finish(tgc_st_writer *w, bool keep)
{
    if (!w) return false;
    if (!keep) {
        file_out_abort(w->o);
        w->o = NULL;
    }
    char *path = keep ? xstrdup(w->path) : NULL;
    diag *d = w->d;
    file_out *o = tgc_st_writer_close(w);
    char why[256];
    bool ok = o && file_out_commit(o, why, sizeof why);
    if (o && !ok) ST_ERROR(d, path, "cannot write: %s", why);
    free(path);
    return ok;
}

bool tgc_st_write(const char *path, const tgc_st_tensor *tensors, int n, const tgc_st_kv *meta, int nmeta,
                  diag *d)
{
    tgc_st_writer *w = tgc_st_writer_open(path, tensors, n, meta, nmeta, d);
    if (!w) return false;
    for (int i; (i = tgc_st_writer_next(w)) >= 0;) tgc_st_writer_put(w, tensors[i].data);
    return tgc_st_writer_finish(w, true);
}

/* ---- reading: the file ---------------------------------------------------- */

struct tgc_st_file {
    char *path;
    void *map;
    size_t size;
    const unsigned char *buf; /* the data buffer */
    uint64_t buflen;
    arena strings;
    tgc_st_info *t;
    int nt, capt;
    tgc_st_kv *meta;
    int nmeta, capmeta;
    bool seen_meta;
};

/* ---- reading: the JSON header ------------------------------------------- */

typedef struct st_parser {
    const char *start, *p, *end;
    tgc_st_file *f;
    diag *d;
    bool ok;
    strbuf str; /* the last string parsed, unescaped */
} st_parser;

static void st_fail(st_parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void st_fail(st_parser *ps, const char *fmt, ...)
{
    if (!ps->ok) return;
    ps->ok = false;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ST_ERROR(ps->d, ps->f->path, "invalid safetensors header at byte %lld: %s",
             (long long)(8 + (ps->p - ps->start)), msg);
}

static void st_skip_ws(st_parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

/* Skips whitespace and consumes c, or fails. */
static bool st_expect(st_parser *ps, char c)
{
    st_skip_ws(ps);
    if (ps->p < ps->end && *ps->p == c) { ps->p++; return true; }
    if (ps->p == ps->end) st_fail(ps, "expected '%c', found the end of the header", c);
    else if (*ps->p > 0x20 && *ps->p < 0x7f) st_fail(ps, "expected '%c', found '%c'", c, *ps->p);
    else st_fail(ps, "expected '%c', found byte 0x%02x", c, (unsigned char)*ps->p);
    return false;
}

/* Consumes c after whitespace if it is next. */
static bool st_accept(st_parser *ps, char c)
{
    st_skip_ws(ps);
    if (ps->p < ps->end && *ps->p == c) { ps->p++; return true; }
    return false;
}

static int st_hex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

static void st_put_utf8(strbuf *b, uint32_t cp)
{
    if (cp < 0x80) { sb_putc(b, (char)cp); return; }
    if (cp < 0x800) { sb_putc(b, (char)(0xC0 | cp >> 6)); }
    else {
        if (cp < 0x10000) sb_putc(b, (char)(0xE0 | cp >> 12));
        else {
            sb_putc(b, (char)(0xF0 | cp >> 18));
            sb_putc(b, (char)(0x80 | ((cp >> 12) & 0x3F)));
        }
        sb_putc(b, (char)(0x80 | ((cp >> 6) & 0x3F)));
    }
    sb_putc(b, (char)(0x80 | (cp & 0x3F)));
}

/* A \uXXXX escape (ps->p at the 'u'), with surrogate pairs. */
static bool st_unicode_escape(st_parser *ps)
{
    int hi = ps->end - ps->p >= 5 ? st_hex4(ps->p + 1) : -1;
    if (hi < 0) { st_fail(ps, "invalid \\u escape"); return false; }
    ps->p += 5;
    uint32_t cp = (uint32_t)hi;
    if (hi >= 0xDC00 && hi <= 0xDFFF) { st_fail(ps, "unpaired surrogate in \\u escape"); return false; }
    if (hi >= 0xD800 && hi <= 0xDBFF) {
        int lo = ps->end - ps->p >= 6 && ps->p[0] == '\\' && ps->p[1] == 'u' ? st_hex4(ps->p + 2) : -1;
        if (lo < 0xDC00 || lo > 0xDFFF) { st_fail(ps, "unpaired surrogate in \\u escape"); return false; }
        ps->p += 6;
        cp = 0x10000 + (((uint32_t)hi - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
    }
    if (cp == 0) { st_fail(ps, "NUL character in a string"); return false; }
    st_put_utf8(&ps->str, cp);
    return true;
}

/* A JSON string into ps->str (valid UTF-8, no NUL). */
static bool st_string(st_parser *ps)
{
    if (!st_expect(ps, '"')) return false;
    ps->str.len = 0;
    sb_putn(&ps->str, "", 0);
    while (ps->p < ps->end) {
        unsigned char c = (unsigned char)*ps->p;
        if (c == '"') { ps->p++; return true; }
        if (c < 0x20) { st_fail(ps, "control character 0x%02x in a string", c); return false; }
        if (c >= 0x80) {
            int n = st_utf8_len((const unsigned char *)ps->p, (const unsigned char *)ps->end);
            if (!n) { st_fail(ps, "invalid UTF-8"); return false; }
            sb_putn(&ps->str, ps->p, (size_t)n);
            ps->p += n;
            continue;
        }
        ps->p++;
        if (c != '\\') { sb_putc(&ps->str, (char)c); continue; }
        if (ps->p >= ps->end) break;
        static const char names[] = "\"\\/bfnrtu", values[] = "\"\\/\b\f\n\r\t";
        const char *esc = *ps->p ? strchr(names, *ps->p) : NULL;
        if (!esc) { st_fail(ps, "invalid escape '\\%c'", *ps->p); return false; }
        if (*esc == 'u') {
            if (!st_unicode_escape(ps)) return false;
            continue;
        }
        sb_putc(&ps->str, values[esc - names]);
        ps->p++;
    }
    st_fail(ps, "unterminated string");
    return false;
}

/* A non-negative JSON integer (no sign, fraction or exponent). */
static bool st_uint(st_parser *ps, int64_t *out)
{
    st_skip_ws(ps);
    const char *q = ps->p;
    int64_t v = 0;
    while (q < ps->end && *q >= '0' && *q <= '9') {
        int digit = *q - '0';
        if (v > (INT64_MAX - digit) / 10) { st_fail(ps, "integer out of range"); return false; }
        v = v * 10 + digit;
        q++;
    }
    bool frac = q < ps->end && (*q == '.' || *q == 'e' || *q == 'E');
    if (q == ps->p || frac || (*ps->p == '0' && q - ps->p > 1)) {
        st_fail(ps, "expected a non-negative integer");
        return false;
    }
    ps->p = q;
    *out = v;
    return true;
}

/* [u, u, ...] with at most max elements; *n receives the count. */
static bool st_uint_array(st_parser *ps, int64_t *out, int max, int *n, const char *what)
{
    *n = 0;
    if (!st_expect(ps, '[')) return false;
    if (st_accept(ps, ']')) return true;
    do {
        if (*n == max) { st_fail(ps, "%s has more than %d elements", what, max); return false; }
        if (!st_uint(ps, &out[(*n)++])) return false;
    } while (st_accept(ps, ','));
    return st_expect(ps, ']');
}

/* "__metadata__": {str: str, ...} or null. */
static bool st_meta_object(st_parser *ps)
{
    tgc_st_file *f = ps->f;
    if (f->seen_meta) { st_fail(ps, "duplicate key '__metadata__'"); return false; }
    f->seen_meta = true;
    st_skip_ws(ps);
    if (ps->end - ps->p >= 4 && memcmp(ps->p, "null", 4) == 0) { ps->p += 4; return true; }
    if (!st_expect(ps, '{')) return false;
    if (st_accept(ps, '}')) return true;
    do {
        if (!st_string(ps)) return false;
        char *key = arena_strndup(&f->strings, ps->str.s, ps->str.len);
        if (!st_expect(ps, ':')) return false;
        st_skip_ws(ps);
        if (ps->p < ps->end && *ps->p != '"') { st_fail(ps, "metadata value of '%s' is not a string", key); return false; }
        if (!st_string(ps)) return false;
        if (f->nmeta == f->capmeta) {
            f->capmeta = f->capmeta ? 2 * f->capmeta : 8;
            f->meta = xrealloc(f->meta, (size_t)f->capmeta * sizeof *f->meta);
        }
        f->meta[f->nmeta++] = (tgc_st_kv){key, arena_strndup(&f->strings, ps->str.s, ps->str.len)};
    } while (st_accept(ps, ','));
    return st_expect(ps, '}');
}

/* {"dtype": ..., "shape": [...], "data_offsets": [b, e]} in any order.
 * Errors about a key or value point at its first byte. */
static bool st_tensor_object(st_parser *ps, tgc_st_info *t)
{
    const char *name = t->name, *at_off = NULL;
    bool have[3] = {false, false, false};
    int64_t off[2];
    if (!st_expect(ps, '{')) return false;
    do {
        st_skip_ws(ps);
        const char *at = ps->p;
        if (!st_string(ps)) return false;
        int field = strcmp(ps->str.s, "dtype") == 0 ? 0 : strcmp(ps->str.s, "shape") == 0 ? 1
                  : strcmp(ps->str.s, "data_offsets") == 0 ? 2 : -1;
        if (field < 0 || have[field]) {
            ps->p = at;
            st_fail(ps, "%s field '%s' in tensor '%s'", field < 0 ? "unknown" : "duplicate", ps->str.s, name);
            return false;
        }
        have[field] = true;
        if (!st_expect(ps, ':')) return false;
        st_skip_ws(ps);
        at = ps->p;
        int n;
        if (field == 0) {
            if (!st_string(ps)) return false;
            if (!tgc_st_dtype_lookup(ps->str.s, &t->dtype)) {
                ps->p = at;
                st_fail(ps, "unknown dtype '%s' of tensor '%s'", ps->str.s, name);
                return false;
            }
        } else if (field == 1) {
            if (!st_uint_array(ps, t->shape, TGC_ST_MAX_RANK, &t->rank, "shape")) return false;
        } else {
            at_off = at;
            if (!st_uint_array(ps, off, 2, &n, "data_offsets")) return false;
            if (n != 2) { ps->p = at; st_fail(ps, "data_offsets of tensor '%s' must be [begin, end]", name); return false; }
        }
    } while (st_accept(ps, ','));
    if (!st_expect(ps, '}')) return false;
    for (int i = 0; i < 3; i++)
        if (!have[i]) {
            st_fail(ps, "tensor '%s' lacks \"%s\"", name, i == 0 ? "dtype" : i == 1 ? "shape" : "data_offsets");
            return false;
        }
    if (off[1] < off[0]) {
        ps->p = at_off;
        st_fail(ps, "data_offsets of tensor '%s' end before they begin", name);
        return false;
    }
    t->begin = (uint64_t)off[0];
    t->nbytes = off[1] - off[0];
    return true;
}

static bool st_member(st_parser *ps)
{
    tgc_st_file *f = ps->f;
    if (!st_string(ps)) return false;
    if (strcmp(ps->str.s, "__metadata__") == 0) return st_expect(ps, ':') && st_meta_object(ps);
    if (f->nt == f->capt) {
        f->capt = f->capt ? 2 * f->capt : 16;
        f->t = xrealloc(f->t, (size_t)f->capt * sizeof *f->t);
    }
    tgc_st_info *t = &f->t[f->nt++];
    memset(t, 0, sizeof *t);
    t->name = arena_strndup(&f->strings, ps->str.s, ps->str.len);
    return st_expect(ps, ':') && st_tensor_object(ps, t);
}

static bool st_parse_header(tgc_st_file *f, const char *text, size_t n, diag *d)
{
    st_parser ps = {.start = text, .p = text, .end = text + n, .f = f, .d = d, .ok = true};
    sb_init(&ps.str);
    if (n == 0 || text[0] != '{') {
        st_fail(&ps, "the header must be a JSON object starting with '{'");
    } else if (st_expect(&ps, '{') && !st_accept(&ps, '}')) {
        do {
            if (!st_member(&ps)) break;
        } while (st_accept(&ps, ','));
        st_expect(&ps, '}');
    }
    st_skip_ws(&ps);
    if (ps.ok && ps.p != ps.end) st_fail(&ps, "unexpected byte 0x%02x after the JSON object", (unsigned char)*ps.p);
    sb_free(&ps.str);
    return ps.ok;
}

/* ---- reading: validation ------------------------------------------------ */

static int st_info_by_name(const void *a, const void *b)
{
    return strcmp(((const tgc_st_info *)a)->name, ((const tgc_st_info *)b)->name);
}

static int st_info_by_offset(const void *a, const void *b)
{
    const tgc_st_info *x = *(const tgc_st_info *const *)a, *y = *(const tgc_st_info *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void st_shape_str(char *out, size_t cap, int rank, const int64_t *shape)
{
    size_t at = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < rank && at < cap; i++)
        at += (size_t)snprintf(out + at, cap - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (at < cap) snprintf(out + at, cap - at, "]");
}

/* Each tensor's size matches its dtype and shape; in offset order the
 * tensors tile the buffer exactly. */
static bool st_check_offsets(tgc_st_file *f, diag *d)
{
    bool ok = true;
    const tgc_st_info **order = xmalloc(((size_t)f->nt + 1) * sizeof *order);
    for (int i = 0; i < f->nt; i++) order[i] = &f->t[i];
    qsort(order, (size_t)f->nt, sizeof *order, st_info_by_offset);
    uint64_t at = 0;
    for (int i = 0; i < f->nt && ok; i++) {
        const tgc_st_info *t = order[i];
        int64_t want;
        char shape[160];
        st_shape_str(shape, sizeof shape, t->rank, t->shape);
        uint64_t end = t->begin + (uint64_t)t->nbytes;
        if (!st_nbytes(t->dtype, t->rank, t->shape, &want)) {
            ST_ERROR(d, f->path, "tensor '%s': shape %s is too large", t->name, shape);
            ok = false;
        } else if (want != t->nbytes) {
            ST_ERROR(d, f->path, "tensor '%s': data_offsets [%llu, %llu] hold %lld bytes, but %s %s needs %lld",
                     t->name, (unsigned long long)t->begin, (unsigned long long)end, (long long)t->nbytes,
                     tgc_st_dtype_name(t->dtype), shape, (long long)want);
            ok = false;
        } else if (t->begin != at) {
            ST_ERROR(d, f->path, "tensor '%s': data_offsets begin at %llu, but the previous tensor ends at %llu "
                     "(%s)", t->name, (unsigned long long)t->begin, (unsigned long long)at,
                     t->begin < at ? "overlap" : "gap");
            ok = false;
        } else if (end > f->buflen) {
            ST_ERROR(d, f->path, "truncated: tensor '%s' ends at byte %llu of a data buffer of %llu bytes",
                     t->name, (unsigned long long)end, (unsigned long long)f->buflen);
            ok = false;
        }
        at = end;
    }
    if (ok && at != f->buflen) {
        ST_ERROR(d, f->path, "%llu bytes after the last tensor's data", (unsigned long long)(f->buflen - at));
        ok = false;
    }
    free(order);
    return ok;
}

/* No repeated names or keys; sorts both for lookups. */
static bool st_check_names(tgc_st_file *f, diag *d)
{
    if (f->nt) qsort(f->t, (size_t)f->nt, sizeof *f->t, st_info_by_name);
    for (int i = 1; i < f->nt; i++)
        if (strcmp(f->t[i - 1].name, f->t[i].name) == 0) {
            ST_ERROR(d, f->path, "duplicate tensor '%s' in the header", f->t[i].name);
            return false;
        }
    if (f->nmeta) qsort(f->meta, (size_t)f->nmeta, sizeof *f->meta, st_kv_by_key);
    for (int i = 1; i < f->nmeta; i++)
        if (strcmp(f->meta[i - 1].key, f->meta[i].key) == 0) {
            ST_ERROR(d, f->path, "duplicate metadata key '%s' in the header", f->meta[i].key);
            return false;
        }
    return true;
}

/* ---- reading: the API ----------------------------------------------------- */

static bool st_map(tgc_st_file *f, diag *d)
{
    struct stat st;
    char why[256];
    int fd = file_open(f->path, FILE_MAPPED, &st, why, sizeof why);
    if (fd < 0) {
        ST_ERROR(d, f->path, "cannot open: %s", why);
        return false;
    }
    bool ok = true;
    if (st.st_size < 8) {
        ST_ERROR(d, f->path, "too short for a safetensors file: %lld bytes", (long long)st.st_size);
        ok = false;
    }
    if (ok) {
        f->map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (f->map == MAP_FAILED) {
            f->map = NULL;
            ST_ERROR(d, f->path, "cannot map: %s", strerror(errno));
            ok = false;
        } else {
            f->size = (size_t)st.st_size;
        }
    }
    close(fd);
    return ok;
}

static bool st_load(tgc_st_file *f, diag *d)
{
    if (!st_map(f, d)) return false;
    const unsigned char *p = f->map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | p[i];
    if (n > f->size - 8 || n > TGC_ST_MAX_HEADER) {
        ST_ERROR(d, f->path, "header length %llu exceeds the file's %llu bytes after the length field%s",
                 (unsigned long long)n, (unsigned long long)(f->size - 8),
                 n > TGC_ST_MAX_HEADER ? " (or the 100 MB limit)" : "");
        return false;
    }
    f->buf = p + 8 + n;
    f->buflen = f->size - 8 - n;
    if (!st_parse_header(f, (const char *)p + 8, (size_t)n, d)) return false;
    if (!st_check_names(f, d) || !st_check_offsets(f, d)) return false;
    for (int i = 0; i < f->nt; i++) f->t[i].data = f->buf + f->t[i].begin;
    return true;
}

tgc_st_file *tgc_st_open(const char *path, diag *d)
{
    tgc_st_file *f = xcalloc(1, sizeof *f);
    f->path = xstrdup(path);
    arena_init(&f->strings);
    if (!st_load(f, d)) {
        tgc_st_close(f);
        return NULL;
    }
    return f;
}

void tgc_st_close(tgc_st_file *f)
{
    if (!f) return;
    if (f->map) munmap(f->map, f->size);
    arena_free(&f->strings);
    free(f->t);
    free(f->meta);
    free(f->path);
    free(f);
}

void tgc_st_release(const tgc_st_file *f, const tgc_st_info *t)
{
    /* The whole pages inside the tensor: a page it shares with a neighbour stays. */
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)t->data, hi = lo + (uintptr_t)t->nbytes, base = (uintptr_t)f->map;
    if (page <= 0 || !f->map) return;
    lo = base + (lo - base + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
    hi = base + (hi - base) / (uintptr_t)page * (uintptr_t)page;
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); /* a private read-only mapping: re-read on access */
}

const char *tgc_st_path(const tgc_st_file *f) { return f->path; }
int tgc_st_count(const tgc_st_file *f) { return f->nt; }
int tgc_st_meta_count(const tgc_st_file *f) { return f->nmeta; }

const tgc_st_info *tgc_st_at(const tgc_st_file *f, int i)
{
    TGC_ASSERT(i >= 0 && i < f->nt);
    return &f->t[i];
}

tgc_st_kv tgc_st_meta_at(const tgc_st_file *f, int i)
{
    TGC_ASSERT(i >= 0 && i < f->nmeta);
    return f->meta[i];
}

const tgc_st_info *tgc_st_find(const tgc_st_file *f, const char *name)
{
    tgc_st_info key = {.name = name};
    return f->nt ? bsearch(&key, f->t, (size_t)f->nt, sizeof *f->t, st_info_by_name) : NULL;
}

const char *tgc_st_meta(const tgc_st_file *f, const char *key)
{
    tgc_st_kv k = {.key = key};
    const tgc_st_kv *kv = f->nmeta ? bsearch(&k, f->meta, (size_t)f->nmeta, sizeof *f->meta, st_kv_by_key) : NULL;
    return kv ? kv->value : NULL;
}

const void *tgc_st_expect(const tgc_st_file *f, const char *name, tgc_st_dtype dtype, int rank,
                          const int64_t *shape, diag *d)
{
    const tgc_st_info *t = tgc_st_find(f, name);
    if (!t) {
        ST_ERROR(d, f->path, "tensor '%s' not found (the file holds %d tensors)", name, f->nt);
        return NULL;
    }
    if (t->dtype != dtype) {
        ST_ERROR(d, f->path, "tensor '%s' has dtype %s, expected %s", name, tgc_st_dtype_name(t->dtype),
                 tgc_st_dtype_name(dtype));
        return NULL;
    }
    bool same = t->rank == rank;
    for (int i = 0; same && i < rank; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char have[160], want[160];
        st_shape_str(have, sizeof have, t->rank, t->shape);
        st_shape_str(want, sizeof want, rank, shape);
        ST_ERROR(d, f->path, "tensor '%s' has shape %s, expected %s", name, have, want);
        return NULL;
    }
    return t->data;
}
