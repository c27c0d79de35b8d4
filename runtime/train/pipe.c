#include "pipe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "support/util.h"

/* The phase an instruction runs in (pipe.h). */
enum { PH_NONE, PH_BEGIN, PH_FWD, PH_BWD, PH_END, PH_OPT };

typedef struct seg {
    int *ins;
    int n;
} seg;

/* A stage-boundary transfer of a chunk's forward or backward. */
typedef struct xfer {
    int instr;      /* the CG_SEND / CG_RECV instruction */
    const ir_node *node; /* the pp_send's operand / the pp_recv */
    int vpeer;      /* the other virtual stage */
    int tag;        /* the pp_send's node id: both sides know it */
    bool send;
} xfer;

typedef struct xlist {
    xfer *x;
    int n;
} xlist;

/* A value whose per-micro-batch results are summed over the step. */
typedef struct accum {
    const ir_node *node;
    void *acc;      /* the sum (pinned for the end phase), or NULL for a gradient (the gradient buffer) */
    int64_t count;
    ir_dtype dtype;
} accum;

struct rt_pipe {
    rt_exec *e;
    const ir_graph *g;
    const pipe_schedule *s;
    int r, p, v, m, d, dp_rank, M;
    rt_pipe_feed_fn feed;
    void *feed_ctx;
    tgc_comm *comm;       /* the executor's: on device buffers */
    tgc_comm *host;       /* the same ranks on host memory (the loss) */
    void *staging;        /* the host's copy of one input, filled by the feed */
    tgc_topology topo;
    tgc_coords me;

    int *phase;           /* per node (this rank's nodes; PH_NONE otherwise) */
    seg *fwd, *bwd;       /* per chunk: compute instructions */
    seg begin, end, opt;  /* step-level instructions in program order (transfers included) */
    xlist *fxfer, *bxfer; /* per chunk: forward / backward transfers */
    accum **acc;          /* per chunk: what B(c, j) adds into */
    int *nacc;
    const ir_node **inputs; /* per chunk: a NULL-terminated list of input nodes */
    const ir_node *loss, *norm;
    int loss_chunk;

    /* Slots: per chunk, nslot[c] arenas and input buffers. */
    int *nslot;
    unsigned char ***arena, ***inbuf;
    rt_bindings **bind;   /* [chunk][slot] */
    rt_bindings step;     /* the step-level phases */
    void **pin_mb, **pin_step;
    unsigned char *scratch; /* gradients of micro-batches j > 0 */
    int64_t grad_bytes;   /* this stage's gradient region */
    bool grad_f64;
    int64_t extra;        /* bytes allocated here */

    /* Per step. */
    int **slot_of;        /* [chunk][mb] -> slot, -1 */
    int **free_slots, *nfree;
    int *last_use;        /* [chunk*m + mb] -> index of its last list instruction */
    int *bwd_done;        /* per chunk: backwards run this step */
    bool end_done, dp_done;
    double loss_sum, loss_mean, gnorm;
    int64_t cur_step;

    rt_trace *trace;
    int trace_row;
    bool pair;            /* sends paired with the next receive (a communicator whose sends may block) */
    bool dry;             /* rt_pipe_predict: sizes only */
};

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + 1e-3 * (double)ts.tv_nsec;
}

static void seg_push(seg *s, int i)
{
    if ((s->n & (s->n - 1)) == 0) s->ins = xrealloc(s->ins, (size_t)(s->n ? 2 * s->n : 1) * sizeof *s->ins);
    s->ins[s->n++] = i;
}

static void xlist_push(xlist *l, xfer x)
{
    if ((l->n & (l->n - 1)) == 0) l->x = xrealloc(l->x, (size_t)(l->n ? 2 * l->n : 1) * sizeof *l->x);
    l->x[l->n++] = x;
}

static int chunk_of(const ir_node *n) { return n->chunk < 0 ? 0 : n->chunk; }

/* The transfer instruction i does for its pp_send / pp_recv node n. */
static xfer xfer_of(int i, const ir_node *n)
{
    bool send = n->op == IR_OP_PP_SEND;
    int vpeer = (int)(send ? ir_attr_int(n, "to_stage") : ir_attr_int(n, "from_stage"));
    return (xfer){i, send ? n->src[0] : n, vpeer, send ? n->id : n->src[0]->id, send};
}

static bool is_opt(const ir_node *n)
{
    return n->op == IR_OP_ADAMW || n->op == IR_OP_SGD || n->op == IR_OP_GLOBAL_NORM;
}

static bool per_step(const ir_node *n)
{
    return (n->op == IR_OP_PP_SEND || n->op == IR_OP_PP_RECV) && ir_attr_bool(n, "per_step");
}

/* ---- classification ---------------------------------------------------------- */

/* Per node: its phase on this rank. The backward is what the loss's
 * gradient seed reaches, and everything after the loss in program order
 * (recomputation clones run in the backward, where the schedule put them). */
