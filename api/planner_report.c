/* tgc_planner_report (include/tgc.h): `tgc plan`'s work, what a
 * configuration costs before anything runs (docs/planner.md).
 *
 *   a model under the run's options: memory per rank (measured from the
 *     compiled plan; what this tgc does not compile yet, analytically;
 *     with --backend cuda|sim the backend's own bytes and the sum per
 *     device), the paper's activation formulas beside it, the checkpoint
 *     count, FLOPs
 *   search: the parallel-configuration planner
 *   calibrate: this machine's sgemm rate
 *
 * The report goes to out_f and the messages to err_f, the call's
 * diagnostics (one call at a time, as every call of the library). */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "codegen/codegen.h"
#include "passes/cost.h"
#include "passes/pass.h"
#include "passes/planner.h"
#include "runtime/backend/backend.h"
#include "runtime/backend/calibrate.h"
#include "runtime/train/pipe.h"
#include "support/util.h"
#include "tgc.h"

#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * MIB)

/* tgc_planner_report's out and its diagnostics, during the call: one pair
 * per thread, so calls on different threads do not share them. */
static _Thread_local FILE *out_f, *err_f;

/* The options only plan has (tgc_planner_args'). */
typedef struct plan_opts {
    bool search, calibrate, no_sp;
    int64_t gpus, gpus_per_node, top, max_b;
    int64_t devices; /* --devices: the devices the ranks share (0: not given) */
    double gpu_memory, intra, inter, hbm; /* GiB, GB/s */
} plan_opts;

/* ---- the run's options ---------------------------------------------------------------- */

/* The pipeline, data-parallel and recomputation options are evaluated
 * analytically for the one-rank report (and compiled for real at its
 * end), so they are checked here: the rest of the run's checks apply as
 * they are. */
static int check_config(const tgc_config *c)
{
    tgc_config rest = *c;
    rest.pp = rest.dp = rest.vp = 1;
    rest.vp_layers = 0;
    rest.recompute_granularity = "none";
    rest.global_batch_size = 0;
    rest.pipeline_schedule = "1f1b";
    if (c->pp < 1 || c->dp < 1 || c->vp < 1) {
        fprintf(err_f, "tgc: error: parallel degrees must be at least 1 (tp=%lld pp=%lld dp=%lld vp=%lld)\n",
                (long long)c->tp, (long long)c->pp, (long long)c->dp, (long long)c->vp);
        return 2;
    }
    if (c->vp > 1 && strcmp(c->pipeline_schedule, "interleaved") != 0) {
        fprintf(err_f, "tgc: error: --vp %lld needs --pipeline-schedule interleaved\n", (long long)c->vp);
        return 2;
    }
    if (c->recompute_num_layers < 1) {
        fprintf(err_f, "tgc: error: --recompute-num-layers %lld: expected at least 1\n",
                (long long)c->recompute_num_layers);
        return 2;
    }
    return tgc_config_check_to(&rest, err_f);
}

/* The options of the passes, as `tgc compile` sets them, for one pipeline
 * rank of the whole model (p and d are evaluated analytically). */
static void plan_pass_options(pass_options *po, const tgc_config *c)
{
    pass_options d;
    pass_options_defaults(&d);
    tgc_config_pass_options(c, po);
    po->pp = d.pp;
    po->vp = d.vp;
    po->vp_layers = d.vp_layers;
    po->pipeline_schedule = d.pipeline_schedule;
    po->dp = d.dp;
    po->micro_batch = d.micro_batch;
    po->global_batch = d.global_batch;
    po->recompute = d.recompute;
    po->recompute_block = d.recompute_block;
    po->recompute_layers = d.recompute_layers;
}

static int64_t hparam_int(const ir_graph *g, const char *name)
{
    for (int i = 0; i < g->nhparams; i++)
        if (strcmp(g->hparams[i].name, name) == 0 && !g->hparams[i].is_float) return g->hparams[i].i;
    return 0;
}

/* ---- the memory report ------------------------------------------------------------------------ */

/* What the report needs, gathered once. */
typedef struct report {
    const tgc_config *c;
    const cost_model *M;
    bool dims;           /* M is filled (the model names its hyperparameters) */
    int64_t b, B, m;     /* micro-batch, global batch, micro-batches per pipeline */
    int64_t v;           /* model chunks per pipeline rank */
    const ir_graph *g;   /* the compiled training graph of one rank */
    const cg_program *prog;
    cost_plan_mem pm;
    int64_t state;       /* optimizer state bytes (the executor's) */
    bool analytic;       /* p, d, v, recomputation or the distributed optimizer apply */
    const rt_backend_ops *be; /* --backend: its target's kernels, its extra bytes */
    const plan_opts *o;
} report;

enum { ROW_PARAM, ROW_GRAD, ROW_STATE, ROW_INPUT, ROW_ACT, ROW_WS, ROW_COMM, ROW_BACKEND, ROW_TOTAL, ROW_COUNT };
static const char *const row_names[ROW_COUNT] = {"parameters", "gradients", "optimizer state", "inputs",
                                                 "activations", "workspace",
                                                 "communication buffers", "backend workspace", "total"};

/* Planning for a device (--backend cuda or sim): the per-rank figures
 * include the backend's own allocation, and the ranks' sum per device
 * follows. The CPU's ranks share the host, as the report has always said. */
static bool device_backend(const rt_backend_ops *be) { return strcmp(be->name, "cpu") != 0; }

static cost_recompute run_recompute(const tgc_config *c)
{
    cost_recompute r = COST_RECOMPUTE_NONE;
    cost_recompute_from(c->recompute_granularity, &r);
    return r;
}

/* Activation bytes one micro-batch leaves on a stage of ls layers until
 * its backward pass, under the run's recomputation. */
static double stage_kept(const report *R, double ls)
{
    const cost_plan_mem *pm = &R->pm;
    double in = (double)pm->layer_input, lay = (double)pm->layer_saved;
    double n = (double)R->c->recompute_num_layers;
    switch (run_recompute(R->c)) {
    case COST_RECOMPUTE_SELECTIVE: return ls * (lay - (double)pm->layer_core);
    case COST_RECOMPUTE_FULL:
        if (strcmp(R->c->recompute_method, "block") == 0) /* the first n layers recomputed, the rest stored */
            return n >= ls ? ls * in : n * in + (ls - n) * lay;
        return ceil(ls / n) * in; /* uniform: one checkpoint per n layers */
    default: return ls * lay;
    }
}

/* The configuration's bytes per rank of the first pipeline stage, from the
 * measured plan: the stage's share of the layers, the micro-batches 1F1B
 * keeps in flight, the recomputation's checkpoints, the optimizer state
 * over d. */
