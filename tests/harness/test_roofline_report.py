"""Roofline placement, records, reports and comparisons on hand-computed numbers."""

import json

import pytest
import torch

from roofkit.harness.device import Ceilings, datasheet_for
from roofkit.harness.record import Record, load_results, write_results
from roofkit.harness.report import compare_runs, results_table
from roofkit.harness.roofline import figure, place, plot
from roofkit.harness.spec import Cost
from roofkit.harness.timing import summarize

pytestmark = pytest.mark.harness


def _ceilings(bw=1000.0, fp32=50.0, bf16=500.0):
    return Ceilings(gpu="Test GPU", driver="0", torch="x", copy_gbps=bw, read_gbps=bw * 0.9,
                    matmul_tflops={"fp32": fp32, "bf16": bf16, "fp16": bf16, "tf32": bf16 / 2},
                    l2_bytes=1 << 20, sm_count=10, measured_at="now", method="test")


def test_place_memory_bound_fraction_of_roof():
    # 1e9 bytes, 1e9 FLOP in 2 ms on a 1000 GB/s device: the roof allows 1 ms -> 50 %.
    p = place(Cost(flops=1e9, bytes=1e9), 2.0, _ceilings(), torch.bfloat16)
    assert p.gbps == pytest.approx(500.0)
    assert p.tflops == pytest.approx(0.5)
    assert p.intensity == pytest.approx(1.0)
    assert p.bound == "memory"
    assert p.roof_pct == pytest.approx(50.0)
    assert not p.implausible


def test_place_compute_bound_uses_matrix_peak_only_for_matrix_ops():
    cost = Cost(flops=1e12, bytes=1e6)
    vec = place(cost, 40.0, _ceilings(), torch.bfloat16, matrix=False)  # 25 TFLOP/s of a 50 roof
    assert vec.bound == "compute" and vec.roof_pct == pytest.approx(50.0)
    mat = place(cost, 4.0, _ceilings(), torch.bfloat16, matrix=True)  # 250 of 500
    assert mat.roof_pct == pytest.approx(50.0)


def test_place_flags_faster_than_the_measured_roof_as_implausible():
    p = place(Cost(flops=0, bytes=1e9), 0.9, _ceilings(), torch.float32)  # 1111 GB/s > 1.05 x 1000
    assert p.implausible
    warm = place(Cost(flops=0, bytes=1e9), 0.9, _ceilings(), torch.float32, l2="warm")
    assert not warm.implausible  # warm L2 may legitimately beat DRAM
    assert not place(Cost(flops=0, bytes=1e9), 0.96, _ceilings(), torch.float32).implausible


def test_summarize_percentiles():
    t = summarize([1.0, 2.0, 3.0, 4.0, 5.0], "m")
    assert (t.median_ms, t.min_ms, t.reps) == (3.0, 1.0, 5)
    assert t.p20_ms == pytest.approx(1.8) and t.p80_ms == pytest.approx(4.2)
    with pytest.raises(ValueError):
        summarize([], "m")


def test_datasheet_matches_device_names():
    assert datasheet_for("NVIDIA H200")[0] == "H200 SXM"
    assert datasheet_for("NVIDIA H100 PCIe")[0] == "H100 PCIe"
    assert datasheet_for("NVIDIA H100 80GB HBM3")[0] == "H100 SXM5"
    assert datasheet_for("Some Other GPU") is None


def _rec(provider, median, p20=None, p80=None, **kw):
    return Record(op="softmax", case="c", shape="4x4", dtype="bfloat16", mode="fwd", provider=provider,
                  median_ms=median, p20_ms=p20 or median * 0.99, p80_ms=p80 or median * 1.01, **kw)


def test_compare_runs_flags_only_changes_beyond_noise():
    old = [_rec("roofkit", 1.0), _rec("torch", 2.0), _rec("liger", 1.0, 0.8, 1.2)]
    new = [_rec("roofkit", 1.10), _rec("torch", 1.0), _rec("liger", 1.2, 1.0, 1.4)]
    rows = {c.key[-1]: c for c in compare_runs(old, new)}
    assert rows["roofkit"].regression and rows["roofkit"].ratio == pytest.approx(1.1)
    assert rows["torch"].improvement and not rows["torch"].regression
    assert not rows["liger"].regression  # 20 % slower but within its 40 %+ spread