static bool classify(rt_pipe *pp, diag *d)
{
    const ir_graph *g = pp->g;
    int n = g->nnodes;
    bool *bwd = xcalloc((size_t)n + 1, 3), *inv = bwd + n + 1, *end = inv + n + 1;
    const ir_node *loss = ir_graph_loss(g);
    char seed[512] = "";
    if (loss) snprintf(seed, sizeof seed, "grad.%s", loss->name);
    int after = loss ? loss->id : n;
    pp->phase = xcalloc((size_t)n + 1, sizeof *pp->phase);
    bool ok = true;
    for (int i = 0; i < n; i++) {
        const ir_node *u = g->nodes[i];
        bool leaf = ir_op_get(u->op)->flags & IR_OPF_LEAF;
        bwd[i] = (loss && strcmp(u->name, seed) == 0) || i > after;
        inv[i] = leaf && u->op != IR_OP_INPUT;
        for (int k = 0; k < u->nsrc; k++) {
            bwd[i] |= bwd[u->src[k]->id];
            end[i] |= end[u->src[k]->id];
        }
        if (!leaf) {
            inv[i] = u->op != IR_OP_DROPOUT && !(u->op == IR_OP_PP_RECV && !per_step(u));
            for (int k = 0; k < u->nsrc; k++) inv[i] &= inv[u->src[k]->id];
            if (u->op == IR_OP_PP_RECV && per_step(u) && !bwd[i]) inv[i] = true;
        }
        end[i] |= is_opt(u) || (per_step(u) && bwd[i]);
        if (pp->p > 1 && u->stage != pp->r) continue;
        if (u->op == IR_OP_PARAM || u->op == IR_OP_INPUT) continue;
        pp->phase[i] = is_opt(u) ? PH_OPT : end[i] ? PH_END : inv[i] ? PH_BEGIN : bwd[i] ? PH_BWD : PH_FWD;
    }
    /* Nothing per micro-batch may read what the end phase makes. */
    for (int i = 0; ok && i < n; i++) {
        const ir_node *u = g->nodes[i];
        if (pp->phase[i] != PH_FWD && pp->phase[i] != PH_BWD && pp->phase[i] != PH_BEGIN) continue;
        for (int k = 0; ok && k < u->nsrc; k++)
            if (pp->phase[u->src[k]->id] >= PH_END) {
                diag_error(d, u->loc, "pipeline runtime: '%%%s' runs per micro-batch but reads '%%%s', which is made "
                           "once per step after the micro-batches", u->name, u->src[k]->name);
                ok = false;
            }
    }
    free(bwd);
    return ok;
}

/* The instruction lists of each phase and chunk, the transfers, the
 * accumulations and the pins. */
static bool collect(rt_pipe *pp, diag *d)
{
    const ir_graph *g = pp->g;
    int v = pp->v;
    pp->fwd = xcalloc((size_t)v, sizeof *pp->fwd);
    pp->bwd = xcalloc((size_t)v, sizeof *pp->bwd);
    pp->fxfer = xcalloc((size_t)v, sizeof *pp->fxfer);
    pp->bxfer = xcalloc((size_t)v, sizeof *pp->bxfer);
    /* A prediction (rt_pipe_predict) has no program and allocates nothing. */
    const cg_program *prog = pp->e ? pp->e->prog : NULL;
    for (int i = 0; prog && i < prog->ninstrs; i++) {
        const cg_instr *in = &prog->instrs[i];
        const ir_node *n = g->nodes[in->node];
        int ph = pp->phase[n->id], c = chunk_of(n);
        if (ph == PH_NONE) continue;
        if (c >= v) {
            diag_error(d, n->loc, "pipeline runtime: '%%%s' is on chunk %d of %d", n->name, c, v);
            return false;
        }
        bool xf = in->kind == CG_COMM && (in->comm.kind == CG_SEND || in->comm.kind == CG_RECV);
        if (ph == PH_BEGIN) seg_push(&pp->begin, i);
        else if (ph == PH_END) seg_push(&pp->end, i);
        else if (ph == PH_OPT) seg_push(&pp->opt, i);
        else if (!xf) seg_push(ph == PH_FWD ? &pp->fwd[c] : &pp->bwd[c], i);
        else xlist_push(ph == PH_FWD ? &pp->fxfer[c] : &pp->bxfer[c], xfer_of(i, n));
    }
    /* Pins: values made once per step (begin), and the sums the end phase
     * reads in place of per-micro-batch values. */
    size_t nn = (size_t)g->nnodes + 1;
    pp->pin_mb = xcalloc(nn, sizeof *pp->pin_mb);
    pp->pin_step = xcalloc(nn, sizeof *pp->pin_step);
    pp->acc = xcalloc((size_t)v, sizeof *pp->acc);
    pp->nacc = xcalloc((size_t)v, sizeof *pp->nacc);
    bool *summed = xcalloc(nn, 1);
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *u = g->nodes[i];
        if (pp->phase[i] != PH_END) continue;
        for (int k = 0; k < u->nsrc; k++) {
            const ir_node *x = rt_view_base(u->src[k]);
            int ph = pp->phase[x->id];
            if (ph == PH_FWD) {
                diag_error(d, u->loc, "pipeline runtime: '%%%s' reads the forward value '%%%s' once per step",
                           u->name, x->name);
                free(summed);
                return false;
            }
            if (ph == PH_BWD && x->mem != IR_MEM_GRAD && !(u->op == IR_OP_PP_SEND || u->op == IR_OP_ADD)) {
                diag_error(d, u->loc, "pipeline runtime: '%%%s' (%s) reads '%%%s', summed over the micro-batches; "
                           "only an add or a send may", u->name, ir_op_name(u->op), x->name);
                free(summed);
                return false;
            }
            if (ph == PH_BWD && x->mem != IR_MEM_GRAD) summed[x->id] = true;
        }
    }
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *u = g->nodes[i];
        int c = chunk_of(u);
        bool grad = u->mem == IR_MEM_GRAD && pp->phase[i] == PH_BWD;
        if (pp->phase[i] == PH_BEGIN && u->mem > IR_MEM_NONE && rt_view_base(u) == u) {
            int64_t bytes = ir_shape_numel(&u->shape) * ir_dtype_size(u->dtype);
            pp->extra += bytes;
            if (!pp->dry && !(pp->pin_mb[i] = pp->pin_step[i] = rt_exec_alloc(pp->e, bytes + 64, "a value made once per step", d)))
                return false;
        }
        if (!summed[i] && !grad) continue;
        accum a = {u, NULL, ir_shape_numel(&u->shape), u->dtype};
        if (summed[i]) {
            /* The micro-batch's value gets a buffer of its own too: in the
             * arena, memplan may reuse its place after its reader, which
             * runs only at the end of the step here. */
            int64_t bytes = a.count * ir_dtype_size(u->dtype);
            pp->extra += 2 * bytes;
            if (!pp->dry) {
                a.acc = rt_exec_alloc(pp->e, bytes + 64, "a sum over the micro-batches", d);
                pp->pin_mb[i] = rt_exec_alloc(pp->e, bytes + 64, "a micro-batch's value summed over the step", d);
                pp->pin_step[i] = a.acc;
                if (!a.acc || !pp->pin_mb[i]) {
                    rt_exec_release(pp->e, a.acc, bytes + 64);
                    free(summed);
                    return false;
                }
            }
        }
        pp->acc[c] = xrealloc(pp->acc[c], (size_t)(pp->nacc[c] + 1) * sizeof **pp->acc);
        pp->acc[c][pp->nacc[c]++] = a;
    }
    free(summed);
    /* This stage's gradient region (the data-parallel reduction's). */
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *u = g->nodes[i];
        if (u->mem != IR_MEM_GRAD || (pp->p > 1 && u->stage != pp->r)) continue;
        int64_t end = u->mem_offset + ir_shape_numel(&u->shape) * ir_dtype_size(u->dtype);
        if (end > pp->grad_bytes) pp->grad_bytes = end;
        pp->grad_f64 = u->dtype == IR_F64;
    }
    /* Inputs per chunk; the loss and the norm. */
    pp->inputs = xcalloc((size_t)v * ((size_t)g->nnodes + 1), sizeof *pp->inputs);
    int *ni = xcalloc((size_t)v, sizeof *ni);
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *u = g->nodes[i];
        if (!(u->flags & IR_NF_INPUT) || (pp->p > 1 && u->stage != pp->r)) continue;
        int c = chunk_of(u);
        pp->inputs[(size_t)c * ((size_t)g->nnodes + 1) + (size_t)ni[c]++] = u;
    }
    free(ni);
    const ir_node *loss = ir_graph_loss(g);
    if (loss && pp->phase[loss->id] == PH_FWD) {
        pp->loss = loss;
        pp->loss_chunk = chunk_of(loss);
    }
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *u = g->nodes[i];
        if ((u->op == IR_OP_ADAMW || u->op == IR_OP_SGD) && pp->phase[i] == PH_OPT) pp->norm = u->src[u->nsrc - 1];
    }
    if (!pp->norm) {
        diag_error_plain(d, "pipeline runtime: pipeline rank %d has no optimizer update", pp->r);
        return false;
    }
    return true;
}