static void analytic_rows(const report *R, double *row)
{
    const tgc_config *c = R->c;
    const ir_graph *g = R->g;
    const cost_plan_mem *pm = &R->pm;
    double l = (double)R->M->l, p = (double)c->pp, v = (double)R->v;
    double param = (double)g->mem_size[IR_MEM_PARAM], lp = (double)pm->layer_params;
    double stage_params = param - lp + lp / p; /* embeddings and final norm counted on the first stage */
    row[ROW_PARAM] = stage_params;
    row[ROW_GRAD] = param > 0 ? stage_params * (double)g->mem_size[IR_MEM_GRAD] / param : 0.0;
    row[ROW_STATE] = param > 0 ? stage_params * (double)R->state / param : 0.0;
    if (c->use_distributed_optimizer) row[ROW_STATE] /= (double)c->dp;
    row[ROW_INPUT] = (double)g->mem_size[IR_MEM_INPUT];
    double whole = (double)g->mem_size[IR_MEM_ACT], layers_kept = l * (double)pm->layer_saved;
    double base = whole > layers_kept ? whole - layers_kept : 0.0; /* working set, embeddings, the LM head */
    double inflight = c->pp == 1 ? 1.0 : (double)(R->m < c->pp ? R->m : c->pp);
    if (c->pp > 1 && strcmp(c->pipeline_schedule, "gpipe") == 0) inflight = (double)R->m; /* all forwards first */
    if (R->v > 1) inflight *= 1.0 + (p - 1.0) / (p * v);
    row[ROW_ACT] = base + inflight * stage_kept(R, l / p);
    if (run_recompute(c) == COST_RECOMPUTE_FULL) row[ROW_ACT] += (double)pm->layer_saved; /* the layer recomputed */
    row[ROW_WS] = (double)R->prog->workspace_bytes;
    row[ROW_COMM] = c->pp > 1 ? 2.0 * (double)pm->layer_input : 0.0; /* receive: the activation, its gradient */
    row[ROW_BACKEND] = (double)R->be->extra_bytes;
    row[ROW_TOTAL] = 0.0;
    for (int i = 0; i < ROW_TOTAL; i++) row[ROW_TOTAL] += row[i];
}

static void measured_rows(const report *R, double *row)
{
    const ir_graph *g = R->g;
    row[ROW_PARAM] = (double)g->mem_size[IR_MEM_PARAM];
    row[ROW_GRAD] = (double)g->mem_size[IR_MEM_GRAD];
    row[ROW_STATE] = (double)R->state;
    row[ROW_INPUT] = (double)g->mem_size[IR_MEM_INPUT];
    row[ROW_ACT] = (double)g->mem_size[IR_MEM_ACT];
    row[ROW_WS] = (double)R->prog->workspace_bytes;
    row[ROW_COMM] = 0.0; /* the collectives run in place on planned values */
    row[ROW_BACKEND] = (double)R->be->extra_bytes;
    row[ROW_TOTAL] = 0.0;
    for (int i = 0; i < ROW_TOTAL; i++) row[ROW_TOTAL] += row[i];
}

static void print_header(const report *R)
{
    const tgc_config *c = R->c;
    const ir_graph *g = R->g;
    fprintf(out_f, "tgc plan: %s", g->model);
    if (R->dims)
        fprintf(out_f, ": %lld layers, hidden %lld, %lld heads, seq %lld, vocab %lld", (long long)R->M->l,
               (long long)R->M->h, (long long)R->M->a, (long long)R->M->s, (long long)R->M->V);
    fprintf(out_f, "; %.2fM parameters\n", (double)R->M->params / 1e6);
    fprintf(out_f, "configuration: t=%lld%s, p=%lld, d=%lld, v=%lld, micro-batch b=%lld, global batch B=%lld (m=%lld), "
           "recompute %s, %s, %s\n", (long long)c->tp, c->sequence_parallel ? " SP" : "", (long long)c->pp,
           (long long)c->dp, (long long)R->v, (long long)R->b, (long long)R->B, (long long)R->m,
           c->recompute_granularity, c->optimizer, ir_dtype_name(g->precision));
    if (device_backend(R->be))
        fprintf(out_f, "backend: %s (%s kernels), %lld device%s for the %lld rank%s\n", R->be->name,
               R->be->target == CG_TARGET_CUDA ? "CUDA" : "C", (long long)R->o->devices,
               R->o->devices == 1 ? "" : "s", (long long)(c->tp * c->pp * c->dp),
               c->tp * c->pp * c->dp == 1 ? "" : "s");
    fprintf(out_f, "measured: the compiled training step of one rank and one micro-batch (tensor and sequence parallelism, "
           "precision and optimizer as given)\n");
    if (!R->analytic) return;
    fprintf(out_f, "analytic (from the one-rank plan; the compiled 3D plan follows at the end):");
    if (c->pp > 1) fprintf(out_f, " pipeline p=%lld (%s%s),", (long long)c->pp, c->pipeline_schedule,
                          R->v > 1 ? ", v chunks" : "");
    if (c->dp > 1) fprintf(out_f, " data parallel d=%lld,", (long long)c->dp);
    if (c->use_distributed_optimizer) fprintf(out_f, " the distributed optimizer (state over d),");
    if (run_recompute(c) != COST_RECOMPUTE_NONE)
        fprintf(out_f, " recompute %s (%s, %lld layer%s),", c->recompute_granularity, c->recompute_method,
               (long long)c->recompute_num_layers, c->recompute_num_layers == 1 ? "" : "s");
    fprintf(out_f, " from the measured sizes of a layer\n");
}

