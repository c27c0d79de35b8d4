#!/usr/bin/env python3
"""Every optimizer of tgc against torch.optim (Debian's python3-torch).

A model whose gradients are exactly the tensors fed to it: for each
parameter p it has an input g.p of p's shape and the loss is the sum of
sum(p * g.p), so grad(p) = g.p bit for bit. tgc trains it for --steps steps
from the same initial weights on the same gradients (--init-from, --inputs)
and exports the weights; torch.optim runs the same steps with .grad set to
the same tensors, under the same learning rate and weight decay per step and
the same parameter groups. The exported weights must agree within --tol:
max |tgc - torch| / max |torch| per tensor, in fp32.

usage: optim_oracle.py TGC [--steps N] [--tol T] [-k SUBSTRING]
Exit status 0 when every case agrees.
"""
import argparse, fnmatch, json, math, os, subprocess, sys, tempfile, warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
from oracle import st_read, st_write  # noqa: E402
from schedules import MegatronScheduler  # noqa: E402

# name, shape: a weight, its bias, a norm weight (1-D: no decay by
# Megatron's rule), an embedding (the parameter-group cases), a 3-D tensor.
PARAMS = [("layer.weight", [16, 12]), ("layer.bias", [16]), ("norm.weight", [12]),
          ("embedding.weight", [10, 6]), ("proj.scale", [3, 4, 5])]


def model_ir():
    lines = ["tgc-ir 1", 'model "optim"']
    for name, shape in PARAMS:
        lines.append("%%g.%s = input : f32%s" % (name, shape))
    for name, shape in PARAMS:
        lines.append("%%%s = param init=normal : f32%s" % (name, shape))
    sums = []
    for i, (name, shape) in enumerate(PARAMS):
        lines.append("%%m%d = mul(%%%s, %%g.%s) : f32%s" % (i, name, name, shape))
        lines.append("%%s%d = sum(%%m%d) : f32[]" % (i, i))
        sums.append("%%s%d" % i)
    acc = sums[0]
    for i, s in enumerate(sums[1:]):
        out = "%loss" if i == len(sums) - 2 else "%%t%d" % i
        lines.append("%s = add(%s, %s) : f32[]%s" % (out, acc, s, " loss" if out == "%loss" else ""))
        acc = out
    return "\n".join(lines) + "\n"


def groups_of(rules):
    """Megatron's rule (1-D or .bias: no decay) then the last matching
    --param-group: (lr_mult, wd_mult) per parameter, wd_mult 0 for no decay."""
    out = {}
    for name, shape in PARAMS:
        lr, wd = 1.0, 1.0
        for glob, keys in rules:
            if fnmatch.fnmatchcase(name, glob):
                lr, wd = keys.get("lr_mult", 1.0), keys.get("wd_mult", 1.0)
        no_decay = len(shape) == 1 or name.endswith(".bias")
        out[name] = (lr, 0.0 if no_decay else wd)
    return out


def rule_args(rules):
    args = []
    for glob, keys in rules:
        args += ["--param-group", glob + ":" + ",".join("%s=%r" % kv for kv in keys.items())]
    return args


