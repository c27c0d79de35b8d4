/* Hugging Face checkpoints <-> tgc (runtime/io/hf.h): the .tg model of a
 * Hugging Face config, and the config of a compiled tgc model. */
#include "runtime/io/hf.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/hf_impl.h"

/* ---- the .tg model ---------------------------------------------------------------- */

/* A float hyperparameter: whole numbers as "10000.0" (not "1e+04"), others
 * in their shortest round-tripping form. */
static void put_num(strbuf *b, double v)
{
    if (v == floor(v) && fabs(v) < 1e15) sb_printf(b, "%.1f", v);
    else sb_put_double(b, v);
}

static void tg_gpt2(const hf_model *m, strbuf *b)
{
    sb_printf(b, "hparam layers = %" PRId64 " flag num-layers\n", m->layers);
    sb_printf(b, "hparam hidden = %" PRId64 " flag hidden-size\n", m->hidden);
    sb_printf(b, "hparam heads = %" PRId64 " flag num-attention-heads\n", m->heads);
    sb_printf(b, "hparam seq = %" PRId64 " flag seq-length\n", m->max_pos);
    sb_puts(b, "hparam batch = 8\n");
    sb_printf(b, "hparam vocab = %" PRId64 "\n", m->vocab);
    sb_puts(b, "hparam head_dim = hidden / heads\n");
    sb_printf(b, "hparam ffn = %" PRId64 " flag ffn-hidden-size\n", m->ffn);
    sb_printf(b, "hparam max_pos = %" PRId64 " flag max-position-embeddings   # n_positions\n", m->max_pos);
    sb_puts(b, "hparam std = 0.02 flag init-method-std\nhparam pdrop = ");
    put_num(b, m->resid_pdrop);
    sb_puts(b, " flag hidden-dropout   # resid_pdrop\nhparam attn_pdrop = ");
    put_num(b, m->attn_pdrop);
    sb_puts(b, " flag attention-dropout\nhparam embd_pdrop = ");
    put_num(b, m->embd_pdrop);
    sb_puts(b, "\nhparam eps = ");
    put_num(b, m->eps);
    sb_puts(b, "   # layer_norm_epsilon\n\n"
               "input tokens: i32[seq, batch]\n"
               "input labels: i32[seq, batch]\n\n"
               "param embedding.word_embeddings.weight: f32[vocab, hidden] = normal(std)\n"
               "param embedding.position_embeddings.weight: f32[max_pos, hidden] = normal(std)\n\n"
               "block self_attention(x) {\n"
               "    param query_key_value.weight: f32[3 * hidden, hidden] = normal(std)\n"
               "    param query_key_value.bias: f32[3 * hidden] = zeros no_decay\n"
               "    param dense.weight: f32[hidden, hidden] = scaled_normal(std, layers)\n"
               "    param dense.bias: f32[hidden] = zeros no_decay\n\n"
               "    qkv = linear(x, query_key_value.weight, query_key_value.bias, parallel=column)\n"
               "    qkv = reshape(qkv, [seq, batch, heads, 3 * head_dim])   # per head: q, k, v\n"
               "    q, k, v = split(qkv, 3, axis=-1)\n"
               "    q = permute(q, [1, 2, 0, 3])\n"
               "    k = permute(k, [1, 2, 0, 3])\n"
               "    v = permute(v, [1, 2, 0, 3])\n"
               "    scores = bmm(q, k, transpose_b=true)\n"
               "    probs = softmax(scores, scale=1 / sqrt(head_dim), causal=true)\n"
               "    probs = dropout(probs, p=attn_pdrop)\n"
               "    ctx = bmm(probs, v)\n"
               "    ctx = permute(ctx, [2, 0, 1, 3])\n"
               "    ctx = reshape(ctx, [seq, batch, hidden])\n"
               "    out = linear(ctx, dense.weight, dense.bias, parallel=row, input_is_parallel=true)\n"
               "    return out\n"
               "}\n\n"
               "block mlp(x) {\n"
               "    param dense_h_to_4h.weight: f32[ffn, hidden] = normal(std)\n"
               "    param dense_h_to_4h.bias: f32[ffn] = zeros no_decay\n"
               "    param dense_4h_to_h.weight: f32[hidden, ffn] = scaled_normal(std, layers)\n"
               "    param dense_4h_to_h.bias: f32[hidden] = zeros no_decay\n\n"
               "    h = linear(x, dense_h_to_4h.weight, dense_h_to_4h.bias, parallel=column)\n");
    sb_printf(b, "    h = gelu(h, approx=%s)\n", m->gelu_erf ? "erf" : "tanh");
    sb_puts(b, "    out = linear(h, dense_4h_to_h.weight, dense_4h_to_h.bias, parallel=row, input_is_parallel=true)\n"
               "    return out\n"
               "}\n\n"
               "block layer(x) {\n"
               "    param input_layernorm.weight: f32[hidden] = ones no_decay\n"
               "    param input_layernorm.bias: f32[hidden] = zeros no_decay\n"
               "    param post_attention_layernorm.weight: f32[hidden] = ones no_decay\n"
               "    param post_attention_layernorm.bias: f32[hidden] = zeros no_decay\n\n"
               "    h = layernorm(x, input_layernorm.weight, input_layernorm.bias, eps=eps)\n"
               "    x = x + dropout(self_attention(h), p=pdrop)\n"
               "    h = layernorm(x, post_attention_layernorm.weight, post_attention_layernorm.bias, eps=eps)\n"
               "    x = x + dropout(mlp(h), p=pdrop)\n"
               "    return x\n"
               "}\n\n"
               "positions = arange(seq, batch)\n"
               "h = embedding(tokens, embedding.word_embeddings.weight, parallel=vocab)\n"
               "h = h + embedding(positions, embedding.position_embeddings.weight)\n"
               "h = dropout(h, p=embd_pdrop)\n\n"
               "for i in 0 .. layers {\n"
               "    h = layer(h) as layers[i]\n"
               "}\n\n"
               "param final_layernorm.weight: f32[hidden] = ones no_decay\n"
               "param final_layernorm.bias: f32[hidden] = zeros no_decay\n"
               "h = layernorm(h, final_layernorm.weight, final_layernorm.bias, eps=eps)\n\n");
}

