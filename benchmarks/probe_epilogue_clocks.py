"""Is the fused epilogue's cost time at a lower clock (energy under the power cap) or cycles (the
epilogue slowing the other consumer's main loop)?

    PYTHONPATH=src python3 benchmarks/probe_epilogue_clocks.py [--seconds S] [--rounds N] [--json PATH]
    ncu ... python3 benchmarks/probe_epilogue_clocks.py --once   # one launch of each variant, after one warm-up each

8192x14336x4096 bf16, ping-pong default configuration: plain, bias, bias + silu, bias + GELU
(bf16's default: the logistic form of degree 4), the logistic form of degree 6 (GELU_FORM 2), the
5-term erfc fit (GELU_FORM 3). Each variant runs
back to back for S seconds (chunks of 20 calls between CUDA events) while a thread samples NVML's
SM clock and board power every 5 ms; rounds rotate the variants' order. Per variant: time per
call, mean SM clock while it ran, mean power, and cycles per call (time x clock). If the fused
variants cost time but not cycles, the cost is the clock (power); if cycles, the schedule.
"""

import argparse
import json
import os
import threading
import time

import pynvml
import torch

os.environ.setdefault("ROOFKIT_AUTOTUNE", "0")
import importlib  # noqa: E402

from roofkit.harness.device import environment  # noqa: E402

mm = importlib.import_module("roofkit.ops.matmul")  # the module (roofkit.ops.matmul is also the function)
WS = importlib.import_module("roofkit.ops._gemm_ws")

VARIANTS = {  # name: (bias, activation code, diagnostic overrides)
    "plain": (False, 0, {}),
    "bias": (True, 0, {}),
    "bias+silu": (True, 4, {}),
    "bias+gelu": (True, 2, {}),
    "bias+gelu logistic6": (True, 2, {"GELU_FORM": 2}),
    "bias+gelu erfc5": (True, 2, {"GELU_FORM": 3}),
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--once", action="store_true", help="one warm-up then one launch per variant (for ncu)")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    m, n, k = 8192, 14336, 4096
    g = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

    def call(name):
        has_bias, act, extra = VARIANTS[name]
        WS.DIAGNOSTIC.update(extra)
        try:
            if not WS.launch(mm.PINGPONG_DEFAULT, a, b, None, bias if has_bias else None, out, 1.0, 0.0, act):
                raise RuntimeError("ping-pong did not launch")
        finally:
            WS.DIAGNOSTIC.clear()

    for name in VARIANTS:
        call(name)
    torch.cuda.synchronize()
    if args.once:
        for name in VARIANTS:
            call(name)
        torch.cuda.synchronize()
        print("launched once each, in order:", ", ".join(VARIANTS))
        return
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    samples, stop = [], threading.Event()

    def sampler():
        while not stop.is_set():
            samples.append((time.perf_counter(), pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                            pynvml.nvmlDeviceGetPowerUsage(h) / 1e3))
            time.sleep(0.005)

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    names = list(VARIANTS)
    rows = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            for _ in range(5):
                call(name)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            chunks = []
            while time.perf_counter() - t0 < args.seconds:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(20):
                    call(name)
                e.record()
                chunks.append((s, e))
                if len(chunks) % 4 == 0:
                    e.synchronize()  # keep the host within a few chunks of the device
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            per_call = sorted(s.elapsed_time(e) * 1e3 / 20 for s, e in chunks[1:])
            win = [(c, w) for t, c, w in samples if t0 + 0.1 * (t1 - t0) <= t <= t1]
            clock = sum(c for c, _ in win) / max(1, len(win))
            power = sum(w for _, w in win) / max(1, len(win))
            us = per_call[len(per_call) // 2]
            rows[name].append({"us": us, "mhz": clock, "watts": power, "mcycles": us * clock / 1e6, "samples": len(win)})
            print(f"round {r} {name:20s} {us:8.1f} us  {clock:6.0f} MHz  {power:5.0f} W  {us * clock / 1e6:6.3f} Mcycles",
                  flush=True)
    stop.set()
    th.join()
    med = {n: {key: sorted(x[key] for x in v)[len(v) // 2] for key in ("us", "mhz", "watts", "mcycles")}
           for n, v in rows.items()}
    base = med["plain"]
    print(f"{'variant':20s} {'us':>8s} {'MHz':>6s} {'W':>5s} {'Mcycles':>8s} {'time vs plain':>14s} {'cycles vs plain':>16s}")
    for name, v in med.items():
        print(f"{name:20s} {v['us']:8.1f} {v['mhz']:6.0f} {v['watts']:5.0f} {v['mcycles']:8.3f} "
              f"{(v['us'] / base['us'] - 1) * 100:+13.2f}% {(v['mcycles'] / base['mcycles'] - 1) * 100:+15.2f}%")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": environment(), "rounds": rows, "median": med}, f, indent=1)


if __name__ == "__main__":
    main()
