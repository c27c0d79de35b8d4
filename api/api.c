/* The public C API (include/tgc.h) over the library's internals: the
 * option table (api/config.c), loading and compiling (api/model.c,
 * api/compile.c) and the training loop's trainer (runtime/train/train.h).
 * Every call writes its diagnostics into a memory stream, never to the
 * terminal; a failed call keeps that text as tgc_last_error(). */
#include "tgc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/generate.h"
#include "api/internal.h"
#include "codegen/codegen.h"
#include "runtime/io/log.h"
#include "runtime/io/run_files.h"
#include "runtime/plan.h"
#include "passes/pass.h"
#include "support/util.h"
#include "tokenizer/tokenizer.h"

enum { API_SETS_MAX = 64 };

struct tgc_options {
    tgc_config c;
    fe_override sets[API_SETS_MAX]; /* --set and the model flags; names and values owned */
    int nsets;
};

struct tgc_plan {
    tgc_config c;
    ir_graph *g;   /* the compiled graph */
    char *lowered; /* its text IR before the passes (what a plan recompiles from) */
    char *model;   /* the model or plan file it came from, or NULL (a string) */
};

struct tgc_generator {
    api_gen *G;
};

struct tgc_trainer {
    rt_trainer *T;
    tgc_tokenizer *tok; /* the text data's (tokenizer-type), or NULL */
    bool failed;
};

/* ---- errors ------------------------------------------------------------------- */

static _Thread_local char *last_error;

static void error_clear(void)
{
    free(last_error);
    last_error = NULL;
}

const char *tgc_last_error(void) { return last_error ? last_error : ""; }

const char *tgc_version(void) { return "0.1.0"; }

/* One call's diagnostics: a memory stream (open_memstream, POSIX). */
typedef struct api_call {
    FILE *f;
    char *buf;
    size_t len;
    diag d;
} api_call;

static void call_begin(api_call *a)
{
    error_clear();
    a->buf = NULL;
    a->len = 0;
    a->f = open_memstream(&a->buf, &a->len);
    TGC_ASSERT(a->f); /* only out of memory fails it */
    diag_init(&a->d, a->f);
}

/* Ends the call with status st: its text becomes the last error when st
 * is not TGC_OK (without the trailing newline). */
static tgc_status call_end(api_call *a, tgc_status st)
{
    diag_finish(&a->d);
    diag_free(&a->d);
    fclose(a->f);
    if (st != TGC_OK) {
        size_t n = a->len;
        while (n > 0 && a->buf[n - 1] == '\n') n--;
        a->buf[n] = 0;
        last_error = n ? a->buf : xstrdup("tgc: error: the call failed without a message (a bug: please report it)");
        if (!n) free(a->buf);
    } else {
        free(a->buf);
    }
    return st;
}

static tgc_status misuse(const char *fn, const char *what)
{
    error_clear();
    size_t n = strlen(fn) + strlen(what) + 32;
    last_error = xmalloc(n);
    snprintf(last_error, n, "tgc: error: %s: %s", fn, what);
    return TGC_EINVAL;
}

/* ---- options ------------------------------------------------------------------ */

tgc_status tgc_options_new(tgc_options **out)
{
    if (!out) return misuse("tgc_options_new", "out is NULL");
    error_clear();
    tgc_options *o = xcalloc(1, sizeof *o);
    tgc_config_defaults(&o->c);
    o->c.quiet = true; /* a library prints nothing unless asked (not "given": a plan's quiet stays) */
    *out = o;
    return TGC_OK;
}

void tgc_options_free(tgc_options *o)
{
    if (!o) return;
    for (int i = 0; i < o->nsets; i++) {
        free((char *)o->sets[i].name);
        free((char *)o->sets[i].value);
    }
    free(o);
}

