/* The training loop of `tgc run`: feeds data into the input buffers, runs
 * the compiled step, follows the learning-rate schedule, and reports
 * (progress line, JSON log), with weights exported or imported as
 * safetensors. */
#ifndef TGC_RT_TRAIN_H
#define TGC_RT_TRAIN_H
#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"
#include "runtime/backend/cpu.h"
#include "runtime/exec.h"
#include "runtime/train/schedule.h"
#include "support/diag.h"

typedef struct rt_train_opts {
    int64_t iters, seed, log_interval;
    rt_schedule sched;       /* learning rate and weight decay per step */
    const char *model_path;  /* the model or plan the run was given (an input no output may be) */
    const char *data;        /* text or llm.c tokens -> inputs tokens, labels */
    /* --data-path's words instead of data (giving both is refused): one
     * PATH, or WEIGHT PATH pairs, a blend (runtime/io/blend.h). */
    const char *const *data_path;
    int ndata_path;
    /* --valid-data-path's words (a validation blend of its own, evaluated
     * like --split's part; then split_valid is 0 and data_path holds
     * --train-data-path's words). */
    const char *const *valid_data_path;
    int nvalid_data_path;
    const struct tgc_tokenizer *tokenizer; /* text data through it (NULL: bytes); its vocabulary must fit the model's */
    const char *inputs;      /* safetensors: tensor per input, [N, ...] */
    bool shuffle;
    const char *log_path, *export_path, *export_grads, *init_from;
    bool quiet;              /* no progress line */
    /* --tensorboard-dir (runtime/io/tfevents.h, docs/runtime.md "TensorBoard"):
     * the reporting rank writes Megatron's scalars every
     * tensorboard_log_interval iterations, and with tensorboard_timers the
     * iteration time and throughput every log_interval, with
     * tensorboard_ppl the validation perplexity, with tensorboard_memory
     * the executor's bytes. NULL: no event file. */
    const char *tensorboard_dir;
    int64_t tensorboard_log_interval;
    bool tensorboard_timers, tensorboard_ppl, tensorboard_memory;
    bool comm_stats;         /* print rank 0's communication volume after the run */
    /* fp16 loss scaling (Megatron's DynamicGradScaler): a static scale, or
     * dynamic from initial_loss_scale, x2 after `window` clean steps, x0.5
     * after `hysteresis` overflows, never below min_loss_scale. */
    double loss_scale, initial_loss_scale, min_loss_scale;
    int64_t loss_scale_window, hysteresis;
    rt_cc_options cc;
    rt_backend backend;      /* cpu, or cuda: rank r on device r % devices */
    /* --check-numerics: stop at the first instruction that writes a NaN or
     * an infinity, naming it (with fp16: the forward's only). */
    bool check_numerics;
    bool cuda_graphs; /* --cuda-graphs: capture each run once and replay it (cuda, sim; docs/cuda.md) */
    /* MFU: achieved model FLOP/s against peak_tflops (one device's; on the
     * CPU, the machine's), or against this machine's sgemm rate measured
     * first (calibrate_peak); neither: no MFU, achieved TFLOP/s only. */
    double peak_tflops;
    int64_t memory_limit; /* bytes a rank may allocate (0: no limit) */
    /* Skip comparing what the ranks of this process will allocate with
     * the machine's memory (the cgroup limit, MemAvailable) before they do. */
    bool no_memory_check;
    bool calibrate_peak;
    /* 3D parallelism (runtime/train/pipe.h): the data-parallel degree, the
     * batch sizes (0: the model's batch, one micro-batch per step), the
     * pipeline schedule ("1f1b", "gpipe", "interleaved"); t, p and v come
     * from the compiled graph. */
    int64_t dp, micro_batch, global_batch;
    const char *pipeline_schedule;
    bool dist_opt;
    bool overlap_grad_reduce, overlap_param_gather; /* rt_pipe_opts's */
    const char *trace_path;  /* --trace FILE.json: a Chrome trace of the ranks' steps */
    bool mpi;                /* one process per rank under mpirun (the mpi communicator) */
    /* Checkpoints (runtime/io/checkpoint.h, docs/checkpoints.md): --save DIR
     * every save_interval steps (0: only at the end) and at the end;
     * --load DIR resumes from DIR's latest checkpoint. */
    const char *save_dir, *load_dir;
    int64_t save_interval;
    /* Stopping early (docs/checkpoints.md, "Stopping a run"): with --save
     * the first SIGINT or SIGTERM stops every rank after the same step,
     * saves, and exits 128 + the signal; a second ends the process at
     * once. --exit-interval N stops after an iteration divisible by N,
     * --exit-duration-in-mins M after the first step ending M minutes or
     * more after the run began (saving with --save; status 0). */
    int64_t exit_interval;
    double exit_duration_mins;
    /* --split: the samples' train and valid weights (0, 0: no validation
     * data); every eval_interval steps (0: only after the last) the mean
     * loss of eval_iters global batches of validation data, dropout off. */
    double split_train, split_valid;
    int64_t eval_interval, eval_iters;
} rt_train_opts;

