#!/usr/bin/env python3
"""Checkpoints end to end (docs/checkpoints.md): tgc run --save / --load,
tgc export. Any python3 (json, struct only).

  checkpoint.py TGC MODEL resume [RUN ARGS...]
      6 steps uninterrupted against 3 steps with --save, then --load and 3
      more: every log line's loss, grad_norm, lr (and fp16's loss_scale,
      skipped) string-equal.
  checkpoint.py TGC MODEL kill9
      TGC_CKPT_TEST_DELAY_MS slows each save; the run is killed (SIGKILL)
      while iter_0000006.tmp-PID holds model.safetensors but not yet
      optimizer.safetensors: latest still names 3, no
      iter_0000006, and resuming from it gives the uninterrupted losses.
  checkpoint.py TGC MODEL reshard
      saved under --tp 2 --pp 2 (4 micro-batches), loaded under --tp 1 --pp 1
      (the same micro-batches), and the reverse: the next step's loss within
      1e-5 (relative) of the uninterrupted run in the saving configuration.
  checkpoint.py TGC MODEL full_disk
      a save that fails for want of space (a 1800 KiB tmpfs when mount works,
      else RLIMIT_FSIZE with SIGXFSZ ignored): exit 1, the message names the
      file and says the previous checkpoint is intact, latest and the
      previous checkpoint unchanged, no temporary directory left. Exit 77
      (skipped) when neither mechanism is available.
  checkpoint.py TGC MODEL export
      `tgc export` of a checkpoint holds exactly the tensors (names, dtypes,
      shapes, bytes) --export writes for the same run, with "format": "pt".
  checkpoint.py TGC MODEL signal [RUN ARGS...]
      a run with --save gets SIGTERM, then another SIGINT, while it trains:
      each exits 128 + the signal, saying after which step every rank
      stopped; latest names that step, which is the log's last; the
      checkpoint loads and the next two steps' log lines equal an
      uninterrupted run's (so every rank stopped after the same step). A
      second signal during the save ends the process at once (killed by
      it, latest unchanged). While a run holds the directory a second
      writer is refused, naming the holder's pid (tgc.lock).
"""
import glob
import json
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

TINY = ["--set", "layers=2", "--set", "hidden=64", "--set", "heads=4", "--set", "seq=32", "--set", "batch=4"]
SKIP = 77


def make_text(path):
    """A small deterministic text (byte tokens): about 24 KB of words."""
    words = ("the of and to in a is that for it as was with be by on not he this are or his from at which but have "
             "an they you were her she there one all we their has been would when so if more no what out up into "
             "time some could them other than then now only its also two first new may any these").split()
    x, out = 12345, []
    while sum(len(w) + 1 for w in out) < 24000:
        x = (1103515245 * x + 12345) % 2**31
        out.append(words[x % len(words)])
    with open(path, "w") as f:
        f.write(" ".join(out) + "\n")


def tiny_for(args):
    # --micro-batch-size is the model's batch: TINY's --set batch=4 would contradict it.
    return TINY[:-2] if "--micro-batch-size" in args else TINY


def run(tgc, model, data, args, env=None, check=True):
    cmd = [tgc, "run", model, "--data", data, "--quiet"] + tiny_for(args) + args
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if check and p.returncode != 0:
        sys.exit("FAILED (exit %d): %s\n%s" % (p.returncode, " ".join(cmd), p.stderr))
    return p


def log_fields(path, keys=("step", "loss", "lr", "grad_norm", "loss_scale", "skipped")):
    """Per line, the raw JSON text of the fields that must not change."""
    rows = []
    for line in open(path):
        obj = json.loads(line)
        text = line.strip()[1:-1]
        rows.append({k: seg.split(":", 1)[1] for seg in text.split(",") for k in keys
                     if seg.startswith('"%s":' % k)} | {"_loss": obj["loss"]})
    return rows


def check_equal(full, resumed, what):
    a = [{k: v for k, v in r.items() if k != "_loss"} for r in full]
    b = [{k: v for k, v in r.items() if k != "_loss"} for r in resumed]
    if a != b:
        for x, y in zip(a, b):
            print("  uninterrupted", x, "\n  resumed      ", y, file=sys.stderr)
        sys.exit("FAILED: %s: the resumed run's log differs from the uninterrupted one" % what)


