/* The backend interface (docs/backends.md): the one table of operations
 * through which the executor, the pipeline runtime, the training loop,
 * checkpoints, evaluation and sampling reach memory and kernels. Nothing
 * outside runtime/backend/ asks which backend it has.
 *
 * A backend owns a "device": the memory the plan's buffers live in
 * (addresses from `alloc`, which only the backend's own operations may
 * dereference), the compiled kernels, and the order operations run in.
 *   cpu   host memory, the generated C kernels, a CBLAS (runtime/backend/host.c);
 *   sim   the same kernels on host memory that is mapped inaccessible
 *         between the backend's calls, so that host code touching a
 *         device buffer without upload / download faults (host.c);
 *   cuda  device memory, NVRTC kernels, cuBLASLt, one stream per rank
 *         (runtime/backend/cuda_exec.c).
 * Operations are ordered as issued on the executor's stream; `sync` waits
 * for all of them. download returns with the data on the host. Every
 * operation returns false / a non-zero status with rt_exec_error set. */
#ifndef TGC_RT_BACKEND_H
#define TGC_RT_BACKEND_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codegen/codegen.h"
#include "support/diag.h"

struct rt_exec;
struct rt_exec_options;

typedef enum rt_reduce_op { RT_REDUCE_SUM, RT_REDUCE_MAX } rt_reduce_op;

typedef struct rt_backend_ops {
    const char *name;   /* "cpu", "sim", "cuda" */
    cg_target target;   /* the program the kernels are rendered for */
    /* Its buffers are host memory that a host communicator may read and
     * write directly (cpu); otherwise collectives on them go through a
     * device communicator (runtime/comm/comm_device.c, NCCL). */
    bool host_memory;
    /* Its buffers are a device's memory, not the machine's RAM (the run's
     * memory check does not count them against MemAvailable; MFU is per
     * device); and NCCL can run collectives on them (one rank per device). */
    bool device_memory, nccl;
    /* It captures runs into graphs and replays them (--cuda-graphs: cuda;
     * sim models them): e->graphs and e->rt_dev are made for it. */
    bool graphs;
    /* The devices of this machine (NULL: the host only); 0 after
     * reporting why there are none. */
    int (*device_count)(diag *d);
    /* Compiles e->prog's kernels (e->source rendered for `target`) and
     * selects the device (o->device); false after reporting to d. */
    bool (*open)(struct rt_exec *e, const struct rt_exec_options *o, diag *d);
    /* Releases what open made (after every buffer was released). */
    void (*close)(struct rt_exec *e);
    /* A zeroed buffer of `bytes` (64-byte aligned at least), or NULL with
     * rt_exec_error set; `release` gives it back. */
    void *(*alloc)(struct rt_exec *e, size_t bytes);
    void (*release)(struct rt_exec *e, void *p);
    bool (*upload)(struct rt_exec *e, void *dst, const void *src, size_t bytes);
    bool (*download)(struct rt_exec *e, void *dst, const void *src, size_t bytes);
    bool (*copy)(struct rt_exec *e, void *dst, const void *src, size_t bytes);
    bool (*zero)(struct rt_exec *e, void *dst, size_t bytes);
    /* dst[i] = dst[i] op src[i] for n elements of type t (f32 or f64), in
     * index order: the reduction the communicators do (SUM: a + b; MAX:
     * the local communicator's: x > a or x is NaN takes x). bf16 and f16
     * too: each element widened, combined in f32 and rounded to nearest
     * even once per call. */
    bool (*reduce)(struct rt_exec *e, void *dst, const void *src, int64_t n, ir_dtype t, rt_reduce_op op);
    /* x[i] *= s (s rounded to t first; bf16 / f16: s in f32, the product
     * rounded once). */
    bool (*scale)(struct rt_exec *e, void *x, int64_t n, double s, ir_dtype t);
    /* Runs instructions idx[0 .. n-1] (NULL: 0 .. n-1) under e's current
     * bindings; collectives go through e->comm. 0, a communicator status,
     * RT_EXEC_ERR_DEVICE or RT_EXEC_ERR_NUMERICS. */
    int (*run)(struct rt_exec *e, const int *idx, int n);
    /* Waits for every operation issued; false on a device error. */
    bool (*sync)(struct rt_exec *e);
    /* Profiling: per-instruction device times of the runs since begin are
     * added into e->instr_ns (NULL entries: times are taken around run). */
    bool (*profile_begin)(struct rt_exec *e);
    /* The cudaStream_t of the executor (a communicator on the same stream), or NULL. */
    void *(*stream)(const struct rt_exec *e);
    /* Overlap (--overlap-grad-reduce, docs/pipeline.md): a second stream of
     * the executor's device, made on first use and destroyed by close (a
     * communicator that runs beside the executor's stream), NULL with
     * rt_exec_error set; and `stream_wait`, which makes `stream` wait for
     * everything issued on the executor's stream so far without the host
     * waiting (a CUDA event recorded on the one, waited for on the other).
     * NULL for backends whose operations are complete when they return
     * (cpu, sim): there a thread does the overlap. */
    void *(*side_stream)(struct rt_exec *e);
    bool (*stream_wait)(struct rt_exec *e, void *stream);
    int (*device)(const struct rt_exec *e); /* the device ordinal, -1 on the host */
    const char *(*describe)(const struct rt_exec *e); /* one line on the device and kernels; "" */
    /* Bytes the backend adds to the plan's buffers, and what they are
     * ("cuBLASLt's workspace"). */
    int64_t extra_bytes;
    const char *extra_what;
} rt_backend_ops;

extern const rt_backend_ops rt_backend_cpu, rt_backend_sim, rt_backend_cuda;

/* The backend of a name ("cpu", "sim", "cuda"), or NULL. */
const rt_backend_ops *rt_backend_by_name(const char *name);

/* The host kernels' program run (cpu and sim): kernels from the shared
 * object, GEMMs by CBLAS, collectives through e->comm. */
int rt_host_run(struct rt_exec *e, const int *idx, int n);

/* cuda: the CUDA source of the backend's own kernels (reduce, scale), which
 * open compiles beside the program's (tests compile it with NVRTC). */
const char *rt_cuda_backend_source(void);

/* sim: the mprotect calls the simulated device has made so far (its cost
 * per operation is the buffers the operation touches; tests count it). */
uint64_t rt_sim_protect_count(void);
/* sim: whether p lies in the simulated device's memory (tests). */
bool rt_sim_owns(const void *p);

#endif
