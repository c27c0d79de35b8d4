/* Training data: a token file mapped into memory and cut into batches
 * (docs/data.md is the user-facing description of exactly this).
 *
 * Three formats:
 *   - a Megatron-LM indexed dataset (MMIDIDX): PREFIX.idx (header, sequence
 *     lengths, byte pointers, document indices) and PREFIX.bin (the tokens
 *     of every sequence back to back); its documents are concatenated into
 *     one token stream, as Megatron's GPTDataset does;
 *   - an llm.c token file: a header of 256 little-endian int32 (header[0] =
 *     20240520, header[1] = 1, header[2] = number of tokens), then that many
 *     little-endian uint16 tokens;
 *   - anything else is plain text, one token per byte (vocabulary 256).
 * The path picks the format: PATH ending .idx, PATH.bin with a sibling
 * PREFIX.idx, or a PATH that is not a regular file (none, or a directory)
 * while PATH.idx or PATH.bin exists is a Megatron dataset; any other *.bin must be an llm.c token file; any
 * other file is llm.c (by its magic) or text.
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

#define TGC_MEGATRON_MAGIC "MMIDIDX\0\0" /* 9 bytes */
#define TGC_MEGATRON_MAGIC_BYTES 9
#define TGC_MEGATRON_VERSION 1
#define TGC_MEGATRON_HEADER_BYTES 34 /* magic, u64 version, u8 dtype, u64 sequences, u64 documents */

typedef enum tgc_data_format {
    TGC_DATA_TEXT,     /* bytes, vocabulary 256 */
    TGC_DATA_LLMC,     /* llm.c uint16 tokens */
    TGC_DATA_MEGATRON, /* Megatron-LM indexed dataset (PREFIX.idx + PREFIX.bin) */
} tgc_data_format;

/* Megatron's dtype codes (indexed_dataset.py, DType). Tokens must be of an
 * integer type; float32/float64 are rejected at open. */
typedef enum tgc_data_dtype {
    TGC_DTYPE_UINT8 = 1,
    TGC_DTYPE_INT8 = 2,
    TGC_DTYPE_INT16 = 3,
    TGC_DTYPE_INT32 = 4,
    TGC_DTYPE_INT64 = 5,
    TGC_DTYPE_FLOAT64 = 6,
    TGC_DTYPE_FLOAT32 = 7,
    TGC_DTYPE_UINT16 = 8,
} tgc_data_dtype;

/* "uint8", ..., or NULL for a code outside 1..8; its size in bytes (0 then). */
const char *tgc_data_dtype_name(int code);
int tgc_data_dtype_size(int code);
/* The token dtype Megatron-LM writes for a vocabulary of `vocab` tokens
 * (indexed_dataset.py, DType.optimal_dtype): uint16 below 65500, else
 * int32. */
tgc_data_dtype tgc_data_optimal_dtype(int64_t vocab);
/* "text", "llm.c", "megatron". */
const char *tgc_data_format_name(tgc_data_format f);

typedef struct tgc_data tgc_data;

/* Maps `path` (a Megatron dataset: both files) and validates it: every
 * token must be < vocab (vocab <= 0 skips that check, except that tokens
 * of a signed or 32/64-bit Megatron dtype must still lie in 0..INT32_MAX),
 * and there must be at least 2 tokens (one sample of length 1). On error,
 * reports `FILE: error: ...` to d, naming the file at fault, and returns
 * NULL. */
tgc_data *tgc_data_open(const char *path, int64_t vocab, diag *d);
/* The same, a text file tokenized with tk (tokenizer/tokenizer.h; NULL or
 * ByteTokenizer: its bytes, as tgc_data_open): the stream is its tokens
 * (dtype int32), the vocabulary check over them. Token files ignore tk. */
typedef struct tgc_tokenizer tgc_tokenizer;
tgc_data *tgc_data_open_tokenized(const char *path, int64_t vocab, const tgc_tokenizer *tk, diag *d);
void tgc_data_close(tgc_data *data);

tgc_data_format tgc_data_format_of(const tgc_data *data);
/* The token type of the file: uint8 for text, uint16 for llm.c. */
tgc_data_dtype tgc_data_dtype_of(const tgc_data *data);
int64_t tgc_data_ntokens(const tgc_data *data);
/* Token i of the stream (O(1), or O(log sequences) for a Megatron dataset
 * whose sequences do not lie back to back in the .bin file). */
int32_t tgc_data_token(const tgc_data *data, int64_t i);
/* Megatron: the number of documents and sequences; 1 and 1 otherwise. */
int64_t tgc_data_ndocuments(const tgc_data *data);
int64_t tgc_data_nsequences(const tgc_data *data);
/* The stream index of the first token of document k (0 <= k <= ndocuments;
 * k = ndocuments gives ntokens). */
int64_t tgc_data_document_start(const tgc_data *data, int64_t k);
/* The files mapped: the token file (Megatron: PREFIX.bin) and the index
 * (Megatron: PREFIX.idx, else NULL). */
const char *tgc_data_bin_path(const tgc_data *data);
const char *tgc_data_idx_path(const tgc_data *data);
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
/* Sample `sample` (0 <= sample < tgc_data_nsamples(data, s)) into column
 * 0 of an [s, stride] layout: tokens[t*stride] is its input t,
 * labels[t*stride] the next token (a blend's rows, runtime/io/blend.h). */
void tgc_data_sample(const tgc_data *data, int64_t sample, int64_t s, int64_t stride, int32_t *tokens,
                     int32_t *labels);
/* The same over the samples [first, first + count) only (a --split part):
 * stream position j is sample first + j mod count, or first + order's
 * (made with count samples). */
void tgc_data_batch_range(const tgc_data *data, tgc_data_order *order, int64_t first, int64_t count, int64_t step,
                          int64_t s, int64_t B, int64_t b0, int64_t nb, int32_t *tokens, int32_t *labels);

#endif