/* What alloc_slots allocates: the scratch gradients, and per slot a stash
 * (the executor's own serves chunk 0's first) and an input buffer. */
static void slot_size(const rt_pipe *pp, int c, int k, size_t *stash, size_t *inputs)
{
    int64_t act = pp->g->mem_size[IR_MEM_STASH], inp = pp->g->mem_size[IR_MEM_INPUT];
    *stash = c == 0 && k == 0 ? 0 : (size_t)((act + 63) & ~(int64_t)63) + 64;
    *inputs = (size_t)((inp + 63) & ~(int64_t)63) + 64;
}

static int64_t slot_bytes(const rt_pipe *pp)
{
    int64_t total = pp->m > 1 && pp->grad_bytes > 0 ? pp->grad_bytes : 0;
    for (int c = 0; c < pp->v; c++)
        for (int k = 0; k < pp->nslot[c]; k++) {
            size_t a, b;
            slot_size(pp, c, k, &a, &b);
            total += (int64_t)(a + b);
        }
    return total;
}

/* ---- slots --------------------------------------------------------------- */

/* The most micro-batches each chunk holds at once under the rank's list:
 * from the first instruction naming (chunk, micro-batch) to the last. */
static void size_slots(rt_pipe *pp)
{
    const pipe_instr *ins = pp->s->ins[pp->r];
    int len = pp->s->len[pp->r], v = pp->v, m = pp->m;
    pp->last_use = xmalloc((size_t)v * (size_t)m * sizeof *pp->last_use);
    int *first = xmalloc((size_t)v * (size_t)m * sizeof *first);
    for (int k = 0; k < v * m; k++) pp->last_use[k] = first[k] = -1;
    for (int i = 0; i < len; i++) {
        if (ins[i].mb < 0) continue;
        int k = ins[i].chunk * m + ins[i].mb;
        /* A receive paired with the send before it (rt_pipe_step) takes
         * its slot while the send's micro-batch still holds one. */
        bool paired = pp->pair && i > 0 && (ins[i].op == PIPE_RECV_FWD || ins[i].op == PIPE_RECV_BWD) &&
                      (ins[i - 1].op == PIPE_SEND_FWD || ins[i - 1].op == PIPE_SEND_BWD);
        if (first[k] < 0) first[k] = paired ? i - 1 : i;
        pp->last_use[k] = i;
    }
    pp->nslot = xcalloc((size_t)v, sizeof *pp->nslot);
    for (int c = 0; c < v; c++) {
        int live = 0;
        for (int i = 0; i < len; i++) {
            for (int j = 0; j < m; j++) live += first[c * m + j] == i;
            if (live > pp->nslot[c]) pp->nslot[c] = live;
            for (int j = 0; j < m; j++) live -= pp->last_use[c * m + j] == i;
        }
        if (pp->nslot[c] < 1) pp->nslot[c] = 1;
    }
    free(first);
}

