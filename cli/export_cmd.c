#define _DEFAULT_SOURCE /* realpath */
/* `tgc export CKPT -o FILE.safetensors` (docs/checkpoints.md). */
#include "cli/export_cmd.h"

#include <stdlib.h>
#include <string.h>

#include "cli/args.h"

#include "runtime/checkpoint.h"
#include "support/diag.h"
#include "support/util.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };

/* Whether the file out would be written inside the checkpoint directory
 * ckpt (over one of its files, or beside them): a resolved prefix test of
 * out's directory, which exists for the write to succeed anyway. */
static bool inside_checkpoint(const char *ckpt, const char *out)
{
    char *dir = xstrdup(out), *slash = strrchr(dir, '/');
    const char *where = ".";
    if (slash == dir) where = "/";
    else if (slash) {
        *slash = '\0';
        where = dir;
    }
    char *rd = realpath(where, NULL), *rc = realpath(ckpt, NULL);
    size_t n = rc ? strlen(rc) : 0;
    bool in = rd && rc && strncmp(rd, rc, n) == 0 && (rd[n] == '\0' || rd[n] == '/');
    free(rd);
    free(rc);
    free(dir);
    return in;
}

int cli_export(int argc, char **argv, void (*help_fn)(FILE *))
{
    static const cli_opt lo[] = {
        {"output", true, false, 'o'}, {"o", true, false, 'o'}, {"help", false, true, 'h'}, {"h", false, true, 'h'}};
    const char *ckpt = NULL, *out = NULL;
    cli_args a;
    cli_args_init(&a, "export", argc, argv, lo, (int)ARRAY_LEN(lo));
    for (int ch; (ch = cli_args_next(&a)) != CLI_ARGS_END;) {
        if (ch == CLI_ARGS_ERROR) return EXIT_USAGE;
        if (ch == CLI_ARGS_POSITIONAL) {
            if (ckpt) return cli_usage_error("export", "unexpected argument '%s'", a.value);
            ckpt = a.value;
        } else if (ch == 'o') out = a.value;
        else if (ch == 'h') { help_fn(stdout); return EXIT_OK; }
    }
    if (!ckpt || !out) {
        fprintf(stderr, "tgc export: error: missing %s\nTry 'tgc export --help'.\n",
                !ckpt ? "CKPT (a --save directory or its iter_N)" : "-o FILE.safetensors");
        return EXIT_USAGE;
    }
    if (inside_checkpoint(ckpt, out)) {
        fprintf(stderr, "tgc export: error: -o %s is inside the checkpoint '%s' it reads; write it elsewhere\n", out,
                ckpt);
        return EXIT_USAGE;
    }
    diag d;
    diag_init(&d, stderr);
    bool ok = rt_ckpt_export(ckpt, out, &d);
    diag_finish(&d);
    diag_free(&d);
    return ok ? EXIT_OK : EXIT_INPUT;
}
