/* The option table of every tgc command and of the library (include/tgc.h):
 * one row per option (Megatron-LM's long name, alias, kind, field, help,
 * what tgc run does with it over a plan), the configuration's defaults,
 * its checks, its plan form, and the pass options it gives. The command
 * line's scanner (cli/config.c) and tgc_options_set (api/api.c) both set
 * options through tgc_config_set_to, so they cannot drift. Errors go to
 * the FILE given (the _to functions) or standard error. */
#include "api/config.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "passes/pass.h"
#include "runtime/plan.h"
#include "runtime/train/schedule.h"
#include "support/util.h"


typedef tgc_opt_def opt_def;
#define OPT_INT TGC_OPT_INT
#define OPT_FLOAT TGC_OPT_FLOAT
#define OPT_FLAG TGC_OPT_FLAG
#define OPT_STR TGC_OPT_STR
#define OPT_CHOICE TGC_OPT_CHOICE
#define OPT_SPEC TGC_OPT_SPEC
#define OPT_LIST TGC_OPT_LIST
#define OPT_WORDS TGC_OPT_WORDS

#define F(field) offsetof(tgc_config, field)
#define CH(...) ((const char *const[]){__VA_ARGS__, NULL})
#define UNSET_WD (-1.0) /* --start/--end-weight-decay not given */
/* The table's last column, tgc_opt_use. */
#define RUN TGC_USE_RUNTIME
#define PASSES TGC_USE_PASSES
#define MODEL TGC_USE_MODEL
#define COMPILE TGC_USE_COMPILE

/* Strings a configuration makes (joined --param-group values, a plan's
 * --lr-scheduler) live as long as the process, like argv: configurations
 * are copied by value. They are freed at exit. */
static char **kept;
static size_t nkept;

static void kept_free(void)
{
    for (size_t i = 0; i < nkept; i++) free(kept[i]);
    free(kept);
}

static char *keep(char *s)
{
    if (!kept) atexit(kept_free);
    kept = xrealloc(kept, (nkept + 1) * sizeof *kept);
    return kept[nkept++] = s;
}

