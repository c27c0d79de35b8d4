/* Training data: a token file mapped into memory and cut into batches
 * (docs/data.md is the user-facing description of exactly this).
 *
 * Two formats, told apart by content:
 *   - an llm.c token file: a header of 256 little-endian int32 (header[0] =
 *     20240520, header[1] = 1, header[2] = number of tokens), then that many
 *     little-endian uint16 tokens;
 *   - anything else is plain text, one token per byte (vocabulary 256).
 * A file named *.bin must be an llm.c token file.
 *
 * Samples: with sequence length s, sample i is tokens[i*s .. i*s+s] (s+1
 * tokens: the inputs and, shifted by one, the labels); there are
 * floor((ntokens - 1) / s) samples. Step k takes the samples at stream
 * positions k*B .. k*B+B-1, and position j is sample j mod nsamples (epoch
 * j / nsamples), or, with a shuffle, perm_epoch[j mod nsamples]. */
#ifndef TGC_RUNTIME_DATA_H
#define TGC_RUNTIME_DATA_H
#include <stdbool.h>
#include <stdint.h>

#include "support/diag.h"

#define TGC_LLMC_MAGIC 20240520
#define TGC_LLMC_VERSION 1
#define TGC_LLMC_HEADER_BYTES 1024

typedef enum tgc_data_format {
    TGC_DATA_TEXT,  /* bytes, vocabulary 256 */
    TGC_DATA_LLMC,  /* llm.c uint16 tokens */
} tgc_data_format;

typedef struct tgc_data tgc_data;

/* Maps `path` and validates it: every token must be < vocab (vocab <= 0
 * skips that check), and there must be at least 2 tokens (one sample of
 * length 1). On error, reports `PATH: error: ...` to d and returns NULL. */
tgc_data *tgc_data_open(const char *path, int64_t vocab, diag *d);
void tgc_data_close(tgc_data *data);

tgc_data_format tgc_data_format_of(const tgc_data *data);
int64_t tgc_data_ntokens(const tgc_data *data);
int32_t tgc_data_token(const tgc_data *data, int64_t i);
/* floor((ntokens - 1) / s): the number of samples of length s. */
int64_t tgc_data_nsamples(const tgc_data *data, int64_t s);
/* Reports an error unless the file holds at least one sample of length s. */
bool tgc_data_check_seq(const tgc_data *data, int64_t s, diag *d);

/* The sample order of a shuffled run: per epoch e, a Fisher-Yates
 * permutation of the samples drawn with Philox (docs/data.md has the exact
 * formula), a function of (seed, e, nsamples) only. It caches the
 * permutations of two epochs and so belongs to one thread; each rank of a
 * run holds its own and sees the same order. */
typedef struct tgc_data_order tgc_data_order;
tgc_data_order *tgc_data_order_new(int64_t nsamples, uint64_t seed);
void tgc_data_order_free(tgc_data_order *order);
/* The sample at stream position j (j >= 0). Computes a permutation (O(n), no
 * allocation) the first time an epoch other than the two cached is seen. */
int64_t tgc_data_order_sample(tgc_data_order *order, int64_t j);

/* The batch of step `step` (s and B at least 1, data holding a sample of
 * length s), in the [s, B] layout: tokens[t*B + b] is input t of batch row
 * b, labels[t*B + b] its next token. No allocation. */
void tgc_data_batch(const tgc_data *data, int64_t step, int64_t s, int64_t B, int32_t *tokens,
                    int32_t *labels);
/* Rows b0 .. b0+nb-1 of that batch (a data-parallel rank's or a micro-
 * batch's share) in the [s, nb] layout, in the order of `order` (NULL =
 * sequential; else made with tgc_data_nsamples(data, s)). */
void tgc_data_batch_rows(const tgc_data *data, tgc_data_order *order, int64_t step, int64_t s, int64_t B,
                         int64_t b0, int64_t nb, int32_t *tokens, int32_t *labels);

#endif