static void tg_llama(const hf_model *m, strbuf *b)
{
    sb_printf(b, "hparam layers = %" PRId64 " flag num-layers\n", m->layers);
    sb_printf(b, "hparam hidden = %" PRId64 " flag hidden-size\n", m->hidden);
    sb_printf(b, "hparam heads = %" PRId64 " flag num-attention-heads\n", m->heads);
    sb_printf(b, "hparam kv_heads = %" PRId64 " flag num-query-groups   # num_key_value_heads\n", m->kv_heads);
    sb_printf(b, "hparam seq = %" PRId64 " flag seq-length   # max_position_embeddings\n", m->max_pos);
    sb_puts(b, "hparam batch = 8\n");
    sb_printf(b, "hparam vocab = %" PRId64 "\n", m->vocab);
    sb_puts(b, "hparam head_dim = hidden / heads\nhparam group = heads / kv_heads\n");
    sb_printf(b, "hparam ffn = %" PRId64 " flag ffn-hidden-size   # intermediate_size\n", m->ffn);
    sb_puts(b, "hparam std = 0.02 flag init-method-std\nhparam eps = ");
    put_num(b, m->eps);
    sb_puts(b, "   # rms_norm_eps\nhparam rope_base = ");
    put_num(b, m->rope_theta);
    bool scaled = m->rope_factor != 1.0;
    sb_printf(b, "   # rope_theta\nhparam use_rope_scaling = %d flag use-rope-scaling   # rope_scaling%s\n"
              "hparam rope_scaling_factor = ", scaled, scaled ? ": rope_type llama3" : " null");
    put_num(b, scaled ? m->rope_factor : 8.0);
    sb_puts(b, " flag rope-scaling-factor\nhparam rope_factor = 1 + use_rope_scaling * (rope_scaling_factor - 1)\n");
    sb_puts(b, "hparam rope_low_freq_factor = ");
    put_num(b, m->rope_low);
    sb_puts(b, "\nhparam rope_high_freq_factor = ");
    put_num(b, m->rope_high);
    sb_printf(b, "\nhparam rope_original_max_pos = %" PRId64 "\n", m->rope_orig);
    const char *rope = "base=rope_base, scaling_factor=rope_factor, low_freq_factor=rope_low_freq_factor, "
                       "high_freq_factor=rope_high_freq_factor, original_max_pos=rope_original_max_pos";
    sb_puts(b, "\n"
               "input tokens: i32[seq, batch]\n"
               "input labels: i32[seq, batch]\n\n"
               "param embedding.word_embeddings.weight: f32[vocab, hidden] = normal(std)\n\n"
               "block self_attention(x) {\n"
               "    # Per key/value group: its `group` query heads, its key head, its value head.\n"
               "    param query_key_value.weight: f32[(heads + 2 * kv_heads) * head_dim, hidden] = normal(std)\n"
               "    param dense.weight: f32[hidden, hidden] = scaled_normal(std, layers)\n");
    if (m->qkv_bias)
        sb_puts(b, "    # Qwen2: biases on the q, k and v projections (packed as the weight's rows), none on dense.\n"
                   "    param query_key_value.bias: f32[(heads + 2 * kv_heads) * head_dim] = zeros no_decay\n\n"
                   "    qkv = linear(x, query_key_value.weight, query_key_value.bias, parallel=column)\n");
    else sb_puts(b, "\n    qkv = linear(x, query_key_value.weight, parallel=column)\n");
    sb_puts(b, "    qkv = reshape(qkv, [seq, batch, kv_heads, (group + 2) * head_dim])\n"
               "    q = slice(qkv, axis=-1, start=0, len=group * head_dim)\n"
               "    k = slice(qkv, axis=-1, start=group * head_dim, len=head_dim)\n"
               "    v = slice(qkv, axis=-1, start=(group + 1) * head_dim, len=head_dim)\n"
               "    q = reshape(q, [seq, batch, heads, head_dim])\n");
    sb_printf(b, "    q = rope(q, %s)\n    k = rope(k, %s)\n", rope, rope);
    sb_puts(b,
               "    q = permute(q, [1, 2, 0, 3])\n"
               "    k = permute(k, [1, 2, 0, 3])\n"
               "    v = permute(v, [1, 2, 0, 3])\n"
               "    k = repeat_interleave(k, axis=1, repeats=group)\n"
               "    v = repeat_interleave(v, axis=1, repeats=group)\n"
               "    scores = bmm(q, k, transpose_b=true)\n"
               "    probs = softmax(scores, scale=1 / sqrt(head_dim), causal=true)\n"
               "    ctx = bmm(probs, v)\n"
               "    ctx = reshape(permute(ctx, [2, 0, 1, 3]), [seq, batch, hidden])\n"
               "    return linear(ctx, dense.weight, parallel=row, input_is_parallel=true)\n"
               "}\n\n"
               "block mlp(x) {\n"
               "    param gate_proj.weight: f32[ffn, hidden] = normal(std)\n"
               "    param up_proj.weight: f32[ffn, hidden] = normal(std)\n"
               "    param down_proj.weight: f32[hidden, ffn] = scaled_normal(std, layers)\n\n"
               "    gate = linear(x, gate_proj.weight, parallel=column)\n"
               "    up = linear(x, up_proj.weight, parallel=column)\n"
               "    return linear(swiglu(gate, up), down_proj.weight, parallel=row, input_is_parallel=true)\n"
               "}\n\n"
               "block layer(x) {\n"
               "    param input_layernorm.weight: f32[hidden] = ones no_decay\n"
               "    param post_attention_layernorm.weight: f32[hidden] = ones no_decay\n\n"
               "    x = x + self_attention(rmsnorm(x, input_layernorm.weight, eps=eps))\n"
               "    x = x + mlp(rmsnorm(x, post_attention_layernorm.weight, eps=eps))\n"
               "    return x\n"
               "}\n\n"
               "h = embedding(tokens, embedding.word_embeddings.weight, parallel=vocab)\n"
               "for i in 0 .. layers {\n"
               "    h = layer(h) as layers[i]\n"
               "}\n\n"
               "param final_layernorm.weight: f32[hidden] = ones no_decay\n"
               "h = rmsnorm(h, final_layernorm.weight, eps=eps)\n\n");
}

