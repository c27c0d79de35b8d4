/* The training loop of `tgc run` (runtime/train/train.h): one per-rank
 * main (rank_main) and the steps of a rank (run_steps) over the ranks of
 * this process, whichever world started them (runtime/train/world.h). */
#include "train.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/exec.h"
#include "runtime/io/log.h"
#include "runtime/io/tfevents.h"
#include "runtime/io/trace.h"
#include "runtime/train/checks.h"
#include "runtime/train/fault.h"
#include "runtime/train/feeder.h"
#include "runtime/train/hooks.h"
#include "runtime/train/meter.h"
#include "runtime/train/pipe.h"
#include "runtime/train/stop.h"
#include "runtime/train/weights.h"
#include "runtime/train/world.h"
#include "support/env.h"
#include "support/util.h"

void rt_train_opts_defaults(rt_train_opts *o)
{
    memset(o, 0, sizeof *o);
    o->iters = 100;
    o->seed = 1234;
    o->log_interval = 10;
    o->tensorboard_log_interval = 1;
    rt_schedule_init(&o->sched, 1e-3, 0.0, o->iters);
    o->initial_loss_scale = 4294967296.0; /* 2^32, as Megatron */
    o->min_loss_scale = 1.0;
    o->loss_scale_window = 1000;
    o->hysteresis = 2;
}

/* ---- the loop ------------------------------------------------------------------ */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}


/* "rank 3: " (a static buffer per thread). */
static const char *rank_prefix(int rank)
{
    static _Thread_local char buf[32];
    snprintf(buf, sizeof buf, "rank %d: ", rank);
    return buf;
}

/* --check-numerics found a non-finite value: where, in the .tg file's terms.
 * Ranks report under one lock (they share the diagnostics and stderr). */
static void report_nonfinite(const rt_exec *e, diag *d, int rank, int64_t step)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    const rt_nonfinite *f = rt_exec_nonfinite(e);
    const ir_node *n = f->node;
    char unit[160], val[32], msg[1024];
    rt_exec_instr_name(e, f->instr, unit, sizeof unit);
    if (isnan(f->value)) snprintf(val, sizeof val, "NaN");
    else snprintf(val, sizeof val, "%s", f->value < 0 ? "-inf" : "inf");
    snprintf(msg, sizeof msg, "--check-numerics: step %lld, rank %d, micro-batch 0: %s at index %lld of %s%s%%%s "
             "(%s), the step's first non-finite value, written by %s in the %s", (long long)step, rank, val,
             (long long)f->index, f->where, *f->where ? " of " : "", n->name, ir_op_name(n->op), unit,
             f->forward ? "forward pass" : "backward pass or the optimizer");
    pthread_mutex_lock(&mu);
    if (n->loc.line > 0) diag_error(d, n->loc, "%s", msg);
    else diag_error_plain(d, "%s", msg);
    pthread_mutex_unlock(&mu);
}

/* Where a rank's steps stand between calls of rt_trainer_steps: the next
 * step (0-based), the optimizer's steps and the loss scaler. */
typedef struct rank_state {
    bool started;
    int64_t next, opt_step;
    loss_scaler sc;
    meter_tb_window tb; /* --log-timers-to-tensorboard's step times */
} rank_state;

/* What one rank runs: its executor alone, or (pipe) driven by the pipeline
 * runtime. `report`: this rank prints the progress and the log (rank 0, or
 * in a pipeline the first rank holding the loss) and writes the
 * checkpoints (ck; NULL: none). */
typedef struct rank_run {
    rt_exec *e;
    rt_pipe *pipe;
    feeder *f;
    const rt_train_opts *o;
    tgc_log *log;
    diag *d;
    int rank;
    bool report;
    run_meter *meter;
    ckpt_hook *ck;
    tgc_comm *ctl; /* every rank of the run, on host buffers: where they agree to stop (NULL: one rank) */
    rank_state *st;
    int64_t until; /* this call's steps end before step `until` (0-based; at most o->iters) */
    tgc_tfevents *tb; /* --tensorboard-dir's events: the reporting rank's (NULL: none) */
} rank_run;

/* Runs iteration it = step + 1 on this rank; false after reporting why not. */
static bool step_exec(const rank_run *R, int64_t step, double lr, double wd, tgc_progress *prog)
{
    rt_exec *e = R->e;
    int rc;
    rc = rt_pipe_step(R->pipe, step, lr, wd);
    if (rc == 0) return true;
    if (!R->o->quiet && R->report) tgc_progress_finish(prog);
    /* A device error or a non-finite value is this rank's own: every rank reports it. */
    const char *dev = rt_exec_error(e);
    long long it = (long long)step + 1;
    if (rc == RT_EXEC_ERR_NUMERICS) report_nonfinite(e, R->d, R->rank, step + 1);
    else if (*dev) diag_error_plain(R->d, "%sstep %lld: %s", R->rank ? rank_prefix(R->rank) : "", it, dev);
    else if (R->report)
        diag_error_plain(R->d, "step %lld: %s", it,
                         e->comm ? tgc_comm_error(e->comm)
                                 : "the program has collectives but runs on one rank (no tp_* size found)");
    return false;
}

static const char *nonfinite_name(double v) { return isnan(v) ? "NaN" : v < 0 ? "-inf" : "inf"; }

/* A non-finite loss (the reporting rank reads it), or without a loss
 * scaler (fp16's skips such steps) a non-finite gradient norm (every rank
 * sees the same), stops the run at iteration it: true after the reporting
 * rank said so. */
