/* Gradient check of every differentiable op: the analytic gradients that
 * autodiff + the generated C kernels compute, against central finite
 * differences, in float64, on small odd shapes.
 *
 * Each case is a few lines of text IR defining %y from parameters (and
 * integer inputs, filled deterministically); the harness adds a fixed
 * random weight %w_out and the loss sum(y * w_out), runs autodiff and
 * memplan, compiles the kernels, and compares d loss / d p for every
 * parameter element with (L(p + h) - L(p - h)) / 2h.
 *
 * The fused cases (docs/fusion.md) run the fuse pass between autodiff and
 * memplan: the forward is then the fused op or kernel, and the gradient its
 * fused backward, both checked against the differences. Each names a text
 * that the fused IR must hold, so a fusion that stops firing fails here. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codegen/codegen.h"
#include "passes/pass.h"
#include "runtime/exec.h"

typedef struct gc_case {
    const char *name;
    const char *ir;  /* defines %y : f64[...] */
    const char *out; /* the type of %y */
} gc_case;

#define P(name, shape) "%" name " = param init=normal std=1.0 : f64[" shape "]\n"

static const gc_case cases[] = {
    {"add", P("a", "3, 5") P("b", "3, 5") "%y = add(%a, %b) : f64[3, 5]\n", "f64[3, 5]"},
    {"sub", P("a", "3, 5") P("b", "3, 5") "%y = sub(%a, %b) : f64[3, 5]\n", "f64[3, 5]"},
    {"mul", P("a", "3, 5") P("b", "3, 5") "%y = mul(%a, %b) : f64[3, 5]\n", "f64[3, 5]"},
    {"fanout", P("a", "3, 5") "%y = mul(%a, %a) : f64[3, 5]\n", "f64[3, 5]"},
    {"bias_add", P("a", "3, 5") P("b", "5") "%y = bias_add(%a, %b) : f64[3, 5]\n", "f64[3, 5]"},
    {"scale", P("a", "3, 5") "%y = scale(%a) alpha=-0.7 : f64[3, 5]\n", "f64[3, 5]"},
    {"gelu_tanh", P("a", "3, 7") "%y = gelu(%a) : f64[3, 7]\n", "f64[3, 7]"},
    {"gelu_erf", P("a", "3, 7") "%y = gelu(%a) approx=erf : f64[3, 7]\n", "f64[3, 7]"},
    {"silu", P("a", "3, 7") "%y = silu(%a) : f64[3, 7]\n", "f64[3, 7]"},
    {"swiglu", P("a", "3, 7") P("b", "3, 7") "%y = swiglu(%a, %b) : f64[3, 7]\n", "f64[3, 7]"},
    {"dropout", P("a", "5, 9") "%y = dropout(%a) p=0.3 : f64[5, 9]\n", "f64[5, 9]"},
    {"linear", P("x", "2, 3, 5") P("w", "7, 5") P("b", "7") "%y = linear(%x, %w, %b) : f64[2, 3, 7]\n",
     "f64[2, 3, 7]"},
    {"linear_nobias", P("x", "4, 5") P("w", "3, 5") "%y = linear(%x, %w) : f64[4, 3]\n", "f64[4, 3]"},
    {"bmm", P("a", "2, 3, 4") P("b", "2, 4, 5") "%y = bmm(%a, %b) alpha=0.5 : f64[2, 3, 5]\n", "f64[2, 3, 5]"},
    {"bmm_tb", P("a", "2, 3, 4") P("b", "2, 5, 4") "%y = bmm(%a, %b) transpose_b=true : f64[2, 3, 5]\n",
     "f64[2, 3, 5]"},
    {"bmm_ta", P("a", "2, 4, 3") P("b", "2, 4, 5") "%y = bmm(%a, %b) transpose_a=true : f64[2, 3, 5]\n",
     "f64[2, 3, 5]"},
    {"bmm_tab", P("a", "2, 4, 3") P("b", "2, 5, 4")
     "%y = bmm(%a, %b) transpose_a=true transpose_b=true : f64[2, 3, 5]\n", "f64[2, 3, 5]"},
    {"embedding", "%tok = input : i32[3, 2]\n" P("w", "11, 5") "%y = embedding(%tok, %w) : f64[3, 2, 5]\n",
     "f64[3, 2, 5]"},
    {"layernorm", P("x", "3, 2, 7") P("g", "7") P("b", "7") "%y = layernorm(%x, %g, %b) : f64[3, 2, 7]\n",
     "f64[3, 2, 7]"},
    {"rmsnorm", P("x", "3, 2, 7") P("g", "7") "%y = rmsnorm(%x, %g) : f64[3, 2, 7]\n", "f64[3, 2, 7]"},
    {"softmax", P("x", "2, 3, 5") "%y = softmax(%x) scale=0.8 : f64[2, 3, 5]\n", "f64[2, 3, 5]"},
    {"softmax_causal", P("x", "2, 3, 4, 4") "%y = softmax(%x) scale=0.5 causal=true : f64[2, 3, 4, 4]\n",
     "f64[2, 3, 4, 4]"},
    {"softmax_mask", "%m = input : u8[2, 5]\n" P("x", "2, 3, 4, 5") "%y = softmax(%x, %m) : f64[2, 3, 4, 5]\n",
     "f64[2, 3, 4, 5]"},
    {"rope", P("x", "5, 2, 3, 6") "%y = rope(%x) base=100.0 : f64[5, 2, 3, 6]\n", "f64[5, 2, 3, 6]"},
    {"reshape", P("x", "3, 4") "%y = reshape(%x) shape=[2, 6] : f64[2, 6]\n", "f64[2, 6]"},
    {"permute", P("x", "2, 3, 4") "%y = permute(%x) perm=[2, 0, 1] : f64[4, 2, 3]\n", "f64[4, 2, 3]"},
    {"split", P("x", "2, 9")
     "%a = slice(%x) axis=1 start=0 len=3 : f64[2, 3]\n%b = slice(%x) axis=1 start=3 len=3 : f64[2, 3]\n"
     "%c = slice(%x) axis=1 start=6 len=3 : f64[2, 3]\n%d = mul(%a, %b) : f64[2, 3]\n"
     "%y = add(%d, %c) : f64[2, 3]\n", "f64[2, 3]"},
    {"slice_partial", P("x", "4, 3") "%y = slice(%x) axis=0 start=1 len=2 : f64[2, 3]\n", "f64[2, 3]"},
    {"concat", P("a", "2, 3") P("b", "2, 2") "%y = concat(%a, %b) axis=1 : f64[2, 5]\n", "f64[2, 5]"},
    {"repeat_interleave", P("x", "2, 3, 4") "%y = repeat_interleave(%x) axis=1 repeats=2 : f64[2, 6, 4]\n",
     "f64[2, 6, 4]"},
    {"repeat_interleave_last", P("x", "3, 2") "%y = repeat_interleave(%x) axis=1 repeats=3 : f64[3, 6]\n", "f64[3, 6]"},
    /* Grouped-query attention, unfused: 4 query heads over 2 key/value
     * heads, k and v repeated for the bmm chain (samples/llama.tg). */
    {"gqa_unfused", P("q", "2, 4, 3, 5") P("k", "2, 2, 3, 5") P("v", "2, 2, 3, 5")
     "%kr = repeat_interleave(%k) axis=1 repeats=2 : f64[2, 4, 3, 5]\n"
     "%vr = repeat_interleave(%v) axis=1 repeats=2 : f64[2, 4, 3, 5]\n"
     "%s = bmm(%q, %kr) transpose_b=true : f64[2, 4, 3, 3]\n"
     "%p = softmax(%s) scale=0.5 causal=true : f64[2, 4, 3, 3]\n"
     "%y = bmm(%p, %vr) : f64[2, 4, 3, 5]\n", "f64[2, 4, 3, 5]"},
    {"cross_entropy", "%lab = input : i32[3, 2]\n" P("x", "3, 2, 7")
     "%y = cross_entropy(%x, %lab) ignore_index=1 : f64[]\n", "f64[]"},
    /* Single rank: the vocab-parallel pieces compose to the plain loss. */
    {"vocab_parallel_ce", "%lab = input : i32[3, 2]\n" P("x", "3, 2, 7")
     "%m = vocab_parallel_max(%x) : f64[3, 2]\n%s = vocab_parallel_sumexp(%x, %m) : f64[3, 2]\n"
     "%t = vocab_parallel_target(%x, %lab) : f64[3, 2]\n"
     "%y = vocab_parallel_cross_entropy(%x, %lab, %m, %s, %t) ignore_index=1 vocab=7 : f64[]\n", "f64[]"},
    /* The fused LM head and loss (codegen/emit_lmhead.c): labels cycle
     * through 3 5 0 2 4 6 (ignore_index=4 drops one); a vocabulary of 7 in
     * chunks of 3 (the last of 1), tied with the head's input through x,
     * and with a bias. */
    {"lm_head_ce", "%lab = input : i32[3, 2]\n" P("x", "3, 2, 5") P("w", "7, 5")
     "%y = lm_head_ce(%x, %w, %lab) ignore_index=4 chunk=3 : f64[]\n", "f64[]"},
    {"lm_head_ce_bias", "%lab = input : i32[3, 2]\n" P("x", "3, 2, 5") P("w", "7, 5") P("b", "7")
     "%y = lm_head_ce(%x, %w, %lab, %b) chunk=2 : f64[]\n", "f64[]"},
    {"lm_head_ce_one_chunk", "%lab = input : i32[6]\n" P("x", "6, 4") P("w", "7, 4")
     "%y = lm_head_ce(%x, %w, %lab) : f64[]\n", "f64[]"},
    {"sum", P("x", "3, 4") "%y = sum(%x) : f64[]\n", "f64[]"},
    {"mean", P("x", "3, 4") "%y = mean(%x) : f64[]\n", "f64[]"},
    /* Backward ops that autodiff emits, differentiated again. */
    {"matmul", P("a", "2, 3, 4") P("b", "4, 5") "%y = matmul(%a, %b) : f64[2, 3, 5]\n", "f64[2, 3, 5]"},
    {"matmul_tb", P("a", "2, 3, 4") P("b", "5, 4") "%y = matmul(%a, %b) transpose_b=true : f64[2, 3, 5]\n",
     "f64[2, 3, 5]"},
    {"matmul_ta", P("a", "2, 3, 4") P("b", "2, 3, 5") "%y = matmul(%a, %b) transpose_a=true : f64[4, 5]\n",
     "f64[4, 5]"},
    {"pad", P("x", "3, 4") "%y = pad(%x) axis=1 start=2 total=7 : f64[3, 7]\n", "f64[3, 7]"},
    {"concat_same", P("a", "2, 3") "%y = concat(%a, %a) axis=0 : f64[4, 3]\n", "f64[4, 3]"},
    {"split_unused", P("x", "2, 9")
     "%a = slice(%x) axis=1 start=0 len=3 : f64[2, 3]\n%b = slice(%x) axis=1 start=3 len=3 : f64[2, 3]\n"
     "%c = slice(%x) axis=1 start=6 len=3 : f64[2, 3]\n%y = mul(%a, %c) : f64[2, 3]\n", "f64[2, 3]"},
    {"rope_inverse", P("x", "5, 2, 3, 6") "%y = rope(%x) base=100.0 inverse=true : f64[5, 2, 3, 6]\n",
     "f64[5, 2, 3, 6]"},
    /* Fused attention (codegen/attn_c.c): the generated flash kernels,
     * forward and backward, on sizes that are not multiples of the tiles. */
    {"attention", P("q", "2, 2, 5, 6") P("k", "2, 2, 7, 6") P("v", "2, 2, 7, 6")
     "%y = attention(%q, %k, %v) scale=0.4 : f64[2, 2, 5, 6]\n", "f64[2, 2, 5, 6]"},
    {"attention_causal", P("q", "1, 2, 7, 5") P("k", "1, 2, 7, 5") P("v", "1, 2, 7, 5")
     "%y = attention(%q, %k, %v) scale=0.5 causal=true : f64[1, 2, 7, 5]\n", "f64[1, 2, 7, 5]"},
    {"attention_mask", "%m = input : u8[2, 7]\n" P("q", "2, 2, 3, 4") P("k", "2, 2, 7, 4") P("v", "2, 2, 7, 4")
     "%y = attention(%q, %k, %v, %m) scale=0.6 : f64[2, 2, 3, 4]\n", "f64[2, 2, 3, 4]"},
    {"attention_gqa", P("q", "1, 4, 6, 4") P("k", "1, 2, 6, 4") P("v", "1, 2, 6, 4")
     "%y = attention(%q, %k, %v) scale=0.5 causal=true : f64[1, 4, 6, 4]\n", "f64[1, 4, 6, 4]"},
    {"attention_mqa", "%m = input : u8[2, 5]\n" P("q", "2, 4, 5, 3") P("k", "2, 1, 5, 3") P("v", "2, 1, 5, 3")
     "%y = attention(%q, %k, %v, %m) scale=0.7 causal=true : f64[2, 4, 5, 3]\n", "f64[2, 4, 5, 3]"},
    /* The mask is a function of (seed, step, key, index): fixed between the
     * perturbed runs, so the differences see one fixed mask. */
    {"attention_dropout", P("q", "1, 2, 6, 4") P("k", "1, 2, 6, 4") P("v", "1, 2, 6, 4")
     "%y = attention(%q, %k, %v) scale=0.5 causal=true p=0.3 key=77 : f64[1, 2, 6, 4]\n", "f64[1, 2, 6, 4]"},
    /* A KV-cached step (rt.pos = 0 here): 3 queries against 7 cached keys. */
    {"attention_pos_offset", P("q", "1, 2, 3, 4") P("k", "1, 2, 7, 4") P("v", "1, 2, 7, 4")
     "%y = attention(%q, %k, %v) scale=0.5 causal=true pos_offset=true : f64[1, 2, 3, 4]\n",
     "f64[1, 2, 3, 4]"},
    /* Tiles of more than one block: 70 keys (a CPU key tile is 64). */
    {"attention_long", P("q", "1, 1, 70, 3") P("k", "1, 1, 70, 3") P("v", "1, 1, 70, 3")
     "%y = attention(%q, %k, %v) scale=0.3 causal=true : f64[1, 1, 70, 3]\n", "f64[1, 1, 70, 3]"},
    /* A custom op (docs/autodiff.md) whose hand-written backward is the
     * true gradient of its forward, y = gelu(a) * b: autodiff must use the
     * body, with the cotangent replaced, for both operands. */
    {"custom_op", P("a", "3, 5") P("b", "3, 5")
     "%g = gelu(%a) : f64[3, 5]\n%t = mul(%g, %b) : f64[3, 5]\n"
     "%y = custom_out(%t, %a, %b) : f64[3, 5]\n%ct = cotangent(%y) : f64[3, 5]\n"
     "%ctb = mul(%ct, %b) : f64[3, 5]\n%da = gelu_back(%ctb, %a) : f64[3, 5]\n"
     "%db = mul(%ct, %g) : f64[3, 5]\n"
     "%ga = custom_grad(%da, %y) index=0 : f64[3, 5]\n%gb = custom_grad(%db, %y) index=1 : f64[3, 5]\n",
     "f64[3, 5]"},
};

