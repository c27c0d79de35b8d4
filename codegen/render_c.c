/* The C renderer: kernel IR -> one C translation unit for the CPU backend.
 * OpenMP splits the outer loop (rows, column blocks, elements); inner
 * loops are plain counted loops over compile-time bounds that the compiler
 * vectorises. Reductions run in a fixed order for a given build, so runs
 * are bit-identical. Only the scaffolding is here: the expressions come
 * from render_expr.c, which the CUDA renderer (render_cuda.c) shares. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/attn.h"
#include "codegen/render_expr.h"
#include "support/util.h"

extern const char tgc_philox_src[];

#define PAR_MIN 16384 /* elements below which a loop stays on one thread */
#define COL_BLOCK 64

typedef cg_rx rc; /* the expression renderer's state, for the C target */

static void params(rc *r, const cg_bind *binds)
{
    const kernel *k = r->k;
    bool restrict_ok = !cg_rx_args_alias(binds, k->nargs);
    for (int a = 0; a < k->nargs; a++) {
        const karg *g = &k->args[a];
        sb_printf(r->sb, "    %s%s *%sa%d = (%s%s *)io[%d];\n", g->output ? "" : "const ", cg_rx_ctype(g->dtype),
                  restrict_ok ? "restrict " : "", a, g->output ? "" : "const ", cg_rx_ctype(g->dtype), a);
    }
}

/* The moduli C of the `i % C` (and `i / C`) in e; *bad when two differ. */
static void moduli(const kx *e, int64_t *c, bool *bad)
{
    if (!e) return;
    if (e->kind == KX_BIN && (e->op == KB_IMOD || e->op == KB_IDIV) && e->a->kind == KX_IDX && e->a->arg == 0 &&
        e->b->kind == KX_CONST && e->b->type == KT_I) {
        if (*c && *c != e->b->i) *bad = true;
        *c = e->b->i;
    }
    moduli(e->a, c, bad);
    moduli(e->b, c, bad);
    moduli(e->c, c, bad);
}

int64_t cg_render_c_modulus(const kernel *k)
{
    int64_t C = 0;
    bool bad = false;
    for (int o = 0; k->kind == KK_MAP && o < k->nout; o++) {
        moduli(k->out[o].idx, &C, &bad);
        moduli(k->out[o].val, &C, &bad);
    }
    return !k->map_lo && !bad && C > 1 && k->n % C == 0 && k->n / C > 1 ? C : 0;
}

/* ---- MAP kernels split into uniform loops ------------------------------------------- */

#define MAX_SEGS 64 /* thresholds i < S past which a map keeps its selects per element */

/* The loads of e read no buffer that the kernel writes (binds: where each argument points). */
static bool reads_no_output(const kernel *k, const cg_bind *binds, const kx *e)
{
    if (!e) return true;
    if (e->kind == KX_LOAD)
        for (int a = 0; a < k->nargs; a++)
            if (k->args[a].output && binds[a].kind == binds[e->arg].kind && binds[a].node == binds[e->arg].node)
                return false;
    return reads_no_output(k, binds, e->a) && reads_no_output(k, binds, e->b) && reads_no_output(k, binds, e->c);
}

/* The thresholds S of the selects on i < S in e, sorted and unique in s[0 .. *n); false past max. */
static bool thresholds(const kx *e, int64_t *s, int *n, int max)
{
    if (!e) return true;
    int64_t v;
    if (e->kind == KX_SEL && cg_kx_idx_lt(e->a, &v)) {
        int j = 0;
        while (j < *n && s[j] < v) j++;
        if (j == *n || s[j] != v) {
            if (*n == max) return false;
            memmove(s + j + 1, s + j, (size_t)(*n - j) * sizeof *s);
            s[j] = v;
            (*n)++;
        }
    }
    return thresholds(e->a, s, n, max) && thresholds(e->b, s, n, max) && thresholds(e->c, s, n, max);
}