static const opt_def opts[] = {
    {"tensor-model-parallel-size", "tp", OPT_INT, F(tp), NULL, "tensor-parallel degree t", PASSES},
    {"pipeline-model-parallel-size", "pp", OPT_INT, F(pp), NULL, "pipeline-parallel degree p", PASSES},
    {"data-parallel-size", "dp", OPT_INT, F(dp), NULL, "data-parallel degree d", PASSES},
    {"num-virtual-stages-per-pipeline-rank", "vp", OPT_INT, F(vp), NULL,
     "model chunks per pipeline rank v (interleaved)", PASSES},
    {"num-layers-per-virtual-pipeline-stage", NULL, OPT_INT, F(vp_layers), NULL,
     "layers per model chunk N, Megatron's way to ask for v = layers / (p N) chunks per rank (0: not given)", PASSES},
    {"sequence-parallel", NULL, OPT_FLAG, F(sequence_parallel), NULL, "split norms/dropout along the sequence", PASSES},
    {"pipeline-schedule", NULL, OPT_CHOICE, F(pipeline_schedule), CH("1f1b", "gpipe", "interleaved"),
     "pipeline schedule", PASSES},
    {"pp-balance", NULL, OPT_CHOICE, F(pp_balance), CH("layers", "flops"),
     "pipeline chunks of equal layer counts, or of equal forward FLOPs", PASSES},
    {"no-scatter-gather", NULL, OPT_FLAG, F(no_scatter_gather), NULL,
     "with --tp, send whole activations between pipeline stages (no scatter-gather)", PASSES},
    {"micro-batch-size", NULL, OPT_INT, F(micro_batch_size), NULL, "sequences per micro-batch b", MODEL},
    {"global-batch-size", NULL, OPT_INT, F(global_batch_size), NULL, "sequences per iteration B", PASSES},
    {"train-iters", NULL, OPT_INT, F(train_iters), NULL, "training iterations", RUN},
    {"optimizer", NULL, OPT_CHOICE, F(optimizer), CH("adamw", "adam", "sgd"), "optimizer", PASSES},
    {"lr", NULL, OPT_FLOAT, F(lr), NULL, "peak learning rate", RUN},
    {"min-lr", NULL, OPT_FLOAT, F(min_lr), NULL, "final learning rate", RUN},
    {"lr-decay-style", NULL, OPT_CHOICE, F(lr_decay_style),
     CH("constant", "linear", "cosine", "inverse-square-root", "WSD"), "learning-rate decay after the warm-up", RUN},
    {"lr-warmup-iters", NULL, OPT_INT, F(lr_warmup_iters), NULL, "linear warm-up iterations", RUN},
    {"lr-warmup-init", NULL, OPT_FLOAT, F(lr_warmup_init), NULL, "learning rate at the start of the warm-up", RUN},
    {"lr-decay-iters", NULL, OPT_INT, F(lr_decay_iters), NULL, "iterations to reach --min-lr (0: --train-iters)", RUN},
    {"lr-wsd-decay-style", NULL, OPT_CHOICE, F(lr_wsd_decay_style),
     CH("exponential", "linear", "cosine", "minus_sqrt"), "decay of WSD's final phase", RUN},
    {"lr-wsd-decay-iters", NULL, OPT_INT, F(lr_wsd_decay_iters), NULL, "length of WSD's final decay phase", RUN},
    {"lr-scheduler", NULL, OPT_SPEC, F(lr_scheduler), NULL,
     "PyTorch schedulers instead of Megatron's, e.g. \"linear(total_iters=100) then cosine(T_max=900) at 100\" "
     "(docs/schedules.md)", RUN},
    {"weight-decay", NULL, OPT_FLOAT, F(weight_decay), NULL, "weight decay", PASSES},
    {"start-weight-decay", NULL, OPT_FLOAT, F(start_weight_decay), NULL, "weight decay at the first iteration", RUN},
    {"end-weight-decay", NULL, OPT_FLOAT, F(end_weight_decay), NULL, "weight decay at --train-iters", RUN},
    {"weight-decay-incr-style", NULL, OPT_CHOICE, F(weight_decay_incr_style), CH("constant", "linear", "cosine"),
     "weight-decay increase from start to end", RUN},
    {"param-group", NULL, OPT_LIST, F(param_groups), NULL,
     "GLOB:lr_mult=X,wd_mult=Y: multipliers for the parameters matching GLOB (repeatable; docs/schedules.md)", PASSES},
    {"clip-grad", NULL, OPT_FLOAT, F(clip_grad), NULL, "global gradient-norm clip (0 = off)", PASSES},
    {"adam-beta1", NULL, OPT_FLOAT, F(adam_beta1), NULL, "Adam beta1", PASSES},
    {"adam-beta2", NULL, OPT_FLOAT, F(adam_beta2), NULL, "Adam beta2", PASSES},
    {"adam-eps", NULL, OPT_FLOAT, F(adam_eps), NULL, "Adam epsilon", PASSES},
    {"sgd-momentum", NULL, OPT_FLOAT, F(sgd_momentum), NULL, "SGD momentum", PASSES},
    {"sgd-dampening", NULL, OPT_FLOAT, F(sgd_dampening), NULL, "SGD dampening of the momentum", PASSES},
    {"sgd-nesterov", NULL, OPT_FLAG, F(sgd_nesterov), NULL, "SGD with Nesterov momentum", PASSES},
    {"fp16", NULL, OPT_FLAG, F(fp16), NULL, "fp16 mixed precision", PASSES},
    {"bf16", NULL, OPT_FLAG, F(bf16), NULL, "bf16 mixed precision", PASSES},
    {"loss-scale", NULL, OPT_FLOAT, F(loss_scale), NULL, "fp16: a static loss scale (default: dynamic)", RUN},
    {"initial-loss-scale", NULL, OPT_FLOAT, F(initial_loss_scale), NULL, "fp16: the dynamic scale's start (2^32)", RUN},
    {"min-loss-scale", NULL, OPT_FLOAT, F(min_loss_scale), NULL, "fp16: the dynamic scale's floor (1)", RUN},
    {"loss-scale-window", NULL, OPT_INT, F(loss_scale_window), NULL,
     "fp16: clean steps before the scale doubles (1000)", RUN},
    {"hysteresis", NULL, OPT_INT, F(hysteresis), NULL, "fp16: overflows before the scale halves (2)", RUN},
    {"recompute-granularity", NULL, OPT_CHOICE, F(recompute_granularity), CH("none", "full", "selective"),
     "activation recomputation", PASSES},
    {"recompute-method", NULL, OPT_CHOICE, F(recompute_method), CH("uniform", "block"),
     "which layers full recomputation covers", PASSES},
    {"recompute-num-layers", NULL, OPT_INT, F(recompute_num_layers), NULL, "layers per recomputed group", PASSES},
    {"attention-backend", NULL, OPT_CHOICE, F(attention_backend), CH("auto", "tgc", "cudnn", "unfused"),
     "what runs attention: auto, tgc and cudnn fuse each bmm/scale/softmax/dropout/bmm chain into one attention op "
     "(flash-attention style: no s x s scores kept), run by tgc's kernels or cuDNN's (cudnn; auto where cuDNN "
     "takes the op on --backend cuda), unfused keeps the chain (docs/attention.md)", PASSES},
    {"no-attention-inplace", NULL, OPT_FLAG, F(no_attention_inplace), NULL,
     "keep the layout copies around fused attention: q, k and v permuted to [b, heads, s, d] and the output "
     "permuted back, instead of read and written in place in [s, b, heads, d] (docs/attention.md, \"Layouts\")",
     PASSES},
    {"no-fused-lm-head", NULL, OPT_FLAG, F(no_fused_lm_head), NULL,
     "keep the LM head and its cross-entropy apart (the [tokens, vocab] logits stored whole; docs/fusion.md)",
     PASSES},
    {"lm-head-chunk", NULL, OPT_INT, F(lm_head_chunk), NULL,
     "vocabulary rows per chunk of the fused LM head and loss (0: the rule of docs/fusion.md)", PASSES},
    {"use-distributed-optimizer", NULL, OPT_FLAG, F(use_distributed_optimizer), NULL,
     "shard the optimizer state over the data-parallel replicas (ZeRO-1)", PASSES},
    {"ddp-bucket-size", NULL, OPT_INT, F(ddp_bucket_size), NULL,
     "gradient elements per data-parallel reduction bucket (0: 40 MiB of them; docs/pipeline.md)", PASSES},
    {"overlap-grad-reduce", NULL, OPT_FLAG, F(overlap_grad_reduce), NULL,
     "run each gradient bucket's data-parallel reduction on a communication thread while the backward goes on",
     RUN},
    {"overlap-param-gather", NULL, OPT_FLAG, F(overlap_param_gather), NULL,
     "with --use-distributed-optimizer: all-gather the updated parameters on a communication thread, waited "
     "for before they are next read", RUN},
    {"memory-limit", NULL, OPT_FLOAT, F(memory_limit_gib), NULL,
     "GiB a rank may allocate; a plan that needs more is refused before anything runs (0 = no limit)", RUN},
    {"peak-tflops", NULL, OPT_FLOAT, F(peak_tflops), NULL,
     "a GPU's peak TFLOP/s, for tgc plan's step times and tgc run's MFU (plan's default: --calibrate or an "
     "A100's 312; run's: no MFU; on the CPU, the machine's peak)", RUN},
    {"calibrate-peak", NULL, OPT_FLAG, F(calibrate_peak), NULL,
     "run: time this machine's sgemm first (seconds) and report MFU against its best rate (CPU backend)", RUN},
    {"check-numerics", NULL, OPT_FLAG, F(check_numerics), NULL,
     "run: after every kernel, GEMM and collective, scan what it wrote for NaN/inf and stop at the first, naming "
     "the op and its .tg line (with --fp16: the forward only; docs/runtime.md)", RUN},
    {"seed", NULL, OPT_INT, F(seed), NULL, "seed of initialisation, dropout and data order", RUN},
    {"log-interval", NULL, OPT_INT, F(log_interval), NULL, "iterations between log lines", RUN},
    {"backend", NULL, OPT_CHOICE, F(backend), CH("cpu", "sim", "cuda"),
     "where kernels run: cpu, sim (the device simulator: cpu's kernels on memory only the backend may touch), cuda", RUN},
    {"cuda-graphs", NULL, OPT_CHOICE, F(cuda_graphs), CH("auto", "on", "off"),
     "capture each run of a step once as a CUDA graph and replay it (auto: on with --backend cuda; on: also "
     "sim, which models it; docs/cuda.md)", RUN},
    {"cuda-arch", NULL, OPT_STR, F(cuda_arch), NULL,
     "GPU architecture compile --kernel-report compiles the CUDA kernels for (default sm_80); tgc run takes "
     "the device's", COMPILE},
    {"gemm-report", NULL, OPT_FLAG, F(gemm_report), NULL,
     "compile with --backend cuda: print every GEMM's cuBLASLt descriptors and epilogue (no GPU needed; -o optional)",
     COMPILE},
    {"kernel-report", NULL, OPT_FLAG, F(kernel_report), NULL,
     "compile with --backend cuda: NVRTC-compile the kernels and print registers and spills per kernel "
     "(no GPU needed; -o optional)", COMPILE},
    {"data-path", "data", OPT_WORDS, F(data_path), NULL,
     "training data: a Megatron dataset PREFIX, an llm.c .bin token file or a text file, or a blend of them, "
     "WEIGHT PATH WEIGHT PATH ... (weights normalised) or PATH PATH ... (weighted by their sizes, one pass) "
     "(Megatron's; docs/data.md)", RUN},
    {"train-data-path", NULL, OPT_WORDS, F(train_data_path), NULL,
     "the training data alone, as --data-path takes it, each dataset whole (Megatron's per-split blend; "
     "with --valid-data-path, not with --data-path or --split)", RUN},
    {"valid-data-path", NULL, OPT_WORDS, F(valid_data_path), NULL,
     "the validation data, as --data-path takes it, each dataset whole, evaluated as --split's part is "
     "(--eval-interval, --eval-iters); needs --train-data-path", RUN},
    {"tokenizer-type", NULL, OPT_STR, F(tokenizer_type), NULL,
     "run and sample: the tokenizer of text data and prompts: ByteTokenizer (the default), GPT2BPETokenizer "
     "(--vocab-file, --merge-file) or SentencePieceTokenizer (--tokenizer-model) (docs/data.md)", RUN},
    {"vocab-file", NULL, OPT_STR, F(vocab_file), NULL, "GPT2BPETokenizer's vocab.json", RUN},
    {"merge-file", NULL, OPT_STR, F(merge_file), NULL, "GPT2BPETokenizer's merges.txt", RUN},
    {"tokenizer-model", NULL, OPT_STR, F(tokenizer_model), NULL, "SentencePieceTokenizer's .model file", RUN},
    {"log", NULL, OPT_STR, F(log), NULL, "JSON-lines log file", RUN},
    {"tensorboard-dir", NULL, OPT_STR, F(tensorboard_dir), NULL,
     "run: write a TensorBoard event file into this directory (made if missing): the loss, learning rate, batch "
     "size, gradient norm, loss scale and validation loss under Megatron's tags (docs/runtime.md, \"TensorBoard\")", RUN},
    {"tensorboard-log-interval", NULL, OPT_INT, F(tensorboard_log_interval), NULL,
     "with --tensorboard-dir: iterations between the training scalars (1)", RUN},
    {"log-timers-to-tensorboard", NULL, OPT_FLAG, F(log_timers_to_tensorboard), NULL,
     "with --tensorboard-dir: iteration-time and throughput every --log-interval iterations", RUN},
    {"log-validation-ppl-to-tensorboard", NULL, OPT_FLAG, F(log_validation_ppl_to_tensorboard), NULL,
     "with --tensorboard-dir and validation data: the validation perplexity too", RUN},
    {"log-memory-to-tensorboard", NULL, OPT_FLAG, F(log_memory_to_tensorboard), NULL,
     "with --tensorboard-dir: the bytes the reporting rank's executor allocated", RUN},
    {"inputs", NULL, OPT_STR, F(inputs), NULL, "per-step input tensors (safetensors, [N, ...] per input)", RUN},
    {"shuffle", NULL, OPT_FLAG, F(shuffle), NULL, "shuffle the samples (deterministic under --seed)", RUN},
    {"export", NULL, OPT_STR, F(export_path), NULL, "write the trained parameters (safetensors)", RUN},
    {"export-grads", NULL, OPT_STR, F(export_grads), NULL, "write the gradients of the last step (safetensors)", RUN},
    {"init-from", NULL, OPT_STR, F(init_from), NULL, "initialise parameters from a safetensors file", RUN},
    {"save", NULL, OPT_STR, F(save), NULL,
     "write checkpoints to DIR (DIR/iter_N, DIR/latest; atomic, any partition loads them; docs/checkpoints.md)", RUN},
    {"save-interval", NULL, OPT_INT, F(save_interval), NULL,
     "with --save: a checkpoint every N iterations and at the end (0: only at the end)", RUN},
    {"exit-interval", NULL, OPT_INT, F(exit_interval), NULL,
     "run: stop after an iteration divisible by N, saving a checkpoint with --save (0: never)", RUN},
    {"exit-duration-in-mins", NULL, OPT_FLOAT, F(exit_duration_mins), NULL,
     "run: stop after the first step that ends M minutes (may be fractional) or more into training, saving a "
     "checkpoint with --save (0: never)", RUN},
    {"no-memory-check", NULL, OPT_FLAG, F(no_memory_check), NULL,
     "run: start even when the ranks need more memory than this machine has available (the memory cgroup's "
     "limit, MemAvailable)", RUN},
    {"split", NULL, OPT_STR, F(split), NULL,
     "run: train,valid weights of the data's samples, e.g. 98,2 (Megatron's --split; a third, test, part is "
     "accepted and left out)", RUN},
    {"eval-interval", NULL, OPT_INT, F(eval_interval), NULL,
     "run: steps between validation losses (0: only after the last step; needs --split)", RUN},
    {"eval-iters", NULL, OPT_INT, F(eval_iters), NULL, "run: global batches of validation data per evaluation", RUN},
    {"load", NULL, OPT_STR, F(load), NULL,
     "resume from the latest checkpoint in DIR (or an iter_N directory): weights, optimizer state, step, loss scale",
     RUN},
    {"no-kernel-cache", NULL, OPT_FLAG, F(no_kernel_cache), NULL, "compile kernels afresh, bypassing the cache", RUN},
    {"quiet", NULL, OPT_FLAG, F(quiet), NULL, "no progress line", RUN},
    {"comm", NULL, OPT_CHOICE, F(comm), CH("auto", "local", "mpi"),
     "run: the communicator: local (a thread per rank), mpi (a process per rank under mpirun); auto: mpi when "
     "mpirun started tgc", RUN},
    {"trace", NULL, OPT_STR, F(trace), NULL,
     "run: write a Chrome trace (Perfetto) of every rank's forwards, backwards, sends, receives, reductions and updates",
     RUN},
    {"comm-stats", NULL, OPT_FLAG, F(comm_stats), NULL, "print the bytes each collective moved per rank", RUN},
    {"fuse", NULL, OPT_SPEC, F(fuse), NULL,
     "the kernel fusions to make, a comma list of bias_gelu, bias_dropout_add, softmax, elementwise, all, none "
     "(default all; docs/fusion.md)", PASSES},
    {"no-fuse", NULL, OPT_FLAG, F(no_fuse), NULL, "no kernel fusion (--fuse none)", PASSES},
    {"fusion-report", NULL, OPT_FLAG, F(fusion_report), NULL,
     "compile: print the kernels per step and the activation bytes they move, without and with fusion "
     "(-o optional)", COMPILE},
    {"output", "o", OPT_STR, F(output), NULL, "output file", COMPILE},
};
_Static_assert(ARRAY_LEN(opts) <= sizeof(((tgc_config *)0)->seen), "tgc_config.seen is too small for the table");

