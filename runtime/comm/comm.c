/* Communicators, the generic layer: the topology of rank groups, argument
 * checks, statistics and error handling around an implementation's vtable
 * (runtime/comm/comm.h). */
#include "runtime/comm/comm.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/half.h"
#include "support/env.h"
#include "support/util.h"

#define COMM_ERR_MAX 512

struct tgc_comm {
    const tgc_comm_vtable *vt;
    void *impl;
    tgc_topology topo;
    int rank, n;
    int group_rank[TGC_COMM_GROUP_COUNT], group_size[TGC_COMM_GROUP_COUNT];
    double timeout_s;
    tgc_comm_kind cur_kind;
    tgc_comm_group cur_group;
    int status, culprit; /* of the last error */
    char err[COMM_ERR_MAX];
    size_t detail; /* where the message after the "rank R: KIND(GROUP): " prefix starts */
    tgc_comm_stats stats;
};

/* ---- names -------------------------------------------------------------- */

const char *tgc_comm_status_name(int status)
{
    static const char *const names[TGC_COMM_STATUS_COUNT] = {
        [TGC_COMM_OK] = "ok",
        [TGC_COMM_ERR_ARG] = "invalid argument",
        [TGC_COMM_ERR_MISMATCH] = "mismatched calls",
        [TGC_COMM_ERR_TIMEOUT] = "timeout",
        [TGC_COMM_ERR_ABORTED] = "aborted",
        [TGC_COMM_ERR_NOMEM] = "out of memory",
        [TGC_COMM_ERR_UNSUPPORTED] = "unsupported",
        [TGC_COMM_ERR_BACKEND] = "backend error",
    };
    return status >= 0 && status < TGC_COMM_STATUS_COUNT ? names[status] : "unknown status";
}

const char *tgc_comm_group_name(tgc_comm_group g)
{
    static const char *const names[TGC_COMM_GROUP_COUNT] = {"world", "tp", "dp", "pp"};
    return (unsigned)g < TGC_COMM_GROUP_COUNT ? names[g] : "?";
}

const char *tgc_comm_dtype_name(tgc_comm_dtype t)
{
    static const char *const names[TGC_COMM_DTYPE_COUNT] = {"f32", "f64", "byte", "bf16", "f16"};
    return (unsigned)t < TGC_COMM_DTYPE_COUNT ? names[t] : "?";
}

const char *tgc_comm_kind_name(tgc_comm_kind k)
{
    static const char *const names[TGC_COMM_KIND_COUNT] = {
        "all_reduce", "all_gather", "reduce_scatter", "broadcast", "send", "recv", "barrier",
    };
    return (unsigned)k < TGC_COMM_KIND_COUNT ? names[k] : "?";
}

size_t tgc_comm_dtype_size(tgc_comm_dtype t)
{
    switch (t) {
    case TGC_COMM_F32: return 4;
    case TGC_COMM_F64: return 8;
    case TGC_COMM_BYTE: return 1;
    case TGC_COMM_BF16: return 2;
    case TGC_COMM_F16: return 2;
    default: return 0;
    }
}

/* ---- 16-bit reductions ---------------------------------------------------- */

#define COMM16_BLOCK 256 /* elements per step of the widened operand / accumulator */

bool tgc_comm_dtype_is16(tgc_comm_dtype t) { return t == TGC_COMM_BF16 || t == TGC_COMM_F16; }

static void widen16(const void *x, float *y, size_t n, tgc_comm_dtype t)
{
    if (t == TGC_COMM_BF16) rt_bf16_to_f32(x, y, (int64_t)n);
    else rt_f16_to_f32(x, y, (int64_t)n);
}

void tgc_comm_acc_init(float *acc, const void *x, size_t n, tgc_comm_dtype t) { widen16(x, acc, n, t); }

void tgc_comm_acc_add(float *acc, const void *x, size_t n, tgc_comm_dtype t, tgc_comm_op op)
{
    float w[COMM16_BLOCK];
    for (size_t b = 0; b < n; b += COMM16_BLOCK) {
        size_t m = n - b < COMM16_BLOCK ? n - b : COMM16_BLOCK;
        widen16((const uint16_t *)x + b, w, m, t);
        float *a = acc + b;
        if (op == TGC_COMM_SUM)
            for (size_t j = 0; j < m; j++) a[j] += w[j];
        else
            for (size_t j = 0; j < m; j++) a[j] = (w[j] > a[j] || w[j] != w[j]) ? w[j] : a[j];
    }
}

