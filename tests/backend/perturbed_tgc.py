#!/usr/bin/env python3
"""A stand-in for tgc that makes its --backend sim runs wrong, to show that
sim_vs_cpu.py notices (backend.sim.detects). The real tgc is
$PERTURBED_TGC; $PERTURB says how sim runs go wrong:

  eps    Adam's epsilon 1e-8 * (1 + 1e-6): the first step's loss is equal,
         the weights after it differ in their last bits
  segv   the run dies of SIGSEGV, as one that touches simulated device
         memory from the host does
Runs on cpu are passed through unchanged.
"""
import os
import signal
import sys

args = sys.argv[1:]
sim = any(a == "--backend" and i + 1 < len(args) and args[i + 1] == "sim" for i, a in enumerate(args))
if sim and os.environ.get("PERTURB") == "segv":
    signal.signal(signal.SIGSEGV, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGSEGV)
if sim and os.environ.get("PERTURB") == "eps" and args[:1] == ["run"]:
    args += ["--adam-eps", "1.000001e-8"]
tgc = os.environ["PERTURBED_TGC"]
os.execv(tgc, [tgc] + args)