static bool step_nonfinite(const rank_run *R, double loss, double gnorm, bool scaler, int64_t it,
                           tgc_progress *prog)
{
    bool bad_loss = R->report && !isfinite(loss), bad_norm = !scaler && !isfinite(gnorm);
    if (!bad_loss && !bad_norm) return false;
    if (!R->report) return true;
    if (!R->o->quiet) tgc_progress_finish(prog);
    if (bad_loss)
        diag_error_plain(R->d, "the loss became %s at step %lld; rerun with --check-numerics to find the first op "
                         "that produced a non-finite value", nonfinite_name(loss), (long long)it);
    else
        diag_error_plain(R->d, "the gradient norm became %s at step %lld (the loss %.4f), so no update can be "
                         "applied; rerun with --check-numerics to find the first op that produced a non-finite "
                         "value", nonfinite_name(gnorm), (long long)it, loss);
    return true;
}

/* The reporting rank's figures of iteration it: the progress line, the
 * log and the TensorBoard events. false after reporting a failed write. */
static bool step_report(const rank_run *R, tgc_step_stats *st, double dt, tgc_progress *prog)
{
    run_meter *meter = R->meter;
    int64_t tokens = ir_graph_tokens(R->e->g) * (R->f->M > 0 ? R->f->M : 1);
    meter->step_s[meter->n++] = dt;
    double rate = meter->flops > 0 && dt > 0 ? meter->flops / dt : 0.0;
    st->step_ms = dt * 1e3;
    st->tokens_per_s = dt > 0 ? (double)tokens / dt : 0.0;
    st->has_tflops = rate > 0;
    st->tflops = rate / 1e12;
    st->has_mfu = rate > 0 && meter->peak > 0;
    st->mfu = meter->peak > 0 ? rate / meter->peak : 0;
    if (meter->hist && st->step >= 1 && st->step <= R->o->iters) meter->hist[st->step - 1] = *st;
    if (!R->o->quiet) tgc_progress_step(prog, st);
    if (R->log && !tgc_log_step(R->log, st)) {
        int err = errno;
        if (!R->o->quiet) tgc_progress_finish(prog);
        diag_error_plain(R->d, "cannot write the log '%s': %s", R->o->log_path, strerror(err));
        return false;
    }
    /* the executor's bytes: allocated at the start, held to the end */
    if (R->tb && !meter_tensorboard(R->tb, R->o, meter, &R->st->tb, st, dt, rt_exec_allocated(R->e), R->d)) {
        if (!R->o->quiet) tgc_progress_finish(prog);
        return false;
    }
    return true;
}

/* The loss scaler and optimizer step a run starts from (--load: the
 * checkpoint's). */
static loss_scaler steps_start(const rank_run *R, int64_t *first, int64_t *opt_step)
{
    *first = *opt_step = 0;
    if (!R->ck || !R->ck->loaded) return scaler_new(R->e, R->o);
    *first = R->ck->start.step;
    *opt_step = R->ck->start.opt_step;
    return scaler_resume(R->e, R->o, &R->ck->start);
}

/* --split: the validation loss after iteration it when due (every rank
 * takes part); NAN when not due. false after reporting a failure. */
static bool step_eval(const rank_run *R, int64_t it, double *val)
{
    const rt_train_opts *o = R->o;
    *val = NAN;
    if (!rt_train_evaluates(o) || !((o->eval_interval > 0 && it % o->eval_interval == 0) || it == o->iters))
        return true;
    R->f->eval = true;
    int rc = rt_pipe_eval(R->pipe, o->eval_iters, val);
    R->f->eval = false;
    if (rc && R->report)
        diag_error_plain(R->d, "step %lld: the evaluation: %s", (long long)it,
                         *rt_exec_error(R->e) ? rt_exec_error(R->e) : tgc_comm_error(R->e->comm));
    return rc == 0;
}

/* ---- stopping early (runtime/train/stop.h) ------------------------------------------- */

/* Whether the ranks stop after iteration it, and why (0: they go on): a
 * signal or the time, agreed by every rank (rt_stop_agree; only with
 * --save, which installs the handler, or a duration), or the interval,
 * which needs no agreement. false: the exchange failed. */
static bool stop_agree(const rank_run *R, int64_t it, int *why)
{
    const rt_train_opts *o = R->o;
    bool timed = o->exit_duration_mins > 0 && now_s() - R->meter->started >= o->exit_duration_mins * 60.0;
    if (rt_stop_agree(R->ctl, o->save_dir || o->exit_duration_mins > 0, timed, why) != TGC_COMM_OK) {
        if (R->report)
            diag_error_plain(R->d, "step %lld: agreeing when to stop: %s", (long long)it, tgc_comm_error(R->ctl));
        return false;
    }
    if (!*why && o->exit_interval > 0 && it % o->exit_interval == 0) *why = RT_STOP_INTERVAL;
    return true;
}

/* The reporting rank says why and where the ranks stopped (even with --quiet). */
static void stop_say(const rank_run *R, int why, int64_t it)
{
    const rt_train_opts *o = R->o;
    atomic_store(&R->meter->stop, why);
    if (!R->report) return;
    char cause[96];
    rt_stop_cause(why, o->exit_interval, o->exit_duration_mins, cause, sizeof cause);
    fprintf(stderr, "tgc: %s: every rank stopped after step %lld of %lld", cause, (long long)it, (long long)o->iters);
    if (o->save_dir)
        fprintf(stderr, "; its checkpoint is %s/iter_%07lld (resume with --load %s)", o->save_dir, (long long)it,
                o->save_dir);
    else
        fprintf(stderr, " (no --save: nothing was saved)");
    if (why > 0) fprintf(stderr, "; exit status %d, and a second signal ends a run at once", 128 + why);
    fputc('\n', stderr);
}

