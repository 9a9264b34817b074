"""scatter_add / index_add public functions, their argument checks, and the custom op (shared by
both: ``roofkit::scatter_add`` with an index_add flag) with autograd that wraps the host
launchers of ``_launch.py``."""

from __future__ import annotations

import math
import numbers

import torch

from .._common import check_same_device, check_same_dtype, check_tensor, normalize_dim, on_input_device
from ._launch import _scatter_add_forward, _scatter_gather_backward

INDEX_DTYPES = (torch.int64, torch.int32)


# ----------------------------------------------------------------------------- custom ops, autograd


@torch.library.custom_op("roofkit::scatter_add", mutates_args=())
@on_input_device
def _scatter_add_op(
    input: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, alpha: float,
    index_add: bool, deterministic: bool,
) -> torch.Tensor:
    op = "index_add" if index_add else "scatter_add"
    return _scatter_add_forward(op, input, dim, index, src, alpha, index_add, deterministic)


@_scatter_add_op.register_fake
def _(input, dim, index, src, alpha, index_add, deterministic):
    return torch.empty(input.shape, dtype=input.dtype, device=input.device)


@torch.library.custom_op("roofkit::scatter_gather", mutates_args=())
@on_input_device
def _scatter_gather_op(
    grad: torch.Tensor, dim: int, index: torch.Tensor, src_shape: list[int], alpha: float, index_add: bool
) -> torch.Tensor:
    return _scatter_gather_backward(grad, dim, index, src_shape, alpha, index_add)


@_scatter_gather_op.register_fake
def _(grad, dim, index, src_shape, alpha, index_add):
    return grad.new_empty(src_shape)


def _setup_context(ctx, inputs, output):
    _, dim, index, src, alpha, index_add, _ = inputs
    ctx.dim, ctx.alpha, ctx.index_add = dim, alpha, index_add
    ctx.src_shape = list(src.shape)
    ctx.save_for_backward(index)


def _backward(ctx, grad):
    (index,) = ctx.saved_tensors
    grad_input = grad if ctx.needs_input_grad[0] else None
    grad_src = None
    if ctx.needs_input_grad[3]:
        grad_src = _scatter_gather_op(grad.contiguous(), ctx.dim, index, ctx.src_shape, ctx.alpha, ctx.index_add)
    return grad_input, None, None, grad_src, None, None, None


torch.library.register_autograd("roofkit::scatter_add", _backward, setup_context=_setup_context)


# ----------------------------------------------------------------------------- public functions


def _check_common(op: str, input, index, src, src_name: str) -> None:
    check_tensor(op, "input", input)
    check_tensor(op, "index", index, dtypes=INDEX_DTYPES)
    check_tensor(op, src_name, src)
    check_same_device(op, "index", index, input)
    check_same_device(op, src_name, src, input)
    check_same_dtype(op, src_name, src, input)


def _resolve_deterministic(op: str, deterministic) -> bool:
    if deterministic is None:
        return torch.are_deterministic_algorithms_enabled()
    if not isinstance(deterministic, bool):
        raise TypeError(f"roofkit.{op}: deterministic must be True, False or None, got {type(deterministic).__name__}")
    return deterministic


@on_input_device
def scatter_add(
    input: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, *, deterministic: bool | None = None
) -> torch.Tensor:
    """Out-of-place scatter-add: out = input; out[p with coordinate ``dim`` set to index[p]] += src[p]
    for every position p of ``index``'s shape (duplicated destinations accumulate every contribution).

    Mirrors ``torch.scatter_add(input, dim, index, src)``.

    Args:
        input: float32, float16 or bfloat16 tensor, any shape and strides, on CUDA (or on CPU with
            TRITON_INTERPRET=1). It is not modified.
        dim: the dimension along which to index (negative counts from the end).
        index: int64 (or int32) tensor with input's number of dimensions; index.size(d) <=
            src.size(d) for every d and <= input.size(d) for d != dim; values in
            [0, input.size(dim)). An index expanded along the dimensions after ``dim`` (stride 0,
            e.g. ``idx[:, None].expand_as(src)``) is read once per row.
        src: tensor of input's dtype and number of dimensions; only the elements under index's
            extent are used.
        deterministic: True: sorted path, bitwise reproducible run to run; False: atomic path;
            None (default): ``torch.are_deterministic_algorithms_enabled()``.
    Returns:
        A new contiguous tensor of input's shape and dtype.
    Raises:
        TypeError: a tensor argument of the wrong type or dtype (index not int64/int32, src's
            dtype not input's), bad ``dim`` or ``deterministic`` type.
        ValueError: ranks or sizes that break the rules above; tensors on different or
            unsupported devices.
        IndexError: ``dim`` out of range; index values outside [0, input.size(dim)) (checked on
            the device, one host synchronization per call: for rows at least 8 wide a separate
            check before any add, the wait hidden behind the copy of input; else at the end).
            Not under CUDA-graph capture (``torch.cuda.is_current_stream_capturing()``), where the
            host can neither wait nor read the device: there the index is not checked and an
            out-of-range value is skipped (its contribution dropped, its gradient 0) by the
            captured kernels at every replay, without an error; nothing outside input, src and
            the output is ever read or written. Validate indices before capturing.
    Numerics:
        Atomic path: each contribution is added atomically in input's dtype (as torch does), in
        an unspecified order (not bitwise reproducible); float16 / bfloat16 destinations with at
        least four contributions per destination on average (L >= 4 N along ``dim``; the
        ``FP32_ACCUMULATE_MIN_PER_DEST`` tunable) accumulate in a float32 copy instead, rounded
        once. Deterministic path: each destination's
        contributions are summed in float32 in index order (a destination with more of them
        than the piece length, max(``SPLIT_MIN`` = 256, the power of two at or above isqrt(L))
        for L index entries along ``dim``: in pieces of that length, combined in order) and
        added to input with one rounding (more accurate than torch for float16/bfloat16);
        bitwise reproducible, and a CUDA-graph replay gives the same bits as an eager call.
        Backward: grad_input = grad, grad_src = grad gathered at index (zero outside index's
        extent, where torch refuses); first order only; no host synchronization.
    Cost:
        Reads input, the src elements under index and the index once, writes the output once;
        one add per index element (``scatter_add_cost``). The atomic path writes the output twice
        (a copy of input, then the atomics). The deterministic path adds a stable sort of the
        keys (torch.sort; int32 keys when they fit), per-destination segment bounds
        (torch.searchsorted) and gathers of src in sorted order; with an index that varies along
        the trailing dimensions it sorts one key per element and writes destinations with the
        stride of the trailing dimensions (a general fallback, not a fast path). Under
        CUDA-graph capture the pieces' pass runs whenever L exceeds the piece length (the host
        cannot know whether a destination does; an empty piece slot costs one short program).
    Source:
        torch.Tensor.scatter_add_ (semantics); segmented reduction over sorted keys (Blelloch 1990).
    """
    op = "scatter_add"
    _check_common(op, input, index, src, "src")
    d = normalize_dim(op, dim, input.dim())
    if not (index.dim() == src.dim() == input.dim()):
        raise ValueError(
            f"roofkit.{op}: index and src must have input's number of dimensions ({input.dim()}); "
            f"got index {index.dim()}-d and src {src.dim()}-d"
        )
    for k in range(index.dim()):
        if index.shape[k] > src.shape[k] or (k != d and index.shape[k] > input.shape[k]):
            raise ValueError(
                f"roofkit.{op}: index of shape {tuple(index.shape)} must fit src {tuple(src.shape)} in every "
                f"dimension and input {tuple(input.shape)} in every dimension but dim={d} (dimension {k} does not)"
            )
    det = _resolve_deterministic(op, deterministic)
    if input.dim() == 0:
        return _scatter_add_op(input.reshape(1), 0, index.reshape(1), src.reshape(1), 1.0, False, det).reshape(())
    return _scatter_add_op(input, d, index, src, 1.0, False, det)


