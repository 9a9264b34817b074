"""Verified autotuning with an on-disk cache, for kernels with a few launch configurations.

    cfg = tuner.choose(key, candidates, default, run, reference, device)

A configuration is used only after its output passed verification once: on a cache miss every
candidate is run on the caller's own inputs, its output compared with ``reference()`` (a trusted
result: roofkit's default configuration checked against torch, or torch itself) by relative L2
error, and only the candidates that pass are timed (``harness.timing``: cold L2, device time). The
fastest verified one is kept in memory and in a JSON file under
``$ROOFKIT_CACHE_DIR/autotune/`` (default ``~/.cache/roofkit``), one file per (GPU name,
compute capability, driver, triton, roofkit) — the metadata is also written into every entry.

Keys are bucketed by the caller (``bucket``: the next power of two), so nearby shapes share a
result. ``ROOFKIT_AUTOTUNE=0`` (or a CPU / interpreter run, CUDA-graph capture, or a
torch.compile trace) returns ``default`` without tuning or reading the cache.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Any, Callable

import torch

from ..harness.device import cache_dir, driver_version

_LOCK = threading.Lock()


def enabled() -> bool:
    return os.environ.get("ROOFKIT_AUTOTUNE", "1") not in ("0", "", "false", "False")


def active(device: torch.device) -> bool:
    """Whether tuning (and the cache) is used for a launch on ``device`` now."""
    if not enabled() or device.type != "cuda":
        return False
    return not (torch.cuda.is_current_stream_capturing() or torch.compiler.is_compiling())


def _time_ms(fn: Callable[[], Any]) -> float:
    """Median device time of ``fn`` as ``roofkit bench`` measures it (CUDA events, L2 flushed
    before each call, the host's enqueue time hidden behind a device-side sleep), so the tuner
    ranks candidates by the figure the benchmark reports. (triton.testing.do_bench counts host
    time when a call is shorter than its launch overhead: at GEMV sizes it preferred one launch
    over split-K for that reason alone.)"""
    from ..harness.timing import time_providers

    t = time_providers({"candidate": fn}, warmup_ms=5.0, rep_ms=30.0, min_reps=5, wall_calls=1)
    return t["candidate"].median_ms


def bucket(n: int) -> int:
    """Nearby sizes share a key: the next power of two (0 stays 0)."""
    n = int(n)
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


def metadata(device: torch.device) -> dict:
    import triton

    from .. import __version__

    props = torch.cuda.get_device_properties(device)
    return {
        "gpu": props.name,
        "capability": f"{props.major}.{props.minor}",
        "driver": driver_version(),
        "triton": triton.__version__,
        "roofkit": __version__,
        "torch": torch.__version__,
    }


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    o = out.double()
    r = ref.double()
    if not torch.isfinite(o).all():
        return float("inf")
    den = torch.linalg.vector_norm(r).item()
    num = torch.linalg.vector_norm(o - r).item()
    return num / den if den > 0 else num


class Tuner:
    """One tuner per kernel family. ``decode``/``encode`` turn a configuration into JSON and back."""

    def __init__(self, name: str, encode: Callable[[Any], dict], decode: Callable[[dict], Any], tol: dict,
                 timer: Callable[[Callable[[], Any]], float] = _time_ms):
        self.name = name
        self.timer = timer
        self.encode = encode
        self.decode = decode
        self.tol = tol  # dtype -> largest relative L2 error a candidate may have against the reference
        self.mem: dict[str, Any] = {}
        self.log: dict[str, dict] = {}  # key -> what the last tuning measured (for reports)
        self._disk: dict[str, dict] | None = None
        self._path: Path | None = None

    # -- cache ---------------------------------------------------------------------------------
    def _file(self, meta: dict) -> Path:
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(str(meta[k]) for k in ("gpu", "capability", "driver", "triton", "roofkit")))
        return cache_dir() / "autotune" / f"{self.name}-{stem}.json"

    def _load(self, meta: dict) -> dict:
        if self._disk is None:
            self._path = self._file(meta)
            try:
                data = json.loads(self._path.read_text())
                self._disk = data if isinstance(data, dict) else {}
            except (OSError, ValueError):
                self._disk = {}
        return self._disk

    def _save(self, key: str, entry: dict) -> None:
        assert self._disk is not None and self._path is not None
        self._disk[key] = entry
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self._disk, indent=1, sort_keys=True))
            tmp.replace(self._path)
        except OSError:
            pass  # a read-only cache directory only costs re-tuning in the next process

    # -- choice --------------------------------------------------------------------------------
    def choose(self, key: str, candidates, default, run: Callable[[Any], torch.Tensor],
               reference: Callable[[], torch.Tensor], device: torch.device, dtype: torch.dtype):
        """The configuration for ``key``: cached, or tuned now. ``candidates``: an iterable, or a
        zero-argument callable building it (called only on a cache miss: the hit path stays cheap)."""
        if not active(device):
            return default
        if key in self.mem:
            return self.mem[key]
        with _LOCK:
            meta = metadata(device)
            disk = self._load(meta)
            hit = disk.get(key)
            if hit and hit.get("verified") and hit.get("meta") == meta:
                cfg = self.decode(hit["config"])
                self.mem[key] = cfg
                return cfg
            cfg, entry = self._tune(candidates() if callable(candidates) else candidates, default, run, reference, dtype)
            entry["meta"] = meta
            self.mem[key] = cfg
            self.log[key] = entry
            if entry["verified"]:
                self._save(key, entry)
            return cfg

    def _tune(self, candidates, default, run, reference, dtype):
        ref = reference()
        tol = self.tol.get(dtype, 1e-2)
        results = []
        for cand in dict.fromkeys([default, *candidates]):
            try:
                err = rel_l2(run(cand), ref)
                if not err <= tol:
                    results.append({"config": self.encode(cand), "error": err, "status": "failed verification"})
                    continue
                ms = self.timer(lambda: run(cand))
                results.append({"config": self.encode(cand), "error": err, "ms": ms, "status": "ok"})
            except Exception as exc:  # a configuration the compiler or the device refuses
                results.append({"config": self.encode(cand), "status": f"error: {type(exc).__name__}: {str(exc)[:200]}"})
        ok = [r for r in results if r["status"] == "ok"]
        if not ok:
            return default, {"config": self.encode(default), "verified": False, "candidates": results}
        best = min(ok, key=lambda r: r["ms"])
        return self.decode(best["config"]), {"config": best["config"], "ms": best["ms"], "verified": True, "candidates": results}
