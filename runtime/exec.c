#include "exec.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/backend/blas.h"
#include "runtime/backend/cudnn.h"
#include "runtime/backend/graph.h"
#include "runtime/backend/half.h"
#include "runtime/philox.h"
#include "support/env.h"
#include "support/util.h"

/* A zeroed buffer of the backend's, NULL after reporting what could not be
 * allocated and what the plan needs in all (the caller frees what it had
 * and fails). */
static unsigned char *alloc_zero(rt_exec *e, int64_t bytes, const char *what, int64_t need, diag *d)
{
    size_t n = (size_t)((bytes + 63) & ~(int64_t)63);
    e->alloc_bytes += (int64_t)n; /* an empty buffer (still 64 bytes, so a valid pointer) counts none */
    unsigned char *p = e->be->alloc(e, n ? n : 64);
    if (!p) {
        diag_error_plain(d, "%s: out of memory allocating %zu bytes for %s (the plan needs %lld bytes per rank in all)",
                         e->be->name, n, what, (long long)need);
        return NULL;
    }
    return p;
}

void *rt_exec_ptr(const rt_exec *e, const ir_node *n)
{
    TGC_ASSERT(n->mem > IR_MEM_NONE && n->mem < IR_MEM_COUNT);
    return e->buf[n->mem] + n->mem_offset;
}

const ir_node *rt_view_base(const ir_graph *g, const ir_node *n)
{
    while ((n->op == IR_OP_RESHAPE || n->op == IR_OP_RESULT) && cg_op_is_view(g, n)) n = n->src[0];
    return n;
}

void *rt_exec_ptr_in(const rt_exec *e, const rt_bindings *b, const ir_node *n)
{
    if (!b) return rt_exec_ptr(e, n);
    if (b->pin) {
        const ir_node *v = rt_view_base(e->g, n);
        if (b->pin[v->id]) return b->pin[v->id] + (n->mem_offset - v->mem_offset); /* a result lies inside */
    }
    TGC_ASSERT(n->mem > IR_MEM_NONE && n->mem < IR_MEM_COUNT);
    return (b->base[n->mem] ? b->base[n->mem] : e->buf[n->mem]) + n->mem_offset;
}

static void *resolve_in(const rt_exec *e, const rt_bindings *bs, cg_bind b)
{
    switch (b.kind) {
    case CG_BIND_NODE: return rt_exec_ptr_in(e, bs, e->g->nodes[b.node]) + b.offset; /* offset: a result of it */
    case CG_BIND_WS: return e->ws + b.offset;
    case CG_BIND_STATE:
        /* A shard's state starts at the shard (the kernels index it from there). */
        return e->state + (int64_t)b.node * e->state_stride + (e->shard_elems ? 0 : b.offset);
    }
    return NULL;
}

static void *resolve(const rt_exec *e, cg_bind b) { return resolve_in(e, e->cur, b); }

/* Every kernel argument's and instruction's pointer under bs. */
static void resolve_all(const rt_exec *e, const rt_bindings *bs, void **io, void **gemm_ptr, void **comm_ptr)
{
    const cg_program *p = e->prog;
    for (int k = 0; k < p->nkernels; k++)
        for (int a = 0; a < p->kernels[k]->nargs; a++) io[k * KMAX_ARGS + a] = resolve_in(e, bs, p->binds[k][a]);
    for (int i = 0; i < p->ninstrs; i++) {
        const cg_instr *in = &p->instrs[i];
        if (in->kind == CG_COMM) {
            comm_ptr[2 * i] = resolve_in(e, bs, in->comm.src);
            comm_ptr[2 * i + 1] = resolve_in(e, bs, in->comm.dst);
        }
        if (in->kind != CG_GEMM) continue;
        const cg_gemm *gm = &in->gemm;
        void **gp = gemm_ptr + (size_t)i * RT_GEMM_PTRS;
        gp[0] = resolve_in(e, bs, gm->a);
        gp[1] = resolve_in(e, bs, gm->b);
        gp[2] = resolve_in(e, bs, gm->c);
        /* cuBLASLt's epilogues read or write a bias and the GELU's input. */
        bool aux = gm->epilogue == CG_EPI_GELU_AUX_BIAS || gm->epilogue == CG_EPI_DGELU_BGRAD;
        gp[3] = gm->epilogue != CG_EPI_NONE ? resolve_in(e, bs, gm->bias) : NULL;
        gp[4] = aux ? resolve_in(e, bs, gm->aux) : NULL;
    }
}

void rt_exec_bind(rt_exec *e, rt_bindings *b)
{
    const cg_program *p = e->prog;
    b->io = xcalloc((size_t)p->nkernels * KMAX_ARGS + 1, sizeof *b->io);
    b->gemm_ptr = xcalloc((size_t)p->ninstrs * RT_GEMM_PTRS + 1, sizeof *b->gemm_ptr);
    b->comm_ptr = xcalloc((size_t)p->ninstrs * 2 + 1, sizeof *b->comm_ptr);
    resolve_all(e, b, b->io, b->gemm_ptr, b->comm_ptr);
}

