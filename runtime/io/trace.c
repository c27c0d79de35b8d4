#include "trace.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/pipeline.h"
#include "runtime/comm/comm.h"
#include "support/file.h"
#include "support/util.h"

typedef struct span {
    int rank, tid;
    double ts, dur; /* microseconds */
    char name[48], cat[16];
} span;

typedef struct label {
    int rank, tid; /* tid -1: the rank's own name */
    char *name;
} label;

struct rt_trace {
    span *spans;
    size_t cap;
    atomic_size_t n;       /* slots handed out (may pass cap: those are dropped) */
    label *labels;
    size_t nlabels;
};

rt_trace *rt_trace_new(size_t capacity)
{
    rt_trace *t = xcalloc(1, sizeof *t);
    t->cap = capacity;
    t->spans = xcalloc(capacity ? capacity : 1, sizeof *t->spans);
    atomic_init(&t->n, 0);
    return t;
}

void rt_trace_free(rt_trace *t)
{
    if (!t) return;
    for (size_t i = 0; i < t->nlabels; i++) free(t->labels[i].name);
    free(t->labels);
    free(t->spans);
    free(t);
}

static void add_label(rt_trace *t, int rank, int tid, const char *name)
{
    for (size_t i = 0; i < t->nlabels; i++)
        if (t->labels[i].rank == rank && t->labels[i].tid == tid) {
            free(t->labels[i].name);
            t->labels[i].name = xstrdup(name);
            return;
        }
    t->labels = xrealloc(t->labels, (t->nlabels + 1) * sizeof *t->labels);
    t->labels[t->nlabels++] = (label){rank, tid, xstrdup(name)};
}

void rt_trace_name_rank(rt_trace *t, int rank, const char *name) { add_label(t, rank, -1, name); }
void rt_trace_name_thread(rt_trace *t, int rank, int tid, const char *name) { add_label(t, rank, tid, name); }

static void copy_str(char *dst, size_t n, const char *src)
{
    size_t k = src ? strlen(src) : 0;
    if (k >= n) k = n - 1;
    if (k) memcpy(dst, src, k);
    dst[k] = 0;
}

long rt_trace_begin(rt_trace *t, int rank, int tid, const char *name, const char *cat, double ts_us)
{
    size_t i = atomic_fetch_add(&t->n, 1);
    if (i >= t->cap) return -1;
    span *s = &t->spans[i];
    s->rank = rank;
    s->tid = tid;
    s->ts = ts_us;
    s->dur = 0;
    copy_str(s->name, sizeof s->name, name);
    copy_str(s->cat, sizeof s->cat, cat);
    return (long)i;
}

void rt_trace_end(rt_trace *t, long handle, double end_us)
{
    if (handle < 0 || (size_t)handle >= t->cap) return;
    span *s = &t->spans[handle];
    s->dur = end_us > s->ts ? end_us - s->ts : 0;
}

void rt_trace_span(rt_trace *t, int rank, int tid, const char *name, const char *cat, double ts_us, double dur_us)
{
    rt_trace_end(t, rt_trace_begin(t, rank, tid, name, cat, ts_us), ts_us + dur_us);
}

size_t rt_trace_count(const rt_trace *t)
{
    size_t n = atomic_load(&((rt_trace *)t)->n);
    return n < t->cap ? n : t->cap;
}

size_t rt_trace_dropped(const rt_trace *t) { return atomic_load(&((rt_trace *)t)->n) - rt_trace_count(t); }

/* ---- across processes --------------------------------------------------------- */

#define TRACE_TAG 32766 /* the messages of rt_trace_gather (the checkpoints' is 32767) */

/* Rank `from`'s spans (its count, dropped, then the spans) into t. */
static int gather_from(rt_trace *t, tgc_comm *c, int from)
{
    uint64_t head[2] = {0, 0}; /* spans sent, spans that rank dropped */
    int rc = tgc_comm_recv(c, head, 2 * sizeof *head, TGC_COMM_BYTE, from, TRACE_TAG);
    if (rc || !head[0]) {
        if (!rc) atomic_fetch_add(&t->n, (size_t)head[1]);
        return rc;
    }
    size_t k = (size_t)head[0], at = atomic_fetch_add(&t->n, k + (size_t)head[1]);
    bool fits = at + k <= t->cap;
    span *in = fits ? &t->spans[at] : xmalloc(k * sizeof *in);
    rc = tgc_comm_recv(c, in, k * sizeof *in, TGC_COMM_BYTE, from, TRACE_TAG);
    if (!fits) { /* what fits, if anything */
        if (!rc && at < t->cap) memcpy(&t->spans[at], in, (t->cap - at) * sizeof *in);
        free(in);
    }
    return rc;
}

int rt_trace_gather(rt_trace *t, tgc_comm *c, int root)
{
    int me = tgc_comm_rank(c), rc = TGC_COMM_OK;
    if (me != root) {
        uint64_t head[2] = {rt_trace_count(t), rt_trace_dropped(t)};
        rc = tgc_comm_send(c, head, sizeof head, TGC_COMM_BYTE, root, TRACE_TAG);
        if (!rc && head[0]) rc = tgc_comm_send(c, t->spans, (size_t)head[0] * sizeof *t->spans, TGC_COMM_BYTE, root,
                                               TRACE_TAG);
        return rc;
    }
    for (int r = 0; r < tgc_comm_size(c) && !rc; r++)
        if (r != root) rc = gather_from(t, c, r);
    return rc;
}