/* A map whose every output is a select on one loop-invariant condition
 * (the optimizer's skip of a non-finite step) or that selects on i < S
 * (the per-segment learning rate and weight decay of parameter groups)
 * runs as uniform loops: the condition tested once, then per segment
 * a loop whose selects are resolved, so that each loop body is straight
 * arithmetic the compiler vectorises (a select per element keeps gcc's
 * loop scalar: "control flow in loop"). One parallel region: each thread
 * takes one contiguous block of the range (a multiple of 16 elements, a
 * cache line of fp32) and runs the segments' parts within it. Every
 * element computes the same operations as before, in the same order: the
 * results are bit-identical. Returns false when the map has neither. */
static bool split_plan(const kernel *k, const cg_bind *binds, const kx **cond_out, int64_t *seg, int *ns_out)
{
    const kx *cond = NULL;
    for (int o = 0; o < k->nout; o++) {
        const kx *v = k->out[o].val;
        if (v->kind != KX_SEL || !cg_kx_invariant(k, v->a) || !reads_no_output(k, binds, v->a) ||
            (cond && !cg_kx_equal(cond, v->a))) {
            cond = NULL;
            break;
        }
        cond = v->a;
    }
    int ns = 0;
    bool ok = true;
    for (int o = 0; o < k->nout && ok; o++) ok = thresholds(k->out[o].val, seg + 1, &ns, MAX_SEGS);
    if (!ok) ns = 0;
    *cond_out = cond;
    *ns_out = ns;
    return cond || ns;
}

bool cg_render_c_split(const kernel *k, const cg_bind *binds)
{
    const kx *cond;
    int64_t seg[MAX_SEGS + 2];
    int ns;
    return k->kind == KK_MAP && !cg_render_c_modulus(k) && split_plan(k, binds, &cond, seg, &ns);
}

static bool render_map_split(rc *r, const cg_bind *binds)
{
    const kernel *k = r->k;
    const kx *cond;
    int64_t seg[MAX_SEGS + 2];
    int ns;
    if (!split_plan(k, binds, &cond, seg, &ns)) return false;
    /* The segments' bounds: seg[0] = the range's start, seg[ns + 1] its end. */
    strbuf *sb = r->sb;
    sb_puts(sb, "    const int64_t tgc_lo = ");
    if (k->map_lo) cg_rx_expr(r, k->map_lo); else sb_puts(sb, "0");
    sb_puts(sb, ", tgc_hi = ");
    if (k->map_hi) cg_rx_expr(r, k->map_hi); else sb_printf(sb, "INT64_C(%lld)", (long long)k->n);
    sb_puts(sb, ";\n");
    if (cond) {
        sb_puts(sb, "    const int tgc_uniform = ");
        cg_rx_expr(r, cond);
        sb_puts(sb, " != 0;\n");
    }
    if (k->n >= PAR_MIN) sb_puts(sb, "    #pragma omp parallel\n");
    sb_puts(sb, "    {\n        const tgc_rt tgc_rtv = *rt; /* a local copy: the outputs cannot alias it */\n"
                "        int64_t tgc_b = tgc_lo, tgc_e = tgc_hi;\n");
    if (k->n >= PAR_MIN)
        sb_puts(sb, "#ifdef _OPENMP\n"
                    "        const int64_t tgc_nt = omp_get_num_threads(), tgc_t = omp_get_thread_num();\n"
                    "        const int64_t tgc_ch = ((tgc_hi - tgc_lo + tgc_nt - 1) / tgc_nt + 15) / 16 * 16;\n"
                    "        tgc_b = tgc_lo + tgc_t * tgc_ch < tgc_hi ? tgc_lo + tgc_t * tgc_ch : tgc_hi;\n"
                    "        tgc_e = tgc_b + tgc_ch < tgc_hi ? tgc_b + tgc_ch : tgc_hi;\n"
                    "#endif\n");
    r->rt_local = true;
    for (int pass = 0; pass < (cond ? 2 : 1); pass++) {
        const char *ind = cond ? "            " : "        ";
        if (cond) sb_puts(sb, pass == 0 ? "        if (tgc_uniform) {\n" : "        } else {\n");
        r->fixed = cond;
        r->fixed_val = pass == 0;
        for (int j = 0; j <= ns; j++) {
            /* segment j: [seg[j], seg[j + 1]), the outer ones open-ended */
            r->seg_set = ns > 0;
            r->seg_lo = j == 0 ? INT64_MIN : seg[j];
            r->seg_hi = j == ns ? INT64_MAX : seg[j + 1];
            sb_printf(sb, "%s{\n%s    const int64_t tgc_s0 = ", ind, ind);
            if (j == 0) sb_puts(sb, "tgc_b");
            else sb_printf(sb, "tgc_b > INT64_C(%lld) ? tgc_b : INT64_C(%lld)", (long long)seg[j], (long long)seg[j]);
            sb_puts(sb, ", tgc_s1 = ");
            if (j == ns) sb_puts(sb, "tgc_e");
            else
                sb_printf(sb, "tgc_e < INT64_C(%lld) ? tgc_e : INT64_C(%lld)", (long long)seg[j + 1],
                          (long long)seg[j + 1]);
            sb_printf(sb, ";\n%s    #pragma omp simd\n%s    for (int64_t i = tgc_s0; i < tgc_s1; i++) {\n", ind, ind);
            char in2[32];
            snprintf(in2, sizeof in2, "%s        ", ind);
            cg_rx_outputs(r, false, in2);
            sb_printf(sb, "%s    }\n%s}\n", ind, ind);
        }
    }
    if (cond) sb_puts(sb, "        }\n");
    sb_puts(sb, "    }\n");
    r->fixed = NULL;
    r->seg_set = r->rt_local = false;
    return true;
}

