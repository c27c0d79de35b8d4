/* The learning-rate and weight-decay schedules (runtime/train/schedule.h)
 * against their formulas, written out independently here, at step 0, the
 * end of the warm-up, the middle, the end of the decay and past it; and the
 * --lr-scheduler parser on good and bad specs. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "runtime/train/schedule.h"

#define PI 3.14159265358979323846

static bool near(double a, double b) { return fabs(a - b) <= 1e-14 * fmax(fabs(b), 1e-300); }
#define CHECK_NEAR(a, b)                                                                     \
    do {                                                                                     \
        double a_ = (a), b_ = (b);                                                           \
        if (!near(a_, b_)) fprintf(stderr, "    %s = %.17g, want %.17g\n", #a, a_, b_);      \
        CHECK(near(a_, b_));                                                                 \
    } while (0)

/* Megatron's schedule with warm-up 10 from 1e-4 to 1e-2, decay to 1e-3 at
 * 100, over 120 iterations. */
static rt_schedule megatron(rt_decay_style style)
{
    rt_schedule s;
    rt_schedule_init(&s, 1e-2, 0.1, 120);
    s.min_lr = 1e-3;
    s.warmup_init = 1e-4;
    s.warmup_iters = 10;
    s.decay_iters = 100;
    s.decay = style;
    return s;
}

static void test_warmup(void)
{
    rt_decay_style styles[] = {RT_DECAY_CONSTANT, RT_DECAY_LINEAR, RT_DECAY_COSINE, RT_DECAY_INVSQRT};
    for (size_t i = 0; i < sizeof styles / sizeof *styles; i++) {
        rt_schedule s = megatron(styles[i]);
        CHECK(rt_schedule_lr(&s, 0) == 1e-4);                       /* step 0: the initial rate */
        CHECK_NEAR(rt_schedule_lr(&s, 5), 1e-4 + (1e-2 - 1e-4) * 0.5);
        CHECK_NEAR(rt_schedule_lr(&s, 10), 1e-2);                   /* the end of the warm-up: the peak */
    }
    rt_schedule s = megatron(RT_DECAY_CONSTANT);
    s.warmup_iters = 0;
    CHECK(rt_schedule_lr(&s, 0) == 1e-2); /* no warm-up: the peak from step 0 */
}

static void test_decay(void)
{
    rt_schedule s = megatron(RT_DECAY_CONSTANT);
    CHECK(rt_schedule_lr(&s, 50) == 1e-2 && rt_schedule_lr(&s, 119) == 1e-2);
    s = megatron(RT_DECAY_LINEAR);
    CHECK_NEAR(rt_schedule_lr(&s, 55), 1e-3 + 9e-3 * 0.5);
    CHECK_NEAR(rt_schedule_lr(&s, 100), 1e-3); /* the end of the decay */
    CHECK(rt_schedule_lr(&s, 101) == 1e-3 && rt_schedule_lr(&s, 1000000) == 1e-3); /* past it */
    s = megatron(RT_DECAY_COSINE);
    CHECK_NEAR(rt_schedule_lr(&s, 55), 1e-3 + 9e-3 * 0.5);
    CHECK_NEAR(rt_schedule_lr(&s, 40), 1e-3 + 9e-3 * 0.5 * (1 + cos(PI / 3)));
    CHECK_NEAR(rt_schedule_lr(&s, 100), 1e-3);
    CHECK(rt_schedule_lr(&s, 101) == 1e-3);
    s = megatron(RT_DECAY_INVSQRT); /* max_lr sqrt(warmup / step), floored at min_lr */
    CHECK_NEAR(rt_schedule_lr(&s, 40), 1e-2 * sqrt(10.0 / 40.0));
    CHECK_NEAR(rt_schedule_lr(&s, 90), 1e-2 / 3.0);
    CHECK(rt_schedule_lr(&s, 101) == 1e-3);
    s.min_lr = 5e-3;
    CHECK(rt_schedule_lr(&s, 90) == 5e-3);
    s = megatron(RT_DECAY_INVSQRT);
    s.warmup_iters = 0; /* max(warmup, 1), max(step, 1) */
    CHECK(rt_schedule_lr(&s, 0) == 1e-2 && rt_schedule_lr(&s, 1) == 1e-2);
    CHECK_NEAR(rt_schedule_lr(&s, 4), 1e-2 / 2.0);
}

