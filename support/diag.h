/* User-facing diagnostics: `file:line:col: error: message`, the source line
 * and a caret. Errors are collected (up to a limit) rather than aborting, so
 * one run reports everything wrong with a file. */
#ifndef TGC_DIAG_H
#define TGC_DIAG_H
#include <stdbool.h>
#include <stdio.h>

/* A position in a user's file. `file` outlives whatever holds the loc (an
 * interned name, see diag_intern, or a string in the graph's arena); line
 * and col start at 1; line 0 = unknown. */
typedef struct src_loc {
    const char *file;
    int line, col;
} src_loc;

typedef struct diag_source diag_source;

typedef struct diag {
    FILE *out;
    int nerrors;
    int max_errors;     /* stop printing after this many (default 20) */
    bool truncated;     /* more errors happened than were printed */
    diag_source *sources;
} diag;

void diag_init(diag *d, FILE *out);
void diag_free(diag *d);
/* Registers a file's text so diagnostics can quote its lines; returns the
 * interned name to use in src_loc.file. The text is copied. */
const char *diag_add_source(diag *d, const char *name, const char *text, size_t len);
/* diag_add_source without the copy: text (malloc'd, len bytes and a NUL)
 * becomes the diag's, freed by diag_free; a file read only to be parsed is
 * then held once, not twice. */
const char *diag_adopt_source(diag *d, const char *name, char *text, size_t len);
/* Registers every source of src in dst too (a later diag that reports on
 * what src's files made: the library's calls after a compile). */
void diag_copy_sources(diag *dst, const diag *src);
/* Interns a file name for the lifetime of the process (loc strings). */
const char *diag_intern(const char *name);

void diag_error(diag *d, src_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_note(diag *d, src_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* An error without a source position: "tgc: error: ..." */
void diag_error_plain(diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "N errors generated." style trailer when more than the limit. */
void diag_finish(diag *d);

#endif
