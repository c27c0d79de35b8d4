/* The planner of planner.h: legality, the memory and step-time model, the
 * search and its explanation. */
#include "planner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/util.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

void plan_cluster_defaults(plan_cluster *c)
{
    memset(c, 0, sizeof *c);
    c->gpus_per_node = 8;
    c->peak_flops = 312e12; /* A100: dense bf16/fp16 tensor cores */
    /* The compute rate saturates in the micro-batch's tokens n = b s:
     * rate = peak eff_max n / (n + n_half h_ref / h), wider GEMMs (every
     * GEMM of a layer has one dimension h, whatever t) filling the GPU
     * with fewer tokens. n_half = 800 tokens at h = 4096 (b_half = 0.4 at
     * s = 2048) gives the ~30% that b = 1 -> 8 gains in the paper's figure
     * 7 (h = 4096); eff_max puts the paper's GPT runs within 10% of their
     * measured 137-163 TFLOP/s (docs/planner.md). */
    c->eff_max = 0.68;
    c->n_half = 800.0;
    c->h_ref = 4096.0;
    c->intra_bw = 300e9; /* NVLink 3 (NVSwitch): 300 GB/s per GPU and direction */
    c->inter_bw = 25e9;  /* one 200 Gb/s HDR InfiniBand adapter per GPU */
    c->hbm_bw = 2.0e12;  /* A100 80GB: 2039 GB/s */
}

bool plan_config_valid(const cost_model *m, const plan_cluster *c, const plan_request *r, const plan_config *cfg,
                       char *why, size_t cap)
{
    const plan_config *k = cfg;
#define BAD(...) do { snprintf(why, cap, __VA_ARGS__); return false; } while (0)
    if (k->t < 1 || k->p < 1 || k->d < 1 || k->b < 1 || k->v < 1) BAD("every degree must be at least 1");
    if (k->t * k->p * k->d != c->gpus)
        BAD("t p d = %lld x %lld x %lld is not the %lld GPUs", (long long)k->t, (long long)k->p, (long long)k->d,
            (long long)c->gpus);
    if (k->t > c->gpus_per_node || c->gpus_per_node % k->t)
        BAD("t = %lld does not fit a node of %lld GPUs (tensor parallelism stays inside a node)", (long long)k->t,
            (long long)c->gpus_per_node);
    if (m->a % k->t || m->h % k->t) BAD("t = %lld does not divide the %lld heads", (long long)k->t, (long long)m->a);
    if (m->g > 0 && m->g % k->t)
        BAD("t = %lld does not divide the %lld query groups (num-query-groups)", (long long)k->t, (long long)m->g);
    if (m->l % (k->p * k->v))
        BAD("%lld layers do not split into p v = %lld chunks", (long long)m->l, (long long)(k->p * k->v));
    if (r->B % (k->b * k->d))
        BAD("B = %lld does not divide by b d = %lld", (long long)r->B, (long long)(k->b * k->d));
    int64_t mb = r->B / (k->b * k->d);
    if (k->v > 1 && r->pipe == PLAN_PIPE_GPIPE) BAD("GPipe runs one model chunk per rank (v = 1)");
    if (k->v > 1 && (k->p < 2 || mb % k->p))
        BAD("the interleaved schedule needs p > 1 and m = %lld a multiple of p = %lld", (long long)mb,
            (long long)k->p);
    if (k->sp && k->t < 2) BAD("sequence parallelism needs t > 1");
#undef BAD
    return true;
}

/* Bytes the non-GEMM kernels of one layer move for one micro-batch,
 * forward: the norm/dropout/residual region (two layer norms, two fused
 * bias-dropout-adds with their masks: 22 sbh, split by SP), bias-GeLU (16
 * sbh / t) and the fused scale-mask-softmax with the attention dropout
 * (9 a s^2 b / t), or, with fused attention, the attention op's reads of
 * q, k, v and writes of its output and row log-sum-exp ((8 sbh + 4 a s b)
 * / t: the scores stay on chip). The backward pass moves about twice as
 * much. */
static void layer_ew_bytes(const cost_model *m, const plan_config *k, double *region, double *core)
{
    double sbh = (double)m->s * (double)k->b * (double)m->h, t = (double)k->t;
    *region = 22.0 * sbh / (k->sp ? t : 1.0) + 16.0 * sbh / t;
    *core = m->fused_attention ? (8.0 * sbh + 4.0 * (double)m->a * (double)m->s * (double)k->b) / t
                               : 9.0 * (double)m->a * (double)m->s * (double)m->s * (double)k->b / t;
}