@on_input_device
def index_add(
    input: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, *, alpha=1,
    deterministic: bool | None = None,
) -> torch.Tensor:
    """Out-of-place index-add: out = input; out.select(dim, index[l]) += alpha * source.select(dim, l)
    for every l (duplicated indices accumulate every contribution).

    Mirrors ``torch.index_add(input, dim, index, source, *, alpha=1)``.

    Args:
        input: float32, float16 or bfloat16 tensor, any shape and strides, on CUDA (or on CPU with
            TRITON_INTERPRET=1). It is not modified.
        dim: the dimension along which to index (negative counts from the end).
        index: 1-D (or 0-d) int64 or int32 tensor of length L, values in [0, input.size(dim)).
        source: tensor of input's dtype and shape except source.size(dim) == L.
        alpha: real scalar multiplying source.
        deterministic: True: sorted path, bitwise reproducible run to run; False: atomic path;
            None (default): ``torch.are_deterministic_algorithms_enabled()``.
    Returns:
        A new contiguous tensor of input's shape and dtype.
    Raises:
        TypeError: a tensor argument of the wrong type or dtype (index not int64/int32, source's
            dtype not input's), alpha not a real number, bad ``dim`` or ``deterministic`` type.
        ValueError: index not 1-D, source of the wrong shape, tensors on different or
            unsupported devices.
        IndexError: ``dim`` out of range; index values outside [0, input.size(dim)), checked as
            :func:`scatter_add` checks them (one host synchronization per call). Not under
            CUDA-graph capture: there an out-of-range value is skipped (its contribution dropped,
            its gradient 0) without an error, and nothing outside input, source and the output
            is ever read or written. Validate indices before capturing.
    Numerics:
        As :func:`scatter_add`; alpha multiplies each source element (atomic path) or each
        destination's float32 sum (deterministic path). Backward: grad_input = grad,
        grad_source = alpha * grad.index_select(dim, index); first order only.
    Cost:
        Reads input, source and index once, writes the output once; one add per source element,
        plus one multiply with alpha != 1 (``index_add_cost``). Extra traffic as in
        :func:`scatter_add`.
    Source:
        torch.Tensor.index_add_ (semantics); segmented reduction over sorted keys (Blelloch 1990).
    """
    op = "index_add"
    _check_common(op, input, index, source, "source")
    d = normalize_dim(op, dim, input.dim())
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"roofkit.{op}: alpha must be a real number, got {type(alpha).__name__}")
    if math.isfinite(alpha) and abs(alpha) > torch.finfo(torch.float32).max:
        raise ValueError(f"roofkit.{op}: alpha={alpha} cannot be converted to float32 without overflow")
    if index.dim() > 1:
        raise ValueError(f"roofkit.{op}: index must be 1-D (a vector), got shape {tuple(index.shape)}")
    L = index.numel()
    expected = list(input.shape) if input.dim() else [1]
    expected[d] = L
    got = list(source.shape) if source.dim() else [1]
    if source.dim() > max(input.dim(), 1) or got != expected:
        raise ValueError(
            f"roofkit.{op}: source must have input's shape {tuple(input.shape)} except size {L} "
            f"(index's length) at dim={d}; got {tuple(source.shape)}"
        )
    det = _resolve_deterministic(op, deterministic)
    if input.dim() == 0:
        out = _scatter_add_op(input.reshape(1), 0, index.reshape(1), source.reshape(1), float(alpha), True, det)
        return out.reshape(())
    return _scatter_add_op(input, d, index.reshape(-1), source.reshape(expected), float(alpha), True, det)
