"""Why does the ping-pong GEMM's GELU epilogue cost ~20 %? Two hypotheses:
(1) the epilogue does not overlap the other consumer's main loop; (2) it overlaps, but the SM's
extra FP32 / SFU work lowers the clock under the board's power limit.

    PYTHONPATH=src python3 benchmarks/probe_pingpong_power.py

For each (kernel, epilogue) at 8192x14336x4096 bf16: 300 back-to-back calls (warm, no L2 flush:
a steady state for the power limit) timed with CUDA events while a thread samples the SM clock,
the board power and the clock-event (throttle) reasons through NVML every 2 ms. Prints one line
each: us per call, mean SM MHz, mean W, reasons seen.
"""

import importlib
import os
import threading
import time

import pynvml
import torch

os.environ["ROOFKIT_AUTOTUNE"] = "0"
mm = importlib.import_module("roofkit.ops.matmul")
G = importlib.import_module("roofkit.ops._gemm")
Config = G.Config

CFGS = {"pingpong s5": Config(128, 128, 64, 8, 4, 5, kind="pingpong", persistent=True),
        "tma 128x256 s3": Config(128, 256, 64, 8, 8, 3, kind="tma", persistent=True),
        "ptr 128x256 s4": Config(128, 256, 64, 8, 8, 4, kind="ptr")}
EPI = [("plain", 0, False), ("bias", 0, True), ("bias+relu", 1, True), ("bias+gelu", 2, True),
       ("bias+gelu_tanh", 3, True), ("bias+silu", 4, True)]


def main():
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    m, n, k = 8192, 14336, 4096
    g = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
    bv = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    rows = []
    for cname, cfg in CFGS.items():
        for ename, act, bias in EPI:
            if cname != "pingpong s5" and ename not in ("plain", "bias+gelu"):
                continue
            fn = lambda: mm._launch(cfg, a, b, None, bv if bias else None, out, 1.0, 0.0, act)  # noqa: E731
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            samples, stop = [], threading.Event()

            def sample():
                while not stop.is_set():
                    samples.append((pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                                    pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                                    pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)))
                    time.sleep(0.002)

            th = threading.Thread(target=sample)
            th.start()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(300):
                fn()
            e.record()
            torch.cuda.synchronize()
            stop.set()
            th.join()
            us = s.elapsed_time(e) / 300 * 1e3
            mid = samples[len(samples) // 4:] or samples
            mhz = sum(x[0] for x in mid) / len(mid)
            watts = sum(x[1] for x in mid) / len(mid)
            reasons = 0
            for x in mid:
                reasons |= x[2]
            rows.append((cname, ename, us, mhz, watts, reasons))
            print(f"{cname:16s} {ename:16s} {us:8.1f} us  {2 * m * n * k / us / 1e6:6.1f} TFLOP/s  SM {mhz:6.0f} MHz  "
                  f"{watts:5.0f} W  reasons 0x{reasons:x}  ({len(mid)} samples)", flush=True)
            time.sleep(1.0)  # let the board cool between rows


if __name__ == "__main__":
    main()
