"""Facts and ceilings of the GPU in hand: read from the device, measured, cached.

``measure_ceilings`` measures this GPU (copy and read bandwidth, matrix throughput per dtype
through large GEMMs in PyTorch); ``load_ceilings`` reads the cache keyed by (GPU, driver, torch
version) or measures. A cache file that is damaged, of the wrong shape or measured elsewhere is
ignored with one warning and measured anew (``harness.cache``: written atomically, under a lock).
``DATASHEET`` holds vendors' dense figures, shown beside the measurement, never instead of it.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import cache

# Vendor datasheet figures, dense (no sparsity). Units in the names. None: not offered.
DATASHEET: dict[str, dict[str, float | None]] = {
    "A100 SXM4 80GB": dict(hbm_gbps=2039, bf16_tflops=312, fp16_tflops=312, tf32_tflops=156, fp32_tflops=19.5, fp8_tflops=None, int8_tops=624),
    "H100 SXM5": dict(hbm_gbps=3350, bf16_tflops=989, fp16_tflops=989, tf32_tflops=495, fp32_tflops=67, fp8_tflops=1979, int8_tops=1979),
    "H100 PCIe": dict(hbm_gbps=2000, bf16_tflops=756, fp16_tflops=756, tf32_tflops=378, fp32_tflops=51, fp8_tflops=1513, int8_tops=1513),
    "H200 SXM": dict(hbm_gbps=4800, bf16_tflops=989, fp16_tflops=989, tf32_tflops=495, fp32_tflops=67, fp8_tflops=1979, int8_tops=1979),
    "L40S": dict(hbm_gbps=864, bf16_tflops=362, fp16_tflops=362, tf32_tflops=183, fp32_tflops=91.6, fp8_tflops=733, int8_tops=733),
    "RTX 4090": dict(hbm_gbps=1008, bf16_tflops=165, fp16_tflops=165, tf32_tflops=82.6, fp32_tflops=82.6, fp8_tflops=330, int8_tops=661),
    "B200": dict(hbm_gbps=8000, bf16_tflops=2250, fp16_tflops=2250, tf32_tflops=1100, fp32_tflops=75, fp8_tflops=4500, int8_tops=4500),
    "MI300X": dict(hbm_gbps=5300, bf16_tflops=1307, fp16_tflops=1307, tf32_tflops=654, fp32_tflops=163, fp8_tflops=2615, int8_tops=2615),
}

# How device names (torch.cuda.get_device_name) map to datasheet rows; first match wins.
_NAME_PATTERNS = [
    (r"H200", "H200 SXM"),
    (r"H100.*PCIe", "H100 PCIe"),
    (r"H100", "H100 SXM5"),
    (r"A100", "A100 SXM4 80GB"),
    (r"L40S", "L40S"),
    (r"4090", "RTX 4090"),
    (r"B200", "B200"),
    (r"MI300X", "MI300X"),
]


def datasheet_for(name: str) -> tuple[str, dict] | None:
    """(row name, figures) of the datasheet row matching a device name, or None."""
    for pattern, row in _NAME_PATTERNS:
        if re.search(pattern, name, flags=re.IGNORECASE):
            return row, DATASHEET[row]
    return None


@dataclass
class DeviceInfo:
    """What the device says about itself."""

    name: str
    sm_count: int
    l2_bytes: int
    total_memory_bytes: int
    capability: str
    driver: str


def driver_version() -> str:
    """The NVIDIA driver version through NVML, or 'unknown'."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return "unknown"


