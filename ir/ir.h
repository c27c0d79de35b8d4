/* The tgc IR: a static graph of SSA values.
 *
 * The node is the value: one struct with op, dtype, shape, operands, typed
 * attributes, flags, a unique hierarchical name, the source location it came
 * from, and sharding / pipeline-stage annotations that the parallel passes
 * fill. Nodes live in the graph's arena and are kept in topological order by
 * construction (an operand always precedes its user). Every op is described
 * once, in ops.def; the enum, names, attribute schemas, shape rules, FLOP
 * rules and the verifier's checks all come from that table.
 */
#ifndef TGC_IR_H
#define TGC_IR_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../support/arena.h"
#include "../support/diag.h"
#include "../support/util.h"

/* ---- dtypes and shapes --------------------------------------------------- */

#define IR_DTYPES(X) \
    X(F32, "f32", 4) X(F16, "f16", 2) X(BF16, "bf16", 2) X(F64, "f64", 8) \
    X(I32, "i32", 4) X(I64, "i64", 8) X(U8, "u8", 1)

typedef enum ir_dtype {
#define X(e, s, n) IR_##e,
    IR_DTYPES(X)
#undef X
    IR_DTYPE_COUNT
} ir_dtype;

const char *ir_dtype_name(ir_dtype t);
int ir_dtype_size(ir_dtype t);
bool ir_dtype_lookup(const char *name, ir_dtype *out);
bool ir_dtype_is_float(ir_dtype t);

#define IR_MAX_RANK 8
/* The largest tensor the IR holds (2^48 elements): element counts and byte
 * sizes never overflow an int64. */
#define IR_MAX_NUMEL ((int64_t)1 << 48)

typedef struct ir_shape {
    int rank;
    int64_t dim[IR_MAX_RANK];
} ir_shape;

int64_t ir_shape_numel(const ir_shape *s);
/* False when some dim is not positive or the count exceeds IR_MAX_NUMEL. */
bool ir_shape_numel_ok(const ir_shape *s, int64_t *numel);
bool ir_shape_eq(const ir_shape *a, const ir_shape *b);
/* Appends "f32[256, 8, 768]" (or "f32[]" for a scalar) to buf. */
void ir_type_str(ir_dtype t, const ir_shape *s, char *buf, size_t n);

/* ---- the op table -------------------------------------------------------- */

typedef enum ir_op {
#define OP(e, ...) IR_OP_##e,
#include "ops.def"
    IR_OP_COUNT
} ir_op;

enum {
    IR_OPF_LEAF = 1u << 0,        /* input, parameter or constant: no operands */
    IR_OPF_ELEMENTWISE = 1u << 1, /* out[i] depends on in[i] only */
    IR_OPF_FUSIBLE = 1u << 2,     /* may join a fused kernel */
    IR_OPF_SIDE_EFFECT = 1u << 3, /* never merged or removed (dropout, send) */
    IR_OPF_COLLECTIVE = 1u << 4,  /* communicates between ranks */
    IR_OPF_INPLACE_OK = 1u << 5,  /* output may reuse operand 0's buffer */
    IR_OPF_REDUCE = 1u << 6,      /* one row or column reduction kernel: with FUSIBLE, the anchor of a fused kernel */
    IR_OPF_UPDATE = 1u << 7,      /* an optimizer update: operands p_0..p_{k-1}, g_0..g_{k-1}, the gradient norm;
                                     updates the parameters in place (ir_node_is_update) */
    IR_OPF_OPTIMIZER = 1u << 8,   /* the optimizer step (the gradient norm and the updates): the opt phase,
                                     and no part of the model's FLOPs */
    IR_OPF_DSL = 1u << 9,         /* a model calls it by its mnemonic (frontend/lower_ops.c) */
    IR_OPF_SEQ_REGION = 1u << 10, /* an op of the norm/dropout/residual regions that sequence parallelism
                                     splits along the sequence (memplan_region_bytes counts its values) */
};

typedef enum ir_attr_kind {
    IR_ATTR_INT,
    IR_ATTR_FLOAT,
    IR_ATTR_BOOL,
    IR_ATTR_INTS,
    IR_ATTR_SYM, /* one of a fixed set of symbols */
} ir_attr_kind;