void hf_model_write_tg(const hf_model *m, const char *source_dir, strbuf *b)
{
    bool gpt = m->family == HF_GPT2;
    sb_printf(b, "# %s, imported from the Hugging Face checkpoint %s by `tgc import hf`\n"
                 "# (docs/checkpoints.md): %s's structure and parameter names with the values of its\n"
                 "# config.json (model_type \"%s\"). %s\n\n",
              gpt ? "GPT-2 (GPT2LMHeadModel)" : m->qkv_bias ? "A Qwen2 model (Qwen2ForCausalLM)"
                                                 : "A LLaMA-family model (LlamaForCausalLM)", source_dir,
              gpt ? "samples/gpt.tg" : "samples/llama.tg", m->model_type,
              gpt ? "Pre-LN, learned positions, GELU MLP." : m->qkv_bias ? "RMSNorm, rotate-half RoPE, SwiGLU, "
                                                            "grouped-query attention, biases on q, k and v."
                  : "RMSNorm, rotate-half RoPE, SwiGLU, grouped-query attention.");
    if (gpt) tg_gpt2(m, b);
    else tg_llama(m, b);
    if (m->tied) {
        sb_puts(b, "# Tied LM head: the word embedding is the output projection.\n"
                   "logits = linear(h, embedding.word_embeddings.weight, parallel=column)\n");
    } else {
        sb_puts(b, "param output_layer.weight: f32[vocab, hidden] = normal(std)   # untied (lm_head)\n"
                   "logits = linear(h, output_layer.weight, parallel=column)\n");
    }
    sb_puts(b, "loss = cross_entropy(logits, labels)\nminimize loss\n");
}

