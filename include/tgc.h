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
#include <stdio.h>

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
/* Every later call's diagnostics (errors, warnings and notes: what the
 * command line prints on standard error), written to f as they are made
 * besides being kept for tgc_last_error(); NULL (the default): only kept.
 * `tgc` sets it to stderr. */
TGC_API void tgc_set_diagnostics(FILE *f);
/* One line naming the BLAS, its threads, the kernels it runs and why
 * (what `tgc --version` prints after "blas: "). The library links no BLAS:
 * it opens OpenBLAS at its first use, after setting OPENBLAS_CORETYPE
 * (unless the environment has it) to the kernels of this CPU's vector ISA
 * (Cooperlake, SkylakeX, Haswell, Zen), since OpenBLAS falls back to its
 * SSE3 kernels on a CPU model it does not know. A program that links
 * OpenBLAS itself keeps its own, with a warning on that fallback. */
TGC_API const char *tgc_blas_describe(void);

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
/* Sets an option of paths ("data-path": PATH, or WEIGHT PATH pairs) to
 * words[0 .. n) (copied), as the command line's arguments after it. */
TGC_API tgc_status tgc_options_set_words(tgc_options *opts, const char *name, const char *const *words, int n);
/* The value of option `name` (long name or alias) as text: the given
 * value or the default ("true"/"false" for a flag; a number as the
 * command line writes it; paths joined by spaces), NULL for a path or text
 * option that is not set or an unknown name. Valid until the options
 * change or are freed. */
TGC_API const char *tgc_options_get(const tgc_options *opts, const char *name);
/* Whether the caller set option `name` (tgc_options_set, _set_words). */
TGC_API int tgc_options_given(const tgc_options *opts, const char *name);
/* Option `name` back to `tgc run`'s default, as not given ("quiet": false,
 * and a plan's own value then applies, as under `tgc run PLAN`). */
TGC_API tgc_status tgc_options_reset(tgc_options *opts, const char *name);
/* How messages name where the options came from (a tokenizer's origin:
 * "from the options" by default; `tgc` says "from the command line"). */
TGC_API tgc_status tgc_options_set_origin(tgc_options *opts, const char *words);
/* The options' cross-checks (the global batch divides by micro-batch x
 * dp, flags that do nothing without another, ...), as `tgc compile` makes
 * them first: TGC_EUSAGE names what is wrong. tgc_compile_* and
 * tgc_trainer_new make them too. */
TGC_API tgc_status tgc_options_check(const tgc_options *opts);
/* Whether the file is a compiled plan (by its content; a damaged plan is
 * one), which `tgc run` trains (tgc_plan_load) instead of compiling. */
TGC_API int tgc_file_is_plan(const char *path);

/* ---- the option table (what `tgc` scans its command lines by) -------------------- */

/* The rows of the one option table (docs/tools.md): what a command line
 * scanner needs to know of each option, and the model flags (--num-layers,
 * ...) that set the hyperparameters a model binds to them. */
typedef enum tgc_option_kind {
    TGC_OPTION_INT = 0,    /* " N" */
    TGC_OPTION_FLOAT = 1,  /* " X" */
    TGC_OPTION_FLAG = 2,   /* no value */
    TGC_OPTION_PATH = 3,   /* " PATH" */
    TGC_OPTION_CHOICE = 4, /* " CHOICE": one of choices */
    TGC_OPTION_SPEC = 5,   /* " SPEC": text the plan keeps */
    TGC_OPTION_LIST = 6,   /* " SPEC", repeatable: the values joined by ';' */
    TGC_OPTION_WORDS = 7,  /* " [WEIGHT] PATH ...": the value and every later argument up to the next option
                              (tgc_options_set_words) */
} tgc_option_kind;
/* What `tgc run PLAN` does with an option given over a plan (`tgc run
 * --help`'s groups, docs/runtime.md "Plans"). */
typedef enum tgc_option_use {
    TGC_OPTION_RUNTIME = 1, /* applied over the plan's value */
    TGC_OPTION_PASSES = 2,  /* compiled in: the plan is recompiled from its lowered IR */
    TGC_OPTION_MODEL = 3,   /* changes the model: refused when it differs from the plan's */
    TGC_OPTION_COMPILE = 4, /* an option of tgc compile: tgc run refuses it */
} tgc_option_use;
typedef struct tgc_option_info {
    const char *name;  /* the long name (Megatron-LM's), without the dashes */
    const char *alias; /* a short alias (one letter: -X) or NULL */
    const char *help;
    tgc_option_kind kind;
    tgc_option_use use;
    const char *const *choices; /* TGC_OPTION_CHOICE: the words, NULL-terminated; NULL otherwise */
} tgc_option_info;
/* The table's rows (0 .. tgc_option_count()), and row i's description
 * (TGC_EINVAL past the end; the strings are the library's, static). */
