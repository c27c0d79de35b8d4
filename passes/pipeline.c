/* Pipeline schedules: the per-rank instruction lists of GPipe, 1F1B and
 * interleaved 1F1B, a simulator for them, and the `schedule` pass that
 * builds and checks them for a partitioned graph (docs/pipeline.md).
 *
 * 1F1B and interleaved follow Megatron-LM's forward_backward_pipelining_
 * without_interleaving / _with_interleaving (megatron/core/pipeline_
 * parallel/schedules.py) step for step, without p2p overlap: the same
 * warm-up counts, the same forward and backward order per rank (the model
 * chunk of the k-th forward is (k mod pv) / p, of the k-th backward
 * v - 1 - that, micro-batches in groups of p), and every receive where
 * Megatron posts it -- often one step before its use, together with the
 * sends of the step that just finished. Each receive is for the next
 * micro-batch of its chunk that still lacks its input (Megatron's
 * per-chunk FIFO lists). */
#include "pipeline.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/util.h"

static const char *const kind_names[] = {"gpipe", "1f1b", "interleaved"};

bool pipe_kind_from(const char *name, pipe_kind *out)
{
    for (int i = 0; i < (int)ARRAY_LEN(kind_names); i++)
        if (name && strcmp(name, kind_names[i]) == 0) {
            *out = (pipe_kind)i;
            return true;
        }
    return false;
}

const char *pipe_kind_name(pipe_kind k) { return kind_names[k]; }

/* ---- topologies ------------------------------------------------------------ */

static void topo_alloc(pipe_topo *t, int K)
{
    size_t n = (size_t)K * (size_t)K;
    t->K = K;
    t->fwd = xcalloc(n, 1);
    t->bwd = xcalloc(n, 1);
    t->weight = xcalloc(n, 1);
    t->wgrad = xcalloc(n, 1);
}

void pipe_topo_chain(pipe_topo *t, int K)
{
    topo_alloc(t, K);
    for (int s = 0; s + 1 < K; s++) {
        t->fwd[s * K + s + 1] = true;
        t->bwd[(s + 1) * K + s] = true;
    }
}

void pipe_topo_free(pipe_topo *t)
{
    free(t->fwd);
    free(t->bwd);
    free(t->weight);
    free(t->wgrad);
    memset(t, 0, sizeof *t);
}

/* ---- building the lists ------------------------------------------------------ */

typedef struct bld {
    const pipe_topo *t;
    int p, v, m, r, T; /* T = m v: forwards (and backwards) on one rank */
    pipe_instr *ins;
    int n, cap;
    int *fnext, *bnext; /* per chunk: the next micro-batch whose input / output gradient is not received yet */
    int fallbacks;
} bld;

static void put(bld *b, int op, int chunk, int mb, int peer)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 64;
        b->ins = xrealloc(b->ins, (size_t)b->cap * sizeof *b->ins);
    }
    b->ins[b->n++] = (pipe_instr){op, chunk, mb, peer};
}

static int vs_of(const bld *b, int c) { return c * b->p + b->r; }

/* The edges of virtual stage s: into it (in) or out of it, forward
 * activations (fwd) or gradients. */
static bool edge(const bld *b, bool fwd, int from, int to)
{
    return (fwd ? b->t->fwd : b->t->bwd)[from * b->t->K + to];
}

static bool has_in(const bld *b, bool fwd, int s)
{
    for (int a = 0; a < b->t->K; a++)
        if (edge(b, fwd, a, s)) return true;
    return false;
}

static void recvs(bld *b, bool fwd, int c, int mb)
{
    int s = vs_of(b, c);
    for (int a = 0; a < b->t->K; a++)
        if (edge(b, fwd, a, s)) put(b, fwd ? PIPE_RECV_FWD : PIPE_RECV_BWD, c, mb, a);
    (fwd ? b->fnext : b->bnext)[c] = mb + 1;
}

static void sends(bld *b, bool fwd, int c, int mb)
{
    int s = vs_of(b, c);
    for (int to = 0; to < b->t->K; to++)
        if (edge(b, fwd, s, to)) put(b, fwd ? PIPE_SEND_FWD : PIPE_SEND_BWD, c, mb, to);
}

/* Megatron posts a receive for chunk c: the next micro-batch of c that
 * still lacks its input (or gradient), if c has a producer at all. */
static void recv_point(bld *b, bool fwd, int c)
{
    int *next = fwd ? b->fnext : b->bnext;
    if (c >= 0 && c < b->v && next[c] < b->m && has_in(b, fwd, vs_of(b, c))) recvs(b, fwd, c, next[c]);
}

/* A forward or backward, after its receive if Megatron's order did not
 * place one (never for a chain; counted so the tests can say so). */
static void compute(bld *b, bool fwd, int c, int mb)
{
    int *next = fwd ? b->fnext : b->bnext;
    if (next[c] <= mb && has_in(b, fwd, vs_of(b, c))) {
        b->fallbacks++;
        recvs(b, fwd, c, mb);
    }
    put(b, fwd ? PIPE_FWD : PIPE_BWD, c, mb, -1);
}

/* The k-th forward (or backward) of a rank in the interleaved order:
 * micro-batches in groups of p, each group through chunk 0, 1, ... (the
 * backwards through v-1, ..., 0). Megatron's table, indexed modulo T. */
