/* The executor: runs a compiled program on one rank. All memory (the flat
 * parameter, gradient, optimizer-state and input buffers, the activation
 * arena and the workspace) is allocated once when the executor is built;
 * a training step allocates nothing and calls no per-element function.
 *
 * The executor reaches memory and kernels only through its backend
 * (runtime/backend/backend.h: cpu, sim, cuda). Its buffers are DEVICE
 * memory: rt_exec_ptr gives an address on the executor's device, which
 * host code never dereferences; values move with rt_exec_read /
 * rt_exec_write (rt_exec_get / rt_exec_set for a node's whole value) and
 * are combined on the device with rt_exec_copy / rt_exec_reduce /
 * rt_exec_scale (docs/backends.md). */
#ifndef TGC_RT_EXEC_H
#define TGC_RT_EXEC_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "codegen/codegen.h"
#include "runtime/comm/comm.h"
#include "runtime/backend/backend.h"
#include "runtime/backend/cpu.h"

/* The run-time scalars every kernel sees (tgc_rt in generated code). */
typedef struct rt_scalars {
    int64_t step, seed;
    float lr_float;
    double lr_double;
    float wd_float;
    double wd_double;
    int64_t tp_rank, tp_size; /* this rank in its tensor-parallel group */
    int64_t opt_step;         /* optimizer steps taken (Adam's bias correction) */
    float loss_scale_float;   /* fp16's loss scale (1 otherwise) */
    double loss_scale_double;
    int64_t shard_lo, shard_hi; /* the distributed optimizer: this rank's elements of the flat buffers */
    int64_t eval;             /* 1 while an evaluation runs the forward (dropout off) */
    int64_t pos;              /* KV-cached decoding: the position of this run's first token (`tgc sample`) */
} rt_scalars;

typedef void (*rt_kernel_fn)(void *const *io, const rt_scalars *rt);

typedef enum rt_backend { RT_BACKEND_CPU, RT_BACKEND_SIM, RT_BACKEND_CUDA } rt_backend;

typedef struct rt_exec_options {
    rt_backend backend;
    rt_cc_options cc; /* CPU: how the kernels are compiled; CUDA: no_cache, keep_source for NVRTC */
    int device;       /* CUDA: the device ordinal */
    int64_t memory_limit; /* CPU: bytes the rank may allocate; 0 = no limit */
    int dp_size, dp_rank; /* a program with a sharded update (the distributed optimizer): this rank's shard */
    /* Per memory kind, another executor's buffer (on the same backend and
     * device) to use instead of allocating one (NULL: allocate). The caller
     * keeps it alive and laid out as this program's plan expects: `tgc
     * sample`'s decoding program shares the parameters and KV caches of
     * its prefill program. */
    unsigned char *borrow[IR_MEM_COUNT];
    /* --cuda-graphs (docs/cuda.md "CUDA graphs"): each distinct run (its
     * instructions and bindings) is captured once, on its second call, and
     * replayed after that, on the backends that have graphs (cuda; sim,
     * which models them). */
    bool graphs;
} rt_exec_options;


/* Where the instructions of a program find their buffers: per memory kind
 * a base (NULL: the executor's own buffer), and per node id an optional
 * pointer of its own (pin, indexed by node id, NULL entries and a NULL
 * array: none; a view follows its base node's pin). The pipeline runtime
 * (runtime/train/pipe.c) runs the instructions of each in-flight micro-batch on
 * an activation arena of its own, and keeps step-level values pinned. */
typedef struct rt_bindings {
    unsigned char *base[IR_MEM_COUNT];
    void *const *pin;
    void **io, **gemm_ptr, **comm_ptr; /* resolved per kernel argument / instruction */
} rt_bindings;

/* Per GEMM instruction: a, b, c, the epilogue's bias and aux (NULL when it has none). */
#define RT_GEMM_PTRS 5

