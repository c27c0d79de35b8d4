#include "codegen/step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/util.h"

/* Grows an array of n elements of size sz to hold one more (powers of two). */
static void *grow(void *p, int n, size_t sz)
{
    return (n & (n - 1)) == 0 ? xrealloc(p, (size_t)(n ? 2 * n : 1) * sz) : p;
}

static void seg_push(cg_seg *s, int i)
{
    s->ins = grow(s->ins, s->n, sizeof *s->ins);
    s->ins[s->n++] = i;
}

static void xlist_push(cg_xlist *l, cg_xfer x)
{
    l->x = grow(l->x, l->n, sizeof *l->x);
    l->x[l->n++] = x;
}

static int chunk_of(const ir_node *n) { return n->chunk < 0 ? 0 : n->chunk; }

/* The node whose buffer n shares (a view's operand, followed), or n. */
static const ir_node *view_base(const ir_graph *g, const ir_node *n)
{
    while ((n->op == IR_OP_RESHAPE || n->op == IR_OP_RESULT) && cg_op_is_view(g, n)) n = n->src[0];
    return n;
}

static bool on_rank(const cg_step *s, const ir_node *u) { return s->p == 1 || u->stage == s->r; }

static int64_t round64(int64_t x) { return (x + 63) & ~(int64_t)63; }

/* A buffer of the step arena: its offset. */
static int64_t arena_take(cg_step *s, int64_t bytes)
{
    int64_t at = s->arena_bytes;
    s->arena_bytes += round64(bytes);
    return at;
}

/* ---- phases ------------------------------------------------------------------ */

/* Per node: its phase on this rank (the schedule pass's annotation);
 * nothing per micro-batch may read what is made once per step after them. */
static int *phases(const ir_graph *g, const cg_step *s, diag *d)
{
    if (!pipe_graph_annotated(g)) {
        diag_error_plain(d, "pipeline runtime: the graph has no phase annotations (phase(...), which the schedule "
                         "pass sets): compile it from the model or from IR before the schedule pass");
        return NULL;
    }
    int *ph = xcalloc((size_t)g->nnodes + 1, sizeof *ph);
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *u = g->nodes[i];
        if (on_rank(s, u) && u->op != IR_OP_PARAM && u->op != IR_OP_INPUT) ph[i] = u->phase;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *u = g->nodes[i];
        if (ph[i] != IR_PHASE_FWD && ph[i] != IR_PHASE_BWD && ph[i] != IR_PHASE_BEGIN) continue;
        for (int k = 0; k < u->nsrc; k++)
            if (ph[u->src[k]->id] >= IR_PHASE_END) {
                diag_error(d, u->loc, "pipeline runtime: '%%%s' runs per micro-batch but reads '%%%s', which is made "
                           "once per step after the micro-batches", u->name, u->src[k]->name);
                free(ph);
                return NULL;
            }
    }
    return ph;
}

/* The codegen instructions of each phase and chunk, and the transfers. */
static bool segments(cg_step *s, const ir_graph *g, const cg_program *prog, const int *ph, diag *d)
{
    for (int i = 0; prog && i < prog->ninstrs; i++) {
        const cg_instr *in = &prog->instrs[i];
        const ir_node *n = g->nodes[in->node];
        int p = ph[n->id], c = chunk_of(n);
        if (p == IR_PHASE_NONE) continue;
        if (c >= s->v) {
            diag_error(d, n->loc, "pipeline runtime: '%%%s' is on chunk %d of %d", n->name, c, s->v);
            return false;
        }
        bool xf = in->kind == CG_COMM && (in->comm.kind == CG_SEND || in->comm.kind == CG_RECV);
        if (p == IR_PHASE_BEGIN) seg_push(&s->begin, i);
        else if (p == IR_PHASE_END) seg_push(&s->end, i);
        else if (p == IR_PHASE_OPT) seg_push(&s->opt, i);
        else if (!xf) seg_push(p == IR_PHASE_FWD ? &s->fwd[c] : &s->bwd[c], i);
        else {
            bool send = n->op == IR_OP_PP_SEND;
            cg_xfer x = {i, send ? n->src[0]->id : n->id,
                         (int)(send ? ir_attr_int(n, "to_stage") : ir_attr_int(n, "from_stage")),
                         send ? n->id : n->src[0]->id, send};
            xlist_push(p == IR_PHASE_FWD ? &s->fx[c] : &s->bx[c], x);
        }
    }
    return true;
}

/* Which values the end phase reads summed over the micro-batches
 * (summed[id]); false after reporting a read the step cannot give. */
