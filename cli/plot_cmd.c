/* `tgc plot LOG.jsonl -o PLOT.svg` (docs/tools.md): the arguments, then
 * tgc_plot (include/tgc.h). */
#include "cli/plot_cmd.h"

#include <string.h>

#include "cli/args.h"
#include "tgc.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };

int cli_plot(int argc, char **argv, void (*help_fn)(FILE *))
{
    static const cli_opt lo[] = {{"output", true, false, 'o'}, {"o", true, false, 'o'},
                                 {"title", true, false, 't'}, {"help", false, true, 'h'}, {"h", false, true, 'h'}};
    const char *log = NULL, *out = NULL, *title = NULL;
    cli_args a;
    cli_args_init(&a, "plot", argc, argv, lo, (int)(sizeof lo / sizeof lo[0]));
    for (int ch; (ch = cli_args_next(&a)) != CLI_ARGS_END;) {
        if (ch == CLI_ARGS_ERROR) return EXIT_USAGE;
        if (ch == CLI_ARGS_POSITIONAL) {
            if (log) return cli_usage_error("plot", "unexpected argument '%s'", a.value);
            log = a.value;
        } else if (ch == 'o') out = a.value;
        else if (ch == 't') title = a.value;
        else if (ch == 'h') { help_fn(stdout); return EXIT_OK; }
    }
    if (!log || !out) {
        fprintf(stderr, "tgc plot: error: missing %s\nTry 'tgc plot --help'.\n", !log ? "LOG.jsonl" : "-o PLOT.svg");
        return EXIT_USAGE;
    }
    tgc_plot_info pi;
    if (tgc_plot(log, out, title, &pi) != TGC_OK) return EXIT_INPUT; /* its messages: on standard error as made */
    if (strcmp(out, "-") != 0)
        printf("%s: %d steps (training loss %d points, validation loss %d, learning rate %d)\n", out, pi.steps,
               pi.loss_points, pi.val_points, pi.lr_points);
    return EXIT_OK;
}
