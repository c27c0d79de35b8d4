/* Hugging Face checkpoints <-> tgc (runtime/io/hf.h): config.json, the
 * mapping of tensors, reading a checkpoint, and the import. */
#include "runtime/io/hf.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/io/hf_impl.h"
#include "runtime/io/json.h"
#include "support/file.h"

/* ---- config.json ---------------------------------------------------------------- */

void hf_cfg_error(hf_cfg *c, const json_value *v, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    src_loc at = v ? v->loc : (src_loc){.file = c->path};
    diag_error(c->d, at, "%s", msg);
    c->ok = false;
}

/* An integer member > 0 (or >= 0 with zero_ok); def when absent (def < 0: required). */
static int64_t cfg_int(hf_cfg *c, const char *key, int64_t def, bool zero_ok)
{
    const json_value *v = json_get(c->root, key);
    if (!v || (v->kind == JSON_NULL && def >= 0)) {
        if (def < 0) hf_cfg_error(c, NULL, "config.json has no \"%s\"", key);
        return def;
    }
    if (v->kind != JSON_NUMBER || !v->is_int || v->i < (zero_ok ? 0 : 1) || v->i > ((int64_t)1 << 40)) {
        hf_cfg_error(c, v, "\"%s\" must be an integer %s", key, zero_ok ? ">= 0" : "> 0");
        return def < 0 ? 1 : def;
    }
    return v->i;
}

static double cfg_num(hf_cfg *c, const char *key, double def, double lo, double hi)
{
    const json_value *v = json_get(c->root, key);
    if (!v || v->kind == JSON_NULL) return def;
    if (v->kind != JSON_NUMBER || !(v->num >= lo && v->num <= hi)) {
        hf_cfg_error(c, v, "\"%s\" must be a number from %g to %g", key, lo, hi);
        return def;
    }
    return v->num;
}

static bool cfg_bool(hf_cfg *c, const char *key, bool def)
{
    const json_value *v = json_get(c->root, key);
    if (!v || v->kind == JSON_NULL) return def;
    if (v->kind != JSON_BOOL) {
        hf_cfg_error(c, v, "\"%s\" must be true or false", key);
        return def;
    }
    return v->b;
}

static const char *cfg_str(hf_cfg *c, const char *key, const char *def)
{
    const json_value *v = json_get(c->root, key);
    if (!v || v->kind == JSON_NULL) return def;
    if (v->kind != JSON_STRING) {
        hf_cfg_error(c, v, "\"%s\" must be a string", key);
        return def;
    }
    return v->str;
}

/* A member that must be absent, null, or equal to `want` (a bool). */
static void cfg_refuse_bool(hf_cfg *c, const char *key, bool want, const char *why)
{
    const json_value *v = json_get(c->root, key);
    if (!v || v->kind == JSON_NULL) return;
    if (v->kind != JSON_BOOL || v->b != want)
        hf_cfg_error(c, v, "\"%s\": %s is not supported: %s", key, v->kind == JSON_BOOL ? (v->b ? "true" : "false")
                  : json_kind_name(v->kind), why);
}

static void cfg_gpt2(hf_cfg *c, hf_model *m)
{
    m->family = HF_GPT2;
    m->layers = cfg_int(c, "n_layer", -1, false);
    m->hidden = cfg_int(c, "n_embd", -1, false);
    m->heads = cfg_int(c, "n_head", -1, false);
    m->kv_heads = m->heads;
    m->max_pos = cfg_int(c, "n_positions", -1, false);
    m->vocab = cfg_int(c, "vocab_size", -1, false);
    m->ffn = cfg_int(c, "n_inner", 4 * m->hidden, false);
    m->eps = cfg_num(c, "layer_norm_epsilon", 1e-5, 0, 1);
    m->embd_pdrop = cfg_num(c, "embd_pdrop", 0.1, 0, 1);
    m->resid_pdrop = cfg_num(c, "resid_pdrop", 0.1, 0, 1);
    m->attn_pdrop = cfg_num(c, "attn_pdrop", 0.1, 0, 1);
    m->tied = cfg_bool(c, "tie_word_embeddings", true);
    const char *act = cfg_str(c, "activation_function", "gelu_new");
    if (strcmp(act, "gelu_new") == 0 || strcmp(act, "gelu_pytorch_tanh") == 0) m->gelu_erf = false;
    else if (strcmp(act, "gelu") == 0) m->gelu_erf = true;
    else hf_cfg_error(c, json_get(c->root, "activation_function"), "\"activation_function\": \"%s\" is not supported "
                   "(tgc's gelu is gelu_new / gelu_pytorch_tanh, the tanh form, or gelu, the erf form)", act);
    cfg_refuse_bool(c, "scale_attn_weights", true, "tgc's attention scales the scores by 1/sqrt(head_dim)");
    cfg_refuse_bool(c, "scale_attn_by_inverse_layer_idx", false, "gpt.tg scales every layer's scores alike");
    cfg_refuse_bool(c, "add_cross_attention", false, "gpt.tg is a decoder without cross-attention");
}

