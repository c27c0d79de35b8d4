#!/usr/bin/env python3
"""megatron_order.py TGC MODEL: the per-rank instruction lists `tgc dump-ir
--format schedule` prints for 1F1B, interleaved and GPipe, against a second,
independent transcription of Megatron-LM's schedules
(megatron/core/pipeline_parallel/schedules.py, without p2p overlap):
forward_backward_pipelining_without_interleaving and _with_interleaving,
their warm-up / steady / cool-down loops, which chunk each iteration runs
(get_schedule_table with groups of p micro-batches), and where each
receive and send is posted (recv_tensor_from_previous_stage, the combined
send/recv calls). A received tensor is the next micro-batch of its chunk
that still lacks its input, as Megatron's per-chunk input_tensors /
output_tensor_grads lists hold them.

Only the per-micro-batch instructions are compared (forwards, backwards and
their sends and receives); the tied-weight transfers, the reductions and the
optimizer step are tgc's and tested elsewhere."""
import subprocess
import sys


class Rank:
    def __init__(self, p, v, m, r):
        self.p, self.v, self.m, self.r = p, v, m, r
        self.out = []
        self.fq = [0] * v  # per chunk: next micro-batch to receive an input for
        self.bq = [0] * v

    def stage(self, c):
        return c * self.p + self.r

    def recv(self, fwd, c):
        s = self.stage(c)
        if fwd and s == 0 or not fwd and s == self.p * self.v - 1:
            return  # the first stage reads data; the last computes the loss
        q = self.fq if fwd else self.bq
        if q[c] >= self.m:
            return
        peer = s - 1 if fwd else s + 1
        kind = "recv-fwd F" if fwd else "recv-bwd B"
        self.out.append("%s%d.%d <- s%d (rank %d)" % (kind, c, q[c], peer, peer % self.p))
        q[c] += 1

    def send(self, fwd, c, mb):
        s = self.stage(c)
        if fwd and s == self.p * self.v - 1 or not fwd and s == 0:
            return
        peer = s + 1 if fwd else s - 1
        kind = "send-fwd F" if fwd else "send-bwd B"
        self.out.append("%s%d.%d -> s%d (rank %d)" % (kind, c, mb, peer, peer % self.p))

    def compute(self, fwd, c, mb):
        self.out.append("%s%d.%d" % ("F" if fwd else "B", c, mb))


def one_f_one_b(p, m, r):
    R = Rank(p, 1, m, r)
    warm = min(p - r - 1, m)
    rest = m - warm
    for i in range(warm):
        R.recv(True, 0)
        R.compute(True, 0, i)
        R.send(True, 0, i)
    if rest > 0:
        R.recv(True, 0)
    for i in range(rest):
        R.compute(True, 0, warm + i)
        R.send(True, 0, warm + i)  # send_forward_recv_backward
        R.recv(False, 0)
        R.compute(False, 0, i)
        R.send(False, 0, i)
        if i != rest - 1:  # send_backward_recv_forward, but in the last iteration
            R.recv(True, 0)
    for i in range(warm):
        R.recv(False, 0)
        R.compute(False, 0, rest + i)
        R.send(False, 0, rest + i)
    return R.out


def gpipe(p, m, r):
    R = Rank(p, 1, m, r)
    for fwd in (True, False):
        for j in range(m):
            R.recv(fwd, 0)
            R.compute(fwd, 0, j)
            R.send(fwd, 0, j)
    return R.out


