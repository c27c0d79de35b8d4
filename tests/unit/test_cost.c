/* The analytic models of passes/cost.h and the planner of passes/planner.h:
 * the formulas against the paper's own derivations, the checkpoint count
 * against a brute-force minimum, and the planner's legality rules, memory
 * and step-time model against the relations the paper states. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "passes/cost.h"
#include "passes/planner.h"

static bool near(double a, double b, double rel) { return fabs(a - b) <= rel * fabs(b); }

/* GPT-3 175B (the paper's table 2 row). */
static cost_model gpt3(void)
{
    cost_model m = {.name = "gpt3", .l = 96, .h = 12288, .a = 96, .s = 2048, .V = 51200, .ffn = 4 * 12288};
    m.layer_params = m.l * (12 * m.h * m.h + 13 * m.h);
    m.params = m.layer_params + (m.V + m.s) * m.h + 2 * m.h;
    return m;
}

/* The seed's formulas are its per-layer sums: forward 24Bsh^2 + 4Bs^2h per
 * layer and 2BshV for the logits; 3x for forward and backward, 4x for the
 * layers with full recomputation. */
static void test_flops(void)
{
    int64_t B = 3, s = 512, l = 7, h = 640, V = 1000;
    double layer = 24.0 * B * s * h * h + 4.0 * B * (double)s * s * h, logits = 2.0 * B * s * h * V;
    CHECK(near(tgc_model_flops(B, s, l, h, V, true), 4 * l * layer + 3 * logits, 1e-12));
    CHECK(near(tgc_model_flops(B, s, l, h, V, false), 3 * l * layer + 3 * logits, 1e-12));
    cost_model m = {.l = l, .h = h, .a = 10, .s = s, .V = V};
    CHECK(near(cost_train_flops(&m, B, COST_RECOMPUTE_NONE), tgc_model_flops(B, s, l, h, V, false), 1e-12));
    CHECK(near(cost_train_flops(&m, B, COST_RECOMPUTE_FULL), tgc_model_flops(B, s, l, h, V, true), 1e-12));
    /* Selective recomputation repeats the attention core's two batched GEMMs. */
    CHECK(near(cost_train_flops(&m, B, COST_RECOMPUTE_SELECTIVE) - cost_train_flops(&m, B, COST_RECOMPUTE_NONE),
               l * 4.0 * B * (double)s * s * h, 1e-12));
}

/* Korthikanti et al.'s expressions and how they relate. */
static void test_activations(void)
{
    cost_model m = gpt3();
    double sbh = (double)m.s * m.h, core = 5.0 * m.a * m.s / m.h;
    CHECK(near(cost_act_layer(&m, 1, 1, false, COST_RECOMPUTE_NONE), sbh * (34 + core), 1e-12));
    /* With t = 1, TP and TP + SP are the serial layer. */
    CHECK(near(cost_act_layer(&m, 1, 1, true, COST_RECOMPUTE_NONE), sbh * (34 + core), 1e-12));
    CHECK(near(cost_act_layer(&m, 2, 8, false, COST_RECOMPUTE_NONE), 2 * sbh * (10 + 24.0 / 8 + core / 8), 1e-12));
    /* SP divides everything by t; selective recomputation drops the core. */
    CHECK(near(cost_act_layer(&m, 1, 8, true, COST_RECOMPUTE_NONE), sbh * (34 + core) / 8, 1e-12));
    CHECK(near(cost_act_layer(&m, 1, 8, true, COST_RECOMPUTE_SELECTIVE), 34 * sbh / 8, 1e-12));
    CHECK(near(cost_act_layer(&m, 1, 8, false, COST_RECOMPUTE_SELECTIVE), sbh * (10 + 3), 1e-12));
    CHECK(near(cost_act_layer(&m, 1, 8, false, COST_RECOMPUTE_FULL), 2 * sbh, 1e-12));
    CHECK(near(cost_act_layer(&m, 1, 8, true, COST_RECOMPUTE_FULL), 2 * sbh / 8, 1e-12));
    /* Masks: one byte per element of the two hidden dropouts and the attention dropout. */
    CHECK(near(cost_act_layer_masks(&m, 1, 1, false, COST_RECOMPUTE_NONE), 2 * sbh + (double)m.a * m.s * m.s, 1e-12));
    CHECK(near(cost_act_layer_masks(&m, 1, 4, true, COST_RECOMPUTE_SELECTIVE), 2 * sbh / 4, 1e-12));
    /* Every variant saves memory against the one before it. */
    double order[] = {cost_act_layer(&m, 1, 1, false, COST_RECOMPUTE_NONE),
                      cost_act_layer(&m, 1, 8, false, COST_RECOMPUTE_NONE),
                      cost_act_layer(&m, 1, 8, true, COST_RECOMPUTE_NONE),
                      cost_act_layer(&m, 1, 8, true, COST_RECOMPUTE_SELECTIVE),
                      cost_act_layer(&m, 1, 8, true, COST_RECOMPUTE_FULL)};
    for (int i = 1; i < 5; i++) CHECK(order[i] < order[i - 1]);
}