static void test_wsd(void)
{
    rt_schedule s = megatron(RT_DECAY_WSD);
    s.wsd_decay_iters = 20; /* stable until 80, then down to min_lr at 100 */
    rt_wsd_style styles[] = {RT_WSD_LINEAR, RT_WSD_COSINE, RT_WSD_EXPONENTIAL, RT_WSD_MINUS_SQRT};
    double quarter[] = {0.75, 0.5 * (1 + cos(PI / 4)), 2 * pow(0.5, 0.25) - 1, 0.5};
    for (int i = 0; i < 4; i++) {
        s.wsd = styles[i];
        CHECK_NEAR(rt_schedule_lr(&s, 10), 1e-2); /* stable: min_lr + 1 x (max_lr - min_lr) */
        CHECK_NEAR(rt_schedule_lr(&s, 50), 1e-2);
        CHECK_NEAR(rt_schedule_lr(&s, 80), 1e-2);
        CHECK_NEAR(rt_schedule_lr(&s, 85), 1e-3 + 9e-3 * quarter[i]);
        CHECK_NEAR(rt_schedule_lr(&s, 100), 1e-3);
        CHECK(rt_schedule_lr(&s, 101) == 1e-3);
    }
}

static void test_wd(void)
{
    rt_schedule s;
    rt_schedule_init(&s, 1e-3, 0.05, 100);
    CHECK(rt_schedule_wd(&s, 0) == 0.05 && rt_schedule_wd(&s, 100) == 0.05 && rt_schedule_wd(&s, 500) == 0.05);
    s.start_wd = 0.01;
    s.end_wd = 0.1;
    s.wd_incr = RT_INCR_LINEAR;
    CHECK(rt_schedule_wd(&s, 0) == 0.01);
    CHECK_NEAR(rt_schedule_wd(&s, 25), 0.01 + 0.09 * 0.25);
    CHECK_NEAR(rt_schedule_wd(&s, 100), 0.1);
    CHECK(rt_schedule_wd(&s, 101) == 0.1);
    s.wd_incr = RT_INCR_COSINE; /* 0.5 (cos(pi (1 - r)) + 1): slow, fast, slow */
    CHECK_NEAR(rt_schedule_wd(&s, 0), 0.01);
    CHECK_NEAR(rt_schedule_wd(&s, 50), 0.01 + 0.09 * 0.5);
    CHECK_NEAR(rt_schedule_wd(&s, 25), 0.01 + 0.09 * 0.5 * (cos(PI * 0.75) + 1));
    CHECK_NEAR(rt_schedule_wd(&s, 100), 0.1);
    CHECK(rt_schedule_wd(&s, 1000) == 0.1);
}

static rt_schedule torch(const char *spec)
{
    rt_schedule s;
    rt_schedule_init(&s, 0.1, 0.0, 100);
    char err[256];
    size_t at;
    bool ok = rt_schedule_parse_torch(&s, spec, err, sizeof err, &at);
    if (!ok) fprintf(stderr, "    '%s': %s at %zu\n", spec, err, at);
    CHECK(ok);
    return s;
}

