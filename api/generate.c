/* Generation: text from trained weights (docs/sampling.md, docs/api.md),
 * behind `tgc sample` and tgc_generate (api/generate.h).
 *
 * The model's graph is compiled forward-only (dce, fuse, memplan: no
 * autodiff, no optimizer, no parallelism), with every dropout made an
 * identity (p = 0) and, for a .tg model, `batch` set to 1. A compiled plan
 * is a training step: its dropout is turned off the same way and the nodes
 * after the logits are dropped.
 *
 * With the KV cache (the default) the kvcache pass makes two programs of
 * that forward, sharing the parameters and the caches: the prefill (all s
 * positions from position 0: the prompt, left-aligned, which fills the
 * caches) and the decoding step (one position at rt.pos, reading the
 * caches). A context longer than s slides: the prefill runs again over its
 * last s tokens. Without it (--no-kv-cache) each token runs the forward over
 * the last s tokens (causal attention: the logits at the last real position
 * do not depend on the filler after it). Either way the token is drawn from
 * the logits row of the last position (runtime/train/sample.h).
 *
 * Every program runs on the backend --backend names (cpu, sim, cuda), and
 * the host reaches its buffers, device memory, only through the
 * executor's interface: per forward one upload of the tokens (from a host
 * buffer allocated once), one download of the logits row drawn from
 * (vocab elements), the labels zeroed on the device once. The decoding
 * and check programs borrow the prefill's parameter buffer (and the
 * decoding program its caches) on the same device. */
#include "api/generate.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/internal.h"
#include "passes/pass.h"
#include "runtime/exec.h"
#include "runtime/io/safetensors.h"
#include "runtime/plan.h"
#include "runtime/train/sample.h"
#include "support/file.h"
#include "support/env.h"
#include "support/util.h"

enum { GEN_SETS_MAX = 64 };

/* A forward program and where it reads and writes. */
typedef struct fwd_model {
    ir_graph *g;
    const ir_node *tokens, *labels, *logits;
    int64_t s, b, vocab;
} fwd_model;

/* ---- the forward program ---------------------------------------------------------- */

/* Every dropout becomes an identity: inference uses no mask. */
static void dropout_off(ir_graph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        ir_node *n = g->nodes[i];
        if (n->op == IR_OP_DROPOUT || n->op == IR_OP_DROPOUT_BACK || n->op == IR_OP_BIAS_DROPOUT_ADD ||
            n->op == IR_OP_ATTENTION || n->op == IR_OP_ATTENTION_BACK)
            ir_attr_set_float(n, "p", 0.0);
    }
}

/* The token input, the labels and the logits (the LM head's output: the
 * operand of the cross-entropy loss), checked against each other. */
static bool find_io(fwd_model *m, diag *d)
{
    const ir_graph *g = m->g;
    const ir_node *t = ir_graph_find(g, "tokens"), *ce = NULL;
    if (!t || !(t->flags & IR_NF_INPUT) || t->dtype != IR_I32 || t->shape.rank != 2) {
        diag_error_plain(d, "model '%s' has no input 'tokens' of type i32[seq, batch]: tgc sample feeds the token "
                         "ids there", g->model);
        return false;
    }
    for (int i = 0; i < g->nnodes && !ce; i++)
        if (g->nodes[i]->op == IR_OP_CROSS_ENTROPY) ce = g->nodes[i];
    if (!ce) {
        diag_error_plain(d, "model '%s' has no cross_entropy loss: tgc sample reads the logits it is computed from "
                         "(the LM head's output)", g->model);
        return false;
    }
    const ir_node *l = ce->src[0];
    char type[128];
    ir_type_str(l->dtype, &l->shape, type, sizeof type);
    if (l->shape.rank != 3 || l->shape.dim[0] != t->shape.dim[0] || l->shape.dim[1] != t->shape.dim[1] ||
        !ir_dtype_is_float(l->dtype) || l->dtype == IR_F64) {
        diag_error_plain(d, "the logits '%s' of model '%s' are %s; tgc sample reads f32[seq, batch, vocab] over "
                         "the tokens' [seq, batch]", l->name, g->model, type);
        return false;
    }
    m->tokens = t;
    m->labels = ce->src[1]->flags & IR_NF_INPUT ? ce->src[1] : NULL;
    m->logits = l;
    m->s = t->shape.dim[0];
    m->b = t->shape.dim[1];
    m->vocab = l->shape.dim[2];
    return true;
}