/* What each option a pass reads sets, by the key the IR's passes line
 * records (passes/pass_record.def): given for IR whose pass is recorded,
 * it must make the recorded value (pass_run_list; docs/ir.md, "The record
 * of passes"). Every PASSES option has a row (tgc_config_defaults checks),
 * and --micro-batch-size, which the schedule reads. */
static const struct recorded_opt {
    const char *option, *pass, *key;
} recorded[] = {
    {"tensor-model-parallel-size", "tp", "t"},
    {"sequence-parallel", "sp", "sequence_parallel"},
    {"pipeline-model-parallel-size", "pp", "p"},
    {"num-virtual-stages-per-pipeline-rank", "pp", "v"},
    {"num-virtual-stages-per-pipeline-rank", "schedule", "v"},
    {"num-layers-per-virtual-pipeline-stage", "pp", "vp_layers"},
    {"pipeline-schedule", "pp", "schedule"},
    {"pipeline-schedule", "schedule", "schedule"},
    {"pp-balance", "pp", "balance_flops"},
    {"no-scatter-gather", "pp", "no_scatter_gather"},
    {"data-parallel-size", "schedule", "dp"},
    {"data-parallel-size", "optimizer", "dist_opt"},
    {"global-batch-size", "schedule", "global_batch"},
    {"micro-batch-size", "schedule", "micro_batch"}, /* a MODEL option the schedule counts with too */
    {"optimizer", "optimizer", "optimizer"},
    {"weight-decay", "optimizer", "weight_decay"},
    {"param-group", "optimizer", "param_groups"},
    {"clip-grad", "optimizer", "clip_grad"},
    {"adam-beta1", "optimizer", "beta1"},
    {"adam-beta2", "optimizer", "beta2"},
    {"adam-eps", "optimizer", "eps"},
    {"sgd-momentum", "optimizer", "momentum"},
    {"sgd-dampening", "optimizer", "dampening"},
    {"sgd-nesterov", "optimizer", "nesterov"},
    {"fp16", "fuse", "precision"},
    {"fp16", "optimizer", "precision"},
    {"bf16", "fuse", "precision"},
    {"bf16", "optimizer", "precision"},
    {"attention-backend", "attention", "backend"},
    {"no-attention-inplace", "attention", "inplace"},
    {"no-fused-lm-head", "lmhead", "fused"},
    {"lm-head-chunk", "lmhead", "chunk"},
    {"recompute-granularity", "recompute", "granularity"},
    {"recompute-method", "recompute", "block"},
    {"recompute-num-layers", "recompute", "layers"},
    {"use-distributed-optimizer", "optimizer", "dist_opt"},
    {"ddp-bucket-size", "schedule", "bucket"},
    {"fuse", "fuse", "fuse"},
    {"no-fuse", "fuse", "fuse"},
};
_Static_assert(ARRAY_LEN(recorded) <= TGC_CONFIG_GIVEN_MAX, "TGC_CONFIG_GIVEN_MAX is below the mapping's rows");
#undef RUN
#undef PASSES
#undef MODEL
#undef COMPILE

