"""plan_options.py TGC MODEL DATA WORKDIR: no option of tgc run is ignored over a plan.

Reads the groups `tgc run --help` lists (the option table's column that the
code reads too) and checks every option of the table against its group:
  applied at run time  tgc run PLAN OPT gives what tgc run MODEL OPT gives
                       (log, messages, exit status, files written), with no
                       recompilation;
  compiled in          the same, and standard error says the plan is
                       recompiled for OPT;
  change the model     refused naming OPT when its value differs from the
                       plan's, run as the plan when it is the same;
  tgc compile's        refused naming OPT.
An option without a group, or without a value below to try it with, fails
the test: a new option cannot be ignored silently either.
"""
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

TGC, MODEL, DATA, WORK = sys.argv[1:5]
SETS = ["--set", "layers=2", "--set", "hidden=32", "--set", "heads=2", "--set", "seq=16", "--set", "batch=2"]
BASE = ["--data", DATA, "--quiet", "--train-iters", "2"]
PP2 = ["--pp", "2", "--global-batch-size", "4"]
SGD = ["--optimizer", "sgd", "--sgd-momentum", "0.9"]

# Per option: the arguments that try it (the option itself first), and
# the plan variant they run over (compiled with those arguments).
RUNTIME = {
    "exit-interval": ["--exit-interval", "1"],
    "exit-duration-in-mins": ["--exit-duration-in-mins", "1000"],
    "no-memory-check": ["--no-memory-check"],
    "train-iters": ["--train-iters", "3"],
    "lr": ["--lr", "0.01"],
    "min-lr": ["--min-lr", "1e-4", "--lr-decay-style", "cosine"],
    "lr-decay-style": ["--lr-decay-style", "linear"],
    "lr-warmup-iters": ["--lr-warmup-iters", "1"],
    "lr-warmup-init": ["--lr-warmup-init", "1e-4", "--lr-warmup-iters", "1"],
    "lr-decay-iters": ["--lr-decay-iters", "1", "--lr-decay-style", "linear"],
    "lr-wsd-decay-style": ["--lr-wsd-decay-style", "linear", "--lr-decay-style", "WSD", "--lr-wsd-decay-iters", "1"],
    "lr-wsd-decay-iters": ["--lr-wsd-decay-iters", "1", "--lr-decay-style", "WSD"],
    "lr-scheduler": ["--lr-scheduler", "linear(start_factor=0.5, total_iters=2)"],
    "start-weight-decay": ["--start-weight-decay", "0.0", "--end-weight-decay", "0.2",
                           "--weight-decay-incr-style", "linear"],
    "end-weight-decay": ["--end-weight-decay", "0.3", "--start-weight-decay", "0.1",
                         "--weight-decay-incr-style", "cosine"],
    "weight-decay-incr-style": ["--weight-decay-incr-style", "linear", "--start-weight-decay", "0.0",
                                "--end-weight-decay", "0.1"],
    "loss-scale": ["--loss-scale", "1024"],
    "initial-loss-scale": ["--initial-loss-scale", "65536"],
    "min-loss-scale": ["--min-loss-scale", "2"],
    "loss-scale-window": ["--loss-scale-window", "1", "--initial-loss-scale", "1024"],
    "hysteresis": ["--hysteresis", "1", "--initial-loss-scale", "1e30"],
    "memory-limit": ["--memory-limit", "0.0001"],
    "peak-tflops": ["--peak-tflops", "1", "--log", "{out}/log.jsonl"],
    "cuda-graphs": ["--cuda-graphs", "on", "--backend", "sim"],
    "calibrate-peak": ["--calibrate-peak", "--backend", "cuda"],  # refused there, naming it: seconds saved
    "check-numerics": ["--check-numerics", "--lr", "1e30", "--train-iters", "3"],
    "seed": ["--seed", "7"],
    "log-interval": ["--log-interval", "2"],
    "backend": ["--backend", "cuda"],
    "data-path": ["--data-path", "{work}/other.txt"],
    # refused with BASE's --data (one data source), the same over a plan as over the model
    "train-data-path": ["--train-data-path", "{work}/other.txt"],
    "valid-data-path": ["--valid-data-path", "{work}/other.txt"],
    # the tokenizer's: refusals or a missing file, named the same over a plan as over the model
    "tokenizer-type": ["--tokenizer-type", "SentencePieceTokenizer", "--tokenizer-model", "{work}/none.model"],
    "tokenizer-model": ["--tokenizer-model", "{work}/none.model"],
    "vocab-file": ["--vocab-file", "{work}/none.json"],
    "merge-file": ["--merge-file", "{work}/none.txt"],
    "log": ["--log", "{out}/log.jsonl"],
    "tensorboard-dir": ["--tensorboard-dir", "{out}/tb"],
    "tensorboard-log-interval": ["--tensorboard-log-interval", "2", "--tensorboard-dir", "{out}/tb"],
    "log-timers-to-tensorboard": ["--log-timers-to-tensorboard", "--tensorboard-dir", "{out}/tb"],
    "log-validation-ppl-to-tensorboard": ["--log-validation-ppl-to-tensorboard", "--split", "90,10",
                                          "--tensorboard-dir", "{out}/tb"],
    "log-memory-to-tensorboard": ["--log-memory-to-tensorboard", "--tensorboard-dir", "{out}/tb"],
    "inputs": ["--inputs", "{out}/none.safetensors"],
    "shuffle": ["--shuffle"],
    "export": ["--export", "{out}/w.safetensors"],
    "export-grads": ["--export-grads", "{out}/g.safetensors"],
    "init-from": ["--init-from", "{work}/init.safetensors"],
    "save": ["--save", "{out}/ckpt"],
    "save-interval": ["--save-interval", "1", "--save", "{out}/ckpt"],
    "split": ["--split", "90,10"],
    "eval-interval": ["--eval-interval", "1", "--split", "90,10"],
    "eval-iters": ["--eval-iters", "2", "--split", "90,10"],
    "load": ["--load", "{work}/ckpt", "--train-iters", "3"],
    "no-kernel-cache": ["--no-kernel-cache"],
    "quiet": ["--quiet"],
    "comm": ["--comm", "mpi"],
    "trace": ["--trace", "{out}/trace.json"],
    "comm-stats": ["--comm-stats"],
    "overlap-grad-reduce": ["--overlap-grad-reduce"],
    "overlap-param-gather": ["--overlap-param-gather"],
}
# fp16's loss scaler is only there in an fp16 plan.
FP16_PLAN = {"loss-scale", "initial-loss-scale", "min-loss-scale", "loss-scale-window", "hysteresis"}
# Options that need others run over a plan compiled with those (and the
# model is run with them too), so that only the option under test is new
# to the plan.
WITH_PLAN = {"trace": ["--tp", "2"], "comm-stats": ["--dp", "2"], "sequence-parallel": ["--tp", "2"],
             "pipeline-schedule": PP2, "pp-balance": PP2, "no-scatter-gather": ["--tp", "2"] + PP2,
             "clip-grad": ["--optimizer", "sgd"], "sgd-momentum": ["--optimizer", "sgd"], "sgd-dampening": SGD,
             "sgd-nesterov": SGD,
             "recompute-method": ["--recompute-granularity", "full"],
             "recompute-num-layers": ["--recompute-granularity", "full"], "use-distributed-optimizer": ["--dp", "2"],
             "overlap-grad-reduce": ["--dp", "2"], "overlap-param-gather": ["--dp", "2", "--use-distributed-optimizer"],
             "ddp-bucket-size": ["--dp", "2"]}