static tgc_status usage(api_call *a, const char *fmt, const char *x, const char *y)
{
    fprintf(a->f, "tgc: error: ");
    fprintf(a->f, fmt, x, y);
    fputc('\n', a->f);
    return call_end(a, TGC_EUSAGE);
}

/* --set NAME=VALUE or a model flag (fe_model_flags). */
static tgc_status options_override(api_call *a, tgc_options *o, const char *name, const char *value, bool flag)
{
    if (!value || !*value) return usage(a, "--%s: expected a value%s", name, flag ? "" : " NAME=VALUE");
    if (o->nsets >= API_SETS_MAX - 1) return usage(a, "--%s %s: too many --set and model-flag overrides", name, value);
    if (flag) {
        o->sets[o->nsets++] = (fe_override){xstrdup(name), xstrdup(value), true};
        return call_end(a, TGC_OK);
    }
    const char *eq = strchr(value, '=');
    if (!eq || eq == value || !eq[1]) return usage(a, "--set '%s': expected NAME=VALUE%s", value, "");
    char *k = xstrdup(value);
    k[eq - value] = 0;
    o->sets[o->nsets++] = (fe_override){k, xstrdup(eq + 1), false};
    return call_end(a, TGC_OK);
}

tgc_status tgc_options_set(tgc_options *o, const char *name, const char *value)
{
    if (!o || !name) return misuse("tgc_options_set", "options or name is NULL");
    api_call a;
    call_begin(&a);
    if (strcmp(name, "set") == 0) return options_override(&a, o, name, value, false);
    for (int i = 0; fe_model_flags[i]; i++)
        if (strcmp(fe_model_flags[i], name) == 0) return options_override(&a, o, name, value, true);
    int i = tgc_config_opt_find(name);
    if (i < 0) return usage(&a, "unknown option '--%s'%s (docs/tools.md lists them)", name, "");
    const tgc_opt_def *d = tgc_config_opt_at(i);
    if (d->kind == TGC_OPT_FLAG) {
        if (value && strcmp(value, "true") != 0 && strcmp(value, "false") != 0)
            return usage(&a, "--%s is a flag: expected NULL, \"true\" or \"false\", got '%s'", d->name, value);
        if (value && strcmp(value, "false") == 0) tgc_config_unset_flag(&o->c, i);
        else tgc_config_set_to(&o->c, i, NULL, a.f);
        return call_end(&a, TGC_OK);
    }
    if (!value) return usage(&a, "--%s: expected a value%s", d->name, "");
    /* Strings live as long as the process (configurations are copied by value). */
    const char *kept = d->kind == TGC_OPT_CHOICE || d->kind == TGC_OPT_INT || d->kind == TGC_OPT_FLOAT
                     ? value : tgc_config_keep(xstrdup(value));
    return call_end(&a, tgc_config_set_to(&o->c, i, kept, a.f) ? TGC_EUSAGE : TGC_OK);
}

/* ---- plans -------------------------------------------------------------------- */

/* The options of the tgc compile command's reports and output, given to a
 * library call that has its own way (tgc_plan_save): refused by name. */
static bool refuse_compile_opts(api_call *a, const tgc_config *c, const char *fn)
{
    strbuf why;
    sb_init(&why);
    int n = tgc_config_changes(c, NULL, TGC_USE_COMPILE, &why);
    if (n) fprintf(a->f, "tgc: error: %s: %s %s of the tgc compile command (tgc_plan_save writes a plan)\n", fn, why.s,
                   n > 1 ? "are options" : "is an option");
    sb_free(&why);
    return n != 0;
}

/* The overrides of o, with --micro-batch-size as the `batch` hyperparameter
 * (as the command line does); false after a usage error. */
