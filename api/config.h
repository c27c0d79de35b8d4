/* The training / parallelism configuration of every tgc command and of
 * the library (include/tgc.h), with Megatron-LM's long option names. One
 * table (api/config.c) declares every option once: its long name, short
 * alias, kind, field, default and help; the command line (cli/config.h)
 * and tgc_options_set read it. */
#ifndef TGC_API_CONFIG_H
#define TGC_API_CONFIG_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The table's rows at most (tgc_config.seen). */
#define TGC_CONFIG_NOPTS_MAX 128

typedef struct tgc_config {
    /* parallelism */
    int64_t tp, pp, dp, vp;
    bool sequence_parallel;
    const char *pipeline_schedule;
    int64_t vp_layers;      /* --num-layers-per-virtual-pipeline-stage (0: not given) */
    const char *pp_balance; /* layers or flops */
    bool no_scatter_gather;
    /* batch */
    int64_t micro_batch_size, global_batch_size, train_iters;
    /* optimizer and schedule */
    const char *optimizer;
    double lr, min_lr, weight_decay, clip_grad, adam_beta1, adam_beta2, adam_eps, sgd_momentum;
    int64_t lr_warmup_iters;
    const char *lr_decay_style;
    /* schedules and parameter groups (docs/schedules.md) */
    double sgd_dampening, lr_warmup_init, start_weight_decay, end_weight_decay; /* start/end: -1 = unset */
    bool sgd_nesterov;
    int64_t lr_decay_iters, lr_wsd_decay_iters; /* lr_decay_iters 0: --train-iters */
    const char *lr_wsd_decay_style, *weight_decay_incr_style;
    const char *lr_scheduler; /* PyTorch schedulers, or NULL for Megatron's */
    const char *param_groups; /* every --param-group, joined by ';', or NULL */
    /* numerics and memory */
    bool fp16, bf16;
    double loss_scale, initial_loss_scale, min_loss_scale;
    int64_t loss_scale_window, hysteresis;
    const char *recompute_granularity, *recompute_method;
    const char *attention_backend; /* --attention-backend auto|tgc|cudnn|unfused (docs/attention.md) */
    bool no_attention_inplace;     /* --no-attention-inplace: the attention pass keeps q/k/v/output layout copies */
    bool no_fused_lm_head;         /* --no-fused-lm-head: the lmhead pass off */
    int64_t lm_head_chunk;         /* --lm-head-chunk N: vocabulary rows per chunk (0: the rule) */
    int64_t recompute_num_layers;
    bool use_distributed_optimizer; /* optimizer state sharded over the d replicas */
    int64_t ddp_bucket_size;        /* gradient elements per data-parallel bucket (0: 40 MiB) */
    bool overlap_grad_reduce;       /* run: bucket reductions on a communication thread */
    bool overlap_param_gather;      /* run: the dist-opt all-gather on a communication thread */
    const char *trace;              /* --trace FILE.json (run) */
    const char *comm;               /* --comm auto|local|mpi (run) */
    double memory_limit_gib;        /* --memory-limit: GiB a rank may allocate (0: no limit) */
    double peak_tflops;             /* a GPU's peak for the planner and MFU (0: measured or default) */
    bool calibrate_peak;            /* run: measure this machine's sgemm peak for MFU */
    bool check_numerics;            /* run: stop at the first op that writes a NaN or an infinity */
    /* run */
    int64_t seed, log_interval;
    const char *backend, *log, *output;
    const char *cuda_graphs;        /* run: --cuda-graphs auto|on|off (docs/cuda.md) */
    const char *const *data_path; /* --data-path's words (PATH, or WEIGHT PATH pairs), NULL-terminated */
    /* Megatron's per-split blends, words as data_path's (docs/data.md) */
    const char *const *train_data_path, *const *valid_data_path;
    const char *inputs, *export_path, *export_grads, *init_from;
    const char *save, *load; /* checkpoints (docs/checkpoints.md) */
    const char *split;       /* --split train,valid[,test] weights of the samples */
    /* tokenizer (tokenizer/tokenizer.h): text data (run) and prompts (sample) */
    const char *tokenizer_type, *vocab_file, *merge_file, *tokenizer_model;
    int64_t eval_interval, eval_iters;
    int64_t save_interval;   /* --save-interval: steps between checkpoints (0: only at the end) */
    int64_t exit_interval;     /* --exit-interval: stop after an iteration divisible by it (0: never) */
    double exit_duration_mins; /* --exit-duration-in-mins: stop after that long (0: never) */
    bool no_memory_check;      /* --no-memory-check: skip comparing the ranks' need with the machine's memory */
    bool shuffle, no_kernel_cache, quiet, comm_stats;
    /* TensorBoard (docs/runtime.md, "TensorBoard"): the event files' directory
     * (NULL: none), steps between training scalars, and Megatron's switches */
    const char *tensorboard_dir;
    int64_t tensorboard_log_interval;
    bool log_timers_to_tensorboard, log_validation_ppl_to_tensorboard, log_memory_to_tensorboard;
    const char *cuda_arch; /* compile --kernel-report: NVRTC's target (sm_90); NULL: sm_80 */
    bool kernel_report;    /* compile: the CUDA kernels' registers and spills */
    bool gemm_report;      /* compile: every GEMM's cuBLASLt descriptors */
    /* kernel fusion (docs/fusion.md) */
    const char *fuse; /* --fuse LIST, or NULL: every fusion */
    bool no_fuse, fusion_report;
    bool seen[TGC_CONFIG_NOPTS_MAX]; /* which options the command line gave, by table index */
} tgc_config;

