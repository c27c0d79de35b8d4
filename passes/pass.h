/* The pass manager: every pass is a function from IR to IR, run by name,
 * verified afterwards, and printable after it ran (`--after PASS`). */
#ifndef TGC_PASS_H
#define TGC_PASS_H
#include <stdbool.h>
#include <stddef.h>

#include "ir/ir.h"
#include "support/diag.h"

/* The fusions of the fuse pass (--fuse=LIST, docs/fusion.md). */
enum {
    PASS_FUSE_BIAS_GELU = 1u << 0,        /* linear/bias_add -> gelu: bias_gelu, bias_gelu_back */
    PASS_FUSE_BIAS_DROPOUT_ADD = 1u << 1, /* linear/bias_add -> dropout -> add: bias_dropout_add */
    PASS_FUSE_SOFTMAX = 1u << 2,          /* a scale feeding softmax folds into its scale */
    PASS_FUSE_ELEMENTWISE = 1u << 3,      /* generic: elementwise chains and reductions, one kernel each */
    PASS_FUSE_ALL = (1u << 4) - 1,
};

/* Parses --fuse's comma list (bias_gelu, bias_dropout_add, softmax,
 * elementwise, all, none) into PASS_FUSE_* bits; false with a message
 * naming the entry that is none of them. */
bool pass_fuse_parse(const char *list, unsigned *out, char *err, size_t cap);

/* --recompute-granularity: which forward values the backward recomputes
 * instead of keeping (the recompute pass, docs/recompute.md). */
enum {
    PASS_RECOMPUTE_NONE,
    PASS_RECOMPUTE_SELECTIVE, /* the attention core: QK^T, softmax, attention dropout, the product with V */
    PASS_RECOMPUTE_FULL,      /* whole layers, from the input of their group (Megatron's full) */
};

/* "none", "selective" or "full" -> PASS_RECOMPUTE_*; false for anything else. */
bool pass_recompute_parse(const char *granularity, int *out);

/* --attention-backend: what runs attention (docs/attention.md). auto, tgc
 * and cudnn make the attention pass fuse the bmm/softmax/dropout/bmm chains into
 * attention ops; unfused leaves the chains as written. */
enum {
    PASS_ATTENTION_AUTO,    /* fused; the backend's best kernel */
    PASS_ATTENTION_TGC,     /* fused; tgc's own kernels */
    PASS_ATTENTION_CUDNN,   /* fused; cuDNN's fused attention on --backend cuda (runtime/backend/cudnn.h) */
    PASS_ATTENTION_UNFUSED, /* the pass is off: bmm, softmax, dropout, bmm */
};

/* "auto", "tgc", "cudnn" or "unfused" -> PASS_ATTENTION_*; false for anything else. */
bool pass_attention_backend_parse(const char *name, int *out);

/* The lmhead pass undone for a forward program that reads the logits
 * (tgc sample): every serial lm_head_ce gets linear + cross_entropy back,
 * appended; the loss flag moves to the new cross_entropy (passes/lmhead.c). */
bool pass_lmhead_unfuse(ir_graph *g, diag *d);

/* The key of a dropout's mask, from its name (autodiff gives every dropout
 * one; the attention pass gives a fused dropout's to the attention op), so
 * any partition draws the same mask. Never 0. */
int64_t pass_dropout_key(const char *name);

/* What the training passes need to know of the run's configuration. */
typedef struct pass_options {
    const char *optimizer; /* adamw, adam or sgd */
    double beta1, beta2, eps, weight_decay, clip_grad;
    double momentum, dampening;
    bool nesterov;
    const char *param_groups; /* --param-group specs joined by ';' (docs/schedules.md), or NULL */
    int64_t tp;             /* tensor-parallel degree t (1: serial) */
    ir_dtype precision;     /* f32, or bf16/f16 mixed precision (--bf16, --fp16) */
    bool sequence_parallel; /* --sequence-parallel */
    unsigned fuse;          /* PASS_FUSE_* bits (--fuse, --no-fuse); PASS_FUSE_ALL by default */
    int attention_backend;  /* PASS_ATTENTION_* (--attention-backend); auto by default */
    bool attention_inplace; /* the attention pass reads q, k, v and writes its output in place (the default) */
    bool fused_lm_head;     /* the lmhead pass on (the default); --no-fused-lm-head: off, logits stored whole */
    int64_t lm_head_chunk;  /* --lm-head-chunk: vocabulary rows per chunk of lm_head_ce; 0 = the rule */
    /* Pipeline parallelism (docs/pipeline.md). */
    int64_t pp;                    /* pipeline ranks p (1: no pipeline) */
    int64_t vp;                    /* model chunks per pipeline rank v */
    int64_t vp_layers;             /* --num-layers-per-virtual-pipeline-stage N (0: not given): v = layers / (p N) */
    const char *pipeline_schedule; /* gpipe, 1f1b or interleaved */
    bool pp_balance_flops;         /* --pp-balance flops: chunks of equal forward FLOPs, not layer counts */
    bool no_scatter_gather;        /* --no-scatter-gather: send whole activations between stages when t > 1 */
    int64_t dp, micro_batch, global_batch; /* m = global_batch / (micro_batch dp); 0: not given */
    bool dist_opt;      /* --use-distributed-optimizer: the update sharded over the dp replicas */
    int64_t ddp_bucket_size; /* --ddp-bucket-size: gradient elements per data-parallel bucket (0: 40 MiB) */
    /* Activation recomputation (docs/recompute.md). */
    int recompute;             /* PASS_RECOMPUTE_* (--recompute-granularity) */
    bool recompute_block;      /* --recompute-method block: the first N layers of each chunk; else uniform */
    int64_t recompute_layers;  /* --recompute-num-layers N: layers per group (uniform) or recomputed (block) */
    /* KV-cached generation (the kvcache pass, docs/sampling.md). */
    int64_t kv_positions;      /* --kv-cache T: the graph runs T new positions against a KV cache (0: off) */
} pass_options;

