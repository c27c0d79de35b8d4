/* `tgc inspect PLAN`: what a compiled plan holds, summarised (docs/tools.md).
 * The plan is read and checked exactly as `tgc run PLAN` reads it
 * (cli_plan_load, cli/load.h); the program is cg_build's, as the CPU runtime runs it. */
#include "cli/inspect_cmd.h"

#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/config.h"
#include "api/kernel_report.h"
#include "cli/load.h"
#include "codegen/codegen.h"
#include "runtime/backend/nvrtc.h"
#include "support/util.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };

static void print_bytes(const char *what, int64_t n)
{
    printf("  %-18s %14lld bytes (%.2f MiB)\n", what, (long long)n, (double)n / 1048576.0);
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

static void print_counts(const inspect_counts *c)
{
    printf("%d kernels, %d GEMMs, %d collectives", c->kernels, c->gemms, c->comms);
    for (int k = 0; k < c->nop; k++) printf("%s%s %d", k ? ", " : " (", c->op[k], c->by_op[k]);
    printf("%s\n", c->nop ? ")" : "");
}

static void inspect_config(const ir_graph *g, const tgc_config *c)
{
    int64_t n = c->tp * c->pp * c->dp;
    printf("model: %s, %d layers, %lld parameters%s\n", g->model, g->num_layers, (long long)ir_graph_param_count(g),
           c->tp > 1 ? " per tensor-parallel rank" : "");
    printf("hyperparameters:");
    for (int i = 0; i < g->nhparams; i++) {
        const ir_hparam *h = &g->hparams[i];
        if (h->is_float) printf(" %s=%g", h->name, h->f);
        else printf(" %s=%lld", h->name, (long long)h->i);
    }
    printf("\nparallelism: t=%lld p=%lld d=%lld%s, %lld rank%s%s\n", (long long)c->tp, (long long)c->pp,
           (long long)c->dp, c->sequence_parallel ? " (sequence parallel)" : "", (long long)n, n == 1 ? "" : "s",
           c->pp > 1 ? "" : c->tp > 1 ? ": every tensor-parallel rank runs the program below on its shard" : "");
    if (c->pp > 1)
        printf("pipeline: schedule %s, %lld model chunk%s per rank\n",
               c->pipeline_schedule ? c->pipeline_schedule : "1f1b", (long long)(c->vp ? c->vp : 1),
               c->vp > 1 ? "s" : "");
    printf("precision: %s%s\n", ir_dtype_name(g->precision),
           g->precision != IR_F32 ? " (fp32 master weights in the optimizer)" : "");
    printf("optimizer: %s, lr %g, weight decay %g, clip-grad %g\n", c->optimizer, c->lr, c->weight_decay,
           c->clip_grad);
    printf("recompute: %s; fusion: %s\n", c->recompute_granularity,
           c->no_fuse ? "none" : c->fuse ? c->fuse : "all");
    if (c->micro_batch_size || c->global_batch_size)
        printf("batch: micro %lld, global %lld\n", (long long)c->micro_batch_size, (long long)c->global_batch_size);
}

/* The CUDA kernels' registers, spills, stack and shared memory, as NVRTC
 * compiles them (no GPU needed): for a plan compiled with --backend cuda
 * (for sm_80 unless --cuda-arch says otherwise), or any plan given
 * --cuda-arch. false after an error; a CUDA plan on a machine without
 * NVRTC gets a note instead. */
static bool inspect_kernels(const ir_graph *g, const tgc_config *c, const char *path, const char *arch,
                            bool no_cache, diag *d)
{
    bool cuda = c->backend && strcmp(c->backend, "cuda") == 0;
    if (!cuda && !arch) {
        printf("kernels: the plan holds C for the CPU; the CUDA kernels' registers and spills need no GPU:\n"
               "  tgc inspect PLAN --cuda-arch sm_90\n");
        return true;
    }
    if (!arch) arch = c->cuda_arch ? c->cuda_arch : "sm_80";
    if (!rt_nvrtc_available(NULL)) {
        if (cuda) {
            printf("kernels: CUDA (--backend cuda); NVRTC cannot be loaded on this machine, so no register "
                   "counts\n");
            return true;
        }
        return rt_nvrtc_available(d); /* reports why */
    }
    printf("CUDA kernels for %s (NVRTC, no GPU needed):\n", arch);
    fflush(stdout);
    return api_kernel_report(g, path, arch, no_cache, stdout, d) == 0;
}

static int inspect_plan(const char *path, const char *arch, bool no_cache)
{
    diag d;
    diag_init(&d, stderr);
    tgc_config c;
    ir_graph *g = cli_plan_load(path, &c, &d);
    cg_program *prog = g ? cg_build(g, &d) : NULL;
    if (prog) {
        printf("plan: %s\n", path);
        inspect_config(g, &c);
        inspect_counts all = inspect_count(g, prog, -1);
        printf("program (one step, %s): %d instructions\n  ", c.pp > 1 ? "every stage" : "per rank", prog->ninstrs);
        print_counts(&all);
        for (int s = 0; c.pp > 1 && s < c.pp; s++) { /* a rank runs its stage's part */
            inspect_counts st = inspect_count(g, prog, s);
            printf("  stage %d: ", s);
            print_counts(&st);
            printf("    parameters %lld bytes\n", (long long)st.param_bytes);
        }
        int64_t state = prog->state_slots * g->mem_size[IR_MEM_PARAM]; /* as `tgc plan` counts it */
        int64_t total = g->mem_size[IR_MEM_PARAM] + g->mem_size[IR_MEM_GRAD] + state + g->mem_size[IR_MEM_ACT] +
                        g->mem_size[IR_MEM_INPUT] + prog->workspace_bytes;
        printf("memory per rank (the static plan):\n");
        print_bytes("parameters", g->mem_size[IR_MEM_PARAM]);
        print_bytes("gradients", g->mem_size[IR_MEM_GRAD]);
        printf("  %-18s %14lld bytes (%.2f MiB, %lld slot%s of the parameters' size)\n", "optimizer state",
               (long long)state, (double)state / 1048576.0, (long long)prog->state_slots,
               prog->state_slots == 1 ? "" : "s");
        print_bytes("activations", g->mem_size[IR_MEM_ACT]);
        print_bytes("inputs", g->mem_size[IR_MEM_INPUT]);
        print_bytes("workspace", prog->workspace_bytes);
        print_bytes("total", total);
    }
    int rc = prog && inspect_kernels(g, &c, path, arch, no_cache, &d) ? EXIT_OK : EXIT_INPUT;
    cg_program_free(prog);
    ir_graph_free(g);
    diag_finish(&d);
    diag_free(&d);
    return rc;
}

int cli_inspect(int argc, char **argv, void (*help_fn)(FILE *))
{
    static const cli_opt lo[] = {{"cuda-arch", true, false, 'a'}, {"no-kernel-cache", false, false, 'n'},
                                 {"help", false, true, 'h'}, {"h", false, true, 'h'}};
    const char *plan = NULL, *arch = NULL;
    bool no_cache = false;
    cli_args a;
    cli_args_init(&a, "inspect", argc, argv, lo, (int)ARRAY_LEN(lo));
    for (int ch; (ch = cli_args_next(&a)) != CLI_ARGS_END;) {
        if (ch == CLI_ARGS_ERROR) return EXIT_USAGE;
        if (ch == 'h') {
            help_fn(stdout);
            return EXIT_OK;
        }
        if (ch == 'a' && !*a.value) return cli_usage_error("inspect", "missing value for '--cuda-arch'");
        if (ch == 'a') arch = a.value;
        if (ch == 'n') no_cache = true;
        if (ch == CLI_ARGS_POSITIONAL && plan) return cli_usage_error("inspect", "unexpected argument '%s'", a.value);
        if (ch == CLI_ARGS_POSITIONAL) plan = a.value;
    }
    if (!plan) return cli_usage_error("inspect", "missing PLAN");
    return inspect_plan(plan, arch, no_cache);
}