/* What `tgc run PLAN` does with an option the command line gives (the
 * option table's last column; `tgc run --help` lists the four groups,
 * docs/runtime.md "Plans"). */
typedef enum tgc_opt_use {
    TGC_USE_UNSET,   /* a row without one: a programmer error */
    TGC_USE_RUNTIME, /* read by the runtime: applies over the plan's value */
    TGC_USE_PASSES,  /* read by the passes: the plan is recompiled from its lowered IR */
    TGC_USE_MODEL,   /* changes the model (its hyperparameters): refused when it differs from the plan's */
    TGC_USE_COMPILE, /* an option of tgc compile: tgc run refuses it */
} tgc_opt_use;

/* TGC_OPT_SPEC: text that belongs to the plan (written to it, unlike a
 * path); TGC_OPT_LIST: repeatable, the values joined by ';';
 * TGC_OPT_WORDS: paths, the value and (on the command line) every later
 * argument up to the next option (Megatron's nargs='*'), a NULL-terminated
 * array: tgc_config_set_to sets one word, tgc_config_set_words several. */
typedef enum { TGC_OPT_INT, TGC_OPT_FLOAT, TGC_OPT_FLAG, TGC_OPT_STR, TGC_OPT_CHOICE, TGC_OPT_SPEC, TGC_OPT_LIST,
               TGC_OPT_WORDS } tgc_opt_kind;

typedef struct tgc_opt_def {
    const char *name;    /* Megatron-LM's long name */
    const char *alias;   /* short alias or NULL */
    tgc_opt_kind kind;
    size_t offset;
    const char *const *choices; /* TGC_OPT_CHOICE: the words, NULL-terminated */
    const char *help;
    tgc_opt_use use; /* what tgc run does with it over a plan */
} tgc_opt_def;

/* The table: its rows, row i, and the row of a long name or alias (-1). */
int tgc_config_nopts(void);
const tgc_opt_def *tgc_config_opt_at(int i);
int tgc_config_opt_find(const char *name);
/* Sets row i's option from its text (a flag: any value sets it) and marks
 * it given; 0, or 2 after writing "tgc: error: --NAME: 'VALUE' is not
 * ..." to err (NULL: nothing is written). */
