/* The GPU side of the executor (runtime/exec_cuda.c), called by exec.c
 * only: the rest of tgc sees rt_exec (runtime/exec.h). */
#ifndef TGC_RT_EXEC_CUDA_H
#define TGC_RT_EXEC_CUDA_H

/* cuBLASLt's workspace in the device arena: 32 MiB, NVIDIA's advice for Hopper. */
#define RT_CUDA_LT_WORKSPACE ((int64_t)32 << 20)
#include <stdbool.h>

#include "runtime/exec.h"

/* Selects `device`, compiles e->source with NVRTC for its architecture,
 * loads the kernels, allocates the device arena and the host mirrors
 * (e->buf, e->state), creates the stream and the GEMM descriptors, and
 * binds every kernel argument, GEMM operand and collective buffer (cc:
 * NVRTC's no_cache and keep_source). false
 * after reporting to d; rt_exec_free then releases what was made. */
bool rt_exec_cuda_init(rt_exec *e, int device, const rt_cc_options *cc, diag *d);
void rt_exec_cuda_free(rt_exec *e);
/* One step on the device (e->rt set by the caller): 0 or RT_EXEC_ERR_DEVICE
 * with e->err set, or a communicator status. */
int rt_exec_cuda_step(rt_exec *e);
/* Parameters and optimizer state, host mirror -> device. */
bool rt_exec_cuda_upload(rt_exec *e);
bool rt_exec_cuda_download(rt_exec *e, ir_mem m);
bool rt_exec_cuda_watch(rt_exec *e, const ir_node *n);
/* Creates the profiling events (e->instr_ns is allocated by the caller). */
bool rt_exec_cuda_profile_begin(rt_exec *e);
void *rt_exec_cuda_stream(const rt_exec *e);
int rt_exec_cuda_device(const rt_exec *e);
const char *rt_exec_cuda_desc(const rt_exec *e);

/* exec.c's collective of instruction i over e->comm_ptr (shared by both
 * backends: on the GPU the pointers are device pointers). */
int rt_exec_run_comm(rt_exec *e, const cg_comm *m, int i);

/* --check-numerics (exec.c): scans what instruction i wrote; 0 or
 * RT_EXEC_ERR_NUMERICS (e->fault set), or RT_EXEC_ERR_DEVICE. */
int rt_exec_check_instr(rt_exec *e, int i);
/* GPU: waits for the stream, then copies bytes at the device place of b
 * into host memory dst; false with e->err set. */
bool rt_exec_cuda_fetch(rt_exec *e, cg_bind b, size_t bytes, void *dst);

#endif