/* The exit status of ranks that all returned 0: 128 + the signal that
 * stopped them (no --export and no trace then), else 0. */
static int stop_status(run_meter *m)
{
    int why = atomic_load(&m->stop);
    return why > 0 ? 128 + why : 0;
}

/* The steps of one rank; iterations are numbered from 1, as Megatron's. */
static int run_steps(rank_run *R)
{
    rt_exec *e = R->e;
    const rt_train_opts *o = R->o;
    rank_state *rs = R->st;
    if (!rs->started) { /* opt_step: steps the optimizer took (an fp16 overflow skips one, and its LR step) */
        rs->sc = steps_start(R, &rs->next, &rs->opt_step);
        rs->started = true;
    }
    int64_t first = rs->next, opt_step = rs->opt_step;
    loss_scaler sc = rs->sc;
    /* fp16: an overflow of the backward is the loss scaler's to skip. */
    if (o->check_numerics) rt_exec_check_numerics(e, e->g->precision == IR_F16);
    tgc_progress prog;
    tgc_progress_init(&prog, stderr, o->iters, o->log_interval > 0 ? o->log_interval : 1);
    fault_hook fault = fault_hook_read();
    for (int64_t step = first; step < R->until; step++) {
        int64_t it = step + 1;
        rs->next = step; /* a failed step ends the trainer: no step resumes in the middle */
        if (!fault_hook_fire(&fault, R->rank, it, R->d)) return 1;
        double t0 = now_s(), lr = rt_schedule_lr(&o->sched, opt_step), wd = rt_schedule_wd(&o->sched, opt_step);
        e->rt.opt_step = opt_step;
        e->rt.loss_scale_float = (float)sc.scale;
        e->rt.loss_scale_double = sc.scale;
        if (!step_exec(R, step, lr, wd, &prog)) return 1;
        double dt = now_s() - t0, used_scale = sc.scale;
        double gnorm = rt_pipe_grad_norm(R->pipe) / sc.scale;
        bool overflow = !isfinite(gnorm); /* the update was skipped (every rank sees the same norm) */
        if (!overflow) opt_step++;
        scaler_update(&sc, o, overflow);
        double val;
        if (!step_eval(R, it, &val)) return 1;
        tgc_step_stats st = {.step = it, .loss = R->report ? rt_pipe_loss(R->pipe) : 0,
                             .lr = lr, .has_wd = true, .wd = wd, .grad_norm = gnorm, .has_scale = sc.on,
                             .loss_scale = used_scale, .skipped = overflow, .has_val_loss = !isnan(val), .val_loss = val};
        if (R->report && !step_report(R, &st, dt, &prog)) return 1;
        if (step_nonfinite(R, st.loss, gnorm, sc.on, it, &prog)) return 1;
        int why;
        if (!stop_agree(R, it, &why)) return 1;
        if (why && it == o->iters) why = 0; /* the last step: the run is complete */
        if (rt_pipe_wait(R->pipe) != 0) return 1; /* --overlap-param-gather: before a checkpoint reads */
        rs->next = it;
        rs->opt_step = opt_step;
        rs->sc = sc;
        if (!ckpt_at(R->ck, e, o, it, opt_step, &sc, R->report, why != 0, R->d)) {
            if (!o->quiet && R->report) tgc_progress_finish(&prog);
            return 1;
        }
        if (why) {
            if (!o->quiet && R->report) tgc_progress_finish(&prog);
            stop_say(R, why, it);
            return 0;
        }
    }
    if (!o->quiet && R->report) tgc_progress_finish(&prog);
    return 0;
}

/* ---- the ranks of this process, in any world, and one per-rank main ------------- */

/* The options the schedule is built from (the pass's own function). */
bool rt_train_schedule(const ir_graph *g, const rt_train_opts *o, int p, int v, pipe_schedule *s, diag *d)
{
    pass_options po;
    pass_options_defaults(&po);
    po.pp = p;
    po.vp = v;
    po.dp = o->dp > 0 ? o->dp : 1;
    po.micro_batch = o->micro_batch;
    po.global_batch = o->global_batch;
    po.pipeline_schedule = o->pipeline_schedule ? o->pipeline_schedule : v > 1 ? "interleaved" : "1f1b";
    return pipe_schedule_from_graph(g, &po, s, d);
}

/* --trace: a trace naming every rank of topo (a process each, with a
 * compute and a communication thread), with room for the steps of `held`
 * ranks. */
static rt_trace *trace_for_ranks(const tgc_topology *topo, const pipe_schedule *sched, int64_t iters, int held)
{
    rt_trace *trace = rt_trace_new((size_t)held * (size_t)(sched->len[0] + 8) * (size_t)(iters + 1) * 2 + 64);
    for (int r = 0; r < tgc_topology_size(topo); r++) {
        tgc_coords c = tgc_topology_coords(topo, r);
        char name[96];
        snprintf(name, sizeof name, "rank %d (tp %d, dp %d, pp %d)", r, c.tp, c.dp, c.pp);
        rt_trace_name_rank(trace, r, name);
        rt_trace_name_thread(trace, r, 0, "compute");
        rt_trace_name_thread(trace, r, 1, "communication");
    }
    return trace;
}

static bool trace_write(const rt_trace *trace, const rt_train_opts *o, diag *d)
{
    char err[512];
    if (!rt_trace_write(trace, o->trace_path, err, sizeof err)) {
        diag_error_plain(d, "--trace: %s", err);
        return false;
    }
    if (!o->quiet)
        fprintf(stderr, "tgc: trace of %zu spans written to %s (open it in Perfetto)\n", rt_trace_count(trace),
                o->trace_path);
    return true;
}