static bool sums(const ir_graph *g, const int *ph, bool *summed, diag *d)
{
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *u = g->nodes[i];
        if (ph[i] != IR_PHASE_END) continue;
        for (int k = 0; k < u->nsrc; k++) {
            const ir_node *x = view_base(g, u->src[k]);
            int p = ph[x->id];
            if (p == IR_PHASE_FWD) {
                diag_error(d, u->loc, "pipeline runtime: '%%%s' reads the forward value '%%%s' once per step",
                           u->name, x->name);
                return false;
            }
            if (p == IR_PHASE_BWD && x->mem != IR_MEM_GRAD && !(u->op == IR_OP_PP_SEND || u->op == IR_OP_ADD)) {
                diag_error(d, u->loc, "pipeline runtime: '%%%s' (%s) reads '%%%s', summed over the micro-batches; "
                           "only an add or a send may", u->name, ir_op_name(u->op), x->name);
                return false;
            }
            if (p == IR_PHASE_BWD && x->mem != IR_MEM_GRAD) summed[x->id] = true;
        }
    }
    return true;
}

static void pin_add(cg_step *s, cg_pin p)
{
    s->pin = grow(s->pin, s->npin, sizeof *s->pin);
    s->pin[s->npin++] = p;
}

/* The pins (values made once per step; the sums the end phase reads and
 * each micro-batch's value of them) and what each backward adds into. */
static bool pins_and_sums(cg_step *s, const ir_graph *g, const int *ph, diag *d)
{
    bool *summed = xcalloc((size_t)g->nnodes + 1, 1);
    bool ok = sums(g, ph, summed, d);
    for (int i = 0; ok && i < g->nnodes; i++) {
        const ir_node *u = g->nodes[i];
        int c = chunk_of(u);
        int64_t bytes = ir_shape_numel(&u->shape) * ir_storage_size(g, u);
        if (ph[i] == IR_PHASE_BEGIN && u->mem > IR_MEM_NONE && view_base(g, u) == u) {
            int64_t at = arena_take(s, bytes + 64);
            pin_add(s, (cg_pin){i, at, at, bytes, false});
        }
        bool grad = u->mem == IR_MEM_GRAD && ph[i] == IR_PHASE_BWD;
        if (!summed[i] && !grad) continue;
        cg_accum a = {i, -1, ir_shape_numel(&u->shape), ir_storage_dtype(g, u), -1}; /* summed as stored */
        if (summed[i]) {
            /* The micro-batch's value gets a buffer of its own too: in the
             * arena, memplan may reuse its place after its reader, which
             * runs only at the end of the step here. */
            int64_t n = a.count * ir_dtype_size(a.dtype);
            a.acc = arena_take(s, n + 64);
            pin_add(s, (cg_pin){i, arena_take(s, n + 64), a.acc, n, true});
        }
        s->acc[c] = grow(s->acc[c], s->nacc[c], sizeof **s->acc);
        s->acc[c][s->nacc[c]++] = a;
    }
    free(summed);
    return ok;
}

/* The gradient region, the inputs per chunk, the loss and the norm. */
static bool step_values(cg_step *s, const ir_graph *g, const int *ph, diag *d)
{
    int *ni = xcalloc((size_t)s->v, sizeof *ni);
    for (int c = 0; c < s->v; c++) s->inputs[c] = xmalloc(((size_t)g->nnodes + 1) * sizeof **s->inputs);
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *u = g->nodes[i];
        if (!on_rank(s, u)) continue;
        if (u->mem == IR_MEM_GRAD) {
            int64_t end = u->mem_offset + ir_shape_numel(&u->shape) * ir_storage_size(g, u);
            if (end > s->grad_bytes) s->grad_bytes = end;
            s->grad_t = ir_storage_dtype(g, u);
        }
        if (u->flags & IR_NF_INPUT) s->inputs[chunk_of(u)][ni[chunk_of(u)]++] = i;
    }
    for (int c = 0; c < s->v; c++) s->inputs[c][ni[c]] = -1;
    free(ni);
    const ir_node *loss = ir_graph_loss(g);
    s->loss = s->norm = -1;
    if (loss && ph[loss->id] == IR_PHASE_FWD) {
        s->loss = loss->id;
        s->loss_chunk = chunk_of(loss);
    }
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *u = g->nodes[i];
        if (ir_node_is_update(u) && ph[i] == IR_PHASE_OPT) s->norm = u->src[u->nsrc - 1]->id;
    }
    if (s->norm < 0) {
        diag_error_plain(d, "pipeline runtime: pipeline rank %d has no optimizer update", s->r);
        return false;
    }
    return true;
}

/* ---- gradient buckets ----------------------------------------------------------- */

static int cmp_range(const void *a, const void *b)
{
    const cg_range *x = a, *y = b;
    return (x->off > y->off) - (x->off < y->off);
}

/* The bucket of a node's place in the gradient buffer (a view: its
 * base's), -1 for none. */
static int bucket_of(const cg_step *s, const ir_graph *g, const ir_node *x)
{
    if (!x || x->mem != IR_MEM_GRAD) return -1;
    const ir_node *b = view_base(g, x);
    return b->bucket >= 0 && b->bucket < s->nbk ? b->bucket : -1;
}