static void item(const bld *b, int k, bool fwd, int *c, int *mb)
{
    int group = b->p * b->v, kk = ((k % b->T) + b->T) % b->T;
    int w = kk % group;
    *c = w / b->p;
    if (!fwd) *c = b->v - 1 - *c;
    *mb = kk / group * b->p + w % b->p;
}

static int chunk_at(const bld *b, int k, bool fwd)
{
    int c, mb;
    item(b, k, fwd, &c, &mb);
    return c;
}

/* Whether, after iteration k, a rank receives for its next forward (or
 * backward), and for which chunk. The leading rank (the first for
 * forwards, the last for backwards) receives what the trailing rank
 * produced p - 1 iterations earlier, into the next chunk; the others
 * receive for their own next iteration. */
static bool recv_next_of(const bld *b, int k, bool fwd, int *chunk)
{
    bool leading = fwd ? b->r == 0 : b->r == b->p - 1;
    if (!leading) {
        *chunk = chunk_at(b, k + 1, fwd);
        return true;
    }
    bool recv = k >= b->p - 1;
    int c = chunk_at(b, recv ? k - (b->p - 1) : k + 1, fwd);
    if (c == (fwd ? b->v - 1 : 0)) recv = false;
    *chunk = fwd ? c + 1 : c - 1;
    return recv;
}

static void fwd_k(bld *b, int k)
{
    int c, mb;
    item(b, k, true, &c, &mb);
    compute(b, true, c, mb);
}

static void bwd_k(bld *b, int k)
{
    int c, mb;
    item(b, k, false, &c, &mb);
    compute(b, false, c, mb);
}

static void sends_k(bld *b, int k, bool fwd)
{
    int c, mb;
    item(b, k, fwd, &c, &mb);
    sends(b, fwd, c, mb);
}

static void build_interleaved(bld *b)
{
    int T = b->T, W = 2 * (b->p - b->r - 1) + (b->v - 1) * b->p, c;
    if (W > T) W = T;
    bool all_warmup = W == T;
    int R = T - W;
    recv_point(b, true, 0);
    for (int k = 0; k < W; k++) {
        fwd_k(b, k);
        sends_k(b, k, true);
        bool rp = recv_next_of(b, k, true, &c) && k != T - 1;
        if (rp) recv_point(b, true, c);
        /* The last warm-up step also receives the first backward's gradient. */
        if (k == W - 1 && !all_warmup && b->r != b->p - 1) recv_point(b, false, b->v - 1);
    }
    for (int k = 0; k < R; k++) {
        int f = W + k, fc, bc;
        fwd_k(b, f);
        bwd_k(b, k);
        sends_k(b, f, true);
        sends_k(b, k, false);
        bool rp = recv_next_of(b, f, true, &fc) && k != R - 1;
        bool rn = recv_next_of(b, k, false, &bc);
        if (rp) recv_point(b, true, fc);
        if (rn) recv_point(b, false, bc);
    }
    if (all_warmup) recv_point(b, false, b->v - 1);
    for (int k = R; k < T; k++) {
        bwd_k(b, k);
        sends_k(b, k, false);
        if (recv_next_of(b, k, false, &c) && k != T - 1) recv_point(b, false, c);
    }
}

static void build_1f1b(bld *b)
{
    int m = b->m, W = b->p - b->r - 1;
    if (W > m) W = m;
    int R = m - W;
    for (int i = 0; i < W; i++) {
        recv_point(b, true, 0);
        compute(b, true, 0, i);
        sends(b, true, 0, i);
    }
    if (R > 0) recv_point(b, true, 0);
    for (int i = 0; i < R; i++) {
        compute(b, true, 0, W + i);
        sends(b, true, 0, W + i); /* send_forward_recv_backward */
        recv_point(b, false, 0);
        compute(b, false, 0, i);
        sends(b, false, 0, i); /* send_backward_recv_forward, but the last */
        if (i != R - 1) recv_point(b, true, 0);
    }
    for (int i = 0; i < W; i++) {
        recv_point(b, false, 0);
        compute(b, false, 0, R + i);
        sends(b, false, 0, R + i);
    }
}

/* All forwards, then all backwards (in micro-batch order, as in the
 * Megatron-LM paper's figure of GPipe). */
static void build_gpipe(bld *b)
{
    for (int j = 0; j < b->m; j++) {
        recv_point(b, true, 0);
        compute(b, true, 0, j);
        sends(b, true, 0, j);
    }
    for (int j = 0; j < b->m; j++) {
        recv_point(b, false, 0);
        compute(b, false, 0, j);
        sends(b, false, 0, j);
    }
}

/* Step-level transfers of this rank: weights at the start, their gradients
 * at the end (sends first: a send never waits). */
static void step_transfers(bld *b, const bool *adj, int send_op, int recv_op)
{
    int K = b->t->K;
    for (int pass = 0; pass < 2; pass++)
        for (int a = 0; a < K; a++)
            for (int to = 0; to < K; to++) {
                if (!adj[a * K + to]) continue;
                int mine = pass == 0 ? a : to, other = pass == 0 ? to : a;
                if (mine % b->p == b->r) put(b, pass == 0 ? send_op : recv_op, mine / b->p, -1, other);
            }
}