/* A run of n = t*d*p ranks: the ranks of this process (all of them, or
 * under mpirun or torchrun its one) in the world that started them
 * (runtime/train/world.h, which gives each its communicators), what they
 * share, and what the reporting rank writes. One per-rank main
 * (rank_main) serves every world and backend. */
typedef struct world {
    const ir_graph *g;
    const rt_train_opts *o;
    diag *d;
    rt_world *world;        /* how this process's ranks were started, and their communicators */
    int t, p, v, dd, n;
    tgc_topology topo;
    bool pipelined;         /* printed as a pipeline run (every run steps through its rank's compiled program,
                               rt_pipe; the serial plan's summary stays a single rank's) */
    pipe_schedule sched;
    bool have_sched;
    int nlocal, first;      /* the ranks of this process: global ranks first .. first + nlocal - 1 */
    int reporter;           /* the global rank that prints and logs (tp 0, dp 0, the last stage) */
    rt_exec **ex;           /* per local rank */
    rt_pipe **pipes;
    feeder *fs;
    tgc_log *log;
    tgc_tfevents *tb;       /* --tensorboard-dir: the reporting process's event file */
    rt_trace *trace;
    run_meter *meter;
    ckpt_hook ck;
    rt_exec **ord;          /* the checkpoint's view of this process's ranks, (dp, pp, tp) order */
    rank_state *rs;         /* per local rank: where its steps stand */
    bool *ready;            /* per local rank: its communicators and pipeline made (its first rank_main) */
    int64_t until;          /* the steps of this call of trainer_run end before it (0-based) */
} world;

/* One rank per process (mpirun, torchrun): the outputs travel to world rank 0. */
static bool world_procs(const world *W) { return W->world && W->world->ops->processes; }

static int world_local(const world *W, int rank) { return rank - W->first; }

/* The executor of global rank r, on its device, initialised to its part of
 * the serial model (or of --init-from). */
static rt_exec *rank_exec_build(world *W, int r, diag *d)
{
    const rt_train_opts *o = W->o;
    tgc_coords c = tgc_topology_coords(&W->topo, r);
    /* A process per rank: the device of its local rank; threads: rank % devices. */
    rt_exec_options eo = {.backend = o->backend, .cc = o->cc,
                          .device = W->world->devices > 0 ? rt_world_device(&W->world->info, r, W->world->devices) : 0,
                          .memory_limit = o->memory_limit, .dp_size = W->dd, .dp_rank = c.dp,
                          .graphs = o->cuda_graphs};
    rt_exec *e = rt_exec_new_on(W->g, &eo, d);
    if (!e) return NULL;
    rt_exec_set_rank(e, NULL, c.tp, W->t);
    e->pp_stage = c.pp;
    if (!rt_exec_init_params(e, (uint64_t)o->seed)) {
        diag_error_plain(d, "initialising the parameters: %s", rt_exec_error(e));
        rt_exec_free(e);
        return NULL;
    }
    if (o->init_from && !rt_import_params(e, o->init_from, d)) {
        rt_exec_free(e);
        return NULL;
    }
    return e;
}

static int rank_setup(world *W, int r, tgc_comm *host);

/* What every rank runs, on its thread (host: the world's communicator on
 * host memory; NULL on a single rank): the steps before W->until, from
 * where its last call stopped. */
static int rank_main(void *arg, int r, tgc_comm *host)
{
    world *W = arg;
    int li = world_local(W, r), cores = (int)sysconf(_SC_NPROCESSORS_ONLN), here = W->world->host_ranks;
    /* The ranks share the machine's cores: each rank's kernels and GEMMs
     * (OpenMP, in this thread's data environment) use cores / ranks threads. */
    rt_set_omp_threads(cores > here ? cores / here : 1);
    rt_exec *e = W->ex[li];
    if (!W->ready[li] && rank_setup(W, r, host) != 0) return 1;
    W->ready[li] = true;
    rt_train_opts ro = *W->o;
    if (world_procs(W) && r != W->reporter && r != 0) ro.quiet = true;
    rank_run rr = {e, W->pipes[li], &W->fs[li], &ro, r == W->reporter ? W->log : NULL, W->d, r,
                   r == W->reporter, W->meter, &W->ck, host, &W->rs[li], W->until, r == W->reporter ? W->tb : NULL};
    bool profile = env_int("TGC_DEBUG") >= 2 && r == W->reporter;
    if (profile) rt_exec_profile_begin(e);
    int rc = run_steps(&rr);
    if (profile) rt_exec_profile_print(e, W->o->iters, stderr);
    /* --export-grads under the distributed optimizer: the whole gradients (after the last step). */
    if (rc == 0 && !world_procs(W) && W->o->export_grads && W->until == W->o->iters &&
        rt_pipe_gather_grads(W->pipes[li]) != 0)
        rc = 1;
    /* The rank threads may wait for this one's messages: the world stops
     * them now. (Under mpirun trainer_end decides: a failure every rank
     * agreed on ends each process without aborting the job.) */
    if (rc) rt_world_fail(W->world, r, e->comm, host);
    return rc;
}

/* A rank's communicators on its device and its pipeline runtime, made on
 * its own thread (NCCL's initialisation is collective) at its first
 * rank_main; the world gives the communicators (runtime/train/world.h).
 * 0, or 1 after reporting. */
