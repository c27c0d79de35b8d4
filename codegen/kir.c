#include "kir.h"

#include "support/util.h"

static kx *node(kb *b, kx_kind kind, kx_type type)
{
    kx *e = arena_alloc(b->mem, sizeof *e);
    e->kind = kind;
    e->type = type;
    return e;
}

kx *kx_f(kb *b, double v) { kx *e = node(b, KX_CONST, KT_F); e->f = v; return e; }
kx *kx_i(kb *b, int64_t v) { kx *e = node(b, KX_CONST, KT_I); e->i = v; return e; }

kx *kx_idx(kb *b, int which)
{
    kx *e = node(b, KX_IDX, KT_I);
    e->arg = which;
    return e;
}

kx *kx_load(kb *b, int arg, kx *idx)
{
    TGC_ASSERT(arg >= 0 && arg < b->k->nargs && idx->type == KT_I);
    kx *e = node(b, KX_LOAD, ir_dtype_is_float(b->k->args[arg].dtype) ? KT_F : KT_I);
    e->arg = arg;
    e->a = idx;
    return e;
}

kx *kx_acc(kb *b, int j)
{
    kx *e = node(b, KX_ACC, KT_F);
    e->arg = j;
    return e;
}

kx *kx_rt(kb *b, kx_rt_slot which)
{
    kx *e = node(b, KX_RT, which == KRT_LR || which == KRT_WD || which == KRT_LOSS_SCALE ? KT_F : KT_I);
    e->arg = which;
    return e;
}

kx *kx_un(kb *b, kx_unop op, kx *a)
{
    kx_type t = op == KU_TOF ? KT_F : (op == KU_TOI || op == KU_NOT) ? KT_I : a->type;
    if (op != KU_TOF && op != KU_NEG && op != KU_ABS && op != KU_NOT && op != KU_TOI) TGC_ASSERT(a->type == KT_F);
    kx *e = node(b, KX_UN, t);
    e->op = op;
    e->a = a;
    return e;
}

kx *kx_bin(kb *b, kx_binop op, kx *a, kx *c)
{
    bool cmp = op >= KB_LT;
    bool intop = op == KB_IDIV || op == KB_IMOD;
    if (intop) TGC_ASSERT(a->type == KT_I && c->type == KT_I);
    /* Mixed arithmetic promotes int to float. */
    if (!intop && !cmp && a->type != c->type) {
        if (a->type == KT_I) a = kx_un(b, KU_TOF, a);
        if (c->type == KT_I) c = kx_un(b, KU_TOF, c);
    }
    kx *e = node(b, KX_BIN, cmp ? KT_I : a->type);
    e->op = op;
    e->a = a;
    e->b = c;
    return e;
}

kx *kx_sel(kb *b, kx *cond, kx *a, kx *c)
{
    if (a->type != c->type) {
        if (a->type == KT_I) a = kx_un(b, KU_TOF, a);
        if (c->type == KT_I) c = kx_un(b, KU_TOF, c);
    }
    kx *e = node(b, KX_SEL, a->type);
    e->a = cond;
    e->b = a;
    e->c = c;
    return e;
}

kx *kx_keep(kb *b, kx *idx, double p, int64_t key)
{
    kx *e = node(b, KX_KEEP, KT_F);
    e->a = idx;
    e->f = p;
    e->i = key;
    return e;
}

int kernel_add_arg(kernel *k, ir_dtype t, int64_t numel, bool output)
{
    TGC_ASSERT(k->nargs < KMAX_ARGS);
    k->args[k->nargs] = (karg){t, numel, output};
    return k->nargs++;
}

void kernel_add_out(kernel *k, int arg, kx *idx, kx *val, bool per_row)
{
    TGC_ASSERT(k->nout < KMAX_OUT && k->args[arg].output);
    k->out[k->nout++] = (kout){arg, idx, val, per_row};
}

int kernel_add_acc(kernel *k, kred red, kx *e)
{
    TGC_ASSERT(k->nacc < KMAX_ACC && e->type == KT_F);
    k->red[k->nacc] = red;
    k->acc[k->nacc] = e;
    return k->nacc++;
}
