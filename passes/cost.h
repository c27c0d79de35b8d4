/* Analytic cost models of transformer training, and the measurements of a
 * memory-planned graph they are compared with (docs/planner.md).
 *
 * The models are the Megatron-LM paper's (seeds/001, section 3 and its
 * FLOPs appendix) and, for activation memory, Korthikanti et al.
 * ("Reducing Activation Recomputation in Large Transformer Models"), whose
 * per-layer expressions the seed's sections 3.4-3.5 rest on:
 *
 *   FLOPs of an iteration   96 B s l h^2 (1 + s/6h + V/16lh)  full recomputation
 *                           72 B s l h^2 (1 + s/6h + V/12lh)  none
 *   activations of a layer  s b h (34 + 5 a s / h)             bytes, fp16 values, 1-byte dropout masks
 *                           s b h (10 + 24/t + 5 a s / (h t))  tensor parallel
 *                           s b h (34 + 5 a s / h) / t         + sequence parallel
 *                           s b h (10 + 24/t), 34 s b h / t    selective recomputation (without / with SP)
 *                           2 s b h (/ t with SP)              full recomputation: the layer's input
 *
 * With fused attention (the attention pass, docs/attention.md) nothing s x s
 * is kept: the 5 a s / h term (softmax output 2, dropout mask 1, dropout
 * output 2 bytes per score) becomes the row log-sum-exp the backward reads,
 * 4 a s b bytes (f32), 4 a / h in units of s b h. Q, K, V and the output stay
 * in the 34 (the output is the dense GEMM's input). Selective recomputation
 * leaves the fused op kept (there is no s x s term to drop); the backward's
 * recomputed scores add 2 b s^2 h FLOPs per layer.
 *
 * Notation: l layers, h hidden size, a heads, s sequence length, V
 * vocabulary, b micro-batch, B global batch, t tensor-parallel degree. */
#ifndef TGC_PASSES_COST_H
#define TGC_PASSES_COST_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

typedef enum cost_recompute {
    COST_RECOMPUTE_NONE,
    COST_RECOMPUTE_SELECTIVE, /* the attention core (QK^T, softmax, its dropout, x V) */
    COST_RECOMPUTE_FULL,      /* whole layers, from their checkpointed input */
    COST_RECOMPUTE_COUNT
} cost_recompute;

/* "none", "selective", "full" (Megatron's --recompute-granularity words). */
const char *cost_recompute_name(cost_recompute r);
bool cost_recompute_from(const char *name, cost_recompute *out);

/* A GPT-like model as the formulas see it. */
typedef struct cost_model {
    const char *name;
    int64_t l, h, a, s, V, ffn;
    int64_t g;            /* key/value heads (query groups): `kv_heads`, or a; 0 = a */
    int64_t params;       /* every parameter of the serial model (the IR's count) */
    int64_t layer_params; /* of which inside the l transformer layers */
    bool fused_attention; /* attention is one fused op (--attention-backend auto|tgc): no s x s values kept */
} cost_model;

/* Reads l, h, a, s, V from the lowered (serial) graph's hyperparameters
 * `layers` (or the layer count), `hidden`, `heads`, `seq`, `vocab` and
 * `ffn` (4h when absent), g from `kv_heads` (a when absent: multi-head
 * attention), and counts the parameters; fused_attention when the graph
 * holds attention ops (a model's attention(), or the attention pass ran).
 * False with a message naming the missing hyperparameter. */
bool cost_model_from_graph(const ir_graph *g, cost_model *m, char *err, size_t cap);

/* The seed's model FLOPs of one iteration of B sequences: 96 B s l h^2
 * (1 + s/6h + V/16lh) with full recomputation, 72 B s l h^2 (1 + s/6h +
 * V/12lh) without. What `tgc run` divides by the step time for achieved
 * FLOP/s and MFU. */
double tgc_model_flops(int64_t B, int64_t s, int64_t l, int64_t h, int64_t V, bool full_recompute);

/* FLOPs executed for b sequences (forward, backward and what the
 * recomputation repeats): 3x the forward of the layers and the LM head,
 * plus the layers' forward again (full) or the attention core's two
 * batched GEMMs again, 4 b s^2 h per layer (selective, unfused). Fused
 * attention's backward recomputes the scores: 2 b s^2 h per layer more,
 * and selective recomputes nothing. */
double cost_train_flops(const cost_model *m, int64_t b, cost_recompute r);

/* Korthikanti et al.'s activation bytes of one layer for one micro-batch
 * of b sequences (fp16 values, 1-byte dropout masks), and the part of it
 * that is dropout masks. Full recomputation keeps the layer's input only. */
double cost_act_layer(const cost_model *m, int64_t b, int64_t t, bool sp, cost_recompute r);
double cost_act_layer_masks(const cost_model *m, int64_t b, int64_t t, bool sp, cost_recompute r);

/* The number of checkpoints c minimising c A_input + (l / c) A_intermediate
 * over a stage of l layers: sqrt(l A_intermediate / A_input) (seed 3.5),
 * and that memory for a given c. */
double cost_checkpoints(double l, double a_input, double a_intermediate);
double cost_checkpoint_memory(double c, double l, double a_input, double a_intermediate);

/* ---- measurements of a memory-planned training graph -------------------- */

#define COST_MAX_OPS 12

/* Bytes of values one op produced. */
typedef struct cost_op_bytes {
    ir_op op;
    int count;
    int64_t bytes;
} cost_op_bytes;

typedef struct cost_plan_mem {
    int64_t act_live_peak;   /* the most activation bytes live at once (<= the arena) */
    const ir_node *peak_at;  /* the node after whose allocation that peak is reached */
    int64_t saved;           /* forward values kept for the backward pass, all of them */
    int64_t layer_saved;     /* ... of layer 0 ("layers.0.*"): A_intermediate */
    int64_t layer_core;      /* ... of which [.., s, s] values: the attention core */
    int64_t layer_input;     /* the activation layer 0 reads from outside: A_input */
    int elem_bytes;          /* the size of its elements (the plan's activation dtype) */
    int64_t layer_params;    /* parameter bytes inside the layers */
    int nlayers;             /* layers found by name (0: none, no per-layer figures) */
    int ncollectives;        /* communication ops of the step */
    int64_t collective_bytes; /* their outputs (planned activations) */
    /* Layer 0's kept values by the op that produced them, largest first. */
    int nops;
    cost_op_bytes by_op[COST_MAX_OPS];
} cost_plan_mem;

/* Measures g (after memplan): liveness as the memory plan computes it, the
 * forward values that live past the loss, and layer 0's share of them.
 * seq is the sequence length that tells the attention core's [.., s, s]
 * values apart (0: do not). */
void cost_plan_measure(const ir_graph *g, int64_t seq, cost_plan_mem *out);

#endif