static bool compile_sets(api_call *a, const tgc_options *o, const tgc_config *c, fe_override *sets, int *n,
                         char *batch, size_t cap)
{
    *n = 0;
    for (int i = 0; o && i < o->nsets; i++) sets[(*n)++] = o->sets[i];
    if (!c->micro_batch_size) return true;
    for (int i = 0; i < *n; i++)
        if (!sets[i].flag && strcmp(sets[i].name, "batch") == 0) {
            fprintf(a->f, "tgc: error: --micro-batch-size %lld and --set batch=%s both set hyperparameter 'batch'; "
                    "give one\n", (long long)c->micro_batch_size, sets[i].value);
            return false;
        }
    snprintf(batch, cap, "%lld", (long long)c->micro_batch_size);
    sets[(*n)++] = (fe_override){"batch", batch, false};
    return true;
}

static tgc_status compile(const char *path, const char *name, const char *text, const tgc_options *o,
                          tgc_plan **out)
{
    api_call a;
    call_begin(&a);
    tgc_config c;
    if (o) c = o->c;
    else {
        tgc_config_defaults(&c);
        c.quiet = true;
    }
    fe_override sets[API_SETS_MAX];
    int nsets;
    char batch[32];
    if (refuse_compile_opts(&a, &c, path ? "tgc_compile_file" : "tgc_compile_string") ||
        tgc_config_check_to(&c, a.f) || !compile_sets(&a, o, &c, sets, &nsets, batch, sizeof batch))
        return call_end(&a, TGC_EUSAGE);
    ir_graph *g = path ? api_model_load(path, sets, nsets, &a.d)
                       : api_model_load_text(name, name, text, strlen(text), sets, nsets, &a.d);
    char *lowered = NULL;
    g = api_compile_graph(g, &c, &lowered, &a.d);
    if (!g) {
        free(lowered);
        return call_end(&a, TGC_ERROR);
    }
    tgc_plan *p = xcalloc(1, sizeof *p);
    *p = (tgc_plan){c, g, lowered, path ? xstrdup(path) : NULL};
    *out = p;
    return call_end(&a, TGC_OK);
}

tgc_status tgc_compile_file(const char *path, const tgc_options *o, tgc_plan **out)
{
    if (!path || !out) return misuse("tgc_compile_file", "path or out is NULL");
    *out = NULL;
    return compile(path, NULL, NULL, o, out);
}

tgc_status tgc_compile_string(const char *name, const char *text, const tgc_options *o, tgc_plan **out)
{
    if (!text || !out) return misuse("tgc_compile_string", "text or out is NULL");
    *out = NULL;
    return compile(NULL, name && *name ? name : "<string>", text, o, out);
}

tgc_status tgc_plan_save(const tgc_plan *p, const char *path)
{
    if (!p || !path) return misuse("tgc_plan_save", "plan or path is NULL");
    api_call a;
    call_begin(&a);
    rt_run_file in[] = {{"the model", p->model}}, outf[] = {{"the plan", path}};
    bool ok = rt_files_check(in, 1, outf, (const bool[]){false}, 1, NULL, 0, &a.d);
    cg_program *prog = ok ? cg_build(p->g, &a.d) : NULL;
    ok = prog && api_plan_write(path, &p->c, p->lowered, p->g, prog, &a.d);
    cg_program_free(prog);
    return call_end(&a, ok ? TGC_OK : TGC_ERROR);
}

tgc_status tgc_plan_load(const char *path, const tgc_options *o, tgc_plan **out)
{
    if (!path || !out) return misuse("tgc_plan_load", "path or out is NULL");
    *out = NULL;
    api_call a;
    call_begin(&a);
    tgc_config none, c;
    tgc_config_defaults(&none);
    const tgc_config *over = o ? &o->c : &none;
    if (refuse_compile_opts(&a, over, "tgc_plan_load")) return call_end(&a, TGC_EUSAGE);
    if (o && o->nsets) {
        char given[256];
        api_override_str(&o->sets[0], given, sizeof given);
        fprintf(a.f, "tgc: error: %s: overrides apply to models; '%s' is a compiled plan\n", given, path);
        return call_end(&a, TGC_EUSAGE);
    }
    int rc = 1;
    char *lowered = NULL;
    ir_graph *g = api_plan_load(path, &c, over, &rc, &lowered, &a.d, a.f);
    if (!g) return call_end(&a, rc == 2 ? TGC_EUSAGE : TGC_ERROR);
    if (!o || !tgc_config_given(&o->c, "quiet")) c.quiet = true;
    tgc_plan *p = xcalloc(1, sizeof *p);
    *p = (tgc_plan){c, g, lowered, xstrdup(path)};
    *out = p;
    return call_end(&a, TGC_OK);
}

