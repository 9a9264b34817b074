"""Affine int8 / uint8 quantization: quantize and dequantize (kernels, custom ops, references,
costs, test cases and specs). The math, program mapping and sources are in the package docstring
(roofkit/ops/quant/__init__.py).

Settings read at call time from this module (tests patch them here): MINMAX_PROGRAMS_PER_SM,
ELEMWISE_TILE, DEQUANTIZE_TILE, DEQUANTIZE_INNER, DEQUANTIZE_WARPS.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from ...harness import baselines
from ...harness.inputs import random_tensor, with_layout
from ...harness.spec import Cost, Inputs, OpSpec, case
from .._common import FLOAT_DTYPES, as_int, check_power_of_two, check_same_device, check_tensor, needs_int64, sm_count
from .._runtime import Op, cached_launch, planned
from ._common import _INT_RANGES, Q_DTYPES, _I8, _cdiv, _channel_shape, _esize, _pow2

# quantize clamps x / S to +-QUANT_CLAMP before rounding (the result is clamped to [qmin, qmax]
# after adding Z anyway), which keeps |v| < 2**22 for the round-half-even trick below.
QUANT_CLAMP = 1024.0
QUANT_CLAMP_JIT = tl.constexpr(QUANT_CLAMP)
# Programs per SM the min/max reduction aims for (split over the reduced elements).
MINMAX_PROGRAMS_PER_SM = 4
# Elements per quantize / min-max tile.
ELEMWISE_TILE = 4096
# dequantize's tile (elements), the most of them along the unit-stride dimension, and warps: an
# int8 read and a float32 write per element.
DEQUANTIZE_TILE = 4096
DEQUANTIZE_INNER = 1024
DEQUANTIZE_WARPS = 4


def _qrange(dtype: torch.dtype) -> tuple[int, int]:
    if dtype in _INT_RANGES:
        return _INT_RANGES[dtype]
    info = torch.iinfo(dtype)
    return info.min, info.max



# ----------------------------------------------------------------------------- references (torch math)


def quantize_torch(x: torch.Tensor, *, axis: int | None = None, dtype: torch.dtype = torch.int8):
    """The documented quantize arithmetic in torch float32 ops (each step IEEE round-to-nearest):
    the exact reference of :func:`quantize` and the torch baseline. A float64 ``x`` (as the harness
    passes it) is first cast back to float32, exact for inputs that came from float32/16/bf16."""
    qmin, qmax = _qrange(dtype)
    x32 = x.to(torch.float32)
    ax = None if axis is None else axis % max(x.dim(), 1)
    if x32.numel() == 0:
        shape = _channel_shape(x.shape, ax)
        scale = torch.ones(shape, dtype=torch.float32, device=x.device)
        zp = torch.full(shape, qmin, dtype=torch.int32, device=x.device)
        return torch.empty(x.shape, dtype=dtype, device=x.device), scale, zp
    if ax is None:
        lo, hi = x32.min(), x32.max()
    else:
        dims = [d for d in range(x.dim()) if d != ax]
        lo = x32.amin(dim=dims, keepdim=True) if dims else x32
        hi = x32.amax(dim=dims, keepdim=True) if dims else x32
    zero = torch.zeros((), dtype=torch.float32, device=x.device)
    lo = torch.minimum(lo, zero)
    hi = torch.maximum(hi, zero)
    scale = (hi - lo) / torch.tensor(float(qmax - qmin), dtype=torch.float32, device=x.device)
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    zf = qmin - torch.round((lo / scale).clamp(-QUANT_CLAMP, QUANT_CLAMP))
    zp = zf.clamp(qmin, qmax).to(torch.int32)
    v = torch.round((x32 / scale).clamp(-QUANT_CLAMP, QUANT_CLAMP)) + zp
    q = v.clamp(qmin, qmax).to(dtype)
    return q, scale.to(torch.float32), zp


def quantize_reference(x: torch.Tensor, *, axis: int | None = None, dtype: torch.dtype = torch.int8):
    """Exact reference: quantize is defined in float32 arithmetic (see :func:`quantize`), so the
    reference is that arithmetic done by torch (float64 is not meaningful here); q and Z are
    compared exactly, S to float32 rounding."""
    return quantize_torch(x, axis=axis, dtype=dtype)


def _param_view(t: torch.Tensor, q: torch.Tensor, axis: int | None) -> torch.Tensor:
    """Per-channel parameter ``t`` (shape (C,) or keepdim) shaped to broadcast against ``q``."""
    if axis is None:
        return t.reshape(())
    return t.reshape(_channel_shape(q.shape, axis % max(q.dim(), 1)))


def dequantize_torch(q, scale, zero_point, *, axis=None):
    """S * (q - Z) in torch float32 (the torch baseline): q - Z in int32, as torch users write it,
    which wraps for zero points far outside q's range (no spec case has one; roofkit's kernel
    forms the difference in int64)."""
    s = _param_view(scale, q, axis).to(torch.float32)
    z = _param_view(zero_point, q, axis)
    return (q.to(torch.int32) - z).to(torch.float32) * s


def dequantize_reference(q, scale, zero_point, *, axis=None):
    """S * (q - Z) in float64."""
    s = _param_view(scale, q, axis).to(torch.float64)
    z = _param_view(zero_point, q, axis)
    return (q.to(torch.int64) - z.to(torch.int64)).to(torch.float64) * s


# ----------------------------------------------------------------------------- cost


def quantize_cost(case, dtype: torch.dtype) -> Cost:
    """Ideal bytes: x read once, q written once (1 byte each), scale and zero point (4 + 4 bytes
    per channel). The min/max pass re-reads x (2 reads in all); not counted in the ideal.
    FLOPs: about 6 per element (min, max, divide, round, add zero point, clamp)."""
    numel = math.prod(case["shape"])
    axis = case.get("axis")
    c = case["shape"][axis] if axis is not None and numel else 1
    return Cost(flops=6 * numel, bytes=numel * (_esize(dtype) + 1) + 8 * c)


def dequantize_cost(case, dtype: torch.dtype) -> Cost:
    """Bytes: q read (1 byte per element), fp32 r written, scale and zero point per channel;
    2 FLOP per element (subtract, multiply)."""
    numel = math.prod(case["shape"])
    axis = case.get("axis")
    c = case["shape"][axis] if axis is not None else 1
    return Cost(flops=2 * numel, bytes=numel * (_esize(dtype) + 4) + 8 * c)


# ----------------------------------------------------------------------------- launch heuristics


def _tile3(sizes, strides, budget: int | None = None, inner_max: int = 1024) -> list[int]:
    """Block edges for a (P, C, Q) tile of at most ``budget`` elements (default ELEMWISE_TILE,
    read at call time): the dimension of smallest stride (memory order) gets the longest edge (up
    to ``inner_max``), then the next ones. Cached per (sizes, strides, budget, inner_max)."""
    budget = ELEMWISE_TILE if budget is None else budget
    return list(_tile3_of(tuple(sizes), tuple(strides), budget, inner_max))


@functools.lru_cache(maxsize=4096)
def _tile3_of(sizes: tuple, strides: tuple, budget: int, inner_max: int) -> tuple[int, int, int]:
    order = sorted(range(3), key=lambda d: (abs(strides[d]) if sizes[d] > 1 else 1 << 62, -d))
    blocks = [1, 1, 1]
    left = budget
    for i, d in enumerate(order):
        cap = inner_max if i == 0 else left
        blocks[d] = max(1, min(_pow2(sizes[d]), cap, left))
        left = max(1, left // blocks[d])
    return tuple(blocks)


# ----------------------------------------------------------------------------- jit helpers


@triton.jit
def _rint(v):
    """Round half to even for |v| < 2**22: adding and removing 1.5 * 2**23 leaves no fraction
    bits, and IEEE addition rounds to nearest-even (portable: the interpreter has no rint)."""
    return (v + 12582912.0) - 12582912.0


@triton.jit
def _tile_of_program(n_pb, n_qb):
    """(P block, channel block, Q block) of this program: Q blocks fastest, then P blocks."""
    pid = tl.program_id(0)
    qb = pid % n_qb
    t = pid // n_qb
    pb = t % n_pb
    cb = t // n_pb
    return pb, cb, qb


@triton.jit
def _offsets3(pb, cb, qb, sxp, sxc, sxq, P, C, Q, USE_INT64: tl.constexpr,
              BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_Q: tl.constexpr):
    """Element offsets and mask of tile (pb, cb, qb) of a (P, C, Q) tensor; channel indices."""
    ps = pb * BLOCK_P + tl.arange(0, BLOCK_P)
    cs = cb * BLOCK_C + tl.arange(0, BLOCK_C)
    qs = qb * BLOCK_Q + tl.arange(0, BLOCK_Q)
    mask = (ps < P)[:, None, None] & (cs < C)[None, :, None] & (qs < Q)[None, None, :]
    if USE_INT64:
        ps = ps.to(tl.int64)
        qs = qs.to(tl.int64)
        cs64 = cs.to(tl.int64)
    else:
        cs64 = cs
    offs = ps[:, None, None] * sxp + cs64[None, :, None] * sxc + qs[None, None, :] * sxq
    return offs, mask, cs


# ----------------------------------------------------------------------------- quantize kernels


@triton.jit
def _quantize_minmax_kernel(
    x_ptr, part_ptr, P, C, Q, sxp, sxc, sxq, n_qb, iters, total,
    USE_INT64: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_Q: tl.constexpr,
):
    """Partial min(x, 0) / max(x, 0) of channel block program_id(0) over iterations
    [s * iters, (s + 1) * iters) of its (P-block, Q-block) walk, s = program_id(1); writes
    part[s, c, 0:2]. A NaN anywhere in the split makes its max NaN."""
    cb = tl.program_id(0)
    s = tl.program_id(1)
    # 0 belongs to the range by definition, so zeros are the neutral start and the masked fill.
    lo = tl.zeros([BLOCK_P, BLOCK_C, BLOCK_Q], tl.float32)
    hi = tl.zeros([BLOCK_P, BLOCK_C, BLOCK_Q], tl.float32)
    start = s * iters
    stop = tl.minimum(start + iters, total)
    for it in range(start, stop):
        pb = it // n_qb
        qb = it - pb * n_qb
        offs, mask, cs = _offsets3(pb, cb, qb, sxp, sxc, sxq, P, C, Q, USE_INT64, BLOCK_P, BLOCK_C, BLOCK_Q)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        lo = tl.minimum(lo, x, propagate_nan=tl.PropagateNan.ALL)
        hi = tl.maximum(hi, x, propagate_nan=tl.PropagateNan.ALL)
    has_nan = tl.max(tl.max((hi != hi).to(tl.int32), axis=2), axis=0) > 0
    lo_c = tl.min(tl.min(lo, axis=2), axis=0)
    hi_c = tl.max(tl.max(hi, axis=2), axis=0)
    hi_c = tl.where(has_nan, float("nan"), hi_c)
    cs = cb * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = cs < C
    dst = part_ptr + (s.to(tl.int64) * C + cs) * 2
    tl.store(dst, lo_c, mask=c_ok)
    tl.store(dst + 1, hi_c, mask=c_ok)


@triton.jit
def _quantize_params_kernel(part_ptr, scale_ptr, zp_ptr, C, SPLITS, QMIN: tl.constexpr, QMAX: tl.constexpr,
                            BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    """Scale and zero point of BLOCK_C channels from their SPLITS partials, read as
    [BLOCK_S, BLOCK_C] tiles and reduced over the splits (min/max are exact: deterministic).
    Division is IEEE round-to-nearest (div_rn)."""
    cs = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = cs < C
    ss = tl.arange(0, BLOCK_S)
    lo = tl.zeros([BLOCK_S, BLOCK_C], tl.float32)
    hi = tl.zeros([BLOCK_S, BLOCK_C], tl.float32)
    for s0 in range(0, SPLITS, BLOCK_S):
        s = s0 + ss
        mask = (s < SPLITS)[:, None] & c_ok[None, :]
        src = part_ptr + (s.to(tl.int64)[:, None] * C + cs[None, :]) * 2
        lo = tl.minimum(lo, tl.load(src, mask=mask, other=0.0), propagate_nan=tl.PropagateNan.ALL)
        hi = tl.maximum(hi, tl.load(src + 1, mask=mask, other=0.0), propagate_nan=tl.PropagateNan.ALL)
    has_nan = tl.max((hi != hi).to(tl.int32), axis=0) > 0
    lo_c = tl.min(lo, axis=0)
    hi_c = tl.where(has_nan, float("nan"), tl.max(hi, axis=0))
    levels = tl.full([BLOCK_C], QMAX - QMIN, tl.float32)
    scale = tl.math.div_rn(hi_c - lo_c, levels)
    scale = tl.where(scale == 0.0, 1.0, scale)
    v = tl.math.div_rn(lo_c, scale)
    v = tl.minimum(tl.maximum(v, -QUANT_CLAMP_JIT), QUANT_CLAMP_JIT)
    zf = QMIN - _rint(v)
    zf = tl.minimum(tl.maximum(zf, QMIN), QMAX)
    tl.store(scale_ptr + cs, scale, mask=c_ok)
    tl.store(zp_ptr + cs, zf.to(tl.int32), mask=c_ok)


@triton.jit
def _quantize_kernel(
    x_ptr, q_ptr, scale_ptr, zp_ptr, P, C, Q, sxp, sxc, sxq, sqp, sqc, sqq, n_pb, n_qb,
    QMIN: tl.constexpr, QMAX: tl.constexpr, USE_INT64: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_Q: tl.constexpr,
):
    """q = clamp(rint(x / S) + Z, QMIN, QMAX) on one [BLOCK_P, BLOCK_C, BLOCK_Q] tile (program id
    -> (channel block, P block, Q block)); x / S is IEEE round-to-nearest, rint half-to-even."""
    pb, cb, qb = _tile_of_program(n_pb, n_qb)
    offs, mask, cs = _offsets3(pb, cb, qb, sxp, sxc, sxq, P, C, Q, USE_INT64, BLOCK_P, BLOCK_C, BLOCK_Q)
    qoffs, _, _ = _offsets3(pb, cb, qb, sqp, sqc, sqq, P, C, Q, USE_INT64, BLOCK_P, BLOCK_C, BLOCK_Q)
    c_ok = cs < C
    s = tl.load(scale_ptr + cs, mask=c_ok, other=1.0)
    z = tl.load(zp_ptr + cs, mask=c_ok, other=0).to(tl.float32)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    v = tl.math.div_rn(x, s[None, :, None])
    v = tl.minimum(tl.maximum(v, -QUANT_CLAMP_JIT), QUANT_CLAMP_JIT)
    qv = _rint(v) + z[None, :, None]
    qv = tl.minimum(tl.maximum(qv, QMIN), QMAX)
    tl.store(q_ptr + qoffs, qv.to(tl.int32).to(q_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _dequantize_kernel(
    q_ptr, r_ptr, scale_ptr, zp_ptr, P, C, Q, sqp, sqc, sqq, srp, src, srq, n_pb, n_qb,
    USE_INT64: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_Q: tl.constexpr,
):
    """r = S * (q - Z) in float32 on one tile: q - Z exact in int64 (any int32 zero point), rounded
    to float32 (exact while |q - Z| < 2**24: always for a zero point in q's range), times S."""
    pb, cb, qb = _tile_of_program(n_pb, n_qb)
    offs, mask, cs = _offsets3(pb, cb, qb, sqp, sqc, sqq, P, C, Q, USE_INT64, BLOCK_P, BLOCK_C, BLOCK_Q)
    roffs, _, _ = _offsets3(pb, cb, qb, srp, src, srq, P, C, Q, USE_INT64, BLOCK_P, BLOCK_C, BLOCK_Q)
    c_ok = cs < C
    s = tl.load(scale_ptr + cs, mask=c_ok, other=1.0)
    z = tl.load(zp_ptr + cs, mask=c_ok, other=0).to(tl.int64)
    q = tl.load(q_ptr + offs, mask=mask, other=0).to(tl.int64)
    r = (q - z[None, :, None]).to(tl.float32) * s[None, :, None]
    tl.store(r_ptr + roffs, r, mask=mask)


# ----------------------------------------------------------------------------- host launchers


def _view3(x: torch.Tensor, axis: int | None) -> torch.Tensor:
    """(P, C, Q) view of ``x`` with the channel axis in the middle (C = 1 per tensor); a
    contiguous copy when the leading or trailing dimensions cannot be merged into a view."""
    shape = tuple(x.shape)
    if axis is None:
        p = math.prod(shape[:-1]) if shape else 1
        dims = (p, 1, shape[-1] if shape else 1)
    else:
        dims = (math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:]))
    try:
        return x.view(dims)
    except RuntimeError:
        return x.contiguous().view(dims)


