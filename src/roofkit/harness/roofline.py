"""Roofline placement of a measured call, and the roofline plot.

attainable TFLOP/s = min(peak, intensity * bandwidth); a call's fraction of the roof is the time
the roof allows (max(bytes / bandwidth, flops / peak)) over the measured time. A figure above
``PLAUSIBLE`` x the roof is flagged ``implausible`` and never reported as a win.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

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


# Marker per provider (roofkit filled, every other provider hollow) and the colours ops take, in
# order: several qualitative palettes joined, so up to ~30 ops each get a colour of their own.
ROOFKIT_MARKER = "o"
PROVIDER_MARKERS = ("s", "^", "D", "v", "P", "X", "<", ">", "p", "h", "*", "d")
_PALETTES = ("tab10", "Dark2", "Set1", "tab20b")


def _op_colours(ops: Sequence[str]) -> dict:
    """One colour per op, none shared while there are fewer ops than palette colours."""
    import matplotlib

    colours, seen = [], set()
    for name in _PALETTES:
        for c in matplotlib.colormaps[name].colors:
            key = tuple(round(v, 3) for v in c[:3])
            if key not in seen:
                seen.add(key)
                colours.append(c)
    return {op: colours[i % len(colours)] for i, op in enumerate(ops)}


def _families(ops: Sequence[str], families: Mapping[str, str] | None) -> dict:
    """op -> family (panel): ``families`` where given, else the op's registered test marker (its
    family as the op declares it), else the op itself."""
    out = {}
    for op in ops:
        if families is not None and op in families:
            out[op] = families[op]
            continue
        fam = None
        if families is None:
            from . import registry

            try:
                fam = registry.get(op).marker
            except KeyError:
                pass
        out[op] = fam or op
    return out


def plot(records: list[dict], ceilings: Ceilings, path, *, title: str = "roofkit roofline",
         families: Mapping[str, str] | None = None) -> None:
    """Write the roofline PNG of :func:`figure` to ``path``."""
    figure(records, ceilings, title=title, families=families).savefig(path)


def figure(records: list[dict], ceilings: Ceilings, *, title: str = "roofkit roofline",
           families: Mapping[str, str] | None = None):
    """The roofline as a matplotlib Figure (Agg): one log-log panel per op family, each with the
    memory roof, the compute roofs and their knees, and one point per (op, case, provider) at
    (intensity, achieved TFLOP/s) for the records with status ``ok``. Colour: the op (no two ops
    share one); marker: the provider, roofkit's filled and every other provider's hollow; a red
    cross marks a figure flagged implausible. One legend, outside the panels, to the right.

    ``families`` maps op -> panel (default: the op's registered test marker, else the op).
    The figure is not registered with pyplot (no GUI backend, nothing to close)."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullFormatter

    pts = [r for r in records if r.get("status") == "ok" and r.get("tflops") and r.get("intensity")]
    fam_of = _families(sorted({r["op"] for r in pts}), families)
    panel_names = sorted(set(fam_of.values()))
    ops = sorted(fam_of, key=lambda o: (fam_of[o], o))
    colour = _op_colours(ops)
    others = sorted({r["provider"] for r in pts} - {"roofkit"})
    marker = {"roofkit": ROOFKIT_MARKER}
    marker.update({p: PROVIDER_MARKERS[i % len(PROVIDER_MARKERS)] for i, p in enumerate(others)})

    bw = ceilings.bandwidth_gbps
    roofs = [("fp32 (no tensor cores)", ceilings.matmul_tflops.get("fp32"), "-")]
    roofs += [(f"{k} matrix", ceilings.matmul_tflops[k], ls)
              for k, ls in (("bf16", "--"), ("fp8_e4m3", ":")) if ceilings.matmul_tflops.get(k)]
    roofs = [r for r in roofs if r[1]]

    n = max(1, len(panel_names))
    cols = min(3, n)
    rows = -(-n // cols)
    fig = Figure(figsize=(max(4.4 * cols, 6.0) + 3.2, 3.5 * rows + 0.9), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax, fam in zip(axes.flat, panel_names or ["(no timed rows)"]):
        mine = [r for r in pts if fam_of[r["op"]] == fam]
        xs_data = [r["intensity"] for r in mine] or [1.0]
        ys_data = [r["tflops"] for r in mine] or [1.0]
        lo, hi = min(xs_data) / 4, max(xs_data) * 4
        xs = np.logspace(np.log10(lo), np.log10(hi), 200)
        for label, peak, ls in roofs:
            ax.plot(xs, np.minimum(peak, xs * bw / 1e3), color="black", lw=1.2 if ls == "-" else 0.8, ls=ls)
            knee = peak * 1e3 / bw
            if lo <= knee <= hi:
                ax.axvline(knee, color="gray", lw=0.5, ls=":")
                ax.annotate(f"knee {knee:.0f}", (knee, peak), fontsize=6, color="gray", xytext=(3, -9),
                            textcoords="offset points")
        for r in mine:
            c = colour[r["op"]]
            roofkit = r["provider"] == "roofkit"
            ax.scatter(r["intensity"], r["tflops"], s=34 if roofkit else 30, marker=marker[r["provider"]],
                       facecolors=c if roofkit else "none", edgecolors=c, linewidths=1.0 if roofkit else 1.2,
                       zorder=3 if roofkit else 2, gid=f"{r['op']}|{r['provider']}")
            if r.get("implausible"):
                ax.scatter(r["intensity"], r["tflops"], s=14, marker="x", color="red", linewidths=0.9, zorder=4)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        roof_lo = min([min(p, lo * bw / 1e3) for _, p, _ in roofs] or [min(ys_data)])
        roof_hi = max([min(p, hi * bw / 1e3) for _, p, _ in roofs] or [max(ys_data)])
        ax.set_ylim(min(min(ys_data), roof_lo) / 2, max(max(ys_data), roof_hi) * 2)
        ax.set_title(f"{fam}: {', '.join(o for o in ops if fam_of[o] == fam)}" if mine else fam, fontsize=9)
        ax.grid(True, which="both", lw=0.3)
        ax.xaxis.set_minor_formatter(NullFormatter())  # decades only: minor labels overlap
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(labelsize=7)
    for i, ax in enumerate(axes.flat[:n]):
        if i + cols >= n:  # the lowest panel of its column
            ax.set_xlabel("FLOP / byte of ideal DRAM traffic", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("achieved TFLOP/s", fontsize=8)
    fig.suptitle(f"{title}\n{ceilings.gpu}; measured roofs: {bw:.0f} GB/s"
                 + "".join(f", {label.split()[0]} {peak:.0f}" for label, peak, _ in roofs)
                 + (" TFLOP/s" if roofs else ""), fontsize=9, x=0.01, ha="left")

    gray = "dimgray"
    handles = [Line2D([], [], ls="", marker=ROOFKIT_MARKER, markerfacecolor=gray, markeredgecolor=gray,
                      label="roofkit (filled)")]
    handles += [Line2D([], [], ls="", marker=marker[p], markerfacecolor="none", markeredgecolor=gray, label=p)
                for p in others]
    if any(r.get("implausible") for r in pts):
        handles += [Line2D([], [], ls="", marker="x", color="red", label="flagged implausible")]
    handles += [Line2D([], [], color="black", ls=ls, label=f"roof, {label}") for label, _, ls in roofs]
    handles += [Line2D([], [], ls="", marker="s", markerfacecolor=colour[o], markeredgecolor=colour[o],
                       label=f"op: {o}") for o in ops]
    fig.legend(handles=handles, loc="outside right upper", fontsize=7, title="provider (marker), op (colour)",
               title_fontsize=7, ncols=1 if len(handles) <= 12 * rows + 8 else 2)
    return fig


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