/* rope_scaling: null, or Llama 3.1's {"rope_type": "llama3", "factor",
 * "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}
 * (transformers' _compute_llama3_parameters; "type" is the older spelling
 * of "rope_type"). Another type, a missing or an unknown member is refused. */
static void cfg_rope_scaling(hf_cfg *c, hf_model *m)
{
    m->rope_factor = 1.0;
    m->rope_low = 1.0;
    m->rope_high = 4.0;
    m->rope_orig = 8192;
    const json_value *v = json_get(c->root, "rope_scaling");
    if (!v || v->kind == JSON_NULL) return;
    if (v->kind != JSON_OBJECT) {
        hf_cfg_error(c, v, "\"rope_scaling\" must be null or an object");
        return;
    }
    hf_cfg s = *c;
    s.root = v;
    const json_value *t = json_get(v, "rope_type") ? json_get(v, "rope_type") : json_get(v, "type");
    const char *type = t && t->kind == JSON_STRING ? t->str : NULL;
    if (!type || strcmp(type, "llama3") != 0) {
        hf_cfg_error(c, t ? t : v, "\"rope_scaling\": rope_type %s%s%s is not supported: tgc's rope scales as Llama "
                     "3.1 does (rope_type \"llama3\"; linear, dynamic and yarn are not built)",
                     type ? "\"" : "", type ? type : "(none)", type ? "\"" : "");
        return;
    }
    static const char *const known[] = {"rope_type", "type", "factor", "low_freq_factor", "high_freq_factor",
                                        "original_max_position_embeddings", NULL};
    for (int i = 0; i < v->n; i++) {
        bool ok = false;
        for (int k = 0; known[k] && !ok; k++) ok = strcmp(v->keys[i], known[k]) == 0;
        if (!ok)
            hf_cfg_error(c, v->items[i], "\"rope_scaling\": member \"%s\" is not one of rope_type llama3's (factor, "
                         "low_freq_factor, high_freq_factor, original_max_position_embeddings)", v->keys[i]);
    }
    static const char *const need[] = {"factor", "low_freq_factor", "high_freq_factor",
                                       "original_max_position_embeddings", NULL};
    for (int k = 0; need[k]; k++)
        if (!json_get(v, need[k])) hf_cfg_error(c, v, "\"rope_scaling\" of rope_type llama3 has no \"%s\"", need[k]);
    m->rope_factor = cfg_num(&s, "factor", 1.0, 1.0, 1e6);
    m->rope_low = cfg_num(&s, "low_freq_factor", 1.0, 1e-6, 1e6);
    m->rope_high = cfg_num(&s, "high_freq_factor", 4.0, 1e-6, 1e6);
    m->rope_orig = cfg_int(&s, "original_max_position_embeddings", 8192, false);
    if (s.ok && !(m->rope_high > m->rope_low))
        hf_cfg_error(&s, v, "\"rope_scaling\": high_freq_factor %g must exceed low_freq_factor %g", m->rope_high,
                     m->rope_low);
    c->ok = c->ok && s.ok;
}

