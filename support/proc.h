/* Child processes without a shell: an argument vector, started with
 * posix_spawnp, its output captured to a file, waited for. tgc starts no
 * shell: the C library's system and popen appear nowhere in its sources
 * (tests/lit/cli/no_shell.test checks). */
#ifndef TGC_PROC_H
#define TGC_PROC_H
#include <stdbool.h>
#include <stddef.h>

/* A NULL-terminated, growable argument vector of malloc'd words. */
typedef struct proc_argv {
    char **v;
    int n, cap;
} proc_argv;

void proc_argv_init(proc_argv *a);
void proc_argv_free(proc_argv *a);
void proc_argv_add(proc_argv *a, const char *word);
/* Appends the words of s, split as a POSIX shell splits words but without
 * running one: blanks separate words, '...' is literal, "..." keeps \" \\
 * \$ \` escapes, a backslash outside quotes escapes the next character.
 * Nothing is expanded ($, *, ~ and ; are ordinary characters). false on an
 * unterminated quote or a trailing backslash, with the reason in why. */
bool proc_argv_split(proc_argv *a, const char *s, char *why, size_t cap);

/* Runs a->v[0] (looked up in PATH when it has no slash) with a->v as its
 * arguments, standard input /dev/null, standard output and error appended
 * to out_path (created, truncated; a symlink there is refused: callers
 * name a file in a directory of their own, file_private_dir). Returns its exit status (0..255), or
 * -1 with the reason in why when it could not start or a signal ended it. */
int proc_run(const proc_argv *a, const char *out_path, char *why, size_t cap);

#endif