static int opt_index(const char *name);

static bool recorded_key_exists(const struct recorded_opt *r)
{
    for (int k = 0; k < ir_pass_nkeys; k++)
        if (strcmp(ir_pass_keys[k].pass, r->pass) == 0 && strcmp(ir_pass_keys[k].key, r->key) == 0) return true;
    return false;
}

/* The mapping's invariants: every PASSES option has a row, every row names
 * an option and a recorded key, and one option's rows are adjacent
 * (pass_run_list reports an option once). */
static void recorded_check(void)
{
    for (size_t i = 0; i < ARRAY_LEN(opts); i++) {
        bool has = false;
        for (size_t j = 0; j < ARRAY_LEN(recorded); j++) has |= strcmp(recorded[j].option, opts[i].name) == 0;
        TGC_ASSERT(has || opts[i].use != TGC_USE_PASSES);
    }
    for (size_t j = 0; j < ARRAY_LEN(recorded); j++) {
        TGC_ASSERT(recorded_key_exists(&recorded[j]));
        (void)opt_index(recorded[j].option);
        if (j == 0 || strcmp(recorded[j].option, recorded[j - 1].option) == 0) continue;
        for (size_t k = 0; k < j; k++) TGC_ASSERT(strcmp(recorded[j].option, recorded[k].option) != 0);
    }
}

void tgc_config_defaults(tgc_config *c)
{
    /* Every row says what tgc run does with it over a plan: never ignored. */
    for (size_t i = 0; i < ARRAY_LEN(opts); i++) TGC_ASSERT(opts[i].use != TGC_USE_UNSET);
    recorded_check();
    memset(c, 0, sizeof *c);
    c->tp = c->pp = c->dp = c->vp = 1;
    c->pipeline_schedule = "1f1b";
    c->comm = "auto";
    c->eval_iters = 10;
    c->pp_balance = "layers";
    c->micro_batch_size = 0; /* 0: the model's batch hyperparameter */
    c->global_batch_size = 0;
    c->train_iters = 100;
    c->optimizer = "adamw";
    c->lr = 1e-3;
    c->min_lr = 0.0;
    c->lr_decay_style = "constant";
    c->lr_wsd_decay_style = "exponential";
    c->weight_decay = 0.1;
    c->start_weight_decay = c->end_weight_decay = UNSET_WD;
    c->weight_decay_incr_style = "constant";
    c->clip_grad = 1.0;
    c->adam_beta1 = 0.9;
    c->adam_beta2 = 0.95;
    c->adam_eps = 1e-8;
    c->recompute_granularity = "none";
    c->attention_backend = "auto";
    c->initial_loss_scale = 4294967296.0;
    c->min_loss_scale = 1.0;
    c->loss_scale_window = 1000;
    c->hysteresis = 2;
    c->recompute_method = "uniform";
    c->recompute_num_layers = 1;
    c->seed = 1234;
    c->log_interval = 1;
    c->tensorboard_log_interval = 1;
    c->backend = "cpu";
    c->cuda_graphs = "auto";
}

/* The table's own copy of the word v (static lifetime), or NULL. */
static const char *choice_find(const char *const *choices, const char *v)
{
    for (int i = 0; choices[i]; i++)
        if (strcmp(choices[i], v) == 0) return choices[i];
    return NULL;
}

static void choices_str(const char *const *choices, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; choices[i] && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? "|" : "", choices[i]);
}