void tgc_plan_free(tgc_plan *p)
{
    if (!p) return;
    ir_graph_free(p->g);
    free(p->lowered);
    free(p->model);
    free(p);
}

int tgc_plan_ranks(const tgc_plan *p)
{
    if (!p) return 0;
    return (int)(p->c.tp * p->c.pp * p->c.dp);
}

/* ---- training ----------------------------------------------------------------- */

/* A trainer's options: the plan's, with o's run-time ones over them. */
static tgc_status trainer_config(api_call *a, const tgc_plan *p, const tgc_options *o, tgc_config *c)
{
    *c = p->c;
    if (o) {
        strbuf why;
        sb_init(&why);
        int n = tgc_config_changes(&o->c, &p->c, TGC_USE_PASSES, &why) +
                tgc_config_changes(&o->c, &p->c, TGC_USE_MODEL, &why) + tgc_config_changes(&o->c, NULL, TGC_USE_COMPILE, &why);
        if (n)
            fprintf(a->f, "tgc: error: tgc_trainer_new: %s %s compiled into the plan (give %s to tgc_compile_* or "
                    "tgc_plan_load)\n", why.s, n > 1 ? "are" : "is", n > 1 ? "them" : "it");
        sb_free(&why);
        if (n) return TGC_EUSAGE;
        if (o->nsets) {
            char given[256];
            api_override_str(&o->sets[0], given, sizeof given);
            fprintf(a->f, "tgc: error: tgc_trainer_new: %s: overrides apply to models, and the plan is compiled\n",
                    given);
            return TGC_EUSAGE;
        }
        tgc_config_overlay(c, &o->c);
    }
    if (tgc_config_check_to(c, a->f) || tgc_config_check_run_to(c, a->f)) return TGC_EUSAGE;
    if (strcmp(c->comm, "mpi") == 0) {
        fprintf(a->f, "tgc: error: tgc_trainer_new: --comm mpi (a process per rank) is not available through the "
                "library yet: its ranks are threads of this process\n");
        return TGC_EUSAGE;
    }
    return TGC_OK;
}

tgc_status tgc_trainer_new(const tgc_plan *p, const tgc_options *o, tgc_trainer **out)
{
    if (!p || !out) return misuse("tgc_trainer_new", "plan or out is NULL");
    *out = NULL;
    api_call a;
    call_begin(&a);
    tgc_config c;
    tgc_status st = trainer_config(&a, p, o, &c);
    if (st) return call_end(&a, st);
    rt_train_opts ro;
    if (api_train_options(&ro, &c, p->model, a.f)) return call_end(&a, TGC_EUSAGE);
    tgc_tokenizer *tk = NULL; /* the text data's tokenizer: the trainer's while it lives */
    int rc = api_run_tokenizer(&c, &ro, &tk, &a.d, a.f);
    if (rc) return call_end(&a, rc == 2 ? TGC_EUSAGE : TGC_ERROR);
    ro.tokenizer = tk;
    ro.mpi = false; /* "auto" under mpirun: the library's ranks are threads */
    rt_trainer *T = rt_trainer_new(p->g, &ro, &a.d);
    if (!T) {
        tgc_tokenizer_free(tk);
        return call_end(&a, TGC_ERROR);
    }
    tgc_trainer *t = xcalloc(1, sizeof *t);
    t->T = T;
    t->tok = tk;
    *out = t;
    return call_end(&a, TGC_OK);
}