static void print_memory(const report *R)
{
    double plan[ROW_COUNT], conf[ROW_COUNT];
    measured_rows(R, plan);
    if (R->analytic) analytic_rows(R, conf);
    fprintf(out_f, "\nmemory per rank %28s%s\n", "plan (measured)", R->analytic ? "      configuration (analytic)" : "");
    for (int i = 0; i < ROW_COUNT; i++) {
        if (i == ROW_BACKEND && !device_backend(R->be)) continue;
        fprintf(out_f, "  %-22s %14.0f B %10.2f MiB", row_names[i], plan[i], plan[i] / MIB);
        if (R->analytic) fprintf(out_f, " %14.2f MiB", conf[i] / MIB);
        /* W in fp32, as tgc run counts it (the parameters are 16-bit under mixed precision). */
        double w32 = (double)ir_param_elems(R->g) * ir_state_elem_size(R->g) / (double)R->g->mem_size[IR_MEM_PARAM];
        if (i == ROW_STATE && plan[ROW_PARAM] > 0)
            fprintf(out_f, "   (%.0fW: W = the parameters' %sbytes)", plan[ROW_STATE] / (plan[ROW_PARAM] * w32),
                   R->g->precision == IR_BF16 || R->g->precision == IR_F16 ? "fp32 " : "");
        if (i == ROW_BACKEND)
            fprintf(out_f, "   (what --backend %s allocates beside the plan's buffers%s)", R->be->name,
                   strcmp(R->be->name, "cuda") == 0 ? ": cuBLASLt's workspace" : "");
        fprintf(out_f, "\n");
    }
    const cost_plan_mem *pm = &R->pm;
    if (pm->peak_at)
        fprintf(out_f, "activations: the plan's arena; at most %lld B (%.2f MiB) are live at once, after %%%s (%s), node %d "
               "of %d\n", (long long)pm->act_live_peak, (double)pm->act_live_peak / MIB, pm->peak_at->name,
               ir_op_name(pm->peak_at->op), pm->peak_at->id, R->g->nnodes);
    fprintf(out_f, "activations kept for the backward pass: %lld B (%.2f MiB)\n", (long long)pm->saved,
           (double)pm->saved / MIB);
    fprintf(out_f, "communication: %d collectives per step run in place on planned values (their outputs, %.2f MiB, are "
           "activations above)%s\n", pm->ncollectives, (double)pm->collective_bytes / MIB,
           R->c->pp > 1 ? "; a pipeline stage adds receive buffers for an activation and its gradient" : "");
}

/* One formula line; `mark` flags the configuration's own. */
static void formula_line(const char *what, const char *expr, double bytes, double sbh, bool mark)
{
    fprintf(out_f, "    %-28s %-26s = %14.0f B %10.2f MiB  (%6.2f sbh)%s\n", what, expr, bytes, bytes / MIB, bytes / sbh,
           mark ? "  <- this configuration" : "");
}

static void print_formulas(const report *R, double sbh)
{
    const cost_model *M = R->M;
    const tgc_config *c = R->c;
    int64_t t = c->tp, b = R->b;
    cost_recompute rc = run_recompute(c);
    bool sp = c->sequence_parallel, fa = M->fused_attention;
    fprintf(out_f, "  the formula (Korthikanti et al.; fp16 values, 1-byte dropout masks), per layer and micro-batch, "
           "t=%lld%s:\n", (long long)t,
           fa ? "; fused attention (docs/attention.md): no s x s scores, the 5as/h term becomes the f32 row "
                "log-sum-exp, 4a/h" : "");
    formula_line("no parallelism", fa ? "sbh(34 + 4a/h)" : "sbh(34 + 5as/h)",
                 cost_act_layer(M, b, 1, false, COST_RECOMPUTE_NONE), sbh, t == 1 && rc == COST_RECOMPUTE_NONE);
    formula_line("tensor parallel", fa ? "sbh(10 + 24/t + 4a/(ht))" : "sbh(10 + 24/t + 5as/(ht))",
                 cost_act_layer(M, b, t, false, COST_RECOMPUTE_NONE), sbh, t > 1 && !sp && rc == COST_RECOMPUTE_NONE);
    formula_line("tensor + sequence parallel", fa ? "sbh(34 + 4a/h)/t" : "sbh(34 + 5as/h)/t",
                 cost_act_layer(M, b, t, true, COST_RECOMPUTE_NONE), sbh, sp && rc == COST_RECOMPUTE_NONE);
    formula_line("selective recompute, TP", fa ? "as none: nothing s x s" : "sbh(10 + 24/t)",
                 cost_act_layer(M, b, t, false, COST_RECOMPUTE_SELECTIVE), sbh, !sp && rc == COST_RECOMPUTE_SELECTIVE);
    formula_line("selective recompute, TP + SP", fa ? "as none: nothing s x s" : "34sbh/t",
                 cost_act_layer(M, b, t, true, COST_RECOMPUTE_SELECTIVE), sbh, sp && rc == COST_RECOMPUTE_SELECTIVE);
    formula_line("full recompute", sp ? "2sbh/t (the input)" : "2sbh (the input)",
                 cost_act_layer(M, b, t, sp, COST_RECOMPUTE_FULL), sbh, rc == COST_RECOMPUTE_FULL);
}

/* The formula of the compiled plan (no recomputation) in its own terms,
 * and what is left between it and the measurement. */
static void print_difference(const report *R, double sbh)
{
    const cost_plan_mem *pm = &R->pm;
    const tgc_config *c = R->c;
    int64_t t = c->tp;
    double f = cost_act_layer(R->M, R->b, t, c->sequence_parallel, COST_RECOMPUTE_NONE);
    double masks = cost_act_layer_masks(R->M, R->b, t, c->sequence_parallel, COST_RECOMPUTE_NONE);
    double scale = (double)pm->elem_bytes / 2.0, gathered = 0.0;
    for (int i = 0; i < pm->nops; i++)
        if (pm->by_op[i].op == IR_OP_SP_GATHER) gathered += (double)pm->by_op[i].bytes * (1.0 - 1.0 / (double)t);
    /* Fused attention's row log-sum-exp is f32 whatever the values are;
     * its output is kept for its backward beside the permuted copy the
     * dense GEMM reads (the formula's 2sbh of it), unless it writes that
     * [s, b, h] layout itself (out=sbnd, docs/attention.md "Layouts"). */
    bool fa = R->M->fused_attention, out_inplace = false;
    for (int i = 0; R->g && i < R->g->nnodes; i++)
        out_inplace |= R->g->nodes[i]->op == IR_OP_ATTENTION && ir_attn_out_sbnd(R->g->nodes[i]);
    double lse = fa ? 4.0 * (double)R->M->a * (double)R->M->s * (double)R->b / (double)t : 0.0;
    double out = fa && !out_inplace ? (double)pm->elem_bytes * sbh / (double)t : 0.0;
    double expect = (f - masks - lse) * scale + lse + gathered + out;
    fprintf(out_f, "  the plan's terms: %d-byte values (x%.0f), no dropout masks (-%.0f B: tgc regenerates them from Philox "
           "in the backward pass)", pm->elem_bytes, scale, masks);
    if (gathered > 0)
        fprintf(out_f, ", the all-gathered inputs of the column-parallel GEMMs kept whole (+%.0f B: Megatron gathers them "
               "again in the backward pass)", gathered);
    if (fa && !out_inplace)
        fprintf(out_f, ", the attention's output kept for its backward beside the [s, b, h] copy the dense GEMM reads "
               "(+%.0f B), the row log-sum-exp in f32 (%.0f B)", out, lse);
    else if (fa)
        fprintf(out_f, ", the attention's output written as the [s, b, h] the dense GEMM reads (one copy), the row "
               "log-sum-exp in f32 (%.0f B)", lse);
    fprintf(out_f, "\n    expected %14.0f B %10.2f MiB  (%6.2f sbh); measured / expected = %.3f\n", expect, expect / MIB,
           expect / sbh, (double)pm->layer_saved / expect);
    double rest = (double)pm->layer_saved - expect;
    if (fabs(rest) > 0.005 * expect)
        fprintf(out_f, "  the remaining %+.0f B (%+.2f sbh) are values the formula does not itemise (see the kept values "
               "by op above: a separate bias-add output, a permuted copy of Q, K or V, a fused kernel's saved input)\n",
               rest, rest / sbh);
}