static void cfg_llama(hf_cfg *c, hf_model *m)
{
    m->family = HF_LLAMA;
    m->layers = cfg_int(c, "num_hidden_layers", -1, false);
    m->hidden = cfg_int(c, "hidden_size", -1, false);
    m->heads = cfg_int(c, "num_attention_heads", -1, false);
    m->kv_heads = cfg_int(c, "num_key_value_heads", m->heads, false);
    m->ffn = cfg_int(c, "intermediate_size", -1, false);
    m->max_pos = cfg_int(c, "max_position_embeddings", -1, false);
    m->vocab = cfg_int(c, "vocab_size", -1, false);
    m->eps = cfg_num(c, "rms_norm_eps", 1e-6, 0, 1);
    m->rope_theta = cfg_num(c, "rope_theta", 10000.0, 1.0, 1e12);
    m->tied = cfg_bool(c, "tie_word_embeddings", false);
    const char *act = cfg_str(c, "hidden_act", "silu");
    if (strcmp(act, "silu") != 0)
        hf_cfg_error(c, json_get(c->root, "hidden_act"), "\"hidden_act\": \"%s\" is not supported (llama.tg's MLP is "
                  "SwiGLU: silu)", act);
    cfg_rope_scaling(c, m);
    bool qwen2 = strcmp(m->model_type, "qwen2") == 0;
    m->qkv_bias = qwen2; /* Qwen2's q, k and v projections have biases, its o_proj none */
    if (!qwen2) cfg_refuse_bool(c, "attention_bias", false, "llama.tg's projections have no biases");
    cfg_refuse_bool(c, "mlp_bias", false, "llama.tg's MLP has no biases");
    double drop = cfg_num(c, "attention_dropout", 0.0, 0, 1);
    if (drop != 0.0)
        hf_cfg_error(c, json_get(c->root, "attention_dropout"), "\"attention_dropout\": %g is not supported (llama.tg "
                  "has no attention dropout)", drop);
    if (qwen2 && cfg_bool(c, "use_sliding_window", false))
        hf_cfg_error(c, json_get(c->root, "use_sliding_window"), "\"use_sliding_window\": true: sliding-window "
                     "attention is not supported (tgc's attention is causal over the whole sequence)");
    if (strcmp(m->model_type, "mistral") == 0) {
        const json_value *sw = json_get(c->root, "sliding_window");
        if (!sw || sw->kind != JSON_NULL)
            hf_cfg_error(c, sw, "\"sliding_window\"%s: sliding-window attention is not supported (tgc's attention is "
                      "causal over the whole sequence); a Mistral model without one has \"sliding_window\": null",
                      sw ? " is set" : " is absent (transformers' MistralConfig then uses 4096)");
    }
    if (c->ok && m->hidden % m->heads == 0) {
        int64_t hd = cfg_int(c, "head_dim", m->hidden / m->heads, false);
        if (hd != m->hidden / m->heads)
            hf_cfg_error(c, json_get(c->root, "head_dim"), "\"head_dim\": %" PRId64 " is not supported: llama.tg's head "
                      "dimension is hidden_size / num_attention_heads = %" PRId64, hd, m->hidden / m->heads);
    }
    if (c->ok && m->heads % m->kv_heads != 0)
        hf_cfg_error(c, json_get(c->root, "num_key_value_heads"), "\"num_key_value_heads\": %" PRId64 " does not divide "
                  "num_attention_heads %" PRId64, m->kv_heads, m->heads);
}

static int64_t cfg_token(hf_cfg *c, const char *key)
{
    const json_value *v = json_get(c->root, key);
    if (!v || v->kind != JSON_NUMBER || !v->is_int || v->i < 0) return -1; /* a list or null: not carried */
    return v->i;
}

bool hf_config_read(const char *dir, hf_model *m, diag *d)
{
    memset(m, 0, sizeof *m);
    char *path = path_join(dir, "config.json");
    json_doc *doc = json_read_file(path, d);
    hf_cfg c = {doc ? doc->root : NULL, diag_intern(path), d, doc != NULL};
    free(path);
    if (c.ok && doc->root->kind != JSON_OBJECT) hf_cfg_error(&c, doc->root, "config.json must be a JSON object");
    const char *type = c.ok ? cfg_str(&c, "model_type", NULL) : NULL;
    if (c.ok && !type)
        hf_cfg_error(&c, NULL, "config.json has no \"model_type\" (tgc imports gpt2, llama, mistral, qwen2)");
    if (c.ok) {
        snprintf(m->model_type, sizeof m->model_type, "%s", type);
        if (strcmp(type, "gpt2") == 0) cfg_gpt2(&c, m);
        else if (strcmp(type, "llama") == 0 || strcmp(type, "mistral") == 0 || strcmp(type, "qwen2") == 0)
            cfg_llama(&c, m);
        else hf_cfg_error(&c, json_get(c.root, "model_type"), "\"model_type\": \"%s\" is not supported (tgc imports "
                       "gpt2, llama, mistral and qwen2)", type);
    }
    if (c.ok && m->hidden % m->heads != 0)
        hf_cfg_error(&c, NULL, "the hidden size %" PRId64 " is not a multiple of the %" PRId64 " heads", m->hidden,
                  m->heads);
    m->bos = c.ok ? cfg_token(&c, "bos_token_id") : -1;
    m->eos = c.ok ? cfg_token(&c, "eos_token_id") : -1;
    json_free(doc);
    return c.ok;
}

/* ---- the mapping ---------------------------------------------------------------- */