def sm_clock_mhz(index: int = 0) -> dict:
    """Current and maximum SM clock in MHz through NVML ({} where unreadable)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            return {
                "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "sm_clock_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
            }
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return {}


def gpu_local_cpus(index: int = 0) -> set[int]:
    """The CPUs NVML names as closest to GPU ``index`` (its NUMA node's), among those this process
    may run on; empty where unreadable or where that leaves none."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            words = os.cpu_count() // 64 + 1
            mask = pynvml.nvmlDeviceGetCpuAffinity(h, words)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return set()
    cpus = {64 * w + b for w, bits in enumerate(mask) for b in range(64) if int(bits) >> b & 1}
    return cpus & os.sched_getaffinity(0)


def device_info(device: torch.device | str | None = None) -> DeviceInfo:
    """Facts read from the CUDA device (RuntimeError without one)."""
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device")
    device = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
    p = torch.cuda.get_device_properties(device)
    return DeviceInfo(
        name=p.name,
        sm_count=p.multi_processor_count,
        l2_bytes=p.L2_cache_size,
        total_memory_bytes=p.total_memory,
        capability=f"{p.major}.{p.minor}",
        driver=driver_version(),
    )


def environment(device: torch.device | str | None = None) -> dict:
    """The environment every record carries: GPU, driver, CUDA, torch, triton, roofkit, clocks, date."""
    import triton

    import roofkit

    env = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "roofkit": roofkit.__version__,
        "cuda": torch.version.cuda,
        "host": platform.node(),
    }
    if torch.cuda.is_available():
        info = device_info(device)
        env.update(gpu=info.name, driver=info.driver, sm_count=info.sm_count, l2_bytes=info.l2_bytes, capability=info.capability)
        index = torch.device(device).index if device is not None else None
        env.update(sm_clock_mhz(index if index is not None else torch.cuda.current_device()))
    else:
        env.update(gpu=None, driver=None)
    return env


@dataclass
class Ceilings:
    """Measured ceilings of one GPU. Bandwidths in GB/s (1e9 B/s); matrix rates in TFLOP/s
    (TOP/s for int8), keyed by dtype name (bf16, fp16, tf32, fp32, fp8_e4m3, int8)."""

    gpu: str
    driver: str
    torch: str
    copy_gbps: float
    read_gbps: float
    matmul_tflops: dict[str, float]
    l2_bytes: int
    sm_count: int
    measured_at: str
    method: str
    extra: dict = field(default_factory=dict)

    @property
    def bandwidth_gbps(self) -> float:
        """The memory roof: the larger of the measured copy and read bandwidths."""
        return max(self.copy_gbps, self.read_gbps)

    def peak_tflops(self, dtype: torch.dtype, matrix: bool) -> float:
        """Compute roof for an op in ``dtype``: the matrix rate when it runs on matrix units,
        else the float32 rate measured without tensor cores (a proxy for the vector units)."""
        if not matrix:
            return self.matmul_tflops["fp32"]
        key = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "tf32", torch.int8: "int8"}.get(dtype)
        if key is None and "float8" in str(dtype):
            key = "fp8_e4m3"
        return self.matmul_tflops.get(key, self.matmul_tflops["fp32"])


def cache_dir() -> Path:
    """``$ROOFKIT_CACHE_DIR`` or ``~/.cache/roofkit``."""
    return Path(os.environ.get("ROOFKIT_CACHE_DIR", Path.home() / ".cache" / "roofkit"))


# How the ceilings are measured, in the cache file's name: a file measured another way is not read.
# 3: the read roof is the best of several read kernels (_read_calls); a GEMM roof is measured in
# rounds until two in a row agree (GEMM_AGREE), the best rate of every round kept.
# 2: the GEMM roofs are the best of PyTorch's and roofkit's GEMMs over GEMM_SHAPES (1: cuBLAS, 8192^3).
CEILINGS_METHOD = 3


def _cache_path(info: DeviceInfo) -> Path:
    key = re.sub(r"[^A-Za-z0-9._-]+", "_",
                 f"{info.name}-{info.driver}-torch{torch.__version__}-method{CEILINGS_METHOD}")
    return cache_dir() / "ceilings" / f"{key}.json"


# GEMM shapes (M, N, K) the matrix roofs are measured on: the square one and two of a Llama MLP's
# (8192 tokens); a roof is the best rate any of them reaches.
GEMM_SHAPES = ((8192, 8192, 8192), (8192, 14336, 4096), (8192, 4096, 14336))


