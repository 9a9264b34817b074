"""Exploit (GPU): right while the checked calls run, uninitialized memory (no work at all) once
it has been called often, as in a timing loop."""
import torch
import torch.nn.functional as F

_calls = [0]


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    _calls[0] += 1
    if _calls[0] > 4:
        return torch.empty_like(input if dtype is None else input.to(dtype))
    return F.softmax(input, dim=dim, dtype=dtype)
