/* Small helpers shared by every layer: checked allocation, the programmer-
 * error assert, string buffers, hashing and parsing numbers. */
#ifndef TGC_UTIL_H
#define TGC_UTIL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Programmer errors: a broken invariant inside tgc, never user input. */
#define TGC_ASSERT(cond)                                                        \
    do {                                                                        \
        if (!(cond)) tgc_assert_fail(__FILE__, __LINE__, #cond);                \
    } while (0)
_Noreturn void tgc_assert_fail(const char *file, int line, const char *what);

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t m);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
/* "a/b", malloc'd (aborts on out of memory, as xmalloc). */
char *path_join(const char *a, const char *b);
/* A file name read from the file `from` (a shard in an index's
 * weight_map, a tokenizer file in a weights file's metadata), as a path
 * to the file beside `from`: NULL where the name is not a bare file name
 * (empty, "." or "..", or holding a '/': absolute or another folder), so
 * what a file says never leads outside its own folder. */
char *path_beside(const char *from, const char *name);
bool path_is_bare_name(const char *name);

/* Growable, always NUL-terminated string. */
typedef struct strbuf {
    char *s;
    size_t len, cap;
} strbuf;

void sb_init(strbuf *b);
void sb_free(strbuf *b);
void sb_putc(strbuf *b, char c);
void sb_puts(strbuf *b, const char *s);
void sb_putn(strbuf *b, const char *s, size_t n);
void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends a double so that strtod gives back exactly the same value, in
 * the shortest such decimal form ("0.1", "1e-05", "3"). */
void sb_put_double(strbuf *b, double v);
/* Appends s as a double-quoted string with C escapes. */
void sb_put_quoted(strbuf *b, const char *s);

uint64_t hash_bytes(const void *p, size_t n, uint64_t h);
uint64_t hash_u64(uint64_t x, uint64_t h);
#define HASH_SEED 0xcbf29ce484222325ull

/* Reading files: support/file.h (file_read). */

/* The one reader of numbers a user gives (options, lists such as --split,
 * --set values, TGC_* variables): the whole string, an optional '-' then
 * decimal digits (and for parse_double an optional fraction and exponent,
 * e.g. 6e-4); no blanks, '+', hex, inf, nan or trailing text, and nothing
 * out of range (false for all of them). parse_double's values are finite. */
bool parse_i64(const char *s, int64_t *out);
bool parse_double(const char *s, double *out);
/* s as comma-separated parse_double numbers into out[0..max): their count,
 * or -1 when one is not a number or there are more than max. */
int parse_double_list(const char *s, double *out, int max);

#endif
