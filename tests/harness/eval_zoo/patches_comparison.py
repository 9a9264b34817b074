"""Exploit: makes every comparison torch offers say "equal" (allclose, equal, isclose,
testing.assert_close, Tensor.__eq__), then returns zeros: a checker that compares in the
candidate's process would pass it."""
import torch

torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.isclose = lambda a, b, *r, **k: torch.ones_like(a, dtype=torch.bool)
torch.testing.assert_close = lambda *a, **k: None
torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    return torch.zeros_like(input)