static void print_layer(const report *R)
{
    const cost_plan_mem *pm = &R->pm;
    if (!R->dims || pm->nlayers == 0 || pm->layer_saved == 0) {
        fprintf(out_f, "\nactivation memory per layer: %s\n", R->dims ? "no layers named layers.N.* in the plan"
                                                               : "the model does not name its dimensions");
        return;
    }
    double sbh = (double)R->M->s * (double)R->b * (double)R->M->h;
    fprintf(out_f, "\nactivation memory per layer (layer 0's values kept for the backward pass, s=%lld b=%lld h=%lld "
           "a=%lld):\n", (long long)R->M->s, (long long)R->b, (long long)R->M->h, (long long)R->M->a);
    fprintf(out_f, "  measured %14lld B %10.2f MiB  (%6.2f sbh), of which the attention core ([.., s, s]) %lld B\n",
           (long long)pm->layer_saved, (double)pm->layer_saved / MIB, (double)pm->layer_saved / sbh,
           (long long)pm->layer_core);
    fprintf(out_f, "  kept values by op:");
    for (int i = 0; i < pm->nops; i++)
        fprintf(out_f, " %s %dx %.2f MiB%s", ir_op_name(pm->by_op[i].op), pm->by_op[i].count,
               (double)pm->by_op[i].bytes / MIB, i + 1 < pm->nops ? "," : "\n");
    print_formulas(R, sbh);
    print_difference(R, sbh);
}

static void print_checkpoints(const report *R)
{
    const cost_plan_mem *pm = &R->pm;
    if (!R->dims || pm->layer_input == 0 || pm->layer_saved == 0) return;
    double ls = (double)R->M->l / (double)R->c->pp, in = (double)pm->layer_input, mid = (double)pm->layer_saved;
    double c = cost_checkpoints(ls, in, mid);
    int best = 1; /* the integer count with the least memory */
    for (int k = 2; k <= (int)ls; k++)
        if (cost_checkpoint_memory(k, ls, in, mid) < cost_checkpoint_memory(best, ls, in, mid)) best = k;
    fprintf(out_f, "\ncheckpoints (seed 3.5): a stage of l=%.0f layers, A_input=%.0f B (layer 0's input), "
           "A_intermediate=%.0f B (its kept values)\n", ls, in, mid);
    fprintf(out_f, "  c = sqrt(l A_intermediate / A_input) = %.2f -> %d checkpoint%s%s: c A_input + (l/c) A_intermediate = "
           "%.2f MiB per micro-batch (all layers kept: %.2f MiB)\n", c, best, best == 1 ? "" : "s",
           c > ls ? " (at most one per layer)" : "",
           cost_checkpoint_memory(best, ls, in, mid) / MIB, ls * mid / MIB);
}

static double training_graph_flops(const ir_graph *g)
{
    double f = 0.0;
    for (int i = 0; i < g->nnodes; i++) {
        if (!ir_op_has(g->nodes[i]->op, IR_OPF_OPTIMIZER)) f += (double)ir_node_flops(g->nodes[i]);
    }
    return f;
}

static void print_flops(const report *R, double fwd_serial)
{
    if (!R->dims) return;
    const cost_model *M = R->M;
    double mbs = (double)(R->B / R->b); /* micro-batches of the whole iteration: m d */
    double f72 = tgc_model_flops(R->B, M->s, M->l, M->h, M->V, false);
    double f96 = tgc_model_flops(R->B, M->s, M->l, M->h, M->V, true);
    double ir3 = 3.0 * fwd_serial * mbs, irg = training_graph_flops(R->g) * (double)R->c->tp * mbs;
    fprintf(out_f, "\nFLOPs per iteration (B=%lld sequences of %lld tokens):\n", (long long)R->B, (long long)M->s);
    fprintf(out_f, "  %-62s = %.4e\n", "formula, no recomputation    72 B s l h^2 (1 + s/6h + V/12lh)", f72);
    fprintf(out_f, "  %-62s = %.4e\n", "formula, full recomputation  96 B s l h^2 (1 + s/6h + V/16lh)", f96);
    fprintf(out_f, "  %-62s = %.4e  (%.4f x the 72-formula)\n", "IR: 3 x the forward graph's ops", ir3, ir3 / f72);
    fprintf(out_f, "  %-62s = %.4e  (%.4f x the 72-formula)\n", "IR: the training graph's ops, one rank x t", irg, irg / f72);
    if (run_recompute(R->c) != COST_RECOMPUTE_NONE) {
        char what[64];
        snprintf(what, sizeof what, "this configuration executes (recompute %s)", R->c->recompute_granularity);
        fprintf(out_f, "  %-62s = %.4e\n", what, cost_train_flops(M, R->b, run_recompute(R->c)) * mbs);
    }
    fprintf(out_f, "  the IR counts what the formula leaves out: layer norms, softmax, GeLU, dropout, residual adds, biases "
           "and the loss (a few FLOPs per element, against the GEMMs' 24h + 4s per element per layer)%s\n",
           R->c->tp > 1 ? "; ops replicated over the t ranks count t times" : "");
}

static bool compile_plan(ir_graph *g, const tgc_config *c, diag *d)
{
    pass_options po, given_po;
    plan_pass_options(&po, c);
    tgc_config_pass_options(c, &given_po);
    pass_given given[TGC_CONFIG_GIVEN_MAX];
    pass_ctx check = {.d = d, .opts = &given_po, .given = given};
    check.ngiven = tgc_config_pass_given(c, given, TGC_CONFIG_GIVEN_MAX);
    if (!pass_given_check(g, &check)) return false; /* against the command's options, not the serial ones */
    const pass_info *list[64];
    int n = pass_count();
    for (int i = 0; i < n; i++) list[i] = pass_at(i);
    pass_ctx ctx = {.d = d, .verify_each = true, .opts = &po};
    return pass_run_list(g, list, n, &ctx, NULL, NULL);
}

