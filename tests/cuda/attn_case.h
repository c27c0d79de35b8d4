/* The small training graph the CUDA attention tests build around one
 * attention op (test_nvrtc_attn.c compiles its kernels with NVRTC,
 * test_attn_emulate.c runs them under a host emulation): q, k, v (and an
 * optional padding mask), the attention, and the loss sum(y * w), whose
 * random weights give every output element its own gradient. A precision
 * other than f32 is the graph's 16-bit storage (--bf16 / --fp16). */
#ifndef TGC_TEST_ATTN_CASE_H
#define TGC_TEST_ATTN_CASE_H
#include <stdbool.h>
#include <string.h>

#include "ir/ir.h"
#include "support/util.h"

typedef struct attn_case {
    const char *name, *dt;
    int b, n, g, s_q, s_k, d;
    const char *attrs;
    bool mask;
    ir_dtype precision; /* IR_F32, or IR_BF16 / IR_F16 storage */
    int pos;            /* rt.pos of a pos_offset case */
    /* NULL: q, k, v and the output [b, heads, s, d]; "sbnd": q, k, v and the
     * output [s, b, heads, d] (layout=sbnd out=sbnd); "packed": q, k, v one
     * [s, b, n, 3d] parameter (layout=packed out=sbnd; g = n, s_q = s_k). */
    const char *layout;
} attn_case;

/* The case's IR text (malloc'd). */
static inline char *attn_case_ir(const attn_case *c)
{
    strbuf sb;
    sb_init(&sb);
    sb_printf(&sb, "tgc-ir 1\nmodel \"%s\"\n", c->name);
    if (c->precision != IR_F32) sb_printf(&sb, "precision %s\n", ir_dtype_name(c->precision));
    if (c->mask) sb_printf(&sb, "%%m = input : u8[%d, %d]\n", c->b, c->s_k);
    const char *m = c->mask ? ", %m" : "";
    int o[4] = {c->b, c->n, c->s_q, c->d}; /* the output's dims */
    if (!c->layout) {
        sb_printf(&sb, "%%q = param init=normal std=1.0 : %s[%d, %d, %d, %d]\n", c->dt, c->b, c->n, c->s_q, c->d);
        sb_printf(&sb, "%%k = param init=normal std=1.0 : %s[%d, %d, %d, %d]\n", c->dt, c->b, c->g, c->s_k, c->d);
        sb_printf(&sb, "%%v = param init=normal std=1.0 : %s[%d, %d, %d, %d]\n", c->dt, c->b, c->g, c->s_k, c->d);
        sb_printf(&sb, "%%y = attention(%%q, %%k, %%v%s) %s : ", m, c->attrs);
    } else {
        o[0] = c->s_q, o[1] = c->b, o[2] = c->n;
        if (strcmp(c->layout, "packed") == 0) {
            sb_printf(&sb, "%%qkv = param init=normal std=1.0 : %s[%d, %d, %d, %d]\n", c->dt, c->s_q, c->b, c->n,
                      3 * c->d);
            sb_printf(&sb, "%%y = attention(%%qkv, %%qkv, %%qkv%s) %s layout=packed out=sbnd : ", m, c->attrs);
        } else {
            sb_printf(&sb, "%%q = param init=normal std=1.0 : %s[%d, %d, %d, %d]\n", c->dt, c->s_q, c->b, c->n, c->d);
            sb_printf(&sb, "%%k = param init=normal std=1.0 : %s[%d, %d, %d, %d]\n", c->dt, c->s_k, c->b, c->g, c->d);
            sb_printf(&sb, "%%v = param init=normal std=1.0 : %s[%d, %d, %d, %d]\n", c->dt, c->s_k, c->b, c->g, c->d);
            sb_printf(&sb, "%%y = attention(%%q, %%k, %%v%s) %s layout=sbnd out=sbnd : ", m, c->attrs);
        }
    }
    sb_printf(&sb, "%s[%d, %d, %d, %d]\n", c->dt, o[0], o[1], o[2], o[3]);
    sb_printf(&sb, "%%w = param init=normal std=1.0 : %s[%d, %d, %d, %d]\n", c->dt, o[0], o[1], o[2], o[3]);
    sb_printf(&sb, "%%yw = mul(%%y, %%w) : %s[%d, %d, %d, %d]\n", c->dt, o[0], o[1], o[2], o[3]);
    sb_printf(&sb, "%%loss = sum(%%yw) : %s[] loss\n", c->dt);
    return sb.s;
}

#endif
