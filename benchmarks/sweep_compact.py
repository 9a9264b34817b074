"""Compaction variant sweep on the GPU: every kernel variant of roofkit.ops.compact
(VARIANT) with a few tile / warp settings, 64Mi fp32 at 0 / 5 / 50 / 95 % kept, against torch.

    PYTHONPATH=src python3 benchmarks/sweep_compact.py [--json PATH] [--quick]

(13 configurations x 3 providers + 2 + torch's two, at 4 keep ratios: about 2 minutes on an
H200, ~20 kernel compilations included. Without a GPU, e.g. TRITON_INTERPRET=1 ... --n 5000, it
only checks the outputs.)

For each configuration three providers are timed: ``compact`` (no host synchronization),
``masked_select`` reading the size with a device-to-host copy (SYNC="item") and with the count
stored into page-locked host memory by the kernel (SYNC="pinned"); two configurations also
without the copy-out below a quarter kept (SHRINK_BELOW=0). Every output is checked bit for bit
against torch.masked_select before timing (a wrong configuration is reported WRONG and not
timed) and again after timing. Timing is the harness's: CUDA events, cold L2, providers
interleaved. GB/s uses masked_select_cost (mask once, the input sectors holding kept elements,
the kept output). Prints the best configuration per keep ratio last.
"""

import argparse
import importlib
import json
import time

import torch

from roofkit.harness.spec import case
from roofkit.harness.device import environment
from roofkit.harness.timing import time_providers

C = importlib.import_module("roofkit.ops.compact")


def _tp(block, chunk, warps, count_warps, **extra):
    return dict(VARIANT="two_pass", TP_BLOCK=block, TP_CHUNK=chunk, TP_WARPS=warps, TP_COUNT_WARPS=count_warps, **extra)


# (label, module switches); switches a configuration leaves out take the module's defaults.
CONFIGS = [
    ("lookback 1024x8 w4", dict(VARIANT="lookback", CHUNK=1024, CHUNKS=8, NUM_WARPS=4)),
    ("lookback_rows 2048 w4", dict(VARIANT="lookback_rows", LR_CHUNK=2048, LR_WARPS=4)),
    ("lookback_rows 4096 w4", dict(VARIANT="lookback_rows", LR_CHUNK=4096, LR_WARPS=4)),
    ("lookback_rows 4096 w8", dict(VARIANT="lookback_rows", LR_CHUNK=4096, LR_WARPS=8)),
    ("lookback_rows 8192 w8", dict(VARIANT="lookback_rows", LR_CHUNK=8192, LR_WARPS=8)),
    ("two_pass 16384/4096 w4 c8", _tp(16384, 4096, 4, 8)),
    ("two_pass 16384/4096 w8 c8", _tp(16384, 4096, 8, 8)),
    ("two_pass 16384/4096 w4 c8 pdl", _tp(16384, 4096, 4, 8, TP_PDL=True)),
    ("two_pass 16384/2048 w4 c8", _tp(16384, 2048, 4, 8)),
    ("two_pass 32768/4096 w8 c8", _tp(32768, 4096, 8, 8)),
    ("two_pass 8192/2048 w4 c4", _tp(8192, 2048, 4, 4)),
    ("two_pass_bytes 16384/4096 w8 c8", {**_tp(16384, 4096, 8, 8), "VARIANT": "two_pass_bytes"}),
    ("two_pass_bytes 16384/2048 w4 c8", {**_tp(16384, 2048, 4, 8), "VARIANT": "two_pass_bytes"}),
]
NOSHRINK = ("lookback_rows 4096 w8", "two_pass 16384/4096 w8 c8")  # also timed with SHRINK_BELOW=0
QUICK = ("lookback 1024x8 w4", "lookback_rows 4096 w8", "two_pass 16384/4096 w8 c8", "two_pass_bytes 16384/4096 w8 c8")
KEEPS = (0.0, 0.05, 0.5, 0.95)
SWITCHES = ("VARIANT", "SYNC", "SHRINK_BELOW", "CHUNK", "CHUNKS", "NUM_WARPS", "LR_CHUNK", "LR_WARPS",
            "TP_BLOCK", "TP_CHUNK", "TP_WARPS", "TP_COUNT_WARPS", "TP_SCAN_BLOCK", "TP_PDL")
DEFAULTS = {k: getattr(C, k) for k in SWITCHES}


def _apply(switches: dict) -> None:
    for k in SWITCHES:
        setattr(C, k, switches.get(k, DEFAULTS[k]))


def _providers(x, mask, configs):
    """label -> zero-argument callable; each call sets the module's switches first (providers are
    interleaved, so every call must bring its own)."""
    fns = {
        "torch masked_select": lambda: torch.masked_select(x, mask),
        "torch x[mask]": lambda: x[mask],
    }
    for label, sw in configs:
        def run_compact(sw=sw):
            _apply(sw)
            return C.compact(x, mask)
        fns[f"compact | {label}"] = run_compact
        for sync in ("item", "pinned"):
            def run_select(sw=sw, sync=sync):
                _apply({**sw, "SYNC": sync})
                return C.masked_select(x, mask)
            fns[f"masked_select {sync} | {label}"] = run_select
        if label in NOSHRINK:
            def run_noshrink(sw=sw):
                _apply({**sw, "SYNC": "pinned", "SHRINK_BELOW": 0.0})
                return C.masked_select(x, mask)
            fns[f"masked_select pinned noshrink | {label}"] = run_noshrink
    return fns