/* The integer options whose 0 (the default's sentinel for some) would
 * mean nothing when given: sizes, degrees and counts that must be >= 1. */
static bool int_positive(const char *name)
{
    static const char *const names[] = {"tensor-model-parallel-size", "pipeline-model-parallel-size",
                                        "data-parallel-size", "num-virtual-stages-per-pipeline-rank",
                                        "num-layers-per-virtual-pipeline-stage", "micro-batch-size",
                                        "global-batch-size", "loss-scale-window", "hysteresis",
                                        "recompute-num-layers", "log-interval", "eval-iters", NULL};
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], name) == 0) return true;
    return false;
}

static int set_value(tgc_config *c, const opt_def *o, const char *arg, FILE *ef)
{
    char *field = (char *)c + o->offset;
    switch (o->kind) {
    case OPT_FLAG: *(bool *)field = true; return 0;
    case OPT_STR:
    case OPT_SPEC: *(const char **)field = arg; return 0;
    case OPT_WORDS: {
        const char **w = xmalloc(2 * sizeof *w);
        w[0] = arg;
        w[1] = NULL;
        keep((char *)w);
        *(const char *const **)field = w;
        return 0;
    }
    case OPT_LIST: {
        const char *old = *(const char **)field;
        if (!old) { *(const char **)field = arg; return 0; }
        size_t n = strlen(old) + strlen(arg) + 2;
        char *both = keep(xmalloc(n));
        snprintf(both, n, "%s;%s", old, arg);
        *(const char **)field = both;
        return 0;
    }
    case OPT_CHOICE: {
        const char *word = choice_find(o->choices, arg);
        if (!word) {
            char all[128];
            choices_str(o->choices, all, sizeof all);
            if (ef) fprintf(ef, "tgc: error: --%s: '%s' is not one of %s\n", o->name, arg, all);
            return 2;
        }
        *(const char **)field = word;
        return 0;
    }
    case OPT_INT: {
        int64_t v;
        bool pos = int_positive(o->name);
        if (!parse_i64(arg, &v) || v < (pos ? 1 : 0)) {
            if (ef)
                fprintf(ef, "tgc: error: --%s: '%s' is not a %s integer\n", o->name, arg,
                        pos ? "positive" : "non-negative");
            return 2;
        }
        *(int64_t *)field = v;
        return 0;
    }
    case OPT_FLOAT: {
        double v;
        if (!parse_double(arg, &v)) {
            if (ef)
                fprintf(ef, "tgc: error: --%s: '%s' is not a number (expected a finite decimal, e.g. 0.5 or 6e-4)\n",
                        o->name, arg);
            return 2;
        }
        *(double *)field = v;
        return 0;
    }
    }
    return 2;
}

static void write_value(const tgc_config *c, const opt_def *o, strbuf *out)
{
    const char *field = (const char *)c + o->offset;
    switch (o->kind) {
    case OPT_FLAG: sb_puts(out, *(const bool *)field ? "true" : "false"); break;
    case OPT_INT: sb_printf(out, "%lld", (long long)*(const int64_t *)field); break;
    case OPT_FLOAT: sb_put_double(out, *(const double *)field); break;
    case OPT_STR:
    case OPT_SPEC:
    case OPT_LIST:
    case OPT_CHOICE: sb_puts(out, *(const char *const *)field ? *(const char *const *)field : ""); break;
    case OPT_WORDS:
        for (const char *const *w = *(const char *const *const *)field; w && *w; w++)
            sb_printf(out, "%s%s", w == *(const char *const *const *)field ? "" : " ", *w);
        break;
    }
}

bool tgc_config_value_text(const tgc_config *c, int i, strbuf *out)
{
    TGC_ASSERT(i >= 0 && i < (int)ARRAY_LEN(opts));
    const opt_def *o = &opts[i];
    const void *field = (const char *)c + o->offset;
    if (o->kind != OPT_FLAG && o->kind != OPT_INT && o->kind != OPT_FLOAT && !*(const void *const *)field)
        return false;
    write_value(c, o, out);
    return true;
}

/* Paths belong to a run, not a plan, and tgc compile's own options to the
 * compilation. Parameter groups are kept: a plan recompiles with them. */
static bool in_plan(const opt_def *o) { return o->kind != OPT_STR && o->kind != OPT_WORDS && o->use != TGC_USE_COMPILE; }

static const char *const kind_names[] = {"int", "float", "flag", "path", "choice", "spec", "list", "paths"};

uint64_t tgc_config_plan_schema(void)
{
    strbuf keys;
    sb_init(&keys);
    for (size_t i = 0; i < ARRAY_LEN(opts); i++)
        if (in_plan(&opts[i])) sb_printf(&keys, "%s %s\n", opts[i].name, kind_names[opts[i].kind]);
    uint64_t h = rt_plan_schema(keys.s);
    sb_free(&keys);
    return h;
}

void tgc_config_write(const tgc_config *c, strbuf *out)
{
    for (size_t i = 0; i < ARRAY_LEN(opts); i++) {
        if (!in_plan(&opts[i])) continue;
        sb_printf(out, "%s ", opts[i].name);
        write_value(c, &opts[i], out);
        sb_putc(out, '\n');
    }
}

bool tgc_config_read_line(tgc_config *c, const char *line)
{
    const char *sp = strchr(line, ' ');
    if (!sp) return false;
    for (size_t i = 0; i < ARRAY_LEN(opts); i++) {
        const opt_def *o = &opts[i];
        if (strlen(o->name) != (size_t)(sp - line) || strncmp(o->name, line, (size_t)(sp - line)) != 0) continue;
        const char *v = sp + 1;
        if (o->kind == OPT_FLAG) {
            if (strcmp(v, "true") && strcmp(v, "false")) return false;
            *(bool *)((char *)c + o->offset) = v[0] == 't';
            return true;
        }
        if (!in_plan(o)) return false;
        if (o->kind == OPT_SPEC || o->kind == OPT_LIST) {
            *(const char **)((char *)c + o->offset) = *v ? keep(xstrdup(v)) : NULL;
            return true;
        }
        if (o->kind == OPT_CHOICE) {
            const char *word = choice_find(o->choices, v);
            if (word) *(const char **)((char *)c + o->offset) = word;
            return word != NULL;
        }
        if (o->kind == OPT_INT) { /* a plan records the defaults' 0s, which the command line refuses for some */
            int64_t x;
            if (!parse_i64(v, &x) || x < 0) return false;
            *(int64_t *)((char *)c + o->offset) = x;
            return true;
        }
        return set_value(c, o, v, NULL) == 0;
    }
    return false;
}