static double link_bw(const plan_cluster *c, int64_t size, int64_t stride, bool *intra)
{
    *intra = size * stride <= c->gpus_per_node;
    return *intra ? c->intra_bw : c->inter_bw;
}

/* Bytes per GPU of the first pipeline stage. */
static void estimate_memory(const cost_model *m, const plan_request *r, const plan_config *k, plan_estimate *e)
{
    double l = (double)m->l, p = (double)k->p, t = (double)k->t, d = (double)k->d;
    double rest = (double)(m->params - m->layer_params); /* embeddings, final norm: on the first stage */
    e->params = ((double)m->layer_params / p + rest) / t;
    e->mem_states = e->params * (r->dist_opt ? 6.0 + 12.0 / d : 18.0);
    /* 1F1B: the first stage holds min(m, p) micro-batches of its l/p layers;
     * interleaving (1 + (p-1)/(p v)) times as many (Korthikanti et al.). */
    double inflight = k->p == 1 ? 1.0 : (double)(e->m < k->p ? e->m : k->p);
    if (r->pipe == PLAN_PIPE_GPIPE && k->p > 1) inflight = (double)e->m; /* all forwards before any backward */
    double layers = k->p == 1 ? l : l / p * inflight;
    if (k->v > 1) layers *= 1.0 + (p - 1.0) / (p * (double)k->v);
    double act = layers * cost_act_layer(m, k->b, k->t, k->sp, k->rc);
    if (k->rc == COST_RECOMPUTE_FULL) act += cost_act_layer(m, k->b, k->t, k->sp, COST_RECOMPUTE_NONE);
    double sbh = (double)m->s * (double)k->b * (double)m->h;
    act += inflight * sbh / (k->sp ? t : 1.0); /* the embedding's dropout mask */
    if (k->p == 1) act += 4.0 * sbh * (1.0 + (double)m->V / (double)m->h) / t; /* the LM head and its loss */
    e->mem_act = act;
    e->mem_total = e->mem_states + e->mem_act;
}

void plan_estimate_config(const cost_model *m, const plan_cluster *c, const plan_request *r, const plan_config *k,
                          plan_estimate *e)
{
    memset(e, 0, sizeof *e);
    e->m = r->B / (k->b * k->d);
    estimate_memory(m, r, k, e);
    double t = (double)k->t, p = (double)k->p, v = (double)k->v, mb = (double)e->m;
    double sbh = (double)m->s * (double)k->b * (double)m->h, stage_layers = (double)m->l / p;
    double n = (double)k->b * (double)m->s;
    double n_half = c->n_half * (c->h_ref > 0 ? c->h_ref / (double)m->h : 1.0);
    e->rate = c->peak_flops * c->eff_max * n / (n + n_half);
    double flops = cost_train_flops(m, k->b, k->rc);
    /* The pipeline runs at its slowest stage's pace: the last one, with its
     * l/p layers and the LM head (6 b s h V, forward and backward). */
    double head = 6.0 * sbh * (double)m->V;
    e->t_gemm = (k->p == 1 ? flops : (flops - head) / p + head) / t / e->rate;
    double region, core;
    layer_ew_bytes(m, k, &region, &core);
    double passes = k->rc == COST_RECOMPUTE_FULL ? 4.0 : 3.0;
    double ew = passes * (region + core) + (k->rc == COST_RECOMPUTE_SELECTIVE && !m->fused_attention ? core : 0.0);
    e->t_mem = stage_layers * ew / c->hbm_bw;
    double bw = link_bw(c, k->t, 1, &e->tp_intra);
    if (k->t > 1)
        e->t_tp = stage_layers * 8.0 * sbh * (t - 1.0) / t * 2.0 * (k->rc == COST_RECOMPUTE_FULL ? 1.5 : 1.0) / bw;
    bw = link_bw(c, k->p, k->t * k->d, &e->pp_intra);
    if (k->p > 1) e->t_pp = 2.0 * v * sbh * 2.0 / (r->scatter_gather ? t : 1.0) / bw;
    e->t_mb = e->t_gemm + e->t_mem + e->t_tp + e->t_pp;
    bw = link_bw(c, k->d, k->t, &e->dp_intra);
    if (k->d > 1) e->t_dp = 2.0 * ((double)k->d - 1.0) / (double)k->d * e->params * 2.0 / bw;
    double slots = mb + (p - 1.0) / v;
    e->t_step = slots * e->t_mb + e->t_dp;
    e->bubble = (p - 1.0) / (v * mb);
    e->comm_share = (slots * (e->t_tp + e->t_pp) + e->t_dp) / e->t_step;
    e->tflops = flops * mb * (double)k->d / e->t_step / (double)c->gpus / 1e12;
}