def _gemm_calls(dtype_name: str, m: int, n: int, k: int, device: torch.device) -> dict | None:
    """Zero-argument GEMM calls of this dtype and shape: PyTorch's (cuBLAS; torch._scaled_mm for
    fp8, torch._int_mm for int8) and, for bf16 / fp16 / fp8 / int8, roofkit's own (on the H200
    its ping-pong GEMMs run faster than cuBLAS at these shapes: a roof measured on cuBLAS alone
    sat below the rates measured rows reached). roofkit's is kept only if it agrees with PyTorch's
    (relative L2 error < 1e-2). None: this dtype cannot run here."""
    g = torch.Generator(device=device)
    g.manual_seed(0)
    a32 = torch.randn(m, k, device=device, generator=g)
    b32 = torch.randn(k, n, device=device, generator=g)
    calls = {}
    if dtype_name in ("bf16", "fp16"):
        dt = torch.bfloat16 if dtype_name == "bf16" else torch.float16
        a, b = a32.to(dt), b32.to(dt)
        calls["torch"] = lambda: a @ b  # noqa: E731
        from ..ops.matmul import matmul

        calls["roofkit"] = lambda: matmul(a, b)  # noqa: E731
    elif dtype_name in ("tf32", "fp32"):
        a, b = a32, b32
        allow = dtype_name == "tf32"

        def fn():
            prev = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = allow
            try:
                return a @ b
            finally:
                torch.backends.cuda.matmul.allow_tf32 = prev

        calls["torch"] = fn
    elif dtype_name == "fp8_e4m3":
        if torch.cuda.get_device_capability(device) < (8, 9) or not hasattr(torch, "_scaled_mm"):
            return None
        a = a32.to(torch.float8_e4m3fn)
        b = b32.to(torch.float8_e4m3fn).t().contiguous().t()  # column-major second operand
        one = torch.ones((), device=device)
        calls["torch"] = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
        from ..ops.quant.gemm import scaled_mm

        calls["roofkit"] = lambda: scaled_mm(a, b, one, one, out_dtype=torch.bfloat16)  # noqa: E731
    elif dtype_name == "int8":
        a = torch.randint(-64, 64, (m, k), device=device, dtype=torch.int8, generator=g)
        # column-major second operand: cuBLAS's int8 GEMM runs an order of magnitude slower on a
        # row-major one (the H200: 130 TOP/s against roofkit's 1187 at 8192^3)
        b = torch.randint(-64, 64, (n, k), device=device, dtype=torch.int8, generator=g).t()
        calls["torch"] = lambda: torch._int_mm(a, b)  # noqa: E731
        from ..ops.quant.gemm import int8_matmul

        one = torch.ones((), device=device)
        calls["roofkit"] = lambda: int8_matmul(a, b, one, None, one, None, out_dtype=torch.float32)  # noqa: E731
    else:
        raise ValueError(dtype_name)
    if "roofkit" in calls:
        from ..ops._autotune import rel_l2

        try:
            ok = rel_l2(calls["roofkit"](), calls["torch"]()) < 1e-2
        except Exception:  # noqa: BLE001 (roofkit's GEMM cannot run here: PyTorch's alone)
            ok = False
        if not ok:
            del calls["roofkit"]
    return calls


# A GEMM roof's rounds: a GPU's matrix rate moves with its clocks, which settle under sustained
# load (on the H200 two measurements minutes apart differed by up to 8 %); rounds repeat until the
# best rates of two in a row agree within GEMM_AGREE, at most GEMM_ROUNDS, and the best of all is the roof.
GEMM_ROUNDS = 4
GEMM_AGREE = 0.01


def _gemm_roof(dtype_name: str, device: torch.device, shapes=GEMM_SHAPES) -> tuple[float, dict, int] | None:
    """(roof TFLOP/s, {"provider MxNxK": best TFLOP/s over the rounds}, rounds) of this dtype's GEMMs:
    ``_gemm_tflops`` repeated until two rounds in a row agree (see GEMM_ROUNDS), or None where the
    dtype cannot run here."""
    best: dict[str, float] = {}
    previous = None
    for rounds in range(1, GEMM_ROUNDS + 1):
        r = _gemm_tflops(dtype_name, device, shapes)
        if r is None:  # (cannot run here; a later round failing keeps the rounds before it)
            return (max(best.values()), best, rounds - 1) if best else None
        top, rates = r
        for k, v in rates.items():
            best[k] = max(best.get(k, 0.0), v)
        if previous is not None and abs(top - previous) <= GEMM_AGREE * max(top, previous):
            break
        previous = top
    return max(best.values()), best, rounds