void tgc_comm_acc_store(const float *acc, void *y, size_t n, tgc_comm_dtype t)
{
    if (t == TGC_COMM_BF16) rt_f32_to_bf16(acc, y, (int64_t)n);
    else rt_f32_to_f16(acc, y, (int64_t)n);
}

void tgc_comm_reduce16(const void *const *src, int g, size_t off, size_t n, tgc_comm_dtype t, tgc_comm_op op,
                       void *dst)
{
    float acc[COMM16_BLOCK];
    for (size_t b = 0; b < n; b += COMM16_BLOCK) {
        size_t m = n - b < COMM16_BLOCK ? n - b : COMM16_BLOCK;
        tgc_comm_acc_init(acc, (const uint16_t *)src[0] + off + b, m, t);
        for (int r = 1; r < g; r++) tgc_comm_acc_add(acc, (const uint16_t *)src[r] + off + b, m, t, op);
        tgc_comm_acc_store(acc, (uint16_t *)dst + b, m, t);
    }
}

/* ---- topology ----------------------------------------------------------- */

int tgc_topology_init(tgc_topology *topo, int t, int d, int p)
{
    if (t < 1 || d < 1 || p < 1) return TGC_COMM_ERR_ARG;
    if ((int64_t)t * d * p > TGC_COMM_MAX_RANKS) return TGC_COMM_ERR_ARG;
    topo->t = t, topo->d = d, topo->p = p;
    return TGC_COMM_OK;
}

int tgc_topology_size(const tgc_topology *topo) { return topo->t * topo->d * topo->p; }

tgc_coords tgc_topology_coords(const tgc_topology *topo, int rank)
{
    tgc_coords c = {rank % topo->t, rank / topo->t % topo->d, rank / (topo->t * topo->d)};
    return c;
}

int tgc_topology_rank(const tgc_topology *topo, tgc_coords c)
{
    return c.tp + topo->t * (c.dp + topo->d * c.pp);
}

int tgc_topology_group_size(const tgc_topology *topo, tgc_comm_group g)
{
    switch (g) {
    case TGC_COMM_TP: return topo->t;
    case TGC_COMM_DP: return topo->d;
    case TGC_COMM_PP: return topo->p;
    default: return tgc_topology_size(topo);
    }
}

int tgc_topology_group_count(const tgc_topology *topo, tgc_comm_group g)
{
    return tgc_topology_size(topo) / tgc_topology_group_size(topo, g);
}

int tgc_topology_group_index(const tgc_topology *topo, int rank, tgc_comm_group g)
{
    tgc_coords c = tgc_topology_coords(topo, rank);
    switch (g) {
    case TGC_COMM_TP: return c.dp + topo->d * c.pp;
    case TGC_COMM_DP: return c.tp + topo->t * c.pp;
    case TGC_COMM_PP: return c.tp + topo->t * c.dp;
    default: return 0;
    }
}

int tgc_topology_group_rank(const tgc_topology *topo, int rank, tgc_comm_group g)
{
    tgc_coords c = tgc_topology_coords(topo, rank);
    switch (g) {
    case TGC_COMM_TP: return c.tp;
    case TGC_COMM_DP: return c.dp;
    case TGC_COMM_PP: return c.pp;
    default: return rank;
    }
}

int tgc_topology_group_member(const tgc_topology *topo, int rank, tgc_comm_group g, int i)
{
    tgc_coords c = tgc_topology_coords(topo, rank);
    switch (g) {
    case TGC_COMM_TP: c.tp = i; break;
    case TGC_COMM_DP: c.dp = i; break;
    case TGC_COMM_PP: c.pp = i; break;
    default: return i;
    }
    return tgc_topology_rank(topo, c);
}

int tgc_topology_group_members(const tgc_topology *topo, int rank, tgc_comm_group g, int *out)
{
    int size = tgc_topology_group_size(topo, g);
    for (int i = 0; i < size; i++) out[i] = tgc_topology_group_member(topo, rank, g, i);
    return size;
}

/* ---- statistics ----------------------------------------------------------- */

