"""linear_cross_entropy's input-gradient GEMM alone (one chunk: the 1024 x 128256 logit gradient
by the 128256 x 4096 weight, bf16): the default configuration (the Triton 128 x 256 persistent
TMA kernel: 128 tiles for 132 SMs), the ping-pong kernel (256 tiles of 128 x 128), smaller TMA
tiles, split-K, and cuBLAS; every configuration checked against torch before it is timed. Warm
L2, one process. The chunk's logits GEMM (the same FLOPs) runs at 779 TFLOP/s on the ping-pong
kernel; this one measured 708 in place.

    PYTHONPATH=src python3 benchmarks/sweep_lce_dx.py      (an H200: Hopper's ping-pong kernel)
"""
import importlib, torch
from roofkit.harness.timing import time_providers
MM = importlib.import_module("roofkit.ops.matmul")
dev, bf = "cuda", torch.bfloat16
R, H, V = 1024, 4096, 128256
g = torch.Generator(device=dev).manual_seed(0)
lg = (torch.randn(R, V, device=dev, generator=g) * 1e-3).to(bf)
w = (torch.randn(V, H, device=dev, generator=g) / 64).to(bf)
C = MM.Config
cfgs = {"default": None}
for gm in (8, 16):
    for st in (4, 5):
        cfgs[f"pp128x128 gm{gm} st{st}"] = C(128, 128, 64, gm, 4, st, kind="pingpong", persistent=True)
cfgs["pp64x256 gm8 st4"] = C(64, 256, 64, 8, 4, 4, kind="pingpong", persistent=True)
cfgs["tma128x128 p w8 s4"] = C(128, 128, 64, 8, 8, 4, kind="tma", persistent=True)
cfgs["tma128x256 p epi/2"] = C(128, 256, 64, 8, 8, 3, kind="tma", persistent=True, epilogue_split=2)
cfgs["tma128x256 p store_desc"] = C(128, 256, 64, 8, 8, 3, kind="tma", persistent=True, store_desc=True)
for sk in (2, 4):
    cfgs[f"ptr128x128 splitk{sk}"] = C(128, 128, 64, 8, 8, 3, kind="ptr", split_k=sk)
    cfgs[f"ptr128x256 splitk{sk}"] = C(128, 256, 64, 8, 8, 3, kind="ptr", split_k=sk)
out = torch.empty(R, H, device=dev, dtype=bf)
ref = (lg @ w).float()


def mk(c):
    if c is None:
        return lambda: MM._matmul_into(lg, w, out)

    def f():
        with MM.config_override(c):
            MM._matmul_into(lg, w, out)
    return f


fns = {k: mk(c) for k, c in cfgs.items()}
fns["torch (cuBLAS)"] = lambda: torch.mm(lg, w, out=out)
for k in list(fns):
    out.fill_(float("nan"))
    try:
        fns[k]()
        err = ((out.float() - ref).norm() / ref.norm()).item()
    except Exception as e:  # noqa: BLE001 (a configuration this device cannot build)
        err = float("nan")
        print(f"{k}: {type(e).__name__}: {str(e)[:120]}")
    if not err < 1e-2:
        print(f"{k}: relative error {err:.3g}: not timed")
        fns.pop(k)
res = time_providers(fns, device=dev, rep_ms=60, l2="warm")
fl = 2 * R * H * V
print(f"--- {R} x {V} by {V} x {H}")
for k, v in sorted(res.items(), key=lambda kv: kv[1].median_ms):
    print(f"{k:28s} {v.median_ms*1e3:8.1f} us {fl / v.median_ms / 1e9:6.0f} TFLOP/s")