static int rank_setup(world *W, int r, tgc_comm *host)
{
    int li = world_local(W, r);
    rt_exec *e = W->ex[li];
    diag rd;
    diag_init(&rd, W->d->out);
    tgc_comm *dev = rt_world_rank_comm(W->world, r, e, host, &rd), *oc;
    diag_free(&rd);
    if (host && !dev) return 1;
    e->comm = dev;
    void *ostream;
    if (!rt_world_overlap_comm(W->world, r, e, &oc, &ostream)) return 1;
    {
        rt_pipe_opts po = {.sched = &W->sched, .pp_rank = tgc_topology_coords(&W->topo, r).pp,
                           .dp_rank = tgc_topology_coords(&W->topo, r).dp, .dp_size = W->dd, .dist_opt = W->o->dist_opt,
                           .feed = feeder_feed, .feed_ctx = &W->fs[li], .host_comm = host,
                           .overlap_grad_reduce = W->o->overlap_grad_reduce,
                           .overlap_param_gather = W->o->overlap_param_gather, .overlap_comm = oc,
                           .overlap_stream = ostream};
        diag pd; /* this rank's own: ranks report at once */
        diag_init(&pd, W->d->out);
        W->pipes[li] = rt_pipe_new(e, &po, &pd);
        diag_free(&pd);
        if (!W->pipes[li]) return 1;
        if (W->trace) rt_pipe_trace(W->pipes[li], W->trace, r);
    }
    return 0;
}

/* Under mpirun, after the steps: --export-grads, --export and --trace, whose
 * parts travel to world rank 0, which writes the files. Every rank makes
 * the same calls whatever the root's writes give, and all agree on the
 * outcome at the end (*agreed: every rank knows it, no need to end the
 * job); a failed message stops at once. 0 or 1. */
static int mpi_outputs(world *W, bool *agreed, diag *d)
{
    const rt_train_opts *o = W->o;
    tgc_comm *comm = W->world->host;
    rt_ckpt_ranks R = {&W->ex[0], W->t, W->p, 1, comm, 0};
    bool root = rt_ckpt_is_root(&R), ok = true, lost = o->export_grads && rt_pipe_gather_grads(W->pipes[0]) != 0;
    if (!lost && o->export_path) ok = rt_export_tensors(&R, o->export_path, false, d);
    lost = lost || tgc_comm_last_status(comm) != TGC_COMM_OK;
    if (!lost && o->export_grads) ok = rt_export_tensors(&R, o->export_grads, true, d) && ok;
    lost = lost || tgc_comm_last_status(comm) != TGC_COMM_OK;
    if (!lost && W->trace) lost = rt_trace_gather(W->trace, comm, 0) != 0;
    if (!lost && W->trace && root) ok = trace_write(W->trace, o, d) && ok;
    ok = !lost && rt_ckpt_agree(&R, ok, NULL);
    *agreed = tgc_comm_last_status(comm) == TGC_COMM_OK;
    if (!*agreed && root) diag_error_plain(d, "%s: %s", o->trace_path && !o->export_path ? "--trace" : "--export",
                                           tgc_comm_error(comm));
    return ok ? 0 : 1;
}

/* The ranks' feeders and executors (global ranks first .. first + nlocal - 1). */
static bool world_ranks_build(world *W)
{
    const rt_train_opts *o = W->o;
    W->ex = xcalloc((size_t)W->nlocal, sizeof *W->ex);
    W->pipes = xcalloc((size_t)W->nlocal, sizeof *W->pipes);
    W->fs = xcalloc((size_t)W->nlocal, sizeof *W->fs);
    W->rs = xcalloc((size_t)W->nlocal, sizeof *W->rs);
    W->ready = xcalloc((size_t)W->nlocal, sizeof *W->ready);
    if (!rt_world_place(W->world, W->d)) return false;
    int M = W->have_sched ? W->sched.m * W->dd : 1;
    for (int li = 0; li < W->nlocal; li++) {
        int r = W->first + li;
        if (!(o->data || o->ndata_path ? feeder_open_data(&W->fs[li], W->g, o, M, W->t, r == 0, W->d)
                                       : feeder_open_batches(&W->fs[li], W->g, o, W->d)))
            return false;
        feeder_for_pipe(&W->fs[li], M);
        if (!(W->ex[li] = rank_exec_build(W, r, W->d))) return false;
    }
    return true;
}

/* The world's ranks of this process: the world started (its
 * communicators), the schedule, feeders, executors, then what the world
 * connects over them. */
static bool world_build(world *W)
{
    const rt_train_opts *o = W->o;
    diag *d = W->d;
    bool overlap = W->dd > 1 && (o->overlap_grad_reduce || o->overlap_param_gather);
    rt_world_spec spec = {&W->topo, rt_backend_ops_of(o->backend),
                          !overlap ? NULL : o->overlap_grad_reduce ? "overlap-grad-reduce" : "overlap-param-gather"};
    if (!rt_world_start(W->world, &spec, d)) return false;
    W->first = W->world->first;
    W->nlocal = W->world->nlocal;
    {
        if (!rt_train_schedule(W->g, o, W->p, W->v, &W->sched, d)) return false;
        W->have_sched = true;
    }
    return world_ranks_build(W) && rt_world_connect(W->world, W->ex, d);
}

static void world_free(world *W)
{
    rt_trace_free(W->trace);
    for (int li = 0; W->ex && li < W->nlocal; li++) {
        rt_pipe_free(W->pipes[li]);
        rt_world_free_rank(W->world, li); /* before its executor's stream goes */
        rt_exec_free(W->ex[li]);
        feeder_close(&W->fs[li]);
    }
    if (W->have_sched) pipe_schedule_free(&W->sched);
    free(W->ord);
    free(W->pipes);
    free(W->ex);
    free(W->fs);
    free(W->rs);
    free(W->ready);
}