/* This rank's buckets: their ranges of the gradient buffer, merged where
 * they touch; a bucket's gradients all come from one chunk's backward or
 * all from the end phase. */
static bool bucket_ranges(cg_step *s, const ir_graph *g, const int *ph, diag *d)
{
    size_t esz = (size_t)ir_dtype_size(s->grad_t);
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *u = g->nodes[i];
        if (u->mem == IR_MEM_GRAD && u->bucket >= s->nbk && on_rank(s, u)) s->nbk = u->bucket + 1;
    }
    s->bk = xcalloc((size_t)s->nbk + 1, sizeof *s->bk);
    for (int q = 0; q < s->nbk; q++) s->bk[q].chunk = -2, s->bk[q].ready = -1;
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *u = g->nodes[i];
        if (u->mem != IR_MEM_GRAD || view_base(g, u) != u || !on_rank(s, u)) continue;
        if (u->bucket < 0) {
            diag_error(d, u->loc, "pipeline runtime: the gradient '%%%s' has no bucket(...) (the schedule pass "
                       "sets them)", u->name);
            return false;
        }
        cg_bucket *b = &s->bk[u->bucket];
        int c = ph[i] == IR_PHASE_BWD ? chunk_of(u) : -1;
        if (b->chunk != -2 && b->chunk != c) {
            diag_error(d, u->loc, "pipeline runtime: bucket %d holds '%%%s' of %s and gradients of %s", u->bucket,
                       u->name, c < 0 ? "the end phase" : "a chunk's backward",
                       b->chunk < 0 ? "the end phase" : "another chunk");
            return false;
        }
        b->chunk = c;
        b->r = grow(b->r, b->nr, sizeof *b->r);
        b->r[b->nr++] = (cg_range){u->mem_offset / (int64_t)esz, ir_shape_numel(&u->shape)};
        b->elems += ir_shape_numel(&u->shape);
    }
    for (int q = 0; q < s->nbk; q++) {
        cg_bucket *b = &s->bk[q];
        if (b->chunk == -2) b->chunk = -1; /* no gradient here: nothing to do, after the end phase */
        qsort(b->r, (size_t)b->nr, sizeof *b->r, cmp_range);
        int k = 0;
        for (int j = 0; j < b->nr; j++) {
            if (k && b->r[k - 1].off + b->r[k - 1].n == b->r[j].off) b->r[k - 1].n += b->r[j].n;
            else b->r[k++] = b->r[j];
        }
        b->nr = k;
    }
    return true;
}

/* Instruction k of chunk c's backward names binding b: its bucket is
 * final no earlier (mixed: named by another chunk's backward too). */
static void note_ready(cg_step *s, const ir_graph *g, bool *mixed, cg_bind b, int c, int k)
{
    if (b.kind != CG_BIND_NODE || b.node < 0 || b.node >= g->nnodes) return;
    int q = bucket_of(s, g, g->nodes[b.node]);
    if (q < 0) return;
    if (s->bk[q].chunk != c) mixed[q] = true;
    else if (k > s->bk[q].ready) s->bk[q].ready = k;
}

/* Where each bucket is final: the last instruction of its chunk's backward
 * that names one of its gradients (a kernel argument, a GEMM operand, a
 * collective's buffer); after the end phase for a gradient the end phase
 * makes or one two chunks name. Then per chunk its buckets by ready point,
 * and which of its sums belong to them. */
static void bucket_ready(cg_step *s, const ir_graph *g, const cg_program *prog)
{
    bool *mixed = xcalloc((size_t)s->nbk + 1, 1);
    for (int c = 0; c < s->v; c++)
        for (int k = 0; k < s->bwd[c].n; k++) {
            const cg_instr *in = &prog->instrs[s->bwd[c].ins[k]];
            if (in->kind == CG_KERNEL)
                for (int a = 0; a < prog->kernels[in->kernel]->nargs; a++)
                    note_ready(s, g, mixed, prog->binds[in->kernel][a], c, k);
            else if (in->kind == CG_GEMM) {
                const cg_gemm *m = &in->gemm;
                note_ready(s, g, mixed, m->a, c, k), note_ready(s, g, mixed, m->b, c, k);
                note_ready(s, g, mixed, m->c, c, k);
                if (m->epilogue != CG_EPI_NONE)
                    note_ready(s, g, mixed, m->bias, c, k), note_ready(s, g, mixed, m->aux, c, k);
            } else note_ready(s, g, mixed, in->comm.src, c, k), note_ready(s, g, mixed, in->comm.dst, c, k);
        }
    for (int q = 0; q < s->nbk; q++)
        if (mixed[q]) s->bk[q].chunk = -1;
    free(mixed);
    for (int c = 0; c < s->v; c++) {
        int n = 0;
        s->order[c] = xmalloc(((size_t)s->nbk + 1) * sizeof **s->order);
        for (int q = 0; q < s->nbk; q++)
            if (s->bk[q].chunk == c) {
                if (s->bk[q].ready < 0) s->bk[q].ready = s->bwd[c].n - 1;
                int j = n++;
                while (j > 0 && s->bk[s->order[c][j - 1]].ready > s->bk[q].ready) {
                    s->order[c][j] = s->order[c][j - 1];
                    j--;
                }
                s->order[c][j] = q;
            }
        s->order[c][n] = -1;
        for (int j = 0; s->overlap_grads && j < s->nacc[c]; j++) {
            cg_accum *a = &s->acc[c][j];
            int q = a->acc >= 0 ? -1 : bucket_of(s, g, g->nodes[a->node]);
            if (q >= 0 && s->bk[q].chunk == c) a->bucket = q;
        }
    }
}

