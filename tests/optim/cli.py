#!/usr/bin/env python3
"""The optimizer and schedule options end to end (no PyTorch needed):

  - every user error of the options exits 2 and names the offending text;
  - a plan keeps its schedule and parameter groups (`tgc compile` then
    `tgc run PLAN` logs the same lr and wd as `tgc run MODEL`);
  - `tgc check --params` lists each parameter's group;
  - the optimizer state is none (SGD), W (SGD with momentum) or 2W (Adam).

usage: cli.py TGC
"""
import json, os, re, struct, subprocess, sys, tempfile

MODEL = """tgc-ir 1
model "groups"
%g.w = input : f32[512, 512]
%g.b = input : f32[512]
%g.e = input : f32[64, 8]
%w = param init=normal : f32[512, 512]
%b = param init=zeros : f32[512]
%emb.weight = param init=normal : f32[64, 8]
%mw = mul(%w, %g.w) : f32[512, 512]
%mb = mul(%b, %g.b) : f32[512]
%me = mul(%emb.weight, %g.e) : f32[64, 8]
%sw = sum(%mw) : f32[]
%sb = sum(%mb) : f32[]
%se = sum(%me) : f32[]
%s1 = add(%sw, %sb) : f32[]
%loss = add(%s1, %se) : f32[] loss
"""

# (options, text the error must contain); each must exit 2.
ERRORS = [
    (["--lr-scheduler", "linear(total_iters=100) then cosin(T_max=900) at 100"],
     "--lr-scheduler: unknown scheduler 'cosin'"),
    (["--lr-scheduler", "cosine(T_max=90"], "expected ',' or ')' after an argument, found the end"),
    (["--lr-scheduler", "cosine(T_max=9.5)"], "'9.5' is not an integer"),
    (["--lr-scheduler", "cosine(T_max=9) then linear()"], "expected 'at STEP'"),
    (["--lr-scheduler", "cosine(T_max=9)", "--lr-warmup-iters", "3"],
     "--lr-scheduler replaces Megatron's learning-rate schedule; drop --lr-warmup-iters"),
    (["--lr-scheduler", "cosine(T_max=9)", "--lr-decay-style", "cosine"], "drop --lr-decay-style"),
    (["--lr-decay-style", "WSD"], "--lr-decay-style WSD needs --lr-wsd-decay-iters"),
    (["--lr-decay-style", "cosin"], "--lr-decay-style: 'cosin' is not one of constant|linear|cosine|"
                                    "inverse-square-root|WSD"),
    (["--lr-wsd-decay-style", "square"], "is not one of exponential|linear|cosine|minus_sqrt"),
    (["--lr-decay-style", "linear", "--train-iters", "0"], "decays over 0 iterations"),
    (["--min-lr", "0.1", "--lr", "0.01"], "--lr 0.01 is below --min-lr 0.1"),
    (["--lr-warmup-iters", "2", "--lr-warmup-init", "1"], "--lr-warmup-init 1 is above --lr"),
    (["--weight-decay-incr-style", "linear"], "needs --start-weight-decay and --end-weight-decay"),
    (["--start-weight-decay", "0.1"], "need --weight-decay-incr-style linear or cosine"),
    (["--weight-decay-incr-style", "cosine", "--start-weight-decay", "0.2", "--end-weight-decay", "0.1"],
     "--end-weight-decay 0.1 is below --start-weight-decay 0.2"),
    (["--sgd-nesterov", "--sgd-momentum", "0.9", "--sgd-dampening", "0.1"], "--sgd-nesterov needs"),
    (["--adam-beta2", "1.0"], "Adam needs 0 <= --adam-beta1, --adam-beta2 < 1"),
    (["--weight-decay", "-0.1"], "--weight-decay -0.1 is negative"),
    (["--param-group", "emb.*"], "--param-group: 'emb.*': expected GLOB:lr_mult=X,wd_mult=Y"),
    (["--param-group", "emb.*:lr_mul=2"], "'lr_mul=2' in 'emb.*:lr_mul=2': expected lr_mult=X or wd_mult=Y"),
    (["--param-group", "emb.*:wd_mult=-1"], "the multiplier must be a non-negative number"),
]


def st_write(path, tensors):
    """safetensors of float32 zeros: {name: shape}."""
    header, blobs, off = {}, [], 0
    for name, shape in sorted(tensors.items()):
        n = 4
        for d in shape:
            n *= d
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + n]}
        blobs.append(bytes(n))
        off += n
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def run(cmd, env=None):
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def log_of(path):
    return [(r["lr"], r["wd"]) for r in map(json.loads, open(path))]


