"""The fp8 acceptance figure: roofkit.scaled_mm (e4m3, default accumulation) against
torch._scaled_mm at 8192^3, with the warp-specialized kernel (``roofkit.ops.quant._fp8_ws``)
next to the Triton kernel it replaces, all providers interleaved in one timing run.

    PYTHONPATH=src python3 benchmarks/check_scaled_mm_ws.py [--rounds N] [--json PATH] [--size N]

Operands as torch._scaled_mm wants them: a (M, K) row-major, b the transpose of a row-major
(N, K); per-tensor scales (0.5, 0.25), bf16 output. First every provider's output is checked
against float64 from the same fp8 values (relative L2 printed; pass: within 2x torch's own
same-mode error + 1e-3); also an fp16-output pair (fast vs promoted accumulation) at K = size,
where the output rounding is fine enough to show the accumulation error. Then timing: the
harness's CUDA events, cold L2, providers interleaved, several rounds; TFLOP/s = 2 M N K / t.
"""

import argparse
import importlib
import json

import torch

from roofkit.harness.device import environment
from roofkit.harness.timing import time_providers

Q = importlib.import_module("roofkit.ops.quant.gemm")
WS = importlib.import_module("roofkit.ops.quant._fp8_ws")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    n = args.size
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn((n, n), device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = torch.randn((n, n), device="cuda", generator=g).to(torch.float8_e4m3fn).t()  # K-major
    sa = torch.tensor(0.5, device="cuda")
    sb = torch.tensor(0.25, device="cuda")
    ref = (a.double() @ b.double()) * (0.5 * 0.25)

    def rk(fast, ws=True, out_dtype=torch.bfloat16):
        def f():
            Q.WS_MODE = "auto" if ws else "off"
            try:
                return Q.scaled_mm(a, b, sa, sb, out_dtype=out_dtype, use_fast_accum=fast)
            finally:
                Q.WS_MODE = "auto"
        return f

    def tor(fast, out_dtype=torch.bfloat16):
        return lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=out_dtype, use_fast_accum=fast)

    fns = {"roofkit ws": rk(False), "roofkit triton": rk(False, ws=False), "torch._scaled_mm": tor(False),
           "roofkit ws fast": rk(True), "roofkit triton fast": rk(True, ws=False), "torch fast": tor(True)}
    calls = {"n": 0}
    real_launch = WS.launch

    def counting(*a_, **k_):
        ok = real_launch(*a_, **k_)
        calls["n"] += ok
        return ok

    WS.launch = counting
    verify = {}
    errs = {}
    for name, f in list(fns.items()) + [("roofkit ws fp16", rk(False, out_dtype=torch.float16)),
                                         ("roofkit ws fast fp16", rk(True, out_dtype=torch.float16)),
                                         ("torch fp16", tor(False, torch.float16)),
                                         ("torch fast fp16", tor(True, torch.float16))]:
        before = calls["n"]
        out = f()
        torch.cuda.synchronize()
        errs[name] = ((out.double() - ref).norm() / ref.norm()).item()
        verify[name] = {"rel_l2": errs[name], "nan": bool(torch.isnan(out).any()), "ws_launched": calls["n"] > before}
    WS.launch = real_launch
    for name, v in verify.items():
        base = "torch fast" if "fast" in name else "torch._scaled_mm"
        if name.endswith("fp16"):
            base = "torch fast fp16" if "fast" in name else "torch fp16"
        v["ok"] = (not v["nan"]) and v["rel_l2"] <= 2 * errs[base] + 1e-3
        print(f"verify {name:22s} rel L2 {v['rel_l2']:.3e}  (torch same mode {errs[base]:.3e})  "
              f"ws kernel {'yes' if v['ws_launched'] else 'no '}  {'ok' if v['ok'] else 'FAIL'}", flush=True)
    del ref
    rounds = []
    flops = 2 * n ** 3
    for r in range(args.rounds):
        t = time_providers(fns, warmup_ms=50.0, rep_ms=300.0)
        rounds.append({k: t[k].median_ms * 1e3 for k in fns})
        print(f"round {r}: " + "  ".join(f"{k} {v:.1f}" for k, v in rounds[-1].items()), flush=True)
    med = {k: sorted(r[k] for r in rounds)[len(rounds) // 2] for k in fns}
    print(f"{'provider':22s} {'us':>9s} {'TFLOP/s':>9s} {'vs torch same mode':>19s}")
    for k, v in med.items():
        base = med["torch fast" if "fast" in k else "torch._scaled_mm"]
        print(f"{k:22s} {v:9.1f} {flops / v / 1e6:9.1f} {base / v:19.3f}x")
    summary = {"ws_vs_torch_default": med["torch._scaled_mm"] / med["roofkit ws"],
               "ws_fast_vs_torch_fast": med["torch fast"] / med["roofkit ws fast"]}
    print(f"default accumulation: roofkit {summary['ws_vs_torch_default']:.3f}x torch._scaled_mm (target >= 0.95)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"environment": environment(), "size": n, "verify": verify, "rounds_us": rounds, "median_us": med,
                       "summary": summary}, fh, indent=1)
    raise SystemExit(0 if all(v["ok"] for v in verify.values()) else 1)


if __name__ == "__main__":
    main()
