/* The public C API (include/tgc.h) over the library's internals: the
 * option table (api/config.c), loading and compiling (api/model.c,
 * api/compile.c) and the training loop's trainer (runtime/train/train.h).
 * Every call writes its diagnostics into a memory stream, never to the
 * terminal; a failed call keeps that text as tgc_last_error(). */
#define _GNU_SOURCE /* fopencookie: diagnostics echoed as they are written (tgc_set_diagnostics) */
#include "tgc.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/fusion_report.h"
#include "api/gemm_report.h"
#include "api/generate.h"
#include "api/internal.h"
#include "api/kernel_report.h"
#include "codegen/codegen.h"
#include "runtime/backend/blas.h"
#include "runtime/io/log.h"
#include "runtime/io/run_files.h"
#include "runtime/plan.h"
#include "runtime/train/stop.h"
#include "passes/pass.h"
#include "support/env.h"
#include "support/util.h"
#include "tokenizer/tokenizer.h"

enum { API_SETS_MAX = 64 };

/* Every handle's first field while it is live; a free clears it before the
 * memory goes back, so a freed (or foreign) handle given to an entry point
 * is a TGC_EINVAL naming the function, not a crash (docs/api.md, "Handles":
 * what this catches and what it cannot). */
enum {
    API_MAGIC_OPTIONS = 0x4f434754u,   /* "TGCO" */
    API_MAGIC_PLAN = 0x50434754u,      /* "TGCP" */
    API_MAGIC_TRAINER = 0x54434754u,   /* "TGCT" */
    API_MAGIC_GENERATOR = 0x47434754u, /* "TGCG" */
    API_MAGIC_FREED = 0xdeadbeefu,
};

struct tgc_options {
    uint32_t magic; /* API_MAGIC_OPTIONS while live (api_stale) */
    tgc_config c;
    fe_override sets[API_SETS_MAX]; /* --set and the model flags; names and values owned */
    int nsets;
    bool quiet_default;             /* quiet is the library's (tgc_options_new's), not tgc run's */
    char *origin;                   /* how messages name where the options came from (NULL: "from the options") */
    char *text[TGC_CONFIG_NOPTS_MAX]; /* tgc_options_get's answers */
};

struct tgc_plan {
    uint32_t magic; /* API_MAGIC_PLAN while live (api_stale) */
    tgc_config c;
    ir_graph *g;   /* the compiled graph */
    char *lowered; /* its text IR before the passes (what a plan recompiles from) */
    char *model;   /* the model or plan file it came from, or NULL (a string) */
    char *source;  /* a string model's text (the fusion report recompiles it), or NULL */
    char *name;    /* the name a string model is known by */
    fe_override *sets; /* the overrides it was compiled with (names, values owned) */
    int nsets;
    bool from_model;      /* compiled here (not a plan file): the fusion report can recompile it */
    bool has_figures;     /* figures computed (by tgc_compile_* with "output", or tgc_plan_figures_get) */
    diag sources;         /* the texts its compile read: the later calls' messages quote their lines */
    api_plan_figures fig;
};

struct tgc_generator {
    uint32_t magic; /* API_MAGIC_GENERATOR while live (api_stale) */
    api_gen *G;
    char *origin; /* the options' origin, as the generator's messages name it */
};

struct tgc_trainer {
    uint32_t magic; /* API_MAGIC_TRAINER while live (api_stale) */
    rt_trainer *T;
    const tgc_plan *plan;
    tgc_tokenizer *tok; /* the text data's (tokenizer-type), or NULL */
    bool failed;
};

/* ---- errors ------------------------------------------------------------------- */

/* The calling thread's last error. The key's destructor frees it when a
 * thread that made a failed call ends (the thread-local pointer alone
 * would lose it). */
static _Thread_local char *last_error;
static pthread_key_t error_key;
static pthread_once_t error_once = PTHREAD_ONCE_INIT;
static bool error_keyed;

static void error_key_make(void) { error_keyed = pthread_key_create(&error_key, free) == 0; }

/* The thread's last error becomes s (owned; NULL: none). */
static void error_set(char *s)
{
    free(last_error);
    last_error = s;
    pthread_once(&error_once, error_key_make);
    if (error_keyed) (void)pthread_setspecific(error_key, s);
}

static void error_clear(void) { error_set(NULL); }

const char *tgc_last_error(void) { return last_error ? last_error : ""; }

const char *tgc_version(void) { return "0.1.0"; }

const char *tgc_blas_describe(void) { return rt_blas_describe(); }

static FILE *echo; /* tgc_set_diagnostics */

void tgc_set_diagnostics(FILE *f) { echo = f; }

static ssize_t tee_write(void *cookie, const char *buf, size_t n)
{
    api_call *a = cookie;
    fwrite(buf, 1, n, a->mem);
    fwrite(buf, 1, n, a->echo);
    fflush(a->echo);
    return (ssize_t)n;
}

void api_call_begin(api_call *a)
{
    error_clear();
    a->buf = NULL;
    a->len = 0;
    a->mem = a->f = open_memstream(&a->buf, &a->len);
    TGC_ASSERT(a->f); /* only out of memory fails it */
    a->echo = echo;
    if (a->echo) {
        /* Unbuffered: interleaved with what the runtime prints on stderr directly, in order. */
        a->f = fopencookie(a, "w", (cookie_io_functions_t){.write = tee_write});
        TGC_ASSERT(a->f);
        setvbuf(a->f, NULL, _IONBF, 0);
    }
    diag_init(&a->d, a->f);
}

/* Ends the call with status st: its text becomes the last error when st
 * is not TGC_OK (without the trailing newline). */
tgc_status api_call_end(api_call *a, tgc_status st)
{
    diag_finish(&a->d);
    diag_free(&a->d);
    if (a->f != a->mem) fclose(a->f);
    fclose(a->mem);
    if (st != TGC_OK) {
        size_t n = a->len;
        while (n > 0 && a->buf[n - 1] == '\n') n--;
        a->buf[n] = 0;
        if (n) error_set(a->buf);
        else {
            free(a->buf);
            error_set(xstrdup("tgc: error: the call failed without a message (a bug: please report it)"));
        }
    } else {
        free(a->buf);
    }
    return st;
}