#define IR_MAX_SYMS 8
#define IR_MAX_INTS IR_MAX_RANK

/* One attribute value. Which member is meaningful follows the kind. */
typedef struct ir_attr_val {
    int64_t i;   /* INT, BOOL (0/1), SYM (index into syms) */
    double f;    /* FLOAT */
    int n;       /* INTS: count */
    int64_t ints[IR_MAX_INTS];
    bool set;    /* given explicitly or defaulted; false = required & missing */
} ir_attr_val;

typedef struct ir_attr_def {
    const char *name;
    ir_attr_kind kind;
    bool has_default;
    ir_attr_val def;
    int nsyms;
    const char *syms[IR_MAX_SYMS];
} ir_attr_def;

struct ir_node;
/* Sets n->dtype and n->shape from operands and attributes; on a mismatch
 * writes a message naming both shapes into err and returns false. */
typedef bool (*ir_shape_fn)(struct ir_node *n, char *err, size_t errlen);
typedef int64_t (*ir_flops_fn)(const struct ir_node *n);
/* An axis rule (ops.def's axis column, ir/axis.c): where dim `dim` of
 * operand `operand` of n lands in n's result — a dim >= 0 of the result,
 * or one of IR_AXIS_*. */
typedef int (*ir_axis_fn)(const struct ir_node *n, int operand, int dim);
enum {
    IR_AXIS_UNUSED = -1, /* the operand's value does not reach the result (a reference) */
    IR_AXIS_SUMMED = -2, /* the result sums over it: a split gives partial sums */
    IR_AXIS_MIXED = -3,  /* the op mixes, cuts or numbers the elements along it */
    IR_AXIS_NORULE = -4, /* the op has no rule (NOAXIS, the table's default) */
};
/* A rule's outcome for a dim whose positions stay on dim d of the result
 * while the op mixes, cuts or numbers the elements along it (a softmax's
 * last dim, a causal softmax's queries, a norm's features, rope's
 * positions): a split of it does not survive (ir_axis_map reads it as
 * IR_AXIS_MIXED), but the sequence axis follows it (ir_axis_index). */
#define IR_AXIS_ALONG(d) (-16 - (d))

typedef struct ir_op_info {
    const char *name;
    int min_src, max_src;
    const char *attr_spec;
    ir_shape_fn shape;
    ir_flops_fn flops;
    ir_axis_fn axis;
    unsigned flags;
    const char *grad_rule; /* name of the autodiff rule, "" if none */
    const char *axis_rule; /* name of the axis rule, "NOAXIS" if none */
    /* Parsed from attr_spec on first use. */
    int nattrs;
    const ir_attr_def *attrs;
} ir_op_info;

const ir_op_info *ir_op_get(ir_op op);
/* Whether op's row of the op table has any of the IR_OPF_* flags in `flags`. */
bool ir_op_has(ir_op op, unsigned flags);
const char *ir_op_name(ir_op op);
bool ir_op_lookup(const char *name, ir_op *out);
/* Index of attribute `name` of op, or -1. */
int ir_op_attr_index(ir_op op, const char *name);
/* Where dim `dim` of operand `operand` of n lands in n's result, by n's
 * axis rule: a dim of the result or an IR_AXIS_* outcome. */
int ir_axis_map(const struct ir_node *n, int operand, int dim);
/* Where the positions along dim `dim` of operand `operand` run in n's
 * result: as ir_axis_map, but a dim the op mixes while keeping it
 * (IR_AXIS_ALONG) gives the dim it stays on. The sequence tracking of the
 * sp and kvcache passes (passes/rebuild.h) reads this. */
int ir_axis_index(const struct ir_node *n, int operand, int dim);
/* The dim of `out` that dim k of `in` becomes under a reshape, following
 * how the dims factor (ir/axis.c); IR_AXIS_MIXED when dim k is merged with
 * dims outside it or split into factors not led by one dim. */
int ir_reshape_dim(const ir_shape *in, int k, const ir_shape *out);

/* ---- nodes ---------------------------------------------------------------- */

