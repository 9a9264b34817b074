"""The error budget's gradient-only floor (Tolerance.grad_l2_floor)."""

import importlib

import torch

from roofkit.harness.spec import Tolerance
from roofkit.harness.verify import check_outputs

ce = importlib.import_module("roofkit.ops.cross_entropy")


def test_grad_l2_floor_applies_to_gradients_only():
    tol = Tolerance(grad_l2_floor={**Tolerance().l2_floor, torch.bfloat16: 5e-3})
    assert tol.floor(torch.bfloat16) == Tolerance().l2_floor[torch.bfloat16]
    assert tol.floor(torch.bfloat16, gradient=True) == 5e-3
    assert Tolerance().floor(torch.bfloat16, gradient=True) == Tolerance().l2_floor[torch.bfloat16]


def test_cross_entropy_loss_keeps_the_default_budget_while_its_gradient_gets_one_more_rounding():
    # One element of four off by one bfloat16 unit (relative L2 0.0039): over the default floor
    # (1e-3, torch exact here) for the loss, inside the gradient's (1e-3 + 2**-8) for grad[0].
    ref = torch.ones(4, dtype=torch.float64)
    exact = torch.ones(4, dtype=torch.bfloat16)
    off = exact.clone()
    off[3] = 1.0078125
    outs = [("out", off), ("grad[0]", off.clone())]
    checks = check_outputs(ce.SPEC, ce.SPEC.case("odd_3x7"), torch.bfloat16,
                           [("out", ref), ("grad[0]", ref.clone())], [("out", exact), ("grad[0]", exact.clone())],
                           outs, torch.device("cpu"))
    by_name = {c.output: c for c in checks}
    assert abs(by_name["out"].err_l2 - 0.0078125 / 2) < 1e-6
    assert not by_name["out"].passed and by_name["grad[0]"].passed, [(c.output, c.reasons) for c in checks]
