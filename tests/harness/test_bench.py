"""bench's timed closures: what each mode runs (timing itself needs a GPU)."""

import pytest
import torch

from roofkit.harness.bench import _timed_call
from roofkit.harness.spec import Cost, Inputs, OpSpec

pytestmark = pytest.mark.harness


def _counting(calls):
    def fn(x, scale=2.0):
        calls.append(1)
        return (x * scale).sin()
    return fn


@pytest.mark.parametrize("mode,forwards_per_call", [("fwd", 1), ("fwd_bwd", 1), ("bwd", 0)])
def test_timed_call_runs_what_the_mode_says(mode, forwards_per_call):
    calls = []
    x = torch.randn(5, dtype=torch.float64)
    dy = torch.randn(5, dtype=torch.float64)
    grad_pos = () if mode == "fwd" else (0,)
    call = _timed_call(_counting(calls), Inputs((x,), {"scale": 3.0}), grad_pos, [(0, dy)], mode)
    built = len(calls)  # "bwd" builds its graph once, outside the timed closure
    assert built == (1 if mode == "bwd" else 0)
    for _ in range(3):
        out = call()
    assert len(calls) - built == 3 * forwards_per_call
    if mode == "fwd":
        torch.testing.assert_close(out, (3.0 * x).sin())
    else:  # the backward replays correctly every time (retain_graph)
        torch.testing.assert_close(out[0], dy * 3.0 * (3.0 * x).cos())


def _pair(a, b):
    return a * b, a + b


def _pair_spec():
    def make_inputs(c, dtype, generator, device):
        return Inputs(tuple(torch.randn(c["shape"], generator=generator, dtype=dtype) for _ in range(2)), {})

    def writer(a, b):  # right outputs, then its first input overwritten (as an in-place backward would)
        out = _pair(a, b)
        a.data.mul_(2.0)
        return out

    def first_only(a, b):  # the second output carries no gradient
        return a * b, (a + b).detach()

    return OpSpec(
        name="toy_pair", impl=_pair, reference=_pair, torch_impl=_pair, make_inputs=make_inputs,
        cost=lambda c, dtype: Cost(flops=1.0, bytes=1.0), dtypes=(torch.float32,), cases=[], suites={},
        baselines={"writer": lambda: writer, "torch": lambda: _pair, "first_only": lambda: first_only}, grad_args=(0, 1),
    )


@pytest.mark.parametrize("mode", ["fwd_bwd", "bwd"])
def test_bench_case_reports_a_provider_writing_its_inputs_and_keeps_them_for_the_others(mode):
    from roofkit.harness.bench import HostOptions, bench_case
    from roofkit.harness.spec import case

    c = case("pair_8", shape=(8,), mode=mode)
    recs = {r.provider: r for r in bench_case(_pair_spec(), c, torch.float32, None, device=torch.device("cpu"),
                                               host=HostOptions(calls=3, repeats=1))}
    assert recs["roofkit"].verified is True and recs["torch"].verified is True, recs
    assert recs["writer"].verified is False and "writes into its input(s) 0" in recs["writer"].verify_detail
    # every output is differentiated: a provider dropping the second output's gradient fails
    assert recs["first_only"].verified is False and "grad[0]" in recs["first_only"].verify_detail


def test_bench_case_flags_every_record_when_inputs_change_during_the_timing_loop():
    """A provider that writes into the shared inputs only once timing has begun cannot be told
    from the others: no record of the case counts as verified."""
    from roofkit.harness.bench import HostOptions, bench_case
    from roofkit.harness.spec import case

    spec = _pair_spec()
    calls = []

    def late_writer(a, b):
        calls.append(1)
        out = _pair(a, b)
        if len(calls) > 3:  # past its warm-up, check and first timed call
            a.data.mul_(3.0)
        return out

    spec.baselines = {"late_writer": lambda: late_writer}
    c = case("pair_8", shape=(8,), mode="fwd")
    recs = {r.provider: r for r in bench_case(spec, c, torch.float32, None, device=torch.device("cpu"),
                                               host=HostOptions(calls=3, repeats=1))}
    assert set(recs) == {"roofkit", "late_writer"}
    for r in recs.values():
        assert r.verified is False and "changed during the timing loop" in r.verify_detail, r
