"""Does the ping-pong GEMM overlap one consumer's epilogue with the other's main loop?

    PYTHONPATH=src python3 benchmarks/probe_pingpong_diag.py

At 8192x14336x4096 bf16 (+ bias), ping-pong 128x128x64 with 5 slots: plain, GELU, GELU applied
twice (a longer epilogue), each as built (the other consumer's main loop starts when this one's
ends) and SERIAL (it starts only after this one's epilogue: no overlap by construction). If the
as-built GELU costs what the serial one does, the overlap is not happening. Times: the harness's
cold-L2 timer and 200 warm back-to-back calls; the board's enforced power limit is printed.
"""

import importlib
import os

import pynvml
import torch

os.environ["ROOFKIT_AUTOTUNE"] = "0"
mm = importlib.import_module("roofkit.ops.matmul")
G = importlib.import_module("roofkit.ops._gemm")
WS = importlib.import_module("roofkit.ops._gemm_ws")
from roofkit.ops._autotune import _time_ms  # noqa: E402

PP = G.Config(128, 128, 64, 8, 4, 5, kind="pingpong", persistent=True)
PTR = G.Config(128, 256, 64, 8, 8, 4, kind="ptr")


def main():
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    print(f"enforced power limit {pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000:.0f} W, "
          f"max SM clock {pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)} MHz", flush=True)
    m, n, k = 8192, 14336, 4096
    g = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
    bv = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    variants = [("pingpong plain", PP, 0, {}), ("pingpong gelu", PP, 2, {}), ("pingpong gelu x2", PP, 2, {"EPI_REPEAT": 2}),
                ("SERIAL plain", PP, 0, {"SERIAL": True}), ("SERIAL gelu", PP, 2, {"SERIAL": True}),
                ("SERIAL gelu x2", PP, 2, {"SERIAL": True, "EPI_REPEAT": 2}),
                ("triton ptr plain", PTR, 0, {}), ("triton ptr gelu", PTR, 2, {}), ("triton ptr gelu x1 again", PTR, 2, {}),
                ("pingpong gelu again", PP, 2, {})]
    rows = []
    try:
        for name, cfg, act, diag in variants:
            def fn():
                WS.DIAGNOSTIC.clear()
                WS.DIAGNOSTIC.update(diag)
                mm._launch(cfg, a, b, None, bv if act else None, out, 1.0, 0.0, act)
            fn()
            torch.cuda.synchronize()
            cold = _time_ms(fn)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(200):
                fn()
            e.record()
            torch.cuda.synchronize()
            warm = s.elapsed_time(e) / 200
            rows.append((name, cold, warm))
            print(f"{name:28s} cold {cold * 1e3:8.1f} us   warm {warm * 1e3:8.1f} us", flush=True)
    finally:
        WS.DIAGNOSTIC.clear()
    base = {r[0]: r for r in rows}
    print("\nsummary (cold / warm, % over the same kernel's plain):")
    for name, cold, warm in rows:
        ref = base["triton ptr plain"] if name.startswith("triton") else (
            base["SERIAL plain"] if name.startswith("SERIAL") else base["pingpong plain"])
        print(f"{name:28s} {cold * 1e3:8.1f} {warm * 1e3:8.1f}   +{(cold / ref[1] - 1) * 100:5.1f} % / +{(warm / ref[2] - 1) * 100:5.1f} %")


if __name__ == "__main__":
    main()