static bool alloc_slots(rt_pipe *pp, diag *d)
{
    rt_exec *e = pp->e;
    int v = pp->v;
    pp->arena = xcalloc((size_t)v, sizeof *pp->arena);
    pp->inbuf = xcalloc((size_t)v, sizeof *pp->inbuf);
    pp->bind = xcalloc((size_t)v, sizeof *pp->bind);
    pp->slot_of = xcalloc((size_t)v, sizeof *pp->slot_of);
    pp->free_slots = xcalloc((size_t)v, sizeof *pp->free_slots);
    pp->nfree = xcalloc((size_t)v, sizeof *pp->nfree);
    pp->bwd_done = xcalloc((size_t)v, sizeof *pp->bwd_done);
    pp->extra += slot_bytes(pp);
    if (pp->m > 1 && pp->grad_bytes > 0 &&
        !(pp->scratch = rt_exec_alloc(e, (pp->grad_bytes + 63) & ~(int64_t)63, "the micro-batch gradients", d)))
        return false;
    for (int c = 0; c < v; c++) {
        int S = pp->nslot[c];
        pp->arena[c] = xcalloc((size_t)S, sizeof **pp->arena);
        pp->inbuf[c] = xcalloc((size_t)S, sizeof **pp->inbuf);
        pp->bind[c] = xcalloc((size_t)S, sizeof **pp->bind);
        pp->slot_of[c] = xmalloc((size_t)pp->m * sizeof **pp->slot_of);
        pp->free_slots[c] = xmalloc((size_t)S * sizeof **pp->free_slots);
        for (int k = 0; k < S; k++) {
            /* The first micro-batch of chunk 0 uses the executor's own stash. */
            bool own = c == 0 && k == 0;
            size_t a, b;
            slot_size(pp, c, k, &a, &b);
            char what[160];
            snprintf(what, sizeof what, "an in-flight micro-batch's activations and inputs of chunk %d (%d held at once)",
                     c, S);
            if (!own && !(pp->arena[c][k] = rt_exec_alloc(e, (int64_t)a, what, d))) return false;
            if (!(pp->inbuf[c][k] = rt_exec_alloc(e, (int64_t)b, what, d))) return false;
            rt_bindings *bd = &pp->bind[c][k];
            bd->base[IR_MEM_STASH] = pp->arena[c][k];
            bd->base[IR_MEM_INPUT] = pp->inbuf[c][k];
            bd->base[IR_MEM_GRAD] = pp->scratch; /* NULL with one micro-batch: the gradients directly */
            bd->pin = pp->pin_mb;
            rt_exec_bind(e, bd);
        }
    }
    pp->step.pin = pp->pin_step;
    rt_exec_bind(e, &pp->step);
    return true;
}

/* ---- construction ---------------------------------------------------------- */

rt_pipe *rt_pipe_new(rt_exec *e, const rt_pipe_opts *o, diag *d)
{
    if (o->dist_opt != (e->shard_elems > 0) && o->dp_size > 1) {
        diag_error_plain(d, "the plan was compiled %s --use-distributed-optimizer, the run %s it: compile and run "
                         "with the same setting", e->prog->sharded_state ? "with" : "without",
                         o->dist_opt ? "asks for" : "lacks");
        return NULL;
    }
    rt_pipe *pp = xcalloc(1, sizeof *pp);
    pp->e = e;
    pp->g = e->g;
    pp->s = o->sched;
    pp->r = o->pp_rank;
    pp->p = o->sched->p;
    pp->v = o->sched->v;
    pp->m = o->sched->m;
    pp->d = o->dp_size;
    pp->dp_rank = o->dp_rank;
    pp->M = pp->m * pp->d;
    pp->feed = o->feed;
    pp->feed_ctx = o->feed_ctx;
    pp->comm = e->comm;
    pp->host = o->host_comm ? o->host_comm : e->comm;
    int64_t in_max = 1;
    for (int i = 0; i < pp->g->nnodes; i++)
        if (pp->g->nodes[i]->flags & IR_NF_INPUT) {
            const ir_node *u = pp->g->nodes[i];
            int64_t bytes = ir_shape_numel(&u->shape) * ir_dtype_size(u->dtype);
            if (bytes > in_max) in_max = bytes;
        }
    pp->staging = xcalloc((size_t)in_max, 1);
    if (pp->comm) {
        pp->topo = *tgc_comm_topology(pp->comm);
        pp->me = tgc_topology_coords(&pp->topo, tgc_comm_rank(pp->comm));
        /* `local` buffers sends: pairing would only hold one more slot. */
        pp->pair = strcmp(tgc_comm_backend(pp->comm), "local") != 0;
    }
    bool ok = classify(pp, d) && collect(pp, d);
    if (ok) size_slots(pp);
    ok = ok && alloc_slots(pp, d);
    if (!ok) {
        rt_pipe_free(pp);
        return NULL;
    }
    return pp;
}