/* c = sqrt(l A_int / A_in) minimises c A_in + (l/c) A_int. */
static void test_checkpoints(void)
{
    double l = 24, in = 3.0, mid = 50.0, c = cost_checkpoints(l, in, mid);
    CHECK(near(c, sqrt(l * mid / in), 1e-12));
    double at = cost_checkpoint_memory(c, l, in, mid);
    for (double x = 0.5; x < 3 * c; x += 0.01) CHECK(cost_checkpoint_memory(x, l, in, mid) >= at - 1e-9);
    CHECK(near(at, 2.0 * sqrt(l * in * mid), 1e-12));
}

static plan_cluster cluster(int64_t gpus, double gib)
{
    plan_cluster c;
    plan_cluster_defaults(&c);
    c.gpus = gpus;
    c.mem_bytes = gib * 1024.0 * 1024.0 * 1024.0;
    return c;
}

static void test_validity(void)
{
    cost_model m = gpt3();
    plan_cluster c = cluster(1536, 80);
    plan_request r = {.B = 1536, .scatter_gather = true, .sp = -1, .rc = -1, .max_b = 64};
    char why[256];
    plan_config ok = {8, 12, 16, 1, 2, true, COST_RECOMPUTE_SELECTIVE};
    CHECK(plan_config_valid(&m, &c, &r, &ok, why, sizeof why));
    plan_config bad[] = {
        {8, 12, 15, 1, 1, false, 0},  /* t p d != n */
        {16, 6, 16, 1, 1, false, 0},  /* TP across nodes */
        {8, 64, 3, 1, 1, false, 0},   /* 96 layers do not split into 64 stages */
        {8, 12, 16, 5, 1, false, 0},  /* B not divisible by b d */
        {8, 12, 16, 16, 2, false, 0}, /* interleaving with m = 6 not a multiple of p = 12 */
        {1, 96, 16, 1, 1, true, 0},   /* SP without TP */
        {8, 1, 192, 1, 2, false, 0},  /* interleaving without a pipeline */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK(!plan_config_valid(&m, &c, &r, &bad[i], why, sizeof why));
}

/* Fused attention (docs/attention.md): the 5as/h of the scores becomes the
 * f32 row log-sum-exp, 4a/h; a layer's activations then grow linearly in s
 * (twice at 2s, where unfused they grow 3.4-fold at GPT-3's sizes);
 * selective recomputation has nothing left to drop; the backward's
 * recomputed scores cost 2 b s^2 h FLOPs per layer. And the planner's
 * search sees the saving: with fused attention, configurations that did not
 * fit do, and the fastest one needs no more memory than before. */
static void test_fused_attention(void)
{
    cost_model m = gpt3(), f = gpt3();
    f.fused_attention = true;
    double sbh = (double)m.s * m.h;
    CHECK(near(cost_act_layer(&f, 1, 1, false, COST_RECOMPUTE_NONE), sbh * (34 + 4.0 * m.a / m.h), 1e-12));
    CHECK(near(cost_act_layer(&f, 1, 8, false, COST_RECOMPUTE_NONE), sbh * (10 + 24.0 / 8 + 4.0 * m.a / m.h / 8), 1e-12));
    CHECK(near(cost_act_layer(&f, 1, 8, true, COST_RECOMPUTE_NONE), sbh * (34 + 4.0 * m.a / m.h) / 8, 1e-12));
    CHECK(near(cost_act_layer(&f, 1, 8, true, COST_RECOMPUTE_SELECTIVE), cost_act_layer(&f, 1, 8, true, COST_RECOMPUTE_NONE),
               1e-12));
    CHECK(near(cost_act_layer(&f, 1, 8, true, COST_RECOMPUTE_FULL), cost_act_layer(&m, 1, 8, true, COST_RECOMPUTE_FULL),
               1e-12));
    CHECK(near(cost_act_layer_masks(&f, 1, 1, false, COST_RECOMPUTE_NONE), 2 * sbh, 1e-12));
    cost_model m2 = m, f2 = f;
    m2.s = f2.s = 2 * m.s;
    double rf = cost_act_layer(&f2, 1, 1, false, COST_RECOMPUTE_NONE) / cost_act_layer(&f, 1, 1, false, COST_RECOMPUTE_NONE);
    double ru = cost_act_layer(&m2, 1, 1, false, COST_RECOMPUTE_NONE) / cost_act_layer(&m, 1, 1, false, COST_RECOMPUTE_NONE);
    CHECK(near(rf, 2.0, 1e-12) && ru > 3.0);
    CHECK(near(cost_train_flops(&f, 2, COST_RECOMPUTE_SELECTIVE) - cost_train_flops(&m, 2, COST_RECOMPUTE_NONE),
               m.l * 2.0 * 2 * (double)m.s * m.s * m.h, 1e-12));
    plan_cluster c = cluster(1536, 80);
    plan_request r = {.B = 1536, .scatter_gather = true, .sp = -1, .rc = -1, .max_b = 64};
    plan_config k = {8, 12, 16, 1, 1, false, COST_RECOMPUTE_NONE};
    plan_estimate eu, ef;
    plan_estimate_config(&m, &c, &r, &k, &eu);
    plan_estimate_config(&f, &c, &r, &k, &ef);
    CHECK(ef.mem_act < 0.7 * eu.mem_act && ef.t_mem < eu.t_mem);
    plan_search_out su, sf;
    plan_search(&m, &c, &r, &su);
    plan_search(&f, &c, &r, &sf);
    CHECK(sf.nfit > su.nfit && sf.fit[0].est.t_step <= su.fit[0].est.t_step);
    plan_search_free(&su);
    plan_search_free(&sf);
}

/* The step-time model keeps the paper's relations. */
static void test_estimates(void)
{
    cost_model m = gpt3();
    plan_cluster c = cluster(1536, 80);
    plan_request r = {.B = 1536, .scatter_gather = true, .sp = -1, .rc = -1, .max_b = 64};
    plan_config k = {8, 12, 16, 1, 1, false, COST_RECOMPUTE_FULL};
    plan_estimate e1, e2, e3, e4;
    plan_estimate_config(&m, &c, &r, &k, &e1);
    CHECK(e1.m == 96 && near(e1.bubble, 11.0 / 96, 1e-12));
    CHECK(near(e1.t_step, (96 + 11) * e1.t_mb + e1.t_dp, 1e-12));
    CHECK(e1.tp_intra && !e1.pp_intra && !e1.dp_intra);
    k.v = 2; /* interleaving: the bubble / v, v times the pipeline traffic */
    plan_estimate_config(&m, &c, &r, &k, &e2);
    CHECK(near(e2.bubble, e1.bubble / 2, 1e-12) && near(e2.t_pp, 2 * e1.t_pp, 1e-12) && e2.mem_act > e1.mem_act);
    k.v = 1, k.sp = true; /* SP: the same bytes on the wire, less activation memory */
    plan_estimate_config(&m, &c, &r, &k, &e3);
    CHECK(near(e3.t_tp, e1.t_tp, 1e-12) && e3.mem_act < e1.mem_act);
    /* TP traffic: 8 b s h (t-1)/t bf16 values per layer, 1.5x with the recomputed forward. */
    CHECK(near(e1.t_tp, 96.0 / 12 * 8 * 2048.0 * 12288 * 7 / 8 * 2 * 1.5 / c.intra_bw, 1e-12));
    r.dist_opt = true; /* the distributed optimizer: 6 + 12/d bytes per parameter */
    plan_estimate_config(&m, &c, &r, &k, &e4);
    CHECK(near(e4.mem_states / e3.mem_states, (6.0 + 12.0 / 16) / 18.0, 1e-12));
    /* A bigger micro-batch runs its GEMMs faster, up to eff_max. */
    k.b = 4;
    plan_estimate e5;
    plan_estimate_config(&m, &c, &r, &k, &e5);
    CHECK(e5.rate > e3.rate && e5.rate < c.peak_flops * c.eff_max);
}

/* The search: sorted, inside memory, honouring fixed degrees; its pick for
 * GPT-3 on the paper's 1536 GPUs keeps TP inside a node. */
static void test_search(void)
{
    cost_model m = gpt3();
    plan_cluster c = cluster(1536, 80);
    plan_request r = {.B = 1536, .scatter_gather = true, .sp = -1, .rc = -1, .max_b = 64};
    plan_search_out s;
    plan_search(&m, &c, &r, &s);
    CHECK(s.nfit > 0 && s.nvalid >= s.nfit);
    for (int i = 0; i < s.nfit; i++) {
        CHECK(s.fit[i].est.mem_total <= c.mem_bytes);
        if (i) CHECK(s.fit[i].est.t_step >= s.fit[i - 1].est.t_step);
    }
    CHECK(s.fit[0].cfg.t == 8 && s.fit[0].cfg.p > 1 && s.fit[0].cfg.d > 1);
    char *why = plan_explain(&s, &c, &r);
    CHECK(strstr(why, "inside a node") != NULL);
    free(why);
    plan_search_free(&s);
    r.t = 4, r.b = 2, r.rc = COST_RECOMPUTE_FULL;
    plan_search(&m, &c, &r, &s);
    for (int i = 0; i < s.nfit; i++)
        CHECK(s.fit[i].cfg.t == 4 && s.fit[i].cfg.b == 2 && s.fit[i].cfg.rc == COST_RECOMPUTE_FULL);
    plan_search_free(&s);
    /* Too little memory: nothing fits, and the least need is reported. */
    c = cluster(64, 8);
    r = (plan_request){.B = 64, .scatter_gather = true, .sp = -1, .rc = -1, .max_b = 64};
    plan_search(&m, &c, &r, &s);
    CHECK(s.nfit == 0 && s.nvalid > 0 && s.least.est.mem_total > c.mem_bytes);
    plan_search_free(&s);
}

/* The paper's conclusions: in the (t, p) = (8, 8) setting of its section
 * 3.4 (full recomputation, 1F1B) the best micro-batch is near 4; its 1T
 * model on 3072 GPUs takes TP across a node's 8 GPUs and 64 stages. */
static void test_paper(void)
{
    cost_model m = {.name = "gpt91b", .l = 72, .h = 10240, .a = 80, .s = 2048, .V = 51200, .ffn = 4 * 10240};
    m.layer_params = m.l * (12 * m.h * m.h + 13 * m.h);
    m.params = m.layer_params + (m.V + m.s) * m.h + 2 * m.h;
    plan_cluster c = cluster(64, 80);
    plan_search_out s;
    int64_t batches[] = {128, 512}, lo[] = {2, 4}, hi[] = {4, 4};
    for (int i = 0; i < 2; i++) {
        plan_request r = {.B = batches[i], .scatter_gather = true, .t = 8, .p = 8, .v = 1, .sp = 0,
                          .rc = COST_RECOMPUTE_FULL, .max_b = 64};
        plan_search(&m, &c, &r, &s);
        CHECK(s.nfit > 0 && s.fit[0].cfg.b >= lo[i] && s.fit[0].cfg.b <= hi[i]);
        plan_search_free(&s);
    }
    cost_model t = {.name = "gpt1t", .l = 128, .h = 25600, .a = 160, .s = 2048, .V = 51200, .ffn = 4 * 25600};
    t.layer_params = t.l * (12 * t.h * t.h + 13 * t.h);
    t.params = t.layer_params + (t.V + t.s) * t.h + 2 * t.h;
    c = cluster(3072, 80);
    plan_request r = {.B = 3072, .scatter_gather = true, .sp = -1, .rc = -1, .max_b = 64};
    plan_search(&t, &c, &r, &s);
    CHECK(s.nfit > 0 && s.fit[0].cfg.t == 8 && s.fit[0].cfg.p == 64);
    plan_search_free(&s);
}

int main(void)
{
    test_flops();
    test_activations();
    test_fused_attention();
    test_checkpoints();
    test_validity();
    test_estimates();
    test_search();
    test_paper();
    CHECK_DONE();
}