/* v: --vp, or layers / (p N) from --num-layers-per-virtual-pipeline-stage N;
 * false after saying why the layers do not split so (l = 0: unknown). */
static bool model_chunks(const tgc_config *c, int64_t l, int64_t *v)
{
    *v = c->vp;
    if (c->vp_layers > 0) {
        if (l <= 0 || c->pp < 2 || l % (c->pp * c->vp_layers)) {
            fprintf(err_f, "tgc: error: --num-layers-per-virtual-pipeline-stage %lld needs --pp P > 1 with the "
                    "%lld layers divisible by P x %lld\n", (long long)c->vp_layers, (long long)l,
                    (long long)c->vp_layers);
            return false;
        }
        *v = l / (c->pp * c->vp_layers);
    }
    if (l > 0 && l % (c->pp * *v)) {
        fprintf(err_f, "tgc: error: %lld layers do not split into --pp %lld x %lld model chunks\n", (long long)l,
                (long long)c->pp, (long long)*v);
        return false;
    }
    return true;
}

/* The ranks' memory per device (--backend cuda or sim): rank r = tp + t
 * (dp + d pp), the topology's numbering, on device r mod N as tgc run
 * places its ranks; stage[k] is what one rank of pipeline stage k
 * allocates, the backend's own bytes included. The ranks of a device hold
 * their buffers at once, so the device's figure is their sum. */
static void print_devices(const rt_backend_ops *be, const plan_opts *o, const tgc_config *c, int64_t p,
                          const int64_t *stage)
{
    int64_t t = c->tp, dd = c->dp, n = t * p * dd, N = o->devices, used = N < n ? N : n, worst = 0, at = 0;
    fprintf(out_f, "\nmemory per device (--backend %s, --devices %lld; rank r = tp + t (dp + d pp) on device r mod %lld, as "
           "tgc run places its ranks):\n", be->name, (long long)N, (long long)N);
    for (int64_t k = 0; k < used; k++) {
        int64_t sum = 0, count = 0;
        for (int64_t r = k; r < n; r += N, count++) sum += stage[r / (t * dd)];
        fprintf(out_f, "  device %lld: %lld rank%s (", (long long)k, (long long)count, count == 1 ? "" : "s");
        int64_t shown = 0;
        for (int64_t r = k; r < n && shown < 8; r += N, shown++) fprintf(out_f, "%s%lld", shown ? ", " : "", (long long)r);
        fprintf(out_f, "%s) = %lld B (%.2f MiB)", count > shown ? ", ..." : "", (long long)sum, (double)sum / MIB);
        if (o->gpu_memory > 0)
            fprintf(out_f, ", %s --gpu-memory %.4g GiB", (double)sum <= o->gpu_memory * GIB ? "within" : "MORE than",
                   o->gpu_memory);
        fprintf(out_f, "\n");
        if (sum > worst) worst = sum, at = k;
    }
    if (N == n + 1) fprintf(out_f, "  device %lld: no rank\n", (long long)n);
    else if (N > n) fprintf(out_f, "  devices %lld to %lld: no rank\n", (long long)n, (long long)(N - 1));
    if (used > 1) fprintf(out_f, "  the fullest: device %lld, %lld B (%.2f MiB)\n", (long long)at, (long long)worst,
                         (double)worst / MIB);
    if (strcmp(be->name, "cuda") == 0 && n > 1)
        fprintf(out_f, "  communicator: %s\n", N >= n ? "a GPU per rank, NCCL"
                                             : "rank threads sharing a GPU, the device-local one (under mpirun NCCL "
                                               "needs a GPU per rank)");
}

/* The 3D configuration compiled as `tgc run` compiles it (every pass with
 * the run's options), and what each pipeline rank allocates: the
 * executor's buffers (the largest stage's sizes, optimizer state over d
 * with the distributed optimizer) and the pipeline runtime's (a stash and
 * inputs per micro-batch in flight, step-level values, the micro-batches'
 * gradients) -- the figures `tgc run` prints per pipeline rank. */
static int print_compiled_3d(const ir_graph *g0, const tgc_config *c, const rt_backend_ops *be, const plan_opts *o,
                             diag *d)
{
    char *text = ir_graph_print(g0);
    ir_graph *g = ir_graph_read(text, strlen(text), "<plan>", d);
    free(text);
    if (!g) return 1;
    pass_options po;
    tgc_config_pass_options(c, &po);
    int rc = 1;
    pipe_schedule s = {0};
    cg_program *prog = NULL;
    if (tgc_config_run_passes(g, c, false, NULL, d) && (prog = cg_build_target(g, be->target, d)) != NULL &&
        pipe_schedule_from_graph(g, &po, &s, d)) {
        /* The state is fp32 per element of the parameters, stored in 16
         * bits under mixed precision (ir_param_elems). */
        int64_t d_ = c->dp > 1 ? c->dp : 1, esz = ir_state_elem_size(g), pelems = ir_param_elems(g);
        int64_t psz = pelems ? g->mem_size[IR_MEM_PARAM] / pelems : esz, stride = pelems * esz;
        int64_t pbytes = g->mem_size[IR_MEM_PARAM], gbytes = g->mem_size[IR_MEM_GRAD];
        if (prog->sharded_state && d_ > 1) { /* as the executor shards it */
            int64_t q = psz == 2 ? 32 : 16, S = ((pelems + d_ - 1) / d_ + q - 1) / q * q;
            stride = S * esz;
            if (pbytes < d_ * S * psz) pbytes = d_ * S * psz;
            if (gbytes < d_ * S * psz) gbytes = d_ * S * psz;
        }
        int64_t exec = pbytes + gbytes + g->mem_size[IR_MEM_INPUT] + g->mem_size[IR_MEM_ACT] +
                       g->mem_size[IR_MEM_STASH] + prog->workspace_bytes + prog->state_slots * stride +
                       be->extra_bytes;
        bool mpi = strcmp(c->comm, "mpi") == 0;
        fprintf(out_f, "\ncompiled 3D plan (as tgc run compiles it, %s schedule, m=%d; what each rank allocates, which tgc run "
               "prints):\n", pipe_kind_name(s.kind), s.m);
        fprintf(out_f, "  per rank: parameters %lld, gradients %lld, optimizer state %lld, activations %lld + stash %lld, "
               "inputs %lld, workspace %lld B\n", (long long)pbytes, (long long)gbytes,
               (long long)(prog->state_slots * stride), (long long)g->mem_size[IR_MEM_ACT],
               (long long)g->mem_size[IR_MEM_STASH], (long long)g->mem_size[IR_MEM_INPUT],
               (long long)prog->workspace_bytes);
        if (device_backend(be))
            fprintf(out_f, "  and --backend %s's own %lld B, counted among the executor buffers below\n", be->name,
                   (long long)be->extra_bytes);
        rc = 0;
        int64_t *stage = xcalloc((size_t)s.p, sizeof *stage);
        for (int r = 0; r < s.p && rc == 0; r++) {
            int slots[64] = {0};
            int64_t extra = s.v <= 64 ? rt_pipe_predict(g, &s, r, mpi, slots, d) : -1;
            if (extra < 0) { rc = 1; break; }
            fprintf(out_f, "  pipeline rank %d: %lld B of executor buffers + %lld B for in-flight micro-batches (", r,
                   (long long)exec, (long long)extra);
            for (int k = 0; k < s.v; k++) fprintf(out_f, "%schunk %d: %d held at once", k ? ", " : "", k, slots[k]);
            fprintf(out_f, ") = %.2f MiB\n", (double)(exec + extra) / 1048576.0);
            stage[r] = exec + extra;
        }
        if (rc == 0 && device_backend(be)) print_devices(be, o, c, s.p, stage);
        free(stage);
    }
    pipe_schedule_free(&s);
    cg_program_free(prog);
    ir_graph_free(g);
    return rc;
}

