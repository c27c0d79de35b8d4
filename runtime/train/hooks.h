/* What runs around a rank's steps (runtime/train/train.c's run_steps): the
 * fp16 loss scaler (Megatron's DynamicGradScaler) and the checkpoint hook
 * (--save, --load: runtime/io/checkpoint.h, docs/checkpoints.md). */
#ifndef TGC_RT_TRAIN_HOOKS_H
#define TGC_RT_TRAIN_HOOKS_H
#include <stdbool.h>
#include <stdint.h>

#include "runtime/exec.h"
#include "runtime/io/checkpoint.h"
#include "runtime/train/train.h"
#include "support/diag.h"

/* ---- the loss scaler ---- */

typedef struct loss_scaler {
    bool on, dynamic;
    double scale;
    int64_t growth, hysteresis_left;
} loss_scaler;

/* The scaler a run starts with (on under fp16 only: a static --loss-scale,
 * or dynamic from --initial-loss-scale). */
loss_scaler scaler_new(const rt_exec *e, const rt_train_opts *o);
/* Megatron's DynamicGradScaler.update after a step (overflow: it was skipped). */
void scaler_update(loss_scaler *s, const rt_train_opts *o, bool overflow);
/* The scaler of a checkpoint's state (a dynamic one resumes where it was). */
loss_scaler scaler_resume(const rt_exec *e, const rt_train_opts *o, const rt_ckpt_state *st);

/* ---- checkpoints ---- */

/* The checkpointing of a run (runtime/io/checkpoint.h): every executor of the
 * process (or, under mpirun, this process's rank and its communicator),
 * and where the run starts (--load). */
typedef struct ckpt_hook {
    rt_ckpt_ranks ranks;
    bool loaded;         /* start holds the checkpoint's state */
    rt_ckpt_state start;
    bool failed;         /* the saver's verdict, read by every rank after the barrier */
    bool agreed;         /* mpirun: a load or save failed, and every rank knows it */
    bool locked;         /* lock_fd holds --save's directory (rt_ckpt_lock) */
    int lock_fd;
} ckpt_hook;

/* --save's lock and --load, once every rank is initialised (before the
 * rank threads start; under mpirun, on every process). */
bool ckpt_begin(ckpt_hook *ck, const rt_train_opts *o, diag *d);
/* After the run: the lock goes (a crash lets it go with the process). */
void ckpt_end(ckpt_hook *ck);
/* After iteration `done` (1-based: the steps done): --save when due, or
 * (force) because the run stops there. Threads of one process: every rank
 * stops at a barrier, the saver (the reporting rank) reads all executors
 * of the process, and a second barrier lets the others continue. Under
 * mpirun every rank calls the save, which moves the parts to world rank 0
 * and returns everywhere with its verdict. */
bool ckpt_at(ckpt_hook *ck, rt_exec *e, const rt_train_opts *o, int64_t done, int64_t opt_step,
             const loss_scaler *sc, bool saver, bool force, diag *d);

#endif
