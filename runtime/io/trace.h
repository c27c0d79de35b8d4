/* Chrome trace files (the JSON "traceEvents" format that Perfetto and
 * chrome://tracing open): one process per rank, named threads inside it
 * (compute, communication), and complete ("X") spans with a name, a
 * category, a start and a duration in microseconds.
 *
 * The recorder is generic: the pipeline simulator writes the spans of a
 * simulated step (rt_trace_schedule), and an executor can record what its
 * ranks did (rt_trace_begin / rt_trace_end around each instruction). Spans
 * live in a buffer reserved up front (rt_trace_new's capacity); recording
 * never allocates, is safe from several rank threads at once, and once the
 * buffer is full further spans are counted as dropped rather than grown
 * into, so a training step never allocates for its trace. */
#ifndef TGC_RUNTIME_TRACE_H
#define TGC_RUNTIME_TRACE_H
#include <stdbool.h>
#include <stddef.h>

typedef struct rt_trace rt_trace;

rt_trace *rt_trace_new(size_t capacity);
void rt_trace_free(rt_trace *t);

/* Names shown for a rank (a Chrome "process") and one of its threads. */
void rt_trace_name_rank(rt_trace *t, int rank, const char *name);
void rt_trace_name_thread(rt_trace *t, int rank, int tid, const char *name);

/* A whole span. Names and categories are copied (truncated to 47 and 15
 * characters). */
void rt_trace_span(rt_trace *t, int rank, int tid, const char *name, const char *cat, double ts_us, double dur_us);
/* A span whose end comes later: begin returns its handle (-1 once the
 * buffer is full), end sets its duration. */
long rt_trace_begin(rt_trace *t, int rank, int tid, const char *name, const char *cat, double ts_us);
void rt_trace_end(rt_trace *t, long handle, double end_us);

size_t rt_trace_count(const rt_trace *t);
size_t rt_trace_dropped(const rt_trace *t);

/* One process per rank (mpirun): every rank's spans into the trace of
 * world rank root (collective over the world of c; the spans beyond root's
 * capacity are counted as dropped, the others' traces are left as they
 * are). Span times are CLOCK_MONOTONIC, which the processes of one host
 * share. 0 or a communicator status (runtime/comm/comm.h). */
struct tgc_comm;
int rt_trace_gather(rt_trace *t, struct tgc_comm *c, int root);

/* The JSON text (malloc'd): {"traceEvents": [...], "displayTimeUnit": "ms"},
 * metadata first, then the spans sorted by rank, thread and start. */
char *rt_trace_json(const rt_trace *t);
/* Writes the JSON to path; false with a message in err. */
bool rt_trace_write(const rt_trace *t, const char *path, char *err, size_t errlen);

/* A simulated pipeline step: each rank a process with a compute and a
 * communication thread; forwards and backwards (F0.3, B1.2) on compute,
 * sends, receives (spanning the wait for their message), gradient
 * reductions and the optimizer step on communication. One time unit of
 * the simulation is us_per_unit microseconds. */
struct pipe_schedule;
struct pipe_sim;
void rt_trace_schedule(rt_trace *t, const struct pipe_schedule *s, const struct pipe_sim *sim, double us_per_unit);

#endif
