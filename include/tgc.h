/* tgc: a static-graph compiler and runtime for transformer training, as a
 * C library (docs/api.md).
 *
 *   tgc_options: the options of `tgc compile` and `tgc run`, set by the
 *                command line's names (one table serves both);
 *   tgc_plan:    a model compiled under options (from a .tg file, a string
 *                or text IR), saved to and loaded from a plan file;
 *   tgc_trainer: the plan's ranks on a backend (cpu, sim, cuda) and world
 *                (one rank, or t x d x p rank threads of this process),
 *                trained step by step, its metrics read, its checkpoints
 *                saved and loaded;
 *   tgc_generator: a model (or plan) and its weights, forward-only with a
 *                KV cache, generating tokens from a prompt (tgc sample);
 *   tgc_tokenizer: the tokenizers of the command line's options.
 *
 * Every call returns a status. On failure tgc_last_error() gives the
 * message the command line prints for the same input (for a DSL error
 * "FILE:LINE:COL: error: ..." with the source line and a caret). The
 * library never prints an error and never exits the process. Handles are
 * opaque and freed by their _free function (which accepts NULL). Call the
 * library from one thread at a time. */
#ifndef TGC_H
#define TGC_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TGC_BUILDING_LIBRARY)
#define TGC_API __attribute__((visibility("default")))
#else
#define TGC_API
#endif

#define TGC_VERSION_MAJOR 0
#define TGC_VERSION_MINOR 1
#define TGC_VERSION_PATCH 0

typedef enum tgc_status {
    TGC_OK = 0,
    TGC_ERROR = 1,  /* bad input: a model, plan, data or weights file, a device, a non-finite loss */
    TGC_EUSAGE = 2, /* an unknown option, a bad value, options that do not go together (the CLI's status 2) */
    TGC_EINVAL = 3, /* a misuse of the API: a NULL argument, a handle past its end */
} tgc_status;

/* The library's version, "MAJOR.MINOR.PATCH". */
TGC_API const char *tgc_version(void);
/* The message of this thread's last call that failed, or "" when the last
 * call succeeded (every call clears it first). Valid until the next call. */
TGC_API const char *tgc_last_error(void);

/* ---- options ---------------------------------------------------------------- */

typedef struct tgc_options tgc_options;

/* The defaults of `tgc run` (docs/tools.md), except that a trainer prints
 * nothing unless "quiet" is set to "false". */
TGC_API tgc_status tgc_options_new(tgc_options **out);
TGC_API void tgc_options_free(tgc_options *opts);
/* Sets the option the command line calls --NAME (or its alias: "tp",
 * "data-path", ...) from its text, as the command line reads it: "tp" "2",
 * "lr" "3e-4", "data" "corpus.txt". A flag takes NULL, "true" or "false".
 * "set" takes NAME=VALUE (a model hyperparameter, as --set), and the model
 * flags ("num-layers", ...) set the hyperparameter they bind to; both
 * repeat. Strings are copied. TGC_EUSAGE names an unknown option or a bad
 * value. */
TGC_API tgc_status tgc_options_set(tgc_options *opts, const char *name, const char *value);

/* ---- plans -------------------------------------------------------------------- */

typedef struct tgc_plan tgc_plan;

/* Compiles a model (a .tg file, or text IR: a .ir file or text starting
 * with "tgc-ir") under opts (NULL: the defaults) through every pass: what
 * `tgc compile` does. _string: the model's text, named `name` in errors. */
TGC_API tgc_status tgc_compile_file(const char *path, const tgc_options *opts, tgc_plan **out);
TGC_API tgc_status tgc_compile_string(const char *name, const char *text, const tgc_options *opts, tgc_plan **out);
/* Writes the plan file `tgc compile -o PATH` writes. */
TGC_API tgc_status tgc_plan_save(const tgc_plan *plan, const char *path);
/* Reads a plan file (checked as `tgc run PLAN` checks it) with opts (NULL:
 * none) over its options, as `tgc run PLAN [options]` applies them:
 * run-time options replace the plan's, pass options recompile it from its
 * lowered IR, options that change the model are refused. */
