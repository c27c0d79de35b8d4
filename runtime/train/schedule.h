/* Learning-rate and weight-decay schedules: pure functions of the step.
 *
 * Two families (docs/schedules.md):
 *
 *  - Megatron-LM's OptimizerParamScheduler: linear warm-up from warmup_init
 *    to lr over warmup_iters, then constant | linear | cosine |
 *    inverse-square-root | WSD decay to min_lr at decay_iters and min_lr
 *    after it; the weight decay goes from start_wd to end_wd over
 *    wd_incr_iters (constant | linear | cosine).
 *  - PyTorch's StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR,
 *    CosineAnnealingWarmRestarts, LinearLR and ConstantLR, alone or in a
 *    SequentialLR, written as a text spec (`--lr-scheduler`):
 *      linear(start_factor=0.1, total_iters=100) then cosine(T_max=900) at 100
 *    They replace Megatron's lr (the weight decay keeps its schedule).
 *
 * Step k (0-based) is the k-th optimizer update; its rate is the value
 * Megatron's scheduler has after k increments and PyTorch's after k calls
 * of scheduler.step(). Everything is computed in double. */
#ifndef TGC_RT_SCHEDULE_H
#define TGC_RT_SCHEDULE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum rt_decay_style {
    RT_DECAY_CONSTANT, RT_DECAY_LINEAR, RT_DECAY_COSINE, RT_DECAY_INVSQRT, RT_DECAY_WSD
} rt_decay_style;
typedef enum rt_wsd_style { RT_WSD_LINEAR, RT_WSD_COSINE, RT_WSD_EXPONENTIAL, RT_WSD_MINUS_SQRT } rt_wsd_style;
typedef enum rt_incr_style { RT_INCR_CONSTANT, RT_INCR_LINEAR, RT_INCR_COSINE } rt_incr_style;

/* The style of a name as Megatron spells it ("inverse-square-root",
 * "WSD", "minus_sqrt", ...); false for an unknown name. */
bool rt_decay_style_from(const char *name, rt_decay_style *out);
bool rt_wsd_style_from(const char *name, rt_wsd_style *out);
bool rt_incr_style_from(const char *name, rt_incr_style *out);

typedef enum rt_torch_kind {
    RT_TORCH_STEP,            /* StepLR(step_size, gamma=0.1) */
    RT_TORCH_MULTISTEP,       /* MultiStepLR(milestones, gamma=0.1) */
    RT_TORCH_EXPONENTIAL,     /* ExponentialLR(gamma) */
    RT_TORCH_COSINE,          /* CosineAnnealingLR(T_max, eta_min=0) */
    RT_TORCH_COSINE_RESTARTS, /* CosineAnnealingWarmRestarts(T_0, T_mult=1, eta_min=0) */
    RT_TORCH_LINEAR,          /* LinearLR(start_factor=1/3, end_factor=1, total_iters=5) */
    RT_TORCH_CONSTANT,        /* ConstantLR(factor=1/3, total_iters=5) */
} rt_torch_kind;

#define RT_SCHED_MAX_PARTS 8
#define RT_SCHED_MAX_MILESTONES 32

typedef struct rt_torch_part {
    rt_torch_kind kind;
    int64_t step_size, t_max, t_0, t_mult, total_iters;
    int nmilestones;
    int64_t milestones[RT_SCHED_MAX_MILESTONES];
    double gamma, eta_min, start_factor, end_factor, factor;
} rt_torch_part;

typedef struct rt_schedule {
    double lr; /* --lr: Megatron's peak rate, PyTorch's base rate */
    /* Megatron's OptimizerParamScheduler (iterations instead of samples). */
    double min_lr, warmup_init;
    int64_t warmup_iters, decay_iters, wsd_decay_iters;
    rt_decay_style decay;
    rt_wsd_style wsd;
    double start_wd, end_wd;
    int64_t wd_incr_iters;
    rt_incr_style wd_incr;
    /* PyTorch's schedulers: with nparts > 0 they give the rate. Part i
     * (a SequentialLR child) runs from step part_at[i] (part_at[0] = 0) and
     * sees the step count since then. */
    int nparts;
    rt_torch_part part[RT_SCHED_MAX_PARTS];
    int64_t part_at[RT_SCHED_MAX_PARTS];
} rt_schedule;

/* A constant rate lr and weight decay wd over iters steps. */
void rt_schedule_init(rt_schedule *s, double lr, double wd, int64_t iters);

/* Megatron's assertions as messages (min_lr <= lr, warm-up shorter than the
 * decay, WSD with its decay iterations, start_wd <= end_wd, ...). */
bool rt_schedule_check(const rt_schedule *s, char *err, size_t cap);

/* Parses a PyTorch scheduler spec into s->part / s->part_at (grammar in
 * docs/schedules.md). On failure returns false with a message in err and
 * the byte offset of the offending text in *at. */
bool rt_schedule_parse_torch(rt_schedule *s, const char *spec, char *err, size_t cap, size_t *at);

/* The learning rate and the weight decay of step (0-based). */
double rt_schedule_lr(const rt_schedule *s, int64_t step);
double rt_schedule_wd(const rt_schedule *s, int64_t step);

/* One PyTorch part alone at step t of its own (base rate lr). */
double rt_torch_part_lr(const rt_torch_part *p, double lr, int64_t t);

#endif
