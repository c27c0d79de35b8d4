/* The shared expression renderer (render_expr.h): kernel IR expressions as
 * C text for both the C and the CUDA renderer. */
#include "codegen/render_expr.h"

#include <math.h>
#include <string.h>

const cg_rt_field cg_rt_fields[] = {
    {"int64_t", "step"},      {"int64_t", "seed"},     {"float", "lr_float"},
    {"double", "lr_double"},  {"float", "wd_float"},   {"double", "wd_double"},
    {"int64_t", "tp_rank"},   {"int64_t", "tp_size"},  {"int64_t", "opt_step"},
    {"float", "loss_scale_float"}, {"double", "loss_scale_double"},
    {"int64_t", "shard_lo"}, {"int64_t", "shard_hi"}, {"int64_t", "eval"},
    {"int64_t", "pos"},
};
const int cg_rt_nfields = (int)ARRAY_LEN(cg_rt_fields);

void cg_rx_rt_struct(strbuf *sb)
{
    sb_puts(sb, "typedef struct tgc_rt {\n");
    for (int i = 0; i < cg_rt_nfields; i++) {
        bool first = i == 0 || strcmp(cg_rt_fields[i - 1].type, cg_rt_fields[i].type) != 0;
        bool last = i + 1 == cg_rt_nfields || strcmp(cg_rt_fields[i + 1].type, cg_rt_fields[i].type) != 0;
        if (first) sb_printf(sb, "    %s ", cg_rt_fields[i].type);
        sb_printf(sb, "%s%s", cg_rt_fields[i].name, last ? ";\n" : ", ");
    }
    sb_puts(sb, "} tgc_rt;\n\n");
}

void cg_rx_init(cg_rx *r, strbuf *sb, const kernel *k, cg_lang lang)
{
    bool f64 = k->ctype == IR_F64;
    *r = (cg_rx){.sb = sb, .k = k, .lang = lang, .T = f64 ? "double" : "float", .fs = f64 ? "" : "f"};
}

void cg_rx_key(cg_rx *r, uint64_t key)
{
    if (r->key_args) {
        for (int j = 0; j < r->nkeys; j++)
            if (r->keys[j] == key) { sb_printf(r->sb, "tgc_key%d", j); return; }
        if (r->nkeys < CG_RX_MAX_KEYS) {
            r->keys[r->nkeys] = key;
            sb_printf(r->sb, "tgc_key%d", r->nkeys++);
            return;
        }
    }
    sb_printf(r->sb, "UINT64_C(%llu)", (unsigned long long)key);
}

const char *cg_rx_ctype(ir_dtype t)
{
    switch (t) {
    case IR_F32: return "float";
    case IR_F64: return "double";
    case IR_I32: return "int32_t";
    case IR_I64: return "int64_t";
    case IR_U8: return "uint8_t";
    case IR_BF16:
    case IR_F16: return "uint16_t"; /* the bit pattern: loads and stores convert (cg_rx_half_prelude) */
    default: return "float";
    }
}

void cg_rx_float(cg_rx *r, double v)
{
    if (isinf(v)) { sb_printf(r->sb, "(%sINFINITY)", v < 0 ? "-" : ""); return; }
    sb_printf(r->sb, "((%s)", r->T);
    sb_put_double(r->sb, v);
    sb_putc(r->sb, ')');
}

static void un(cg_rx *r, const kx *e)
{
    static const char *fn[] = {[KU_EXP] = "exp", [KU_LOG] = "log", [KU_SQRT] = "sqrt", [KU_TANH] = "tanh",
                               [KU_ERF] = "erf", [KU_ABS] = "fabs", [KU_SIN] = "sin", [KU_COS] = "cos"};
    strbuf *sb = r->sb;
    switch ((kx_unop)e->op) {
    case KU_NEG: sb_puts(sb, "(-"); cg_rx_expr(r, e->a); sb_putc(sb, ')'); return;
    case KU_NOT: sb_puts(sb, "(int64_t)(!"); cg_rx_expr(r, e->a); sb_putc(sb, ')'); return;
    case KU_TOF: sb_printf(sb, "((%s)", r->T); cg_rx_expr(r, e->a); sb_putc(sb, ')'); return;
    case KU_TOI: sb_puts(sb, "((int64_t)"); cg_rx_expr(r, e->a); sb_putc(sb, ')'); return;
    case KU_RECIP: sb_printf(sb, "((%s)1 / ", r->T); cg_rx_expr(r, e->a); sb_putc(sb, ')'); return;
    case KU_RSQRT:
        sb_printf(sb, "((%s)1 / sqrt%s(", r->T, r->fs);
        cg_rx_expr(r, e->a);
        sb_puts(sb, "))");
        return;
    case KU_EXP:
        /* Clamped below where the result underflows anyway (0 in float32
         * is exp(-104), within 1e-38 of exp(-87)): the SIMD exp takes a
         * slow scalar path for such lanes, and masked logits (-10000) are
         * exactly such lanes. CUDA keeps the clamp so that both targets
         * compute the same values. */
        /* A compare-select, not fmaxf: in C gcc calls libm's fmaxf, which
         * keeps the loop from vectorising (the exp then runs scalar). NaN
         * stays NaN (x < c is false); both preludes define it. */
        sb_printf(sb, "exp%s(tgc_clamp_lo%s(", r->fs, r->fs);
        cg_rx_expr(r, e->a);
        sb_printf(sb, ", (%s)%s))", r->T, r->fs[0] ? "-87.0" : "-700.0");
        return;
    case KU_ABS:
        if (e->type == KT_I) { sb_puts(sb, "llabs("); cg_rx_expr(r, e->a); sb_putc(sb, ')'); return; }
        break;
    default: break;
    }
    sb_printf(sb, "%s%s(", fn[e->op], r->fs);
    cg_rx_expr(r, e->a);
    sb_putc(sb, ')');
}

