"""The host suite: its cases in every op's spec, the wall/graph timing arithmetic (with injected
clocks: timing a real GPU is not a test), bench's host records, and the host table and CSV."""

import csv
import math

import pytest
import torch
import torch.nn.functional as F
from rich.console import Console

from roofkit.cli import build_parser, main
from roofkit.harness import registry
from roofkit.harness.bench import HOST_SUITE, HostOptions, bench_case
from roofkit.harness.inputs import make_generator, random_tensor
from roofkit.harness.record import Record, load_results, write_results
from roofkit.harness.report import host_geomean, host_rows, host_table, split_host, write_host_csv
from roofkit.harness.spec import Cost, Inputs, OpSpec, case
from roofkit.harness.timing import host_time_providers
from roofkit.harness.verify import reference_outputs

pytestmark = pytest.mark.harness

SPECS = registry.all_specs()


# ----------------------------------------------------------------------------- the suite


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_host_suite_cases_build_inputs_costs_and_references_on_cpu(spec):
    cases = spec.suites.get(HOST_SUITE)
    assert cases, f"{spec.name} has no {HOST_SUITE!r} suite"
    cpu = torch.device("cpu")
    for c in cases:
        assert c.get("mode", "fwd") in ("fwd", "fwd_bwd"), c.name
        for dtype in spec.case_dtypes(c):
            assert dtype in spec.dtypes, (c.name, dtype)
            inputs = spec.make_inputs(c, dtype, make_generator(1, cpu), cpu)
            assert isinstance(inputs, Inputs)
            tensors = [a for a in list(inputs.args) + list(inputs.kwargs.values()) if isinstance(a, torch.Tensor)]
            assert tensors and all(t.device == cpu for t in tensors), c.name
            cost = spec.cost(c, dtype)
            assert isinstance(cost, Cost) and cost.bytes > 0 and cost.flops >= 0, (c.name, cost)
            # What bench runs first: torch's same-dtype call and the float64 reference, with the
            # backward for fwd_bwd cases, so the inputs fit the op's signature and its gradients.
            grad_pos = spec.grad_args if c.get("mode", "fwd") == "fwd_bwd" else ()
            expected, refs = reference_outputs(spec, inputs, grad_pos, 7, c.get("grad_output", "normal"))
            grads = [i for i in grad_pos if isinstance(inputs.args[i], torch.Tensor)]
            assert len(expected) == len(refs) and len(refs) >= 1 + len(grads), c.name


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_host_suite_has_fwd_and_fwd_bwd_where_the_op_has_a_backward(spec):
    modes = {c.get("mode", "fwd") for c in spec.suites[HOST_SUITE]}
    assert "fwd" in modes
    assert ("fwd_bwd" in modes) == bool(spec.grad_args), modes


def _find(op, mode="fwd", **params):
    for c in registry.get(op).suites[HOST_SUITE]:
        if c.get("mode", "fwd") == mode and all(c.get(k) == v for k, v in params.items()):
            return c
    raise AssertionError(f"{op}: no host case with mode={mode} {params}")


def test_host_suite_holds_the_decode_rows_measured_against_eager():
    bf16 = (torch.bfloat16,)
    rows = [
        _find("rms_norm", shape=(8, 4096)), _find("rms_norm", "fwd_bwd", shape=(8, 4096)),
        _find("layer_norm", shape=(8, 4096)), _find("softmax", shape=(8, 4096)),
        _find("sum", shape=(8, 4096), dim=-1), _find("cross_entropy", shape=(8, 32000)),
        # F.linear: weight (N, K) row-major, i.e. b transposed, with a bias.
        _find("matmul", shape=(8, 4096, 4096), b_layout="transposed", bias=True),
        _find("scaled_dot_product_attention", shape=(1, 32, 1, 2048, 128), hkv=8),
    ]
    assert all(c.dtypes == bf16 for c in rows)


# ----------------------------------------------------------------------------- timing


