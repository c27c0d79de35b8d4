/* cuDNN's fused scaled-dot-product attention for the `attention` and
 * `attention_back` ops on --backend cuda (--attention-backend cudnn|auto;
 * docs/attention.md, "cuDNN").
 *
 * libcudnn is opened with dlopen, as cuBLASLt is (never linked): tgc starts
 * without it, and --attention-backend auto then keeps tgc's kernels. The
 * graphs are cuDNN 9's backend (graph) API: the SDPA pattern of matmul,
 * scale, causal mask, softmax with its statistics (the row log-sum-exp, in
 * natural log, which is tgc's lse) and matmul, and its backward; the engine
 * comes from the heuristics (CUDNN_HEUR_MODE_A). Execution plans are built
 * once when the executor opens, one per shape (layers of one shape share
 * theirs), never during a step.
 *
 * What cuDNN is given (the static part of the choice, rt_dnn_attn_why):
 * bf16 or f16 q, k, v and output, an f32 lse, no padding mask, no dropout
 * (cuDNN's dropout draws other masks than tgc's Philox by global index),
 * no KV-cache offset, a causal mask only with s_q = s_k, head dims that are
 * multiples of 8 up to 128, grouped-query heads (g dividing n). */
#ifndef TGC_RUNTIME_BACKEND_CUDNN_H
#define TGC_RUNTIME_BACKEND_CUDNN_H

#include <stdbool.h>
#include <stddef.h>

#include "codegen/codegen.h"
#include "ir/ir.h"
#include "support/diag.h"

/* The kernel an attention or attention_back node asks for, its `backend`
 * attribute (the attention pass's choice, ir/ops.def): PASS_ATTENTION_AUTO,
 * _TGC or _CUDNN; PASS_ATTENTION_TGC for any other op. */
int rt_attention_backend(const ir_node *n);

/* Why cuDNN cannot run fused attention A whose q/k/v/output are stored as
 * io and whose lse is lse_t: false, with the reason in why ("dropout
 * p=0.1: ..."), or true. Device-independent: a shape cuDNN's engines then
 * refuse is found when the plan is built. */
bool rt_dnn_attn_supported(const kattn *A, ir_dtype io, ir_dtype lse_t, char *why, size_t n);

/* Refuses, naming the op, its location and the reason, a program whose
 * recorded attention backend is cudnn where cuDNN cannot run it: on a
 * backend other than cuda, or an attention op rt_dnn_attn_supported
 * refuses. Called for every backend before it opens. */
bool rt_dnn_plan_check(const ir_graph *g, const cg_program *p, const char *backend, bool cuda, diag *d);

/* dlopen of libcudnn and the version check (9.0 or newer); false with the
 * reason in d (repeated on every later call). No device needed. */
bool rt_dnn_load(diag *d);
/* cudnnGetVersion() of the loaded library (e.g. 91900), 0 when none. */
long rt_dnn_version(void);

/* Builds every operation descriptor of the forward (backward: false) or
 * backward graph of A: the tensors, matmuls, pointwise ops, reductions and
 * reshapes, each finalized. No handle or device needed: the test of the
 * graph's attribute names, types and shapes without a GPU. */
bool rt_dnn_attn_ops_check(const kattn *A, ir_dtype io, bool backward, diag *d);

/* The forward or backward graph of A evaluated on the host in double, op
 * by op, from the same operation list whose descriptors cuDNN is given
 * (matmul, pointwise, reduction, reshape as strided views): the test of
 * the graph's mathematics against attention written out, without a GPU.
 * in: q, k, v (backward: q, k, v, o, dy, lse); out: o, lse (backward: dq,
 * dk, dv), contiguous as tgc stores them. Needs the library (the
 * descriptors are made too). */
bool rt_dnn_attn_eval(const kattn *A, bool backward, bool dq_accum, const double *const *in, double *const *out,
                      diag *d);

/* A cuDNN handle on one stream, with its plan cache. */
typedef struct rt_dnn rt_dnn;
rt_dnn *rt_dnn_new(void *stream, int cc_major, diag *d);
void rt_dnn_free(rt_dnn *h);
const char *rt_dnn_error(const rt_dnn *h);

/* One attention instruction: a plan (shared by shape) and its variant
 * pack, rebuilt only when its pointers change. */
typedef struct rt_dnn_call rt_dnn_call;
/* NULL, with why set, where no engine takes the graph (or it needs more
 * than max_ws bytes of workspace). */
rt_dnn_call *rt_dnn_call_new(rt_dnn *h, const kattn *A, ir_dtype io, bool backward, size_t max_ws, char *why,
                             size_t n);
/* The device workspace it needs (the plan's, plus the zeroed dQ
 * accumulator where the engine takes one), and the range of it that must
 * be zero before each run (*zero_bytes 0: none). */
size_t rt_dnn_call_workspace(const rt_dnn_call *c, size_t *zero_at, size_t *zero_bytes);
/* A one-line description: "cuDNN SDPA fwd b=4 n=12 g=12 s=1024x1024 d=64 causal, bf16, engine 8, 0 B workspace". */
void rt_dnn_call_describe(const rt_dnn_call *c, char *buf, size_t n);
/* Enqueues the call on the handle's stream. Pointers, forward: q, k, v, o,
 * lse; backward: q, k, v, o, dy, lse, dq, dk, dv. 0, or -1 with
 * rt_dnn_error set. */
enum { RT_DNN_FWD_PTRS = 5, RT_DNN_BWD_PTRS = 9 };
int rt_dnn_call_run(rt_dnn *h, rt_dnn_call *c, void *const *ptrs, void *ws);
void rt_dnn_call_free(rt_dnn_call *c);

#endif
