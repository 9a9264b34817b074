"""index_add atomic-path sweep on the GPU: the index range check before the adds (its
wait overlapping the copy, ``PRECHECK_MIN_WIDTH``) or inside the atomic kernel (a wait at the
end), tile size and warps, on the acceptance shapes (1Mi x 64 fp32 rows from 1Mi indices; 64Mi
1-D contributions into 1Mi) next to torch.index_add. (An earlier run also tried four-wide
vector reductions, ``red.global.add.v4.f32`` through inline PTX: no gain, removed.)

    PYTHONPATH=src python3 benchmarks/sweep_scatter.py [--json PATH]

Every configuration's output is checked against torch.index_add in float64 (rel-L2 <= 1e-6)
before it is timed; timing is the harness's (CUDA events, cold L2, interleaved). Besides the
whole call, the atomic kernel alone is timed (``kernel only``: destination pre-copied, no
range-check synchronization) so the copy's and the synchronization's shares show.
"""

import argparse
import importlib
import itertools
import json

import torch
import triton

from roofkit.harness.device import environment
from roofkit.harness.timing import time_providers

S = importlib.import_module("roofkit.ops.scatter._launch")
K = importlib.import_module("roofkit.ops.scatter._kernels")
API = importlib.import_module("roofkit.ops.scatter.api")

CONFIGS = list(itertools.product((False, True), (2048, 4096, 8192), (4, 8)))  # (precheck, tile, warps)


def kernel_only(out, idx, src, err):
    """The atomic kernel alone on a (1, L, W) problem (index_add along dim 0)."""
    L, W = src.shape[0], (src.shape[1] if src.dim() > 1 else 1)
    N = out.shape[0]
    cfg = S._atomic_config(W)
    n_lb, n_ib = triton.cdiv(L, cfg.BLOCK_R), triton.cdiv(W, cfg.BLOCK_I)
    o3, s3 = out.view(1, N, W), src.view(1, L, W)
    K._scatter_add_atomic_kernel[(n_lb * n_ib,)](
        o3, idx, s3, err, 1.0, L, N, W, n_lb, n_ib, *o3.stride(), 0, idx.stride(0), 0, *s3.stride(),
        ROW_INDEX=True, HAS_ALPHA=False, USE_INT64=False,
        BLOCK_L=cfg.BLOCK_R, BLOCK_I=cfg.BLOCK_I, num_warps=cfg.num_warps)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    args = p.parse_args()
    g = torch.Generator(device="cuda").manual_seed(0)
    mi = 1 << 20
    shapes = {"rows 1Mi x 64 <- 1Mi": ((mi, 64), mi), "1-D 1Mi <- 64Mi": ((mi,), 64 * mi)}
    log = []
    for name, (shape, L) in shapes.items():
        inp = torch.randn(shape, device="cuda", generator=g)
        src = torch.randn((L,) + tuple(shape[1:]), device="cuda", generator=g)
        idx = torch.randint(0, shape[0], (L,), device="cuda", generator=g)
        ref = torch.index_add(inp.double(), 0, idx, src.double())
        nbytes = 2 * inp.numel() * 4 + src.numel() * 4 + idx.numel() * 8
        fns = {"torch index_add": lambda: torch.index_add(inp, 0, idx, src)}
        for pre, tile, warps in CONFIGS:
            if not pre and (tile, warps) != (4096, 8):
                continue

            def setup(pre=pre, tile=tile, warps=warps):
                S.PRECHECK_MIN_WIDTH, S.ATOMIC_TILE, S.ATOMIC_WARPS = (8 if pre else 1 << 30), tile, warps
            label = f"{'precheck' if pre else 'check at end'} tile {tile} w{warps}"

            def run(setup=setup):
                setup()
                return API.index_add(inp, 0, idx, src)
            fns[label] = run
            if pre and tile == 4096 and warps == 8:
                pre = inp.clone()
                err = torch.zeros(1, dtype=torch.int32, device="cuda")

                def kern(setup=setup, pre=pre, err=err):
                    setup()
                    kernel_only(pre, idx, src, err)
                fns[label + " kernel only"] = kern
        fns["copy only (torch clone)"] = lambda: inp.clone()
        good = {}
        for label, fn in fns.items():
            try:
                out = fn()
                if "kernel only" in label or "copy only" in label:
                    good[label] = fn
                    continue
                rel = ((out.double() - ref).norm() / ref.norm()).item()
                if rel <= 1e-6:
                    good[label] = fn
                else:
                    log.append({"shape": name, "config": label, "status": f"WRONG rel {rel:.3g}"})
            except Exception as exc:
                log.append({"shape": name, "config": label, "status": f"{type(exc).__name__}: {str(exc)[:160]}"})
        for label, t in time_providers(good, warmup_ms=10.0, rep_ms=80.0).items():
            log.append({"shape": name, "config": label, "ms": t.median_ms, "gbps": nbytes / t.median_ms / 1e6})
    S.PRECHECK_MIN_WIDTH, S.ATOMIC_TILE, S.ATOMIC_WARPS = 8, 4096, 8
    meta = environment()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": log}, f, indent=1)
    print(meta)
    for r in log:
        if "ms" in r:
            print(f"{r['shape']:24s} {r['config']:34s} {r['ms'] * 1e3:9.1f} us {r['gbps']:7.0f} GB/s")
        else:
            print(f"{r['shape']:24s} {r['config']:34s} {r['status']}")


if __name__ == "__main__":
    main()
