/* The option table of every tgc command and of the library (include/tgc.h):
 * one row per option (Megatron-LM's long name, alias, kind, field, help,
 * what tgc run does with it over a plan), the configuration's defaults,
 * its checks, its plan form, and the pass options it gives. The command
 * line's scanner (cli/config.c) and tgc_options_set (api/api.c) both set
 * options through tgc_config_set_to, so they cannot drift. Errors go to
 * the FILE given (the _to functions) or standard error. */
#include "api/config.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "passes/pass.h"
#include "runtime/plan.h"
#include "runtime/train/schedule.h"
#include "support/util.h"


typedef tgc_opt_def opt_def;
#define OPT_INT TGC_OPT_INT
#define OPT_FLOAT TGC_OPT_FLOAT
#define OPT_FLAG TGC_OPT_FLAG
#define OPT_STR TGC_OPT_STR
#define OPT_CHOICE TGC_OPT_CHOICE
#define OPT_SPEC TGC_OPT_SPEC
#define OPT_LIST TGC_OPT_LIST
#define OPT_WORDS TGC_OPT_WORDS

#define F(field) offsetof(tgc_config, field)
#define UNSET_WD (-1.0) /* --start/--end-weight-decay not given (their default in api/options.def) */

/* Strings a configuration makes (joined --param-group values, a plan's
 * --lr-scheduler) live as long as the process, like argv: configurations
 * are copied by value. They are freed at exit. */
static char **kept;
static size_t nkept;

static void kept_free(void)
{
    for (size_t i = 0; i < nkept; i++) free(kept[i]);
    free(kept);
}

static char *keep(char *s)
{
    if (!kept) atexit(kept_free);
    kept = xrealloc(kept, (nkept + 1) * sizeof *kept);
    return kept[nkept++] = s;
}

/* The table: a row per option of api/options.def. */
#define CHOICES(...) ((const char *const[]){__VA_ARGS__, NULL})
#define CHECK_ANY .positive = false
#define CHECK_POS .positive = true
#define CHECK_UNBUILT(what) .positive = true, .unbuilt = what
#define REC(pass, key) {#pass, #key},
#define OPT(name_, alias_, kind_, field, dflt, use_, check, choices_, record, fills, help_)                         \
    {.name = name_, .alias = alias_, .kind = TGC_OPT_##kind_, .offset = F(field), .choices = choices_, .help = help_, \
     .use = use_, CHECK_##check, .rec = {record}},
#define RUN TGC_USE_RUNTIME
#define PASSES TGC_USE_PASSES
#define MODEL TGC_USE_MODEL
#define COMPILE TGC_USE_COMPILE
static const opt_def opts[] = {
#include "api/options.def"
};
#undef RUN
#undef PASSES
#undef MODEL
#undef COMPILE
#undef CHECK_ANY
#undef CHECK_POS
#undef CHECK_UNBUILT
_Static_assert(ARRAY_LEN(opts) <= sizeof(((tgc_config *)0)->seen), "tgc_config.seen is too small for the table");

static int opt_index(const char *name);
static const char *choice_find(const char *const *choices, const char *v);

static bool recorded_key_exists(const char *pass, const char *key)
{
    for (int k = 0; k < ir_pass_nkeys; k++)
        if (strcmp(ir_pass_keys[k].pass, pass) == 0 && strcmp(ir_pass_keys[k].key, key) == 0) return true;
    return false;
}

/* The table's invariants: every row says what tgc run does with it over a
 * plan (never ignored), every PASSES option sets a key of the IR's record
 * unless it is not built yet, every key it names exists, and a CHOICE's
 * default is one of its words. */
static void table_check(void)
{
    tgc_config def;
    memset(&def, 0, sizeof def);
#define OPT(name, alias, kind, field, dflt, ...) def.field = dflt;
#include "api/options.def"
    for (size_t i = 0; i < ARRAY_LEN(opts); i++) {
        const opt_def *o = &opts[i];
        TGC_ASSERT(o->use != TGC_USE_UNSET);
        TGC_ASSERT(o->rec[0].pass || o->use != TGC_USE_PASSES || o->unbuilt);
        for (int k = 0; k < TGC_OPT_RECS_MAX && o->rec[k].pass; k++)
            TGC_ASSERT(recorded_key_exists(o->rec[k].pass, o->rec[k].key));
        if (o->kind == OPT_CHOICE) TGC_ASSERT(choice_find(o->choices, *(const char **)((char *)&def + o->offset)));
    }
}

void tgc_config_defaults(tgc_config *c)
{
    static bool checked;
    if (!checked) table_check();
    checked = true;
    memset(c, 0, sizeof *c);
#define OPT(name, alias, kind, field, dflt, ...) c->field = dflt;
#include "api/options.def"
}

/* The table's own copy of the word v (static lifetime), or NULL. */
static const char *choice_find(const char *const *choices, const char *v)
{
    for (int i = 0; choices[i]; i++)
        if (strcmp(choices[i], v) == 0) return choices[i];
    return NULL;
}

static void choices_str(const char *const *choices, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; choices[i] && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? "|" : "", choices[i]);
}