static void map_add(hf_map *mp, hf_map_kind k, const char *hf, const char *tgc, int rank, int64_t d0, int64_t d1,
                    int trank, int64_t t0, int64_t t1)
{
    if (mp->n == mp->cap) {
        mp->cap = mp->cap ? 2 * mp->cap : 64;
        mp->e = xrealloc(mp->e, (size_t)mp->cap * sizeof *mp->e);
    }
    hf_entry *e = &mp->e[mp->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->hf, sizeof e->hf, "%s", hf);
    snprintf(e->tgc, sizeof e->tgc, "%s", tgc);
    e->kind = k;
    e->rank = rank;
    e->shape[0] = d0;
    e->shape[1] = d1;
    e->tgc_rank = trank;
    e->tgc_shape[0] = t0;
    e->tgc_shape[1] = t1;
}

/* The same shape both sides. */
static void map_same(hf_map *mp, const char *hf, const char *tgc, int rank, int64_t d0, int64_t d1)
{
    map_add(mp, MAP_COPY, hf, tgc, rank, d0, d1, rank, d0, d1);
}

/* Every tensor of m in transformers' state-dict order; hp ("transformer."
 * or "model.", or "" for a base model's names) prefixes all but lm_head. */
void hf_map_build(const hf_model *m, const char *hp, hf_map *mp)
{
    int64_t H = m->hidden, V = m->vocab, F = m->ffn, hd = m->hidden / m->heads;
    char a[128], b[128];
#define HF(...) (snprintf(a, sizeof a, __VA_ARGS__), a)
#define TG(...) (snprintf(b, sizeof b, __VA_ARGS__), b)
    if (m->family == HF_GPT2) {
        map_same(mp, HF("%swte.weight", hp), "embedding.word_embeddings.weight", 2, V, H);
        map_same(mp, HF("%swpe.weight", hp), "embedding.position_embeddings.weight", 2, m->max_pos, H);
        for (int64_t i = 0; i < m->layers; i++) {
            const char *L = "layers.%" PRId64 ".";
            char l[32];
            snprintf(l, sizeof l, L, i);
            map_same(mp, HF("%sh.%" PRId64 ".ln_1.weight", hp, i), TG("%sinput_layernorm.weight", l), 1, H, 0);
            map_same(mp, HF("%sh.%" PRId64 ".ln_1.bias", hp, i), TG("%sinput_layernorm.bias", l), 1, H, 0);
            map_add(mp, MAP_GPT2_QKV_W, HF("%sh.%" PRId64 ".attn.c_attn.weight", hp, i),
                    TG("%sself_attention.query_key_value.weight", l), 2, H, 3 * H, 2, 3 * H, H);
            map_add(mp, MAP_GPT2_QKV_B, HF("%sh.%" PRId64 ".attn.c_attn.bias", hp, i),
                    TG("%sself_attention.query_key_value.bias", l), 1, 3 * H, 0, 1, 3 * H, 0);
            map_add(mp, MAP_T, HF("%sh.%" PRId64 ".attn.c_proj.weight", hp, i), TG("%sself_attention.dense.weight", l),
                    2, H, H, 2, H, H);
            map_same(mp, HF("%sh.%" PRId64 ".attn.c_proj.bias", hp, i), TG("%sself_attention.dense.bias", l), 1, H, 0);
            map_same(mp, HF("%sh.%" PRId64 ".ln_2.weight", hp, i), TG("%spost_attention_layernorm.weight", l), 1, H, 0);
            map_same(mp, HF("%sh.%" PRId64 ".ln_2.bias", hp, i), TG("%spost_attention_layernorm.bias", l), 1, H, 0);
            map_add(mp, MAP_T, HF("%sh.%" PRId64 ".mlp.c_fc.weight", hp, i), TG("%smlp.dense_h_to_4h.weight", l), 2, H,
                    F, 2, F, H);
            map_same(mp, HF("%sh.%" PRId64 ".mlp.c_fc.bias", hp, i), TG("%smlp.dense_h_to_4h.bias", l), 1, F, 0);
            map_add(mp, MAP_T, HF("%sh.%" PRId64 ".mlp.c_proj.weight", hp, i), TG("%smlp.dense_4h_to_h.weight", l), 2, F,
                    H, 2, H, F);
            map_same(mp, HF("%sh.%" PRId64 ".mlp.c_proj.bias", hp, i), TG("%smlp.dense_4h_to_h.bias", l), 1, H, 0);
        }
        map_same(mp, HF("%sln_f.weight", hp), "final_layernorm.weight", 1, H, 0);
        map_same(mp, HF("%sln_f.bias", hp), "final_layernorm.bias", 1, H, 0);
    } else {
        int64_t qkv = (m->heads + 2 * m->kv_heads) * hd;
        map_same(mp, HF("%sembed_tokens.weight", hp), "embedding.word_embeddings.weight", 2, V, H);
        for (int64_t i = 0; i < m->layers; i++) {
            char l[32];
            snprintf(l, sizeof l, "layers.%" PRId64 ".", i);
            const char *q = TG("%sself_attention.query_key_value.weight", l);
            char qn[128];
            snprintf(qn, sizeof qn, "%s", q);
            map_add(mp, MAP_LLAMA_Q, HF("%slayers.%" PRId64 ".self_attn.q_proj.weight", hp, i), qn, 2, m->heads * hd, H,
                    2, qkv, H);
            map_add(mp, MAP_LLAMA_K, HF("%slayers.%" PRId64 ".self_attn.k_proj.weight", hp, i), qn, 2,
                    m->kv_heads * hd, H, 2, qkv, H);
            map_add(mp, MAP_LLAMA_V, HF("%slayers.%" PRId64 ".self_attn.v_proj.weight", hp, i), qn, 2,
                    m->kv_heads * hd, H, 2, qkv, H);
            if (m->qkv_bias) { /* packed as the weight's rows */
                char bn[128];
                snprintf(bn, sizeof bn, "%sself_attention.query_key_value.bias", l);
                map_add(mp, MAP_LLAMA_Q, HF("%slayers.%" PRId64 ".self_attn.q_proj.bias", hp, i), bn, 1, m->heads * hd,
                        0, 1, qkv, 0);
                map_add(mp, MAP_LLAMA_K, HF("%slayers.%" PRId64 ".self_attn.k_proj.bias", hp, i), bn, 1,
                        m->kv_heads * hd, 0, 1, qkv, 0);
                map_add(mp, MAP_LLAMA_V, HF("%slayers.%" PRId64 ".self_attn.v_proj.bias", hp, i), bn, 1,
                        m->kv_heads * hd, 0, 1, qkv, 0);
            }
            map_same(mp, HF("%slayers.%" PRId64 ".self_attn.o_proj.weight", hp, i), TG("%sself_attention.dense.weight", l),
                     2, H, H);
            map_same(mp, HF("%slayers.%" PRId64 ".mlp.gate_proj.weight", hp, i), TG("%smlp.gate_proj.weight", l), 2, F, H);
            map_same(mp, HF("%slayers.%" PRId64 ".mlp.up_proj.weight", hp, i), TG("%smlp.up_proj.weight", l), 2, F, H);
            map_same(mp, HF("%slayers.%" PRId64 ".mlp.down_proj.weight", hp, i), TG("%smlp.down_proj.weight", l), 2, H, F);
            map_same(mp, HF("%slayers.%" PRId64 ".input_layernorm.weight", hp, i), TG("%sinput_layernorm.weight", l), 1,
                     H, 0);
            map_same(mp, HF("%slayers.%" PRId64 ".post_attention_layernorm.weight", hp, i),
                     TG("%spost_attention_layernorm.weight", l), 1, H, 0);
        }
        map_same(mp, HF("%snorm.weight", hp), "final_layernorm.weight", 1, H, 0);
    }
    if (!m->tied) map_same(mp, "lm_head.weight", "output_layer.weight", 2, V, H);
#undef HF
#undef TG
}

