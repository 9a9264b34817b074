"""Benchmark records: one per (op, case, dtype, provider), written as JSON and CSV with the
environment and the measured ceilings."""

from __future__ import annotations

import csv
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

FIELDS = (
    "op", "case", "shape", "dtype", "mode", "provider", "status",
    "median_ms", "p20_ms", "p80_ms", "reps", "wall_us", "graph_us", "host_calls", "graph_calls",
    "gbps", "tflops", "intensity", "bound", "roof_pct", "implausible",
    "verified", "err_l2", "budget_l2", "verify_detail", "speedup_vs_torch",
    "flops", "bytes", "l2", "graph", "method", "notes",
)


@dataclass
class Record:
    """One benchmark row. Times in ms (wall time per call in us), GB/s = 1e9 B/s,
    TFLOP/s = 1e12 FLOP/s; ``roof_pct`` is the percent of the measured roof reached;
    ``status`` is ``ok``, ``skipped: ...`` or ``error: ...``.

    Rows of the host suite (``host_calls`` set) measure what a call costs the host instead of the
    device: ``wall_us`` per call over ``host_calls`` back-to-back calls and one synchronize,
    ``graph_us`` per call over one CUDA-graph replay of ``graph_calls`` calls (None when the
    provider could not be captured); they carry no device-time, roofline or cost figures, and
    ``speedup_vs_torch`` is torch's ``wall_us`` over this row's."""

    op: str
    case: str
    shape: str
    dtype: str
    mode: str
    provider: str
    status: str = "ok"
    median_ms: float | None = None
    p20_ms: float | None = None
    p80_ms: float | None = None
    reps: int | None = None
    wall_us: float | None = None
    graph_us: float | None = None
    host_calls: int | None = None
    graph_calls: int | None = None
    gbps: float | None = None
    tflops: float | None = None
    intensity: float | None = None
    bound: str | None = None
    roof_pct: float | None = None
    implausible: bool | None = None
    verified: bool | None = None
    err_l2: float | None = None
    budget_l2: float | None = None
    verify_detail: str = ""
    speedup_vs_torch: float | None = None
    flops: float | None = None
    bytes: float | None = None
    l2: str = "cold"
    graph: bool = False
    method: str = ""
    notes: str = ""

    def key(self) -> tuple:
        return (self.op, self.case, self.dtype, self.mode, self.provider)


def write_results(folder, records: list[Record], environment: dict, ceilings: dict | None) -> dict[str, Path]:
    """Write ``results.json`` and ``results.csv`` into ``folder``; returns their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rows = [dataclasses.asdict(r) for r in records]
    jpath = folder / "results.json"
    jpath.write_text(json.dumps({"environment": environment, "ceilings": ceilings, "records": rows}, indent=1, default=str))
    cpath = folder / "results.csv"
    with cpath.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in FIELDS})
    return {"json": jpath, "csv": cpath}


def load_results(path) -> tuple[dict, dict | None, list[Record]]:
    """(environment, ceilings, records) of a ``results.json`` (or of the folder holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    data = json.loads(path.read_text())
    names = {f.name for f in dataclasses.fields(Record)}
    recs = [Record(**{k: v for k, v in r.items() if k in names}) for r in data["records"]]
    return data.get("environment", {}), data.get("ceilings"), recs