class FakeClock:
    """Seconds that advance only when the fake work says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def work(self, us):
        self.now += us * 1e-6


def test_host_time_providers_divides_each_run_by_its_calls_and_interleaves():
    clock = FakeClock()
    log = []

    def provider(name, us):
        def fn():
            log.append(name)
            clock.work(us)
        return fn

    def capture(fn, device, n):
        assert n == 7
        return lambda: (log.append("replay"), clock.work(2.0 * n))

    fns = {"a": provider("a", 5.0), "b": provider("b", 12.0)}
    t = host_time_providers(fns, device="cpu", calls=10, graph_calls=7, warmup_calls=3, repeats=2,
                            clock=clock, capture=capture)
    assert list(t) == ["a", "b"]
    assert t["a"].wall_us == pytest.approx(5.0) and t["b"].wall_us == pytest.approx(12.0)
    assert t["a"].graph_us == pytest.approx(2.0) and t["b"].graph_us == pytest.approx(2.0)
    assert t["a"].wall_runs_us == pytest.approx([5.0, 5.0]) and len(t["b"].graph_runs_us) == 2
    assert (t["a"].calls, t["a"].graph_calls) == (10, 7)
    assert log.count("a") == 1 + 3 + 2 * 10  # first call, warm-up, two timed runs
    # After set-up (a's calls, a's untimed replay, then b's), round 0 runs a then b, round 1 b then a.
    timed = [x for x in log[2 * (1 + 3 + 1):] if x != "replay"]
    assert timed == ["a"] * 10 + ["b"] * 10 + ["b"] * 10 + ["a"] * 10
    assert "10 back-to-back calls" in t["a"].method and "interleaved with 1 other" in t["a"].method


def test_host_time_providers_median_of_repeats():
    clock = FakeClock()
    costs = iter([30.0] * 5 + [10.0] * 5 + [20.0] * 5 + [90.0] * 5)  # warm-up 1+4 calls, then 3 runs of 5

    def fn():
        clock.work(next(costs))

    t = host_time_providers({"a": fn}, device="cpu", calls=5, warmup_calls=4, repeats=3, graph=False, clock=clock)
    assert sorted(t["a"].wall_runs_us) == pytest.approx([10.0, 20.0, 90.0])
    assert t["a"].wall_us == pytest.approx(20.0)
    assert math.isnan(t["a"].graph_us) and "not asked for" in t["a"].method


def test_host_time_providers_real_clock_on_cpu_gives_a_sane_wall_time_and_no_graph():
    x = torch.randn(64)
    t = host_time_providers({"add": lambda: x + 1}, device="cpu", calls=50, repeats=2)
    wall = t["add"].wall_us
    assert 0 < wall < 1e5 and math.isfinite(wall)
    assert math.isnan(t["add"].graph_us) and "need a CUDA device" in t["add"].method


def test_host_time_providers_records_a_capture_that_fails():
    def capture(fn, device, n):
        raise RuntimeError("operation not permitted when stream is capturing")

    t = host_time_providers({"a": lambda: None}, device="cpu", calls=3, repeats=1, capture=capture)
    assert math.isnan(t["a"].graph_us)
    assert "capture failed (RuntimeError: operation not permitted" in t["a"].method


def test_host_time_providers_rejects_no_calls():
    with pytest.raises(ValueError, match="calls"):
        host_time_providers({"a": lambda: None}, device="cpu", calls=0)


@pytest.mark.gpu
def test_host_time_providers_on_cuda_replays_a_graph_whose_memory_does_not_grow_with_its_calls():
    x = torch.randn(1 << 18, device="cuda")  # 1 MiB; each call allocates a 1 MiB output
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_reserved()
    t = host_time_providers({"a": lambda: x * 2, "b": lambda: x + 1}, calls=200, graph_calls=500, repeats=2)
    for v in t.values():
        assert v.wall_us > 0 and math.isfinite(v.graph_us) and v.graph_us > 0 and v.graph_calls == 500
        assert "CUDA-graph replay of 500 calls" in v.method
    # Outputs freed during the capture are reused within it: far below 500 MiB per graph.
    assert torch.cuda.max_memory_reserved() - before < 64 << 20


# ----------------------------------------------------------------------------- bench records


def _toy_spec():
    """softmax over the last dim with torch as "roofkit": bench's host path end to end on CPU."""

    def make_inputs(c, dtype, generator, device):
        return Inputs((random_tensor(c["shape"], dtype, generator, device),), {"dim": -1})

    def broken(input, dim=-1):
        raise NotImplementedError("no such kernel")

    return OpSpec(
        name="toy_softmax", impl=lambda input, dim=-1: torch.softmax(input, dim),
        reference=lambda input, dim=-1: torch.softmax(input, dim), torch_impl=F.softmax,
        make_inputs=make_inputs, cost=lambda c, dtype: Cost(flops=1.0, bytes=1.0), dtypes=(torch.float32,),
        cases=[], suites={}, baselines={"torch": lambda: F.softmax, "broken": lambda: broken}, grad_args=(0,),
    )


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
def test_bench_case_host_records_wall_time_per_call_and_no_device_figures(mode):
    spec = _toy_spec()
    c = case("rows_4x16", shape=(4, 16), mode=mode)
    recs = {r.provider: r for r in bench_case(spec, c, torch.float32, None, device=torch.device("cpu"),
                                               host=HostOptions(calls=5, repeats=2))}
    assert list(recs) == ["roofkit", "torch", "broken"]
    assert recs["broken"].status.startswith("error: NotImplementedError")
    for name in ("roofkit", "torch"):
        r = recs[name]
        assert r.status == "ok" and r.verified is True and r.mode == mode, r
        assert r.wall_us > 0 and r.host_calls == 5
        assert r.graph_us is None and r.graph_calls is None  # no CUDA graph on a CPU
        assert r.median_ms is None and r.gbps is None and r.flops is None and r.l2 == "warm"
        assert r.speedup_vs_torch == pytest.approx(recs["torch"].wall_us / r.wall_us)