void rt_pipe_free(rt_pipe *pp)
{
    if (!pp) return;
    const ir_graph *g = pp->g;
    for (int c = 0; c < pp->v && pp->fwd; c++) {
        free(pp->fwd[c].ins);
        free(pp->bwd[c].ins);
        if (pp->fxfer) free(pp->fxfer[c].x);
        if (pp->bxfer) free(pp->bxfer[c].x);
        if (pp->acc) {
            for (int k = 0; k < pp->nacc[c]; k++) rt_exec_release(pp->e, pp->acc[c][k].acc, 0);
            free(pp->acc[c]);
        }
        for (int k = 0; pp->nslot && pp->arena && pp->arena[c] && k < pp->nslot[c]; k++) {
            rt_exec_release(pp->e, pp->arena[c][k], 0);
            rt_exec_release(pp->e, pp->inbuf[c][k], 0);
            rt_exec_bindings_free(&pp->bind[c][k]);
        }
        if (pp->arena) {
            free(pp->arena[c]);
            free(pp->inbuf[c]);
            free(pp->bind[c]);
            free(pp->slot_of[c]);
            free(pp->free_slots[c]);
        }
    }
    for (int i = 0; pp->pin_mb && i < g->nnodes; i++) rt_exec_release(pp->e, pp->pin_mb[i], 0);
    rt_exec_bindings_free(&pp->step);
    free(pp->fwd);
    free(pp->bwd);
    free(pp->fxfer);
    free(pp->bxfer);
    free(pp->acc);
    free(pp->nacc);
    free(pp->begin.ins);
    free(pp->end.ins);
    free(pp->opt.ins);
    free(pp->phase);
    free(pp->pin_mb);
    free(pp->pin_step);
    free(pp->inputs);
    free(pp->nslot);
    free(pp->arena);
    free(pp->inbuf);
    free(pp->bind);
    free(pp->slot_of);
    free(pp->free_slots);
    free(pp->nfree);
    free(pp->last_use);
    free(pp->bwd_done);
    rt_exec_release(pp->e, pp->scratch, pp->grad_bytes);
    free(pp->staging);
    free(pp);
}

/* ---- running --------------------------------------------------------------- */

static int peer_rank(const rt_pipe *pp, int vstage)
{
    tgc_coords c = pp->me;
    c.pp = vstage % pp->p;
    return tgc_topology_rank(&pp->topo, c);
}

static tgc_comm_dtype comm_dtype(const ir_node *n)
{
    return n->dtype == IR_F64 ? TGC_COMM_F64 : n->dtype == IR_F32 ? TGC_COMM_F32 : TGC_COMM_BYTE;
}

static size_t comm_count(const ir_node *n)
{
    size_t c = (size_t)ir_shape_numel(&n->shape);
    return n->dtype == IR_F64 || n->dtype == IR_F32 ? c : c * (size_t)ir_dtype_size(n->dtype);
}

/* One transfer under bindings b, tagged with the pp_send's node id (both
 * sides know it; messages of one tag between two ranks keep their order). */
static int do_xfer(rt_pipe *pp, const rt_bindings *b, const xfer *x)
{
    void *buf = rt_exec_ptr_in(pp->e, b, x->node);
    int peer = peer_rank(pp, x->vpeer);
    if (x->send) return tgc_comm_send(pp->comm, buf, comm_count(x->node), comm_dtype(x->node), peer, x->tag);
    return tgc_comm_recv(pp->comm, buf, comm_count(x->node), comm_dtype(x->node), peer, x->tag);
}

/* A send instruction's transfers together with the next instruction's
 * receives, each send paired with a receive in one sendrecv (Megatron's
 * send_forward_recv_backward and send_backward_recv_forward): a
 * communicator whose sends block until matched (MPI, large messages)
 * cannot deadlock when neighbours send to each other at once. The paired
 * receive takes its micro-batch's slot before the send's is free, so on
 * MPI the last stage holds two; `local` buffers its sends and pairs none. */
static int run_pair(rt_pipe *pp, const rt_bindings *bs, const xlist *ls, int speer, const rt_bindings *br,
                    const xlist *lr, int rpeer)
{
    int ks = 0, kr = 0;
    for (;;) {
        while (ks < ls->n && (ls->x[ks].vpeer != speer || !ls->x[ks].send)) ks++;
        while (kr < lr->n && (lr->x[kr].vpeer != rpeer || lr->x[kr].send)) kr++;
        if (ks >= ls->n && kr >= lr->n) return 0;
        int rc;
        if (ks < ls->n && kr < lr->n && comm_dtype(ls->x[ks].node) == comm_dtype(lr->x[kr].node)) {
            const xfer *a = &ls->x[ks], *b = &lr->x[kr];
            rc = tgc_comm_sendrecv_tags(pp->comm, rt_exec_ptr_in(pp->e, bs, a->node), comm_count(a->node),
                                        peer_rank(pp, a->vpeer), a->tag, rt_exec_ptr_in(pp->e, br, b->node),
                                        comm_count(b->node), peer_rank(pp, b->vpeer), b->tag, comm_dtype(a->node));
            ks++, kr++;
        } else if (ks < ls->n) rc = do_xfer(pp, bs, &ls->x[ks++]);
        else rc = do_xfer(pp, br, &lr->x[kr++]);
        if (rc) return rc;
    }
}

