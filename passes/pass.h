/* The pass manager: every pass is a function from IR to IR, run by name,
 * verified afterwards, and printable after it ran (`--after PASS`). */
#ifndef TGC_PASS_H
#define TGC_PASS_H
#include <stdbool.h>
#include <stddef.h>

#include "ir/ir.h"
#include "support/diag.h"

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
} pass_options;

void pass_options_defaults(pass_options *o);

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

typedef struct pass_ctx {
    diag *d;
    bool verify_each;         /* run the verifier after every pass */
    const pass_options *opts; /* NULL: the defaults */
} pass_ctx;

typedef bool (*pass_fn)(ir_graph *g, pass_ctx *ctx);

typedef struct pass_info {
    const char *name;
    pass_fn run;
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

/* Runs the passes in order. After each one the verifier runs (when
 * ctx->verify_each) and `after` is called. Returns false after the first
 * pass or verification that fails (errors are in ctx->d). */
bool pass_run_list(ir_graph *g, const pass_info *const *list, int n, pass_ctx *ctx,
                   pass_after_fn after, void *user);

/* Bytes of the forward activations of the norm/dropout/residual regions
 * (layernorm, rmsnorm, dropout, add, bias_add values not split over the
 * hidden dim): with --sequence-parallel they shrink by t. */
int64_t memplan_region_bytes(const ir_graph *g);

#define PASS(name, fn, summary) bool fn(ir_graph *g, pass_ctx *ctx);
#include "passes.def"

#endif
