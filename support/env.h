/* The one reader of tgc's environment variables: a table of every TGC_*
 * variable (name, type, range, default, description; docs/runtime.md's
 * table lists the same), checked as a whole before a library call does
 * work (env_check), and read by name through it. No code reads a TGC_
 * variable with getenv but this file (tests/scripts/env_table.sh). */
#ifndef TGC_SUPPORT_ENV_H
#define TGC_SUPPORT_ENV_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { ENV_INT, ENV_FLAG, ENV_TEXT } env_kind;

typedef struct env_def {
    const char *name;
    env_kind kind;
    int64_t min, max, def; /* ENV_INT (ENV_FLAG: 0 or 1, def) */
    const char *help;
} env_def;

/* Every variable set in the environment that its row refuses (an integer
 * out of range or not one, a flag other than 0 or 1): false with a message
 * naming the variable and its value in why. */
bool env_check(char *why, size_t cap);
/* The value of an ENV_INT or ENV_FLAG variable (its default when unset or
 * refused: the library's calls refuse first, through env_check). */
int64_t env_int(const char *name);
bool env_flag(const char *name);
/* An ENV_TEXT variable, whose reader checks it (NULL: unset). */
const char *env_text(const char *name);
/* The table, for the documentation test. */
const env_def *env_table(int *n);

#endif
