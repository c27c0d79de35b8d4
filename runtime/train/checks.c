/* What a run checks before anything is built (runtime/train/checks.h). */
#include "runtime/train/checks.h"

#include <stdio.h>
#include <stdlib.h>

#include "codegen/codegen.h"
#include "runtime/exec.h"
#include "runtime/io/blend.h"
#include "runtime/io/run_files.h"
#include "runtime/train/feeder.h"
#include "runtime/train/pipe.h"
#include "runtime/train/sysmem.h"
#include "support/util.h"

/* The run's inputs and outputs (runtime/io/run_files.h), before anything
 * runs. --save's directory is checked by its lock (before step 1). */
bool rt_train_files_check(const rt_train_opts *o, diag *d)
{
    /* The inputs: the model, each path of --data-path (its words checked
     * first), --inputs, --init-from and --load. */
    int nwords;
    const char *const *words = rt_train_data_words(o, &nwords);
    tgc_blend_spec spec = {0}, vspec = {0};
    if ((o->data || o->ndata_path) && !tgc_blend_spec_parse(nwords, words, &spec, d)) return false;
    if (o->nvalid_data_path && !tgc_blend_spec_parse(o->nvalid_data_path, o->valid_data_path, &vspec, d)) {
        tgc_blend_spec_free(&spec);
        return false;
    }
    int nin = 0;
    rt_run_file *in = xcalloc((size_t)(spec.n + vspec.n) + 4, sizeof *in);
    in[nin++] = (rt_run_file){"the model", o->model_path};
    for (int k = 0; k < spec.n; k++) in[nin++] = (rt_run_file){"--data", spec.paths[k]};
    for (int k = 0; k < vspec.n; k++) in[nin++] = (rt_run_file){"--valid-data-path", vspec.paths[k]};
    in[nin++] = (rt_run_file){"--inputs", o->inputs};
    in[nin++] = (rt_run_file){"--init-from", o->init_from};
    in[nin++] = (rt_run_file){"--load", o->load_dir};
    tgc_blend_spec_free(&spec);
    tgc_blend_spec_free(&vspec);
    rt_run_file out[] = {{"--save", o->save_dir}, {"--log", o->log_path}, {"--export", o->export_path},
                         {"--export-grads", o->export_grads}, {"--trace", o->trace_path},
                         {"--tensorboard-dir", o->tensorboard_dir}};
    bool dir[] = {true, false, false, false, false, true};
    static const char *const resume[][2] = {{"--save", "--load"}}; /* resuming into one directory */
    bool ok = rt_files_check(in, nin, out, dir, (int)ARRAY_LEN(out), resume, 1, d);
    free(in);
    return ok;
}

/* What each executor will allocate (rt_exec_bytes), predicted before any
 * is made: the program's workspace and optimizer-state slots (of a
 * replica's shard under the distributed optimizer) and the plan's
 * buffers. false after reporting a program that does not build. */
static bool exec_need(const ir_graph *g, const rt_train_opts *o, int dd, int64_t *need, int64_t *state, int64_t *ws,
                      diag *d)
{
    cg_program *p = cg_build(g, d);
    if (!p) return false;
    int64_t param = g->mem_size[IR_MEM_PARAM], shard = o->dist_opt && dd > 1 ? (param + dd - 1) / dd : param;
    rt_exec probe = {.g = g, .prog = p, .state_bytes = p->state_slots * shard};
    *need = rt_exec_bytes(&probe);
    *state = probe.state_bytes;
    *ws = p->workspace_bytes;
    cg_program_free(p);
    return true;
}

/* The largest step arena of the pipeline ranks (codegen/step.h: the
 * in-flight micro-batches' slots, the values pinned and summed over the
 * step), as each rank will allocate it. false after reporting. */
static bool arena_need(const ir_graph *g, const rt_train_opts *o, int64_t *most, diag *d)
{
    int p, v;
    ir_graph_pp_dims(g, &p, &v);
    pipe_schedule s;
    *most = 0;
    if (!rt_train_schedule(g, o, p, v, &s, d)) return false;
    bool ok = true;
    for (int r = 0; ok && r < p; r++) {
        int64_t a = rt_pipe_predict(g, &s, r, o->mpi, NULL, d);
        ok = a >= 0;
        if (a > *most) *most = a;
    }
    pipe_schedule_free(&s);
    return ok;
}

/* The memory the ranks of this process will take against what the
 * machine has (runtime/train/sysmem.h): a run the kernel would kill part-way
 * through allocating is refused first, with the breakdown --memory-limit
 * prints. --no-memory-check skips it; so does a backend whose buffers
 * are a device's memory. */
bool rt_train_memory_check(const ir_graph *g, const rt_train_opts *o, int ranks, int dd, diag *d)
{
    if (o->no_memory_check || rt_backend_ops_of(o->backend)->device_memory) return true;
    int64_t per, state, ws, step_arena;
    if (!exec_need(g, o, dd, &per, &state, &ws, d) || !arena_need(g, o, &step_arena, d)) return false;
    per += step_arena;
    rt_sysmem m;
    rt_sysmem_probe(&m);
    int64_t have = rt_sysmem_available(&m), need = per * ranks;
    if (have < 0 || need <= have) return true;
    char cg[720] = "";
    if (m.cg_limit >= 0)
        snprintf(cg, sizeof cg, ", the memory cgroup's limit %lld bytes (%s)", (long long)m.cg_limit, m.cg_file);
    diag_error_plain(d, "the plan needs %lld bytes per rank (parameters %lld, gradients %lld, activations %lld, "
                     "inputs %lld, optimizer state %lld, workspace %lld, step arena %lld) x %d rank%s on this machine = %lld bytes "
                     "(%.3f GiB), more than the %lld bytes (%.3f GiB) available: MemAvailable %lld bytes%s; "
                     "--no-memory-check starts anyway", (long long)per, (long long)g->mem_size[IR_MEM_PARAM],
                     (long long)g->mem_size[IR_MEM_GRAD], (long long)g->mem_size[IR_MEM_ACT],
                     (long long)g->mem_size[IR_MEM_INPUT], (long long)state, (long long)ws, (long long)step_arena, ranks,
                     ranks == 1 ? "" : "s", (long long)need, (double)need / 1073741824.0, (long long)have,
                     (double)have / 1073741824.0, (long long)m.mem_available, cg);
    return false;
}

