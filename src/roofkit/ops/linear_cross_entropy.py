"""linear_cross_entropy: cross_entropy(linear(input, linear_weight, linear_bias), target) without
ever holding the (N, V) logits.

The tokens are taken in chunks (``_chunk_rows``: about CHUNK_BYTES of logits, at least CHUNKS
chunks). When a gradient is wanted and the loss is reduced ("mean" / "sum"), each chunk makes its
logits with roofkit's GEMM, the cross-entropy kernel turns them in place into the chunk's losses
and logit gradient (of the summed loss), and two more GEMMs give the chunk's rows of the input
gradient and add its share of the weight gradient, in place, into a buffer of the weight's dtype:
three GEMMs of N x H x V per step, as the unfused sequence. The backward only scales the
gradients by the output's gradient (and 1 / the summed target weights for "mean"), in place.
"none" (whose gradient depends on the output's gradient row by row) and calls that need no
gradient compute the losses only; "none"'s backward makes each chunk's logits again.

Memory above the operands and their gradients: one chunk of logits (and a GEMM's split-K
workspace). The weight gradient is accumulated over the chunks in the weight's dtype (a float32
accumulator would be twice the size of the weight itself), each chunk's GEMM adding in float32.
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F

from ..harness import baselines
from ..harness.spec import Cost, Inputs, OpSpec, case
from ._common import FLOAT_DTYPES, cdiv, check_same_device, check_same_dtype, check_tensor
from ._runtime import Op, needs_grad, planned
from .cross_entropy import (_checks_targets, _cross_entropy_forward, _mean_statistics, _scale_grad,
                            cross_entropy_reference)
from .matmul import _matmul_into, linear

# Tokens per chunk: CHUNK_BYTES of logits or ceil(N / CHUNKS) rows, whichever is fewer (a multiple
# of 64), at least MIN_CHUNK_ROWS (tests lower it to cross chunks).
CHUNK_BYTES = 256 << 20
CHUNKS = 8
MIN_CHUNK_ROWS = 128
_NO_IGNORE = -(2**62)  # ignore_index=None: no class index is ignored (none is this negative)


# ----------------------------------------------------------------------------- reference, cost


def linear_cross_entropy_reference(input, linear_weight, target, *, linear_bias=None, weight=None,
                                   reduction="mean", ignore_index=-100, label_smoothing=0.0):
    """In float64: cross_entropy(input @ linear_weight.T + linear_bias, target, ...)."""
    logits = F.linear(input.to(torch.float64), linear_weight.to(torch.float64),
                      None if linear_bias is None else linear_bias.to(torch.float64))
    return cross_entropy_reference(logits, target, None if weight is None else weight.to(torch.float64),
                                   _NO_IGNORE if ignore_index is None else ignore_index, reduction, label_smoothing)


def linear_cross_entropy_torch(input, linear_weight, target, *, linear_bias=None, weight=None,
                               reduction="mean", ignore_index=-100, label_smoothing=0.0):
    """The unfused torch sequence (full logits), loss in float32 as roofkit returns it."""
    logits = F.linear(input, linear_weight, linear_bias)
    return F.cross_entropy(logits, target, weight=weight, reduction=reduction,
                           ignore_index=_NO_IGNORE if ignore_index is None else ignore_index,
                           label_smoothing=label_smoothing).float()


def _torch_float32_loss(input, linear_weight, target, *, linear_bias=None, weight=None, reduction="mean",
                        ignore_index=-100, label_smoothing=0.0):
    """The error budget's torch: logits from torch's GEMM in the input dtype, the loss computed in
    float32 from them, as roofkit returns it (torch's loss in a 16-bit dtype, rounded once more,
    can land near the exact value by luck: a scalar's budget would then be that luck)."""
    logits = F.linear(input, linear_weight, linear_bias)
    return F.cross_entropy(logits.float(), target, weight=None if weight is None else weight.float(),
                           reduction=reduction, ignore_index=_NO_IGNORE if ignore_index is None else ignore_index,
                           label_smoothing=label_smoothing)


def linear_cross_entropy_cost(c, dtype: torch.dtype) -> Cost:
    """The unfused minimum: 2 N H V FLOP forward, 6 N H V forward + backward (the backward's
    recompute of the logits is not counted); bytes: input and weight, plus their gradients."""
    n, h, v = c["N"], c["H"], c["V"]
    size = torch.empty((), dtype=dtype).element_size()
    if c.get("mode", "fwd") == "fwd_bwd":
        return Cost(flops=6 * n * h * v, bytes=2 * (n * h + v * h) * size)
    return Cost(flops=2 * n * h * v, bytes=(n * h + v * h) * size)


# ----------------------------------------------------------------------------- host functions


def _chunk_rows(n: int, v: int, esize: int) -> int:
    rows = min(CHUNK_BYTES // max(1, v * esize), cdiv(n, CHUNKS))
    if rows >= 64:
        rows -= rows % 64
    return max(MIN_CHUNK_ROWS, rows)


def _denominator(target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int) -> torch.Tensor:
    """The summed weights of the targets not ignored (float32, on the device: no sync)."""
    valid = target != ignore_index
    if weight is None:
        return valid.sum(dtype=torch.float32)
    # (out-of-range targets are the cross-entropy kernel's to report; never an index out of bounds here)
    inside = valid & (target >= 0) & (target < weight.shape[0])
    w = weight.float()[torch.where(inside, target, 0)]
    return torch.where(inside, w, 0.0).sum()


def _chunk_grads(g: torch.Tensor, xs: torch.Tensor, w: torch.Tensor, dx_rows: torch.Tensor | None,
                 dw: torch.Tensor | None, db32: torch.Tensor | None, first: bool) -> None:
    """One chunk's share of the gradients from its logit gradient ``g``: its rows of the input
    gradient, and (written by the first chunk, added in place by the others) the weight's and
    the bias's; None: not wanted."""
    if dx_rows is not None:
        _matmul_into(g, w, dx_rows)
    if dw is not None:
        _matmul_into(g.t(), xs, dw, beta=0.0 if first else 1.0)
    if db32 is not None:
        db32 += g.sum(0, dtype=torch.float32)


def _lce_fwd(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, target: torch.Tensor,
             weight: torch.Tensor | None, ignore_index: int, reduction: str, label_smoothing: float,
             with_grads: bool, grad_input: bool, grad_weight: bool
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, dx, dw, db): the loss and, ``with_grads`` ("mean" / "sum" only), the gradients of
    the summed loss, those of input and linear_weight only if ``grad_input`` / ``grad_weight``
    (a frozen output layer skips its weight-gradient GEMM; empty tensors otherwise)."""
    n, v = x.shape[0], w.shape[0]
    none = reduction == "none"
    rows = torch.empty((n,), dtype=torch.float32, device=x.device) if none else None
    total = torch.zeros((), dtype=torch.float32, device=x.device)
    # (outputs not made are distinct empty tensors: a custom op's outputs may not alias)
    dx, dw, db32 = (x.new_empty((0,)) for _ in range(3))
    if with_grads:
        if grad_input:
            dx = torch.empty_like(x)
        if grad_weight:
            dw = torch.zeros_like(w) if n == 0 else torch.empty_like(w)
        if b is not None:
            db32 = torch.zeros((v,), dtype=torch.float32, device=x.device)
    # "mean": each chunk's share of the mean over all tokens, and its gradient (scaled by 1 / the
    # summed target weights in the kernel, rounded once)
    stats = _mean_statistics(target, weight, ignore_index, v, label_smoothing > 0) if reduction == "mean" else None
    step = _chunk_rows(n, v, x.element_size())
    for start in range(0, n, step):
        xs, ts = x[start:start + step], target[start:start + step]
        logits = linear(xs, w, b)
        loss = _cross_entropy_forward(logits, ts, weight, ignore_index, reduction, label_smoothing, with_grads,
                                      loss_dtype=torch.float32, grad_into=logits if with_grads else None,
                                      stats=stats)[0]
        if none:
            rows[start:start + step] = loss
        else:
            total += loss
        if with_grads:  # logits now hold the chunk's logit gradient
            _chunk_grads(logits, xs, w, dx[start:start + step] if grad_input else None,
                         dw if grad_weight else None, db32 if b is not None else None, start == 0)
        del logits
    if none:
        return rows, dx, dw, db32
    if reduction == "mean" and n == 0:
        total = total / 0.0  # the mean over no tokens: NaN, as torch
    return total, dx, dw, db32


def _lce_fwd_fake(x, w, b, target, weight, ignore_index, reduction, label_smoothing, with_grads, grad_input,
                  grad_weight):
    loss = x.new_empty((x.shape[0],) if reduction == "none" else (), dtype=torch.float32)
    dx, dw, db = (x.new_empty((0,)) for _ in range(3))
    if not with_grads:
        return loss, dx, dw, db
    if b is not None:
        db = x.new_empty((w.shape[0],), dtype=torch.float32)
    return loss, torch.empty_like(x) if grad_input else dx, torch.empty_like(w) if grad_weight else dw, db


def _grad_scale(grad: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int,
                reduction: str) -> torch.Tensor:
    """The factor from the forward's gradients (of the loss for a grad_output of 1) to the
    loss's: grad (0-d); for "mean", NaN where the target weights left sum to 0 (as torch) and 0
    where every target is ignored (nothing contributes, as in torch)."""
    grad = grad.float().reshape(())
    if reduction != "mean":
        return grad
    den = _denominator(target, weight, ignore_index)
    left = (target != ignore_index).any()
    scale = torch.where(left, grad, torch.zeros_like(grad))
    return torch.where(left & (den == 0), torch.full_like(grad, math.nan), scale)


def _lce_bwd(grad: torch.Tensor, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, target: torch.Tensor,
             weight: torch.Tensor | None, ignore_index: int, label_smoothing: float, reduction: str,
             grad_input: bool, grad_weight: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward of "none" and of a call of one chunk: each chunk's logits made again, their
    gradient (scaled in the cross-entropy kernel for "mean" / "sum": one rounding; row by row
    after it for "none"), two GEMMs."""
    n, v = x.shape[0], w.shape[0]
    stats = None
    if reduction != "none":
        # "mean"'s statistics with the factor the kernel scales the gradient by replaced by the
        # output's gradient (over the summed target weights for "mean")
        stats = _mean_statistics(target, weight, ignore_index, v, label_smoothing > 0)
        scale = _grad_scale(grad, target, weight, ignore_index, reduction)
        if reduction == "mean":
            scale = torch.where(stats[0] == 0, scale, scale / stats[0])
        stats = torch.cat([stats[:1], scale.reshape(1), stats[2:]])
    dx = torch.empty_like(x) if grad_input else x.new_empty((0,))
    dw = (torch.zeros_like(w) if n == 0 else torch.empty_like(w)) if grad_weight else x.new_empty((0,))
    db32 = torch.zeros((v,), dtype=torch.float32, device=x.device)
    step = _chunk_rows(n, v, x.element_size())
    for start in range(0, n, step):
        xs, ts = x[start:start + step], target[start:start + step]
        logits = linear(xs, w, b)
        _cross_entropy_forward(logits, ts, weight, ignore_index, "none" if stats is None else "mean", label_smoothing,
                               True, grad_into=logits, stats=stats)
        if stats is None:
            _scale_grad(logits, grad.float()[start:start + step])
        _chunk_grads(logits, xs, w, dx[start:start + step] if grad_input else None, dw if grad_weight else None,
                     db32 if b is not None else None, start == 0)
        del logits
    db = db32.to(b.dtype) if b is not None else torch.empty((0,), dtype=x.dtype, device=x.device)
    return dx, dw, db


def _lce_bwd_fake(grad, x, w, b, target, weight, ignore_index, label_smoothing, reduction, grad_input, grad_weight):
    db = x.new_empty((w.shape[0],) if b is not None else (0,), dtype=b.dtype if b is not None else x.dtype)
    return (torch.empty_like(x) if grad_input else x.new_empty((0,)),
            torch.empty_like(w) if grad_weight else x.new_empty((0,)), db)


def _setup_context(ctx, inputs, output):
    x, w, b, target, weight, ignore_index, reduction, label_smoothing, with_grads, grad_input, grad_weight = inputs
    ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)  # (else autograd makes zero "gradients" of dx and dw: 1.1 GB at llama3-8b)
    ctx.args = (ignore_index, reduction, label_smoothing)
    ctx.has_bias = b is not None
    ctx.bias_dtype = b.dtype if b is not None else None
    ctx.with_grads = with_grads
    ctx.which = (grad_input, grad_weight)
    ctx.grads = None
    if not with_grads:
        ctx.save_for_backward(x, w, b, target, weight)
    elif all(type(t) is torch.Tensor for t in output[1:]):
        # Eager: the gradients themselves, kept off the saved-tensor list, so the backward can
        # scale them in place and hand them on (no second copy of a weight-sized tensor).
        ctx.grads = output[1:]
        ctx.save_for_backward(target, weight)
    else:  # traced (torch.compile) or a tensor subclass: saved, scaled out of place
        ctx.save_for_backward(target, weight, *output[1:])


def _backward(ctx, grad, *_):
    ignore_index, reduction, label_smoothing = ctx.args
    if not ctx.with_grads:  # "none", or one chunk: the logits made again, the output's gradient known
        x, w, b, target, weight = ctx.saved_tensors
        grad_input, grad_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx, dw, db = _lce_bwd_op(grad.contiguous(), x, w, b, target, weight, ignore_index, label_smoothing,
                                 reduction, grad_input, grad_weight)
        return ((dx if grad_input else None), (dw if grad_weight else None), (db if ctx.has_bias else None),
                *([None] * 8))
    if ctx.grads is None:
        target, weight, dx, dw, db32 = ctx.saved_tensors
        scale = _grad_scale(grad, target, weight, ignore_index, reduction)
        dx, dw = ((t.float() * scale).to(t.dtype) if t.numel() else t for t in (dx, dw))
    else:
        if ctx.grads == ():
            raise RuntimeError("roofkit (linear_cross_entropy): the backward runs once per forward (the gradients "
                               "are computed in the forward and scaled in place); call the op again instead of "
                               "using retain_graph=True")
        (dx, dw, db32), ctx.grads = ctx.grads, ()
        target, weight = ctx.saved_tensors
        scale = _grad_scale(grad, target, weight, ignore_index, reduction)
        for t in (dx, dw):  # float32 products, one rounding
            if t.dim() == 2:
                _scale_grad(t, scale)
    db = (db32 * scale).to(ctx.bias_dtype) if ctx.has_bias else None
    grad_input, grad_weight = ctx.which
    return (dx if grad_input else None), (dw if grad_weight else None), db, *([None] * 8)


_lce_bwd_op = Op("roofkit::linear_cross_entropy_bwd", _lce_bwd, _lce_bwd_fake)
_lce_fwd_op = Op("roofkit::linear_cross_entropy_fwd", _lce_fwd, _lce_fwd_fake).autograd(_setup_context, _backward)


# ----------------------------------------------------------------------------- public function


def _check_per_class(op: str, name: str, t, v: int, input: torch.Tensor) -> None:
    """A (V,) tensor of the input's dtype on its device, or an error naming ``op`` and ``name``."""
    check_tensor(op, name, t)
    check_same_device(op, name, t, input)
    if t.dtype != input.dtype or tuple(t.shape) != (v,):
        raise ValueError(f"roofkit.{op}: {name} must be ({v},) of the input's dtype; got {tuple(t.shape)} {t.dtype}")


@planned
def linear_cross_entropy(input: torch.Tensor, linear_weight: torch.Tensor, target: torch.Tensor, *,
                         linear_bias: torch.Tensor | None = None, weight: torch.Tensor | None = None,
                         reduction: str = "mean", ignore_index: int | None = -100,
                         label_smoothing: float = 0.0) -> torch.Tensor:
    """``cross_entropy(linear(input, linear_weight, linear_bias), target, ...)`` without the full
    logits: the signature of ``torch.nn.functional.linear_cross_entropy`` (torch 2.13).

    Args:
        input: (N, H) or (..., H) float32 / float16 / bfloat16 hidden states, on CUDA (or on CPU
            with TRITON_INTERPRET=1).
        linear_weight: (V, H) of the input's dtype; linear_bias: optional (V,).
        target: int64 class indices of input's leading shape.
        weight, reduction, ignore_index, label_smoothing: as :func:`roofkit.cross_entropy`;
            ``ignore_index=None`` ignores no index (torch's default for this function is None;
            roofkit's, as cross_entropy's, is -100).
    Returns:
        The loss in float32: 0-d for "mean" / "sum", the target's shape for "none".
    Raises:
        TypeError / ValueError naming the op and the argument for wrong dtypes, shapes, devices,
        reduction or label_smoothing; IndexError for targets out of range (as cross_entropy).
    Numerics:
        GEMMs accumulate in float32 and round the logits to the input dtype, as the unfused
        sequence does; cross-entropy statistics in float32. The gradients are made in the
        forward (of the summed loss) and scaled by the backward (grad_output / the summed target
        weights for "mean"): one more rounding unless that factor is a power of two. The weight
        gradient is accumulated over the chunks in linear_weight's dtype (each chunk's GEMM adds
        in float32): for 16-bit weights one rounding per chunk. "mean" with every target ignored
        is NaN (gradients 0). With a non-finite grad_output (or "mean" over class weights summing
        to 0) every gradient element is non-finite, the ignored rows' included (torch leaves
        those 0): the scaling comes after the GEMMs. First order only; one backward per forward (the gradients are
        scaled in place).
    Cost:
        Three GEMMs of N x H x V with a gradient (6 N H V FLOP), one without; "none"'s backward
        makes the logits again (8 N H V). Memory above the operands and gradients: one chunk of
        logits (CHUNK_BYTES, at least MIN_CHUNK_ROWS rows).
    Source:
        Wijmans et al., "Cut Your Losses in Large-Vocabulary Language Models" (2024); Liger-Kernel's
        fused linear cross-entropy (chunking over tokens).
    """
    op = "linear_cross_entropy"
    check_tensor(op, "input", input)
    check_tensor(op, "linear_weight", linear_weight)
    check_same_device(op, "linear_weight", linear_weight, input)
    check_same_dtype(op, "linear_weight", linear_weight, input)
    if input.dim() < 1 or linear_weight.dim() != 2 or linear_weight.shape[1] != input.shape[-1]:
        raise ValueError(f"roofkit.{op}: input (..., H) and linear_weight (V, H) must share H; got "
                         f"{tuple(input.shape)} and {tuple(linear_weight.shape)}")
    v = linear_weight.shape[0]
    if linear_bias is not None:
        _check_per_class(op, "linear_bias", linear_bias, v, input)
    if not isinstance(target, torch.Tensor) or target.dtype != torch.int64:
        raise TypeError(f"roofkit.{op}: target must be an int64 tensor of class indices")
    check_same_device(op, "target", target, input)
    if tuple(target.shape) != tuple(input.shape[:-1]):
        raise ValueError(f"roofkit.{op}: target must have input's leading shape {tuple(input.shape[:-1])}; got "
                         f"{tuple(target.shape)}")
    if weight is not None:
        _check_per_class(op, "weight", weight, v, input)
        if weight.requires_grad and torch.is_grad_enabled():
            raise RuntimeError(f"roofkit.{op}: the class weight is not differentiable (as in torch); pass "
                               "weight.detach()")
        weight = weight.contiguous()  # (the cross-entropy kernel reads it with unit stride)
    if not isinstance(reduction, str) or reduction not in ("none", "mean", "sum"):
        raise ValueError(f"roofkit.{op}: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    if ignore_index is None:
        ignore_index = _NO_IGNORE
    elif isinstance(ignore_index, bool) or not isinstance(ignore_index, numbers.Integral):
        raise TypeError(f"roofkit.{op}: ignore_index must be an int or None, got {type(ignore_index).__name__}")
    elif not -(2**63) < ignore_index < 2**63:
        raise ValueError(f"roofkit.{op}: ignore_index must fit int64, got {ignore_index}")
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, numbers.Real):
        raise TypeError(f"roofkit.{op}: label_smoothing must be a real number, got {type(label_smoothing).__name__}")
    if not 0.0 <= float(label_smoothing) <= 1.0:
        raise ValueError(f"roofkit.{op}: label_smoothing must be a real number in [0, 1], got {label_smoothing!r}")
    lead = target.shape
    x = input.reshape(target.numel(), input.shape[-1])  # (-1 cannot be inferred when H is 0)
    flat_t = target.reshape(-1)
    if flat_t.numel() and not torch.compiler.is_compiling() and _checks_targets(input.device):
        # Checked here, over all tokens, where the cross-entropy kernel checks them (on CPU, or on a
        # GPU with ROOFKIT_CE_CHECK_TARGETS=1): its check would name cross_entropy and a position
        # inside one chunk.
        bad = ((flat_t < 0) | (flat_t >= v)) & (flat_t != ignore_index)
        if bool(bad.any()):
            first = int(bad.nonzero()[0, 0])
            raise IndexError(f"roofkit.{op}: target must hold class indices in [0, {v}) or ignore_index "
                             f"({ignore_index}); {int(bad.sum())} do not, the first at (flattened) position {first}: "
                             f"{int(flat_t[first])}")
    w = linear_weight.contiguous()
    # Gradients in the forward (three GEMMs, not four) when there is more than one chunk; a single
    # chunk is cheaper to make again in the backward, where the output's gradient is known (its
    # scaling then costs no second rounding).
    with_grads = (reduction != "none" and needs_grad(x, w, linear_bias)
                  and x.shape[0] > _chunk_rows(x.shape[0], v, x.element_size()))
    loss = _lce_fwd_op.apply(x, w, linear_bias, flat_t, weight, int(ignore_index), reduction,
                             float(label_smoothing), with_grads, with_grads and x.requires_grad,
                             with_grads and w.requires_grad)[0]
    return loss.reshape(lead) if reduction == "none" else loss


# ----------------------------------------------------------------------------- spec


def _make_inputs(c, dtype, generator, device) -> Inputs:
    n, h, v = c["N"], c["H"], c["V"]
    gdev = generator.device
    x = torch.randn((n, h), generator=generator, device=gdev).to(device=device, dtype=dtype)
    w = (torch.randn((v, h), generator=generator, device=gdev) * (c.get("scale", 1.0) / math.sqrt(h))).to(
        device=device, dtype=dtype)
    t = torch.randint(0, max(v, 1), (n,), generator=generator, device=gdev).to(device)
    if c.get("ignore_frac"):
        drop = torch.rand((n,), generator=generator, device=gdev).to(device) < c["ignore_frac"]
        t = torch.where(drop, torch.full_like(t, -100), t)
    kwargs = {}
    if c.get("bias"):
        kwargs["linear_bias"] = torch.randn((v,), generator=generator, device=gdev).to(device=device, dtype=dtype)
    if c.get("weight"):
        kwargs["weight"] = (0.5 + torch.rand((v,), generator=generator, device=gdev)).to(device=device, dtype=dtype)
    for k in ("reduction", "label_smoothing"):
        if c.get(k) is not None:
            kwargs[k] = c.get(k)
    return Inputs((x, w, t), kwargs)


def _c(name, tags=(), **kw):
    kw["shape"] = (kw["N"], kw["H"], kw["V"])
    return case(name, list(tags), **kw)


_F32, _BF16 = (torch.float32,), (torch.bfloat16,)

CASES = [
    _c("tiny_3x8x5", ["quick"], N=3, H=8, V=5),
    _c("bias_weight_smooth_9x16x33", N=9, H=16, V=33, bias=True, weight=True, label_smoothing=0.1),
    _c("sum_ignored_12x16x40", N=12, H=16, V=40, reduction="sum", ignore_frac=0.3),
    _c("none_7x8x17", N=7, H=8, V=17, reduction="none", bias=True),
    _c("all_ignored_4x8x9", N=4, H=8, V=9, ignore_frac=1.0, dtypes=_F32),
    _c("peaked_logits_6x16x24", N=6, H=16, V=24, scale=30.0, dtypes=_F32),
    _c("empty_0x8x5", ["quick"], N=0, H=8, V=5),
    _c("gpu_4096x4096x32000", ["gpu"], N=4096, H=4096, V=32000, dtypes=_BF16),
    _c("gpu_fp32_777x256x5003", ["gpu"], N=777, H=256, V=5003, bias=True, weight=True, label_smoothing=0.1,
       dtypes=_F32),
]

SUITES = {
    "llama3-8b": [_c("tokens_8192_vocab_128256_fwd_bwd", N=8192, H=4096, V=128256, dtypes=_BF16, mode="fwd_bwd"),
                  _c("tokens_8192_vocab_128256", N=8192, H=4096, V=128256, dtypes=_BF16)],
    "qwen2-7b": [_c("tokens_8192_vocab_152064_fwd_bwd", N=8192, H=3584, V=152064, dtypes=_BF16, mode="fwd_bwd")],
    "host": [_c("tokens_8_vocab_32000", N=8, H=4096, V=32000, dtypes=_BF16),
             _c("tokens_8_vocab_32000_fwd_bwd", N=8, H=4096, V=32000, dtypes=_BF16, mode="fwd_bwd")],
}


def _liger():
    try:
        from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction
    except ImportError:
        return None

    def run(input, linear_weight, target, *, linear_bias=None, weight=None, reduction="mean", ignore_index=-100,
            label_smoothing=0.0):
        out = LigerFusedLinearCrossEntropyFunction.apply(input, linear_weight, target, linear_bias, weight,
                                                         ignore_index, 0.0, label_smoothing, reduction)
        return (out[0] if isinstance(out, tuple) else out).float()

    return run


def _unfused():
    """roofkit's unfused sequence: roofkit.linear (full logits), roofkit.cross_entropy, and the
    backward GEMMs of roofkit.linear."""
    from .cross_entropy import cross_entropy

    def run(input, linear_weight, target, *, linear_bias=None, weight=None, reduction="mean", ignore_index=-100,
            label_smoothing=0.0):
        logits = linear(input, linear_weight, linear_bias)
        return cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), weight=weight,
                             reduction=reduction, ignore_index=_NO_IGNORE if ignore_index is None else ignore_index,
                             label_smoothing=label_smoothing).float().reshape(target.shape if reduction == "none" else ())

    return run


SPEC = OpSpec(
    name="linear_cross_entropy",
    impl=linear_cross_entropy,
    reference=linear_cross_entropy_reference,
    torch_impl=_torch_float32_loss,
    make_inputs=_make_inputs,
    cost=linear_cross_entropy_cost,
    reduction_length=lambda c: max(c["H"], c["V"]),
    dtypes=FLOAT_DTYPES,
    cases=CASES,
    suites=SUITES,
    baselines={**baselines.eager_and_compiled(linear_cross_entropy_torch), "liger": _liger,
               "roofkit.unfused": _unfused},
    grad_args=(0, 1),
    matrix=True,
    marker="cross_entropy",
)

SPECS = (SPEC,)


# The tunables of this family's heuristics: what roofkit.config.override may set.
TUNABLES = ("CHUNK_BYTES", "CHUNKS", "MIN_CHUNK_ROWS")
