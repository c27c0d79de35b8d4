/* The training / parallelism configuration of `tgc compile` and `tgc run`,
 * with Megatron-LM's long option names. One table (config.c) declares every
 * option once: its long name, short alias, kind, field, default and help. */
#ifndef TGC_CLI_CONFIG_H
#define TGC_CLI_CONFIG_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

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
    const char *attention_backend; /* --attention-backend auto|tgc|unfused (docs/attention.md) */
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
    const char *backend, *data, *log, *output;
    const char *inputs, *export_path, *export_grads, *init_from;
    const char *save, *load; /* checkpoints (docs/checkpoints.md) */
    const char *split;       /* --split train,valid[,test] weights of the samples */
    int64_t eval_interval, eval_iters;
    int64_t save_interval;   /* --save-interval: steps between checkpoints (0: only at the end) */
    int64_t exit_interval;     /* --exit-interval: stop after an iteration divisible by it (0: never) */
    double exit_duration_mins; /* --exit-duration-in-mins: stop after that long (0: never) */
    bool no_memory_check;      /* --no-memory-check: skip comparing the ranks' need with the machine's memory */
    bool shuffle, no_kernel_cache, quiet, comm_stats;
    const char *cuda_arch; /* compile --kernel-report: NVRTC's target (sm_90); NULL: sm_80 */
    bool kernel_report;    /* compile: the CUDA kernels' registers and spills */
    bool gemm_report;      /* compile: every GEMM's cuBLASLt descriptors */
    /* kernel fusion (docs/fusion.md) */
    const char *fuse; /* --fuse LIST, or NULL: every fusion */
    bool no_fuse, fusion_report;
    bool seen[96]; /* which options the command line gave, by table index */
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

typedef struct strbuf strbuf;
/* The options of use `use` that cli's command line gave and whose values
 * differ from plan's (every one given when plan is NULL), as
 * "--name value (the plan's value)" joined by ", " onto out (which may be
 * NULL); returns how many. */
int tgc_config_changes(const tgc_config *cli, const tgc_config *plan, tgc_opt_use use, strbuf *out);
/* `tgc run --help`'s list of the options by what they do over a plan. */
void tgc_config_plan_usage(FILE *out);
/* The plan format's schema: rt_plan_schema of the keys tgc_config_write
 * writes (a "name kind" line each). */
uint64_t tgc_config_plan_schema(void);
/* Writes the configuration as `name value` lines (every option but paths
 * and tgc compile's own), and reads one such line back; false names an
 * unknown key or bad value. */
void tgc_config_write(const tgc_config *c, strbuf *out);
bool tgc_config_read_line(tgc_config *c, const char *line);
/* Copies into dst the options that src's command line gave explicitly. */
void tgc_config_overlay(tgc_config *dst, const tgc_config *src);
/* Whether the command line gave option `name` (its long name or alias). */
bool tgc_config_given(const tgc_config *c, const char *name);

void tgc_config_defaults(tgc_config *c);

/* Parses argv (argv[0] is the command name) into c; the remaining
 * positional arguments are stored in pos[0..*npos). Model overrides
 * (--set k=v) are collected into sets. Returns 0, or 2 after printing a
 * usage error naming the offending option or value. */
typedef struct fe_override fe_override;
int tgc_config_parse(tgc_config *c, int argc, char **argv, const char **pos, int *npos, int maxpos,
                     fe_override *sets, int *nsets, int maxsets, bool *help);
/* A command that takes some of the table's options (those whose use is in
 * the mask uses, 1 << TGC_USE_..., and those named in only, long names,
 * NULL-terminated; neither: all) and options of its own (extra, ids
 * from TGC_CMDLINE_ID_MIN up to 899), which on_extra applies (0, or 2
 * after a usage error); --set, the model flags and --help always. */
typedef struct cli_opt cli_opt;
enum { TGC_CMDLINE_ID_MIN = 100, TGC_CMDLINE_EXTRA_MAX = 32 };
typedef struct tgc_cmdline {
    const char *const *only;
    const cli_opt *extra;
    int nextra;
    int (*on_extra)(void *user, int id, const char *given, const char *value);
    void *user;
    unsigned uses;
} tgc_cmdline;
int tgc_config_parse_cmd(tgc_config *c, int argc, char **argv, const tgc_cmdline *cl, const char **pos, int *npos,
                         int maxpos, fe_override *sets, int *nsets, int maxsets, bool *help);
/* Cross-option checks (e.g. the global batch divides by micro-batch x dp);
 * returns 0 or 2 after printing the offending values. */
int tgc_config_check(const tgc_config *c);
/* What `tgc run` cannot execute yet although compile accepts it (pipeline
 * parallelism, several micro-batches per step): 0, or 2 after saying so. */
int tgc_config_check_run(const tgc_config *c);
/* The learning-rate and weight-decay schedule the options describe;
 * returns 0, or 2 after printing what is wrong. */
struct rt_schedule;
int tgc_config_schedule(const tgc_config *c, struct rt_schedule *s);
void tgc_config_usage(FILE *out);

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
