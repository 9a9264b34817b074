"""layer_norm backward launch sweep on the GPU: rows per tile, warps, programs per SM and
row-loop pipelining depth at the acceptance shape 32768 x 4096 bf16, next to torch's backward.
(An earlier run also tried the two row sums as one two-operand reduction: no consistent gain,
removed.)

    PYTHONPATH=src python3 benchmarks/sweep_layer_norm.py [--json PATH]

Every configuration's dx, dweight and dbias are checked against torch's (float32 autograd on the
same bf16 inputs, rel-L2 <= 1e-2) before timing; timing is the harness's (CUDA events, cold L2,
interleaved). Bytes: x, dy read and dx written once (3 passes of 32768 x 4096 bf16).
"""

import argparse
import importlib
import itertools
import json

import torch
import torch.nn.functional as F

from roofkit.harness.device import environment
from roofkit.harness.timing import time_providers

LN = importlib.import_module("roofkit.ops.layer_norm")

CONFIGS = list(itertools.product((1,), (8, 16), (1, 2), (2, 3, 4))) + [(2, 16, 1, 2), (2, 16, 1, 3), (1, 32, 1, 2), (1, 32, 1, 3)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    args = p.parse_args()
    m, n = 32768, 4096
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn((m, n), device="cuda", generator=g).bfloat16()
    w = (1 + 0.1 * torch.randn(n, device="cuda", generator=g)).bfloat16()
    b = (0.1 * torch.randn(n, device="cuda", generator=g)).bfloat16()
    dy = torch.randn((m, n), device="cuda", generator=g).bfloat16()
    xr = x.float().requires_grad_()
    wr = w.float().requires_grad_()
    br = b.float().requires_grad_()
    F.layer_norm(xr, (n,), wr, br).backward(dy.float())
    ref = (xr.grad, wr.grad, br.grad)
    _, mean, rstd = LN._layer_norm_forward(x, w, b, 1, 1e-5)
    nbytes = 3 * m * n * 2
    log = []
    xt, wt, bt = x.clone().requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_()
    yt = F.layer_norm(xt, (n,), wt, bt)
    fns = {"torch backward (autograd)": lambda: torch.autograd.grad(yt, (xt, wt, bt), dy, retain_graph=True)}
    for bm, warps, pps, stages in CONFIGS:
        cfg = LN.Config(True, bm, n, warps, pps, stages)

        def run(cfg=cfg):
            return LN._layer_norm_backward(dy, x, w, True, mean, rstd, 1, config=cfg)
        fns[f"m{bm} w{warps} pps{pps} st{stages}"] = run
    good = {}
    for label, fn in fns.items():
        try:
            out = fn()
            rel = max(((a.float() - r).norm() / r.norm()).item() for a, r in zip(out, ref))
            if rel <= 1e-2:
                good[label] = fn
            else:
                log.append({"config": label, "status": f"WRONG rel {rel:.3g}"})
        except Exception as exc:
            log.append({"config": label, "status": f"{type(exc).__name__}: {str(exc)[:160]}"})
    for label, t in time_providers(good, warmup_ms=10.0, rep_ms=60.0).items():
        log.append({"config": label, "ms": t.median_ms, "gbps": nbytes / t.median_ms / 1e6})
    meta = {**environment(), "default": str(LN._bwd_config(n))}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": log}, f, indent=1)
    print(meta)
    for r in sorted(log, key=lambda r: r.get("ms", 1e9)):
        if "ms" in r:
            print(f"{r['config']:34s} {r['ms'] * 1e3:9.1f} us {r['gbps']:7.0f} GB/s")
        else:
            print(f"{r['config']:34s} {r['status']}")


if __name__ == "__main__":
    main()