TGC_API tgc_status tgc_plan_load(const char *path, const tgc_options *opts, tgc_plan **out);
TGC_API void tgc_plan_free(tgc_plan *plan);
/* The plan's ranks: t x d x p (tensor, data, pipeline degrees). */
TGC_API int tgc_plan_ranks(const tgc_plan *plan);

/* ---- training ----------------------------------------------------------------- */

typedef struct tgc_trainer tgc_trainer;

/* What one iteration did, as `tgc run --log` records it. */
typedef struct tgc_metrics {
    int64_t iteration;   /* 1-based, as Megatron's */
    double loss;         /* the training loss of the global batch */
    double grad_norm;    /* the global gradient norm before clipping */
    double lr;           /* the learning rate of the update */
    double weight_decay; /* the weight decay of the update */
    int64_t tokens;      /* tokens the iteration trained on (every micro-batch of every replica) */
    double step_ms;      /* the iteration's wall time */
    double tokens_per_s;
    double loss_scale;   /* fp16: the loss scale used; 1 otherwise */
    int skipped;         /* fp16: an overflow skipped the update */
    double val_loss;     /* the validation loss after it (--split, --eval-interval), or NaN */
} tgc_metrics;

/* The plan's ranks on the backend and with the data the options name
 * ("backend" cpu|sim|cuda, "data" or "inputs", "train-iters", "lr", ...):
 * the plan's options with opts (NULL: none) over them. opts may change
 * what runs the plan (tgc_options' run-time options, `tgc run --help`'s
 * first group); a compiled-in option is refused (recompile with
 * tgc_plan_load or tgc_compile_*). One rank runs on the calling thread,
 * several as threads of this process that each tgc_trainer_step starts
 * and joins. Parameters are initialised (or loaded: "init-from", "load").
 * The plan must outlive the trainer. */
TGC_API tgc_status tgc_trainer_new(const tgc_plan *plan, const tgc_options *opts, tgc_trainer **out);
/* Runs the next n iterations on every rank (never past "train-iters",
 * whose count the learning-rate schedule follows). After a failure the
 * trainer runs no further step (free it). */
TGC_API tgc_status tgc_trainer_step(tgc_trainer *tr, int64_t n);
/* Iterations done (after a checkpoint's load: the checkpoint's). */
TGC_API int64_t tgc_trainer_iteration(const tgc_trainer *tr);
/* The metrics of iteration `iteration` (1-based; 0: the last one run),
 * which this trainer ran; TGC_EINVAL otherwise. */
TGC_API tgc_status tgc_trainer_metrics(const tgc_trainer *tr, int64_t iteration, tgc_metrics *out);
/* A checkpoint of the state after the last iteration (weights, optimizer
 * state, iteration, loss scale) written to dir/iter_N and dir/latest
 * (docs/checkpoints.md; any partition of the model loads it). */
TGC_API tgc_status tgc_trainer_save_checkpoint(tgc_trainer *tr, const char *dir);
/* Loads dir's latest checkpoint (or an iter_N directory): the next step
 * is the checkpoint's next. */
TGC_API tgc_status tgc_trainer_load_checkpoint(tgc_trainer *tr, const char *dir);
/* Writes what the run writes at its end ("export", "export-grads",
 * "trace") and frees the trainer (in every case); its status. */
TGC_API tgc_status tgc_trainer_free(tgc_trainer *tr);

/* ---- tokenizers --------------------------------------------------------------- */

typedef struct tgc_tokenizer tgc_tokenizer;

/* The tokenizer opts name by the command line's options ("tokenizer-type"
 * ByteTokenizer|GPT2BPETokenizer|SentencePieceTokenizer or an alias,
 * "vocab-file" and "merge-file", "tokenizer-model"; docs/data.md), its
 * files read. None given (or opts NULL): ByteTokenizer. Options of another
 * kind are refused (TGC_EUSAGE). */
TGC_API tgc_status tgc_tokenizer_open(const tgc_options *opts, tgc_tokenizer **out);
TGC_API void tgc_tokenizer_free(tgc_tokenizer *tok);
/* Megatron's name of its type: "ByteTokenizer", "GPT2BPETokenizer", ... */
TGC_API const char *tgc_tokenizer_type(const tgc_tokenizer *tok);
/* One more than its largest id (a model's vocabulary covers at least this). */
TGC_API int64_t tgc_tokenizer_vocab_size(const tgc_tokenizer *tok);
/* Its end-of-document id, or -1 where it has none. */
TGC_API int64_t tgc_tokenizer_eod(const tgc_tokenizer *tok);
/* The ids of text[0 .. len) in *ids (malloc'd: free() it; NULL when there
 * are none) and their count in *n. */