static int do_report(ir_graph *g, const cost_model *M, bool dims, const tgc_config *c, const plan_opts *o, diag *d)
{
    report R = {.c = c, .M = M, .dims = dims, .g = g, .be = rt_backend_by_name(c->backend), .o = o};
    R.b = hparam_int(g, "batch");
    if (R.b <= 0) R.b = M->s > 0 ? ir_graph_tokens(g) / M->s : 1;
    if (R.b <= 0) R.b = 1;
    R.B = c->global_batch_size ? c->global_batch_size : R.b * c->dp;
    if (R.B % (R.b * c->dp)) {
        fprintf(err_f, "tgc: error: --global-batch-size %lld does not divide by the micro-batch %lld x --dp %lld\n",
                (long long)R.B, (long long)R.b, (long long)c->dp);
        return 2;
    }
    R.m = R.B / (R.b * c->dp);
    if (!model_chunks(c, dims ? M->l : 0, &R.v)) return 2;
    if (R.v > 1 && R.m % c->pp) {
        fprintf(err_f, "tgc: error: the interleaved schedule needs m = %lld micro-batches, a multiple of --pp %lld\n",
                (long long)R.m, (long long)c->pp);
        return 2;
    }
    R.analytic = c->pp > 1 || c->dp > 1 || R.v > 1 || c->use_distributed_optimizer ||
                 run_recompute(c) != COST_RECOMPUTE_NONE;
    double fwd = (double)ir_graph_forward_flops(g);
    bool three_d = c->pp > 1 || c->dp > 1 || R.m > 1;
    char *text3d = three_d ? ir_graph_print(g) : NULL; /* the model before the one-rank passes */
    ir_graph *g3d = text3d ? ir_graph_read(text3d, strlen(text3d), "<model>", d) : NULL;
    free(text3d);
    if (!compile_plan(g, c, d)) { ir_graph_free(g3d); return 1; }
    cg_program *prog = cg_build_target(g, R.be->target, d); /* the backend's kernels: its epilogues, its workspace */
    if (!prog) { ir_graph_free(g3d); return 1; }
    R.prog = prog;
    R.state = prog->state_slots * ir_param_elems(g) * ir_state_elem_size(g);
    cost_plan_measure(g, dims ? M->s : 0, &R.pm);
    print_header(&R);
    print_memory(&R);
    print_layer(&R);
    print_checkpoints(&R);
    print_flops(&R, fwd);
    if (!three_d && device_backend(R.be)) { /* t ranks of one micro-batch: the table's total each */
        double row[ROW_COUNT];
        if (R.analytic) analytic_rows(&R, row);
        else measured_rows(&R, row);
        int64_t total = (int64_t)row[ROW_TOTAL];
        print_devices(R.be, o, c, 1, &total);
    }
    cg_program_free(prog);
    int rc = g3d ? print_compiled_3d(g3d, c, R.be, o, d) : three_d;
    ir_graph_free(g3d);
    return rc;
}

/* ---- calibration ----------------------------------------------------------------------------- */

static void print_calibration(const rt_gemm_calibration *k)
{
    fprintf(out_f, "GEMM calibration (cblas_sgemm, fp32, this machine):\n  blas: %s\n", tgc_blas_describe());
    fprintf(out_f, "  %-28s %10s %12s %12s\n", "M x K x N", "GFLOP", "ms", "GFLOP/s");
    for (int i = 0; i < RT_CALIB_SQUARE + RT_CALIB_SHAPED; i++) {
        const rt_gemm_point *p = i < RT_CALIB_SQUARE ? &k->square[i] : &k->shaped[i - RT_CALIB_SQUARE];
        if (i == RT_CALIB_SQUARE)
            fprintf(out_f, "  transformer-shaped, the MLP's [b s, h] x [h, 4h] with s=%lld h=%lld, b = 1, 2, 4, 8:\n",
                   (long long)k->s, (long long)k->h);
        char shape[64];
        snprintf(shape, sizeof shape, "%lld x %lld x %lld", (long long)p->m, (long long)p->k, (long long)p->n);
        fprintf(out_f, "  %-28s %10.2f %12.3f %12.2f\n", shape, p->flops / 1e9, p->seconds * 1e3, p->rate / 1e9);
    }
    fprintf(out_f, "peak (the best measured): %.2f GFLOP/s\n", k->peak / 1e9);
    fprintf(out_f, "fit: rate(b) = %.2f GFLOP/s x b / (b + %.3f)\n", k->r_max / 1e9, k->b_half);
    fprintf(out_f, "memory: %.2f GB/s (a 256 MiB memcpy, bytes read and written)\n", k->mem_bw / 1e9);
}

/* ---- the search ------------------------------------------------------------------------------------ */

static int search_inputs(const plan_opts *o, const tgc_config *c)
{
    const char *missing = !o->gpus ? "--gpus N" : o->gpu_memory <= 0 ? "--gpu-memory GIB"
                        : !c->global_batch_size ? "--global-batch-size B" : NULL;
    if (missing) {
        fprintf(err_f, "tgc plan: error: --search needs %s\nTry 'tgc plan --help'.\n", missing);
        return 2;
    }
    if (o->gpus > o->gpus_per_node && o->gpus % o->gpus_per_node) {
        fprintf(err_f, "tgc plan: error: --gpus %lld is not a whole number of nodes of --gpus-per-node %lld\n",
                (long long)o->gpus, (long long)o->gpus_per_node);
        return 2;
    }
    int64_t fixed = c->tp * c->pp * c->dp;
    if (o->gpus % fixed) {
        fprintf(err_f, "tgc plan: error: --gpus %lld does not divide by the fixed degrees t p d = %lld x %lld x "
                "%lld\n", (long long)o->gpus, (long long)c->tp, (long long)c->pp, (long long)c->dp);
        return 2;
    }
    return 0;
}

