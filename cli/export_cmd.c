/* `tgc export CKPT -o FILE.safetensors` (docs/checkpoints.md). */
#include "cli/export_cmd.h"

#include <string.h>

#include "cli/args.h"

#include "runtime/io/checkpoint.h"
#include "runtime/io/run_files.h"
#include "support/diag.h"
#include "support/util.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };


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
    diag d;
    diag_init(&d, stderr);
    /* -o is not the checkpoint nor inside it, and is writable, before anything is read. */
    rt_run_file in[] = {{"CKPT", ckpt}}, outs[] = {{"-o", out}};
    bool ok = rt_files_check(in, 1, outs, (const bool[]){false}, 1, NULL, 0, &d) && rt_ckpt_export(ckpt, out, &d);
    diag_finish(&d);
    diag_free(&d);
    return ok ? EXIT_OK : EXIT_INPUT;
}