typedef struct rt_exec {
    const ir_graph *g;
    cg_program *prog;
    char *source;         /* the generated kernels (C, or CUDA for the cuda backend) */
    rt_so *so;            /* the host backends (cpu, sim): the kernels' shared object */
    rt_kernel_fn *fn;     /* the host backends: per kernel */
    void **io;            /* per kernel, KMAX_ARGS resolved pointers */
    void **gemm_ptr;      /* per instruction: RT_GEMM_PTRS (a, b, c, bias, aux) */
    void **comm_ptr;      /* per instruction: src, dst of a collective */
    const rt_bindings *cur; /* the bindings io / gemm_ptr / comm_ptr come from; NULL: the executor's own */
    void **own_io, **own_gemm_ptr, **own_comm_ptr; /* the executor's own (its buffers) */
    tgc_comm *comm;       /* collectives on this executor's buffers; NULL on a single rank */
    unsigned char *buf[IR_MEM_COUNT]; /* device addresses, as ws and state */
    unsigned char *ws, *state;
    int64_t state_bytes;
    int64_t state_stride; /* bytes per optimizer-state slot: the parameters', or a shard's */
    int64_t shard_elems;  /* the distributed optimizer: elements per data-parallel shard (0: not sharded) */
    rt_scalars rt;
    double *instr_ns;     /* per instruction time of the last step (TGC_DEBUG >= 2), or NULL */
    const rt_backend_ops *be; /* where buffers live and kernels run */
    void *dev;            /* the backend's own state */
    bool opened;          /* the backend's open succeeded (close releases it) */
    char err[1024];       /* why the last operation failed on the device ("" if none) */
    int pp_stage;         /* a pipeline rank: the stage whose parameters it holds (a graph with stages) */
    int64_t alloc_bytes;  /* what the executor allocated for the plan's buffers */
    unsigned borrowed;    /* bit m: buf[m] is rt_exec_options.borrow[m], not the executor's to free */
    struct rt_check *check; /* --check-numerics: what each instruction writes, or NULL (off) */
    struct rt_nonfinite *fault; /* the first non-finite value found (with check) */
    void *half_host;      /* mixed precision: the host scratch rt_exec_get / rt_exec_set convert through */
    size_t half_cap;      /* its bytes (it grows to the largest 16-bit value moved, then stays) */
    /* --cuda-graphs: the runs captured (runtime/backend/graph.h), NULL when
     * off; the backend replays them. The kernels of a replay read e->rt
     * from rt_dev, a device copy uploaded before each run. */
    struct rt_graphs *graphs;
    void *rt_dev;
} rt_exec;

/* Builds the program of a memory-planned graph, compiles its kernels and
 * allocates every buffer, on the CPU. NULL after reporting an error. */
rt_exec *rt_exec_new(const ir_graph *g, const rt_cc_options *cc, diag *d);
/* The same on the backend o chooses. */
rt_exec *rt_exec_new_on(const ir_graph *g, const rt_exec_options *o, diag *d);
void rt_exec_free(rt_exec *e);
const char *rt_backend_name(rt_backend b); /* "cpu", "sim", "cuda" */
/* The operations of backend b. */
const rt_backend_ops *rt_backend_ops_of(rt_backend b);

/* Deterministic initialisation: each parameter element is a function of
 * (seed, parameter name, element index) (runtime/philox.h); optimizer
 * state is zeroed. false (rt_exec_error says why) when the copy to the
 * device failed. */
bool rt_exec_init_params(rt_exec *e, uint64_t seed);

/* Mixed precision: sets the fp32 master weights from the parameters (after
 * they were initialised, imported or loaded: 16-bit values, rounded when
 * they were set), widened. false (rt_exec_error says why) on a device
 * error. */
bool rt_exec_sync_master(rt_exec *e);

/* Why the last operation failed ("" when none did or the failure was a
 * communicator's: see tgc_comm_error). */
const char *rt_exec_error(const rt_exec *e);
/* The backend's cudaStream_t (for a communicator on the same stream) and
 * device ordinal; NULL and -1 on the host backends. */
