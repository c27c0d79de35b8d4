/* What `tgc run` checks of a launcher's world, the tokenizer of a run's
 * text data and a plan's figures: the library's side (api/internal.h) of
 * tgc_run_check, tgc_trainer_new and tgc_plan_figures_get (api/api.c),
 * through which cli/train_cmd.c runs. */
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
/* --comm mpi, or auto under mpirun: one process per rank. */
bool api_comm_is_mpi(const tgc_config *c)
{
    return strcmp(c->comm, "mpi") == 0 || (strcmp(c->comm, "auto") == 0 && tgc_comm_mpi_launched());
}

bool api_world_fits(const tgc_config *c, bool *quiet, diag *d)
{
    bool mpi = api_comm_is_mpi(c);
    int64_t n = (c->tp > 0 ? c->tp : 1) * (c->pp > 0 ? c->pp : 1) * (c->dp > 0 ? c->dp : 1);
    rt_world_info w;
    if (rt_world_detect(mpi, n > 1 << 20 ? 1 << 20 : (int)n, &w, d)) return true;
    *quiet = w.peer_reports;
    return false;
}

void api_plan_figures_of(const ir_graph *g, const cg_program *prog, api_plan_figures *fig)
{
    int gemms = 0;
    for (int i = 0; i < prog->ninstrs; i++) gemms += prog->instrs[i].kind == CG_GEMM;
    *fig = (api_plan_figures){prog->nkernels, gemms, (long long)g->mem_size[IR_MEM_PARAM],
                              (long long)g->mem_size[IR_MEM_ACT], (long long)prog->workspace_bytes,
                              (long long)memplan_region_bytes(g)};
}