int64_t hf_shape_numel(int rank, const int64_t *s)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= s[i];
    return n;
}

void hf_shape_text(char *out, size_t cap, int rank, const int64_t *s)
{
    size_t at = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < rank && at < cap; i++) at += (size_t)snprintf(out + at, cap - at, "%s%" PRId64, i ? ", " : "", s[i]);
    if (at < cap) snprintf(out + at, cap - at, "]");
}

/* ---- reading the checkpoint ------------------------------------------------------ */

typedef struct hf_src {
    tgc_st_file **files;
    int nfiles;
} hf_src;

static void src_close(hf_src *s)
{
    for (int i = 0; i < s->nfiles; i++) tgc_st_close(s->files[i]);
    free(s->files);
    s->files = NULL;
    s->nfiles = 0;
}

static const tgc_st_info *src_find(const hf_src *s, const char *name, const tgc_st_file **in)
{
    for (int i = 0; i < s->nfiles; i++) {
        const tgc_st_info *t = tgc_st_find(s->files[i], name);
        if (t) {
            if (in) *in = s->files[i];
            return t;
        }
    }
    return NULL;
}

/* Whether a tensor of the checkpoint is named prefix...: its names are a
 * full model's ("transformer.", "model."), not a base model's. */
static bool src_has_prefix(const hf_src *s, const char *prefix)
{
    size_t n = strlen(prefix);
    for (int f = 0; f < s->nfiles; f++)
        for (int i = 0; i < tgc_st_count(s->files[f]); i++)
            if (strncmp(tgc_st_at(s->files[f], i)->name, prefix, n) == 0) return true;
    return false;
}