/* Fused ops and kernels: autodiff, then the fuse pass, then memplan. */
typedef struct gc_fused_case {
    gc_case c;
    const char *fused; /* a text the IR after the fuse pass must hold */
} gc_fused_case;

static const gc_fused_case fused_cases[] = {
    {{"fused_bias_gelu_tanh", P("x", "2, 3, 5") P("w", "7, 5") P("b", "7")
      "%h = linear(%x, %w, %b) : f64[2, 3, 7]\n%y = gelu(%h) : f64[2, 3, 7]\n", "f64[2, 3, 7]"},
     "= bias_gelu_back(%grad.y, %h, %b)"},
    {{"fused_bias_gelu_erf", P("a", "3, 7") P("b", "7")
      "%h = bias_add(%a, %b) : f64[3, 7]\n%y = gelu(%h) approx=erf : f64[3, 7]\n", "f64[3, 7]"},
     "= bias_gelu_back(%grad.y, %a, %b) approx=erf"},
    {{"fused_bias_dropout_add", P("x", "2, 3, 5") P("w", "6, 5") P("b", "6") P("r", "2, 3, 6")
      "%h = linear(%x, %w, %b) : f64[2, 3, 6]\n%d = dropout(%h) p=0.3 : f64[2, 3, 6]\n"
      "%y = add(%r, %d) : f64[2, 3, 6]\n", "f64[2, 3, 6]"},
     "%y = bias_dropout_add(%h, %b, %r) p=0.3"},
    {{"fused_bias_dropout_add_bias_add", P("a", "4, 6") P("b", "6") P("r", "4, 6")
      "%h = bias_add(%a, %b) : f64[4, 6]\n%d = dropout(%h) p=0.4 : f64[4, 6]\n"
      "%y = add(%d, %r) : f64[4, 6]\n", "f64[4, 6]"},
     "%y = bias_dropout_add(%a, %b, %r) p=0.4"},
    {{"fused_scale_softmax_causal", P("x", "2, 3, 4, 4")
      "%s = scale(%x) alpha=0.7 : f64[2, 3, 4, 4]\n%y = softmax(%s) scale=0.5 causal=true : f64[2, 3, 4, 4]\n",
      "f64[2, 3, 4, 4]"},
     "%y = softmax(%x) scale=0.35"},
    {{"fused_mul_softmax_mask", "%m = input : u8[2, 5]\n" P("x", "2, 3, 4, 5")
      "%c = full value=0.8 : f64[2, 3, 4, 5]\n%s = mul(%x, %c) : f64[2, 3, 4, 5]\n"
      "%y = softmax(%s, %m) : f64[2, 3, 4, 5]\n", "f64[2, 3, 4, 5]"},
     "%y = softmax(%x, %m) scale=0.8"},
    /* An add whose sum the layernorm's backward reads too: written by the
     * row kernel, recomputed in each pass over the row. */
    {{"fused_add_layernorm", P("a", "3, 2, 7") P("c", "3, 2, 7") P("g", "7") P("b", "7")
      "%s = add(%a, %c) : f64[3, 2, 7]\n%y = layernorm(%s, %g, %b) : f64[3, 2, 7]\n", "f64[3, 2, 7]"},
     "add, layernorm, mul; writes %s, %y, %yw"},
    {{"fused_layernorm_dropout", P("x", "3, 2, 7") P("g", "7") P("b", "7")
      "%h = layernorm(%x, %g, %b) : f64[3, 2, 7]\n%y = dropout(%h) p=0.3 : f64[3, 2, 7]\n", "f64[3, 2, 7]"},
     "layernorm, dropout"},
    /* The causal softmax's masked tail is written as zeros: dropout keeps
     * them. */
    {{"fused_softmax_dropout", P("x", "2, 3, 4, 4")
      "%p = softmax(%x) scale=0.5 causal=true : f64[2, 3, 4, 4]\n%y = dropout(%p) p=0.2 : f64[2, 3, 4, 4]\n",
      "f64[2, 3, 4, 4]"},
     "softmax, dropout; writes %p, %y"},
    /* The gradient's mul by w_out stays in registers, recomputed in both
     * passes of softmax_back over the row. */
    {{"fused_mul_softmax_back", P("x", "2, 3, 4, 4")
      "%y = softmax(%x) scale=0.5 causal=true : f64[2, 3, 4, 4]\n", "f64[2, 3, 4, 4]"},
     "mul, softmax_back; writes %grad.x"},
    {{"fused_rmsnorm_mul", P("x", "3, 2, 6") P("g", "6") P("u", "3, 2, 6")
      "%h = rmsnorm(%x, %g) : f64[3, 2, 6]\n%y = mul(%h, %u) : f64[3, 2, 6]\n", "f64[3, 2, 6]"},
     "rmsnorm, mul"},
    {{"fused_map_chain", P("a", "3, 5") P("b", "3, 5")
      "%s = mul(%a, %b) : f64[3, 5]\n%t = silu(%s) : f64[3, 5]\n%y = add(%t, %a) : f64[3, 5]\n", "f64[3, 5]"},
     "mul, silu, add"},
    /* The bias gradient: the mul by w_out folds into the column sum. */
    {{"fused_colsum", "%in = input : f64[3, 5]\n" P("b", "5") "%y = bias_add(%in, %b) : f64[3, 5]\n",
      "f64[3, 5]"},
     "mul, colsum; writes %grad.b"},
};