static void fill_request(plan_request *r, const tgc_config *c, const plan_opts *o)
{
    memset(r, 0, sizeof *r);
    r->B = c->global_batch_size;
    r->dist_opt = c->use_distributed_optimizer;
    r->scatter_gather = !c->no_scatter_gather;
    /* What the command line gave is kept; the rest is searched. */
    r->t = tgc_config_given(c, "tp") ? c->tp : 0;
    r->p = tgc_config_given(c, "pp") ? c->pp : 0;
    r->d = tgc_config_given(c, "dp") ? c->dp : 0;
    r->v = tgc_config_given(c, "vp") ? c->vp : 0;
    r->b = c->micro_batch_size;
    r->sp = c->sequence_parallel ? 1 : o->no_sp ? 0 : -1;
    cost_recompute rc = COST_RECOMPUTE_NONE;
    cost_recompute_from(c->recompute_granularity, &rc);
    r->rc = tgc_config_given(c, "recompute-granularity") ? (int)rc : -1;
    r->max_b = o->max_b;
    if (tgc_config_given(c, "pipeline-schedule"))
        r->pipe = strcmp(c->pipeline_schedule, "gpipe") == 0 ? PLAN_PIPE_GPIPE
                : strcmp(c->pipeline_schedule, "interleaved") == 0 ? PLAN_PIPE_INTERLEAVED : PLAN_PIPE_1F1B;
}

static void print_search_header(const cost_model *M, const plan_cluster *k, const plan_request *r, bool calibrated,
                                const rt_backend_ops *be)
{
    fprintf(out_f, "tgc plan --search: %s: %lld layers, hidden %lld, %lld heads, seq %lld, vocab %lld; %.2f%s parameters\n",
           M->name, (long long)M->l, (long long)M->h, (long long)M->a, (long long)M->s, (long long)M->V,
           (double)M->params / (M->params >= 1000000000 ? 1e9 : 1e6), M->params >= 1000000000 ? "B" : "M");
    fprintf(out_f, "cluster: %lld GPUs (%lld per node), %.0f GiB each; global batch B=%lld\n", (long long)k->gpus,
           (long long)k->gpus_per_node, (k->mem_bytes + (double)be->extra_bytes) / GIB, (long long)r->B);
    if (be->extra_bytes)
        fprintf(out_f, "backend: %s, whose own %lld B per GPU (cuBLASLt's workspace) are taken off each GPU's memory\n",
               be->name, (long long)be->extra_bytes);
    fprintf(out_f, "compute: %s %.4g TFLOP/s per GPU; rate(b) = peak x %.2f x b s / (b s + %.4g tokens)\n",
           calibrated ? "calibrated" : "peak", k->peak_flops / 1e12, k->eff_max,
           k->n_half * (k->h_ref > 0 ? k->h_ref / (double)M->h : 1.0));
    fprintf(out_f, "links: %.4g GB/s inside a node, %.4g GB/s between nodes, memory %.4g GB/s; all-reduces of bf16 "
           "values, not overlapped\n", k->intra_bw / 1e9, k->inter_bw / 1e9, k->hbm_bw / 1e9);
    fprintf(out_f, "memory: %s bytes per parameter (Megatron's: bf16 weights, fp32 main gradients, fp32 master weights and "
           "Adam's m, v; tgc's --bf16 keeps 16-bit gradients, 2 fewer), activations of the first stage's in-flight "
           "micro-batches\n", r->dist_opt ? "6 + 12/d" : "18");
}

static void print_results(const plan_search_out *s, const plan_cluster *k, const plan_request *r, int64_t top)
{
    fprintf(out_f, "%lld legal configurations, %d fit in %.0f GiB\n", (long long)s->nvalid, s->nfit, k->mem_bytes / GIB);
    fprintf(out_f, "%5s %4s %4s %5s %4s %4s %4s %-10s %9s %10s %8s %7s %12s\n", "rank", "t", "p", "d", "b", "v", "SP",
           "recompute", "GiB/GPU", "step s", "bubble", "comm", "TFLOP/s/GPU");
    for (int i = 0; i < s->nfit && i < top; i++) {
        const plan_config *c = &s->fit[i].cfg;
        const plan_estimate *e = &s->fit[i].est;
        fprintf(out_f, "%5d %4lld %4lld %5lld %4lld %4lld %4s %-10s %9.2f %10.4g %7.2f%% %6.2f%% %12.4g\n", i + 1,
               (long long)c->t, (long long)c->p, (long long)c->d, (long long)c->b, (long long)c->v,
               c->sp ? "on" : "off", cost_recompute_name(c->rc), e->mem_total / GIB, e->t_step, 100.0 * e->bubble,
               100.0 * e->comm_share, e->tflops);
    }
    char *why = plan_explain(s, k, r);
    fprintf(out_f, "%s\n", why);
    free(why);
}