/* The passes of a forward program: the plain forward (kv 0), or the
 * kvcache pass's program of kv new positions per run. A plan's graph comes
 * fused already; fuse re-forms its kernels after the cut (load_plan). The
 * attention pass fuses attention unless --attention-backend unfused (a
 * plan compiled fused has it recorded and keeps it; the tokens are the same
 * either way). */
static bool run_passes(ir_graph *g, int64_t kv, int attention, diag *d)
{
    static const char *const names[] = {"attention", "dce", "fuse", "kvcache", "memplan"};
    const pass_info *list[ARRAY_LEN(names)];
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        list[i] = pass_lookup(names[i]);
        TGC_ASSERT(list[i] != NULL);
    }
    pass_options po;
    pass_options_defaults(&po);
    po.kv_positions = kv;
    po.attention_backend = attention;
    pass_ctx ctx = {.d = d, .verify_each = true, .opts = &po};
    return pass_run_list(g, list, (int)ARRAY_LEN(names), &ctx, NULL, NULL);
}


/* Every dropout off, the inputs and logits found, the logits kept whole
 * for the host to read. */
static bool prepare(fwd_model *m, diag *d)
{
    dropout_off(m->g);
    if (!pass_lmhead_unfuse(m->g, d) || !find_io(m, d)) return false; /* a fused head's logits back */
    ((ir_node *)m->logits)->flags |= IR_NF_OUTPUT;
    return true;
}

/* A training step cut after the loss of the logits: the backward and the
 * update go, and with them every fused kernel, re-formed by the fuse pass
 * (and the record of the passes the cut undid). */
static bool cut_backward(fwd_model *m, diag *d)
{
    ir_graph *g = m->g;
    bool *keep = xcalloc((size_t)g->nnodes, sizeof *keep);
    for (int i = g->nnodes - 1; i >= 0; i--) {
        ir_node *n = g->nodes[i];
        n->fuse = -1;
        keep[i] |= (ir_op_get(n->op)->flags & IR_OPF_LEAF) || n == m->logits ||
                   (n->op == IR_OP_CROSS_ENTROPY && n->src[0] == m->logits); /* find_io's anchor */
        for (int s = 0; keep[i] && s < n->nsrc; s++) keep[n->src[s]->id] = true;
    }
    ir_graph_compact(g, keep);
    free(keep);
    pass_record_cut_backward(g);
    return find_io(m, d);
}

static bool has_set(const api_gen_opts *o, const char *name)
{
    for (int i = 0; i < o->nsets; i++)
        if (!o->sets[i].flag && strcmp(o->sets[i].name, name) == 0) return true;
    return false;
}

/* A .tg model (or text IR) with batch 1: the forward graph, not yet
 * compiled; text IR after autodiff is cut as a plan is. */
static bool load_model(fwd_model *m, const api_gen_opts *o, diag *d)
{
    size_t len = strlen(o->model);
    bool tg = len > 3 && strcmp(o->model + len - 3, ".tg") == 0;
    fe_override sets[GEN_SETS_MAX];
    int nsets = 0;
    for (int i = 0; i < o->nsets && nsets < GEN_SETS_MAX - 1; i++) sets[nsets++] = o->sets[i];
    if (tg && !has_set(o, "batch")) sets[nsets++] = (fe_override){"batch", "1", false};
    m->g = api_model_load(o->model, sets, nsets, d);
    if (!m->g || !prepare(m, d)) return false;
    return !ir_graph_pass_ran(m->g, "autodiff") || cut_backward(m, d);
}

/* A compiled plan: serial (one rank holds the whole model), its training
 * step cut after the loss of the logits. */
