/* GPT-2's byte-level BPE tokenizer, Megatron's GPT2BPETokenizer
 * (tokenizer/tokenizer.h, docs/data.md): vocab.json (token string -> id) and merges.txt (one
 * merge "A B" per line, ranked by line), the byte-to-unicode map, GPT-2's
 * pre-tokenizer and merges by rank.
 *
 * The pre-tokenizer is GPT-2's pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * written out by hand over UTF-8, with the Python `regex` module's classes
 * from utf8proc's Unicode tables: \p{L} letters, \p{N} numbers, \s
 * Unicode's White_Space. A byte that is not part of valid UTF-8 is a
 * character of its own that is neither (what GPT-2's encoder sees after
 * decoding with errors="surrogateescape"), so the pieces of any bytes are
 * those of openai's encoder.py. */
#ifndef TGC_TOKENIZER_BPE_H
#define TGC_TOKENIZER_BPE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "support/diag.h"
#include "support/util.h"

typedef struct tgc_bpe tgc_bpe;

/* Ids of vocab.json run 0 .. entries - 1 (GPT-2's are dense) with at
 * most this many unused below the largest (docs/data.md "Tokenizers"):
 * the id table is sized by the file, never by a number in it. */
#define BPE_ID_SLACK 1024

/* Reads both files; NULL after reporting `FILE:LINE:COL: error: ...`:
 * besides syntax, a token given twice, two tokens with one id, an id
 * beyond BPE_ID_SLACK, a merge whose symbols or result are not tokens, or
 * too little memory for the tables (an error, never the program's end). */
tgc_bpe *tgc_bpe_load(const char *vocab_path, const char *merges_path, diag *d);
/* The same from the files' bytes (the paths name them in messages). */
tgc_bpe *tgc_bpe_parse(const char *vocab_path, const char *vs, size_t vn, const char *merges_path, const char *ms,
                       size_t mn, diag *d);
void tgc_bpe_free(tgc_bpe *b);
/* One more than the largest id of the vocabulary. */
int64_t tgc_bpe_vocab_size(const tgc_bpe *b);
/* The id of a token string as vocab.json spells it (UTF-8), or -1. */
int64_t tgc_bpe_lookup(const tgc_bpe *b, const char *token);

/* Appends the ids of text[0 .. n) to *out (growing *cap). False after
 * reporting a piece whose symbols are not in the vocabulary (`where` names
 * the input). */
bool tgc_bpe_encode(const tgc_bpe *b, const unsigned char *text, size_t n, int32_t **out, int64_t *len,
                    int64_t *cap, const char *where, diag *d);

/* Whether a token has the id; its bytes appended to out (it must have). */
bool tgc_bpe_has_id(const tgc_bpe *b, int64_t id);
void tgc_bpe_decode_one(const tgc_bpe *b, int64_t id, strbuf *out);

/* The length of the pre-tokenizer's piece at text[i] (i < n; at least 1). */
size_t tgc_bpe_piece(const unsigned char *text, size_t n, size_t i);

#endif