/* Fills integer inputs: tokens/labels cycle through small values, masks
 * keep all but the last column of batch 1. */
static void fill_inputs(rt_exec *e)
{
    for (int i = 0; i < e->g->nnodes; i++) {
        const ir_node *n = e->g->nodes[i];
        if (!(n->flags & IR_NF_INPUT)) continue;
        int64_t count = ir_shape_numel(&n->shape);
        if (n->dtype == IR_I32) {
            int32_t *t = rt_exec_ptr(e, n);
            for (int64_t j = 0; j < count; j++) t[j] = (int32_t)((j * 5 + 3) % 7);
        } else if (n->dtype == IR_U8) {
            uint8_t *m = rt_exec_ptr(e, n);
            for (int64_t j = 0; j < count; j++) m[j] = !(j == count - 1 || j == count - 2);
        }
    }
}

static double loss_of(rt_exec *e, const ir_node *loss)
{
    /* The whole program at step 0: forward, backward, and an update at lr 0. */
    e->rt.step = 0;
    e->rt.lr_float = 0.0f, e->rt.lr_double = 0.0, e->rt.wd_float = 0.0f, e->rt.wd_double = 0.0;
    rt_exec_run(e, NULL, e->prog->ninstrs);
    return *(const double *)rt_exec_ptr(e, loss);
}