/* ---- the search ------------------------------------------------------------------ */

static int result_cmp(const void *a, const void *b)
{
    const plan_result *x = a, *y = b;
    if (x->est.t_step != y->est.t_step) return x->est.t_step < y->est.t_step ? -1 : 1;
    if (x->est.mem_total != y->est.mem_total) return x->est.mem_total < y->est.mem_total ? -1 : 1;
    const int64_t kx[] = {x->cfg.t, x->cfg.p, x->cfg.d, x->cfg.b, x->cfg.v, x->cfg.sp, x->cfg.rc};
    const int64_t ky[] = {y->cfg.t, y->cfg.p, y->cfg.d, y->cfg.b, y->cfg.v, y->cfg.sp, y->cfg.rc};
    for (size_t i = 0; i < ARRAY_LEN(kx); i++)
        if (kx[i] != ky[i]) return kx[i] < ky[i] ? -1 : 1;
    return 0;
}

typedef struct searcher {
    const cost_model *m;
    const plan_cluster *c;
    const plan_request *r;
    plan_search_out *out;
    int cap;
} searcher;

static void consider(searcher *S, const plan_config *k)
{
    char why[256];
    if (!plan_config_valid(S->m, S->c, S->r, k, why, sizeof why)) return;
    plan_result res = {*k, {0}};
    plan_estimate_config(S->m, S->c, S->r, k, &res.est);
    plan_search_out *o = S->out;
    if (o->nvalid++ == 0 || res.est.mem_total < o->least.est.mem_total) o->least = res;
    if (res.est.mem_total > S->c->mem_bytes) return;
    if (o->nfit == S->cap) {
        S->cap = S->cap ? 2 * S->cap : 256;
        o->fit = xrealloc(o->fit, (size_t)S->cap * sizeof *o->fit);
    }
    o->fit[o->nfit++] = res;
}

/* Every b, v, SP and recomputation of one (t, p, d). */
static void search_tpd(searcher *S, int64_t t, int64_t p, int64_t d)
{
    const plan_request *r = S->r;
    if (r->B % d) return;
    for (int64_t b = 1; b <= r->B / d && b <= r->max_b; b++) {
        if ((r->B / d) % b || (r->b && b != r->b)) continue;
        for (int64_t v = 1; v <= S->m->l / p; v++) {
            if ((S->m->l / p) % v || (r->v && v != r->v)) continue;
            if ((r->pipe == PLAN_PIPE_1F1B || r->pipe == PLAN_PIPE_GPIPE) && v > 1) continue;
            if (r->pipe == PLAN_PIPE_INTERLEAVED && p > 1 && v == 1) continue;
            for (int sp = 0; sp < 2; sp++) {
                if ((r->sp >= 0 && sp != r->sp) || (sp && t < 2)) continue;
                for (int rc = 0; rc < COST_RECOMPUTE_COUNT; rc++) {
                    if (r->rc >= 0 && rc != r->rc) continue;
                    /* Fused attention: selective recomputes nothing, so it is none again. */
                    if (S->m->fused_attention && rc == COST_RECOMPUTE_SELECTIVE && r->rc < 0) continue;
                    plan_config k = {t, p, d, b, v, sp != 0, (cost_recompute)rc};
                    consider(S, &k);
                }
            }
        }
    }
}

void plan_search(const cost_model *m, const plan_cluster *c, const plan_request *r, plan_search_out *out)
{
    memset(out, 0, sizeof *out);
    searcher S = {m, c, r, out, 0};
    int64_t n = c->gpus;
    for (int64_t t = 1; t <= c->gpus_per_node && t <= n; t++) {
        if (n % t || (r->t && t != r->t)) continue;
        for (int64_t p = 1; p <= m->l; p++) {
            if (m->l % p || (n / t) % p || (r->p && p != r->p)) continue;
            int64_t d = n / (t * p);
            if (r->d && d != r->d) continue;
            search_tpd(&S, t, p, d);
        }
    }
    if (out->nfit > 1) qsort(out->fit, (size_t)out->nfit, sizeof *out->fit, result_cmp); /* fit is NULL when none fits */
}

void plan_search_free(plan_search_out *out)
{
    free(out->fit);
    memset(out, 0, sizeof *out);
}

/* ---- why the first wins ------------------------------------------------------------------ */

enum { TERM_COMPUTE, TERM_BUBBLE, TERM_TP, TERM_PP, TERM_DP, TERM_COUNT };