/* ---- the config of a tgc model -------------------------------------------------- */

static const ir_hparam *hparam(const ir_graph *g, const char *name)
{
    for (int i = 0; i < g->nhparams; i++)
        if (strcmp(g->hparams[i].name, name) == 0) return &g->hparams[i];
    return NULL;
}

static double hparam_num(const ir_graph *g, const char *name, double def)
{
    const ir_hparam *h = hparam(g, name);
    return !h ? def : h->is_float ? h->f : (double)h->i;
}

/* The one value attribute `attr` (a float or an int) has on every node
 * of op (false when two differ; *n counts the nodes). */
static bool one_attr(const ir_graph *g, ir_op op, const char *attr, double *v, int *n, diag *d)
{
    *n = 0;
    const ir_op_info *info = ir_op_get(op);
    bool is_int = false;
    for (int k = 0; k < info->nattrs; k++)
        if (strcmp(info->attrs[k].name, attr) == 0) is_int = info->attrs[k].kind == IR_ATTR_INT;
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *x = g->nodes[i];
        if (x->op != op) continue;
        double a = is_int ? (double)ir_attr_int(x, attr) : ir_attr_float(x, attr);
        if (*n && a != *v) {
            diag_error(d, x->loc, "export --format hf: this %s has %s = %g where another has %g; a Hugging Face config "
                       "has one value", ir_op_get(op)->name, attr, a, *v);
            return false;
        }
        *v = a;
        (*n)++;
    }
    return true;
}

static const ir_node *param(const ir_graph *g, const char *name)
{
    const ir_node *p = ir_graph_find(g, name);
    return p && (p->flags & IR_NF_PARAM) ? p : NULL;
}

/* Every parameter of g is one of mp's, with its shape, and every one of
 * mp's is in g. */
static bool check_params(const ir_graph *g, const hf_map *mp, diag *d)
{
    bool ok = true;
    for (int i = 0; i < mp->n; i++) {
        const hf_entry *x = &mp->e[i];
        const ir_node *p = param(g, x->tgc);
        if (!p) {
            diag_error_plain(d, "export --format hf: model '%s' has no parameter '%s', which its Hugging Face form "
                             "needs", g->model, x->tgc);
            ok = false;
            continue;
        }
        bool same = p->shape.rank == x->tgc_rank && p->dtype == IR_F32;
        for (int k = 0; same && k < x->tgc_rank; k++) same = p->shape.dim[k] == x->tgc_shape[k];
        if (!same) {
            char want[96], have[128];
            hf_shape_text(want, sizeof want, x->tgc_rank, x->tgc_shape);
            ir_type_str(p->dtype, &p->shape, have, sizeof have);
            diag_error(d, p->loc, "export --format hf: parameter '%s' is %s; its Hugging Face form needs f32%s", x->tgc,
                       have, want);
            ok = false;
        }
    }
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *p = g->nodes[i];
        if (!(p->flags & IR_NF_PARAM)) continue;
        bool known = false;
        for (int k = 0; !known && k < mp->n; k++) known = strcmp(mp->e[k].tgc, p->name) == 0;
        if (!known) {
            diag_error(d, p->loc, "export --format hf: parameter '%s' has no place in a Hugging Face %s model",
                       p->name, ir_graph_find(g, "embedding.position_embeddings.weight") ? "GPT-2" : "LLaMA");
            ok = false;
        }
    }
    return ok;
}