TGC_API int tgc_option_count(void);
TGC_API tgc_status tgc_option_info_get(int i, tgc_option_info *out);
/* The row of a long name or alias, or -1. */
TGC_API int tgc_option_find(const char *name);
/* The model flags ("num-layers", "hidden-size", ...): flag i, NULL past
 * the last. tgc_options_set takes each, as "set" takes NAME=VALUE. */
TGC_API const char *tgc_model_flag(int i);
/* Whether model flag i is a switch (--use-rope-scaling): it takes no value,
 * and tgc_options_set takes NULL or "true" for it (its hyperparameter 1),
 * or "false" (0). */
TGC_API int tgc_model_flag_is_switch(int i);
/* The passes of the compiler's pipeline, in its order (`tgc dump-ir
 * --after`, --passes): pass i's name, NULL past the last. "lower" (the IR
 * as the front end makes it) is none of them. */
TGC_API const char *tgc_pass_name(int i);
/* Numbers as the option table reads them: decimal digits with a sign (an
 * integer of 64 bits; _double: also a fraction and an exponent, finite).
 * 1 when all of s is one, else 0 (*out unchanged). */
TGC_API int tgc_parse_i64(const char *s, int64_t *out);
TGC_API int tgc_parse_double(const char *s, double *out);

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

/* What `tgc compile -o PLAN` prints of a plan: its step's kernels and
 * GEMMs, the bytes of its parameters, activations (the peak of the plan)
 * and workspace, and the norm/dropout/residual activations per rank. */
typedef struct tgc_plan_figures {
    int kernels, gemms;
    int64_t param_bytes, act_bytes, workspace_bytes;
    int64_t region_bytes;
    int sequence_parallel; /* those activations are split along the sequence */
} tgc_plan_figures;
TGC_API tgc_status tgc_plan_figures_get(const tgc_plan *plan, tgc_plan_figures *out);
/* tgc_plan_report's kinds: `tgc compile`'s --kernel-report (the CUDA
 * kernels NVRTC-compiled for arch, e.g. "sm_90" (NULL: sm_80): registers
 * and spills),
 * --gemm-report (every GEMM's cuBLASLt descriptors) and --fusion-report
 * (kernels and bytes per step against the same model without fusion:
 * plans from a model file or string only). The first two need a plan for
 * the "backend" cuda; none needs a GPU. */
typedef enum tgc_report_kind { TGC_REPORT_KERNELS = 1, TGC_REPORT_GEMMS = 2, TGC_REPORT_FUSION = 3 } tgc_report_kind;
TGC_API tgc_status tgc_plan_report(const tgc_plan *plan, tgc_report_kind kind, const char *arch, FILE *out);

/* The checks `tgc run` makes before it compiles or trains (a plan: NULL
 * with opts, a model's options; or the plan, whose options they are): the
 * options go together (TGC_EUSAGE), and a launcher's world (mpirun,
 * torchrun) has the plan's t x d x p processes (TGC_ERROR). Under a
 * launcher world rank 0 alone reports a wrong size; every other process
 * gets TGC_ERROR with *leave set (when not NULL) and an empty message: it
 * should end with status 0 (a launcher that sees a process fail ends the
 * job, which could end rank 0 before its message is out). */
TGC_API tgc_status tgc_run_check(const tgc_plan *plan, const tgc_options *opts, int *leave);

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
 * ("backend" cpu|sim|cuda, "data" or "inputs", "train-iters", "lr", ...;
 * "comm" auto|local|mpi: under mpirun or torchrun this process runs its
 * one rank, as `tgc run` does, and checkpoints are saved and loaded by
 * "save"/"load" and "save-interval" only):
 * the plan's options with opts (NULL: none) over them. opts may change
 * what runs the plan (tgc_options' run-time options, `tgc run --help`'s
 * first group); a compiled-in option is refused (recompile with
 * tgc_plan_load or tgc_compile_*). One rank runs on the calling thread,
 * several as threads of this process that each tgc_trainer_step starts
 * and joins. Parameters are initialised (or loaded: "init-from", "load").
 * The plan must outlive the trainer. */
