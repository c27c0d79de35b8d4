/* Prints tgc's blend index (runtime/io/blend.h) for tests/data/blend.py:
 *   blend_index SIZE W1 W2 ...
 * the weights as --data-path normalises them (one line, %.17g each), then
 * one line "DATASET SAMPLE" per position of a blend of SIZE samples. */
#include <stdio.h>
#include <stdlib.h>

#include "runtime/io/blend.h"
#include "support/util.h"

int main(int argc, char **argv)
{
    int64_t size;
    if (argc < 3 || !parse_i64(argv[1], &size) || size < 0) {
        fprintf(stderr, "usage: blend_index SIZE W1 W2 ...\n");
        return 2;
    }
    int n = argc - 2;
    const char **words = xcalloc((size_t)(2 * n), sizeof *words);
    for (int k = 0; k < n; k++) {
        words[2 * k] = argv[k + 2];
        words[2 * k + 1] = "dataset";
    }
    diag d;
    diag_init(&d, stderr);
    tgc_blend_spec spec;
    if (!tgc_blend_spec_parse(2 * n, words, &spec, &d)) return 1;
    for (int k = 0; k < n; k++) printf("%s%.17g", k ? " " : "", spec.weights[k]);
    putchar('\n');
    int16_t *dataset = xmalloc((size_t)size * sizeof *dataset + 1);
    int64_t *sample = xmalloc((size_t)size * sizeof *sample + 1);
    tgc_blend_indices(spec.weights, n, size, dataset, sample);
    for (int64_t i = 0; i < size; i++) printf("%d %lld\n", dataset[i], (long long)sample[i]);
    free(dataset);
    free(sample);
    tgc_blend_spec_free(&spec);
    free(words);
    diag_free(&d);
    return 0;
}