void rt_exec_bindings_free(rt_bindings *b)
{
    free(b->io);
    free(b->gemm_ptr);
    free(b->comm_ptr);
    b->io = b->gemm_ptr = b->comm_ptr = NULL;
}

void rt_exec_use(rt_exec *e, const rt_bindings *b)
{
    e->cur = b;
    e->io = b ? b->io : e->own_io;
    e->gemm_ptr = b ? b->gemm_ptr : e->own_gemm_ptr;
    e->comm_ptr = b ? b->comm_ptr : e->own_comm_ptr;
}

static void bind_all(rt_exec *e)
{
    cg_program *p = e->prog;
    e->io = e->own_io = xcalloc((size_t)p->nkernels * KMAX_ARGS + 1, sizeof *e->io);
    e->gemm_ptr = e->own_gemm_ptr = xcalloc((size_t)p->ninstrs * RT_GEMM_PTRS + 1, sizeof *e->gemm_ptr);
    e->comm_ptr = e->own_comm_ptr = xcalloc((size_t)p->ninstrs * 2 + 1, sizeof *e->comm_ptr);
    resolve_all(e, NULL, e->io, e->gemm_ptr, e->comm_ptr);
}

rt_exec *rt_exec_new(const ir_graph *g, const rt_cc_options *cc, diag *d)
{
    rt_exec_options o = {.backend = RT_BACKEND_CPU, .cc = *cc};
    return rt_exec_new_on(g, &o, d);
}

/* --memory-limit: a plan that needs more than the limit is refused before
 * anything is compiled or allocated, with its need broken down. */
static bool over_limit(const rt_exec *e, const rt_exec_options *o, int64_t need, diag *d)
{
    const ir_graph *g = e->g;
    if (o->memory_limit <= 0 || need <= o->memory_limit) return false;
    diag_error_plain(d, "the plan needs %lld bytes per rank (parameters %lld, gradients %lld, activations %lld, "
                     "inputs %lld, optimizer state %lld, workspace %lld%s%s), more than --memory-limit %lld bytes "
                     "(%.3f GiB)", (long long)need, (long long)g->mem_size[IR_MEM_PARAM],
                     (long long)g->mem_size[IR_MEM_GRAD], (long long)g->mem_size[IR_MEM_ACT],
                     (long long)g->mem_size[IR_MEM_INPUT], (long long)e->state_bytes,
                     (long long)e->prog->workspace_bytes,
                     e->be->extra_bytes ? ", " : "", e->be->extra_bytes ? e->be->extra_what : "", (long long)o->memory_limit,
                     (double)o->memory_limit / 1073741824.0);
    return true;
}

static const char *const mem_what[IR_MEM_COUNT] = {
    [IR_MEM_INPUT] = "the inputs", [IR_MEM_PARAM] = "the parameters", [IR_MEM_GRAD] = "the gradients",
    [IR_MEM_ACT] = "the activation arena", [IR_MEM_STASH] = "the stashed activations",
    [IR_MEM_CACHE] = "the KV caches"};

void rt_set_omp_threads(int n)
{
    /* OMP_NUM_THREADS, when the user set it, is an upper bound. */
    const char *env = getenv("OMP_NUM_THREADS");
    int cap = env ? atoi(env) : 0;
    if (cap > 0 && n > cap) n = cap;
    char why[512];
    if (!rt_blas_load(why, sizeof why)) return; /* no OpenMP either: rt_exec_new_on reports it */
    void (*fn)(int);
    *(void **)&fn = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    if (fn) fn(rt_blas_is_pthreads() ? 1 : n);
}

/* The optimizer state's layout, and the buffer sizes: under the
 * distributed optimizer (a sharded update) each of the d data-parallel
 * ranks keeps the state of its shard of S elements of the flat parameter
 * buffer, and the parameter and gradient buffers hold d*S elements, so the
 * reduce-scatter and all-gather work on whole shards. */
static void shard_sizes(rt_exec *e, const rt_exec_options *o, int64_t sizes[IR_MEM_COUNT])
{
    const ir_graph *g = e->g;
    for (int m = 0; m < IR_MEM_COUNT; m++) sizes[m] = g->mem_size[m];
    /* The state is fp32 (masters and moments) element for element beside
     * the parameters, which mixed precision stores in 16 bits. */
    int64_t n = ir_param_elems(g), esz = ir_state_elem_size(g), psz = n ? g->mem_size[IR_MEM_PARAM] / n : esz;
    e->state_stride = n * esz;
    e->rt.shard_lo = 0;
    e->rt.shard_hi = INT64_MAX;
    int d = o->dp_size > 1 ? o->dp_size : 1;
    if (e->prog->sharded_state && d > 1) {
        int64_t q = psz == 2 ? 32 : 16, S = ((n + d - 1) / d + q - 1) / q * q; /* 64-byte shards */
        e->shard_elems = S;
        e->state_stride = S * esz;
        e->rt.shard_lo = (int64_t)o->dp_rank * S;
        e->rt.shard_hi = e->rt.shard_lo + S < n ? e->rt.shard_lo + S : n;
        if (sizes[IR_MEM_PARAM] < d * S * psz) sizes[IR_MEM_PARAM] = d * S * psz;
        if (sizes[IR_MEM_GRAD] < d * S * psz) sizes[IR_MEM_GRAD] = d * S * psz;
    }
    e->state_bytes = e->prog->state_slots * e->state_stride;
}


