"""Readable tables of benchmark records, and comparisons of two runs."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape
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
            t.add_row(r.op, r.case, r.dtype, r.provider, *["-"] * 7, escape(r.status), "-", *extra, style="dim")
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



# ----------------------------------------------------------------------------- host suite

HOST_PAIR = ("torch", "roofkit")


def is_host_record(r: Record) -> bool:
    """A row timed by the host suite (wall time of back-to-back calls)."""
    return r.host_calls is not None


def split_host(records: list[Record]) -> tuple[list[Record], list[Record]]:
    """(device-time records, host-suite records) of one results file: a (op, case, dtype, mode)
    belongs to the host suite when any of its providers was timed by it (its skipped or failed
    providers go with it)."""
    host_keys = {r.key()[:4] for r in records if is_host_record(r)}
    host = [r for r in records if r.key()[:4] in host_keys]
    return [r for r in records if r.key()[:4] not in host_keys], host


def host_geomean(records: list[Record]) -> tuple[float | None, int]:
    """(geometric mean of roofkit wall_us / torch wall_us over the cases where both were timed,
    number of such cases); (None, 0) when there is none. A geometric mean, so that one case twice
    as slow and one twice as fast cancel out."""
    ratios = [row["roofkit/torch"] for row in host_rows(records)[1] if row["roofkit/torch"] is not None]
    if not ratios:
        return None, 0
    return math.exp(sum(math.log(x) for x in ratios) / len(ratios)), len(ratios)


def host_rows(records: list[Record], *, every_graph: bool = False) -> tuple[list[str], list[dict]]:
    """The host suite's wide layout: one row per (op, case, dtype, mode) with torch's and
    roofkit's wall_us, the ratio roofkit/torch, every other provider's wall_us, and graph_us
    (torch's and roofkit's; every provider's with ``every_graph``). Returns (columns, rows);
    a cell is a float, a string, or None where the provider was not timed."""
    groups: dict[tuple, dict[str, Record]] = {}
    for r in records:
        groups.setdefault((r.op, r.case, r.dtype, r.mode), {})[r.provider] = r
    others = []
    for by_provider in groups.values():
        others += [p for p in by_provider if p not in HOST_PAIR and p not in others]
    graphs = list(HOST_PAIR) + (others if every_graph else [])
    columns = (["op", "case", "dtype", "mode", "torch wall us", "roofkit wall us", "roofkit/torch"]
               + [f"{p} wall us" for p in others] + [f"{p} graph us" for p in graphs] + ["roofkit verified"])

    def timed(r: Record | None, field: str) -> float | None:
        return getattr(r, field) if r is not None and r.status == "ok" else None

    rows = []
    for (op, case, dtype, mode), by_provider in groups.items():
        t, k = timed(by_provider.get("torch"), "wall_us"), timed(by_provider.get("roofkit"), "wall_us")
        ours = by_provider.get("roofkit")
        row = {"op": op, "case": case, "dtype": dtype, "mode": mode, "torch wall us": t, "roofkit wall us": k,
               "roofkit/torch": k / t if t and k else None}
        for p in others:
            row[f"{p} wall us"] = timed(by_provider.get(p), "wall_us")
        for p in graphs:
            row[f"{p} graph us"] = timed(by_provider.get(p), "graph_us")
        row["roofkit verified"] = None if ours is None or ours.verified is None else ("yes" if ours.verified else "NO")
        rows.append(row)
    return columns, rows


def host_table(records: list[Record], title: str = "roofkit bench --suite host") -> Table:
    """The host suite's table: per case, torch's and roofkit's wall time per call, their ratio,
    the other providers' wall time, and torch's and roofkit's CUDA-graph time per call; the
    caption gives the geometric mean of roofkit/torch."""
    columns, rows = host_rows(records)
    geo, n = host_geomean(records)
    caption = (f"geomean roofkit/torch wall us per call over {n} case(s): {geo:.2f}x" if geo is not None
               else "geomean roofkit/torch: no case with both timed")
    t = Table(title=title, caption=caption)
    for col in columns:
        t.add_column(col, justify="left" if col in ("op", "case", "dtype", "mode", "roofkit verified") else "right")
    for row in rows:
        cells = []
        for col in columns:
            v = row[col]
            if col == "roofkit/torch":
                cells.append(_fmt(v, ".2f") + "x" if v is not None else "-")
            elif col == "roofkit verified":
                cells.append({"NO": "[red]NO[/red]", None: "-"}.get(v, v))
            elif isinstance(v, float):
                cells.append(_fmt(v, ".1f"))
            else:
                cells.append("-" if v is None else str(v))
        t.add_row(*cells)
    return t


def write_host_csv(path, records: list[Record]) -> Path:
    """The host suite's wide layout as CSV (every provider's graph_us), ending with a
    ``geomean`` row whose roofkit/torch cell is the geometric mean over the cases above it."""
    path = Path(path)
    columns, rows = host_rows(records, every_graph=True)
    geo, n = host_geomean(records)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for row in rows:
            w.writerow({k: "" if v is None else v for k, v in row.items()})
        w.writerow({"op": "geomean", "case": f"roofkit/torch over {n} case(s)",
                    "roofkit/torch": "" if geo is None else geo})
    return path


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
