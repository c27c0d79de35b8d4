/* Hugging Face checkpoints <-> tgc (runtime/io/hf.h): the export of tgc
 * weights as a Hugging Face directory (config.json, safetensors shards and
 * their index, the tokenizer's files). */
#include "runtime/io/hf.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/backend/half.h"
#include "runtime/io/hf_impl.h"
#include "runtime/io/json.h"
#include "support/file.h"

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
        bool qwen2 = m->qkv_bias; /* Qwen2ForCausalLM: biases on q, k, v only */
        json_lit(b, "architectures", qwen2 ? "[\"Qwen2ForCausalLM\"]" : "[\"LlamaForCausalLM\"]", &f);
        if (!qwen2) json_lit(b, "attention_bias", "false", &f);
        json_num(b, "attention_dropout", 0.0, &f);
        json_s(b, "hidden_act", "silu", &f);
        json_int(b, "hidden_size", m->hidden, &f);
        json_int(b, "intermediate_size", m->ffn, &f);
        json_int(b, "max_position_embeddings", m->max_pos, &f);
        json_s(b, "model_type", qwen2 ? "qwen2" : "llama", &f);
        json_int(b, "num_attention_heads", m->heads, &f);
        json_int(b, "num_hidden_layers", m->layers, &f);
        json_int(b, "num_key_value_heads", m->kv_heads, &f);
        json_num(b, "rms_norm_eps", m->eps, &f);
        if (m->rope_factor != 1.0) { /* Llama 3.1's, transformers' rope_type llama3 */
            json_key(b, "rope_scaling", &f);
            bool g = true;
            sb_puts(b, "{");
            json_num(b, "factor", m->rope_factor, &g);
            json_num(b, "high_freq_factor", m->rope_high, &g);
            json_num(b, "low_freq_factor", m->rope_low, &g);
            json_int(b, "original_max_position_embeddings", m->rope_orig, &g);
            json_s(b, "rope_type", "llama3", &g);
            sb_puts(b, "}");
        } else {
            json_lit(b, "rope_scaling", "null", &f);
        }
        json_num(b, "rope_theta", m->rope_theta, &f);
        if (qwen2) json_lit(b, "use_sliding_window", "false", &f);
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
    int64_t n = hf_shape_numel(x->rank, x->shape);
    float *dst = dtype == TGC_ST_F32 ? out : f32;
    for (int64_t e = 0; e < n; e++) memcpy(&dst[e], bytes + 4 * hf_map_index(m, x, e), 4);
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
        int64_t b = esize * hf_shape_numel(mp->e[i].rank, mp->e[i].shape);
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
            int64_t e = hf_shape_numel(mp->e[i].rank, mp->e[i].shape);
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
    ok = hf_carry_tokenizer(bpe, from, NULL, (const char *const *)dst, d);
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
    ok = hf_write_file(to, b.s, b.len, d);
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
    hf_map_build(m, m->family == HF_GPT2 ? "transformer." : "model.", &mp);
    bool ok = export_check(w, &mp, d) && write_shards(w, m, &mp, dir, max_shard, dtype, d);
    if (ok) {
        strbuf b;
        sb_init(&b);
        config_json(m, dtype, &b);
        char *p = path_join(dir, "config.json");
        ok = hf_write_file(p, b.s, b.len, d);
        free(p);
        sb_free(&b);
    }
    ok = ok && export_tokenizer(tok, m, dir, d);
    free(mp.e);
    return ok;
}