static const rt_backend_ops *const backend_ops[] = {[RT_BACKEND_CPU] = &rt_backend_cpu,
                                                    [RT_BACKEND_SIM] = &rt_backend_sim,
                                                    [RT_BACKEND_CUDA] = &rt_backend_cuda};

const rt_backend_ops *rt_backend_ops_of(rt_backend b) { return backend_ops[b]; }

const char *rt_backend_name(rt_backend b) { return backend_ops[b]->name; }

rt_exec *rt_exec_new_on(const ir_graph *g, const rt_exec_options *o, diag *d)
{
    const rt_backend_ops *be = rt_backend_ops_of(o->backend);
    if (o->graphs && !be->graphs) {
        diag_error_plain(d, "--cuda-graphs on: the %s backend has no graphs (--backend cuda; sim models them)", be->name);
        return NULL;
    }
    if (be->target == CG_TARGET_CPU) {
        char why[512];
        if (!rt_blas_load(why, sizeof why)) {
            diag_error_plain(d, "%s", why);
            return NULL;
        }
        if (rt_blas_is_pthreads()) rt_set_omp_threads(1);
    }
    cg_program *p = cg_build_target(g, be->target, d);
    if (!p) return NULL;
    rt_exec *e = xcalloc(1, sizeof *e);
    e->g = g;
    e->prog = p;
    e->be = be;
    /* --attention-backend cudnn: refused here, before any device work,
     * where cuDNN cannot run an attention op (runtime/backend/cudnn.h). */
    if (!rt_dnn_plan_check(g, p, be->name, be->target == CG_TARGET_CUDA, d)) {
        rt_exec_free(e);
        return NULL;
    }
    int64_t sizes[IR_MEM_COUNT];
    shard_sizes(e, o, sizes);
    int64_t need = rt_exec_bytes(e);
    if (over_limit(e, o, need + be->extra_bytes, d)) {
        rt_exec_free(e);
        return NULL;
    }
    e->source = be->target == CG_TARGET_CUDA ? cg_render_cuda(p) : cg_render_c(p);
    e->opened = be->open(e, o, d);
    if (!e->opened) { rt_exec_free(e); return NULL; }
    bool ok = true;
    for (int m = IR_MEM_INPUT; ok && m < IR_MEM_COUNT; m++) {
        if (o->borrow[m]) {
            e->buf[m] = o->borrow[m];
            e->borrowed |= 1u << m;
        } else ok = (e->buf[m] = alloc_zero(e, sizes[m], mem_what[m], need, d)) != NULL;
    }
    ok = ok && (e->ws = alloc_zero(e, p->workspace_bytes, "the workspace", need, d)) != NULL;
    ok = ok && (e->state = alloc_zero(e, e->state_bytes, "the optimizer state", need, d)) != NULL;
    /* The run-time scalars' device copy (backends with graphs; the cuda
     * kernels read them there), beside the plan's buffers. */
    if (ok && be->graphs && !(e->rt_dev = be->alloc(e, sizeof e->rt))) {
        diag_error_plain(d, "%s: allocating the run-time scalars: %s", be->name, e->err);
        ok = false;
    }
    if (!ok) { rt_exec_free(e); return NULL; }
    if (o->graphs) e->graphs = rt_graphs_new();
    e->rt.tp_size = 1;
    e->rt.loss_scale_float = 1.0f;
    e->rt.loss_scale_double = 1.0;
    bind_all(e);
    e->err[0] = 0;
    return e;
}

static void check_free(struct rt_check *c);

void rt_exec_free(rt_exec *e)
{
    if (!e) return;
    if (e->be) {
        if (e->opened) e->be->sync(e); /* nothing may still be writing */
        for (int m = 0; m < IR_MEM_COUNT; m++)
            if (!(e->borrowed & (1u << m)) && e->buf[m]) e->be->release(e, e->buf[m]);
        if (e->ws) e->be->release(e, e->ws);
        if (e->state) e->be->release(e, e->state);
        if (e->rt_dev) e->be->release(e, e->rt_dev);
        if (e->graphs && env_int("TGC_DEBUG") >= 1)
            fprintf(stderr, "tgc: %s graphs: %d runs captured, %lld captures, %lld replays\n", e->be->name,
                    rt_graphs_ready(e->graphs), (long long)e->graphs->captured, (long long)e->graphs->replayed);
        if (e->opened || e->dev || e->so) e->be->close(e);
    }
    free(e->own_io);
    free(e->own_gemm_ptr);
    free(e->own_comm_ptr);
    free(e->instr_ns);
    check_free(e->check);
    free(e->fault);
    free(e->half_host);
    free(e->source);
    cg_program_free(e->prog);
    free(e);
}

int64_t rt_exec_allocated(const rt_exec *e) { return e->alloc_bytes + e->be->extra_bytes; }

