#include "diag.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct diag_source {
    diag_source *next;
    const char *name;
    char *text;
    size_t len;
};

/* Interned file names live for the whole process: IR nodes of any graph
 * point at them, and they are few. */
typedef struct intern_entry {
    struct intern_entry *next;
    char name[];
} intern_entry;
static intern_entry *interned;
static pthread_mutex_t intern_lock = PTHREAD_MUTEX_INITIALIZER;

/* For the few names a run names itself (the files on its command line):
 * graphs keep the names read from IR text in their own arenas. */
const char *diag_intern(const char *name)
{
    pthread_mutex_lock(&intern_lock);
    intern_entry *e = interned;
    while (e && strcmp(e->name, name) != 0) e = e->next;
    if (!e) {
        size_t n = strlen(name) + 1;
        e = xmalloc(sizeof *e + n);
        memcpy(e->name, name, n);
        e->next = interned;
        interned = e;
    }
    pthread_mutex_unlock(&intern_lock);
    return e->name;
}

void diag_init(diag *d, FILE *out)
{
    memset(d, 0, sizeof *d);
    d->out = out;
    d->max_errors = 20;
}

void diag_free(diag *d)
{
    diag_source *s = d->sources;
    while (s) {
        diag_source *n = s->next;
        free(s->text);
        free(s);
        s = n;
    }
    d->sources = NULL;
}

const char *diag_adopt_source(diag *d, const char *name, char *text, size_t len)
{
    diag_source *s = xcalloc(1, sizeof *s);
    s->name = diag_intern(name);
    s->text = text;
    s->len = len;
    s->next = d->sources;
    d->sources = s;
    return s->name;
}

const char *diag_add_source(diag *d, const char *name, const char *text, size_t len)
{
    char *copy = xmalloc(len + 1);
    memcpy(copy, text, len);
    copy[len] = 0;
    return diag_adopt_source(d, name, copy, len);
}

void diag_copy_sources(diag *dst, const diag *src)
{
    for (const diag_source *s = src->sources; s; s = s->next) diag_add_source(dst, s->name, s->text, s->len);
}

static const diag_source *find_source(const diag *d, const char *name)
{
    for (const diag_source *s = d->sources; s; s = s->next)
        if (s->name == name || (name && strcmp(s->name, name) == 0)) return s;
    return NULL;
}

/* The longest stretch of a source line an error quotes: a longer line (a
 * generated file, minified data) is cut around the caret, with "..." where
 * text was left out, so the echo stays readable and a 10 MB line does not
 * flood the terminal. */
#define DIAG_ECHO_COLS 200

static bool utf8_cont(char c) { return ((unsigned char)c & 0xc0) == 0x80; }

/* Prints p[0..n) with a caret under column col (1-based), at most
 * DIAG_ECHO_COLS bytes of it, centred on the caret when cut. */
static void print_window(diag *d, const char *p, size_t n, int col)
{
    size_t at = col > 1 ? (size_t)(col - 1) : 0, start = 0, end = n;
    if (at > n) at = n;
    if (n > DIAG_ECHO_COLS) {
        start = at > DIAG_ECHO_COLS / 2 ? at - DIAG_ECHO_COLS / 2 : 0;
        if (start + DIAG_ECHO_COLS > n) start = n - DIAG_ECHO_COLS;
        end = start + DIAG_ECHO_COLS;
        while (start > 0 && start < n && utf8_cont(p[start])) start++; /* whole characters only */
        while (end < n && end > start && utf8_cont(p[end])) end--;
    }
    const char *pre = start > 0 ? "..." : "";
    fprintf(d->out, "%s%.*s%s\n", pre, (int)(end - start), p + start, end < n ? "..." : "");
    fputs(pre, d->out);
    /* Keep tabs so the caret lines up with the quoted line. */
    for (size_t i = start; i < at && i < end; i++) fputc(p[i] == '\t' ? '\t' : ' ', d->out);
    fputs("^\n", d->out);
}

static void print_caret(diag *d, src_loc loc)
{
    const diag_source *s = find_source(d, loc.file);
    if (!s || loc.line <= 0) return;
    const char *p = s->text, *end = s->text + s->len;
    for (int line = 1; line < loc.line && p < end; p++)
        if (*p == '\n') line++;
    if (p >= end && loc.line > 1) return;
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol) eol = end;
    size_t n = (size_t)(eol - p);
    if (n && p[n - 1] == '\r') n--;
    print_window(d, p, n, loc.col);
}

static void vreport(diag *d, src_loc loc, const char *kind, const char *fmt, va_list ap)
{
    if (loc.file && loc.line > 0)
        fprintf(d->out, "%s:%d:%d: %s: ", loc.file, loc.line, loc.col, kind);
    else if (loc.file)
        fprintf(d->out, "%s: %s: ", loc.file, kind);
    else
        fprintf(d->out, "tgc: %s: ", kind);
    vfprintf(d->out, fmt, ap);
    fputc('\n', d->out);
    print_caret(d, loc);
}

void diag_error(diag *d, src_loc loc, const char *fmt, ...)
{
    d->nerrors++;
    if (d->nerrors > d->max_errors) { d->truncated = true; return; }
    va_list ap;
    va_start(ap, fmt);
    vreport(d, loc, "error", fmt, ap);
    va_end(ap);
}

void diag_note(diag *d, src_loc loc, const char *fmt, ...)
{
    if (d->nerrors > d->max_errors) return;
    va_list ap;
    va_start(ap, fmt);
    vreport(d, loc, "note", fmt, ap);
    va_end(ap);
}

void diag_error_plain(diag *d, const char *fmt, ...)
{
    d->nerrors++;
    if (d->nerrors > d->max_errors) { d->truncated = true; return; }
    va_list ap;
    va_start(ap, fmt);
    vreport(d, (src_loc){0}, "error", fmt, ap);
    va_end(ap);
}

void diag_finish(diag *d)
{
    if (d->truncated)
        fprintf(d->out, "tgc: too many errors (%d), stopped reporting after %d\n",
                d->nerrors, d->max_errors);
}
