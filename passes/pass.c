#include "pass.h"

#include <stddef.h>
#include <string.h>

#include "support/util.h"

/* The gates of passes.def: false where the options leave the pass nothing
 * to do, the cases its function returns at once on (fuse with nothing to
 * fuse would only clear fusion groups, which no earlier pass makes). */
static bool gate_tp(const pass_options *o) { return o->tp > 1; }
static bool gate_sp(const pass_options *o) { return o->sequence_parallel; }
static bool gate_pp(const pass_options *o) { return o->pp > 1 || o->vp > 1; }
static bool gate_recompute(const pass_options *o) { return o->recompute != PASS_RECOMPUTE_NONE; }
static bool gate_fuse(const pass_options *o) { return o->fuse != 0; }
static bool gate_attention(const pass_options *o) { return o->attention_backend != PASS_ATTENTION_UNFUSED; }
static bool gate_lmhead(const pass_options *o) { return o->fused_lm_head; }
static bool gate_kvcache(const pass_options *o) { return o->kv_positions > 0; }

static const pass_info passes[] = {
#define PASS(name, fn, gate, summary) {#name, fn, gate, summary},
#include "passes.def"
};

void pass_options_defaults(pass_options *o)
{
    *o = (pass_options){.optimizer = "adamw", .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .fuse = PASS_FUSE_ALL,
                        .weight_decay = 0.01, .clip_grad = 0.0, .tp = 1,
                        .precision = IR_F32, .pp = 1, .vp = 1, .pipeline_schedule = "1f1b", .dp = 1,
                        .recompute_layers = 1, .fused_lm_head = true,
                        .attention_inplace = true};
}

int64_t pass_dropout_key(const char *name)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *s = name; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    h &= 0x7fffffffu;
    return h ? h : 1;
}

int pass_count(void) { return (int)ARRAY_LEN(passes); }

const pass_info *pass_at(int i) { return i >= 0 && i < pass_count() ? &passes[i] : NULL; }

const pass_info *pass_lookup(const char *name)
{
    for (int i = 0; i < pass_count(); i++)
        if (strcmp(passes[i].name, name) == 0) return &passes[i];
    return NULL;
}

const char *pass_names(void)
{
    static char buf[512];
    if (!buf[0]) {
        strcat(buf, PASS_LOWER);
        for (int i = 0; i < pass_count(); i++) {
            strcat(buf, ", ");
            strcat(buf, passes[i].name);
        }
    }
    return buf;
}

int pass_index(const char *name)
{
    const pass_info *p = pass_lookup(name);
    return p ? (int)(p - passes) : -1;
}

void pass_record_cut_backward(ir_graph *g)
{
    int k = 0, cut = pass_index("autodiff");
    while (k < g->npasses_run && pass_index(g->passes_run[k]) < cut) k++;
    g->npasses_run = k;
}

/* ---- the options a pass records (passes/pass_record.def) ---------------- */

/* Where each row of ir_pass_keys reads its value: parallel to that table. */
static const size_t record_field[] = {
#define PASS_OPT(pass, key, kind, field, choices) offsetof(pass_options, field),
#include "pass_record.def"
};

static int64_t record_hparam(const ir_graph *g, const char *name, int64_t dflt)
{
    for (int i = 0; i < g->nhparams; i++)
        if (strcmp(g->hparams[i].name, name) == 0 && !g->hparams[i].is_float) return g->hparams[i].i;
    return dflt;
}

/* The schedule's counts as it resolves them (passes/pipeline.c): the
 * micro-batch is the model's batch unless given, the global batch b d; v
 * as the pp pass resolves it: Megatron's --num-layers-per-virtual-
 * pipeline-stage N means layers / (p N) chunks (ir_graph_pp_dims reads it
 * back). */
int64_t pass_pp_chunks(const pass_options *o, int64_t layers)
{
    if (o->vp_layers > 0 && o->pp > 1 && layers > 0 && layers % (o->pp * o->vp_layers) == 0)
        return layers / (o->pp * o->vp_layers);
    return o->vp;
}

static void record_resolve(const ir_graph *g, pass_options *o)
{
    if (o->dp < 1) o->dp = 1;
    o->vp = pass_pp_chunks(o, g->num_layers);
    if (o->micro_batch <= 0) o->micro_batch = record_hparam(g, "batch", 1);
    if (o->global_batch <= 0) o->global_batch = o->micro_batch * o->dp;
}

static void record_value(const ir_pass_key *k, const void *field, strbuf *out)
{
    switch (k->kind) {
    case IR_PKEY_I64: sb_printf(out, "%lld", (long long)*(const int64_t *)field); break;
    case IR_PKEY_F64: sb_put_double(out, *(const double *)field); break;
    case IR_PKEY_BOOL: sb_puts(out, *(const bool *)field ? "true" : "false"); break;
    case IR_PKEY_WORD: sb_puts(out, *(const char *const *)field); break;
    case IR_PKEY_ENUM: TGC_ASSERT(ir_pass_choice(k->choices, *(const int *)field, out)); break;
    case IR_PKEY_DTYPE: sb_puts(out, ir_dtype_name(*(const ir_dtype *)field)); break;
    case IR_PKEY_SET: ir_pass_set_write(k->choices, *(const unsigned *)field, out); break;
    case IR_PKEY_TEXT: {
        const char *t = *(const char *const *)field;
        sb_put_quoted(out, t ? t : "");
        break;
    }
    }
}

