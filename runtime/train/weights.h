/* A run's weights as safetensors files (docs/runtime.md): --export and
 * --export-grads write every parameter (or its gradient) whole, the parts
 * of the ranks put together; --init-from loads them, each rank its part.
 * rt_export_params, rt_export_grads and rt_import_params (train.h) are the
 * one-executor cases. */
#ifndef TGC_RT_TRAIN_WEIGHTS_H
#define TGC_RT_TRAIN_WEIGHTS_H
#include <stdbool.h>

#include "runtime/io/checkpoint.h"
#include "support/diag.h"

/* Every parameter, or (grads) its gradient under the name grad.NAME, whole:
 * the parts of R's ranks are put together (rt_ckpt_gather) and the
 * assembling rank writes the file. With a communicator every rank calls
 * it and the others send their parts: false there only when a message
 * failed (the caller reports the communicator's error). */
bool rt_export_tensors(const rt_ckpt_ranks *R, const char *path, bool grads, diag *d);

#endif