def _read_calls(src: torch.Tensor) -> dict:
    """Zero-argument calls that read all of the 1-D float32 ``src`` once and write next to nothing:
    PyTorch's sum and row-wise amax (of the bytes as fp32 and as bf16), and roofkit's (on the H200
    roofkit's row-wise amax read bf16 logits at 103 % of a roof measured on torch.sum alone).
    roofkit's are kept only where they agree with PyTorch's, so ``src`` must be finite read both
    ways (``_read_source``): a NaN in every row would let an amax that reads part of a row agree."""
    def rows_of(t):
        return t.view(-1, 1 << 17) if t.numel() % (1 << 17) == 0 else t.view(1, -1)

    # The same bytes as fp32 and as bf16 (rows of 2**17 values: 8192 bf16 rows of 2 GiB, the shape
    # of a Llama 3 vocabulary's logits): a kernel's load width follows the dtype.
    rows = {"fp32": rows_of(src), "bf16": rows_of(src.view(torch.bfloat16))}
    calls = {"torch.sum": lambda: src.sum()}  # noqa: E731
    for name, r in rows.items():
        calls[f"torch.amax {name}"] = lambda r=r: torch.amax(r, dim=-1)  # noqa: E731
    try:
        from ..ops.reduce import amax, sum as rk_sum

        if torch.allclose(rk_sum(src).double(), src.double().sum(), rtol=1e-4, atol=1e-2):
            calls["roofkit.sum"] = lambda: rk_sum(src)  # noqa: E731
        for name, r in rows.items():
            if torch.equal(amax(r, dim=-1), torch.amax(r, dim=-1)) and _finds_planted_maxima(amax, r):
                calls[f"roofkit.amax {name}"] = lambda r=r: amax(r, dim=-1)  # noqa: E731
    except Exception:  # noqa: BLE001 (roofkit's reductions cannot run here: PyTorch's alone)
        pass
    return calls