bool pass_record_args(const char *name, const ir_graph *g, const pass_options *o, strbuf *out)
{
    _Static_assert(ARRAY_LEN(record_field) > 0, "pass_record.def is empty");
    TGC_ASSERT((int)ARRAY_LEN(record_field) == ir_pass_nkeys);
    pass_options r = *o;
    record_resolve(g, &r);
    bool any = false;
    for (int i = 0; i < ir_pass_nkeys; i++) {
        if (strcmp(ir_pass_keys[i].pass, name) != 0) continue;
        sb_printf(out, "%s%s=", any ? " " : "", ir_pass_keys[i].key);
        record_value(&ir_pass_keys[i], (const char *)&r + record_field[i], out);
        any = true;
    }
    return any;
}

/* One option given against the record of its pass; false after an error
 * naming both values. */
static bool given_check(const ir_graph *g, const pass_given *gv, const pass_options *o, diag *d)
{
    const char *rec = ir_graph_pass_args(g, gv->pass);
    if (!ir_graph_pass_ran(g, gv->pass)) return true;
    strbuf mine, want, theirs;
    sb_init(&mine);
    sb_init(&want);
    sb_init(&theirs);
    pass_record_args(gv->pass, g, o, &mine);
    bool has = ir_pass_args_value(mine.s, gv->key, &want);
    TGC_ASSERT(has); /* the option table's mapping names a recorded key */
    bool same = rec && ir_pass_args_value(rec, gv->key, &theirs) && strcmp(want.s, theirs.s) == 0;
    if (!same)
        diag_error_plain(d, "%s: the IR's %s pass ran with %s=%s (its passes line), where this command makes "
                         "%s=%s; compile from the model or from IR before %s", gv->option, gv->pass, gv->key,
                         theirs.s ? theirs.s : "?", gv->key, want.s, gv->pass);
    sb_free(&mine);
    sb_free(&want);
    sb_free(&theirs);
    return same;
}

bool pass_given_check(const ir_graph *g, const pass_ctx *ctx)
{
    pass_options defaults;
    pass_options_defaults(&defaults);
    const pass_options *o = ctx->opts ? ctx->opts : &defaults;
    bool ok = true;
    const char *failed = NULL;
    for (int i = 0; i < ctx->ngiven; i++) {
        if (failed == ctx->given[i].option) continue;
        if (!given_check(g, &ctx->given[i], o, ctx->d)) {
            failed = ctx->given[i].option;
            ok = false;
        }
    }
    return ok;
}

/* A pass not applied yet may run when no pass after it in passes.def has:
 * the record is in that order, so its last entry decides. */
static bool order_check(const ir_graph *g, const pass_info *p, diag *d)
{
    if (g->npasses_run == 0) return true;
    const char *last = g->passes_run[g->npasses_run - 1];
    if (pass_index(last) < pass_index(p->name)) return true;
    diag_error_plain(d, "pass '%s' cannot run on this IR: it comes before '%s', which has run on it (passes run in "
                     "the order %s); give %s's options where the IR is made, or start from the model",
                     p->name, last, pass_names() + strlen(PASS_LOWER ", "), p->name);
    return false;
}

/* Runs one pass and records it; false on its errors or the verifier's. */
static bool run_one(ir_graph *g, const pass_info *p, pass_ctx *ctx)
{
    int before = ctx->d->nerrors;
    pass_options defaults;
    pass_options_defaults(&defaults);
    strbuf args;
    sb_init(&args);
    bool any = pass_record_args(p->name, g, ctx->opts ? ctx->opts : &defaults, &args);
    bool ok = p->run(g, ctx) && ctx->d->nerrors == before;
    if (ok) ir_graph_pass_record(g, p->name, any ? args.s : NULL);
    sb_free(&args);
    if (!ok) return false;
    if (ctx->verify_each && !ir_graph_verify(g, ctx->d)) {
        diag_error_plain(ctx->d, "the IR is malformed after pass '%s'", p->name);
        return false;
    }
    return true;
}

bool pass_run_list(ir_graph *g, const pass_info *const *list, int n, pass_ctx *ctx,
                   pass_after_fn after, void *user)
{
    pass_options defaults;
    pass_options_defaults(&defaults);
    const pass_options *o = ctx->opts ? ctx->opts : &defaults;
    if (!pass_given_check(g, ctx)) return false;
    for (int i = 0; i < n; i++) {
        const pass_info *p = list[i];
        bool applies = !ir_graph_pass_ran(g, p->name) && (!p->gate || p->gate(o));
        if (applies && (!order_check(g, p, ctx->d) || !run_one(g, p, ctx))) return false;
        if (after) after(p->name, g, user);
    }
    return true;
}