int64_t rt_exec_bytes(const rt_exec *e)
{
    int64_t total = e->prog->workspace_bytes + e->state_bytes;
    for (int m = IR_MEM_INPUT; m < IR_MEM_COUNT; m++) total += e->g->mem_size[m];
    return total;
}

/* Fills the local part of a parameter with the values of the whole
 * tensor's elements: a split along dim d is, per outer row, one contiguous
 * block of the global row at this rank's offset. */
static void init_normal(const rt_exec *e, const ir_node *n, void *p, uint64_t seed, double std)
{
    int d = n->shard.dim;
    int64_t count = ir_shape_numel(&n->shape), block = count, outer = 1, t = e->rt.tp_size, r = e->rt.tp_rank;
    if (d < 0) t = 1, r = 0;
    else {
        for (int k = 0; k < d; k++) outer *= n->shape.dim[k];
        block = count / outer;
    }
    uint64_t key = tgc_name_key(n->name);
    for (int64_t o = 0; o < outer; o++) {
        int64_t start = o * block * t + r * block;
        if (n->dtype == IR_F64) rng_normal_fill_f64((double *)p + o * block, start, block, seed, key, 0.0, std);
        else rng_normal_fill((float *)p + o * block, start, block, seed, key, 0.0f, (float)std);
    }
}

bool rt_exec_sync_master(rt_exec *e)
{
    if (e->prog->master_slot < 0) return true;
    /* The model's parameters are stored in 16 bits from the start; the
     * master weights are their fp32 values. */
    ir_dtype t = e->g->precision;
    int64_t n = e->g->mem_size[IR_MEM_PARAM] / 2;
    uint16_t *h = xmalloc((size_t)n * 2 + 4);
    float *p = xmalloc((size_t)n * 4 + 4);
    bool ok = rt_exec_read(e, e->buf[IR_MEM_PARAM], h, (size_t)n * 2);
    if (ok) rt_widen16(t, h, p, n);
    /* The distributed optimizer's master weights are those of the shard. */
    int64_t lo = e->shard_elems ? e->rt.shard_lo : 0, hi = e->shard_elems ? e->rt.shard_hi : n;
    if (ok && hi > lo)
        ok = rt_exec_write(e, rt_exec_state_ptr(e, e->prog->master_slot, 0), p + lo, (size_t)(hi - lo) * 4);
    free(h);
    free(p);
    return ok;
}

bool rt_exec_init_params(rt_exec *e, uint64_t seed)
{
    bool ok = true;
    void *host = NULL;
    size_t cap = 0;
    for (int i = 0; ok && i < e->g->nnodes; i++) {
        const ir_node *n = e->g->nodes[i];
        if (!(n->flags & IR_NF_PARAM) || (n->stage >= 0 && n->stage != e->pp_stage)) continue;
        int64_t count = ir_shape_numel(&n->shape);
        size_t bytes = (size_t)(count * ir_dtype_size(n->dtype));
        if (bytes > cap) host = xrealloc(host, cap = bytes);
        const char *init = ir_attr_sym(n, "init");
        double v = strcmp(init, "ones") == 0 ? 1.0 : 0.0, std = ir_attr_float(n, "std");
        if (strcmp(init, "normal") == 0) init_normal(e, n, host, seed, std);
        else if (n->dtype == IR_F64) for (int64_t j = 0; j < count; j++) ((double *)host)[j] = v;
        else for (int64_t j = 0; j < count; j++) ((float *)host)[j] = (float)v;
        ok = rt_exec_set(e, NULL, n, host);
    }
    free(host);
    ok = ok && rt_exec_zero(e, e->state, (size_t)e->state_bytes);
    e->rt.seed = (int64_t)seed;
    return ok && rt_exec_sync_master(e);
}

tgc_comm_dtype rt_comm_dtype(ir_dtype t)
{
    return t == IR_F64 ? TGC_COMM_F64 : t == IR_BF16 ? TGC_COMM_BF16 : t == IR_F16 ? TGC_COMM_F16 : TGC_COMM_F32;
}

void rt_widen16(ir_dtype t, const uint16_t *x, float *y, int64_t n)
{
    if (t == IR_BF16) rt_bf16_to_f32(x, y, n);
    else rt_f16_to_f32(x, y, n);
}

void rt_narrow16(ir_dtype t, const float *x, uint16_t *y, int64_t n)
{
    if (t == IR_BF16) rt_f32_to_bf16(x, y, n);
    else rt_f32_to_f16(x, y, n);
}

int rt_exec_run_comm(rt_exec *e, const cg_comm *m, int i)
{
    return rt_exec_run_comm_on(e, m, i, e->comm_ptr[2 * i], e->comm_ptr[2 * i + 1]);
}

