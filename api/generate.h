/* Generation, the library's side of `tgc sample` (docs/sampling.md) and of
 * tgc_generate (include/tgc.h): a model or plan compiled forward-only, its
 * weights, the prompt's tokenizer, the KV-cache decoding loop and the
 * prompt's logits (--logits-out). cli/sample_cmd.c scans the command line
 * and prints; api/api.c wraps these in the public API. Errors go to the
 * diag (and, for a plan's configuration, to the FILE err). */
#ifndef TGC_API_GENERATE_H
#define TGC_API_GENERATE_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "frontend/frontend.h"
#include "ir/ir.h"
#include "runtime/exec.h"
#include "support/diag.h"
#include "support/util.h"
#include "tokenizer/tokenizer.h"

typedef struct api_gen_opts {
    const char *model;   /* a .tg model, text IR or a compiled plan (or the name of plan) */
    const ir_graph *plan; /* or a compiled plan's graph (copied), with its parallel degrees */
    long long plan_tp, plan_pp;
    const char *weights; /* a safetensors file, a `tgc run --save` directory or an iter_N directory */
    const fe_override *sets; /* --set and the model flags (a .tg model or text IR only) */
    int nsets;
    bool no_kv_cache;    /* each token a forward over the last s positions */
    bool check_kv_cache; /* the plain forward too, to compare the cached programs' logits with */
    rt_backend backend;
    int attention;       /* PASS_ATTENTION_* (--attention-backend) */
    tgc_tokenizer_opts tok; /* the tokenizer options; none given: the weights' __metadata__'s, else bytes */
    const char *tok_from;   /* how the caller names tok's origin in messages ("from the command line") */
} api_gen_opts;

typedef struct api_gen api_gen;

/* The model (batch 1, dropout off; a plan's training step cut after its
 * logits), its programs on the backend, the weights (verified) imported,
 * the tokenizer opened. NULL after reporting. */
api_gen *api_gen_new(const api_gen_opts *o, diag *d, FILE *err);
void api_gen_free(api_gen *g);

/* What `tgc sample`'s first line tells. */
typedef struct api_gen_info {
    const char *model, *weights, *backend;
    long long params;
    int64_t context, vocab;
    const tgc_tokenizer *tok; /* NULL: bytes */
    const char *tok_from;     /* where the tokenizer came from */
    bool kv_cache, check_kv_cache;
} api_gen_info;
void api_gen_describe(const api_gen *g, api_gen_info *out);

/* The prompt's tokens, text through the tokenizer (its bytes without one)
 * or ids, in a context with room for `extra` more; *n their count. NULL
 * after reporting a prompt of no tokens (where names the prompt). */
int32_t *api_gen_encode(const api_gen *g, const char *text, const int32_t *ids, int64_t nids, int64_t extra,
                        int64_t *n, const char *where, diag *d);
/* Every token of ctx[0 .. n) is inside the model's vocabulary; false after
 * reporting the first that is not (where names the prompt; bytes: the
 * prompt's bytes were its tokens). */
bool api_gen_check_prompt(const api_gen *g, const int32_t *ctx, int64_t n, const char *where, bool bytes, diag *d);
/* One forward over ctx[0 .. n) (n at most the context) and its logits at
 * every position, [n, vocab] f32 (malloc'd) in *out. */
bool api_gen_prompt_logits(api_gen *g, const int32_t *ctx, int64_t n, float **out, const char *where, diag *d);
/* Those logits written to a safetensors file as "logits" (--logits-out). */
bool api_gen_write_logits(api_gen *g, const int32_t *ctx, int64_t n, const char *path, diag *d);

/* Called after each generated token, the context ctx[0 .. len) ending in
 * it; false stops the generation (after reporting to d). */
typedef bool (*api_gen_token_fn)(void *user, const int32_t *ctx, int64_t len, diag *d);

typedef struct api_gen_stats {
    int64_t made, prefills; /* tokens made; forwards over the whole window */
    double seconds;
    int64_t checked;        /* check_kv_cache: tokens whose logits were compared */
    double max_diff, max_abs, tol;
    bool check_ok;
} api_gen_stats;

/* Generates n tokens after ctx[0 .. *len) (ctx has room for them), drawn
 * from the logits of the last position (runtime/train/sample.h:
 * temperature 0 greedy, top_k 0 every token, seed), *len growing by each.
 * False after reporting; st (when not NULL) gets the statistics either
 * way. */
bool api_gen_run(api_gen *g, int32_t *ctx, int64_t *len, int64_t n, double temperature, int64_t top_k, uint64_t seed,
                 api_gen_token_fn fn, void *user, api_gen_stats *st, diag *d);

/* A context's text as it grows: the tokenizer's decoding (GPT-2 BPE token
 * by token; SentencePiece, whose pieces' spaces depend on their
 * neighbours, the whole context each time), giving what each token adds. */
typedef struct api_gen_text {
    const tgc_tokenizer *tok;
    bool whole;
    strbuf out;
    size_t printed;
} api_gen_text;
/* The text of the prompt ctx[0 .. len): *s, *n. */
bool api_gen_text_begin(api_gen_text *t, const tgc_tokenizer *tok, const int32_t *ctx, int64_t len, const char **s,
                        size_t *n, diag *d);
/* What the last token of ctx[0 .. len) adds (*n may be 0). */
bool api_gen_text_add(api_gen_text *t, const int32_t *ctx, int64_t len, const char **s, size_t *n, diag *d);
void api_gen_text_end(api_gen_text *t);

#endif
