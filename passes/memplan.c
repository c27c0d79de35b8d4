/* The static memory plan (CONVENTIONS 15): one flat buffer per kind.
 *
 *  param  every parameter, by group (equal lr_mult and wd_mult), decayed
 *         groups first (so the optimizer tells groups apart by index
 *         comparisons), each 64-byte aligned;
 *  grad   the final gradient of each parameter (an operand of the
 *         optimizer node), at the same offset as its parameter, so the
 *         optimizer runs one loop over both buffers;
 *  input  the data inputs, fed each step;
 *  act    every other computed value, placed by liveness over the schedule
 *         (node order): a buffer is reused once its last reader ran, best
 *         fit among the free blocks; reshapes are views of their operand.
 *         A fused kernel (a run of nodes with one fuse(N), ir.h) runs at
 *         its last node, so that is where its members read; the values
 *         that never leave it get no buffer at all.
 *
 * A graph split into pipeline stages is planned stage by stage, each from
 * offset 0 (a stage's rank holds only its buffers; the sizes in the header
 * are the largest stage's). A pp_send has no buffer: it sends its operand's.
 * There a fifth kind,
 *  stash  the forward values the backward reads (and what is sent or
 *         received), which the runtime holds once per micro-batch in flight,
 * is planned apart from the act arena, which the micro-batches share.
 * A decoding graph (the kvcache pass) has a sixth,
 *  cache  its KV caches (kv_cache), in node order: persistent across the
 *         program's runs (each run writes its positions and reads all),
 *         so never reused.
 *
 * The offsets are printed in the IR (`mem(act, 4096)`) and the sizes in the
 * header, so the plan itself is golden-tested. */
#include <stdlib.h>
#include <string.h>

#include "pass.h"
#include "support/util.h"

#define MEM_ALIGN 64
/* The CUDA MAP kernels move 16-byte vectors where their arguments are
 * 16-byte aligned (codegen/render_cuda.c): every buffer starts so. */
_Static_assert(MEM_ALIGN % 16 == 0, "buffers must be 16-byte aligned for the vector loads");

static int64_t align_up(int64_t v) { return (v + MEM_ALIGN - 1) & ~(int64_t)(MEM_ALIGN - 1); }
/* Every result of a multi-result op (ir/results.def) is in its storage,
 * each in its storage dtype (16 bits under mixed precision, ir.h). */
static int64_t bytes_of(const ir_graph *g, const ir_node *n) { return align_up(ir_node_storage_bytes(g, n)); }

/* A reshape and a result (of a multi-result op) are views of their
 * operand's storage. */
static bool view_op(const ir_node *n) { return n->op == IR_OP_RESHAPE || n->op == IR_OP_RESULT; }

static bool is_view(const ir_node *n) { return view_op(n) && n->mem == IR_MEM_NONE; }

/* The node whose buffer n shares (following views), or n itself; *delta
 * (may be NULL): n's byte offset in it. */
static const ir_node *base_at(const ir_graph *g, const ir_node *n, int64_t *delta)
{
    int64_t d = 0;
    while (is_view(n)) {
        if (n->op == IR_OP_RESULT) d += ir_result_offset(g, n->src[0], (int)ir_attr_int(n, "index"));
        n = n->src[0];
    }
    if (delta) *delta = d;
    return n;
}

static const ir_node *base_of(const ir_graph *g, const ir_node *n) { return base_at(g, n, NULL); }

/* A parameter's group: its multipliers of the scheduled learning rate and
 * weight decay (0 for no_decay), as the update kernel reads them. */
static void param_group(const ir_node *n, double *lr, double *wd)
{
    *lr = ir_attr_float(n, "lr_mult");
    *wd = (n->flags & IR_NF_NO_DECAY) ? 0.0 : ir_attr_float(n, "wd_mult");
}

/* Parameters group by group, so the optimizer tells groups apart by index
 * comparisons: decayed groups first, then those without weight decay; the
 * groups in the order of their first parameter, parameters in graph order. */
/* Whether n belongs to the pipeline stage being planned (every node when
 * the graph has no stages). */