static void render_map(rc *r, const cg_bind *binds)
{
    const kernel *k = r->k;
    cg_rx_map_accs(r);
    /* A map that indexes some operand by i % C (a bias broadcast along rows
     * of C) runs as rows x columns: the column is then a plain counter, so
     * the loads are contiguous and the loop vectorises (a 64-bit modulo per
     * element does not). */
    int64_t C = cg_render_c_modulus(k);
    if (C) {
        if (k->n >= PAR_MIN) sb_puts(r->sb, "    #pragma omp parallel for schedule(static)\n");
        sb_printf(r->sb, "    for (int64_t mo = 0; mo < INT64_C(%lld); mo++) {\n", (long long)(k->n / C));
        sb_puts(r->sb, "        #pragma omp simd\n");
        sb_printf(r->sb, "        for (int64_t mc = 0; mc < INT64_C(%lld); mc++) {\n", (long long)C);
        sb_printf(r->sb, "            const int64_t i = mo * INT64_C(%lld) + mc;\n", (long long)C);
        r->mod_c = C;
        cg_rx_outputs(r, false, "            ");
        r->mod_c = 0;
        sb_puts(r->sb, "        }\n    }\n");
        return;
    }
    if (render_map_split(r, binds)) return;
    if (k->n >= PAR_MIN) sb_puts(r->sb, "    #pragma omp parallel for simd schedule(static)\n");
    if (k->map_lo) { /* a run-time range */
        sb_puts(r->sb, "    for (int64_t i = ");
        cg_rx_expr(r, k->map_lo);
        sb_puts(r->sb, "; i < ");
        cg_rx_expr(r, k->map_hi);
        sb_puts(r->sb, "; i++) {\n");
    } else
        sb_printf(r->sb, "    for (int64_t i = 0; i < INT64_C(%lld); i++) {\n", (long long)k->n);
    cg_rx_outputs(r, false, "        ");
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
        cg_rx_expr(r, k->row_limit);
        sb_puts(r->sb, ";\n");
    } else {
        sb_printf(r->sb, "        const int64_t lim = INT64_C(%lld);\n", (long long)k->cols);
    }
    for (int j = 0; j < k->nacc; j++) {
        bool mx = k->red[j] == KRED_MAX;
        sb_printf(r->sb, "        %s acc%d = %s;\n", acct, j, mx ? "-INFINITY" : "0");
        sb_printf(r->sb, "        #pragma omp simd reduction(%s:acc%d)\n", mx ? "max" : "+", j);
        sb_puts(r->sb, "        for (int64_t c = 0; c < lim; c++) ");
        if (mx) { sb_printf(r->sb, "acc%d = tgc_max%s(acc%d, ", j, r->fs, j); cg_rx_expr(r, k->acc[j]); sb_puts(r->sb, ");\n"); }
        else { sb_printf(r->sb, "acc%d += ", j); cg_rx_expr(r, k->acc[j]); sb_puts(r->sb, ";\n"); }
    }
    bool any_elem = false;
    for (int o = 0; o < k->nout; o++) any_elem |= !k->out[o].per_row;
    if (any_elem) {
        sb_puts(r->sb, "        #pragma omp simd\n        for (int64_t c = 0; c < lim; c++) {\n");
        cg_rx_outputs(r, false, "            ");
        sb_puts(r->sb, "        }\n");
        if (k->row_limit) {
            sb_printf(r->sb, "        for (int64_t c = lim; c < INT64_C(%lld); c++) {\n", (long long)k->cols);
            for (int o = 0; o < k->nout; o++)
                if (!k->out[o].per_row) {
                    sb_printf(r->sb, "            a%d[", k->out[o].arg);
                    cg_rx_expr(r, k->out[o].idx);
                    sb_puts(r->sb, "] = 0;\n");
                }
            sb_puts(r->sb, "        }\n");
        }
    }
    cg_rx_outputs(r, true, "        ");
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
        cg_rx_expr(r, o->idx);
        sb_puts(r->sb, "] += ");
    } else {
        sb_puts(r->sb, "acc[c - cb] += ");
    }
    cg_rx_expr(r, o->val);
    sb_puts(r->sb, ";\n        }\n");
    if (!scatter) {
        sb_printf(r->sb, "        for (int64_t c = cb; c < ce; c++) a%d[", o->arg);
        cg_rx_expr(r, o->idx);
        sb_printf(r->sb, "] = %s(acc[c - cb]);\n", cg_rx_store_fn(&k->args[o->arg]));
    }
    sb_puts(r->sb, "    }\n");
}