def resume(tgc, model, data, tmp, extra):
    run(tgc, model, data, ["--train-iters", "6", "--log", tmp + "/full.jsonl"] + extra)
    run(tgc, model, data, ["--train-iters", "3", "--log", tmp + "/a.jsonl", "--save", tmp + "/ck"] + extra)
    run(tgc, model, data, ["--train-iters", "6", "--log", tmp + "/b.jsonl", "--load", tmp + "/ck"] + extra)
    full = log_fields(tmp + "/full.jsonl")
    resumed = log_fields(tmp + "/a.jsonl") + log_fields(tmp + "/b.jsonl")
    if len(full) != 6 or len(resumed) != 6:
        sys.exit("FAILED: expected 6 log lines each, got %d and %d" % (len(full), len(resumed)))
    check_equal(full, resumed, " ".join(extra) or "serial")
    assert open(tmp + "/ck/latest").read().strip() == "3"
    print("resume %s: 6 identical log lines (losses %s)" % (" ".join(extra) or "serial",
                                                               ", ".join(r["loss"] for r in full)))


def kill9(tgc, model, data, tmp):
    run(tgc, model, data, ["--train-iters", "6", "--log", tmp + "/full.jsonl"])
    ck = tmp + "/ck"
    env = dict(os.environ, TGC_CKPT_TEST_DELAY_MS="400")
    cmd = [tgc, "run", model, "--data", data, "--quiet"] + TINY + ["--train-iters", "9", "--save", ck,
                                                                   "--save-interval", "3"]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline, seen = time.time() + 120, None
    while time.time() < deadline and p.poll() is None:
        tmps = glob.glob(ck + "/iter_0000006.tmp-*")
        if tmps:
            seen = tmps[0]
            break
        time.sleep(0.02)
    if not seen:
        p.kill()
        sys.exit("FAILED: the run ended (exit %s) before iter_0000006.tmp-* appeared" % p.poll())
    # Mid-save: the model file written, the optimizer's not yet (the hook
    # sleeps 400 ms between them).
    while time.time() < deadline and p.poll() is None and not os.path.exists(seen + "/model.safetensors"):
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait()
    latest = open(ck + "/latest").read().strip()
    if latest != "3" or os.path.exists(ck + "/iter_0000006"):
        sys.exit("FAILED: after SIGKILL during the save of 6, latest is %r (want 3), iter_0000006 %s" %
                 (latest, "exists" if os.path.exists(ck + "/iter_0000006") else "absent"))
    run(tgc, model, data, ["--train-iters", "6", "--log", tmp + "/b.jsonl", "--load", ck])
    check_equal(log_fields(tmp + "/full.jsonl")[3:], log_fields(tmp + "/b.jsonl"), "resume after kill -9")
    # The next save removes the dead process's temporary directory.
    run(tgc, model, data, ["--train-iters", "7", "--load", ck, "--save", ck])
    left = glob.glob(ck + "/*.tmp-*")
    if left:
        sys.exit("FAILED: stale temporary directories left: %s" % left)
    print("kill -9 during the save of step 6 (%s): latest still 3, the resumed losses equal" %
          os.path.basename(seen))


def reshard(tgc, model, data, tmp):
    a = ["--tp", "2", "--pp", "2", "--micro-batch-size", "2", "--global-batch-size", "8"]
    b = ["--micro-batch-size", "2", "--global-batch-size", "8"]
    for name, save, load in (("t2p2->t1p1", a, b), ("t1p1->t2p2", b, a)):
        d = tmp + "/" + name.replace(">", "")
        os.makedirs(d)
        run(tgc, model, data, ["--train-iters", "4", "--log", d + "/full.jsonl"] + save)
        run(tgc, model, data, ["--train-iters", "3", "--save", d + "/ck"] + save)
        p = run(tgc, model, data, ["--train-iters", "4", "--load", d + "/ck", "--log", d + "/next.jsonl"] + load)
        want = log_fields(d + "/full.jsonl")[3]["_loss"]
        got = log_fields(d + "/next.jsonl")
        # The log's steps are 1-based iterations: the resumed run's only one is 4.
        if len(got) != 1 or got[0]["step"] != "4":
            sys.exit("FAILED: %s: expected one log line of step 4, got %s" % (name, got))
        rel = abs(got[0]["_loss"] - want) / abs(want)
        if rel > 1e-5:
            sys.exit("FAILED: %s: step 4's loss %r after resharding, %r uninterrupted (relative %.3g)" %
                     (name, got[0]["_loss"], want, rel))
        print("reshard %s: step 4 loss %.9g against %.9g (relative %.2g)" % (name, got[0]["_loss"], want, rel))


