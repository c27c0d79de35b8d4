/* A thin C interface over libsentencepiece's C++ SentencePieceProcessor
 * (Debian's libsentencepiece-dev), for Megatron's SentencePieceTokenizer
 * (tokenizer/tokenizer.h). tokenizer/spm.cc is the only C++ in tgc; no C++
 * exception leaves it. */
#ifndef TGC_TOKENIZER_SPM_H
#define TGC_TOKENIZER_SPM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tgc_spm tgc_spm;

/* A model from its serialized protobuf (the bytes of a .model file): NULL
 * with the library's reason in why when it is not one. */
tgc_spm *tgc_spm_load(const char *bytes, size_t n, char *why, size_t cap);
void tgc_spm_free(tgc_spm *m);
/* The number of pieces (ids 0 .. size - 1). */
int64_t tgc_spm_size(const tgc_spm *m);
/* The model's </s> id, or -1 where it has none. */
int64_t tgc_spm_eos(const tgc_spm *m);
/* libsentencepiece's encoding is quadratic in the length of a run of
 * text without white space that its model cannot merge (a run of
 * combining marks, of characters outside the vocabulary: 1 MB of U+0301
 * takes seconds to minutes). tgc_spm_encode hands the library such a run
 * in pieces of at most TGC_SPM_MAX_RUN bytes, cut at UTF-8 character
 * boundaries, each encoded as a text of its own (docs/data.md
 * "Tokenizers"); a text without such a run is encoded whole, as
 * spm_encode does. */
#define TGC_SPM_MAX_RUN 4096
/* The length of the piece of text[i .. n) (i < n) tgc_spm_encode hands
 * the library next: every run without ASCII white space in it is at most
 * max bytes long (max >= 4), and the pieces cover the text in order. */
size_t tgc_spm_piece(const char *text, size_t n, size_t i, size_t max);

/* Appends the ids of text[0 .. n) (spm_encode --output_format=id) to *out,
 * growing it (malloc/realloc) and *cap; false with the reason in why. */
bool tgc_spm_encode(const tgc_spm *m, const char *text, size_t n, int32_t **out, int64_t *len, int64_t *cap,
                    char *why, size_t whycap);
/* The text of ids (every one below tgc_spm_size; spm_decode
 * --input_format=id) in *text (malloc'ed, NUL-terminated, *len bytes);
 * false with the reason in why. */
bool tgc_spm_decode(const tgc_spm *m, const int32_t *ids, int64_t n, char **text, size_t *len, char *why,
                    size_t whycap);

#ifdef __cplusplus
}
#endif
#endif