bool tgc_config_given(const tgc_config *c, const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(opts); i++)
        if (strcmp(opts[i].name, name) == 0 || (opts[i].alias && strcmp(opts[i].alias, name) == 0)) return c->seen[i];
    return false;
}

static size_t field_size(const opt_def *o)
{
    return o->kind == OPT_FLAG ? sizeof(bool) : o->kind == OPT_INT ? sizeof(int64_t)
         : o->kind == OPT_FLOAT ? sizeof(double) : sizeof(const char *);
}

void tgc_config_reset(tgc_config *c, int i)
{
    TGC_ASSERT(i >= 0 && i < (int)ARRAY_LEN(opts));
    tgc_config def;
    tgc_config_defaults(&def);
    memcpy((char *)c + opts[i].offset, (const char *)&def + opts[i].offset, field_size(&opts[i]));
    c->seen[i] = false;
}

/* Pairs of options that are two ways to give one setting: the command
 * line's one replaces the plan's other (a plan compiled with --fp16 runs
 * with --bf16), where tgc_config_check refuses both from one command line. */
static const char *const one_setting[][2] = {{"fp16", "bf16"}, {"fuse", "no-fuse"}};

static int opt_index(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(opts); i++)
        if (strcmp(opts[i].name, name) == 0) return (int)i;
    TGC_ASSERT(!"an option of one_setting or recorded is not in the table");
    return -1;
}

void tgc_config_overlay(tgc_config *dst, const tgc_config *src)
{
    tgc_config def;
    tgc_config_defaults(&def);
    for (size_t k = 0; k < ARRAY_LEN(one_setting); k++) {
        int a = opt_index(one_setting[k][0]), b = opt_index(one_setting[k][1]);
        int other = src->seen[a] && !src->seen[b] ? b : src->seen[b] && !src->seen[a] ? a : -1;
        if (other >= 0)
            memcpy((char *)dst + opts[other].offset, (const char *)&def + opts[other].offset,
                   field_size(&opts[other]));
    }
    for (size_t i = 0; i < ARRAY_LEN(opts); i++) {
        if (!src->seen[i]) continue;
        memcpy((char *)dst + opts[i].offset, (const char *)src + opts[i].offset, field_size(&opts[i]));
        dst->seen[i] = true;
    }
}

static bool field_same(const tgc_config *a, const tgc_config *b, const opt_def *o)
{
    const char *fa = (const char *)a + o->offset, *fb = (const char *)b + o->offset;
    switch (o->kind) {
    case OPT_FLAG: return *(const bool *)fa == *(const bool *)fb;
    case OPT_INT: return *(const int64_t *)fa == *(const int64_t *)fb;
    case OPT_FLOAT: return *(const double *)fa == *(const double *)fb;
    case OPT_STR:
    case OPT_SPEC:
    case OPT_LIST:
    case OPT_CHOICE: {
        const char *sa = *(const char *const *)fa, *sb = *(const char *const *)fb;
        return sa == sb || (sa && sb && strcmp(sa, sb) == 0);
    }
    case OPT_WORDS: {
        const char *const *wa = *(const char *const *const *)fa, *const *wb = *(const char *const *const *)fb;
        if (!wa || !wb) return wa == wb;
        for (; *wa && *wb; wa++, wb++)
            if (strcmp(*wa, *wb) != 0) return false;
        return !*wa && !*wb;
    }
    }
    return false;
}

int tgc_config_changes(const tgc_config *cli, const tgc_config *plan, tgc_opt_use use, strbuf *out)
{
    int n = 0;
    for (size_t i = 0; i < ARRAY_LEN(opts); i++) {
        const opt_def *o = &opts[i];
        if (o->use != use || !cli->seen[i] || (plan && field_same(cli, plan, o))) continue;
        if (out) {
            sb_printf(out, "%s--%s", n ? ", " : "", o->name);
            if (o->kind != OPT_FLAG) {
                sb_putc(out, ' ');
                write_value(cli, o, out);
            }
            if (plan && o->kind != OPT_FLAG) {
                sb_puts(out, " (the plan's ");
                write_value(plan, o, out);
                sb_putc(out, ')');
            }
        }
        n++;
    }
    return n;
}

/* The long names of the options of one use, wrapped. */
int tgc_config_check_to(const tgc_config *c, FILE *ef)
{
    if (c->tp < 1 || c->pp < 1 || c->dp < 1 || c->vp < 1) {
        fprintf(ef, "tgc: error: parallel degrees must be at least 1 (tp=%lld pp=%lld dp=%lld vp=%lld)\n",
                (long long)c->tp, (long long)c->pp, (long long)c->dp, (long long)c->vp);
        return 2;
    }
    if (c->overlap_param_gather && !c->use_distributed_optimizer) {
        fprintf(ef, "tgc: error: --overlap-param-gather gathers the distributed optimizer's parameter shards: "
                "it needs --use-distributed-optimizer\n");
        return 2;
    }
    if (c->micro_batch_size && c->global_batch_size &&
        c->global_batch_size % (c->micro_batch_size * c->dp) != 0) {
        fprintf(ef,
                "tgc: error: --global-batch-size %lld does not divide by --micro-batch-size %lld x --dp %lld\n",
                (long long)c->global_batch_size, (long long)c->micro_batch_size, (long long)c->dp);
        return 2;
    }
    if (!(c->memory_limit_gib >= 0.0) || c->memory_limit_gib > 1e9) { /* NaN too */
        fprintf(ef, "tgc: error: --memory-limit %g: expected GiB, at least 0\n", c->memory_limit_gib);
        return 2;
    }
    if (!(c->peak_tflops >= 0.0)) { /* NaN too */
        fprintf(ef, "tgc: error: --peak-tflops %g: expected a positive rate (TFLOP/s)\n", c->peak_tflops);
        return 2;
    }
    if (c->fp16 && c->bf16) {
        fprintf(ef, "tgc: error: --fp16 and --bf16 exclude each other\n");
        return 2;
    }
    if (c->recompute_num_layers < 1) {
        fprintf(ef, "tgc: error: --recompute-num-layers %lld: expected at least 1\n",
                (long long)c->recompute_num_layers);
        return 2;
    }
    if (c->vp > 1 && strcmp(c->pipeline_schedule, "interleaved") != 0) {
        fprintf(ef, "tgc: error: --vp %lld needs --pipeline-schedule interleaved\n", (long long)c->vp);
        return 2;
    }
    if (c->sgd_nesterov && (c->sgd_momentum <= 0.0 || c->sgd_dampening != 0.0)) {
        fprintf(ef, "tgc: error: --sgd-nesterov needs --sgd-momentum above 0 and --sgd-dampening 0 (as "
                "torch.optim.SGD); got momentum %g, dampening %g\n", c->sgd_momentum, c->sgd_dampening);
        return 2;
    }
    if (!(c->clip_grad >= 0.0)) { /* NaN too */
        fprintf(ef, "tgc: error: --clip-grad %g: expected the largest global gradient norm, or 0 to clip "
                "nothing\n", c->clip_grad);
        return 2;
    }
    if (c->sgd_momentum < 0.0 || c->weight_decay < 0.0 || c->lr < 0.0) {
        fprintf(ef, "tgc: error: --%s %g is negative\n", c->lr < 0.0 ? "lr" : c->weight_decay < 0.0 ?
                "weight-decay" : "sgd-momentum", c->lr < 0.0 ? c->lr : c->weight_decay < 0.0 ? c->weight_decay
                : c->sgd_momentum);
        return 2;
    }
    if (!(c->adam_beta1 >= 0.0 && c->adam_beta1 < 1.0 && c->adam_beta2 >= 0.0 && c->adam_beta2 < 1.0 &&
          c->adam_eps >= 0.0)) {
        fprintf(ef, "tgc: error: Adam needs 0 <= --adam-beta1, --adam-beta2 < 1 and --adam-eps >= 0 (as "
                "torch.optim.Adam); got %g, %g, %g\n", c->adam_beta1, c->adam_beta2, c->adam_eps);
        return 2;
    }
    char err[512];
    unsigned fusions;
    if (c->fuse && c->no_fuse) {
        fprintf(ef, "tgc: error: --no-fuse and --fuse exclude each other (--no-fuse is --fuse none)\n");
        return 2;
    }
    if (c->fuse && !pass_fuse_parse(c->fuse, &fusions, err, sizeof err)) {
        fprintf(ef, "tgc: error: --fuse %s: %s\n", c->fuse, err);
        return 2;
    }
    if (c->param_groups && !pass_param_groups_check(c->param_groups, err, sizeof err)) {
        fprintf(ef, "tgc: error: --param-group: %s\n", err);
        return 2;
    }
    rt_schedule s;
    return tgc_config_schedule_to(c, &s, ef);
}