static int set_value(tgc_config *c, const opt_def *o, const char *arg, FILE *ef)
{
    char *field = (char *)c + o->offset;
    switch (o->kind) {
    case OPT_FLAG: *(bool *)field = true; return 0;
    case OPT_STR:
    case OPT_SPEC: *(const char **)field = arg; return 0;
    case OPT_WORDS: {
        const char **w = xmalloc(2 * sizeof *w);
        w[0] = arg;
        w[1] = NULL;
        keep((char *)w);
        *(const char *const **)field = w;
        return 0;
    }
    case OPT_LIST: {
        const char *old = *(const char **)field;
        if (!old) { *(const char **)field = arg; return 0; }
        size_t n = strlen(old) + strlen(arg) + 2;
        char *both = keep(xmalloc(n));
        snprintf(both, n, "%s;%s", old, arg);
        *(const char **)field = both;
        return 0;
    }
    case OPT_CHOICE: {
        const char *word = choice_find(o->choices, arg);
        if (!word) {
            char all[128];
            choices_str(o->choices, all, sizeof all);
            if (ef) fprintf(ef, "tgc: error: --%s: '%s' is not one of %s\n", o->name, arg, all);
            return 2;
        }
        *(const char **)field = word;
        return 0;
    }
    case OPT_INT: {
        int64_t v;
        bool pos = o->positive;
        if (!parse_i64(arg, &v) || v < (pos ? 1 : 0)) {
            if (ef)
                fprintf(ef, "tgc: error: --%s: '%s' is not a %s integer\n", o->name, arg,
                        pos ? "positive" : "non-negative");
            return 2;
        }
        if (o->unbuilt && v != 1) {
            if (ef)
                fprintf(ef, "tgc: error: --%s %lld: %s is not built yet: only 1 is accepted\n", o->name, (long long)v,
                        o->unbuilt);
            return 2;
        }
        *(int64_t *)field = v;
        return 0;
    }
    case OPT_FLOAT: {
        double v;
        if (!parse_double(arg, &v)) {
            if (ef)
                fprintf(ef, "tgc: error: --%s: '%s' is not a number (expected a finite decimal, e.g. 0.5 or 6e-4)\n",
                        o->name, arg);
            return 2;
        }
        *(double *)field = v;
        return 0;
    }
    }
    return 2;
}

static void write_value(const tgc_config *c, const opt_def *o, strbuf *out)
{
    const char *field = (const char *)c + o->offset;
    switch (o->kind) {
    case OPT_FLAG: sb_puts(out, *(const bool *)field ? "true" : "false"); break;
    case OPT_INT: sb_printf(out, "%lld", (long long)*(const int64_t *)field); break;
    case OPT_FLOAT: sb_put_double(out, *(const double *)field); break;
    case OPT_STR:
    case OPT_SPEC:
    case OPT_LIST:
    case OPT_CHOICE: sb_puts(out, *(const char *const *)field ? *(const char *const *)field : ""); break;
    case OPT_WORDS:
        for (const char *const *w = *(const char *const *const *)field; w && *w; w++)
            sb_printf(out, "%s%s", w == *(const char *const *const *)field ? "" : " ", *w);
        break;
    }
}

bool tgc_config_value_text(const tgc_config *c, int i, strbuf *out)
{
    TGC_ASSERT(i >= 0 && i < (int)ARRAY_LEN(opts));
    const opt_def *o = &opts[i];
    const void *field = (const char *)c + o->offset;
    if (o->kind != OPT_FLAG && o->kind != OPT_INT && o->kind != OPT_FLOAT && !*(const void *const *)field)
        return false;
    write_value(c, o, out);
    return true;
}

