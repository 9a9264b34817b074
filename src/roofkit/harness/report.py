"""Readable tables of benchmark records, and comparisons of two runs."""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table

from .record import Record


def _fmt(v, spec: str = ".3g") -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and v != v:
        return "nan"
    return format(v, spec)


def results_table(records: list[Record], title: str = "roofkit bench") -> Table:
    """One row per record: time, GB/s, TFLOP/s, % of the measured roof, verification, speedup."""
    t = Table(title=title, show_lines=False)
    notes = any(r.notes for r in records)
    for col, just in [("op", "left"), ("case", "left"), ("dtype", "left"), ("provider", "left"),
                      ("median ms", "right"), ("p20-p80 ms", "right"), ("wall us/call", "right"), ("GB/s", "right"), ("TFLOP/s", "right"),
                      ("% roof", "right"), ("bound", "left"), ("verified", "left"), ("vs torch", "right")]:
        t.add_column(col, justify=just)
    if notes:
        t.add_column("notes", justify="left")
    for r in records:
        extra = [r.notes or ""] if notes else []
        if r.status != "ok":
            t.add_row(r.op, r.case, r.dtype, r.provider, *["-"] * 7, r.status, "-", *extra, style="dim")
            continue
        verified = {True: "yes", False: "[red]NO[/red]", None: "-"}[r.verified]
        pct = _fmt(r.roof_pct, ".1f") + (" [red]implausible[/red]" if r.implausible else "")
        t.add_row(
            r.op, r.case, r.dtype, r.provider,
            _fmt(r.median_ms, ".4f"), f"{_fmt(r.p20_ms, '.4f')}-{_fmt(r.p80_ms, '.4f')}", _fmt(r.wall_us, ".0f"),
            _fmt(r.gbps, ".0f"), _fmt(r.tflops, ".2f"), pct, r.bound or "-", verified,
            _fmt(r.speedup_vs_torch, ".2f") + "x" if r.speedup_vs_torch else "-", *extra,
        )
    return t


@dataclass
class Comparison:
    """One row present in both runs: ratio = new median / old median (> 1: slower)."""

    key: tuple
    old_ms: float
    new_ms: float
    ratio: float
    noise: float
    regression: bool
    improvement: bool


def compare_runs(old: list[Record], new: list[Record], *, min_noise: float = 0.02) -> list[Comparison]:
    """Match rows by (op, case, dtype, mode, provider); a change counts only beyond the noise,
    taken as the sum of both runs' relative p20-p80 spreads (at least ``min_noise``)."""
    base = {r.key(): r for r in old if r.status == "ok" and r.median_ms}
    out = []
    for r in new:
        o = base.get(r.key())
        if o is None or r.status != "ok" or not r.median_ms:
            continue
        spread_old = (o.p80_ms - o.p20_ms) / o.median_ms
        spread_new = (r.p80_ms - r.p20_ms) / r.median_ms
        noise = max(min_noise, spread_old + spread_new)
        ratio = r.median_ms / o.median_ms
        out.append(Comparison(r.key(), o.median_ms, r.median_ms, ratio, noise, ratio > 1 + noise, ratio < 1 - noise))
    return out


def comparison_table(rows: list[Comparison], title: str = "new vs old") -> Table:
    t = Table(title=title)
    for col in ("op", "case", "dtype", "mode", "provider", "old ms", "new ms", "new/old", "noise", "verdict"):
        t.add_column(col)
    for c in rows:
        verdict = "[red]regression[/red]" if c.regression else ("[green]faster[/green]" if c.improvement else "same")
        t.add_row(*map(str, c.key), f"{c.old_ms:.4f}", f"{c.new_ms:.4f}", f"{c.ratio:.3f}", f"±{c.noise:.1%}", verdict)
    return t