/* Options of tgc run that do nothing without another: an error, never ignored. */
static int check_run_needs(const tgc_config *c, FILE *ef)
{
    static const struct { const char *opt, *needs; } pairs[] = {
        {"eval-interval", "split"}, {"eval-iters", "split"}, {"save-interval", "save"},
        {"tensorboard-log-interval", "tensorboard-dir"}, {"log-timers-to-tensorboard", "tensorboard-dir"},
        {"log-validation-ppl-to-tensorboard", "tensorboard-dir"}, {"log-memory-to-tensorboard", "tensorboard-dir"},
        {"log-validation-ppl-to-tensorboard", "split"}};
    for (size_t i = 0; i < ARRAY_LEN(pairs); i++) {
        bool has = strcmp(pairs[i].needs, "split") == 0 ? c->split || c->valid_data_path
                 : strcmp(pairs[i].needs, "save") == 0 ? c->save != NULL : c->tensorboard_dir != NULL;
        if (tgc_config_given(c, pairs[i].opt) && !has) {
            fprintf(ef, "tgc: error: --%s does nothing without --%s; give --%s too, or drop --%s\n", pairs[i].opt,
                    pairs[i].needs, pairs[i].needs, pairs[i].opt);
            return 2;
        }
    }
    return 0;
}

/* --overlap-grad-reduce and --overlap-param-gather: a communication thread
 * per rank thread on host memory or the simulator, a second stream per GPU
 * (docs/pipeline.md); the training loop refuses ranks sharing a GPU. */
static int check_overlap(const tgc_config *c, FILE *ef)
{
    const char *opt = c->overlap_grad_reduce ? "overlap-grad-reduce" : "overlap-param-gather";
    if (!c->overlap_grad_reduce && !c->overlap_param_gather) return 0;
    if (c->dp < 2) {
        fprintf(ef, "tgc: error: --%s overlaps the data-parallel reduction with the backward: it does nothing "
                "without --dp above 1\n", opt);
        return 2;
    }
    if (strcmp(c->comm, "mpi") == 0) {
        fprintf(ef, "tgc: error: --%s runs on rank threads (a communication thread, or a second stream, "
                "each); under --comm mpi it is not implemented yet: drop it\n", opt);
        return 2;
    }
    return 0;
}

int tgc_config_check_run_to(const tgc_config *c, FILE *ef)
{
    if (check_run_needs(c, ef) || check_overlap(c, ef)) return 2;
    return 0;
}

/* Megatron's weight-decay options: constant takes --weight-decay, the
 * increasing styles --start-weight-decay and --end-weight-decay. */
static int schedule_wd(const tgc_config *c, rt_schedule *s, FILE *ef)
{
    bool given = c->start_weight_decay != UNSET_WD || c->end_weight_decay != UNSET_WD;
    if (s->wd_incr == RT_INCR_CONSTANT && given) {
        fprintf(ef, "tgc: error: --start-weight-decay and --end-weight-decay need --weight-decay-incr-style "
                "linear or cosine (a constant weight decay is --weight-decay)\n");
        return 2;
    }
    if (s->wd_incr != RT_INCR_CONSTANT) {
        if (c->start_weight_decay == UNSET_WD || c->end_weight_decay == UNSET_WD) {
            fprintf(ef, "tgc: error: --weight-decay-incr-style %s needs --start-weight-decay and "
                    "--end-weight-decay\n", c->weight_decay_incr_style);
            return 2;
        }
        s->start_wd = c->start_weight_decay;
        s->end_wd = c->end_weight_decay;
    }
    return 0;
}

/* --lr-scheduler: PyTorch's schedulers, which replace Megatron's. */
static int schedule_torch(const tgc_config *c, rt_schedule *s, FILE *ef)
{
    const char *megatron = c->lr_warmup_iters ? "--lr-warmup-iters" : c->lr_warmup_init != 0.0 ? "--lr-warmup-init"
                         : strcmp(c->lr_decay_style, "constant") ? "--lr-decay-style"
                         : c->lr_decay_iters ? "--lr-decay-iters" : c->min_lr != 0.0 ? "--min-lr" : NULL;
    if (megatron) {
        fprintf(ef, "tgc: error: --lr-scheduler replaces Megatron's learning-rate schedule; drop %s (warm-up and "
                "final rates are written in the scheduler spec, docs/schedules.md)\n", megatron);
        return 2;
    }
    char err[256];
    size_t at = 0;
    if (!rt_schedule_parse_torch(s, c->lr_scheduler, err, sizeof err, &at)) {
        fprintf(ef, "tgc: error: --lr-scheduler: %s\n  %s\n  %*s^\n", err, c->lr_scheduler, (int)at, "");
        return 2;
    }
    return 0;
}

