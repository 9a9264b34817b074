"""What each part of the ping-pong GEMM's fused epilogue costs, and whether a deeper wgmma queue
hides the GELU better (the acceptance figure: bias + GELU within 3 % of plain).

    PYTHONPATH=src python3 benchmarks/probe_epilogue_cost.py [--set parts|forms|logistic] [--wait-depth 1 2] [--rounds N] [--json PATH]

8192x14336x4096 bf16, ping-pong default configuration, every variant verified against float64
(relative L2 within 2x torch's + 1e-3), then timed interleaved by the harness (CUDA events, cold
L2): plain, bias only, bias + relu, bias + gelu (erf), bias + gelu_tanh, bias + silu, each at
every requested WAIT_DEPTH (wgmma groups a consumer keeps in flight; a diagnostic constexpr of
``roofkit.ops._gemm_ws``). Prints each variant's median over rounds and its cost over plain at
the same depth. ``--set forms`` instead: plain, the GELU as built, the erfc fit with the
max(x, 0) - |x| q last step (GELU_FORM 1), and gelu / gelu_tanh / silu applied 1-3 times (EPI_REPEAT: longer
epilogues of one kind), at WAIT_DEPTH 1: does the cost follow the instruction count, or the
GELU's form? ``--set logistic``: plain, bias only, the GELU with the 5-term erfc fit (GELU_FORM 3,
bfloat16's before the logistic form), the GELU as built (bfloat16: the logistic form x / (1 + exp(-g(x)))
with g = x h(x^2), h of degree 4, 10 instructions per element), the same with h of degree 6
(GELU_FORM 2, 12 instructions), gelu_tanh and silu.
"""

import argparse
import importlib
import json
import os

import torch
import torch.nn.functional as F

os.environ.setdefault("ROOFKIT_AUTOTUNE", "0")
from roofkit.harness.device import environment  # noqa: E402
from roofkit.harness.timing import time_providers  # noqa: E402

mm = importlib.import_module("roofkit.ops.matmul")
WS = importlib.import_module("roofkit.ops._gemm_ws")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--set", choices=["parts", "forms", "logistic"], default="parts")
    p.add_argument("--wait-depth", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default=None)
    p.add_argument("--input-scale", type=float, default=1.0,
                   help="a's scale: 1 gives pre-activations of std ~64 (K = 4096), where the GELU and silu "
                        "saturate; 1/64 gives std ~1, where every form evaluates its fit")
    args = p.parse_args()
    m, n, k = 8192, 14336, 4096
    g = torch.Generator(device="cuda").manual_seed(5)
    a = (torch.randn(m, k, device="cuda", generator=g) * args.input_scale).to(torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    cfg = mm.PINGPONG_DEFAULT
    acts = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
    variants = {}  # name -> (wait depth, activation, bias, other diagnostic overrides)
    if args.set == "parts":
        for wd in args.wait_depth:
            variants[f"plain wd{wd}"] = (wd, None, False, {})
            for act in acts:
                variants[f"bias+{act or 'none'} wd{wd}"] = (wd, act, True, {})
    elif args.set == "logistic":
        variants["plain wd1"] = (1, None, False, {})
        variants["bias+none"] = (1, None, True, {})
        variants["bias+gelu erfc5"] = (1, "gelu", True, {"GELU_FORM": 3})
        variants["bias+gelu"] = (1, "gelu", True, {"GELU_FORM": 0})
        variants["bias+gelu logistic6"] = (1, "gelu", True, {"GELU_FORM": 2})
        variants["bias+gelu_tanh"] = (1, "gelu_tanh", True, {})
        variants["bias+silu"] = (1, "silu", True, {})
    else:
        variants["plain wd1"] = (1, None, False, {})
        variants["bias+none"] = (1, None, True, {})
        variants["bias+gelu"] = (1, "gelu", True, {})
        variants["bias+gelu form1"] = (1, "gelu", True, {"GELU_FORM": 1})
        for act in ("gelu", "gelu_tanh", "silu"):
            for rep in (2, 3) if act != "gelu" else (2, ):
                variants[f"bias+{act} x{rep}"] = (1, act, True, {"EPI_REPEAT": rep})
        variants["bias+gelu_tanh"] = (1, "gelu_tanh", True, {})
        variants["bias+silu"] = (1, "silu", True, {})

    def call(wd, act, has_bias, extra):
        WS.DIAGNOSTIC.update(extra, WAIT_DEPTH=wd)
        try:
            ok = WS.launch(cfg, a, b, None, bias if has_bias else None, out, 1.0, 0.0, acts[act])
        finally:
            WS.DIAGNOSTIC.clear()
        if not ok:
            raise RuntimeError("ping-pong did not launch")
        return out

    ab = a.double() @ b.double()
    tab = torch.matmul(a, b).float()
    refs = {}
    verify = {}
    for name, (wd, act, has_bias, extra) in variants.items():
        rep = extra.get("EPI_REPEAT", 1)
        key = (act, has_bias, rep)
        if key not in refs:
            x = ab + bias.double() if has_bias else ab
            y = tab + bias.float() if has_bias else tab
            f = {None: lambda t: t, "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
                 "silu": F.silu}[act]
            for _ in range(rep):
                x, y = f(x), f(y)
            refs[key] = (x, y.to(torch.bfloat16))
        ref, tor = refs[key]
        out.fill_(float("nan"))
        got = call(wd, act, has_bias, extra)
        torch.cuda.synchronize()
        err = ((got.double() - ref).norm() / ref.norm()).item()
        terr = ((tor.double() - ref).norm() / ref.norm()).item()
        ok = err <= 2 * terr + 1e-3 and not bool(torch.isnan(got).any())
        verify[name] = {"rel_l2": err, "torch_rel_l2": terr, "ok": ok}
        print(f"verify {name:22s} rel L2 {err:.3e} (torch {terr:.3e}) {'ok' if ok else 'FAIL'}", flush=True)
    del refs, ab, tab
    fns = {name: (lambda v=v: call(*v)) for name, v in variants.items()}
    fns["cuBLAS plain"] = lambda: torch.matmul(a, b)
    rounds = []
    for r in range(args.rounds):
        t = time_providers(fns, warmup_ms=30.0, rep_ms=250.0)
        rounds.append({name: t[name].median_ms * 1e3 for name in fns})
        print(f"round {r}: " + " ".join(f"{k}={v:.1f}" for k, v in rounds[-1].items()), flush=True)
    med = {k: sorted(r[k] for r in rounds)[len(rounds) // 2] for k in fns}
    print(f"{'variant':22s} {'median us':>10s} {'vs plain same depth':>20s}")
    for name, (wd, act, has_bias, extra) in variants.items():
        base = med[f"plain wd{wd}"]
        print(f"{name:22s} {med[name]:10.1f} {(med[name] / base - 1) * 100:+19.2f}%")
    print(f"{'cuBLAS plain':22s} {med['cuBLAS plain']:10.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": environment(), "shape": [m, n, k], "input_scale": args.input_scale,
                       "config": str(cfg), "verify": verify,
                       "rounds_us": rounds, "median_us": med}, f, indent=1)
    raise SystemExit(0 if all(v["ok"] for v in verify.values()) else 1)


if __name__ == "__main__":
    main()