double tgc_comm_ring_bytes(tgc_comm_kind kind, size_t bytes, int g)
{
    double n = (double)bytes;
    switch (kind) {
    case TGC_COMM_SEND:
    case TGC_COMM_RECV: return n;
    case TGC_COMM_ALL_REDUCE: return g > 1 ? 2.0 * n * (g - 1) / g : 0.0;
    case TGC_COMM_ALL_GATHER:
    case TGC_COMM_REDUCE_SCATTER: return g > 1 ? n * (g - 1) / g : 0.0;
    case TGC_COMM_BROADCAST: return g > 1 ? n : 0.0;
    default: return 0.0;
    }
}

const tgc_comm_stats *tgc_comm_stats_get(const tgc_comm *c) { return &c->stats; }

void tgc_comm_stats_reset(tgc_comm *c) { memset(&c->stats, 0, sizeof c->stats); }

void tgc_comm_stats_add(tgc_comm_stats *acc, const tgc_comm_stats *s)
{
    for (int k = 0; k < TGC_COMM_KIND_COUNT; k++)
        for (int g = 0; g < TGC_COMM_GROUP_COUNT; g++) {
            acc->calls[k][g] += s->calls[k][g];
            acc->bytes[k][g] += s->bytes[k][g];
        }
}

uint64_t tgc_comm_stats_calls(const tgc_comm_stats *s, tgc_comm_kind k)
{
    uint64_t sum = 0;
    for (int g = 0; g < TGC_COMM_GROUP_COUNT; g++) sum += s->calls[k][g];
    return sum;
}

double tgc_comm_stats_bytes(const tgc_comm_stats *s, tgc_comm_kind k)
{
    double sum = 0;
    for (int g = 0; g < TGC_COMM_GROUP_COUNT; g++) sum += s->bytes[k][g];
    return sum;
}

static void stats_print_bytes(FILE *out, double b)
{
    if (b == floor(b) && b < 1e18)
        fprintf(out, " %18.0f", b);
    else
        fprintf(out, " %18.2f", b);
}

void tgc_comm_stats_print(const tgc_comm_stats *s, const char *title, FILE *out)
{
    uint64_t calls = 0;
    double bytes = 0;
    fprintf(out, "comm stats%s%s\n", title ? ": " : "", title ? title : "");
    fprintf(out, "%-16s %-6s %12s %18s\n", "kind", "group", "calls", "bytes");
    for (int k = 0; k < TGC_COMM_KIND_COUNT; k++)
        for (int g = 0; g < TGC_COMM_GROUP_COUNT; g++) {
            if (!s->calls[k][g]) continue;
            bool p2p = k == TGC_COMM_SEND || k == TGC_COMM_RECV;
            fprintf(out, "%-16s %-6s %12llu", tgc_comm_kind_name(k), p2p ? "-" : tgc_comm_group_name(g),
                    (unsigned long long)s->calls[k][g]);
            stats_print_bytes(out, s->bytes[k][g]);
            fputc('\n', out);
            calls += s->calls[k][g];
            bytes += s->bytes[k][g];
        }
    fprintf(out, "%-16s %-6s %12llu", "total", "", (unsigned long long)calls);
    stats_print_bytes(out, bytes);
    fputc('\n', out);
}

/* ---- the communicator object ----------------------------------------------- */

tgc_comm *tgc_comm_create(const tgc_comm_vtable *vt, void *impl, const tgc_topology *topo, int rank)
{
    int n = tgc_topology_size(topo);
    if (!vt || !vt->abort || rank < 0 || rank >= n) return NULL;
    tgc_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->vt = vt, c->impl = impl, c->topo = *topo, c->rank = rank, c->n = n;
    for (int g = 0; g < TGC_COMM_GROUP_COUNT; g++) {
        c->group_rank[g] = tgc_topology_group_rank(topo, rank, (tgc_comm_group)g);
        c->group_size[g] = tgc_topology_group_size(topo, (tgc_comm_group)g);
    }
    c->timeout_s = TGC_COMM_DEFAULT_TIMEOUT;
    c->culprit = -1;
    return c;
}

void tgc_comm_destroy(tgc_comm *c) { free(c); }

void tgc_comm_free(tgc_comm *c)
{
    if (c && c->vt->free) c->vt->free(c);
}

