"""bench's timed closures: what each mode runs (timing itself needs a GPU)."""

import pytest
import torch

from roofkit.harness.bench import _timed_call
from roofkit.harness.spec import Inputs

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
    call = _timed_call(_counting(calls), Inputs((x,), {"scale": 3.0}), grad_pos, dy, mode)
    built = len(calls)  # "bwd" builds its graph once, outside the timed closure
    assert built == (1 if mode == "bwd" else 0)
    for _ in range(3):
        out = call()
    assert len(calls) - built == 3 * forwards_per_call
    if mode == "fwd":
        torch.testing.assert_close(out, (3.0 * x).sin())
    else:  # the backward replays correctly every time (retain_graph)
        torch.testing.assert_close(out[0], dy * 3.0 * (3.0 * x).cos())