/* ---- slots ------------------------------------------------------------------- */

/* A receive paired with the send before it takes its slot while the
 * send's micro-batch still holds one. */
static bool paired_recv(const cg_step *s, const pipe_instr *ins, int i)
{
    return s->paired && i > 0 && (ins[i].op == PIPE_RECV_FWD || ins[i].op == PIPE_RECV_BWD) &&
           (ins[i - 1].op == PIPE_SEND_FWD || ins[i - 1].op == PIPE_SEND_BWD);
}

/* The most micro-batches each chunk holds at once under the rank's list
 * (from the first instruction naming (chunk, micro-batch) to the last),
 * and the slots' buffers. last_use[c*m + j]: the last instruction of
 * (c, j). */
static void slots(cg_step *s, const ir_graph *g, const pipe_schedule *sc, int *last_use)
{
    const pipe_instr *ins = sc->ins[s->r];
    int len = sc->len[s->r], v = s->v, m = s->m;
    int *first = xmalloc((size_t)v * (size_t)m * sizeof *first);
    for (int k = 0; k < v * m; k++) last_use[k] = first[k] = -1;
    for (int i = 0; i < len; i++) {
        if (ins[i].mb < 0) continue;
        int k = ins[i].chunk * m + ins[i].mb;
        if (first[k] < 0) first[k] = paired_recv(s, ins, i) ? i - 1 : i;
        last_use[k] = i;
    }
    for (int c = 0; c < v; c++) {
        int live = 0;
        for (int i = 0; i < len; i++) {
            for (int j = 0; j < m; j++) live += first[c * m + j] == i;
            if (live > s->nslot[c]) s->nslot[c] = live;
            for (int j = 0; j < m; j++) live -= last_use[c * m + j] == i;
        }
        if (s->nslot[c] < 1) s->nslot[c] = 1;
        s->slot0[c] = s->nslots;
        s->nslots += s->nslot[c];
    }
    free(first);
    if (m > 1 && s->grad_bytes > 0) s->scratch = arena_take(s, s->grad_bytes);
    int64_t act = g->mem_size[IR_MEM_STASH], inp = g->mem_size[IR_MEM_INPUT];
    s->slot = xcalloc((size_t)s->nslots, sizeof *s->slot);
    for (int c = 0; c < v; c++)
        for (int k = 0; k < s->nslot[c]; k++) {
            cg_slot *sl = &s->slot[s->slot0[c] + k];
            sl->chunk = c;
            /* The first slot of chunk 0 uses the executor's own stash and inputs. */
            sl->stash = c == 0 && k == 0 ? -1 : arena_take(s, round64(act) + 64);
            sl->input = c == 0 && k == 0 ? -1 : arena_take(s, round64(inp) + 64);
        }
}

/* ---- the program ------------------------------------------------------------- */

static cg_sinstr *emit(cg_step *s, cg_sop op, int sched)
{
    s->ins = grow(s->ins, s->nins, sizeof *s->ins);
    cg_sinstr *in = &s->ins[s->nins++];
    *in = (cg_sinstr){.op = op, .chunk = -1, .mb = -1, .slot = -1, .peer = -1, .chunk2 = -1, .mb2 = -1,
                      .slot2 = -1, .peer2 = -1, .sched = sched, .sched2 = -1};
    return in;
}

/* The slot micro-batch (c, mb) binds: its own, or the last freed one of
 * its chunk (free[c] is a stack of nfree[c]). */
static int slot_get(cg_step *s, int **slot_of, int **free_, int *nfree, int c, int mb)
{
    int *k = &slot_of[c][mb];
    if (*k < 0) {
        TGC_ASSERT(nfree[c] > 0);
        *k = free_[c][--nfree[c]];
    }
    return *k;
}

static bool is_send(int op) { return op == PIPE_SEND_FWD || op == PIPE_SEND_BWD; }
static bool is_recv(int op) { return op == PIPE_RECV_FWD || op == PIPE_RECV_BWD; }

/* The step-level instructions a schedule instruction asks for: the end
 * phase at the first that needs it, the reduction at the first that
 * needs the reduced gradients, the update at the optimizer step. */
