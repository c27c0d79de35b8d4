/* One training step's graph of a sample, and the inputs of a plausible
 * batch: shared by the tests that run generated CUDA kernels against their
 * C twins (kernel_check.c on a GPU, test_map_emulate.c without one). */
#ifndef TGC_TESTS_CUDA_STEP_CASE_H
#define TGC_TESTS_CUDA_STEP_CASE_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "passes/pass.h"
#include "runtime/exec.h"
#include "support/file.h"

typedef struct config {
    const char *sample;
    const char *sets[8][2];
    ir_dtype precision;
} config;

static ir_graph *build(const char *dir, const config *c)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.tg", dir, c->sample);
    size_t len;
    char why[256];
    char *text = file_read(path, FILE_MODEL, &len, why, sizeof why);
    if (!text) { fprintf(stderr, "cannot read %s\n", path); return NULL; }
    fe_override sets[8];
    int n = 0;
    for (; n < 8 && c->sets[n][0]; n++) sets[n] = (fe_override){c->sets[n][0], c->sets[n][1], false};
    diag d;
    diag_init(&d, stderr);
    ir_graph *g = fe_compile(path, text, len, sets, n, &d);
    free(text);
    pass_options po;
    pass_options_defaults(&po);
    po.precision = c->precision;
    const pass_info *list[64];
    int np = pass_count();
    for (int i = 0; i < np; i++) list[i] = pass_at(i);
    pass_ctx ctx = {.d = &d, .verify_each = true, .opts = &po};
    if (g && !pass_run_list(g, list, np, &ctx, NULL, NULL)) { ir_graph_free(g); g = NULL; }
    diag_free(&d);
    return g;
}

/* Inputs of a plausible batch: tokens below 64 (every sample's vocabulary
 * is at least that), token types 0/1, every fifth label ignored (-100),
 * the last quarter of each padding mask row 0. */
static void fill_inputs(rt_exec *e)
{
    const ir_graph *g = e->g;
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = g->nodes[i];
        if (n->op != IR_OP_INPUT) continue;
        int64_t numel = ir_shape_numel(&n->shape), last = n->shape.dim[n->shape.rank - 1];
        void *p = rt_exec_ptr(e, n);
        for (int64_t k = 0; k < numel; k++) {
            if (n->dtype == IR_I32) {
                int32_t v = (int32_t)((k * 131 + 7) % 64);
                if (strstr(n->name, "type")) v = (int32_t)(k % 2);
                if (strstr(n->name, "label") && k % 5 == 0) v = -100;
                ((int32_t *)p)[k] = v;
            } else if (n->dtype == IR_U8) {
                ((uint8_t *)p)[k] = (uint8_t)(k % last < last * 3 / 4);
            } else if (n->dtype == IR_F32) {
                ((float *)p)[k] = (float)((k % 17) - 8) / 8.0f;
            }
        }
    }
}

/* Element i of a buffer of dtype t, widened to double. */
static double step_elem(ir_dtype t, const unsigned char *p, int64_t i)
{
    switch (t) {
    case IR_F32: return ((const float *)p)[i];
    case IR_F64: return ((const double *)p)[i];
    case IR_I32: return ((const int32_t *)p)[i];
    case IR_I64: return (double)((const int64_t *)p)[i];
    case IR_U8: return p[i];
    case IR_BF16:
    case IR_F16: {
        float f;
        rt_widen16(t, (const uint16_t *)p + i, &f, 1);
        return f;
    }
    default: return 0;
    }
}

/* The run-time scalars of a plausible step: the fourth, learning rate
 * 1e-3, weight decay 0.1, the loss scale 1024 under fp16. */
static void step_rt(rt_exec *e, ir_dtype precision)
{
    e->rt.step = 3;
    e->rt.opt_step = 3;
    e->rt.lr_float = 1e-3f, e->rt.lr_double = 1e-3;
    e->rt.wd_float = 0.1f, e->rt.wd_double = 0.1;
    if (precision == IR_F16) e->rt.loss_scale_float = 1024.0f, e->rt.loss_scale_double = 1024.0;
}
#endif
