/* Hugging Face checkpoints <-> tgc (runtime/io/hf.h). */
#include "runtime/io/hf.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/backend/half.h"
#include "runtime/io/json.h"
#include "tokenizer/tokenizer.h"
#include "support/file.h"

/* ---- config.json ---------------------------------------------------------------- */

typedef struct cfg {
    const json_value *root;
    const char *path;
    diag *d;
    bool ok;
} cfg;

static void cfg_error(cfg *c, const json_value *v, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cfg_error(cfg *c, const json_value *v, const char *fmt, ...)
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
static int64_t cfg_int(cfg *c, const char *key, int64_t def, bool zero_ok)
{
    const json_value *v = json_get(c->root, key);
    if (!v || (v->kind == JSON_NULL && def >= 0)) {
        if (def < 0) cfg_error(c, NULL, "config.json has no \"%s\"", key);
        return def;
    }
    if (v->kind != JSON_NUMBER || !v->is_int || v->i < (zero_ok ? 0 : 1) || v->i > ((int64_t)1 << 40)) {
        cfg_error(c, v, "\"%s\" must be an integer %s", key, zero_ok ? ">= 0" : "> 0");
        return def < 0 ? 1 : def;
    }
    return v->i;
}

static double cfg_num(cfg *c, const char *key, double def, double lo, double hi)
{
    const json_value *v = json_get(c->root, key);
    if (!v || v->kind == JSON_NULL) return def;
    if (v->kind != JSON_NUMBER || !(v->num >= lo && v->num <= hi)) {
        cfg_error(c, v, "\"%s\" must be a number from %g to %g", key, lo, hi);
        return def;
    }
    return v->num;
}

static bool cfg_bool(cfg *c, const char *key, bool def)
{
    const json_value *v = json_get(c->root, key);
    if (!v || v->kind == JSON_NULL) return def;
    if (v->kind != JSON_BOOL) {
        cfg_error(c, v, "\"%s\" must be true or false", key);
        return def;
    }
    return v->b;
}

static const char *cfg_str(cfg *c, const char *key, const char *def)
{
    const json_value *v = json_get(c->root, key);
    if (!v || v->kind == JSON_NULL) return def;
    if (v->kind != JSON_STRING) {
        cfg_error(c, v, "\"%s\" must be a string", key);
        return def;
    }
    return v->str;
}

/* A member that must be absent, null, or equal to `want` (a bool). */
static void cfg_refuse_bool(cfg *c, const char *key, bool want, const char *why)
{
    const json_value *v = json_get(c->root, key);
    if (!v || v->kind == JSON_NULL) return;
    if (v->kind != JSON_BOOL || v->b != want)
        cfg_error(c, v, "\"%s\": %s is not supported: %s", key, v->kind == JSON_BOOL ? (v->b ? "true" : "false")
                  : json_kind_name(v->kind), why);
}

/* A member that must be absent or null. */
static void cfg_refuse_set(cfg *c, const char *key, const char *why)
{
    const json_value *v = json_get(c->root, key);
    if (v && v->kind != JSON_NULL) cfg_error(c, v, "\"%s\" is set (not null): %s", key, why);
}

static void cfg_gpt2(cfg *c, hf_model *m)
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
    else cfg_error(c, json_get(c->root, "activation_function"), "\"activation_function\": \"%s\" is not supported "
                   "(tgc's gelu is gelu_new / gelu_pytorch_tanh, the tanh form, or gelu, the erf form)", act);
    cfg_refuse_bool(c, "scale_attn_weights", true, "tgc's attention scales the scores by 1/sqrt(head_dim)");
    cfg_refuse_bool(c, "scale_attn_by_inverse_layer_idx", false, "gpt.tg scales every layer's scores alike");
    cfg_refuse_bool(c, "add_cross_attention", false, "gpt.tg is a decoder without cross-attention");
}

static void cfg_llama(cfg *c, hf_model *m)
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
        cfg_error(c, json_get(c->root, "hidden_act"), "\"hidden_act\": \"%s\" is not supported (llama.tg's MLP is "
                  "SwiGLU: silu)", act);
    cfg_refuse_set(c, "rope_scaling", "llama.tg's rope has no scaling (linear, dynamic, yarn, llama3)");
    cfg_refuse_bool(c, "attention_bias", false, "llama.tg's projections have no biases");
    cfg_refuse_bool(c, "mlp_bias", false, "llama.tg's MLP has no biases");
    double drop = cfg_num(c, "attention_dropout", 0.0, 0, 1);
    if (drop != 0.0)
        cfg_error(c, json_get(c->root, "attention_dropout"), "\"attention_dropout\": %g is not supported (llama.tg "
                  "has no attention dropout)", drop);
    if (strcmp(m->model_type, "mistral") == 0) {
        const json_value *sw = json_get(c->root, "sliding_window");
        if (!sw || sw->kind != JSON_NULL)
            cfg_error(c, sw, "\"sliding_window\"%s: sliding-window attention is not supported (tgc's attention is "
                      "causal over the whole sequence); a Mistral model without one has \"sliding_window\": null",
                      sw ? " is set" : " is absent (transformers' MistralConfig then uses 4096)");
    }
    if (c->ok && m->hidden % m->heads == 0) {
        int64_t hd = cfg_int(c, "head_dim", m->hidden / m->heads, false);
        if (hd != m->hidden / m->heads)
            cfg_error(c, json_get(c->root, "head_dim"), "\"head_dim\": %" PRId64 " is not supported: llama.tg's head "
                      "dimension is hidden_size / num_attention_heads = %" PRId64, hd, m->hidden / m->heads);
    }
    if (c->ok && m->heads % m->kv_heads != 0)
        cfg_error(c, json_get(c->root, "num_key_value_heads"), "\"num_key_value_heads\": %" PRId64 " does not divide "
                  "num_attention_heads %" PRId64, m->kv_heads, m->heads);
}

