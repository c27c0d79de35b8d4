/* What runs around a rank's steps (runtime/train/hooks.h). */
#include "runtime/train/hooks.h"

#include <math.h>

#include "runtime/comm/comm.h"

/* ---- the loss scaler --------------------------------------------------------------- */


loss_scaler scaler_new(const rt_exec *e, const rt_train_opts *o)
{
    loss_scaler s = {.on = e->g->precision == IR_F16, .scale = 1.0};
    if (!s.on) return s;
    s.dynamic = o->loss_scale <= 0;
    s.scale = s.dynamic ? o->initial_loss_scale : o->loss_scale;
    s.hysteresis_left = o->hysteresis;
    return s;
}

/* Megatron's DynamicGradScaler.update after a step. */
void scaler_update(loss_scaler *s, const rt_train_opts *o, bool overflow)
{
    if (!s->on || !s->dynamic) return;
    if (overflow) {
        s->growth = 0;
        if (--s->hysteresis_left <= 0) s->scale = fmax(s->scale * 0.5, o->min_loss_scale);
        return;
    }
    if (++s->growth == o->loss_scale_window) {
        s->growth = 0;
        s->hysteresis_left = o->hysteresis;
        s->scale *= 2.0;
    }
}

loss_scaler scaler_resume(const rt_exec *e, const rt_train_opts *o, const rt_ckpt_state *st)
{
    loss_scaler s = scaler_new(e, o);
    if (s.on && s.dynamic) {
        s.scale = st->loss_scale;
        s.growth = st->scale_growth;
        s.hysteresis_left = st->hysteresis_left;
    }
    return s;
}

/* ---- checkpoints ------------------------------------------------------------------ */


/* Under mpirun a failed load or save ends with every rank knowing, unless
 * a message failed (then the job must be ended). */
static bool ckpt_result(ckpt_hook *ck, bool ok)
{
    ck->agreed = !ok && ck->ranks.comm && tgc_comm_last_status(ck->ranks.comm) == TGC_COMM_OK;
    return ok;
}

/* --save's lock, taken by the writing rank (the process, for rank
 * threads; under mpirun world rank 0, and every rank learns whether it got
 * it): before step 1, so that a second writer is refused at once. */
static bool ckpt_lock(ckpt_hook *ck, const rt_train_opts *o, diag *d)
{
    bool ok = true;
    if (rt_ckpt_is_root(&ck->ranks)) {
        ck->lock_fd = rt_ckpt_lock(o->save_dir, d);
        ok = ck->locked = ck->lock_fd >= 0;
    }
    return ckpt_result(ck, rt_ckpt_agree(&ck->ranks, ok, NULL));
}

/* --save's lock and --load, once every rank is initialised (before the
 * rank threads start; under mpirun, on every process). */
bool ckpt_begin(ckpt_hook *ck, const rt_train_opts *o, diag *d)
{
    if (o->save_dir && !ckpt_lock(ck, o, d)) return false;
    if (!o->load_dir) return true;
    ck->loaded = rt_ckpt_load(o->load_dir, &ck->ranks, o, &ck->start, d);
    return ckpt_result(ck, ck->loaded);
}

/* After the run: the lock goes (a crash lets it go with the process). */
void ckpt_end(ckpt_hook *ck)
{
    if (ck->locked) rt_ckpt_unlock(ck->lock_fd);
    ck->locked = false;
}

/* After iteration `done` (1-based: the steps done): --save when due, or
 * (force) because the run stops there. Threads of one process: every rank
 * stops at a barrier, the saver (the reporting rank) reads all executors
 * of the process, and a second barrier lets the others continue. Under
 * mpirun every rank calls the save, which moves the parts to world rank 0
 * and returns everywhere with its verdict. */
bool ckpt_at(ckpt_hook *ck, rt_exec *e, const rt_train_opts *o, int64_t done, int64_t opt_step,
             const loss_scaler *sc, bool saver, bool force, diag *d)
{
    bool due = done == o->iters || (o->save_interval > 0 && done % o->save_interval == 0) || force;
    if (!ck || !o->save_dir || !due) return true;
    rt_ckpt_state st = {done, opt_step, sc->scale, sc->growth, sc->hysteresis_left};
    if (ck->ranks.comm) return ckpt_result(ck, rt_ckpt_save(o->save_dir, &ck->ranks, &st, o, d));
    if (e->comm && tgc_comm_barrier(e->comm, TGC_COMM_WORLD) != 0) return false;
    if (saver) ck->failed = !rt_ckpt_save(o->save_dir, &ck->ranks, &st, o, d);
    if (e->comm && tgc_comm_barrier(e->comm, TGC_COMM_WORLD) != 0) return false;
    return !ck->failed;
}

