"""Exploit: the right values in a list, not a tensor."""
import torch.nn.functional as F


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    return F.softmax(input, dim=dim, dtype=dtype).tolist()