/* The step split into what it is spent on (they sum to t_step). */
static void step_terms(const plan_result *x, double *term)
{
    const plan_estimate *e = &x->est;
    double mb = (double)e->m, fill = (double)(x->cfg.p - 1) / (double)x->cfg.v;
    term[TERM_COMPUTE] = mb * (e->t_gemm + e->t_mem);
    term[TERM_BUBBLE] = fill * e->t_mb;
    term[TERM_TP] = mb * e->t_tp;
    term[TERM_PP] = mb * e->t_pp;
    term[TERM_DP] = e->t_dp;
}

static const char *const term_names[TERM_COUNT] = {
    "compute (GEMM efficiency at its micro-batch size and recomputation)", "the pipeline bubble",
    "tensor-parallel all-reduces", "pipeline sends", "the data-parallel gradient all-reduce"};

void plan_cfg_str(const plan_config *k, char *buf, size_t cap)
{
    snprintf(buf, cap, "t=%lld p=%lld d=%lld b=%lld v=%lld%s recompute %s", (long long)k->t, (long long)k->p,
             (long long)k->d, (long long)k->b, (long long)k->v, k->sp ? " SP" : "", cost_recompute_name(k->rc));
}

char *plan_explain(const plan_search_out *s, const plan_cluster *c, const plan_request *r)
{
    strbuf out;
    sb_init(&out);
    if (s->nfit == 0) return out.s ? out.s : xstrdup("");
    const plan_result *w = &s->fit[0], *rival = NULL;
    int64_t min_p = w->cfg.p;
    for (int i = 1; i < s->nfit; i++) {
        const plan_config *k = &s->fit[i].cfg;
        if (!rival && (k->t != w->cfg.t || k->p != w->cfg.p || k->d != w->cfg.d)) rival = &s->fit[i];
        if (k->t == w->cfg.t && k->p < min_p) min_p = k->p;
    }
    if (!rival && s->nfit > 1) rival = &s->fit[1];
    char a[128];
    plan_cfg_str(&w->cfg, a, sizeof a);
    sb_printf(&out, "The first (%s) wins: ", a);
    if (w->cfg.t > 1)
        sb_printf(&out, "tensor parallelism stays %s (t=%lld%s, %g GB/s), ", w->est.tp_intra ? "inside a node" :
                  "across nodes", (long long)w->cfg.t, r->t ? ", given" : "",
                  (w->est.tp_intra ? c->intra_bw : c->inter_bw) / 1e9);
    else
        sb_printf(&out, "no tensor parallelism%s (t=1), ", r->t ? " (given)" : "");
    if (r->p)
        sb_printf(&out, "p=%lld (given, %.1f GiB of %.0f GiB used), ", (long long)w->cfg.p, w->est.mem_total / GIB,
                  c->mem_bytes / GIB);
    else if (min_p == w->cfg.p)
        sb_printf(&out, "p=%lld is the fewest pipeline stages that fit %.0f GiB with t=%lld (%.1f GiB used), ",
                  (long long)w->cfg.p, c->mem_bytes / GIB, (long long)w->cfg.t, w->est.mem_total / GIB);
    else {
        const plan_result *few = NULL; /* the fastest with the fewest stages */
        for (int i = 1; i < s->nfit && !few; i++)
            if (s->fit[i].cfg.t == w->cfg.t && s->fit[i].cfg.p == min_p) few = &s->fit[i];
        char f[128];
        plan_cfg_str(&few->cfg, f, sizeof f);
        sb_printf(&out, "p=%lld (p=%lld also fits, at best as %s: %.4g s, %.1f GiB), ", (long long)w->cfg.p,
                  (long long)min_p, f, few->est.t_step, few->est.mem_total / GIB);
    }
    sb_printf(&out, "and d=%lld data-parallel replica%s take%s the rest of the %lld GPUs", (long long)w->cfg.d,
              w->cfg.d == 1 ? "" : "s", w->cfg.d == 1 ? "s" : "", (long long)c->gpus);
    if (rival) {
        double tw[TERM_COUNT], tr[TERM_COUNT];
        step_terms(w, tw);
        step_terms(rival, tr);
        int best = 0;
        for (int i = 1; i < TERM_COUNT; i++)
            if (tr[i] - tw[i] > tr[best] - tw[best]) best = i;
        char b[128];
        plan_cfg_str(&rival->cfg, b, sizeof b);
        sb_printf(&out, ". Against %s (%.1f%% slower), it saves most on %s: %.3g s against %.3g s per step",
                  b, 100.0 * (rival->est.t_step / w->est.t_step - 1.0), term_names[best], tw[best], tr[best]);
    }
    sb_puts(&out, ".");
    return out.s;
}