def test_results_round_trip_and_plot(tmp_path):
    recs = [_rec("roofkit", 1.0, gbps=900.0, tflops=0.9, intensity=1.0, roof_pct=90.0, verified=True),
            _rec("torch", 2.0, gbps=450.0, tflops=0.45, intensity=1.0, roof_pct=45.0, verified=True),
            Record(op="softmax", case="c", shape="4x4", dtype="bfloat16", mode="fwd", provider="liger", status="skipped: not installed")]
    paths = write_results(tmp_path, recs, {"gpu": "Test GPU"}, {"copy_gbps": 1000})
    env, ceil, back = load_results(tmp_path)
    assert env["gpu"] == "Test GPU" and ceil["copy_gbps"] == 1000
    assert [r.provider for r in back] == ["roofkit", "torch", "liger"]
    assert back[0].gbps == 900.0 and back[2].status.startswith("skipped")
    assert paths["csv"].read_text().splitlines()[0].startswith("op,case,shape")
    assert json.loads(paths["json"].read_text())["records"][1]["median_ms"] == 2.0
    assert results_table(back).row_count == 3
    plot([r.__dict__ for r in back], _ceilings(), tmp_path / "roofline.png", families={"softmax": "softmax"})
    assert (tmp_path / "roofline.png").read_bytes()[:4] == b"\x89PNG"


def test_roofline_plot_panels_per_family_markers_and_legend_outside(tmp_path):
    # Three families, two ops in one of them, four providers; one figure flagged implausible.
    ops = {"softmax": "softmax", "log_softmax": "softmax", "rms_norm": "norms", "matmul": "gemm"}
    recs = []
    for i, (op, _) in enumerate(ops.items()):
        intensity = 2000.0 if op == "matmul" else 1.0 + i
        for j, prov in enumerate(("roofkit", "torch", "torch.compile", "liger")):
            tflops = (300.0 if op == "matmul" else 0.5) / (1 + j)
            recs.append(dict(op=op, case=f"c{i}", provider=prov, status="ok", intensity=intensity, tflops=tflops,
                             implausible=(op == "matmul" and prov == "torch")))
    recs.append(dict(op="rms_norm", case="x", provider="flaggems", status="skipped: not installed"))
    fig = figure(recs, _ceilings(), title="test", families=ops)
    fig.canvas.draw()
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert sorted(ax.get_title().split(":")[0] for ax in panels) == ["gemm", "norms", "softmax"]
    assert "log_softmax, softmax" in next(ax.get_title() for ax in panels if ax.get_title().startswith("softmax"))

    # The legend sits outside every panel (to their right), inside the figure.
    assert len(fig.legends) == 1
    legend = fig.legends[0].get_window_extent()
    for ax in panels:
        box = ax.get_window_extent()
        assert not legend.overlaps(box) and legend.x0 >= box.x1
    assert 0 <= legend.x0 and legend.x1 <= fig.bbox.x1 + 1

    # roofkit's points filled, the others hollow; no (marker, colour) pair shared by two ops.
    seen = {}
    for ax in panels:
        for coll in ax.collections:
            gid = coll.get_gid()
            if not gid:
                continue  # the implausible crosses
            op, prov = gid.split("|")
            faces = coll.get_facecolors()
            filled = len(faces) > 0 and faces[0][3] > 0
            assert filled == (prov == "roofkit"), gid
            marker = coll.get_paths()[0].vertices.round(3).tobytes()
            key = (marker, tuple(coll.get_edgecolors()[0].round(3)))
            assert seen.setdefault(key, op) == op, f"{op} and {seen[key]} share a marker and colour"
    assert len({op for op in seen.values()}) == 4

    plot(recs, _ceilings(), tmp_path / "roofline.png", families=ops)
    assert (tmp_path / "roofline.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.gpu
def test_time_providers_reports_method_and_flushes_twice_the_l2():
    from roofkit.harness.timing import L2Flusher, time_providers

    x = torch.randn(1 << 20, device="cuda")
    t = time_providers({"a": lambda: x * 2, "b": lambda: x + 1}, rep_ms=5, min_reps=7)
    assert set(t) == {"a", "b"}
    for v in t.values():
        assert v.reps >= 7 and v.median_ms > 0 and v.p20_ms <= v.median_ms <= v.p80_ms
        assert "cold L2" in v.method and "interleaved with 1 other" in v.method
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    assert L2Flusher(torch.device("cuda")).nbytes >= 2 * l2
    g = time_providers({"a": lambda: x * 2}, graph=True, l2="warm", rep_ms=5)
    assert "CUDA-graph replay" in g["a"].method and "warm L2" in g["a"].method
