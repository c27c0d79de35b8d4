/* The command line's use of the library's option table (include/tgc.h:
 * tgc_option_count, tgc_option_info_get): scanning a command's argv into
 * a tgc_options, and the help text. */
#ifndef TGC_CLI_CONFIG_H
#define TGC_CLI_CONFIG_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cli/overrides.h"

/* The table's help lines, and `tgc run --help`'s list of the options by
 * what they do over a plan. */
void cli_options_usage(FILE *out);
void cli_options_plan_usage(FILE *out);

/* A command that takes some of the table's options (those whose use is in
 * the mask uses, 1 << TGC_OPTION_..., and those named in only, long names,
 * NULL-terminated; neither: all) and options of its own (extra, ids
 * from TGC_CMDLINE_ID_MIN up to 899), which on_extra applies (0, or 2
 * after a usage error); --set, the model flags and --help always. */
enum { TGC_CMDLINE_ID_MIN = 100, TGC_CMDLINE_EXTRA_MAX = 32 };
typedef struct tgc_cmdline {
    const char *const *only;
    const cli_opt *extra;
    int nextra;
    int (*on_extra)(void *user, int id, const char *given, const char *value);
    void *user;
    unsigned uses;
} tgc_cmdline;
/* Parses argv (argv[0] is the command name) into the library's options o
 * (tgc_set_diagnostics to stderr prints their messages); the remaining
 * positional arguments are stored in pos[0..*npos). --set and the model
 * flags are set on o and also collected into sets, for the command's own
 * checks. Returns 0, or 2 after printing a usage error naming the
 * offending option or value. */
typedef struct tgc_options tgc_options;
int cli_options_parse_cmd(tgc_options *o, int argc, char **argv, const tgc_cmdline *cl, const char **pos, int *npos,
                          int maxpos, cli_override *sets, int *nsets, int maxsets, bool *help);
#endif
