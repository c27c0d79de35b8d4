/* tgc_inspect (include/tgc.h): `tgc inspect PLAN`'s summary of what a
 * compiled plan holds (docs/tools.md). The plan is read and checked
 * exactly as `tgc run PLAN` reads it (api_plan_load); the program is
 * cg_build's, as the CPU runtime runs it. */
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "api/kernel_report.h"
#include "codegen/codegen.h"
#include "runtime/backend/nvrtc.h"
#include "support/util.h"
#include "tgc.h"

static void print_bytes(const char *what, int64_t n, FILE *out)
{
    fprintf(out, "  %-18s %14lld bytes (%.2f MiB)\n", what, (long long)n, (double)n / 1048576.0);
}

/* Instructions of the program, of one stage (stage >= 0) or all (-1). */
typedef struct inspect_counts {
    int kernels, gemms, comms;
    const char *op[16]; /* the collectives by the IR op they compute */
    int nop, by_op[16];
    int64_t param_bytes;
} inspect_counts;

static void count_op(inspect_counts *c, const char *name)
{
    int k = 0;
    while (k < c->nop && strcmp(c->op[k], name) != 0) k++;
    if (k == c->nop && c->nop < (int)ARRAY_LEN(c->op)) c->op[c->nop++] = name;
    if (k < c->nop) c->by_op[k]++;
}

static inspect_counts inspect_count(const ir_graph *g, const cg_program *prog, int stage)
{
    inspect_counts c = {0};
    for (int i = 0; i < prog->ninstrs; i++) {
        const cg_instr *in = &prog->instrs[i];
        int s = in->node >= 0 && in->node < g->nnodes ? g->nodes[in->node]->stage : -1;
        if (stage >= 0 && s != stage) continue;
        c.kernels += in->kind == CG_KERNEL;
        c.gemms += in->kind == CG_GEMM;
        if (in->kind == CG_COMM) {
            c.comms++;
            count_op(&c, in->node >= 0 && in->node < g->nnodes ? ir_op_name(g->nodes[in->node]->op) : "?");
        }
    }
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = g->nodes[i];
        if ((n->flags & IR_NF_PARAM) && (stage < 0 || n->stage == stage))
            c.param_bytes += ir_shape_numel(&n->shape) * ir_storage_size(g, n);
    }
    return c;
}

static void print_counts(const inspect_counts *c, FILE *out)
{
    fprintf(out, "%d kernels, %d GEMMs, %d collectives", c->kernels, c->gemms, c->comms);
    for (int k = 0; k < c->nop; k++) fprintf(out, "%s%s %d", k ? ", " : " (", c->op[k], c->by_op[k]);
    fprintf(out, "%s\n", c->nop ? ")" : "");
}

static void inspect_config(const ir_graph *g, const tgc_config *c, FILE *out)
{
    int64_t n = c->tp * c->pp * c->dp;
    fprintf(out, "model: %s, %d layers, %lld parameters%s\n", g->model, g->num_layers, (long long)ir_graph_param_count(g),
           c->tp > 1 ? " per tensor-parallel rank" : "");
    fprintf(out, "hyperparameters:");
    for (int i = 0; i < g->nhparams; i++) {
        const ir_hparam *h = &g->hparams[i];
        if (h->is_float) fprintf(out, " %s=%g", h->name, h->f);
        else fprintf(out, " %s=%lld", h->name, (long long)h->i);
    }
    fprintf(out, "\nparallelism: t=%lld p=%lld d=%lld%s, %lld rank%s%s\n", (long long)c->tp, (long long)c->pp,
           (long long)c->dp, c->sequence_parallel ? " (sequence parallel)" : "", (long long)n, n == 1 ? "" : "s",
           c->pp > 1 ? "" : c->tp > 1 ? ": every tensor-parallel rank runs the program below on its shard" : "");
    if (c->pp > 1)
        fprintf(out, "pipeline: schedule %s, %lld model chunk%s per rank\n",
               c->pipeline_schedule ? c->pipeline_schedule : "1f1b", (long long)(c->vp ? c->vp : 1),
               c->vp > 1 ? "s" : "");
    fprintf(out, "precision: %s%s\n", ir_dtype_name(g->precision),
           g->precision != IR_F32 ? " (fp32 master weights in the optimizer)" : "");
    fprintf(out, "optimizer: %s, lr %g, weight decay %g, clip-grad %g\n", c->optimizer, c->lr, c->weight_decay,
           c->clip_grad);
    fprintf(out, "recompute: %s; fusion: %s\n", c->recompute_granularity,
           c->no_fuse ? "none" : c->fuse ? c->fuse : "all");
    if (c->micro_batch_size || c->global_batch_size)
        fprintf(out, "batch: micro %lld, global %lld\n", (long long)c->micro_batch_size, (long long)c->global_batch_size);
}

