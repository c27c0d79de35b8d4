/* Prints tgc's blend index (runtime/io/blend.h) for tests/data/blend.py:
 *   blend_index SIZE W1 W2 ...
 *       the weights as --data-path normalises them (one line, %.17g
 *       each), then one line "DATASET SAMPLE" per position of a blend of
 *       SIZE samples;
 *   blend_index --sizes SIZE C1 C2 ...
 *       the same for a blend of paths alone whose parts hold C1, C2, ...
 *       samples (weighted by their sizes);
 *   blend_index --parse WORD ...
 *       how --data-path reads the words: "weighted N" or "paths N", then
 *       one line "WEIGHT PATH" per dataset (the weight as given, %.17g);
 *       exit 1 after the message when they are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/blend.h"
#include "support/util.h"

static int parse_mode(int n, char **words)
{
    diag d;
    diag_init(&d, stderr);
    tgc_blend_spec spec;
    if (!tgc_blend_spec_parse(n, (const char *const *)words, &spec, &d)) {
        diag_free(&d);
        return 1;
    }
    printf("%s %d\n", spec.weighted ? "weighted" : "paths", spec.n);
    for (int k = 0; k < spec.n; k++) printf("%.17g %s\n", spec.given[k], spec.paths[k]);
    tgc_blend_spec_free(&spec);
    diag_free(&d);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--parse") == 0) return parse_mode(argc - 2, argv + 2);
    bool sizes = argc >= 2 && strcmp(argv[1], "--sizes") == 0;
    int a = sizes ? 2 : 1; /* SIZE's argument */
    int64_t size;
    if (argc < a + 2 || !parse_i64(argv[a], &size) || size < 0) {
        fprintf(stderr, "usage: blend_index [--sizes] SIZE W1 W2 ... | --parse WORD ...\n");
        return 2;
    }
    int n = argc - a - 1;
    double *w = xcalloc((size_t)n, sizeof *w);
    if (sizes) {
        int64_t *count = xcalloc((size_t)n, sizeof *count);
        for (int k = 0; k < n; k++)
            if (!parse_i64(argv[a + 1 + k], &count[k]) || count[k] < 1) {
                fprintf(stderr, "blend_index: '%s' is not a sample count\n", argv[a + 1 + k]);
                return 2;
            }
        tgc_blend_size_weights(count, n, w);
        free(count);
    } else {
        const char **words = xcalloc((size_t)(2 * n), sizeof *words);
        for (int k = 0; k < n; k++) {
            words[2 * k] = argv[a + 1 + k];
            words[2 * k + 1] = "dataset";
        }
        diag d;
        diag_init(&d, stderr);
        tgc_blend_spec spec;
        if (!tgc_blend_spec_parse(2 * n, words, &spec, &d)) return 1;
        memcpy(w, spec.weights, (size_t)n * sizeof *w);
        tgc_blend_spec_free(&spec);
        free(words);
        diag_free(&d);
    }
    for (int k = 0; k < n; k++) printf("%s%.17g", k ? " " : "", w[k]);
    putchar('\n');
    int16_t *dataset = xmalloc((size_t)size * sizeof *dataset + 1);
    int64_t *sample = xmalloc((size_t)size * sizeof *sample + 1);
    tgc_blend_indices(w, n, size, dataset, sample);
    for (int64_t i = 0; i < size; i++) printf("%d %lld\n", dataset[i], (long long)sample[i]);
    free(dataset);
    free(sample);
    free(w);
    return 0;
}