/* Kernels whose bodies are the same text (the layers of a model: the same
 * sizes, the same argument order) are compiled once: a later one becomes a
 * call of the first. Their dropout keys, which differ by layer, are the
 * arguments of a shared body function (cg_rx.key_args). Compile time then
 * grows with the distinct kernels, not with the layers. */
typedef struct {
    uint64_t hash;
    char *body;
    const char *name; /* the kernel, or the body function, first rendered with it */
    char *owned;      /* name, when the table allocated it */
} body_seen;

typedef struct {
    body_seen *v;
    int n, cap;
} body_table;

static const char *body_find(const body_table *t, uint64_t h, const char *body)
{
    for (int i = 0; i < t->n; i++)
        if (t->v[i].hash == h && strcmp(t->v[i].body, body) == 0) return t->v[i].name;
    return NULL;
}

static void body_add(body_table *t, uint64_t h, char *body, const char *name, char *owned)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->v = xrealloc(t->v, (size_t)t->cap * sizeof *t->v);
    }
    t->v[t->n++] = (body_seen){h, body, name, owned};
}

static void body_table_free(body_table *t)
{
    for (int i = 0; i < t->n; i++) {
        free(t->v[i].owned);
        free(t->v[i].body);
    }
    free(t->v);
}

static void render_kernel(strbuf *sb, const kernel *k, const cg_bind *binds, body_table *seen)
{
    rc r;
    strbuf body;
    sb_init(&body);
    cg_rx_init(&r, &body, k, CG_LANG_C);
    r.key_args = true;
    params(&r, binds);
    switch (k->kind) {
    case KK_MAP: render_map(&r, binds); break;
    case KK_ROW: render_row(&r); break;
    case KK_COL: render_col(&r, false); break;
    case KK_SCATTER_ADD: render_col(&r, true); break;
    case KK_ATTN: cg_attn_render_c(&r); break;
    }
    sb_puts(&body, ""); /* never NULL */
    int nk = r.nkeys;
    uint64_t h = hash_u64((uint64_t)nk, hash_bytes(body.s, body.len, 0));
    const char *first = body_find(seen, h, body.s);
    sb_printf(sb, "\n/* %s */\n", k->comment);
    if (!first && nk == 0) {
        sb_printf(sb, "void %s(void *const *io, const tgc_rt *rt)\n{\n    (void)rt;\n", k->name);
        sb_puts(sb, body.s);
        sb_puts(sb, "}\n");
        body_add(seen, h, body.s, k->name, NULL);
        return;
    }
    if (!first) {
        char *bname = xmalloc(strlen(k->name) + 8);
        sprintf(bname, "%s_body", k->name);
        sb_printf(sb, "static void %s(void *const *io, const tgc_rt *rt", bname);
        for (int j = 0; j < nk; j++) sb_printf(sb, ", uint64_t tgc_key%d", j);
        sb_puts(sb, ")\n{\n    (void)rt;\n");
        sb_puts(sb, body.s);
        sb_puts(sb, "}\n");
        body_add(seen, h, body.s, bname, bname);
        first = bname;
    } else {
        sb_free(&body);
    }
    /* The kernel: a call of the shared body with its own keys. */
    sb_printf(sb, "void %s(void *const *io, const tgc_rt *rt) { %s(io, rt", k->name, first);
    for (int j = 0; j < nk; j++) sb_printf(sb, ", UINT64_C(%llu)", (unsigned long long)r.keys[j]);
    sb_puts(sb, "); }\n");
}