static bool check_dims(pipe_kind kind, int p, int v, int m, int d, char *err, size_t n)
{
    if (p < 1 || v < 1 || m < 1 || d < 1) {
        snprintf(err, n, "p = %d, v = %d, m = %d and d = %d must be at least 1", p, v, m, d);
        return false;
    }
    if (kind != PIPE_INTERLEAVED && v > 1) {
        snprintf(err, n, "the %s schedule runs one model chunk per rank; %d chunks per rank need "
                 "--pipeline-schedule interleaved", kind_names[kind], v);
        return false;
    }
    if (kind == PIPE_INTERLEAVED && m % p != 0) {
        snprintf(err, n, "the interleaved schedule needs the number of micro-batches to be a multiple of the "
                 "pipeline size: m = %d micro-batches, p = %d ranks", m, p);
        return false;
    }
    return true;
}

bool pipe_build(pipe_schedule *s, pipe_kind kind, int p, int v, int m, int d, const pipe_topo *topo, char *err,
                size_t errlen)
{
    memset(s, 0, sizeof *s);
    if (!check_dims(kind, p, v, m, d, err, errlen)) return false;
    pipe_topo chain = {0};
    if (!topo) pipe_topo_chain(&chain, p * v);
    const pipe_topo *t = topo ? topo : &chain;
    if (t->K != p * v) {
        snprintf(err, errlen, "a topology of %d virtual stages for p x v = %d x %d", t->K, p, v);
        return false;
    }
    *s = (pipe_schedule){.kind = kind, .p = p, .v = v, .m = m, .d = d};
    s->len = xcalloc((size_t)p, sizeof *s->len);
    s->ins = xcalloc((size_t)p, sizeof *s->ins);
    for (int r = 0; r < p; r++) {
        bld b = {.t = t, .p = p, .v = v, .m = m, .r = r, .T = m * v};
        b.fnext = xcalloc((size_t)v, sizeof *b.fnext);
        b.bnext = xcalloc((size_t)v, sizeof *b.bnext);
        step_transfers(&b, t->weight, PIPE_SEND_WEIGHT, PIPE_RECV_WEIGHT);
        if (kind == PIPE_GPIPE) build_gpipe(&b);
        else if (kind == PIPE_1F1B) build_1f1b(&b);
        else build_interleaved(&b);
        /* The tied weights' gradients join their first stage before the
         * data-parallel reduction, which then covers them too. */
        step_transfers(&b, t->wgrad, PIPE_SEND_WGRAD, PIPE_RECV_WGRAD);
        if (d > 1) put(&b, PIPE_ALLREDUCE_DP, -1, -1, -1);
        put(&b, PIPE_OPTIMIZER, -1, -1, -1);
        s->ins[r] = b.ins;
        s->len[r] = b.n;
        s->fallbacks += b.fallbacks;
        free(b.fnext);
        free(b.bnext);
    }
    pipe_topo_free(&chain);
    return true;
}

void pipe_schedule_free(pipe_schedule *s)
{
    for (int r = 0; s->ins && r < s->p; r++) free(s->ins[r]);
    free(s->ins);
    free(s->len);
    memset(s, 0, sizeof *s);
}

/* ---- printing ---------------------------------------------------------------- */

void pipe_instr_str(const pipe_schedule *s, const pipe_instr *in, char *buf, size_t n)
{
    int rank = in->peer >= 0 ? in->peer % s->p : -1;
    switch ((pipe_op)in->op) {
    case PIPE_FWD: snprintf(buf, n, "F%d.%d", in->chunk, in->mb); break;
    case PIPE_BWD: snprintf(buf, n, "B%d.%d", in->chunk, in->mb); break;
    case PIPE_RECV_FWD: snprintf(buf, n, "recv-fwd F%d.%d <- s%d (rank %d)", in->chunk, in->mb, in->peer, rank); break;
    case PIPE_SEND_FWD: snprintf(buf, n, "send-fwd F%d.%d -> s%d (rank %d)", in->chunk, in->mb, in->peer, rank); break;
    case PIPE_RECV_BWD: snprintf(buf, n, "recv-bwd B%d.%d <- s%d (rank %d)", in->chunk, in->mb, in->peer, rank); break;
    case PIPE_SEND_BWD: snprintf(buf, n, "send-bwd B%d.%d -> s%d (rank %d)", in->chunk, in->mb, in->peer, rank); break;
    case PIPE_SEND_WEIGHT: snprintf(buf, n, "send-weight chunk %d -> s%d (rank %d)", in->chunk, in->peer, rank); break;
    case PIPE_RECV_WEIGHT: snprintf(buf, n, "recv-weight chunk %d <- s%d (rank %d)", in->chunk, in->peer, rank); break;
    case PIPE_SEND_WGRAD: snprintf(buf, n, "send-wgrad chunk %d -> s%d (rank %d)", in->chunk, in->peer, rank); break;
    case PIPE_RECV_WGRAD: snprintf(buf, n, "recv-wgrad chunk %d <- s%d (rank %d)", in->chunk, in->peer, rank); break;
    case PIPE_ALLREDUCE_DP: snprintf(buf, n, "allreduce-dp"); break;
    case PIPE_OPTIMIZER: snprintf(buf, n, "optimizer-step"); break;
    case PIPE_OP_COUNT: snprintf(buf, n, "?"); break;
    }
}