/* Max over elements of |analytic - numeric| / max(1, |numeric|). */
static double check_param(rt_exec *e, const ir_node *p, const ir_node *grad, const ir_node *loss)
{
    int64_t count = ir_shape_numel(&p->shape);
    double *x = rt_exec_ptr(e, p), worst = 0.0;
    double *analytic = malloc((size_t)count * sizeof *analytic);
    loss_of(e, loss);
    memcpy(analytic, rt_exec_ptr(e, grad), (size_t)count * sizeof *analytic);
    for (int64_t j = 0; j < count; j++) {
        const double h = 1e-5, keep = x[j];
        x[j] = keep + h;
        double up = loss_of(e, loss);
        x[j] = keep - h;
        double down = loss_of(e, loss);
        x[j] = keep;
        double num = (up - down) / (2 * h);
        double err = fabs(analytic[j] - num) / fmax(1.0, fabs(num));
        if (err > worst) worst = err;
    }
    free(analytic);
    return worst;
}

static char *case_text(const gc_case *c)
{
    size_t n = strlen(c->ir) + 512;
    char *s = malloc(n);
    bool scalar = strcmp(c->out, "f64[]") == 0;
    snprintf(s, n,
             "tgc-ir 1\nmodel \"%s\"\n%s"
             "%%w_out = param init=normal std=1.0 : %s\n"
             "%%yw = mul(%%y, %%w_out) : %s\n"
             "%%loss = %s(%%yw) : f64[] loss\n",
             c->name, c->ir, c->out, c->out, scalar ? "mean" : "sum");
    return s;
}