/* Paths belong to a run, not a plan, and tgc compile's own options to the
 * compilation. Parameter groups are kept: a plan recompiles with them.
 * An option not built yet (only its default accepted) joins the plans
 * with what builds it. */
static bool in_plan(const opt_def *o)
{
    return o->kind != OPT_STR && o->kind != OPT_WORDS && o->use != TGC_USE_COMPILE && !o->unbuilt;
}

static const char *const kind_names[] = {"int", "float", "flag", "path", "choice", "spec", "list", "paths"};

uint64_t tgc_config_plan_schema(void)
{
    strbuf keys;
    sb_init(&keys);
    for (size_t i = 0; i < ARRAY_LEN(opts); i++)
        if (in_plan(&opts[i])) sb_printf(&keys, "%s %s\n", opts[i].name, kind_names[opts[i].kind]);
    uint64_t h = rt_plan_schema(keys.s);
    sb_free(&keys);
    return h;
}

void tgc_config_write(const tgc_config *c, strbuf *out)
{
    for (size_t i = 0; i < ARRAY_LEN(opts); i++) {
        if (!in_plan(&opts[i])) continue;
        sb_printf(out, "%s ", opts[i].name);
        write_value(c, &opts[i], out);
        sb_putc(out, '\n');
    }
}

bool tgc_config_read_line(tgc_config *c, const char *line)
{
    const char *sp = strchr(line, ' ');
    if (!sp) return false;
    for (size_t i = 0; i < ARRAY_LEN(opts); i++) {
        const opt_def *o = &opts[i];
        if (strlen(o->name) != (size_t)(sp - line) || strncmp(o->name, line, (size_t)(sp - line)) != 0) continue;
        const char *v = sp + 1;
        if (o->kind == OPT_FLAG) {
            if (strcmp(v, "true") && strcmp(v, "false")) return false;
            *(bool *)((char *)c + o->offset) = v[0] == 't';
            return true;
        }
        if (!in_plan(o)) return false;
        if (o->kind == OPT_SPEC || o->kind == OPT_LIST) {
            *(const char **)((char *)c + o->offset) = *v ? keep(xstrdup(v)) : NULL;
            return true;
        }
        if (o->kind == OPT_CHOICE) {
            const char *word = choice_find(o->choices, v);
            if (word) *(const char **)((char *)c + o->offset) = word;
            return word != NULL;
        }
        if (o->kind == OPT_INT) { /* a plan records the defaults' 0s, which the command line refuses for some */
            int64_t x;
            if (!parse_i64(v, &x) || x < 0 || (o->unbuilt && x != 1)) return false;
            *(int64_t *)((char *)c + o->offset) = x;
            return true;
        }
        return set_value(c, o, v, NULL) == 0;
    }
    return false;
}

bool tgc_config_given(const tgc_config *c, const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(opts); i++)
        if (strcmp(opts[i].name, name) == 0 || (opts[i].alias && strcmp(opts[i].alias, name) == 0)) return c->seen[i];
    return false;
}

static size_t field_size(const opt_def *o)
{
    return o->kind == OPT_FLAG ? sizeof(bool) : o->kind == OPT_INT ? sizeof(int64_t)
         : o->kind == OPT_FLOAT ? sizeof(double) : sizeof(const char *);
}

void tgc_config_reset(tgc_config *c, int i)
{
    TGC_ASSERT(i >= 0 && i < (int)ARRAY_LEN(opts));
    tgc_config def;
    tgc_config_defaults(&def);
    memcpy((char *)c + opts[i].offset, (const char *)&def + opts[i].offset, field_size(&opts[i]));
    c->seen[i] = false;
}

/* Pairs of options that are two ways to give one setting: the command
 * line's one replaces the plan's other (a plan compiled with --fp16 runs
 * with --bf16), where tgc_config_check refuses both from one command line. */
static const char *const one_setting[][2] = {{"fp16", "bf16"}, {"fuse", "no-fuse"}};

static int opt_index(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(opts); i++)
        if (strcmp(opts[i].name, name) == 0) return (int)i;
    TGC_ASSERT(!"an option of one_setting or recorded is not in the table");
    return -1;
}