#define call_begin api_call_begin
#define call_end api_call_end

/* Ends the call with status st and message msg as the last error, which
 * is not echoed (tgc_set_diagnostics): the caller says it in its own words
 * (a signal's stop, a failed KV-cache check: `tgc sample` prints figures). */
static tgc_status call_end_quiet(api_call *a, tgc_status st, const char *msg)
{
    call_end(a, TGC_OK);
    error_set(xstrdup(msg));
    return st;
}

static tgc_status misuse(const char *fn, const char *what)
{
    size_t n = strlen(fn) + strlen(what) + 32;
    char *m = xmalloc(n);
    snprintf(m, n, "tgc: error: %s: %s", fn, what);
    error_set(m);
    return TGC_EINVAL;
}

/* True (after the misuse error naming fn) when h is not NULL and not a live
 * handle of its type. */
#define API_STALE(h, MAGIC, fn, type) ((h) && (h)->magic != (MAGIC) && stale(fn, type))

/* Marks a handle freed, through a volatile store: a plain one, just before
 * free(), is a dead store the compiler may drop. */
static void retire(uint32_t *magic) { *(volatile uint32_t *)magic = API_MAGIC_FREED; }

static bool stale(const char *fn, const char *type)
{
    char what[160];
    snprintf(what, sizeof what, "the %s is not a live one (freed already, or not a %s)", type, type);
    misuse(fn, what);
    return true;
}

/* A TGC_* variable set to what its row of support/env.c refuses stops
 * the calls that compile, load or run (true, with the status in *st). */
static bool env_refuses(tgc_status *st)
{
    char why[512];
    if (env_check(why, sizeof why)) return false;
    error_set(xstrdup(why));
    if (echo) fprintf(echo, "%s\n", why);
    *st = TGC_EUSAGE;
    return true;
}

/* ---- options ------------------------------------------------------------------ */

tgc_status tgc_options_new(tgc_options **out)
{
    if (!out) return misuse("tgc_options_new", "out is NULL");
    error_clear();
    tgc_options *o = xcalloc(1, sizeof *o);
    o->magic = API_MAGIC_OPTIONS;
    tgc_config_defaults(&o->c);
    o->c.quiet = true; /* a library prints nothing unless asked (not "given": a plan's quiet stays) */
    o->quiet_default = true;
    *out = o;
    return TGC_OK;
}

static void options_text_free(tgc_options *o)
{
    for (int i = 0; i < TGC_CONFIG_NOPTS_MAX; i++) {
        free(o->text[i]);
        o->text[i] = NULL;
    }
}

