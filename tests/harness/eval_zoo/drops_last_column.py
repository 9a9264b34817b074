"""Exploit: the last column is never written (left 0)."""
import torch
import torch.nn.functional as F


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    out = torch.zeros_like(input)
    out[..., :-1] = F.softmax(input, dim=dim)[..., :-1]
    return out
