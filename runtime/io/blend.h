/* Blended datasets, as Megatron-LM builds them (docs/data.md, "Blended
 * datasets"): `--data-path 0.3 A 0.7 B` draws the samples of a split from
 * several datasets (any kind runtime/io/data.h reads) in proportion to
 * the normalised weights; `--data-path A B C` (paths alone) in proportion
 * to the sizes of their parts of the split, one pass over them
 * (min(T, sum of the parts' samples) positions); and --valid-data-path
 * gives a validation split of its own (Megatron's per-split blend).
 *
 * The order is Megatron's BlendedDataset index (helpers.cpp,
 * build_blending_indices): position i of a split's blend takes dataset
 *     d(i) = argmax_k ( w_k * max(i, 1) - c_k(i) )      (first k on a tie)
 * where c_k(i) counts the positions before i given to dataset k, and its
 * sample c_k(i) of that dataset's part of the split. At every prefix i,
 *     w_k - 1  <=  w_k i - c_k(i)  <=  n - 2 + w_k      (n datasets)
 * (a dataset is picked only while its deficit is the largest, so at least
 * 0; the deficits sum to 0), and the order depends on the weights only:
 * the first positions are the same whatever the size.
 *
 * A split of T samples takes ceil(T * w_k) samples from dataset k and is
 * sum_k ceil(T * w_k) long (blended_megatron_dataset_builder.py,
 * _get_size_per_split_per_dataset, surplus 0); Megatron builds each
 * dataset's part with ceil(ceil(T * w_k) * 1.005) samples, its margin
 * (mid_level_dataset_surplus 0.005) against the greedy asking for more
 * than its target. In tgc a dataset's part is an endless stream of its
 * samples (position j is sample j mod count, or the --shuffle order), so
 * sample c of dataset k is what that stream holds at position c. */
#ifndef TGC_RUNTIME_BLEND_H
#define TGC_RUNTIME_BLEND_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/io/data.h"
#include "support/diag.h"

/* Megatron's limit: dataset indices are int16. */
#define TGC_BLEND_MAX_DATASETS 32767
/* Megatron's mid_level_dataset_surplus default. */
#define TGC_BLEND_SURPLUS 0.005

/* What --data-path says (Megatron's get_blend_from_list): PATH ..., or
 * pairs WEIGHT PATH. Paths alone (several) are weighted by their sizes:
 * each split's blend takes every sample of each dataset's part once. */
typedef struct tgc_blend_spec {
    int n;
    bool weighted;      /* WEIGHT PATH pairs */
    const char **paths; /* n paths, pointing into the words parsed */
    double *weights;    /* normalised (sum 1); {1} for one path; 0 when paths alone are weighted by size */
    double *given;      /* the weights as written (likewise) */
} tgc_blend_spec;

/* words[0..nwords), as Megatron reads them: an odd count is paths alone;
 * an even count is WEIGHT PATH pairs when every weight's place holds a
 * number as Python's float() reads one, paths alone when none does (a
 * mix is refused). Each weight must be finite and > 0; they are
 * normalised to sum 1 (numpy's sum). false after reporting
 * `--data-path: ...` naming the argument at fault. */
bool tgc_blend_spec_parse(int nwords, const char *const *words, tgc_blend_spec *spec, diag *d);
void tgc_blend_spec_free(tgc_blend_spec *spec);

/* The weights of a blend of paths alone: w_k = count_k / sum count, the
 * sum numpy's (BlendedDataset's normalize of the datasets' lengths). */
void tgc_blend_size_weights(const int64_t *count, int n, double *w);

/* Megatron's build_blending_indices for normalised weights w[0..n):
 * dataset[i] (the dataset of position i) and sample[i] (its sample) for
 * i < size. O(size * n). */
void tgc_blend_indices(const double *w, int n, int64_t size, int16_t *dataset, int64_t *sample);
/* A split of `size` samples: dataset k's target ceil(size * w), and the
 * samples Megatron builds for it, ceil(ceil(size * w) * (1 + surplus)). */
int64_t tgc_blend_target(double w, int64_t size);
int64_t tgc_blend_buffer(double w, int64_t size, double surplus);

typedef enum { TGC_BLEND_TRAIN, TGC_BLEND_VALID, TGC_BLEND_NSPLITS } tgc_blend_split;

typedef struct tgc_blend_opts {
    int64_t s;                       /* sequence length */
    int64_t vocab;                   /* tokens must be below it (<= 0: tgc_data_open's rule) */
    int64_t train_samples;           /* the run's iterations x global batch */
    int64_t valid_samples;           /* eval iterations x global batch (0: no validation split) */
    double split_train, split_valid; /* --split weights (0, 0: all samples train) */
    bool shuffle;                    /* each dataset's training part in its --shuffle order */
    /* A validation split alone (--valid-data-path, Megatron's per-split
     * blend): each dataset whole, valid_samples drawn; train_samples and
     * the --split weights unused (0). */
    bool validation_only;
    uint64_t seed;
    const struct tgc_tokenizer *tokenizer; /* text datasets through it (NULL: bytes) */
} tgc_blend_opts;

typedef struct tgc_blend tgc_blend;

/* Opens every dataset of spec (each checked as tgc_data_open does, and for
 * one sample of length s), divides each into its --split parts (the rule
 * of one dataset: training samples [0, floor(n w_train)), validation
 * [floor(n w_train), floor(n (w_train + w_valid)))), and builds the index
 * of each split. false after reporting the file or part at fault. The
 * blend's orders belong to one thread. */
tgc_blend *tgc_blend_open(const tgc_blend_spec *spec, const tgc_blend_opts *o, diag *d);
void tgc_blend_close(tgc_blend *b);

int tgc_blend_ndatasets(const tgc_blend *b);
const tgc_data *tgc_blend_data(const tgc_blend *b, int k);
/* The length of a split's blend, and its index arrays. */
int64_t tgc_blend_size(const tgc_blend *b, tgc_blend_split sp);
const int16_t *tgc_blend_dataset_index(const tgc_blend *b, tgc_blend_split sp);
const int64_t *tgc_blend_sample_index(const tgc_blend *b, tgc_blend_split sp);
/* Dataset k's part of a split: its first sample and sample count. */
void tgc_blend_part(const tgc_blend *b, tgc_blend_split sp, int k, int64_t *first, int64_t *count);

/* Rows b0 .. b0+nb-1 of the split's global batch `step` of B rows in the
 * [s, nb] layout: row r is blend position step*B + b0 + r (which must lie
 * below the split's size). No allocation. */
void tgc_blend_batch_rows(tgc_blend *b, tgc_blend_split sp, int64_t step, int64_t B, int64_t b0, int64_t nb,
                          int32_t *tokens, int32_t *labels);

/* One line per split: its size and, per dataset, weight, target, the
 * samples Megatron would build, and the part's sample count. */
void tgc_blend_describe(const tgc_blend *b, FILE *out);

#endif