static bool load_plan(fwd_model *m, const api_gen_opts *o, diag *d, FILE *err)
{
    if (o->nsets) {
        char given[256];
        api_override_str(&o->sets[0], given, sizeof given);
        diag_error_plain(d, "%s: overrides apply to models; '%s' is a compiled plan", given, o->model);
        return false;
    }
    long long tp = o->plan_tp, pp = o->plan_pp;
    if (o->plan) { /* a plan in memory (tgc_generator_new_plan): a copy of its graph */
        char *text = ir_graph_print(o->plan);
        m->g = ir_graph_read(text, strlen(text), o->model, d);
        free(text);
    } else {
        tgc_config c, none; /* no options over the plan's */
        tgc_config_defaults(&none);
        int rc;
        m->g = api_plan_load(o->model, &c, &none, &rc, NULL, d, err);
        tp = (long long)c.tp;
        pp = (long long)c.pp;
    }
    if (!m->g) return false;
    if (tp > 1 || pp > 1) {
        diag_error_plain(d, "'%s' was compiled for %lld tensor- and %lld pipeline-parallel ranks; tgc sample runs "
                         "one rank: give it the .tg model (or a plan compiled without --tp/--pp)", o->model, tp, pp);
        return false;
    }
    return prepare(m, d) && cut_backward(m, d);
}


/* The program of base (left as it is) with kv new positions per run (0:
 * the plain forward). */
static bool forward_program(fwd_model *m, const ir_graph *base, int64_t kv, int attention, diag *d)
{
    char *text = ir_graph_print(base);
    m->g = ir_graph_read(text, strlen(text), "<forward>", d);
    free(text);
    return m->g && run_passes(m->g, kv, attention, d) && find_io(m, d);
}

/* The decoding program's buffers of kind k are the prefill's: every value
 * there must sit at the same place in both plans. */
static bool same_layout(const ir_graph *a, const ir_graph *b, ir_mem k, diag *d)
{
    bool ok = a->mem_size[k] == b->mem_size[k];
    for (int i = 0; ok && i < b->nnodes; i++) {
        const ir_node *n = b->nodes[i], *o = n->mem == k ? ir_graph_find(a, n->name) : NULL;
        if (n->mem == k)
            ok = o && o->mem == k && o->mem_offset == n->mem_offset && o->dtype == n->dtype &&
                 ir_shape_numel(&o->shape) == ir_shape_numel(&n->shape);
    }
    if (!ok)
        diag_error_plain(d, "internal error: the decoding program lays out its %s unlike the prefill program",
                         ir_mem_name(k));
    return ok;
}

/* ---- the weights --------------------------------------------------------------------- */

static bool is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The safetensors file --weights names: the file itself; a `tgc run
 * --save` directory's latest checkpoint; an iter_N directory's
 * model.safetensors. NULL after reporting. */
static char *weights_file(const char *w, diag *d)
{
    struct stat sb;
    if (stat(w, &sb) != 0) {
        diag_error_plain(d, "--weights: cannot read '%s': %s", w, strerror(errno));
        return NULL;
    }
    if (!S_ISDIR(sb.st_mode)) return xstrdup(w);
    char *latest = path_join(w, "latest");
    struct stat lst;
    char why[256];
    int fd = file_open(latest, FILE_SMALL, &lst, why, sizeof why);
    if (fd < 0 && errno != ENOENT) {
        diag_error_plain(d, "--weights: cannot read '%s': %s", latest, why);
        free(latest);
        return NULL;
    }
    free(latest);
    if (fd >= 0) {
        char text[64] = "";
        ssize_t got = read(fd, text, sizeof text - 1);
        close(fd);
        size_t n = got > 0 ? (size_t)got : 0;
        text[n] = 0;
        while (n && (text[n - 1] == '\n' || text[n - 1] == ' ')) text[--n] = 0;
        int64_t it;
        if (!parse_i64(text, &it) || it < 0) {
            diag_error_plain(d, "--weights: %s/latest does not hold an iteration number ('%s')", w, text);
            return NULL;
        }
        char name[64];
        snprintf(name, sizeof name, "iter_%07" PRId64 "/model.safetensors", it);
        char *p = path_join(w, name);
        if (is_file(p)) return p;
        diag_error_plain(d, "--weights: %s/latest names iteration %" PRId64 ", but %s is missing", w, it, p);
        free(p);
        return NULL;
    }
    char *p = path_join(w, "model.safetensors");
    if (is_file(p)) return p;
    free(p);
    diag_error_plain(d, "--weights: '%s' is a directory with neither 'latest' (a `tgc run --save` directory) nor "
                     "'model.safetensors' (one of its iter_N checkpoints)", w);
    return NULL;
}