char *cg_render_c(const cg_program *p)
{
    strbuf sb;
    sb_init(&sb);
    sb_puts(&sb, "/* Generated by tgc: the kernels of one plan. */\n"
                 "#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n"
                 "#ifdef _OPENMP\n#include <omp.h>\n#endif\n\n"
                 "/* Compare-selects instead of libm's fmax / fmaxf, which gcc calls out of line: they keep the\n"
                 " * loops of max reductions and clamped exps from vectorising. tgc_max: a NaN operand x gives x\n"
                 " * (a NaN in a row still reaches the row's exp-sum); tgc_clamp_lo: a NaN stays NaN. */\n"
                 "static inline float tgc_maxf(float acc, float x) { return x <= acc ? acc : x; }\n"
                 "static inline double tgc_max(double acc, double x) { return x <= acc ? acc : x; }\n"
                 "static inline float tgc_clamp_lof(float x, float lo) { return x < lo ? lo : x; }\n"
                 "static inline double tgc_clamp_lo(double x, double lo) { return x < lo ? lo : x; }\n\n");
    cg_rx_rt_struct(&sb);

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
    /* Mixed precision: 16-bit storage, converted by loads and stores. */
    sb_puts(&sb, "static inline uint32_t tgc_f2u(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }\n"
                 "static inline float tgc_u2f(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }\n");
    cg_rx_half_prelude(&sb, "static inline");
    sb_puts(&sb, tgc_philox_src);
    body_table seen = {0};
    for (int i = 0; i < p->nkernels; i++) render_kernel(&sb, p->kernels[i], p->binds[i], &seen);
    body_table_free(&seen);
    return sb.s;
}