void rt_train_opts_defaults(rt_train_opts *o);
/* "98,2" or "969,30,1" -> the train and valid weights; false if malformed. */
bool rt_parse_split(const char *s, double *train, double *valid);
/* Whether the run evaluates: --split's validation part or --valid-data-path. */
static inline bool rt_train_evaluates(const rt_train_opts *o) { return o->split_valid > 0 || o->nvalid_data_path > 0; }

/* A run of the memory-planned training graph g (the library's trainer,
 * include/tgc.h, which `tgc run` uses: tgc_trainer_run installs the exit
 * signal handler around its steps): rt_trainer_new builds the ranks of
 * this process (with --load's checkpoint and --save's lock); each
 * rt_trainer_steps runs the next n iterations on every rank (rank threads
 * are started for the call and joined before it returns), never past
 * o->iters; rt_trainer_end writes what the run writes at its end
 * (--export, --export-grads, --trace) and frees everything. o is copied;
 * g must outlive the trainer. Errors go to the call's d. */
typedef struct rt_trainer rt_trainer;
struct tgc_step_stats;
rt_trainer *rt_trainer_new(const ir_graph *g, const rt_train_opts *o, diag *d);
/* 0, 1 after reporting (the trainer then runs no further step), or 128 +
 * the signal that stopped it. */
int rt_trainer_steps(rt_trainer *T, int64_t n, diag *d);
/* Iterations done (the checkpoint's, after --load or rt_trainer_load). */
int64_t rt_trainer_iteration(const rt_trainer *T);
int64_t rt_trainer_iters(const rt_trainer *T);
/* Whether the run saves checkpoints (--save): its signals stop it after a save. */
bool rt_trainer_saves(const rt_trainer *T);
/* Whether this process has the run's figures (rt_trainer_stats): in one
 * process, yes; under mpirun or torchrun, the reporting rank's only. */
bool rt_trainer_reports(const rt_trainer *T);
/* The reporting rank's figures of iteration it (1-based), or NULL when it
 * did not run in this trainer. */
const struct tgc_step_stats *rt_trainer_stats(const rt_trainer *T, int64_t it);
/* Tokens one iteration trains on (every micro-batch of every replica). */
int64_t rt_trainer_tokens(const rt_trainer *T);
/* A checkpoint (runtime/io/checkpoint.h) of the state after the last
 * step into dir, and one loaded: the next step is the checkpoint's. */
bool rt_trainer_save(rt_trainer *T, const char *dir, diag *d);
bool rt_trainer_load(rt_trainer *T, const char *dir, diag *d);
/* The run's status: 0, 1 after reporting, 128 + a signal. */
int rt_trainer_end(rt_trainer *T, diag *d);

/* Writes every parameter of a running executor as safetensors. */
struct rt_exec;
bool rt_export_params(const struct rt_exec *e, const char *path, diag *d);
/* Writes the gradient of every parameter, as `grad.NAME`. */
bool rt_export_grads(const struct rt_exec *e, const char *path, diag *d);
bool rt_import_params(struct rt_exec *e, const char *path, diag *d);

#endif