TGC_API tgc_status tgc_trainer_new(const tgc_plan *plan, const tgc_options *opts, tgc_trainer **out);
/* Runs the next n iterations on every rank (never past "train-iters",
 * whose count the learning-rate schedule follows), with what `tgc run`
 * does between them: the "log" line of each, "eval-interval"'s validation,
 * "save-interval"'s checkpoints, "exit-interval" and
 * "exit-duration-in-mins" (which end the run: later steps do nothing).
 * After a failure the trainer runs no further step (free it). */
TGC_API tgc_status tgc_trainer_step(tgc_trainer *tr, int64_t n);
/* Runs every remaining iteration, as `tgc run` does: with "save", the
 * first SIGINT or SIGTERM while it runs stops every rank after the same
 * step and saves (a second ends the process), and *signal (when not NULL)
 * gets that signal, with TGC_ERROR; 0 otherwise. The handlers are the
 * process's only during the call. */
TGC_API tgc_status tgc_trainer_run(tgc_trainer *tr, int *signal);
/* Iterations done (after a checkpoint's load: the checkpoint's). */
TGC_API int64_t tgc_trainer_iteration(const tgc_trainer *tr);
/* Whether this process has the metrics: in one process, yes; under
 * mpirun or torchrun, the reporting rank's only (tensor rank 0, data rank
 * 0, the last pipeline stage), which also writes "log". */
TGC_API int tgc_trainer_reports(const tgc_trainer *tr);
/* The metrics of iteration `iteration` (1-based; 0: the last one run),
 * which this trainer ran (tgc_trainer_reports); TGC_EINVAL otherwise. */
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
/* Whether opts' tokenizer options go together (TGC_EUSAGE says why not),
 * without reading their files. */
TGC_API tgc_status tgc_tokenizer_check(const tgc_options *opts);
TGC_API void tgc_tokenizer_free(tgc_tokenizer *tok);
/* Megatron's name of the tokenizer type `name` names ("gpt2":
 * "GPT2BPETokenizer"; a name or an alias "tokenizer-type" takes), or NULL
 * for another word; and those names for messages ("ByteTokenizer (bytes),
 * GPT2BPETokenizer (gpt2) or ..."). */
TGC_API const char *tgc_tokenizer_type_parse(const char *name);
TGC_API const char *tgc_tokenizer_types(void);
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
#define TGC_GENERATE_NO_KV_CACHE 1u    /* each token a forward over the last positions (no KV cache) */
#define TGC_GENERATE_CHECK_KV_CACHE 2u /* the full forward too: each token's cached logits compared with it
                                          (`tgc sample --check-kv-cache`; not with NO_KV_CACHE) */

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
/* What `tgc sample`'s first line tells of a generator (strings owned by gen). */
typedef struct tgc_generator_info {
    const char *model, *weights, *backend; /* the model's name, the weights file, the backend's name */
    int64_t params, context, vocab;
    const char *tokenizer_origin; /* its tokenizer's origin ("from the options", "named by the weights'
                                     __metadata__"), or NULL: none */
    int tokenizer_from_options;   /* the tokenizer is the options' */
    int kv_cache, check_kv_cache; /* decoding with a KV cache; checking it (TGC_GENERATE_CHECK_KV_CACHE) */
} tgc_generator_info;
TGC_API tgc_status tgc_generator_info_get(const tgc_generator *gen, tgc_generator_info *out);

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

/* tgc_generate_ex's callback's events. */
typedef enum tgc_generate_event {
    TGC_GENERATE_ENCODED = 1, /* a text prompt encoded by the tokenizer: its tokens (not yet checked), text NULL */
    TGC_GENERATE_PROMPT = 2,  /* the prompt checked (and its logits written): its tokens and text */
    TGC_GENERATE_TOKEN = 3,   /* a generated token: tokens[0], and the text it adds (may be empty) */
} tgc_generate_event;
/* Text is the tokenizer's decoding (SentencePiece: what the token adds to
 * the whole context's), or the bytes of a model of at most 256 tokens
 * without one, or NULL (other models). Returning non-zero stops the
 * generation: TGC_ERROR, the message the callback's (tgc_generate_ex's
 * last error names the stop). */
