/* Feeding a run's inputs (runtime/train/feeder.h). */
#include "runtime/train/feeder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/util.h"
#include "tokenizer/tokenizer.h"

bool rt_parse_split(const char *s, double *train, double *valid)
{
    double w[3] = {0, 0, 0};
    int n = parse_double_list(s, w, 3);
    if (n < 2 || !(w[0] > 0.0) || !(w[1] > 0.0) || w[0] > 1e12 || w[1] > 1e12 || !(w[2] >= 0.0) || w[2] > 1e12)
        return false;
    double total = w[0] + w[1] + w[2];
    *train = w[0] / total;
    *valid = w[1] / total;
    return true;
}

static const ir_node *find_input(const ir_graph *g, const char *name)
{
    const ir_node *n = ir_graph_find(g, name);
    return n && (n->flags & IR_NF_INPUT) ? n : NULL;
}

/* The datasets of --data-path or --data. */
const char *const *rt_train_data_words(const rt_train_opts *o, int *n)
{
    *n = o->ndata_path ? o->ndata_path : 1;
    return o->ndata_path ? o->data_path : &o->data;
}

/* A blend of several datasets: the training split sized for the run's
 * iterations and the validation split for one evaluation, of M*b rows a
 * step. */
static bool feeder_open_blend(feeder *f, const tgc_blend_spec *spec, int64_t vocab, int64_t M,
                              const rt_train_opts *o, bool report, diag *d)
{
    int64_t B = M * f->b;
    tgc_blend_opts bo = {.s = f->s, .vocab = vocab, .train_samples = (o->iters > 0 ? o->iters : 1) * B,
                         .valid_samples = o->split_valid > 0 ? o->eval_iters * B : 0,
                         .split_train = o->split_train, .split_valid = o->split_valid, .shuffle = o->shuffle,
                         .seed = (uint64_t)o->seed, .tokenizer = o->tokenizer};
    if (!(f->blend = tgc_blend_open(spec, &bo, d))) return false;
    if (report && !o->quiet) tgc_blend_describe(f->blend, stderr);
    return true;
}

static bool feeder_open_train(feeder *f, const ir_graph *g, const rt_train_opts *o, int64_t M, int t, bool report,
                              diag *d)
{
    f->tokens = find_input(g, "tokens");
    f->labels = find_input(g, "labels");
    if (!f->tokens || !f->labels || f->tokens->dtype != IR_I32 || f->tokens->shape.rank != 2 ||
        !ir_shape_eq(&f->tokens->shape, &f->labels->shape)) {
        diag_error_plain(d, "--data feeds inputs 'tokens' and 'labels' of type i32[seq, batch]; model '%s' "
                         "does not declare them so (use --inputs FILE.safetensors for other inputs)", g->model);
        return false;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = g->nodes[i];
        if ((n->flags & IR_NF_INPUT) && n != f->tokens && n != f->labels) {
            diag_error_plain(d, "--data feeds only 'tokens' and 'labels', but model '%s' also has input '%s' "
                             "(use --inputs FILE.safetensors)", g->model, n->name);
            return false;
        }
    }
    f->s = f->tokens->shape.dim[0];
    f->b = f->tokens->shape.dim[1];
    int64_t vocab = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == IR_OP_EMBEDDING && g->nodes[i]->src[0] == f->tokens)
            vocab = rt_param_logical_shape(g->nodes[i]->src[1], t).dim[0];
    if (o->tokenizer && vocab && tgc_tokenizer_vocab_size(o->tokenizer) > vocab) {
        diag_error_plain(d, "the tokenizer %s has a vocabulary of %lld tokens, but model '%s' only %lld: its "
                         "vocabulary must cover the tokenizer's", tgc_tokenizer_kind_name(tgc_tokenizer_kind_of(o->tokenizer)),
                         (long long)tgc_tokenizer_vocab_size(o->tokenizer), g->model, (long long)vocab);
        return false;
    }
    f->vocab = vocab ? vocab : INT32_MAX;
    int nwords;
    const char *const *words = rt_train_data_words(o, &nwords);
    tgc_blend_spec spec;
    if (!tgc_blend_spec_parse(nwords, words, &spec, d)) return false;
    const char *path = spec.paths[0]; /* one of o's words */
    bool blended = spec.n > 1;
    bool ok = !blended || feeder_open_blend(f, &spec, vocab ? vocab : INT32_MAX, M, o, report, d);
    tgc_blend_spec_free(&spec);
    if (!ok) return false;
    /* The rows of one (micro-)batch on the host, allocated once. */
    f->tok = xmalloc((size_t)(f->s * f->b) * sizeof *f->tok);
    f->lab = xmalloc((size_t)(f->s * f->b) * sizeof *f->lab);
    if (blended) return true;
    f->data = tgc_data_open_tokenized(path, vocab ? vocab : INT32_MAX, o->tokenizer, d);
    if (!f->data || !tgc_data_check_seq(f->data, f->s, d)) return false;
    int64_t n = tgc_data_nsamples(f->data, f->s);
    f->count = n;
    if (o->split_valid > 0) {
        /* Megatron's --split: contiguous parts of the samples, in order. */
        f->count = (int64_t)floor((double)n * o->split_train);
        f->vfirst = f->count;
        f->vcount = (int64_t)floor((double)n * (o->split_train + o->split_valid)) - f->count;
        if (f->count < 1 || f->vcount < 1) {
            diag_error_plain(d, "%s: --split gives %lld training and %lld validation samples of %lld tokens (of %lld); "
                             "each part needs at least one", path, (long long)f->count, (long long)f->vcount,
                             (long long)f->s, (long long)n);
            return false;
        }
    }
    if (o->shuffle) f->order = tgc_data_order_new(f->count, (uint64_t)o->seed);
    return true;
}