/* The compact token of an instruction, or NULL for per-micro-batch
 * communication (shown only in the verbose form). */
static const char *compact(const pipe_instr *in, char *buf, size_t n)
{
    switch ((pipe_op)in->op) {
    case PIPE_FWD: snprintf(buf, n, "F%d.%d", in->chunk, in->mb); return buf;
    case PIPE_BWD: snprintf(buf, n, "B%d.%d", in->chunk, in->mb); return buf;
    case PIPE_SEND_WEIGHT: snprintf(buf, n, "weight->s%d", in->peer); return buf;
    case PIPE_RECV_WEIGHT: snprintf(buf, n, "weight<-s%d", in->peer); return buf;
    case PIPE_SEND_WGRAD: snprintf(buf, n, "wgrad->s%d", in->peer); return buf;
    case PIPE_RECV_WGRAD: snprintf(buf, n, "wgrad<-s%d", in->peer); return buf;
    case PIPE_ALLREDUCE_DP: return "allreduce-dp";
    case PIPE_OPTIMIZER: return "step";
    default: return NULL;
    }
}

char *pipe_schedule_print(const pipe_schedule *s, bool verbose)
{
    strbuf b;
    sb_init(&b);
    char buf[128];
    sb_printf(&b, "schedule %s: p=%d v=%d m=%d d=%d (Fc.j / Bc.j: forward / backward of model chunk c, "
              "micro-batch j; sN: virtual stage N = c*p + rank)\n", kind_names[s->kind], s->p, s->v, s->m, s->d);
    for (int r = 0; r < s->p; r++) {
        sb_printf(&b, "rank %d:", r);
        for (int i = 0; i < s->len[r]; i++) {
            const char *tok = compact(&s->ins[r][i], buf, sizeof buf);
            if (tok) sb_printf(&b, " %s", tok);
        }
        sb_putc(&b, '\n');
    }
    for (int r = 0; verbose && r < s->p; r++) {
        sb_printf(&b, "rank %d instructions:\n", r);
        for (int i = 0; i < s->len[r]; i++) {
            pipe_instr_str(s, &s->ins[r][i], buf, sizeof buf);
            sb_printf(&b, "  %s\n", buf);
        }
    }
    return b.s;
}

/* ---- the simulator -------------------------------------------------------------- */

enum { DIR_FWD, DIR_BWD, DIR_WEIGHT, DIR_WGRAD, DIR_COUNT };

typedef struct msg {
    int from, to, mb; /* virtual stages, micro-batch (-1: step-level) */
    double t;         /* when it was sent */
} msg;

/* The messages of one (direction, sending rank, receiving rank), in the
 * order they were sent; `read` of them were received. */
typedef struct chan {
    msg *q;
    int n, cap, read;
} chan;

typedef struct simst {
    const pipe_schedule *s;
    int K;
    chan *ch;
    int *need;   /* by direction, stage, micro-batch: messages sent to it (from the lists' sends) */
    char *err;
    size_t errlen;
} simst;

static bool is_send(int op)
{
    return op == PIPE_SEND_FWD || op == PIPE_SEND_BWD || op == PIPE_SEND_WEIGHT || op == PIPE_SEND_WGRAD;
}

static bool is_recv(int op)
{
    return op == PIPE_RECV_FWD || op == PIPE_RECV_BWD || op == PIPE_RECV_WEIGHT || op == PIPE_RECV_WGRAD;
}

static int dir_of(int op)
{
    return op == PIPE_SEND_FWD || op == PIPE_RECV_FWD ? DIR_FWD : op == PIPE_SEND_BWD || op == PIPE_RECV_BWD ? DIR_BWD
         : op == PIPE_SEND_WEIGHT || op == PIPE_RECV_WEIGHT ? DIR_WEIGHT : DIR_WGRAD;
}

/* The message an instruction of rank r sends or receives. */
static msg msg_of(const simst *S, int r, const pipe_instr *in)
{
    int self = in->chunk * S->s->p + r;
    bool step = in->op == PIPE_SEND_WEIGHT || in->op == PIPE_RECV_WEIGHT || in->op == PIPE_SEND_WGRAD ||
                in->op == PIPE_RECV_WGRAD;
    msg m = {is_send(in->op) ? self : in->peer, is_send(in->op) ? in->peer : self, step ? -1 : in->mb, 0};
    return m;
}

static chan *chan_of(const simst *S, int dir, int from_rank, int to_rank)
{
    int p = S->s->p;
    return &S->ch[(dir * p + from_rank) * p + to_rank];
}

static int *need_at(const simst *S, int dir, int stage, int mb)
{
    int m1 = S->s->m + 1; /* slot m: step-level */
    return &S->need[(dir * S->K + stage) * m1 + (mb < 0 ? S->s->m : mb)];
}

