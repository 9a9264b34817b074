"""Honest GPU timing: CUDA events, cold L2, interleaved providers, optional CUDA-graph replay.

Rules (docs/design.md, "Timing rules"):
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
- the host suite (:func:`host_time_providers`) measures what a call costs the host instead: wall
  time of N back-to-back calls and one synchronize, per call, beside the replay of a CUDA graph
  holding the same calls (the device's share, without the host);
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
    """Clock cycles of ``torch.cuda._sleep`` per microsecond on ``device`` (measured once per
    process). The sleep counts SM clock cycles, so a rate measured while the GPU is still at an
    idle clock would make every later sleep too short at the working clock (the launch it should
    hide then shows as device time): the sleep is timed until two rates in a row agree within 2 %
    (at most 12 times, the GPU busy all along) and the highest rate seen is kept."""
    key = str(device)
    if key not in _CYCLES_PER_US:
        torch.cuda.synchronize(device)
        n = 2_000_000
        rates: list[float] = []
        torch.cuda._sleep(n)  # warm
        while len(rates) < 12 and (len(rates) < 3 or abs(rates[-1] - rates[-2]) > 0.02 * rates[-1]):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            torch.cuda._sleep(n)
            e.record()
            torch.cuda.synchronize(device)
            rates.append(n / max(s.elapsed_time(e) * 1e3, 1e-3))
        _CYCLES_PER_US[key] = max(rates)
    return _CYCLES_PER_US[key]


def _cover_cycles(cycles_per_us: float, host_s) -> int:
    """Cycles of the device-side sleep put before a timed call so that its launch is never device
    time: twice the call's median host enqueue time (``host_s``, seconds) plus 20 us."""
    host_us = sorted(host_s)[len(host_s) // 2] * 1e6
    return int(cycles_per_us * (2.0 * host_us + 20.0))


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


def _capture(fn: Callable, device: torch.device, calls: int = 1) -> Callable:
    """A CUDA graph of ``calls`` back-to-back calls of ``fn`` (after warm-up on a side stream);
    returns its replay. Outputs freed during the capture go back to the graph's private pool and
    are reused by the next call, so the graph's memory does not grow with ``calls``."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
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
        sleep_cycles[name] = _cover_cycles(cycles_per_us, host)

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


@dataclass
class HostTiming:
    """What back-to-back calls of one provider cost, per call, in microseconds.

    ``wall_us``: host wall time of ``calls`` back-to-back calls followed by one synchronize,
    divided by ``calls`` (median over the runs in ``wall_runs_us``). It is what a Python caller
    pays per call once the device's queue is full: the larger of the host's launch path and the
    device's work. ``graph_us``: the same for one replay of a CUDA graph holding ``graph_calls``
    calls, so the host's part is gone and what is left is the device's work plus the gaps between
    kernels; NaN when the provider cannot be captured (``method`` says why). ``wall_us`` well above
    ``graph_us`` means the host is the bottleneck.
    """

    wall_us: float
    graph_us: float
    calls: int
    graph_calls: int
    method: str
    wall_runs_us: list[float] = field(default_factory=list)
    graph_runs_us: list[float] = field(default_factory=list)


def host_time_providers(
    fns: Mapping[str, Callable[[], object]],
    *,
    device: torch.device | str | None = None,
    calls: int = 2000,
    graph_calls: int | None = None,
    warmup_calls: int | None = None,
    repeats: int = 3,
    graph: bool = True,
    clock: Callable[[], float] = time.perf_counter,
    capture: Callable[[Callable, torch.device, int], Callable] | None = None,
) -> dict[str, HostTiming]:
    """Per-call wall time of back-to-back calls, and of a CUDA graph replaying them, interleaved.

    Each provider runs once (compilation, autotuning, allocator growth), then ``warmup_calls``
    back-to-back calls; then, ``repeats`` times with the provider order rotated each round, every
    provider does one timed run of ``calls`` back-to-back calls and one synchronize, then one
    timed replay (``clock`` around replay + synchronize) of its graph of ``graph_calls`` calls.
    Nothing is flushed between calls: small decode-sized inputs stay in L2 as they would in a model.

    Args:
        fns: provider name -> zero-argument callable doing one call of the work.
        device: where the calls run (default: the current CUDA device, else the CPU, where the
            synchronize is a no-op and there is no graph).
        calls: back-to-back calls per timed run (N).
        graph_calls: calls captured in the graph (K; default N).
        warmup_calls: back-to-back calls before timing (default N / 10, at least 10).
        repeats: timed runs per provider; the median is reported.
        graph: also time the CUDA-graph replay.
        clock: seconds, monotonic (injectable so the arithmetic can be tested without a GPU).
        capture: ``(fn, device, n) -> replay`` building a graph of n calls (default: CUDA graph
            capture); injectable for the same reason.
    Returns:
        provider name -> :class:`HostTiming` (same order as ``fns``).
    Raises:
        ValueError: ``calls``, ``graph_calls`` or ``repeats`` below 1.
    """
    graph_calls = calls if graph_calls is None else graph_calls
    if min(calls, graph_calls, repeats) < 1:
        raise ValueError(f"host_time_providers: calls, graph_calls and repeats must be >= 1, got "
                         f"{calls}, {graph_calls}, {repeats}")
    warmup_calls = max(10, calls // 10) if warmup_calls is None else warmup_calls
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(device)
    on_cuda = device.type == "cuda"

    def sync() -> None:
        if on_cuda:
            torch.cuda.synchronize(device)

    names = list(fns)
    replays: dict[str, Callable | None] = {}
    graph_note: dict[str, str] = {}
    for name in names:
        fn = fns[name]
        fn()
        for _ in range(warmup_calls):
            fn()
        sync()
        replays[name] = None
        if not graph:
            graph_note[name] = "no graph (not asked for)"
        elif capture is None and not on_cuda:
            graph_note[name] = "no graph (CUDA graphs need a CUDA device)"
        else:
            try:
                replay = (capture or _capture)(fn, device, graph_calls)
                replay()  # the first replay uploads the graph: not timed
                sync()
                replays[name] = replay
                graph_note[name] = f"one CUDA-graph replay of {graph_calls} calls + one synchronize, per call"
            except Exception as exc:  # a provider that cannot be captured is recorded, never hidden
                graph_note[name] = f"CUDA-graph capture failed ({type(exc).__name__}: {str(exc)[:120]})"
                sync()

    wall_runs = {n: [] for n in names}
    graph_runs = {n: [] for n in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:
            fn = fns[name]
            sync()
            t0 = clock()
            for _ in range(calls):
                fn()
            sync()
            wall_runs[name].append((clock() - t0) / calls * 1e6)
            replay = replays[name]
            if replay is not None:
                sync()
                t0 = clock()
                replay()
                sync()
                graph_runs[name].append((clock() - t0) / graph_calls * 1e6)

    out = {}
    for name in names:
        wall = wall_runs[name]
        method = (
            f"host: {calls} back-to-back calls + one synchronize, per call, median of {repeats} "
            f"(runs {min(wall):.3g}-{max(wall):.3g} us), after {warmup_calls} warm-up calls, warm L2, "
            f"interleaved with {len(names) - 1} other provider(s); graph: {graph_note[name]}"
        )
        out[name] = HostTiming(
            wall_us=float(np.median(wall)),
            graph_us=float(np.median(graph_runs[name])) if graph_runs[name] else float("nan"),
            calls=calls,
            graph_calls=graph_calls,
            method=method,
            wall_runs_us=wall,
            graph_runs_us=graph_runs[name],
        )
    replays.clear()  # the graphs and their pools go before the next case's inputs are drawn
    return out