void tgc_config_overlay(tgc_config *dst, const tgc_config *src)
{
    tgc_config def;
    tgc_config_defaults(&def);
    for (size_t k = 0; k < ARRAY_LEN(one_setting); k++) {
        int a = opt_index(one_setting[k][0]), b = opt_index(one_setting[k][1]);
        int other = src->seen[a] && !src->seen[b] ? b : src->seen[b] && !src->seen[a] ? a : -1;
        if (other >= 0)
            memcpy((char *)dst + opts[other].offset, (const char *)&def + opts[other].offset,
                   field_size(&opts[other]));
    }
    for (size_t i = 0; i < ARRAY_LEN(opts); i++) {
        if (!src->seen[i]) continue;
        memcpy((char *)dst + opts[i].offset, (const char *)src + opts[i].offset, field_size(&opts[i]));
        dst->seen[i] = true;
    }
}

static bool field_same(const tgc_config *a, const tgc_config *b, const opt_def *o)
{
    const char *fa = (const char *)a + o->offset, *fb = (const char *)b + o->offset;
    switch (o->kind) {
    case OPT_FLAG: return *(const bool *)fa == *(const bool *)fb;
    case OPT_INT: return *(const int64_t *)fa == *(const int64_t *)fb;
    case OPT_FLOAT: return *(const double *)fa == *(const double *)fb;
    case OPT_STR:
    case OPT_SPEC:
    case OPT_LIST:
    case OPT_CHOICE: {
        const char *sa = *(const char *const *)fa, *sb = *(const char *const *)fb;
        return sa == sb || (sa && sb && strcmp(sa, sb) == 0);
    }
    case OPT_WORDS: {
        const char *const *wa = *(const char *const *const *)fa, *const *wb = *(const char *const *const *)fb;
        if (!wa || !wb) return wa == wb;
        for (; *wa && *wb; wa++, wb++)
            if (strcmp(*wa, *wb) != 0) return false;
        return !*wa && !*wb;
    }
    }
    return false;
}

int tgc_config_changes(const tgc_config *cli, const tgc_config *plan, tgc_opt_use use, strbuf *out)
{
    int n = 0;
    for (size_t i = 0; i < ARRAY_LEN(opts); i++) {
        const opt_def *o = &opts[i];
        if (o->use != use || !cli->seen[i] || (plan && field_same(cli, plan, o))) continue;
        if (out) {
            sb_printf(out, "%s--%s", n ? ", " : "", o->name);
            if (o->kind != OPT_FLAG) {
                sb_putc(out, ' ');
                write_value(cli, o, out);
            }
            if (plan && o->kind != OPT_FLAG) {
                sb_puts(out, " (the plan's ");
                write_value(plan, o, out);
                sb_putc(out, ')');
            }
        }
        n++;
    }
    return n;
}