static void emit_step_level(cg_step *s, const pipe_instr *in, int i, bool *end_done, bool *dp_done)
{
    int before = s->nins;
    if (in->op == PIPE_SEND_WGRAD || in->op == PIPE_RECV_WGRAD || in->op == PIPE_ALLREDUCE_DP ||
        in->op == PIPE_OPTIMIZER) {
        if (!*end_done) emit(s, CG_SOP_END, i), *end_done = true;
        if (!*dp_done && (in->op == PIPE_ALLREDUCE_DP || in->op == PIPE_OPTIMIZER))
            emit(s, CG_SOP_REDUCE, i), *dp_done = true;
        if (in->op == PIPE_OPTIMIZER) emit(s, CG_SOP_OPT, i);
    }
    if (s->nins == before) emit(s, CG_SOP_MARK, i); /* the begin phase sent the weights, or the end phase ran */
}

/* The step: rank r's schedule list with every slot, first and last
 * backward and step-level phase decided. */
static void program(cg_step *s, const pipe_schedule *sc, const int *last_use)
{
    const pipe_instr *ins = sc->ins[s->r];
    int len = sc->len[s->r], v = s->v, m = s->m;
    int **slot_of = xcalloc((size_t)v, sizeof *slot_of), **free_ = xcalloc((size_t)v, sizeof *free_);
    int *nfree = xcalloc((size_t)v, sizeof *nfree), *bwd_done = xcalloc((size_t)v, sizeof *bwd_done);
    for (int c = 0; c < v; c++) {
        slot_of[c] = xmalloc((size_t)m * sizeof **slot_of);
        free_[c] = xmalloc((size_t)s->nslot[c] * sizeof **free_);
        for (int j = 0; j < m; j++) slot_of[c][j] = -1;
        nfree[c] = s->nslot[c];
        for (int k = 0; k < s->nslot[c]; k++) free_[c][k] = s->slot0[c] + s->nslot[c] - 1 - k;
    }
    bool end_done = false, dp_done = false;
    emit(s, CG_SOP_BEGIN, -1);
    for (int i = 0; i < len; i++) {
        const pipe_instr *in = &ins[i], *nx = i + 1 < len ? &ins[i + 1] : NULL;
        bool pair = s->paired && is_send(in->op) && nx && is_recv(nx->op);
        int c = in->chunk, slot = in->mb >= 0 ? slot_get(s, slot_of, free_, nfree, c, in->mb) : -1;
        cg_sinstr *x = NULL;
        switch (in->op) {
        case PIPE_RECV_FWD: case PIPE_SEND_FWD: case PIPE_RECV_BWD: case PIPE_SEND_BWD:
            x = emit(s, pair ? CG_SOP_SENDRECV : is_send(in->op) ? CG_SOP_SEND : CG_SOP_RECV, i);
            x->bwd = in->op == PIPE_RECV_BWD || in->op == PIPE_SEND_BWD;
            x->peer = in->peer;
            if (pair) {
                x->chunk2 = nx->chunk, x->mb2 = nx->mb, x->peer2 = nx->peer, x->sched2 = i + 1;
                x->bwd2 = nx->op == PIPE_RECV_BWD;
                x->slot2 = slot_get(s, slot_of, free_, nfree, nx->chunk, nx->mb);
            }
            break;
        case PIPE_FWD: x = emit(s, CG_SOP_FWD, i); break;
        case PIPE_BWD:
            x = emit(s, CG_SOP_BWD, i);
            x->first = bwd_done[c] == 0;
            x->last = ++bwd_done[c] == m;
            break;
        default: emit_step_level(s, in, i, &end_done, &dp_done); break;
        }
        if (x) x->chunk = c, x->mb = in->mb, x->slot = slot;
        /* A micro-batch's slot is free after its last instruction. */
        for (int k = i; k <= i + pair; k++) {
            const pipe_instr *u = &ins[k];
            if (u->mb >= 0 && last_use[u->chunk * m + u->mb] == k) {
                free_[u->chunk][nfree[u->chunk]++] = slot_of[u->chunk][u->mb];
                slot_of[u->chunk][u->mb] = -1;
            }
        }
        i += pair;
    }
    emit(s, CG_SOP_LOSS, -1);
    for (int c = 0; c < v; c++) free(slot_of[c]), free(free_[c]);
    free(slot_of), free(free_), free(nfree), free(bwd_done);
}

/* An evaluation of one global batch: the begin phase, then per
 * micro-batch and chunk its receives, its forward and its sends, on the
 * chunk's first slot (a chain: each receive's sender has run). */
static void eval_program(cg_step *s)
{
    cg_sinstr *keep = s->ins;
    int nkeep = s->nins;
    s->ins = NULL, s->nins = 0;
    emit(s, CG_SOP_BEGIN, -1);
    for (int j = 0; j < s->m; j++)
        for (int c = 0; c < s->v; c++) {
            static const cg_sop ops[3] = {CG_SOP_RECV, CG_SOP_FWD, CG_SOP_SEND};
            for (int k = 0; k < 3; k++) {
                cg_sinstr *x = emit(s, ops[k], -1);
                x->chunk = c, x->mb = j, x->slot = s->slot0[c];
            }
        }
    s->eval = s->ins, s->neval = s->nins;
    s->ins = keep, s->nins = nkeep;
}

