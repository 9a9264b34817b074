"""A small warp-specialized fp8 GEMM for compute-sanitizer (memcheck / racecheck / synccheck):

    compute-sanitizer --tool memcheck python3 benchmarks/sanitize_fp8_ws.py

roofkit.ops.quant._fp8_ws on 2304x2176x1040 e4m3 (306 tiles of 128x128: two or three per
program; 9 K slices, the last partial) with per-row / per-column scales and a bias, promoted and
fast accumulation, bf16 output; each result checked against float64 too, so a silent fault
still fails.
"""

import importlib

import torch

Q = importlib.import_module("roofkit.ops.quant.gemm")
WS = importlib.import_module("roofkit.ops.quant._fp8_ws")
m, n, k = 2304, 2176, 1040
g = torch.Generator(device="cuda").manual_seed(0)
a = (torch.randn(m, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
b = (torch.randn(n, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn).t()
sa = torch.rand(m, 1, device="cuda", generator=g) + 0.5
sb = torch.rand(1, n, device="cuda", generator=g) + 0.5
bias = torch.randn(n, device="cuda", generator=g)
ref = (a.double() @ b.double()) * sa.double() * sb.double() + bias.double()
bad = 0
for precise in (True, False):
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    launched = WS.launch(a, b, sa, sb, Q._vec_stride(sa), Q._vec_stride(sb), bias, out, precise)
    torch.cuda.synchronize()
    err = ((out.double() - ref).norm() / ref.norm()).item()
    ok = launched and err < 5e-3 and not bool(torch.isnan(out).any())
    bad += not ok
    print(f"{m}x{n}x{k} precise={precise}: launched {launched}, rel L2 {err:.2e} {'ok' if ok else 'FAIL'}", flush=True)
raise SystemExit(1 if bad else 0)