/* The long names of the options of one use, wrapped. */
int tgc_config_check_to(const tgc_config *c, FILE *ef)
{
    if (c->tp < 1 || c->pp < 1 || c->dp < 1 || c->vp < 1) {
        fprintf(ef, "tgc: error: parallel degrees must be at least 1 (tp=%lld pp=%lld dp=%lld vp=%lld)\n",
                (long long)c->tp, (long long)c->pp, (long long)c->dp, (long long)c->vp);
        return 2;
    }
    if (c->overlap_param_gather && !c->use_distributed_optimizer) {
        fprintf(ef, "tgc: error: --overlap-param-gather gathers the distributed optimizer's parameter shards: "
                "it needs --use-distributed-optimizer\n");
        return 2;
    }
    if (c->micro_batch_size && c->global_batch_size &&
        c->global_batch_size % (c->micro_batch_size * c->dp) != 0) {
        fprintf(ef,
                "tgc: error: --global-batch-size %lld does not divide by --micro-batch-size %lld x --dp %lld\n",
                (long long)c->global_batch_size, (long long)c->micro_batch_size, (long long)c->dp);
        return 2;
    }
    if (!(c->memory_limit_gib >= 0.0) || c->memory_limit_gib > 1e9) { /* NaN too */
        fprintf(ef, "tgc: error: --memory-limit %g: expected GiB, at least 0\n", c->memory_limit_gib);
        return 2;
    }
    if (!(c->peak_tflops >= 0.0)) { /* NaN too */
        fprintf(ef, "tgc: error: --peak-tflops %g: expected a positive rate (TFLOP/s)\n", c->peak_tflops);
        return 2;
    }
    if (c->fp16 && c->bf16) {
        fprintf(ef, "tgc: error: --fp16 and --bf16 exclude each other\n");
        return 2;
    }
    if (c->recompute_num_layers < 1) {
        fprintf(ef, "tgc: error: --recompute-num-layers %lld: expected at least 1\n",
                (long long)c->recompute_num_layers);
        return 2;
    }
    if (c->vp > 1 && strcmp(c->pipeline_schedule, "interleaved") != 0) {
        fprintf(ef, "tgc: error: --vp %lld needs --pipeline-schedule interleaved\n", (long long)c->vp);
        return 2;
    }
    if (c->sgd_nesterov && (c->sgd_momentum <= 0.0 || c->sgd_dampening != 0.0)) {
        fprintf(ef, "tgc: error: --sgd-nesterov needs --sgd-momentum above 0 and --sgd-dampening 0 (as "
                "torch.optim.SGD); got momentum %g, dampening %g\n", c->sgd_momentum, c->sgd_dampening);
        return 2;
    }
    if (!(c->clip_grad >= 0.0)) { /* NaN too */
        fprintf(ef, "tgc: error: --clip-grad %g: expected the largest global gradient norm, or 0 to clip "
                "nothing\n", c->clip_grad);
        return 2;
    }
    if (c->sgd_momentum < 0.0 || c->weight_decay < 0.0 || c->lr < 0.0) {
        fprintf(ef, "tgc: error: --%s %g is negative\n", c->lr < 0.0 ? "lr" : c->weight_decay < 0.0 ?
                "weight-decay" : "sgd-momentum", c->lr < 0.0 ? c->lr : c->weight_decay < 0.0 ? c->weight_decay
                : c->sgd_momentum);
        return 2;
    }
    if (!(c->adam_beta1 >= 0.0 && c->adam_beta1 < 1.0 && c->adam_beta2 >= 0.0 && c->adam_beta2 < 1.0 &&
          c->adam_eps >= 0.0)) {
        fprintf(ef, "tgc: error: Adam needs 0 <= --adam-beta1, --adam-beta2 < 1 and --adam-eps >= 0 (as "
                "torch.optim.Adam); got %g, %g, %g\n", c->adam_beta1, c->adam_beta2, c->adam_eps);
        return 2;
    }
    char err[512];
    unsigned fusions;
    if (c->fuse && c->no_fuse) {
        fprintf(ef, "tgc: error: --no-fuse and --fuse exclude each other (--no-fuse is --fuse none)\n");
        return 2;
    }
    if (c->fuse && !pass_fuse_parse(c->fuse, &fusions, err, sizeof err)) {
        fprintf(ef, "tgc: error: --fuse %s: %s\n", c->fuse, err);
        return 2;
    }
    if (c->param_groups && !pass_param_groups_check(c->param_groups, err, sizeof err)) {
        fprintf(ef, "tgc: error: --param-group: %s\n", err);
        return 2;
    }
    rt_schedule s;
    return tgc_config_schedule_to(c, &s, ef);
}

/* Options of tgc run that do nothing without another: an error, never ignored. */
static int check_run_needs(const tgc_config *c, FILE *ef)
{
    static const struct { const char *opt, *needs; } pairs[] = {
        {"eval-interval", "split"}, {"eval-iters", "split"}, {"save-interval", "save"},
        {"tensorboard-log-interval", "tensorboard-dir"}, {"log-timers-to-tensorboard", "tensorboard-dir"},
        {"log-validation-ppl-to-tensorboard", "tensorboard-dir"}, {"log-memory-to-tensorboard", "tensorboard-dir"},
        {"log-validation-ppl-to-tensorboard", "split"}};
    for (size_t i = 0; i < ARRAY_LEN(pairs); i++) {
        bool has = strcmp(pairs[i].needs, "split") == 0 ? c->split || c->valid_data_path
                 : strcmp(pairs[i].needs, "save") == 0 ? c->save != NULL : c->tensorboard_dir != NULL;
        if (tgc_config_given(c, pairs[i].opt) && !has) {
            fprintf(ef, "tgc: error: --%s does nothing without --%s; give --%s too, or drop --%s\n", pairs[i].opt,
                    pairs[i].needs, pairs[i].needs, pairs[i].opt);
            return 2;
        }
    }
    return 0;
}

/* --overlap-grad-reduce and --overlap-param-gather: a communication thread
 * per rank thread on host memory or the simulator, a second stream per GPU
 * (docs/pipeline.md); the training loop refuses ranks sharing a GPU. */