enum {
    IR_NF_INPUT = 1u << 0,    /* fed from data each step */
    IR_NF_PARAM = 1u << 1,    /* trainable parameter */
    IR_NF_OUTPUT = 1u << 2,   /* kept live and returned */
    IR_NF_LOSS = 1u << 3,     /* the scalar being minimised */
    IR_NF_NO_DECAY = 1u << 4, /* parameter excluded from weight decay */
    IR_NF_SEED = 1u << 5,     /* the backward's seed, d loss / d loss = 1 (the loss scale at run time): set by
                                 autodiff on the `full` it starts from (ir_graph_seed) */
};

/* Which rank group a dimension is split over. */
typedef enum ir_group { IR_GROUP_NONE, IR_GROUP_TP, IR_GROUP_DP, IR_GROUP_PP } ir_group;

typedef struct ir_shard {
    int8_t dim;   /* -1: replicated */
    int8_t group; /* ir_group */
} ir_shard;

/* Where a value lives, set by the memplan pass: a flat buffer per kind, at
 * a byte offset. A reshape shares its operand's place (a view). */
typedef enum ir_mem {
    IR_MEM_NONE,  /* not planned yet */
    IR_MEM_INPUT, /* fed from data each step */
    IR_MEM_PARAM, /* the flat parameter buffer */
    IR_MEM_GRAD,  /* the flat gradient buffer (same layout as params) */
    IR_MEM_ACT,   /* the activation arena, reused by liveness */
    IR_MEM_STASH, /* pipeline stages: the forward values the backward reads (and the values sent and
                     received), kept once per micro-batch in flight; reused by liveness */
    IR_MEM_CACHE, /* KV caches (kv_cache): persistent across the program's runs, never reused */
    IR_MEM_COUNT
} ir_mem;

const char *ir_mem_name(ir_mem m);
bool ir_mem_lookup(const char *name, ir_mem *out);

/* When a value is computed in a training step (docs/pipeline.md,
 * "Phases"), set once by the schedule pass for every node but parameters
 * and inputs, and read by the pipeline runtime and the schedule builder:
 *   begin  the same for every micro-batch (constants, a tied weight sent to
 *          the last stage): once per step, before the micro-batches;
 *   fwd    a micro-batch's forward; bwd its backward (recomputation too);
 *   end    once per step after the micro-batches, on their summed values
 *          (a tied weight's gradient sent back and added);
 *   opt    the gradient norm and the update. */
typedef enum ir_phase {
    IR_PHASE_NONE, IR_PHASE_BEGIN, IR_PHASE_FWD, IR_PHASE_BWD, IR_PHASE_END, IR_PHASE_OPT, IR_PHASE_COUNT
} ir_phase;

const char *ir_phase_name(ir_phase p); /* "none", "begin", "fwd", "bwd", "end", "opt" */
bool ir_phase_lookup(const char *name, ir_phase *out);

typedef struct ir_node {
    int id;         /* position in graph->nodes (topological) */
    ir_op op;
    ir_dtype dtype;
    ir_shape shape;
    int nsrc;
    struct ir_node **src;
    ir_attr_val *attrs; /* ir_op_get(op)->nattrs entries */
    const char *name;   /* unique in the graph, hierarchical: layers.3.attention.qkv */
    unsigned flags;     /* IR_NF_* */
    src_loc loc;
    ir_shard shard;     /* set by the tp/sp passes */
    int stage;          /* pipeline stage, -1 until the pp pass */
    int chunk;          /* virtual-pipeline model chunk, -1 until the pp pass */
    int fuse;           /* fusion group (one generated kernel), -1 for none; set by the fuse pass */
    ir_phase phase;     /* set by the schedule pass (IR_PHASE_NONE before, and on parameters and inputs) */
    int bucket;         /* a parameter gradient's data-parallel reduction bucket on its stage, -1 for none;
                           set by the schedule pass */
    ir_mem mem;         /* set by memplan */
    int64_t mem_offset; /* bytes into the buffer of kind `mem` */
} ir_node;

/* An optimizer update (an op flagged IR_OPF_UPDATE: adamw, sgd). */
bool ir_node_is_update(const ir_node *n);

/* Typed attribute access; asking for an attribute the op lacks is a
 * programmer error (asserts). */