bool hf_file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* The shards model.safetensors.index.json names, each opened once, every
 * weight_map entry checked to be in its file. */
static bool src_open_index(hf_src *s, const char *index, diag *d)
{
    json_doc *doc = json_read_file(index, d);
    if (!doc) return false;
    const json_value *wm = json_get(doc->root, "weight_map");
    bool ok = wm && wm->kind == JSON_OBJECT && wm->n > 0;
    if (!ok) diag_error(d, doc->root->loc, "no \"weight_map\" object (tensor name -> shard file)");
    const char **names = xcalloc((size_t)(wm ? wm->n : 0) + 1, sizeof *names);
    s->files = xcalloc((size_t)(wm ? wm->n : 0) + 1, sizeof *s->files);
    for (int i = 0; ok && i < wm->n; i++) {
        const json_value *f = wm->items[i];
        char *p = f->kind == JSON_STRING ? path_beside(index, f->str) : NULL;
        if (!p) {
            diag_error(d, f->loc, "\"%s\": a shard is a file name in the checkpoint's directory", wm->keys[i]);
            ok = false;
            break;
        }
        int k = 0;
        while (k < s->nfiles && strcmp(names[k], f->str) != 0) k++;
        if (k == s->nfiles) {
            s->files[k] = tgc_st_open(p, d);
            if (!s->files[k]) { ok = false; free(p); break; }
            names[s->nfiles++] = f->str;
        }
        free(p);
        if (!tgc_st_find(s->files[k], wm->keys[i])) {
            diag_error(d, f->loc, "tensor '%s' is not in %s, which the index names for it", wm->keys[i], f->str);
            ok = false;
        }
    }
    free(names);
    json_free(doc);
    return ok;
}

static bool src_open(hf_src *s, const char *dir, diag *d)
{
    memset(s, 0, sizeof *s);
    char *index = path_join(dir, "model.safetensors.index.json"), *single = path_join(dir, "model.safetensors");
    bool ok;
    if (hf_file_exists(single)) {
        s->files = xcalloc(1, sizeof *s->files);
        ok = (s->files[0] = tgc_st_open(single, d)) != NULL;
        s->nfiles = ok;
    } else if (hf_file_exists(index)) {
        ok = src_open_index(s, index, d);
    } else {
        char *bin = path_join(dir, "pytorch_model.bin");
        diag_error_plain(d, "import hf: '%s' has neither model.safetensors nor model.safetensors.index.json%s", dir,
                         hf_file_exists(bin) ? " (only pytorch_model.bin: tgc reads safetensors; save the model with "
                                            "save_pretrained(..., safe_serialization=True))" : "");
        free(bin);
        ok = false;
    }
    free(index);
    free(single);
    if (!ok) src_close(s);
    return ok;
}

/* Tensors a checkpoint may hold that are not weights: GPT-2's causal-mask
 * buffers, LLaMA's rotary frequencies (older transformers saved them). */
static bool ignorable(const char *name)
{
    size_t n = strlen(name);
    static const char *const tails[] = {".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq"};
    for (size_t i = 0; i < ARRAY_LEN(tails); i++) {
        size_t k = strlen(tails[i]);
        if (n >= k && strcmp(name + n - k, tails[i]) == 0) return true;
    }
    return false;
}

/* Elements [at, at + n) of t as f32. */
static void read_f32(const tgc_st_info *t, int64_t at, float *out, int64_t n)
{
    const unsigned char *p = (const unsigned char *)t->data + at * tgc_st_dtype_size(t->dtype);
    switch (t->dtype) {
    case TGC_ST_F32: memcpy(out, p, (size_t)n * 4); break;
    case TGC_ST_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint32_t bits = (uint32_t)(p[2 * i] | p[2 * i + 1] << 8) << 16;
            memcpy(&out[i], &bits, 4);
        }
        break;
    case TGC_ST_F16:
        for (int64_t i = 0; i < n; i++) {
            unsigned h = (unsigned)(p[2 * i] | p[2 * i + 1] << 8);
            int e = (h >> 10) & 31, f = h & 1023;
            float v = e == 0 ? ldexpf((float)f, -24) : e == 31 ? (f ? NAN : INFINITY) : ldexpf((float)(f | 1024), e - 25);
            out[i] = h & 0x8000 ? -v : v;
        }
        break;
    case TGC_ST_F64:
        for (int64_t i = 0; i < n; i++) {
            double v;
            memcpy(&v, p + 8 * i, 8);
            out[i] = (float)v;
        }
        break;
    default: break;
    }
}