void *rt_exec_stream(const rt_exec *e);
int rt_exec_device(const rt_exec *e);
/* One line on the device and the kernels, e.g. "device 0: NVIDIA H200
 * (sm_90, 132 SMs, 139.8 of 140.0 GiB free), CUDA driver 13.0, runtime
 * 13.0; 212 kernels for sm_90 (NVRTC, 9.1 s)"; "" on the host backends. */
const char *rt_exec_device_desc(const rt_exec *e);
const char *rt_exec_backend_name(const rt_exec *e); /* "cpu", "sim", "cuda" */

/* ---- moving values (docs/backends.md) ---------------------------------------- */

/* bytes at device address dev (inside one of e's buffers) to host memory,
 * and back. false with rt_exec_error set. */
bool rt_exec_read(rt_exec *e, const void *dev, void *host, size_t bytes);
bool rt_exec_write(rt_exec *e, void *dev, const void *host, size_t bytes);
/* Node n's whole value under bindings b (NULL: the executor's own), as an
 * array of n's dtype: a value stored in 16 bits (mixed precision,
 * ir_storage_dtype) is widened from, or rounded to nearest even into, its
 * storage, through a host scratch that grows to the largest such value
 * once (no allocation per step). */
bool rt_exec_get(rt_exec *e, const rt_bindings *b, const ir_node *n, void *host);
bool rt_exec_set(rt_exec *e, const rt_bindings *b, const ir_node *n, const void *host);
/* The communicators' dtype of values of dtype t (f32, f64, bf16, f16). */
tgc_comm_dtype rt_comm_dtype(ir_dtype t);
/* n 16-bit values of dtype t (bf16 or f16) to fp32 (exact), and fp32 to
 * them (round to nearest even; runtime/backend/half.h). */
void rt_widen16(ir_dtype t, const uint16_t *x, float *y, int64_t n);
void rt_narrow16(ir_dtype t, const float *x, uint16_t *y, int64_t n);
/* A scalar node's value as a double (NAN after a device error or for no node). */
double rt_exec_scalar(rt_exec *e, const rt_bindings *b, const ir_node *n);
/* Device to device within e's memory: a copy, dst op= src over n elements
 * of type t, and x *= s. */
bool rt_exec_copy(rt_exec *e, void *dst, const void *src, size_t bytes);
bool rt_exec_reduce(rt_exec *e, void *dst, const void *src, int64_t n, ir_dtype t, rt_reduce_op op);
bool rt_exec_scale(rt_exec *e, void *x, int64_t n, double s, ir_dtype t);
bool rt_exec_zero(rt_exec *e, void *dst, size_t bytes);
/* A zeroed device buffer beside the plan's (the pipeline's slots), NULL
 * after reporting to d what it was for; rt_exec_release gives it back. */
void *rt_exec_alloc(rt_exec *e, int64_t bytes, const char *what, diag *d);
void rt_exec_release(rt_exec *e, void *p);
/* Waits for every operation issued on e. */
bool rt_exec_sync(rt_exec *e);
/* The device address of optimizer-state slot k at byte offset off. */
void *rt_exec_state_ptr(const rt_exec *e, int k, int64_t off);

/* The buffer of a node (a parameter, input, gradient or activation). */
void *rt_exec_ptr(const rt_exec *e, const ir_node *n);
/* The node whose buffer n shares (a reshape view's operand, followed), or n. */
const ir_node *rt_view_base(const ir_graph *g, const ir_node *n);
/* The same under bindings b (NULL: the executor's own). */
void *rt_exec_ptr_in(const rt_exec *e, const rt_bindings *b, const ir_node *n);

/* Resolves every instruction's pointers under b->base and b->pin (which
 * the caller set, device addresses); rt_exec_bindings_free releases the tables. */