void *tgc_comm_impl(const tgc_comm *c) { return c->impl; }
int tgc_comm_rank(const tgc_comm *c) { return c->rank; }
int tgc_comm_size(const tgc_comm *c) { return c->n; }
const tgc_topology *tgc_comm_topology(const tgc_comm *c) { return &c->topo; }
const char *tgc_comm_backend(const tgc_comm *c) { return c->vt->name; }
const char *tgc_comm_error(const tgc_comm *c) { return c->err; }
int tgc_comm_last_status(const tgc_comm *c) { return c->status; }
int tgc_comm_last_culprit(const tgc_comm *c) { return c->culprit; }
tgc_comm_kind tgc_comm_current_kind(const tgc_comm *c) { return c->cur_kind; }
tgc_comm_group tgc_comm_current_group(const tgc_comm *c) { return c->cur_group; }

int tgc_comm_group_rank(const tgc_comm *c, tgc_comm_group g)
{
    return (unsigned)g < TGC_COMM_GROUP_COUNT ? c->group_rank[g] : -1;
}

int tgc_comm_group_size(const tgc_comm *c, tgc_comm_group g)
{
    return (unsigned)g < TGC_COMM_GROUP_COUNT ? c->group_size[g] : -1;
}

static bool timeout_ok(double s) { return isfinite(s) && s > 0 && s <= 1e9; }

int tgc_comm_set_timeout(tgc_comm *c, double seconds)
{
    if (!timeout_ok(seconds)) return TGC_COMM_ERR_ARG;
    c->timeout_s = seconds;
    return TGC_COMM_OK;
}

double tgc_comm_timeout(const tgc_comm *c) { return c->timeout_s; }

int tgc_comm_timeout_from_env(double *seconds)
{
    const char *s = env_text("TGC_COMM_TIMEOUT");
    double v;
    if (!s || !*s) return TGC_COMM_OK;
    if (!parse_double(s, &v) || !timeout_ok(v)) return TGC_COMM_ERR_ARG;
    *seconds = v;
    return TGC_COMM_OK;
}

int tgc_comm_fail(tgc_comm *c, int code, int culprit, const char *fmt, ...)
{
    int len = snprintf(c->err, sizeof c->err, "rank %d: %s", c->rank, tgc_comm_kind_name(c->cur_kind));
    if (c->cur_kind != TGC_COMM_SEND && c->cur_kind != TGC_COMM_RECV && len > 0 && (size_t)len < sizeof c->err)
        len += snprintf(c->err + len, sizeof c->err - len, "(%s)", tgc_comm_group_name(c->cur_group));
    c->detail = 0;
    if (len > 0 && (size_t)len < sizeof c->err - 2) {
        memcpy(c->err + len, ": ", 3);
        len += 2;
        c->detail = (size_t)len;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + len, sizeof c->err - len, fmt, ap);
        va_end(ap);
    }
    c->status = code;
    c->culprit = culprit;
    return code;
}

int tgc_comm_fail_from(tgc_comm *c, const tgc_comm *below, int code)
{
    const char *msg = below->status != TGC_COMM_OK && below->err[0] ? below->err + below->detail : "";
    int culprit = below->status != TGC_COMM_OK && below->culprit >= 0 ? below->culprit : c->rank;
    return tgc_comm_fail(c, code, culprit, "%s", *msg ? msg : tgc_comm_status_name(code));
}

/* ---- the calls: checks, dispatch, accounting --------------------------------- */

static int comm_begin(tgc_comm *c, tgc_comm_kind kind, tgc_comm_group g)
{
    c->cur_kind = kind;
    c->cur_group = (unsigned)g < TGC_COMM_GROUP_COUNT ? g : TGC_COMM_WORLD;
    c->status = TGC_COMM_OK;
    if ((unsigned)g >= TGC_COMM_GROUP_COUNT)
        return tgc_comm_fail(c, TGC_COMM_ERR_ARG, c->rank, "invalid group %d", (int)g);
    return TGC_COMM_OK;
}

/* What the other ranks read after "rank CULPRIT failed: ": the message
 * without its prefix, then where it happened and who noticed. */
