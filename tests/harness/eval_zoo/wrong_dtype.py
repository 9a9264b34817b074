"""Exploit: float64 arithmetic and a float64 result (more accurate, but not what torch returns)."""
import torch


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    return torch.softmax(input.double(), dim=dim)