void rt_exec_bind(rt_exec *e, rt_bindings *b);
void rt_exec_bindings_free(rt_bindings *b);
/* Makes the next rt_exec_run use b (NULL: the executor's own buffers). */
void rt_exec_use(rt_exec *e, const rt_bindings *b);
/* Runs instructions idx[0 .. n-1] of the program (idx NULL: the first n;
 * the run-time scalars as set in e->rt) with the current bindings. A
 * training step is the rank's compiled step (runtime/train/pipe.h, which
 * runs its segments through this). Returns 0, or a communicator status
 * when a collective failed (another rank failed or timed out;
 * tgc_comm_error says which), or RT_EXEC_ERR_DEVICE when the GPU failed
 * (rt_exec_error says which call, kernel and node). */
#define RT_EXEC_ERR_DEVICE (-2)
int rt_exec_run(rt_exec *e, const int *idx, int n);
/* Makes e one rank of a tensor-parallel group (before init). */
void rt_exec_set_rank(rt_exec *e, tgc_comm *comm, int tp_rank, int tp_size);

/* Per-op time of the steps run with profiling on (rt_exec_profile_begin),
 * printed as a table sorted by time: op, launches per step, ms per step.
 * On the GPU each instruction is timed by CUDA events recorded around it
 * on the stream (device time, not launch time). */
void rt_exec_profile_begin(rt_exec *e);
void rt_exec_profile_print(const rt_exec *e, int64_t steps, FILE *out);

/* Sets the OpenMP team size of the calling thread's kernels and GEMMs (the
 * OpenMP runtime is found at run time; tgc links none), at most
 * OMP_NUM_THREADS when that is set. One thread when the loaded OpenBLAS is
 * its pthreads build (exec.c says why). */
void rt_set_omp_threads(int n);

/* For the backends (runtime/backend/): the collective of instruction i
 * over e->comm on e->comm_ptr, and --check-numerics' scan of what
 * instruction i wrote (0, RT_EXEC_ERR_NUMERICS with e->fault set, or
 * RT_EXEC_ERR_DEVICE). */
int rt_exec_run_comm(rt_exec *e, const cg_comm *m, int i);
/* The same on the given source and destination (a replayed graph's). */
int rt_exec_run_comm_on(rt_exec *e, const cg_comm *m, int i, void *src, void *dst);
int rt_exec_check_instr(rt_exec *e, int i);

/* One program GEMM on the CPU (CBLAS, row-major, batched by a loop). */
void rt_cpu_gemm(const cg_gemm *g, void *a, void *b, void *c);

/* Bytes of all buffers as the memory plan lays them out (what `tgc plan`
 * predicts per rank). */
int64_t rt_exec_bytes(const rt_exec *e);
/* Bytes the executor really allocated for them: the buffers rounded to
 * their alignment (and on the GPU cuBLASLt's workspace). */
int64_t rt_exec_allocated(const rt_exec *e);

/* --check-numerics: after every instruction of a step the values it wrote
 * (a kernel's output arguments, a GEMM's C and epilogue outputs, a
 * collective's destination) are scanned for NaN and infinities, and the
 * step stops at the first one: rt_exec_run returns RT_EXEC_ERR_NUMERICS
 * and rt_exec_nonfinite says where. forward_only checks the instructions
 * up to the loss only (fp16: the loss scaler owns overflows of the
 * backward). Each instruction's outputs are copied to the host and
 * scanned there (a tight loop per buffer), off unless enabled. */
#define RT_EXEC_ERR_NUMERICS (-3)
typedef struct rt_nonfinite {
    int instr;            /* the instruction that wrote it */
    const ir_node *node;  /* the value holding it (the instruction's node for workspace or optimizer state) */
    const char *where;    /* "" or what the region is when not node's buffer ("optimizer state", "workspace") */
    int64_t index;        /* the first bad element of the region */
    double value;
    bool forward;         /* the instruction runs before the loss is computed */
} rt_nonfinite;
void rt_exec_check_numerics(rt_exec *e, bool forward_only);
const rt_nonfinite *rt_exec_nonfinite(const rt_exec *e);
/* "kernel k12_gelu", "GEMM", "all_reduce", ... of instruction i. */
void rt_exec_instr_name(const rt_exec *e, int i, char *buf, size_t cap);

#endif