static void comm_abort_reason(const tgc_comm *c, char *buf, size_t cap)
{
    bool p2p = c->cur_kind == TGC_COMM_SEND || c->cur_kind == TGC_COMM_RECV;
    char where[64];
    if (p2p)
        snprintf(where, sizeof where, "%s", tgc_comm_kind_name(c->cur_kind));
    else
        snprintf(where, sizeof where, "%s(%s)", tgc_comm_kind_name(c->cur_kind), tgc_comm_group_name(c->cur_group));
    if (c->culprit != c->rank)
        snprintf(buf, cap, "%s (seen by rank %d in %s)", c->err + c->detail, c->rank, where);
    else
        snprintf(buf, cap, "%s (in %s)", c->err + c->detail, where);
}

/* Successful calls are counted (moved: the bytes this rank sent); any
 * other failure than "another rank failed" is made fatal to the world,
 * naming the rank held responsible. */
static int comm_end_moved(tgc_comm *c, int rc, double moved)
{
    if (rc == TGC_COMM_OK) {
        c->stats.calls[c->cur_kind][c->cur_group]++;
        c->stats.bytes[c->cur_kind][c->cur_group] += moved;
        return rc;
    }
    if (c->status == TGC_COMM_OK) /* an implementation that forgot tgc_comm_fail */
        tgc_comm_fail(c, rc, c->rank, "%s", tgc_comm_status_name(rc));
    if (rc != TGC_COMM_ERR_ABORTED) {
        char reason[COMM_ERR_MAX + 64];
        comm_abort_reason(c, reason, sizeof reason);
        c->vt->abort(c, c->culprit, reason);
    }
    return rc;
}

static int comm_end(tgc_comm *c, int rc, size_t acct_bytes)
{
    return comm_end_moved(c, rc, tgc_comm_ring_bytes(c->cur_kind, acct_bytes, c->group_size[c->cur_group]));
}

/* Element size of dt (0 after recording an error); reductions need a
 * floating type and a valid op. */
static size_t comm_check_type(tgc_comm *c, tgc_comm_dtype dt, bool reduce, tgc_comm_op op)
{
    size_t es = tgc_comm_dtype_size(dt);
    if (!es) {
        tgc_comm_fail(c, TGC_COMM_ERR_ARG, c->rank, "invalid dtype %d", (int)dt);
        return 0;
    }
    if (reduce && dt == TGC_COMM_BYTE) {
        tgc_comm_fail(c, TGC_COMM_ERR_ARG, c->rank, "cannot reduce raw bytes (use f32, f64, bf16 or f16)");
        return 0;
    }
    if (reduce && (unsigned)op >= TGC_COMM_OP_COUNT) {
        tgc_comm_fail(c, TGC_COMM_ERR_ARG, c->rank, "invalid reduction op %d", (int)op);
        return 0;
    }
    return es;
}

/* count * es * mult in bytes, or an error on overflow. */
static int comm_bytes(tgc_comm *c, size_t count, size_t es, size_t mult, size_t *out)
{
    size_t unit = es * mult; /* es <= 8 and mult <= TGC_COMM_MAX_RANKS: no overflow */
    if (count && unit && count > SIZE_MAX / unit)
        return tgc_comm_fail(c, TGC_COMM_ERR_ARG, c->rank, "%zu elements overflow the byte count", count);
    *out = count * es * mult;
    return TGC_COMM_OK;
}

static int comm_check_buf(tgc_comm *c, const void *p, size_t bytes, const char *what)
{
    if (bytes && !p) return tgc_comm_fail(c, TGC_COMM_ERR_ARG, c->rank, "%s is NULL", what);
    return TGC_COMM_OK;
}

static int comm_unsupported(tgc_comm *c)
{
    return tgc_comm_fail(c, TGC_COMM_ERR_UNSUPPORTED, c->rank, "not supported by the %s communicator",
                         c->vt->name);
}

int tgc_comm_all_reduce(tgc_comm *c, tgc_comm_group g, void *buf, size_t count, tgc_comm_dtype dt,
                        tgc_comm_op op)
{
    size_t bytes = 0, es = 0;
    int rc = comm_begin(c, TGC_COMM_ALL_REDUCE, g);
    if (!rc) rc = (es = comm_check_type(c, dt, true, op)) ? comm_bytes(c, count, es, 1, &bytes) : c->status;
    if (!rc) rc = comm_check_buf(c, buf, bytes, "buf");
    if (!rc) rc = c->vt->all_reduce ? c->vt->all_reduce(c, g, buf, count, dt, op) : comm_unsupported(c);
    return comm_end(c, rc, bytes);
}

