"""Exploit: the right answer, but the input is scaled in place (a kernel reusing it as scratch)."""
import torch.nn.functional as F


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    y = F.softmax(input, dim=dim, dtype=dtype)
    input.mul_(0.5)
    return y