int64_t ir_attr_int(const ir_node *n, const char *name);
double ir_attr_float(const ir_node *n, const char *name);
bool ir_attr_bool(const ir_node *n, const char *name);
const char *ir_attr_sym(const ir_node *n, const char *name);
const int64_t *ir_attr_ints(const ir_node *n, const char *name, int *count);
void ir_attr_set_int(ir_node *n, const char *name, int64_t v);
void ir_attr_set_float(ir_node *n, const char *name, double v);
void ir_attr_set_bool(ir_node *n, const char *name, bool v);
/* Returns false when sym is not one of the attribute's symbols. */
bool ir_attr_set_sym(ir_node *n, const char *name, const char *sym);
void ir_attr_set_ints(ir_node *n, const char *name, const int64_t *v, int count);

/* ---- graphs --------------------------------------------------------------- */

/* At most this many entries in a graph's record of applied passes. */
#define IR_MAX_PASSES 32

typedef struct ir_hparam {
    const char *name;
    bool is_float;
    int64_t i;
    double f;
} ir_hparam;

typedef struct ir_name_map ir_name_map;
typedef struct ir_cse_map ir_cse_map;

typedef struct ir_graph {
    arena mem;
    const char *model;     /* model name (the .tg file's stem) */
    ir_node **nodes;
    int nnodes, cap;
    ir_hparam *hparams;    /* the hyperparameters the graph was built with */
    int nhparams, hcap;
    int num_layers;        /* transformer layers (block instances in a loop) */
    bool cse;              /* merge equal pure nodes (on for the frontend) */
    int64_t mem_size[IR_MEM_COUNT]; /* bytes per buffer kind, set by memplan */
    ir_dtype precision;    /* storage of params, activations, grads: f32, or bf16/f16
                              (mixed precision: fp32 master weights in the optimizer) */
    /* The passes applied to the graph, in the order they ran (which is
     * passes/passes.def order): names of that table, static strings. The
     * text form's `passes` line; the pass manager skips a pass listed here
     * and refuses one that comes before the last (docs/ir.md). */
    const char *passes_run[IR_MAX_PASSES];
    /* The options each ran with, as the passes line records them:
     * "key=value ..." in passes/pass_record.def's order and forms, in mem;
     * NULL for a pass that reads none. */
    const char *passes_args[IR_MAX_PASSES];
    int npasses_run;
    /* The last loc file name a node was built with, copied into mem:
     * every node's loc.file lives in its own graph's arena, so a pass that
     * rebuilds a graph and frees the old one leaves no name dangling. */
    const char *loc_file;
    ir_name_map *names;
    ir_cse_map *cse_map;
} ir_graph;

ir_graph *ir_graph_new(const char *model);
void ir_graph_free(ir_graph *g);

/* The record of the passes applied (g->passes_run). `name` must outlive the
 * graph (a pass table's name); `args` (the recorded options, canonical as
 * the printer writes them, or NULL) is copied into the graph.
 * ir_graph_pass_ran: whether it is listed. ir_graph_pass_args: the
 * options it recorded, NULL when it did not run or reads none. */
bool ir_graph_pass_ran(const ir_graph *g, const char *name);
void ir_graph_pass_record(ir_graph *g, const char *name, const char *args);
const char *ir_graph_pass_args(const ir_graph *g, const char *name);

/* The vocabulary of the recorded options: one row per key of
 * passes/pass_record.def, in its order. */
typedef enum {
    IR_PKEY_I64, IR_PKEY_F64, IR_PKEY_BOOL, IR_PKEY_WORD, IR_PKEY_ENUM, IR_PKEY_DTYPE, IR_PKEY_SET, IR_PKEY_TEXT
} ir_pass_key_kind;
typedef struct ir_pass_key {
    const char *pass, *key;
    ir_pass_key_kind kind;
    const char *choices; /* "a|b|c" for WORD, ENUM, DTYPE and SET; else NULL */
} ir_pass_key;
extern const ir_pass_key ir_pass_keys[];
extern const int ir_pass_nkeys;
/* The i-th word of choices "a|b|c" (i from 0) into out; false past the last. */
bool ir_pass_choice(const char *choices, int i, strbuf *out);
/* A SET key's bits as recorded: none, all, or the words of the bits set
 * joined by '+' in choices order. */
void ir_pass_set_write(const char *choices, unsigned bits, strbuf *out);
/* The value text of `key` in recorded options (as printed: a quoted TEXT
 * keeps its quotes) into out; false when args has no such key. */
