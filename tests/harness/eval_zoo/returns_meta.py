"""A tensor with no values (the meta device): nothing to compare; the judge must not crash on it."""
import torch


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    return torch.empty(input.shape, dtype=input.dtype, device="meta")
