/* Pipeline schedules (passes/pipeline.h) against the paper's formulas and
 * Megatron-LM's order, over a grid of (p, v, m) and forward/backward times:
 *
 *  - the bubble (step - compute) / compute is (p-1)/m for GPipe and 1F1B
 *    and (p-1)/(v m) for interleaved, exactly;
 *  - the most (chunk, micro-batch) activations a rank holds: m for GPipe,
 *    min(p - r, m) for 1F1B (at most p), min(w + 1, v m) for interleaved
 *    with w = 2(p-r-1) + (v-1)p its warm-up;
 *  - each rank's forwards and backwards come in Megatron's order, written
 *    out here from the paper's description (warm-up forwards, then one
 *    forward and one backward, then the remaining backwards; the k-th
 *    forward of the interleaved schedule is micro-batch p floor(k / pv) +
 *    k mod p of chunk (k mod pv) / p, the backwards visit the chunks in
 *    reverse);
 *  - bad lists are caught: a deadlock names the waiting ranks, messages
 *    received out of order, a backward before its gradient;
 *  - the Chrome trace writer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "passes/pipeline.h"
#include "runtime/io/trace.h"

static int imin(int a, int b) { return a < b ? a : b; }

/* The k-th forward (fwd) or backward of a rank, as (chunk, micro-batch). */
static void expected_item(pipe_kind kind, int p, int v, int k, bool fwd, int *c, int *mb)
{
    if (kind != PIPE_INTERLEAVED) {
        *c = 0;
        *mb = k;
        return;
    }
    int in_group = k % (p * v);
    *c = fwd ? in_group / p : v - 1 - in_group / p;
    *mb = k / (p * v) * p + k % p;
}

static int warmup(pipe_kind kind, int p, int v, int m, int r)
{
    if (kind == PIPE_GPIPE) return m;
    if (kind == PIPE_1F1B) return imin(p - r - 1, m);
    return imin(2 * (p - r - 1) + (v - 1) * p, m * v);
}

/* The compute order of rank r: w forwards, (forward, backward) pairs, then
 * the backwards left. */
static void check_order(const pipe_schedule *s, int r)
{
    int T = s->m * s->v, w = warmup(s->kind, s->p, s->v, s->m, r), nf = 0, nb = 0, bad = 0;
    for (int i = 0; i < s->len[r]; i++) {
        const pipe_instr *in = &s->ins[r][i];
        if (in->op != PIPE_FWD && in->op != PIPE_BWD) continue;
        bool fwd = in->op == PIPE_FWD;
        /* Which comes next: a forward while warming up or when the last op
         * was a backward in the steady phase; a backward otherwise. */
        bool want_fwd = nf < T && (nf < w || nf - w == nb);
        int c, mb;
        expected_item(s->kind, s->p, s->v, fwd ? nf : nb, fwd, &c, &mb);
        if (fwd != want_fwd || in->chunk != c || in->mb != mb) bad++;
        if (fwd) nf++;
        else nb++;
    }
    if (bad || nf != T || nb != T)
        fprintf(stderr, "    %s p=%d v=%d m=%d rank %d: %d instructions out of Megatron's order\n",
                pipe_kind_name(s->kind), s->p, s->v, s->m, r, bad);
    CHECK(bad == 0 && nf == T && nb == T);
}

static int expected_peak(pipe_kind kind, int p, int v, int m, int r)
{
    if (kind == PIPE_GPIPE) return m;
    return imin(warmup(kind, p, v, m, r) + 1, m * v);
}

static void check_case(pipe_kind kind, int p, int v, int m, double tf, double tb)
{
    pipe_schedule s;
    char err[2048];
    bool built = pipe_build(&s, kind, p, v, m, 1, NULL, err, sizeof err);
    CHECK(built);
    if (!built) return;
    CHECK(s.fallbacks == 0);
    pipe_sim sim;
    bool ok = pipe_simulate(&s, tf, tb, &sim, err, sizeof err);
    if (!ok) fprintf(stderr, "    %s p=%d v=%d m=%d: %s\n", pipe_kind_name(kind), p, v, m, err);
    CHECK(ok);
    double want = (double)(p - 1) / (kind == PIPE_INTERLEAVED ? v * m : m);
    /* Sums of small integers times tf and tb: exact in double. */
    if (ok && fabs(sim.bubble - want) > 1e-12)
        fprintf(stderr, "    %s p=%d v=%d m=%d tf=%g tb=%g: bubble %.17g, want %.17g\n", pipe_kind_name(kind), p, v,
                m, tf, tb, sim.bubble, want);
    CHECK(!ok || fabs(sim.bubble - want) <= 1e-12);
    CHECK(!ok || fabs(sim.total - (double)(m * v + p - 1) * (tf + tb)) <= 1e-9);
    for (int r = 0; ok && r < p; r++) {
        int peak = expected_peak(kind, p, v, m, r);
        if (sim.peak[r] != peak)
            fprintf(stderr, "    %s p=%d v=%d m=%d rank %d: peak %d, want %d\n", pipe_kind_name(kind), p, v, m, r,
                    sim.peak[r], peak);
        CHECK(sim.peak[r] == peak);
        if (kind == PIPE_1F1B) CHECK(sim.peak[r] <= p);
        CHECK(fabs(sim.idle[r] - (sim.total - m * v * (tf + tb)) / sim.total) < 1e-12);
        check_order(&s, r);
    }
    pipe_sim_free(&sim, p);
    pipe_schedule_free(&s);
}