void pass_options_defaults(pass_options *o);
/* The model chunks per pipeline rank the options mean for `layers` layers:
 * Megatron's --num-layers-per-virtual-pipeline-stage N is layers / (p N)
 * (when whole; the pp pass refuses the rest), else --vp. */
int64_t pass_pp_chunks(const pass_options *o, int64_t layers);

/* The optimizer's group of a parameter: Megatron's rule (no weight decay
 * for parameters flagged no_decay, 1-dimensional ones and biases), then the
 * last --param-group whose glob matches the name sets the multipliers of
 * the scheduled learning rate and weight decay. */
typedef struct pass_param_group {
    bool no_decay;
    double lr_mult, wd_mult;
    int rule; /* index of the matching --param-group, or -1 */
} pass_param_group;

void pass_param_group_of(const ir_node *p, const char *param_groups, pass_param_group *out);
/* Checks --param-group specs: false with a message naming the bad text. */
bool pass_param_groups_check(const char *param_groups, char *err, size_t cap);

/* An option the command gave, by the key the passes line records it under
 * (passes/pass_record.def): on a graph whose pass `pass` is recorded, the
 * value opts give `key` must be the recorded one, else pass_run_list
 * refuses the command naming `option` ("--adam-beta2 0.9"). */
typedef struct pass_given {
    const char *pass, *key, *option;
} pass_given;

typedef struct pass_ctx {
    diag *d;
    bool verify_each;         /* run the verifier after every pass */
    const pass_options *opts; /* NULL: the defaults */
    const pass_given *given;  /* the options given, checked against the record */
    int ngiven;
} pass_ctx;

/* The options pass `name` reads, as the passes line records them ("key=value
 * ...", passes/pass_record.def) under o for graph g, into out; false (out
 * untouched) for a pass that reads none. */
bool pass_record_args(const char *name, const ir_graph *g, const pass_options *o, strbuf *out);
/* Every option of ctx->given whose pass g records against its recorded
 * value under ctx->opts: false after an error for each option that differs
 * (pass_run_list does this first; for a caller that runs the passes with
 * other options than the command's). */
bool pass_given_check(const ir_graph *g, const pass_ctx *ctx);

typedef bool (*pass_fn)(ir_graph *g, pass_ctx *ctx);
/* Whether options (never NULL) make a pass do anything; false: it would be
 * the identity on every graph (tp at t = 1, fuse with --no-fuse). */
typedef bool (*pass_gate_fn)(const pass_options *o);

typedef struct pass_info {
    const char *name;
    pass_fn run;
    pass_gate_fn gate; /* NULL: always applies */
    const char *summary;
} pass_info;

/* The name the front end's lowering has in --after / --passes. */
#define PASS_LOWER "lower"

int pass_count(void);
const pass_info *pass_at(int i);
const pass_info *pass_lookup(const char *name);
/* "lower, dce" — for error messages listing what exists. */
const char *pass_names(void);

typedef void (*pass_after_fn)(const char *name, const ir_graph *g, void *user);

/* Runs the passes in order, each as the graph's record of applied passes
 * (g->passes_run) allows. First, every option of ctx->given whose pass is
 * recorded must have its recorded value under ctx->opts (an error for each
 * that does not, naming both values). Then one listed there is skipped
 * (applied already: options not given keep its recorded values);
 * one that its gate turns off under ctx->opts is skipped (the identity);
 * one that comes before the last pass listed, in passes.def order, is an
 * error naming both; any other runs and joins the record, with the
 * options it read (pass_record_args). After each
 * pass run, the verifier runs (when ctx->verify_each); after each entry of
 * the list, skipped or run, `after` is called. Returns false after the
 * first pass, order check or verification that fails (errors in ctx->d). */
bool pass_run_list(ir_graph *g, const pass_info *const *list, int n, pass_ctx *ctx,
                   pass_after_fn after, void *user);

/* Bytes of the forward activations of the norm/dropout/residual regions
 * (the values of the ops ir/ops.def flags IR_OPF_SEQ_REGION: layernorm,
 * rmsnorm, dropout, add, bias_add, bias_dropout_add; those not split over
 * the hidden dim, and not kept in a fused kernel's registers):
 * with --sequence-parallel they shrink by t. */
int64_t memplan_region_bytes(const ir_graph *g);

/* The position of a pass in passes.def, -1 for none. */
int pass_index(const char *name);
/* For a graph whose backward and update were cut off (tgc sample's forward
 * of a compiled plan): forgets autodiff and every pass after it in the
 * record, which the cut undid. */
void pass_record_cut_backward(ir_graph *g);

#define PASS(name, fn, gate, summary) bool fn(ir_graph *g, pass_ctx *ctx);
#include "passes.def"

#endif
