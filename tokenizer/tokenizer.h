/* Tokenizers under Megatron-LM's --tokenizer-type names, one interface for
 * `tgc data prep`, `tgc run` (text data) and `tgc sample` (docs/data.md
 * "Tokenizers", docs/sampling.md):
 *   - ByteTokenizer (alias bytes, the default): one token per byte,
 *     vocabulary 256, end of document 256 (one past the bytes);
 *   - GPT2BPETokenizer (alias gpt2): GPT-2's byte-level BPE from
 *     --vocab-file vocab.json and --merge-file merges.txt
 *     (tokenizer/bpe.h); end of document <|endoftext|>;
 *   - SentencePieceTokenizer (aliases GPTSentencePieceTokenizer,
 *     sentencepiece): a SentencePiece --tokenizer-model through
 *     libsentencepiece (tokenizer/spm.h): the model's own ids, as
 *     spm_encode --output_format=id gives them; end of document </s>
 *     (Megatron's GPTSentencePieceTokenizer; tgc adds no special tokens,
 *     unlike Megatron's SentencePieceTokenizer, which appends <CLS>, <SEP>,
 *     <EOD>, ... to the vocabulary). */
#ifndef TGC_TOKENIZER_H
#define TGC_TOKENIZER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "support/diag.h"
#include "support/util.h"
#include "tgc.h" /* tgc_tokenizer_free, _vocab_size and _eod are public too */

typedef enum tgc_tokenizer_kind {
    TGC_TOKENIZER_BYTES,
    TGC_TOKENIZER_GPT2BPE,
    TGC_TOKENIZER_SENTENCEPIECE,
} tgc_tokenizer_kind;

/* What the command line (or a safetensors file's metadata) names. */
typedef struct tgc_tokenizer_opts {
    const char *type;                    /* a name or alias above; NULL: ByteTokenizer */
    const char *vocab_file, *merge_file; /* GPT2BPETokenizer */
    const char *model;                   /* SentencePieceTokenizer: --tokenizer-model */
} tgc_tokenizer_opts;

/* The kind a name or alias stands for; false for another word. */
bool tgc_tokenizer_parse_type(const char *name, tgc_tokenizer_kind *k);
/* Megatron's name of the kind. */
const char *tgc_tokenizer_kind_name(tgc_tokenizer_kind k);
/* The names and aliases tgc_tokenizer_parse_type accepts, for messages. */
#define TGC_TOKENIZER_TYPES "ByteTokenizer (bytes), GPT2BPETokenizer (gpt2) or SentencePieceTokenizer (sentencepiece)"

/* Whether the files the options give suit the type (--vocab-file and
 * --merge-file for GPT2BPETokenizer only and both, --tokenizer-model for
 * SentencePieceTokenizer only): false with a message (no trailing period)
 * in why. */
bool tgc_tokenizer_opts_check(const tgc_tokenizer_opts *o, char *why, size_t cap);
/* Whether the options name anything beyond the default. */
bool tgc_tokenizer_opts_given(const tgc_tokenizer_opts *o);

typedef struct tgc_tokenizer tgc_tokenizer;

/* Reads the tokenizer's files (checked as tgc_tokenizer_opts_check does);
 * NULL after reporting `FILE[:LINE:COL]: error: ...`. */
tgc_tokenizer *tokenizer_open(const tgc_tokenizer_opts *o, diag *d);
void tgc_tokenizer_free(tgc_tokenizer *t);
/* Whether the bytes of a tokenizer's files load as tokenizer_open would
 * load them (GPT2BPETokenizer: vocab.json, merges.txt; SentencePiece: the
 * model, [1] unused); paths name them in messages. What `tgc import hf`
 * and `tgc export --format hf` write passes this first. */
bool tokenizer_files_check(tgc_tokenizer_kind k, const char *const path[2], const char *const bytes[2],
                           const size_t len[2], diag *d);
tgc_tokenizer_kind tgc_tokenizer_kind_of(const tgc_tokenizer *t);
/* One more than the largest id (the model's vocabulary must be at least
 * this). */
int64_t tgc_tokenizer_vocab_size(const tgc_tokenizer *t);
/* The end-of-document id (--append-eod), or -1 where the vocabulary has
 * none. */
int64_t tgc_tokenizer_eod(const tgc_tokenizer *t);

/* Appends the ids of text[0 .. n) to *out (growing it with xrealloc, and
 * *cap). False after reporting (`where` names the input). */
bool tokenizer_encode(const tgc_tokenizer *t, const unsigned char *text, size_t n, int32_t **out, int64_t *len,
                          int64_t *cap, const char *where, diag *d);
/* Appends the text of ids[0 .. n) to out. An id that is not the
 * tokenizer's (a model's padded vocabulary is larger) appends "<|id N|>"
 * in its place. False after reporting a library failure. */
bool tokenizer_decode(const tgc_tokenizer *t, const int32_t *ids, int64_t n, strbuf *out, diag *d);
/* Whether id is one of the tokenizer's (it decodes to its own text). */
bool tgc_tokenizer_has_id(const tgc_tokenizer *t, int64_t id);

/* A safetensors file's tokenizer (H-hf's import writes these): its
 * __metadata__ "tgc.tokenizer_type" and "tgc.vocab_file", "tgc.merge_file"
 * or "tgc.tokenizer_model", bare file names beside the file (path_beside:
 * an absolute path, a '/' or ".." is refused). True with *o filled
 * (its strings in *store, to free with tgc_tokenizer_meta_free) and
 * *found, or true and !*found where the file names none; false after
 * reporting a file that cannot be read or a type that is not known. */
typedef struct tgc_tokenizer_meta {
    char *type, *vocab_file, *merge_file, *model;
} tgc_tokenizer_meta;
bool tgc_tokenizer_from_safetensors(const char *path, tgc_tokenizer_opts *o, tgc_tokenizer_meta *store,
                                    bool *found, diag *d);
void tgc_tokenizer_meta_free(tgc_tokenizer_meta *m);

#endif
