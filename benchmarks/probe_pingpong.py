"""The Gluon ping-pong GEMM (``roofkit.ops._gemm_ws``) on the GPU: verify, then time.

    PYTHONPATH=src python3 benchmarks/probe_pingpong.py [--quick] [--json PATH]

1. Verify every configuration against a float64 reference on fresh random inputs (outputs
   poisoned with NaN first): shapes with ragged edges, all operand layouts, every activation,
   bias, alpha / beta * c, bf16 / fp16 inputs, bf16 / fp16 / fp32 outputs. A case passes when
   its relative L2 error is at most 2x torch's (same dtype) + 1e-3 and no element is NaN where
   the reference is finite; two runs must agree bit for bit (a race shows as a difference).
2. Time with the harness's device timer (CUDA events, L2 flushed before each call, enqueue time
   hidden): cuBLAS, the unfused torch sequence, roofkit's Triton default, the ping-pong
   configurations; plain and fused bias + GELU at 8192x14336x4096, and the llama3-8b shapes.
A short table is printed last.
"""

import argparse
import importlib
import json
import os
import time

import torch
import torch.nn.functional as F

os.environ["ROOFKIT_AUTOTUNE"] = "0"
mm = importlib.import_module("roofkit.ops.matmul")
G = importlib.import_module("roofkit.ops._gemm")
WS = importlib.import_module("roofkit.ops._gemm_ws")
from roofkit.harness.device import environment  # noqa: E402
from roofkit.ops._autotune import _time_ms  # noqa: E402

Config = G.Config
PP = [Config(128, 128, 64, 8, 4, 4, kind="pingpong", persistent=True),
      Config(128, 128, 64, 8, 4, 5, kind="pingpong", persistent=True),
      Config(64, 256, 64, 8, 4, 4, kind="pingpong", persistent=True)]
TRITON_DEFAULT = Config(128, 256, 64, 8, 8, 3, kind="tma", persistent=True)
TRITON_GELU_TUNED = Config(128, 256, 64, 8, 8, 4, kind="ptr")  # an earlier tuner's pick
ACTS = [None, "relu", "gelu", "gelu_tanh", "silu"]


def rel(x, ref):
    x = x.double()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def operands(m, n, k, lay, dtype, g):
    a = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=dtype, generator=g)
    if lay[0] == "t":
        a = a.t().contiguous().t()
    if lay[1] == "t":
        b = b.t().contiguous().t()
    return a, b