cg_step *cg_step_build(const ir_graph *g, const cg_program *prog, const cg_step_opts *o, diag *d)
{
    const pipe_schedule *sc = o->sched;
    cg_step *s = xcalloc(1, sizeof *s);
    *s = (cg_step){.sched = sc, .r = o->pp_rank, .p = sc->p, .v = sc->v, .m = sc->m, .d = o->dp_size > 0 ? o->dp_size : 1,
                   .paired = o->paired, .dist_opt = o->dist_opt, .scratch = -1, .loss = -1, .norm = -1};
    int v = s->v;
    s->fwd = xcalloc((size_t)v, sizeof *s->fwd), s->bwd = xcalloc((size_t)v, sizeof *s->bwd);
    s->fx = xcalloc((size_t)v, sizeof *s->fx), s->bx = xcalloc((size_t)v, sizeof *s->bx);
    s->acc = xcalloc((size_t)v, sizeof *s->acc), s->nacc = xcalloc((size_t)v, sizeof *s->nacc);
    s->inputs = xcalloc((size_t)v, sizeof *s->inputs), s->order = xcalloc((size_t)v, sizeof *s->order);
    s->nslot = xcalloc((size_t)v, sizeof *s->nslot), s->slot0 = xcalloc((size_t)v, sizeof *s->slot0);
    int *ph = phases(g, s, d);
    bool ok = ph && segments(s, g, prog, ph, d) && pins_and_sums(s, g, ph, d) && step_values(s, g, ph, d);
    if (ok && prog) {
        ok = bucket_ranges(s, g, ph, d);
        s->overlap_grads = o->overlap_grads && s->d > 1 && s->nbk > 0;
        if (ok) bucket_ready(s, g, prog);
    }
    if (ok) {
        int *last_use = xmalloc((size_t)v * (size_t)s->m * sizeof *last_use);
        slots(s, g, sc, last_use);
        program(s, sc, last_use);
        eval_program(s);
        free(last_use);
    }
    free(ph);
    if (!ok) {
        cg_step_free(s);
        return NULL;
    }
    return s;
}

void cg_step_free(cg_step *s)
{
    if (!s) return;
    for (int c = 0; c < s->v; c++) {
        free(s->fwd[c].ins), free(s->bwd[c].ins), free(s->fx[c].x), free(s->bx[c].x);
        free(s->acc[c]), free(s->inputs[c]), free(s->order[c]);
    }
    for (int q = 0; s->bk && q < s->nbk; q++) free(s->bk[q].r);
    free(s->fwd), free(s->bwd), free(s->fx), free(s->bx), free(s->acc), free(s->nacc), free(s->inputs);
    free(s->order), free(s->bk), free(s->nslot), free(s->slot0), free(s->slot), free(s->pin);
    free(s->begin.ins), free(s->end.ins), free(s->opt.ins), free(s->ins), free(s->eval);
    free(s);
}

/* ---- printing ------------------------------------------------------------------ */

static const char *const sop_names[CG_SOP_COUNT] = {
    [CG_SOP_BEGIN] = "begin", [CG_SOP_RECV] = "recv", [CG_SOP_SEND] = "send", [CG_SOP_SENDRECV] = "send+recv",
    [CG_SOP_FWD] = "fwd", [CG_SOP_BWD] = "bwd", [CG_SOP_END] = "end", [CG_SOP_REDUCE] = "reduce",
    [CG_SOP_OPT] = "optimizer", [CG_SOP_LOSS] = "loss", [CG_SOP_MARK] = "mark"};

void cg_sinstr_name(const cg_step *s, const cg_sinstr *in, char *buf, size_t n, const char **cat)
{
    static const char *const cats[PIPE_OP_COUNT] = {
        [PIPE_FWD] = "forward", [PIPE_BWD] = "backward", [PIPE_RECV_FWD] = "recv", [PIPE_SEND_FWD] = "send",
        [PIPE_RECV_BWD] = "recv", [PIPE_SEND_BWD] = "send", [PIPE_SEND_WEIGHT] = "send", [PIPE_RECV_WEIGHT] = "recv",
        [PIPE_SEND_WGRAD] = "send", [PIPE_RECV_WGRAD] = "recv", [PIPE_ALLREDUCE_DP] = "all-reduce",
        [PIPE_OPTIMIZER] = "optimizer"};
    *cat = sop_names[in->op];
    if (in->sched < 0) {
        snprintf(buf, n, "%s", sop_names[in->op]);
        return;
    }
    const pipe_instr *pi = &s->sched->ins[s->r][in->sched];
    *cat = cats[pi->op];
    if (pi->op == PIPE_FWD || pi->op == PIPE_BWD) snprintf(buf, n, "%c%d.%d", pi->op == PIPE_FWD ? 'F' : 'B', pi->chunk, pi->mb);
    else pipe_instr_str(s->sched, pi, buf, n);
    if (in->sched2 >= 0) {
        size_t k = strlen(buf);
        char second[64];
        pipe_instr_str(s->sched, &s->sched->ins[s->r][in->sched2], second, sizeof second);
        snprintf(buf + k, n - k, " + %s", second);
        *cat = "send+recv";
    }
}

