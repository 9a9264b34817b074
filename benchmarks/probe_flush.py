"""How much of a small memory-bound kernel's cold-L2 time is the L2 flush's own write-back?

    PYTHONPATH=src python3 benchmarks/probe_flush.py

The harness flushes L2 by writing a scratch buffer of 2x the L2 size (docs/design.md), which leaves
the L2 full of dirty lines: the timed kernel's first misses then also pay for writing those back.
This probe times the same calls (cuBLAS GEMV / decode GEMM, a 32 MiB copy, two pure reads of the GEMV's
32 MiB weight: torch.sum and torch.amax) after three
flushes: "write" (the harness's), "write+read" (the write, then a read of another 2x-L2 buffer,
so the L2 holds clean lines), "read" (the read only). CUDA events around each call, median of
200 calls. Findings: docs/measurement.md, docs/gemm.md; the harness itself is unchanged.

Only calls whose host enqueue time is far below the flush's device time belong here: the probe
records the start event right after the flush, so a call that takes longer to enqueue than the
flush takes to run would be charged its host time (roofkit's calls, through the custom-op
dispatch and the autotuner lookup, were: its rows in the first recorded run are host-bound and
ignored; ``roofkit bench`` hides that with a device-side sleep).
"""

import torch


def main():
    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    wbuf = torch.empty(2 * l2 // 4, dtype=torch.int32, device=dev)
    rbuf = torch.ones(2 * l2 // 4, dtype=torch.int32, device=dev)
    sink = torch.empty((), dtype=torch.int64, device=dev)
    flushes = {
        "write": lambda: wbuf.zero_(),
        "write+read": lambda: (wbuf.zero_(), torch.sum(rbuf, dim=0, out=sink)),
        "read": lambda: torch.sum(rbuf, dim=0, out=sink),
    }
    g = torch.Generator(device=dev).manual_seed(0)
    x1 = torch.randn(1, 4096, device=dev, dtype=torch.bfloat16, generator=g)
    w1 = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16, generator=g)
    x16 = torch.randn(16, 4096, device=dev, dtype=torch.bfloat16, generator=g)
    w16 = torch.randn(4096, 14336, device=dev, dtype=torch.bfloat16, generator=g)
    src = torch.randn(8 << 20, device=dev, generator=g)
    dst = torch.empty_like(src)
    calls = {  # name: (fn, bytes moved at minimum)
        "cuBLAS gemv 1x4096x4096": (lambda: torch.matmul(x1, w1), 2 * (4096 * 4096 + 2 * 4096)),
        "cuBLAS 16x14336x4096": (lambda: torch.matmul(x16, w16), 2 * (4096 * 14336 + 16 * 4096 + 16 * 14336)),
        "copy 32 MiB fp32": (lambda: dst.copy_(src), 2 * src.numel() * 4),
        # pure reads of the GEMV's 32 MiB of B: the floor any GEMV of this size can reach
        "read 32 MiB: torch.sum(B)": (lambda: torch.sum(w1, dtype=torch.float32), 2 * 4096 * 4096),
        "read 32 MiB: torch.amax(B)": (lambda: torch.amax(w1), 2 * 4096 * 4096),
    }
    for fn, _ in calls.values():
        fn()
    torch.cuda.synchronize()
    print(f"L2 {l2 / 2**20:.0f} MiB; median of 200 calls, us (GB/s)")
    print(f"{'call':28s}" + "".join(f"{f:>22s}" for f in flushes))
    for name, (fn, nbytes) in calls.items():
        line = f"{name:28s}"
        for flush in flushes.values():
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(200)]
            for s, e in ev:
                flush()
                s.record()
                fn()
                e.record()
            torch.cuda.synchronize()
            t = sorted(s.elapsed_time(e) for s, e in ev)[100] * 1e3
            line += f"{t:12.1f} ({nbytes / t / 1e3:6.0f})"
        print(line, flush=True)


if __name__ == "__main__":
    main()
