/* The C renderer: kernel IR -> one C translation unit for the CPU backend.
 * OpenMP splits the outer loop (rows, column blocks, elements); inner
 * loops are plain counted loops over compile-time bounds that the compiler
 * vectorises. Reductions run in a fixed order for a given build, so runs
 * are bit-identical. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "support/util.h"

extern const char tgc_philox_src[];

#define PAR_MIN 16384 /* elements below which a loop stays on one thread */
#define COL_BLOCK 64

typedef struct rc {
    strbuf *sb;
    const kernel *k;
    const char *T;  /* float type name */
    const char *fs; /* libm suffix: "f" or "" */
} rc;

static const char *ctype_name(ir_dtype t)
{
    switch (t) {
    case IR_F32: return "float";
    case IR_F64: return "double";
    case IR_I32: return "int32_t";
    case IR_I64: return "int64_t";
    case IR_U8: return "uint8_t";
    default: return "float";
    }
}

static void put_float(rc *r, double v)
{
    if (isinf(v)) { sb_printf(r->sb, "(%sINFINITY)", v < 0 ? "-" : ""); return; }
    sb_printf(r->sb, "((%s)", r->T);
    sb_put_double(r->sb, v);
    sb_putc(r->sb, ')');
}

static void expr(rc *r, const kx *e);

static void un(rc *r, const kx *e)
{
    static const char *fn[] = {[KU_EXP] = "exp", [KU_LOG] = "log", [KU_SQRT] = "sqrt", [KU_TANH] = "tanh",
                               [KU_ERF] = "erf", [KU_ABS] = "fabs", [KU_SIN] = "sin", [KU_COS] = "cos"};
    strbuf *sb = r->sb;
    switch ((kx_unop)e->op) {
    case KU_NEG: sb_puts(sb, "(-"); expr(r, e->a); sb_putc(sb, ')'); return;
    case KU_NOT: sb_puts(sb, "(int64_t)(!"); expr(r, e->a); sb_putc(sb, ')'); return;
    case KU_TOF: sb_printf(sb, "((%s)", r->T); expr(r, e->a); sb_putc(sb, ')'); return;
    case KU_TOI: sb_puts(sb, "((int64_t)"); expr(r, e->a); sb_putc(sb, ')'); return;
    case KU_RECIP: sb_printf(sb, "((%s)1 / ", r->T); expr(r, e->a); sb_putc(sb, ')'); return;
    case KU_RSQRT: sb_printf(sb, "((%s)1 / sqrt%s(", r->T, r->fs); expr(r, e->a); sb_puts(sb, "))"); return;
    case KU_EXP:
        /* Clamped below where the result underflows anyway (0 in float32
         * is exp(-104), within 1e-38 of exp(-87)): the SIMD exp takes a
         * slow scalar path for such lanes, and masked logits (-10000) are
         * exactly such lanes. */
        sb_printf(sb, "exp%s(fmax%s(", r->fs, r->fs);
        expr(r, e->a);
        sb_printf(sb, ", (%s)%s))", r->T, r->fs[0] ? "-87.0" : "-700.0");
        return;
    case KU_ABS:
        if (e->type == KT_I) { sb_puts(sb, "llabs("); expr(r, e->a); sb_putc(sb, ')'); return; }
        break;
    default: break;
    }
    sb_printf(sb, "%s%s(", fn[e->op], r->fs);
    expr(r, e->a);
    sb_putc(sb, ')');
}

static void bin(rc *r, const kx *e)
{
    static const char *infix[] = {[KB_ADD] = "+", [KB_SUB] = "-", [KB_MUL] = "*", [KB_DIV] = "/",
                                  [KB_IDIV] = "/", [KB_IMOD] = "%", [KB_LT] = "<", [KB_LE] = "<=",
                                  [KB_EQ] = "==", [KB_NE] = "!=", [KB_AND] = "&&", [KB_OR] = "||"};
    strbuf *sb = r->sb;
    if ((e->op == KB_MAX || e->op == KB_MIN) && e->type == KT_I) {
        sb_puts(sb, "((");
        expr(r, e->a);
        sb_puts(sb, e->op == KB_MAX ? ") > (" : ") < (");
        expr(r, e->b);
        sb_puts(sb, ") ? (");
        expr(r, e->a);
        sb_puts(sb, ") : (");
        expr(r, e->b);
        sb_puts(sb, "))");
        return;
    }
    if (e->op == KB_MAX || e->op == KB_MIN || e->op == KB_POW) {
        const char *f = e->op == KB_MAX ? "fmax" : e->op == KB_MIN ? "fmin" : "pow";
        sb_printf(sb, "%s%s(", f, r->fs);
        expr(r, e->a);
        sb_puts(sb, ", ");
        expr(r, e->b);
        sb_putc(sb, ')');
        return;
    }
    bool cmp = e->op >= KB_LT;
    sb_puts(sb, cmp ? "(int64_t)(" : "(");
    expr(r, e->a);
    sb_printf(sb, " %s ", infix[e->op]);
    expr(r, e->b);
    sb_putc(sb, ')');
}