/* The CUDA kernels' registers, spills, stack and shared memory, as NVRTC
 * compiles them (no GPU needed): for a plan compiled with --backend cuda
 * (for sm_80 unless --cuda-arch says otherwise), or any plan given
 * --cuda-arch. false after an error; a CUDA plan on a machine without
 * NVRTC gets a note instead. */
static bool inspect_kernels(const ir_graph *g, const tgc_config *c, const char *path, const char *arch,
                            bool no_cache, FILE *out, diag *d)
{
    bool cuda = c->backend && strcmp(c->backend, "cuda") == 0;
    if (!cuda && !arch) {
        fprintf(out, "kernels: the plan holds C for the CPU; the CUDA kernels' registers and spills need no GPU:\n"
               "  tgc inspect PLAN --cuda-arch sm_90\n");
        return true;
    }
    if (!arch) arch = c->cuda_arch ? c->cuda_arch : "sm_80";
    if (!rt_nvrtc_available(NULL)) {
        if (cuda) {
            fprintf(out, "kernels: CUDA (--backend cuda); NVRTC cannot be loaded on this machine, so no register "
                   "counts\n");
            return true;
        }
        return rt_nvrtc_available(d); /* reports why */
    }
    fprintf(out, "CUDA kernels for %s (NVRTC, no GPU needed):\n", arch);
    fflush(out);
    return api_kernel_report(g, path, arch, no_cache, out, d) == 0;
}

static bool inspect_plan(const char *path, const char *arch, bool no_cache, FILE *out, diag *d)
{
    tgc_config c, none; /* no options over the plan's */
    tgc_config_defaults(&none);
    int rc;
    ir_graph *g = api_plan_load(path, &c, &none, &rc, NULL, d, d->out);
    cg_program *prog = g ? cg_build(g, d) : NULL;
    if (prog) {
        fprintf(out, "plan: %s\n", path);
        inspect_config(g, &c, out);
        inspect_counts all = inspect_count(g, prog, -1);
        fprintf(out, "program (one step, %s): %d instructions\n  ", c.pp > 1 ? "every stage" : "per rank", prog->ninstrs);
        print_counts(&all, out);
        for (int s = 0; c.pp > 1 && s < c.pp; s++) { /* a rank runs its stage's part */
            inspect_counts st = inspect_count(g, prog, s);
            fprintf(out, "  stage %d: ", s);
            print_counts(&st, out);
            fprintf(out, "    parameters %lld bytes\n", (long long)st.param_bytes);
        }
        int64_t state = prog->state_slots * g->mem_size[IR_MEM_PARAM]; /* as `tgc plan` counts it */
        int64_t total = g->mem_size[IR_MEM_PARAM] + g->mem_size[IR_MEM_GRAD] + state + g->mem_size[IR_MEM_ACT] +
                        g->mem_size[IR_MEM_INPUT] + prog->workspace_bytes;
        fprintf(out, "memory per rank (the static plan):\n");
        print_bytes("parameters", g->mem_size[IR_MEM_PARAM], out);
        print_bytes("gradients", g->mem_size[IR_MEM_GRAD], out);
        fprintf(out, "  %-18s %14lld bytes (%.2f MiB, %lld slot%s of the parameters' size)\n", "optimizer state",
               (long long)state, (double)state / 1048576.0, (long long)prog->state_slots,
               prog->state_slots == 1 ? "" : "s");
        print_bytes("activations", g->mem_size[IR_MEM_ACT], out);
        print_bytes("inputs", g->mem_size[IR_MEM_INPUT], out);
        print_bytes("workspace", prog->workspace_bytes, out);
        print_bytes("total", total, out);
    }
    bool ok = prog && inspect_kernels(g, &c, path, arch, no_cache, out, d);
    cg_program_free(prog);
    ir_graph_free(g);
    return ok;
}

tgc_status tgc_inspect(const tgc_inspect_args *args, FILE *out)
{
    api_call a;
    api_call_begin(&a);
    tgc_inspect_args x;
    if (!api_args_copy(&x, sizeof x, args, "tgc_inspect", &a)) return api_call_end(&a, TGC_EINVAL);
    if (!x.plan || !out) {
        fprintf(a.f, "tgc: error: tgc_inspect: args->plan and out must be given\n");
        return api_call_end(&a, TGC_EINVAL);
    }
    return api_call_end(&a, inspect_plan(x.plan, x.cuda_arch, x.no_kernel_cache, out, &a.d) ? TGC_OK : TGC_ERROR);
}