static void test_torch(void)
{
    rt_schedule s = torch("step(step_size=3, gamma=0.5)");
    CHECK(rt_schedule_lr(&s, 0) == 0.1 && rt_schedule_lr(&s, 2) == 0.1);
    CHECK_NEAR(rt_schedule_lr(&s, 3), 0.05);
    CHECK_NEAR(rt_schedule_lr(&s, 10), 0.1 * 0.125);
    s = torch("MultiStepLR(milestones=[2, 5])"); /* gamma 0.1 */
    CHECK(rt_schedule_lr(&s, 1) == 0.1);
    CHECK_NEAR(rt_schedule_lr(&s, 2), 0.01);
    CHECK_NEAR(rt_schedule_lr(&s, 4), 0.01);
    CHECK_NEAR(rt_schedule_lr(&s, 5), 0.001);
    CHECK_NEAR(rt_schedule_lr(&s, 500), 0.001);
    s = torch("exponential(gamma=0.9)");
    CHECK(rt_schedule_lr(&s, 0) == 0.1);
    CHECK_NEAR(rt_schedule_lr(&s, 7), 0.1 * pow(0.9, 7));
    s = torch("cosine(T_max=10, eta_min=0.01)");
    CHECK(rt_schedule_lr(&s, 0) == 0.1);
    CHECK_NEAR(rt_schedule_lr(&s, 5), 0.01 + 0.09 * 0.5);
    CHECK_NEAR(rt_schedule_lr(&s, 10), 0.01);
    CHECK_NEAR(rt_schedule_lr(&s, 15), 0.01 + 0.09 * 0.5); /* past T_max the cosine rises again, as PyTorch's */
    CHECK_NEAR(rt_schedule_lr(&s, 20), 0.1);
    s = torch("cosine_restarts(T_0=4, T_mult=2)"); /* cycles [0, 4), [4, 12), [12, 28) */
    CHECK(rt_schedule_lr(&s, 0) == 0.1 && rt_schedule_lr(&s, 4) == 0.1 && rt_schedule_lr(&s, 12) == 0.1);
    CHECK_NEAR(rt_schedule_lr(&s, 2), 0.05);
    CHECK_NEAR(rt_schedule_lr(&s, 8), 0.05);
    CHECK_NEAR(rt_schedule_lr(&s, 11), 0.1 * 0.5 * (1 + cos(PI * 7 / 8)));
    CHECK_NEAR(rt_schedule_lr(&s, 20), 0.05);
    s = torch("cosine_restarts(T_0=5)");
    CHECK(rt_schedule_lr(&s, 1000000) == 0.1);
    CHECK_NEAR(rt_schedule_lr(&s, 1000003), 0.1 * 0.5 * (1 + cos(PI * 3 / 5)));
    s = torch("linear(start_factor=0.25, end_factor=0.75, total_iters=4)");
    CHECK_NEAR(rt_schedule_lr(&s, 0), 0.025);
    CHECK_NEAR(rt_schedule_lr(&s, 2), 0.05);
    CHECK_NEAR(rt_schedule_lr(&s, 4), 0.075);
    CHECK_NEAR(rt_schedule_lr(&s, 40), 0.075);
    s = torch("LinearLR()"); /* start 1/3, end 1, 5 iterations */
    CHECK_NEAR(rt_schedule_lr(&s, 0), 0.1 / 3);
    CHECK_NEAR(rt_schedule_lr(&s, 5), 0.1);
    s = torch("constant(factor=0.5, total_iters=3)");
    CHECK(rt_schedule_lr(&s, 0) == 0.05 && rt_schedule_lr(&s, 2) == 0.05 && rt_schedule_lr(&s, 3) == 0.1);
}

static void test_sequential(void)
{
    rt_schedule s = torch("linear(start_factor=0.1, total_iters=10) then cosine(T_max=90, eta_min=0.001) at 10");
    CHECK(s.nparts == 2 && s.part_at[1] == 10);
    CHECK_NEAR(rt_schedule_lr(&s, 0), 0.01);
    CHECK_NEAR(rt_schedule_lr(&s, 5), 0.1 * (0.1 + 0.9 * 0.5));
    CHECK(rt_schedule_lr(&s, 10) == 0.1); /* the cosine starts over at its milestone */
    CHECK_NEAR(rt_schedule_lr(&s, 55), 0.001 + 0.099 * 0.5);
    CHECK_NEAR(rt_schedule_lr(&s, 100), 0.001);
    s = torch("constant(factor=0.1, total_iters=2) then exponential(gamma=0.9) at 2 then step(step_size=1,gamma=1) at 4");
    CHECK(s.nparts == 3);
    CHECK_NEAR(rt_schedule_lr(&s, 1), 0.01);
    CHECK(rt_schedule_lr(&s, 2) == 0.1);
    CHECK_NEAR(rt_schedule_lr(&s, 3), 0.09);
    CHECK(rt_schedule_lr(&s, 4) == 0.1 && rt_schedule_lr(&s, 99) == 0.1);
}

/* A bad spec: the message contains want, and the error points at offset at. */
static void check_bad(const char *spec, const char *want, size_t want_at)
{
    rt_schedule s;
    rt_schedule_init(&s, 0.1, 0.0, 100);
    char err[256] = "";
    size_t at = 999;
    CHECK(!rt_schedule_parse_torch(&s, spec, err, sizeof err, &at));
    if (!strstr(err, want) || at != want_at)
        fprintf(stderr, "    '%s': got \"%s\" at %zu, want \"%s\" at %zu\n", spec, err, at, want, want_at);
    CHECK(strstr(err, want) != NULL);
    CHECK(at == want_at);
    CHECK(s.nparts == 0);
}