/* What the run prints at the start (the reporting rank's process). */
static void world_summary(const world *W)
{
    rt_exec *e = W->ex[world_local(W, W->reporter)];
    meter_print_summary(e, stderr);
    if (W->n == 1 && !W->pipelined) return;
    const char *where = W->world->ops->where;
    char dev[96] = "";
    if (W->world->devices > 0)
        snprintf(dev, sizeof dev, ", %s", W->world->gpu_each ? "one GPU each, NCCL"
                                                             : "sharing the GPUs, device-local communicator");
    if (!W->pipelined) {
        fprintf(stderr, "tgc: %d tensor-parallel ranks (%s%s)\n", W->t, where, dev);
        return;
    }
    fprintf(stderr, "tgc: %d ranks (%s%s): t=%d tensor x d=%d data x p=%d pipeline; %s schedule, %d micro-batches "
            "of %lld per replica and step (M = %d in all)", W->n, where, dev, W->t, W->dd, W->p,
            pipe_kind_name(W->sched.kind), W->sched.m, (long long)W->fs[0].b, W->sched.m * W->dd);
    if (W->v > 1) fprintf(stderr, ", %d model chunks per rank", W->v);
    fputc('\n', stderr);
}

/* After the steps (threads or one rank): the figures and the outputs of replica 0. */
static int world_outputs(world *W, int rc)
{
    const rt_train_opts *o = W->o;
    diag *d = W->d;
    rt_exec *rep = W->ex[W->reporter];
    if (rc == 0 && !o->quiet) {
        meter_print_compute(W->meter, stderr);
        meter_print_memory(rep, W->n, stderr);
        for (int pr = 0; W->pipelined && pr < W->p; pr++) {
            int r = tgc_topology_rank(&W->topo, (tgc_coords){0, 0, pr});
            fprintf(stderr, "tgc: pipeline rank %d: %lld B of executor buffers + %lld B for in-flight micro-batches (",
                    pr, (long long)rt_exec_allocated(W->ex[r]), (long long)rt_pipe_bytes(W->pipes[r]));
            for (int c = 0; c < W->v; c++)
                fprintf(stderr, "%schunk %d: %d held at once", c ? ", " : "", c, rt_pipe_slots(W->pipes[r], c));
            fprintf(stderr, ")\n");
        }
    }
    if (rc == 0 && o->comm_stats && W->n > 1) {
        char title[64];
        snprintf(title, sizeof title, "rank 0 of %d, %lld steps", W->n, (long long)o->iters);
        tgc_comm_stats st;
        rt_world_stats(W->world, &st);
        tgc_comm_stats_print(&st, title, stdout);
    }
    /* Replica 0's ranks, stage by stage. */
    rt_exec **rep0 = xcalloc((size_t)(W->t * W->p), sizeof *rep0);
    for (int pr = 0; pr < W->p; pr++)
        for (int tr = 0; tr < W->t; tr++) rep0[pr * W->t + tr] = W->ex[tgc_topology_rank(&W->topo, (tgc_coords){tr, 0, pr})];
    rt_ckpt_ranks R0 = {rep0, W->t, W->p, 1, NULL, 0};
    if (rc == 0 && o->export_path) rc = rt_export_tensors(&R0, o->export_path, false, d) ? 0 : 1;
    if (rc == 0 && o->export_grads) rc = rt_export_tensors(&R0, o->export_grads, true, d) ? 0 : 1;
    free(rep0);
    if (rc == 0 && W->trace && !trace_write(W->trace, o, d)) rc = 1;
    return rc;
}

/* A run being trained: the world of this process's ranks, built once,
 * whose steps go on call after call (the library's trainer, include/tgc.h:
 * tgc_trainer_run, as `tgc run`, one call of every step; tgc_trainer_step
 * as many as its user makes). */
struct rt_trainer {
    world W;
    rt_train_opts o;
    run_meter meter;
    int me;          /* this process's first rank (MPI: its rank) */
    bool built;      /* the world was built (and its log opened) */
    bool ok;         /* built, and --save's lock taken and --load's checkpoint loaded */
    bool failed;     /* a step failed: the communicators may be aborted, no step runs again */
    bool agreed;     /* mpirun: every rank knows of the failure */
};

/* Builds this process's ranks (on this thread, as threads, or as this MPI
 * or torchrun process's one), opens the log and takes --save's lock and
 * --load's checkpoint; T->ok false after reporting (rt_trainer_end still
 * frees what was made). */
static void trainer_start(rt_trainer *T, const ir_graph *g, int t, int p, int v, int dd, bool pipelined, diag *d)
{
    world *W = &T->W;
    const rt_train_opts *o = &T->o;
    *W = (world){.g = g, .o = o, .d = d, .t = t, .p = p, .v = v, .dd = dd, .pipelined = pipelined, .meter = &T->meter};
    tgc_topology_init(&W->topo, t, dd, p);
    W->n = tgc_topology_size(&W->topo);
    rt_world_info info;
    if (!rt_world_detect(o->mpi, W->n, &info, d)) return;
    W->world = rt_world_new(&info, W->n);
    /* One process per rank: the pipeline runtime drives the steps, as under mpirun. */
    if (world_procs(W)) W->pipelined = pipelined = true;
    W->reporter = tgc_topology_rank(&W->topo, (tgc_coords){0, 0, p - 1});
    bool ok = world_build(W);
    int me = T->me = W->first; /* MPI: this process's rank */
    bool reports = rt_world_has(W->world, W->reporter);
    if (ok && o->trace_path && pipelined) /* world rank 0 gathers every rank's spans */
        W->trace = trace_for_ranks(&W->topo, &W->sched, o->iters, me == 0 ? W->n : W->nlocal);
    if (ok && reports && o->log_path) ok = (W->log = tgc_log_open(o->log_path, d)) != NULL;
    if (ok && reports && o->tensorboard_dir)
        ok = (W->tb = tgc_tfevents_open(o->tensorboard_dir, "--tensorboard-dir", d)) != NULL;
    if (ok && reports && !o->quiet) world_summary(W);
    /* A rank that failed to start stops the others at their first collective. */
    if (!ok) rt_world_abort(W->world, me, "the rank failed to start");
    /* Checkpoints: in one process the saver reads every executor; under
     * mpirun world rank 0 writes and every rank loads its own parts. */
    if (world_procs(W)) W->ck.ranks = (rt_ckpt_ranks){W->ex, t, p, dd, W->world->host, 0};
    else if (ok) {
        W->ord = xcalloc((size_t)W->n, sizeof *W->ord);
        for (int r = 0; r < W->n; r++) {
            tgc_coords c = tgc_topology_coords(&W->topo, r);
            W->ord[((size_t)c.dp * (size_t)p + (size_t)c.pp) * (size_t)t + (size_t)c.tp] = W->ex[r];
        }
        W->ck.ranks = (rt_ckpt_ranks){W->ord, t, p, dd, NULL, 0};
    }
    T->built = ok;
    T->ok = ok && ckpt_begin(&W->ck, o, d);
}

