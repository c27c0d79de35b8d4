/* The figures a run reports (runtime/train/meter.h). */
#include "runtime/train/meter.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "passes/cost.h"
#include "runtime/backend/calibrate.h"
#include "support/env.h"

static double mib(int64_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

/* One line on what the run holds; TGC_DEBUG >= 1 adds the memory plan. */
void meter_print_summary(const rt_exec *e, FILE *out)
{
    const ir_graph *g = e->g;
    int gemms = 0;
    for (int i = 0; i < e->prog->ninstrs; i++) gemms += e->prog->instrs[i].kind == CG_GEMM;
    /* Optimizer state in units of the parameters' size W, as the seed counts
     * it: none (SGD), W (momentum), 2W (Adam), + W for fp32 master weights
     * (W in fp32: the parameters are stored in 16 bits then). */
    int64_t w = ir_param_elems(g) * ir_state_elem_size(g);
    fprintf(out, "tgc: %s: %.2fM parameters, %d kernels and %d GEMMs per step, optimizer state %.4gW%s, %.1f MiB in all\n",
            g->model, (double)ir_graph_param_count(g) / 1e6, e->prog->nkernels, gemms,
            w ? (double)e->state_bytes / (double)w : 0.0, e->shard_elems ? " (this replica's shard)" : "",
            mib(rt_exec_bytes(e)));
    if (*rt_exec_device_desc(e)) fprintf(out, "tgc: %s %s\n", rt_exec_backend_name(e), rt_exec_device_desc(e));
    if (env_int("TGC_DEBUG") < 1) return;
    fprintf(out, "tgc: memory: parameters %.2f MiB, gradients %.2f MiB, optimizer state %.2f MiB, inputs %.2f MiB, "
            "activations %.2f MiB (the plan's peak), workspace %.2f MiB\n", mib(g->mem_size[IR_MEM_PARAM]),
            mib(g->mem_size[IR_MEM_GRAD]), mib(e->state_bytes), mib(g->mem_size[IR_MEM_INPUT]),
            mib(g->mem_size[IR_MEM_ACT]), mib(e->prog->workspace_bytes));
    if (e->so) fprintf(out, "tgc: kernels: %s\n", rt_so_path(e->so));
}

/* Model FLOPs of one iteration: the seed's 72 B s l h^2 (1 + s/6h + V/12lh)
 * (no recomputation: what the model needs, not what recomputation adds,
 * as MFU is defined) when the model names its dimensions; otherwise the
 * ops of the training graph, one rank's times t. */
void meter_flops(run_meter *m, const ir_graph *g, int t, int64_t mbs)
{
    cost_model M;
    char err[256];
    int64_t tokens = ir_graph_tokens(g) * mbs;
    if (cost_model_from_graph(g, &M, err, sizeof err) && tokens > 0 && tokens % M.s == 0) {
        m->flops = tgc_model_flops(tokens / M.s, M.s, M.l, M.h, M.V, false);
        m->how = "72 B s l h^2 (1 + s/6h + V/12lh)";
        return;
    }
    double f = 0.0;
    for (int i = 0; i < g->nnodes; i++) {
        ir_op op = g->nodes[i]->op;
        if (!ir_node_is_update(g->nodes[i]) && op != IR_OP_GLOBAL_NORM) f += (double)ir_node_flops(g->nodes[i]);
    }
    m->flops = f * (double)t * (double)mbs;
    m->how = "the training graph's ops";
}

/* The peak MFU is against: --peak-tflops per device (t GPUs; on the CPU the
 * ranks are threads sharing one machine, whose peak it is), or this
 * machine's sgemm rate measured now. false after saying why not. */
bool meter_peak(run_meter *m, const ir_graph *g, const rt_train_opts *o, int t, diag *d)
{
    bool per_device = rt_backend_ops_of(o->backend)->device_memory; /* a peak per device */
    if (o->peak_tflops > 0) {
        m->peak = o->peak_tflops * 1e12 * (per_device ? t : 1);
        m->peak_how = per_device ? "--peak-tflops per GPU" : "--peak-tflops";
        return true;
    }
    if (!o->calibrate_peak) return true;
    if (per_device) {
        diag_error_plain(d, "--calibrate-peak times the CPU's sgemm; on --backend %s give the device's peak with "
                         "--peak-tflops", rt_backend_name(o->backend));
        return false;
    }
    cost_model M;
    char err[256];
    bool dims = cost_model_from_graph(g, &M, err, sizeof err);
    rt_gemm_calibration cal;
    rt_gemm_calibrate(&cal, dims ? M.s : 1024, dims ? M.h : 768, 0.2);
    m->peak = cal.peak;
    m->peak_how = "--calibrate-peak: this machine's best sgemm rate";
    if (!o->quiet) fprintf(stderr, "tgc: peak %.4g GFLOP/s (sgemm calibration: the best rate at square and [b s, h] "
                                   "x [h, 4h] sizes)\n", cal.peak / 1e9);
    return true;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median step time leaves out the first step (which warms caches and
 * page tables up) when there are others, and is robust to a machine that
 * other work slows now and then. */
void meter_print_compute(run_meter *m, FILE *out)
{
    if (m->flops <= 0 || m->n <= 0) return;
    int64_t skip = m->n > 1, k = m->n - skip;
    qsort(m->step_s + skip, (size_t)k, sizeof *m->step_s, cmp_double);
    double *t = m->step_s + skip, med = k % 2 ? t[k / 2] : 0.5 * (t[k / 2 - 1] + t[k / 2]);
    double rate = med > 0 ? m->flops / med : 0.0;
    fprintf(out, "tgc: compute: %.4g model FLOPs per iteration (%s), %.4g TFLOP/s achieved (median step %.2f ms%s)",
            m->flops, m->how, rate / 1e12, med * 1e3, skip ? ", the first step left out" : "");
    if (m->peak > 0) fprintf(out, ", MFU %.2f%% of %.4g TFLOP/s (%s)", 100.0 * rate / m->peak, m->peak / 1e12,
                             m->peak_how);
    fputc('\n', out);
}

/* The executor's allocations beside the memory plan's prediction (what `tgc
 * plan` reports per rank), and the whole process's peak resident size. */
void meter_print_memory(const rt_exec *e, int t, FILE *out)
{
    struct rusage ru;
    double rss = getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss * 1024.0 : 0.0; /* Linux: KiB */
    int64_t planned = rt_exec_bytes(e), got = rt_exec_allocated(e);
    fprintf(out, "tgc: memory per rank%s: %lld B allocated by the executor, %lld B predicted by the plan (%.4f x); "
            "peak RSS of the process %.1f MiB (the compiler, the kernels and the runtime included%s)\n",
            t > 1 ? " (rank 0)" : "", (long long)got, (long long)planned, planned ? (double)got / (double)planned : 0.0,
            mib((int64_t)rss), t > 1 ? ", all ranks" : "");
}

/* A scalar at iteration it and its "vs samples" twin at the samples
 * consumed by then, as Megatron writes most of its training scalars. */
static bool tb_pair(tgc_tfevents *tb, const char *tag, const char *vs, int64_t it, int64_t samples, double v)
{
    return tgc_tfevents_scalar(tb, tag, it, v) && tgc_tfevents_scalar(tb, vs, samples, v);
}

bool meter_tensorboard(tgc_tfevents *tb, const rt_train_opts *o, const run_meter *m, meter_tb_window *w,
                       const tgc_step_stats *st, double dt, int64_t bytes, diag *d)
{
    int64_t it = st->step, samples = it * m->batch;
    bool ok = true, first = !w->started;
    w->started = true;
    w->sum += dt;
    w->n++;
    if (it % o->tensorboard_log_interval == 0) {
        ok = tb_pair(tb, "learning-rate", "learning-rate vs samples", it, samples, st->lr) &&
             tb_pair(tb, "batch-size", "batch-size vs samples", it, samples, (double)m->batch) &&
             tb_pair(tb, "lm loss", "lm loss vs samples", it, samples, st->loss);
        if (ok && st->has_scale) ok = tb_pair(tb, "loss-scale", "loss-scale vs samples", it, samples, st->loss_scale);
        if (ok && !st->skipped) ok = tb_pair(tb, "grad-norm", "grad-norm vs samples", it, samples, st->grad_norm);
        if (ok && o->tensorboard_memory) {
            ok = tgc_tfevents_scalar(tb, "mem-allocated-bytes", it, (double)bytes) &&
                 tgc_tfevents_scalar(tb, "mem-max-allocated-bytes", it, (double)bytes);
        }
    }
    if (ok && o->tensorboard_timers && (it % o->log_interval == 0 || first)) {
        double mean = w->sum / (double)w->n; /* seconds per iteration since the last reset */
        if (!first) ok = tgc_tfevents_scalar(tb, "iteration-time", it, mean);
        if (ok && m->flops > 0 && mean > 0) /* TFLOP/s per rank */
            ok = tgc_tfevents_scalar(tb, "throughput", it, m->flops / (mean * 1e12 * (double)m->world));
        if (!first) w->sum = 0, w->n = 0;
    }
    if (ok && st->has_val_loss) {
        ok = tb_pair(tb, "lm loss validation", "lm loss validation vs samples", it, samples, st->val_loss);
        if (ok && o->tensorboard_ppl)
            ok = tb_pair(tb, "lm loss validation ppl", "lm loss validation ppl vs samples", it, samples,
                         exp(fmin(20.0, st->val_loss)));
    }
    if (ok && tgc_tfevents_flush(tb)) return true;
    diag_error_plain(d, "cannot write the TensorBoard events '%s': %s", tgc_tfevents_path(tb), strerror(errno));
    return false;
}

