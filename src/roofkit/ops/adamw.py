"""AdamW's update of one parameter tensor in one pass (the kernel of :class:`roofkit.optim.AdamW`).

Per element, in float32 with one rounding per stored value, as torch's fused AdamW computes it:

    param    -= lr * weight_decay * param
    exp_avg   = beta1 * exp_avg + (1 - beta1) * grad
    exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * grad^2
    param    -= (lr / (1 - beta1^step)) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^step) + eps)

Traffic per element: read param, grad and both moments, write param and both moments (7
elements); the update is memory-bound (about 1 FLOP per byte). Source: Loshchilov & Hutter,
"Decoupled Weight Decay Regularization" (2019).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import bf16_rne, cdiv, on_input_device
from ._jit import _round_for_store
from ._runtime import cached_launch

BLOCK = 4096  # elements per program
NUM_WARPS = 8


@triton.jit
def _adamw_kernel(p_ptr, g_ptr, m_ptr, v_ptr, n, lr_decay, beta1, beta2, eps, step_size, bc2_sqrt,
                  MAXIMIZE: tl.constexpr, BF16_RNE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    p = tl.load(p_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    m = tl.load(m_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if MAXIMIZE:
        g = -g
    p = p - lr_decay * p
    m = beta1 * m + (1.0 - beta1) * g
    v = beta2 * v + (1.0 - beta2) * g * g
    denom = tl.sqrt(v) / bc2_sqrt + eps
    p = p - step_size * m / denom
    tl.store(p_ptr + offs, _round_for_store(p, p_ptr, BF16_RNE), mask=mask)
    tl.store(m_ptr + offs, _round_for_store(m, m_ptr, BF16_RNE), mask=mask)
    tl.store(v_ptr + offs, _round_for_store(v, v_ptr, BF16_RNE), mask=mask)


_LAUNCHES: dict = {}


@on_input_device
def adamw_update_(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, *,
                  lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, step: int,
                  maximize: bool = False) -> None:
    """One AdamW step of ``param`` in place (``exp_avg`` and ``exp_avg_sq`` updated in place),
    ``step`` the step's number counted from 1. The four tensors: contiguous, of one shape, dtype
    (float32 / float16 / bfloat16) and device; the caller (:class:`roofkit.optim.AdamW`) checks."""
    n = param.numel()
    if n == 0:
        return
    bias_correction1 = 1.0 - beta1 ** step
    bc2_sqrt = (1.0 - beta2 ** step) ** 0.5
    cached_launch(_LAUNCHES, _adamw_kernel, cdiv(n, BLOCK), MAXIMIZE=bool(maximize), BF16_RNE=bf16_rne(param.dtype),
                  BLOCK=BLOCK, num_warps=NUM_WARPS)(
        param, grad, exp_avg, exp_avg_sq, n, lr * weight_decay, beta1, beta2, eps, lr / bias_correction1, bc2_sqrt)