int tgc_config_set_to(tgc_config *c, int i, const char *value, FILE *err);
/* Option i, of kind TGC_OPT_WORDS, set to words[0..n) (kept, not copied). */
void tgc_config_set_words(tgc_config *c, int i, const char *const *words, int n);
/* A flag given as false (the library's tgc_options_set(o, "fp16", "false")). */
void tgc_config_unset_flag(tgc_config *c, int i);
/* s (malloc'd), kept until the process ends, as configurations' strings are. */
const char *tgc_config_keep(char *s);


typedef struct strbuf strbuf;
/* The options of use `use` that cli's command line gave and whose values
 * differ from plan's (every one given when plan is NULL), as
 * "--name value (the plan's value)" joined by ", " onto out (which may be
 * NULL); returns how many. */
int tgc_config_changes(const tgc_config *cli, const tgc_config *plan, tgc_opt_use use, strbuf *out);
/* The plan format's schema: rt_plan_schema of the keys tgc_config_write
 * writes (a "name kind" line each). */
uint64_t tgc_config_plan_schema(void);
/* Writes the configuration as `name value` lines (every option but paths
 * and tgc compile's own), and reads one such line back; false names an
 * unknown key or bad value. */
void tgc_config_write(const tgc_config *c, strbuf *out);
bool tgc_config_read_line(tgc_config *c, const char *line);
/* Row i's value in c as text onto out (a flag "true"/"false", a number as
 * the plans write it, words joined by spaces); false (nothing written) for
 * a string or words that are not set. */
bool tgc_config_value_text(const tgc_config *c, int i, strbuf *out);
/* Row i back to its default, not given. */
void tgc_config_reset(tgc_config *c, int i);
/* Copies into dst the options that src's command line gave explicitly. */
void tgc_config_overlay(tgc_config *dst, const tgc_config *src);
/* Whether the command line gave option `name` (its long name or alias). */
bool tgc_config_given(const tgc_config *c, const char *name);

void tgc_config_defaults(tgc_config *c);

/* Cross-option checks (e.g. the global batch divides by micro-batch x dp);
 * returns 0 or 2 after printing the offending values. */
int tgc_config_check(const tgc_config *c);
int tgc_config_check_to(const tgc_config *c, FILE *err);
/* What `tgc run` cannot execute yet although compile accepts it (pipeline
 * parallelism, several micro-batches per step): 0, or 2 after saying so. */
int tgc_config_check_run(const tgc_config *c);
int tgc_config_check_run_to(const tgc_config *c, FILE *err);
/* The learning-rate and weight-decay schedule the options describe;
 * returns 0, or 2 after printing what is wrong. */
struct rt_schedule;
int tgc_config_schedule(const tgc_config *c, struct rt_schedule *s);
int tgc_config_schedule_to(const tgc_config *c, struct rt_schedule *s, FILE *err);

/* The options of the passes (parallel degrees, optimizer, precision,
 * fusion, pipeline, recomputation) as the configuration gives them. */
struct pass_options;
void tgc_config_pass_options(const tgc_config *c, struct pass_options *po);
/* The options c was given (seen) that the IR's passes line records, one
 * entry per recorded key they set (a table next to the option table):
 * for pass_ctx.given. At most TGC_CONFIG_GIVEN_MAX; returns how many. */
#define TGC_CONFIG_GIVEN_MAX 64
struct pass_given;
int tgc_config_pass_given(const tgc_config *c, struct pass_given *out, int max);
/* Runs every pass on g with the configuration's options (verifying after
 * each when verify; after, if not NULL, is called after each: TGC_DEBUG's
 * dumps). false after reporting to d. */
struct ir_graph;
struct diag;
bool tgc_config_run_passes(struct ir_graph *g, const tgc_config *c, bool verify,
                           void (*after)(const char *name, const struct ir_graph *g, void *user), struct diag *d);

#endif