# Each case: tgc options and the matching torch optimizer.
#   opt: (torch class, constructor kwargs without lr / weight_decay)
#   lr, wd: base values; megatron: extra MegatronScheduler kwargs (lr and wd
#   follow it); torch_sched: a function(optimizer) -> torch scheduler;
#   rules: --param-group rules; clip: --clip-grad.
CASES = [
    dict(name="adamw", opt=("AdamW", dict(betas=(0.9, 0.95), eps=1e-8)), lr=1e-2, wd=0.1),
    dict(name="adamw-betas-eps", opt=("AdamW", dict(betas=(0.8, 0.99), eps=1e-6)), lr=3e-3, wd=0.05,
         args=["--adam-beta1", "0.8", "--adam-beta2", "0.99", "--adam-eps", "1e-6"]),
    dict(name="adamw-clip", opt=("AdamW", dict(betas=(0.9, 0.95), eps=1e-8)), lr=1e-2, wd=0.1, clip=1.0),
    dict(name="adamw-groups-schedule", opt=("AdamW", dict(betas=(0.9, 0.95), eps=1e-8)), lr=1e-2, wd=0.1,
         rules=[("embedding.*", {"lr_mult": 0.1, "wd_mult": 0.0}), ("proj.*", {"lr_mult": 2.0, "wd_mult": 0.5})],
         megatron=dict(warmup=10, style="cosine", min_lr=1e-3, wd_style="linear", start_wd=0.01, end_wd=0.2)),
    dict(name="adamw-torch-scheduler", opt=("AdamW", dict(betas=(0.9, 0.95), eps=1e-8)), lr=1e-2, wd=0.1,
         spec="linear(start_factor=0.1, total_iters=10) then cosine(T_max=40, eta_min=1e-4) at 10",
         torch_sched=lambda o: torch.optim.lr_scheduler.SequentialLR(
             o, [torch.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=10),
                 torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=40, eta_min=1e-4)], milestones=[10])),
    dict(name="adam-l2", opt=("Adam", dict(betas=(0.9, 0.95), eps=1e-8)), lr=1e-2, wd=0.1),
    dict(name="adam-nowd", opt=("Adam", dict(betas=(0.9, 0.999), eps=1e-8)), lr=1e-2, wd=0.0,
         args=["--adam-beta2", "0.999"]),
    dict(name="adam-l2-groups", opt=("Adam", dict(betas=(0.9, 0.95), eps=1e-8)), lr=1e-2, wd=0.1,
         rules=[("*.weight", {"lr_mult": 0.5})]),
    dict(name="sgd", opt=("SGD", dict()), lr=0.05, wd=0.0),
    dict(name="sgd-wd", opt=("SGD", dict()), lr=0.05, wd=0.01),
    dict(name="sgd-momentum", opt=("SGD", dict(momentum=0.9)), lr=0.02, wd=0.0),
    dict(name="sgd-momentum-wd", opt=("SGD", dict(momentum=0.9)), lr=0.02, wd=0.01),
    dict(name="sgd-momentum-dampening", opt=("SGD", dict(momentum=0.9, dampening=0.1)), lr=0.02, wd=0.01),
    dict(name="sgd-dampening-half", opt=("SGD", dict(momentum=0.5, dampening=0.5)), lr=0.05, wd=0.0),
    dict(name="sgd-nesterov", opt=("SGD", dict(momentum=0.9, nesterov=True)), lr=0.02, wd=0.0),
    dict(name="sgd-nesterov-wd", opt=("SGD", dict(momentum=0.9, nesterov=True)), lr=0.02, wd=0.01),
    dict(name="sgd-nesterov-clip-groups", opt=("SGD", dict(momentum=0.8, nesterov=True)), lr=0.02, wd=0.01,
         clip=2.0, rules=[("embedding.*", {"lr_mult": 3.0, "wd_mult": 2.0})]),
    dict(name="sgd-momentum-schedule", opt=("SGD", dict(momentum=0.9)), lr=0.05, wd=0.01,
         megatron=dict(warmup=5, style="WSD", wsd_iters=20, wsd_style="minus_sqrt", min_lr=0.0,
                       wd_style="cosine", start_wd=0.0, end_wd=0.05)),
]


def tgc_args(case):
    opt = case["opt"]
    a = ["--optimizer", {"AdamW": "adamw", "Adam": "adam", "SGD": "sgd"}[opt[0]],
         "--lr", repr(case["lr"]), "--weight-decay", repr(case["wd"]), "--clip-grad", repr(case.get("clip", 0.0))]
    kw = opt[1]
    if opt[0] != "SGD":
        a += ["--adam-beta1", repr(kw["betas"][0]), "--adam-beta2", repr(kw["betas"][1]), "--adam-eps", repr(kw["eps"])]
    else:
        a += ["--sgd-momentum", repr(kw.get("momentum", 0.0)), "--sgd-dampening", repr(kw.get("dampening", 0.0))]
        if kw.get("nesterov"):
            a.append("--sgd-nesterov")
    m = case.get("megatron")
    if m:
        a += ["--lr-warmup-iters", str(m["warmup"]), "--lr-decay-style", m["style"], "--min-lr", repr(m["min_lr"])]
        if m["style"] == "WSD":
            a += ["--lr-wsd-decay-iters", str(m["wsd_iters"]), "--lr-wsd-decay-style", m["wsd_style"]]
        if m["wd_style"] != "constant":
            a += ["--weight-decay-incr-style", m["wd_style"], "--start-weight-decay", repr(m["start_wd"]),
                  "--end-weight-decay", repr(m["end_wd"])]
    if case.get("spec"):
        a += ["--lr-scheduler", case["spec"]]
    return a + rule_args(case.get("rules", []))


