"""Honest GPU timing: CUDA events, cold L2, interleaved providers, optional CUDA-graph replay.

Rules (DESIGN.md, "Timing rules"):
- each timed call sits between two CUDA events; the median, p20 and p80 of the per-call times and
  the number of repetitions are reported, with the method, in every row;
- warm-up is by time (``warmup_ms`` per provider) after a first, untimed call;
- cold L2 (default): before each timed call a scratch buffer of twice the L2 size read from the
  device is overwritten; warm L2 leaves the cache as the previous call left it. Either way a short
  device-side sleep or the flush sits before the start event, so the host's launch work is hidden
  behind it and not counted as device time (the sleep is sized from each provider's measured host
  enqueue time);
- CUDA-graph mode replays a graph of one call (device time without launch gaps);
- ``wall_us``: host wall time per call from Python over back-to-back calls, launch included;
- providers are interleaved (A B C A B C ..., the order rotated every round) in one process so
  clock and thermal drift hit every provider alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np
import torch

_CYCLES_PER_US: dict = {}


def _sleep_cycles_per_us(device: torch.device) -> float:
    """Clock cycles of ``torch.cuda._sleep`` per microsecond on ``device`` (timed once)."""
    key = str(device)
    if key not in _CYCLES_PER_US:
        torch.cuda.synchronize(device)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        n = 2_000_000
        torch.cuda._sleep(n)  # warm
        s.record()
        torch.cuda._sleep(n)
        e.record()
        torch.cuda.synchronize(device)
        _CYCLES_PER_US[key] = n / max(s.elapsed_time(e) * 1e3, 1e-3)
    return _CYCLES_PER_US[key]


@dataclass
class Timing:
    """Distribution of one provider's per-call device time."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    min_ms: float
    reps: int
    method: str
    wall_us: float = float("nan")
    samples_ms: list[float] = field(default_factory=list, repr=False)

    @property
    def spread(self) -> float:
        """(p80 - p20) / median: the relative noise of this measurement."""
        return (self.p80_ms - self.p20_ms) / self.median_ms if self.median_ms > 0 else float("nan")


def summarize(samples_ms, method: str, wall_us: float = float("nan")) -> Timing:
    """Median, p20, p80 and minimum of ``samples_ms``."""
    a = np.asarray(samples_ms, dtype=np.float64)
    if a.size == 0:
        raise ValueError("summarize: no samples")
    return Timing(
        median_ms=float(np.median(a)),
        p20_ms=float(np.percentile(a, 20)),
        p80_ms=float(np.percentile(a, 80)),
        min_ms=float(a.min()),
        reps=int(a.size),
        method=method,
        wall_us=wall_us,
        samples_ms=[float(x) for x in a],
    )


class L2Flusher:
    """Overwrites a scratch buffer of ``factor`` x the device's L2 size (read from the device)."""

    def __init__(self, device: torch.device, factor: int = 2):
        l2 = torch.cuda.get_device_properties(device).L2_cache_size
        self.nbytes = max(int(factor * l2), 1 << 20)
        self.buffer = torch.empty(self.nbytes // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


def _capture(fn: Callable, device: torch.device) -> Callable:
    """A CUDA graph of one call of ``fn`` (after warm-up on a side stream); returns its replay."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize(device)
    return graph.replay


def time_providers(
    fns: Mapping[str, Callable[[], object]],
    *,
    device: torch.device | str | None = None,
    l2: str = "cold",
    graph: bool = False,
    warmup_ms: float = 25.0,
    rep_ms: float = 150.0,
    min_reps: int = 10,
    max_reps: int = 2000,
    wall_calls: int = 20,
) -> dict[str, Timing]:
    """Time zero-argument callables, interleaved, with CUDA events.

    Args:
        fns: provider name -> zero-argument callable doing one call of the work.
        device: CUDA device (default: current).
        l2: ``"cold"`` (flush 2x L2 before each call) or ``"warm"``.
        graph: replay a CUDA graph of each callable instead of calling it.
        warmup_ms, rep_ms: warm-up and measurement budget per provider, in milliseconds.
        min_reps, max_reps: bounds on the number of timed calls per provider.
        wall_calls: back-to-back calls for the host wall-time figure.
    Returns:
        provider name -> :class:`Timing` (same order as ``fns``).
    Raises:
        RuntimeError: no CUDA device. ValueError: unknown ``l2`` mode.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("timing needs a CUDA device")
    if l2 not in ("cold", "warm"):
        raise ValueError(f"time_providers: l2 must be 'cold' or 'warm', got {l2!r}")
    device = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
    flusher = L2Flusher(device) if l2 == "cold" else None

    cycles_per_us = _sleep_cycles_per_us(device)
    sleep_cycles = {}

    def before(name: str) -> None:
        if flusher is not None:
            flusher()
        # The device sleeps while the host enqueues the start event and the call, so host-side
        # launch work (longer than the flush for some providers) never shows up as device time.
        torch.cuda._sleep(sleep_cycles[name])

    names = list(fns)
    calls = {}
    notes = {}
    for name in names:
        fn = fns[name]
        fn()  # first call: compilation, autotuning, allocator growth
        torch.cuda.synchronize(device)
        notes[name] = ""
        if graph:
            try:
                fn = _capture(fn, device)
                notes[name] = ", CUDA-graph replay"
            except Exception as exc:  # recorded in the method string, never hidden
                notes[name] = f", CUDA-graph capture failed ({type(exc).__name__}): eager calls"
                torch.cuda.synchronize(device)
        calls[name] = fn

    # Warm-up by time, and an estimate of each call's duration.
    est_ms = {}
    for name in names:
        fn = calls[name]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        n, t0 = 0, time.perf_counter()
        start.record()
        while n < 3 or (time.perf_counter() - t0) * 1e3 < warmup_ms:
            fn()
            n += 1
            if n % 8 == 0:
                torch.cuda.synchronize(device)  # keep the host from running far ahead
        end.record()
        torch.cuda.synchronize(device)
        est_ms[name] = max(start.elapsed_time(end) / n, 1e-3)

    # Host time to enqueue one call (no synchronization): sizes the sleep before each timed call.
    for name in names:
        host = []
        for _ in range(5):
            t0 = time.perf_counter()
            calls[name]()
            host.append(time.perf_counter() - t0)
            torch.cuda.synchronize(device)
        host_us = sorted(host)[len(host) // 2] * 1e6
        sleep_cycles[name] = int(cycles_per_us * (2.0 * host_us + 20.0))

    reps = {n: int(min(max_reps, max(min_reps, rep_ms / est_ms[n]))) for n in names}
    rounds = max(reps.values())
    events = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            if len(events[name]) >= reps[name]:
                continue
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            before(name)
            s.record()
            calls[name]()
            e.record()
            events[name].append((s, e))
        if r % 64 == 63:
            torch.cuda.synchronize(device)  # bound the number of events in flight
    torch.cuda.synchronize(device)

    out = {}
    for name in names:
        fn = calls[name]
        t0 = time.perf_counter()
        for _ in range(wall_calls):
            fn()
        torch.cuda.synchronize(device)
        wall_us = (time.perf_counter() - t0) / wall_calls * 1e6
        samples = [s.elapsed_time(e) for s, e in events[name]]
        method = (
            f"CUDA events per call, {'cold' if flusher else 'warm'} L2"
            f"{f' (flush {flusher.nbytes} B = 2x L2)' if flusher else ''}, warm-up {warmup_ms:g} ms, "
            f"interleaved with {len(names) - 1} other provider(s){notes[name]}"
        )
        out[name] = summarize(samples, method, wall_us)
    return out
