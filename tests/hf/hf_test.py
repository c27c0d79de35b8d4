#!/usr/bin/env python3
"""tgc import hf / tgc export --format hf against Hugging Face transformers.

    hf_test.py TGC VENV CASE

CASE is one of the models below or 'refusals', 'trained', 'streaming',
'tokenizer_json' or 'strangers' (files from strangers: see strangers()). transformers builds a tiny
randomly initialised model (every parameter perturbed, so that a norm's
weight or a bias mapped to the wrong place changes the logits) and saves
it with save_pretrained (sharded, or in bf16, as the case says); then:

  1. `tgc import hf` reads it; `tgc sample --logits-out` gives tgc's logits
     on a random prompt, which must equal transformers' (fp32 forward of the
     same weights) within 1e-5 of the largest |logit|;
  2. `tgc export --format hf` writes a directory that from_pretrained
     loads: its state dict equals the original's (fp32) tensor for tensor,
     and its logits equal tgc's within the same tolerance;
  3. `tgc import hf` of that export gives the same tensors as the first
     import, bit for bit;
  4. the tokenizer travels: a GPT-2 BPE vocabulary and merges made here are
     copied next to the weights and recorded in their metadata, and the
     export's tokenizer loads in transformers and encodes as the original.

No published checkpoint is fetched. The driver runs under the virtual
environment VENV (scripts/lib/hf_venv.sh); without it, it exits 77 (skip).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

if len(sys.argv) != 4:
    sys.exit(__doc__)
TGC, VENV, CASE = sys.argv[1], sys.argv[2], sys.argv[3]
VPY = os.path.join(VENV, "bin", "python")
if os.path.realpath(sys.prefix) != os.path.realpath(VENV):
    if not os.access(VPY, os.X_OK):
        print("SKIP: no transformers environment at %s (scripts/test.sh creates it: "
              "scripts/lib/hf_venv.sh)" % VENV)
        sys.exit(77)
    os.execv(VPY, [VPY] + sys.argv)

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
import transformers  # noqa: E402
from transformers import (AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel,  # noqa: E402
                          GPT2Tokenizer, LlamaConfig, LlamaForCausalLM, LlamaTokenizer, MistralConfig, MistralForCausalLM)
from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode  # noqa: E402

TOL = 1e-5
FAILED = []


def check(cond, what):
    print(("ok: " if cond else "FAILED: ") + what)
    if not cond:
        FAILED.append(what)


def tgc(*args, expect=0):
    r = subprocess.run([TGC] + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != expect:
        print("$ tgc " + " ".join(str(a) for a in args))
        print(r.stdout + r.stderr)
        sys.exit("tgc exited %d, expected %d" % (r.returncode, expect))
    return r


def perturb(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.2)
    return model.eval()


def gpt2_tokenizer(d):
    """A byte-level BPE of 256 byte symbols, a few merges and <|endoftext|>."""
    byte = bytes_to_unicode()
    vocab = {byte[b]: i for i, b in enumerate(sorted(byte))}
    merges = ["\u0120 t", "h e", "\u0120t he", "a t", "\u0120 c", "\u0120c at"]
    for m in merges:
        vocab["".join(m.split())] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    return len(vocab)


def spm_tokenizer(d):
    """A SentencePiece BPE model trained here, saved as LlamaTokenizer does."""
    import io
    import sentencepiece as spm
    text = ["In the beginning God created the heaven and the earth.",
            "And the earth was without form, and void; and darkness was upon the face of the deep."] * 50
    m = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(text), model_writer=m, vocab_size=60, model_type="bpe",
                                   minloglevel=2)
    path = os.path.join(d, "tokenizer.model")
    with open(path, "wb") as f:
        f.write(m.getvalue())
    return LlamaTokenizer(path)


CASES = {
    # name: (builder, save options, prompt length)
    "gpt2_tied": lambda: GPT2LMHeadModel(GPT2Config(
        n_embd=32, n_layer=2, n_head=4, n_positions=24, vocab_size=263, layer_norm_epsilon=1e-5)),
    "gpt2_untied_erf_sharded": lambda: GPT2LMHeadModel(GPT2Config(
        n_embd=32, n_layer=2, n_head=2, n_positions=16, vocab_size=270, n_inner=48, activation_function="gelu",
        tie_word_embeddings=False, layer_norm_epsilon=1e-4)),
    "llama_gqa_untied_sharded": lambda: LlamaForCausalLM(LlamaConfig(
        hidden_size=32, intermediate_size=72, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=97, max_position_embeddings=20, rope_theta=500000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=False)),
    "llama_mqa_tied_bf16": lambda: LlamaForCausalLM(LlamaConfig(
        hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
        vocab_size=64, max_position_embeddings=16, rope_theta=1000.0, tie_word_embeddings=True)),
    "gpt2_tied_fp16": lambda: GPT2LMHeadModel(GPT2Config(
        n_embd=32, n_layer=1, n_head=4, n_positions=16, vocab_size=80)),
    # Llama 3.1's RoPE scaling (rope_type llama3), its original context 16
    # well inside the prompt so that every band of frequencies is scaled.
    "llama3_rope_scaling": lambda: LlamaForCausalLM(LlamaConfig(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=71, max_position_embeddings=64, rope_theta=500000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=False, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
    # Qwen2: biases on the q, k, v projections only, tied embeddings, GQA.
    "qwen2_qkv_bias": lambda: Qwen2ForCausalLM(Qwen2Config(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=67, max_position_embeddings=24, rope_theta=1000000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=True, use_sliding_window=False)),
    "mistral_no_window": lambda: MistralForCausalLM(MistralConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=50, max_position_embeddings=16, sliding_window=None)),
}
# The cases whose export is also written with --dtype bf16 / f16.
HALF_EXPORT = {"bf16": ("llama_gqa_untied_sharded", "gpt2_tied"), "f16": ("gpt2_untied_erf_sharded",)}
SAVE = {"gpt2_untied_erf_sharded": {"max_shard_size": "20KB"}, "llama_gqa_untied_sharded": {"max_shard_size": "15KB"}}


def logits_hf(model, prompt):
    with torch.no_grad():
        return model(torch.tensor([prompt])).logits[0].float()


def rel(a, b):
    return (a - b).abs().max().item() / b.abs().max().item()


def tensors(path):
    with safe_open(path, "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def run_case(name, work):
    torch.manual_seed(1)
    model = perturb(CASES[name](), 2)
    cfg = model.config
    src = os.path.join(work, "hf")
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(name.rsplit("_", 1)[-1])
    if half:
        model.to(half).save_pretrained(src)
        model = AutoModelForCausalLM.from_pretrained(src, torch_dtype=torch.float32).eval()  # exact upcast
    else:
        model.save_pretrained(src, **SAVE.get(name, {}))
    shards = [f for f in os.listdir(src) if f.endswith(".safetensors")]
    print("%s: transformers %s saved %d safetensors file(s)%s" % (
        name, transformers.__version__, len(shards), " (%s)" % half if half else ""))
    gpt = cfg.model_type == "gpt2"
    spm_tok = None
    if gpt and cfg.vocab_size >= 263:
        check(gpt2_tokenizer(src) <= cfg.vocab_size, "the test tokenizer fits the vocabulary")
    elif name == "llama_gqa_untied_sharded":
        spm_tok = spm_tokenizer(src)
    tg, w = os.path.join(work, "model.tg"), os.path.join(work, "model.safetensors")
    r = tgc("import", "hf", src, "-o", tg, "--weights", w)
    print(r.stderr.strip())
    ws, meta = tensors(w)
    bpe = gpt and cfg.vocab_size >= 263
    if bpe:
        check(meta.get("tgc.tokenizer_type") == "GPT2BPETokenizer" and meta.get("tgc.vocab_file") ==
              "model.vocab.json" and meta.get("tgc.merge_file") == "model.merges.txt",
              "import records the tokenizer in the weights' metadata: %s" %
              {k: v for k, v in meta.items() if k.startswith("tgc.tok") or k.endswith("_file")})
        for a, b in (("vocab.json", "model.vocab.json"), ("merges.txt", "model.merges.txt")):
            with open(os.path.join(src, a), "rb") as f1, open(os.path.join(work, b), "rb") as f2:
                check(f1.read() == f2.read(), "import copies %s next to the weights as %s" % (a, b))
    if spm_tok:
        check(meta.get("tgc.tokenizer_type") == "SentencePieceTokenizer" and
              meta.get("tgc.tokenizer_model") == "model.tokenizer.model",
              "import records the SentencePiece model in the weights' metadata")
        with open(os.path.join(src, "tokenizer.model"), "rb") as f1, \
                open(os.path.join(work, "model.tokenizer.model"), "rb") as f2:
            check(f1.read() == f2.read(), "import copies tokenizer.model next to the weights as model.tokenizer.model")

    n = cfg.n_positions if gpt else cfg.max_position_embeddings
    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, cfg.vocab_size, (n - 3,), generator=g).tolist()
    out = os.path.join(work, "logits.safetensors")
    tgc("sample", tg, "--weights", w, "--prompt-tokens", ",".join(map(str, prompt)), "--tokens", 0,
        "--logits-out", out)
    mine = load_file(out)["logits"]
    ref = logits_hf(model, prompt)
    e = rel(mine, ref)
    check(mine.shape == ref.shape and e <= TOL, "import: tgc's logits at %d positions equal transformers' "
          "(max |diff| / max |logit| = %.3g, max |logit| %.3g)" % (len(prompt), e, ref.abs().max().item()))

    exp = os.path.join(work, "export")
    shard = ["--max-shard-size", SAVE[name]["max_shard_size"]] if name in SAVE else []
    tgc("export", "--format", "hf", w, "--model", tg, "-o", exp, *shard)
    files = sorted(os.listdir(exp))
    print("export wrote " + ", ".join(files))
    if name in SAVE:
        check("model.safetensors.index.json" in files and sum(f.endswith(".safetensors") for f in files) > 1,
              "export shards above --max-shard-size %s" % SAVE[name]["max_shard_size"])
    back = AutoModelForCausalLM.from_pretrained(exp).eval()
    want = {"gpt2": "GPT2LMHeadModel", "qwen2": "Qwen2ForCausalLM"}.get(cfg.model_type, "LlamaForCausalLM")
    check(type(back).__name__ == want,
          "from_pretrained loads the export as %s" % type(back).__name__)
    sa, sb = model.state_dict(), back.state_dict()
    same = set(sa) == set(sb) and all(torch.equal(sa[k].float(), sb[k]) for k in sa)
    check(same, "the export's state dict equals the original's, tensor for tensor (%d tensors)" % len(sa))
    e2 = rel(logits_hf(back, prompt), mine)
    check(e2 <= TOL, "export: transformers' logits of the export equal tgc's (max |diff| / max |logit| = %.3g)" % e2)
    if bpe:
        orig = GPT2Tokenizer(os.path.join(src, "vocab.json"), os.path.join(src, "merges.txt"))
        tok = AutoTokenizer.from_pretrained(exp)
        text = "the cat at the hat"
        check(tok(text)["input_ids"] == orig(text)["input_ids"],
              "the export's tokenizer (%s) encodes as the original: %s" % (type(tok).__name__,
                                                                        tok(text)["input_ids"]))

    if spm_tok:
        tok = LlamaTokenizer.from_pretrained(exp)
        text = "And God said, the earth"
        check(tok(text)["input_ids"] == spm_tok(text)["input_ids"],
              "the export's SentencePiece tokenizer (%s) encodes as the original: %s" % (
                  type(tok).__name__, tok(text)["input_ids"]))

    for dt, torch_dt, tol in (("bf16", torch.bfloat16, 2e-2), ("f16", torch.float16, 2e-3)):
        if name not in HALF_EXPORT.get(dt, ()):
            continue
        # --dtype: the f32 export's tensors rounded (torch's rounding, to
        # nearest even) are what the 16-bit export holds, config.json says
        # so, and its logits are tgc's within the 16-bit rounding.
        e16 = os.path.join(work, "export-" + dt)
        tgc("export", "--format", "hf", w, "--model", tg, "-o", e16, "--dtype", dt, *shard)
        with open(os.path.join(e16, "config.json")) as f:
            td = json.load(f)["torch_dtype"]
        st16 = {}
        for fn in sorted(os.listdir(e16)):
            if fn.endswith(".safetensors"):
                st16.update(tensors(os.path.join(e16, fn))[0])
        sd32 = back.state_dict()
        rounded = all(st16[k].dtype == torch_dt and torch.equal(st16[k].view(torch.int16),
                                                                sd32[k].to(torch_dt).view(torch.int16))
                      for k in st16)
        check(td == str(torch_dt).split(".")[1] and rounded and len(st16) > 0,
              "export --dtype %s: torch_dtype %s, the %d tensors are the f32 export's rounded to %s bit for bit" % (
                  dt, td, len(st16), dt))
        m16 = AutoModelForCausalLM.from_pretrained(e16, torch_dtype="auto").eval()
        check(next(m16.parameters()).dtype == torch_dt, "from_pretrained(torch_dtype='auto') loads it in %s" % dt)
        e3 = rel(logits_hf(m16.float(), prompt), mine)
        check(e3 <= tol, "its logits equal tgc's within %s rounding (max |diff| / max |logit| = %.3g <= %g)" % (
            dt, e3, tol))

    w2 = os.path.join(work, "again.safetensors")
    tgc("import", "hf", exp, "-o", os.path.join(work, "again.tg"), "--weights", w2)
    ws2, _ = tensors(w2)
    bits = set(ws) == set(ws2) and all(ws[k].dtype == ws2[k].dtype and torch.equal(ws[k].view(torch.int32),
                                                                                  ws2[k].view(torch.int32))
                                       for k in ws)
    check(bits, "import of the export gives the same %d tensors bit for bit" % len(ws))
    with open(tg) as f1, open(os.path.join(work, "again.tg")) as f2:
        check(f1.read().split("\n", 3)[3] == f2.read().split("\n", 3)[3], "and the same model text")
    if name == "gpt2_tied":
        # The layout of GPT-2's own published checkpoints: a base model's
        # names (no "transformer."), with the attention's mask buffers.
        from safetensors.torch import save_file
        old = os.path.join(work, "old")
        os.makedirs(old)
        shutil.copy(os.path.join(src, "config.json"), old)
        t = load_file(os.path.join(src, "model.safetensors"))
        t = {k[len("transformer."):]: v for k, v in t.items()}
        for i in range(cfg.n_layer):
            t["h.%d.attn.bias" % i] = torch.tril(torch.ones(1, 1, cfg.n_positions, cfg.n_positions))
            t["h.%d.attn.masked_bias" % i] = torch.tensor(-1e4)
        save_file(t, os.path.join(old, "model.safetensors"), metadata={"format": "pt"})
        w3 = os.path.join(work, "old.safetensors")
        tgc("import", "hf", old, "-o", os.path.join(work, "old.tg"), "--weights", w3)
        ws3, _ = tensors(w3)
        check(set(ws) == set(ws3) and all(torch.equal(ws[k], ws3[k]) for k in ws),
              "a checkpoint with GPT-2's base-model names and mask buffers imports to the same tensors")


ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
KJV = os.path.join(ROOT, "tests", "data", "kjv-64k.txt")


def train_and_export(name, tg, sets, work, init=None, precision=None):
    """Two AdamW steps on byte-level text (from init's weights, or from
    tgc's initialisation) saved as a checkpoint; `tgc export --format hf`
    of the checkpoint loads in transformers with tgc's logits. A checkpoint
    trained with --bf16 exports in bf16 by default (torch_dtype bfloat16,
    logits within its rounding), and in f32 with --dtype f32."""
    ck, log = os.path.join(work, name + ".ck"), os.path.join(work, name + ".jsonl")
    tgc("run", tg, *sets, "--data", KJV, "--train-iters", 2, "--lr", "1e-3", "--save", ck, "--log", log, "--quiet",
        *(["--init-from", init] if init else []), *(["--" + precision] if precision else []))
    with open(log) as f:
        losses = [json.loads(line)["loss"] for line in f if line.strip()]
    g = torch.Generator().manual_seed(4)
    mine = None
    for dtype in ([None, "f32"] if precision else [None]):
        exp = os.path.join(work, name + ".hf" + (dtype or ""))
        tgc("export", "--format", "hf", ck, "--model", tg, *sets, "-o", exp, *(["--dtype", dtype] if dtype else []))
        with open(os.path.join(exp, "config.json")) as f:
            td = json.load(f)["torch_dtype"]
        want = "bfloat16" if precision == "bf16" and not dtype else "float32"
        check(td == want, "%s: the export%s has torch_dtype %s (%s)" % (
            name, " with --dtype " + dtype if dtype else "", td, "trained in " + precision if precision else "fp32"))
        back = AutoModelForCausalLM.from_pretrained(exp).eval()
        if mine is None:
            prompt = torch.randint(0, back.config.vocab_size, (12,), generator=g).tolist()
            out = os.path.join(work, name + ".logits.safetensors")
            tgc("sample", tg, *sets, "--weights", ck, "--prompt-tokens", ",".join(map(str, prompt)), "--tokens", 0,
                "--logits-out", out)
            mine = load_file(out)["logits"]
        tol = 2e-2 if want == "bfloat16" else TOL
        e = rel(logits_hf(back, prompt), mine)
        check(e <= tol, "%s: 2 training steps (losses %s), the checkpoint exported: transformers' %s gives tgc's "
              "logits (max |diff| / max |logit| = %.3g <= %g)" % (name, ", ".join("%.4f" % x for x in losses),
                                                                 type(back).__name__, e, tol))


def trained(work):
    """The samples themselves, trained by tgc, and an imported model fine-tuned."""
    small = ["--set", "layers=2", "--set", "hidden=64", "--set", "seq=32", "--set", "batch=2"]
    train_and_export("gpt.tg", os.path.join(ROOT, "samples", "gpt.tg"), small, work)
    train_and_export("gpt.tg --bf16", os.path.join(ROOT, "samples", "gpt.tg"), small, work, precision="bf16")
    train_and_export("llama.tg", os.path.join(ROOT, "samples", "llama.tg"), small + ["--set", "heads=4"], work)
    src = os.path.join(work, "hf")
    torch.manual_seed(1)
    perturb(CASES["gpt2_tied"](), 2).save_pretrained(src)
    tg, w = os.path.join(work, "imported.tg"), os.path.join(work, "imported.safetensors")
    tgc("import", "hf", src, "-o", tg, "--weights", w)
    train_and_export("imported GPT-2", tg, ["--set", "batch=2"], work, init=w)


def llama_tgc_tensors(sd, cfg):
    """tgc's tensors of a LLaMA state dict, computed here (independently of
    tgc's mapping): q, k and v packed per key/value group, each group's
    query heads first, then its key head and its value head."""
    kv, hd = cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
    grp, H = cfg.num_attention_heads // kv, cfg.hidden_size
    out = {"embedding.word_embeddings.weight": sd["model.embed_tokens.weight"],
           "final_layernorm.weight": sd["model.norm.weight"]}
    if "lm_head.weight" in sd and not cfg.tie_word_embeddings:
        out["output_layer.weight"] = sd["lm_head.weight"]
    for i in range(cfg.num_hidden_layers):
        p, t = "model.layers.%d." % i, "layers.%d." % i
        q = sd[p + "self_attn.q_proj.weight"].view(kv, grp, hd, H)
        k = sd[p + "self_attn.k_proj.weight"].view(kv, 1, hd, H)
        v = sd[p + "self_attn.v_proj.weight"].view(kv, 1, hd, H)
        out[t + "self_attention.query_key_value.weight"] = torch.cat([q, k, v], 1).reshape(-1, H)
        out[t + "self_attention.dense.weight"] = sd[p + "self_attn.o_proj.weight"]
        for a, b in (("mlp.gate_proj", "mlp.gate_proj"), ("mlp.up_proj", "mlp.up_proj"),
                     ("mlp.down_proj", "mlp.down_proj"), ("input_layernorm", "input_layernorm"),
                     ("post_attention_layernorm", "post_attention_layernorm")):
            out[t + b + ".weight"] = sd[p + a + ".weight"]
    return {k: v.float().contiguous() for k, v in out.items()}


def streaming(work):
    """A 12-layer LLaMA of 156 MB (fp32, five shards) whose largest tensor
    is 8 MB: tgc import hf converts it tensor by tensor, so its peak
    resident memory (getrusage of the child) stays below half the weights'
    bytes (holding the model, as the import did before, takes more than all
    of them), and the tensors it writes equal, bit for bit, the layout
    computed here from the state dict."""
    torch.manual_seed(5)
    cfg = LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=12, num_attention_heads=8,
                      num_key_value_heads=4, vocab_size=4096, max_position_embeddings=64, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    src = os.path.join(work, "hf")
    model.save_pretrained(src, max_shard_size="40MB")
    shards = [f for f in os.listdir(src) if f.endswith(".safetensors")]
    total = sum(os.path.getsize(os.path.join(src, f)) for f in shards)
    largest = max(p.numel() * 4 for p in model.state_dict().values())
    tg, w = os.path.join(work, "big.tg"), os.path.join(work, "big.safetensors")
    # A child forked from this process (torch and the model in memory)
    # would count this process's pages in its peak: a small Python without
    # site packages starts tgc and reports its child's peak.
    meter = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    r = subprocess.run([sys.executable, "-I", "-S", "-c", meter, TGC, "import", "hf", src, "-o", tg, "--weights", w],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        sys.exit("the import under the meter exited %d" % r.returncode)
    peak = int(r.stdout.split()[-1]) * 1024
    check(peak < total / 2, "import hf of %d shards, %.1f MB of weights (largest tensor %.1f MB): peak RSS %.1f MB "
          "< half the weights" % (len(shards), total / 1e6, largest / 1e6, peak / 1e6))
    ws, _ = tensors(w)
    want = llama_tgc_tensors(model.state_dict(), cfg)
    bits = set(ws) == set(want) and all(ws[k].dtype == torch.float32 and ws[k].shape == want[k].shape and
                                        torch.equal(ws[k].view(torch.int32), want[k].view(torch.int32)) for k in ws)
    check(bits, "the %d tensors written equal tgc's layout of the state dict bit for bit" % len(ws))


def tokenizer_json(work):
    """A GPT-2 whose directory has only the fast tokenizer's tokenizer.json
    (GPT2TokenizerFast.save_pretrained(legacy_format=False)): the import
    derives vocab.json and merges.txt byte for byte as GPT2Tokenizer's
    save_vocabulary writes them, tgc's encoding with them (tgc data prep)
    equals GPT2TokenizerFast's, and a tokenizer.json whose normalizer,
    pre-tokenizer, model or added tokens are not GPT-2's is refused by name."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "data"))
    import megatron
    from transformers import GPT2TokenizerFast
    src, slow = os.path.join(work, "hf"), os.path.join(work, "slow")
    os.makedirs(slow)
    torch.manual_seed(1)
    perturb(CASES["gpt2_tied"](), 2).save_pretrained(src)
    gpt2_tokenizer(slow)
    fast = GPT2TokenizerFast(os.path.join(slow, "vocab.json"), os.path.join(slow, "merges.txt"))
    fast.save_pretrained(src, legacy_format=False)
    files = sorted(os.listdir(src))
    check("tokenizer.json" in files and "vocab.json" not in files and "merges.txt" not in files,
          "save_pretrained(legacy_format=False) wrote the fast tokenizer only: %s" % ", ".join(files))
    fast = GPT2TokenizerFast.from_pretrained(src)
    tg, w = os.path.join(work, "model.tg"), os.path.join(work, "model.safetensors")
    r = tgc("import", "hf", src, "-o", tg, "--weights", w)
    print(r.stderr.strip())
    _, meta = tensors(w)
    check(meta.get("tgc.tokenizer_type") == "GPT2BPETokenizer" and meta.get("tgc.vocab_file") == "model.vocab.json"
          and meta.get("tgc.merge_file") == "model.merges.txt", "import records the derived GPT2BPETokenizer files")
    ref = os.path.join(work, "ref")
    os.makedirs(ref)
    GPT2Tokenizer(os.path.join(slow, "vocab.json"), os.path.join(slow, "merges.txt")).save_vocabulary(ref)
    for a, b in (("vocab.json", "model.vocab.json"), ("merges.txt", "model.merges.txt")):
        with open(os.path.join(ref, a), "rb") as f1, open(os.path.join(work, b), "rb") as f2:
            check(f1.read() == f2.read(), "%s derived from tokenizer.json is GPT2Tokenizer.save_vocabulary's, byte "
                  "for byte" % b)
    lines = ["the cat at the hat", "Hello, world! It's 2024 \u2014 na\u00efve caf\u00e9 \u6771\u4eac",
             "  leading spaces\tand tabs, they'll don't we've", "the theatre: catch that cat!! 12345 ..."]
    text, prefix = os.path.join(work, "text.txt"), os.path.join(work, "text")
    with open(text, "w", encoding="utf-8") as f:
        f.write("\n\n".join(lines) + "\n")
    tgc("data", "prep", text, "-o", prefix, "--split-paragraphs", "--tokenizer-type", "GPT2BPETokenizer",
        "--vocab-file", os.path.join(work, "model.vocab.json"), "--merge-file", os.path.join(work, "model.merges.txt"))
    mine = megatron.read_dataset(prefix)[1]
    want = [fast.encode(line + "\n") for line in lines]
    check(mine == want, "tgc's encoding of %d lines (%d tokens) with the derived files equals GPT2TokenizerFast's" % (
        len(lines), sum(map(len, want))))
    exp = os.path.join(work, "export")
    tgc("export", "--format", "hf", w, "--model", tg, "-o", exp)
    back = AutoTokenizer.from_pretrained(exp)
    check([back.encode(line + "\n") for line in lines] == want, "the export's tokenizer (%s from vocab.json and "
          "merges.txt: %s) encodes as GPT2TokenizerFast" % (type(back).__name__, ", ".join(sorted(os.listdir(exp)))))
    with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    bad = [("normalizer", {"type": "NFC"}, 'normalizer is "NFC"'),
           ("pre_tokenizer", {"type": "Metaspace", "replacement": "\u2581"}, 'pre_tokenizer is "Metaspace"'),
           ("pre_tokenizer", dict(tj["pre_tokenizer"], add_prefix_space=True), "pre_tokenizer.add_prefix_space is true"),
           ("model", dict(tj["model"], type="WordPiece"), 'model.type is "WordPiece"'),
           ("added_tokens", tj["added_tokens"] + [dict(tj["added_tokens"][0], id=999, content="<pad>")],
            'added token "<pad>" is not in model.vocab')]
    for i, (key, value, msg) in enumerate(bad):
        d = os.path.join(work, "bad%d" % i)
        shutil.copytree(src, d)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(dict(tj, **{key: value}), f, ensure_ascii=False)
        r = tgc("import", "hf", d, "-o", os.path.join(work, "bad.tg"), "--weights", os.path.join(work, "bad.st"),
                expect=1)
        check(msg in r.stderr and "tokenizer.json:" in r.stderr, "refused %s: %s" % (
            key, r.stderr.strip().splitlines()[0]))


def edit_config(src, dst, **changes):
    shutil.copytree(src, dst)
    with open(os.path.join(dst, "config.json")) as f:
        c = json.load(f)
    for k, v in changes.items():
        if v is ...:
            c.pop(k, None)
        else:
            c[k] = v
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    return dst


def refusals(work):
    llama = os.path.join(work, "llama")
    LlamaForCausalLM(LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                 vocab_size=20, max_position_embeddings=8)).save_pretrained(llama)
    gpt = os.path.join(work, "gpt")
    GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, n_head=2, n_positions=8, vocab_size=20)).save_pretrained(gpt)
    cases = [
        (llama, {"rope_scaling": {"type": "linear", "factor": 2.0}}, 'rope_type "linear" is not supported'),
        (llama, {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0}}, 'has no "original_max_position_embeddings"'),
        (llama, {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 16, "beta_fast": 32}},
         'member "beta_fast" is not one of'),
        (llama, {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0,
                                  "original_max_position_embeddings": 16}}, "must exceed low_freq_factor"),
        (llama, {"attention_bias": True}, '"attention_bias": true is not supported'),
        (llama, {"model_type": "qwen2", "use_sliding_window": True}, '"use_sliding_window": true: sliding-window'),
        (llama, {"model_type": "qwen2"}, "the checkpoint has no tensor 'model.layers.0.self_attn.q_proj.bias'"),
        (llama, {"hidden_act": "gelu"}, '"hidden_act": "gelu" is not supported'),
        (llama, {"model_type": "bert"}, '"model_type": "bert" is not supported'),
        (llama, {"model_type": "mistral", "sliding_window": 4096}, "sliding-window attention is not supported"),
        (llama, {"num_key_value_heads": 3}, 'does not divide'),
        (llama, {"hidden_size": ...}, 'config.json has no "hidden_size"'),
        (gpt, {"activation_function": "relu"}, '"activation_function": "relu" is not supported'),
        (gpt, {"scale_attn_by_inverse_layer_idx": True}, '"scale_attn_by_inverse_layer_idx": true is not supported'),
        (gpt, {"n_embd": 32}, "has shape [20, 16]; config.json makes it [20, 32]"),
        (gpt, {"n_layer": 100000}, "config.json says 100000 layers, but the checkpoint holds only"),
        (gpt, {"n_layer": 2}, "the checkpoint has no tensor 'transformer.h.1.ln_1.weight'"),
    ]
    for i, (base, change, msg) in enumerate(cases):
        d = edit_config(base, os.path.join(work, "bad%d" % i), **change)
        r = tgc("import", "hf", d, "-o", os.path.join(work, "bad.tg"), "--weights", os.path.join(work, "bad.st"),
                expect=1)
        check(msg in r.stderr,
              "refused %s: %s" % (change, r.stderr.strip().splitlines()[0]))
    d = os.path.join(work, "badjson")
    shutil.copytree(llama, d)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write('{\n  "model_type": "llama",\n  "hidden_size": 16,\n  "hidden_size": 32\n}\n')
    r = tgc("import", "hf", d, "-o", os.path.join(work, "bad.tg"), "--weights", os.path.join(work, "bad.st"), expect=1)
    check("config.json:4:3: error: invalid JSON: duplicate key \"hidden_size\"" in r.stderr,
          "a duplicate key is refused at its line and column: " + r.stderr.strip().splitlines()[0])
    os.remove(os.path.join(d, "config.json"))
    r = tgc("import", "hf", d, "-o", os.path.join(work, "bad.tg"), "--weights", os.path.join(work, "bad.st"), expect=1)
    check("config.json: error: cannot read" in r.stderr, "a missing config.json is named")
    # The export side: a model that is not GPT-2 or LLaMA-shaped, and weights of another model.
    tg, w = os.path.join(work, "g.tg"), os.path.join(work, "g.safetensors")
    tgc("import", "hf", gpt, "-o", tg, "--weights", w)
    r = tgc("export", "--format", "hf", w, "--model", tg, "--set", "hidden=32", "-o", os.path.join(work, "x"),
            expect=1)
    check("has shape [20, 16], expected [20, 32]" in r.stderr,
          "export refuses weights of another shape: " + r.stderr.strip().splitlines()[0])
    r = tgc("export", "--format", "hf", w, "--model", tg, "-o", os.path.join(work, "x"), "--max-shard-size", "5XB",
            expect=2)
    check("--max-shard-size '5XB'" in r.stderr, "a bad --max-shard-size is a usage error")


