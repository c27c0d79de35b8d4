/* The library's internals behind include/tgc.h: loading a model,
 * compiling it to a plan, loading a plan under a configuration, and a
 * run's options. api/api.c wraps them in the public API, and so do the
 * developer commands' calls (api/check_dump.c, api/planner_report.c,
 * api/dataset.c, api/inspect.c, api/export.c, ...); the command line
 * (cli/) sees none of this, only include/tgc.h. Errors go to the diag
 * (and, for the configuration's checks, to the FILE err). */
#ifndef TGC_API_INTERNAL_H
#define TGC_API_INTERNAL_H
#include <stdbool.h>
#include <stdio.h>

#include "api/config.h"
#include "frontend/frontend.h"
#include "ir/ir.h"
#include "runtime/train/train.h"
#include "support/diag.h"
#include "tgc.h"

/* A model: a .tg file through the front end, or text IR (a .ir file, or
 * any input starting with "tgc-ir") through the IR reader, verified. "-"
 * reads standard input. A compiled plan, intact or damaged, is refused as
 * one. _text: the model's text, named path (shown: the name errors give). */
ir_graph *api_model_load(const char *path, const fe_override *sets, int nsets, diag *d);
ir_graph *api_model_load_text(const char *path, const char *shown, const char *text, size_t len,
                              const fe_override *sets, int nsets, diag *d);
/* An override as the command line writes it: "--set k=v" or "--num-layers 2". */
void api_override_str(const fe_override *o, char *buf, size_t n);
/* Every --param-group of groups (joined by ';') takes at least one
 * parameter of g; false after reporting each that takes none to d. */
bool api_param_groups_match(const ir_graph *g, const char *groups, diag *d);

/* Every pass on g under c (TGC_DEBUG >= 3: the IR after each on standard
 * error); NULL (g freed) after reporting. */
ir_graph *api_run_passes(ir_graph *g, const tgc_config *c, diag *d);
/* A loaded model (NULL: its load failed) checked against c's parameter
 * groups and compiled; *lowered (when not NULL) gets its text IR before the
 * passes, what a plan recompiles from. NULL (g freed) after reporting. */
ir_graph *api_compile_graph(ir_graph *g, const tgc_config *c, char **lowered, diag *d);
/* A compiled plan (runtime/plan.h) of g, its lowered IR and configuration. */
struct cg_program;
bool api_plan_write(const char *path, const tgc_config *c, const char *lowered, const ir_graph *g,
                    const struct cg_program *prog, diag *d);
/* A plan's graph with its configuration under cli's options (what `tgc
 * run PLAN` does with each, cli_options_plan_usage) into *c: recompiled
 * from its lowered IR where cli changes a pass's option (saying so on err,
 * when not NULL); *lowered (when not NULL) gets that IR. NULL with *rc 2 for options that do not go together
 * (written to err), 1 for the rest (reported to d). */
ir_graph *api_plan_load(const char *path, tgc_config *c, const tgc_config *cli, int *rc, char **lowered, diag *d,
                        FILE *err);
/* The training loop's options from c (model: the model or plan the run
 * was given); 0, or 2 after writing what is wrong to err. */
int api_train_options(rt_train_opts *o, const tgc_config *c, const char *model, FILE *err);

/* Whether c runs on the mpi communicator (--comm mpi, or auto under mpirun). */
bool api_comm_is_mpi(const tgc_config *c);

/* A launcher's world (mpirun, torchrun; c->comm) of the size of c's t x d
 * x p, or none: true; false after rank 0 reported the mismatch to d, the
 * other processes with *quiet set and nothing reported (they should leave
 * with status 0). */
bool api_world_fits(const tgc_config *c, bool *quiet, diag *d);

/* The tokenizer of the run's text data (c's --tokenizer-type and its
 * files; o: api_train_options' of c) in *tk (NULL: none given, bytes): 0;
 * 2 after writing to err why the options do not go together (files of
 * another type, no --data); 1 after reporting a file to d. */
struct tgc_tokenizer;
int api_run_tokenizer(const tgc_config *c, const rt_train_opts *o, struct tgc_tokenizer **tk, diag *d, FILE *err);

/* What `tgc compile -o` prints of a plan (tgc_plan_figures_get). */
typedef struct api_plan_figures {
    int kernels, gemms;
    long long param_bytes, act_bytes, workspace_bytes;
    long long region_bytes; /* norm/dropout/residual activations per rank (memplan_region_bytes) */
} api_plan_figures;
/* The figures of a compiled graph g and its program. */
void api_plan_figures_of(const ir_graph *g, const struct cg_program *prog, api_plan_figures *fig);

/* One library call's diagnostics (api/api.c): a memory stream
 * (open_memstream, POSIX), and, with tgc_set_diagnostics, a stream that
 * writes to both as it goes. api_call_begin clears the last error;
 * api_call_end(a, st) ends the call with status st, whose text becomes the
 * last error when st is not TGC_OK. Every public call of api/ is one. */
typedef struct api_call {
    FILE *f, *mem, *echo;
    char *buf;
    size_t len;
    diag d;
} api_call;

void api_call_begin(api_call *a);
tgc_status api_call_end(api_call *a, tgc_status st);

/* A tgc_options' configuration and its overrides (--set and the model
 * flags, in the order given): what the developer commands' calls
 * (api/check_dump.c, api/planner_report.c, ...) read. NULL opts: the
 * defaults of tgc_options_new and no overrides. */
const tgc_config *api_options_config(const tgc_options *o);
const fe_override *api_options_sets(const tgc_options *o, int *nsets);

/* A public call's arguments struct whose first member is `size_t size`
 * (sizeof as the caller was compiled): copied into dst (dst_size bytes,
 * zeroed past what the caller's struct has), false (after the misuse
 * error naming fn, on a) when src is NULL or its size is not one of
 * this library's (too small for the size member, or larger). */
/* A command's usage error, as `tgc` words it: "tgc CMD: error: MESSAGE"
 * and "Try 'tgc CMD --help'." onto a's diagnostics; TGC_EUSAGE (the call
 * still to end). */
tgc_status api_usage(api_call *a, const char *cmd, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The model overrides of opts, and --micro-batch-size's `batch` for a .tg
 * model (model NULL: for any; what compile and run do: a usage error of
 * cmd when --set batch is given too) into sets[0 .. *n) (at most API_OVERRIDES_MAX; the
 * strings are opts' or buf's, which must outlive them). */
enum { API_OVERRIDES_MAX = 65 };
tgc_status api_model_overrides(const tgc_options *opts, const char *cmd, const char *model, fe_override *sets, int *n,
                               char *buf, size_t cap, api_call *a);
bool api_args_copy(void *dst, size_t dst_size, const void *src, const char *fn, api_call *a);

#endif