void tgc_options_free(tgc_options *o)
{
    error_clear();
    if (!o || API_STALE(o, API_MAGIC_OPTIONS, "tgc_options_free", "tgc_options")) return;
    retire(&o->magic);
    options_text_free(o);
    free(o->origin);
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
    if (API_STALE(o, API_MAGIC_OPTIONS, "tgc_options_set", "tgc_options")) return TGC_EINVAL;
    if (!o || !name) return misuse("tgc_options_set", "options or name is NULL");
    options_text_free(o);
    api_call a;
    call_begin(&a);
    if (strcmp(name, "set") == 0) return options_override(&a, o, name, value, false);
    for (int i = 0; fe_model_flags[i]; i++) {
        if (strcmp(fe_model_flags[i], name) != 0) continue;
        if (fe_model_flag_is_switch(name)) { /* NULL or "true": given; "false": its hyperparameter 0 */
            if (value && strcmp(value, "true") != 0 && strcmp(value, "false") != 0)
                return usage(&a, "--%s is a switch: expected NULL, \"true\" or \"false\", got '%s'", name, value);
            return options_override(&a, o, name, value && strcmp(value, "false") == 0 ? "0" : "1", true);
        }
        return options_override(&a, o, name, value, true);
    }
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

tgc_status tgc_options_set_words(tgc_options *o, const char *name, const char *const *words, int n)
{
    if (API_STALE(o, API_MAGIC_OPTIONS, "tgc_options_set_words", "tgc_options")) return TGC_EINVAL;
    if (!o || !name || !words || n < 1) return misuse("tgc_options_set_words", "options, name or words is NULL, or n < 1");
    for (int k = 0; k < n; k++)
        if (!words[k]) return misuse("tgc_options_set_words", "a word is NULL");
    options_text_free(o);
    api_call a;
    call_begin(&a);
    int i = tgc_config_opt_find(name);
    if (i < 0) return usage(&a, "unknown option '--%s'%s (docs/tools.md lists them)", name, "");
    const tgc_opt_def *d = tgc_config_opt_at(i);
    if (d->kind != TGC_OPT_WORDS) return usage(&a, "--%s takes one value: give it to tgc_options_set%s", d->name, "");
    const char **kept = xmalloc((size_t)n * sizeof *kept);
    for (int k = 0; k < n; k++) kept[k] = tgc_config_keep(xstrdup(words[k]));
    tgc_config_set_words(&o->c, i, kept, n);
    o->c.seen[i] = true;
    free(kept);
    return call_end(&a, TGC_OK);
}

const char *tgc_options_get(const tgc_options *oc, const char *name)
{
    if (API_STALE(oc, API_MAGIC_OPTIONS, "tgc_options_get", "tgc_options")) return NULL;
    if (!oc || !name) {
        misuse("tgc_options_get", "options or name is NULL");
        return NULL;
    }
    error_clear();
    tgc_options *o = (tgc_options *)oc; /* its answers are kept with it */
    int i = tgc_config_opt_find(name);
    if (i < 0) {
        misuse("tgc_options_get", "no such option");
        return NULL;
    }
    if (!o->text[i]) {
        strbuf b;
        sb_init(&b);
        if (tgc_config_value_text(&o->c, i, &b)) o->text[i] = xstrdup(b.s ? b.s : "");
        sb_free(&b);
    }
    return o->text[i];
}

int tgc_options_given(const tgc_options *o, const char *name)
{
    if (API_STALE(o, API_MAGIC_OPTIONS, "tgc_options_given", "tgc_options")) return 0;
    return o && name && tgc_config_given(&o->c, name);
}

const tgc_config *api_options_config(const tgc_options *o)
{
    static tgc_config none;
    static bool made;
    if (o) return &o->c;
    if (!made) {
        tgc_config_defaults(&none);
        none.quiet = true; /* tgc_options_new's */
        made = true;
    }
    return &none;
}

const fe_override *api_options_sets(const tgc_options *o, int *nsets)
{
    *nsets = o ? o->nsets : 0;
    return o ? o->sets : NULL;
}

tgc_status api_usage(api_call *a, const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(a->f, "tgc %s: error: ", cmd);
    vfprintf(a->f, fmt, ap);
    va_end(ap);
    size_t word = strcspn(cmd, " ");
    fprintf(a->f, "\nTry 'tgc %.*s --help'.\n", (int)word, cmd);
    return TGC_EUSAGE;
}

tgc_status api_model_overrides(const tgc_options *opts, const char *cmd, const char *model, fe_override *sets, int *n,
                               char *buf, size_t cap, api_call *a)
{
    int nsets;
    const fe_override *given = api_options_sets(opts, &nsets);
    TGC_ASSERT(nsets < API_OVERRIDES_MAX);
    for (int i = 0; i < nsets; i++) sets[i] = given[i];
    *n = nsets;
    int64_t b = api_options_config(opts)->micro_batch_size;
    size_t len = model ? strlen(model) : 0;
    /* As for compile and run, the micro-batch is a .tg model's `batch`; for
     * text IR, whose shapes are fixed, it only counts the micro-batches. */
    if (!b || (model && (len <= 3 || strcmp(model + len - 3, ".tg") != 0))) return TGC_OK;
    for (int i = 0; i < nsets; i++)
        if (!sets[i].flag && strcmp(sets[i].name, "batch") == 0)
            return api_usage(a, cmd, "--micro-batch-size %lld and --set batch=%s both set hyperparameter 'batch'; "
                             "give one", (long long)b, sets[i].value);
    snprintf(buf, cap, "%lld", (long long)b);
    sets[(*n)++] = (fe_override){"batch", buf, false};
    return TGC_OK;
}

bool api_args_copy(void *dst, size_t dst_size, const void *src, const char *fn, api_call *a)
{
    size_t size = 0;
    if (src) memcpy(&size, src, sizeof size);
    if (!src || size < sizeof size || size > dst_size) {
        fprintf(a->f, "tgc: error: %s: %s\n", fn, src ? "args->size is not sizeof the arguments' struct (set it with "
                "the struct's _INIT macro)" : "args is NULL");
        return false;
    }
    memset(dst, 0, dst_size);
    memcpy(dst, src, size);
    return true;
}

tgc_status tgc_options_reset(tgc_options *o, const char *name)
{
    if (API_STALE(o, API_MAGIC_OPTIONS, "tgc_options_reset", "tgc_options")) return TGC_EINVAL;
    if (!o || !name) return misuse("tgc_options_reset", "options or name is NULL");
    int i = tgc_config_opt_find(name);
    if (i < 0) return misuse("tgc_options_reset", "no such option");
    error_clear();
    options_text_free(o);
    tgc_config_reset(&o->c, i);
    if (strcmp(tgc_config_opt_at(i)->name, "quiet") == 0) o->quiet_default = false;
    return TGC_OK;
}

tgc_status tgc_options_set_origin(tgc_options *o, const char *words)
{
    if (API_STALE(o, API_MAGIC_OPTIONS, "tgc_options_set_origin", "tgc_options")) return TGC_EINVAL;
    if (!o || !words) return misuse("tgc_options_set_origin", "options or words is NULL");
    error_clear();
    free(o->origin);
    o->origin = xstrdup(words);
    return TGC_OK;
}

tgc_status tgc_options_check(const tgc_options *o)
{
    if (API_STALE(o, API_MAGIC_OPTIONS, "tgc_options_check", "tgc_options")) return TGC_EINVAL;
    if (!o) return misuse("tgc_options_check", "options is NULL");
    api_call a;
    call_begin(&a);
    return call_end(&a, tgc_config_check_to(&o->c, a.f) ? TGC_EUSAGE : TGC_OK);
}

int tgc_file_is_plan(const char *path) { return path && rt_plan_sniff(path) != RT_PLAN_NONE; }

/* ---- plans -------------------------------------------------------------------- */

/* The options of the tgc compile command's reports (and, but where
 * output is allowed, its output), given to a library call that has its
 * own way (tgc_plan_report, tgc_plan_save): refused by name. */
static bool refuse_compile_opts(api_call *a, const tgc_config *c0, const char *fn, bool output)
{
    tgc_config c = *c0;
    if (output) tgc_config_reset(&c, tgc_config_opt_find("output"));
    strbuf why;
    sb_init(&why);
    int n = tgc_config_changes(&c, NULL, TGC_USE_COMPILE, &why);
    if (n) fprintf(a->f, "tgc: error: %s: %s %s of the tgc compile command (tgc_plan_save writes a plan, "
                   "tgc_plan_report the reports)\n", fn, why.s, n > 1 ? "are options" : "is an option");
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
    if (refuse_compile_opts(&a, &c, path ? "tgc_compile_file" : "tgc_compile_string", true) ||
        tgc_config_check_to(&c, a.f) || !compile_sets(&a, o, &c, sets, &nsets, batch, sizeof batch))
        return call_end(&a, TGC_EUSAGE);
    /* "output" (-o): not the model, and writable, before the passes run. */
    rt_run_file in[] = {{"the model", path}}, outf[] = {{"-o", c.output}};
    if (c.output && !rt_files_check(in, 1, outf, (const bool[]){false}, 1, NULL, 0, &a.d)) return call_end(&a, TGC_ERROR);
    ir_graph *g = path ? api_model_load(path, sets, nsets, &a.d)
                       : api_model_load_text(name, name, text, strlen(text), sets, nsets, &a.d);
    char *lowered = NULL;
    g = api_compile_graph(g, &c, &lowered, &a.d);
    if (!g) {
        free(lowered);
        return call_end(&a, TGC_ERROR);
    }
    tgc_plan *p = xcalloc(1, sizeof *p);
    *p = (tgc_plan){.magic = API_MAGIC_PLAN, .c = c, .g = g, .lowered = lowered, .model = path ? xstrdup(path) : NULL};
    p->source = path ? NULL : xstrdup(text);
    p->name = xstrdup(path ? path : name);
    p->from_model = true;
    diag_init(&p->sources, NULL);
    diag_copy_sources(&p->sources, &a.d);
    p->sets = xcalloc((size_t)nsets + 1, sizeof *p->sets);
    for (int i = 0; i < nsets; i++) p->sets[i] = (fe_override){xstrdup(sets[i].name), xstrdup(sets[i].value), sets[i].flag};
    p->nsets = nsets;
    p->c.output = NULL; /* written now; a saved plan records no path */
    p->c.seen[tgc_config_opt_find("output")] = false;
    cg_program *prog = c.output ? cg_build(g, &a.d) : NULL;
    bool ok = !c.output || (prog && api_plan_write(c.output, &p->c, lowered, g, prog, &a.d));
    if (ok && prog) {
        api_plan_figures_of(g, prog, &p->fig);
        p->has_figures = true;
    }
    cg_program_free(prog);
    if (!ok) {
        tgc_plan_free(p);
        return call_end(&a, TGC_ERROR);
    }
    *out = p;
    return call_end(&a, TGC_OK);
}

tgc_status tgc_compile_file(const char *path, const tgc_options *o, tgc_plan **out)
{
    if (API_STALE(o, API_MAGIC_OPTIONS, "tgc_compile_file", "tgc_options")) return TGC_EINVAL;
    if (!path || !out) return misuse("tgc_compile_file", "path or out is NULL");
    *out = NULL;
    tgc_status st;
    if (env_refuses(&st)) return st;
    return compile(path, NULL, NULL, o, out);
}

tgc_status tgc_compile_string(const char *name, const char *text, const tgc_options *o, tgc_plan **out)
{
    if (API_STALE(o, API_MAGIC_OPTIONS, "tgc_compile_string", "tgc_options")) return TGC_EINVAL;
    if (!text || !out) return misuse("tgc_compile_string", "text or out is NULL");
    *out = NULL;
    tgc_status st;
    if (env_refuses(&st)) return st;
    return compile(NULL, name && *name ? name : "<string>", text, o, out);
}

tgc_status tgc_plan_save(const tgc_plan *p, const char *path)
{
    if (API_STALE(p, API_MAGIC_PLAN, "tgc_plan_save", "tgc_plan")) return TGC_EINVAL;
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
    if (API_STALE(o, API_MAGIC_OPTIONS, "tgc_plan_load", "tgc_options")) return TGC_EINVAL;
    if (!path || !out) return misuse("tgc_plan_load", "path or out is NULL");
    *out = NULL;
    tgc_status env_st;
    if (env_refuses(&env_st)) return env_st;
    api_call a;
    call_begin(&a);
    tgc_config none, c;
    tgc_config_defaults(&none);
    const tgc_config *over = o ? &o->c : &none;
    if (refuse_compile_opts(&a, over, "tgc_plan_load", false)) return call_end(&a, TGC_EUSAGE);
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
    if (!o || (o->quiet_default && !tgc_config_given(&o->c, "quiet"))) c.quiet = true;
    tgc_plan *p = xcalloc(1, sizeof *p);
    *p = (tgc_plan){.magic = API_MAGIC_PLAN, .c = c, .g = g, .lowered = lowered, .model = xstrdup(path)};
    p->name = xstrdup(path);
    diag_init(&p->sources, NULL);
    diag_copy_sources(&p->sources, &a.d);
    *out = p;
    return call_end(&a, TGC_OK);
}

void tgc_plan_free(tgc_plan *p)
{
    error_clear();
    if (!p || API_STALE(p, API_MAGIC_PLAN, "tgc_plan_free", "tgc_plan")) return;
    retire(&p->magic);
    ir_graph_free(p->g);
    free(p->lowered);
    free(p->model);
    free(p->source);
    free(p->name);
    for (int i = 0; i < p->nsets; i++) {
        free((char *)p->sets[i].name);
        free((char *)p->sets[i].value);
    }
    free(p->sets);
    diag_free(&p->sources);
    free(p);
}

int tgc_plan_ranks(const tgc_plan *p)
{
    if (API_STALE(p, API_MAGIC_PLAN, "tgc_plan_ranks", "tgc_plan")) return 0;
    if (!p) return 0;
    return (int)(p->c.tp * p->c.pp * p->c.dp);
}

/* A call about a plan's model: its messages quote the model's lines. */
static void plan_call_begin(api_call *a, const tgc_plan *p)
{
    call_begin(a);
    diag_copy_sources(&a->d, &p->sources);
}

tgc_status tgc_plan_figures_get(const tgc_plan *pc, tgc_plan_figures *out)
{
    if (API_STALE(pc, API_MAGIC_PLAN, "tgc_plan_figures_get", "tgc_plan")) return TGC_EINVAL;
    if (!pc || !out) return misuse("tgc_plan_figures_get", "plan or out is NULL");
    api_call a;
    plan_call_begin(&a, pc);
    tgc_plan *p = (tgc_plan *)pc; /* the figures are kept with it */
    if (!p->has_figures) {
        cg_program *prog = cg_build(p->g, &a.d);
        if (!prog) return call_end(&a, TGC_ERROR);
        api_plan_figures_of(p->g, prog, &p->fig);
        p->has_figures = true;
        cg_program_free(prog);
    }
    *out = (tgc_plan_figures){p->fig.kernels, p->fig.gemms, p->fig.param_bytes, p->fig.act_bytes,
                              p->fig.workspace_bytes, p->fig.region_bytes, p->c.sequence_parallel};
    return call_end(&a, TGC_OK);
}

tgc_status tgc_plan_report(const tgc_plan *p, tgc_report_kind kind, const char *arch, FILE *out)
{
    if (API_STALE(p, API_MAGIC_PLAN, "tgc_plan_report", "tgc_plan")) return TGC_EINVAL;
    if (!p || !out) return misuse("tgc_plan_report", "plan or out is NULL");
    if (kind != TGC_REPORT_KERNELS && kind != TGC_REPORT_GEMMS && kind != TGC_REPORT_FUSION)
        return misuse("tgc_plan_report", "kind is not a tgc_report_kind");
    api_call a;
    plan_call_begin(&a, p);
    bool cuda = strcmp(p->c.backend, "cuda") == 0;
    if (kind != TGC_REPORT_FUSION && !cuda) {
        fprintf(a.f, "tgc: error: tgc_plan_report: the %s report is of the CUDA program: compile with backend cuda\n",
                kind == TGC_REPORT_KERNELS ? "kernel" : "GEMM");
        return call_end(&a, TGC_EUSAGE);
    }
    if (kind == TGC_REPORT_FUSION && !p->from_model) {
        fprintf(a.f, "tgc: error: tgc_plan_report: the fusion report recompiles the model without fusion; '%s' is a "
                "plan file: give a plan of tgc_compile_*\n", p->name);
        return call_end(&a, TGC_EUSAGE);
    }
    int rc = 1;
    /* NVRTC needs no GPU: sm_80 is the oldest architecture the kernels target. */
    if (kind == TGC_REPORT_KERNELS) rc = api_kernel_report(p->g, p->name, arch ? arch : "sm_80", p->c.no_kernel_cache, out, &a.d);
    else if (kind == TGC_REPORT_GEMMS) rc = api_gemm_report(p->g, p->name, out, &a.d);
    else {
        /* The same model with no fusion, for comparison. */
        tgc_config plain = p->c;
        plain.fuse = NULL;
        plain.no_fuse = true;
        ir_graph *g0 = p->source ? api_model_load_text(p->name, p->name, p->source, strlen(p->source), p->sets,
                                                       p->nsets, &a.d)
                                 : api_model_load(p->model, p->sets, p->nsets, &a.d);
        g0 = api_compile_graph(g0, &plain, NULL, &a.d);
        rc = g0 ? api_fusion_report(g0, p->g, out, &a.d) : 1;
        ir_graph_free(g0);
    }
    return call_end(&a, rc ? TGC_ERROR : TGC_OK);
}

tgc_status tgc_run_check(const tgc_plan *p, const tgc_options *o, int *leave)
{
    if (API_STALE(p, API_MAGIC_PLAN, "tgc_run_check", "tgc_plan")) return TGC_EINVAL;
    if (API_STALE(o, API_MAGIC_OPTIONS, "tgc_run_check", "tgc_options")) return TGC_EINVAL;
    if (leave) *leave = 0;
    if (!p == !o) return misuse("tgc_run_check", "give one of a plan and options");
    api_call a;
    call_begin(&a);
    tgc_config c;
    if (p) c = p->c;
    else c = o->c;
    if ((!p && tgc_config_check_to(&c, a.f)) || tgc_config_check_run_to(&c, a.f)) return call_end(&a, TGC_EUSAGE);
    bool quiet = false;
    if (api_world_fits(&c, &quiet, &a.d)) return call_end(&a, TGC_OK);
    if (quiet) {
        if (leave) *leave = 1;
        return call_end_quiet(&a, TGC_ERROR, "");
    }
    return call_end(&a, TGC_ERROR);
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
    return TGC_OK;
}

tgc_status tgc_trainer_new(const tgc_plan *p, const tgc_options *o, tgc_trainer **out)
{
    if (API_STALE(p, API_MAGIC_PLAN, "tgc_trainer_new", "tgc_plan")) return TGC_EINVAL;
    if (API_STALE(o, API_MAGIC_OPTIONS, "tgc_trainer_new", "tgc_options")) return TGC_EINVAL;
    if (!p || !out) return misuse("tgc_trainer_new", "plan or out is NULL");
    *out = NULL;
    tgc_status env_st;
    if (env_refuses(&env_st)) return env_st;
    api_call a;
    plan_call_begin(&a, p);
    tgc_config c;
    tgc_status st = trainer_config(&a, p, o, &c);
    if (st) return call_end(&a, st);
    rt_train_opts ro;
    if (api_train_options(&ro, &c, p->model, a.f)) return call_end(&a, TGC_EUSAGE);
    tgc_tokenizer *tk = NULL; /* the text data's tokenizer: the trainer's while it lives */
    int rc = api_run_tokenizer(&c, &ro, &tk, &a.d, a.f);
    if (rc) return call_end(&a, rc == 2 ? TGC_EUSAGE : TGC_ERROR);
    ro.tokenizer = tk;
    rt_trainer *T = rt_trainer_new(p->g, &ro, &a.d);
    if (!T) {
        tgc_tokenizer_free(tk);
        return call_end(&a, TGC_ERROR);
    }
    tgc_trainer *t = xcalloc(1, sizeof *t);
    t->magic = API_MAGIC_TRAINER;
    t->T = T;
    t->plan = p;
    t->tok = tk;
    *out = t;
    return call_end(&a, TGC_OK);
}

tgc_status tgc_trainer_step(tgc_trainer *t, int64_t n)
{
    if (API_STALE(t, API_MAGIC_TRAINER, "tgc_trainer_step", "tgc_trainer")) return TGC_EINVAL;
    if (!t || n < 0) return misuse("tgc_trainer_step", "trainer is NULL or n is negative");
    if (t->failed) return misuse("tgc_trainer_step", "a step of this trainer failed before: free it");
    api_call a;
    plan_call_begin(&a, t->plan);
    int rc = rt_trainer_steps(t->T, n, &a.d);
    if (rc) {
        t->failed = true;
        if (rc > 128) fprintf(a.f, "tgc: error: a signal (%d) stopped the ranks\n", rc - 128);
    }
    return call_end(&a, rc ? TGC_ERROR : TGC_OK);
}

tgc_status tgc_trainer_run(tgc_trainer *t, int *signal)
{
    if (API_STALE(t, API_MAGIC_TRAINER, "tgc_trainer_run", "tgc_trainer")) return TGC_EINVAL;
    if (signal) *signal = 0;
    if (!t) return misuse("tgc_trainer_run", "trainer is NULL");
    if (t->failed) return misuse("tgc_trainer_run", "a step of this trainer failed before: free it");
    api_call a;
    plan_call_begin(&a, t->plan);
    /* With --save, Megatron's exit signal handler (without, a signal ends the run at once). */
    bool handlers = rt_trainer_saves(t->T);
    rt_stop_handlers sh;
    if (handlers) rt_stop_handlers_install(&sh);
    int rc = rt_trainer_steps(t->T, rt_trainer_iters(t->T), &a.d);
    if (handlers) rt_stop_handlers_restore(&sh);
    if (!rc) return call_end(&a, TGC_OK);
    t->failed = true;
    if (rc > 128) {
        if (signal) *signal = rc - 128;
        char msg[128];
        snprintf(msg, sizeof msg, "tgc: error: signal %d stopped the run after a checkpoint (docs/checkpoints.md)",
                 rc - 128);
        return call_end_quiet(&a, TGC_ERROR, msg);
    }
    return call_end(&a, TGC_ERROR);
}

int tgc_trainer_reports(const tgc_trainer *t)
{
    if (API_STALE(t, API_MAGIC_TRAINER, "tgc_trainer_reports", "tgc_trainer")) return 0;
    return t && rt_trainer_reports(t->T);
}

int64_t tgc_trainer_iteration(const tgc_trainer *t)
{
    if (API_STALE(t, API_MAGIC_TRAINER, "tgc_trainer_iteration", "tgc_trainer")) return 0;
    return t ? rt_trainer_iteration(t->T) : 0;
}

tgc_status tgc_trainer_metrics(const tgc_trainer *t, int64_t it, tgc_metrics *m)
{
    if (API_STALE(t, API_MAGIC_TRAINER, "tgc_trainer_metrics", "tgc_trainer")) return TGC_EINVAL;
    if (!t || !m) return misuse("tgc_trainer_metrics", "trainer or out is NULL");
    if (!rt_trainer_reports(t->T))
        return misuse("tgc_trainer_metrics", "under mpirun or torchrun the metrics are the reporting rank's (tensor "
                      "rank 0, data rank 0, the last pipeline stage): this process runs another (tgc_trainer_reports)");
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
    if (API_STALE(t, API_MAGIC_TRAINER, "tgc_trainer_save_checkpoint", "tgc_trainer")) return TGC_EINVAL;
    if (!t || !dir) return misuse("tgc_trainer_save_checkpoint", "trainer or dir is NULL");
    if (t->failed) return misuse("tgc_trainer_save_checkpoint", "a step of this trainer failed: nothing to save");
    api_call a;
    plan_call_begin(&a, t->plan);
    return call_end(&a, rt_trainer_save(t->T, dir, &a.d) ? TGC_OK : TGC_ERROR);
}

tgc_status tgc_trainer_load_checkpoint(tgc_trainer *t, const char *dir)
{
    if (API_STALE(t, API_MAGIC_TRAINER, "tgc_trainer_load_checkpoint", "tgc_trainer")) return TGC_EINVAL;
    if (!t || !dir) return misuse("tgc_trainer_load_checkpoint", "trainer or dir is NULL");
    if (t->failed) return misuse("tgc_trainer_load_checkpoint", "a step of this trainer failed: free it");
    api_call a;
    plan_call_begin(&a, t->plan);
    return call_end(&a, rt_trainer_load(t->T, dir, &a.d) ? TGC_OK : TGC_ERROR);
}

tgc_status tgc_trainer_free(tgc_trainer *t)
{
    error_clear(); /* a free of NULL succeeds, its last error "" as every call's */
    if (!t) return TGC_OK;
    if (API_STALE(t, API_MAGIC_TRAINER, "tgc_trainer_free", "tgc_trainer")) return TGC_EINVAL;
    retire(&t->magic);
    api_call a;
    plan_call_begin(&a, t->plan);
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

tgc_status tgc_tokenizer_check(const tgc_options *o)
{
    if (API_STALE(o, API_MAGIC_OPTIONS, "tgc_tokenizer_check", "tgc_options")) return TGC_EINVAL;
    api_call a;
    call_begin(&a);
    tgc_tokenizer_opts to;
    return call_end(&a, tokenizer_opts(&a, o, &to) ? TGC_OK : TGC_EUSAGE);
}

tgc_status tgc_tokenizer_open(const tgc_options *o, tgc_tokenizer **out)
{
    if (API_STALE(o, API_MAGIC_OPTIONS, "tgc_tokenizer_open", "tgc_options")) return TGC_EINVAL;
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
    go->tok_from = o && o->origin ? o->origin : "from the options";
    return TGC_OK;
}

static tgc_status generator_new(const char *model, const tgc_plan *p, const char *weights, const tgc_options *o,
                                unsigned flags, tgc_generator **out)
{
    api_call a;
    call_begin(&a);
    const unsigned known = TGC_GENERATE_NO_KV_CACHE | TGC_GENERATE_CHECK_KV_CACHE;
    if (flags & ~known) {
        fprintf(a.f, "tgc: error: tgc_generator_new: unknown flags 0x%x\n", flags & ~known);
        return call_end(&a, TGC_EUSAGE);
    }
    if ((flags & known) == known) {
        fprintf(a.f, "tgc: error: tgc_generator_new: TGC_GENERATE_CHECK_KV_CACHE compares the KV cache with the full "
                "forward; drop TGC_GENERATE_NO_KV_CACHE\n");
        return call_end(&a, TGC_EUSAGE);
    }
    api_gen_opts go = {.model = model, .weights = weights, .no_kv_cache = (flags & TGC_GENERATE_NO_KV_CACHE) != 0,
                       .check_kv_cache = (flags & TGC_GENERATE_CHECK_KV_CACHE) != 0};
    if (p) {
        go.plan = p->g;
        go.plan_tp = (long long)p->c.tp;
        go.plan_pp = (long long)p->c.pp;
    }
    tgc_status st = generator_opts(&a, o, p != NULL, &go);
    if (st) return call_end(&a, st);
    char *origin = xstrdup(go.tok_from); /* the generator's messages keep naming it */
    go.tok_from = origin;
    api_gen *G = api_gen_new(&go, &a.d, a.f);
    if (!G) {
        free(origin);
        return call_end(&a, TGC_ERROR);
    }
    tgc_generator *g = xcalloc(1, sizeof *g);
    g->magic = API_MAGIC_GENERATOR;
    g->G = G;
    g->origin = origin;
    *out = g;
    return call_end(&a, TGC_OK);
}

tgc_status tgc_generator_new(const char *model, const char *weights, const tgc_options *o, unsigned flags,
                             tgc_generator **out)
{
    if (API_STALE(o, API_MAGIC_OPTIONS, "tgc_generator_new", "tgc_options")) return TGC_EINVAL;
    if (!model || !weights || !out) return misuse("tgc_generator_new", "model, weights or out is NULL");
    *out = NULL;
    tgc_status st;
    if (env_refuses(&st)) return st;
    return generator_new(model, NULL, weights, o, flags, out);
}

tgc_status tgc_generator_new_plan(const tgc_plan *p, const char *weights, const tgc_options *o, unsigned flags,
                                  tgc_generator **out)
{
    if (API_STALE(p, API_MAGIC_PLAN, "tgc_generator_new_plan", "tgc_plan")) return TGC_EINVAL;
    if (API_STALE(o, API_MAGIC_OPTIONS, "tgc_generator_new_plan", "tgc_options")) return TGC_EINVAL;
    if (!p || !weights || !out) return misuse("tgc_generator_new_plan", "plan, weights or out is NULL");
    *out = NULL;
    tgc_status st;
    if (env_refuses(&st)) return st;
    return generator_new(p->model ? p->model : "<plan>", p, weights, o, flags, out);
}

void tgc_generator_free(tgc_generator *g)
{
    error_clear();
    if (!g || API_STALE(g, API_MAGIC_GENERATOR, "tgc_generator_free", "tgc_generator")) return;
    retire(&g->magic);
    api_gen_free(g->G);
    free(g->origin);
    free(g);
}

int64_t tgc_generator_context(const tgc_generator *g)
{
    if (API_STALE(g, API_MAGIC_GENERATOR, "tgc_generator_context", "tgc_generator")) return 0;
    if (!g) return 0;
    api_gen_info in;
    api_gen_describe(g->G, &in);
    return in.context;
}

int64_t tgc_generator_vocab_size(const tgc_generator *g)
{
    if (API_STALE(g, API_MAGIC_GENERATOR, "tgc_generator_vocab_size", "tgc_generator")) return 0;
    if (!g) return 0;
    api_gen_info in;
    api_gen_describe(g->G, &in);
    return in.vocab;
}

const tgc_tokenizer *tgc_generator_tokenizer(const tgc_generator *g)
{
    if (API_STALE(g, API_MAGIC_GENERATOR, "tgc_generator_tokenizer", "tgc_generator")) return NULL;
    if (!g) return NULL;
    api_gen_info in;
    api_gen_describe(g->G, &in);
    return in.tok;
}

tgc_status tgc_generator_info_get(const tgc_generator *g, tgc_generator_info *out)
{
    if (API_STALE(g, API_MAGIC_GENERATOR, "tgc_generator_info_get", "tgc_generator")) return TGC_EINVAL;
    if (!g || !out) return misuse("tgc_generator_info_get", "generator or out is NULL");
    error_clear();
    api_gen_info in;
    api_gen_describe(g->G, &in);
    *out = (tgc_generator_info){.model = in.model, .weights = in.weights, .backend = in.backend, .params = in.params,
                                .context = in.context, .vocab = in.vocab, .tokenizer_origin = in.tok ? in.tok_from : NULL,
                                .tokenizer_from_options = in.tok && in.tok_from == g->origin,
                                .kv_cache = in.kv_cache, .check_kv_cache = in.check_kv_cache};
    return TGC_OK;
}

void tgc_generation_free(tgc_generation *r)
{
    if (!r) return;
    free(r->tokens);
    free(r->text);
    *r = (tgc_generation){0};
}

enum { API_GENERATE_MAX = 1000000 }; /* tgc sample's --tokens limit */

/* A generation's streaming: each token's text through the user's callback. */
typedef struct gen_stream {
    const tgc_generate_args *args;
    api_gen_text t;  /* the tokenizer's decoding as the context grows */
    bool decoded;
    bool bytes;      /* no tokenizer, at most 256 tokens: a token is a byte */
} gen_stream;

static bool stream_token(void *user, const int32_t *ctx, int64_t len, diag *d)
{
    gen_stream *gs = user;
    const char *text = NULL;
    size_t n = 0;
    char byte;
    if (gs->decoded && !api_gen_text_add(&gs->t, ctx, len, &text, &n, d)) return false;
    if (gs->bytes) {
        byte = (char)ctx[len - 1];
        text = &byte;
        n = 1;
    }
    if (gs->args->fn(gs->args->user, TGC_GENERATE_TOKEN, ctx + len - 1, 1, text, n) == 0) return true;
    diag_error_plain(d, "tgc_generate: the callback stopped the generation after token %lld", (long long)len);
    return false;
}

/* The prompt's event: its tokens and text. */
static bool stream_prompt(gen_stream *gs, const int32_t *ctx, int64_t len, diag *d)
{
    const char *text = NULL;
    size_t n = 0;
    char *bytes = NULL;
    if (gs->decoded && !api_gen_text_begin(&gs->t, gs->t.tok, ctx, len, &text, &n, d)) return false;
    if (gs->bytes) {
        bytes = xmalloc((size_t)len + 1);
        for (int64_t i = 0; i < len; i++) bytes[i] = (char)ctx[i];
        text = bytes;
        n = (size_t)len;
    }
    bool ok = gs->args->fn(gs->args->user, TGC_GENERATE_PROMPT, ctx, len, text, n) == 0;
    free(bytes);
    if (!ok) diag_error_plain(d, "tgc_generate: the callback stopped the generation at the prompt");
    return ok;
}

/* The arguments' ranges: TGC_OK, or the usage error's status. */
static tgc_status generate_args_check(api_call *a, const tgc_generate_args *r)
{
    if (r->n < 0 || r->n > API_GENERATE_MAX) {
        fprintf(a->f, "tgc: error: tgc_generate: n %lld: expected an integer from 0 to %d\n", (long long)r->n,
                API_GENERATE_MAX);
        return TGC_EUSAGE;
    }
    if (!isfinite(r->temperature) || r->temperature < 0) {
        fprintf(a->f, "tgc: error: tgc_generate: temperature %g: expected a number >= 0 (0: greedy)\n", r->temperature);
        return TGC_EUSAGE;
    }
    if (r->top_k < 0) {
        fprintf(a->f, "tgc: error: tgc_generate: top_k %lld: expected an integer >= 0 (0: every token)\n",
                (long long)r->top_k);
        return TGC_EUSAGE;
    }
    if ((r->text && !*r->text) || (r->prompt_tokens && r->nprompt == 0)) {
        fprintf(a->f, "tgc: error: tgc_generate: the prompt is empty: the model needs at least one token\n");
        return TGC_EUSAGE;
    }
    return TGC_OK;
}

/* The generation's text: the tokenizer's decoding, or a byte model's bytes. */
static bool generation_text(const api_gen_info *in, tgc_generation *out, diag *d)
{
    int64_t len = out->ntokens;
    if (in->tok) {
        strbuf b;
        sb_init(&b);
        if (!tokenizer_decode(in->tok, out->tokens, len, &b, d)) {
            sb_free(&b);
            return false;
        }
        out->text = sb_take(&b, &out->text_len);
    } else if (in->vocab <= 256) { /* bytes: every id is one */
        out->text = xmalloc((size_t)len + 1);
        for (int64_t i = 0; i < len; i++) out->text[i] = (char)out->tokens[i];
        out->text[len] = 0;
        out->text_len = (size_t)len;
    }
    return true;
}

tgc_status tgc_generate_ex(tgc_generator *g, const tgc_generate_args *r, tgc_generation *out, tgc_generate_stats *st)
{
    if (API_STALE(g, API_MAGIC_GENERATOR, "tgc_generate_ex", "tgc_generator")) return TGC_EINVAL;
    if (st) *st = (tgc_generate_stats){.check_ok = 1};
    if (!out) return misuse("tgc_generate", "out is NULL");
    *out = (tgc_generation){0};
    if (!g || !r) return misuse("tgc_generate", "generator or args is NULL");
    if (!r->text == !r->prompt_tokens) return misuse("tgc_generate", "give one of text and prompt_tokens");
    if (r->prompt_tokens && r->nprompt < 0) return misuse("tgc_generate", "nprompt is negative");
    api_call a;
    call_begin(&a);
    tgc_status bad = generate_args_check(&a, r);
    if (bad) return call_end(&a, bad);
    api_gen_info in;
    api_gen_describe(g->G, &in);
    const char *where = r->prompt_name ? r->prompt_name : r->text ? "the prompt" : "the prompt's tokens";
    int64_t len = 0;
    int32_t *ctx = api_gen_encode(g->G, r->text, r->prompt_tokens, r->nprompt, r->n, &len, where, &a.d);
    if (!ctx) return call_end(&a, TGC_ERROR);
    gen_stream gs = {.args = r, .decoded = r->fn && in.tok, .bytes = r->fn && !in.tok && in.vocab <= 256};
    gs.t.tok = in.tok;
    bool ok = !(r->fn && r->text && in.tok && r->fn(r->user, TGC_GENERATE_ENCODED, ctx, len, NULL, 0) != 0);
    if (!ok) diag_error_plain(&a.d, "tgc_generate: the callback stopped the generation at the prompt");
    ok = ok && api_gen_check_prompt(g->G, ctx, len, where, r->text && !in.tok, &a.d) &&
         (!r->logits_out || api_gen_write_logits(g->G, ctx, len, r->logits_out, &a.d)) &&
         (!r->fn || stream_prompt(&gs, ctx, len, &a.d));
    if (!ok) {
        if (gs.decoded) api_gen_text_end(&gs.t);
        free(ctx);
        return call_end(&a, TGC_ERROR);
    }
    out->nprompt = len;
    api_gen_stats s;
    ok = api_gen_run(g->G, ctx, &len, r->n, r->temperature, r->top_k, r->seed, r->fn ? stream_token : NULL, &gs, &s,
                     &a.d);
    if (gs.decoded) api_gen_text_end(&gs.t);
    out->tokens = ctx;
    out->ntokens = len;
    bool done = ok;
    ok = generation_text(&in, out, &a.d) && ok;
    if (st)
        *st = (tgc_generate_stats){.made = s.made, .prefills = s.prefills, .seconds = s.seconds, .checked = s.checked,
                                   .max_diff = s.max_diff, .max_abs = s.max_abs, .tol = s.tol,
                                   .check_ok = !in.check_kv_cache || s.check_ok, .done = done};
    if (ok && in.check_kv_cache && !s.check_ok) {
        char msg[256];
        snprintf(msg, sizeof msg, "tgc: error: the KV cache's logits differ from the full forward's by up to %.3g "
                 "(tolerance %.3g)", s.max_diff, s.tol);
        return call_end_quiet(&a, TGC_ERROR, msg);
    }
    return call_end(&a, ok ? TGC_OK : TGC_ERROR);
}

tgc_status tgc_generate(tgc_generator *g, const char *text, const int32_t *ids, int64_t nids, int64_t n,
                        double temperature, int64_t top_k, uint64_t seed, tgc_generation *out)
{
    if (API_STALE(g, API_MAGIC_GENERATOR, "tgc_generate", "tgc_generator")) return TGC_EINVAL;
    tgc_generate_args r = {.text = text, .prompt_tokens = ids, .nprompt = nids, .n = n, .temperature = temperature,
                           .top_k = top_k, .seed = seed};
    return tgc_generate_ex(g, &r, out, NULL);
}

tgc_status tgc_generator_logits(tgc_generator *g, const int32_t *tokens, int64_t n, float **logits)
{
    if (API_STALE(g, API_MAGIC_GENERATOR, "tgc_generator_logits", "tgc_generator")) return TGC_EINVAL;
    if (!logits) return misuse("tgc_generator_logits", "logits is NULL");
    *logits = NULL;
    if (!g || !tokens || n <= 0) return misuse("tgc_generator_logits", "generator or tokens is NULL, or n < 1");
    api_call a;
    call_begin(&a);
    bool ok = api_gen_check_prompt(g->G, tokens, n, "the tokens", false, &a.d) &&
              api_gen_prompt_logits(g->G, tokens, n, logits, "tgc_generator_logits", &a.d);
    return call_end(&a, ok ? TGC_OK : TGC_ERROR);
}