def run_torch(case, init, grads, steps):
    groups = groups_of(case.get("rules", []))
    p = {n: init[n].clone() for n, _ in PARAMS}
    cls = getattr(torch.optim, case["opt"][0])
    pg = [{"params": [p[n]], "lr": case["lr"] * groups[n][0], "weight_decay": case["wd"] * groups[n][1],
           "lr_mult": groups[n][0], "wd_mult": groups[n][1]} for n, _ in PARAMS]
    opt = cls(pg, lr=case["lr"], **case["opt"][1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SequentialLR's step(0) warns of the epoch argument
        sched = case["torch_sched"](opt) if case.get("torch_sched") else None
    meg = None
    if case.get("megatron"):
        m = case["megatron"]
        meg = MegatronScheduler(init_lr=0.0, max_lr=case["lr"], min_lr=m["min_lr"], warmup=m["warmup"],
                                decay_iters=steps, style=m["style"], start_wd=m.get("start_wd", case["wd"]),
                                end_wd=m.get("end_wd", case["wd"]), wd_incr_iters=steps, wd_style=m["wd_style"],
                                wsd_iters=m.get("wsd_iters"), wsd_style=m.get("wsd_style"))
    lrs, wds = [], []
    for step in range(steps):
        for n, _ in PARAMS:
            p[n].grad = grads["g." + n][step].clone()
        if meg:
            for g in opt.param_groups:
                g["lr"] = meg.lr(step) * g["lr_mult"]
                g["weight_decay"] = meg.wd(step) * g["wd_mult"]
        lrs.append(opt.param_groups[0]["lr"] / opt.param_groups[0]["lr_mult"])
        if case.get("clip", 0.0) > 0:
            torch.nn.utils.clip_grad_norm_(list(p.values()), case["clip"])
        opt.step()
        if sched:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sched.step()
    return p, lrs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tgc")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("-k", default="", help="run the cases whose name contains this")
    args = ap.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(1234)
    init = {n: torch.randn(s, generator=gen) for n, s in PARAMS}
    grads = {"g." + n: torch.randn([args.steps] + s, generator=gen) for n, s in PARAMS}
    worst_all, failed = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        model, init_p, grads_p = (os.path.join(tmp, f) for f in ("optim.ir", "init.safetensors", "grads.safetensors"))
        open(model, "w").write(model_ir())
        st_write(init_p, init)
        st_write(grads_p, grads)
        for case in CASES:
            if args.k not in case["name"]:
                continue
            out_p, log_p = os.path.join(tmp, case["name"] + ".safetensors"), os.path.join(tmp, case["name"] + ".jsonl")
            cmd = [args.tgc, "run", model, "--init-from", init_p, "--inputs", grads_p, "--train-iters",
                   str(args.steps), "--export", out_p, "--log", log_p, "--quiet"] + tgc_args(case)
            subprocess.check_call(cmd)
            got = st_read(out_p)
            ref, torch_lrs = run_torch(case, init, grads, args.steps)
            tgc_lrs = [json.loads(l)["lr"] for l in open(log_p)]
            lr_err = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(tgc_lrs, torch_lrs))
            worst = 0.0
            for n, _ in PARAMS:
                err = (got[n] - ref[n]).abs().max().item() / ref[n].abs().max().item()
                worst = max(worst, err)
            ok = worst <= args.tol and lr_err <= 1e-12
            worst_all[case["name"]] = worst
            print("%-28s weights: normalised max error %.2e   lr: max relative difference %.1e   %s"
                  % (case["name"], worst, lr_err, "ok" if ok else "FAIL"))
            if not ok:
                failed.append(case["name"])
    print("optim_oracle: %d cases, largest weight difference %.2e (tolerance %.0e)%s"
          % (len(worst_all), max(worst_all.values() or [0.0]), args.tol,
             "; FAILED: " + ", ".join(failed) if failed else ""))
    print("optim_oracle:", "FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
