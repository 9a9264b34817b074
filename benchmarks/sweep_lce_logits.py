"""linear_cross_entropy's logits GEMM alone (one chunk: 1024 x 4096 tokens by the 128256 x 4096
weight, bf16, no c): the default configuration (the ping-pong kernel), ping-pong ring slots x
tile-row groups, the 64 x 256 ping-pong tile, the Triton 128 x 256 persistent TMA kernel, and
cuBLAS; then the whole problem's logits (8192 rows) with the same configurations. Warm L2, one
process.

    PYTHONPATH=src python3 benchmarks/sweep_lce_logits.py      (an H200: Hopper's ping-pong kernel)
"""
import importlib, torch
import torch.nn.functional as F
from roofkit.harness.timing import time_providers
MM = importlib.import_module("roofkit.ops.matmul")
dev, bf = "cuda", torch.bfloat16
H, V = 4096, 128256
g = torch.Generator(device=dev).manual_seed(0)
w = (torch.randn(V, H, device=dev, generator=g) / 64).to(bf)
C = MM.Config
cfgs = {"default": None}
for gm in (8, 16, 32):
    for st in (4, 5):
        cfgs[f"pp128x128 gm{gm} st{st}"] = C(128, 128, 64, gm, 4, st, kind="pingpong", persistent=True)
cfgs["pp64x256 gm8 st4"] = C(64, 256, 64, 8, 4, 4, kind="pingpong", persistent=True)
cfgs["tma128x256 p"] = C(128, 256, 64, 8, 8, 3, kind="tma", persistent=True)
cfgs["tma128x256 p store_desc"] = C(128, 256, 64, 8, 8, 3, kind="tma", persistent=True, store_desc=True)
for R in (1024, 8192):
    xs = torch.randn(R, H, device=dev, generator=g).to(bf)
    ref = F.linear(xs, w).float()

    def mk(c):
        if c is None:
            return lambda: MM.linear(xs, w)
        def f():
            with MM.config_override(c):
                return MM.linear(xs, w)
        return f
    fns = {k: mk(c) for k, c in cfgs.items()}
    fns["torch (cuBLAS)"] = lambda: F.linear(xs, w)
    bad = []
    for k, f in fns.items():  # every configuration checked before it is timed
        err = ((f().float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            bad.append(k)
            print(f"{k}: relative error {err:.3g}: not timed")
    for k in bad:
        fns.pop(k)
    res = time_providers(fns, device=dev, rep_ms=60, l2="warm")
    fl = 2 * R * H * V
    print(f"--- {R} x {H} x {V}")
    for k, v in sorted(res.items(), key=lambda kv: kv[1].median_ms):
        print(f"{k:28s} {v.median_ms*1e3:8.1f} us {fl / v.median_ms / 1e9:6.0f} TFLOP/s")
