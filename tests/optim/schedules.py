#!/usr/bin/env python3
"""tgc's learning-rate and weight-decay schedules against their references.

Each case trains a one-parameter model with `tgc run --log` and reads the
lr and wd of every step from the JSON log, then compares them with

  - PyTorch's torch.optim.lr_scheduler driven step by step on a dummy
    optimizer (the value of param_groups[0]["lr"] that optimizer.step()
    would use at step k, after k calls of scheduler.step()), for the
    `--lr-scheduler` cases;
  - MegatronScheduler below, a transcription of get_lr / get_wd of
    megatron/core/optimizer_param_scheduler.py (steps in iterations), for
    Megatron's options.

Every step is compared (so step 0, the end of the warm-up, the middle, the
end of the decay and past it are all covered); the largest relative
difference per case is printed and must be below --tol.

usage: schedules.py TGC [--tol T] [-k SUBSTRING]
"""
import argparse, json, math, os, subprocess, sys, tempfile, warnings

import torch
from torch.optim import lr_scheduler as L

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
from oracle import st_write  # noqa: E402


class MegatronScheduler:
    """OptimizerParamScheduler.get_lr / get_wd with num_steps = the step."""

    def __init__(self, init_lr, max_lr, min_lr, warmup, decay_iters, style, start_wd, end_wd, wd_incr_iters,
                 wd_style, wsd_iters=None, wsd_style=None):
        self.init_lr, self.max_lr, self.min_lr = init_lr, float(max_lr), min_lr
        self.lr_warmup_steps, self.lr_decay_steps, self.lr_decay_style = warmup, decay_iters, style
        self.wsd_decay_steps, self.lr_wsd_decay_style = wsd_iters, wsd_style
        self.start_wd, self.end_wd, self.wd_incr_steps, self.wd_incr_style = start_wd, end_wd, wd_incr_iters, wd_style

    def wd(self, num_steps):
        if num_steps > self.wd_incr_steps:
            return self.end_wd
        if self.wd_incr_style == 'constant':
            assert self.start_wd == self.end_wd
            return self.end_wd
        incr_ratio = float(num_steps) / float(self.wd_incr_steps)
        delta_wd = self.end_wd - self.start_wd
        if self.wd_incr_style == 'linear':
            coeff = incr_ratio
        elif self.wd_incr_style == 'cosine':
            coeff = 0.5 * (math.cos(math.pi * (1 - incr_ratio)) + 1.0)
        return self.start_wd + coeff * delta_wd

    def lr(self, num_steps):
        max_lr, min_lr = self.max_lr, self.min_lr
        if self.lr_warmup_steps > 0 and num_steps <= self.lr_warmup_steps:
            return self.init_lr + ((max_lr - self.init_lr) * float(num_steps) / float(self.lr_warmup_steps))
        if self.lr_decay_style == 'constant':
            return max_lr
        if num_steps > self.lr_decay_steps:
            return min_lr
        if self.lr_decay_style == 'inverse-square-root':
            warmup_steps = max(self.lr_warmup_steps, 1)
            num_steps = max(num_steps, 1)
            lr = max_lr * warmup_steps ** 0.5 / (num_steps ** 0.5)
            return max(min_lr, lr)
        num_steps_ = num_steps - self.lr_warmup_steps
        decay_steps_ = self.lr_decay_steps - self.lr_warmup_steps
        decay_ratio = float(num_steps_) / float(decay_steps_)
        assert 0.0 <= decay_ratio <= 1.0
        delta_lr = max_lr - min_lr
        if self.lr_decay_style == 'linear':
            coeff = 1.0 - decay_ratio
        elif self.lr_decay_style == 'cosine':
            coeff = 0.5 * (math.cos(math.pi * decay_ratio) + 1.0)
        elif self.lr_decay_style == 'WSD':
            wsd_anneal_start_ = self.lr_decay_steps - self.wsd_decay_steps
            if num_steps <= wsd_anneal_start_:
                coeff = 1.0
            else:
                wsd_steps = num_steps - wsd_anneal_start_
                wsd_decay_ratio = float(wsd_steps) / float(self.wsd_decay_steps)
                if self.lr_wsd_decay_style == "linear":
                    coeff = 1.0 - wsd_decay_ratio
                elif self.lr_wsd_decay_style == "cosine":
                    coeff = 0.5 * (math.cos(math.pi * wsd_decay_ratio) + 1.0)
                elif self.lr_wsd_decay_style == "exponential":
                    coeff = (2.0 * math.pow(0.5, wsd_decay_ratio)) - 1.0
                elif self.lr_wsd_decay_style == "minus_sqrt":
                    coeff = 1.0 - math.sqrt(wsd_decay_ratio)
        return min_lr + coeff * delta_lr


