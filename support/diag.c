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

const char *diag_add_source(diag *d, const char *name, const char *text, size_t len)
{
    diag_source *s = xcalloc(1, sizeof *s);
    s->name = diag_intern(name);
    s->text = xmalloc(len + 1);
    memcpy(s->text, text, len);
    s->text[len] = 0;
    s->len = len;
    s->next = d->sources;
    d->sources = s;
    return s->name;
}

static const diag_source *find_source(const diag *d, const char *name)
{
    for (const diag_source *s = d->sources; s; s = s->next)
        if (s->name == name || (name && strcmp(s->name, name) == 0)) return s;
    return NULL;
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
    fprintf(d->out, "%.*s\n", (int)n, p);
    /* Keep tabs so the caret lines up with the quoted line. */
    for (int i = 1; i < loc.col && (size_t)(i - 1) < n; i++)
        fputc(p[i - 1] == '\t' ? '\t' : ' ', d->out);
    fputs("^\n", d->out);
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