static bool sim_fail(simst *S, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool sim_fail(simst *S, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(S->err, S->errlen, fmt, ap);
    va_end(ap);
    return false;
}

static bool in_range(simst *S, int r, int i, const pipe_instr *in)
{
    const pipe_schedule *s = S->s;
    bool step = in->op == PIPE_ALLREDUCE_DP || in->op == PIPE_OPTIMIZER;
    bool weight = in->op >= PIPE_SEND_WEIGHT && in->op <= PIPE_RECV_WGRAD;
    bool ok = in->op >= 0 && in->op < PIPE_OP_COUNT &&
              (step || (in->chunk >= 0 && in->chunk < s->v && (weight || (in->mb >= 0 && in->mb < s->m)))) &&
              ((!is_send(in->op) && !is_recv(in->op)) || (in->peer >= 0 && in->peer < S->K));
    return ok || sim_fail(S, "rank %d, instruction %d: op %d, chunk %d, micro-batch %d, peer %d out of range", r, i,
                          in->op, in->chunk, in->mb, in->peer);
}

/* What a forward / backward must have received: every message any rank
 * sends to it. */
static bool count_needs(simst *S)
{
    for (int r = 0; r < S->s->p; r++)
        for (int i = 0; i < S->s->len[r]; i++) {
            const pipe_instr *in = &S->s->ins[r][i];
            if (!in_range(S, r, i, in)) return false;
            if (!is_send(in->op)) continue;
            msg m = msg_of(S, r, in);
            (*need_at(S, dir_of(in->op), m.to, m.mb))++;
        }
    return true;
}

/* The order of one rank's list: each forward and backward once, after what
 * it needs; sends after what they send; the optimizer step last. */
static bool check_rank(simst *S, int r)
{
    const pipe_schedule *s = S->s;
    int v = s->v, m = s->m, p = s->p;
    bool *fdone = xcalloc((size_t)(v * m), 1), *bdone = xcalloc((size_t)(v * m), 1);
    int *got = xcalloc((size_t)(DIR_COUNT * v * (m + 1)), sizeof *got);
    char what[128];
    bool ok = true;
    for (int i = 0; ok && i < s->len[r]; i++) {
        const pipe_instr *in = &s->ins[r][i];
        int c = in->chunk, j = in->mb, vs = c * p + r, idx = c * m + j;
        pipe_instr_str(s, in, what, sizeof what);
        if (in->op == PIPE_FWD) {
            if (fdone[idx]) ok = sim_fail(S, "rank %d runs %s twice", r, what);
            else if (got[(DIR_FWD * v + c) * (m + 1) + j] < *need_at(S, DIR_FWD, vs, j))
                ok = sim_fail(S, "rank %d runs %s (instruction %d) before receiving its input", r, what, i);
            else if (got[(DIR_WEIGHT * v + c) * (m + 1) + m] < *need_at(S, DIR_WEIGHT, vs, -1))
                ok = sim_fail(S, "rank %d runs %s (instruction %d) before receiving the weights it uses", r, what, i);
            fdone[idx] = true;
        } else if (in->op == PIPE_BWD) {
            if (!fdone[idx] || bdone[idx])
                ok = sim_fail(S, "rank %d runs %s %s", r, what, bdone[idx] ? "twice" : "before its forward");
            else if (got[(DIR_BWD * v + c) * (m + 1) + j] < *need_at(S, DIR_BWD, vs, j))
                ok = sim_fail(S, "rank %d runs %s (instruction %d) before receiving its gradient", r, what, i);
            bdone[idx] = true;
        } else if (is_recv(in->op)) {
            got[(dir_of(in->op) * v + c) * (m + 1) + (j < 0 ? m : j)]++;
        } else if (in->op == PIPE_SEND_FWD || in->op == PIPE_SEND_BWD) {
            if (!(in->op == PIPE_SEND_FWD ? fdone : bdone)[idx])
                ok = sim_fail(S, "rank %d: %s (instruction %d) before it was computed", r, what, i);
        } else if (in->op == PIPE_SEND_WGRAD || in->op == PIPE_OPTIMIZER) {
            for (int k = 0; ok && k < v * m; k++)
                if ((in->op == PIPE_OPTIMIZER || k / m == c) && !bdone[k])
                    ok = sim_fail(S, "rank %d: %s (instruction %d) before B%d.%d", r, what, i, k / m, k % m);
            if (ok && in->op == PIPE_OPTIMIZER && i != s->len[r] - 1)
                ok = sim_fail(S, "rank %d: the optimizer step is not its last instruction", r);
        }
    }
    for (int k = 0; ok && k < v * m; k++)
        if (!bdone[k]) ok = sim_fail(S, "rank %d never runs %s%d.%d", r, fdone[k] ? "B" : "F", k / m, k % m);
    free(fdone);
    free(bdone);
    free(got);
    return ok;
}

/* Says which ranks wait on what, and why the message never comes. */
static bool deadlock(simst *S, const int *pos)
{
    const pipe_schedule *s = S->s;
    strbuf b;
    sb_init(&b);
    sb_puts(&b, "the ranks deadlock:");
    char what[128];
    for (int r = 0; r < s->p; r++) {
        if (pos[r] >= s->len[r]) continue;
        const pipe_instr *in = &s->ins[r][pos[r]];
        pipe_instr_str(s, in, what, sizeof what);
        msg want = msg_of(S, r, in);
        int from = want.from % s->p, at = -1;
        for (int i = 0; at < 0 && i < s->len[from]; i++) {
            const pipe_instr *o = &s->ins[from][i];
            msg m = msg_of(S, from, o);
            if (is_send(o->op) && dir_of(o->op) == dir_of(in->op) && m.from == want.from && m.to == want.to &&
                m.mb == want.mb)
                at = i;
        }
        sb_printf(&b, " rank %d waits at instruction %d (%s), ", r, pos[r], what);
        if (at < 0) sb_printf(&b, "which rank %d never sends;", from);
        else sb_printf(&b, "which rank %d sends at its instruction %d, after its own wait at %d;", from, at, pos[from]);
    }
    b.s[b.len - 1] = 0;
    sim_fail(S, "%s", b.s);
    sb_free(&b);
    return false;
}

/* One instruction of rank r at its clock: false when it is a receive whose
 * message has not been sent yet. */
static int step_one(simst *S, int r, const pipe_instr *in, double *clock, double *end)
{
    const pipe_schedule *s = S->s;
    if (is_recv(in->op)) {
        msg want = msg_of(S, r, in);
        chan *c = chan_of(S, dir_of(in->op), want.from % s->p, r);
        if (c->read == c->n) return 0;
        const msg *got = &c->q[c->read];
        if (got->from != want.from || got->to != want.to || got->mb != want.mb) {
            char what[128];
            pipe_instr_str(s, in, what, sizeof what);
            sim_fail(S, "rank %d expects %s, but the next message from rank %d on that channel is s%d -> s%d, "
                     "micro-batch %d (the two ranks disagree on the order)", r, what, want.from % s->p, got->from,
                     got->to, got->mb);
            return -1;
        }
        c->read++;
        *end = got->t > *clock ? got->t : *clock;
    } else if (is_send(in->op)) {
        msg m = msg_of(S, r, in);
        m.t = *clock;
        chan *c = chan_of(S, dir_of(in->op), r, m.to % s->p);
        if (c->n == c->cap) {
            c->cap = c->cap ? 2 * c->cap : 16;
            c->q = xrealloc(c->q, (size_t)c->cap * sizeof *c->q);
        }
        c->q[c->n++] = m;
        *end = *clock;
    } else {
        *end = *clock;
    }
    return 1;
}

static bool run(simst *S, pipe_sim *out)
{
    const pipe_schedule *s = S->s;
    int p = s->p, *pos = xcalloc((size_t)p, sizeof *pos), *held = xcalloc((size_t)p, sizeof *held);
    double *clock = xcalloc((size_t)p, sizeof *clock);
    bool progress = true, ok = true;
    while (ok && progress) {
        progress = false;
        for (int r = 0; ok && r < p; r++)
            while (pos[r] < s->len[r]) {
                const pipe_instr *in = &s->ins[r][pos[r]];
                double end = clock[r];
                int st = step_one(S, r, in, &clock[r], &end);
                if (st < 0) ok = false;
                if (st <= 0) break;
                if (in->op == PIPE_FWD || in->op == PIPE_BWD) end += in->op == PIPE_FWD ? out->tf : out->tb;
                held[r] += in->op == PIPE_FWD ? 1 : in->op == PIPE_BWD ? -1 : 0;
                if (held[r] > out->peak[r]) out->peak[r] = held[r];
                out->start[r][pos[r]] = clock[r];
                out->end[r][pos[r]] = end;
                clock[r] = end;
                pos[r]++;
                progress = true;
            }
    }
    for (int r = 0; ok && r < p; r++)
        if (pos[r] < s->len[r]) ok = deadlock(S, pos);
    for (int k = 0; ok && k < DIR_COUNT * p * p; k++)
        if (S->ch[k].read < S->ch[k].n) {
            const msg *m = &S->ch[k].q[S->ch[k].read];
            ok = sim_fail(S, "rank %d sends s%d -> s%d, micro-batch %d, which rank %d never receives", m->from % p,
                          m->from, m->to, m->mb, m->to % p);
        }
    for (int r = 0; r < p; r++)
        if (clock[r] > out->total) out->total = clock[r];
    free(pos);
    free(held);
    free(clock);
    return ok;
}

bool pipe_simulate(const pipe_schedule *s, double tf, double tb, pipe_sim *out, char *err, size_t errlen)
{
    int p = s->p;
    memset(out, 0, sizeof *out);
    out->tf = tf;
    out->tb = tb;
    out->idle = xcalloc((size_t)p, sizeof *out->idle);
    out->peak = xcalloc((size_t)p, sizeof *out->peak);
    out->start = xcalloc((size_t)p, sizeof *out->start);
    out->end = xcalloc((size_t)p, sizeof *out->end);
    for (int r = 0; r < p; r++) {
        out->start[r] = xcalloc((size_t)s->len[r] + 1, sizeof **out->start);
        out->end[r] = xcalloc((size_t)s->len[r] + 1, sizeof **out->end);
    }
    simst S = {.s = s, .K = p * s->v, .err = err, .errlen = errlen};
    S.ch = xcalloc((size_t)(DIR_COUNT * p * p), sizeof *S.ch);
    S.need = xcalloc((size_t)DIR_COUNT * (size_t)S.K * (size_t)(s->m + 1), sizeof *S.need);
    bool ok = count_needs(&S);
    for (int r = 0; ok && r < p; r++) ok = check_rank(&S, r);
    ok = ok && run(&S, out);
    for (int k = 0; k < DIR_COUNT * p * p; k++) free(S.ch[k].q);
    free(S.ch);
    free(S.need);
    out->ideal = (double)s->m * s->v * (tf + tb);
    out->bubble = out->ideal > 0 ? (out->total - out->ideal) / out->ideal : 0;
    for (int r = 0; r < p; r++) out->idle[r] = out->total > 0 ? (out->total - out->ideal) / out->total : 0;
    return ok;
}

void pipe_sim_free(pipe_sim *sim, int p)
{
    for (int r = 0; r < p && sim->start; r++) {
        free(sim->start[r]);
        free(sim->end[r]);
    }
    free(sim->start);
    free(sim->end);
    free(sim->idle);
    free(sim->peak);
    memset(sim, 0, sizeof *sim);
}

/* ---- from the IR ------------------------------------------------------------------ */

/* The virtual stage of a node, -1 for one without a stage. */
static int vstage(const ir_node *n, int p) { return n->stage < 0 ? -1 : (n->chunk < 0 ? 0 : n->chunk) * p + n->stage; }

static bool check_edge(const ir_node *n, const ir_node *s, int p, int K, diag *d)
{
    int a = vstage(s, p), b = vstage(n, p);
    /* The update and the gradient norm of a pipeline rank (the optimizer
     * pass adds one per rank, on no chunk) read that rank's gradients. */
    if (n->phase == IR_PHASE_OPT) {
        if (s->stage == n->stage) return true;
        diag_error(d, n->loc, "pipeline: '%%%s' of pipeline rank %d reads '%%%s' of rank %d", n->name, n->stage,
                   s->name, s->stage);
        return false;
    }
    if (n->op == IR_OP_PP_SEND) {
        int64_t to = ir_attr_int(n, "to_stage");
        if (to < 0 || to >= K || to == b) {
            diag_error(d, n->loc, "pipeline: '%%%s' on stage %d sends to stage %lld (the stages are 0 .. %d)", n->name,
                       b, (long long)to, K - 1);
            return false;
        }
    }
    if (n->op == IR_OP_PP_RECV && (s->op != IR_OP_PP_SEND || ir_attr_int(n, "from_stage") != a ||
                                   ir_attr_int(s, "to_stage") != b)) {
        diag_error(d, n->loc, "pipeline: '%%%s' (stage %d, from_stage=%lld) does not receive what '%%%s' (stage %d) "
                   "sends to it", n->name, b, (long long)ir_attr_int(n, "from_stage"), s->name, a);
        return false;
    }
    if (b < 0 || a == b || n->op == IR_OP_PP_RECV) return true;
    if (a < 0)
        diag_error(d, n->loc, "pipeline: '%%%s' on stage %d uses '%%%s', which has no stage", n->name, b, s->name);
    else diag_error(d, n->loc, "pipeline: '%%%s' on stage %d (rank %d, chunk %d) uses '%%%s' of stage %d without a "
                    "pp_send / pp_recv pair", n->name, b, b % p, b / p, s->name, a);
    return false;
}

/* Per node: requires a gradient (a float depending on a parameter), and
 * the same for every micro-batch (parameters and constants only); whether
 * it belongs to the backward is its phase (the schedule pass's). */
static void classify(const ir_graph *g, bool *req, bool *inv)
{
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = g->nodes[i];
        bool leaf = ir_op_get(n->op)->flags & IR_OPF_LEAF;
        req[i] = n->op == IR_OP_PARAM;
        inv[i] = leaf && n->op != IR_OP_INPUT;
        if (leaf) continue;
        inv[i] = n->op != IR_OP_DROPOUT;
        for (int k = 0; k < n->nsrc; k++) {
            const ir_node *s = n->src[k];
            req[i] |= req[s->id];
            inv[i] &= inv[s->id];
        }
        req[i] &= ir_dtype_is_float(n->dtype);
    }
}