# ----------------------------------------------------------------------------- table and CSV


def _host(case, provider, wall=None, graph=None, status="ok", op="rms_norm", verified=True):
    timed = status == "ok"
    return Record(op=op, case=case, shape="8x4096", dtype="bfloat16", mode="fwd", provider=provider, status=status,
                  wall_us=wall, graph_us=graph, host_calls=2000 if timed else None,
                  graph_calls=2000 if graph is not None else None, verified=verified if timed else None, l2="warm")


HAND_MADE = [
    # roofkit/torch: 2.0 and 8.0 (geomean 4.0); the third case has no roofkit time.
    _host("a", "roofkit", 30.0, 3.0), _host("a", "torch", 15.0, 2.5), _host("a", "liger", 40.0, 4.0),
    _host("a", "flaggems", status="skipped: not installed"),
    _host("b", "roofkit", 160.0, 5.0, op="layer_norm", verified=False), _host("b", "torch", 20.0, 4.5, op="layer_norm"),
    _host("c", "roofkit", status="error: RuntimeError: boom", op="softmax"), _host("c", "torch", 9.0, 1.0, op="softmax"),
]


def test_host_rows_ratio_and_geomean_from_hand_made_records():
    columns, rows = host_rows(HAND_MADE)
    assert columns[:7] == ["op", "case", "dtype", "mode", "torch wall us", "roofkit wall us", "roofkit/torch"]
    assert "liger wall us" in columns and "flaggems wall us" in columns
    assert "roofkit graph us" in columns and "torch graph us" in columns and "liger graph us" not in columns
    by_case = {r["case"]: r for r in rows}
    assert by_case["a"]["roofkit/torch"] == pytest.approx(2.0) and by_case["b"]["roofkit/torch"] == pytest.approx(8.0)
    assert by_case["c"]["roofkit/torch"] is None and by_case["c"]["roofkit wall us"] is None
    assert by_case["a"]["liger wall us"] == 40.0 and by_case["a"]["flaggems wall us"] is None
    assert by_case["a"]["roofkit graph us"] == 3.0 and by_case["b"]["roofkit verified"] == "NO"
    geo, n = host_geomean(HAND_MADE)
    assert n == 2 and geo == pytest.approx(4.0)
    assert host_geomean([_host("c", "torch", 9.0)]) == (None, 0)


def test_host_table_renders_ratio_and_geomean():
    console = Console(record=True, width=300)
    console.print(host_table(HAND_MADE))
    text = console.export_text()
    assert "2.00x" in text and "8.00x" in text
    assert "geomean roofkit/torch wall us per call over 2 case(s): 4.00x" in text
    assert "160.0" in text and "40.0" in text and "NO" in text


def test_host_csv_has_the_ratio_every_graph_and_a_geomean_row(tmp_path):
    path = write_host_csv(tmp_path / "host.csv", HAND_MADE)
    rows = list(csv.DictReader(path.open()))
    assert [r["case"] for r in rows[:3]] == ["a", "b", "c"]
    assert float(rows[0]["roofkit/torch"]) == pytest.approx(2.0) and rows[2]["roofkit/torch"] == ""
    assert float(rows[0]["liger graph us"]) == 4.0
    assert rows[-1]["op"] == "geomean" and float(rows[-1]["roofkit/torch"]) == pytest.approx(4.0)


def test_host_records_round_trip_and_report_prints_the_host_table(tmp_path, capsys):
    device_row = Record(op="softmax", case="big", shape="8192x4096", dtype="bfloat16", mode="fwd",
                        provider="roofkit", median_ms=1.0, p20_ms=0.9, p80_ms=1.1)
    write_results(tmp_path, HAND_MADE + [device_row], {"gpu": "Test GPU"}, None)
    _, _, back = load_results(tmp_path)
    assert back[0].graph_us == 3.0 and back[0].host_calls == 2000
    device, host = split_host(back)
    assert [r.case for r in device] == ["big"]
    assert len(host) == len(HAND_MADE)  # case c's failed roofkit row stays with its case
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "host suite" in out and "4.00x" in out and "big" in out


def test_cli_bench_takes_the_host_suite_and_its_call_counts(monkeypatch, capsys):
    args = build_parser().parse_args(["bench", "rms_norm", "--suite", "host", "--calls", "500", "--graph-calls", "100"])
    assert (args.suite, args.calls, args.graph_calls) == ("host", 500, 100)
    assert build_parser().parse_args(["bench", "--suite", "host"]).calls == 2000
    if not torch.cuda.is_available():
        import roofkit.cli as cli

        monkeypatch.setattr(cli, "_run_verify", lambda specs, **kw: True)
        assert main(["bench", "rms_norm", "--suite", "host", "--calls", "500"]) == 0
        assert "ignored without a GPU: --suite --calls" in capsys.readouterr().out