def interleaved(p, v, m, r):
    R = Rank(p, v, m, r)
    total = m * v
    table = [(mb, c) for g in range(0, m, p) for c in range(v) for mb in range(g, g + p)]

    def chunk(k, fwd):
        c = table[k % total][1]
        return c if fwd else v - 1 - c

    def mb(k):
        return table[k % total][0]

    def recv_prev_stage(k, fwd):  # recv_tensor_from_previous_stage
        leading = r == 0 if fwd else r == p - 1
        last = v - 1 if fwd else 0
        if not leading:
            return True, chunk(k + 1, fwd)
        recv = True
        if k < p - 1:
            recv = False
            nxt = chunk(k + 1, fwd)
        else:
            nxt = chunk(k - (p - 1), fwd)
        if nxt == last:
            recv = False
        return recv, nxt + 1 if fwd else nxt - 1

    warm = (p - r - 1) * 2 + (v - 1) * p
    all_warm = warm >= total
    warm = min(warm, total)
    rest = total - warm
    R.recv(True, 0)
    for k in range(warm):
        c = chunk(k, True)
        R.compute(True, c, mb(k))
        recv_prev, nc = recv_prev_stage(k, True)
        if k == total - 1:
            recv_prev = False
        R.send(True, c, mb(k))
        if recv_prev:
            R.recv(True, nc)
        if k == warm - 1 and not all_warm and r != p - 1:
            R.recv(False, v - 1)
    for k in range(rest):
        fk = k + warm
        fc, bc = chunk(fk, True), chunk(k, False)
        R.compute(True, fc, mb(fk))
        R.compute(False, bc, mb(k))
        recv_prev, nfc = recv_prev_stage(fk, True)
        recv_next, nbc = recv_prev_stage(k, False)
        if k == rest - 1:
            recv_prev = False
        R.send(True, fc, mb(fk))
        R.send(False, bc, mb(k))
        if recv_prev:
            R.recv(True, nfc)
        if recv_next:
            R.recv(False, nbc)
    if all_warm:
        R.recv(False, v - 1)
    for k in range(rest, total):
        c = chunk(k, False)
        R.compute(False, c, mb(k))
        recv_next, nbc = recv_prev_stage(k, False)
        if k == total - 1:
            recv_next = False
        R.send(False, c, mb(k))
        if recv_next:
            R.recv(False, nbc)
    return R.out


STEP_LEVEL = ("send-weight", "recv-weight", "send-wgrad", "recv-wgrad", "allreduce-dp", "optimizer-step")


def tool_lists(tgc, model, kind, p, v, m):
    args = [tgc, "dump-ir", model, "--set", "layers=%d" % (p * v), "--pp", str(p), "--pipeline-schedule", kind,
            "--global-batch-size", str(m), "--micro-batch-size", "1", "--format", "schedule"]
    if v > 1:
        args += ["--vp", str(v)]
    text = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    lists, cur = {}, None
    for line in text.splitlines():
        if line.startswith("rank ") and line.endswith(" instructions:"):
            cur = lists.setdefault(int(line.split()[1]), [])
        elif line.startswith("  ") and cur is not None:
            ins = line.strip()
            if not ins.startswith(STEP_LEVEL):
                cur.append(ins)
        else:
            cur = None
    return lists


def main():
    tgc, model = sys.argv[1], sys.argv[2]
    cases = [("1f1b", p, 1, m) for p in (1, 2, 3, 4) for m in (1, 2, 3, 5, 8)]
    cases += [("gpipe", p, 1, m) for p in (2, 4) for m in (1, 4)]
    cases += [("interleaved", p, v, m) for (p, v) in ((2, 2), (2, 3), (4, 2), (3, 2)) for m in (p, 2 * p, 3 * p)]
    failed = 0
    for kind, p, v, m in cases:
        got = tool_lists(tgc, model, kind, p, v, m)
        for r in range(p):
            want = (one_f_one_b(p, m, r) if kind == "1f1b" else gpipe(p, m, r) if kind == "gpipe"
                    else interleaved(p, v, m, r))
            if got.get(r) != want:
                failed += 1
                g = got.get(r, [])
                i = next((i for i in range(max(len(g), len(want))) if i >= len(g) or i >= len(want) or g[i] != want[i]), 0)
                print("FAIL %s p=%d v=%d m=%d rank %d: instruction %d is %r, Megatron's is %r" %
                      (kind, p, v, m, r, i, g[i] if i < len(g) else None, want[i] if i < len(want) else None))
    print("%d schedules (%d rank lists) compared with Megatron's order, %d differ" %
          (len(cases), sum(c[1] for c in cases), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