static void expr(rc *r, const kx *e)
{
    strbuf *sb = r->sb;
    switch (e->kind) {
    case KX_CONST:
        if (e->type == KT_F) put_float(r, e->f);
        else sb_printf(sb, "INT64_C(%lld)", (long long)e->i);
        return;
    case KX_IDX: sb_puts(sb, r->k->kind == KK_MAP ? "i" : e->arg ? "c" : "r"); return;
    case KX_LOAD:
        if (e->type == KT_I) sb_printf(sb, "((int64_t)a%d[", e->arg);
        else sb_printf(sb, "(a%d[", e->arg);
        expr(r, e->a);
        sb_puts(sb, "])");
        return;
    case KX_ACC: sb_printf(sb, "acc%d", e->arg); return;
    case KX_RT:
        sb_puts(sb, e->arg == KRT_STEP ? "rt->step" : e->arg == KRT_SEED ? "rt->seed" : e->arg == KRT_LR ? "rt->lr"
                  : e->arg == KRT_WD ? "rt->wd" : e->arg == KRT_TP_RANK ? "rt->tp_rank"
                  : e->arg == KRT_TP_SIZE ? "rt->tp_size" : e->arg == KRT_OPT_STEP ? "rt->opt_step" : "rt->loss_scale");
        if (e->arg == KRT_LR || e->arg == KRT_WD || e->arg == KRT_LOSS_SCALE) sb_printf(sb, "_%s", r->T);
        return;
    case KX_UN: un(r, e); return;
    case KX_BIN: bin(r, e); return;
    case KX_SEL:
        sb_puts(sb, "(");
        expr(r, e->a);
        sb_puts(sb, " ? ");
        expr(r, e->b);
        sb_puts(sb, " : ");
        expr(r, e->c);
        sb_puts(sb, ")");
        return;
    case KX_KEEP:
        sb_printf(sb, "(rng_dropout_keep(rng_dropout_bits((uint64_t)rt->seed, (uint64_t)rt->step, UINT64_C(%llu), ",
                  (unsigned long long)e->i);
        expr(r, e->a);
        sb_printf(sb, "), %.9gf) ? ", e->f);
        put_float(r, 1.0 / (1.0 - e->f));
        sb_printf(sb, " : (%s)0)", r->T);
        return;
    }
}

/* Two arguments of one kernel bound to the same memory may not be restrict. */
static bool args_alias(const cg_bind *binds, int nargs)
{
    for (int i = 0; i < nargs; i++)
        for (int j = i + 1; j < nargs; j++)
            if (binds[i].kind == binds[j].kind && binds[i].node == binds[j].node &&
                binds[i].offset == binds[j].offset)
                return true;
    return false;
}

static void params(rc *r, const cg_bind *binds)
{
    const kernel *k = r->k;
    bool restrict_ok = !args_alias(binds, k->nargs);
    for (int a = 0; a < k->nargs; a++) {
        const karg *g = &k->args[a];
        sb_printf(r->sb, "    %s%s *%sa%d = (%s%s *)io[%d];\n", g->output ? "" : "const ", ctype_name(g->dtype),
                  restrict_ok ? "restrict " : "", a, g->output ? "" : "const ", ctype_name(g->dtype), a);
    }
}

/* The rounding of a 16-bit store (mixed precision), or nothing. */
static const char *store_fn(const karg *a)
{
    return a->store == IR_BF16 && a->dtype == IR_F32 ? "tgc_bf16"
           : a->store == IR_F16 && a->dtype == IR_F32 ? "tgc_f16" : "";
}

