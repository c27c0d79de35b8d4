#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void tgc_assert_fail(const char *file, int line, const char *what)
{
    fprintf(stderr, "tgc: internal error: %s:%d: assertion '%s' failed\n", file, line, what);
    abort();
}

static _Noreturn void oom(size_t n)
{
    fprintf(stderr, "tgc: error: out of memory allocating %zu bytes\n", n);
    exit(1);
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *xcalloc(size_t n, size_t m)
{
    void *p = calloc(n ? n : 1, m ? m : 1);
    if (!p) oom(n * m);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p) oom(n);
    return p;
}

char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

char *path_join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = xmalloc(n);
    snprintf(p, n, "%s/%s", a, b);
    return p;
}

bool path_is_bare_name(const char *name)
{
    return name && *name && !strchr(name, '/') && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

char *path_beside(const char *from, const char *name)
{
    if (!path_is_bare_name(name)) return NULL;
    const char *slash = strrchr(from, '/');
    if (!slash) return xstrdup(name);
    size_t dir = (size_t)(slash - from) + 1, n = dir + strlen(name) + 1;
    char *p = xmalloc(n);
    memcpy(p, from, dir);
    snprintf(p + dir, n - dir, "%s", name);
    return p;
}

void sb_init(strbuf *b) { b->s = NULL; b->len = b->cap = 0; }
void sb_free(strbuf *b) { free(b->s); sb_init(b); }

static void sb_reserve(strbuf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->len + extra + 1) cap *= 2;
    b->s = xrealloc(b->s, cap);
    b->cap = cap;
}

void sb_putn(strbuf *b, const char *s, size_t n)
{
    sb_reserve(b, n);
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void sb_putc(strbuf *b, char c) { sb_putn(b, &c, 1); }
void sb_puts(strbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }

void sb_printf(strbuf *b, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    sb_reserve(b, (size_t)n);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    b->len += (size_t)n;
}

void sb_put_double(strbuf *b, double v)
{
    if (isnan(v)) { sb_puts(b, "nan"); return; }
    if (isinf(v)) { sb_puts(b, v < 0 ? "-inf" : "inf"); return; }
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v) break;
    }
    /* Keep a marker that this is a real number, not an integer. */
    if (!strpbrk(tmp, ".eEn")) strcat(tmp, ".0");
    sb_puts(b, tmp);
}

void sb_put_quoted(strbuf *b, const char *s)
{
    sb_putc(b, '"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { sb_putc(b, '\\'); sb_putc(b, (char)c); }
        else if (c == '\n') sb_puts(b, "\\n");
        else if (c == '\t') sb_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f) sb_printf(b, "\\x%02x", c);
        else sb_putc(b, (char)c);
    }
    sb_putc(b, '"');
}

uint64_t hash_bytes(const void *p, size_t n, uint64_t h)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t hash_u64(uint64_t x, uint64_t h) { return hash_bytes(&x, sizeof x, h); }

/* The one number reader of user input (options, --split, --set, TGC_*
 * variables): an optional '-', decimal digits, and for a float an optional
 * fraction and exponent. No blanks, '+', hex, inf or nan (strtod takes
 * them all), nothing after the number, nothing out of range. */
static size_t num_digits(const char *s)
{
    size_t n = 0;
    while (s[n] >= '0' && s[n] <= '9') n++;
    return n;
}

/* The length of the decimal float at s (0: none); *is_int: digits only. */
static size_t num_scan(const char *s, bool *is_int)
{
    size_t i = s[0] == '-';
    size_t whole = num_digits(s + i), frac = 0;
    i += whole;
    *is_int = whole > 0;
    if (s[i] == '.') {
        *is_int = false;
        frac = num_digits(s + i + 1);
        i += 1 + frac;
    }
    if (whole + frac == 0) return 0;
    if (s[i] == 'e' || s[i] == 'E') {
        size_t j = i + 1 + (s[i + 1] == '+' || s[i + 1] == '-');
        size_t ex = num_digits(s + j);
        if (ex == 0) return 0;
        *is_int = false;
        i = j + ex;
    }
    return i;
}

bool parse_i64(const char *s, int64_t *out)
{
    bool is_int;
    if (!s || num_scan(s, &is_int) != strlen(s) || !is_int) return false;
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    if (errno) return false;
    *out = v;
    return true;
}

bool parse_double(const char *s, double *out)
{
    bool is_int;
    if (!s || !*s || num_scan(s, &is_int) != strlen(s)) return false;
    errno = 0;
    double v = strtod(s, NULL);
    if (!isfinite(v)) return false; /* overflow; an underflow reads as its nearest double */
    *out = v;
    return true;
}

int parse_double_list(const char *s, double *out, int max)
{
    int n = 0;
    size_t len = s ? strlen(s) : 0;
    char *buf = xmalloc(len + 1);
    for (const char *p = s; p && n <= max;) {
        const char *comma = strchr(p, ',');
        size_t k = comma ? (size_t)(comma - p) : strlen(p);
        memcpy(buf, p, k);
        buf[k] = 0;
        if (n == max || !parse_double(buf, &out[n])) { n = -1; break; }
        n++;
        p = comma ? comma + 1 : NULL;
    }
    free(buf);
    return n;
}