tgc_status tgc_trainer_step(tgc_trainer *t, int64_t n)
{
    if (!t || n < 0) return misuse("tgc_trainer_step", "trainer is NULL or n is negative");
    if (t->failed) return misuse("tgc_trainer_step", "a step of this trainer failed before: free it");
    api_call a;
    call_begin(&a);
    int rc = rt_trainer_steps(t->T, n, &a.d);
    if (rc) {
        t->failed = true;
        if (rc > 128) fprintf(a.f, "tgc: error: a signal (%d) stopped the ranks\n", rc - 128);
    }
    return call_end(&a, rc ? TGC_ERROR : TGC_OK);
}

int64_t tgc_trainer_iteration(const tgc_trainer *t) { return t ? rt_trainer_iteration(t->T) : 0; }

tgc_status tgc_trainer_metrics(const tgc_trainer *t, int64_t it, tgc_metrics *m)
{
    if (!t || !m) return misuse("tgc_trainer_metrics", "trainer or out is NULL");
    if (it == 0) it = rt_trainer_iteration(t->T);
    const tgc_step_stats *s = rt_trainer_stats(t->T, it);
    if (!s) {
        char what[96];
        snprintf(what, sizeof what, "iteration %lld did not run in this trainer", (long long)it);
        return misuse("tgc_trainer_metrics", what);
    }
    error_clear();
    *m = (tgc_metrics){.iteration = s->step, .loss = s->loss, .grad_norm = s->grad_norm, .lr = s->lr,
                       .weight_decay = s->wd, .tokens = rt_trainer_tokens(t->T), .step_ms = s->step_ms,
                       .tokens_per_s = s->tokens_per_s, .loss_scale = s->has_scale ? s->loss_scale : 1.0,
                       .skipped = s->skipped, .val_loss = s->has_val_loss ? s->val_loss : NAN};
    return TGC_OK;
}

tgc_status tgc_trainer_save_checkpoint(tgc_trainer *t, const char *dir)
{
    if (!t || !dir) return misuse("tgc_trainer_save_checkpoint", "trainer or dir is NULL");
    if (t->failed) return misuse("tgc_trainer_save_checkpoint", "a step of this trainer failed: nothing to save");
    api_call a;
    call_begin(&a);
    return call_end(&a, rt_trainer_save(t->T, dir, &a.d) ? TGC_OK : TGC_ERROR);
}

tgc_status tgc_trainer_load_checkpoint(tgc_trainer *t, const char *dir)
{
    if (!t || !dir) return misuse("tgc_trainer_load_checkpoint", "trainer or dir is NULL");
    if (t->failed) return misuse("tgc_trainer_load_checkpoint", "a step of this trainer failed: free it");
    api_call a;
    call_begin(&a);
    return call_end(&a, rt_trainer_load(t->T, dir, &a.d) ? TGC_OK : TGC_ERROR);
}

tgc_status tgc_trainer_free(tgc_trainer *t)
{
    if (!t) return TGC_OK;
    api_call a;
    call_begin(&a);
    int rc = rt_trainer_end(t->T, &a.d);
    bool failed = t->failed;
    tgc_tokenizer_free(t->tok);
    free(t);
    return call_end(&a, rc && !failed ? TGC_ERROR : TGC_OK);
}

/* ---- tokenizers ---------------------------------------------------------------- */

/* The tokenizer options of opts (NULL: none); false after the usage error. */
static bool tokenizer_opts(api_call *a, const tgc_options *o, tgc_tokenizer_opts *to)
{
    *to = (tgc_tokenizer_opts){0};
    if (o) *to = (tgc_tokenizer_opts){o->c.tokenizer_type, o->c.vocab_file, o->c.merge_file, o->c.tokenizer_model};
    char why[512];
    if (tgc_tokenizer_opts_check(to, why, sizeof why)) return true;
    fprintf(a->f, "tgc: error: %s\n", why);
    return false;
}