/* --valid-data-path: a validation blend of its own (each dataset whole),
 * for an evaluation of eval_iters global batches of M*b rows. */
static bool feeder_open_valid(feeder *f, int64_t M, const rt_train_opts *o, bool report, diag *d)
{
    tgc_blend_spec spec;
    if (!tgc_blend_spec_parse(o->nvalid_data_path, o->valid_data_path, &spec, d)) return false;
    tgc_blend_opts bo = {.s = f->s, .vocab = f->vocab, .valid_samples = o->eval_iters * M * f->b,
                         .validation_only = true, .tokenizer = o->tokenizer};
    f->vblend = tgc_blend_open(&spec, &bo, d);
    tgc_blend_spec_free(&spec);
    if (f->vblend && report && !o->quiet) tgc_blend_describe(f->vblend, stderr);
    return f->vblend != NULL;
}

bool feeder_open_data(feeder *f, const ir_graph *g, const rt_train_opts *o, int64_t M, int t, bool report,
                             diag *d)
{
    return feeder_open_train(f, g, o, M, t, report, d) && (!o->nvalid_data_path || feeder_open_valid(f, M, o, report, d));
}

bool feeder_open_batches(feeder *f, const ir_graph *g, const rt_train_opts *o, diag *d)
{
    f->batches = tgc_st_open(o->inputs, d);
    if (!f->batches) return false;
    bool ok = true;
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = g->nodes[i];
        if (!(n->flags & IR_NF_INPUT)) continue;
        const tgc_st_info *t = tgc_st_find(f->batches, n->name);
        tgc_st_dtype want = TGC_ST_F32;
        rt_st_dtype_of(n->dtype, &want);
        bool fits = t && t->dtype == want && t->rank == n->shape.rank + 1 && t->shape[0] > 0;
        for (int k = 0; fits && k < n->shape.rank; k++) fits = t->shape[k + 1] == n->shape.dim[k];
        if (!fits) {
            char ty[96];
            ir_type_str(n->dtype, &n->shape, ty, sizeof ty);
            diag_error_plain(d, "%s: tensor '%s' must be %s with a leading batch-count dimension (the input's "
                             "type is %s)", o->inputs, n->name, t ? "present" : "present", ty);
            ok = false;
        }
    }
    return ok;
}

/* A pipeline run's input n: global micro-batch g of step, rows
 * [g*b, (g+1)*b) of the step's M*b (rt_pipe_feed_fn). With --inputs,
 * batch entry step*M + g. In an evaluation, step is the evaluation's
 * batch k and the rows come from the validation samples, in order. */
void feeder_feed(void *ctx, const ir_node *n, void *dst, int64_t step, int64_t g)
{
    feeder *f = ctx;
    int64_t bytes = ir_shape_numel(&n->shape) * ir_dtype_size(n->dtype);
    if (f->eval && f->vblend) {
        tgc_blend_batch_rows(f->vblend, TGC_BLEND_VALID, step, f->M * f->b, g * f->b, f->b, f->tok, f->lab);
        memcpy(dst, n == f->tokens ? f->tok : f->lab, (size_t)bytes);
        return;
    }
    if (f->blend) {
        tgc_blend_batch_rows(f->blend, f->eval ? TGC_BLEND_VALID : TGC_BLEND_TRAIN, step, f->M * f->b, g * f->b, f->b,
                             f->tok, f->lab);
        memcpy(dst, n == f->tokens ? f->tok : f->lab, (size_t)bytes);
        return;
    }
    if (f->data) {
        if (f->eval)
            tgc_data_batch_range(f->data, NULL, f->vfirst, f->vcount, step, f->s, f->M * f->b, g * f->b, f->b, f->tok,
                                 f->lab);
        else
            tgc_data_batch_range(f->data, f->order, f->first, f->count, step, f->s, f->M * f->b, g * f->b, f->b,
                                 f->tok, f->lab);
        memcpy(dst, n == f->tokens ? f->tok : f->lab, (size_t)bytes);
        return;
    }
    const tgc_st_info *t = tgc_st_find(f->batches, n->name);
    memcpy(dst, (const char *)t->data + ((step * f->M + g) % t->shape[0]) * bytes, (size_t)bytes);
}

void feeder_close(feeder *f)
{
    free(f->tok);
    free(f->lab);
    tgc_data_order_free(f->order);
    tgc_data_close(f->data);
    tgc_blend_close(f->blend);
    tgc_blend_close(f->vblend);
    tgc_st_close(f->batches);
}