static void test_grid(void)
{
    static const double times[][2] = {{1, 1}, {1, 2}, {2, 3}};
    for (int t = 0; t < 3; t++)
        for (int p = 1; p <= 8; p++)
            for (int m = 1; m <= 16; m++) {
                check_case(PIPE_GPIPE, p, 1, m, times[t][0], times[t][1]);
                check_case(PIPE_1F1B, p, 1, m, times[t][0], times[t][1]);
                for (int v = 1; v <= 4 && m % p == 0; v++)
                    check_case(PIPE_INTERLEAVED, p, v, m, times[t][0], times[t][1]);
            }
}

static void test_errors(void)
{
    pipe_schedule s;
    char err[512];
    CHECK(!pipe_build(&s, PIPE_INTERLEAVED, 4, 2, 6, 1, NULL, err, sizeof err));
    CHECK(strstr(err, "m = 6 micro-batches, p = 4 ranks") != NULL);
    CHECK(!pipe_build(&s, PIPE_1F1B, 2, 2, 4, 1, NULL, err, sizeof err));
    CHECK(strstr(err, "--pipeline-schedule interleaved") != NULL);
    CHECK(!pipe_build(&s, PIPE_GPIPE, 0, 1, 4, 1, NULL, err, sizeof err));
}

/* A schedule of two ranks with hand-written lists. */
static pipe_schedule two_ranks(pipe_instr *r0, int n0, pipe_instr *r1, int n1, int m)
{
    pipe_schedule s = {.kind = PIPE_1F1B, .p = 2, .v = 1, .m = m, .d = 1};
    static int len[2];
    static pipe_instr *ins[2];
    len[0] = n0, len[1] = n1, ins[0] = r0, ins[1] = r1;
    s.len = len;
    s.ins = ins;
    return s;
}

#define I(op, c, mb, peer) ((pipe_instr){PIPE_##op, c, mb, peer})

static bool simulate(const pipe_schedule *s, char *err, size_t n)
{
    pipe_sim sim;
    bool ok = pipe_simulate(s, 1, 2, &sim, err, n);
    pipe_sim_free(&sim, s->p);
    return ok;
}

static void test_bad_lists(void)
{
    char err[2048];
    /* Both ranks wait first: rank 0 for a gradient, rank 1 for an input. */
    pipe_instr a0[] = {I(RECV_BWD, 0, 0, 1), I(FWD, 0, 0, -1), I(SEND_FWD, 0, 0, 1), I(BWD, 0, 0, -1),
                       I(OPTIMIZER, -1, -1, -1)};
    pipe_instr a1[] = {I(RECV_FWD, 0, 0, 0), I(FWD, 0, 0, -1), I(BWD, 0, 0, -1), I(SEND_BWD, 0, 0, 0),
                       I(OPTIMIZER, -1, -1, -1)};
    pipe_schedule s = two_ranks(a0, 5, a1, 5, 1);
    CHECK(!simulate(&s, err, sizeof err));
    CHECK(strstr(err, "deadlock") && strstr(err, "rank 0 waits at instruction 0 (recv-bwd B0.0 <- s1 (rank 1))") &&
          strstr(err, "rank 1 waits at instruction 0"));
    /* The same lists in a working order. */
    pipe_instr b0[] = {I(FWD, 0, 0, -1), I(SEND_FWD, 0, 0, 1), I(RECV_BWD, 0, 0, 1), I(BWD, 0, 0, -1),
                       I(OPTIMIZER, -1, -1, -1)};
    s = two_ranks(b0, 5, a1, 5, 1);
    CHECK(simulate(&s, err, sizeof err));
    /* Rank 0 sends micro-batch 1 before 0; rank 1 receives 0 first. */
    pipe_instr c0[] = {I(FWD, 0, 0, -1), I(FWD, 0, 1, -1), I(SEND_FWD, 0, 1, 1), I(SEND_FWD, 0, 0, 1),
                       I(RECV_BWD, 0, 0, 1), I(BWD, 0, 0, -1), I(RECV_BWD, 0, 1, 1), I(BWD, 0, 1, -1),
                       I(OPTIMIZER, -1, -1, -1)};
    pipe_instr c1[] = {I(RECV_FWD, 0, 0, 0), I(FWD, 0, 0, -1), I(BWD, 0, 0, -1), I(SEND_BWD, 0, 0, 0),
                       I(RECV_FWD, 0, 1, 0), I(FWD, 0, 1, -1), I(BWD, 0, 1, -1), I(SEND_BWD, 0, 1, 0),
                       I(OPTIMIZER, -1, -1, -1)};
    s = two_ranks(c0, 9, c1, 9, 2);
    CHECK(!simulate(&s, err, sizeof err));
    CHECK(strstr(err, "disagree on the order") != NULL);
    /* A backward before the gradient it needs was received. */
    pipe_instr d0[] = {I(FWD, 0, 0, -1), I(SEND_FWD, 0, 0, 1), I(BWD, 0, 0, -1), I(RECV_BWD, 0, 0, 1),
                       I(OPTIMIZER, -1, -1, -1)};
    s = two_ranks(d0, 5, a1, 5, 1);
    CHECK(!simulate(&s, err, sizeof err));
    CHECK(strstr(err, "rank 0 runs B0.0 (instruction 2) before receiving its gradient") != NULL);
    /* A message nobody receives: rank 1 sends a weight gradient rank 0 never takes. */
    pipe_instr e1[] = {I(RECV_FWD, 0, 0, 0), I(FWD, 0, 0, -1), I(BWD, 0, 0, -1), I(SEND_BWD, 0, 0, 0),
                       I(SEND_WGRAD, 0, -1, 0), I(OPTIMIZER, -1, -1, -1)};
    s = two_ranks(b0, 5, e1, 6, 1);
    CHECK(!simulate(&s, err, sizeof err));
    CHECK(strstr(err, "rank 1 sends s1 -> s0, micro-batch -1, which rank 0 never receives") != NULL);
}