tgc_status tgc_tokenizer_open(const tgc_options *o, tgc_tokenizer **out)
{
    if (!out) return misuse("tgc_tokenizer_open", "out is NULL");
    *out = NULL;
    api_call a;
    call_begin(&a);
    tgc_tokenizer_opts to;
    if (!tokenizer_opts(&a, o, &to)) return call_end(&a, TGC_EUSAGE);
    *out = tokenizer_open(&to, &a.d);
    return call_end(&a, *out ? TGC_OK : TGC_ERROR);
}

const char *tgc_tokenizer_type(const tgc_tokenizer *t)
{
    return t ? tgc_tokenizer_kind_name(tgc_tokenizer_kind_of(t)) : "";
}

tgc_status tgc_tokenizer_encode(const tgc_tokenizer *t, const char *text, size_t len, int32_t **ids, int64_t *n)
{
    if (!t || (!text && len) || !ids || !n) return misuse("tgc_tokenizer_encode", "tokenizer, text, ids or n is NULL");
    *ids = NULL;
    *n = 0;
    api_call a;
    call_begin(&a);
    int64_t cap = 0;
    bool ok = tokenizer_encode(t, (const unsigned char *)(text ? text : ""), len, ids, n, &cap, "the text", &a.d);
    if (!ok) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    return call_end(&a, ok ? TGC_OK : TGC_ERROR);
}

/* A strbuf's text as a malloc'd NUL-terminated string. */
static char *sb_take(strbuf *b, size_t *len)
{
    char *s = xmalloc(b->len + 1);
    if (b->len) memcpy(s, b->s, b->len);
    s[b->len] = 0;
    if (len) *len = b->len;
    sb_free(b);
    return s;
}

tgc_status tgc_tokenizer_decode(const tgc_tokenizer *t, const int32_t *ids, int64_t n, char **text, size_t *len)
{
    if (!t || (!ids && n) || n < 0 || !text) return misuse("tgc_tokenizer_decode", "tokenizer, ids or text is NULL");
    *text = NULL;
    if (len) *len = 0;
    api_call a;
    call_begin(&a);
    strbuf b;
    sb_init(&b);
    bool ok = tokenizer_decode(t, ids, n, &b, &a.d);
    if (ok) *text = sb_take(&b, len);
    else sb_free(&b);
    return call_end(&a, ok ? TGC_OK : TGC_ERROR);
}

/* ---- generation ---------------------------------------------------------------- */

/* The options a generator takes: what `tgc sample` reads from the table. */
static const char *const gen_opts[] = {"backend",    "attention-backend", "tokenizer-type", "vocab-file",
                                       "merge-file", "tokenizer-model",   NULL};

