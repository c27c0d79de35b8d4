#include "pipe.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "support/util.h"

/* The phase an instruction runs in (pipe.h): its node's phase(...), the
 * schedule pass's annotation, on this rank's nodes. */
enum {
    PH_NONE = IR_PHASE_NONE, PH_BEGIN = IR_PHASE_BEGIN, PH_FWD = IR_PHASE_FWD, PH_BWD = IR_PHASE_BWD,
    PH_END = IR_PHASE_END, PH_OPT = IR_PHASE_OPT
};

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

/* A contiguous run of the gradient buffer, in elements. */
typedef struct grange {
    size_t off, n;
} grange;

/* A data-parallel reduction bucket: the gradients of bucket(k) on this
 * rank, final after instruction `ready` of the backward of chunk `chunk`
 * on the step's last micro-batch of that chunk (chunk -1: after the end
 * phase). */
typedef struct gbucket {
    int chunk, ready;
    grange *r;
    int nr;
    int *acc;       /* its gradients' entries of acc[chunk] */
    int nacc;
    size_t elems;
    bool mixed;     /* named by another chunk's backward too: reduced after the end phase */
} gbucket;

/* The communication thread (--overlap-grad-reduce, --overlap-param-gather):
 * runs queued jobs (a bucket's reduction, or -1: the distributed
 * optimizer's all-gather of the parameters) in order on its own
 * communicator while the compute thread goes on. */
typedef struct overlap {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tgc_comm *comm;
    int *jobs;            /* queued this round, in order */
    int njobs, ndone, cap;
    int rc;               /* the first failure */
    bool stop;
} overlap;

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
    ir_dtype grad_t;      /* the gradients' storage dtype (16 bits under mixed precision) */
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

    /* The data-parallel reduction (docs/pipeline.md, "Gradient buckets"). */
    gbucket *bk;
    int nbk;
    int **order;          /* per chunk: its buckets by ready point, -1-terminated */
    bool ovl_grads, ovl_params; /* the reductions / the parameter all-gather overlap */
    bool gather_pending;  /* the parameter all-gather was queued and not yet waited for */
    bool thread_up;       /* the communication thread runs them (host backends) */
    void *side;           /* or the executor's second stream does (cuda): overlap_comm enqueues there */
    overlap ov;
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

/* ---- phases ---------------------------------------------------------------- */