typedef int (*tgc_generate_fn)(void *user, tgc_generate_event ev, const int32_t *tokens, int64_t ntokens,
                               const char *text, size_t len);
/* A generation's arguments (tgc_generate's), and more. */
typedef struct tgc_generate_args {
    const char *text;             /* the prompt's text, or NULL: */
    const int32_t *prompt_tokens; /* its tokens, nprompt of them */
    int64_t nprompt;
    int64_t n;                    /* tokens to generate */
    double temperature;           /* 0: greedy */
    int64_t top_k;                /* 0: every token */
    uint64_t seed;
    const char *prompt_name;      /* how messages name the prompt (NULL: "the prompt", "the prompt's tokens") */
    const char *logits_out;       /* the prompt's logits written there as safetensors ("logits", [n, vocab] f32:
                                     `tgc sample --logits-out`), or NULL */
    tgc_generate_fn fn;           /* called as the generation goes (streaming), or NULL */
    void *user;
} tgc_generate_args;
/* What a generation did: `tgc sample`'s last lines. */
typedef struct tgc_generate_stats {
    int64_t made;     /* tokens generated */
    int64_t prefills; /* forwards over the whole window (the rest: KV-cache decoding steps of one) */
    double seconds;   /* the generation's wall time */
    int64_t checked;  /* TGC_GENERATE_CHECK_KV_CACHE: tokens whose logits were compared */
    double max_diff, max_abs, tol; /* the largest |difference|, the largest logit, the tolerance */
    int check_ok;     /* every difference within tol (1 when nothing was checked) */
    int done;         /* all n tokens were made (a failed status then is the KV-cache check's) */
} tgc_generate_stats;
/* tgc_generate with args; st (may be NULL) gets the figures, also after a
 * failure during the generation. A failed KV-cache check is TGC_ERROR
 * after the whole generation (st says by how much). */
TGC_API tgc_status tgc_generate_ex(tgc_generator *gen, const tgc_generate_args *args, tgc_generation *out,
                                   tgc_generate_stats *st);

/* ---- the developer commands' work (tgc check, dump-ir, plan, data, inspect, export) ---- */

/* Each call below is what one `tgc` command does after its arguments are
 * scanned, with the same output (on out, or the files it names), messages
 * (diagnostics, tgc_set_diagnostics) and statuses (TGC_ERROR: `tgc`'s exit
 * status 1, TGC_EUSAGE: 2). Their arguments are a struct whose first
 * member, size, is sizeof the struct as the caller was compiled: its
 * _INIT macro sets it and the defaults, so that a caller built against an
 * older tgc.h (a shorter struct) keeps working; a bad size is TGC_EINVAL.
 * opts (NULL: tgc_options_new's) gives the table's options the command
 * takes, and --set and the model flags (tgc_options_set "set", ...). */

/* tgc check MODEL: the model (a .tg file or text IR; "-": standard input)
 * with opts' overrides, verified and checked trainable (its param groups
 * each take a parameter); then, with params, a line per parameter (name,
 * type, size, init, its optimizer group), and the summary line: layers,
 * parameters, training FLOPs per token, ops. */
typedef struct tgc_check_args {
    size_t size;
    const char *model;
    int params;                      /* list the parameters (--params) */
    const char *const *param_groups; /* --param-group GLOB:lr_mult=X,wd_mult=Y specs, NULL-terminated; NULL: none */
} tgc_check_args;
#define TGC_CHECK_ARGS_INIT {sizeof(tgc_check_args), NULL, 0, NULL}
TGC_API tgc_status tgc_check(const tgc_options *opts, const tgc_check_args *args, FILE *out);

/* tgc dump-ir MODEL: the pipeline's passes (or exactly `passes`, as opt
 * does) on the model under opts' pass options (tp, pp, the fusions,
 * recomputation, "use-distributed-optimizer", "overlap-grad-reduce", ...;
 * "trace": the simulated pipeline step as a Chrome trace), the verifier
 * after each, and the IR printed after the last pass, after `after`, or
 * after every pass; or, with rank >= 0, rank R's compiled step (its slots,
 * arena offsets, buckets and one step instruction per line). Written to
 * opts' "output" (-o: atomically) or else to out. */