int tgc_config_schedule_to(const tgc_config *c, rt_schedule *s, FILE *ef)
{
    rt_schedule_init(s, c->lr, c->weight_decay, c->train_iters);
    s->min_lr = c->min_lr;
    s->warmup_init = c->lr_warmup_init;
    s->warmup_iters = c->lr_warmup_iters;
    s->decay_iters = c->lr_decay_iters ? c->lr_decay_iters : c->train_iters;
    s->wsd_decay_iters = c->lr_wsd_decay_iters;
    bool known = rt_decay_style_from(c->lr_decay_style, &s->decay) && rt_wsd_style_from(c->lr_wsd_decay_style, &s->wsd)
              && rt_incr_style_from(c->weight_decay_incr_style, &s->wd_incr);
    TGC_ASSERT(known); /* the option table's choices are the schedule's names */
    if (schedule_wd(c, s, ef) || (c->lr_scheduler && schedule_torch(c, s, ef))) return 2;
    char err[256];
    if (!rt_schedule_check(s, err, sizeof err)) {
        fprintf(ef, "tgc: error: %s\n", err);
        return 2;
    }
    return 0;
}

int tgc_config_pass_given(const tgc_config *c, pass_given *out, int max)
{
    int n = 0;
    for (size_t j = 0; j < ARRAY_LEN(recorded); j++) {
        const opt_def *o = &opts[opt_index(recorded[j].option)];
        if (!c->seen[o - opts]) continue;
        TGC_ASSERT(n < max);
        const char *text = n && strcmp(recorded[j - 1].option, o->name) == 0 ? out[n - 1].option : NULL;
        if (!text) {
            strbuf b;
            sb_init(&b);
            sb_printf(&b, "--%s", o->name);
            if (o->kind != OPT_FLAG) {
                sb_putc(&b, ' ');
                write_value(c, o, &b);
            }
            text = keep(b.s);
        }
        out[n++] = (pass_given){recorded[j].pass, recorded[j].key, text};
    }
    return n;
}

bool tgc_config_run_passes(ir_graph *g, const tgc_config *c, bool verify,
                           void (*after)(const char *name, const ir_graph *g, void *user), diag *d)
{
    pass_options po;
    tgc_config_pass_options(c, &po);
    const pass_info *list[64];
    int n = pass_count();
    for (int i = 0; i < n; i++) list[i] = pass_at(i);
    pass_given given[TGC_CONFIG_GIVEN_MAX];
    pass_ctx ctx = {.d = d, .verify_each = verify, .opts = &po, .given = given};
    ctx.ngiven = tgc_config_pass_given(c, given, TGC_CONFIG_GIVEN_MAX);
    return pass_run_list(g, list, n, &ctx, after, NULL);
}

void tgc_config_pass_options(const tgc_config *c, pass_options *po)
{
    pass_options_defaults(po);
    po->optimizer = c->optimizer;
    po->beta1 = c->adam_beta1;
    po->beta2 = c->adam_beta2;
    po->eps = c->adam_eps;
    po->weight_decay = c->weight_decay;
    po->clip_grad = c->clip_grad;
    po->momentum = c->sgd_momentum;
    po->dampening = c->sgd_dampening;
    po->nesterov = c->sgd_nesterov;
    po->param_groups = c->param_groups;
    po->tp = c->tp;
    po->precision = c->fp16 ? IR_F16 : c->bf16 ? IR_BF16 : IR_F32;
    po->sequence_parallel = c->sequence_parallel;
    char err[256];
    if (c->no_fuse || (c->fuse && !pass_fuse_parse(c->fuse, &po->fuse, err, sizeof err))) po->fuse = 0;
    po->pp = c->pp;
    po->vp = c->vp;
    po->vp_layers = c->vp_layers;
    po->pipeline_schedule = c->pipeline_schedule;
    po->pp_balance_flops = strcmp(c->pp_balance, "flops") == 0;
    po->no_scatter_gather = c->no_scatter_gather;
    po->dp = c->dp;
    po->dist_opt = c->use_distributed_optimizer && c->dp > 1;
    po->micro_batch = c->micro_batch_size;
    po->global_batch = c->global_batch_size;
    po->ddp_bucket_size = c->ddp_bucket_size;
    pass_recompute_parse(c->recompute_granularity, &po->recompute);
    pass_attention_backend_parse(c->attention_backend, &po->attention_backend);
    po->attention_inplace = !c->no_attention_inplace;
    po->fused_lm_head = !c->no_fused_lm_head;
    po->lm_head_chunk = c->lm_head_chunk;
    po->recompute_block = strcmp(c->recompute_method, "block") == 0;
    po->recompute_layers = c->recompute_num_layers;
}


int tgc_config_nopts(void) { return (int)ARRAY_LEN(opts); }

const tgc_opt_def *tgc_config_opt_at(int i)
{
    TGC_ASSERT(i >= 0 && i < (int)ARRAY_LEN(opts));
    return &opts[i];
}

int tgc_config_opt_find(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(opts); i++)
        if (strcmp(opts[i].name, name) == 0 || (opts[i].alias && strcmp(opts[i].alias, name) == 0)) return (int)i;
    return -1;
}

void tgc_config_set_words(tgc_config *c, int i, const char *const *words, int n)
{
    TGC_ASSERT(i >= 0 && i < tgc_config_nopts() && opts[i].kind == OPT_WORDS && n >= 1);
    const char **w = xmalloc((size_t)(n + 1) * sizeof *w);
    for (int k = 0; k < n; k++) w[k] = words[k];
    w[n] = NULL;
    keep((char *)w);
    *(const char *const **)((char *)c + opts[i].offset) = w;
}

int tgc_config_set_to(tgc_config *c, int i, const char *value, FILE *ef)
{
    TGC_ASSERT(i >= 0 && i < (int)ARRAY_LEN(opts));
    int rc = set_value(c, &opts[i], value, ef);
    if (rc == 0) c->seen[i] = true;
    return rc;
}

void tgc_config_unset_flag(tgc_config *c, int i)
{
    TGC_ASSERT(i >= 0 && i < (int)ARRAY_LEN(opts) && opts[i].kind == OPT_FLAG);
    *(bool *)((char *)c + opts[i].offset) = false;
    c->seen[i] = true;
}

const char *tgc_config_keep(char *s) { return keep(s); }

int tgc_config_check(const tgc_config *c) { return tgc_config_check_to(c, stderr); }
int tgc_config_check_run(const tgc_config *c) { return tgc_config_check_run_to(c, stderr); }
int tgc_config_schedule(const tgc_config *c, rt_schedule *s) { return tgc_config_schedule_to(c, s, stderr); }