def tree(path):
    out = {}
    for f in sorted(glob.glob(path + "/**", recursive=True)):
        if os.path.isfile(f) and os.path.basename(f) != "tgc.lock":  # names its holder's pid
            out[os.path.relpath(f, path)] = open(f, "rb").read()
    return out


def full_disk_case(tgc, model, data, ck, how, limit=None):
    run(tgc, model, data, ["--train-iters", "2", "--save", ck])
    before = tree(ck)
    pre = None
    if limit:
        def pre():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    cmd = [tgc, "run", model, "--data", data, "--quiet"] + TINY + ["--train-iters", "4", "--load", ck, "--save", ck]
    p = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=pre)
    err = p.stderr
    if p.returncode != 1:
        sys.exit("FAILED: %s: exit %d (want 1)\n%s" % (how, p.returncode, err))
    if "iter_0000004.tmp-" not in err or ".safetensors: error: cannot write: " not in err:
        sys.exit("FAILED: %s: the message does not name the file it failed to write:\n%s" % (how, err))
    if "the previous checkpoint '%s/iter_0000002' (named by %s/latest) is intact" % (ck, ck) not in err:
        sys.exit("FAILED: %s: the message does not say the previous checkpoint is intact:\n%s" % (how, err))
    after = tree(ck)
    if after != before:
        sys.exit("FAILED: %s: the checkpoint directory changed: %s -> %s" % (how, sorted(before), sorted(after)))
    print("%s: exit 1, %s" % (how, err.strip().splitlines()[0]))


def full_disk(tgc, model, data, tmp):
    done = 0
    mnt = tmp + "/small"
    os.makedirs(mnt)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1800k", "tmpfs", mnt], capture_output=True).returncode == 0:
        try:
            full_disk_case(tgc, model, data, mnt + "/ck", "ENOSPC (tmpfs of 1800 KiB)")
            done += 1
        finally:
            subprocess.run(["umount", mnt])
    else:
        print("mount -t tmpfs is not available here: the ENOSPC case is left out")
    # RLIMIT_FSIZE: files up to 600 KB (model.safetensors fits, optimizer.safetensors does not).
    try:
        full_disk_case(tgc, model, data, tmp + "/ck", "EFBIG (RLIMIT_FSIZE of 600 KB)", limit=600000)
        done += 1
    except (ValueError, OSError) as e:
        print("RLIMIT_FSIZE is not available: %s" % e)
    if not done:
        print("neither a tmpfs nor RLIMIT_FSIZE is available: skipped")
        sys.exit(SKIP)