int rt_exec_run_comm_on(rt_exec *e, const cg_comm *m, int i, void *src, void *dst)
{
    static const tgc_comm_group group[CG_GROUP_COUNT] = {[CG_GROUP_TP] = TGC_COMM_TP, [CG_GROUP_DP] = TGC_COMM_DP,
                                                         [CG_GROUP_PP] = TGC_COMM_PP};
    tgc_comm_dtype dt = rt_comm_dtype(m->dtype);
    tgc_comm_group g = group[m->group];
    switch (m->kind) {
    case CG_ALL_REDUCE:
        return tgc_comm_all_reduce(e->comm, g, dst, (size_t)m->count, dt, m->max ? TGC_COMM_MAX : TGC_COMM_SUM);
    case CG_ALL_GATHER: return tgc_comm_all_gather(e->comm, g, src, dst, (size_t)m->count, dt);
    case CG_REDUCE_SCATTER: return tgc_comm_reduce_scatter(e->comm, g, src, dst, (size_t)m->count, dt, TGC_COMM_SUM);
    case CG_SEND:
    case CG_RECV:
        /* A stage boundary is the pipeline runtime's (runtime/train/pipe.c). */
        snprintf(e->err, sizeof e->err, "instruction %d: a pipeline transfer outside a pipeline run", i);
        return RT_EXEC_ERR_DEVICE;
    }
    return -1;
}

void rt_exec_set_rank(rt_exec *e, tgc_comm *comm, int tp_rank, int tp_size)
{
    e->comm = comm;
    e->rt.tp_rank = tp_rank;
    e->rt.tp_size = tp_size;
}

int rt_exec_run(rt_exec *e, const int *idx, int n) { return e->be->run(e, idx, n); }

void rt_exec_profile_begin(rt_exec *e)
{
    free(e->instr_ns);
    e->instr_ns = xcalloc((size_t)e->prog->ninstrs + 1, sizeof *e->instr_ns);
    if (e->be->profile_begin && !e->be->profile_begin(e)) {
        /* A profile is a diagnostic: the run goes on without it. */
        fprintf(stderr, "tgc: warning: no per-op profile: %s\n", e->err);
        e->err[0] = 0;
        free(e->instr_ns);
        e->instr_ns = NULL;
    }
}

const char *rt_exec_error(const rt_exec *e) { return e->err; }

void *rt_exec_stream(const rt_exec *e) { return e->be->stream(e); }

int rt_exec_device(const rt_exec *e) { return e->be->device(e); }

const char *rt_exec_device_desc(const rt_exec *e) { return e->be->describe(e); }

const char *rt_exec_backend_name(const rt_exec *e) { return e->be->name; }

/* ---- moving values ------------------------------------------------------------- */

bool rt_exec_read(rt_exec *e, const void *dev, void *host, size_t bytes)
{
    return bytes == 0 || e->be->download(e, host, dev, bytes);
}

bool rt_exec_write(rt_exec *e, void *dev, const void *host, size_t bytes)
{
    return bytes == 0 || e->be->upload(e, dev, host, bytes);
}

static size_t node_bytes(const ir_node *n) { return (size_t)(ir_shape_numel(&n->shape) * ir_dtype_size(n->dtype)); }

/* The host scratch a 16-bit value of count elements passes through. */
static uint16_t *half_scratch(rt_exec *e, int64_t count)
{
    size_t need = (size_t)count * 2;
    if (need > e->half_cap) {
        free(e->half_host);
        e->half_host = xmalloc(need);
        e->half_cap = need;
    }
    return e->half_host;
}

bool rt_exec_get(rt_exec *e, const rt_bindings *b, const ir_node *n, void *host)
{
    ir_dtype t = ir_storage_dtype(e->g, n);
    if (t == n->dtype) return rt_exec_read(e, rt_exec_ptr_in(e, b, n), host, node_bytes(n));
    int64_t count = ir_shape_numel(&n->shape);
    uint16_t *h = half_scratch(e, count);
    if (!rt_exec_read(e, rt_exec_ptr_in(e, b, n), h, (size_t)count * 2)) return false;
    rt_widen16(t, h, host, count);
    return true;
}

bool rt_exec_set(rt_exec *e, const rt_bindings *b, const ir_node *n, const void *host)
{
    ir_dtype t = ir_storage_dtype(e->g, n);
    if (t == n->dtype) return rt_exec_write(e, rt_exec_ptr_in(e, b, n), host, node_bytes(n));
    int64_t count = ir_shape_numel(&n->shape);
    uint16_t *h = half_scratch(e, count);
    rt_narrow16(t, host, h, count);
    return rt_exec_write(e, rt_exec_ptr_in(e, b, n), h, (size_t)count * 2);
}

double rt_exec_scalar(rt_exec *e, const rt_bindings *b, const ir_node *n)
{
    if (!n) return NAN;
    if (n->dtype == IR_F64) {
        double v;
        return rt_exec_read(e, rt_exec_ptr_in(e, b, n), &v, sizeof v) ? v : NAN;
    }
    float v;
    return rt_exec_read(e, rt_exec_ptr_in(e, b, n), &v, sizeof v) ? (double)v : NAN;
}

bool rt_exec_copy(rt_exec *e, void *dst, const void *src, size_t bytes)
{
    return bytes == 0 || e->be->copy(e, dst, src, bytes);
}