static tgc_status generator_opts(api_call *a, const tgc_options *o, bool plan, api_gen_opts *go)
{
    tgc_config c;
    if (o) c = o->c;
    else tgc_config_defaults(&c);
    strbuf bad;
    sb_init(&bad);
    int nbad = 0;
    for (int i = 0; i < tgc_config_nopts(); i++) {
        const char *name = tgc_config_opt_at(i)->name;
        bool ok = !tgc_config_given(&c, name);
        for (int k = 0; !ok && gen_opts[k]; k++) ok = strcmp(gen_opts[k], name) == 0;
        if (!ok) {
            sb_printf(&bad, "%s--%s", nbad ? ", " : "", name);
            nbad++;
        }
    }
    if (nbad) {
        fprintf(a->f, "tgc: error: tgc_generator_new: %s %s not %s of generation (it takes backend, "
                "attention-backend, the tokenizer's options and, for a model, set and the model flags)\n", bad.s,
                nbad > 1 ? "are" : "is", nbad > 1 ? "options" : "an option");
        sb_free(&bad);
        return TGC_EUSAGE;
    }
    sb_free(&bad);
    if (plan && o && o->nsets) {
        char given[256];
        api_override_str(&o->sets[0], given, sizeof given);
        fprintf(a->f, "tgc: error: tgc_generator_new_plan: %s: overrides apply to models, and the plan is compiled\n",
                given);
        return TGC_EUSAGE;
    }
    int attention = 0;
    if (!pass_attention_backend_parse(c.attention_backend, &attention)) {
        fprintf(a->f, "tgc: error: --attention-backend: '%s' is not a known backend\n", c.attention_backend);
        return TGC_EUSAGE;
    }
    if (!tokenizer_opts(a, o, &go->tok)) return TGC_EUSAGE;
    go->sets = o ? o->sets : NULL;
    go->nsets = o ? o->nsets : 0;
    go->backend = strcmp(c.backend, "cuda") == 0 ? RT_BACKEND_CUDA
                : strcmp(c.backend, "sim") == 0  ? RT_BACKEND_SIM
                                                 : RT_BACKEND_CPU;
    go->attention = attention;
    go->tok_from = "from the options";
    return TGC_OK;
}

static tgc_status generator_new(const char *model, const tgc_plan *p, const char *weights, const tgc_options *o,
                                unsigned flags, tgc_generator **out)
{
    api_call a;
    call_begin(&a);
    if (flags & ~TGC_GENERATE_NO_KV_CACHE) {
        fprintf(a.f, "tgc: error: tgc_generator_new: unknown flags 0x%x\n", flags & ~TGC_GENERATE_NO_KV_CACHE);
        return call_end(&a, TGC_EUSAGE);
    }
    api_gen_opts go = {.model = model, .weights = weights, .no_kv_cache = (flags & TGC_GENERATE_NO_KV_CACHE) != 0};
    if (p) {
        go.plan = p->g;
        go.plan_tp = (long long)p->c.tp;
        go.plan_pp = (long long)p->c.pp;
    }
    tgc_status st = generator_opts(&a, o, p != NULL, &go);
    if (st) return call_end(&a, st);
    api_gen *G = api_gen_new(&go, &a.d, a.f);
    if (!G) return call_end(&a, TGC_ERROR);
    tgc_generator *g = xcalloc(1, sizeof *g);
    g->G = G;
    *out = g;
    return call_end(&a, TGC_OK);
}

tgc_status tgc_generator_new(const char *model, const char *weights, const tgc_options *o, unsigned flags,
                             tgc_generator **out)
{
    if (!model || !weights || !out) return misuse("tgc_generator_new", "model, weights or out is NULL");
    *out = NULL;
    return generator_new(model, NULL, weights, o, flags, out);
}

tgc_status tgc_generator_new_plan(const tgc_plan *p, const char *weights, const tgc_options *o, unsigned flags,
                                  tgc_generator **out)
{
    if (!p || !weights || !out) return misuse("tgc_generator_new_plan", "plan, weights or out is NULL");
    *out = NULL;
    return generator_new(p->model ? p->model : "<plan>", p, weights, o, flags, out);
}

void tgc_generator_free(tgc_generator *g)
{
    if (!g) return;
    api_gen_free(g->G);
    free(g);
}

int64_t tgc_generator_context(const tgc_generator *g)
{
    if (!g) return 0;
    api_gen_info in;
    api_gen_describe(g->G, &in);
    return in.context;
}

int64_t tgc_generator_vocab_size(const tgc_generator *g)
{
    if (!g) return 0;
    api_gen_info in;
    api_gen_describe(g->G, &in);
    return in.vocab;
}

const tgc_tokenizer *tgc_generator_tokenizer(const tgc_generator *g)
{
    if (!g) return NULL;
    api_gen_info in;
    api_gen_describe(g->G, &in);
    return in.tok;
}