/* A checkpoint's model.safetensors (metadata tgc_checkpoint_version) has
 * an FNV-1a 64 checksum per tensor: verified as `tgc run --load` and `tgc
 * export` verify them. Other files have none to check. */
static bool weights_verify(const char *path, diag *d)
{
    tgc_st_file *f = tgc_st_open(path, d);
    if (!f) return false;
    bool ok = true;
    src_loc at = {.file = tgc_st_path(f)};
    for (int i = 0; tgc_st_meta(f, "tgc_checkpoint_version") && i < tgc_st_count(f); i++) {
        const tgc_st_info *t = tgc_st_at(f, i);
        char key[1100], have[20];
        snprintf(key, sizeof key, "checksum.%s", t->name);
        snprintf(have, sizeof have, "%016" PRIx64, hash_bytes(t->data, (size_t)t->nbytes, HASH_SEED));
        const char *want = tgc_st_meta(f, key);
        if (!want || strcmp(want, have) != 0) {
            diag_error(d, at, "checksum mismatch in tensor '%s' (stored %s, computed %s): the file is corrupt",
                       t->name, want ? want : "none", have);
            ok = false;
        }
    }
    tgc_st_close(f);
    return ok;
}


static float half_to_float(uint16_t h)
{
    int e = (h >> 10) & 31, f = h & 1023;
    float v = e == 0 ? ldexpf((float)f, -24) : e == 31 ? (f ? NAN : INFINITY) : ldexpf((float)(f | 1024), e - 25);
    return h & 0x8000 ? -v : v;
}

/* Row `pos` of batch column 0 of the logits, as f32 in row: that row
 * only (vocab elements) comes from the device, into raw (vocab 16-bit
 * values) for 16-bit logits, converted here. NULL after reporting a device
 * error. */
static const float *logits_row(rt_exec *e, const fwd_model *m, int64_t pos, float *row, uint16_t *raw, diag *d)
{
    /* As stored: 16 bits under mixed precision (ir_storage_dtype). */
    ir_dtype t = ir_storage_dtype(e->g, m->logits);
    size_t esz = (size_t)ir_dtype_size(t), n = (size_t)m->vocab;
    const unsigned char *at = (const unsigned char *)rt_exec_ptr(e, m->logits) + (size_t)(pos * m->b * m->vocab) * esz;
    if (!rt_exec_read(e, at, t == IR_F32 ? (void *)row : (void *)raw, n * esz)) {
        diag_error_plain(d, "reading the logits from the %s device: %s", rt_exec_backend_name(e), rt_exec_error(e));
        return NULL;
    }
    if (t == IR_F32) return row;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = (uint32_t)raw[i] << 16;
        if (t == IR_BF16) memcpy(&row[i], &bits, 4);
        else row[i] = half_to_float(raw[i]);
    }
    return row;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}


/* The programs of a generation: the forward over s positions (with the
 * KV cache: the prefill, which fills the caches), the decoding step (NULL
 * without the cache), and for --check-kv-cache the plain forward. tok is
 * the host side of the token input (the largest program's, zeroed once:
 * only batch column 0 is ever written), row and raw of a logits row. */
typedef struct sampler_progs {
    fwd_model full, dec, ref;
    rt_exec *e_full, *e_dec, *e_ref;
    int32_t *tok;
    float *row, *want;
    uint16_t *raw;
} sampler_progs;

/* Writes ctx[start .. start + w) to the token input, left-aligned (the
 * positions after them hold token 0), in one upload, and runs the program
 * with its positions starting at pos. */