static void test_parse_errors(void)
{
    check_bad("", "expected a scheduler name, found the end", 0);
    check_bad("cosin(T_max=3)", "unknown scheduler 'cosin'", 0);
    check_bad("cosine", "expected '(' after the scheduler name, found the end", 6);
    check_bad("cosine(T_max=3", "expected ',' or ')'", 14);
    check_bad("cosine(T_max=3.5)", "'3.5' is not an integer", 13);
    check_bad("cosine(T_max=0)", "T_max=0: must be at least 1", 13);
    check_bad("cosine(eta_min=0.1)", "cosine needs the argument T_max", 0);
    check_bad("cosine(T_max=3, Tmax=4)", "cosine has no argument 'Tmax' (it takes T_max, eta_min)", 16);
    check_bad("cosine(T_max=3, T_max=4)", "argument 'T_max' given twice", 16);
    check_bad("step(step_size=2, gamma=x)", "'x' is not a finite number", 24);
    check_bad("step(step_size=2, gamma=1e999)", "'1e999' is not a finite number", 24);
    check_bad("multistep(milestones=[5, 5])", "milestones must be increasing", 25);
    check_bad("multistep(milestones=5)", "expected '[' to open the list of milestones, found '5'", 21);
    check_bad("linear(start_factor=0)", "start_factor=0: must be in (0, 1]", 20);
    check_bad("linear(end_factor=1.5)", "end_factor=1.5: must be in [0, 1]", 18);
    check_bad("constant(factor=2)", "factor=2: must be in (0, 1]", 16);
    check_bad("step(step_size=2) cosine(T_max=3)", "expected 'then' or the end, found 'cosine'", 18);
    check_bad("step(step_size=2) then cosine(T_max=3)", "expected 'at STEP'", 38);
    check_bad("step(step_size=2) then cosine(T_max=3) at", "is not an integer", 41);
    check_bad("step(step_size=2) then cosine(T_max=3) at 0", "must increase from 1", 42);
    check_bad("step(step_size=2) then cosine(T_max=3) at 5 then step(step_size=1) at 5", "must increase", 70);
    check_bad("step(step_size=2) then cosine(T_max=3) after 5", "found 'after'", 39);
}

static void test_check(void)
{
    char err[256];
    rt_schedule s = megatron(RT_DECAY_COSINE);
    CHECK(rt_schedule_check(&s, err, sizeof err));
    s.warmup_iters = 150; /* longer than the decay (Megatron asserts): min_lr right after it */
    CHECK(rt_schedule_check(&s, err, sizeof err));
    CHECK_NEAR(rt_schedule_lr(&s, 75), 1e-4 + (1e-2 - 1e-4) * 0.5);
    CHECK(rt_schedule_lr(&s, 151) == 1e-3);
    s.warmup_iters = 0;
    s.decay_iters = 0;
    CHECK(!rt_schedule_check(&s, err, sizeof err) && strstr(err, "must be at least 1"));
    s = megatron(RT_DECAY_WSD);
    CHECK(!rt_schedule_check(&s, err, sizeof err) && strstr(err, "--lr-wsd-decay-iters"));
    s = megatron(RT_DECAY_LINEAR);
    s.min_lr = 1.0;
    CHECK(!rt_schedule_check(&s, err, sizeof err) && strstr(err, "below --min-lr"));
    s = megatron(RT_DECAY_LINEAR);
    s.start_wd = 0.2;
    CHECK(!rt_schedule_check(&s, err, sizeof err) && strstr(err, "below --start-weight-decay"));
    rt_decay_style d;
    rt_wsd_style w;
    rt_incr_style i;
    CHECK(rt_decay_style_from("inverse-square-root", &d) && d == RT_DECAY_INVSQRT);
    CHECK(rt_decay_style_from("WSD", &d) && d == RT_DECAY_WSD && !rt_decay_style_from("wsd", &d));
    CHECK(rt_wsd_style_from("minus_sqrt", &w) && w == RT_WSD_MINUS_SQRT);
    CHECK(rt_incr_style_from("cosine", &i) && i == RT_INCR_COSINE && !rt_incr_style_from("exp", &i));
}

int main(void)
{
    test_warmup();
    test_decay();
    test_wsd();
    test_wd();
    test_torch();
    test_sequential();
    test_parse_errors();
    test_check();
    CHECK_DONE();
}
