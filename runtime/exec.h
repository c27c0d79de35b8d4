/* The executor: runs a compiled program on one rank. All memory (the flat
 * parameter, gradient, optimizer-state and input buffers, the activation
 * arena and the workspace) is allocated once when the executor is built;
 * a training step allocates nothing and calls no per-element function.
 *
 * Two backends behind one interface: the CPU (generated C compiled into a
 * shared object, OpenBLAS GEMMs) and CUDA (runtime/exec_cuda.c: kernels
 * compiled with NVRTC, cuBLASLt GEMMs, NCCL collectives, one device arena).
 * On both, rt_exec_ptr gives a HOST buffer: on the GPU a mirror of the
 * device buffer that the executor keeps in step where the host reads or
 * writes it (docs/cuda.md, "Runtime"):
 *   - inputs written by the caller are copied to the device by each step;
 *   - parameters written by the caller are copied to the device by
 *     rt_exec_sync_master (rt_exec_init_params calls it);
 *   - the values of nodes passed to rt_exec_watch are copied back after
 *     each step; other buffers come back with rt_exec_download. */
#ifndef TGC_RT_EXEC_H
#define TGC_RT_EXEC_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "codegen/codegen.h"
#include "runtime/comm.h"
#include "runtime/cpu.h"

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

typedef enum rt_backend { RT_BACKEND_CPU, RT_BACKEND_CUDA } rt_backend;

typedef struct rt_exec_options {
    rt_backend backend;
    rt_cc_options cc; /* CPU: how the kernels are compiled; CUDA: no_cache, keep_source for NVRTC */
    int device;       /* CUDA: the device ordinal */
    int64_t memory_limit; /* CPU: bytes the rank may allocate; 0 = no limit */
    int dp_size, dp_rank; /* a program with a sharded update (the distributed optimizer): this rank's shard */
    /* CPU: per memory kind, another executor's buffer to use instead of
     * allocating one (NULL: allocate). The caller keeps it alive and laid
     * out as this program's plan expects: `tgc sample`'s decoding program
     * shares the parameters and KV caches of its prefill program. */
    unsigned char *borrow[IR_MEM_COUNT];
} rt_exec_options;

/* The GPU side of an executor (runtime/exec_cuda.c). */
struct rt_exec_cuda;

/* Where the instructions of a program find their buffers: per memory kind
 * a base (NULL: the executor's own buffer), and per node id an optional
 * pointer of its own (pin, indexed by node id, NULL entries and a NULL
 * array: none; a view follows its base node's pin). The pipeline runtime
 * (runtime/pipe.c) runs the instructions of each in-flight micro-batch on
 * an activation arena of its own, and keeps step-level values pinned. */
typedef struct rt_bindings {
    unsigned char *base[IR_MEM_COUNT];
    void *const *pin;
    void **io, **gemm_ptr, **comm_ptr; /* resolved per kernel argument / instruction */
} rt_bindings;

typedef struct rt_exec {
    const ir_graph *g;
    cg_program *prog;
    char *source;         /* the generated C */
    rt_so *so;
    rt_kernel_fn *fn;     /* per kernel */
    void **io;            /* per kernel, KMAX_ARGS resolved pointers */
    void **gemm_ptr;      /* per instruction: a, b, c */
    void **comm_ptr;      /* per instruction: src, dst of a collective */
    const rt_bindings *cur; /* the bindings io / gemm_ptr / comm_ptr come from; NULL: the executor's own */
    void **own_io, **own_gemm_ptr, **own_comm_ptr; /* the executor's own (its buffers) */
    tgc_comm *comm;       /* NULL on a single rank */
    unsigned char *buf[IR_MEM_COUNT];
    unsigned char *ws, *state;
    int64_t state_bytes;
    int64_t state_stride; /* bytes per optimizer-state slot: the parameters', or a shard's */
    int64_t shard_elems;  /* the distributed optimizer: elements per data-parallel shard (0: not sharded) */
    rt_scalars rt;
    double *instr_ns;     /* per instruction time of the last step (TGC_DEBUG >= 2), or NULL */
    rt_backend backend;
    struct rt_exec_cuda *cuda; /* NULL on the CPU */
    char err[1024];       /* why the last step or transfer failed on the GPU ("" if none) */
    int pp_stage;         /* a pipeline rank: the stage whose parameters it holds (a graph with stages) */
    int64_t alloc_bytes;  /* what the executor allocated for the plan's buffers (host, or the device arena) */
    unsigned borrowed;    /* bit m: buf[m] is rt_exec_options.borrow[m], not the executor's to free */
    struct rt_check *check; /* --check-numerics: what each instruction writes, or NULL (off) */
    struct rt_nonfinite *fault; /* the first non-finite value found (with check) */
} rt_exec;

/* Builds the program of a memory-planned graph, compiles its kernels and
 * allocates every buffer, on the CPU. NULL after reporting an error. */