static bool on_stage(const ir_node *n, int stage) { return stage < 0 || n->stage == stage; }

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static void place_params(ir_graph *g, int stage)
{
    int np = 0;
    ir_node **ps = xmalloc((size_t)(g->nnodes + 1) * sizeof *ps);
    int *leader = xmalloc((size_t)(g->nnodes + 1) * sizeof *leader);
    for (int i = 0; i < g->nnodes; i++)
        if ((g->nodes[i]->flags & IR_NF_PARAM) && on_stage(g->nodes[i], stage)) ps[np++] = g->nodes[i];
    for (int i = 0; i < np; i++) {
        double lr, wd, lr2, wd2;
        param_group(ps[i], &lr, &wd);
        leader[i] = i;
        for (int j = 0; j < i && leader[i] == i; j++) {
            param_group(ps[j], &lr2, &wd2);
            if (lr == lr2 && wd == wd2) leader[i] = leader[j];
        }
    }
    int64_t off = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int l = 0; l < np; l++) {
            double lr, wd;
            param_group(ps[l], &lr, &wd);
            if (leader[l] != l || (wd == 0.0) != (pass == 1)) continue;
            for (int i = l; i < np; i++) {
                if (leader[i] != l) continue;
                ps[i]->mem = IR_MEM_PARAM;
                ps[i]->mem_offset = off;
                off += bytes_of(g, ps[i]);
            }
        }
    free(ps);
    free(leader);
    g->mem_size[IR_MEM_PARAM] = max64(g->mem_size[IR_MEM_PARAM], off);
    off = 0;
    for (int i = 0; i < g->nnodes; i++) {
        ir_node *n = g->nodes[i];
        if (!(n->flags & IR_NF_INPUT) || !on_stage(n, stage)) continue;
        n->mem = IR_MEM_INPUT;
        n->mem_offset = off;
        off += bytes_of(g, n);
    }
    g->mem_size[IR_MEM_INPUT] = max64(g->mem_size[IR_MEM_INPUT], off);
}

static void place_grads(ir_graph *g)
{
    g->mem_size[IR_MEM_GRAD] = 0;
    for (int i = 0; i < g->nnodes; i++) {
        ir_node *u = g->nodes[i];
        if (!ir_node_is_update(u)) continue;
        int k = u->nsrc / 2;
        for (int j = 0; j < k; j++) {
            ir_node *gr = u->src[k + j];
            gr->mem = IR_MEM_GRAD;
            gr->mem_offset = u->src[j]->mem_offset;
        }
        g->mem_size[IR_MEM_GRAD] = g->mem_size[IR_MEM_PARAM];
    }
}

/* ---- activations: liveness + best fit ------------------------------------- */

typedef struct block { int64_t off, size; } block;
typedef struct freelist { block *b; int n, cap; } freelist;

static void fl_insert(freelist *f, int64_t off, int64_t size)
{
    if (f->n == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 64;
        f->b = xrealloc(f->b, (size_t)f->cap * sizeof *f->b);
    }
    int i = f->n;
    while (i > 0 && f->b[i - 1].off > off) { f->b[i] = f->b[i - 1]; i--; }
    f->b[i] = (block){off, size};
    f->n++;
    /* Coalesce with the neighbours. */
    if (i + 1 < f->n && f->b[i].off + f->b[i].size == f->b[i + 1].off) {
        f->b[i].size += f->b[i + 1].size;
        memmove(&f->b[i + 1], &f->b[i + 2], (size_t)(f->n - i - 2) * sizeof *f->b);
        f->n--;
    }
    if (i > 0 && f->b[i - 1].off + f->b[i - 1].size == f->b[i].off) {
        f->b[i - 1].size += f->b[i].size;
        memmove(&f->b[i], &f->b[i + 1], (size_t)(f->n - i - 1) * sizeof *f->b);
        f->n--;
    }
}