static void run_case(const gc_case *c, const char *fused)
{
    diag d;
    diag_init(&d, stderr);
    char *text = case_text(c);
    ir_graph *g = ir_graph_read(text, strlen(text), c->name, &d);
    free(text);
    CHECK(g != NULL);
    if (!g) { diag_free(&d); return; }
    const pass_info *list[] = {pass_lookup("autodiff"), pass_lookup("fuse"), pass_lookup("memplan")};
    if (!fused) list[1] = list[2];
    pass_ctx ctx = {.d = &d, .verify_each = true};
    bool ok = list[0] && list[1] && pass_run_list(g, list, fused ? 3 : 2, &ctx, NULL, NULL);
    CHECK(ok);
    if (ok && fused) {
        char *printed = ir_graph_print(g);
        bool found = strstr(printed, fused) != NULL;
        if (!found) fprintf(stderr, "%s: the fused IR lacks '%s':\n%s", c->name, fused, printed);
        CHECK(found);
        free(printed);
    }
    rt_cc_options cc = {0};
    rt_exec *e = ok ? rt_exec_new(g, &cc, &d) : NULL;
    CHECK(e != NULL);
    if (e) {
        rt_exec_init_params(e, 7);
        fill_inputs(e);
        const ir_node *loss = ir_graph_loss(g);
        for (int i = 0; i < g->nnodes; i++) {
            const ir_node *p = g->nodes[i];
            if (!(p->flags & IR_NF_PARAM)) continue;
            char gname[256];
            snprintf(gname, sizeof gname, "grad.%s", p->name);
            const ir_node *gr = ir_graph_find(g, gname);
            CHECK(gr != NULL);
            if (!gr) continue;
            double err = check_param(e, p, gr, loss);
            printf("%-16s d/d %-6s max error %.2e\n", c->name, p->name, err);
            if (!(err < 1e-6)) {
                fprintf(stderr, "gradient check failed: %s, parameter %s: error %.3e\n", c->name, p->name, err);
                check_failures++;
            }
            check_count++;
        }
    }
    rt_exec_free(e);
    ir_graph_free(g);
    diag_free(&d);
}

int main(int argc, char **argv)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (argc < 2 || strcmp(argv[1], cases[i].name) == 0) run_case(&cases[i], NULL);
    for (size_t i = 0; i < sizeof fused_cases / sizeof fused_cases[0]; i++)
        if (argc < 2 || strcmp(argv[1], fused_cases[i].c.name) == 0) run_case(&fused_cases[i].c, fused_cases[i].fused);
    CHECK_DONE();
}
