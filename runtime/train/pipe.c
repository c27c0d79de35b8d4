#include "pipe.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "support/util.h"

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

/* The rank's compiled step (codegen/step.h) and what running it needs: the
 * step arena, each slot's bindings, the communicators. Nothing here
 * decides anything about the step: rt_pipe_step runs its instructions in
 * order. */
struct rt_pipe {
    rt_exec *e;
    const ir_graph *g;
    cg_step *s;
    int dp_rank, M;
    /* The distributed optimizer's reduce-scatter: the pieces of a range,
     * d for the rank's communicator, then d for the communication thread's. */
    size_t *pieces;
    rt_pipe_feed_fn feed;
    void *feed_ctx;
    tgc_comm *comm;       /* the executor's: on device buffers */
    tgc_comm *host;       /* the same ranks on host memory (the loss) */
    void *staging;        /* the host's copy of one input, filled by the feed */
    tgc_topology topo;
    tgc_coords me;

    unsigned char *arena; /* the step arena (device memory) */
    rt_bindings *bind;    /* per slot */
    rt_bindings step;     /* the step-level phases */
    void **pin_mb, **pin_step; /* per node: the pins of a micro-batch's and of the step-level bindings */
    unsigned char *scratch;

    double loss_sum, loss_mean, gnorm;
    int64_t cur_step;
    bool eval;

    rt_trace *trace;
    int trace_row;

