#!/usr/bin/env python3
"""The outside oracle: PyTorch trains the same model from the same weights
on the same batches, and tgc's losses and first-step gradients must agree.

The PyTorch model is built from tgc's JSON export of the IR after lowering
(`tgc dump-ir MODEL --after lower --format json`): every op is interpreted
with PyTorch's own implementation (torch.nn.functional, autograd), so the
only thing shared with tgc is the graph's structure. A custom op's
hand-written backward is not run: autograd differentiates its forward.

With --reference llama, PyTorch runs instead a LLaMA written by hand the
way Megatron-LM computes it (llama_reference: its fused QKV layout for
grouped-query attention, repeat_interleave of k and v), which shares with
tgc only the parameter names and the hyperparameters: samples/llama.tg
itself is then under test.

usage: oracle.py TGC MODEL [--set k=v ...] [--steps N] [--lr LR] [--reference graph|llama]
Exit status 0 when losses agree within --loss-tol (relative) at every step
and gradients within --grad-tol (max |diff| / max |torch grad|) per tensor.
"""
import argparse, json, math, os, struct, subprocess, sys, tempfile

import torch
import torch.nn.functional as F

DT = {"f32": torch.float32, "f64": torch.float64, "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8}
ST = {torch.float32: "F32", torch.float64: "F64", torch.int32: "I32", torch.int64: "I64", torch.uint8: "U8"}
ST_BACK = {v: k for k, v in ST.items()}


def st_write(path, tensors):
    """A safetensors writer (the format is a JSON header and raw bytes)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        raw = t.numpy().tobytes()
        header[name] = {"dtype": ST[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def st_read(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = bytearray(data[8 + n + a:8 + n + b])
        out[name] = torch.frombuffer(buf, dtype=ST_BACK[info["dtype"]]).reshape(info["shape"]).clone()
    return out


def rope(x, base, inverse, factor=1.0, low=1.0, high=4.0, orig=8192):
    s, b, n, d = x.shape
    half = d // 2
    pos = torch.arange(s, dtype=torch.float64)
    inv_freq = torch.exp(torch.arange(half, dtype=torch.float64) * (-2.0 * math.log(base) / d))
    if factor != 1.0:
        # Llama 3.1 (transformers' _compute_llama3_parameters, case by case):
        # short wavelengths kept, long ones divided by the factor, the band
        # between blended by the context's wavelengths.
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > orig / low, inv_freq / factor, inv_freq)
        smooth = (orig / wavelen - low) / (high - low)
        blend = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < orig / high) & ~(wavelen > orig / low)
        inv_freq = torch.where(medium, blend, scaled)
    theta = torch.outer(pos, inv_freq)
    theta = torch.cat([theta, theta], dim=-1).to(x.dtype).view(s, 1, 1, d)
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    sin = torch.sin(theta)
    return x * torch.cos(theta) + rot * (-sin if inverse else sin)


def softmax(x, mask, scale, causal):
    z = x * scale
    if causal:
        sq, sk = z.shape[-2], z.shape[-1]
        tri = torch.ones(sq, sk, dtype=torch.bool).triu(1)
        z = z.masked_fill(tri, -10000.0)
    if mask is not None:
        shape = [mask.shape[0]] + [1] * (z.dim() - 2) + [mask.shape[1]]
        z = z.masked_fill(mask.view(shape) == 0, -10000.0)
    return torch.softmax(z, dim=-1)


def cross_entropy(logits, labels, ignore):
    v = logits.shape[-1]
    lab = labels.reshape(-1).long()
    ok = (lab != ignore) & (lab >= 0) & (lab < v)
    per = F.cross_entropy(logits.reshape(-1, v), torch.where(ok, lab, torch.zeros_like(lab)), reduction="none")
    per = torch.where(ok, per, torch.zeros_like(per))
    return per.sum() / ok.sum().clamp(min=1).to(per.dtype)


def run_node(n, a, x):
    op, at = n["op"], n["attrs"]
    if op == "linear":
        return F.linear(x[0], x[1], x[2] if len(x) > 2 else None)
    if op == "bmm":
        p = x[0].transpose(-1, -2) if at["transpose_a"] else x[0]
        q = x[1].transpose(-1, -2) if at["transpose_b"] else x[1]
        return torch.matmul(p, q) * at["alpha"]
    if op == "embedding":
        return F.embedding(x[0].long(), x[1])
    if op == "layernorm":
        return F.layer_norm(x[0], (x[0].shape[-1],), x[1], x[2], at["eps"])
    if op == "rmsnorm":
        return x[0] * torch.rsqrt(x[0].pow(2).mean(-1, keepdim=True) + at["eps"]) * x[1]
    if op in ("add", "sub", "mul"):
        return {"add": torch.add, "sub": torch.sub, "mul": torch.mul}[op](x[0], x[1])
    if op == "bias_add":
        return x[0] + x[1]
    if op == "scale":
        return x[0] * at["alpha"]
    if op == "gelu":
        return F.gelu(x[0], approximate="tanh" if at["approx"] == "tanh" else "none")
    if op == "silu":
        return F.silu(x[0])
    if op == "swiglu":
        return F.silu(x[0]) * x[1]
    if op == "dropout":
        if at["p"] != 0.0:
            raise SystemExit("oracle: dropout with p > 0 cannot match another RNG; run with the model's dropout at 0")
        return x[0]
    if op == "softmax":
        return softmax(x[0], x[1] if len(x) > 1 else None, at["scale"], at["causal"])
    if op == "rope":
        return rope(x[0], at["base"], at["inverse"], at["scaling_factor"], at["low_freq_factor"],
                    at["high_freq_factor"], at["original_max_pos"])
    if op == "reshape":
        return x[0].reshape(at["shape"])
    if op == "permute":
        return x[0].permute(at["perm"])
    if op == "slice":
        return x[0].narrow(at["axis"], at["start"], at["len"])
    if op == "concat":
        return torch.cat(x, dim=at["axis"])
    if op == "repeat_interleave":
        return x[0].repeat_interleave(at["repeats"], dim=at["axis"])
    if op == "cross_entropy":
        return cross_entropy(x[0], x[1], at["ignore_index"])
    if op == "sum":
        return x[0].sum()
    if op == "mean":
        return x[0].mean()
    if op == "custom_out":
        return x[0]  # forward: the body's result; autograd goes through the body
    raise SystemExit("oracle: op '%s' is not interpreted" % op)


def leaf(n):
    shape = n["shape"]
    if n["op"] == "arange":
        ax = n["attrs"]["axis"]
        idx = torch.arange(shape[ax], dtype=torch.int32)
        view = [1] * len(shape)
        view[ax] = shape[ax]
        return idx.view(view).expand(shape).contiguous()
    if n["op"] == "full":
        return torch.full(shape, n["attrs"]["value"], dtype=DT[n["dtype"]])
    raise SystemExit("oracle: unexpected leaf " + n["op"])


# A custom op's backward (cotangent, custom_grad and the nodes computed
# from them) is tgc's business: the oracle runs the forward only, and
# autograd differentiates the custom op's forward body instead, which checks
# the user's backward.
BACKWARD_ONLY = ("cotangent", "custom_grad")


def forward(graph, params, inputs):
    vals = {}
    loss = None
    skip = set()
    for n in graph["nodes"]:
        op = n["op"]
        if op in BACKWARD_ONLY or any(i in skip for i in n["operands"]):
            skip.add(n["id"])
            continue
        if op == "param":
            v = params[n["name"]]
        elif op == "input":
            v = inputs[n["name"]]
        elif not n["operands"]:
            v = leaf(n)
        else:
            v = run_node(n, None, [vals[i] for i in n["operands"]])
        vals[n["id"]] = v
        if "loss" in n["flags"]:
            loss = v
    return loss


def llama_reference(hp, p, batch):
    """samples/llama.tg by hand, as Megatron-LM's GPTModel with
    --normalization RMSNorm --swiglu --position-embedding-type rope
    --untie-embeddings-and-output-weights --disable-bias-linear
    --group-query-attention --num-query-groups kv_heads computes it
    (ParallelAttention at t = 1), on [s, b, h] activations."""
    s, b, h = hp["seq"], hp["batch"], hp["hidden"]
    nq, ng = hp["heads"], hp["kv_heads"]
    hn, r = h // nq, nq // ng
    assert nq % ng == 0 and h % nq == 0

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + hp["eps"]) * w

    causal = torch.ones(s, s, dtype=torch.bool).triu(1)
    x = F.embedding(batch["tokens"].long(), p["embedding.word_embeddings.weight"])
    for i in range(hp["layers"]):
        w = lambda name: p["layers.%d.%s" % (i, name)]  # noqa: E731
        a = rms(x, w("input_layernorm.weight"))
        # [s, b, ng * (r + 2) * hn]: per query group its r query heads, its key, its value.
        bias = w("self_attention.query_key_value.bias") if hp.get("add_qkv_bias") else None  # --add-qkv-bias
        mixed = F.linear(a, w("self_attention.query_key_value.weight"), bias).view(s, b, ng, (r + 2) * hn)
        q, k, v = torch.split(mixed, [r * hn, hn, hn], dim=3)
        q = q.reshape(s, b, nq, hn)
        if hp.get("qk_layernorm"):  # --qk-layernorm: RMSNorm over each head's hn
            q, k = rms(q, w("self_attention.q_layernorm.weight")), rms(k, w("self_attention.k_layernorm.weight"))
        sc = (hp.get("rope_factor", 1.0), hp.get("rope_low_freq_factor", 1.0), hp.get("rope_high_freq_factor", 4.0),
              hp.get("rope_original_max_pos", 8192))
        q, k = rope(q, hp["rope_base"], False, *sc), rope(k, hp["rope_base"], False, *sc)
        k = k.repeat_interleave(r, dim=2)  # query head j reads key/value head j // r
        v = v.repeat_interleave(r, dim=2)
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))  # [b, n, s, hn]
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hn)
        probs = torch.softmax(scores.masked_fill(causal, -10000.0), dim=-1)
        ctx = torch.matmul(probs, v).permute(2, 0, 1, 3).reshape(s, b, h)
        x = x + F.linear(ctx, w("self_attention.dense.weight"))
        m = rms(x, w("post_attention_layernorm.weight"))
        up = F.silu(F.linear(m, w("mlp.gate_proj.weight"))) * F.linear(m, w("mlp.up_proj.weight"))
        x = x + F.linear(up, w("mlp.down_proj.weight"))
    logits = F.linear(rms(x, p["final_layernorm.weight"]), p["output_layer.weight"])
    return cross_entropy(logits, batch["labels"], -100)


def make_inputs(graph, steps, gen):
    """Deterministic batches: tokens/labels in range, masks with padding."""
    vocab = {}
    for n in graph["nodes"]:
        if n["op"] in ("embedding", "cross_entropy"):
            src = graph["nodes"][n["operands"][0 if n["op"] == "embedding" else 1]]
            other = graph["nodes"][n["operands"][1 if n["op"] == "embedding" else 0]]
            vocab[src["name"]] = other["shape"][0] if n["op"] == "embedding" else other["shape"][-1]
    out = {}
    for n in graph["nodes"]:
        if n["op"] != "input":
            continue
        shape, dt = [steps] + n["shape"], DT[n["dtype"]]
        if dt == torch.uint8:
            keep = torch.ones(shape, dtype=torch.uint8)
            keep[..., -3:] = 0  # the last positions are padding
            out[n["name"]] = keep
        elif dt.is_floating_point:
            out[n["name"]] = torch.randn(shape, generator=gen, dtype=dt)
        else:
            v = vocab.get(n["name"], 16)
            t = torch.randint(0, v, shape, generator=gen, dtype=torch.int64)
            if n["name"] == "labels" and any(x["op"] == "cross_entropy" and x["attrs"]["ignore_index"] == -100
                                             for x in graph["nodes"]):
                t[torch.rand(shape, generator=gen) < 0.3] = -100  # ignored positions
            out[n["name"]] = t.to(dt)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tgc")
    ap.add_argument("model")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--use-rope-scaling", action="store_true", help="the model flag, passed to tgc")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--loss-tol", type=float, default=1e-4)
    ap.add_argument("--grad-tol", type=float, default=1e-4)
    ap.add_argument("--reference", choices=("graph", "llama"), default="graph",
                    help="interpret tgc's graph (default) or run the hand-written LLaMA")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    sets = sum([["--set", s] for s in args.set], []) + (["--use-rope-scaling"] if args.use_rope_scaling else [])
    graph = json.loads(subprocess.check_output([args.tgc, "dump-ir", args.model, "--after", "lower",
                                                "--format", "json"] + sets))
    gen = torch.Generator().manual_seed(1234)
    params = {}
    for n in graph["nodes"]:
        if n["op"] != "param":
            continue
        init, shape, dt = n["attrs"]["init"], n["shape"], DT[n["dtype"]]
        if init == "normal":
            params[n["name"]] = torch.randn(shape, generator=gen, dtype=dt) * n["attrs"]["std"]
        else:
            params[n["name"]] = torch.full(shape, 1.0 if init == "ones" else 0.0, dtype=dt)
    inputs = make_inputs(graph, args.steps, gen)
    with tempfile.TemporaryDirectory() as tmp:
        init_p, batch_p = os.path.join(tmp, "init.safetensors"), os.path.join(tmp, "batches.safetensors")
        log_p, grad_p = os.path.join(tmp, "log.jsonl"), os.path.join(tmp, "grads.safetensors")
        st_write(init_p, params)
        st_write(batch_p, inputs)
        common = [args.tgc, "run", args.model] + sets + [
            "--init-from", init_p, "--inputs", batch_p, "--lr", str(args.lr), "--weight-decay", str(args.wd),
            "--clip-grad", str(args.clip), "--adam-beta1", "0.9", "--adam-beta2", "0.95", "--adam-eps", "1e-8",
            "--quiet"]
        subprocess.check_call(common + ["--train-iters", "1", "--export-grads", grad_p])
        subprocess.check_call(common + ["--train-iters", str(args.steps), "--log", log_p])
        tgc_losses = [json.loads(l)["loss"] for l in open(log_p)]
        tgc_grads = st_read(grad_p)

    # PyTorch: the same steps with AdamW (no decay on no_decay parameters).
    p = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    nodecay = {n["name"] for n in graph["nodes"] if n["op"] == "param" and "no_decay" in n["flags"]}
    groups = [{"params": [p[k] for k in p if k not in nodecay], "weight_decay": args.wd},
              {"params": [p[k] for k in p if k in nodecay], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    worst_loss, worst_grad = 0.0, 0.0
    for step in range(args.steps):
        batch = {k: v[step] for k, v in inputs.items()}
        opt.zero_grad()
        loss = forward(graph, p, batch) if args.reference == "graph" else llama_reference(graph["hparams"], p, batch)
        loss.backward()
        if step == 0:
            for name, t in p.items():
                ref = t.grad
                got = tgc_grads["grad." + name]
                err = (got - ref).abs().max().item() / max(ref.abs().max().item(), 1e-12)
                worst_grad = max(worst_grad, err)
                if err > args.grad_tol:
                    print("gradient of %s differs: normalised max error %.3e" % (name, err))
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(list(p.values()), args.clip)
        opt.step()
        rel = abs(tgc_losses[step] - loss.item()) / max(abs(loss.item()), 1e-12)
        worst_loss = max(worst_loss, rel)
        print("step %2d  torch %.7f  tgc %.7f  rel %.2e" % (step, loss.item(), tgc_losses[step], rel))
    print("%s%s: largest loss difference %.2e (tolerance %.0e), largest gradient difference %.2e (tolerance %.0e)"
          % (args.model, " (hand-written LLaMA)" if args.reference == "llama" else "", worst_loss, args.loss_tol, worst_grad, args.grad_tol))
    ok = worst_loss <= args.loss_tol and worst_grad <= args.grad_tol
    print("oracle:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
