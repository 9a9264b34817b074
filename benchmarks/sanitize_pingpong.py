"""A small ping-pong GEMM for compute-sanitizer (memcheck / racecheck / synccheck):

    compute-sanitizer --tool memcheck python3 benchmarks/sanitize_pingpong.py [WAIT_DEPTH]

2304x2048x192 bf16 (+ bias, GELU): 288 output tiles, so every program of the persistent grid
(one per SM) takes two or more and both consumers run; ragged M / N / K edges in a second call
(2250x2000x200). Checks the results against float64 too, so a silent fault still fails.
"""

import importlib
import os
import sys

import torch
import torch.nn.functional as F

os.environ["ROOFKIT_AUTOTUNE"] = "0"
mm = importlib.import_module("roofkit.ops.matmul")
WS = importlib.import_module("roofkit.ops._gemm_ws")
wd = int(sys.argv[1]) if len(sys.argv) > 1 else 1
bad = 0
for m, n, k in ((2304, 2048, 192), (2250, 2000, 200)):
    g = torch.Generator(device="cuda").manual_seed(m)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    WS.DIAGNOSTIC["WAIT_DEPTH"] = wd
    try:
        launched = WS.launch(mm.PINGPONG_DEFAULT, a, b, None, bias, out, 1.0, 0.0, 2)
    finally:
        WS.DIAGNOSTIC.clear()
    torch.cuda.synchronize()
    ref = F.gelu(a.double() @ b.double() + bias.double())
    err = ((out.double() - ref).norm() / ref.norm()).item()
    ok = launched and err < 1e-2 and not bool(torch.isnan(out).any())
    bad += not ok
    print(f"{m}x{n}x{k} wait_depth {wd}: launched {launched}, rel L2 {err:.2e} {'ok' if ok else 'FAIL'}", flush=True)
raise SystemExit(1 if bad else 0)