/* The steps before `until` (0-based, at most o->iters) on every rank of
 * this process: 0, 1 after reporting a failure (the trainer is failed
 * then), or 128 + a signal that stopped the ranks. */
static int trainer_run(rt_trainer *T, int64_t until)
{
    world *W = &T->W;
    if (!T->ok || T->failed) return 1;
    if (atomic_load(&T->meter.stop)) return stop_status(&T->meter);
    W->until = until < T->o.iters ? until : T->o.iters;
    int rc = rt_world_run(W->world, rank_main, W);
    if (rc) T->failed = true;
    else if ((rc = stop_status(&T->meter)) != 0) T->agreed = true; /* stopped by a signal: no outputs */
    return rc;
}

/* After the steps (rc: the last trainer_run's, or 1 when none ran because
 * the start failed): what the run writes (--export, --export-grads,
 * --trace; the figures), then everything is freed. Returns the run's
 * status. */
static int trainer_end(rt_trainer *T, int rc)
{
    world *W = &T->W;
    const rt_train_opts *o = &T->o;
    diag *d = W->d;
    int me = T->me;
    bool ok = T->ok;
    if (ok && rc == 0) {
        if (!world_procs(W)) rc = world_outputs(W, rc);
        else {
            if (me == W->reporter && !o->quiet) {
                meter_print_compute(&T->meter, stderr);
                meter_print_memory(W->ex[0], 1, stderr);
            }
            if (o->comm_stats && me == 0) {
                char title[64];
                snprintf(title, sizeof title, "rank 0 of %d, %lld steps", W->n, (long long)o->iters);
                tgc_comm_stats st;
                rt_world_stats(W->world, &st);
                tgc_comm_stats_print(&st, title, stdout);
            }
            rc = mpi_outputs(W, &T->agreed, d);
        }
    } else if (!ok) rc = 1;
    /* Under mpirun a failure every rank knows of ends each with status 1;
     * any other failure stops the others (at their next exchange, or MPI_Abort). */
    if (T->built && rc && !T->agreed && !W->ck.agreed) rt_world_abort(W->world, me, "the rank failed");
    ckpt_end(&W->ck);
    if (!tgc_log_close(W->log, d) && rc == 0) rc = 1;
    W->log = NULL;
    if (!tgc_tfevents_close(W->tb, d) && rc == 0) rc = 1;
    W->tb = NULL;
    rt_world_release(W->world); /* what is staged through the executors goes first */
    world_free(W);
    if (rt_world_free(W->world) != 0) rc = 1; /* MPI ends here */
    W->world = NULL;
    return rc;
}

/* The checks before anything is built, the meter, and the world. */
static rt_trainer *trainer_new(const ir_graph *g, const rt_train_opts *o, diag *d)
{
    TGC_ASSERT(!(o->data && o->ndata_path));
    bool data = o->data || o->ndata_path;
    if (!data == !o->inputs) {
        diag_error_plain(d, "give exactly one of --data PATH (text or llm.c tokens) and --inputs FILE.safetensors");
        return NULL;
    }
    if (!rt_train_files_check(o, d)) return NULL;
    if (o->load_dir && o->init_from) {
        diag_error_plain(d, "--load resumes from a checkpoint and --init-from starts from given weights: give one");
        return NULL;
    }
    int t = (int)ir_graph_tp_size(g), p, v, dd = o->dp > 0 ? (int)o->dp : 1;
    ir_graph_pp_dims(g, &p, &v);
    int64_t b = o->micro_batch;
    if (b <= 0) {
        const ir_node *tok = ir_graph_find(g, "tokens");
        b = tok && tok->shape.rank == 2 ? tok->shape.dim[1] : 1;
    }
    int64_t B = o->global_batch > 0 ? o->global_batch : b * dd;
    if (B % (b * dd) != 0) {
        diag_error_plain(d, "--global-batch-size %lld does not divide by --micro-batch-size %lld x --dp %d",
                         (long long)B, (long long)b, dd);
        return NULL;
    }
    int64_t mbs = B / b; /* micro-batches per step, all replicas */
    /* The pipeline runtime also runs the plans of one stage, one replica and
     * one micro-batch when they need what only it has: evaluation and the
     * trace of what each rank did. */
    bool pipe = p > 1 || dd > 1 || mbs > 1 || rt_train_evaluates(o) || o->trace_path;
    if (o->split_valid > 0 && !data) {
        diag_error_plain(d, "--split divides --data's samples; --inputs has no validation part");
        return NULL;
    }
    /* Under mpirun the ranks of this host share its memory. */
    if (!rt_train_memory_check(g, o, rt_world_host_ranks(o->mpi, t * p * dd), dd, d)) return NULL;
    rt_trainer *T = xcalloc(1, sizeof *T);
    T->o = *o;
    /* The per-step record's size is the caller's --train-iters: refused, not an exit, when it cannot be had. */
    size_t steps = (uint64_t)o->iters + 1 > SIZE_MAX / sizeof(tgc_step_stats) ? 0 : (size_t)o->iters + 1;
    T->meter = (run_meter){.step_s = steps ? calloc(steps, sizeof(double)) : NULL, .started = now_s(),
                           .hist = steps ? calloc(steps, sizeof(tgc_step_stats)) : NULL,
                           .tokens = ir_graph_tokens(g) * mbs, .batch = B, .world = t * p * dd};
    bool held = T->meter.step_s && T->meter.hist;
    if (!held)
        diag_error_plain(d, "--train-iters %lld: out of memory for the run's record of every step (%llu bytes)",
                         (long long)o->iters,
                         (unsigned long long)((uint64_t)o->iters + 1) * (sizeof(double) + sizeof(tgc_step_stats)));
    if (held) meter_flops(&T->meter, g, t, mbs);
    if (!held || !meter_peak(&T->meter, g, &T->o, t * p * dd, d)) {
        free(T->meter.step_s);
        free(T->meter.hist);
        free(T);
        return NULL;
    }
    trainer_start(T, g, t, p, v, dd, pipe || o->mpi, d);
    return T;
}