/* Best fit; a block at the end of the arena may grow it. */
static int64_t fl_take(freelist *f, int64_t size, int64_t *top)
{
    int best = -1;
    for (int i = 0; i < f->n; i++)
        if (f->b[i].size >= size && (best < 0 || f->b[i].size < f->b[best].size)) best = i;
    if (best < 0 && f->n && f->b[f->n - 1].off + f->b[f->n - 1].size == *top) best = f->n - 1;
    if (best < 0) {
        int64_t off = *top;
        *top += size;
        return off;
    }
    block *b = &f->b[best];
    int64_t off = b->off;
    if (b->size >= size) {
        b->off += size;
        b->size -= size;
    } else { /* the last block, extended */
        *top = b->off + size;
        b->size = 0;
    }
    if (b->size == 0) {
        memmove(b, b + 1, (size_t)(f->n - best - 1) * sizeof *b);
        f->n--;
    }
    return off;
}

/* Liveness: last[i], the step after which node i's storage is free (n:
 * never), reading through views to their base; a read inside a fused run
 * lasts to the run's end. own[i]: a view that gets storage of its own. */
static void act_lifetimes(const ir_graph *g, int stage, const int *run_end, int *last, bool *own)
{
    int n = g->nnodes;
    /* A result sent at the end of the step (a tied weight's gradient from
     * lm_head_ce_back, summed over the micro-batches) gets a buffer of its
     * own in the stash, copied out of its operand's storage: the pipeline
     * runtime sums and pins whole values, not views. */
    for (int i = 0; stage >= 0 && i < n; i++) {
        const ir_node *u = g->nodes[i];
        if (u->op == IR_OP_PP_SEND && u->src[0]->op == IR_OP_RESULT && is_view(u->src[0])) own[u->src[0]->id] = true;
    }
    for (int i = 0; i < n; i++) last[i] = i;
    for (int i = 0; i < n; i++) {
        const ir_node *u = g->nodes[i];
        bool keep = u->flags & (IR_NF_LOSS | IR_NF_OUTPUT);
        const ir_node *self = own[i] ? u : base_of(g, u);
        if (keep) last[self->id] = n;
        for (int s = 0; s < u->nsrc; s++) {
            const ir_node *b = own[u->src[s]->id] ? u->src[s] : base_of(g, u->src[s]);
            if (last[b->id] < run_end[i]) last[b->id] = run_end[i];
        }
        if (self != u && last[self->id] < last[u->id]) last[self->id] = last[u->id];
    }
}

static void place_acts(ir_graph *g, int stage)
{
    int n = g->nnodes;
    int *last = xmalloc((size_t)n * sizeof *last), *run_end = xmalloc(((size_t)n + 1) * sizeof *run_end);
    bool *written = xmalloc(((size_t)n + 1) * sizeof *written), *own = xcalloc((size_t)n + 1, sizeof *own);
    ir_graph_fuse_runs(g, run_end, written);
    act_lifetimes(g, stage, run_end, last, own);
    /* A pipeline stage (stage >= 0) keeps several micro-batches in flight:
     * the values a micro-batch's backward reads from its forward (defined
     * up to the loss, read after it), and those sent or received, go to the
     * stash, which the runtime holds once per micro-batch in flight; the
     * rest share one arena. */
    bool *kept = xcalloc((size_t)n + 1, sizeof *kept);
    const ir_node *loss = ir_graph_loss(g);
    int boundary = loss ? loss->id : n;
    for (int i = 0; stage >= 0 && i < n; i++) {
        const ir_node *u = g->nodes[i];
        kept[i] |= i <= boundary && last[i] > boundary;
        kept[i] |= u->op == IR_OP_PP_RECV;
        if (u->op == IR_OP_PP_SEND) kept[base_of(g, u->src[0])->id] = true;
        if (own[i]) kept[i] = true;
    }
    /* Bucket the frees by the step after which they happen. */
    int *order = xmalloc((size_t)n * sizeof *order), *head = xmalloc((size_t)(n + 1) * sizeof *head);
    for (int i = 0; i <= n; i++) head[i] = -1;
    freelist fl[2] = {{0}, {0}};
    int64_t top[2] = {0, 0};
    for (int i = 0; i < n; i++) {
        ir_node *v = g->nodes[i];
        if (!on_stage(v, stage)) continue;
        /* A pp_send sends its operand's buffer and has none of its own. */
        if (v->mem == IR_MEM_NONE && (!is_view(v) || own[i]) && (written[i] || own[i]) && v->op != IR_OP_PP_SEND) {
            v->mem = kept[i] ? IR_MEM_STASH : IR_MEM_ACT;
            v->mem_offset = fl_take(&fl[kept[i]], bytes_of(g, v), &top[kept[i]]);
            order[i] = head[last[i]];
            head[last[i]] = i;
        }
        if (is_view(v)) continue;
        for (int j = head[i]; j >= 0; j = order[j])
            fl_insert(&fl[g->nodes[j]->mem == IR_MEM_STASH], g->nodes[j]->mem_offset, bytes_of(g, g->nodes[j]));
    }
    /* Views take their base's place. */
    for (int i = 0; i < n; i++) {
        ir_node *v = g->nodes[i];
        if (!is_view(v)) continue;
        int64_t delta;
        const ir_node *b = base_at(g, v, &delta);
        v->mem = b->mem;
        v->mem_offset = b->mem_offset + delta;
    }
    g->mem_size[IR_MEM_ACT] = max64(g->mem_size[IR_MEM_ACT], top[0]);
    g->mem_size[IR_MEM_STASH] = max64(g->mem_size[IR_MEM_STASH], top[1]);
    free(run_end);
    free(written);
    free(kept);
    free(own);
    free(fl[0].b);
    free(fl[1].b);
    free(order);
    free(head);
    free(last);
}