def _result(out) -> torch.Tensor:
    return out[0][: int(out[1])] if isinstance(out, tuple) else out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    p.add_argument("--quick", action="store_true", help="four configurations only")
    p.add_argument("--n", type=int, default=64 << 20, help="elements (default 64Mi)")
    args = p.parse_args()
    configs = [c for c in CONFIGS if not args.quick or c[0] in QUICK]
    n = args.n
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: checks only (TRITON_INTERPRET=1, small --n)
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(n, device=dev, generator=g)
    rows, t_start = [], time.time()
    for keep in KEEPS:
        mask = torch.rand(n, device=dev, generator=g) < keep
        ref = torch.masked_select(x, mask)
        nbytes = C.masked_select_cost(case("s", shape=(n,), keep=keep), torch.float32).bytes
        good = {}
        for label, fn in _providers(x, mask, configs).items():
            try:
                ok = torch.equal(_result(fn()), ref)
            except Exception as exc:  # reported in the table and the JSON, never hidden
                rows.append({"keep": keep, "provider": label, "status": f"{type(exc).__name__}: {str(exc)[:160]}"})
                continue
            if ok:
                good[label] = fn
            else:
                rows.append({"keep": keep, "provider": label, "status": "WRONG"})
        if dev != "cuda":
            rows += [{"keep": keep, "provider": label, "status": "checked, not timed (no GPU)"} for label in good]
            continue
        times = time_providers(good, warmup_ms=10.0, rep_ms=60.0, max_reps=300)
        for label, t in times.items():
            status = "ok" if torch.equal(_result(good[label]()), ref) else "WRONG after timing"
            rows.append({"keep": keep, "provider": label, "status": status, "median_us": t.median_ms * 1e3,
                         "p20_us": t.p20_ms * 1e3, "p80_us": t.p80_ms * 1e3, "reps": t.reps,
                         "gbps": nbytes / t.median_ms / 1e6, "wall_us": t.wall_us, "method": t.method})
        _apply({})
        print(f"keep {keep:.0%} done ({time.time() - t_start:.0f} s)", flush=True)
    env = {**environment(), "n": n, "dtype": "float32", "configs": {label: sw for label, sw in configs}}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "rows": rows}, f, indent=1)
    _print(rows)


def _print(rows):
    for keep in KEEPS:
        timed = sorted((r for r in rows if r["keep"] == keep and "median_us" in r), key=lambda r: r["median_us"])
        torch_us = {r["provider"]: r["median_us"] for r in timed if r["provider"].startswith("torch")}
        print(f"\nkeep {keep:.0%}: torch masked_select {torch_us.get('torch masked_select', float('nan')):.1f} us, "
              f"x[mask] {torch_us.get('torch x[mask]', float('nan')):.1f} us")
        for kind in ("compact", "masked_select item", "masked_select pinned"):
            best = [r for r in timed if r["provider"].startswith(kind + " |") and r["status"] == "ok"][:4]
            for r in best:
                ratio = torch_us.get("torch masked_select", float("nan")) / r["median_us"]
                print(f"  {r['provider']:52s} {r['median_us']:8.1f} us  [{r['p20_us']:.1f}, {r['p80_us']:.1f}]"
                      f"  {r['gbps']:6.0f} GB/s  {ratio:5.2f}x torch")
        for r in timed:
            if "noshrink" in r["provider"]:
                print(f"  {r['provider']:52s} {r['median_us']:8.1f} us")
        for r in rows:
            if r["keep"] == keep and r["status"] != "ok" and not r["status"].startswith("checked"):
                print(f"  {r['provider']:52s} {r['status']}")
    print("\nbest per keep ratio (median us; speedup over torch.masked_select / over x[mask]):")
    print(f"  {'keep':>5s}  {'masked_select':>13s}  {'x[mask]':>8s}  {'compact (config)':>46s}  "
          f"{'masked_select (config)':>56s}")
    for keep in KEEPS:
        timed = [r for r in rows if r["keep"] == keep and "median_us" in r and r["status"] == "ok"]
        t = next((r["median_us"] for r in timed if r["provider"] == "torch masked_select"), float("nan"))
        ti = next((r["median_us"] for r in timed if r["provider"] == "torch x[mask]"), float("nan"))

        def best(prefix):
            return min((r for r in timed if r["provider"].startswith(prefix)), key=lambda r: r["median_us"], default=None)

        bc, bm = best("compact |"), best("masked_select")
        fc = f"{bc['median_us']:.1f} ({bc['provider'].split('| ')[1]}) {t / bc['median_us']:.2f}x" if bc else "-"
        fm = (f"{bm['median_us']:.1f} ({bm['provider'].removeprefix('masked_select ')}) "
              f"{t / bm['median_us']:.2f}x/{ti / bm['median_us']:.2f}x" if bm else "-")
        print(f"  {keep:5.0%}  {t:13.1f}  {ti:8.1f}  {fc:>46s}  {fm:>56s}")

if __name__ == "__main__":
    main()
