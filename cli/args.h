/* The one command-line scanner of every tgc command (docs/tools.md):
 *
 *  - a long option is matched by its whole name only (never abbreviated,
 *    as Megatron-LM's parser does): `--num-layers` is not a prefix of
 *    `--num-layers-per-virtual-pipeline-stage`;
 *  - `--name value` or `--name=value`; `-o value` or `-ovalue` for the
 *    one-letter names;
 *  - a value is missing when no argument follows or the next one is an
 *    option (a word starting with '-' that is not a number or '-' alone:
 *    `--name=-x` gives such a value);
 *  - `--` ends the options: every later argument is positional;
 *  - an unknown option (naming the options it abbreviates), a missing
 *    value, a value given to a flag, and an option given twice that is
 *    not repeatable are usage errors naming it: "tgc CMD: error: ..." and
 *    "Try 'tgc CMD --help'." on standard error. */
#ifndef TGC_CLI_ARGS_H
#define TGC_CLI_ARGS_H
#include <stdbool.h>

typedef struct cli_opt {
    const char *name; /* without the dashes; one letter: a short option (-o) */
    bool has_value;
    bool repeatable;
    int id; /* what cli_args_next returns for it, above 0; aliases share it */
} cli_opt;

enum { CLI_ARGS_END = 0, CLI_ARGS_POSITIONAL = -1, CLI_ARGS_ERROR = -2 };

typedef struct cli_args {
    const char *cmd;      /* "check", "data prep": the messages' prefix */
    int argc;
    char **argv;          /* argv[0] is the command's name; scanning starts at argv[1] */
    int next;             /* the next argv index */
    bool only_positional; /* after `--` */
    const cli_opt *opts;
    int nopts;
    const char *value;    /* the option's value, or the positional argument */
    const char *given;    /* the option as written, without any "=value" */
    char given_buf[128];
    int seen[128];        /* ids given, for the twice-given check */
    const char *seen_value[128];
    char seen_given[128][48];
    int nseen;
} cli_args;

void cli_args_init(cli_args *a, const char *cmd, int argc, char **argv, const cli_opt *opts, int nopts);
/* The next option's id (value and given set), CLI_ARGS_POSITIONAL (value
 * set), CLI_ARGS_END, or CLI_ARGS_ERROR after printing the usage error. */
int cli_args_next(cli_args *a);
/* The next argument if it is a value (not an option, and options not
 * ended by `--`): one more word of an option taking several (Megatron's
 * nargs='*'); else NULL, leaving it to cli_args_next. */
const char *cli_args_next_word(cli_args *a);
/* "tgc CMD: error: MESSAGE" and "Try 'tgc CMD --help'." on standard
 * error, CMD's first word in the second line; returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
