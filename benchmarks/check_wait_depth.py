"""Ping-pong GEMM: one or two wgmma groups in flight per consumer (WAIT_DEPTH), fused GELU cost.

    PYTHONPATH=src python3 benchmarks/check_wait_depth.py [--json PATH]

Prediction (NOTES.md, session 8): with two groups queued, a consumer's warps can be late by one
group (~0.36 us) while the other consumer's epilogue competes for their SMSPs without the tensor
pipe draining, so the fused GELU's cost over plain falls; the ring's prefetch lead shrinks by a
slot, which may cost the plain GEMM. Verifies WAIT_DEPTH=2 against float64 (multi-tile shapes,
every layout) before timing; times plain / fused for both depths, cuBLAS and torch's unfused
sequence, interleaved (harness timer, cold L2), 3 rounds.
"""

import argparse
import importlib
import json
import os

import torch
import torch.nn.functional as F

os.environ["ROOFKIT_AUTOTUNE"] = "0"
mm = importlib.import_module("roofkit.ops.matmul")
WS = importlib.import_module("roofkit.ops._gemm_ws")
from roofkit.harness.device import environment  # noqa: E402
from roofkit.harness.timing import time_providers  # noqa: E402

CFG = mm.PINGPONG_DEFAULT


def launch(a, b, bias, act, depth, out):
    WS.DIAGNOSTIC.clear()
    WS.DIAGNOSTIC["WAIT_DEPTH"] = depth
    mm._launch(CFG, a, b, None, bias, out, 1.0, 0.0, act)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    args = p.parse_args()
    bad = 0
    log = {"verify": [], "rounds_us": []}
    for (m, n, k) in [(2048, 1536, 4096), (1000, 1000, 1000), (300, 4096, 72), (2000, 3000, 100)]:
        for lay in ("nn", "nt", "tn"):
            for act in (0, 2):
                g = torch.Generator(device="cuda").manual_seed(m + n + k + act)
                a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
                b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
                if lay[0] == "t":
                    a = a.t().contiguous().t()
                if lay[1] == "t":
                    b = b.t().contiguous().t()
                bias = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g) if act else None
                ref = a.double() @ b.double()
                if act:
                    ref = F.gelu(ref + bias.double())
                tor = torch.matmul(a, b) if not act else F.gelu(torch.matmul(a, b) + bias)
                outs = [launch(a, b, bias, act, 2, torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16))
                        for _ in range(2)]
                torch.cuda.synchronize()
                e = ((outs[0].double() - ref).norm() / ref.norm()).item()
                et = ((tor.double() - ref).norm() / ref.norm()).item()
                ok = e <= 2 * et + 1e-3 and torch.equal(outs[0], outs[1]) and not bool(torch.isnan(outs[0]).any())
                bad += not ok
                log["verify"].append({"shape": [m, n, k], "layout": lay, "act": act, "err": e, "torch_err": et, "ok": ok})
                if not ok:
                    print(f"FAIL {m}x{n}x{k} {lay} act {act}: err {e:.3e} torch {et:.3e}", flush=True)
    print(f"WAIT_DEPTH=2 verify: {bad} failures of {len(log['verify'])}", flush=True)
    m, n, k = 8192, 14336, 4096
    g = torch.Generator(device="cuda").manual_seed(11)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    fns = {"plain d1": lambda: launch(a, b, None, 0, 1, out), "gelu d1": lambda: launch(a, b, bias, 2, 1, out),
           "plain d2": lambda: launch(a, b, None, 0, 2, out), "gelu d2": lambda: launch(a, b, bias, 2, 2, out),
           "cuBLAS": lambda: torch.matmul(a, b), "torch unfused": lambda: F.gelu(torch.matmul(a, b) + bias)}
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    for r in range(3):
        t = time_providers(fns, warmup_ms=50.0, rep_ms=300.0)
        row = {name: t[name].median_ms * 1e3 for name in fns}
        log["rounds_us"].append(row)
        print(f"round {r}: " + "  ".join(f"{k} {v:7.1f}" for k, v in row.items())
              + f" | gelu/plain d1 {row['gelu d1'] / row['plain d1']:.4f} d2 {row['gelu d2'] / row['plain d2']:.4f}"
              + f" | d2 gelu / d1 plain {row['gelu d2'] / row['plain d1']:.4f}", flush=True)
    WS.DIAGNOSTIC.clear()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": environment(), **log}, f, indent=1)
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
