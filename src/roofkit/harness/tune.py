"""``roofkit tune``: the explicit step that decides launch configurations, so users' calls never
time anything.

For every (op, case, dtype) of one benchmark suite, for the ops that declare autotuners
(``OpSpec.tuners``): inputs are drawn as ``roofkit bench`` draws them and the op is run once
(forward, plus the backward for a case whose mode has one) inside ``ops._autotune.tuning()``, so
every launch whose configuration is not cached yet is tuned there (each candidate verified
against a trusted result, the verified ones timed) and written to the tuner's keyed cache (GPU
name, capability, driver, triton and roofkit versions). Later calls of the same shape buckets on
the same GPU and software read the cache. Needs a CUDA GPU: there is nothing to time without one.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from rich.markup import escape
from rich.table import Table

from .bench import BENCH_SEED, bench_items
from .inputs import make_generator
from .spec import Case, OpSpec
from .verify import run_outputs


@dataclass
class TuneResult:
    """What tuning one (op, case, dtype) did: ``choices`` as ``_autotune.tuning()`` collects
    them (one per launch that consulted a tuner), with ``label`` (readable configuration) and
    ``ms`` (the winner's time, when tuned now) added; ``status`` "ok" or "error: ..."."""

    op: str
    case: str
    dtype: str
    status: str
    choices: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok" and all(c["source"] != "unverified" for c in self.choices)


def tune_items(specs: Sequence[OpSpec], suite: str, cases: Sequence[str] | None = None):
    """(items to tune: (op, case, dtype) of ``suite`` for the ops with tuners, names of the ops
    with none). Raises ValueError naming ``cases`` that the suite does not hold for these ops."""
    untunable = [s.name for s in specs if not s.tuners]
    tunable = [s for s in specs if s.tuners]
    items = bench_items(tunable, suite)
    if cases and tunable:
        known = {c.name for s in tunable for c in s.suites.get(suite, ())}
        unknown = [c for c in cases if c not in known]
        if unknown:
            ops = ", ".join(s.name for s in tunable)
            raise ValueError(f"no case named {', '.join(unknown)} in suite {suite!r} of {ops}"
                             + (f"; its cases: {', '.join(sorted(known))}" if known else " (the suite holds none of their cases)"))
        items = [it for it in items if it[1].name in cases]
    return items, untunable


def tune_case(spec: OpSpec, case: Case, dtype: torch.dtype, device: torch.device) -> TuneResult:
    """Run ``spec``'s op once on ``case`` with tuning on; what each tuner chose."""
    from ..ops import _autotune  # here: importing roofkit.ops defines every kernel

    mode = case.get("mode", "fwd")
    grad_pos = spec.grad_args if mode in ("fwd_bwd", "bwd") else ()
    result = TuneResult(spec.name, case.name, str(dtype).removeprefix("torch."), "ok")
    inputs = None
    with _autotune.tuning() as seen:
        try:
            inputs = spec.make_inputs(case, dtype, make_generator(BENCH_SEED, device), device)
            run_outputs(spec.impl, inputs, grad_pos, BENCH_SEED, poison=False, dy_fill=case.get("grad_output", "normal"))
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        except Exception as exc:  # a case that cannot run is reported, and the others still tuned
            result.status = f"error: {type(exc).__name__}: {str(exc)[:200]}"
    tuners = {t.name: t for t in spec.tuners}
    for choice in _unique(seen):
        tuner = tuners.get(choice["tuner"])
        entry = tuner.log.get(choice["key"], {}) if tuner is not None else {}
        choice["ms"] = entry.get("ms") if choice["source"] == "tuned" else None
        choice["label"] = _label(tuner, choice["config"])
        result.choices.append(choice)
    del inputs
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def _unique(seen: list[dict]) -> list[dict]:
    """One choice per (tuner, key), the first (a later look-up of the same key says "cached")."""
    out: dict[tuple, dict] = {}
    for c in seen:
        out.setdefault((c["tuner"], c["key"]), c)
    return list(out.values())


def _label(tuner, config: dict) -> str:
    try:
        cfg = tuner.decode(config)
        return cfg.label() if hasattr(cfg, "label") else str(cfg)
    except Exception:
        return str(config)


def tune(items, device: torch.device) -> list[TuneResult]:
    """Tune every (op, case, dtype) of ``items`` (``tune_items``) on ``device``."""
    return [tune_case(spec, case, dtype, device) for spec, case, dtype in items]


def cache_files(specs: Sequence[OpSpec], device: torch.device) -> list[Path]:
    """The cache files the tuners of ``specs`` read and write on ``device``."""
    return sorted({t.cache_file(device) for spec in specs for t in spec.tuners})


def environment_note() -> str | None:
    """Why the ops in this environment would not read what ``tune`` writes, if they would not."""
    from ..ops import _autotune

    try:
        if _autotune.mode() == "off":
            return ("ROOFKIT_AUTOTUNE=0 is set here: ops in this environment do not read the tuning cache "
                    "(unset it to use the configurations tuned now)")
    except ValueError as exc:
        return str(exc)
    return None


def tune_table(results: list[TuneResult], title: str = "roofkit tune") -> Table:
    """One row per configuration chosen: where it came from and, when tuned now, its time."""
    t = Table(title=title)
    for col in ("op", "case", "dtype", "key", "configuration", "source", "ms"):
        t.add_column(col, justify="right" if col == "ms" else "left")
    for r in results:
        if r.status != "ok":
            t.add_row(r.op, r.case, r.dtype, "-", "-", f"[red]{escape(r.status)}[/red]", "-")
        for c in r.choices:
            source = {"tuned": "tuned now", "cached": "already cached",
                      "unverified": "[red]no candidate verified: default, not cached[/red]"}[c["source"]]
            t.add_row(r.op, r.case, r.dtype, c["key"], c["label"], source, "-" if c["ms"] is None else f"{c['ms']:.4f}")
        if r.status == "ok" and not r.choices:
            t.add_row(r.op, r.case, r.dtype, "-", "-", "no launch consulted a tuner", "-")
    return t
