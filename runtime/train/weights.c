/* A run's weights as safetensors files (runtime/train/weights.h). */
#include "runtime/train/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec.h"
#include "runtime/io/safetensors.h"
#include "runtime/train/train.h"
#include "support/util.h"

/* The tensor rt_export_tensors writes for parameter p: p, or its gradient. */
static const ir_node *exported(const ir_graph *g, const ir_node *p, bool grads)
{
    if (!grads) return p;
    char name[1024];
    snprintf(name, sizeof name, "grad.%s", p->name);
    return ir_graph_find(g, name);
}

bool rt_export_tensors(const rt_ckpt_ranks *R, const char *path, bool grads, diag *d)
{
    const ir_graph *g = R->ex[0]->g;
    bool root = rt_ckpt_is_root(R), ok = true;
    tgc_st_tensor *ts = xcalloc((size_t)g->nnodes + 1, sizeof *ts);
    ir_shape *shapes = xcalloc((size_t)g->nnodes + 1, sizeof *shapes);
    char **bufs = xcalloc((size_t)g->nnodes + 1, sizeof *bufs);
    int n = 0;
    for (int i = 0; ok && i < g->nnodes; i++) {
        const ir_node *p = g->nodes[i], *v;
        if (!(p->flags & IR_NF_PARAM) || !(v = exported(g, p, grads))) continue;
        if (!root) {
            ok = rt_ckpt_gather(R, p, grads ? RT_CKPT_GRAD : RT_CKPT_VALUE, NULL);
            continue;
        }
        ir_shape whole = rt_param_whole_shape(p, R->t);
        shapes[n] = rt_param_logical_shape(p, R->t);
        size_t bytes = (size_t)(ir_shape_numel(&whole) * ir_dtype_size(v->dtype));
        if (!(bufs[n] = malloc(bytes ? bytes : 1))) {
            diag_error_plain(d, "%s: out of memory for parameter '%s' (%zu bytes)", path, p->name, bytes);
            ok = false;
            break;
        }
        ok = rt_ckpt_gather(R, p, grads ? RT_CKPT_GRAD : RT_CKPT_VALUE, bufs[n]);
        ts[n] = (tgc_st_tensor){v->name, TGC_ST_F32, shapes[n].rank, shapes[n].dim, bufs[n]};
        rt_st_dtype_of(v->dtype, &ts[n].dtype);
        n++;
    }
    tgc_st_kv meta[] = {{"model", g->model}, {"producer", "tgc"}};
    if (ok && root) ok = tgc_st_write(path, ts, n, meta, 2, d);
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    free(shapes);
    free(ts);
    return ok;
}

bool rt_export_params(const rt_exec *e, const char *path, diag *d)
{
    rt_exec *ex[1] = {(rt_exec *)e};
    return rt_export_tensors(&(rt_ckpt_ranks){ex, 1, 1, 1, NULL, 0}, path, false, d);
}

bool rt_export_grads(const rt_exec *e, const char *path, diag *d)
{
    rt_exec *ex[1] = {(rt_exec *)e};
    return rt_export_tensors(&(rt_ckpt_ranks){ex, 1, 1, 1, NULL, 0}, path, true, d);
}

/* Loads every parameter by name and whole shape; a rank takes its part. */
bool rt_import_params(rt_exec *e, const char *path, diag *d)
{
    tgc_st_file *f = tgc_st_open(path, d);
    if (!f) return false;
    bool ok = true;
    int t = (int)e->rt.tp_size, r = (int)e->rt.tp_rank;
    for (int i = 0; i < e->g->nnodes; i++) {
        const ir_node *p = e->g->nodes[i];
        if (!(p->flags & IR_NF_PARAM) || (p->stage >= 0 && p->stage != e->pp_stage)) continue;
        tgc_st_dtype dt = TGC_ST_F32;
        rt_st_dtype_of(p->dtype, &dt);
        ir_shape s = rt_param_logical_shape(p, t), whole = rt_param_whole_shape(p, t);
        const void *src = tgc_st_expect(f, p->name, dt, s.rank, s.dim, d);
        if (!src) { ok = false; continue; }
        /* Padding rows (past the vocabulary) start at zero. */
        size_t esz = (size_t)ir_dtype_size(p->dtype), have = (size_t)ir_shape_numel(&s) * esz;
        size_t part_bytes = (size_t)(ir_shape_numel(&p->shape) * ir_dtype_size(p->dtype));
        char *buf = calloc((size_t)ir_shape_numel(&whole) + 1, esz), *part = malloc(part_bytes + 1);
        if (!buf || !part) {
            diag_error_plain(d, "%s: out of memory for parameter '%s' (%zu bytes)", path, p->name,
                             (size_t)ir_shape_numel(&whole) * esz);
            free(buf);
            free(part);
            ok = false;
            break;
        }
        memcpy(buf, src, have);
        rt_shard_copy(p, t, r, buf, part, false);
        if (!rt_exec_set(e, NULL, p, part)) {
            diag_error_plain(d, "%s: %s", path, rt_exec_error(e));
            ok = false;
        }
        free(part);
        free(buf);
    }
    tgc_st_close(f);
    if (ok && !rt_exec_sync_master(e)) {
        diag_error_plain(d, "%s: %s", path, rt_exec_error(e));
        ok = false;
    }
    return ok;
}