int tgc_comm_all_gather(tgc_comm *c, tgc_comm_group g, const void *send, void *recv, size_t count,
                        tgc_comm_dtype dt)
{
    size_t bytes = 0, full = 0, es = 0;
    int rc = comm_begin(c, TGC_COMM_ALL_GATHER, g);
    if (!rc) rc = (es = comm_check_type(c, dt, false, 0)) ? comm_bytes(c, count, es, 1, &bytes) : c->status;
    if (!rc) rc = comm_bytes(c, count, es, (size_t)c->group_size[g], &full);
    if (!rc) rc = comm_check_buf(c, send, bytes, "send");
    if (!rc) rc = comm_check_buf(c, recv, full, "recv");
    if (!rc) rc = c->vt->all_gather ? c->vt->all_gather(c, g, send, recv, count, dt) : comm_unsupported(c);
    return comm_end(c, rc, full);
}

int tgc_comm_reduce_scatter(tgc_comm *c, tgc_comm_group g, const void *send, void *recv, size_t count,
                            tgc_comm_dtype dt, tgc_comm_op op)
{
    size_t bytes = 0, full = 0, es = 0;
    int rc = comm_begin(c, TGC_COMM_REDUCE_SCATTER, g);
    if (!rc) rc = (es = comm_check_type(c, dt, true, op)) ? comm_bytes(c, count, es, 1, &bytes) : c->status;
    if (!rc) rc = comm_bytes(c, count, es, (size_t)c->group_size[g], &full);
    if (!rc) rc = comm_check_buf(c, send, full, "send");
    if (!rc) rc = comm_check_buf(c, recv, bytes, "recv");
    if (!rc)
        rc = c->vt->reduce_scatter ? c->vt->reduce_scatter(c, g, send, recv, count, dt, op) : comm_unsupported(c);
    return comm_end(c, rc, full);
}

int tgc_comm_reduce_scatter_v(tgc_comm *c, tgc_comm_group g, void *buf, const size_t *counts, tgc_comm_dtype dt,
                              tgc_comm_op op)
{
    size_t es = 0, total = 0, lo = 0, bytes = 0;
    int rc = comm_begin(c, TGC_COMM_REDUCE_SCATTER, g);
    if (!rc && !counts) rc = tgc_comm_fail(c, TGC_COMM_ERR_ARG, c->rank, "counts is NULL");
    if (!rc) rc = (es = comm_check_type(c, dt, true, op)) ? TGC_COMM_OK : c->status;
    int gs = rc ? 0 : c->group_size[g], me = rc ? 0 : c->group_rank[g];
    for (int r = 0; r < gs && !rc; r++) {
        if (counts[r] > SIZE_MAX - total) rc = tgc_comm_fail(c, TGC_COMM_ERR_ARG, c->rank, "the counts overflow");
        if (r == me) lo = total;
        total += counts[r];
    }
    if (!rc) rc = comm_bytes(c, total, es, 1, &bytes);
    if (!rc) rc = comm_check_buf(c, buf, bytes, "buf");
    if (!rc)
        rc = c->vt->reduce_scatter_v ? c->vt->reduce_scatter_v(c, g, buf, counts, lo, dt, op) : comm_unsupported(c);
    return comm_end_moved(c, rc, gs > 1 ? (double)(total - (rc ? 0 : counts[me])) * (double)es : 0.0);
}

int tgc_comm_broadcast(tgc_comm *c, tgc_comm_group g, void *buf, size_t count, tgc_comm_dtype dt, int root)
{
    size_t bytes = 0, es = 0;
    int rc = comm_begin(c, TGC_COMM_BROADCAST, g);
    if (!rc) rc = (es = comm_check_type(c, dt, false, 0)) ? comm_bytes(c, count, es, 1, &bytes) : c->status;
    if (!rc && (root < 0 || root >= c->group_size[g]))
        rc = tgc_comm_fail(c, TGC_COMM_ERR_ARG, c->rank, "root %d outside the group of %d ranks", root,
                           c->group_size[g]);
    if (!rc) rc = comm_check_buf(c, buf, bytes, "buf");
    if (!rc) rc = c->vt->broadcast ? c->vt->broadcast(c, g, buf, count, dt, root) : comm_unsupported(c);
    return comm_end(c, rc, bytes);
}

