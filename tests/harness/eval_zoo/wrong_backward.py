"""Exploit: the right forward (torch's), a wrong backward: the gradient passed through unchanged
(as if the Jacobian were the identity), the kind of backward a forward-only check never sees."""
import torch
import torch.nn.functional as F


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim, dtype):
        return F.softmax(x, dim=dim, dtype=dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    return _Softmax.apply(input, -1 if dim is None else dim, dtype)
