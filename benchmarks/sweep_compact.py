"""Compaction launch-configuration sweep on the GPU (issue 5): tile shape (CHUNK x CHUNKS) and
warps of the one-pass look-back kernel, 64Mi fp32 at 0 / 5 / 50 % kept, against torch.

    PYTHONPATH=src python3 benchmarks/sweep_compact.py [--json PATH]

``compact`` (no host synchronization) and ``masked_select`` (one, for the output's size) are
both timed, so the sync's share shows. Every output is checked against torch.masked_select
before timing; timing is the harness's (CUDA events, cold L2, interleaved).
"""

import argparse
import importlib
import itertools
import json
import time

import torch

from roofkit.harness.timing import time_providers

C = importlib.import_module("roofkit.ops.compact")

CONFIGS = [(chunk, chunks, warps) for chunk, chunks, warps in itertools.product((1024, 2048), (4, 8, 16, 32), (4, 8))
           if chunk // (32 * warps) >= 4]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    args = p.parse_args()
    n = 64 << 20
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, device="cuda", generator=g)
    log = []
    for keep in (0.0, 0.05, 0.5):
        mask = torch.rand(n, device="cuda", generator=g) < keep
        ref = torch.masked_select(x, mask)
        fns = {"torch masked_select": lambda mask=mask: torch.masked_select(x, mask)}
        for cfg in CONFIGS:
            def setup(cfg=cfg):
                C.CHUNK, C.CHUNKS, C.NUM_WARPS = cfg
            for api in ("compact", "masked_select"):
                def run(setup=setup, api=api, mask=mask):
                    setup()
                    return C.compact(x, mask) if api == "compact" else C.masked_select(x, mask)
                fns[f"{api} {cfg[0]}x{cfg[1]} w{cfg[2]}"] = run
        good = {}
        for label, fn in fns.items():
            try:
                out = fn()
                got = out[0][: int(out[1])] if isinstance(out, tuple) else out
                if torch.equal(got, ref):
                    good[label] = fn
                else:
                    log.append({"keep": keep, "config": label, "status": "WRONG"})
            except Exception as exc:
                log.append({"keep": keep, "config": label, "status": f"{type(exc).__name__}: {str(exc)[:120]}"})
        nbytes = n * 4 + n + 2 * len(ref) * 4  # mask + input read, kept values written (ideal: input once)
        for label, t in time_providers(good, warmup_ms=10.0, rep_ms=60.0).items():
            log.append({"keep": keep, "config": label, "ms": t.median_ms, "gbps": nbytes / t.median_ms / 1e6})
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": importlib.import_module("triton").__version__, "date": time.strftime("%Y-%m-%d")}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "rows": log}, f, indent=1)
    for keep in (0.0, 0.05, 0.5):
        rows = sorted((r for r in log if r["keep"] == keep and "ms" in r), key=lambda r: r["ms"])
        print(f"\nkeep {keep:.0%}")
        for r in rows[:8] + [r for r in rows[8:] if r["config"].startswith("torch")]:
            print(f"  {r['config']:34s} {r['ms'] * 1e3:8.1f} us")
        for r in log:
            if r["keep"] == keep and "status" in r:
                print(f"  {r['config']:34s} {r['status']}")


if __name__ == "__main__":
    main()