TGC_API tgc_status tgc_tokenizer_encode(const tgc_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                                        int64_t *n);
/* The text of ids[0 .. n) in *text (malloc'd, NUL-terminated: free() it),
 * its length in *len (may be NULL). An id that is not the tokenizer's
 * decodes to "<|id N|>". */
TGC_API tgc_status tgc_tokenizer_decode(const tgc_tokenizer *tok, const int32_t *ids, int64_t n, char **text,
                                        size_t *len);

/* ---- generation --------------------------------------------------------------- */

typedef struct tgc_generator tgc_generator;

/* tgc_generator_new's flags. */
#define TGC_GENERATE_NO_KV_CACHE 1u /* each token a forward over the last positions (no KV cache) */

/* What `tgc sample MODEL --weights WEIGHTS` builds: the model (a .tg file,
 * text IR or a compiled plan file) forward-only with batch 1 and no
 * dropout, its prefill and KV-cache decoding programs on the backend, the
 * weights (a safetensors file, a `tgc run --save` directory or one of its
 * iter_N directories; a checkpoint's checksums verified) loaded, and the
 * prompt's tokenizer. opts (NULL: the defaults) may give "backend",
 * "attention-backend", the tokenizer's options (none: the one the
 * weights' metadata names, else bytes) and, for a model, "set" and the
 * model flags; any other option is refused (TGC_EUSAGE). _plan: a plan of
 * one rank (compiled without tp and pp), which may be freed after. */
TGC_API tgc_status tgc_generator_new(const char *model, const char *weights, const tgc_options *opts, unsigned flags,
                                     tgc_generator **out);
TGC_API tgc_status tgc_generator_new_plan(const tgc_plan *plan, const char *weights, const tgc_options *opts,
                                          unsigned flags, tgc_generator **out);
TGC_API void tgc_generator_free(tgc_generator *gen);
/* The model's context (positions of one forward) and vocabulary. */
TGC_API int64_t tgc_generator_context(const tgc_generator *gen);
TGC_API int64_t tgc_generator_vocab_size(const tgc_generator *gen);
/* The tokenizer of its prompts (owned by gen), or NULL: bytes. */
TGC_API const tgc_tokenizer *tgc_generator_tokenizer(const tgc_generator *gen);

/* A generation: the prompt's tokens, then the generated ones. */
typedef struct tgc_generation {
    int32_t *tokens; /* ntokens ids (malloc'd) */
    int64_t ntokens; /* nprompt + the tokens generated */
    int64_t nprompt; /* the prompt's tokens */
    char *text;      /* every token's text (the tokenizer's decoding; without one, the bytes of a model whose
                        vocabulary is at most 256), NUL-terminated; NULL for other models */
    size_t text_len;
} tgc_generation;

/* Generates n tokens after a prompt, text (encoded by the generator's
 * tokenizer; without one its bytes are its tokens) or prompt_tokens[0 ..
 * nprompt) (text NULL), as `tgc sample --prompt|--prompt-tokens --tokens n
 * --temperature t --top-k k --seed s` does: the same tokens for the same
 * arguments. temperature 0: greedy; top_k 0: every token. Free out with
 * tgc_generation_free: a refused prompt leaves it empty; a failure during
 * the generation leaves the tokens made before it. */
TGC_API tgc_status tgc_generate(tgc_generator *gen, const char *text, const int32_t *prompt_tokens, int64_t nprompt,
                                int64_t n, double temperature, int64_t top_k, uint64_t seed, tgc_generation *out);
TGC_API void tgc_generation_free(tgc_generation *g);
/* The logits of one forward over tokens[0 .. n) (n at most the context) at
 * every position: n x vocab floats, row-major, in *logits (malloc'd: free()
 * it). What `tgc sample --logits-out` writes. */
TGC_API tgc_status tgc_generator_logits(tgc_generator *gen, const int32_t *tokens, int64_t n, float **logits);

#ifdef __cplusplus
}
#endif
#endif
