/* The command line's own small helpers: memory that never comes back
 * NULL, the length of an array, a list of numbers, and closing standard
 * output. Everything else the commands use is include/tgc.h's. */
#ifndef TGC_CLI_UTIL_H
#define TGC_CLI_UTIL_H
#include <stdbool.h>
#include <stddef.h>

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* malloc, realloc and strdup that end the process ("tgc: error: out of
 * memory") instead of returning NULL. */
void *cli_xmalloc(size_t n);
void *cli_xrealloc(void *p, size_t n);
char *cli_xstrdup(const char *s);
/* s as comma-separated numbers (tgc_parse_double) into out[0 .. max): their
 * count, or -1 for anything else (more than max of them included). */
int cli_parse_double_list(const char *s, double *out, int max);
/* Flushes and closes standard output: false (why written) when output
 * was lost (a full disk); a closed descriptor 1 that got nothing is none. */
bool cli_close_stdout(char *why, size_t cap);

#endif
