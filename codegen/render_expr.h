/* The expression renderer shared by the C (CPU) and CUDA C (GPU) targets:
 * kernel IR expression trees (kir.h) -> C expression text. The renderers
 * (render_c.c, render_cuda.c) add only the loop scaffolding around it.
 *
 * What differs per target is confined to a few spots:
 *   - how the run-time scalars are read: `rt->lr_float` in C (a pointer
 *     argument), `rt.lr_float` in CUDA (the struct passed by value);
 *   - the names of the loop indices are the same (i, r, c, acc<j>) but a
 *     target's prelude defines INT64_C/UINT64_C and INFINITY (CUDA has no
 *     system headers under NVRTC);
 *   - math calls take the f suffix for float (expf) and none for double,
 *     on both targets (CUDA device code has the same libm names).
 * Everything else, including the exp clamp and the dropout keep factor
 * (the Philox core both preludes carry), is one text for both. */
#ifndef TGC_RENDER_EXPR_H
#define TGC_RENDER_EXPR_H
#include <stdbool.h>

#include "codegen/codegen.h"
#include "support/util.h"

typedef enum cg_lang { CG_LANG_C, CG_LANG_CUDA } cg_lang;

#define CG_RX_MAX_KEYS 8

typedef struct cg_rx {
    strbuf *sb;
    const kernel *k;
    cg_lang lang;
    const char *T;  /* float compute type: "float" or "double" */
    const char *fs; /* math suffix: "f" or "" */
    int64_t mod_c;  /* C, MAP over rows of C: i % C is rendered as `mc` and i / C as `mo` (0: no) */
    /* key_args: dropout keys are rendered as the arguments tgc_key0,
     * tgc_key1, ... of the kernel's body (keys[0..nkeys), in order of first
     * use), so that kernels alike but for their keys share one body
     * (render_c.c); otherwise, and past CG_RX_MAX_KEYS, as constants. */
    bool key_args;
    int nkeys;
    uint64_t keys[CG_RX_MAX_KEYS];
    /* Selects the C renderer resolved while rendering one loop of a MAP
     * (render_c.c, render_map): a select on `fixed` (a loop-invariant
     * condition tested once before the loops) renders as its branch for
     * fixed_val; with seg_set, a comparison i < S renders as 1 or 0 when
     * the loop's range [seg_lo, seg_hi) lies on one side of S (the
     * parameter groups' learning rate and weight decay per segment). */
    const kx *fixed;
    bool fixed_val, seg_set;
    int64_t seg_lo, seg_hi;
    bool rt_local; /* run-time scalars from the local copy tgc_rtv, not through rt */
    /* CUDA, a MAP kernel's vector loop (render_cuda.c): a load of argument
     * a at index i, where vec_arg[a] is set, renders as lane vec_lane of
     * the vector loaded before (tgc_v<a>.v[vec_lane]). NULL: plain loads. */
    const bool *vec_arg;
    int vec_lane;
} cg_rx;

void cg_rx_init(cg_rx *r, strbuf *sb, const kernel *k, cg_lang lang);
/* Appends e as one parenthesised C expression. */
void cg_rx_expr(cg_rx *r, const kx *e);
/* Whether a and b are the same expression (structurally). */
bool cg_kx_equal(const kx *a, const kx *b);
/* Whether e is i < S for a constant S (*s); whether e is loop-invariant
 * in kernel k (no index, no dropout, loads of inputs at invariant indices). */
bool cg_kx_idx_lt(const kx *e, int64_t *s);
bool cg_kx_invariant(const kernel *k, const kx *e);
/* Appends the dropout key `key`: an argument of the body or a constant. */
void cg_rx_key(cg_rx *r, uint64_t key);
/* A float constant of the compute type ("((float)0.5)", "(-INFINITY)"). */
void cg_rx_float(cg_rx *r, double v);

/* The C type of a buffer element. */
const char *cg_rx_ctype(ir_dtype t);
/* 16-bit arguments (mixed precision) hold bit patterns (uint16_t): a
 * store goes through "tgc_st_bf16" / "tgc_st_f16" (rounding to nearest
 * even), a load through "tgc_ld_bf16" / "tgc_ld_f16" (exact); "" for the
 * other dtypes, stored and loaded as they are. */
const char *cg_rx_store_fn(const karg *a);
const char *cg_rx_load_fn(const karg *a);
/* The C type a value bound for argument a is computed in: the compute
 * type for a 16-bit argument, else the argument's own. */
const char *cg_rx_value_type(const cg_rx *r, const karg *a);
/* The 16-bit conversions (tgc_ld_*, tgc_st_*, and the fp32 roundings
 * tgc_bf16 / tgc_f16), each function declared with the qualifiers `fn`
 * ("static inline", or CUDA's TGC_FN); the prelude must define uint16_t,
 * uint32_t and the bit casts tgc_f2u(float) and tgc_u2f(uint32_t). The
 * same text on both targets, so C and CUDA round to the same bits. */
void cg_rx_half_prelude(strbuf *sb, const char *fn);
/* The template tgc_vec<T, N> of the CUDA MAP kernels' 16-byte vectors
 * (render_cuda.c; the host emulation of the kernels, tests/cuda, uses it
 * too). */
void cg_cuda_vec_prelude(strbuf *sb);
/* True when two arguments of a kernel are bound to the same memory: then
 * none of its pointers may be restrict-qualified. */
bool cg_rx_args_alias(const cg_bind *binds, int nargs);

/* The fields of the run-time scalars struct (tgc_rt in generated code,
 * rt_scalars in runtime/exec.h), in declaration order: the CUDA prelude is
 * printed from this table and a unit test checks it against rt_scalars. */
typedef struct cg_rt_field {
    const char *type; /* "int64_t", "float" or "double" */
    const char *name;
} cg_rt_field;
extern const cg_rt_field cg_rt_fields[];
extern const int cg_rt_nfields;
/* Appends `typedef struct tgc_rt { ... } tgc_rt;` (valid C and C++),
 * consecutive fields of one type on one line. */
void cg_rx_rt_struct(strbuf *sb);

/* Scaffolding both targets share: the element (or, per_row, the per-row)
 * outputs of a kernel as statements indented by `ind` (values first, then
 * the stores, so outputs may overwrite inputs they read), and a MAP
 * kernel's loop-invariant accumulators (`const T accJ = ...;`). */
void cg_rx_outputs(cg_rx *r, bool per_row, const char *ind);
void cg_rx_map_accs(cg_rx *r);

#endif
