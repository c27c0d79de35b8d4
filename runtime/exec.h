/* The executor: runs a compiled program on one rank. All memory (the flat
 * parameter, gradient, optimizer-state and input buffers, the activation
 * arena and the workspace) is allocated once when the executor is built;
 * a training step allocates nothing and calls no per-element function. */
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
} rt_scalars;

typedef void (*rt_kernel_fn)(void *const *io, const rt_scalars *rt);

typedef struct rt_exec {
    const ir_graph *g;
    cg_program *prog;
    char *source;         /* the generated C */
    rt_so *so;
    rt_kernel_fn *fn;     /* per kernel */
    void **io;            /* per kernel, KMAX_ARGS resolved pointers */
    void **gemm_ptr;      /* per instruction: a, b, c */
    void **comm_ptr;      /* per instruction: src, dst of a collective */
    tgc_comm *comm;       /* NULL on a single rank */
    unsigned char *buf[IR_MEM_COUNT];
    unsigned char *ws, *state;
    int64_t state_bytes;
    rt_scalars rt;
    double *instr_ns;     /* per instruction time of the last step (TGC_DEBUG >= 2), or NULL */
} rt_exec;

/* Builds the program of a memory-planned graph, compiles its kernels and
 * allocates every buffer. NULL after reporting an error. */
rt_exec *rt_exec_new(const ir_graph *g, const rt_cc_options *cc, diag *d);
void rt_exec_free(rt_exec *e);

/* Deterministic initialisation: each parameter element is a function of
 * (seed, parameter name, element index) (runtime/philox.h); optimizer
 * state is zeroed. */
void rt_exec_init_params(rt_exec *e, uint64_t seed);

/* Mixed precision: sets the fp32 master weights from the parameters (after
 * they were initialised or loaded). */
void rt_exec_sync_master(rt_exec *e);

/* The buffer of a node (a parameter, input, gradient or activation). */
void *rt_exec_ptr(const rt_exec *e, const ir_node *n);

/* Runs the whole program once: forward, backward and the update, with the
 * learning rate and weight decay of this step (runtime/schedule.h). */
/* Returns 0, or a communicator status when a collective failed (another
 * rank failed or timed out; tgc_comm_error says which). */
int rt_exec_step(rt_exec *e, int64_t step, double lr, double wd);
/* Makes e one rank of a tensor-parallel group (before init). */
void rt_exec_set_rank(rt_exec *e, tgc_comm *comm, int tp_rank, int tp_size);

/* Per-op time of the steps run with profiling on (rt_exec_profile_begin),
 * printed as a table sorted by time: op, launches per step, ms per step. */
void rt_exec_profile_begin(rt_exec *e);
void rt_exec_profile_print(const rt_exec *e, int64_t steps, FILE *out);

/* Bytes of all buffers (what a run holds). */
int64_t rt_exec_bytes(const rt_exec *e);

#endif