/* ---- import --------------------------------------------------------------------- */

/* The checkpoint's tensor for entry x, checked to exist with a dtype tgc
 * reads and the shape config.json gives it; *in receives its file. */
static const tgc_st_info *entry_source(const hf_model *m, const hf_src *s, const hf_entry *x,
                                       const tgc_st_file **in, diag *d)
{
    const tgc_st_info *t = src_find(s, x->hf, in);
    if (!t) {
        diag_error_plain(d, "import hf: the checkpoint has no tensor '%s' (a %s model with these settings needs it)",
                         x->hf, m->model_type);
        return NULL;
    }
    src_loc at = {.file = tgc_st_path(*in)};
    if (t->dtype != TGC_ST_F32 && t->dtype != TGC_ST_BF16 && t->dtype != TGC_ST_F16 && t->dtype != TGC_ST_F64) {
        diag_error(d, at, "tensor '%s' has dtype %s; tgc imports F32, BF16, F16 and F64", x->hf,
                   tgc_st_dtype_name(t->dtype));
        return NULL;
    }
    bool same = t->rank == x->rank;
    for (int i = 0; same && i < x->rank; i++) same = t->shape[i] == x->shape[i];
    if (!same) {
        char have[96], want[96];
        hf_shape_text(have, sizeof have, t->rank, t->shape);
        hf_shape_text(want, sizeof want, x->rank, x->shape);
        diag_error(d, at, "tensor '%s' has shape %s; config.json makes it %s", x->hf, have, want);
        return NULL;
    }
    return t;
}

/* The elements converted per step: the checkpoint's tensor is read in
 * pieces of this size, so the import holds one output tensor at a time. */
#define IMPORT_CHUNK 65536

/* Every Hugging Face tensor of the output tensor `name` (LLaMA's q, k and
 * v make one) scattered into dst; each one's pages of the mapped shard are
 * dropped after use, so a checkpoint larger than memory streams through. */
static void import_tensor(const hf_model *m, const hf_src *s, const hf_map *mp, const char *name, float *dst,
                          float *chunk)
{
    for (int k = 0; k < mp->n; k++) {
        const hf_entry *x = &mp->e[k];
        if (strcmp(x->tgc, name) != 0) continue;
        const tgc_st_file *in = NULL;
        const tgc_st_info *t = src_find(s, x->hf, &in); /* checked by entry_source */
        int64_t n = hf_shape_numel(x->rank, x->shape);
        for (int64_t at = 0; at < n; at += IMPORT_CHUNK) {
            int64_t c = n - at < IMPORT_CHUNK ? n - at : IMPORT_CHUNK;
            read_f32(t, at, chunk, c);
            for (int64_t e = 0; e < c; e++) dst[hf_map_index(m, x, at + e)] = chunk[e];
        }
        tgc_st_release(in, t);
    }
}

/* The output tensors (tgc's), in the order the entries first name them. */
static int import_outputs(const hf_map *mp, tgc_st_tensor *ts)
{
    int n = 0;
    for (int k = 0; k < mp->n; k++) {
        const hf_entry *x = &mp->e[k];
        bool seen = false;
        for (int i = 0; !seen && i < n; i++) seen = strcmp(ts[i].name, x->tgc) == 0;
        if (!seen) ts[n++] = (tgc_st_tensor){x->tgc, TGC_ST_F32, x->tgc_rank, x->tgc_shape, NULL};
    }
    return n;
}

/* The weights file: its header from the outputs' shapes, then tensor by
 * tensor in its data order, each built in one buffer of the largest. */