ITERS = 130  # past every decay below
LR = 0.01

# Megatron's options: (name, tgc options, MegatronScheduler kwargs).
MEGATRON = [
    ("constant", [], dict()),
    ("warmup-constant", ["--lr-warmup-iters", "10", "--lr-warmup-init", "1e-5"], dict(init_lr=1e-5, warmup=10)),
    ("linear", ["--lr-warmup-iters", "10", "--lr-decay-style", "linear", "--lr-decay-iters", "100", "--min-lr", "1e-4"],
     dict(warmup=10, style="linear", decay_iters=100, min_lr=1e-4)),
    ("cosine", ["--lr-warmup-iters", "10", "--lr-decay-style", "cosine", "--lr-decay-iters", "100", "--min-lr", "1e-4"],
     dict(warmup=10, style="cosine", decay_iters=100, min_lr=1e-4)),
    ("cosine-to-train-iters", ["--lr-decay-style", "cosine"], dict(style="cosine")),
    ("inverse-square-root", ["--lr-warmup-iters", "10", "--lr-decay-style", "inverse-square-root",
                             "--lr-decay-iters", "100", "--min-lr", "2e-3"],
     dict(warmup=10, style="inverse-square-root", decay_iters=100, min_lr=2e-3)),
    ("inverse-square-root-no-warmup", ["--lr-decay-style", "inverse-square-root", "--lr-decay-iters", "100"],
     dict(style="inverse-square-root", decay_iters=100)),
] + [
    ("WSD-" + w, ["--lr-warmup-iters", "10", "--lr-decay-style", "WSD", "--lr-decay-iters", "100",
                  "--lr-wsd-decay-iters", "30", "--lr-wsd-decay-style", w, "--min-lr", "1e-4"],
     dict(warmup=10, style="WSD", decay_iters=100, wsd_iters=30, wsd_style=w, min_lr=1e-4))
    for w in ("linear", "cosine", "exponential", "minus_sqrt")
] + [
    ("wd-" + w, ["--weight-decay-incr-style", w, "--start-weight-decay", "0.01", "--end-weight-decay", "0.1"],
     dict(wd_style=w, start_wd=0.01, end_wd=0.1))
    for w in ("linear", "cosine")
] + [
    ("wd-constant", ["--weight-decay", "0.05"], dict(start_wd=0.05, end_wd=0.05)),
]

# PyTorch's: (spec, function(optimizer) -> the scheduler torch builds).
TORCH = [
    ("step(step_size=7, gamma=0.5)", lambda o: L.StepLR(o, step_size=7, gamma=0.5)),
    ("StepLR(step_size=30)", lambda o: L.StepLR(o, step_size=30)),
    ("multistep(milestones=[10, 25, 60], gamma=0.3)", lambda o: L.MultiStepLR(o, milestones=[10, 25, 60], gamma=0.3)),
    ("multistep(milestones=[0, 1])", lambda o: L.MultiStepLR(o, milestones=[0, 1])),
    ("exponential(gamma=0.97)", lambda o: L.ExponentialLR(o, gamma=0.97)),
    ("cosine(T_max=50, eta_min=1e-5)", lambda o: L.CosineAnnealingLR(o, T_max=50, eta_min=1e-5)),
    ("CosineAnnealingLR(T_max=128)", lambda o: L.CosineAnnealingLR(o, T_max=128)),
    ("cosine_restarts(T_0=10)", lambda o: L.CosineAnnealingWarmRestarts(o, T_0=10)),
    ("cosine_restarts(T_0=7, T_mult=2, eta_min=1e-5)",
     lambda o: L.CosineAnnealingWarmRestarts(o, T_0=7, T_mult=2, eta_min=1e-5)),
    ("linear(start_factor=0.1, total_iters=20)", lambda o: L.LinearLR(o, start_factor=0.1, total_iters=20)),
    ("linear(start_factor=1.0, end_factor=0.05, total_iters=80)",
     lambda o: L.LinearLR(o, start_factor=1.0, end_factor=0.05, total_iters=80)),
    ("LinearLR()", lambda o: L.LinearLR(o)),
    ("constant(factor=0.5, total_iters=10)", lambda o: L.ConstantLR(o, factor=0.5, total_iters=10)),
    ("linear(start_factor=0.1, total_iters=10) then cosine(T_max=90, eta_min=1e-5) at 10",
     lambda o: L.SequentialLR(o, [L.LinearLR(o, start_factor=0.1, total_iters=10),
                                  L.CosineAnnealingLR(o, T_max=90, eta_min=1e-5)], milestones=[10])),
    ("constant(factor=0.1, total_iters=2) then exponential(gamma=0.9) at 2",
     lambda o: L.SequentialLR(o, [L.ConstantLR(o, factor=0.1, total_iters=2), L.ExponentialLR(o, gamma=0.9)],
                              milestones=[2])),
    ("linear(start_factor=0.25, total_iters=8) then step(step_size=10, gamma=0.5) at 8 "
     "then cosine_restarts(T_0=15, T_mult=2) at 50",
     lambda o: L.SequentialLR(o, [L.LinearLR(o, start_factor=0.25, total_iters=8), L.StepLR(o, step_size=10, gamma=0.5),
                                  L.CosineAnnealingWarmRestarts(o, T_0=15, T_mult=2)], milestones=[8, 50])),
    ("cosine(T_max=30) then multistep(milestones=[5, 40], gamma=0.5) at 30 then linear(end_factor=0.5) at 100",
     lambda o: L.SequentialLR(o, [L.CosineAnnealingLR(o, T_max=30), L.MultiStepLR(o, milestones=[5, 40], gamma=0.5),
                                  L.LinearLR(o, end_factor=0.5)], milestones=[30, 100])),
]