void tgc_generation_free(tgc_generation *r)
{
    if (!r) return;
    free(r->tokens);
    free(r->text);
    *r = (tgc_generation){0};
}

enum { API_GENERATE_MAX = 1000000 }; /* tgc sample's --tokens limit */

tgc_status tgc_generate(tgc_generator *g, const char *text, const int32_t *ids, int64_t nids, int64_t n,
                        double temperature, int64_t top_k, uint64_t seed, tgc_generation *out)
{
    if (!out) return misuse("tgc_generate", "out is NULL");
    *out = (tgc_generation){0};
    if (!g) return misuse("tgc_generate", "generator is NULL");
    if (!text == !ids) return misuse("tgc_generate", "give one of text and prompt_tokens");
    if (ids && nids < 0) return misuse("tgc_generate", "nprompt is negative");
    api_call a;
    call_begin(&a);
    if (n < 0 || n > API_GENERATE_MAX) {
        fprintf(a.f, "tgc: error: tgc_generate: n %lld: expected an integer from 0 to %d\n", (long long)n,
                API_GENERATE_MAX);
        return call_end(&a, TGC_EUSAGE);
    }
    if (!isfinite(temperature) || temperature < 0) {
        fprintf(a.f, "tgc: error: tgc_generate: temperature %g: expected a number >= 0 (0: greedy)\n", temperature);
        return call_end(&a, TGC_EUSAGE);
    }
    if (top_k < 0) {
        fprintf(a.f, "tgc: error: tgc_generate: top_k %lld: expected an integer >= 0 (0: every token)\n",
                (long long)top_k);
        return call_end(&a, TGC_EUSAGE);
    }
    if ((text && !*text) || (ids && nids == 0)) {
        fprintf(a.f, "tgc: error: tgc_generate: the prompt is empty: the model needs at least one token\n");
        return call_end(&a, TGC_EUSAGE);
    }
    api_gen_info in;
    api_gen_describe(g->G, &in);
    const char *where = text ? "the prompt" : "the prompt's tokens";
    int64_t len = 0;
    int32_t *ctx = api_gen_encode(g->G, text, ids, nids, n, &len, where, &a.d);
    if (!ctx) return call_end(&a, TGC_ERROR);
    if (!api_gen_check_prompt(g->G, ctx, len, where, text && !in.tok, &a.d)) {
        free(ctx);
        return call_end(&a, TGC_ERROR);
    }
    out->nprompt = len;
    bool ok = api_gen_run(g->G, ctx, &len, n, temperature, top_k, seed, NULL, NULL, NULL, &a.d);
    out->tokens = ctx;
    out->ntokens = len;
    if (in.tok) {
        strbuf b;
        sb_init(&b);
        if (tokenizer_decode(in.tok, ctx, len, &b, &a.d)) out->text = sb_take(&b, &out->text_len);
        else {
            sb_free(&b);
            ok = false;
        }
    } else if (in.vocab <= 256) { /* bytes: every id is one */
        out->text = xmalloc((size_t)len + 1);
        for (int64_t i = 0; i < len; i++) out->text[i] = (char)ctx[i];
        out->text[len] = 0;
        out->text_len = (size_t)len;
    }
    return call_end(&a, ok ? TGC_OK : TGC_ERROR);
}

tgc_status tgc_generator_logits(tgc_generator *g, const int32_t *tokens, int64_t n, float **logits)
{
    if (!logits) return misuse("tgc_generator_logits", "logits is NULL");
    *logits = NULL;
    if (!g || !tokens || n <= 0) return misuse("tgc_generator_logits", "generator or tokens is NULL, or n < 1");
    api_call a;
    call_begin(&a);
    bool ok = api_gen_check_prompt(g->G, tokens, n, "the tokens", false, &a.d) &&
              api_gen_prompt_logits(g->G, tokens, n, logits, "tgc_generator_logits", &a.d);
    return call_end(&a, ok ? TGC_OK : TGC_ERROR);
}