/* Per node: its phase on this rank, as the schedule pass annotated it. */
static bool classify(rt_pipe *pp, diag *d)
{
    const ir_graph *g = pp->g;
    int n = g->nnodes;
    if (!pipe_graph_annotated(g)) {
        diag_error_plain(d, "pipeline runtime: the graph has no phase annotations (phase(...), which the schedule "
                         "pass sets): compile it from the model or from IR before the schedule pass");
        return false;
    }
    pp->phase = xcalloc((size_t)n + 1, sizeof *pp->phase);
    bool ok = true;
    for (int i = 0; i < n; i++) {
        const ir_node *u = g->nodes[i];
        if (pp->p > 1 && u->stage != pp->r) continue;
        if (u->op == IR_OP_PARAM || u->op == IR_OP_INPUT) continue;
        pp->phase[i] = u->phase;
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
            const ir_node *x = rt_view_base(g, u->src[k]);
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
        if (pp->phase[i] == PH_BEGIN && u->mem > IR_MEM_NONE && rt_view_base(g, u) == u) {
            int64_t bytes = ir_shape_numel(&u->shape) * ir_storage_size(g, u);
            pp->extra += bytes;
            if (!pp->dry && !(pp->pin_mb[i] = pp->pin_step[i] = rt_exec_alloc(pp->e, bytes + 64, "a value made once per step", d)))
                return false;
        }
        if (!summed[i] && !grad) continue;
        accum a = {u, NULL, ir_shape_numel(&u->shape), ir_storage_dtype(g, u)}; /* summed as stored */
        if (summed[i]) {
            /* The micro-batch's value gets a buffer of its own too: in the
             * arena, memplan may reuse its place after its reader, which
             * runs only at the end of the step here. */
            int64_t bytes = a.count * ir_dtype_size(a.dtype);
            pp->extra += 2 * bytes;
            if (!pp->dry) {
                a.acc = rt_exec_alloc(pp->e, bytes + 64, "a sum over the micro-batches", d);
                pp->pin_mb[i] = rt_exec_alloc(pp->e, bytes + 64, "a micro-batch's value summed over the step", d);
                pp->pin_step[i] = a.acc;
                if (!a.acc || !pp->pin_mb[i]) {
                    rt_exec_release(pp->e, a.acc);
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
        int64_t end = u->mem_offset + ir_shape_numel(&u->shape) * ir_storage_size(g, u);
        if (end > pp->grad_bytes) pp->grad_bytes = end;
        pp->grad_t = ir_storage_dtype(g, u);
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

/* ---- gradient buckets -------------------------------------------------------- */

static int cmp_range(const void *a, const void *b)
{
    const grange *x = a, *y = b;
    return (x->off > y->off) - (x->off < y->off);
}

/* The bucket a node's gradient-buffer place belongs to (a view: its
 * base's), -1 for none. */
static int bucket_of(const rt_pipe *pp, const ir_node *x)
{
    if (!x || x->mem != IR_MEM_GRAD) return -1;
    const ir_node *b = rt_view_base(pp->g, x);
    return b->bucket >= 0 && b->bucket < pp->nbk ? b->bucket : -1;
}

static void note_ready(rt_pipe *pp, cg_bind b, int c, int k)
{
    if (b.kind != CG_BIND_NODE || b.node < 0 || b.node >= pp->g->nnodes) return;
    int q = bucket_of(pp, pp->g->nodes[b.node]);
    if (q < 0) return;
    if (pp->bk[q].chunk != c) pp->bk[q].mixed = true;
    else if (k > pp->bk[q].ready) pp->bk[q].ready = k;
}

/* This rank's buckets (the schedule pass's bucket(k) on its gradients):
 * their ranges of the gradient buffer, merged where they touch, and where
 * each is final: the last instruction of its chunk's backward that names
 * one of its gradients (a kernel argument, a GEMM operand, a collective's
 * buffer), the end phase for a gradient the end phase makes. */
static bool buckets(rt_pipe *pp, diag *d)
{
    const ir_graph *g = pp->g;
    size_t esz = (size_t)ir_dtype_size(pp->grad_t);
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *u = g->nodes[i];
        if (u->mem == IR_MEM_GRAD && u->bucket >= pp->nbk && (pp->p == 1 || u->stage == pp->r)) pp->nbk = u->bucket + 1;
    }
    pp->bk = xcalloc((size_t)pp->nbk + 1, sizeof *pp->bk);
    for (int q = 0; q < pp->nbk; q++) pp->bk[q].chunk = -2, pp->bk[q].ready = -1;
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *u = g->nodes[i];
        if (u->mem != IR_MEM_GRAD || rt_view_base(g, u) != u || (pp->p > 1 && u->stage != pp->r)) continue;
        if (u->bucket < 0) {
            diag_error(d, u->loc, "pipeline runtime: the gradient '%%%s' has no bucket(...) (the schedule pass "
                       "sets them)", u->name);
            return false;
        }
        gbucket *b = &pp->bk[u->bucket];
        int c = pp->phase[i] == PH_BWD ? chunk_of(u) : -1;
        if (b->chunk != -2 && b->chunk != c) {
            diag_error(d, u->loc, "pipeline runtime: bucket %d holds '%%%s' of %s and gradients of %s", u->bucket,
                       u->name, c < 0 ? "the end phase" : "a chunk's backward",
                       b->chunk < 0 ? "the end phase" : "another chunk");
            return false;
        }
        b->chunk = c;
        if ((b->nr & (b->nr - 1)) == 0) b->r = xrealloc(b->r, (size_t)(b->nr ? 2 * b->nr : 1) * sizeof *b->r);
        b->r[b->nr++] = (grange){(size_t)u->mem_offset / esz, (size_t)ir_shape_numel(&u->shape)};
        b->elems += (size_t)ir_shape_numel(&u->shape);
    }
    for (int q = 0; q < pp->nbk; q++) {
        gbucket *b = &pp->bk[q];
        if (b->chunk == -2) b->chunk = -1; /* no gradient here: nothing to do, after the end phase */
        qsort(b->r, (size_t)b->nr, sizeof *b->r, cmp_range);
        int k = 0;
        for (int j = 0; j < b->nr; j++) {
            if (k && b->r[k - 1].off + b->r[k - 1].n == b->r[j].off) b->r[k - 1].n += b->r[j].n;
            else b->r[k++] = b->r[j];
        }
        b->nr = k;
    }
    /* The ready points and the accumulations of each bucket. */
    const cg_program *prog = pp->e->prog;
    for (int c = 0; c < pp->v; c++) {
        for (int k = 0; k < pp->bwd[c].n; k++) {
            const cg_instr *in = &prog->instrs[pp->bwd[c].ins[k]];
            if (in->kind == CG_KERNEL)
                for (int a = 0; a < prog->kernels[in->kernel]->nargs; a++) note_ready(pp, prog->binds[in->kernel][a], c, k);
            else if (in->kind == CG_GEMM) {
                const cg_gemm *m = &in->gemm;
                note_ready(pp, m->a, c, k), note_ready(pp, m->b, c, k), note_ready(pp, m->c, c, k);
                if (m->epilogue != CG_EPI_NONE) note_ready(pp, m->bias, c, k), note_ready(pp, m->aux, c, k);
            } else note_ready(pp, in->comm.src, c, k), note_ready(pp, in->comm.dst, c, k);
        }
    }
    for (int q = 0; q < pp->nbk; q++)
        if (pp->bk[q].mixed) pp->bk[q].chunk = -1;
    for (int c = 0; c < pp->v; c++)
        for (int j = 0; j < pp->nacc[c]; j++) {
            int q = pp->acc[c][j].acc ? -1 : bucket_of(pp, pp->acc[c][j].node);
            if (q < 0 || pp->bk[q].chunk != c) continue;
            gbucket *b = &pp->bk[q];
            b->acc = xrealloc(b->acc, (size_t)(b->nacc + 1) * sizeof *b->acc);
            b->acc[b->nacc++] = j;
        }
    /* Per chunk, its buckets by ready point (a bucket nothing names is
     * final at the end of the backward). */
    pp->order = xcalloc((size_t)pp->v, sizeof *pp->order);
    for (int c = 0; c < pp->v; c++) {
        int n = 0;
        pp->order[c] = xmalloc(((size_t)pp->nbk + 1) * sizeof **pp->order);
        for (int q = 0; q < pp->nbk; q++)
            if (pp->bk[q].chunk == c) {
                if (pp->bk[q].ready < 0) pp->bk[q].ready = pp->bwd[c].n - 1;
                int j = n++;
                while (j > 0 && pp->bk[pp->order[c][j - 1]].ready > pp->bk[q].ready) {
                    pp->order[c][j] = pp->order[c][j - 1];
                    j--;
                }
                pp->order[c][j] = q;
            }
        pp->order[c][n] = -1;
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

static bool ov_start(rt_pipe *pp, tgc_comm *c, diag *d);
static void ov_stop(rt_pipe *pp);

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
    bool ok = classify(pp, d) && collect(pp, d) && buckets(pp, d);
    if (ok) size_slots(pp);
    ok = ok && alloc_slots(pp, d);
    /* The communication thread, on a communicator of its own. */
    pp->ovl_grads = o->overlap_grad_reduce && o->overlap_comm && pp->d > 1 && pp->nbk > 0;
    pp->ovl_params = o->overlap_param_gather && o->overlap_comm && pp->d > 1 && e->shard_elems > 0;
    if (ok && (pp->ovl_grads || pp->ovl_params)) {
        /* A backend with streams overlaps on its second one; the others on a thread. */
        if (o->overlap_stream && e->be->stream_wait) {
            pp->side = o->overlap_stream;
            pp->ov.comm = o->overlap_comm;
        } else ok = ov_start(pp, o->overlap_comm, d);
    }
    if (!ok) {
        rt_pipe_free(pp);
        return NULL;
    }
    return pp;
}

void rt_pipe_free(rt_pipe *pp)
{
    if (!pp) return;
    ov_stop(pp);
    free(pp->ov.jobs);
    for (int q = 0; pp->bk && q < pp->nbk; q++) {
        free(pp->bk[q].r);
        free(pp->bk[q].acc);
    }
    free(pp->bk);
    for (int c = 0; pp->order && c < pp->v; c++) free(pp->order[c]);
    free(pp->order);
    const ir_graph *g = pp->g;
    for (int c = 0; c < pp->v && pp->fwd; c++) {
        free(pp->fwd[c].ins);
        free(pp->bwd[c].ins);
        if (pp->fxfer) free(pp->fxfer[c].x);
        if (pp->bxfer) free(pp->bxfer[c].x);
        if (pp->acc) {
            for (int k = 0; k < pp->nacc[c]; k++) rt_exec_release(pp->e, pp->acc[c][k].acc);
            free(pp->acc[c]);
        }
        for (int k = 0; pp->nslot && pp->arena && pp->arena[c] && k < pp->nslot[c]; k++) {
            rt_exec_release(pp->e, pp->arena[c][k]);
            rt_exec_release(pp->e, pp->inbuf[c][k]);
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
    for (int i = 0; pp->pin_mb && i < g->nnodes; i++) rt_exec_release(pp->e, pp->pin_mb[i]);
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
    rt_exec_release(pp->e, pp->scratch);
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

/* A stage boundary moves a value as stored (16 bits under mixed
 * precision): floats by type, anything else as bytes. */
static tgc_comm_dtype comm_dtype(const ir_graph *g, const ir_node *n)
{
    ir_dtype t = ir_storage_dtype(g, n);
    return ir_dtype_is_float(t) ? rt_comm_dtype(t) : TGC_COMM_BYTE;
}

static size_t comm_count(const ir_graph *g, const ir_node *n)
{
    ir_dtype t = ir_storage_dtype(g, n);
    size_t c = (size_t)ir_shape_numel(&n->shape);
    return ir_dtype_is_float(t) ? c : c * (size_t)ir_dtype_size(t);
}

/* One transfer under bindings b, tagged with the pp_send's node id (both
 * sides know it; messages of one tag between two ranks keep their order). */
static int do_xfer(rt_pipe *pp, const rt_bindings *b, const xfer *x)
{
    void *buf = rt_exec_ptr_in(pp->e, b, x->node);
    int peer = peer_rank(pp, x->vpeer);
    if (x->send) return tgc_comm_send(pp->comm, buf, comm_count(pp->g, x->node), comm_dtype(pp->g, x->node), peer, x->tag);
    return tgc_comm_recv(pp->comm, buf, comm_count(pp->g, x->node), comm_dtype(pp->g, x->node), peer, x->tag);
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
        if (ks < ls->n && kr < lr->n && comm_dtype(pp->g, ls->x[ks].node) == comm_dtype(pp->g, lr->x[kr].node)) {
            const xfer *a = &ls->x[ks], *b = &lr->x[kr];
            rc = tgc_comm_sendrecv_tags(pp->comm, rt_exec_ptr_in(pp->e, bs, a->node), comm_count(pp->g, a->node),
                                        peer_rank(pp, a->vpeer), a->tag, rt_exec_ptr_in(pp->e, br, b->node),
                                        comm_count(pp->g, b->node), peer_rank(pp, b->vpeer), b->tag, comm_dtype(pp->g, a->node));
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
 * step's (the first micro-batch of one accumulates in place); but those
 * of chunk c's buckets when `bucketed` (run_last_bwd added them). */
static int accumulate(rt_pipe *pp, int c, const rt_bindings *b, bool bucketed)
{
    bool first = pp->bwd_done[c]++ == 0, ok = true;
    for (int k = 0; ok && k < pp->nacc[c]; k++) {
        const accum *a = &pp->acc[c][k];
        int q = a->acc ? -1 : bucket_of(pp, a->node);
        if (bucketed && q >= 0 && pp->bk[q].chunk == c) continue;
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

/* Bucket q's data-parallel reduction over communicator c: the all-reduce
 * of each of its ranges and the scaling by 1/M that makes them the mean
 * over the global batch. Under the distributed optimizer too: each
 * replica's update then reads its shard of the sums (docs/pipeline.md). */
static int reduce_bucket(rt_pipe *pp, tgc_comm *c, int q)
{
    rt_exec *e = pp->e;
    const gbucket *b = &pp->bk[q];
    unsigned char *grad = e->buf[IR_MEM_GRAD];
    size_t esz = (size_t)ir_dtype_size(pp->grad_t);
    for (int k = 0; k < b->nr; k++) {
        unsigned char *at = grad + b->r[k].off * esz;
        if (pp->d > 1) {
            int rc = tgc_comm_all_reduce(c, TGC_COMM_DP, at, b->r[k].n, rt_comm_dtype(pp->grad_t),
                                         TGC_COMM_SUM);
            if (rc) return rc;
        }
        if (pp->M > 1 && !rt_exec_scale(e, at, (int64_t)b->r[k].n, 1.0 / pp->M, pp->grad_t))
            return RT_EXEC_ERR_DEVICE;
    }
    return 0;
}

/* The distributed optimizer: every replica's updated shard of the
 * parameters, to every replica (buf: the parameters or the gradients). */
static int gather_shards(rt_pipe *pp, tgc_comm *c, ir_mem buf)
{
    rt_exec *e = pp->e;
    size_t esz = (size_t)ir_dtype_size(pp->grad_t), S = (size_t)e->shard_elems;
    unsigned char *p = e->buf[buf];
    return tgc_comm_all_gather(c, TGC_COMM_DP, p + (size_t)e->rt.shard_lo * esz, p, S,
                               rt_comm_dtype(pp->grad_t));
}

/* ---- the communication thread --------------------------------------------- */

static void *ov_main(void *arg)
{
    rt_pipe *pp = arg;
    overlap *o = &pp->ov;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (!o->stop && o->ndone == o->njobs) pthread_cond_wait(&o->cv, &o->mu);
        if (o->ndone == o->njobs) break;
        int job = o->jobs[o->ndone];
        bool skip = o->rc != 0;
        pthread_mutex_unlock(&o->mu);
        int rc = 0;
        if (!skip) {
            long span = -1;
            if (pp->trace) {
                char name[48];
                if (job >= 0) snprintf(name, sizeof name, "bucket %d", job);
                span = rt_trace_begin(pp->trace, pp->trace_row, 1, job >= 0 ? name : "parameter all-gather",
                                      job >= 0 ? "bucket" : "all-gather", now_us());
            }
            rc = job >= 0 ? reduce_bucket(pp, o->comm, job) : gather_shards(pp, o->comm, IR_MEM_PARAM);
            if (span >= 0) rt_trace_end(pp->trace, span, now_us());
        }
        pthread_mutex_lock(&o->mu);
        if (rc && !o->rc) o->rc = rc;
        o->ndone++;
        pthread_cond_broadcast(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

/* Queues a job (a bucket, or -1: the parameter all-gather). */
static void ov_push(rt_pipe *pp, int job)
{
    overlap *o = &pp->ov;
    pthread_mutex_lock(&o->mu);
    TGC_ASSERT(o->njobs < o->cap);
    o->jobs[o->njobs++] = job;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

/* Waits for every queued job: 0 or the first failure's status. */
static int ov_wait(rt_pipe *pp)
{
    overlap *o = &pp->ov;
    pthread_mutex_lock(&o->mu);
    while (o->ndone < o->njobs) pthread_cond_wait(&o->cv, &o->mu);
    int rc = o->rc;
    o->rc = 0;
    o->njobs = o->ndone = 0;
    pthread_mutex_unlock(&o->mu);
    pp->gather_pending = false;
    /* The training loop reports the executor's error of a failed step. */
    if (rc && !pp->e->err[0])
        snprintf(pp->e->err, sizeof pp->e->err, "the communication thread (--overlap-grad-reduce, "
                 "--overlap-param-gather): %s", rc == RT_EXEC_ERR_DEVICE ? "a device operation failed"
                 : tgc_comm_error(o->comm));
    return rc;
}

static bool ov_start(rt_pipe *pp, tgc_comm *c, diag *d)
{
    overlap *o = &pp->ov;
    o->comm = c;
    o->cap = pp->nbk + 2;
    o->jobs = xmalloc((size_t)o->cap * sizeof *o->jobs);
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    if (pthread_create(&o->thread, NULL, ov_main, pp) != 0) {
        diag_error_plain(d, "pipeline runtime: cannot start the communication thread of --overlap-grad-reduce");
        pthread_mutex_destroy(&o->mu);
        pthread_cond_destroy(&o->cv);
        return false;
    }
    pp->thread_up = true;
    return true;
}

/* Stops the thread; one still in a collective is woken by aborting its
 * communicator (its peers fail too: the run is over). */
static void ov_stop(rt_pipe *pp)
{
    overlap *o = &pp->ov;
    if (!pp->thread_up) return;
    pthread_mutex_lock(&o->mu);
    bool busy = o->ndone < o->njobs;
    o->stop = true;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    if (busy) tgc_comm_abort(o->comm, tgc_comm_rank(o->comm), "the rank stopped");
    pthread_join(o->thread, NULL);
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    pp->thread_up = false;
}

/* A backend with streams: bucket q's all-reduce (or, q = -1, the
 * parameter all-gather) enqueued on the second stream once it has waited
 * for the compute stream's work so far; the host goes on at once. */
static int side_launch(rt_pipe *pp, int q)
{
    rt_exec *e = pp->e;
    if (!e->be->stream_wait(e, pp->side)) return RT_EXEC_ERR_DEVICE;
    if (q < 0) return gather_shards(pp, pp->ov.comm, IR_MEM_PARAM);
    const gbucket *b = &pp->bk[q];
    unsigned char *grad = e->buf[IR_MEM_GRAD];
    size_t esz = (size_t)ir_dtype_size(pp->grad_t);
    for (int k = 0; k < b->nr; k++) {
        int rc = tgc_comm_all_reduce(pp->ov.comm, TGC_COMM_DP, grad + b->r[k].off * esz, b->r[k].n,
                                     rt_comm_dtype(pp->grad_t), TGC_COMM_SUM);
        if (rc) return rc;
    }
    return 0;
}

/* Queues bucket q's reduction: to the thread, or to the second stream. */
static int launch(rt_pipe *pp, int q)
{
    if (pp->side) return side_launch(pp, q);
    ov_push(pp, q);
    return 0;
}

/* The second stream's work so far, waited for on the host (a barrier of
 * its communicator waits for its stream and reports NCCL's errors). */
static int side_wait(rt_pipe *pp)
{
    pp->gather_pending = false;
    int rc = tgc_comm_barrier(pp->ov.comm, TGC_COMM_DP);
    if (rc && !pp->e->err[0])
        snprintf(pp->e->err, sizeof pp->e->err, "the communication stream (--overlap-grad-reduce, "
                 "--overlap-param-gather): %s", tgc_comm_error(pp->ov.comm));
    return rc;
}

/* The step's last backward of chunk c on the communication thread's
 * terms: run up to each bucket's ready point, add its gradients of this
 * micro-batch, queue its reduction; then the rest. */
static int run_last_bwd(rt_pipe *pp, int c, const rt_bindings *b)
{
    rt_exec *e = pp->e;
    const seg *s = &pp->bwd[c];
    bool first = pp->bwd_done[c] == 0;
    int start = 0, rc = 0;
    for (const int *q = pp->order[c]; *q >= 0; q++) {
        const gbucket *bk = &pp->bk[*q];
        int end = bk->ready + 1;
        if (end > start) {
            if ((rc = rt_exec_run(e, s->ins + start, end - start)) != 0) return rc;
            start = end;
        }
        for (int j = 0; pp->scratch && j < bk->nacc; j++) {
            const accum *a = &pp->acc[c][bk->acc[j]];
            if (!sum_into(e, rt_exec_ptr(e, a->node), rt_exec_ptr_in(e, b, a->node), a->count, a->dtype, first))
                return RT_EXEC_ERR_DEVICE;
        }
        if ((rc = launch(pp, *q)) != 0) return rc;
    }
    if (start < s->n && (rc = rt_exec_run(e, s->ins + start, s->n - start)) != 0) return rc;
    return accumulate(pp, c, b, true);
}

/* After the end phase, the reduction of every bucket: on this thread in
 * bucket order, or the end phase's buckets queued after the others and
 * every one waited for. */
static int reduce_grads(rt_pipe *pp)
{
    if (!pp->ovl_grads) {
        for (int q = 0; q < pp->nbk; q++) {
            int rc = reduce_bucket(pp, pp->comm, q);
            if (rc) return rc;
        }
        return 0;
    }
    for (int q = 0; q < pp->nbk; q++)
        if (pp->bk[q].chunk < 0) {
            int rc = launch(pp, q);
            if (rc) return rc;
        }
    if (!pp->side) return ov_wait(pp);
    /* The second stream's all-reduces done, the scaling follows on the
     * compute stream: the same operations as without overlap. */
    int rc = side_wait(pp);
    rt_exec *e = pp->e;
    size_t esz = (size_t)ir_dtype_size(pp->grad_t);
    for (int q = 0; !rc && pp->M > 1 && q < pp->nbk; q++)
        for (int k = 0; !rc && k < pp->bk[q].nr; k++)
            if (!rt_exec_scale(e, e->buf[IR_MEM_GRAD] + pp->bk[q].r[k].off * esz, (int64_t)pp->bk[q].r[k].n, 1.0 / pp->M,
                               pp->grad_t))
                rc = RT_EXEC_ERR_DEVICE;
    return rc;
}

int rt_pipe_wait(rt_pipe *pp)
{
    if (!pp->gather_pending) return 0;
    return pp->side ? side_wait(pp) : ov_wait(pp);
}

int rt_pipe_gather_grads(rt_pipe *pp)
{
    int rc = rt_pipe_wait(pp);
    return rc ? rc : pp->e->shard_elems > 0 ? gather_shards(pp, pp->comm, IR_MEM_GRAD) : 0;
}


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
    /* The last update's parameter all-gather, before anything reads them. */
    int wrc = rt_pipe_wait(pp);
    if (wrc) return wrc;
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
            /* --overlap-grad-reduce: the buckets go as they are final. */
            if (pp->ovl_grads && pp->bwd_done[c] == pp->m - 1) {
                rc = run_last_bwd(pp, c, b);
                break;
            }
            rc = rt_exec_run(e, pp->bwd[c].ins, pp->bwd[c].n);
            if (!rc) rc = accumulate(pp, c, b, false);
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
                if (!rc && e->shard_elems > 0 && pp->ovl_params) {
                    rc = launch(pp, -1); /* waited for before the parameters are next read */
                    pp->gather_pending = true;
                } else if (!rc && e->shard_elems > 0)
                    rc = gather_shards(pp, pp->comm, IR_MEM_PARAM);
                if (!rc) pp->gnorm = rt_exec_scalar(e, &pp->step, pp->norm);
            }
            break;
        default: break;
        }
        /* A span ends when the device has done the instruction's work, not
         * when it was issued (on a GPU the kernels are asynchronous; on the
         * host backends the wait returns at once). */
        if (span >= 0 && !rc && !rt_exec_sync(e)) rc = RT_EXEC_ERR_DEVICE;
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
    if (rc) {
        /* The communication thread's peers would wait for it in vain. */
        if (pp->thread_up || pp->side) tgc_comm_abort(pp->ov.comm, tgc_comm_rank(pp->ov.comm), "the rank failed");
        return rc;
    }
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
    int rc = rt_pipe_wait(pp);
    if (rc) return rc;
    e->rt.eval = 1;
    double sum = 0.0;
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
