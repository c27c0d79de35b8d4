/* Hugging Face checkpoints <-> tgc (runtime/io/hf.h): what the parts share
 * (hf.c: config.json, the mapping, reading a checkpoint and the import;
 * hf_tokenizer.c: the tokenizer's files; hf_model.c: the .tg model and the
 * config of a tgc model; hf_export.c: the export). Not a public header. */
#ifndef TGC_RUNTIME_HF_IMPL_H
#define TGC_RUNTIME_HF_IMPL_H
#include <stdbool.h>
#include <stdint.h>

#include "runtime/io/hf.h"
#include "runtime/io/json.h"

/* A JSON file being read: the first error makes ok false. */
typedef struct hf_cfg {
    const json_value *root;
    const char *path;
    diag *d;
    bool ok;
} hf_cfg;

/* An error at v (NULL: the file). */
void hf_cfg_error(hf_cfg *c, const json_value *v, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- the mapping ---- */

typedef enum hf_map_kind { MAP_COPY, MAP_T, MAP_GPT2_QKV_W, MAP_GPT2_QKV_B, MAP_LLAMA_Q, MAP_LLAMA_K, MAP_LLAMA_V } hf_map_kind;

/* One Hugging Face tensor and the tgc tensor its elements go to. */
typedef struct hf_entry {
    char hf[128], tgc[128];
    hf_map_kind kind;
    int rank, tgc_rank;
    int64_t shape[2], tgc_shape[2];
} hf_entry;

typedef struct hf_map {
    hf_entry *e;
    int n, cap;
} hf_map;

/* Every tensor of m in transformers' state-dict order; hp ("transformer."
 * or "model.", or "" for a base model's names) prefixes all but lm_head. */
void hf_map_build(const hf_model *m, const char *hp, hf_map *mp);

/* The tgc element that element e of entry x's Hugging Face tensor is. */
static inline int64_t hf_map_index(const hf_model *m, const hf_entry *x, int64_t e)
{
    int64_t H = m->hidden, hd = m->hidden / m->heads, grp = m->heads / m->kv_heads;
    switch (x->kind) {
    case MAP_COPY: return e;
    case MAP_T: { /* HF [a, b] -> tgc [b, a] */
        int64_t a = x->shape[0], b = x->shape[1], i = e / b, j = e % b;
        (void)a;
        return j * x->shape[0] + i;
    }
    case MAP_GPT2_QKV_W:
    case MAP_GPT2_QKV_B: { /* column c of [q | k | v] -> row h*3hd + p*hd + dd */
        int64_t c = x->kind == MAP_GPT2_QKV_W ? e % (3 * H) : e, i = x->kind == MAP_GPT2_QKV_W ? e / (3 * H) : 0;
        int64_t p = c / H, h = (c % H) / hd, dd = c % hd, r = h * 3 * hd + p * hd + dd;
        return x->kind == MAP_GPT2_QKV_W ? r * H + i : r;
    }
    case MAP_LLAMA_Q:
    case MAP_LLAMA_K:
    case MAP_LLAMA_V: { /* row of q/k/v (a weight's, or a bias's element) -> row of the group-packed one */
        int64_t cols = x->rank == 2 ? H : 1, row = e / cols, col = e % cols, head = row / hd, dd = row % hd, r;
        if (x->kind == MAP_LLAMA_Q) r = (head / grp) * (grp + 2) * hd + (head % grp) * hd + dd;
        else r = head * (grp + 2) * hd + (x->kind == MAP_LLAMA_K ? grp : grp + 1) * hd + dd;
        return r * cols + col;
    }
    }
    return e;
}

int64_t hf_shape_numel(int rank, const int64_t *s);
/* "[a, b]". */
void hf_shape_text(char *out, size_t cap, int rank, const int64_t *s);

/* ---- files ---- */

bool hf_file_exists(const char *path);
/* Writes n bytes to path atomically (file_write_atomic); false after reporting. */
bool hf_write_file(const char *path, const void *data, size_t n, diag *d);
/* A tokenizer's files (from[1] NULL for SentencePiece: one file), read
 * once, loaded with tgc's own loader and only then written to to[]; made[]
 * (non-NULL): files derived instead of read. */
bool hf_carry_tokenizer(bool bpe, const char *const from[2], const strbuf *made, const char *const to[2], diag *d);
/* hf_import's tokenizer: dir's files checked and copied next to out,
 * recorded in meta (the names in keep, freed by the caller). */
bool hf_import_tokenizer(const char *dir, const hf_model *m, const char *out, tgc_st_kv *meta, int *nmeta,
                         char **keep, int *nkeep, const char **type, diag *d);

#endif