bool rt_exec_reduce(rt_exec *e, void *dst, const void *src, int64_t n, ir_dtype t, rt_reduce_op op)
{
    return n <= 0 || e->be->reduce(e, dst, src, n, t, op);
}

bool rt_exec_scale(rt_exec *e, void *x, int64_t n, double s, ir_dtype t)
{
    return n <= 0 || e->be->scale(e, x, n, s, t);
}

bool rt_exec_zero(rt_exec *e, void *dst, size_t bytes) { return bytes == 0 || e->be->zero(e, dst, bytes); }

void *rt_exec_alloc(rt_exec *e, int64_t bytes, const char *what, diag *d)
{
    void *p = e->be->alloc(e, (size_t)(bytes > 0 ? bytes : 1));
    if (!p) diag_error_plain(d, "%s: %s for %s", e->be->name, e->err, what);
    return p;
}

void rt_exec_release(rt_exec *e, void *p)
{
    if (p) e->be->release(e, p);
}

bool rt_exec_sync(rt_exec *e) { return e->be->sync(e); }

void *rt_exec_state_ptr(const rt_exec *e, int k, int64_t off) { return e->state + (int64_t)k * e->state_stride + off; }

/* The bytes an instruction must move at least (the profile's GB/s divides
 * them by its time): each buffer it reads or writes once (STREAM's counting; a kernel argument read and written in
 * place counts once), and the FLOPs that run at a GEMM's rate: a GEMM's
 * 2 m n k per batch entry, a fused attention kernel's op FLOPs (counted at
 * the first of its node's attention kernels: seen[] marks the nodes). */
static void instr_cost(const rt_exec *e, int i, bool *seen, double *bytes, double *flops)
{
    const cg_instr *in = &e->prog->instrs[i];
    *bytes = *flops = 0.0;
    if (in->kind == CG_GEMM) {
        const cg_gemm *gm = &in->gemm;
        double es = ir_dtype_size(gm->dtype), b = (double)gm->batch;
        *flops = 2.0 * (double)gm->m * (double)gm->n * (double)gm->k * b;
        *bytes = es * b * ((double)gm->m * (double)gm->k + (double)gm->k * (double)gm->n + (double)gm->m * (double)gm->n);
    } else if (in->kind == CG_COMM) {
        *bytes = (double)in->comm.count * ir_dtype_size(in->comm.dtype);
    } else {
        const kernel *k = e->prog->kernels[in->kernel];
        const cg_bind *bd = e->prog->binds[in->kernel];
        for (int a = 0; a < k->nargs; a++) {
            bool dup = false;
            for (int b = 0; b < a && !dup; b++)
                dup = bd[b].kind == bd[a].kind && bd[b].node == bd[a].node && bd[b].offset == bd[a].offset;
            if (!dup) *bytes += (double)k->args[a].numel * ir_dtype_size(k->args[a].dtype);
        }
        if (k->kind == KK_ATTN && !seen[in->node]) {
            seen[in->node] = true;
            *flops = (double)ir_node_flops(e->g->nodes[in->node]);
        }
    }
}

void rt_exec_profile_print(const rt_exec *e, int64_t steps, FILE *out)
{
    if (!e->instr_ns || steps <= 0) return;
    /* Per op kind; the last two rows are the GEMMs and the collectives. */
    enum { GEMM_ROW = IR_OP_COUNT, COMM_ROW = IR_OP_COUNT + 1, ROWS = IR_OP_COUNT + 2 };
    double ns[ROWS] = {0}, mb[ROWS] = {0}, gf[ROWS] = {0}, total = 0, total_mb = 0, total_gf = 0;
    int count[ROWS] = {0};
    bool *seen = xcalloc((size_t)e->g->nnodes + 1, sizeof *seen);
    for (int i = 0; i < e->prog->ninstrs; i++) {
        const cg_instr *in = &e->prog->instrs[i];
        int op = in->kind == CG_GEMM ? GEMM_ROW : in->kind == CG_COMM ? COMM_ROW : (int)e->g->nodes[in->node]->op;
        double bytes, flops;
        instr_cost(e, i, seen, &bytes, &flops);
        ns[op] += e->instr_ns[i];
        mb[op] += bytes / 1e6;
        gf[op] += flops / 1e9;
        count[op]++;
        total += e->instr_ns[i];
        total_mb += bytes / 1e6;
        total_gf += flops / 1e9;
    }
    free(seen);
    /* MB/step and GFLOP/step: what one pass over the plan's instructions
     * (a step, but for a pipeline's micro-batches) must move and compute,
     * whatever the time; bench/train_bench.py turns them into the step's
     * bound. */
    fprintf(out, "%-22s %9s %11s %7s %11s %11s %9s\n", "op", "launches", "ms/step", "share", "MB/step", "GFLOP/step",
            "GB/s");
    for (;;) {
        int best = -1;
        for (int op = 0; op < ROWS; op++)
            if (count[op] && (best < 0 || ns[op] > ns[best])) best = op;
        if (best < 0) break;
        /* MB per pass x passes over nanoseconds: GB/s. */
        fprintf(out, "%-22s %9d %11.3f %6.1f%% %11.3f %11.4f %9.1f\n",
                best == GEMM_ROW ? "(gemm)" : best == COMM_ROW ? "(comm)" : ir_op_name((ir_op)best), count[best],
                ns[best] / 1e6 / (double)steps, 100.0 * ns[best] / total, mb[best], gf[best],
                ns[best] > 0 ? mb[best] * 1e6 * (double)steps / ns[best] : 0.0);
        count[best] = 0;
    }
    fprintf(out, "%-22s %9s %11.3f %7s %11.3f %11.4f %9.1f\n", "total", "", total / 1e6 / (double)steps, "", total_mb,
            total_gf, total > 0 ? total_mb * 1e6 * (double)steps / total : 0.0);
}