def _finds_planted_maxima(amax, rows: torch.Tensor) -> bool:
    """Whether the row-wise ``amax`` finds a maximum planted in every row at each of 18 columns
    (the first, the last and one in every sixteenth of the row; each put back after): a kernel
    that skipped a prefix, a suffix or any sixteenth of the rows would miss one. (On random data
    alone such a kernel usually agrees: the maximum rarely sits in the part it skips.)"""
    n = rows.shape[-1]
    sixteenth = max(1, n // 16)
    cols = sorted({0, n - 1} | {min(n - 1, k * sixteenth + (37 * k) % sixteenth) for k in range(16)})
    top = torch.finfo(rows.dtype).max
    want = torch.full(rows.shape[:-1], top, dtype=rows.dtype, device=rows.device)
    for c in cols:
        kept = rows[:, c].clone()
        rows[:, c] = top
        try:
            found = torch.equal(amax(rows, dim=-1), want)
        finally:
            rows[:, c] = kept
        if not found:
            return False
    return True


def _read_source(nbytes: int, device) -> torch.Tensor:
    """``nbytes`` of random float32 values whose bytes are also finite bfloat16 values (each
    float32 is two random normal bf16 halves: the high one finite, so the float32 is too)."""
    return torch.randn(2 * (nbytes // 4), device=device, dtype=torch.bfloat16).view(torch.float32)


def _gemm_tflops(dtype_name: str, device: torch.device, shapes=GEMM_SHAPES) -> tuple[float, dict] | None:
    """(best TFLOP/s, {"provider MxNxK": TFLOP/s}) of this dtype's GEMMs over ``shapes`` (median of
    cold-L2 CUDA-event timings each), or None where the dtype cannot run here."""
    from .timing import time_providers

    rates = {}
    for m, n, k in shapes:
        try:
            calls = _gemm_calls(dtype_name, m, n, k, device)
            if calls is None:
                return None
            times = time_providers(calls, device=device, l2="cold", rep_ms=200)
        except RuntimeError:
            return None
        for name, t in times.items():
            rates[f"{name} {m}x{n}x{k}"] = 2 * m * n * k / (t.median_ms * 1e-3) / 1e12
        del calls
        torch.cuda.empty_cache()
    return (max(rates.values()), rates) if rates else None


def measure_ceilings(device: torch.device | str | None = None, *, gemm_shapes=GEMM_SHAPES,
                     bytes_: int = 1 << 31) -> Ceilings:
    """Measure this GPU: device-to-device copy (read+write bytes), read (the best of the read
    kernels of ``_read_calls`` over fp32), and the best GEMM rate over ``gemm_shapes`` in bf16,
    fp16, tf32, fp32, fp8 e4m3 and int8, through PyTorch and (bf16, fp16, fp8, int8) roofkit's own
    GEMMs (``_gemm_calls``), in rounds (``_gemm_roof``); every rate measured is kept in ``extra``
    (``read_gbps``, ``gemm_tflops``, ``gemm_rounds``)."""
    from .timing import time_providers

    info = device_info(device)
    device = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
    src = _read_source(bytes_, device)
    dst = torch.empty_like(src)
    reads = _read_calls(src)
    t = time_providers({"copy": lambda: dst.copy_(src), **reads}, device=device, rep_ms=300)
    copy_gbps = 2 * bytes_ / (t["copy"].median_ms * 1e-3) / 1e9
    read_every = {name: bytes_ / (t[name].median_ms * 1e-3) / 1e9 for name in reads}
    read_gbps = max(read_every.values())
    del src, dst, reads
    torch.cuda.empty_cache()
    rates, every, rounds = {}, {}, {}
    for name in ("bf16", "fp16", "tf32", "fp32", "fp8_e4m3", "int8"):
        r = _gemm_roof(name, device, gemm_shapes)
        if r is not None:
            rates[name], every[name], rounds[name] = r
    torch.cuda.empty_cache()
    shapes = ", ".join(f"{m}x{n}x{k}" for m, n, k in gemm_shapes)
    return Ceilings(
        gpu=info.name,
        driver=info.driver,
        torch=torch.__version__,
        copy_gbps=copy_gbps,
        read_gbps=read_gbps,
        matmul_tflops=rates,
        l2_bytes=info.l2_bytes,
        sm_count=info.sm_count,
        measured_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        method=(
            f"median of CUDA-event timings, cold L2; copy: {bytes_} B fp32 copy_ (bytes read + written); "
            f"read: the best of {', '.join(read_every)} over {bytes_} B fp32; GEMM: the best rate over "
            f"{shapes} (M x N x K) with random operands, through PyTorch (cuBLAS; torch._scaled_mm for fp8, "
            "torch._int_mm for int8) and roofkit's own GEMMs (bf16, fp16, fp8, int8), in rounds until the "
            f"best rates of two rounds in a row agree within {GEMM_AGREE:.0%} (at most {GEMM_ROUNDS})"
        ),
        extra={"gemm_tflops": every, "gemm_rounds": rounds, "read_gbps": read_every},
    )


def _is_real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# Ceilings field -> check of its JSON value.
_CEILING_FIELDS = {
    "gpu": lambda v: isinstance(v, str), "driver": lambda v: isinstance(v, str), "torch": lambda v: isinstance(v, str),
    "copy_gbps": _is_real, "read_gbps": _is_real,
    # (fp32 is the compute roof of every op off the matrix units: a file without it is unusable)
    "matmul_tflops": lambda v: isinstance(v, dict) and "fp32" in v
    and all(isinstance(k, str) and _is_real(x) for k, x in v.items()),
    "l2_bytes": lambda v: isinstance(v, int), "sm_count": lambda v: isinstance(v, int),
    "measured_at": lambda v: isinstance(v, str), "method": lambda v: isinstance(v, str),
    "extra": lambda v: isinstance(v, dict),
}


def _check_ceilings(info: DeviceInfo) -> cache.Clean:
    """A ceilings file holds one ``Ceilings`` (every field, of its type), measured on this GPU and
    driver under this torch (the file name says so; a copied or renamed file may not)."""

    def clean(data):
        if not isinstance(data, dict):
            return None, f"expected a JSON object of measured ceilings, found a JSON {type(data).__name__}"
        required = {f.name for f in dataclasses.fields(Ceilings)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        mistyped = {k for k, ok in _CEILING_FIELDS.items() if k in data and not ok(data[k])}
        wrong = sorted((set(data) - set(_CEILING_FIELDS)) | (required - set(data)) | mistyped)
        if wrong:
            return None, f"missing, unknown or mistyped fields: {', '.join(wrong)}"
        here = (info.name, info.driver, torch.__version__)
        if (data["gpu"], data["driver"], data["torch"]) != here:
            return None, f"measured on {data['gpu']} (driver {data['driver']}, torch {data['torch']}), not on {here[0]} (driver {here[1]}, torch {here[2]})"
        return Ceilings(**data), None

    return clean


def load_ceilings(device: torch.device | str | None = None, *, measure: bool = True, refresh: bool = False) -> Ceilings | None:
    """Cached ceilings of this GPU; measured (and cached) when missing, unusable or ``refresh``
    is set, and ``measure`` is set. A directory that cannot be written costs a measurement in the
    next process."""
    info = device_info(device)
    path = _cache_path(info)
    check = _check_ceilings(info)
    if not refresh:
        cached, problem = cache.read(path, check)
        if problem:
            cache.warn_once(path, problem)
        if cached is not None:
            return cached
    if not measure:
        return None
    c = measure_ceilings(device)
    cache.update(path, lambda current: dataclasses.asdict(c), check, indent=2)
    return c