static bool run_forward(sampler_progs *P, rt_exec *e, const fwd_model *m, const int32_t *ctx, int64_t start,
                        int64_t w, int64_t pos, diag *d)
{
    for (int64_t i = 0; i < m->s; i++) P->tok[i * m->b] = i < w ? ctx[start + i] : 0;
    if (!rt_exec_set(e, NULL, m->tokens, P->tok)) {
        diag_error_plain(d, "writing the tokens to the %s device: %s", rt_exec_backend_name(e), rt_exec_error(e));
        return false;
    }
    e->rt.pos = pos;
    if (rt_exec_run(e, NULL, e->prog->ninstrs) == 0) return true;
    diag_error_plain(d, "the forward failed%s%s", *rt_exec_error(e) ? ": " : "", rt_exec_error(e));
    return false;
}

/* --check-kv-cache: the largest difference between the cached programs'
 * logits and the plain forward's, and the largest logit. */
typedef struct kv_check {
    int64_t steps;
    double max_diff, max_abs;
} kv_check;

static bool check_row(sampler_progs *P, const float *row, const int32_t *ctx, int64_t start, int64_t w,
                      kv_check *k, diag *d)
{
    if (!run_forward(P, P->e_ref, &P->ref, ctx, start, w, 0, d)) return false;
    const float *want = logits_row(P->e_ref, &P->ref, w - 1, P->want, P->raw, d);
    if (!want) return false;
    for (int64_t i = 0; i < P->ref.vocab; i++) {
        double diff = fabs((double)row[i] - (double)want[i]);
        if (diff > k->max_diff || diff != diff) k->max_diff = diff;
        if (fabs((double)want[i]) > k->max_abs) k->max_abs = fabs((double)want[i]);
    }
    k->steps++;
    return true;
}

/* The labels are fed zeros (the loss is computed and ignored). */
static bool zero_labels(rt_exec *e, const fwd_model *m, diag *d)
{
    if (!e || !m->labels) return true;
    size_t bytes = (size_t)(ir_shape_numel(&m->labels->shape) * ir_dtype_size(m->labels->dtype));
    if (rt_exec_zero(e, rt_exec_ptr(e, m->labels), bytes)) return true;
    diag_error_plain(d, "zeroing the labels on the %s device: %s", rt_exec_backend_name(e), rt_exec_error(e));
    return false;
}


/* The executor of a program on the backend --backend names; the decoding
 * and check programs use the prefill's parameters (and the decoding
 * program its caches): its device buffers, borrowed on the same device. */
static rt_exec *program_exec(const fwd_model *m, rt_backend backend, rt_exec *share, bool caches, diag *d)
{
    rt_exec_options eo = {.backend = backend};
    eo.cc.keep_source = env_int("TGC_DEBUG") >= 4;
    if (share) {
        if (!same_layout(share->g, m->g, IR_MEM_PARAM, d)) return NULL;
        eo.borrow[IR_MEM_PARAM] = share->buf[IR_MEM_PARAM];
        if (caches) {
            if (!same_layout(share->g, m->g, IR_MEM_CACHE, d)) return NULL;
            eo.borrow[IR_MEM_CACHE] = share->buf[IR_MEM_CACHE];
        }
    }
    return rt_exec_new_on(m->g, &eo, d);
}

static bool build_programs(sampler_progs *P, const ir_graph *base, const api_gen_opts *o, int64_t s, diag *d)
{
    bool kv = !o->no_kv_cache;
    if (!forward_program(&P->full, base, kv ? s : 0, o->attention, d)) {
        if (kv) diag_note(d, (src_loc){.file = o->model}, "this model has no KV cache; --no-kv-cache samples with a "
                          "forward over the last %lld tokens per token", (long long)s);
        return false;
    }
    if (kv && !forward_program(&P->dec, base, 1, o->attention, d)) return false;
    if (o->check_kv_cache && !forward_program(&P->ref, base, 0, o->attention, d)) return false;
    rt_set_omp_threads((int)sysconf(_SC_NPROCESSORS_ONLN));
    if (!(P->e_full = program_exec(&P->full, o->backend, NULL, false, d))) return false;
    if (kv && !(P->e_dec = program_exec(&P->dec, o->backend, P->e_full, true, d))) return false;
    if (o->check_kv_cache && !(P->e_ref = program_exec(&P->ref, o->backend, P->e_full, false, d))) return false;
    /* The host sides, once: the prefill's token input is the largest
     * (the decoding step's has one position, the check's the same s). */
    P->tok = xcalloc((size_t)ir_shape_numel(&P->full.tokens->shape), sizeof *P->tok);
    P->row = xcalloc((size_t)P->full.vocab, sizeof *P->row);
    P->want = xcalloc((size_t)P->full.vocab, sizeof *P->want);
    P->raw = xcalloc((size_t)P->full.vocab, sizeof *P->raw);
    return true;
}

