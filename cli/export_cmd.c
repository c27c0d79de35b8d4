/* `tgc export CKPT -o FILE.safetensors` (docs/checkpoints.md). */
#include "cli/export_cmd.h"

#include <getopt.h>
#include <string.h>

#include "runtime/checkpoint.h"
#include "support/diag.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };

int cli_export(int argc, char **argv, void (*help_fn)(FILE *))
{
    static const struct option lo[] = {{"output", required_argument, NULL, 'o'},
                                       {"help", no_argument, NULL, 'h'},
                                       {0, 0, 0, 0}};
    const char *ckpt = NULL, *out = NULL;
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "-:o:h", lo, NULL)) != -1) {
        const char *bad = NULL;
        if (ch == 1) {
            if (ckpt) bad = "unexpected argument '%s'";
            ckpt = optarg;
        } else if (ch == 'o') out = optarg;
        else if (ch == 'h') { help_fn(stdout); return EXIT_OK; }
        else bad = ch == ':' ? "missing value for '%s'" : "unknown option '%s'";
        if (bad) {
            fprintf(stderr, "tgc export: error: ");
            fprintf(stderr, bad, ch == 1 ? optarg : argv[optind - 1]);
            fprintf(stderr, "\nTry 'tgc export --help'.\n");
            return EXIT_USAGE;
        }
    }
    if (!ckpt || !out) {
        fprintf(stderr, "tgc export: error: missing %s\nTry 'tgc export --help'.\n",
                !ckpt ? "CKPT (a --save directory or its iter_N)" : "-o FILE.safetensors");
        return EXIT_USAGE;
    }
    diag d;
    diag_init(&d, stderr);
    bool ok = rt_ckpt_export(ckpt, out, &d);
    diag_finish(&d);
    diag_free(&d);
    return ok ? EXIT_OK : EXIT_INPUT;
}