/* ---- --check-numerics --------------------------------------------------------- */

/* A region an instruction writes: batch blocks `stride` elements apart,
 * each of `rows` rows of `cols` elements `ld` apart. */
typedef struct check_region {
    int instr;
    cg_bind bind;
    ir_dtype t; /* f32, f64, or a 16-bit storage */
    int64_t batch, stride, rows, cols, ld;
} check_region;

struct rt_check {
    check_region *r;
    int n, cap;
    int *first;          /* per instruction, its first region; first[ninstrs] = n */
    int upto;            /* instructions checked: [0, upto) */
    unsigned char *host; /* GPU: the scratch the regions are copied into (the largest one) */
    int64_t host_bytes;
};

static void check_free(struct rt_check *c)
{
    if (!c) return;
    free(c->r);
    free(c->first);
    free(c->host);
    free(c);
}

static void check_add(struct rt_check *c, int instr, cg_bind b, ir_dtype t, int64_t batch, int64_t stride,
                      int64_t rows, int64_t cols, int64_t ld)
{
    if (!ir_dtype_is_float(t) || batch <= 0 || rows <= 0 || cols <= 0) return; /* integers cannot overflow to inf */
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->r = xrealloc(c->r, (size_t)c->cap * sizeof *c->r);
    }
    c->r[c->n++] = (check_region){instr, b, t, batch, stride, rows, cols, ld};
    int64_t span = ((batch - 1) * stride + (rows - 1) * ld + cols) * ir_dtype_size(t);
    if (span > c->host_bytes) c->host_bytes = span;
}

/* The elements of a collective's destination. */
static int64_t comm_dst_count(const rt_exec *e, const cg_comm *m)
{
    if (m->dst.kind == CG_BIND_NODE) return ir_shape_numel(&e->g->nodes[m->dst.node]->shape);
    return m->kind == CG_ALL_GATHER ? m->count * e->rt.tp_size : m->count;
}

static void check_instr_regions(const rt_exec *e, struct rt_check *c, int i)
{
    const cg_instr *in = &e->prog->instrs[i];
    if (in->kind == CG_KERNEL) {
        const kernel *k = e->prog->kernels[in->kernel];
        for (int a = 0; a < k->nargs; a++)
            if (k->args[a].output)
                check_add(c, i, e->prog->binds[in->kernel][a], k->args[a].dtype, 1, 0, 1, k->args[a].numel, 0);
    } else if (in->kind == CG_GEMM) {
        const cg_gemm *gm = &in->gemm;
        check_add(c, i, gm->c, gm->dtype, gm->batch, gm->stride_c, gm->m, gm->n, gm->ldc);
        /* cuBLASLt epilogues write the pre-activation or a bias gradient too. */
        if (gm->epilogue == CG_EPI_GELU_AUX_BIAS) check_add(c, i, gm->aux, gm->dtype, 1, 0, gm->m, gm->n, gm->ldaux);
        if (gm->epilogue == CG_EPI_DGELU_BGRAD) check_add(c, i, gm->bias, gm->dtype, 1, 0, 1, gm->n, 0);
        if (gm->epilogue == CG_EPI_BGRADB) check_add(c, i, gm->bias, gm->dtype, 1, 0, 1, gm->m, 0);
    } else {
        check_add(c, i, in->comm.dst, in->comm.dtype, 1, 0, 1, comm_dst_count(e, &in->comm), 0);
    }
}

void rt_exec_check_numerics(rt_exec *e, bool forward_only)
{
    check_free(e->check);
    struct rt_check *c = xcalloc(1, sizeof *c);
    const cg_program *p = e->prog;
    const ir_node *loss = ir_graph_loss(e->g);
    c->first = xcalloc((size_t)p->ninstrs + 1, sizeof *c->first);
    c->upto = forward_only && loss ? 0 : p->ninstrs;
    for (int i = 0; i < p->ninstrs; i++) {
        c->first[i] = c->n;
        check_instr_regions(e, c, i);
        /* The forward ends with the instruction that computes the loss:
         * autodiff appends the backward after it. */
        if (forward_only && loss && p->instrs[i].node <= loss->id) c->upto = i + 1;
    }
    c->first[p->ninstrs] = c->n;
    c->host = xmalloc((size_t)c->host_bytes + 8);
    if (!e->fault) e->fault = xcalloc(1, sizeof *e->fault);
    e->check = c;
}