def read_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    return meta, {k: (v["dtype"], v["shape"], raw[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
                  for k, v in header.items()}


def export(tgc, model, data, tmp):
    args = ["--tp", "2", "--pp", "2", "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "2"]
    run(tgc, model, data, args + ["--save", tmp + "/ck", "--export", tmp + "/direct.safetensors"])
    p = subprocess.run([tgc, "export", tmp + "/ck", "-o", tmp + "/exported.safetensors"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("FAILED: tgc export: exit %d\n%s" % (p.returncode, p.stderr))
    m1, t1 = read_st(tmp + "/direct.safetensors")
    m2, t2 = read_st(tmp + "/exported.safetensors")
    if t1 != t2:
        diff = sorted(k for k in set(t1) | set(t2) if t1.get(k) != t2.get(k))
        sys.exit("FAILED: tgc export differs from --export in %d tensors, e.g. %s" % (len(diff), diff[:3]))
    if m2.get("format") != "pt" or m2.get("model") != m1.get("model"):
        sys.exit("FAILED: tgc export's metadata %s" % m2)
    print("export: %d tensors equal to --export's, metadata %s" % (len(t1), m2))


def start(tgc, model, data, args, env=None):
    cmd = [tgc, "run", model, "--data", data, "--quiet"] + tiny_for(args) + args
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_for(cond, p, what, limit=120):
    deadline = time.time() + limit
    while time.time() < deadline and p.poll() is None and not cond():
        time.sleep(0.02)
    if not cond():
        p.kill()
        sys.exit("FAILED: %s did not happen (the run's exit status %s)" % (what, p.poll()))


def log_lines(path):
    return len(open(path).readlines()) if os.path.exists(path) else 0


def signal_case(tgc, model, data, tmp, sig, extra):
    """One signal to a training run: the stop, the checkpoint, the resume."""
    name = signal.Signals(sig).name
    d = tmp + "/" + name
    os.makedirs(d)
    ck = d + "/ck"
    p = start(tgc, model, data, ["--train-iters", "100000", "--save", ck, "--log", d + "/a.jsonl"] + extra)
    wait_for(lambda: log_lines(d + "/a.jsonl") >= 2, p, "two logged steps")
    if sig == signal.SIGTERM:  # meanwhile a second writer is refused, naming the holder
        q = run(tgc, model, data, ["--train-iters", "2", "--save", ck] + extra, check=False)
        want = "tgc: error: --save %s: another run is writing its checkpoints there: '%s/tgc.lock' is held by " \
               "pid %d on host " % (ck, ck, p.pid)
        if q.returncode != 1 or want not in q.stderr:
            p.kill()
            sys.exit("FAILED: a second writer of %s: exit %d, stderr %r (want 1 and %r)" %
                     (ck, q.returncode, q.stderr, want))
    p.send_signal(sig)
    err = p.communicate(timeout=120)[1]
    if p.returncode != 128 + sig:
        sys.exit("FAILED: %s: exit %d (want %d); stderr %r" % (name, p.returncode, 128 + sig, err))
    n = int(open(ck + "/latest").read())
    logged = log_fields(d + "/a.jsonl")
    msg = "tgc: %s: every rank stopped after step %d of 100000; its checkpoint is %s/iter_%07d" % (name, n, ck, n)
    if msg not in err or int(logged[-1]["step"]) != n or not os.path.isdir(ck + "/iter_%07d" % n):
        sys.exit("FAILED: %s: latest %d, the log's last step %s, stderr %r" % (name, n, logged[-1]["step"], err))
    # The checkpoint loads (the lock is free again), and goes on as an uninterrupted run would.
    run(tgc, model, data, ["--train-iters", str(n + 2), "--log", d + "/full.jsonl"] + extra)
    run(tgc, model, data, ["--train-iters", str(n + 2), "--load", ck, "--save", ck, "--log", d + "/b.jsonl"] + extra)
    check_equal(log_fields(d + "/full.jsonl")[n:], log_fields(d + "/b.jsonl"), "%s, resumed at %d" % (name, n))
    print("%s: exit %d after step %d, the next two steps resumed equal" % (name, 128 + sig, n))


def signal_twice(tgc, model, data, tmp, extra):
    """A second signal while the first's checkpoint is being saved."""
    ck = tmp + "/twice"
    env = dict(os.environ, TGC_CKPT_TEST_DELAY_MS="3000")
    p = start(tgc, model, data, ["--train-iters", "100000", "--save", ck, "--log", tmp + "/t.jsonl"] + extra, env)
    wait_for(lambda: log_lines(tmp + "/t.jsonl") >= 1, p, "a logged step")
    p.send_signal(signal.SIGTERM)
    wait_for(lambda: glob.glob(ck + "/iter_*.tmp-*"), p, "the save after SIGTERM")
    t0 = time.time()
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=60)
    dt = time.time() - t0
    if p.returncode != -signal.SIGINT or dt > 2.0 or os.path.exists(ck + "/latest"):
        sys.exit("FAILED: a second signal: exit %d after %.1f s (want killed by SIGINT at once), latest %s" %
                 (p.returncode, dt, "written" if os.path.exists(ck + "/latest") else "absent"))
    print("a second signal during the save: killed by SIGINT after %.2f s, nothing installed" % dt)


def signal_stop(tgc, model, data, tmp, extra):
    signal_case(tgc, model, data, tmp, signal.SIGTERM, extra)
    signal_case(tgc, model, data, tmp, signal.SIGINT, extra)
    signal_twice(tgc, model, data, tmp, extra)


def main():
    tgc, model, mode, extra = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    tmp = tempfile.mkdtemp(prefix="tgc-ckpt-")
    try:
        data = tmp + "/text.txt"
        make_text(data)
        if mode == "resume":
            resume(tgc, model, data, tmp, extra)
        elif mode == "signal":
            signal_stop(tgc, model, data, tmp, extra)
        elif mode in ("kill9", "reshard", "full_disk", "export"):
            globals()[mode](tgc, model, data, tmp)
        else:
            sys.exit("unknown mode %s" % mode)
    finally:
        subprocess.run(["umount", tmp + "/small"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