    bool ovl_params;      /* the parameter all-gather overlaps */
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

static const ir_node *node(const rt_pipe *pp, int id) { return pp->g->nodes[id]; }

/* ---- construction ---------------------------------------------------------- */

/* The step arena and the bindings of every slot and of the step-level phases. */
static bool bind_all(rt_pipe *pp, diag *d)
{
    rt_exec *e = pp->e;
    const cg_step *s = pp->s;
    char what[200];
    snprintf(what, sizeof what, "the pipeline's step arena (in-flight micro-batches, %d slot%s; values summed "
             "over the step)", s->nslots, s->nslots == 1 ? "" : "s");
    if (s->arena_bytes > 0 && !(pp->arena = rt_exec_alloc(e, s->arena_bytes, what, d))) return false;
    size_t nn = (size_t)pp->g->nnodes + 1;
    pp->pin_mb = xcalloc(nn, sizeof *pp->pin_mb);
    pp->pin_step = xcalloc(nn, sizeof *pp->pin_step);
    for (int k = 0; k < s->npin; k++) {
        pp->pin_mb[s->pin[k].node] = pp->arena + s->pin[k].mb;
        pp->pin_step[s->pin[k].node] = pp->arena + s->pin[k].step;
    }
    if (s->scratch >= 0) pp->scratch = pp->arena + s->scratch;
    pp->bind = xcalloc((size_t)s->nslots, sizeof *pp->bind);
    for (int k = 0; k < s->nslots; k++) {
        rt_bindings *bd = &pp->bind[k];
        bd->base[IR_MEM_STASH] = s->slot[k].stash < 0 ? NULL : pp->arena + s->slot[k].stash;
        bd->base[IR_MEM_INPUT] = s->slot[k].input < 0 ? NULL : pp->arena + s->slot[k].input;
        bd->base[IR_MEM_GRAD] = pp->scratch; /* NULL with one micro-batch: the gradients directly */
        bd->pin = pp->pin_mb;
        rt_exec_bind(e, bd);
    }
    pp->step.pin = pp->pin_step;
    rt_exec_bind(e, &pp->step);
    return true;
}

static bool ov_start(rt_pipe *pp, tgc_comm *c, diag *d);
static void ov_stop(rt_pipe *pp);

rt_pipe *rt_pipe_new(rt_exec *e, const rt_pipe_opts *o, diag *d)
{
    if (o->dist_opt != (e->shard_elems > 0) && o->dp_size > 1) {
        diag_error_plain(d, "the plan was compiled %s --use-distributed-optimizer, the run %s it: compile and run "
                         "with the same setting", e->prog->sharded_state ? "with" : "without",
                         o->dist_opt ? "asks for" : "lacks");
        return NULL;
    }
    rt_pipe *pp = xcalloc(1, sizeof *pp);
    *pp = (rt_pipe){.e = e, .g = e->g, .dp_rank = o->dp_rank, .feed = o->feed, .feed_ctx = o->feed_ctx,
                    .comm = e->comm, .host = o->host_comm ? o->host_comm : e->comm};
    /* `local` buffers sends: pairing would only hold one more slot. */
    bool paired = e->comm && strcmp(tgc_comm_backend(e->comm), "local") != 0;
    cg_step_opts so = {.sched = o->sched, .pp_rank = o->pp_rank, .dp_size = o->dp_size, .paired = paired,
                       .overlap_grads = o->overlap_grad_reduce && o->overlap_comm, .dist_opt = o->dist_opt};
    pp->s = cg_step_build(e->g, e->prog, &so, d);
    if (!pp->s) {
        free(pp);
        return NULL;
    }
    pp->M = pp->s->m * pp->s->d;
    int64_t in_max = 1;
    for (int i = 0; i < pp->g->nnodes; i++)
        if (pp->g->nodes[i]->flags & IR_NF_INPUT) {
            const ir_node *u = pp->g->nodes[i];
            int64_t bytes = ir_shape_numel(&u->shape) * ir_dtype_size(u->dtype);
            if (bytes > in_max) in_max = bytes;
        }
    pp->staging = xcalloc((size_t)in_max, 1);
    pp->pieces = xcalloc(2 * (size_t)pp->s->d, sizeof *pp->pieces);
    if (pp->comm) {
        pp->topo = *tgc_comm_topology(pp->comm);
        pp->me = tgc_topology_coords(&pp->topo, tgc_comm_rank(pp->comm));
    }
    bool ok = bind_all(pp, d);
    /* The communication thread, on a communicator of its own. */
    pp->ovl_params = o->overlap_param_gather && o->overlap_comm && pp->s->d > 1 && e->shard_elems > 0;
    if (ok && (pp->s->overlap_grads || pp->ovl_params)) {
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
    for (int k = 0; pp->bind && k < pp->s->nslots; k++) rt_exec_bindings_free(&pp->bind[k]);
    rt_exec_bindings_free(&pp->step);
    rt_exec_release(pp->e, pp->arena);
    cg_step_free(pp->s);
    free(pp->bind);
    free(pp->pin_mb);
    free(pp->pin_step);
    free(pp->staging);
    free(pp->pieces);
    free(pp);
}

/* ---- transfers --------------------------------------------------------------- */

static int peer_rank(const rt_pipe *pp, int vstage)
{
    tgc_coords c = pp->me;
    c.pp = vstage % pp->s->p;
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
static int do_xfer(rt_pipe *pp, const rt_bindings *b, const cg_xfer *x)
{
    const ir_node *n = node(pp, x->node);
    void *buf = rt_exec_ptr_in(pp->e, b, n);
    int peer = peer_rank(pp, x->vpeer);
    if (x->send) return tgc_comm_send(pp->comm, buf, comm_count(pp->g, n), comm_dtype(pp->g, n), peer, x->tag);
    return tgc_comm_recv(pp->comm, buf, comm_count(pp->g, n), comm_dtype(pp->g, n), peer, x->tag);
}

/* A send instruction's transfers together with the next instruction's
 * receives, each send paired with a receive in one sendrecv (Megatron's
 * send_forward_recv_backward and send_backward_recv_forward): a
 * communicator whose sends block until matched (MPI, large messages)
 * cannot deadlock when neighbours send to each other at once. */
static int run_pair(rt_pipe *pp, const rt_bindings *bs, const cg_xlist *ls, int speer, const rt_bindings *br,
                    const cg_xlist *lr, int rpeer)
{
    int ks = 0, kr = 0;
    for (;;) {
        while (ks < ls->n && (ls->x[ks].vpeer != speer || !ls->x[ks].send)) ks++;
        while (kr < lr->n && (lr->x[kr].vpeer != rpeer || lr->x[kr].send)) kr++;
        if (ks >= ls->n && kr >= lr->n) return 0;
        int rc;
        const cg_xfer *a = ks < ls->n ? &ls->x[ks] : NULL, *b = kr < lr->n ? &lr->x[kr] : NULL;
        if (a && b && comm_dtype(pp->g, node(pp, a->node)) == comm_dtype(pp->g, node(pp, b->node))) {
            const ir_node *na = node(pp, a->node), *nb = node(pp, b->node);
            rc = tgc_comm_sendrecv_tags(pp->comm, rt_exec_ptr_in(pp->e, bs, na), comm_count(pp->g, na),
                                        peer_rank(pp, a->vpeer), a->tag, rt_exec_ptr_in(pp->e, br, nb),
                                        comm_count(pp->g, nb), peer_rank(pp, b->vpeer), b->tag, comm_dtype(pp->g, na));
            ks++, kr++;
        } else if (a) rc = do_xfer(pp, bs, &ls->x[ks++]);
        else rc = do_xfer(pp, br, &lr->x[kr++]);
        if (rc) return rc;
    }
}

/* The transfers of list l to / from virtual stage vpeer (-1: every one). */
static int run_xfers(rt_pipe *pp, const rt_bindings *b, const cg_xlist *l, int vpeer, bool send)
{
    for (int k = 0; k < l->n; k++) {
        const cg_xfer *x = &l->x[k];
        if ((vpeer >= 0 && x->vpeer != vpeer) || x->send != send) continue;
        int rc = do_xfer(pp, b, x);
        if (rc) return rc;
    }
    return 0;
}

/* A step-level phase in program order: compute runs of instructions, with
 * the transfers (per-step sends and receives) where they fall. */
static int run_step_seg(rt_pipe *pp, const cg_seg *s)
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
        const ir_node *n = e->g->nodes[in->node];
        bool send = n->op == IR_OP_PP_SEND;
        cg_xfer x = {s->ins[k], send ? n->src[0]->id : n->id,
                     (int)(send ? ir_attr_int(n, "to_stage") : ir_attr_int(n, "from_stage")),
                     send ? n->id : n->src[0]->id, send};
        rc = do_xfer(pp, &pp->step, &x);
        if (rc) return rc;
    }
    return 0;
}

/* ---- sums and reductions ---------------------------------------------------------- */

/* dst += src on the device, or (first) dst = src. */
static bool sum_into(rt_exec *e, void *dst, const void *src, int64_t n, ir_dtype t, bool first)
{
    if (first) return rt_exec_copy(e, dst, src, (size_t)(n * ir_dtype_size(t)));
    return rt_exec_reduce(e, dst, src, n, t, RT_REDUCE_SUM);
}

/* One sum of a backward: the micro-batch's value under b into the step's. */
static bool accum_one(rt_pipe *pp, const cg_accum *a, const rt_bindings *b, bool first)
{
    const ir_node *n = node(pp, a->node);
    const void *src = rt_exec_ptr_in(pp->e, b, n);
    if (a->acc >= 0) return sum_into(pp->e, pp->arena + a->acc, src, a->count, a->dtype, first);
    if (pp->scratch) return sum_into(pp->e, rt_exec_ptr(pp->e, n), src, a->count, a->dtype, first);
    return true; /* one micro-batch: its gradients are the step's */
}

/* After bwd c.j: the micro-batch's gradients and summed values join the
 * step's; but those of the buckets reduced at their ready points when
 * `bucketed` (run_last_bwd added them). */
static int accumulate(rt_pipe *pp, int c, const rt_bindings *b, bool first, bool bucketed)
{
    for (int k = 0; k < pp->s->nacc[c]; k++) {
        const cg_accum *a = &pp->s->acc[c][k];
        if (bucketed && a->bucket >= 0) continue;
        if (!accum_one(pp, a, b, first)) return RT_EXEC_ERR_DEVICE;
    }
    return 0;
}

/* The feed fills the host's staging buffer, which goes to the device. */
static int feed_inputs(rt_pipe *pp, int c, const rt_bindings *b, int64_t g)
{
    for (const int *in = pp->s->inputs[c]; *in >= 0; in++) {
        pp->feed(pp->feed_ctx, node(pp, *in), pp->staging, pp->cur_step, g);
        if (!rt_exec_set(pp->e, b, node(pp, *in), pp->staging)) return RT_EXEC_ERR_DEVICE;
    }
    return 0;
}

/* The part of the gradient range [off, off + n) this replica's update
 * reads: all of it, or under the distributed optimizer the part in its
 * shard (replica r's shard is [r S, (r + 1) S), the last one's to the end). */
static void own_part(const rt_pipe *pp, int64_t off, int64_t n, int64_t *lo, int64_t *len)
{
    int64_t S = pp->e->shard_elems, a = off, z = off + n;
    if (S > 0) {
        int64_t s0 = (int64_t)pp->dp_rank * S, s1 = pp->dp_rank + 1 < pp->s->d ? s0 + S : INT64_MAX;
        a = off > s0 ? off : s0;
        z = off + n < s1 ? off + n : s1;
    }
    *lo = a;
    *len = z > a ? z - a : 0;
}

/* The data-parallel sum of the gradient range [off, off + n) over c: an
 * all-reduce, or under the distributed optimizer the reduce-scatter of
 * the range cut at the shard boundaries (each replica's update reads only
 * its shard: half the bytes; the summation order, and so every bit of
 * the shard, is the all-reduce's). */
static int dp_sum(rt_pipe *pp, tgc_comm *c, int64_t off, int64_t n)
{
    unsigned char *at = pp->e->buf[IR_MEM_GRAD] + (size_t)off * (size_t)ir_dtype_size(pp->s->grad_t);
    tgc_comm_dtype dt = rt_comm_dtype(pp->s->grad_t);
    int64_t S = pp->e->shard_elems;
    if (S <= 0) return tgc_comm_all_reduce(c, TGC_COMM_DP, at, (size_t)n, dt, TGC_COMM_SUM);
    size_t *counts = pp->pieces + (c == pp->comm ? 0 : pp->s->d);
    for (int r = 0; r < pp->s->d; r++) {
        int64_t s0 = (int64_t)r * S, s1 = r + 1 < pp->s->d ? s0 + S : INT64_MAX;
        int64_t a = off > s0 ? off : s0, z = off + n < s1 ? off + n : s1;
        counts[r] = z > a ? (size_t)(z - a) : 0;
    }
    return tgc_comm_reduce_scatter_v(c, TGC_COMM_DP, at, counts, dt, TGC_COMM_SUM);
}

/* 1/M of the range's part this replica reads: the mean over the global batch. */
static int scale_range(rt_pipe *pp, int64_t off, int64_t n)
{
    int64_t lo, len;
    own_part(pp, off, n, &lo, &len);
    if (pp->M <= 1 || !len) return 0;
    unsigned char *at = pp->e->buf[IR_MEM_GRAD] + (size_t)lo * (size_t)ir_dtype_size(pp->s->grad_t);
    return rt_exec_scale(pp->e, at, len, 1.0 / pp->M, pp->s->grad_t) ? 0 : RT_EXEC_ERR_DEVICE;
}

/* Bucket q's data-parallel reduction over communicator c: the sum of each
 * of its ranges and the scaling by 1/M that makes them the mean over the
 * global batch (docs/pipeline.md). */
static int reduce_bucket(rt_pipe *pp, tgc_comm *c, int q)
{
    const cg_bucket *b = &pp->s->bk[q];
    for (int k = 0; k < b->nr; k++) {
        int rc = pp->s->d > 1 ? dp_sum(pp, c, b->r[k].off, b->r[k].n) : 0;
        if (!rc) rc = scale_range(pp, b->r[k].off, b->r[k].n);
        if (rc) return rc;
    }
    return 0;
}

/* The distributed optimizer: every replica's updated shard of the
 * parameters, to every replica (buf: the parameters or the gradients). */
static int gather_shards(rt_pipe *pp, tgc_comm *c, ir_mem buf)
{
    rt_exec *e = pp->e;
    size_t esz = (size_t)ir_dtype_size(pp->s->grad_t), S = (size_t)e->shard_elems;
    unsigned char *p = e->buf[buf];
    return tgc_comm_all_gather(c, TGC_COMM_DP, p + (size_t)e->rt.shard_lo * esz, p, S, rt_comm_dtype(pp->s->grad_t));
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
    o->cap = pp->s->nbk + 2;
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
    const cg_bucket *b = &pp->s->bk[q];
    for (int k = 0; k < b->nr; k++) {
        int rc = dp_sum(pp, pp->ov.comm, b->r[k].off, b->r[k].n);
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

/* The step's last backward of chunk c under --overlap-grad-reduce: run up
 * to each bucket's ready point, add its gradients of this micro-batch,
 * queue its reduction; then the rest. */
static int run_last_bwd(rt_pipe *pp, const cg_sinstr *in, const rt_bindings *b)
{
    rt_exec *e = pp->e;
    const cg_step *s = pp->s;
    const cg_seg *sg = &s->bwd[in->chunk];
    int start = 0, rc = 0;
    for (const int *q = s->order[in->chunk]; *q >= 0; q++) {
        int end = s->bk[*q].ready + 1;
        if (end > start) {
            if ((rc = rt_exec_run(e, sg->ins + start, end - start)) != 0) return rc;
            start = end;
        }
        for (int j = 0; j < s->nacc[in->chunk]; j++)
            if (s->acc[in->chunk][j].bucket == *q && !accum_one(pp, &s->acc[in->chunk][j], b, in->first))
                return RT_EXEC_ERR_DEVICE;
        if ((rc = launch(pp, *q)) != 0) return rc;
    }
    if (start < sg->n && (rc = rt_exec_run(e, sg->ins + start, sg->n - start)) != 0) return rc;
    return accumulate(pp, in->chunk, b, in->first, true);
}

/* After the end phase, the reduction of every bucket: on this thread in
 * bucket order, or the end phase's buckets queued after the others and
 * every one waited for. */
static int reduce_grads(rt_pipe *pp)
{
    const cg_step *s = pp->s;
    if (!s->overlap_grads) {
        for (int q = 0; q < s->nbk; q++) {
            int rc = reduce_bucket(pp, pp->comm, q);
            if (rc) return rc;
        }
        return 0;
    }
    for (int q = 0; q < s->nbk; q++)
        if (s->bk[q].chunk < 0) {
            int rc = launch(pp, q);
            if (rc) return rc;
        }
    if (!pp->side) return ov_wait(pp);
    /* The second stream's all-reduces done, the scaling follows on the
     * compute stream: the same operations as without overlap. */
    int rc = side_wait(pp);
    for (int q = 0; !rc && q < s->nbk; q++)
        for (int k = 0; !rc && k < s->bk[q].nr; k++) rc = scale_range(pp, s->bk[q].r[k].off, s->bk[q].r[k].n);
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

/* ---- running the program -------------------------------------------------------- */

static int run_fwd(rt_pipe *pp, const cg_sinstr *in, const rt_bindings *b, int64_t step)
{
    rt_exec *e = pp->e;
    int64_t g = (int64_t)pp->dp_rank * pp->s->m + in->mb;
    int rc = feed_inputs(pp, in->chunk, b, g);
    if (!pp->eval) e->rt.step = step * pp->M + g;
    rt_exec_use(e, b);
    if (!rc) rc = rt_exec_run(e, pp->s->fwd[in->chunk].ins, pp->s->fwd[in->chunk].n);
    if (!rc && pp->s->loss >= 0 && in->chunk == pp->s->loss_chunk) pp->loss_sum += rt_exec_scalar(e, b, node(pp, pp->s->loss));
    return rc;
}

static int run_bwd(rt_pipe *pp, const cg_sinstr *in, const rt_bindings *b, int64_t step)
{
    rt_exec *e = pp->e;
    e->rt.step = step * pp->M + (int64_t)pp->dp_rank * pp->s->m + in->mb;
    rt_exec_use(e, b);
    /* --overlap-grad-reduce: the buckets go as they are final. */
    if (pp->s->overlap_grads && in->last) return run_last_bwd(pp, in, b);
    int rc = rt_exec_run(e, pp->s->bwd[in->chunk].ins, pp->s->bwd[in->chunk].n);
    return rc ? rc : accumulate(pp, in->chunk, b, in->first, false);
}

/* The update, the distributed optimizer's all-gather of the parameters
 * (queued under --overlap-param-gather, waited for before they are next
 * read) and the gradient norm. */
static int run_opt(rt_pipe *pp)
{
    rt_exec *e = pp->e;
    int rc = run_step_seg(pp, &pp->s->opt);
    if (!rc && e->shard_elems > 0 && pp->ovl_params) {
        rc = launch(pp, -1);
        pp->gather_pending = true;
    } else if (!rc && e->shard_elems > 0)
        rc = gather_shards(pp, pp->comm, IR_MEM_PARAM);
    if (!rc) pp->gnorm = rt_exec_scalar(e, &pp->step, node(pp, pp->s->norm));
    return rc;
}

/* The mean loss over the step's micro-batches (count of them on this
 * replica) and the replicas. */
static int mean_loss(rt_pipe *pp, double count, double *out)
{
    *out = NAN;
    if (pp->s->loss < 0) return 0;
    double l = pp->loss_sum / count;
    int rc = pp->s->d > 1 ? tgc_comm_all_reduce(pp->host, TGC_COMM_DP, &l, 1, TGC_COMM_F64, TGC_COMM_SUM) : 0;
    *out = l / pp->s->d;
    return rc;
}

static int run_one(rt_pipe *pp, const cg_sinstr *in, int64_t step)
{
    const cg_step *s = pp->s;
    const rt_bindings *b = in->slot >= 0 ? &pp->bind[in->slot] : NULL;
    const cg_xlist *l = in->chunk >= 0 ? (in->bwd ? &s->bx[in->chunk] : &s->fx[in->chunk]) : NULL;
    switch (in->op) {
    case CG_SOP_BEGIN: return run_step_seg(pp, &s->begin);
    case CG_SOP_RECV: return run_xfers(pp, b, l, in->peer, false);
    case CG_SOP_SEND: return run_xfers(pp, b, l, in->peer, true);
    case CG_SOP_SENDRECV:
        return run_pair(pp, b, l, in->peer, &pp->bind[in->slot2], in->bwd2 ? &s->bx[in->chunk2] : &s->fx[in->chunk2],
                        in->peer2);
    case CG_SOP_FWD: return run_fwd(pp, in, b, step);
    case CG_SOP_BWD: return run_bwd(pp, in, b, step);
    case CG_SOP_END: return run_step_seg(pp, &s->end);
    case CG_SOP_REDUCE: return reduce_grads(pp);
    case CG_SOP_OPT: return run_opt(pp);
    case CG_SOP_LOSS: return mean_loss(pp, s->m, &pp->loss_mean);
    case CG_SOP_MARK: case CG_SOP_COUNT: return 0;
    }
    return 0;
}

/* Runs a program's instructions; under --trace a span per schedule
 * instruction, ended when the device has done its work (on a GPU the
 * kernels are asynchronous; on the host backends the wait returns at once). */
static int run_program(rt_pipe *pp, const cg_sinstr *ins, int n, int64_t step)
{
    int rc = 0;
    for (int i = 0; !rc && i < n; i++) {
        const cg_sinstr *in = &ins[i];
        long span = -1;
        if (pp->trace && in->sched >= 0) {
            char name[160];
            const char *cat;
            cg_sinstr_name(pp->s, in, name, sizeof name, &cat);
            bool compute = in->op == CG_SOP_FWD || in->op == CG_SOP_BWD;
            span = rt_trace_begin(pp->trace, pp->trace_row, compute ? 0 : 1, name, cat, now_us());
        }
        /* The step-level instructions of one schedule instruction share its span. */
        int j = i;
        while (!rc && j < n && (j == i || (in->sched >= 0 && ins[j].sched == in->sched))) rc = run_one(pp, &ins[j++], step);
        i = j - 1;
        if (span >= 0 && !rc && !rt_exec_sync(pp->e)) rc = RT_EXEC_ERR_DEVICE;
        if (span >= 0) rt_trace_end(pp->trace, span, now_us());
    }
    rt_exec_use(pp->e, NULL);
    return rc;
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
    /* The last update's parameter all-gather, before anything reads them. */
    int rc = rt_pipe_wait(pp);
    if (rc) return rc;
    rc = run_program(pp, pp->s->ins, pp->s->nins, step);
    /* The communication thread's peers would wait for it in vain. */
    if (rc && (pp->thread_up || pp->side)) tgc_comm_abort(pp->ov.comm, tgc_comm_rank(pp->ov.comm), "the rank failed");
    return rc;
}

int rt_pipe_eval(rt_pipe *pp, int64_t iters, double *loss)
{
    rt_exec *e = pp->e;
    *loss = NAN;
    int rc = rt_pipe_wait(pp);
    if (rc) return rc;
    e->rt.eval = 1;
    pp->eval = true;
    pp->loss_sum = 0.0;
    rt_trace *t = pp->trace;
    pp->trace = NULL; /* the trace records training steps */
    for (int64_t k = 0; !rc && k < iters; k++) {
        pp->cur_step = k;
        rc = run_program(pp, pp->s->eval, pp->s->neval, k);
    }
    pp->trace = t;
    pp->eval = false;
    e->rt.eval = 0;
    if (rc) return rc;
    return mean_loss(pp, (double)iters * pp->s->m, loss);
}

double rt_pipe_loss(const rt_pipe *pp) { return pp->loss_mean; }
bool rt_pipe_has_loss(const rt_pipe *pp) { return pp->s->loss >= 0; }
double rt_pipe_grad_norm(const rt_pipe *pp) { return pp->gnorm; }
int64_t rt_pipe_bytes(const rt_pipe *pp) { return pp->s->arena_bytes; }
const cg_step *rt_pipe_program(const rt_pipe *pp) { return pp->s; }

int64_t rt_pipe_predict(const ir_graph *g, const pipe_schedule *s, int pp_rank, bool paired, int *slots, diag *d)
{
    cg_step_opts o = {.sched = s, .pp_rank = pp_rank, .dp_size = 1, .paired = paired};
    cg_step *st = cg_step_build(g, NULL, &o, d);
    if (!st) return -1;
    int64_t bytes = st->arena_bytes;
    for (int c = 0; slots && c < st->v; c++) slots[c] = st->nslot[c];
    cg_step_free(st);
    return bytes;
}
int rt_pipe_slots(const rt_pipe *pp, int c) { return c >= 0 && c < pp->s->v ? pp->s->nslot[c] : 0; }

void rt_pipe_trace(rt_pipe *pp, rt_trace *t, int row)
{
    pp->trace = t;
    pp->trace_row = row;
}