const rt_nonfinite *rt_exec_nonfinite(const rt_exec *e) { return e->fault; }

/* The first non-finite of n values, or -1. Blocks are scanned with an OR of
 * !isfinite (a compare per element the compiler vectorises, no call); only
 * a block that has one is searched for its index. */
#define SCAN_BLOCK 1024
#define DEFINE_SCAN(NAME, T)                                                   \
    static int64_t NAME(const T *p, int64_t n)                                 \
    {                                                                          \
        for (int64_t at = 0; at < n; at += SCAN_BLOCK) {                       \
            int64_t end = n - at < SCAN_BLOCK ? n : at + SCAN_BLOCK;           \
            int bad = 0;                                                       \
            for (int64_t j = at; j < end; j++) bad |= !isfinite(p[j]);         \
            if (!bad) continue;                                                \
            for (int64_t j = at; j < end; j++)                                 \
                if (!isfinite(p[j])) return j;                                 \
        }                                                                      \
        return -1;                                                             \
    }
DEFINE_SCAN(scan_f32, float)
DEFINE_SCAN(scan_f64, double)

/* The same over 16-bit values of dtype t (mixed precision). */
static int64_t scan_half(ir_dtype t, const uint16_t *p, int64_t n)
{
    uint16_t mask = t == IR_BF16 ? 0x7f80u : 0x7c00u;
    for (int64_t at = 0; at < n; at += SCAN_BLOCK) {
        int64_t end = n - at < SCAN_BLOCK ? n : at + SCAN_BLOCK;
        int bad = 0;
        for (int64_t j = at; j < end; j++) bad |= (p[j] & mask) == mask;
        if (!bad) continue;
        for (int64_t j = at; j < end; j++)
            if ((p[j] & mask) == mask) return j;
    }
    return -1;
}

/* The first non-finite of a region at base (host memory): its offset in
 * elements from base, or -1. */
static int64_t scan_region(const check_region *r, const unsigned char *base, double *value)
{
    for (int64_t b = 0; b < r->batch; b++)
        for (int64_t row = 0; row < r->rows; row++) {
            int64_t off = b * r->stride + row * r->ld, j;
            if (r->t == IR_F64) {
                const double *p = (const double *)base + off;
                if ((j = scan_f64(p, r->cols)) >= 0) { *value = p[j]; return off + j; }
            } else if (r->t == IR_BF16 || r->t == IR_F16) {
                const uint16_t *p = (const uint16_t *)base + off;
                if ((j = scan_half(r->t, p, r->cols)) >= 0) {
                    float f;
                    rt_widen16(r->t, &p[j], &f, 1);
                    *value = f;
                    return off + j;
                }
            } else {
                const float *p = (const float *)base + off;
                if ((j = scan_f32(p, r->cols)) >= 0) { *value = p[j]; return off + j; }
            }
        }
    return -1;
}

static void set_fault(rt_exec *e, const check_region *r, int64_t index, double value)
{
    rt_nonfinite *f = e->fault;
    const cg_instr *in = &e->prog->instrs[r->instr];
    f->instr = r->instr;
    f->node = e->g->nodes[r->bind.kind == CG_BIND_NODE ? r->bind.node : in->node];
    f->where = r->bind.kind == CG_BIND_STATE ? "optimizer state" : r->bind.kind == CG_BIND_WS ? "workspace" : "";
    f->index = index;
    f->value = value;
    const ir_node *loss = ir_graph_loss(e->g);
    f->forward = loss && in->node <= loss->id;
}

int rt_exec_check_instr(rt_exec *e, int i)
{
    struct rt_check *c = e->check;
    if (i >= c->upto) return 0;
    for (int k = c->first[i]; k < c->first[i + 1]; k++) {
        const check_region *r = &c->r[k];
        /* What it wrote, once the device finished it, on the host. */
        int64_t span = ((r->batch - 1) * r->stride + (r->rows - 1) * r->ld + r->cols) * ir_dtype_size(r->t);
        if (!rt_exec_read(e, resolve(e, r->bind), c->host, (size_t)span)) return RT_EXEC_ERR_DEVICE;
        const unsigned char *base = c->host;
        double v = 0.0;
        int64_t at = scan_region(r, base, &v);
        if (at >= 0) {
            set_fault(e, r, at, v);
            return RT_EXEC_ERR_NUMERICS;
        }
    }
    return 0;
}

void rt_exec_instr_name(const rt_exec *e, int i, char *buf, size_t cap)
{
    const cg_instr *in = &e->prog->instrs[i];
    static const char *const comm[] = {[CG_ALL_REDUCE] = "all_reduce", [CG_ALL_GATHER] = "all_gather",
                                       [CG_REDUCE_SCATTER] = "reduce_scatter", [CG_SEND] = "pp_send",
                                       [CG_RECV] = "pp_recv"};
    if (in->kind == CG_KERNEL) snprintf(buf, cap, "kernel %s", e->prog->kernels[in->kernel]->name);
    else if (in->kind == CG_GEMM) snprintf(buf, cap, "GEMM");
    else snprintf(buf, cap, "collective %s", comm[in->comm.kind]);
}