static void place_caches(ir_graph *g)
{
    int64_t off = 0;
    for (int i = 0; i < g->nnodes; i++) {
        ir_node *n = g->nodes[i];
        if (n->op != IR_OP_KV_CACHE) continue;
        n->mem = IR_MEM_CACHE;
        n->mem_offset = off;
        off += bytes_of(g, n);
    }
    g->mem_size[IR_MEM_CACHE] = off;
}

/* A gradient is a value the backward's seed reaches; the others are
 * activations (recomputation's clones among them: they read forward
 * values only). */
int64_t memplan_region_bytes(const ir_graph *g)
{
    int64_t total = 0;
    const ir_node *seed = ir_graph_seed(g);
    bool *grad = xcalloc((size_t)g->nnodes + 1, sizeof *grad);
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = g->nodes[i];
        grad[i] = n == seed;
        for (int k = 0; k < n->nsrc && !grad[i]; k++) grad[i] = grad[n->src[k]->id];
        bool region = ir_op_has(n->op, IR_OPF_SEQ_REGION);
        bool stored = n->fuse < 0 || n->mem != IR_MEM_NONE; /* not kept in a fused kernel's registers */
        if (region && stored && !grad[i] && n->shard.dim <= 0) total += bytes_of(g, n);
    }
    free(grad);
    return total;
}

bool pass_memplan(ir_graph *g, pass_ctx *ctx)
{
    (void)ctx;
    int stages, chunks;
    ir_graph_pp_dims(g, &stages, &chunks);
    for (int i = 0; i < g->nnodes; i++) g->nodes[i]->mem = IR_MEM_NONE;
    for (int m = 0; m < IR_MEM_COUNT; m++) g->mem_size[m] = 0;
    if (stages > 1)
        for (int i = 0; i < g->nnodes; i++)
            if (g->nodes[i]->stage < 0) {
                diag_error(ctx->d, g->nodes[i]->loc, "memplan: '%%%s' has no pipeline stage in a graph of %d stages",
                           g->nodes[i]->name, stages);
                return false;
            }
    /* Pipeline stages run on different ranks: each is planned on its own,
     * from offset 0, and a rank allocates the largest stage's sizes. */
    int first = stages > 1 ? 0 : -1, end = stages > 1 ? stages : 0;
    for (int st = first; st < end; st++) place_params(g, st);
    place_grads(g);
    place_caches(g);
    for (int st = first; st < end; st++) place_acts(g, st);
    return true;
}