bool hf_model_from_graph(const ir_graph *g, hf_model *m, diag *d)
{
    memset(m, 0, sizeof *m);
    m->bos = m->eos = -1;
    const ir_node *wte = param(g, "embedding.word_embeddings.weight");
    if (!wte || wte->shape.rank != 2) {
        diag_error_plain(d, "export --format hf: model '%s' has no parameter embedding.word_embeddings.weight "
                         "[vocab, hidden] (samples/gpt.tg's and samples/llama.tg's names)", g->model);
        return false;
    }
    m->family = param(g, "embedding.position_embeddings.weight") ? HF_GPT2 : HF_LLAMA;
    m->qkv_bias = m->family == HF_LLAMA && param(g, "layers.0.self_attention.query_key_value.bias");
    snprintf(m->model_type, sizeof m->model_type, "%s", m->family == HF_GPT2 ? "gpt2" : m->qkv_bias ? "qwen2" : "llama");
    m->vocab = wte->shape.dim[0];
    m->hidden = wte->shape.dim[1];
    m->layers = g->num_layers;
    m->heads = (int64_t)hparam_num(g, "heads", 0);
    m->kv_heads = (int64_t)hparam_num(g, "kv_heads", (double)m->heads);
    m->tied = !param(g, "output_layer.weight");
    if (m->heads <= 0 || m->hidden % m->heads || m->kv_heads <= 0 || m->heads % m->kv_heads) {
        diag_error_plain(d, "export --format hf: model '%s' needs hyperparameters heads (dividing the hidden size "
                         "%" PRId64 ") and, for grouped-query attention, kv_heads (dividing heads); it has heads = "
                         "%" PRId64 ", kv_heads = %" PRId64, g->model, m->hidden, m->heads, m->kv_heads);
        return false;
    }
    int n;
    double eps = 0, base = 10000, approx = 0;
    const ir_node *f = param(g, m->family == HF_GPT2 ? "layers.0.mlp.dense_h_to_4h.weight" : "layers.0.mlp.gate_proj.weight");
    m->ffn = f && f->shape.rank == 2 ? f->shape.dim[0] : 4 * m->hidden;
    if (m->family == HF_GPT2) {
        m->max_pos = param(g, "embedding.position_embeddings.weight")->shape.dim[0];
        if (!one_attr(g, IR_OP_LAYERNORM, "eps", &eps, &n, d)) return false;
        m->eps = n ? eps : 1e-5;
        for (int i = 0; i < g->nnodes; i++)
            if (g->nodes[i]->op == IR_OP_GELU) approx = strcmp(ir_attr_sym(g->nodes[i], "approx"), "erf") == 0;
        m->gelu_erf = approx != 0;
        m->resid_pdrop = hparam_num(g, "pdrop", 0.1);
        m->attn_pdrop = hparam_num(g, "attn_pdrop", m->resid_pdrop);
        m->embd_pdrop = hparam_num(g, "embd_pdrop", m->resid_pdrop);
    } else {
        const ir_node *tok = ir_graph_find(g, "tokens");
        m->max_pos = tok && tok->shape.rank == 2 ? tok->shape.dim[0] : 0;
        if (!one_attr(g, IR_OP_RMSNORM, "eps", &eps, &n, d) || !one_attr(g, IR_OP_ROPE, "base", &base, &n, d))
            return false;
        m->rope_theta = base;
        m->eps = eps;
        double sf = 1, lo = 1, hi = 4, orig = 8192;
        if (!one_attr(g, IR_OP_ROPE, "scaling_factor", &sf, &n, d) ||
            !one_attr(g, IR_OP_ROPE, "low_freq_factor", &lo, &n, d) ||
            !one_attr(g, IR_OP_ROPE, "high_freq_factor", &hi, &n, d) ||
            !one_attr(g, IR_OP_ROPE, "original_max_pos", &orig, &n, d))
            return false;
        m->rope_factor = n ? sf : 1.0;
        m->rope_low = n ? lo : 1.0;
        m->rope_high = n ? hi : 4.0;
        m->rope_orig = n ? (int64_t)orig : 8192;
    }
    if (m->layers <= 0) {
        diag_error_plain(d, "export --format hf: model '%s' has no transformer layers (a `for` loop of blocks named "
                         "layers[i])", g->model);
        return false;
    }
    hf_map mp = {0};
    hf_map_build(m, "", &mp);
    bool ok = check_params(g, &mp, d);
    free(mp.e);
    return ok;
}