static const char *plural(int64_t n) { return n == 1 ? "" : "s"; }

static void print_off(strbuf *b, const char *what, int64_t off, int64_t bytes)
{
    if (off < 0) sb_printf(b, "%s the executor's", what);
    else sb_printf(b, "%s @%lld (%lld B)", what, (long long)off, (long long)bytes);
}

/* The step arena's buffers and the buckets, as comment lines. */
static void print_buffers(strbuf *b, const ir_graph *g, const cg_step *s)
{
    sb_printf(b, "# step arena: %lld B\n", (long long)s->arena_bytes);
    int64_t act = round64(g->mem_size[IR_MEM_STASH]) + 64, inp = round64(g->mem_size[IR_MEM_INPUT]) + 64;
    for (int k = 0; k < s->nslots; k++) {
        sb_printf(b, "#   slot %d (chunk %d):", k, s->slot[k].chunk);
        print_off(b, " stash", s->slot[k].stash, act);
        print_off(b, ", input", s->slot[k].input, inp);
        sb_puts(b, "\n");
    }
    if (s->scratch >= 0) {
        print_off(b, "#   gradients of micro-batches j > 0:", s->scratch, s->grad_bytes);
        sb_puts(b, "\n");
    }
    for (int k = 0; k < s->npin; k++) {
        const cg_pin *p = &s->pin[k];
        if (p->summed)
            sb_printf(b, "#   %%%s summed over the micro-batches: each @%lld, the sum @%lld (%lld B)\n",
                      g->nodes[p->node]->name, (long long)p->mb, (long long)p->step, (long long)p->bytes);
        else
            sb_printf(b, "#   %%%s made once per step @%lld (%lld B)\n", g->nodes[p->node]->name, (long long)p->mb,
                      (long long)p->bytes);
    }
    for (int q = 0; q < s->nbk; q++) {
        const cg_bucket *k = &s->bk[q];
        sb_printf(b, "# bucket %d: %lld elements in %d range%s, ", q, (long long)k->elems, k->nr, plural(k->nr));
        if (k->chunk < 0) sb_puts(b, "final after the end phase\n");
        else sb_printf(b, "final after instruction %d of chunk %d's backward (of %d)\n", k->ready, k->chunk,
                       s->bwd[k->chunk].n);
    }
}

static void print_instr(strbuf *b, const ir_graph *g, const cg_step *s, const cg_sinstr *in)
{
    static const char *dir[2] = {"fwd", "bwd"};
    switch (in->op) {
    case CG_SOP_BEGIN: sb_printf(b, "begin: %d instruction%s", s->begin.n, plural(s->begin.n)); break;
    case CG_SOP_RECV: case CG_SOP_SEND:
        if (in->peer < 0) sb_printf(b, "%s-fwd %d.%d: every transfer, slot %d", sop_names[in->op], in->chunk, in->mb, in->slot);
        else sb_printf(b, "%s-%s %d.%d %s s%d, slot %d", sop_names[in->op], dir[in->bwd], in->chunk, in->mb,
                       in->op == CG_SOP_SEND ? "->" : "<-", in->peer, in->slot);
        break;
    case CG_SOP_SENDRECV:
        sb_printf(b, "send-%s %d.%d -> s%d, slot %d + recv-%s %d.%d <- s%d, slot %d", dir[in->bwd], in->chunk, in->mb,
                  in->peer, in->slot, dir[in->bwd2], in->chunk2, in->mb2, in->peer2, in->slot2);
        break;
    case CG_SOP_FWD:
        sb_printf(b, "fwd %d.%d, slot %d: %d instruction%s%s", in->chunk, in->mb, in->slot, s->fwd[in->chunk].n,
                  plural(s->fwd[in->chunk].n), s->loss >= 0 && in->chunk == s->loss_chunk ? ", + loss" : "");
        break;
    case CG_SOP_BWD:
        sb_printf(b, "bwd %d.%d, slot %d: %d instruction%s, %s %d sum%s", in->chunk, in->mb, in->slot,
                  s->bwd[in->chunk].n, plural(s->bwd[in->chunk].n), in->first ? "assigns" : "adds", s->nacc[in->chunk],
                  plural(s->nacc[in->chunk]));
        if (in->last && s->overlap_grads)
            for (const int *q = s->order[in->chunk]; *q >= 0; q++)
                sb_printf(b, "%s bucket %d after %d", q == s->order[in->chunk] ? "; launches" : ",", *q, s->bk[*q].ready);
        break;
    case CG_SOP_END: sb_printf(b, "end: %d instruction%s", s->end.n, plural(s->end.n)); break;
    case CG_SOP_REDUCE:
        sb_printf(b, "reduce: %d bucket%s, %s over %d replica%s, x 1/%d", s->nbk, plural(s->nbk),
                  s->d < 2 ? "no collective" : s->dist_opt ? "reduce-scatter to the shards" : "all-reduce", s->d,
                  plural(s->d), s->m * s->d);
        for (int q = 0, k = 0; s->overlap_grads && q < s->nbk; q++)
            if (s->bk[q].chunk < 0) sb_printf(b, "%s%d", k++ ? ", " : "; launches the end phase's bucket ", q);
        if (s->overlap_grads) sb_puts(b, "; waits for every launched bucket");
        break;
    case CG_SOP_OPT:
        sb_printf(b, "optimizer: %d instruction%s%s, norm %%%s", s->opt.n, plural(s->opt.n),
                  s->dist_opt && s->d > 1 ? ", all-gather of the parameter shards" : "", g->nodes[s->norm]->name);
        break;
    case CG_SOP_LOSS:
        if (s->loss < 0) sb_puts(b, "loss: none on this rank");
        else sb_printf(b, "loss: mean of %%%s over %d micro-batch%s x %d replica%s", g->nodes[s->loss]->name, s->m,
                       s->m == 1 ? "" : "es", s->d, plural(s->d));
        break;
    case CG_SOP_MARK: case CG_SOP_COUNT: sb_puts(b, "mark"); break;
    }
}