static bool backward(const ir_node *n) { return n->phase >= IR_PHASE_BWD; }

bool pipe_topo_from_graph(const ir_graph *g, int p, int v, pipe_topo *t, diag *d)
{
    int K = p * v, errors = d->nerrors;
    if (!pipe_graph_annotated(g)) {
        diag_error_plain(d, "pipeline: the graph has no phase annotations (phase(...), set by the schedule pass): "
                         "compile it from the model or from IR before the schedule pass");
        return false;
    }
    topo_alloc(t, K);
    if (K > 1)
        for (int i = 0; i < g->nnodes; i++)
            for (int k = 0; k < g->nodes[i]->nsrc; k++) check_edge(g->nodes[i], g->nodes[i]->src[k], p, K, d);
    bool *req = xcalloc((size_t)g->nnodes + 1, 2), *inv = req + g->nnodes + 1;
    classify(g, req, inv);
    for (int i = 0; d->nerrors == errors && i < g->nnodes; i++) {
        const ir_node *n = g->nodes[i];
        if (n->op != IR_OP_PP_SEND || backward(n)) continue;
        int a = vstage(n, p), b = (int)ir_attr_int(n, "to_stage"), x = n->src[0]->id;
        if (b < a) {
            diag_error(d, n->loc, "pipeline: '%%%s' sends from stage %d back to the earlier stage %d in the forward "
                       "graph", n->name, a, b);
            break;
        }
        /* The gradient comes back exactly where autodiff will send one. */
        if (inv[x]) {
            t->weight[a * K + b] = true;
            t->wgrad[b * K + a] |= req[x];
        } else {
            t->fwd[a * K + b] = true;
            t->bwd[b * K + a] |= req[x];
        }
    }
    free(req);
    if (d->nerrors != errors) pipe_topo_free(t);
    return d->nerrors == errors;
}