PASSES = {
    "tensor-model-parallel-size": ["--tp", "2"],
    "pipeline-model-parallel-size": ["--pp", "2"],
    "data-parallel-size": ["--dp", "2"],
    "num-virtual-stages-per-pipeline-rank": ["--vp", "2", "--pipeline-schedule", "interleaved", "--set",
                                             "layers=4"] + PP2,
    "num-layers-per-virtual-pipeline-stage": ["--num-layers-per-virtual-pipeline-stage", "1", "--pipeline-schedule",
                                              "interleaved", "--set", "layers=4"] + PP2,
    "sequence-parallel": ["--sequence-parallel"],
    "pipeline-schedule": ["--pipeline-schedule", "gpipe"],
    "pp-balance": ["--pp-balance", "flops"],
    "no-scatter-gather": ["--no-scatter-gather"],
    "global-batch-size": ["--global-batch-size", "4"],
    "optimizer": ["--optimizer", "sgd"],
    "weight-decay": ["--weight-decay", "0.3"],
    "param-group": ["--param-group", "*.weight:lr_mult=2,wd_mult=0"],
    "clip-grad": ["--clip-grad", "0.01"],  # under SGD: Adam's steps do not see a uniform scale
    "adam-beta1": ["--adam-beta1", "0.5"],
    "adam-beta2": ["--adam-beta2", "0.5"],
    "adam-eps": ["--adam-eps", "0.1"],
    "sgd-momentum": ["--sgd-momentum", "0.9"],
    "sgd-dampening": ["--sgd-dampening", "0.5"],
    "sgd-nesterov": ["--sgd-nesterov"],
    "fp16": ["--fp16"],
    "bf16": ["--bf16"],
    "recompute-granularity": ["--recompute-granularity", "full"],
    "recompute-method": ["--recompute-method", "block"],
    "recompute-num-layers": ["--recompute-num-layers", "2"],
    "use-distributed-optimizer": ["--use-distributed-optimizer"],
    "ddp-bucket-size": ["--ddp-bucket-size", "1000"],
    "fuse": ["--fuse", "softmax"],
    "no-fuse": ["--no-fuse"],
    "attention-backend": ["--attention-backend", "unfused"],
    "no-fused-lm-head": ["--no-fused-lm-head"],
    "no-attention-inplace": ["--no-attention-inplace"],
    "lm-head-chunk": ["--lm-head-chunk", "100"],
}
MODEL_OPTS = {"micro-batch-size": (["--micro-batch-size", "4"], ["--micro-batch-size", "2"])}
# The model flags (hparam ... flag NAME): overrides, refused over a plan as --set is.
OVERRIDES = {"num-layers": ["--num-layers", "2"], "hidden-size": ["--hidden-size", "32"],
             "num-attention-heads": ["--num-attention-heads", "2"], "num-query-groups": ["--num-query-groups", "1"],
             "ffn-hidden-size": ["--ffn-hidden-size", "64"],
             "seq-length": ["--seq-length", "16"], "max-position-embeddings": ["--max-position-embeddings", "16"],
             "hidden-dropout": ["--hidden-dropout", "0"], "attention-dropout": ["--attention-dropout", "0"],
             "init-method-std": ["--init-method-std", "0.02"], "use-rope-scaling": ["--use-rope-scaling"],
             "rope-scaling-factor": ["--rope-scaling-factor", "4"], "add-qkv-bias": ["--add-qkv-bias"],
             "qk-layernorm": ["--qk-layernorm"]}
