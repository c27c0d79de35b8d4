/* Generates text from trained weights through tgc's C API (include/tgc.h,
 * docs/api.md): what `tgc sample MODEL --weights WEIGHTS --prompt PROMPT
 * --tokens N` does, with the KV cache.
 *
 *   generate MODEL WEIGHTS PROMPT N [NAME=VALUE ...]
 *
 * NAME=VALUE: "temperature=0.8", "top-k=40", "seed=7" (the sampler's; the
 * defaults are tgc sample's: 1, 0 and 1), or an option of the command line
 * ("set=layers=2", "backend=sim", "tokenizer-type=gpt2", ...). Prints the
 * token ids on one line, then the text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tgc.h>

static int fail(const char *what)
{
    fprintf(stderr, "generate: %s failed:\n%s\n", what, tgc_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: generate MODEL WEIGHTS PROMPT N [NAME=VALUE ...]\n");
        return 2;
    }
    double temperature = 1.0;
    long long top_k = 0, seed = 1, n = atoll(argv[4]);
    tgc_options *opts;
    if (tgc_options_new(&opts) != TGC_OK) return fail("tgc_options_new");
    int rc = 0;
    for (int i = 5; i < argc && !rc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) {
            fprintf(stderr, "generate: '%s': expected NAME=VALUE\n", argv[i]);
            rc = 2;
            break;
        }
        *eq = 0;
        if (strcmp(argv[i], "temperature") == 0) temperature = atof(eq + 1);
        else if (strcmp(argv[i], "top-k") == 0) top_k = atoll(eq + 1);
        else if (strcmp(argv[i], "seed") == 0) seed = atoll(eq + 1);
        else if (tgc_options_set(opts, argv[i], eq + 1) != TGC_OK) rc = fail("tgc_options_set");
    }
    tgc_generator *gen = NULL;
    tgc_generation out = {0};
    if (!rc && tgc_generator_new(argv[1], argv[2], opts, 0, &gen) != TGC_OK) rc = fail("tgc_generator_new");
    if (!rc && tgc_generate(gen, argv[3], NULL, 0, n, temperature, top_k, (uint64_t)seed, &out) != TGC_OK)
        rc = fail("tgc_generate");
    for (int64_t i = 0; !rc && i < out.ntokens; i++) printf("%s%d", i ? "," : "", out.tokens[i]);
    if (!rc) putchar('\n');
    if (!rc && out.text) fwrite(out.text, 1, out.text_len, stdout); /* the text may hold any byte */
    if (!rc) puts(out.text ? "" : "(no text: the model has no tokenizer)");
    tgc_generation_free(&out);
    tgc_generator_free(gen);
    tgc_options_free(opts);
    return rc;
}
