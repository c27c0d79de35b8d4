#include "pass.h"

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
                        .recompute_layers = 1};
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
    if (!p->run(g, ctx) || ctx->d->nerrors > before) return false;
    ir_graph_pass_record(g, p->name);
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
    for (int i = 0; i < n; i++) {
        const pass_info *p = list[i];
        bool applies = !ir_graph_pass_ran(g, p->name) && (!p->gate || p->gate(o));
        if (applies && (!order_check(g, p, ctx->d) || !run_one(g, p, ctx))) return false;
        if (after) after(p->name, g, user);
    }
    return true;
}