COMPILE = {"cuda-arch": ["--cuda-arch", "sm_90"], "gemm-report": ["--gemm-report"],
           "kernel-report": ["--kernel-report"], "fusion-report": ["--fusion-report"], "output": ["-o", "x.plan"]}

# Degrees of parallel dimensions not built yet: any value but 1 refused
# naming the option (with a plan or a model), 1 runs as the plan.
UNBUILT = {"context-parallel-size": "context parallelism", "expert-model-parallel-size": "expert parallelism"}

failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL  " + what, flush=True)


def groups():
    """The option table as `tgc run --help` prints it: every option, and the four groups."""
    text = subprocess.run([TGC, "run", "--help"], capture_output=True, text=True).stdout
    head, _, tail = text.partition("\nover a PLAN")
    every = set(re.findall(r"^  --([a-z0-9-]+)", head, re.M)) - {"set"}
    found, current = {}, None
    for line in tail.splitlines():
        if line.startswith("  ") and not line.startswith("    "):
            current = ("applied" if "applied" in line else "compiled" if "compiled in" in line
                       else "model" if "change the model" in line else "compile" if "tgc compile" in line
                       else "override" if "override the model's hyperparameters" in line else current)
        elif line.startswith("    ") and current:
            for name in re.findall(r"--([a-z0-9-]+)", line):
                found.setdefault(name, []).append(current)
    return every, found


def norm_log(path):
    out = []
    for line in open(path):
        r = json.loads(line)
        out.append({k: (v if k not in ("tokens_per_s", "step_ms", "tflops", "mfu") else "t") for k, v in r.items()})
    return out


def tfevents(path):
    """An event file, comparably: its name without the time, host and process,
    and how many records it holds (their wall times and timings differ)."""
    data, at, n = open(path, "rb").read(), 0, 0
    while at + 12 <= len(data):
        at += 16 + int.from_bytes(data[at:at + 8], "little")
        n += 1
    return "tfevents: %d records" % n