char *cg_step_print(const ir_graph *g, const cg_step *s)
{
    strbuf b;
    sb_init(&b);
    sb_printf(&b, "# rank program: pipeline rank %d of %d, %s schedule, %d micro-batch%s, %d chunk%s, %d replica%s\n",
              s->r, s->p, pipe_kind_name(s->sched->kind), s->m, s->m == 1 ? "" : "es", s->v, plural(s->v), s->d,
              plural(s->d));
    print_buffers(&b, g, s);
    for (int k = 0; k < 2; k++) {
        sb_puts(&b, k ? "# evaluation (one global batch):\n" : "# step:\n");
        const cg_sinstr *ins = k ? s->eval : s->ins;
        for (int i = 0; i < (k ? s->neval : s->nins); i++) {
            char name[160];
            const char *cat;
            sb_printf(&b, "%4d  ", i);
            print_instr(&b, g, s, &ins[i]);
            if (ins[i].sched >= 0) {
                cg_sinstr_name(s, &ins[i], name, sizeof name, &cat);
                sb_printf(&b, "    ; %s", name);
            }
            sb_puts(&b, "\n");
        }
    }
    return b.s;
}

char *cg_step_dump(const ir_graph *g, const pass_options *po, int64_t rank, bool overlap_grads, diag *d)
{
    int p, v;
    ir_graph_pp_dims(g, &p, &v);
    int64_t t = po->tp > 0 ? po->tp : 1, dp = po->dp > 0 ? po->dp : 1, n = t * dp * p;
    if (rank < 0 || rank >= n) {
        diag_error_plain(d, "--rank %lld: the plan has %lld ranks (t=%lld x d=%lld x p=%d), numbered 0 to %lld",
                         (long long)rank, (long long)n, (long long)t, (long long)dp, p, (long long)n - 1);
        return NULL;
    }
    if (!ir_graph_pass_ran(g, "schedule") || !ir_graph_pass_ran(g, "memplan")) {
        diag_error_plain(d, "--rank: a rank's program is made from the graph after the schedule and memplan passes; "
                         "this one has not been through %s", ir_graph_pass_ran(g, "schedule") ? "memplan" : "schedule");
        return NULL;
    }
    /* Megatron's order: tp fastest, then dp, then pp (runtime/comm/comm.h). */
    int pp_rank = (int)(rank / (t * dp));
    pipe_schedule sc;
    if (!pipe_schedule_from_graph(g, po, &sc, d)) return NULL;
    cg_program *prog = cg_build(g, d);
    char *out = NULL;
    if (prog) {
        cg_step_opts o = {.sched = &sc, .pp_rank = pp_rank, .dp_size = (int)dp, .overlap_grads = overlap_grads,
                          .dist_opt = po->dist_opt};
        cg_step *s = cg_step_build(g, prog, &o, d);
        if (s) {
            char *body = cg_step_print(g, s);
            strbuf b;
            sb_init(&b);
            sb_printf(&b, "# rank %lld: tp %lld, dp %lld, pp %d\n", (long long)rank, (long long)(rank % t),
                      (long long)(rank / t % dp), pp_rank);
            sb_puts(&b, body);
            free(body);
            out = b.s;
        }
        cg_step_free(s);
        cg_program_free(prog);
    }
    pipe_schedule_free(&sc);
    return out;
}
