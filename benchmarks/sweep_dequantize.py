"""dequantize's launch parameters at the llama3-8b rows (int8 8192 x 4096 per tensor, 14336 x 4096
per channel, float32 out): tile elements (DEQUANTIZE_TILE) x the most along the unit-stride
dimension (DEQUANTIZE_INNER) x warps (DEQUANTIZE_WARPS), beside the public roofkit.dequantize
(the default configuration behind its argument checks), torch and torch.compile as the bench
builds them. Every configuration's output is checked bitwise against the default's before it is
timed; the settings are module attributes read per call, set inside each timed function (no
kept plan to drop: the kernel launcher is called directly). Cold L2, interleaved providers.

    PYTHONPATH=src python3 benchmarks/sweep_dequantize.py      (a GPU)
"""
import itertools

import torch

import roofkit
from roofkit.harness import registry
from roofkit.harness.timing import time_providers
from roofkit.ops.quant import affine as A

dev = "cuda"
SPEC = registry.get("dequantize")
KEYS = ("DEQUANTIZE_TILE", "DEQUANTIZE_INNER", "DEQUANTIZE_WARPS")
default = tuple(getattr(A, k) for k in KEYS)
for case in SPEC.suites["llama3-8b"]:
    g = torch.Generator(device=dev).manual_seed(0)
    inp = SPEC.make_inputs(case, torch.int8, g, dev)
    q, scale, zp = inp.args[:3]
    axis = inp.kwargs.get("axis")

    def run(cfg):
        for k, v in zip(KEYS, cfg):
            setattr(A, k, v)
        return A._dequantize_forward(q, scale, zp, axis)

    ref = run(default)
    fns = {}
    for cfg in itertools.product((4096, 8192, 16384), (1024, 2048, 4096), (4, 8)):
        if cfg[1] > cfg[0]:
            continue
        if torch.equal(run(cfg), ref):
            fns[f"tile{cfg[0]} inner{cfg[1]} w{cfg[2]}" + (" (default)" if cfg == default else "")] = \
                lambda cfg=cfg: run(cfg)
        else:
            print(f"{case.name} {cfg}: differs from the default's output: not timed")
    # the public function: the same kernel behind its argument checks (the zero point's range
    # check runs on the device: three small kernels and an asynchronous assert)
    fns["roofkit.dequantize (public)"] = lambda: roofkit.dequantize(q, scale, zp, axis=axis)
    for name in ("torch", "torch.compile"):
        fn = SPEC.baselines[name]()
        fns[name] = lambda fn=fn: fn(*inp.args, **inp.kwargs)
    res = time_providers(fns, device=dev, rep_ms=40)
    nbytes = q.numel() * (1 + 4)
    print(f"--- dequantize {case.name} ({nbytes / 1e6:.0f} MB moved)")
    rows = sorted(res.items(), key=lambda kv: kv[1].median_ms)
    for k, t in rows[:10] + [r for r in rows[10:] if "default" in r[0] or "public" in r[0] or "torch" in r[0]]:
        print(f"  {k:32s} {t.median_ms * 1e3:7.1f} us {nbytes / t.median_ms / 1e6:6.0f} GB/s")
    for k, v in zip(KEYS, default):
        setattr(A, k, v)
