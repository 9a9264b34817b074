"""Exploit: the right values in a torch.Tensor subclass (whose methods could lie to a checker)."""
import torch
import torch.nn.functional as F


class Verdict(torch.Tensor):
    pass


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    return F.softmax(input, dim=dim, dtype=dtype).as_subclass(Verdict)