/* The transfers of list l to / from virtual stage vpeer. */
static int run_xfers(rt_pipe *pp, const rt_bindings *b, const xlist *l, int vpeer, bool send)
{
    for (int k = 0; k < l->n; k++) {
        const xfer *x = &l->x[k];
        if (x->vpeer != vpeer || x->send != send) continue;
        int rc = do_xfer(pp, b, x);
        if (rc) return rc;
    }
    return 0;
}

/* A step-level phase in program order: compute runs of instructions, with
 * the transfers (per_step sends and receives) where they fall. */
static int run_step_seg(rt_pipe *pp, const seg *s)
{
    rt_exec *e = pp->e;
    const cg_program *prog = e->prog;
    rt_exec_use(e, &pp->step);
    int start = 0;
    for (int k = 0; k <= s->n; k++) {
        const cg_instr *in = k < s->n ? &prog->instrs[s->ins[k]] : NULL;
        bool xf = in && in->kind == CG_COMM && (in->comm.kind == CG_SEND || in->comm.kind == CG_RECV);
        if (in && !xf) continue;
        int rc = rt_exec_run(e, s->ins + start, k - start);
        if (rc) return rc;
        start = k + 1;
        if (!in) break;
        xfer x = xfer_of(s->ins[k], e->g->nodes[in->node]);
        rc = do_xfer(pp, &pp->step, &x);
        if (rc) return rc;
    }
    return 0;
}

/* dst += src on the device, or (first) dst = src. */
static bool sum_into(rt_exec *e, void *dst, const void *src, int64_t n, ir_dtype t, bool first)
{
    if (first) return rt_exec_copy(e, dst, src, (size_t)(n * ir_dtype_size(t)));
    return rt_exec_reduce(e, dst, src, n, t, RT_REDUCE_SUM);
}

/* After B(c, j): the micro-batch's gradients and summed values join the
 * step's (the first micro-batch of one accumulates in place). */
static int accumulate(rt_pipe *pp, int c, const rt_bindings *b)
{
    bool first = pp->bwd_done[c]++ == 0, ok = true;
    for (int k = 0; ok && k < pp->nacc[c]; k++) {
        const accum *a = &pp->acc[c][k];
        const void *src = rt_exec_ptr_in(pp->e, b, a->node);
        if (a->acc) ok = sum_into(pp->e, a->acc, src, a->count, a->dtype, first);
        else if (pp->scratch) ok = sum_into(pp->e, rt_exec_ptr(pp->e, a->node), src, a->count, a->dtype, first);
    }
    return ok ? 0 : RT_EXEC_ERR_DEVICE;
}

static int slot_get(rt_pipe *pp, int c, int mb)
{
    int *s = &pp->slot_of[c][mb];
    if (*s < 0) {
        TGC_ASSERT(pp->nfree[c] > 0);
        *s = pp->free_slots[c][--pp->nfree[c]];
    }
    return *s;
}

/* The feed fills the host's staging buffer, which goes to the device. */
static int feed_inputs(rt_pipe *pp, int c, const rt_bindings *b, int64_t g)
{
    const ir_node *const *in = pp->inputs + (size_t)c * ((size_t)pp->g->nnodes + 1);
    for (; *in; in++) {
        pp->feed(pp->feed_ctx, *in, pp->staging, pp->cur_step, g);
        if (!rt_exec_set(pp->e, b, *in, pp->staging)) return RT_EXEC_ERR_DEVICE;
    }
    return 0;
}

/* The data-parallel reduction of this stage's gradients, in buckets, and
 * the scaling by 1/M that makes them the mean over the global batch. Under
 * the distributed optimizer a reduce-scatter instead: this rank's shard of
 * the summed gradients, which alone its update reads. */
static int reduce_grads(rt_pipe *pp)
{
    rt_exec *e = pp->e;
    unsigned char *grad = e->buf[IR_MEM_GRAD];
    size_t esz = pp->grad_f64 ? 8 : 4, n = (size_t)pp->grad_bytes / esz, bucket = (40u << 20) / esz, lo = 0;
    tgc_comm_dtype dt = pp->grad_f64 ? TGC_COMM_F64 : TGC_COMM_F32;
    if (e->shard_elems > 0) {
        size_t S = (size_t)e->shard_elems;
        lo = (size_t)e->rt.shard_lo;
        int rc = tgc_comm_reduce_scatter(pp->comm, TGC_COMM_DP, grad, grad + lo * esz, S, dt, TGC_COMM_SUM);
        if (rc) return rc;
        n = lo + S < n ? lo + S : n;
    } else if (pp->d > 1)
        for (size_t off = 0; off < n; off += bucket) {
            size_t k = n - off < bucket ? n - off : bucket;
            int rc = tgc_comm_all_reduce(pp->comm, TGC_COMM_DP, grad + off * esz, k, dt, TGC_COMM_SUM);
            if (rc) return rc;
        }
    if (pp->M > 1 && n > lo &&
        !rt_exec_scale(e, grad + lo * esz, (int64_t)(n - lo), 1.0 / pp->M, pp->grad_f64 ? IR_F64 : IR_F32))
        return RT_EXEC_ERR_DEVICE;
    return 0;
}

/* The distributed optimizer: every replica's updated shard of the
 * parameters, to every replica (buf: the parameters or the gradients). */