static bool import_write(const hf_model *m, const hf_src *s, const hf_map *mp, const char *out, const tgc_st_kv *meta,
                         int nmeta, diag *d)
{
    tgc_st_tensor *ts = xcalloc((size_t)mp->n + 1, sizeof *ts);
    int n = import_outputs(mp, ts);
    int64_t most = 0;
    int big = 0;
    for (int i = 0; i < n; i++) {
        int64_t e = hf_shape_numel(ts[i].rank, ts[i].shape);
        if (e > most) { most = e; big = i; }
    }
    /* The buffers first: running out of memory is an error that names
     * the tensor, before any file is begun. */
    size_t bytes = (size_t)(most ? most : 1) * sizeof(float);
    float *buf = malloc(bytes), *chunk = buf ? malloc(IMPORT_CHUNK * sizeof *chunk) : NULL;
    if (!buf || !chunk) {
        diag_error(d, (src_loc){.file = out}, "import hf: cannot allocate %zu bytes for the tensor '%s'",
                   buf ? (size_t)IMPORT_CHUNK * sizeof *chunk : bytes, n ? ts[big].name : "");
        free(buf);
        free(ts);
        return false;
    }
    tgc_st_writer *w = tgc_st_writer_open(out, ts, n, meta, nmeta, d);
    bool ok = w != NULL;
    for (int i; ok && (i = tgc_st_writer_next(w)) >= 0;) {
        memset(buf, 0, (size_t)hf_shape_numel(ts[i].rank, ts[i].shape) * sizeof *buf);
        import_tensor(m, s, mp, ts[i].name, buf, chunk);
        ok = tgc_st_writer_put(w, buf);
    }
    ok = tgc_st_writer_finish(w, true) && ok;
    free(chunk);
    free(buf);
    free(ts);
    return ok;
}

/* Every tensor of the checkpoint is mapped, or known not to be a weight. */
static bool check_unused(const hf_model *m, const hf_src *s, const hf_map *mp, diag *d)
{
    bool ok = true;
    for (int f = 0; f < s->nfiles; f++)
        for (int i = 0; i < tgc_st_count(s->files[f]); i++) {
            const char *name = tgc_st_at(s->files[f], i)->name;
            bool used = ignorable(name) || (m->tied && strcmp(name, "lm_head.weight") == 0);
            for (int k = 0; !used && k < mp->n; k++) used = strcmp(mp->e[k].hf, name) == 0;
            if (!used) {
                diag_error(d, (src_loc){.file = tgc_st_path(s->files[f])}, "tensor '%s' is not part of a %s model "
                           "with config.json's settings (%s)", name, m->model_type,
                           strstr(name, "bias") ? "biases the config does not declare?" : "an unsupported option?");
                ok = false;
            }
        }
    return ok;
}

bool hf_import(const char *dir, const hf_model *m, const char *model_name, const char *out, const char **tok_type,
               diag *d)
{
    hf_src s;
    *tok_type = NULL;
    if (!src_open(&s, dir, d)) return false;
    const char *hp = m->family == HF_GPT2 ? "transformer." : "model.";
    char probe[64];
    snprintf(probe, sizeof probe, "%s%s", hp, m->family == HF_GPT2 ? "wte.weight" : "embed_tokens.weight");
    if (!src_find(&s, probe, NULL) && !src_has_prefix(&s, hp)) hp = ""; /* a base model's names (GPT-2's own) */
    /* Every layer has tensors of its own: a config claiming more layers than
     * the checkpoint has tensors is refused before anything is built. */
    int64_t have = 0;
    for (int f = 0; f < s.nfiles; f++) have += tgc_st_count(s.files[f]);
    if (m->layers > have) {
        diag_error_plain(d, "import hf: config.json says %" PRId64 " layers, but the checkpoint holds only %" PRId64
                         " tensors", m->layers, have);
        src_close(&s);
        return false;
    }
    hf_map mp = {0};
    hf_map_build(m, hp, &mp);
    bool ok = check_unused(m, &s, &mp, d);
    bool unused_ok = ok;
    for (int i = 0; unused_ok && i < mp.n; i++) { /* every missing or mismatched tensor, by name */
        const tgc_st_file *in;
        ok = entry_source(m, &s, &mp.e[i], &in, d) != NULL && ok;
    }
    tgc_st_kv meta[12];
    int nmeta = 0, nkeep = 0;
    char *keep[4], bos[24], eos[24];
    meta[nmeta++] = (tgc_st_kv){"model", model_name};
    meta[nmeta++] = (tgc_st_kv){"producer", "tgc"};
    meta[nmeta++] = (tgc_st_kv){"tgc.hf_model_type", m->model_type};
    if (m->bos >= 0) { snprintf(bos, sizeof bos, "%" PRId64, m->bos); meta[nmeta++] = (tgc_st_kv){"tgc.bos_token_id", bos}; }
    if (m->eos >= 0) { snprintf(eos, sizeof eos, "%" PRId64, m->eos); meta[nmeta++] = (tgc_st_kv){"tgc.eos_token_id", eos}; }
    if (ok) ok = hf_import_tokenizer(dir, m, out, meta, &nmeta, keep, &nkeep, tok_type, d);
    ok = ok && import_write(m, &s, &mp, out, meta, nmeta, d);
    for (int i = 0; i < nkeep; i++) free(keep[i]);
    free(mp.e);
    src_close(&s);
    return ok;
}