rt_trainer *rt_trainer_new(const ir_graph *g, const rt_train_opts *o, diag *d)
{
    rt_trainer *T = trainer_new(g, o, d);
    if (T && !T->ok) {
        rt_trainer_end(T, d);
        return NULL;
    }
    return T;
}

int rt_trainer_steps(rt_trainer *T, int64_t n, diag *d)
{
    T->W.d = d;
    int64_t at = rt_trainer_iteration(T);
    return trainer_run(T, n < T->o.iters - at ? at + n : T->o.iters);
}

int64_t rt_trainer_iteration(const rt_trainer *T)
{
    if (!T->W.rs || T->W.nlocal < 1) return 0;
    return T->W.rs[0].started ? T->W.rs[0].next : T->W.ck.loaded ? T->W.ck.start.step : 0;
}

int64_t rt_trainer_iters(const rt_trainer *T) { return T->o.iters; }
bool rt_trainer_saves(const rt_trainer *T) { return T->o.save_dir != NULL; }

bool rt_trainer_reports(const rt_trainer *T) { return !world_procs(&T->W) || T->me == T->W.reporter; }

const tgc_step_stats *rt_trainer_stats(const rt_trainer *T, int64_t it)
{
    return it >= 1 && it <= rt_trainer_iteration(T) && T->meter.hist[it - 1].step == it ? &T->meter.hist[it - 1] : NULL;
}

int64_t rt_trainer_tokens(const rt_trainer *T) { return T->meter.tokens; }

/* A checkpoint of where the ranks stand, written from the calling thread
 * while no rank runs: every executor of this process (one process only). */
bool rt_trainer_save(rt_trainer *T, const char *dir, diag *d)
{
    if (!T->ok || T->failed || world_procs(&T->W)) {
        diag_error_plain(d, "%s: no checkpoint of a failed trainer (or of one under mpirun/torchrun)", dir);
        return false;
    }
    const rank_state *rs = &T->W.rs[T->W.reporter];
    rt_ckpt_state st = {rs->next, rs->opt_step, rs->started ? rs->sc.scale : 1.0, rs->sc.growth, rs->sc.hysteresis_left};
    if (!rs->started) { /* no step yet: the scaler a first step would start from */
        loss_scaler sc = scaler_new(T->W.ex[0], &T->o);
        st.loss_scale = sc.scale;
        st.hysteresis_left = sc.hysteresis_left;
    }
    int fd = rt_ckpt_lock(dir, d);
    if (fd < 0) return false;
    bool ok = rt_ckpt_save(dir, &T->W.ck.ranks, &st, &T->o, d);
    rt_ckpt_unlock(fd);
    return ok;
}

bool rt_trainer_load(rt_trainer *T, const char *dir, diag *d)
{
    if (!T->ok || T->failed || world_procs(&T->W)) {
        diag_error_plain(d, "%s: no checkpoint loads into a failed trainer (or one under mpirun/torchrun)", dir);
        return false;
    }
    rt_ckpt_state st;
    if (!rt_ckpt_load(dir, &T->W.ck.ranks, &T->o, &st, d)) return false;
    if (st.step > T->o.iters) {
        diag_error_plain(d, "%s: the checkpoint is of iteration %lld, past --train-iters %lld", dir,
                         (long long)st.step, (long long)T->o.iters);
        return false;
    }
    for (int li = 0; li < T->W.nlocal; li++) {
        rank_state *rs = &T->W.rs[li];
        rs->sc = scaler_resume(T->W.ex[li], &T->o, &st);
        rs->next = st.step;
        rs->opt_step = st.opt_step;
        rs->started = true;
    }
    return true;
}

int rt_trainer_end(rt_trainer *T, diag *d)
{
    if (!T) return 1;
    T->W.d = d;
    int rc = trainer_end(T, T->failed ? 1 : stop_status(&T->meter));
    free(T->meter.step_s);
    free(T->meter.hist);
    free(T);
    return rc;
}