typedef struct tgc_dump_ir_args {
    size_t size;
    const char *model;
    const char *format;          /* "text" (NULL), "dot", "json" or "schedule" (the schedule pass's lists and the
                                    simulated figures) */
    const char *after;           /* a pass (tgc_pass_name) or "lower"; NULL: the last */
    int after_all;               /* print after every pass (text and dot) */
    const char *const *passes;   /* the passes to run, in order, NULL-terminated; NULL: the pipeline */
    double pp_forward, pp_backward; /* the pipeline simulator's forward and backward times (--pp-times: 1, 2) */
    int64_t kv_cache;            /* the kvcache pass's new positions per run (--kv-cache), or 0 */
    int64_t rank;                /* -1: the IR; R >= 0: rank R's compiled step (--rank) */
} tgc_dump_ir_args;
#define TGC_DUMP_IR_ARGS_INIT {sizeof(tgc_dump_ir_args), NULL, "text", NULL, 0, NULL, 1.0, 2.0, 0, -1}
TGC_API tgc_status tgc_dump_ir(const tgc_options *opts, const tgc_dump_ir_args *args, FILE *out);

/* tgc plan MODEL: what the options' configuration costs before anything
 * runs (docs/planner.md): per rank the memory of the compiled one-rank
 * plan beside the analytic figures of the pipeline, data-parallel and
 * recomputation options, the paper's activation formulas, the checkpoint
 * count, the FLOPs per iteration and the compiled 3D plan; with search,
 * the parallel configurations of gpus GPUs ranked by the step-time model
 * (degrees opts gives stay fixed); with calibrate, this machine's sgemm
 * rate first (model NULL: GPT-2 small's shapes, and nothing else). opts
 * gives the passes' and the model's options, "peak-tflops", "comm" and
 * "backend". */
typedef struct tgc_planner_args {
    size_t size;
    const char *model;
    int search;              /* --search: needs gpus, gpu_memory and opts' "global-batch-size" */
    int calibrate;           /* --calibrate */
    int no_sequence_parallel; /* --search: only configurations without sequence parallelism */
    int64_t gpus;            /* GPUs n = t p d */
    int64_t gpus_per_node;   /* 8 */
    int64_t top;             /* configurations printed (10) */
    int64_t max_micro_batch; /* the largest micro-batch tried (64) */
    int64_t devices;         /* backend cuda or sim: the devices the ranks are placed on (0: 1) */
    double gpu_memory;       /* GiB of one GPU */
    double intra_node_gbps, inter_node_gbps, hbm_gbps; /* GB/s; 0: 300, 25, 2000 */
} tgc_planner_args;
#define TGC_PLANNER_ARGS_INIT {sizeof(tgc_planner_args), NULL, 0, 0, 0, 0, 8, 10, 64, 0, 0.0, 0.0, 0.0, 0.0}
TGC_API tgc_status tgc_planner_report(const tgc_options *opts, const tgc_planner_args *args, FILE *out);

/* tgc data prep TEXT... -o PREFIX: text files tokenized (one document
 * each, or one per blank-line separated paragraph) into a Megatron-LM
 * indexed dataset PREFIX.bin + PREFIX.idx (uint16 tokens when the
 * vocabulary fits, else int32), and a line saying what was written. */
typedef struct tgc_data_prep_args {
    size_t size;
    const char *const *inputs; /* the text files, NULL-terminated */
    const char *output;        /* PREFIX */
    const char *tokenizer_type; /* ByteTokenizer (NULL), GPT2BPETokenizer, SentencePieceTokenizer or an alias */
    const char *vocab_file, *merge_file, *tokenizer_model; /* its files */
    int append_eod;            /* end every document with the tokenizer's end of document */
    int split_paragraphs;      /* a document per paragraph */
} tgc_data_prep_args;
#define TGC_DATA_PREP_ARGS_INIT {sizeof(tgc_data_prep_args), NULL, NULL, NULL, NULL, NULL, NULL, 0, 0}
TGC_API tgc_status tgc_data_prep(const tgc_data_prep_args *args, FILE *out);
/* tgc data info PATH, tgc data dump PATH: a dataset (anything --data
 * takes: a prefix, a .idx or .bin, an llm.c token file, a text file), its
 * tokens checked below vocab (when not 0): info prints its format, files,
 * dtype and counts (with documents, each document's token range); dump
 * its tokens start .. start + count - 1 (count -1: to the end), a line per
 * document. */
