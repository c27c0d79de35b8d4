/* `tgc data prep|info|dump`: Megatron-LM indexed datasets from the command
 * line (docs/data.md): the arguments, then tgc_data_prep, tgc_data_info or
 * tgc_data_dump (include/tgc.h). */
#include "cli/data_cmd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/util.h"
#include "tgc.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };

static int exit_status(tgc_status st) { return st == TGC_OK ? EXIT_OK : st == TGC_EUSAGE ? EXIT_USAGE : EXIT_INPUT; }

static int data_usage_error(const char *sub, const char *fmt, const char *arg)
{
    fprintf(stderr, "tgc data%s%s: error: ", *sub ? " " : "", sub);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'tgc data --help'.\n");
    return EXIT_USAGE;
}

/* ---- prep ------------------------------------------------------------------ */

static int data_prep(int argc, char **argv)
{
    static const cli_opt lo[] = {
        {"output", true, false, 'o'}, {"o", true, false, 'o'}, {"tokenizer-type", true, false, 't'},
        {"tokenizer", true, false, 't'}, {"vocab-file", true, false, 'v'}, {"merge-file", true, false, 'm'},
        {"tokenizer-model", true, false, 'M'}, {"append-eod", false, false, 'e'},
        {"split-paragraphs", false, false, 'p'}};
    tgc_data_prep_args o = TGC_DATA_PREP_ARGS_INIT;
    const char **inputs = cli_xmalloc((size_t)argc * sizeof *inputs);
    int ninputs = 0, ch, rc = EXIT_OK;
    cli_args a;
    cli_args_init(&a, "data prep", argc, argv, lo, (int)N_OF(lo));
    while (rc == EXIT_OK && (ch = cli_args_next(&a)) != CLI_ARGS_END) {
        const char *arg = a.value;
        switch (ch) {
        case CLI_ARGS_ERROR: rc = EXIT_USAGE; break;
        case CLI_ARGS_POSITIONAL: inputs[ninputs++] = a.value; break;
        case 'o': o.output = arg; break;
        case 't':
            if (!tgc_tokenizer_type_parse(arg)) {
                fprintf(stderr, "tgc data prep: error: %s '%s': expected %s\nTry 'tgc data --help'.\n", a.given, arg,
                        tgc_tokenizer_types());
                rc = EXIT_USAGE;
            }
            o.tokenizer_type = arg;
            break;
        case 'v': o.vocab_file = arg; break;
        case 'm': o.merge_file = arg; break;
        case 'M': o.tokenizer_model = arg; break;
        case 'e': o.append_eod = true; break;
        case 'p': o.split_paragraphs = true; break;
        }
    }
    inputs[ninputs] = NULL; /* argv[0], the subcommand, is no input: there is room */
    o.inputs = inputs;
    /* missing TEXT or -o, the tokenizer's files: the library's usage errors */
    if (rc == EXIT_OK) rc = exit_status(tgc_data_prep(&o, stdout));
    free(inputs);
    return rc;
}

/* ---- info and dump ---------------------------------------------------------- */

typedef struct view_opts {
    const char *path;
    int64_t vocab, start, count;
    bool documents;
} view_opts;

static int view_parse(const char *sub, int argc, char **argv, view_opts *o)
{
    static const cli_opt info_opts[] = {{"vocab", true, false, 'v'}, {"documents", false, false, 'D'}};
    static const cli_opt dump_opts[] = {
        {"vocab", true, false, 'v'}, {"start", true, false, 's'}, {"count", true, false, 'n'}};
    bool dump = strcmp(sub, "dump") == 0;
    int ch;
    *o = (view_opts){.count = -1};
    cli_args a;
    cli_args_init(&a, dump ? "data dump" : "data info", argc, argv, dump ? dump_opts : info_opts,
                  dump ? (int)N_OF(dump_opts) : (int)N_OF(info_opts));
    while ((ch = cli_args_next(&a)) != CLI_ARGS_END) {
        int64_t *num = ch == 'v' ? &o->vocab : ch == 's' ? &o->start : ch == 'n' ? &o->count : NULL;
        if (ch == CLI_ARGS_ERROR) return EXIT_USAGE;
        if (ch == CLI_ARGS_POSITIONAL) {
            if (o->path) return data_usage_error(sub, "unexpected argument '%s'", a.value);
            o->path = a.value;
        } else if (num) {
            if (!tgc_parse_i64(a.value, num) || *num < 0)
                return cli_usage_error(dump ? "data dump" : "data info", "%s '%s': expected an integer >= 0", a.given,
                                       a.value);
        } else if (ch == 'D') o->documents = true;
    }
    if (!o->path)
        return data_usage_error(sub, "missing PATH (a dataset prefix, a .idx/.bin, an llm.c or %s)", "text file");
    return EXIT_OK;
}

static int data_info(int argc, char **argv)
{
    view_opts o;
    int rc = view_parse("info", argc, argv, &o);
    if (rc) return rc;
    tgc_data_view_args x = TGC_DATA_VIEW_ARGS_INIT;
    x.path = o.path, x.vocab = o.vocab, x.documents = o.documents;
    return exit_status(tgc_data_info(&x, stdout));
}

/* Tokens start .. start+count-1, space-separated, a line per document. */
static int data_dump(int argc, char **argv)
{
    view_opts o;
    int rc = view_parse("dump", argc, argv, &o);
    if (rc) return rc;
    tgc_data_view_args x = TGC_DATA_VIEW_ARGS_INIT;
    x.path = o.path, x.vocab = o.vocab, x.start = o.start, x.count = o.count;
    return exit_status(tgc_data_dump(&x, stdout));
}

int cli_data(int argc, char **argv, void (*help_fn)(FILE *))
{
    if (argc < 2) return data_usage_error("", "missing a subcommand: prep, info or dump%s", "");
    const char *sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0) {
        help_fn(stdout);
        return EXIT_OK;
    }
    for (int i = 2; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { help_fn(stdout); return EXIT_OK; }
    if (strcmp(sub, "prep") == 0) return data_prep(argc - 1, argv + 1);
    if (strcmp(sub, "info") == 0) return data_info(argc - 1, argv + 1);
    if (strcmp(sub, "dump") == 0) return data_dump(argc - 1, argv + 1);
    return data_usage_error("", "unknown subcommand '%s': expected prep, info or dump", sub);
}