static int64_t hparam_int(const ir_graph *g, const char *name, int64_t dflt)
{
    for (int i = 0; i < g->nhparams; i++)
        if (strcmp(g->hparams[i].name, name) == 0 && !g->hparams[i].is_float) return g->hparams[i].i;
    return dflt;
}

/* m = B / (b d): the micro-batches of one step on one pipeline. */
static bool micro_batches(const ir_graph *g, const pass_options *o, int *m, diag *d)
{
    int64_t dp = o->dp > 0 ? o->dp : 1;
    int64_t b = o->micro_batch > 0 ? o->micro_batch : hparam_int(g, "batch", 1);
    int64_t B = o->global_batch > 0 ? o->global_batch : b * dp;
    if (b < 1 || B % (b * dp) != 0) {
        diag_error_plain(d, "pipeline schedule: --global-batch-size %lld does not divide by --micro-batch-size %lld x "
                         "--dp %lld", (long long)B, (long long)b, (long long)dp);
        return false;
    }
    /* Every rank's list holds about 4 instructions per micro-batch and chunk. */
    if (B / (b * dp) > (1 << 16)) {
        diag_error_plain(d, "pipeline schedule: %lld micro-batches per step (the limit is %d)",
                         (long long)(B / (b * dp)), 1 << 16);
        return false;
    }
    *m = (int)(B / (b * dp));
    return true;
}

