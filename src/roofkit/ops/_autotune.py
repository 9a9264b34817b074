"""Verified autotuning into an on-disk cache, for kernels with a few launch configurations.

    cfg = tuner.choose(key, candidates, default, run, reference, device, dtype)

Configuration is decided before a user's call, not in it: tuning is an explicit step (``roofkit
tune``, which runs ``tuning()`` over an op's benchmark suite), and an ordinary call only looks its
key up. What ``choose`` returns, by ``ROOFKIT_AUTOTUNE``:

- unset (the default): the tuned configuration cached for this key, else ``default`` (the
  caller's documented heuristic). Nothing is run or timed in the call;
- ``1``: the same, but a key missing from the cache is tuned now, inside the call (the first call
  of each new shape then takes seconds: for those who want tuning without a separate step);
- ``0``: ``default``, the cache not even read.

Inside ``tuning()`` a missing key is tuned whatever the variable says. CPU tensors (the
interpreter) always get ``default``. During CUDA-graph capture or a torch.compile trace nothing is
tuned, but the cache is still read, so a captured call launches what an eager one does.

Tuning a key: every candidate is run on the caller's own inputs, its output compared with
``reference()`` (a trusted result: roofkit's default configuration checked against torch, or
torch itself) by relative L2 error, and only the candidates that pass are timed
(``harness.timing``: cold L2, device time). The fastest verified one is kept in memory and in a
JSON file under ``$ROOFKIT_CACHE_DIR/autotune/`` (default ``~/.cache/roofkit``), one file per
(GPU name, compute capability, driver, triton, roofkit): other hardware or software never reads
it. The metadata is also written into every entry; an entry whose metadata differs from the
file's key is not used. The file is read once per process and written through
``harness.cache`` (atomic replacement, merged under a lock): a corrupt, wrongly shaped or foreign
file costs one warning and re-tuning, never a call.

Keys are bucketed by the caller (``bucket``: the next power of two), so nearby shapes share a
result.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
from pathlib import Path
from typing import Any, Callable

import torch

from .._env import TRUTHY
from ..harness import cache
from . import _runtime
from ..harness.device import cache_dir, driver_version

_LOCK = threading.Lock()  # one tuning (or cache load) at a time in a process

# The metadata that names a cache file; an entry recorded under other values is not used.
KEY_FIELDS = ("gpu", "capability", "driver", "triton", "roofkit")
_FALSY = ("0", "false", "off", "no", "n")

# Open ``tuning()`` blocks and the lists they collect choices into. Process-wide, not per thread:
# autograd runs the backward of CUDA tensors on its own threads.
_STATE = threading.Lock()
_TUNING: list[list[dict]] = []


def mode() -> str:
    """The tuning mode: "tune" (ROOFKIT_AUTOTUNE=1, or inside ``tuning()``), "off"
    (ROOFKIT_AUTOTUNE=0) or "cache" (unset: cached tuned configurations, no timing in the call)."""
    if _TUNING:
        return "tune"
    raw = os.environ.get("ROOFKIT_AUTOTUNE", "")
    value = raw.strip().lower()
    if value == "":
        return "cache"
    if value in TRUTHY:
        return "tune"
    if value in _FALSY:
        return "off"
    raise ValueError(
        f"ROOFKIT_AUTOTUNE must be 1 (tune a shape missing from the cache inside the call), 0 (default "
        f"configurations, the tuning cache unread) or unset (configurations `roofkit tune` cached, else "
        f"the defaults); got {raw!r}"
    )


def active(device: torch.device) -> bool:
    """Whether cached (or newly tuned) configurations apply to a launch on ``device``: a CUDA
    device and ROOFKIT_AUTOTUNE not 0."""
    return device.type == "cuda" and mode() != "off"


def can_time(device: torch.device) -> bool:
    """Whether candidates may be run and timed now: not while a CUDA graph is being captured or
    torch.compile traces."""
    capturing = device.type == "cuda" and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    return not (capturing or torch.compiler.is_compiling())


@contextlib.contextmanager
def tuning():
    """Inside the block a key missing from the cache is tuned in the call, whatever
    ROOFKIT_AUTOTUNE says (``roofkit tune``). Yields a list that receives one dict per choice made
    meanwhile: ``tuner``, ``key``, ``source`` ("tuned"; "cached": found in memory or on disk;
    "unverified": no candidate passed, the default is used and nothing is written) and
    ``config`` (encoded). Process-wide while open (see ``_TUNING``)."""
    seen: list[dict] = []
    with _STATE:
        _TUNING.append(seen)
    _runtime.bump_epoch()  # calls planned before would not tune
    try:
        yield seen
    finally:
        with _STATE:
            _TUNING.remove(seen)
        _runtime.bump_epoch()


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
    """What the cache is keyed by (``KEY_FIELDS``) and torch's version, recorded in each entry.
    Read once per device and process (the driver's version through NVML is slow to ask)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return dict(_metadata(index))


@functools.lru_cache(maxsize=None)
def _metadata(index: int) -> dict:
    import triton

    from .. import __version__

    props = torch.cuda.get_device_properties(index)
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
    """One tuner per kernel family. ``decode``/``encode`` turn a configuration into JSON and back;
    ``decode`` raises for a dict it cannot turn into a configuration (such a cache entry is
    dropped)."""

    def __init__(self, name: str, encode: Callable[[Any], dict], decode: Callable[[dict], Any], tol: dict,
                 timer: Callable[[Callable[[], Any]], float] = _time_ms):
        self.name = name
        self.timer = timer
        self.encode = encode
        self.decode = decode
        self.tol = tol  # dtype -> largest relative L2 error a candidate may have against the reference
        self.mem: dict[str, Any] = {}  # key -> configuration tuned or read from the cache
        self.log: dict[str, dict] = {}  # key -> what the last tuning measured (for reports)
        self._files: dict[Path, dict] = {}  # cache file -> its usable entries, read once per process
        self._misses: set[str] = set()  # keys the cache does not hold: the default, without a look-up

    # -- cache ---------------------------------------------------------------------------------
    def _file(self, meta: dict) -> Path:
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(str(meta[k]) for k in KEY_FIELDS))
        return cache_dir() / "autotune" / f"{self.name}-{stem}.json"

    def cache_file(self, device: torch.device) -> Path:
        """The file holding this tuner's configurations for ``device`` and this software."""
        return self._file(metadata(device))

    def _usable(self, entry) -> bool:
        if not (isinstance(entry, dict) and entry.get("verified") is True and isinstance(entry.get("meta"), dict)
                and isinstance(entry.get("config"), dict)):
            return False
        try:
            self.decode(entry["config"])
        except Exception:  # whatever a foreign or damaged config makes the decoder raise
            return False
        return True

    def _clean(self, meta: dict) -> cache.Clean:
        """The check of a cache file's content: a JSON object of key -> entry; only verified
        entries that decode and were recorded under this file's key are kept."""

        def clean(data):
            if not isinstance(data, dict):
                return {}, f"expected a JSON object of entries, found a JSON {type(data).__name__}"
            good, bad, foreign = {}, [], []
            for key, entry in data.items():
                if not self._usable(entry):
                    bad.append(key)
                elif any(entry["meta"].get(f) != meta[f] for f in KEY_FIELDS):
                    foreign.append(key)
                else:
                    good[key] = entry
            problems = []
            if bad:
                problems.append(f"{len(bad)} malformed entries (first: {bad[0]!r})")
            if foreign:
                problems.append(f"{len(foreign)} entries recorded for another GPU or other versions (first: {foreign[0]!r})")
            return good, "; ".join(problems) or None

        return clean

    def _load(self, meta: dict) -> dict:
        path = self._file(meta)
        if path not in self._files:
            clean = self._clean(meta)
            disk, problem = cache.read(path, clean)
            disk = disk or {}
            if problem:
                cache.warn_once(path, problem)
                rewritten = cache.update(path, lambda current: current or {}, clean)  # what was wrong, dropped
                disk = rewritten if rewritten is not None else disk
            self._files[path] = disk
        return self._files[path]

    def _save(self, meta: dict, key: str, entry: dict) -> None:
        """Merged into the file as it is now (another process may have added entries since it was
        read); a directory that cannot be written only costs re-tuning in the next process."""
        path = self._file(meta)
        merged = cache.update(path, lambda current: {**(current or {}), key: entry}, self._clean(meta))
        self._files[path] = merged if merged is not None else {**self._files.get(path, {}), key: entry}

    def _note(self, key: str, source: str, cfg) -> None:
        if _TUNING:
            with _STATE:
                for seen in _TUNING:
                    seen.append({"tuner": self.name, "key": key, "source": source, "config": self.encode(cfg)})

    # -- choice --------------------------------------------------------------------------------
    def choose(self, key: str, candidates, default, run: Callable[[Any], torch.Tensor],
               reference: Callable[[], torch.Tensor], device: torch.device, dtype: torch.dtype):
        """The configuration for ``key``: the cached one, else ``default``, else (only when tuning
        was asked for, see the module's docstring) tuned now. ``candidates``: an iterable, or a
        zero-argument callable building it (called only when tuning: the look-up stays cheap)."""
        how = mode()
        if how == "off" or not active(device):
            return default
        if key in self.mem:
            self._note(key, "cached", self.mem[key])
            return self.mem[key]
        tune = how == "tune" and can_time(device)
        if not tune and key in self._misses:
            return default
        with _LOCK:
            meta = metadata(device)
            hit = self._load(meta).get(key)
            if hit is not None:
                cfg = self.decode(hit["config"])
                self.mem[key] = cfg
                self._note(key, "cached", cfg)
                return cfg
            if not tune:
                self._misses.add(key)
                return default
            cfg, entry = self._tune(candidates() if callable(candidates) else candidates, default, run, reference, dtype)
            entry["meta"] = meta
            self.mem[key] = cfg
            self.log[key] = entry
            if entry["verified"]:
                self._save(meta, key, entry)
            self._note(key, "tuned" if entry["verified"] else "unverified", cfg)
            return cfg

    def _tune(self, candidates, default, run, reference, dtype):
        _runtime.refuse_plan("configurations timed in the call")  # a replay must not time them again
        _runtime.bump_epoch()  # plans made with the configuration used before tuning
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
