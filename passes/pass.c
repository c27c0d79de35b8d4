#include "pass.h"

#include <string.h>

#include "support/util.h"

static const pass_info passes[] = {
#define PASS(name, fn, summary) {#name, fn, summary},
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

bool pass_run_list(ir_graph *g, const pass_info *const *list, int n, pass_ctx *ctx,
                   pass_after_fn after, void *user)
{
    for (int i = 0; i < n; i++) {
        int before = ctx->d->nerrors;
        if (!list[i]->run(g, ctx) || ctx->d->nerrors > before) return false;
        if (ctx->verify_each && !ir_graph_verify(g, ctx->d)) {
            diag_error_plain(ctx->d, "the IR is malformed after pass '%s'", list[i]->name);
            return false;
        }
        if (after) after(list[i]->name, g, user);
    }
    return true;
}