def run(args, out, plan):
    """tgc run with args ({out}: a directory of its own); what it did, comparably."""
    os.makedirs(out, exist_ok=True)
    args = [a.replace("{out}", out).replace("{work}", WORK) for a in args]
    env = dict(os.environ)
    if "--comm" in args and args[args.index("--comm") + 1] == "mpi":
        # OpenMPI's own allocations outlive MPI_Finalize; the sanitizer
        # build's mpi.* tests turn leak checking off the same way.
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    r = subprocess.run([TGC, "run"] + args, capture_output=True, text=True, env=env)
    err = r.stderr.replace(out, "OUT").replace(WORK, "WORK").replace(plan, "TARGET").replace(MODEL, "TARGET")
    # Without the .tg file a plan's diagnostics name the line but cannot show it.
    err = "\n".join(l for l in err.splitlines() if "recompiling the plan's lowered IR" not in l
                    and not l.startswith("    ") and l.strip() != "^")
    err = re.sub(r"\d+(\.\d+)? ?(ms|s|GFLOP/s|TFLOP/s|MiB|tokens/s)\b", "N", err)
    files = {}
    for root, _, names in os.walk(out):
        for n in names:
            p = os.path.join(root, n)
            rel = os.path.relpath(p, out)
            if n.startswith("events.out.tfevents."):
                files[os.path.join(os.path.dirname(rel), "events")] = tfevents(p)
                continue
            # The --save directory's lock names the process that held it.
            files[rel] = ("lock" if n == "tgc.lock" else norm_log(p) if n.endswith(".jsonl") else "trace" if n.endswith(".json")
                          else open(p, "rb").read())
    return r.returncode, r.stdout, err, files, r.stderr


def compare(name, args, plan, compiled_with, want_recompile):
    """tgc run PLAN args against tgc run MODEL (compiled_with +) args."""
    pd, md = os.path.join(WORK, name, "plan"), os.path.join(WORK, name, "model")
    extra_sets = [a for i, a in enumerate(args) if args[i - 1:i] == ["--set"]]
    run_args = [a for i, a in enumerate(args) if a != "--set" and args[i - 1:i] != ["--set"]]
    if extra_sets:  # a model of other dimensions: a plan of its own
        plan = compile_plan(name, ["--set", extra_sets[0]])
        compiled_with = ["--set", extra_sets[0]]
    final = ["--export", "{out}/final.safetensors"]  # the weights after the last step, compared too
    p = run([plan] + BASE + final + run_args, pd, plan)
    m = run([MODEL] + SETS + compiled_with + BASE + final + run_args, md, plan)
    told = bool(re.search(r"recompiling the plan's lowered IR for (.*, )?--%s( |,|$)" % name, p[4], re.M))
    expect(told == want_recompile, "--%s: %s recompile the plan: %s" % (name, "should" if want_recompile else "need not",
                                                               p[4].strip()[-300:]))
    expect(p[:4] == m[:4], "--%s: tgc run PLAN differs from tgc run MODEL: exit %d/%d, stderr %r / %r" %
           (name, p[0], m[0], p[2][-300:], m[2][-300:]))


def compile_plan(tag, extra):
    path = os.path.join(WORK, "plan-%s.plan" % tag)
    r = subprocess.run([TGC, "compile", MODEL] + SETS + extra + ["-o", path], capture_output=True, text=True)
    expect(r.returncode == 0, "compile %s: %s" % (extra, r.stderr))
    return path