static int check_overlap(const tgc_config *c, FILE *ef)
{
    const char *opt = c->overlap_grad_reduce ? "overlap-grad-reduce" : "overlap-param-gather";
    if (!c->overlap_grad_reduce && !c->overlap_param_gather) return 0;
    if (c->dp < 2) {
        fprintf(ef, "tgc: error: --%s overlaps the data-parallel reduction with the backward: it does nothing "
                "without --dp above 1\n", opt);
        return 2;
    }
    if (strcmp(c->comm, "mpi") == 0) {
        fprintf(ef, "tgc: error: --%s runs on rank threads (a communication thread, or a second stream, "
                "each); under --comm mpi it is not implemented yet: drop it\n", opt);
        return 2;
    }
    return 0;
}

int tgc_config_check_run_to(const tgc_config *c, FILE *ef)
{
    if (check_run_needs(c, ef) || check_overlap(c, ef)) return 2;
    return 0;
}

/* Megatron's weight-decay options: constant takes --weight-decay, the
 * increasing styles --start-weight-decay and --end-weight-decay. */
static int schedule_wd(const tgc_config *c, rt_schedule *s, FILE *ef)
{
    bool given = c->start_weight_decay != UNSET_WD || c->end_weight_decay != UNSET_WD;
    if (s->wd_incr == RT_INCR_CONSTANT && given) {
        fprintf(ef, "tgc: error: --start-weight-decay and --end-weight-decay need --weight-decay-incr-style "
                "linear or cosine (a constant weight decay is --weight-decay)\n");
        return 2;
    }
    if (s->wd_incr != RT_INCR_CONSTANT) {
        if (c->start_weight_decay == UNSET_WD || c->end_weight_decay == UNSET_WD) {
            fprintf(ef, "tgc: error: --weight-decay-incr-style %s needs --start-weight-decay and "
                    "--end-weight-decay\n", c->weight_decay_incr_style);
            return 2;
        }
        s->start_wd = c->start_weight_decay;
        s->end_wd = c->end_weight_decay;
    }
    return 0;
}

/* --lr-scheduler: PyTorch's schedulers, which replace Megatron's. */
static int schedule_torch(const tgc_config *c, rt_schedule *s, FILE *ef)
{
    const char *megatron = c->lr_warmup_iters ? "--lr-warmup-iters" : c->lr_warmup_init != 0.0 ? "--lr-warmup-init"
                         : strcmp(c->lr_decay_style, "constant") ? "--lr-decay-style"
                         : c->lr_decay_iters ? "--lr-decay-iters" : c->min_lr != 0.0 ? "--min-lr" : NULL;
    if (megatron) {
        fprintf(ef, "tgc: error: --lr-scheduler replaces Megatron's learning-rate schedule; drop %s (warm-up and "
                "final rates are written in the scheduler spec, docs/schedules.md)\n", megatron);
        return 2;
    }
    char err[256];
    size_t at = 0;
    if (!rt_schedule_parse_torch(s, c->lr_scheduler, err, sizeof err, &at)) {
        fprintf(ef, "tgc: error: --lr-scheduler: %s\n  %s\n  %*s^\n", err, c->lr_scheduler, (int)at, "");
        return 2;
    }
    return 0;
}

int tgc_config_schedule_to(const tgc_config *c, rt_schedule *s, FILE *ef)
{
    rt_schedule_init(s, c->lr, c->weight_decay, c->train_iters);
    s->min_lr = c->min_lr;
    s->warmup_init = c->lr_warmup_init;
    s->warmup_iters = c->lr_warmup_iters;
    s->decay_iters = c->lr_decay_iters ? c->lr_decay_iters : c->train_iters;
    s->wsd_decay_iters = c->lr_wsd_decay_iters;
    bool known = rt_decay_style_from(c->lr_decay_style, &s->decay) && rt_wsd_style_from(c->lr_wsd_decay_style, &s->wsd)
              && rt_incr_style_from(c->weight_decay_incr_style, &s->wd_incr);
    TGC_ASSERT(known); /* the option table's choices are the schedule's names */
    if (schedule_wd(c, s, ef) || (c->lr_scheduler && schedule_torch(c, s, ef))) return 2;
    char err[256];
    if (!rt_schedule_check(s, err, sizeof err)) {
        fprintf(ef, "tgc: error: %s\n", err);
        return 2;
    }
    return 0;
}

