"""``roofkit bench``: verify, time and place every provider of every op on one suite's shapes.

For each (op, case, dtype): inputs are drawn once; PyTorch's same-dtype result and the float64
reference are computed; every provider (roofkit and the installed baselines) is verified against
the reference with the rules of :mod:`.verify`, timed interleaved with the others
(:mod:`.timing`), verified again after the timing loop, and placed on the measured roofline.
Providers that are not installed, or that raise, get a record saying so; none is dropped silently.

The ``host`` suite (decode-sized shapes) asks what a call costs the host rather than the device:
its rows are verified the same way, then timed by :func:`.timing.host_time_providers` (wall time
of back-to-back calls, and of a CUDA graph replaying them) instead of by CUDA events per call.
"""

from __future__ import annotations

import gc
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import torch

from .baselines import unavailable_reason
from .device import Ceilings
from .inputs import make_generator
from .record import Record
from .roofline import place
from .spec import Case, Inputs, OpSpec
from .timing import host_time_providers, time_providers
from .verify import _bitwise_equal, _grad_outputs, _grad_targets, _with_grad, check_outputs, reference_outputs, run_outputs

ROOFKIT = "roofkit"
TORCH = "torch"
BENCH_SEED = 20261130
HOST_SUITE = "host"


@dataclass(frozen=True)
class HostOptions:
    """How the host suite times a case (see :func:`.timing.host_time_providers`): ``calls``
    back-to-back calls per timed run, ``graph_calls`` calls in the replayed CUDA graph (None: as
    many as ``calls``), ``repeats`` timed runs per provider, ``graph`` False to skip the graph."""

    calls: int = 2000
    graph_calls: int | None = None
    repeats: int = 3
    graph: bool = True


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def provider_callables(spec: OpSpec, wanted: Sequence[str] | None) -> tuple[dict[str, Callable], dict[str, str]]:
    """(name -> callable, name -> reason skipped) for roofkit and the spec's baselines."""
    names = [ROOFKIT] + list(spec.baselines)
    if wanted:
        names = [n for n in names if n in wanted]
    fns, skipped = {}, {}
    for name in names:
        if name == ROOFKIT:
            fns[name] = spec.impl
            continue
        try:
            fn = spec.baselines[name]()
        except ImportError as exc:
            fn, why = None, f"not installed ({exc})"
        else:
            why = None if fn is not None else unavailable_reason(name)
        if fn is None:
            skipped[name] = why
        else:
            fns[name] = fn
    return fns, skipped


def _timed_call(fn: Callable, inputs: Inputs, grad_pos: Sequence[int], dys: Sequence[tuple[int, torch.Tensor]],
                mode: str = "fwd") -> Callable[[], object]:
    """A zero-argument closure doing one forward (``mode="fwd"``), one forward and one backward
    through every floating output, ``dys`` giving (output position, gradient) (``"fwd_bwd"``), or
    one backward through a graph built once outside the closure (``"bwd"``)."""
    if not grad_pos:
        return lambda: fn(*inputs.args, **inputs.kwargs)
    inp = _with_grad(inputs, grad_pos)
    targets = [t for _, t in _grad_targets(inp, grad_pos)]

    def pairs(out):
        outs = out if isinstance(out, (tuple, list)) else (out,)
        chosen = [(outs[i], dy) for i, dy in dys
                  if i < len(outs) and isinstance(outs[i], torch.Tensor) and outs[i].requires_grad]
        if not chosen:
            raise RuntimeError("no output requires a gradient: nothing to time backward")
        return [o for o, _ in chosen], [dy for _, dy in chosen]

    if mode == "bwd":
        # torch.compile donates the saved buffers of a compiled backward to its outputs unless
        # told otherwise, which forbids replaying it (retain_graph); it is a memory optimization,
        # so the replayed backward times the same kernels.
        import torch._functorch.config as functorch_config

        functorch_config.donated_buffer = False
        outs, grads = pairs(fn(*inp.args, **inp.kwargs))
        return lambda: torch.autograd.grad(outs, targets, grads, retain_graph=True, allow_unused=True)

    def call():
        outs, grads = pairs(fn(*inp.args, **inp.kwargs))
        return torch.autograd.grad(outs, targets, grads, allow_unused=True)

    return call