struct api_gen {
    api_gen_opts o;
    fwd_model base;
    sampler_progs P;
    char *wpath;                 /* the safetensors file of the weights */
    tgc_tokenizer *tok;          /* NULL: bytes */
    tgc_tokenizer_meta tok_meta; /* the weights' __metadata__ tokenizer: its strings */
    const char *tok_from;        /* where the tokenizer came from, for messages */
};

/* The tokenizer of the prompt: the options', else the one the weights'
 * __metadata__ names (tgc.tokenizer_type, ...; `tgc import hf` writes it),
 * else none (bytes). The model's vocabulary must cover it. */
static bool open_tokenizer(api_gen *G, diag *d)
{
    const fwd_model *m = &G->base;
    tgc_tokenizer_opts to = G->o.tok;
    G->tok_from = G->o.tok_from ? G->o.tok_from : "from the options";
    if (!tgc_tokenizer_opts_given(&to)) {
        bool found;
        if (!tgc_tokenizer_from_safetensors(G->wpath, &to, &G->tok_meta, &found, d)) return false;
        if (!found) return true;
        G->tok_from = "named by the weights' __metadata__";
    }
    G->tok = tokenizer_open(&to, d);
    if (!G->tok) return false;
    int64_t v = tgc_tokenizer_vocab_size(G->tok);
    if (v > m->vocab) {
        diag_error_plain(d, "the tokenizer %s (%s) has a vocabulary of %lld tokens, but model '%s' only %lld: its "
                         "vocabulary must cover the tokenizer's",
                         tgc_tokenizer_kind_name(tgc_tokenizer_kind_of(G->tok)), G->tok_from, (long long)v,
                         m->g->model, (long long)m->vocab);
        return false;
    }
    if (tgc_tokenizer_kind_of(G->tok) == TGC_TOKENIZER_BYTES) { /* bytes: printed as without a tokenizer */
        tgc_tokenizer_free(G->tok);
        G->tok = NULL;
    }
    return true;
}

/* ---- the generator --------------------------------------------------------------------- */

api_gen *api_gen_new(const api_gen_opts *o, diag *d, FILE *err)
{
    api_gen *G = xcalloc(1, sizeof *G);
    G->o = *o;
    fwd_model *base = &G->base;
    sampler_progs *P = &G->P;
    bool ok = o->plan || rt_plan_sniff(o->model) ? load_plan(base, o, d, err) : load_model(base, o, d);
    G->wpath = ok ? weights_file(o->weights, d) : NULL;
    ok = G->wpath && weights_verify(G->wpath, d) && open_tokenizer(G, d) &&
         build_programs(P, base->g, o, base->s, d) && rt_import_params(P->e_full, G->wpath, d) &&
         zero_labels(P->e_full, &P->full, d) && zero_labels(P->e_dec, &P->dec, d) &&
         zero_labels(P->e_ref, &P->ref, d);
    G->o.sets = NULL; /* the caller's: not kept */
    G->o.nsets = 0;
    if (ok) return G;
    api_gen_free(G);
    return NULL;
}

void api_gen_free(api_gen *G)
{
    if (!G) return;
    sampler_progs *P = &G->P;
    rt_exec_free(P->e_dec); /* before the prefill's, whose buffers it borrows */
    rt_exec_free(P->e_ref);
    rt_exec_free(P->e_full);
    ir_graph_free(P->full.g);
    ir_graph_free(P->dec.g);
    ir_graph_free(P->ref.g);
    free(P->tok);
    free(P->row);
    free(P->want);
    free(P->raw);
    free(G->wpath);
    ir_graph_free(G->base.g);
    tgc_tokenizer_free(G->tok);
    tgc_tokenizer_meta_free(&G->tok_meta);
    free(G);
}