static int comm_check_peer(tgc_comm *c, int peer, int tag, const char *what)
{
    if (peer < 0 || peer >= c->n)
        return tgc_comm_fail(c, TGC_COMM_ERR_ARG, c->rank, "%s rank %d outside the world of %d ranks", what, peer,
                             c->n);
    if (tag < 0) return tgc_comm_fail(c, TGC_COMM_ERR_ARG, c->rank, "negative tag %d", tag);
    return TGC_COMM_OK;
}

/* One point-to-point direction: checks and the byte count. */
static int comm_p2p_args(tgc_comm *c, const void *buf, size_t count, tgc_comm_dtype dt, int peer, int tag,
                         const char *what, size_t *bytes)
{
    size_t es = comm_check_type(c, dt, false, 0);
    int rc = es ? comm_bytes(c, count, es, 1, bytes) : c->status;
    if (!rc) rc = comm_check_peer(c, peer, tag, what);
    if (!rc) rc = comm_check_buf(c, buf, *bytes, "buf");
    return rc;
}

int tgc_comm_send(tgc_comm *c, const void *buf, size_t count, tgc_comm_dtype dt, int peer, int tag)
{
    size_t bytes = 0;
    int rc = comm_begin(c, TGC_COMM_SEND, TGC_COMM_WORLD);
    if (!rc) rc = comm_p2p_args(c, buf, count, dt, peer, tag, "destination", &bytes);
    if (!rc) rc = c->vt->send ? c->vt->send(c, buf, bytes, peer, tag) : comm_unsupported(c);
    return comm_end(c, rc, bytes);
}

int tgc_comm_recv(tgc_comm *c, void *buf, size_t count, tgc_comm_dtype dt, int peer, int tag)
{
    size_t bytes = 0;
    int rc = comm_begin(c, TGC_COMM_RECV, TGC_COMM_WORLD);
    if (!rc) rc = comm_p2p_args(c, buf, count, dt, peer, tag, "source", &bytes);
    if (!rc) rc = c->vt->recv ? c->vt->recv(c, buf, bytes, peer, tag) : comm_unsupported(c);
    return comm_end(c, rc, bytes);
}

int tgc_comm_sendrecv(tgc_comm *c, const void *send, size_t send_count, int dst, void *recv, size_t recv_count,
                      int src, tgc_comm_dtype dt, int tag)
{
    return tgc_comm_sendrecv_tags(c, send, send_count, dst, tag, recv, recv_count, src, tag, dt);
}

int tgc_comm_sendrecv_tags(tgc_comm *c, const void *send, size_t send_count, int dst, int send_tag, void *recv,
                           size_t recv_count, int src, int recv_tag, tgc_comm_dtype dt)
{
    size_t sbytes = 0, rbytes = 0;
    int rc = comm_begin(c, TGC_COMM_SEND, TGC_COMM_WORLD);
    if (!rc) rc = comm_p2p_args(c, send, send_count, dt, dst, send_tag, "destination", &sbytes);
    if (!rc) rc = comm_p2p_args(c, recv, recv_count, dt, src, recv_tag, "source", &rbytes);
    if (!rc)
        rc = c->vt->sendrecv ? c->vt->sendrecv(c, send, sbytes, dst, send_tag, recv, rbytes, src, recv_tag)
                             : comm_unsupported(c);
    rc = comm_end(c, rc, sbytes);
    if (rc == TGC_COMM_OK) { /* the receive half */
        c->cur_kind = TGC_COMM_RECV;
        comm_end(c, rc, rbytes);
    }
    return rc;
}

int tgc_comm_barrier(tgc_comm *c, tgc_comm_group g)
{
    int rc = comm_begin(c, TGC_COMM_BARRIER, g);
    if (!rc) rc = c->vt->barrier ? c->vt->barrier(c, g) : comm_unsupported(c);
    return comm_end(c, rc, 0);
}

int tgc_comm_abort(tgc_comm *c, int rank, const char *reason)
{
    c->vt->abort(c, rank, reason ? reason : "aborted");
    return TGC_COMM_OK;
}