static void outputs(rc *r, bool per_row, const char *ind)
{
    const kernel *k = r->k;
    for (int o = 0; o < k->nout; o++)
        if (k->out[o].per_row == per_row) {
            sb_printf(r->sb, "%s%s v%d = ", ind, ctype_name(k->args[k->out[o].arg].dtype), o);
            expr(r, k->out[o].val);
            sb_puts(r->sb, ";\n");
        }
    for (int o = 0; o < k->nout; o++)
        if (k->out[o].per_row == per_row) {
            sb_printf(r->sb, "%sa%d[", ind, k->out[o].arg);
            expr(r, k->out[o].idx);
            sb_printf(r->sb, "] = %s(v%d);\n", store_fn(&k->args[k->out[o].arg]), o);
        }
}

static void render_map(rc *r)
{
    const kernel *k = r->k;
    for (int j = 0; j < k->nacc; j++) {
        sb_printf(r->sb, "    const %s acc%d = ", r->T, j);
        expr(r, k->acc[j]);
        sb_puts(r->sb, ";\n");
    }
    if (k->n >= PAR_MIN) sb_puts(r->sb, "    #pragma omp parallel for simd schedule(static)\n");
    sb_printf(r->sb, "    for (int64_t i = 0; i < INT64_C(%lld); i++) {\n", (long long)k->n);
    outputs(r, false, "        ");
    sb_puts(r->sb, "    }\n");
}

static void render_row(rc *r)
{
    const kernel *k = r->k;
    /* One long row (a reduction to a scalar) accumulates in double. */
    const char *acct = k->n == 1 ? "double" : r->T;
    if (k->n > 1 && k->n * k->cols >= PAR_MIN) sb_puts(r->sb, "    #pragma omp parallel for schedule(static)\n");
    sb_printf(r->sb, "    for (int64_t r = 0; r < INT64_C(%lld); r++) {\n", (long long)k->n);
    if (k->row_limit) {
        sb_puts(r->sb, "        const int64_t lim = ");
        expr(r, k->row_limit);
        sb_puts(r->sb, ";\n");
    } else {
        sb_printf(r->sb, "        const int64_t lim = INT64_C(%lld);\n", (long long)k->cols);
    }
    for (int j = 0; j < k->nacc; j++) {
        bool mx = k->red[j] == KRED_MAX;
        sb_printf(r->sb, "        %s acc%d = %s;\n", acct, j, mx ? "-INFINITY" : "0");
        sb_printf(r->sb, "        #pragma omp simd reduction(%s:acc%d)\n", mx ? "max" : "+", j);
        sb_puts(r->sb, "        for (int64_t c = 0; c < lim; c++) ");
        if (mx) { sb_printf(r->sb, "acc%d = fmax%s(acc%d, ", j, r->fs, j); expr(r, k->acc[j]); sb_puts(r->sb, ");\n"); }
        else { sb_printf(r->sb, "acc%d += ", j); expr(r, k->acc[j]); sb_puts(r->sb, ";\n"); }
    }
    bool any_elem = false;
    for (int o = 0; o < k->nout; o++) any_elem |= !k->out[o].per_row;
    if (any_elem) {
        sb_puts(r->sb, "        #pragma omp simd\n        for (int64_t c = 0; c < lim; c++) {\n");
        outputs(r, false, "            ");
        sb_puts(r->sb, "        }\n");
        if (k->row_limit) {
            sb_printf(r->sb, "        for (int64_t c = lim; c < INT64_C(%lld); c++) {\n", (long long)k->cols);
            for (int o = 0; o < k->nout; o++)
                if (!k->out[o].per_row) {
                    sb_printf(r->sb, "            a%d[", k->out[o].arg);
                    expr(r, k->out[o].idx);
                    sb_puts(r->sb, "] = 0;\n");
                }
            sb_puts(r->sb, "        }\n");
        }
    }
    outputs(r, true, "        ");
    sb_puts(r->sb, "    }\n");
}