int tgc_config_pass_given(const tgc_config *c, pass_given *out, int max)
{
    int n = 0;
    for (size_t i = 0; i < ARRAY_LEN(opts); i++) {
        const opt_def *o = &opts[i];
        if (!c->seen[i] || !o->rec[0].pass) continue;
        strbuf b;
        sb_init(&b);
        sb_printf(&b, "--%s", o->name);
        if (o->kind != OPT_FLAG) {
            sb_putc(&b, ' ');
            write_value(c, o, &b);
        }
        const char *text = keep(b.s);
        for (int k = 0; k < TGC_OPT_RECS_MAX && o->rec[k].pass; k++) {
            TGC_ASSERT(n < max);
            out[n++] = (pass_given){o->rec[k].pass, o->rec[k].key, text};
        }
    }
    return n;
}

bool tgc_config_run_passes(ir_graph *g, const tgc_config *c, bool verify,
                           void (*after)(const char *name, const ir_graph *g, void *user), diag *d)
{
    pass_options po;
    tgc_config_pass_options(c, &po);
    const pass_info *list[64];
    int n = pass_count();
    for (int i = 0; i < n; i++) list[i] = pass_at(i);
    pass_given given[TGC_CONFIG_GIVEN_MAX];
    pass_ctx ctx = {.d = d, .verify_each = verify, .opts = &po, .given = given};
    ctx.ngiven = tgc_config_pass_given(c, given, TGC_CONFIG_GIVEN_MAX);
    return pass_run_list(g, list, n, &ctx, after, NULL);
}

static int recompute_of(const char *granularity)
{
    int r = 0;
    pass_recompute_parse(granularity, &r);
    return r;
}

static int attention_of(const char *backend)
{
    int a = 0;
    pass_attention_backend_parse(backend, &a);
    return a;
}

/* --fuse LIST (checked before), --no-fuse: none. */
static unsigned fuse_of(const tgc_config *c)
{
    unsigned bits = PASS_FUSE_ALL;
    char err[256];
    if (c->no_fuse || (c->fuse && !pass_fuse_parse(c->fuse, &bits, err, sizeof err))) bits = 0;
    return bits;
}

/* The PO(...) fills of api/options.def's rows, in their order. */
void tgc_config_pass_options(const tgc_config *c, pass_options *po)
{
    pass_options_defaults(po);
#define PO(field, expr) po->field = (expr);
#define OPT(name, alias, kind, field, dflt, use, check, choices, record, fills, help) fills
#include "api/options.def"
}

int tgc_config_nopts(void) { return (int)ARRAY_LEN(opts); }

const tgc_opt_def *tgc_config_opt_at(int i)
{
    TGC_ASSERT(i >= 0 && i < (int)ARRAY_LEN(opts));
    return &opts[i];
}

int tgc_config_opt_find(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(opts); i++)
        if (strcmp(opts[i].name, name) == 0 || (opts[i].alias && strcmp(opts[i].alias, name) == 0)) return (int)i;
    return -1;
}

void tgc_config_set_words(tgc_config *c, int i, const char *const *words, int n)
{
    TGC_ASSERT(i >= 0 && i < tgc_config_nopts() && opts[i].kind == OPT_WORDS && n >= 1);
    const char **w = xmalloc((size_t)(n + 1) * sizeof *w);
    for (int k = 0; k < n; k++) w[k] = words[k];
    w[n] = NULL;
    keep((char *)w);
    *(const char *const **)((char *)c + opts[i].offset) = w;
}

int tgc_config_set_to(tgc_config *c, int i, const char *value, FILE *ef)
{
    TGC_ASSERT(i >= 0 && i < (int)ARRAY_LEN(opts));
    int rc = set_value(c, &opts[i], value, ef);
    if (rc == 0) c->seen[i] = true;
    return rc;
}

void tgc_config_unset_flag(tgc_config *c, int i)
{
    TGC_ASSERT(i >= 0 && i < (int)ARRAY_LEN(opts) && opts[i].kind == OPT_FLAG);
    *(bool *)((char *)c + opts[i].offset) = false;
    c->seen[i] = true;
}

const char *tgc_config_keep(char *s) { return keep(s); }

int tgc_config_check(const tgc_config *c) { return tgc_config_check_to(c, stderr); }
int tgc_config_check_run(const tgc_config *c) { return tgc_config_check_run_to(c, stderr); }
int tgc_config_schedule(const tgc_config *c, rt_schedule *s) { return tgc_config_schedule_to(c, s, stderr); }