def main():
    os.makedirs(WORK, exist_ok=True)
    every, found = groups()
    table = {"applied": RUNTIME, "compiled": PASSES, "model": MODEL_OPTS, "compile": COMPILE, "override": OVERRIDES}
    for name in sorted(every):
        g = found.get(name, [])
        expect(len(g) == 1, "--%s: in %d groups of tgc run --help's plan section (want exactly 1)" % (name, len(g)))
        if len(g) == 1:
            expect(name in table[g[0]] or name in UNBUILT, "--%s (%s): no value to try it with in plan_options.py" % (name, g[0]))
    expect(set(found) == every, "groups name options the table lacks: %s" % sorted(set(found) - every))

    # What the runtime options need: another data file, weights, a checkpoint.
    with open(os.path.join(WORK, "other.txt"), "w") as f:
        f.write("In the beginning was the plan, and the plan was with tgc. " * 40)
    plan = compile_plan("base", [])
    plans = {"base": plan, "fp16 plan": compile_plan("fp16", ["--fp16"])}
    for opt, extra in WITH_PLAN.items():
        plans[opt] = compile_plan(opt, extra)
    for what in (["--export", os.path.join(WORK, "init.safetensors")], ["--save", os.path.join(WORK, "ckpt")]):
        r = subprocess.run([TGC, "run", plan] + BASE + what, capture_output=True, text=True)
        expect(r.returncode == 0, "%s: %s" % (what, r.stderr))

    jobs = []
    for name, args in RUNTIME.items():
        key = "fp16 plan" if name in FP16_PLAN else name if name in WITH_PLAN else "base"
        compiled_with = ["--fp16"] if name in FP16_PLAN else WITH_PLAN.get(name, [])
        jobs.append((name, args, plans[key], compiled_with, False))
    for name, args in PASSES.items():
        jobs.append((name, args, plans.get(name, plan), WITH_PLAN.get(name, []), True))
    with ThreadPoolExecutor(max_workers=2) as pool:
        for f in [pool.submit(compare, *j) for j in jobs]:
            f.result()

    # Two ways to give one setting: the command line's replaces the plan's other.
    for given, other in ((["--bf16"], ["--fp16"]), (["--no-fuse"], ["--fuse", "softmax"])):
        tag = given[0][2:] + " over " + other[0][2:]
        over = compile_plan(tag.replace(" ", "-"), other)
        p = run([over] + BASE + given + ["--log", "{out}/l.jsonl"], os.path.join(WORK, tag, "plan"), over)
        m = run([MODEL] + SETS + BASE + given + ["--log", "{out}/l.jsonl"], os.path.join(WORK, tag, "model"), over)
        expect(p[0] == 0 and p[:4] == m[:4], "%s: a plan compiled with %s runs as the model with %s: %r" %
               (tag, other[0], given[0], p[4]))

    for name, (differs, same) in MODEL_OPTS.items():
        r = subprocess.run([TGC, "run", plan] + BASE + differs, capture_output=True, text=True)
        expect(r.returncode != 0 and "--" + name in r.stderr and "changes the model" in r.stderr,
               "--%s with another value than the plan's: refused naming it: %r" % (name, r.stderr))
        p = run([plan] + BASE + same + ["--log", "{out}/l.jsonl"], os.path.join(WORK, name, "same"), plan)
        q = run([plan] + BASE + ["--log", "{out}/l.jsonl"], os.path.join(WORK, name, "none"), plan)
        expect(p[0] == 0 and p[:4] == q[:4], "--%s with the plan's own value runs the plan: %r" % (name, p[4]))
    for name, args in COMPILE.items():
        for target in (plan, MODEL):
            r = subprocess.run([TGC, "run", target] + BASE + args, capture_output=True, text=True)
            expect(r.returncode == 2 and re.search(r"--%s( \S+)? is an option of tgc compile" % name, r.stderr),
                   "--%s: tgc run %s refuses it naming it: %r" % (name, os.path.basename(target), r.stderr))

    for name, what in UNBUILT.items():
        for target in (plan, MODEL):
            r = subprocess.run([TGC, "run", target] + BASE + ["--" + name, "2"], capture_output=True, text=True)
            expect(r.returncode == 2 and ("--%s 2: %s is not built yet" % (name, what)) in r.stderr,
                   "--%s 2: tgc run %s refuses it naming it: %r" % (name, os.path.basename(target), r.stderr))
        p = run([plan] + BASE + ["--" + name, "1", "--log", "{out}/l.jsonl"], os.path.join(WORK, name, "one"), plan)
        q = run([plan] + BASE + ["--log", "{out}/l.jsonl"], os.path.join(WORK, name, "none"), plan)
        expect(p[0] == 0 and p[:4] == q[:4], "--%s 1 runs the plan: %r" % (name, p[4]))
    for name, args in OVERRIDES.items():
        r = subprocess.run([TGC, "run", plan] + BASE + args, capture_output=True, text=True)
        expect(r.returncode == 2 and ("%s: overrides apply to models" % " ".join(args)) in r.stderr,
               "--%s: tgc run PLAN refuses it as an override: %r" % (name, r.stderr))
    print("%d options checked over a plan, %d failures" % (len(every), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