static int gather_shards(rt_pipe *pp, ir_mem buf)
{
    rt_exec *e = pp->e;
    size_t esz = pp->grad_f64 ? 8 : 4, S = (size_t)e->shard_elems;
    unsigned char *p = e->buf[buf];
    return tgc_comm_all_gather(pp->comm, TGC_COMM_DP, p + (size_t)e->rt.shard_lo * esz, p, S,
                               pp->grad_f64 ? TGC_COMM_F64 : TGC_COMM_F32);
}

int rt_pipe_gather_grads(rt_pipe *pp) { return pp->e->shard_elems > 0 ? gather_shards(pp, IR_MEM_GRAD) : 0; }


static void instr_name(const rt_pipe *pp, const pipe_instr *in, char *buf, size_t n, const char **cat)
{
    static const char *const cats[PIPE_OP_COUNT] = {
        [PIPE_FWD] = "forward", [PIPE_BWD] = "backward", [PIPE_RECV_FWD] = "recv", [PIPE_SEND_FWD] = "send",
        [PIPE_RECV_BWD] = "recv", [PIPE_SEND_BWD] = "send", [PIPE_SEND_WEIGHT] = "send", [PIPE_RECV_WEIGHT] = "recv",
        [PIPE_SEND_WGRAD] = "send", [PIPE_RECV_WGRAD] = "recv", [PIPE_ALLREDUCE_DP] = "all-reduce",
        [PIPE_OPTIMIZER] = "optimizer"};
    *cat = cats[in->op];
    if (in->op == PIPE_FWD || in->op == PIPE_BWD) snprintf(buf, n, "%c%d.%d", in->op == PIPE_FWD ? 'F' : 'B', in->chunk, in->mb);
    else pipe_instr_str(pp->s, in, buf, n);
}

int rt_pipe_step(rt_pipe *pp, int64_t step, double lr, double wd)
{
    rt_exec *e = pp->e;
    e->rt.step = step * pp->M;
    e->rt.lr_float = (float)lr;
    e->rt.lr_double = lr;
    e->rt.wd_float = (float)wd;
    e->rt.wd_double = wd;
    pp->cur_step = step;
    pp->loss_sum = 0.0;
    pp->end_done = pp->dp_done = false;
    for (int c = 0; c < pp->v; c++) {
        pp->bwd_done[c] = 0;
        pp->nfree[c] = pp->nslot[c];
        for (int k = 0; k < pp->nslot[c]; k++) pp->free_slots[c][k] = pp->nslot[c] - 1 - k;
        for (int j = 0; j < pp->m; j++) pp->slot_of[c][j] = -1;
    }
    int rc = run_step_seg(pp, &pp->begin);
    const pipe_instr *ins = pp->s->ins[pp->r];
    int len = pp->s->len[pp->r];
    for (int i = 0; !rc && i < len; i++) {
        const pipe_instr *in = &ins[i];
        /* A send right before a receive: both at once. */
        const pipe_instr *nx = i + 1 < len ? &ins[i + 1] : NULL;
        bool pair = pp->pair && (in->op == PIPE_SEND_FWD || in->op == PIPE_SEND_BWD) && nx &&
                    (nx->op == PIPE_RECV_FWD || nx->op == PIPE_RECV_BWD);
        long span = -1;
        if (pp->trace) {
            char name[96], second[48];
            const char *cat;
            instr_name(pp, in, name, sizeof name, &cat);
            if (pair) {
                instr_name(pp, nx, second, sizeof second, &cat);
                size_t k = strlen(name);
                snprintf(name + k, sizeof name - k, " + %s", second);
                cat = "send+recv";
            }
            span = rt_trace_begin(pp->trace, pp->trace_row, in->op == PIPE_FWD || in->op == PIPE_BWD ? 0 : 1, name,
                                  cat, now_us());
        }
        int c = in->chunk, mb = in->mb;
        const rt_bindings *b = mb >= 0 ? &pp->bind[c][slot_get(pp, c, mb)] : NULL;
        int64_t g = (int64_t)pp->dp_rank * pp->m + mb;
        switch (pair ? -1 : in->op) {
        case -1: {
            const rt_bindings *b2 = &pp->bind[nx->chunk][slot_get(pp, nx->chunk, nx->mb)];
            rc = run_pair(pp, b, in->op == PIPE_SEND_FWD ? &pp->fxfer[c] : &pp->bxfer[c], in->peer, b2,
                          nx->op == PIPE_RECV_FWD ? &pp->fxfer[nx->chunk] : &pp->bxfer[nx->chunk], nx->peer);
            break;
        }
        case PIPE_RECV_FWD: rc = run_xfers(pp, b, &pp->fxfer[c], in->peer, false); break;
        case PIPE_SEND_FWD: rc = run_xfers(pp, b, &pp->fxfer[c], in->peer, true); break;
        case PIPE_RECV_BWD: rc = run_xfers(pp, b, &pp->bxfer[c], in->peer, false); break;
        case PIPE_SEND_BWD: rc = run_xfers(pp, b, &pp->bxfer[c], in->peer, true); break;
        case PIPE_FWD:
            rc = feed_inputs(pp, c, b, g);
            e->rt.step = step * pp->M + g;
            rt_exec_use(e, b);
            if (!rc) rc = rt_exec_run(e, pp->fwd[c].ins, pp->fwd[c].n);
            if (!rc && pp->loss && c == pp->loss_chunk) pp->loss_sum += rt_exec_scalar(e, b, pp->loss);
            break;
        case PIPE_BWD:
            e->rt.step = step * pp->M + g;
            rt_exec_use(e, b);
            rc = rt_exec_run(e, pp->bwd[c].ins, pp->bwd[c].n);
            if (!rc) rc = accumulate(pp, c, b);
            break;
        case PIPE_SEND_WEIGHT:
        case PIPE_RECV_WEIGHT: break; /* the begin phase sent and received them */
        case PIPE_SEND_WGRAD:
        case PIPE_RECV_WGRAD:
        case PIPE_ALLREDUCE_DP:
        case PIPE_OPTIMIZER:
            if (!pp->end_done) {
                pp->end_done = true;
                rc = run_step_seg(pp, &pp->end);
            }
            if (!rc && !pp->dp_done && (in->op == PIPE_ALLREDUCE_DP || in->op == PIPE_OPTIMIZER)) {
                pp->dp_done = true;
                rc = reduce_grads(pp);
            }
            if (!rc && in->op == PIPE_OPTIMIZER) {
                rc = run_step_seg(pp, &pp->opt);
                if (!rc && e->shard_elems > 0) rc = gather_shards(pp, IR_MEM_PARAM);
                if (!rc) pp->gnorm = rt_exec_scalar(e, &pp->step, pp->norm);
            }
            break;
        default: break;
        }
        if (span >= 0) rt_trace_end(pp->trace, span, now_us());
        /* A micro-batch's slot is free after its last instruction. */
        for (int k = i; k <= i + pair; k++) {
            const pipe_instr *u = &ins[k];
            if (u->mb >= 0 && pp->last_use[u->chunk * pp->m + u->mb] == k) {
                pp->free_slots[u->chunk][pp->nfree[u->chunk]++] = pp->slot_of[u->chunk][u->mb];
                pp->slot_of[u->chunk][u->mb] = -1;
            }
        }
        i += pair;
    }
    rt_exec_use(e, NULL);
    if (rc) return rc;
    /* The mean loss over the step's micro-batches and replicas. */
    pp->loss_mean = NAN;
    if (pp->loss) {
        double l = pp->loss_sum / pp->m;
        if (pp->d > 1) rc = tgc_comm_all_reduce(pp->host, TGC_COMM_DP, &l, 1, TGC_COMM_F64, TGC_COMM_SUM);
        pp->loss_mean = l / pp->d;
    }
    return rc;
}

