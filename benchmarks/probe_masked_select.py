"""Where does masked_select's time go at low keep ratios?

At 5 % kept, masked_select (136.8 us) trails compact (102 us) by ~35 us, more than the copy-out of
the kept elements should cost (13 MB read + written, ~8 us). This probe times, with the harness
(CUDA events, cold L2, interleaved), compact, masked_select and masked_select without the copy-out
(SHRINK_BELOW = 0) at 0 / 5 / 50 % kept on 64Mi fp32, then records a few harness-like calls under
torch.profiler and prints each call's kernels (start relative to the call's first kernel, and
duration), so device gaps and the copy's own time can be read directly.

    PYTHONPATH=src python3 benchmarks/probe_masked_select.py [--n N] [--json PATH]
"""

import argparse
import importlib
import json

import torch

import roofkit.config
from roofkit.harness.device import environment
from roofkit.harness.timing import L2Flusher, time_providers

C = importlib.import_module("roofkit.ops.compact")


def _noshrink(x, m):
    with roofkit.config.override("masked_select", SHRINK_BELOW=0.0):
        return C.masked_select(x, m)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=64 << 20)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(args.n, device=dev, generator=g)
    out = {"environment": environment(), "n": args.n, "rows": []}
    flush = L2Flusher(dev)
    for keep in (0.0, 0.05, 0.5):
        m = torch.rand(args.n, device=dev, generator=g) < keep
        want = torch.masked_select(x, m)
        for name, fn in (("masked_select", C.masked_select), ("noshrink", _noshrink)):
            got = fn(x, m)
            if not torch.equal(got.view(torch.int32), want.view(torch.int32)):
                raise SystemExit(f"WRONG: {name} at keep {keep}")
        fns = {
            "torch": lambda: torch.masked_select(x, m),
            "compact": lambda: C.compact(x, m),
            "masked_select": lambda: C.masked_select(x, m),
            "noshrink": lambda: _noshrink(x, m),
        }
        t = time_providers(fns, device=dev)
        row = {"keep": keep, **{k: v.median_ms * 1e3 for k, v in t.items()}}
        out["rows"].append(row)
        print(f"keep {keep:.2f}: " + "  ".join(f"{k} {v.median_ms * 1e3:.1f} us" for k, v in t.items()), flush=True)
        # a profile of harness-like calls: flush, sleep, call
        for name in ("masked_select", "compact"):
            fn = fns[name]
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA,
                                                    torch.profiler.ProfilerActivity.CPU]) as prof:
                for _ in range(4):
                    flush()
                    torch.cuda._sleep(2_000_000)
                    with torch.profiler.record_function("CALL"):
                        fn()
                    torch.cuda.synchronize()
            evs = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            evs.sort(key=lambda e: e.time_range.start)
            # split into calls at the sleep kernel; print the last call
            calls, cur = [], []
            for e in evs:
                if "sleep" in e.name.lower() or "spin_kernel" in e.name:
                    if cur:
                        calls.append(cur)
                    cur = []
                elif cur is not None:
                    cur.append(e)
            calls.append(cur)
            last = calls[-1]
            t0 = last[0].time_range.start if last else 0
            lines = [f"    {e.time_range.start - t0:8.1f} +{e.time_range.end - e.time_range.start:7.1f} us  {e.name[:70]}"
                     for e in last]
            print(f"  profile {name} keep {keep:.2f} (last call, after the sleep):")
            print("\n".join(lines))
            row[f"profile_{name}"] = lines
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