static void render_col(rc *r, bool scatter)
{
    const kernel *k = r->k;
    const kout *o = &k->out[0];
    if (scatter)
        sb_printf(r->sb, "    memset(a%d, 0, sizeof(a%d[0]) * INT64_C(%lld));\n", o->arg, o->arg,
                  (long long)k->args[o->arg].numel);
    if (k->n * k->cols >= PAR_MIN && k->cols > COL_BLOCK)
        sb_puts(r->sb, "    #pragma omp parallel for schedule(static)\n");
    sb_printf(r->sb, "    for (int64_t cb = 0; cb < INT64_C(%lld); cb += %d) {\n", (long long)k->cols, COL_BLOCK);
    sb_printf(r->sb, "        const int64_t ce = cb + %d < INT64_C(%lld) ? cb + %d : INT64_C(%lld);\n", COL_BLOCK,
              (long long)k->cols, COL_BLOCK, (long long)k->cols);
    if (!scatter) sb_printf(r->sb, "        %s acc[%d] = {0};\n", r->T, COL_BLOCK);
    sb_printf(r->sb, "        for (int64_t r = 0; r < INT64_C(%lld); r++) {\n", (long long)k->n);
    sb_puts(r->sb, "            #pragma omp simd\n            for (int64_t c = cb; c < ce; c++) ");
    if (scatter) {
        sb_printf(r->sb, "a%d[", o->arg);
        expr(r, o->idx);
        sb_puts(r->sb, "] += ");
    } else {
        sb_puts(r->sb, "acc[c - cb] += ");
    }
    expr(r, o->val);
    sb_puts(r->sb, ";\n        }\n");
    if (!scatter) {
        sb_printf(r->sb, "        for (int64_t c = cb; c < ce; c++) a%d[", o->arg);
        expr(r, o->idx);
        sb_printf(r->sb, "] = %s(acc[c - cb]);\n", store_fn(&k->args[o->arg]));
    }
    sb_puts(r->sb, "    }\n");
}

static void render_kernel(strbuf *sb, const kernel *k, const cg_bind *binds)
{
    bool f64 = k->ctype == IR_F64;
    rc r = {sb, k, f64 ? "double" : "float", f64 ? "" : "f"};
    sb_printf(sb, "\n/* %s */\nvoid %s(void *const *io, const tgc_rt *rt)\n{\n    (void)rt;\n", k->comment, k->name);
    params(&r, binds);
    switch (k->kind) {
    case KK_MAP: render_map(&r); break;
    case KK_ROW: render_row(&r); break;
    case KK_COL: render_col(&r, false); break;
    case KK_SCATTER_ADD: render_col(&r, true); break;
    }
    sb_puts(sb, "}\n");
}

char *cg_render_c(const cg_program *p)
{
    strbuf sb;
    sb_init(&sb);
    sb_puts(&sb, "/* Generated by tgc: the kernels of one plan. */\n"
                 "#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n\n"
                 "typedef struct tgc_rt {\n    int64_t step, seed;\n    float lr_float;\n    double lr_double;\n"
                 "    float wd_float;\n    double wd_double;\n    int64_t tp_rank, tp_size, opt_step;\n"
                 "    float loss_scale_float;\n    double loss_scale_double;\n} tgc_rt;\n\n");
    /* glibc's libmvec has SIMD versions of the math functions: declaring
     * them lets the vectoriser call them instead of a scalar call per
     * element. */
    sb_puts(&sb, "#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)\n"
                 "#define TGC_SIMD __attribute__((__simd__(\"notinbranch\")))\n"
                 "float expf(float) TGC_SIMD; float logf(float) TGC_SIMD; float tanhf(float) TGC_SIMD;\n"
                 "float erff(float) TGC_SIMD; float sinf(float) TGC_SIMD; float cosf(float) TGC_SIMD;\n"
                 "float powf(float, float) TGC_SIMD;\n"
                 "double exp(double) TGC_SIMD; double log(double) TGC_SIMD; double tanh(double) TGC_SIMD;\n"
                 "double erf(double) TGC_SIMD; double sin(double) TGC_SIMD; double cos(double) TGC_SIMD;\n"
                 "double pow(double, double) TGC_SIMD;\n"
                 "#endif\n\n");
    /* Mixed precision: 16-bit storage emulated in fp32 buffers by rounding
     * every stored value to nearest even (overflow to inf in f16). */
    sb_puts(&sb, "static inline float tgc_bf16(float x)\n{\n    uint32_t u;\n    memcpy(&u, &x, 4);\n"
                 "    if ((u & 0x7fffffffu) > 0x7f800000u) return x;\n"
                 "    u += 0x7fffu + ((u >> 16) & 1u);\n    u &= 0xffff0000u;\n    memcpy(&x, &u, 4);\n"
                 "    return x;\n}\n"
                 "#ifdef __FLT16_MAX__\nstatic inline float tgc_f16(float x) { return (float)(_Float16)x; }\n#endif\n\n");
    sb_puts(&sb, tgc_philox_src);
    for (int i = 0; i < p->nkernels; i++) render_kernel(&sb, p->kernels[i], p->binds[i]);
    return sb.s;
}