/* ---- JSON ------------------------------------------------------------------- */

static void put_json_str(strbuf *b, const char *s)
{
    sb_putc(b, '"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') sb_printf(b, "\\%c", ch);
        else if (ch < 0x20) sb_printf(b, "\\u%04x", ch);
        else sb_putc(b, (char)ch);
    }
    sb_putc(b, '"');
}

static int span_cmp(const void *pa, const void *pb)
{
    const span *a = *(const span *const *)pa, *b = *(const span *const *)pb;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    if (a->tid != b->tid) return a->tid < b->tid ? -1 : 1;
    if (a->ts != b->ts) return a->ts < b->ts ? -1 : 1;
    return a < b ? -1 : a > b;
}

char *rt_trace_json(const rt_trace *t)
{
    strbuf b;
    sb_init(&b);
    sb_puts(&b, "{\"traceEvents\": [");
    const char *sep = "\n  ";
    for (size_t i = 0; i < t->nlabels; i++) {
        const label *l = &t->labels[i];
        sb_printf(&b, "%s{\"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"name\": \"%s\", \"args\": {\"name\": ", sep,
                  l->rank, l->tid < 0 ? 0 : l->tid, l->tid < 0 ? "process_name" : "thread_name");
        put_json_str(&b, l->name);
        sb_puts(&b, "}}");
        if (l->tid < 0)
            sb_printf(&b, ",\n  {\"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"name\": \"process_sort_index\", "
                      "\"args\": {\"sort_index\": %d}}", l->rank, l->rank);
        sep = ",\n  ";
    }
    size_t n = rt_trace_count(t);
    const span **order = xmalloc((n + 1) * sizeof *order);
    for (size_t i = 0; i < n; i++) order[i] = &t->spans[i];
    qsort(order, n, sizeof *order, span_cmp);
    for (size_t i = 0; i < n; i++) {
        const span *s = order[i];
        sb_printf(&b, "%s{\"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"name\": ", sep,
                  s->rank, s->tid, s->ts, s->dur);
        put_json_str(&b, s->name);
        sb_puts(&b, ", \"cat\": ");
        put_json_str(&b, s->cat);
        sb_putc(&b, '}');
        sep = ",\n  ";
    }
    free(order);
    sb_puts(&b, "\n], \"displayTimeUnit\": \"ms\"}\n");
    return b.s;
}

bool rt_trace_write(const rt_trace *t, const char *path, char *err, size_t errlen)
{
    char *text = rt_trace_json(t);
    char why[256];
    bool ok = file_write_atomic(path, text, strlen(text), why, sizeof why);
    if (!ok) snprintf(err, errlen, "cannot write the trace '%s': %s", path, why);
    free(text);
    return ok;
}

/* ---- a simulated pipeline step ----------------------------------------------- */

enum { TID_COMPUTE, TID_COMM };

static void schedule_span(rt_trace *t, int r, const pipe_instr *in, double ts, double dur)
{
    char name[64];
    const char *cat = "recv", *dir = "<-";
    int tid = TID_COMM, c = in->chunk, j = in->mb, peer = in->peer;
    switch ((pipe_op)in->op) {
    case PIPE_FWD: snprintf(name, sizeof name, "F%d.%d", c, j); cat = "forward"; tid = TID_COMPUTE; break;
    case PIPE_BWD: snprintf(name, sizeof name, "B%d.%d", c, j); cat = "backward"; tid = TID_COMPUTE; break;
    case PIPE_SEND_FWD: cat = "send", dir = "->"; /* fall through */
    case PIPE_RECV_FWD: snprintf(name, sizeof name, "%s F%d.%d %s s%d", cat, c, j, dir, peer); break;
    case PIPE_SEND_BWD: cat = "send", dir = "->"; /* fall through */
    case PIPE_RECV_BWD: snprintf(name, sizeof name, "%s B%d.%d %s s%d", cat, c, j, dir, peer); break;
    case PIPE_SEND_WEIGHT: cat = "send", dir = "->"; /* fall through */
    case PIPE_RECV_WEIGHT: snprintf(name, sizeof name, "%s weight %s s%d", cat, dir, peer); break;
    case PIPE_SEND_WGRAD: cat = "send", dir = "->"; /* fall through */
    case PIPE_RECV_WGRAD: snprintf(name, sizeof name, "%s wgrad %s s%d", cat, dir, peer); break;
    case PIPE_ALLREDUCE_DP: snprintf(name, sizeof name, "allreduce dp"); cat = "allreduce"; break;
    case PIPE_OPTIMIZER: snprintf(name, sizeof name, "optimizer step"); cat = "optimizer"; tid = TID_COMPUTE; break;
    case PIPE_OP_COUNT: return;
    }
    rt_trace_span(t, r, tid, name, cat, ts, dur);
}

void rt_trace_schedule(rt_trace *t, const pipe_schedule *s, const pipe_sim *sim, double us_per_unit)
{
    char name[32];
    for (int r = 0; r < s->p; r++) {
        snprintf(name, sizeof name, "rank %d", r);
        rt_trace_name_rank(t, r, name);
        rt_trace_name_thread(t, r, TID_COMPUTE, "compute");
        rt_trace_name_thread(t, r, TID_COMM, "communication");
        for (int i = 0; i < s->len[r]; i++)
            schedule_span(t, r, &s->ins[r][i], sim->start[r][i] * us_per_unit,
                          (sim->end[r][i] - sim->start[r][i]) * us_per_unit);
    }
}