def strangers(work):
    """Files from strangers (issue 27): the weights' metadata names only
    files beside the weights, what import and export carry loads with tgc's
    own tokenizer loader first, every file import writes is checked against
    the others, what import derives tgc reads back, and a checkpoint missing
    a tensor names it."""
    from safetensors.torch import save_file
    src = os.path.join(work, "hf")
    GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, n_head=2, n_positions=8, vocab_size=263)).save_pretrained(src)
    gpt2_tokenizer(src)
    tg, w = os.path.join(work, "c.tg"), os.path.join(work, "c.safetensors")
    tgc("import", "hf", src, "-o", tg, "--weights", w)
    ts, meta = tensors(w)
    secret = os.path.join(work, "secret")
    os.makedirs(secret)
    gpt2_tokenizer(secret)  # a valid tokenizer, but not beside the weights
    evil = [("tgc.vocab_file", os.path.join(secret, "vocab.json")), ("tgc.merge_file", "../secret/merges.txt"),
            ("tgc.vocab_file", "secret/vocab.json"), ("tgc.merge_file", "..")]
    for i, (key, value) in enumerate(evil):
        bad = os.path.join(work, "evil%d.safetensors" % i)
        save_file(ts, bad, metadata=dict(meta, **{key: value}))
        out = os.path.join(work, "out%d" % i)
        r = tgc("export", "--format", "hf", bad, "--model", tg, "-o", out, expect=1)
        check('"%s" is \'%s\'' % (key, value) in r.stderr and not os.path.exists(os.path.join(out, "vocab.json")),
              "export refuses %s %s in the weights' metadata: %s" % (key, value, r.stderr.strip().splitlines()[-1]))
        r = tgc("sample", tg, "--weights", bad, "--prompt-tokens", "1,2", "--tokens", 0, expect=1)
        check('"%s" is \'%s\'' % (key, value) in r.stderr, "sample refuses %s %s" % (key, value))
    # A tokenizer file beside the weights that does not load is not copied.
    with open(os.path.join(work, "c.merges.txt"), "a", encoding="utf-8") as f:
        f.write("q z\n")
    out = os.path.join(work, "outbad")
    r = tgc("export", "--format", "hf", w, "--model", tg, "-o", out, expect=1)
    check("c.merges.txt:8:1: error: the merge's result 'qz' is not in the vocabulary" in r.stderr
          and not os.path.exists(os.path.join(out, "merges.txt")), "export refuses merges tgc cannot load: " +
          r.stderr.strip().splitlines()[0])
    # import: random bytes as tokenizer.model, a symlink to a file that is no vocabulary.
    junk = os.path.join(work, "junk")
    shutil.copytree(src, junk, symlinks=True)
    for f in ("vocab.json", "merges.txt"):
        os.remove(os.path.join(junk, f))
    with open(os.path.join(junk, "tokenizer.model"), "wb") as f:
        f.write(bytes(range(256)) * 4)
    r = tgc("import", "hf", junk, "-o", os.path.join(work, "j.tg"), "--weights", os.path.join(work, "j.st"), expect=1)
    check("tokenizer.model: error: not a SentencePiece model" in r.stderr and
          not os.path.exists(os.path.join(work, "j.tokenizer.model")), "import refuses random bytes as tokenizer.model")
    link = os.path.join(work, "link")
    shutil.copytree(src, link)
    os.remove(os.path.join(link, "vocab.json"))
    os.symlink(os.path.join(link, "config.json"), os.path.join(link, "vocab.json"))
    r = tgc("import", "hf", link, "-o", os.path.join(work, "l.tg"), "--weights", os.path.join(work, "l.safetensors"), expect=1)
    check("vocab.json:" in r.stderr and not os.path.exists(os.path.join(work, "l.vocab.json")),
          "import refuses a vocab.json that links to another kind of file: " + r.stderr.strip().splitlines()[0])
    os.remove(os.path.join(link, "vocab.json"))  # the hub cache's snapshots link into blobs: followed
    os.symlink(os.path.join(src, "vocab.json"), os.path.join(link, "vocab.json"))
    tgc("import", "hf", link, "-o", os.path.join(work, "l.tg"), "--weights", os.path.join(work, "l.safetensors"))
    check(os.path.isfile(os.path.join(work, "l.vocab.json")), "a vocab.json linking to a real vocabulary is carried")
    # Outputs against derived outputs.
    r = tgc("import", "hf", src, "-o", os.path.join(work, "d.vocab.json"), "--weights",
            os.path.join(work, "d.safetensors"), expect=1)
    check("two outputs name one file" in r.stderr and not os.path.exists(os.path.join(work, "d.safetensors")),
          "import refuses -o naming its own tokenizer copy: " + r.stderr.strip().splitlines()[0])
    # tokenizer.json: a merge holding a line break is refused at its entry.
    from transformers import GPT2TokenizerFast
    fast_dir = os.path.join(work, "fast")
    shutil.copytree(src, fast_dir)
    GPT2TokenizerFast(os.path.join(src, "vocab.json"), os.path.join(src, "merges.txt")).save_pretrained(
        fast_dir, legacy_format=False)
    for f in ("vocab.json", "merges.txt"):
        if os.path.exists(os.path.join(fast_dir, f)):
            os.remove(os.path.join(fast_dir, f))
    with open(os.path.join(fast_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    nl = dict(tj, model=dict(tj["model"], merges=tj["model"]["merges"] + ["a t\nh"]))
    with open(os.path.join(fast_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(nl, f, ensure_ascii=False)
    r = tgc("import", "hf", fast_dir, "-o", os.path.join(work, "f.tg"), "--weights", os.path.join(work, "f.st"),
            expect=1)
    check("model.merges[%d] is not a pair of tokens" % len(tj["model"]["merges"]) in r.stderr,
          "import refuses a merge holding a line break: " + r.stderr.strip().splitlines()[0])
    # The round trip: what import writes, tgc's loader reads (tgc data prep with the written files).
    text, prefix = os.path.join(work, "t.txt"), os.path.join(work, "t")
    with open(text, "w") as f:
        f.write("the cat at the hat\n")
    tgc("data", "prep", text, "-o", prefix, "--tokenizer-type", "GPT2BPETokenizer",
        "--vocab-file", os.path.join(work, "c.vocab.json"), "--merge-file", os.path.join(work, "l.merges.txt"))
    # A GPT-2 checkpoint without transformer.wte.weight: the missing tensor by name.
    nowte = os.path.join(work, "nowte")
    shutil.copytree(src, nowte)
    sd = load_file(os.path.join(nowte, "model.safetensors"))
    del sd["transformer.wte.weight"]
    save_file(sd, os.path.join(nowte, "model.safetensors"), metadata={"format": "pt"})
    r = tgc("import", "hf", nowte, "-o", os.path.join(work, "n.tg"), "--weights", os.path.join(work, "n.st"), expect=1)
    check("the checkpoint has no tensor 'transformer.wte.weight'" in r.stderr and "not part of" not in r.stderr,
          "a checkpoint without transformer.wte.weight names it: " + r.stderr.strip().splitlines()[0])


with tempfile.TemporaryDirectory() as work:
    if CASE == "refusals":
        refusals(work)
    elif CASE == "trained":
        trained(work)
    elif CASE == "streaming":
        streaming(work)
    elif CASE == "tokenizer_json":
        tokenizer_json(work)
    elif CASE == "strangers":
        strangers(work)
    elif CASE in CASES:
        run_case(CASE, work)
    else:
        sys.exit("unknown case %s" % CASE)
if FAILED:
    sys.exit("%d check(s) failed" % len(FAILED))
print("all checks passed")