def torch_lrs(make, steps):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=LR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # step(0) inside SequentialLR warns of the epoch argument
        sched = make(opt)
        out = []
        for _ in range(steps):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
    return out


def rel(a, b):
    return abs(a - b) / abs(b) if b != 0 else abs(a)


def run_tgc(tgc, tmp, extra):
    log = os.path.join(tmp, "log.jsonl")
    if os.path.exists(log):
        os.remove(log)
    subprocess.check_call([tgc, "run", os.path.join(tmp, "m.ir"), "--inputs", os.path.join(tmp, "in.safetensors"),
                           "--train-iters", str(ITERS), "--lr", repr(LR), "--log", log, "--quiet",
                           "--clip-grad", "0"] + extra)
    rows = [json.loads(l) for l in open(log)]
    return [r["lr"] for r in rows], [r["wd"] for r in rows]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tgc")
    ap.add_argument("--tol", type=float, default=1e-12)
    ap.add_argument("-k", default="")
    args = ap.parse_args()
    worst, failed = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        open(os.path.join(tmp, "m.ir"), "w").write(
            'tgc-ir 1\nmodel "sched"\n%x = input : f32[2, 4]\n%w = param init=normal : f32[2, 4]\n'
            '%y = mul(%w, %x) : f32[2, 4]\n%loss = sum(%y) : f32[] loss\n')
        st_write(os.path.join(tmp, "in.safetensors"), {"x": torch.zeros(1, 2, 4)})
        cases = [("megatron " + n, a, m) for n, a, m in MEGATRON] + [("torch " + s, ["--lr-scheduler", s], f)
                                                                      for s, f in TORCH]
        for name, extra, ref in cases:
            if args.k not in name:
                continue
            lrs, wds = run_tgc(args.tgc, tmp, extra)
            if callable(ref):
                want_lr, want_wd = torch_lrs(ref, ITERS), [0.1] * ITERS
            else:
                kw = dict(init_lr=0.0, max_lr=LR, min_lr=0.0, warmup=0, decay_iters=ITERS, style="constant",
                          start_wd=0.1, end_wd=0.1, wd_incr_iters=ITERS, wd_style="constant")
                kw.update(ref)
                m = MegatronScheduler(**kw)
                want_lr, want_wd = [m.lr(k) for k in range(ITERS)], [m.wd(k) for k in range(ITERS)]
            d_lr = max(rel(a, b) for a, b in zip(lrs, want_lr))
            d_wd = max(rel(a, b) for a, b in zip(wds, want_wd))
            at = max(range(ITERS), key=lambda k: rel(lrs[k], want_lr[k]))
            ok = len(lrs) == ITERS and d_lr <= args.tol and d_wd <= args.tol
            worst[name] = max(d_lr, d_wd)
            print("%-100s lr %.1e (step %d)  wd %.1e  %s" % (name, d_lr, at, d_wd, "ok" if ok else "FAIL"))
            if not ok:
                failed.append(name)
                for k in range(ITERS):
                    if rel(lrs[k], want_lr[k]) > args.tol:
                        print("   step %d: tgc %r, reference %r" % (k, lrs[k], want_lr[k]))
    print("schedules: %d cases, largest relative difference %.1e (tolerance %.0e)"
          % (len(worst), max(worst.values() or [0.0]), args.tol))
    print("schedules:", "FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
