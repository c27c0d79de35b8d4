/* What a run checks before anything is built (runtime/train/train.c's
 * trainer_new): its files, and the memory its ranks will take. */
#ifndef TGC_RT_TRAIN_CHECKS_H
#define TGC_RT_TRAIN_CHECKS_H
#include <stdbool.h>

#include "ir/ir.h"
#include "passes/pipeline.h"
#include "runtime/train/train.h"
#include "support/diag.h"

/* The run's inputs and outputs (runtime/io/run_files.h), before anything
 * runs. --save's directory is checked by its lock (before step 1). */
bool rt_train_files_check(const rt_train_opts *o, diag *d);
/* The memory `ranks` ranks of this host (dd: the data-parallel degree)
 * will take against what the machine has (runtime/train/sysmem.h): a run
 * the kernel would kill part-way through allocating is refused first,
 * with the breakdown --memory-limit prints. --no-memory-check skips it;
 * so does a backend whose buffers are a device's memory. */
bool rt_train_memory_check(const ir_graph *g, const rt_train_opts *o, int ranks, int dd, diag *d);
/* The pipeline schedule of the run's options on graph g (p ranks, v
 * chunks): the schedule pass's own function. false after reporting. */
bool rt_train_schedule(const ir_graph *g, const rt_train_opts *o, int p, int v, pipe_schedule *s, diag *d);

#endif