/* The tied weight: sent at the start, its gradient at the end, before the
 * data-parallel all-reduce and the step. */
static void test_step_ops(void)
{
    pipe_topo t;
    pipe_topo_chain(&t, 4);
    t.weight[0 * 4 + 3] = t.wgrad[3 * 4 + 0] = true;
    pipe_schedule s;
    char err[512];
    CHECK(pipe_build(&s, PIPE_1F1B, 4, 1, 8, 2, &t, err, sizeof err));
    CHECK(s.ins[0][0].op == PIPE_SEND_WEIGHT && s.ins[0][0].peer == 3);
    CHECK(s.ins[3][0].op == PIPE_RECV_WEIGHT && s.ins[3][0].peer == 0);
    int n0 = s.len[0], n3 = s.len[3];
    CHECK(s.ins[0][n0 - 3].op == PIPE_RECV_WGRAD && s.ins[0][n0 - 2].op == PIPE_ALLREDUCE_DP &&
          s.ins[0][n0 - 1].op == PIPE_OPTIMIZER);
    CHECK(s.ins[3][n3 - 3].op == PIPE_SEND_WGRAD && s.ins[3][n3 - 3].peer == 0);
    pipe_sim sim;
    CHECK(pipe_simulate(&s, 1, 2, &sim, err, sizeof err));
    CHECK(sim.bubble == 3.0 / 8.0);
    pipe_sim_free(&sim, s.p);
    pipe_schedule_free(&s);
    pipe_topo_free(&t);
}

static void test_trace(void)
{
    pipe_schedule s;
    char err[512];
    CHECK(pipe_build(&s, PIPE_INTERLEAVED, 2, 2, 4, 1, NULL, err, sizeof err));
    pipe_sim sim;
    CHECK(pipe_simulate(&s, 1, 2, &sim, err, sizeof err));
    rt_trace *t = rt_trace_new(1000);
    rt_trace_schedule(t, &s, &sim, 1000);
    CHECK(rt_trace_count(t) == (size_t)(s.len[0] + s.len[1]));
    char *json = rt_trace_json(t);
    CHECK(strncmp(json, "{\"traceEvents\": [", 17) == 0);
    CHECK(strstr(json, "\"name\": \"process_name\", \"args\": {\"name\": \"rank 1\"}") != NULL);
    CHECK(strstr(json, "\"name\": \"F1.3\", \"cat\": \"forward\"") != NULL);
    /* Rank 1 runs F0.0 at 1 (after rank 0's F0.0), F0.1 at 2, F1.0 at 3 (after rank
     * 0's F1.0, which waited for rank 1's F0.0), then B1.0 at 4 for 2 units. */
    CHECK(strstr(json, "\"pid\": 1, \"tid\": 0, \"ts\": 4000.000, \"dur\": 2000.000, \"name\": \"B1.0\"") != NULL);
    free(json);
    rt_trace_free(t);
    pipe_sim_free(&sim, s.p);
    pipe_schedule_free(&s);
    /* A full buffer drops spans instead of growing; begin/end pairs. */
    t = rt_trace_new(2);
    long h = rt_trace_begin(t, 0, 0, "step \"1\"", "x", 10);
    rt_trace_end(t, h, 25);
    rt_trace_span(t, 1, 1, "b", "y", 0, 1);
    CHECK(rt_trace_begin(t, 0, 0, "c", "z", 0) == -1);
    CHECK(rt_trace_count(t) == 2 && rt_trace_dropped(t) == 1);
    json = rt_trace_json(t);
    CHECK(strstr(json, "\"ts\": 10.000, \"dur\": 15.000, \"name\": \"step \\\"1\\\"\"") != NULL);
    free(json);
    rt_trace_free(t);
}

int main(void)
{
    test_grid();
    test_errors();
    test_bad_lists();
    test_step_ops();
    test_trace();
    CHECK_DONE();
}