def _tensor_inputs(inputs: Inputs, mutates: Sequence[int]) -> dict:
    """The input tensors an op must leave unchanged: position (or keyword) -> tensor."""
    found = {i: a for i, a in enumerate(inputs.args) if isinstance(a, torch.Tensor) and i not in mutates}
    found.update({k: a for k, a in inputs.kwargs.items() if isinstance(a, torch.Tensor)})
    return found


def _restore_changed(live: dict, pristine: dict) -> list:
    """Which inputs differ (bitwise) from their pristine copies; each is copied back (through
    ``.data``: no autograd version bump, so graphs built on the inputs stay usable)."""
    changed = []
    for key, t in live.items():
        if not _bitwise_equal(t.detach(), pristine[key]):
            changed.append(key)
            t.data.copy_(pristine[key])
    return changed


def _describe_shape(case: Case) -> str:
    shape = case.get("shape")
    return "x".join(map(str, shape)) if shape is not None else ""


def bench_case(
    spec: OpSpec,
    case: Case,
    dtype: torch.dtype,
    ceilings: Ceilings,
    *,
    providers: Sequence[str] | None = None,
    l2: str = "cold",
    graph: bool = False,
    device: torch.device,
    rep_ms: float = 150.0,
    host: HostOptions | None = None,
) -> list[Record]:
    """Verify, time and place every provider on one (case, dtype); one :class:`Record` each.

    With ``host`` (the host suite) the providers are timed by their wall time per call instead
    (``l2`` and ``graph`` do not apply: nothing is flushed, and the graph replay is timed beside
    the eager calls), and the records carry no device-time or roofline figures."""
    mode = case.get("mode", "fwd")
    dname = str(dtype).removeprefix("torch.")
    if host is not None:
        l2, graph = "warm", False
    base = dict(op=spec.name, case=case.name, shape=_describe_shape(case), dtype=dname, mode=mode, l2=l2, graph=graph)
    fns, skipped = provider_callables(spec, providers)
    records = {name: Record(provider=name, status=f"skipped: {why}", **base) for name, why in skipped.items()}

    inputs = spec.make_inputs(case, dtype, make_generator(BENCH_SEED, device), device)
    grad_pos = spec.grad_args if mode in ("fwd_bwd", "bwd") else ()
    dy_fill = case.get("grad_output", "normal")
    expected, refs = reference_outputs(spec, inputs, grad_pos, BENCH_SEED, dy_fill)
    dys = []
    if grad_pos:
        outs = [v for n, v in expected if n.startswith("out")]
        dys = _grad_outputs(outs, BENCH_SEED + 1, None, "contiguous", dy_fill)
    # A provider that writes into its inputs (rule 5) is reported, and the inputs are put back
    # before anyone else runs; it is timed on copies of its own.
    live = _tensor_inputs(inputs, spec.mutates)
    pristine = {k: t.detach().clone() for k, t in live.items()}
    writers = {}

    def verify(fn) -> tuple[bool, float, float, str]:
        got = run_outputs(fn, inputs, grad_pos, BENCH_SEED, poison=True, dy_fill=dy_fill)
        _sync(device)
        checks = check_outputs(spec, case, dtype, refs, expected, got, device)
        worst = max(checks, key=lambda c: (c.err_l2 if c.err_l2 == c.err_l2 else -1))
        detail = "; ".join(f"{c.output}: {', '.join(c.reasons)}" for c in checks if not c.passed)
        return all(c.passed for c in checks), worst.err_l2, worst.budget_l2, detail

    timed = {}
    verdicts = {}
    for name, fn in fns.items():
        try:
            run_outputs(fn, inputs, grad_pos, BENCH_SEED, poison=False, dy_fill=dy_fill)  # compile / autotune outside the checks
            _sync(device)
            changed = _restore_changed(live, pristine)  # (a writer's warm-up must not spoil its own check)
            verdicts[name] = verify(fn)
            _sync(device)
            changed = sorted(set(changed) | set(_restore_changed(live, pristine)), key=str)
            call = _timed_call(fn, inputs.map(lambda t: t.detach().clone()) if changed else inputs, grad_pos, dys, mode)
            call()  # the timed closure itself must run (a "bwd" replay, for one)
            _sync(device)
            if not changed:
                changed = _restore_changed(live, pristine)
                if changed:
                    call = _timed_call(fn, inputs.map(lambda t: t.detach().clone()), grad_pos, dys, mode)
            if changed:
                writers[name] = changed
        except Exception as exc:  # a provider that cannot run this case is recorded, not hidden
            records[name] = Record(provider=name, status=f"error: {type(exc).__name__}: {str(exc)[:200]}", **base)
            _sync(device)
            _restore_changed(live, pristine)
            continue
        timed[name] = call

    # Plans recorded by the verification hold its poisoning of every new allocation (a fill per
    # buffer): the timed calls make their own, as a user's would.
    from ..ops._runtime import clear_plans

    clear_plans()
    if not timed:
        timings = {}
    elif host is not None:
        timings = host_time_providers(timed, device=device, calls=host.calls, graph_calls=host.graph_calls,
                                      repeats=host.repeats, graph=host.graph)
    else:
        timings = time_providers(timed, device=device, l2=l2, graph=graph, rep_ms=rep_ms)
    cost = spec.cost(case, dtype) if host is None else None
    # A provider timed on the shared inputs that wrote into them only during the timing loop
    # cannot be told from the others there: every record says so, and none counts as verified.
    during = _restore_changed(live, pristine)
    for name, t in timings.items():
        ok, err, budget, detail = verdicts[name]
        ok_after, _, _, detail_after = verify(fns[name])  # re-verified after the timing loop
        _sync(device)
        writers.setdefault(name, _restore_changed(live, pristine))
        if ok and not ok_after:
            ok, detail = False, f"after timing: {detail_after}"
        if writers[name]:
            ok = False
            detail = f"writes into its input(s) {', '.join(map(str, writers[name]))} (timed on copies); {detail}"
        if during:
            ok = False
            detail = (f"input(s) {', '.join(map(str, during))} changed during the timing loop (a provider wrote "
                      f"into them): times on altered data; {detail}")
        if host is not None:
            graphed = not math.isnan(t.graph_us)
            records[name] = Record(
                provider=name, status="ok", wall_us=t.wall_us, graph_us=t.graph_us if graphed else None,
                host_calls=t.calls, graph_calls=t.graph_calls if graphed else None,
                verified=ok, err_l2=err, budget_l2=budget, verify_detail=detail, method=t.method, **base,
            )
            continue
        p = place(cost, t.median_ms, ceilings, dtype, matrix=spec.matrix, l2=l2)
        records[name] = Record(
            provider=name, status="ok",
            median_ms=t.median_ms, p20_ms=t.p20_ms, p80_ms=t.p80_ms, reps=t.reps, wall_us=t.wall_us,
            gbps=p.gbps, tflops=p.tflops, intensity=p.intensity, bound=p.bound, roof_pct=p.roof_pct,
            implausible=p.implausible, verified=ok, err_l2=err, budget_l2=budget, verify_detail=detail,
            flops=cost.flops, bytes=cost.bytes, method=t.method, **base,
        )
    if spec.describe is not None and ROOFKIT in records and records[ROOFKIT].status == "ok":
        try:
            records[ROOFKIT].notes = spec.describe(case, dtype, device)
        except Exception as exc:  # a description must never cost the measurement
            records[ROOFKIT].notes = f"describe failed: {type(exc).__name__}"
    per_call = (lambda r: r.wall_us) if host is not None else (lambda r: r.median_ms)  # noqa: E731
    torch_time = per_call(records[TORCH]) if TORCH in records and records[TORCH].status == "ok" else None
    for r in records.values():
        if torch_time and per_call(r):
            r.speedup_vs_torch = torch_time / per_call(r)
    order = [ROOFKIT] + list(spec.baselines)
    del inputs, expected, refs, timed
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return [records[n] for n in order if n in records]


def bench_items(specs: Iterable[OpSpec], suite: str) -> list[tuple[OpSpec, Case, torch.dtype]]:
    """Every (op, case, dtype) of ``suite`` across ``specs``."""
    return [(s, c, d) for s in specs for c in s.suites.get(suite, ()) for d in s.case_dtypes(c)]