def verify(log):
    cases = []
    for (m, n, k) in [(128, 128, 64), (127, 257, 1021), (127, 264, 1021), (1000, 1000, 1000), (300, 4096, 72), (2048, 1536, 4096)]:
        for lay in ("nn", "nt", "tn", "tt"):
            cases.append((m, n, k, lay, torch.bfloat16, None, "gelu", True, False))
    for act in ACTS:
        cases.append((1000, 1000, 1000, "nt", torch.bfloat16, None, act, act is not None, False))
        cases.append((1000, 1000, 1000, "nn", torch.float16, None, act, False, True))
    cases.append((1000, 1000, 1000, "nn", torch.bfloat16, torch.float32, "gelu", True, True))
    cases.append((513, 520, 264, "nn", torch.float16, torch.float16, None, True, True))
    cases.append((8192, 14336, 4096, "nn", torch.bfloat16, None, "gelu", True, False))
    bad = 0
    for ci, (m, n, k, lay, dtype, odt, act, bias, with_c) in enumerate(cases):
        for cfg in PP:
            for seed in (0, 1):
                g = torch.Generator(device="cuda").manual_seed(1000 * ci + seed)
                a, b = operands(m, n, k, lay, dtype, g)
                bv = torch.randn(n, device="cuda", dtype=dtype, generator=g) if bias else None
                c = torch.randn(m, n, device="cuda", dtype=dtype, generator=g) if with_c else None
                alpha, beta = (0.75, -1.5) if with_c else (1.0, 0.0)
                ref = a.double() @ b.double() * alpha
                if c is not None:
                    ref += beta * c.double()
                if bv is not None:
                    ref += bv.double()
                ref = mm._activation_torch(ref, act)
                tor = mm.matmul_torch(a, b, bias=bv, activation=act, alpha=alpha, beta=beta, c=c, out_dtype=odt)
                if not WS.launchable(a, b, torch.empty((m, n), device="cuda", dtype=odt or dtype)):
                    if seed == 0 and cfg is PP[0]:
                        print(f"skip {m}x{n}x{k} {lay}: not launchable (the output's rows are not 16-byte aligned)")
                    continue
                outs = []
                try:
                    for _ in range(2):
                        out = torch.full((m, n), float("nan"), device="cuda", dtype=odt or dtype)
                        mm._launch(cfg, a, b, c, bv, out, alpha, beta, mm.ACTIVATIONS[act])
                        outs.append(out)
                    torch.cuda.synchronize()
                except Exception as exc:  # record and go on
                    bad += 1
                    print(f"FAIL {m}x{n}x{k} {lay} {cfg.label()}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                    log.append({"phase": "verify", "case": f"{m}x{n}x{k} {lay}", "config": cfg.label(), "error": str(exc)[:1000]})
                    continue
                e, et = rel(outs[0], ref), rel(tor, ref)
                nan = bool(torch.isnan(outs[0]).any())
                same = torch.equal(outs[0], outs[1])
                ok = e <= 2 * et + 1e-3 and not nan and same
                bad += not ok
                row = {"phase": "verify", "case": f"{m}x{n}x{k} {lay} {str(dtype)[6:]}->{str(odt or dtype)[6:]} act={act} "
                       f"bias={bias} c={with_c}", "config": cfg.label(), "seed": seed, "err": e, "torch_err": et,
                       "nan": nan, "repeat_equal": same, "ok": ok}
                log.append(row)
                if not ok or seed == 0 and cfg is PP[0]:
                    print(("FAIL " if not ok else "ok   ") + f"{row['case']:60s} {cfg.label():40s} err {e:.2e} torch {et:.2e}"
                          f" nan {nan} repeat_equal {same}", flush=True)
    print(f"verify: {bad} failures of {len([r for r in log if r['phase'] == 'verify'])}", flush=True)
    return bad


def timing(log, quick):
    shapes = [("ffn_up+bias+gelu", 8192, 14336, 4096, "gelu", True), ("ffn_up", 8192, 14336, 4096, None, False),
              ("ffn_up+bias+gelu nt", 8192, 14336, 4096, "gelu", True), ("8192^3", 8192, 8192, 8192, None, False)]
    if not quick:
        shapes += [("qkv", 8192, 6144, 4096, None, False), ("o_proj", 8192, 4096, 4096, None, False),
                   ("ffn_down", 8192, 4096, 14336, None, False), ("lm_head", 8192, 128256, 4096, None, False)]
    summary = []
    for name, m, n, k, act, bias in shapes:
        g = torch.Generator(device="cuda").manual_seed(7)
        a, b = operands(m, n, k, "nt" if name.endswith(" nt") else "nn", torch.bfloat16, g)
        bv = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g) if bias else None
        flops = 2 * m * n * k
        provs = {"cuBLAS matmul": lambda: torch.matmul(a, b)}
        if act:
            provs["torch unfused"] = lambda: F.gelu(torch.matmul(a, b) + bv)
        cfgs = [TRITON_DEFAULT] + ([TRITON_GELU_TUNED] if act else []) + PP
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        for cfg in cfgs:
            provs[cfg.label()] = (lambda cfg=cfg: mm._launch(cfg, a, b, None, bv, out, 1.0, 0.0, mm.ACTIVATIONS[act]))
        if act:  # the same configurations without the epilogue: "plain" for the overhead figure
            for cfg in [TRITON_DEFAULT] + PP:
                provs["plain " + cfg.label()] = (lambda cfg=cfg: mm._launch(cfg, a, b, None, None, out, 1.0, 0.0, 0))
        res = {}
        for label, fn in provs.items():
            t0 = time.time()
            try:
                fn()
                torch.cuda.synchronize()
                res[label] = _time_ms(fn)
            except Exception as exc:  # report and go on
                res[label] = None
                print(f"  {name} {label}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            log.append({"phase": "time", "case": name, "provider": label, "ms": res[label], "wall_s": time.time() - t0,
                        "tflops": flops / res[label] / 1e9 if res[label] else None})
            if res[label]:
                print(f"  {name:22s} {label:52s} {res[label] * 1e3:9.1f} us {flops / res[label] / 1e9:7.1f} TFLOP/s", flush=True)
        summary.append((name, res, flops))
    return summary


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", default=None)
    p.add_argument("--skip-verify", action="store_true")
    p.add_argument("--skip-timing", action="store_true")
    args = p.parse_args()
    log = []
    bad = 0 if args.skip_verify else verify(log)
    summary = [] if args.skip_timing else timing(log, args.quick)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": environment(), "rows": log}, f, indent=1)
    print(f"\nverify failures: {bad}")
    if bad:
        raise SystemExit(1)
    for name, res, flops in summary:
        cb = res.get("cuBLAS matmul")
        ok = {k: v for k, v in res.items() if v}
        best = min((k for k in ok if "pingpong" in k and not k.startswith("plain")), key=ok.get, default=None)
        line = f"{name:22s} cuBLAS {cb * 1e3 if cb else float('nan'):8.1f} us"
        if best:
            line += f" | best pingpong {ok[best] * 1e3:8.1f} us ({best})"
            plain = ok.get("plain " + best)
            if plain:
                line += f" plain {plain * 1e3:8.1f} (+{(ok[best] / plain - 1) * 100:.1f} %)"
        td = ok.get(TRITON_DEFAULT.label())
        if td:
            line += f" | triton default {td * 1e3:8.1f}"
        if "torch unfused" in ok and best:
            line += f" | unfused/pingpong {ok['torch unfused'] / ok[best]:.3f}x"
        print(line)


if __name__ == "__main__":
    main()
