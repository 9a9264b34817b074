"""Roofline placement of a measured call, and the roofline plot.

attainable TFLOP/s = min(peak, intensity * bandwidth); a call's fraction of the roof is the time
the roof allows (max(bytes / bandwidth, flops / peak)) over the measured time. A figure above
``PLAUSIBLE`` x the roof is flagged ``implausible`` and never reported as a win.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .device import Ceilings
from .spec import Cost

PLAUSIBLE = 1.05


@dataclass
class Placement:
    gbps: float
    tflops: float
    intensity: float
    bound: str
    roof_pct: float
    implausible: bool
    roof_gbps: float
    roof_tflops: float


def place(cost: Cost, median_ms: float, ceilings: Ceilings, dtype: torch.dtype, *, matrix: bool = False, l2: str = "cold") -> Placement:
    """Place one measurement on the roofline of ``ceilings``.

    The bandwidth roof is DRAM's; in warm-L2 mode data may come from L2, so only the compute roof
    is used for the plausibility check there.
    """
    t = median_ms * 1e-3
    bw = ceilings.bandwidth_gbps
    peak = ceilings.peak_tflops(dtype, matrix)
    gbps = cost.bytes / t / 1e9 if t > 0 else float("inf")
    tflops = cost.flops / t / 1e12 if t > 0 else float("inf")
    t_mem = cost.bytes / (bw * 1e9)
    t_cmp = cost.flops / (peak * 1e12) if peak else 0.0
    floor = max(t_mem, t_cmp)
    roof_pct = 100.0 * floor / t if t > 0 else float("inf")
    implausible = tflops > PLAUSIBLE * peak or (l2 == "cold" and gbps > PLAUSIBLE * bw)
    return Placement(
        gbps=gbps,
        tflops=tflops,
        intensity=cost.intensity,
        bound="memory" if t_mem >= t_cmp else "compute",
        roof_pct=roof_pct,
        implausible=implausible,
        roof_gbps=bw,
        roof_tflops=peak,
    )


def plot(records: list[dict], ceilings: Ceilings, path, *, title: str = "roofkit roofline") -> None:
    """Write a log-log roofline PNG: the memory roof, the compute roofs, the knee, and one point
    per (op, case, provider) at (intensity, achieved TFLOP/s)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    pts = [r for r in records if r.get("status") == "ok" and r.get("tflops")]
    fig, ax = plt.subplots(figsize=(9, 6), dpi=120)
    bw = ceilings.bandwidth_gbps
    xs = np.logspace(-2, 4, 400)
    roofs = {"fp32 (no tensor cores)": ceilings.matmul_tflops.get("fp32")}
    for k in ("bf16", "fp8_e4m3"):
        if k in ceilings.matmul_tflops:
            roofs[f"{k} matrix"] = ceilings.matmul_tflops[k]
    for i, (label, peak) in enumerate(roofs.items()):
        if not peak:
            continue
        ys = np.minimum(peak, xs * bw / 1e3)
        ax.plot(xs, ys, color="black", lw=1.6 if i == 0 else 0.9, ls="-" if i == 0 else "--",
                label=f"roof: {bw:.0f} GB/s, {label} {peak:.0f} TFLOP/s")
        knee = peak * 1e3 / bw
        ax.axvline(knee, color="gray", lw=0.6, ls=":")
        ax.annotate(f"knee {knee:.1f} FLOP/B", (knee, peak), fontsize=7, xytext=(4, -12), textcoords="offset points")
    providers = sorted({r["provider"] for r in pts})
    ops = sorted({r["op"] for r in pts})
    markers = "osD^v<>ph*"
    cmap = plt.get_cmap("tab10")
    for r in pts:
        ax.scatter(r["intensity"], r["tflops"], s=28,
                   color=cmap(providers.index(r["provider"]) % 10),
                   marker=markers[ops.index(r["op"]) % len(markers)],
                   edgecolors="red" if r.get("implausible") else "none")
    for i, p in enumerate(providers):
        ax.scatter([], [], color=cmap(i % 10), label=f"provider: {p}")
    for i, o in enumerate(ops):
        ax.scatter([], [], color="gray", marker=markers[i % len(markers)], label=f"op: {o}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte of ideal DRAM traffic)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"{title}\n{ceilings.gpu}, measured ceilings")
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


@dataclass(frozen=True)
class GemmWaves:
    """Tile and wave figures of a tiled GEMM launch (see :func:`gemm_waves`)."""

    tiles: int
    slots: int
    waves: int
    last_wave_occupancy: float
    wave_efficiency: float


def gemm_waves(M: int, N: int, K: int, BLOCK_M: int, BLOCK_N: int, sm_count: int, ctas_per_sm: int = 1) -> GemmWaves:
    """Wave quantization of an output-tiled GEMM (one program per [BLOCK_M, BLOCK_N] tile).

    tiles = ceil(M / BLOCK_M) * ceil(N / BLOCK_N); slots = sm_count * ctas_per_sm programs run
    at once; waves = ceil(tiles / slots); last_wave_occupancy = fraction of the slots the last
    wave fills; wave_efficiency = tiles / (waves * slots) (1.0: no idle slot). K does not change
    the tile count (it sets each tile's work) and is only checked. No tiles: 0 waves, both
    fractions 0.0. ValueError for negative sizes or non-positive blocks / slots.
    """
    if min(M, N, K) < 0:
        raise ValueError(f"gemm_waves: M, N, K must be >= 0, got {M}, {N}, {K}")
    if min(BLOCK_M, BLOCK_N, sm_count, ctas_per_sm) <= 0:
        raise ValueError("gemm_waves: BLOCK_M, BLOCK_N, sm_count and ctas_per_sm must be > 0")
    tiles = -(-M // BLOCK_M) * -(-N // BLOCK_N)
    slots = sm_count * ctas_per_sm
    waves = -(-tiles // slots)
    if tiles == 0:
        return GemmWaves(0, slots, 0, 0.0, 0.0)
    last = tiles - (waves - 1) * slots
    return GemmWaves(tiles, slots, waves, last / slots, tiles / (waves * slots))