static void bin(cg_rx *r, const kx *e)
{
    if (r->mod_c && (e->op == KB_IMOD || e->op == KB_IDIV) && e->a->kind == KX_IDX && e->a->arg == 0 &&
        e->b->kind == KX_CONST && e->b->type == KT_I && e->b->i == r->mod_c) {
        sb_puts(r->sb, e->op == KB_IMOD ? "mc" : "mo");
        return;
    }
    static const char *infix[] = {[KB_ADD] = "+", [KB_SUB] = "-", [KB_MUL] = "*", [KB_DIV] = "/",
                                  [KB_IDIV] = "/", [KB_IMOD] = "%", [KB_LT] = "<", [KB_LE] = "<=",
                                  [KB_EQ] = "==", [KB_NE] = "!=", [KB_AND] = "&&", [KB_OR] = "||"};
    strbuf *sb = r->sb;
    if ((e->op == KB_MAX || e->op == KB_MIN) && e->type == KT_I) {
        sb_puts(sb, "((");
        cg_rx_expr(r, e->a);
        sb_puts(sb, e->op == KB_MAX ? ") > (" : ") < (");
        cg_rx_expr(r, e->b);
        sb_puts(sb, ") ? (");
        cg_rx_expr(r, e->a);
        sb_puts(sb, ") : (");
        cg_rx_expr(r, e->b);
        sb_puts(sb, "))");
        return;
    }
    if (e->op == KB_MAX || e->op == KB_MIN || e->op == KB_POW) {
        const char *f = e->op == KB_MAX ? "fmax" : e->op == KB_MIN ? "fmin" : "pow";
        sb_printf(sb, "%s%s(", f, r->fs);
        cg_rx_expr(r, e->a);
        sb_puts(sb, ", ");
        cg_rx_expr(r, e->b);
        sb_putc(sb, ')');
        return;
    }
    bool cmp = e->op >= KB_LT;
    sb_puts(sb, cmp ? "(int64_t)(" : "(");
    cg_rx_expr(r, e->a);
    sb_printf(sb, " %s ", infix[e->op]);
    cg_rx_expr(r, e->b);
    sb_putc(sb, ')');
}

/* A run-time scalar: the float ones exist in both precisions, and the
 * kernel reads the one of its compute type. */
static void rt_scalar(cg_rx *r, const kx *e)
{
    static const char *name[KRT_COUNT] = {[KRT_STEP] = "step", [KRT_SEED] = "seed", [KRT_LR] = "lr",
                                          [KRT_WD] = "wd", [KRT_TP_RANK] = "tp_rank", [KRT_TP_SIZE] = "tp_size",
                                          [KRT_OPT_STEP] = "opt_step", [KRT_LOSS_SCALE] = "loss_scale",
                                          [KRT_SHARD_LO] = "shard_lo", [KRT_SHARD_HI] = "shard_hi",
                                          [KRT_EVAL] = "eval", [KRT_POS] = "pos"};
    TGC_ASSERT(e->arg >= 0 && e->arg < KRT_COUNT);
    sb_printf(r->sb, "%s%s", r->lang == CG_LANG_CUDA ? "rt." : r->rt_local ? "tgc_rtv." : "rt->", name[e->arg]);
    if (e->arg == KRT_LR || e->arg == KRT_WD || e->arg == KRT_LOSS_SCALE) sb_printf(r->sb, "_%s", r->T);
}

/* The dropout keep factor: the Philox bits of (seed, step, op, element),
 * the formulas of runtime/philox.h that both preludes carry. */