void api_gen_describe(const api_gen *G, api_gen_info *out)
{
    *out = (api_gen_info){.model = G->base.g->model, .weights = G->wpath, .backend = rt_exec_backend_name(G->P.e_full),
                          .params = (long long)ir_graph_param_count(G->base.g), .context = G->base.s,
                          .vocab = G->base.vocab, .tok = G->tok, .tok_from = G->tok_from,
                          .kv_cache = G->P.e_dec != NULL, .check_kv_cache = G->P.e_ref != NULL};
}

/* ---- generating ----------------------------------------------------------------------- */

int32_t *api_gen_encode(const api_gen *G, const char *text, const int32_t *ids, int64_t nids, int64_t extra,
                        int64_t *n, const char *where, diag *d)
{
    int32_t *enc = NULL;
    int64_t np = text ? (int64_t)strlen(text) : nids, cap = 0;
    if (text && G->tok) {
        np = 0;
        if (!tokenizer_encode(G->tok, (const unsigned char *)text, strlen(text), &enc, &np, &cap, where, d)) {
            free(enc);
            return NULL;
        }
        if (np == 0) {
            diag_error_plain(d, "%s: the %s makes no tokens of it: the model needs at least one", where,
                             tgc_tokenizer_kind_name(tgc_tokenizer_kind_of(G->tok)));
            free(enc);
            return NULL;
        }
    } else if (np == 0) {
        diag_error_plain(d, "%s is empty: the model needs at least one token", where);
        return NULL;
    }
    int32_t *ctx = xcalloc((size_t)(np + extra), sizeof *ctx);
    for (int64_t i = 0; i < np; i++) ctx[i] = enc ? enc[i] : text ? (unsigned char)text[i] : ids[i];
    free(enc);
    *n = np;
    return ctx;
}

bool api_gen_check_prompt(const api_gen *G, const int32_t *ctx, int64_t n, const char *where, bool bytes, diag *d)
{
    const fwd_model *m = &G->base;
    for (int64_t i = 0; i < n; i++)
        if (ctx[i] < 0 || ctx[i] >= m->vocab) {
            diag_error_plain(d, "%s: token %" PRId32 " (at %" PRId64 ") is outside model '%s''s vocabulary of %" PRId64
                             "%s", where, ctx[i], i, m->g->model, m->vocab,
                             bytes ? " (the prompt's bytes are its tokens)" : "");
            return false;
        }
    return true;
}

/* One forward over the prompt (from position 0, at most s tokens) and its
 * logits at every prompt position (the numbers an outside model's logits
 * are compared with: tests/hf). */
bool api_gen_prompt_logits(api_gen *G, const int32_t *ctx, int64_t n, float **out, const char *where, diag *d)
{
    sampler_progs *P = &G->P;
    const fwd_model *m = &P->full;
    *out = NULL;
    if (n > m->s) {
        diag_error_plain(d, "%s: the prompt has %" PRId64 " tokens, more than the model's %" PRId64 " positions",
                         where, n, m->s);
        return false;
    }
    if (!run_forward(P, P->e_full, m, ctx, 0, n, 0, d)) return false;
    float *all = xmalloc((size_t)(n * m->vocab) * sizeof *all);
    bool ok = true;
    for (int64_t i = 0; ok && i < n; i++) {
        const float *row = logits_row(P->e_full, m, i, P->row, P->raw, d);
        if (row) memcpy(all + i * m->vocab, row, (size_t)m->vocab * sizeof *all);
        ok = row != NULL;
    }
    if (ok) *out = all;
    else free(all);
    return ok;
}

bool api_gen_write_logits(api_gen *G, const int32_t *ctx, int64_t n, const char *path, diag *d)
{
    float *all;
    if (!api_gen_prompt_logits(G, ctx, n, &all, "--logits-out", d)) return false;
    int64_t shape[2] = {n, G->base.vocab};
    tgc_st_tensor t = {"logits", TGC_ST_F32, 2, shape, all};
    bool ok = tgc_st_write(path, &t, 1, (tgc_st_kv[]){{"producer", "tgc sample"}}, 1, d);
    free(all);
    return ok;
}