/* The forward of every micro-batch through the stages, chunk by chunk (a
 * chain: each receive's sender runs before it), dropout off. */
int rt_pipe_eval(rt_pipe *pp, int64_t iters, double *loss)
{
    rt_exec *e = pp->e;
    *loss = NAN;
    e->rt.eval = 1;
    double sum = 0.0;
    int rc = 0;
    for (int64_t k = 0; !rc && k < iters; k++) {
        pp->cur_step = k;
        rc = run_step_seg(pp, &pp->begin);
        for (int j = 0; !rc && j < pp->m; j++)
            for (int c = 0; !rc && c < pp->v; c++) {
                const rt_bindings *b = &pp->bind[c][0];
                const xlist *l = &pp->fxfer[c];
                for (int q = 0; !rc && q < l->n; q++)
                    if (!l->x[q].send) rc = do_xfer(pp, b, &l->x[q]);
                if (rc) break;
                rc = feed_inputs(pp, c, b, (int64_t)pp->dp_rank * pp->m + j);
                rt_exec_use(e, b);
                if (!rc) rc = rt_exec_run(e, pp->fwd[c].ins, pp->fwd[c].n);
                if (!rc && pp->loss && c == pp->loss_chunk) sum += rt_exec_scalar(e, b, pp->loss);
                for (int q = 0; !rc && q < l->n; q++)
                    if (l->x[q].send) rc = do_xfer(pp, b, &l->x[q]);
            }
    }
    rt_exec_use(e, NULL);
    e->rt.eval = 0;
    if (rc || !pp->loss) return rc;
    double l = sum / ((double)iters * pp->m);
    if (pp->d > 1) rc = tgc_comm_all_reduce(pp->host, TGC_COMM_DP, &l, 1, TGC_COMM_F64, TGC_COMM_SUM);
    *loss = l / pp->d;
    return rc;
}

double rt_pipe_loss(const rt_pipe *pp) { return pp->loss_mean; }
bool rt_pipe_has_loss(const rt_pipe *pp) { return pp->loss != NULL; }
double rt_pipe_grad_norm(const rt_pipe *pp) { return pp->gnorm; }
int64_t rt_pipe_bytes(const rt_pipe *pp) { return pp->extra; }

int64_t rt_pipe_predict(const ir_graph *g, const pipe_schedule *s, int pp_rank, bool paired, int *slots, diag *d)
{
    rt_pipe *pp = xcalloc(1, sizeof *pp);
    pp->g = g;
    pp->s = s;
    pp->r = pp_rank;
    pp->p = s->p;
    pp->v = s->v;
    pp->m = s->m;
    pp->pair = paired;
    pp->dry = true;
    int64_t bytes = -1;
    if (classify(pp, d) && collect(pp, d)) {
        size_slots(pp);
        bytes = pp->extra + slot_bytes(pp);
        for (int c = 0; slots && c < pp->v; c++) slots[c] = pp->nslot[c];
    }
    rt_pipe_free(pp);
    return bytes;
}
int rt_pipe_slots(const rt_pipe *pp, int c) { return c >= 0 && c < pp->v ? pp->nslot[c] : 0; }

void rt_pipe_trace(rt_pipe *pp, rt_trace *t, int row)
{
    pp->trace = t;
    pp->trace_row = row;
}