static int64_t cfg_token(cfg *c, const char *key)
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
    cfg c = {doc ? doc->root : NULL, diag_intern(path), d, doc != NULL};
    free(path);
    if (c.ok && doc->root->kind != JSON_OBJECT) cfg_error(&c, doc->root, "config.json must be a JSON object");
    const char *type = c.ok ? cfg_str(&c, "model_type", NULL) : NULL;
    if (c.ok && !type) cfg_error(&c, NULL, "config.json has no \"model_type\" (tgc imports gpt2, llama, mistral)");
    if (c.ok) {
        snprintf(m->model_type, sizeof m->model_type, "%s", type);
        if (strcmp(type, "gpt2") == 0) cfg_gpt2(&c, m);
        else if (strcmp(type, "llama") == 0 || strcmp(type, "mistral") == 0) cfg_llama(&c, m);
        else cfg_error(&c, json_get(c.root, "model_type"), "\"model_type\": \"%s\" is not supported (tgc imports "
                       "gpt2, llama and mistral)", type);
    }
    if (c.ok && m->hidden % m->heads != 0)
        cfg_error(&c, NULL, "the hidden size %" PRId64 " is not a multiple of the %" PRId64 " heads", m->hidden,
                  m->heads);
    m->bos = c.ok ? cfg_token(&c, "bos_token_id") : -1;
    m->eos = c.ok ? cfg_token(&c, "eos_token_id") : -1;
    json_free(doc);
    return c.ok;
}

/* ---- the mapping ---------------------------------------------------------------- */

typedef enum map_kind { MAP_COPY, MAP_T, MAP_GPT2_QKV_W, MAP_GPT2_QKV_B, MAP_LLAMA_Q, MAP_LLAMA_K, MAP_LLAMA_V } map_kind;

/* One Hugging Face tensor and the tgc tensor its elements go to. */
typedef struct hf_entry {
    char hf[128], tgc[128];
    map_kind kind;
    int rank, tgc_rank;
    int64_t shape[2], tgc_shape[2];
} hf_entry;

typedef struct hf_map {
    hf_entry *e;
    int n, cap;
} hf_map;

static void map_add(hf_map *mp, map_kind k, const char *hf, const char *tgc, int rank, int64_t d0, int64_t d1,
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
static void map_build(const hf_model *m, const char *hp, hf_map *mp)
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

/* The tgc element that element e of entry x's Hugging Face tensor is. */
static inline int64_t map_index(const hf_model *m, const hf_entry *x, int64_t e)
{
    int64_t H = m->hidden, hd = m->hidden / m->heads, grp = m->heads / m->kv_heads;
    switch (x->kind) {
    case MAP_COPY: return e;
    case MAP_T: { /* HF [a, b] -> tgc [b, a] */
        int64_t a = x->shape[0], b = x->shape[1], i = e / b, j = e % b;
        (void)a;
        return j * x->shape[0] + i;
    }
    case MAP_GPT2_QKV_W:
    case MAP_GPT2_QKV_B: { /* column c of [q | k | v] -> row h*3hd + p*hd + dd */
        int64_t c = x->kind == MAP_GPT2_QKV_W ? e % (3 * H) : e, i = x->kind == MAP_GPT2_QKV_W ? e / (3 * H) : 0;
        int64_t p = c / H, h = (c % H) / hd, dd = c % hd, r = h * 3 * hd + p * hd + dd;
        return x->kind == MAP_GPT2_QKV_W ? r * H + i : r;
    }
    case MAP_LLAMA_Q:
    case MAP_LLAMA_K:
    case MAP_LLAMA_V: { /* row of q/k/v -> row of the group-packed weight */
        int64_t row = e / H, col = e % H, head = row / hd, dd = row % hd, r;
        if (x->kind == MAP_LLAMA_Q) r = (head / grp) * (grp + 2) * hd + (head % grp) * hd + dd;
        else r = head * (grp + 2) * hd + (x->kind == MAP_LLAMA_K ? grp : grp + 1) * hd + dd;
        return r * H + col;
    }
    }
    return e;
}

static int64_t shape_numel(int rank, const int64_t *s)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= s[i];
    return n;
}

static void shape_text(char *out, size_t cap, int rank, const int64_t *s)
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