bool api_gen_run(api_gen *G, int32_t *ctx, int64_t *lenp, int64_t n, double temperature, int64_t top_k, uint64_t seed,
                 api_gen_token_fn fn, void *user, api_gen_stats *st, diag *d)
{
    sampler_progs *P = &G->P;
    const fwd_model *m = &P->full;
    rt_sampler smp;
    rt_sampler_init(&smp, m->vocab, temperature, top_k, seed);
    kv_check chk = {0};
    bool ok = true;
    int64_t made = 0, prefills = 0, len = *lenp;
    bool cached = false; /* the caches hold positions 0 .. len - 2 of the context */
    double t0 = now_s();
    for (; made < n; made++) {
        int64_t start = len > m->s ? len - m->s : 0, w = len - start;
        const float *logits;
        if (P->e_dec && cached && start == 0) { /* one new position: the last token, at len - 1 */
            if (!run_forward(P, P->e_dec, &P->dec, ctx, len - 1, 1, len - 1, d)) { ok = false; break; }
            logits = logits_row(P->e_dec, &P->dec, 0, P->row, P->raw, d);
        } else { /* the window from position 0 (with the cache: the prefill) */
            if (!run_forward(P, P->e_full, m, ctx, start, w, 0, d)) { ok = false; break; }
            logits = logits_row(P->e_full, m, w - 1, P->row, P->raw, d);
            prefills++;
            cached = true;
        }
        if (!logits || (P->e_ref && !check_row(P, logits, ctx, start, w, &chk, d))) { ok = false; break; }
        int32_t next = rt_sampler_draw(&smp, logits, made);
        if (next < 0) {
            diag_error_plain(d, "the logits at position %" PRId64 " are not finite (NaN or infinite): the weights "
                             "are broken (a diverged run?)", w - 1);
            ok = false;
            break;
        }
        ctx[len++] = next;
        *lenp = len;
        if (fn && !fn(user, ctx, len, d)) {
            made++;
            ok = false;
            break;
        }
    }
    double dt = now_s() - t0;
    rt_sampler_free(&smp);
    if (st) {
        /* float sums in another order (GEMV against GEMM, a shorter row):
         * a few ulps of the largest logit, never more. */
        double tol = 1e-4 * (chk.max_abs > 1.0 ? chk.max_abs : 1.0);
        *st = (api_gen_stats){.made = made, .prefills = prefills, .seconds = dt, .checked = chk.steps,
                              .max_diff = chk.max_diff, .max_abs = chk.max_abs, .tol = tol,
                              .check_ok = chk.max_diff <= tol};
    }
    return ok;
}

/* ---- text ------------------------------------------------------------------------------ */

bool api_gen_text_begin(api_gen_text *t, const tgc_tokenizer *tok, const int32_t *ctx, int64_t len, const char **s,
                        size_t *n, diag *d)
{
    t->tok = tok;
    t->whole = tgc_tokenizer_kind_of(tok) == TGC_TOKENIZER_SENTENCEPIECE;
    sb_init(&t->out);
    t->printed = 0;
    *s = "";
    *n = 0;
    if (!tokenizer_decode(tok, ctx, len, &t->out, d)) return false;
    *s = t->out.s ? t->out.s : "";
    *n = t->printed = t->out.len;
    return true;
}

bool api_gen_text_add(api_gen_text *t, const int32_t *ctx, int64_t len, const char **s, size_t *n, diag *d)
{
    *s = "";
    *n = 0;
    if (!t->whole) t->out.len = t->printed = 0;
    else t->out.len = 0;
    if (!tokenizer_decode(t->tok, t->whole ? ctx : ctx + len - 1, t->whole ? len : 1, &t->out, d)) return false;
    if (t->out.len > t->printed) {
        *s = t->out.s + t->printed;
        *n = t->out.len - t->printed;
        t->printed = t->out.len;
    }
    return true;
}

void api_gen_text_end(api_gen_text *t) { sb_free(&t->out); }
