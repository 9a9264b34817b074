"""linear_cross_entropy's weight-gradient GEMM alone (128256 x 4096 x 1024 bf16, accumulating into
its output, beta = 1): the default configuration, ping-pong ring slots x tile-row groups, the 64 x 256
ping-pong tile, the Triton 128 x 256 kernel it replaced, and cuBLAS addmm_. Warm L2, one process.

    PYTHONPATH=src python3 benchmarks/sweep_lce_dw.py      (an H200: Hopper's ping-pong kernel)
"""
import importlib, torch
from roofkit.harness.timing import time_providers
MM = importlib.import_module("roofkit.ops.matmul")
dev, bf = "cuda", torch.bfloat16
R, H, V = 1024, 4096, 128256
g = torch.Generator(device=dev).manual_seed(0)
xs = torch.randn(R, H, device=dev, generator=g).to(bf)
lg = (torch.randn(R, V, device=dev, generator=g) * 1e-3).to(bf)
dw = torch.randn(V, H, device=dev, generator=g).to(bf)
C = MM.Config
cfgs = {"default": None}
for gm in (4, 8, 16, 32):
    for st in (3, 4, 5):
        cfgs[f"pp128x128 gm{gm} st{st}"] = C(128, 128, 64, gm, 4, st, kind="pingpong", persistent=True)
cfgs["pp64x256 gm8 st4"] = C(64, 256, 64, 8, 4, 4, kind="pingpong", persistent=True)
cfgs["tma128x256 (old)"] = MM._launch_config(V, H, R, bf, torch.device(dev), True)
def mk(c):
    if c is None:
        return lambda: MM._matmul_into(lg.t(), xs, dw, beta=1.0)
    def f():
        with MM.config_override(c):
            MM._matmul_into(lg.t(), xs, dw, beta=1.0)
    return f
fns = {k: mk(c) for k, c in cfgs.items()}
fns["torch addmm_"] = lambda: dw.addmm_(lg.t(), xs)
res = time_providers(fns, device=dev, rep_ms=40, l2="warm")
fl = 2 * R * H * V
for k, v in sorted(res.items(), key=lambda kv: kv[1].median_ms):
    print(f"{k:28s} {v.median_ms*1e3:8.1f} us {fl / v.median_ms / 1e9:6.0f} TFLOP/s")