static void keep(cg_rx *r, const kx *e)
{
    const char *rt = r->lang == CG_LANG_CUDA ? "rt." : "rt->";
    /* An evaluation (rt.eval) keeps everything, unscaled: the model in eval mode. */
    sb_printf(r->sb, "(%seval ? (%s)1 : ", rt, r->T);
    sb_printf(r->sb, "(rng_dropout_keep(rng_dropout_bits((uint64_t)%sseed, (uint64_t)%sstep, ", rt, rt);
    cg_rx_key(r, (uint64_t)e->i);
    sb_puts(r->sb, ", ");
    cg_rx_expr(r, e->a);
    sb_printf(r->sb, "), %.9gf) ? ", e->f);
    cg_rx_float(r, 1.0 / (1.0 - e->f));
    sb_printf(r->sb, " : (%s)0))", r->T);
}

void cg_rx_expr(cg_rx *r, const kx *e)
{
    strbuf *sb = r->sb;
    switch (e->kind) {
    case KX_CONST:
        if (e->type == KT_F) cg_rx_float(r, e->f);
        else sb_printf(sb, "INT64_C(%lld)", (long long)e->i);
        return;
    case KX_IDX: sb_puts(sb, r->k->kind == KK_MAP ? "i" : e->arg ? "c" : "r"); return;
    case KX_LOAD:
        if (r->vec_arg && r->vec_arg[e->arg] && e->a->kind == KX_IDX && e->a->arg == 0) {
            if (e->type == KT_I) sb_printf(sb, "((int64_t)tgc_v%d.v[%d])", e->arg, r->vec_lane);
            else sb_printf(sb, "(%s(tgc_v%d.v[%d]))", cg_rx_load_fn(&r->k->args[e->arg]), e->arg, r->vec_lane);
            return;
        }
        if (e->type == KT_I) sb_printf(sb, "((int64_t)a%d[", e->arg);
        else sb_printf(sb, "(%s(a%d[", cg_rx_load_fn(&r->k->args[e->arg]), e->arg);
        cg_rx_expr(r, e->a);
        sb_puts(sb, e->type == KT_I ? "])" : "]))");
        return;
    case KX_ACC: sb_printf(sb, "acc%d", e->arg); return;
    case KX_RT: rt_scalar(r, e); return;
    case KX_UN: un(r, e); return;
    case KX_BIN: bin(r, e); return;
    case KX_SEL: {
        int64_t s;
        if (r->fixed && cg_kx_equal(e->a, r->fixed)) { cg_rx_expr(r, r->fixed_val ? e->b : e->c); return; }
        if (r->seg_set && cg_kx_idx_lt(e->a, &s) && (r->seg_hi <= s || r->seg_lo >= s)) {
            cg_rx_expr(r, r->seg_hi <= s ? e->b : e->c);
            return;
        }
        sb_puts(sb, "(");
        cg_rx_expr(r, e->a);
        sb_puts(sb, " ? ");
        cg_rx_expr(r, e->b);
        sb_puts(sb, " : ");
        cg_rx_expr(r, e->c);
        sb_puts(sb, ")");
        return;
    }
    case KX_KEEP: keep(r, e); return;
    }
}

bool cg_rx_args_alias(const cg_bind *binds, int nargs)
{
    for (int i = 0; i < nargs; i++)
        for (int j = i + 1; j < nargs; j++)
            if (binds[i].kind == binds[j].kind && binds[i].node == binds[j].node &&
                binds[i].offset == binds[j].offset)
                return true;
    return false;
}

static bool is_half(ir_dtype t) { return t == IR_BF16 || t == IR_F16; }

const char *cg_rx_store_fn(const karg *a)
{
    return a->dtype == IR_BF16 ? "tgc_st_bf16" : a->dtype == IR_F16 ? "tgc_st_f16" : "";
}

const char *cg_rx_load_fn(const karg *a)
{
    return a->dtype == IR_BF16 ? "tgc_ld_bf16" : a->dtype == IR_F16 ? "tgc_ld_f16" : "";
}

const char *cg_rx_value_type(const cg_rx *r, const karg *a) { return is_half(a->dtype) ? r->T : cg_rx_ctype(a->dtype); }

/* The conversions, integer code that both targets compile to the same
 * bits (no CUDA headers: tgc_f2u / tgc_u2f are each prelude's bit casts).
 * To 16 bits: round to nearest even, NaN stays NaN (quiet); f16 overflows
 * to inf from 65520 on (the tie above 65504 goes to even, inf) and keeps
 * subnormals. From 16 bits: exact. */