def main():
    tgc = sys.argv[1]
    failures = []

    def expect(cond, what):
        print(("ok    " if cond else "FAIL  ") + what)
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        model, inputs = os.path.join(tmp, "m.ir"), os.path.join(tmp, "in.safetensors")
        open(model, "w").write(MODEL)
        st_write(inputs, {"g.w": [1, 512, 512], "g.b": [1, 512], "g.e": [1, 64, 8]})
        # Without --train-iters: an option given twice is an error, so each use adds its own.
        base = [tgc, "run", model, "--inputs", inputs, "--quiet"]
        for opts, want in ERRORS:
            r = run(base + opts + ([] if "--train-iters" in opts else ["--train-iters", "20"]))
            expect(r.returncode == 2 and want in r.stderr,
                   "%s: exit %d, %r" % (" ".join(opts), r.returncode, r.stderr.strip().splitlines()[:1]))

        # A plan keeps the schedule and the groups; the command line still overrides.
        sched = ["--lr-scheduler", "linear(start_factor=0.5, total_iters=4) then exponential(gamma=0.5) at 4",
                 "--weight-decay-incr-style", "linear", "--start-weight-decay", "0.0", "--end-weight-decay", "0.2",
                 "--param-group", "emb.*:lr_mult=0.5,wd_mult=2", "--train-iters", "20"]
        plan, la, lb, lc = (os.path.join(tmp, f) for f in ("p.plan", "a.jsonl", "b.jsonl", "c.jsonl"))
        r = run([tgc, "compile", model, "-o", plan] + sched)
        expect(r.returncode == 0, "compile with a schedule and groups: " + r.stderr.strip())
        text = open(plan).read() if r.returncode == 0 else ""
        expect("lr-scheduler linear(start_factor=0.5, total_iters=4) then exponential(gamma=0.5) at 4\n" in text,
               "the plan's configuration keeps --lr-scheduler")
        expect(re.search(r"%emb.weight = param init=normal lr_mult=0.5 wd_mult=2.0 : f32\[64, 8\] mem\(param, \d+\)",
                         text) is not None, "the plan's IR has the group of emb.weight")
        expect(re.search(r"%b = param init=zeros : f32\[512\] no_decay", text) is not None,
               "the 1-D parameter has no weight decay (Megatron's rule)")
        r1 = run([tgc, "run", plan, "--inputs", inputs, "--quiet", "--log", la])
        r2 = run(base + sched + ["--log", lb])
        expect(r1.returncode == 0 and r2.returncode == 0 and log_of(la) == log_of(lb) and len(log_of(la)) == 20,
               "tgc run PLAN logs the lr and wd of tgc run MODEL")
        r3 = run([tgc, "run", plan, "--inputs", inputs, "--quiet", "--log", lc, "--lr", "0.5"])
        expect(r3.returncode == 0 and log_of(lc)[0] == (0.25, 0.0) and log_of(lc)[4][0] == 0.5
               and abs(log_of(lc)[4][1] - 0.04) < 1e-15,
               "the command line's --lr overrides the plan's: %s" % (log_of(lc)[:5] if r3.returncode == 0 else r3.stderr))
        r = run([tgc, "run", plan, "--inputs", inputs, "--quiet", "--log", lc, "--param-group", "w:lr_mult=2"])
        expect(r.returncode == 0 and "recompiling the plan's lowered IR for --param-group w:lr_mult=2" in r.stderr,
               "--param-group on a plan recompiles it: " + r.stderr.strip())

        # tgc check --params: every parameter with its group.
        r = run([tgc, "check", model, "--params", "--param-group", "emb.*:lr_mult=0.1,wd_mult=0"])
        lines = {l.split()[0]: l for l in r.stdout.splitlines() if l.startswith(("w ", "b ", "emb.weight "))}
        expect(r.returncode == 0 and lines.get("w", "").endswith("  decay") and lines.get("b", "").endswith("no_decay")
               and lines.get("emb.weight", "").endswith("decay lr_mult=0.1 wd_mult=0"),
               "tgc check --params lists the groups: %r" % sorted(lines.values()))

        # The optimizer state: none, W, 2W (TGC_DEBUG=1 prints it).
        env = dict(os.environ, TGC_DEBUG="1")
        for opts, factor in ((["--optimizer", "sgd"], 0), (["--optimizer", "sgd", "--sgd-momentum", "0.9"], 1),
                             (["--optimizer", "adam"], 2), (["--optimizer", "adamw"], 2)):
            r = run([a for a in base if a != "--quiet"] + opts + ["--train-iters", "1"], env=env)
            m = re.search(r"parameters ([\d.]+) MiB, gradients [\d.]+ MiB, optimizer state ([\d.]+) MiB", r.stderr)
            expect(m is not None and abs(float(m.group(2)) - factor * float(m.group(1))) <= 0.005 * (factor + 1),
                   "%s: optimizer state %s = %d x parameters %s MiB" % (" ".join(opts), m and m.group(2), factor,
                                                                       m and m.group(1)))
    print("optim.cli:", "FAIL (%d)" % len(failures) if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
