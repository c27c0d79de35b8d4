/* `tgc run`'s pipeline, and the tokenizer of a run's text data: the
 * library's side (api/internal.h), which cli/train_cmd.c and
 * tgc_trainer_new (api/api.c) call; and `tgc compile`'s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "codegen/codegen.h"
#include "passes/pass.h"
#include "runtime/io/run_files.h"
#include "runtime/comm/comm_mpi.h"
#include "runtime/plan.h"
#include "runtime/train/world.h"
#include "support/util.h"
#include "tokenizer/tokenizer.h"

int api_run_tokenizer(const tgc_config *c, const rt_train_opts *o, tgc_tokenizer **tk, diag *d, FILE *err)
{
    *tk = NULL;
    tgc_tokenizer_opts to = {c->tokenizer_type, c->vocab_file, c->merge_file, c->tokenizer_model};
    if (!tgc_tokenizer_opts_given(&to)) return 0;
    char why[512];
    if (!tgc_tokenizer_opts_check(&to, why, sizeof why)) {
        fprintf(err, "tgc: error: %s\n", why);
        return 2;
    }
    if (!o->data && !o->ndata_path) {
        fprintf(err, "tgc: error: --tokenizer-type, --vocab-file, --merge-file and --tokenizer-model tokenize "
                "--data text; this run has no --data\n");
        return 2;
    }
    *tk = tokenizer_open(&to, d);
    return *tk ? 0 : 1;
}

/* A launcher's world of another size than the plan's t x d x p is refused
 * before the model compiles (minutes, on every process, for nothing), by
 * rank 0. The other processes leave quietly with success (*quiet): a
 * launcher ends the job when a process fails, and one failing first could
 * end rank 0 before its message is out; rank 0's failure fails the job. */
bool api_world_fits(const tgc_config *c, bool *quiet, diag *d)
{
    bool mpi = strcmp(c->comm, "mpi") == 0 || (strcmp(c->comm, "auto") == 0 && tgc_comm_mpi_launched());
    int64_t n = (c->tp > 0 ? c->tp : 1) * (c->pp > 0 ? c->pp : 1) * (c->dp > 0 ? c->dp : 1);
    rt_world_info w;
    if (rt_world_detect(mpi, n > 1 << 20 ? 1 << 20 : (int)n, &w, d)) return true;
    *quiet = w.peer_reports;
    return false;
}

int api_run(const char *model, const tgc_config *cli, const fe_override *sets, int nsets, diag *d, FILE *err)
{
    tgc_config c;
    ir_graph *g = NULL;
    int rc = 1;
    bool quiet = false; /* world_fits: rank 0 reports */
    int refused = 0; /* options that do not go together; what compile accepts but the runtime cannot run yet */
    if (rt_plan_sniff(model) != RT_PLAN_NONE) { /* by content: a damaged plan is reported as one */
        g = api_plan_load(model, &c, cli, &rc, NULL, d, err);
        refused = g ? tgc_config_check_run_to(&c, err) : rc == 2 ? 2 : 0;
        if (g && !refused && !api_world_fits(&c, &quiet, d)) refused = 1;
    } else {
        c = *cli;
        refused = tgc_config_check_to(&c, err);
        if (!refused) refused = tgc_config_check_run_to(&c, err);
        if (!refused && !api_world_fits(&c, &quiet, d)) refused = 1;
        g = refused ? NULL : api_compile_graph(api_model_load(model, sets, nsets, d), &c, NULL, d);
    }
    if (quiet) {
        ir_graph_free(g);
        return 0;
    }
    rc = refused ? refused : 1;
    if (g && !refused) {
        rt_train_opts o;
        rc = api_train_options(&o, &c, model, err);
        tgc_tokenizer *tk = NULL;
        if (rc == 0) rc = api_run_tokenizer(&c, &o, &tk, d, err);
        o.tokenizer = tk;
        if (rc == 0) rc = rt_train(g, &o, d);
        tgc_tokenizer_free(tk);
    }
    ir_graph_free(g);
    return rc;
}

ir_graph *api_compile_model(const char *model, const fe_override *sets, int nsets, const tgc_config *c,
                            char **lowered, diag *d)
{
    return api_compile_graph(api_model_load(model, sets, nsets, d), c, lowered, d);
}

bool api_compile(const char *model, const fe_override *sets, int nsets, const tgc_config *c, ir_graph **out,
                 api_plan_figures *fig, diag *d)
{
    *out = NULL;
    *fig = (api_plan_figures){0};
    char *lowered = NULL;
    /* -o must not be the model, and must be writable before the passes run. */
    rt_run_file in[] = {{"the model", model}}, outf[] = {{"-o", c->output}};
    bool out_ok = !c->output || rt_files_check(in, 1, outf, (const bool[]){false}, 1, NULL, 0, d);
    ir_graph *g = out_ok ? api_compile_model(model, sets, nsets, c, &lowered, d) : NULL;
    cg_program *prog = g && c->output ? cg_build(g, d) : NULL;
    bool ok = g && !c->output; /* a report without -o writes no plan */
    if (prog && api_plan_write(c->output, c, lowered, g, prog, d)) {
        api_plan_figures_of(g, prog, fig);
        ok = true;
    }
    cg_program_free(prog);
    free(lowered);
    *out = g;
    return ok;
}

void api_plan_figures_of(const ir_graph *g, const cg_program *prog, api_plan_figures *fig)
{
    int gemms = 0;
    for (int i = 0; i < prog->ninstrs; i++) gemms += prog->instrs[i].kind == CG_GEMM;
    *fig = (api_plan_figures){prog->nkernels, gemms, (long long)g->mem_size[IR_MEM_PARAM],
                              (long long)g->mem_size[IR_MEM_ACT], (long long)prog->workspace_bytes,
                              (long long)memplan_region_bytes(g)};
}