rt_exec *rt_exec_new(const ir_graph *g, const rt_cc_options *cc, diag *d);
/* The same on the backend o chooses. */
rt_exec *rt_exec_new_on(const ir_graph *g, const rt_exec_options *o, diag *d);
void rt_exec_free(rt_exec *e);
const char *rt_backend_name(rt_backend b); /* "cpu", "cuda" */

/* Deterministic initialisation: each parameter element is a function of
 * (seed, parameter name, element index) (runtime/philox.h); optimizer
 * state is zeroed. false (rt_exec_error says why) when the copy to the
 * device failed. */
bool rt_exec_init_params(rt_exec *e, uint64_t seed);

/* Mixed precision: sets the fp32 master weights from the parameters (after
 * they were initialised or loaded). On the GPU it then copies parameters
 * and optimizer state to the device; false when that failed. */
bool rt_exec_sync_master(rt_exec *e);

/* GPU: copies n's buffer to its host mirror after every step (the loss,
 * the gradient norm: what the training loop reads). n may be NULL; a
 * no-op on the CPU. false when the pinned staging buffer could not be had. */
bool rt_exec_watch(rt_exec *e, const ir_node *n);
/* GPU: copies the whole buffer of kind m (IR_MEM_PARAM, IR_MEM_GRAD, ...)
 * to its host mirror; a no-op on the CPU. false on a device error. */
bool rt_exec_download(rt_exec *e, ir_mem m);
/* Why the last step, upload or download failed ("" when none did or the
 * failure was a communicator's: see tgc_comm_error). */
const char *rt_exec_error(const rt_exec *e);
/* GPU: the cudaStream_t every operation of this executor runs on, and its
 * device (for a communicator on the same stream); NULL and -1 on the CPU. */
void *rt_exec_stream(const rt_exec *e);
int rt_exec_device(const rt_exec *e);
/* GPU: one line on the device and the kernels, e.g. "device 0: NVIDIA H200
 * (sm_90, 132 SMs, 139.8 of 140.0 GiB free), CUDA driver 13.0, runtime
 * 13.0; 212 kernels for sm_90 (NVRTC, 9.1 s)"; "" on the CPU. */
const char *rt_exec_device_desc(const rt_exec *e);

/* The buffer of a node (a parameter, input, gradient or activation). */
void *rt_exec_ptr(const rt_exec *e, const ir_node *n);
/* The node whose buffer n shares (a reshape view's operand, followed), or n. */
const ir_node *rt_view_base(const ir_node *n);
/* The same under bindings b (NULL: the executor's own). */
void *rt_exec_ptr_in(const rt_exec *e, const rt_bindings *b, const ir_node *n);

/* CPU: resolves every instruction's pointers under b->base and b->pin
 * (which the caller set); rt_exec_bindings_free releases the tables. */
void rt_exec_bind(rt_exec *e, rt_bindings *b);
void rt_exec_bindings_free(rt_bindings *b);
/* Makes the next rt_exec_run use b (NULL: the executor's own buffers). */
void rt_exec_use(rt_exec *e, const rt_bindings *b);
/* CPU: runs instructions idx[0 .. n-1] of the program (the run-time
 * scalars as set in e->rt) with the current bindings; the return values
 * are rt_exec_step's. */
int rt_exec_run(rt_exec *e, const int *idx, int n);

/* Runs the whole program once: forward, backward and the update, with the
 * learning rate and weight decay of this step (runtime/schedule.h). */
/* Returns 0, or a communicator status when a collective failed (another
 * rank failed or timed out; tgc_comm_error says which), or RT_EXEC_ERR_DEVICE
 * when the GPU failed (rt_exec_error says which call, kernel and node). */
#define RT_EXEC_ERR_DEVICE (-2)
int rt_exec_step(rt_exec *e, int64_t step, double lr, double wd);
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

/* One program GEMM on the CPU (CBLAS, row-major, batched by a loop). */
void rt_cpu_gemm(const cg_gemm *g, void *a, void *b, void *c);

/* Bytes of all buffers as the memory plan lays them out (what `tgc plan`
 * predicts per rank). */
int64_t rt_exec_bytes(const rt_exec *e);
/* Bytes the executor really allocated for them: the host buffers rounded
 * to their 64-byte alignment on the CPU; the device arena on the GPU
 * (which adds the region alignment and cuBLASLt's workspace). */
int64_t rt_exec_allocated(const rt_exec *e);

/* --check-numerics: after every instruction of a step the values it wrote
 * (a kernel's output arguments, a GEMM's C and epilogue outputs, a
 * collective's destination) are scanned for NaN and infinities, and the
 * step stops at the first one: rt_exec_step returns RT_EXEC_ERR_NUMERICS
 * and rt_exec_nonfinite says where. forward_only checks the instructions
 * up to the loss only (fp16: the loss scaler owns overflows of the
 * backward). The scan is a tight loop per buffer, off unless enabled; on
 * the GPU each instruction is followed by a synchronisation and a copy of
 * its outputs to the host. */
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