@functools.lru_cache(maxsize=4096)
def _elementwise_plan(shape: tuple, strides: tuple, tile: int, inner_max: int = 1024):
    """((BLOCK_P, BLOCK_C, BLOCK_Q), P blocks, C blocks, Q blocks, int64 offsets) of an elementwise
    pass over a (P, C, Q) view of these strides, writing a contiguous tensor of its shape; at most
    ``inner_max`` elements along the unit-stride dimension."""
    P, C, Q = shape
    check_power_of_two("quantize / dequantize", "tile (ELEMWISE_TILE, DEQUANTIZE_TILE)", tile)
    check_power_of_two("quantize / dequantize", "DEQUANTIZE_INNER", inner_max)
    bp, bc, bq = _tile3_of(shape, strides, tile, inner_max)
    use_int64 = needs_int64(*(s * st for s, st in zip(shape, strides)), P * C * Q)
    return (bp, bc, bq), _cdiv(P, bp), _cdiv(C, bc), _cdiv(Q, bq), use_int64


@functools.lru_cache(maxsize=4096)
def _minmax_plan(n_pb: int, n_cb: int, n_qb: int, C: int, sms: int, programs_per_sm: int, tile: int):
    """(splits, iterations per split, BLOCK_C and BLOCK_S of the parameter kernel) of quantize's
    min/max reduction."""
    total = n_pb * n_qb
    target = max(1, programs_per_sm * sms // n_cb)
    splits = min(total, target)
    iters = _cdiv(total, splits)
    splits = _cdiv(total, iters)
    # Partials as [BLOCK_S, BLOCK_C] tiles: a per-tensor scale reads its (up to a few hundred)
    # splits in one or two loads instead of a serial chain (41 us -> a few us on the H200).
    pc = min(128, _pow2(C))
    ps = max(1, min(_pow2(splits), tile // pc))
    return splits, iters, pc, ps


def _quantize_forward(x: torch.Tensor, axis: int | None, dtype: torch.dtype):
    qmin, qmax = _qrange(dtype)
    pshape = _channel_shape(x.shape, axis)
    c = x.shape[axis] if axis is not None else 1
    q = torch.empty(x.shape, dtype=dtype, device=x.device)
    scale = torch.empty((c,), dtype=torch.float32, device=x.device)
    zp = torch.empty((c,), dtype=torch.int32, device=x.device)
    if x.numel() == 0:
        # Nothing to measure: the all-zero rule (S = 1, Z = qmin); no launch.
        return q, scale.fill_(1.0).view(pshape), zp.fill_(qmin).view(pshape)
    xv = _view3(x, axis)
    shape, xs = tuple(xv.shape), xv.stride()
    qv = q.view(shape)
    P, C, Q = shape
    # Settings read per call (tests patch them), the plans cached per shape and strides.
    tile = ELEMWISE_TILE
    (bp, bc, bq), n_pb, n_cb, n_qb, use_int64 = _elementwise_plan(shape, xs, tile)
    total = n_pb * n_qb
    splits, iters, pc, ps = _minmax_plan(n_pb, n_cb, n_qb, C, sm_count(x.device), MINMAX_PROGRAMS_PER_SM, tile)
    part = torch.empty((splits, C, 2), dtype=torch.float32, device=x.device)
    warps = 4
    cached_launch(
        _LAUNCHES, _quantize_minmax_kernel, (n_cb, splits),
        USE_INT64=use_int64, BLOCK_P=bp, BLOCK_C=bc, BLOCK_Q=bq, num_warps=warps,
    )(xv, part, P, C, Q, *xs, n_qb, iters, total)
    cached_launch(
        _LAUNCHES, _quantize_params_kernel, _cdiv(C, pc),
        QMIN=qmin, QMAX=qmax, BLOCK_S=ps, BLOCK_C=pc, num_warps=4,
    )(part, scale, zp, C, splits)
    cached_launch(
        _LAUNCHES, _quantize_kernel, n_cb * n_pb * n_qb,
        QMIN=qmin, QMAX=qmax, USE_INT64=use_int64, BLOCK_P=bp, BLOCK_C=bc, BLOCK_Q=bq, num_warps=warps,
    )(xv, qv, scale, zp, P, C, Q, *xs, *qv.stride(), n_pb, n_qb)
    return q, scale.view(pshape), zp.view(pshape)


def _dequantize_forward(q: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, axis: int | None):
    r = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    if q.numel() == 0:
        return r
    qv = _view3(q, axis)
    shape, qs = tuple(qv.shape), qv.stride()
    rv = r.view(shape)
    P, C, Q = shape
    (bp, bc, bq), n_pb, n_cb, n_qb, use_int64 = _elementwise_plan(shape, qs, DEQUANTIZE_TILE, DEQUANTIZE_INNER)
    s = scale.reshape(-1).contiguous()
    z = zero_point.reshape(-1).contiguous()
    cached_launch(
        _LAUNCHES, _dequantize_kernel, n_cb * n_pb * n_qb,
        USE_INT64=use_int64, BLOCK_P=bp, BLOCK_C=bc, BLOCK_Q=bq, num_warps=DEQUANTIZE_WARPS,
    )(qv, rv, s, z, P, C, Q, *qs, *rv.stride(), n_pb, n_qb)
    return r


# ----------------------------------------------------------------------------- custom ops


def _quantize(x: torch.Tensor, axis: int | None, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _quantize_forward(x, axis, dtype)


def _quantize_fake(x, axis, dtype):
    pshape = _channel_shape(x.shape, axis)
    return (x.new_empty(x.shape, dtype=dtype), x.new_empty(pshape, dtype=torch.float32),
            x.new_empty(pshape, dtype=torch.int32))


def _dequantize(q: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, axis: int | None) -> torch.Tensor:
    return _dequantize_forward(q, scale, zero_point, axis)


def _dequantize_fake(q, scale, zero_point, axis):
    return q.new_empty(q.shape, dtype=torch.float32)


_LAUNCHES: dict = {}
_quantize_op = Op("roofkit::quantize", _quantize, _quantize_fake)
_dequantize_op = Op("roofkit::dequantize", _dequantize, _dequantize_fake)


# ----------------------------------------------------------------------------- argument checks


def _check_axis(op: str, axis, ndim: int) -> int | None:
    if axis is None:
        return None
    axis = as_int(op, "axis", axis, "None or an int")
    if ndim == 0:
        raise IndexError(f"roofkit.{op}: axis {axis} given for a 0-d input (per-channel needs at least 1 dimension)")
    if not -ndim <= axis < ndim:
        raise IndexError(f"roofkit.{op}: axis {axis} out of range for a {ndim}-d input (expected [{-ndim}, {ndim - 1}])")
    return axis % ndim


# ----------------------------------------------------------------------------- public functions


@planned
def quantize(x: torch.Tensor, *, axis: int | None = None, dtype: torch.dtype = torch.int8):
    """Affine quantization r = S (q - Z), asymmetric, per tensor or per channel along ``axis``.

        lo = min(min x, 0),  hi = max(max x, 0)              (0 is always representable)
        S  = (hi - lo) / (qmax - qmin)                       (S = 1 when hi == lo, i.e. x all 0)
        Z  = clamp(qmin - rint(lo / S), qmin, qmax)
        q  = clamp(rint(x / S) + Z, qmin, qmax)

    Args:
        x: float32, float16 or bfloat16 tensor of any shape and strides, on CUDA (or CPU with
            TRITON_INTERPRET=1).
        axis: None (one S, Z for the whole tensor) or the channel dimension (one S, Z per index
            along it, min/max over all other dimensions, as torch.quantize_per_channel).
        dtype: torch.int8 (qmin, qmax = -128, 127) or torch.uint8 (0, 255).
    Returns:
        (q, scale, zero_point): q of x's shape in ``dtype`` (contiguous); scale float32 and
        zero_point int32, 0-d per tensor, per channel of shape (1, ..., C, ..., 1) (x.dim()
        dimensions, C at ``axis``) so that they broadcast against x; e.g. axis=0 of an (M, K)
        matrix gives (M, 1) (int8_matmul's per-row scale_a), axis=1 of (K, N) gives (1, N).
    Raises:
        TypeError: x not a float tensor; dtype not int8/uint8; axis not an int.
        IndexError: axis out of range (or given for a 0-d x).
        ValueError: x on an unsupported device.
    Numerics:
        float32 arithmetic with one IEEE round-to-nearest per step (x converted exactly;
        hi - lo; divisions by S are correctly rounded, not reciprocal multiplies); rint is
        round-half-to-even (torch.round), applied to x / S clamped to +-1024. The same steps in
        torch (``quantize_torch``) give bitwise-equal q, S, Z. A channel of zeros (or an empty
        x) has S = 1, Z = qmin. Non-finite x: a NaN makes S NaN, +-inf makes S inf; q and Z are
        then meaningless (check S). Deterministic.
    Cost:
        x read twice (min/max pass, quantize pass), q written once, 8 bytes per channel;
        ``quantize_cost`` counts the ideal (x read once). Three launches.
    Source:
        Jacob et al. 2018 (affine quantization); torch.quantize_per_tensor / per_channel.
    """
    check_tensor("quantize", "x", x)
    if dtype not in Q_DTYPES:
        raise TypeError(f"roofkit.quantize: dtype must be torch.int8 or torch.uint8; got {dtype}")
    ax = _check_axis("quantize", axis, x.dim())
    return _quantize_op(x, ax, dtype)


@planned
def dequantize(q: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, *, axis: int | None = None) -> torch.Tensor:
    """r = S (q - Z) in float32, per tensor or per channel along ``axis``.

    Args:
        q: int8 or uint8 tensor of any shape and strides.
        scale: float32; one element (axis None) or C = q.shape[axis] elements, shaped (C,) or
            (1, ..., C, ..., 1) as :func:`quantize` returns it.
        zero_point: int32, same shape rules as ``scale``.
        axis: None or the channel dimension of q.
    Returns:
        float32 tensor of q's shape (contiguous).
    Raises:
        TypeError: q not int8/uint8, scale not float32, zero_point not int32, axis not an int.
        ValueError: scale / zero_point of the wrong size or shape; tensors on different devices.
        IndexError: axis out of range.
    Numerics:
        q - Z exact, one float32 rounding of the product (as torch.dequantize) for a zero point
        in q's integer range. Any other int32 zero point is taken as given (torch's quantized
        tensors cannot hold one; no check costs device time): q - Z exact in int64, rounded to
        float32 once before the product when |q - Z| >= 2**24.
    Cost:
        q read once (1 byte), r written once (4 bytes), 8 bytes per channel; 2 FLOP per element.
    Source:
        torch.dequantize of per-tensor / per-channel affine tensors.
    """
    check_tensor("dequantize", "q", q, Q_DTYPES)
    ax = _check_axis("dequantize", axis, q.dim())
    for name, t, dts in (("scale", scale, (torch.float32,)), ("zero_point", zero_point, (torch.int32,))):
        check_tensor("dequantize", name, t, dts)
        check_same_device("dequantize", name, t, q)
        if ax is None:
            if t.numel() != 1:
                raise ValueError(f"roofkit.dequantize: {name} must have one element when axis is None; got shape {tuple(t.shape)}")
        else:
            c = q.shape[ax]
            ok = tuple(t.shape) in ((c,), _channel_shape(q.shape, ax))
            if not ok:
                raise ValueError(
                    f"roofkit.dequantize: {name} must have shape ({c},) or {_channel_shape(q.shape, ax)} "
                    f"for axis={ax}; got {tuple(t.shape)}"
                )
    return _dequantize_op(q, scale, zero_point, ax)


# ----------------------------------------------------------------------------- specs


def _quantize_make_inputs(case, dtype, generator, device) -> Inputs:
    shape = case["shape"]
    dist = case.get("dist", "normal")
    if dist in ("constant", "zeros"):
        value = 0.0 if dist == "zeros" else float(torch.randn((), generator=generator, device=generator.device)) * 3.0
        x = with_layout(torch.full(shape, value, dtype=dtype, device=device), case.get("layout", "contiguous"))
    else:
        x = random_tensor(shape, dtype, generator, device, dist, magnitude=case.get("magnitude", 1e3),
                          layout=case.get("layout", "contiguous"))
    return Inputs((x,), {"axis": case.get("axis"), "dtype": case.get("qdtype", torch.int8)})


def _dequantize_make_inputs(case, dtype, generator, device) -> Inputs:
    x = random_tensor(case["shape"], torch.float32, generator, device, case.get("dist", "normal"))
    axis = case.get("axis")
    q, s, z = quantize_torch(x, axis=axis, dtype=dtype)
    if case.get("flat_params"):
        s, z = s.reshape(-1), z.reshape(-1)
    return Inputs((with_layout(q, case.get("layout", "contiguous")), s, z), {"axis": axis})

_F32 = (torch.float32,)
_BF16 = (torch.bfloat16,)

QUANTIZE_CASES = [
    case("scalar", ["quick"], shape=()),
    case("per_tensor_37x65", ["quick"], shape=(37, 65)),
    case("per_tensor_uint8_17x33", shape=(17, 33), qdtype=torch.uint8),
    case("per_tensor_1d_3001", shape=(3001,), dtypes=_F32),
    case("axis0_9x100", ["quick"], shape=(9, 100), axis=0),
    case("axis1_40x9", shape=(40, 9), axis=1),
    case("axis_minus1_uint8_6x5x7", shape=(6, 5, 7), axis=-1, qdtype=torch.uint8),
    case("axis1_3d_4x6x10", shape=(4, 6, 10), axis=1),
    case("axis0_1d_7", shape=(7,), axis=0, dtypes=_F32),
    case("transposed_per_tensor_24x31", shape=(24, 31), layout="transposed"),
    case("transposed_axis0_24x31", shape=(24, 31), axis=0, layout="transposed", dtypes=_F32),
    case("strided_axis1_8x20", shape=(8, 20), axis=1, layout="strided", dtypes=_F32),
    case("offset_4d_copy_2x3x4x5", shape=(2, 3, 4, 5), axis=2, layout="transposed", dtypes=_F32),
    case("ties_16x40", shape=(16, 40), dist="ties"),
    case("ties_axis0_uint8_16x40", shape=(16, 40), dist="ties", axis=0, qdtype=torch.uint8),
    case("positive_only_12x50", shape=(12, 50), dist="shifted", magnitude=1.0),
    case("large_magnitude_10x30", shape=(10, 30), dist="large", dtypes=_F32),
    case("constant_9x13", shape=(9, 13), dist="constant"),
    case("zeros_axis0_5x6", shape=(5, 6), dist="zeros", axis=0, dtypes=_F32),
    case("empty_0x5", ["quick"], shape=(0, 5)),
    case("empty_axis1_0x5", shape=(0, 5), axis=1, dtypes=_F32),
    # gpu: real shapes, the over-2**31 path.
    case("gpu_act_8192x4096", ["gpu"], shape=(8192, 4096), dtypes=_BF16),
    case("gpu_per_token_8192x4096", ["gpu"], shape=(8192, 4096), axis=0),
    case("gpu_per_column_4096x4099", ["gpu"], shape=(4096, 4099), axis=1, qdtype=torch.uint8),
    case("gpu_weight_14336x4096_axis0", ["gpu"], shape=(14336, 4096), axis=0, dtypes=_BF16),
    case("gpu_transposed_3000x5000", ["gpu"], shape=(3000, 5000), layout="transposed", dtypes=_F32),
    case("gpu_over_2pow31_elements", ["gpu", "slow"], shape=(16385, 131072), dtypes=_BF16),
]

QUANTIZE_SUITES = {
    # llama3-8b: hidden 4096, ffn 14336, 8192 tokens: dynamic activation quantization (per tensor
    # and per token) and weight quantization per output channel.
    "llama3-8b": [
        case("act_per_tensor_8192x4096", shape=(8192, 4096), dtypes=_BF16),
        case("act_per_token_8192x4096", shape=(8192, 4096), axis=0, dtypes=_BF16),
        case("w_up_per_channel_14336x4096", shape=(14336, 4096), axis=0, dtypes=_BF16),
    ],
    "edge": [
        case("per_column_8192x4096", shape=(8192, 4096), axis=1, dtypes=_F32),
        case("flat_64Mi", shape=(1 << 26,), dtypes=_F32),
    ],
    # host: one decoding step's activations (8 tokens x 4096), per tensor and per token, where the
    # host's cost per call is the time.
    "host": [
        case("act_per_tensor_8x4096", shape=(8, 4096), dtypes=_BF16),
        case("act_per_token_8x4096", shape=(8, 4096), axis=0, dtypes=_BF16),
    ],
}

DEQUANTIZE_CASES = [
    case("per_tensor_37x65", ["quick"], shape=(37, 65)),
    case("axis0_9x100", shape=(9, 100), axis=0),
    case("axis1_flat_params_40x9", shape=(40, 9), axis=1, flat_params=True),
    case("axis1_3d_4x6x10", shape=(4, 6, 10), axis=1),
    case("transposed_24x31", shape=(24, 31), layout="transposed", dtypes=_I8),
    case("strided_axis0_8x20", shape=(8, 20), axis=0, layout="strided", dtypes=_I8),
    case("empty_0x5", ["quick"], shape=(0, 5)),
    case("gpu_8192x4096", ["gpu"], shape=(8192, 4096)),
    case("gpu_axis0_14336x4096", ["gpu"], shape=(14336, 4096), axis=0, dtypes=_I8),
]

DEQUANTIZE_SUITES = {
    "llama3-8b": [
        case("act_per_tensor_8192x4096", shape=(8192, 4096), dtypes=_I8),
        case("w_up_per_channel_14336x4096", shape=(14336, 4096), axis=0, dtypes=_I8),
    ],
    # host: one decoding step's activations (8 tokens x 4096), where the host's cost per call is the time.
    "host": [
        case("act_per_tensor_8x4096", shape=(8, 4096), dtypes=_I8),
        case("act_per_token_8x4096", shape=(8, 4096), axis=0, dtypes=_I8),
    ],
}


QUANTIZE_SPEC = OpSpec(
    name="quantize",
    impl=quantize,
    reference=quantize_reference,
    torch_impl=quantize_torch,
    make_inputs=_quantize_make_inputs,
    cost=quantize_cost,
    dtypes=FLOAT_DTYPES,
    cases=QUANTIZE_CASES,
    suites=QUANTIZE_SUITES,
    baselines={**baselines.eager_and_compiled(quantize_torch)},
    marker="quant",
)

DEQUANTIZE_SPEC = OpSpec(
    name="dequantize",
    impl=dequantize,
    reference=dequantize_reference,
    torch_impl=dequantize_torch,
    make_inputs=_dequantize_make_inputs,
    cost=dequantize_cost,
    dtypes=Q_DTYPES,
    cases=DEQUANTIZE_CASES,
    suites=DEQUANTIZE_SUITES,
    baselines={**baselines.eager_and_compiled(dequantize_torch)},
    marker="quant",
)


# The tunables of this family's heuristics: what roofkit.config.override may set.
TUNABLES = ("MINMAX_PROGRAMS_PER_SM", "ELEMWISE_TILE", "DEQUANTIZE_TILE", "DEQUANTIZE_INNER", "DEQUANTIZE_WARPS")