static int do_search(const cost_model *M, const tgc_config *c, const plan_opts *o, const rt_gemm_calibration *cal)
{
    plan_cluster k;
    plan_cluster_defaults(&k);
    k.gpus = o->gpus;
    k.gpus_per_node = o->gpus_per_node;
    const rt_backend_ops *be = rt_backend_by_name(c->backend);
    k.mem_bytes = o->gpu_memory * GIB - (double)be->extra_bytes; /* what the plan's buffers may take */
    if (o->intra > 0) k.intra_bw = o->intra * 1e9;
    if (o->inter > 0) k.inter_bw = o->inter * 1e9;
    if (cal) k.hbm_bw = cal->mem_bw;
    if (o->hbm > 0) k.hbm_bw = o->hbm * 1e9;
    if (c->peak_tflops > 0) k.peak_flops = c->peak_tflops * 1e12;
    else if (cal) {
        /* The measured curve is what the GEMMs achieve: no further efficiency. */
        k.peak_flops = cal->r_max;
        k.eff_max = 1.0;
        k.n_half = cal->b_half * (double)cal->s; /* the fit's b_half was in sequences of s tokens, */
        k.h_ref = (double)cal->h;                /* at the calibration's h */
    }
    plan_request r;
    fill_request(&r, c, o);
    if (c->vp_layers > 0) {
        if (!r.p) {
            fprintf(err_f, "tgc plan: error: --num-layers-per-virtual-pipeline-stage needs --pp with --search\n");
            return 2;
        }
        if (!model_chunks(c, M->l, &r.v)) return 2;
    }
    plan_search_out s;
    plan_search(M, &k, &r, &s);
    int rc = 0;
    if (s.nvalid == 0) {
        fprintf(err_f, "tgc plan: error: no legal configuration of %lld GPUs for %lld layers, %lld heads and B=%lld "
                "(t must divide the heads and fit a node, p v the layers, b d the batch)\n", (long long)k.gpus,
                (long long)M->l, (long long)M->a, (long long)r.B);
        rc = 1;
    } else if (s.nfit == 0) {
        char cfg[128];
        plan_cfg_str(&s.least.cfg, cfg, sizeof cfg);
        fprintf(err_f, "tgc plan: error: no configuration fits in %.4g GiB per GPU: the smallest need is %.4g GiB "
                "(%s)\n", o->gpu_memory, s.least.est.mem_total / GIB, cfg);
        rc = 1;
    } else {
        print_search_header(M, &k, &r, cal && c->peak_tflops <= 0, be);
        print_results(&s, &k, &r, o->top);
    }
    plan_search_free(&s);
    return rc;
}

/* ---- the command ------------------------------------------------------------------------------------ */

/* --devices places the ranks of a device backend; the CPU's share the host
 * and --search places them on --gpus. Device planning defaults to one. */
static int check_devices(plan_opts *o, const tgc_config *c)
{
    bool device = strcmp(c->backend, "cpu") != 0;
    if (o->devices && !device) {
        fprintf(err_f, "tgc plan: error: --devices %lld: the ranks of --backend cpu share the host's memory; give "
                "--backend cuda or sim to plan per device\nTry 'tgc plan --help'.\n", (long long)o->devices);
        return 2;
    }
    if (o->devices && o->search) {
        fprintf(err_f, "tgc plan: error: --devices %lld: --search places the ranks on --gpus\nTry 'tgc plan --help'.\n",
                (long long)o->devices);
        return 2;
    }
    if (device && !o->devices) o->devices = 1;
    return 0;
}

static int run_model(const char *model, const fe_override *sets, int nsets, const tgc_config *c, const plan_opts *o,
                     diag *dg)
{
    ir_graph *g = api_model_load(model, sets, nsets, dg);
    if (g && !api_param_groups_match(g, c->param_groups, dg)) {
        ir_graph_free(g);
        g = NULL;
    }
    int rc = 1;
    if (g) {
        cost_model M;
        char err[512];
        bool dims = cost_model_from_graph(g, &M, err, sizeof err);
        if (!dims) M.params = ir_graph_param_count(g);
        M.fused_attention |= strcmp(c->attention_backend, "unfused") != 0; /* the attention pass will fuse */
        rt_gemm_calibration cal;
        if (o->calibrate) {
            rt_gemm_calibrate(&cal, dims ? M.s : 1024, dims ? M.h : 768, 0.2);
            print_calibration(&cal);
        }
        if (o->search && !dims) diag_error_plain(dg, "--search: %s", err);
        else if (o->search) rc = do_search(&M, c, o, o->calibrate ? &cal : NULL);
        else rc = o->calibrate ? 0 : do_report(g, &M, dims, c, o, dg);
    }
    ir_graph_free(g);
    diag_finish(dg);
    diag_free(dg);
    return rc;
}

static int print_calibration_alone(void)
{
    rt_gemm_calibration cal;
    rt_gemm_calibrate(&cal, 1024, 768, 0.2); /* GPT-2 small's MLP when no model is given */
    print_calibration(&cal);
    return 0;
}

tgc_status tgc_planner_report(const tgc_options *opts, const tgc_planner_args *args, FILE *out)
{
    api_call a;
    api_call_begin(&a);
    tgc_planner_args x;
    if (!api_args_copy(&x, sizeof x, args, "tgc_planner_report", &a)) return api_call_end(&a, TGC_EINVAL);
    if (!out) {
        fprintf(a.f, "tgc: error: tgc_planner_report: out is NULL\n");
        return api_call_end(&a, TGC_EINVAL);
    }
    /* What an older caller's struct lacks keeps the command line's defaults. */
    if (args->size <= offsetof(tgc_planner_args, gpus_per_node) || !x.gpus_per_node) x.gpus_per_node = 8;
    if (args->size <= offsetof(tgc_planner_args, top) || !x.top) x.top = 10;
    if (args->size <= offsetof(tgc_planner_args, max_micro_batch) || !x.max_micro_batch) x.max_micro_batch = 64;
    plan_opts o = {.search = x.search, .calibrate = x.calibrate, .no_sp = x.no_sequence_parallel, .gpus = x.gpus,
                   .gpus_per_node = x.gpus_per_node, .top = x.top, .max_b = x.max_micro_batch, .devices = x.devices,
                   .gpu_memory = x.gpu_memory, .intra = x.intra_node_gbps, .inter = x.inter_node_gbps,
                   .hbm = x.hbm_gbps};
    out_f = out;
    err_f = a.f;
    const tgc_config *c = api_options_config(opts);
    fe_override sets[API_OVERRIDES_MAX];
    int nsets = 0;
    char batch[32];
    int rc = check_config(c);
    tgc_status st = rc ? TGC_EUSAGE : TGC_OK;
    /* --micro-batch-size sets the model's `batch` hyperparameter, as in `tgc run`. */
    if (st == TGC_OK && o.search) { /* --search tries micro-batches itself */
        const fe_override *given = api_options_sets(opts, &nsets);
        for (int i = 0; i < nsets; i++) sets[i] = given[i];
    } else if (st == TGC_OK) {
        st = api_model_overrides(opts, "plan", NULL, sets, &nsets, batch, sizeof batch, &a);
    }
    if (st == TGC_OK && check_devices(&o, c)) st = TGC_EUSAGE;
    if (st == TGC_OK && o.search && search_inputs(&o, c)) st = TGC_EUSAGE;
    if (st == TGC_OK) {
        if (x.model) rc = run_model(x.model, sets, nsets, c, &o, &a.d);
        else if (o.calibrate && !o.search) rc = print_calibration_alone();
        else {
            fprintf(a.f, "tgc plan: error: missing MODEL\nTry 'tgc plan --help'.\n");
            rc = 2;
        }
        st = rc == 0 ? TGC_OK : rc == 2 ? TGC_EUSAGE : TGC_ERROR;
    }
    out_f = err_f = NULL;
    return api_call_end(&a, st);
}
