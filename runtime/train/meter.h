/* The figures a run reports (docs/runtime.md): the model FLOPs of an
 * iteration, the peak the MFU is against, the step times, the summary at
 * the start and the compute and memory lines at the end, and the
 * TensorBoard scalars of each step. */
#ifndef TGC_RT_TRAIN_METER_H
#define TGC_RT_TRAIN_METER_H
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"
#include "runtime/exec.h"
#include "runtime/io/log.h"
#include "runtime/io/tfevents.h"
#include "runtime/train/train.h"
#include "support/diag.h"

/* The compute figures of a run: rank 0 times the steps. */
typedef struct run_meter {
    double flops;    /* model FLOPs of one iteration, the whole model (0: unknown) */
    const char *how; /* where they come from */
    double peak;     /* FLOP/s the MFU is against, all devices together (0: no MFU) */
    const char *peak_how;
    double *step_s;  /* every step's time (allocated before the run) */
    int64_t n;
    double started;  /* when the trainer was made (--exit-duration-in-mins counts from it) */
    atomic_int stop; /* why the ranks stopped early (runtime/train/stop.h: a signal, RT_STOP_*; 0: they did not) */
    tgc_step_stats *hist; /* the reporting rank's figures of every iteration (rt_trainer_stats) */
    int64_t tokens;       /* tokens of one iteration, every micro-batch of every replica */
    int64_t batch;        /* sequences of one iteration (Megatron's batch-size: the global batch) */
    int world;            /* the ranks of the run, t p d (Megatron's world size, throughput's divisor) */
} run_meter;

/* Model FLOPs of one iteration of mbs micro-batches: the seed's
 * 72 B s l h^2 (1 + s/6h + V/12lh) (no recomputation: what the model
 * needs, not what recomputation adds, as MFU is defined) when the model
 * names its dimensions; otherwise the ops of the training graph, one
 * rank's times t. */
void meter_flops(run_meter *m, const ir_graph *g, int t, int64_t mbs);
/* The peak MFU is against, for t devices. false after saying why not. */
bool meter_peak(run_meter *m, const ir_graph *g, const rt_train_opts *o, int t, diag *d);
/* One line on what the run holds; TGC_DEBUG >= 1 adds the memory plan. */
void meter_print_summary(const rt_exec *e, FILE *out);
/* The FLOPs, the achieved rate and the MFU of the median step. */
void meter_print_compute(run_meter *m, FILE *out);
/* The executor's allocations beside the plan's prediction (t: ranks). */
void meter_print_memory(const rt_exec *e, int t, FILE *out);

/* --log-timers-to-tensorboard: the step times since the last written
 * iteration-time; started after the trainer's first step. */
typedef struct meter_tb_window {
    bool started;
    double sum;
    int64_t n;
} meter_tb_window;

/* --tensorboard-dir: iteration it's scalars under Megatron's tags and when
 * Megatron writes them (megatron/training/training.py: training_log every
 * --tensorboard-log-interval, its timers every --log-interval but the
 * run's first, evaluate_and_print_results at each evaluation), then one
 * write of them all. A skipped fp16 step has no gradient norm (Megatron's
 * optimizer returns none); the loss scale is fp16's (tgc has no scaler
 * otherwise). bytes: the executor's. false after reporting a failed write. */
bool meter_tensorboard(tgc_tfevents *tb, const rt_train_opts *o, const run_meter *m, meter_tb_window *w,
                       const tgc_step_stats *st, double dt, int64_t bytes, diag *d);

#endif
