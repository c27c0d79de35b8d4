/* `tgc inspect PLAN`: what a compiled plan holds, summarised (docs/tools.md):
 * the arguments, then tgc_inspect (include/tgc.h). */
#include "cli/inspect_cmd.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/util.h"
#include "tgc.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };

int cli_inspect(int argc, char **argv, void (*help_fn)(FILE *))
{
    static const cli_opt lo[] = {{"cuda-arch", true, false, 'a'}, {"no-kernel-cache", false, false, 'n'},
                                 {"help", false, true, 'h'}, {"h", false, true, 'h'}};
    tgc_inspect_args x = TGC_INSPECT_ARGS_INIT;
    cli_args a;
    cli_args_init(&a, "inspect", argc, argv, lo, (int)N_OF(lo));
    for (int ch; (ch = cli_args_next(&a)) != CLI_ARGS_END;) {
        if (ch == CLI_ARGS_ERROR) return EXIT_USAGE;
        if (ch == 'h') {
            help_fn(stdout);
            return EXIT_OK;
        }
        if (ch == 'a' && !*a.value) return cli_usage_error("inspect", "missing value for '--cuda-arch'");
        if (ch == 'a') x.cuda_arch = a.value;
        if (ch == 'n') x.no_kernel_cache = 1;
        if (ch == CLI_ARGS_POSITIONAL && x.plan) return cli_usage_error("inspect", "unexpected argument '%s'", a.value);
        if (ch == CLI_ARGS_POSITIONAL) x.plan = a.value;
    }
    if (!x.plan) return cli_usage_error("inspect", "missing PLAN");
    return tgc_inspect(&x, stdout) == TGC_OK ? EXIT_OK : EXIT_INPUT;
}