static bool file_exists(const char *path)
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
    if (file_exists(single)) {
        s->files = xcalloc(1, sizeof *s->files);
        ok = (s->files[0] = tgc_st_open(single, d)) != NULL;
        s->nfiles = ok;
    } else if (file_exists(index)) {
        ok = src_open_index(s, index, d);
    } else {
        char *bin = path_join(dir, "pytorch_model.bin");
        diag_error_plain(d, "import hf: '%s' has neither model.safetensors nor model.safetensors.index.json%s", dir,
                         file_exists(bin) ? " (only pytorch_model.bin: tgc reads safetensors; save the model with "
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

/* ---- files ---------------------------------------------------------------------- */

/* Writes n bytes to path atomically (file_write_atomic). */
static bool write_file(const char *path, const void *data, size_t n, diag *d)
{
    char why[256];
    bool ok = file_write_atomic(path, data, n, why, sizeof why);
    if (!ok) diag_error(d, (src_loc){.file = path}, "cannot write: %s", why);
    return ok;
}

/* A tokenizer's files (from[1] NULL for SentencePiece: one file), read
 * once (a symlink followed: the hub cache's snapshots link into blobs),
 * loaded from those bytes with tgc's own loader and only then written to
 * to[]: what tgc carries, tgc reads back. made[] (non-NULL) holds files
 * derived here instead of read; from[] names them in messages. */
static bool carry_tokenizer(bool bpe, const char *const from[2], const strbuf *made, const char *const to[2], diag *d)
{
    char *text[2] = {NULL, NULL}, why[256];
    const char *bytes[2] = {NULL, NULL};
    size_t len[2] = {0, 0};
    int n = bpe ? 2 : 1;
    bool ok = true;
    for (int i = 0; ok && i < n; i++) {
        if (made) {
            bytes[i] = made[i].s ? made[i].s : "";
            len[i] = made[i].len;
        } else if (!(bytes[i] = text[i] = file_read(from[i], FILE_TEXT, &len[i], why, sizeof why))) {
            diag_error(d, (src_loc){.file = from[i]}, "cannot read: %s", why);
            ok = false;
        }
    }
    ok = ok && tokenizer_files_check(bpe ? TGC_TOKENIZER_GPT2BPE : TGC_TOKENIZER_SENTENCEPIECE, from, bytes, len, d);
    for (int i = 0; ok && i < n; i++) ok = write_file(to[i], bytes[i], len[i], d);
    free(text[0]);
    free(text[1]);
    return ok;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
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
        shape_text(have, sizeof have, t->rank, t->shape);
        shape_text(want, sizeof want, x->rank, x->shape);
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
        int64_t n = shape_numel(x->rank, x->shape);
        for (int64_t at = 0; at < n; at += IMPORT_CHUNK) {
            int64_t c = n - at < IMPORT_CHUNK ? n - at : IMPORT_CHUNK;
            read_f32(t, at, chunk, c);
            for (int64_t e = 0; e < c; e++) dst[map_index(m, x, at + e)] = chunk[e];
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
        int64_t e = shape_numel(ts[i].rank, ts[i].shape);
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
        memset(buf, 0, (size_t)shape_numel(ts[i].rank, ts[i].shape) * sizeof *buf);
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

/* ---- tokenizer.json (the `tokenizers` library's file) -------------------------------- */

/* A JSON string as Python's json.dumps(..., ensure_ascii=False) writes it. */
static void py_json_string(strbuf *b, const char *s)
{
    sb_putc(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': sb_puts(b, "\\\""); break;
        case '\\': sb_puts(b, "\\\\"); break;
        case '\n': sb_puts(b, "\\n"); break;
        case '\r': sb_puts(b, "\\r"); break;
        case '\t': sb_puts(b, "\\t"); break;
        case '\b': sb_puts(b, "\\b"); break;
        case '\f': sb_puts(b, "\\f"); break;
        default:
            if (*p < 0x20) sb_printf(b, "\\u%04x", *p);
            else sb_putc(b, (char)*p);
        }
    }
    sb_putc(b, '"');
}

typedef struct tj_token {
    const char *key;
    int64_t id;
} tj_token;

static int tj_token_by_key(const void *a, const void *b)
{
    return strcmp(((const tj_token *)a)->key, ((const tj_token *)b)->key);
}

/* Member key of obj is absent, null, or the string want (want NULL: absent or null only; "" also matches null). */
static void tj_want_str(cfg *c, const json_value *obj, const char *where, const char *key, const char *want)
{
    const json_value *v = json_get(obj, key);
    if (!v || v->kind == JSON_NULL) return;
    if (!want || v->kind != JSON_STRING || strcmp(v->str, want) != 0)
        cfg_error(c, v, "%s.%s is %s%s%s: tgc's GPT2BPETokenizer (GPT-2's byte-level BPE) has %s%s%s", where, key,
                  v->kind == JSON_STRING ? "\"" : "", v->kind == JSON_STRING ? v->str : json_kind_name(v->kind),
                  v->kind == JSON_STRING ? "\"" : "", want ? "\"" : "none", want ? want : "", want ? "\"" : "");
}

static void tj_want_bool(cfg *c, const json_value *obj, const char *where, const char *key, bool want)
{
    const json_value *v = json_get(obj, key);
    if (v && v->kind != JSON_NULL && (v->kind != JSON_BOOL || v->b != want))
        cfg_error(c, v, "%s.%s is %s: tgc's GPT2BPETokenizer (GPT-2's byte-level BPE) has %s", where, key,
                  v->kind == JSON_BOOL ? (v->b ? "true" : "false") : json_kind_name(v->kind), want ? "true" : "false");
}

/* A component (pre_tokenizer, decoder, post_processor) that is absent, null
 * or {"type": "ByteLevel", ...} with GPT-2's options. */
static void tj_byte_level(cfg *c, const json_value *root, const char *key, bool null_ok)
{
    const json_value *v = json_get(root, key);
    if ((!v || v->kind == JSON_NULL) && null_ok) return;
    const json_value *t = v && v->kind == JSON_OBJECT ? json_get(v, "type") : NULL;
    if (!t || t->kind != JSON_STRING || strcmp(t->str, "ByteLevel") != 0) {
        cfg_error(c, t ? t : v, "%s is %s%s%s, not GPT-2's ByteLevel: tgc carries a tokenizer.json only as "
                  "GPT2BPETokenizer (byte-level BPE)", key, t && t->kind == JSON_STRING ? "\"" : "",
                  t && t->kind == JSON_STRING ? t->str : v ? json_kind_name(v->kind) : "absent",
                  t && t->kind == JSON_STRING ? "\"" : "");
        return;
    }
    if (strcmp(key, "pre_tokenizer") == 0) {
        tj_want_bool(c, v, key, "add_prefix_space", false);
        tj_want_bool(c, v, key, "use_regex", true);
    }
}

/* model.merges as merges.txt lines: each one a pair of tokens without
 * spaces or line breaks (what merges.txt can hold, one a line), else
 * refused at its entry. */
static void tj_merges(cfg *cp, const json_value *m, strbuf *merges)
{
    for (int i = 0; cp->ok && i < m->n; i++) {
        const json_value *e = m->items[i];
        const char *a = NULL, *b = NULL;
        if (e->kind == JSON_STRING) { /* "a b" (tokenizers before 0.20) */
            const char *sp = strchr(e->str, ' ');
            if (sp && sp != e->str && sp[1] && !strchr(sp + 1, ' ') && !strpbrk(e->str, "\r\n")) {
                sb_puts(merges, e->str);
                sb_putc(merges, '\n');
                continue;
            }
        } else if (e->kind == JSON_ARRAY && e->n == 2 && e->items[0]->kind == JSON_STRING &&
                   e->items[1]->kind == JSON_STRING) { /* ["a", "b"] (0.20 and later) */
            a = e->items[0]->str;
            b = e->items[1]->str;
        }
        if (!a || !*a || !*b || strpbrk(a, " \r\n") || strpbrk(b, " \r\n")) {
            cfg_error(cp, e, "model.merges[%d] is not a pair of tokens without spaces or line breaks (merges.txt's "
                      "\"a b\", one a line)", i);
            break;
        }
        sb_printf(merges, "%s %s\n", a, b);
    }
}

/* tokenizer.json's byte-level BPE as GPT-2's slow files, byte for byte as
 * transformers' GPT2Tokenizer.save_vocabulary writes them: vocab.json
 * (json.dumps(vocab, indent=2, sort_keys=True, ensure_ascii=False)) and
 * merges.txt ("#version: 0.2", then the merges by rank). Anything that
 * makes its encoding differ from GPT2BPETokenizer's is refused by name. */
static bool tokenizer_json_bpe(const char *path, strbuf *vocab, strbuf *merges, diag *d)
{
    json_doc *doc = json_read_file(path, d);
    if (!doc) return false;
    cfg c = {doc->root, diag_intern(path), d, true};
    const json_value *root = doc->root, *model = json_get(root, "model");
    if (root->kind != JSON_OBJECT || !model || model->kind != JSON_OBJECT)
        cfg_error(&c, root, "tokenizer.json has no \"model\" object");
    const json_value *type = c.ok ? json_get(model, "type") : NULL;
    if (c.ok && (!type || type->kind != JSON_STRING || strcmp(type->str, "BPE") != 0))
        cfg_error(&c, type ? type : model, "model.type is %s%s%s: tgc carries a tokenizer.json only as "
                  "GPT2BPETokenizer (model.type \"BPE\")", type && type->kind == JSON_STRING ? "\"" : "",
                  type && type->kind == JSON_STRING ? type->str : "absent", type && type->kind == JSON_STRING ? "\"" : "");
    if (c.ok) {
        const json_value *norm = json_get(root, "normalizer");
        if (norm && norm->kind != JSON_NULL) {
            const json_value *nt = json_get(norm, "type");
            cfg_error(&c, norm, "normalizer is %s%s%s: GPT-2's byte-level BPE has none (null)",
                      nt && nt->kind == JSON_STRING ? "\"" : "", nt && nt->kind == JSON_STRING ? nt->str : "set",
                      nt && nt->kind == JSON_STRING ? "\"" : "");
        }
        tj_byte_level(&c, root, "pre_tokenizer", false);
        tj_byte_level(&c, root, "decoder", true);
        tj_byte_level(&c, root, "post_processor", true);
        tj_want_str(&c, model, "model", "dropout", NULL);
        tj_want_str(&c, model, "model", "continuing_subword_prefix", "");
        tj_want_str(&c, model, "model", "end_of_word_suffix", "");
        tj_want_bool(&c, model, "model", "byte_fallback", false);
        tj_want_bool(&c, model, "model", "ignore_merges", false);
    }
    const json_value *v = c.ok ? json_get(model, "vocab") : NULL, *m = c.ok ? json_get(model, "merges") : NULL;
    if (c.ok && (!v || v->kind != JSON_OBJECT)) cfg_error(&c, v ? v : model, "model.vocab is not an object");
    if (c.ok && (!m || m->kind != JSON_ARRAY)) cfg_error(&c, m ? m : model, "model.merges is not an array");
    for (int i = 0; c.ok && i < v->n; i++)
        if (v->items[i]->kind != JSON_NUMBER || !v->items[i]->is_int || v->items[i]->i < 0)
            cfg_error(&c, v->items[i], "model.vocab[\"%s\"] is not a token id (an integer >= 0)", v->keys[i]);
    /* An added token must be the vocabulary's own: GPT-2's slow files have no others. */
    const json_value *added = c.ok ? json_get(root, "added_tokens") : NULL;
    for (int i = 0; c.ok && added && added->kind == JSON_ARRAY && i < added->n; i++) {
        const json_value *a = added->items[i], *content = json_get(a, "content"), *id = json_get(a, "id");
        const json_value *in = content && content->kind == JSON_STRING ? json_get(v, content->str) : NULL;
        if (!in || !id || id->kind != JSON_NUMBER || !id->is_int || in->i != id->i)
            cfg_error(&c, a, "added token %s%s%s is not in model.vocab with its id: GPT2BPETokenizer's vocab.json "
                      "has no added tokens", content && content->kind == JSON_STRING ? "\"" : "",
                      content && content->kind == JSON_STRING ? content->str : "?",
                      content && content->kind == JSON_STRING ? "\"" : "");
    }
    if (c.ok) {
        tj_token *tok = xcalloc((size_t)v->n + 1, sizeof *tok);
        for (int i = 0; i < v->n; i++) tok[i] = (tj_token){v->keys[i], v->items[i]->i};
        qsort(tok, (size_t)v->n, sizeof *tok, tj_token_by_key); /* UTF-8's byte order: Python's code points */
        sb_puts(vocab, v->n ? "{" : "{}");
        for (int i = 0; i < v->n; i++) {
            sb_puts(vocab, i ? ",\n  " : "\n  ");
            py_json_string(vocab, tok[i].key);
            sb_printf(vocab, ": %" PRId64, tok[i].id);
        }
        sb_puts(vocab, v->n ? "\n}\n" : "\n");
        free(tok);
        sb_puts(merges, "#version: 0.2\n");
    }
    if (c.ok) tj_merges(&c, m, merges);
    json_free(doc);
    return c.ok;
}

static const char *const hf_tokenizer_suffix[3] = {".vocab.json", ".merges.txt", ".tokenizer.model"};

char *hf_import_tokenizer_path(const char *weights, int i)
{
    size_t n = strlen(weights);
    size_t stem = n > 12 && strcmp(weights + n - 12, ".safetensors") == 0 ? n - 12 : n;
    strbuf to;
    sb_init(&to);
    sb_putn(&to, weights, stem);
    sb_puts(&to, hf_tokenizer_suffix[i]);
    return to.s;
}

/* The tokenizer files of dir, checked with tgc's loader and copied next
 * to out (hf_import_tokenizer_path), recorded in meta (file names beside
 * out); a tokenizer.json alone becomes GPT-2's vocab.json and merges.txt
 * (tokenizer_json_bpe). */
static bool import_tokenizer(const char *dir, const hf_model *m, const char *out, tgc_st_kv *meta, int *nmeta,
                             char **keep, int *nkeep, const char **type, diag *d)
{
    char *vocab = path_join(dir, "vocab.json"), *merges = path_join(dir, "merges.txt"),
         *spm = path_join(dir, "tokenizer.model"), *tj = path_join(dir, "tokenizer.json");
    bool bpe = file_exists(vocab) && file_exists(merges), sp = file_exists(spm), fast = false;
    if (bpe && sp) bpe = m->family == HF_GPT2;
    strbuf made[2];
    sb_init(&made[0]);
    sb_init(&made[1]);
    bool ok = true;
    if (!bpe && !sp && file_exists(tj)) {
        ok = fast = bpe = tokenizer_json_bpe(tj, &made[0], &made[1], d);
        if (!ok) diag_note(d, (src_loc){.file = diag_intern(tj)}, "the import carries a tokenizer.json only as "
                           "GPT-2's vocab.json and merges.txt; without tokenizer.json the model imports with no "
                           "tokenizer");
    }
    *type = !ok ? NULL : bpe ? "GPT2BPETokenizer" : sp ? "SentencePieceTokenizer" : NULL;
    char *to[2] = {hf_import_tokenizer_path(out, bpe ? 0 : 2), bpe ? hf_import_tokenizer_path(out, 1) : NULL};
    const char *from[2] = {bpe ? vocab : spm, bpe ? merges : NULL};
    if (fast) from[0] = to[0], from[1] = to[1]; /* the derived files, named as they would be written */
    const char *key[2] = {bpe ? "tgc.vocab_file" : "tgc.tokenizer_model", bpe ? "tgc.merge_file" : NULL};
    if (*type) {
        meta[(*nmeta)++] = (tgc_st_kv){"tgc.tokenizer_type", *type};
        ok = carry_tokenizer(bpe, from, fast ? made : NULL, (const char *const *)to, d);
    }
    for (int i = 0; *type && ok && i < 2 && to[i]; i++) {
        keep[(*nkeep)++] = xstrdup(base_name(to[i]));
        meta[(*nmeta)++] = (tgc_st_kv){key[i], keep[*nkeep - 1]};
    }
    if (!ok && *type && fast)
        diag_note(d, (src_loc){.file = diag_intern(tj)}, "the files derived from this tokenizer.json do not load "
                  "(nothing was written)");
    else if (!ok && *type)
        diag_note(d, (src_loc){.file = diag_intern(from[0])}, "the tokenizer files are refused: fix or remove them to "
                  "import the model without a tokenizer");
    free(to[0]);
    free(to[1]);
    sb_free(&made[0]);
    sb_free(&made[1]);
    free(vocab);
    free(merges);
    free(spm);
    free(tj);
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
    map_build(m, hp, &mp);
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
    if (ok) ok = import_tokenizer(dir, m, out, meta, &nmeta, keep, &nkeep, tok_type, d);
    ok = ok && import_write(m, &s, &mp, out, meta, nmeta, d);
    for (int i = 0; i < nkeep; i++) free(keep[i]);
    free(mp.e);
    src_close(&s);
    return ok;
}

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
    sb_puts(b, "   # rope_theta\n\n"
               "input tokens: i32[seq, batch]\n"
               "input labels: i32[seq, batch]\n\n"
               "param embedding.word_embeddings.weight: f32[vocab, hidden] = normal(std)\n\n"
               "block self_attention(x) {\n"
               "    # Per key/value group: its `group` query heads, its key head, its value head.\n"
               "    param query_key_value.weight: f32[(heads + 2 * kv_heads) * head_dim, hidden] = normal(std)\n"
               "    param dense.weight: f32[hidden, hidden] = scaled_normal(std, layers)\n\n"
               "    qkv = linear(x, query_key_value.weight, parallel=column)\n"
               "    qkv = reshape(qkv, [seq, batch, kv_heads, (group + 2) * head_dim])\n"
               "    q = slice(qkv, axis=-1, start=0, len=group * head_dim)\n"
               "    k = slice(qkv, axis=-1, start=group * head_dim, len=head_dim)\n"
               "    v = slice(qkv, axis=-1, start=(group + 1) * head_dim, len=head_dim)\n"
               "    q = reshape(q, [seq, batch, heads, head_dim])\n"
               "    q = rope(q, base=rope_base)\n"
               "    k = rope(k, base=rope_base)\n"
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
              gpt ? "GPT-2 (GPT2LMHeadModel)" : "A LLaMA-family model (LlamaForCausalLM)", source_dir,
              gpt ? "samples/gpt.tg" : "samples/llama.tg", m->model_type,
              gpt ? "Pre-LN, learned positions, GELU MLP." : "RMSNorm, rotate-half RoPE, SwiGLU, grouped-query "
                                                            "attention.");
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

/* The one value attribute `attr` has on every node of op (false when two
 * differ; *n counts the nodes). */
static bool one_attr(const ir_graph *g, ir_op op, const char *attr, double *v, int *n, diag *d)
{
    *n = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *x = g->nodes[i];
        if (x->op != op) continue;
        double a = ir_attr_float(x, attr);
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
            shape_text(want, sizeof want, x->tgc_rank, x->tgc_shape);
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
    snprintf(m->model_type, sizeof m->model_type, "%s", m->family == HF_GPT2 ? "gpt2" : "llama");
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
    }
    if (m->layers <= 0) {
        diag_error_plain(d, "export --format hf: model '%s' has no transformer layers (a `for` loop of blocks named "
                         "layers[i])", g->model);
        return false;
    }
    hf_map mp = {0};
    map_build(m, "", &mp);
    bool ok = check_params(g, &mp, d);
    free(mp.e);
    return ok;
}

/* ---- export --------------------------------------------------------------------- */

bool hf_parse_size(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v > 0)) return false;
    static const struct { const char *unit; double mul; } units[] = {
        {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    for (size_t i = 0; i < ARRAY_LEN(units); i++)
        if (strcasecmp(end, units[i].unit) == 0 && (i < 6 || strcmp(end, units[i].unit) == 0)) {
            double b = v * units[i].mul;
            if (b < 1 || b > 9e18) return false;
            *out = (int64_t)b;
            return true;
        }
    return false;
}

static void json_key(strbuf *b, const char *k, bool *first)
{
    sb_puts(b, *first ? "\n  " : ",\n  ");
    *first = false;
    sb_put_quoted(b, k);
    sb_puts(b, ": ");
}

static void json_num(strbuf *b, const char *k, double v, bool *first)
{
    json_key(b, k, first);
    if (v == floor(v) && fabs(v) < 1e15) sb_printf(b, "%.1f", v);
    else sb_put_double(b, v);
}

static void json_int(strbuf *b, const char *k, int64_t v, bool *first)
{
    json_key(b, k, first);
    sb_printf(b, "%" PRId64, v);
}

static void json_s(strbuf *b, const char *k, const char *v, bool *first)
{
    json_key(b, k, first);
    sb_put_quoted(b, v);
}

static void json_lit(strbuf *b, const char *k, const char *v, bool *first)
{
    json_key(b, k, first);
    sb_puts(b, v);
}

static void config_json(const hf_model *m, tgc_st_dtype dtype, strbuf *b)
{
    bool f = true;
    sb_putc(b, '{');
    if (m->family == HF_GPT2) {
        json_s(b, "activation_function", m->gelu_erf ? "gelu" : "gelu_new", &f);
        json_lit(b, "architectures", "[\"GPT2LMHeadModel\"]", &f);
        json_num(b, "attn_pdrop", m->attn_pdrop, &f);
        json_num(b, "embd_pdrop", m->embd_pdrop, &f);
        json_num(b, "layer_norm_epsilon", m->eps, &f);
        json_s(b, "model_type", "gpt2", &f);
        json_int(b, "n_embd", m->hidden, &f);
        json_int(b, "n_head", m->heads, &f);
        json_int(b, "n_inner", m->ffn, &f);
        json_int(b, "n_layer", m->layers, &f);
        json_int(b, "n_positions", m->max_pos, &f);
        json_num(b, "resid_pdrop", m->resid_pdrop, &f);
        json_lit(b, "scale_attn_weights", "true", &f);
    } else {
        json_lit(b, "architectures", "[\"LlamaForCausalLM\"]", &f);
        json_lit(b, "attention_bias", "false", &f);
        json_num(b, "attention_dropout", 0.0, &f);
        json_s(b, "hidden_act", "silu", &f);
        json_int(b, "hidden_size", m->hidden, &f);
        json_int(b, "intermediate_size", m->ffn, &f);
        json_int(b, "max_position_embeddings", m->max_pos, &f);
        json_s(b, "model_type", "llama", &f);
        json_int(b, "num_attention_heads", m->heads, &f);
        json_int(b, "num_hidden_layers", m->layers, &f);
        json_int(b, "num_key_value_heads", m->kv_heads, &f);
        json_num(b, "rms_norm_eps", m->eps, &f);
        json_lit(b, "rope_scaling", "null", &f);
        json_num(b, "rope_theta", m->rope_theta, &f);
    }
    if (m->bos >= 0) json_int(b, "bos_token_id", m->bos, &f);
    if (m->eos >= 0) json_int(b, "eos_token_id", m->eos, &f);
    json_lit(b, "tie_word_embeddings", m->tied ? "true" : "false", &f);
    json_s(b, "torch_dtype", dtype == TGC_ST_BF16 ? "bfloat16" : dtype == TGC_ST_F16 ? "float16" : "float32", &f);
    json_int(b, "vocab_size", m->vocab, &f);
    sb_puts(b, "\n}\n");
}

/* Every tensor the mapping needs is in w with its shape, and w has no other. */
static bool export_check(const tgc_st_file *w, const hf_map *mp, diag *d)
{
    bool ok = true;
    for (int i = 0; ok && i < mp->n; i++) {
        const hf_entry *x = &mp->e[i];
        ok = tgc_st_expect(w, x->tgc, TGC_ST_F32, x->tgc_rank, x->tgc_shape, d) != NULL;
    }
    for (int i = 0; ok && i < tgc_st_count(w); i++) {
        const char *name = tgc_st_at(w, i)->name;
        bool known = false;
        for (int k = 0; !known && k < mp->n; k++) known = strcmp(mp->e[k].tgc, name) == 0;
        if (!known) {
            diag_error(d, (src_loc){.file = tgc_st_path(w)}, "tensor '%s' is not a parameter of the model (its "
                       "Hugging Face form has no place for it)", name);
            ok = false;
        }
    }
    return ok;
}

/* Hugging Face tensor x from w's tgc tensor, in dtype (F32, BF16 or F16:
 * rounded to nearest even) into out; f32 is scratch of x's size. */
static void export_tensor(const tgc_st_file *w, const hf_model *m, const hf_entry *x, tgc_st_dtype dtype, float *f32,
                          void *out)
{
    const tgc_st_info *t = tgc_st_find(w, x->tgc); /* checked by export_check */
    const unsigned char *bytes = t->data;
    int64_t n = shape_numel(x->rank, x->shape);
    float *dst = dtype == TGC_ST_F32 ? out : f32;
    for (int64_t e = 0; e < n; e++) memcpy(&dst[e], bytes + 4 * map_index(m, x, e), 4);
    if (dtype == TGC_ST_BF16) rt_f32_to_bf16(f32, out, n);
    else if (dtype == TGC_ST_F16) rt_f32_to_f16(f32, out, n);
}

/* transformers' sharding: tensors in state-dict order, a new shard when the
 * next tensor would take the current one past max (a tensor larger than
 * max gets a shard of its own). shard[i] receives tensor i's shard. */
static int plan_shards(const hf_map *mp, int64_t max, int esize, int *shard, int64_t *total)
{
    int k = 0;
    int64_t size = 0;
    *total = 0;
    for (int i = 0; i < mp->n; i++) {
        int64_t b = esize * shape_numel(mp->e[i].rank, mp->e[i].shape);
        if (size > 0 && size + b > max) { k++; size = 0; }
        size += b;
        *total += b;
        shard[i] = k;
    }
    return k + 1;
}

/* One shard, tensor by tensor (w's pages dropped after each): the export
 * holds one tensor at a time, not the model. */
static file_out *write_shard(const tgc_st_file *w, const hf_model *m, const hf_map *mp, const int *shard, int s,
                             tgc_st_dtype dtype, const char *path, diag *d)
{
    tgc_st_tensor *ts = xcalloc((size_t)mp->n + 1, sizeof *ts);
    int *entry = xcalloc((size_t)mp->n + 1, sizeof *entry), n = 0;
    int64_t most = 1;
    for (int i = 0; i < mp->n; i++)
        if (shard[i] == s) {
            int64_t e = shape_numel(mp->e[i].rank, mp->e[i].shape);
            if (e > most) most = e;
            entry[n] = i;
            ts[n++] = (tgc_st_tensor){mp->e[i].hf, dtype, mp->e[i].rank, mp->e[i].shape, NULL};
        }
    tgc_st_writer *wr = tgc_st_writer_open(path, ts, n, (tgc_st_kv[]){{"format", "pt"}}, 1, d);
    float *f32 = wr ? xmalloc((size_t)most * sizeof *f32) : NULL;
    void *out = wr ? xmalloc((size_t)most * (size_t)tgc_st_dtype_size(dtype)) : NULL;
    bool ok = wr != NULL;
    for (int i; ok && (i = tgc_st_writer_next(wr)) >= 0;) {
        const hf_entry *x = &mp->e[entry[i]];
        export_tensor(w, m, x, dtype, f32, out);
        tgc_st_release(w, tgc_st_find(w, x->tgc));
        ok = tgc_st_writer_put(wr, out);
    }
    if (!ok) tgc_st_writer_finish(wr, false); /* put reported it */
    file_out *done = ok ? tgc_st_writer_close(wr) : NULL;
    free(out);
    free(f32);
    free(entry);
    free(ts);
    return done;
}

/* The outputs of one export go in together: all synced before the first
 * rename; after a failure none is renamed (a previous export's files stay
 * as they were), and a rename that fails takes back the ones before it. */
static bool commit_all(file_out **o, char **paths, int n, bool ok, diag *d)
{
    char why[256];
    int done = 0;
    for (; ok && done < n; done++)
        if (!file_out_commit(o[done], why, sizeof why)) {
            diag_error(d, (src_loc){.file = paths[done]}, "cannot write: %s", why);
            ok = false;
        }
    for (int i = done; i < n; i++) file_out_abort(o[i]);
    if (!ok)
        for (int i = 0; i + 1 < done; i++) unlink(paths[i]);
    return ok;
}

static bool write_shards(const tgc_st_file *w, const hf_model *m, const hf_map *mp, const char *dir, int64_t max,
                         tgc_st_dtype dtype, diag *d)
{
    int *shard = xcalloc((size_t)mp->n + 1, sizeof *shard);
    int64_t total;
    int ns = plan_shards(mp, max, tgc_st_dtype_size(dtype), shard, &total);
    bool ok = true;
    strbuf index;
    sb_init(&index);
    sb_printf(&index, "{\n  \"metadata\": {\n    \"total_size\": %" PRId64 "\n  },\n  \"weight_map\": {", total);
    /* The shards and the index: outs[ns] is the index. */
    file_out **outs = xcalloc((size_t)ns + 1, sizeof *outs);
    char **paths = xcalloc((size_t)ns + 1, sizeof *paths);
    int nout = 0;
    for (int s = 0; ok && s < ns; s++) {
        char name[64];
        if (ns == 1) snprintf(name, sizeof name, "model.safetensors");
        else snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, ns);
        paths[nout] = path_join(dir, name);
        outs[nout] = write_shard(w, m, mp, shard, s, dtype, paths[nout], d);
        ok = outs[nout++] != NULL;
    }
    /* The index lists the names sorted, as transformers writes it. */
    int *order = xcalloc((size_t)mp->n + 1, sizeof *order);
    for (int i = 0; i < mp->n; i++) order[i] = i;
    for (int i = 1; i < mp->n; i++)
        for (int k = i; k > 0 && strcmp(mp->e[order[k - 1]].hf, mp->e[order[k]].hf) > 0; k--) {
            int t = order[k];
            order[k] = order[k - 1];
            order[k - 1] = t;
        }
    for (int i = 0; i < mp->n; i++) {
        int k = order[i];
        sb_printf(&index, "%s\n    ", i ? "," : "");
        sb_put_quoted(&index, mp->e[k].hf);
        sb_printf(&index, ": \"model-%05d-of-%05d.safetensors\"", shard[k] + 1, ns);
    }
    sb_puts(&index, "\n  }\n}\n");
    /* The other form's files from an earlier export into DIR go: a loader
     * must not find a stale index or single file next to these. */
    char *path = path_join(dir, "model.safetensors.index.json"), *single = path_join(dir, "model.safetensors");
    if (ok && ns > 1) {
        char why[256];
        file_out *o = file_out_begin(path, why, sizeof why);
        if (o && fwrite(index.s, 1, index.len, file_out_stream(o)) != index.len) {
            snprintf(why, sizeof why, "%s", strerror(errno ? errno : EIO));
            file_out_abort(o);
            o = NULL;
        } else if (o && !file_out_sync(o, why, sizeof why)) {
            o = NULL; /* file_out_sync removed it */
        }
        if (!o) diag_error(d, (src_loc){.file = path}, "cannot write: %s", why);
        ok = o != NULL;
        outs[nout] = o;
        paths[nout++] = xstrdup(path);
    }
    ok = commit_all(outs, paths, nout, ok, d);
    for (int i = 0; i < nout; i++) free(paths[i]);
    free(paths);
    free(outs);
    if (ok && ns > 1) remove(single);
    else if (ok) remove(path);
    free(path);
    free(single);
    sb_free(&index);
    free(order);
    free(shard);
    return ok;
}

/* tokenizer_config.json and the tokenizer's files under transformers' names. */
static bool export_tokenizer(const hf_tokenizer *tok, const hf_model *m, const char *dir, diag *d)
{
    if (!tok || !tok->type) return true;
    bool bpe = strcmp(tok->type, "GPT2BPETokenizer") == 0;
    bool ok = true;
    char *to;
    char *dst[2] = {path_join(dir, bpe ? "vocab.json" : "tokenizer.model"), bpe ? path_join(dir, "merges.txt") : NULL};
    const char *from[2] = {bpe ? tok->vocab_file : tok->model_file, bpe ? tok->merge_file : NULL};
    ok = carry_tokenizer(bpe, from, NULL, (const char *const *)dst, d);
    free(dst[0]);
    free(dst[1]);
    if (!ok) return false;
    strbuf b;
    sb_init(&b);
    bool f = true;
    sb_putc(&b, '{');
    if (bpe) {
        /* GPT-2's special token only where the vocabulary has it (else
         * transformers would add it as a new token). */
        char why[256];
        size_t len;
        char *vocab = file_read(tok->vocab_file, FILE_TEXT, &len, why, sizeof why);
        bool eot = vocab && strstr(vocab, "\"<|endoftext|>\"");
        free(vocab);
        json_lit(&b, "add_prefix_space", "false", &f);
        if (eot) {
            json_s(&b, "bos_token", "<|endoftext|>", &f);
            json_s(&b, "eos_token", "<|endoftext|>", &f);
        }
        json_int(&b, "model_max_length", m->max_pos, &f);
        json_s(&b, "tokenizer_class", "GPT2Tokenizer", &f);
        if (eot) json_s(&b, "unk_token", "<|endoftext|>", &f);
    } else {
        json_lit(&b, "add_bos_token", "true", &f);
        json_lit(&b, "add_eos_token", "false", &f);
        json_s(&b, "bos_token", "<s>", &f);
        json_s(&b, "eos_token", "</s>", &f);
        json_int(&b, "model_max_length", m->max_pos, &f);
        json_s(&b, "tokenizer_class", "LlamaTokenizer", &f);
        json_s(&b, "unk_token", "<unk>", &f);
    }
    sb_puts(&b, "\n}\n");
    to = path_join(dir, "tokenizer_config.json");
    ok = write_file(to, b.s, b.len, d);
    free(to);
    sb_free(&b);
    return ok;
}

bool hf_export(const tgc_st_file *w, const hf_model *m, const char *dir, int64_t max_shard, tgc_st_dtype dtype,
               const hf_tokenizer *tok, diag *d)
{
    struct stat sb;
    if (stat(dir, &sb) != 0 && mkdir(dir, 0777) != 0) {
        diag_error_plain(d, "export --format hf: cannot create the directory '%s': %s", dir, strerror(errno));
        return false;
    }
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        diag_error_plain(d, "export --format hf: -o '%s' is not a directory", dir);
        return false;
    }
    hf_map mp = {0};
    map_build(m, m->family == HF_GPT2 ? "transformer." : "model.", &mp);
    bool ok = export_check(w, &mp, d) && write_shards(w, m, &mp, dir, max_shard, dtype, d);
    if (ok) {
        strbuf b;
        sb_init(&b);
        config_json(m, dtype, &b);
        char *p = path_join(dir, "config.json");
        ok = write_file(p, b.s, b.len, d);
        free(p);
        sb_free(&b);
    }
    ok = ok && export_tokenizer(tok, m, dir, d);
    free(mp.e);
    return ok;
}