void cg_rx_half_prelude(strbuf *sb, const char *fn)
{
    sb_printf(sb,
              "%s float tgc_ld_bf16(uint16_t h) { return tgc_u2f((uint32_t)h << 16); }\n"
              "%s uint16_t tgc_st_bf16(float x)\n{\n    const uint32_t u = tgc_f2u(x);\n"
              "    const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;\n"
              "    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : r);\n}\n", fn, fn);
    sb_printf(sb,
              "%s float tgc_ld_f16(uint16_t h)\n{\n"
              "    const uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;\n"
              "    const uint32_t n = e == 0x1fu ? 0x7f800000u | (m << 13) : ((e + 112u) << 23) | (m << 13);\n"
              "    /* a subnormal: m 2^-24, exact in fp32 (a normal number there) */\n"
              "    return e ? tgc_u2f(s | n) : tgc_u2f(s | tgc_f2u((float)m * 5.9604644775390625e-8f));\n}\n", fn);
    sb_printf(sb,
              "%s uint16_t tgc_st_f16(float x)\n{\n"
              "    const uint32_t u = tgc_f2u(x), s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;\n"
              "    /* normal: the exponent rebiased (127 - 15), the 13 dropped bits rounded */\n"
              "    const uint32_t m = a - 0x38000000u, nr = (m + 0xfffu + ((m >> 13) & 1u)) >> 13;\n"
              "    /* subnormal (2^-25 <= |x| < 2^-14): the significand in units of 2^-24 */\n"
              "    const uint32_t e = a >> 23, sh = 126u - (e < 102u ? 102u : e > 112u ? 112u : e);\n"
              "    const uint32_t f = (a & 0x7fffffu) | 0x800000u;\n"
              "    const uint32_t sr = (f + (1u << (sh - 1u)) - 1u + ((f >> sh) & 1u)) >> sh;\n"
              "    const uint32_t r = a > 0x7f800000u ? 0x7e00u : a >= 0x477ff000u ? 0x7c00u : a >= 0x38800000u ? nr\n"
              "                     : e < 102u ? 0u : sr;\n"
              "    return (uint16_t)(s | r);\n}\n", fn);
    /* The rounding alone, for kernels that keep a rounded value in fp32. */
    sb_printf(sb, "%s float tgc_bf16(float x) { return tgc_ld_bf16(tgc_st_bf16(x)); }\n"
                  "%s float tgc_f16(float x) { return tgc_ld_f16(tgc_st_f16(x)); }\n\n", fn, fn);
}

void cg_rx_outputs(cg_rx *r, bool per_row, const char *ind)
{
    const kernel *k = r->k;
    for (int o = 0; o < k->nout; o++)
        if (k->out[o].per_row == per_row) {
            sb_printf(r->sb, "%s%s v%d = ", ind, cg_rx_value_type(r, &k->args[k->out[o].arg]), o);
            cg_rx_expr(r, k->out[o].val);
            sb_puts(r->sb, ";\n");
        }
    for (int o = 0; o < k->nout; o++)
        if (k->out[o].per_row == per_row) {
            sb_printf(r->sb, "%sa%d[", ind, k->out[o].arg);
            cg_rx_expr(r, k->out[o].idx);
            sb_printf(r->sb, "] = %s(v%d);\n", cg_rx_store_fn(&k->args[k->out[o].arg]), o);
        }
}

void cg_rx_map_accs(cg_rx *r)
{
    const kernel *k = r->k;
    for (int j = 0; j < k->nacc; j++) {
        sb_printf(r->sb, "    const %s acc%d = ", r->T, j);
        cg_rx_expr(r, k->acc[j]);
        sb_puts(r->sb, ";\n");
    }
}

bool cg_kx_equal(const kx *a, const kx *b)
{
    if (a == b) return true;
    if (!a || !b || a->kind != b->kind || a->type != b->type || a->op != b->op || a->arg != b->arg ||
        a->i != b->i || !(a->f == b->f || (a->f != a->f && b->f != b->f)))
        return false;
    return cg_kx_equal(a->a, b->a) && cg_kx_equal(a->b, b->b) && cg_kx_equal(a->c, b->c);
}

bool cg_kx_idx_lt(const kx *e, int64_t *s)
{
    if (e->kind != KX_BIN || e->op != KB_LT || e->a->kind != KX_IDX || e->a->arg != 0 || e->b->kind != KX_CONST ||
        e->b->type != KT_I)
        return false;
    *s = e->b->i;
    return true;
}

bool cg_kx_invariant(const kernel *k, const kx *e)
{
    if (!e) return true;
    if (e->kind == KX_IDX || e->kind == KX_KEEP) return false;
    if (e->kind == KX_LOAD && k->args[e->arg].output) return false;
    return cg_kx_invariant(k, e->a) && cg_kx_invariant(k, e->b) && cg_kx_invariant(k, e->c);
}