bool pipe_schedule_from_graph(const ir_graph *g, const pass_options *o, pipe_schedule *s, diag *d)
{
    pass_options dflt;
    if (!o) pass_options_defaults(&dflt);
    o = o ? o : &dflt;
    memset(s, 0, sizeof *s);
    int p, v, m;
    ir_graph_pp_dims(g, &p, &v);
    if ((o->pp > 1 && o->pp != p) || (o->pp > 1 && o->vp > 1 && o->vp != v)) {
        diag_error_plain(d, "pipeline schedule: --pp %lld --vp %lld, but the graph is partitioned into %d stages of %d "
                         "chunks (the pp pass partitions it)", (long long)o->pp, (long long)o->vp, p, v);
        return false;
    }
    pipe_kind kind;
    if (!pipe_kind_from(o->pipeline_schedule ? o->pipeline_schedule : "1f1b", &kind)) {
        diag_error_plain(d, "pipeline schedule: unknown schedule '%s' (gpipe, 1f1b or interleaved)",
                         o->pipeline_schedule);
        return false;
    }
    if (!micro_batches(g, o, &m, d)) return false;
    pipe_topo t;
    if (!pipe_topo_from_graph(g, p, v, &t, d)) return false;
    char err[512];
    bool ok = pipe_build(s, kind, p, v, m, (int)(o->dp > 0 ? o->dp : 1), &t, err, sizeof err);
    if (!ok) diag_error_plain(d, "pipeline schedule: %s", err);
    pipe_topo_free(&t);
    return ok;
}

/* The schedule pass: first the annotations the lists and the pipeline
 * runtime read, every node's phase and every gradient's bucket
 * (pipe_annotate); then it builds every rank's list and runs it once in
 * the simulator, so a graph whose lists cannot complete is an error here,
 * not a hang at run time. The lists are a function of the graph and the
 * options (`tgc dump-ir --after schedule` prints them). */
bool pass_schedule(ir_graph *g, pass_ctx *ctx)
{
    pipe_schedule s;
    if (!pipe_annotate(g, ctx->opts ? ctx->opts->ddp_bucket_size : 0, ctx->d) ||
        !pipe_schedule_from_graph(g, ctx->opts, &s, ctx->d))
        return false;
    pipe_sim sim;
    char err[2048];
    bool ok = pipe_simulate(&s, 1.0, 2.0, &sim, err, sizeof err);
    if (!ok) diag_error_plain(ctx->d, "pipeline schedule (%s, p=%d v=%d m=%d): %s", pipe_kind_name(s.kind), s.p, s.v,
                              s.m, err);
    pipe_sim_free(&sim, s.p);
    pipe_schedule_free(&s);
    return ok;
}

char *pipe_sim_print(const pipe_schedule *s, const pipe_sim *sim)
{
    strbuf b;
    sb_init(&b);
    int den = s->m * (s->kind == PIPE_INTERLEAVED ? s->v : 1);
    sb_printf(&b, "simulated: forward %g, backward %g, communication 0 per (chunk, micro-batch): the step takes %g, "
              "the compute of a rank %g\n", sim->tf, sim->tb, sim->total, sim->ideal);
    sb_printf(&b, "bubble (step - compute) / compute = %.6g; formula (p-1)/%s = %d/%d = %.6g\n", sim->bubble,
              s->kind == PIPE_INTERLEAVED ? "(v m)" : "m", s->p - 1, den, (double)(s->p - 1) / den);
    for (int r = 0; r < s->p; r++)
        sb_printf(&b, "rank %d: idle %.1f%% of the step, at most %d (chunk, micro-batch) activations held\n", r,
                  100.0 * sim->idle[r], sim->peak[r]);
    return b.s;
}