bool ir_pass_args_value(const char *args, const char *key, strbuf *out);
void ir_graph_add_hparam(ir_graph *g, const char *name, bool is_float, int64_t i, double f);

/* Building a node: begin, set attributes, end. The node's loc.file is
 * copied into g's arena (once per file name in a row).
 *
 * ir_node_begin allocates a node with every attribute at its default.
 * ir_node_end runs the op's shape rule, merges it with an equal earlier node
 * when g->cse is on and the op is pure, gives it a unique name derived from
 * `name` (name, name.1, name.2, ...) and appends it to the graph. On a shape
 * error it writes the message to err and returns NULL (the node is dropped).
 * A required attribute left unset is a programmer error. */
ir_node *ir_node_begin(ir_graph *g, ir_op op, int nsrc, ir_node *const *src, src_loc loc);
ir_node *ir_node_end(ir_graph *g, ir_node *n, const char *name, char *err, size_t errlen);

/* A leaf (input, param, full) with a declared type; NULL if the name is taken. */
ir_node *ir_leaf_new(ir_graph *g, ir_op op, const char *name, ir_dtype t,
                     const ir_shape *shape, src_loc loc);

/* Appends n as is: the reader uses this to rebuild a graph exactly (no CSE,
 * no renaming, no shape inference). Returns false if the name is taken. */
bool ir_graph_append_raw(ir_graph *g, ir_node *n);
ir_node *ir_node_alloc(ir_graph *g, ir_op op, int nsrc);

ir_node *ir_graph_find(const ir_graph *g, const char *name);
/* A new empty graph with g's model name, hyperparameters and layer count:
 * the start of a pass that rebuilds the graph. */
ir_graph *ir_graph_new_like(const ir_graph *g);
/* Exchanges the contents of two graphs (a rebuilt graph takes the place of
 * the original, which the caller then frees). */
void ir_graph_swap(ir_graph *a, ir_graph *b);
/* Renumbers ids after nodes were removed or reordered. */
void ir_graph_renumber(ir_graph *g);
/* Keeps the nodes with keep[id] set, in order; no kept node may use a
 * dropped one. Ids, the name map and the CSE map are rebuilt. */
void ir_graph_compact(ir_graph *g, const bool *keep);

/* Model facts for `tgc check` (ir/flops.c), the same for the graph at any
 * stage of the pipeline: of one TP rank's graph, the whole model's. */
/* t of a graph the tp pass split, as its record says (tp(t=N) on the
 * `passes` line, which a plan carries); 1 where the tp pass did not run. */
int64_t ir_graph_tp_size(const ir_graph *g);
/* p and v of a graph the pp pass partitioned, as its record says (pp(p=P
 * v=V)); 1 and 1 where it did not run. The verifier holds every node's
 * stage and chunk below them. */
void ir_graph_pp_dims(const ir_graph *g, int *p, int *v);
/* The model's parameters: a TP-sharded one counts t times. */
int64_t ir_graph_param_count(const ir_graph *g);
/* FLOPs of the model's forward (docs/ir.md, "Model facts"). */
int64_t ir_graph_forward_flops(const ir_graph *g);
int64_t ir_node_flops(const ir_node *n);
/* Tokens per forward pass: the numel of the first integer input. */
int64_t ir_graph_tokens(const ir_graph *g);
const ir_node *ir_graph_loss(const ir_graph *g);
/* The node flagged IR_NF_SEED, where the backward starts (NULL before autodiff). */
const ir_node *ir_graph_seed(const ir_graph *g);
/* What every command after check needs of a model, a loss to minimise and
 * parameters to train: NULL when g has both, else why not, to follow
 * "model 'NAME' " (the front end and tgc check of text IR say the same). */
const char *ir_graph_untrainable(const ir_graph *g);

/* ---- multi-result ops (ir/results.def) ------------------------------------ */

#define IR_MAX_RESULTS 4
/* n's results: t[0], s[0] are n's own dtype and shape, then the extra ones
 * of a multi-result op; returns how many (1 for most ops). */
int ir_results(const ir_node *n, ir_dtype *t, ir_shape *s);