typedef struct tgc_data_view_args {
    size_t size;
    const char *path;
    int64_t vocab;
    int documents;        /* info: each document's range */
    int64_t start, count; /* dump */
} tgc_data_view_args;
#define TGC_DATA_VIEW_ARGS_INIT {sizeof(tgc_data_view_args), NULL, 0, 0, 0, -1}
TGC_API tgc_status tgc_data_info(const tgc_data_view_args *args, FILE *out);
TGC_API tgc_status tgc_data_dump(const tgc_data_view_args *args, FILE *out);

/* tgc inspect PLAN: a compiled plan read and checked as tgc_plan_load
 * reads it, summarised: the model, its configuration, the ranks, per rank
 * the program (kernels, GEMMs, collectives) and the memory per kind; for
 * a plan of the backend cuda, or given cuda_arch, its CUDA kernels
 * compiled with NVRTC (no GPU needed): each one's registers, spills, stack
 * and shared memory (cached by content hash unless no_kernel_cache). */
typedef struct tgc_inspect_args {
    size_t size;
    const char *plan;
    const char *cuda_arch; /* "sm_90", or NULL: the plan's (sm_80) */
    int no_kernel_cache;
} tgc_inspect_args;
#define TGC_INSPECT_ARGS_INIT {sizeof(tgc_inspect_args), NULL, NULL, 0}
TGC_API tgc_status tgc_inspect(const tgc_inspect_args *args, FILE *out);

/* tgc export CKPT -o FILE.safetensors: a checkpoint's weights (a `tgc run
 * --save` directory's latest or one of its iter_N, its checksums
 * verified), every parameter whole under its name, as one safetensors
 * file. With hf (--format hf): those weights, or a safetensors file of
 * tgc's tensors, of model (the .tg model, with opts' overrides) as a
 * Hugging Face model directory out (config.json, model.safetensors or its
 * shards, the tokenizer's files: the args', else those the weights
 * record), and a line on out saying what was written. */
typedef struct tgc_export_args {
    size_t size;
    const char *ckpt, *out;
    int hf;
    const char *model;
    const char *max_shard_size; /* "5GB" (NULL), "500MB", "2GiB", a number of bytes */
    const char *dtype;          /* "f32", "bf16", "f16", or NULL: the checkpoint's precision */
    const char *tokenizer_type; /* GPT2BPETokenizer or SentencePieceTokenizer, or NULL */
    const char *vocab_file, *merge_file, *tokenizer_model;
} tgc_export_args;
#define TGC_EXPORT_ARGS_INIT {sizeof(tgc_export_args), NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL}
TGC_API tgc_status tgc_export(const tgc_options *opts, const tgc_export_args *args, FILE *out);

/* ---- importing a Hugging Face checkpoint (tgc import hf; docs/checkpoints.md) ---- */

/* What tgc_import_hf made of the checkpoint. */
typedef struct tgc_import_info {
    char model_type[16];     /* config.json's: "gpt2", "llama", "mistral" */
    int64_t layers, hidden, heads, kv_heads, vocab;
    int tied;                /* tied input and output embeddings */
    char tokenizer[32];      /* the tokenizer whose files were copied beside the weights, or "" (none found) */
} tgc_import_info;

/* A Hugging Face checkpoint directory (config.json, model.safetensors and
 * perhaps the tokenizer's files) as a .tg model, model_out, and its
 * weights, weights_out (safetensors, tgc's names), with the tokenizer's
 * files copied beside the weights. Every output is written atomically,
 * none may be an input or each other. info (may be NULL) says what was
 * imported. */
TGC_API tgc_status tgc_import_hf(const char *dir, const char *model_out, const char *weights_out,
                                 tgc_import_info *info);

/* ---- plotting a run's log (tgc plot; docs/tools.md) -------------------------------- */

typedef struct tgc_plot_info {
    int steps;                            /* steps the log holds */
    int loss_points, val_points, lr_points; /* finite points of each curve */
} tgc_plot_info;

/* The training and validation loss and the learning rate of a run's --log
 * (JSON lines) against the step, as an SVG drawn by tgc: written
 * atomically to out, or to standard output when out is "-"; title NULL:
 * "LOG: N steps". info (may be NULL) gets the counts. */
TGC_API tgc_status tgc_plot(const char *log, const char *out, const char *title, tgc_plot_info *info);

#ifdef __cplusplus
}
#endif
#endif