/* attention's and attention_back's layouts (ops.def: layout, out). */
typedef enum ir_attn_layout { IR_ATTN_BNSD, IR_ATTN_SBND, IR_ATTN_PACKED } ir_attn_layout;
ir_attn_layout ir_attn_in_layout(const ir_node *n);
bool ir_attn_out_sbnd(const ir_node *n);
/* The [b, heads, s, d] operand that attention (or attention_back) n reads
 * as q (which 0), k (1) or v (2) from x, its operand, after its layout; false
 * where x does not fit it (err says why). */
bool ir_attn_view(const ir_node *n, const ir_node *x, int which, ir_shape *out, char *err, size_t errlen);
/* attention a's output as [b, n, s_q, d], whatever its out layout. */
ir_shape ir_attn_out_logical(const ir_node *a);
/* ---- storage: the one place that decides a value's dtype in memory ------ */

/* The dtype result `index` of n (0: n's own value) has in memory. Under
 * mixed precision (g->precision bf16 or f16) the model's float values --
 * parameters, gradients, activations and stashed values, anything of
 * dtype f32 with a rank but the data inputs and the KV caches -- are
 * stored in g->precision: kernels load them into their fp32 compute type
 * and store them rounded to nearest even. Scalars (the loss, the gradient
 * norm), integer values, the inputs, the caches and attention's row
 * log-sum-exp (result 1) keep their dtype; the optimizer's master weights
 * and state (not graph values) are fp32. Otherwise the dtype itself. */
ir_dtype ir_result_storage(const ir_graph *g, const ir_node *n, int index);
/* n's own value (a result view: the result it views). */
ir_dtype ir_storage_dtype(const ir_graph *g, const ir_node *n);
/* Bytes per element of n's value in memory. */
int ir_storage_size(const ir_graph *g, const ir_node *n);
/* The parameter buffer in elements (memplan's mem_size[param] over the
 * parameters' storage size), and the bytes of one of those elements in an
 * optimizer-state slot: fp32 (the master weights and the moments of mixed
 * precision too; 8 in an f64 graph). */
int64_t ir_param_elems(const ir_graph *g);
int ir_state_elem_size(const ir_graph *g);
/* Byte offset of result `index` in n's storage (each result 64-byte aligned). */
int64_t ir_result_offset(const ir_graph *g, const ir_node *n, int index);
/* The bytes n's storage takes: every result in its storage dtype, each
 * rounded up to 64 bytes. */
int64_t ir_node_storage_bytes(const ir_graph *g, const ir_node *n);

/* ---- fusion groups --------------------------------------------------------- */

/* A fused kernel is a maximal run of consecutive nodes with the same
 * fuse(N) (the fuse pass makes them; docs/fusion.md). end[i] is the position
 * of the last node of node i's run, i itself for a node in no group: the
 * kernel runs there. written[i] (may be NULL) tells whether node i's value
 * leaves its run: it is not in one, is an output or the loss, or a node
 * after the run reads it. The others stay in registers and get no buffer. */
void ir_graph_fuse_runs(const ir_graph *g, int *end, bool *written);

/* ---- text, DOT and JSON --------------------------------------------------- */

/* The text format (docs/ir.md) round-trips exactly: print(read(print(g)))
 * is byte-identical to print(g). */
char *ir_graph_print(const ir_graph *g);                 /* malloc'd */
/* Reads text IR; errors go to d with file:line:col. NULL on error. */
ir_graph *ir_graph_read(const char *text, size_t len, const char *file, diag *d);
char *ir_graph_dot(const ir_graph *g);                   /* malloc'd */
char *ir_graph_json(const ir_graph *g);                  /* malloc'd */

/* Checks every invariant (operand order, arity, attributes, shape rules,
 * unique names, one scalar loss, flags). Errors go to d at the node's
 * location. Returns true when the graph is well-formed. */
bool ir_graph_verify(const ir_graph *g, diag *d);

/* The model's transformer layers, by name: the prefixes NAME whose nodes
 * NAME.<i>.<rest> cover i = 0 .. n-1 exactly (no leading zeros; uniquified
 * names such as h.1 do not qualify), in order of first appearance, adding
 * up to g->num_layers (several top-level loops count one after the other).
 * Sets layer[i] for nodes 0 .. nnodes-1 to the global layer index or -1;
 * false when the layers are not found. */
bool ir_graph_find_layers(const ir_graph *g, int nnodes, int *layer);

#endif
