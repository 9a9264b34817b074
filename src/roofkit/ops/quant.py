"""Affine int8 quantization and quantized GEMMs: quantize, dequantize, int8_matmul, scaled_mm.

    quantize:     S = (max(x, 0) - min(x, 0)) / (qmax - qmin),  Z = qmin - rint(min(x, 0) / S),
                  q = clamp(rint(x / S) + Z, qmin, qmax)            (per tensor or per channel)
    dequantize:   r = S * (q - Z)
    int8_matmul:  out = Sa * Sb * sum_k (qa - Za)(qb - Zb) + bias   (int32 accumulation)
    scaled_mm:    out = (a @ b) * scale_a * scale_b + bias          (fp8 inputs, fp32 accumulation)

Program mapping. quantize / dequantize view the input as a 3-D (P, C, Q) tensor whose middle axis
is the channel (C = 1 per tensor) and tile it in [BLOCK_P, BLOCK_C, BLOCK_Q] blocks, the largest
block edge on the dimension of smallest stride (coalesced whatever the layout). quantize runs
three kernels: a min/max reduction in which program (c, s) reduces split s of channel block c to
one partial per channel; a parameter kernel that combines the partials of each channel in a
fixed order (deterministic) and computes S and Z; and the elementwise quantize kernel.
The GEMMs share one kernel: one program owns one [BLOCK_M, BLOCK_N] output tile (tiles numbered
in groups of GROUP_M tile rows for L2 reuse), walks K in BLOCK_K steps with tl.dot (fp8 -> fp32,
int8 -> int32: wgmma on sm90), loading its tiles through Hopper tensor descriptors (TMA) when the
layout allows it and through pointers otherwise, and applies scales, zero-point corrections and
bias to the accumulator before one rounding to the output dtype. The int8 zero-point corrections
need the row sums of qa and column sums of qb, which a small pre-pass kernel computes (only for
a zero point that is given).
Source: affine quantization as in Jacob et al., "Quantization and Training of Neural Networks
for Efficient Integer-Arithmetic-Only Inference" (2018) and torch.quantize_per_tensor /
quantize_per_channel; scaled_mm semantics of torch._scaled_mm; the grouped tile order as in the
Triton matmul tutorial.
"""

from __future__ import annotations

import math
import operator
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..harness import baselines
from ..harness.inputs import random_tensor, with_layout
from ..harness.spec import Cost, Inputs, OpSpec, Tolerance, case
from ._common import FLOAT_DTYPES, bf16_rne, check_same_device, check_tensor, interpreter_active, needs_int64, next_pow2, sm_count
from ._jit import _round_for_store

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
Q_DTYPES = (torch.int8, torch.uint8)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# int8_matmul accumulates in int32: sum_k (qa - Za)(qb - Zb) is exact while its magnitude stays
# below 2**31, which holds for every input (|qa - Za|, |qb - Zb| <= 255) when K <= 2**31 // 255**2.
INT8_MAX_K = (2**31 - 1) // (255 * 255)
# quantize clamps x / S to +-QUANT_CLAMP before rounding (the result is clamped to [qmin, qmax]
# after adding Z anyway), which keeps |v| < 2**22 for the round-half-even trick below.
QUANT_CLAMP = 1024.0
QUANT_CLAMP_JIT = tl.constexpr(QUANT_CLAMP)
# Programs per SM the min/max reduction aims for (split over the reduced elements).
MINMAX_PROGRAMS_PER_SM = 4
# Elements per quantize / dequantize / min-max tile.
ELEMWISE_TILE = 4096


def _qrange(dtype: torch.dtype) -> tuple[int, int]:
    info = torch.iinfo(dtype)
    return info.min, info.max


def _esize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


# ----------------------------------------------------------------------------- references (torch math)


def _channel_shape(shape, axis: int | None) -> tuple[int, ...]:
    """Shape of per-channel parameters: 1 everywhere but ``axis`` (0-d per tensor)."""
    if axis is None:
        return ()
    return tuple(s if d == axis else 1 for d, s in enumerate(shape))


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
    """S * (q - Z) in torch float32 (the torch baseline)."""
    s = _param_view(scale, q, axis).to(torch.float32)
    z = _param_view(zero_point, q, axis)
    return (q.to(torch.int32) - z).to(torch.float32) * s


def dequantize_reference(q, scale, zero_point, *, axis=None):
    """S * (q - Z) in float64."""
    s = _param_view(scale, q, axis).to(torch.float64)
    z = _param_view(zero_point, q, axis)
    return (q.to(torch.int64) - z.to(torch.int64)).to(torch.float64) * s


def _vec(t, like_dtype=torch.float64):
    return t.to(like_dtype) if t is not None else None


def int8_matmul_reference(qa, qb, scale_a, zero_point_a, scale_b, zero_point_b, *, bias=None, out_dtype=torch.bfloat16):
    """(qa - Za) @ (qb - Zb) * Sa * Sb + bias in float64 (exact products and sums)."""
    a = qa.to(torch.float64) - (zero_point_a.to(torch.float64) if zero_point_a is not None else 0.0)
    b = qb.to(torch.float64) - (zero_point_b.to(torch.float64) if zero_point_b is not None else 0.0)
    y = (a @ b) * scale_a.to(torch.float64) * scale_b.to(torch.float64)
    return y + bias.to(torch.float64) if bias is not None else y


def int8_matmul_torch(qa, qb, scale_a, zero_point_a, scale_b, zero_point_b, *, bias=None, out_dtype=torch.bfloat16):
    """float32 emulation (the error budget of verification): exact while the sums stay below 2**24."""
    a = qa.to(torch.float32) - (zero_point_a.to(torch.float32) if zero_point_a is not None else 0.0)
    b = qb.to(torch.float32) - (zero_point_b.to(torch.float32) if zero_point_b is not None else 0.0)
    y = (a @ b) * scale_a.to(torch.float32) * scale_b.to(torch.float32)
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.to(out_dtype)


def _torch_int_mm_dequant(qa, qb, scale_a, zero_point_a, scale_b, zero_point_b, *, bias=None, out_dtype=torch.bfloat16):
    """What a torch user writes: torch._int_mm (int32 accumulation; cuBLAS needs M > 16 and K, N
    multiples of 8), the zero-point corrections and the dequantizing epilogue as torch ops."""
    acc = torch._int_mm(qa, qb)
    k = qa.shape[1]
    if zero_point_b is not None:
        acc = acc - qa.sum(1, keepdim=True, dtype=torch.int32) * zero_point_b.to(torch.int32)
    if zero_point_a is not None:
        acc = acc - zero_point_a.to(torch.int32) * qb.sum(0, keepdim=True, dtype=torch.int32)
    if zero_point_a is not None and zero_point_b is not None:
        acc = acc + k * zero_point_a.to(torch.int32) * zero_point_b.to(torch.int32)
    y = acc.to(torch.float32) * scale_a * scale_b
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.to(out_dtype)


def scaled_mm_reference(a, b, scale_a, scale_b, *, bias=None, out_dtype=torch.bfloat16, use_fast_accum=False):
    """a @ b * scale_a * scale_b + bias in float64 from the same fp8 values."""
    y = (a.to(torch.float64) @ b.to(torch.float64)) * scale_a.to(torch.float64) * scale_b.to(torch.float64)
    return y + bias.to(torch.float64) if bias is not None else y


def scaled_mm_torch(a, b, scale_a, scale_b, *, bias=None, out_dtype=torch.bfloat16, use_fast_accum=False):
    """float32 emulation of torch._scaled_mm (the error budget of verification, on any device and
    for every dtype / scale combination; torch._scaled_mm itself has layout, dtype and scale-mode
    restrictions, and is the "torch" benchmark baseline instead)."""
    y = (a.to(torch.float32) @ b.to(torch.float32)) * scale_a.to(torch.float32) * scale_b.to(torch.float32)
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.to(out_dtype)


def _torch_scaled_mm(a, b, scale_a, scale_b, *, bias=None, out_dtype=torch.bfloat16, use_fast_accum=False):
    """torch._scaled_mm after the conversions it requires: a row-major, b column-major (copied
    when not), both scales per tensor or both row/column-wise, bias in the output dtype."""
    m, n = a.shape[0], b.shape[1]
    if a.stride(1) != 1:
        a = a.contiguous()
    if b.stride(0) != 1:
        b = b.t().contiguous().t()
    sa, sb = scale_a.to(torch.float32), scale_b.to(torch.float32)
    if sa.numel() != 1 or sb.numel() != 1 or (m == 1) != (n == 1):
        if sa.numel() == 1 and sb.numel() == 1:
            sa, sb = sa.reshape(()), sb.reshape(())
        else:
            sa = sa.reshape(-1, 1).expand(m, 1).contiguous()
            sb = sb.reshape(1, -1).expand(1, n).contiguous()
    else:
        sa, sb = sa.reshape(()), sb.reshape(())
    if bias is not None:
        bias = bias.to(out_dtype)
    return torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, bias=bias, out_dtype=out_dtype, use_fast_accum=use_fast_accum)


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


def _gemm_cost(case, in_size: int, zero_points: bool) -> Cost:
    m, n, k = case["shape"]
    out_size = _esize(case.get("out_dtype") or torch.bfloat16)
    rows = m if case.get("scale_a") == "row" else 1
    cols = n if case.get("scale_b") == "col" else 1
    params = 4 * (rows + cols) * (2 if zero_points else 1)
    bias = n * _esize(case.get("bias_dtype") or torch.float32) if case.get("bias") else 0
    return Cost(flops=2 * m * n * k, bytes=in_size * (m * k + k * n) + params + bias + out_size * m * n)


def scaled_mm_cost(case, dtype: torch.dtype) -> Cost:
    """2*M*N*K FLOP; bytes: a and b (1 byte each), the fp32 scales (per tensor: 4 bytes; per
    row/column: 4*M or 4*N), bias (N elements), the output (M*N in out_dtype)."""
    return _gemm_cost(case, 1, False)


def int8_matmul_cost(case, dtype: torch.dtype) -> Cost:
    """2*M*N*K integer ops; bytes as :func:`scaled_mm_cost` plus the int32 zero points (as many
    as scales). The row/column-sum pre-pass of asymmetric inputs re-reads qa / qb (not counted)."""
    zp = case.get("zero_points", "asym") != "none"
    return _gemm_cost(case, 1, zp)


# ----------------------------------------------------------------------------- launch heuristics


def _tile3(sizes, strides, budget: int = ELEMWISE_TILE, inner_max: int = 1024) -> list[int]:
    """Block edges for a (P, C, Q) tile of at most ``budget`` elements: the dimension of smallest
    stride (memory order) gets the longest edge (up to ``inner_max``), then the next ones."""
    order = sorted(range(3), key=lambda d: (abs(strides[d]) if sizes[d] > 1 else 1 << 62, -d))
    blocks = [1, 1, 1]
    left = budget
    for i, d in enumerate(order):
        cap = inner_max if i == 0 else left
        blocks[d] = max(1, min(next_pow2(sizes[d]), cap, left))
        left = max(1, left // blocks[d])
    return blocks


class GemmConfig(NamedTuple):
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    GROUP_M: int
    num_warps: int
    num_stages: int


# The interpreter config: small tiles, so tiny CPU cases still cover several tiles and K steps.
INTERPRETER_CONFIG = GemmConfig(32, 32, 32, 2, 4, 1)


def _gemm_config(m: int, n: int, k: int, device: torch.device) -> GemmConfig:
    """Deterministic heuristic for 8-bit operands on sm90 wgmma: 128x256x128 tiles, 8 warps
    (two consumer warpgroups, a 128x256 fp32/int32 accumulator = 128 registers per thread),
    4 stages (4 x 48 KiB of shared memory) when both M and N are large (H200, 8192^3:
    4 stages 1223 TOP/s int8 / 1247 TFLOP/s fp8 fast-accum, 3 stages 1150 / 1237); 128x128x128 with 4 stages
    for mid sizes; a 64-row tile for short M (decode-like); GROUP_M 8."""
    if interpreter_active() or device.type != "cuda":
        return INTERPRETER_CONFIG
    bk = 128 if k >= 128 else max(32, next_pow2(k))
    if m <= 64:
        return GemmConfig(64, 128 if n >= 128 else max(32, next_pow2(n)), bk, 8, 4, 4)
    if m >= 1024 and n >= 1024:
        return GemmConfig(128, 256, bk, 8, 8, 4)
    return GemmConfig(128, 128 if n >= 128 else max(32, next_pow2(n)), bk, 8, 8, 4)


# "auto": Hopper tensor descriptors on sm90+ when the layout allows; "off": pointer loads;
# "force": descriptors whenever the layout allows, on any device (tests, interpreter).
TMA_MODE = "auto"


def _tma_ok(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Tensor descriptors need a (M, K) with unit K stride and b K-major (the transpose of a
    row-major (N, K) tensor, torch._scaled_mm's preferred layout), 16-byte aligned bases and
    row strides, and box edges of at most 256 (ours)."""
    if TMA_MODE == "off":
        return False
    if TMA_MODE == "auto":
        if interpreter_active() or a.device.type != "cuda" or torch.cuda.get_device_capability(a.device) < (9, 0):
            return False
    es = a.element_size()
    return (
        a.stride(1) == 1 and b.stride(0) == 1
        and (a.stride(0) * es) % 16 == 0 and (b.stride(1) * es) % 16 == 0
        and a.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0
        and a.shape[0] >= 1 and b.shape[1] >= 1
    )


# ----------------------------------------------------------------------------- jit helpers


@triton.jit
def _rint(v):
    """Round half to even for |v| < 2**22: adding and removing 1.5 * 2**23 leaves no fraction
    bits, and IEEE addition rounds to nearest-even (portable: the interpreter has no rint)."""
    return (v + 12582912.0) - 12582912.0


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
    pid = tl.program_id(0)
    qb = pid % n_qb
    t = pid // n_qb
    pb = t % n_pb
    cb = t // n_pb
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
    """r = S * (q - Z) in float32 (q - Z exact in int32, one rounding) on one tile."""
    pid = tl.program_id(0)
    qb = pid % n_qb
    t = pid // n_qb
    pb = t % n_pb
    cb = t // n_pb
    offs, mask, cs = _offsets3(pb, cb, qb, sqp, sqc, sqq, P, C, Q, USE_INT64, BLOCK_P, BLOCK_C, BLOCK_Q)
    roffs, _, _ = _offsets3(pb, cb, qb, srp, src, srq, P, C, Q, USE_INT64, BLOCK_P, BLOCK_C, BLOCK_Q)
    c_ok = cs < C
    s = tl.load(scale_ptr + cs, mask=c_ok, other=1.0)
    z = tl.load(zp_ptr + cs, mask=c_ok, other=0)
    q = tl.load(q_ptr + offs, mask=mask, other=0).to(tl.int32)
    r = (q - z[None, :, None]).to(tl.float32) * s[None, :, None]
    tl.store(r_ptr + roffs, r, mask=mask)


# ----------------------------------------------------------------------------- GEMM kernels


@triton.jit
def _int8_rowsum_kernel(x_ptr, out_ptr, R, L, s_r, s_l, BLOCK_R: tl.constexpr, BLOCK_L: tl.constexpr):
    """out[r] = sum_l x[r, l] (int32, exact for L < 2**24) for BLOCK_R rows; tile [BLOCK_R, BLOCK_L]."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    r_ok = rows < R
    cols = tl.arange(0, BLOCK_L)
    base = x_ptr + rows.to(tl.int64)[:, None] * s_r
    acc = tl.zeros([BLOCK_R, BLOCK_L], tl.int32)
    for l0 in range(0, L, BLOCK_L):
        c = l0 + cols
        x = tl.load(base + c.to(tl.int64)[None, :] * s_l, mask=r_ok[:, None] & (c < L)[None, :], other=0)
        acc += x.to(tl.int32)
    tl.store(out_ptr + rows, tl.sum(acc, axis=1), mask=r_ok)


@triton.jit
def _mma(a, b, acc, IS_INT: tl.constexpr, PRECISE_ACC: tl.constexpr):
    if IS_INT:
        return tl.dot(a, b, acc, out_dtype=tl.int32)
    elif PRECISE_ACC > 0:
        # Promote the tensor cores' fp8 partial sums into the fp32 accumulator every
        # PRECISE_ACC elements of K (as cuBLAS without fast accumulation).
        return tl.dot(a, b, acc, max_num_imprecise_acc=PRECISE_ACC)
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _qmm_kernel(
    a_src, b_src, out_ptr, sa_ptr, sb_ptr, za_ptr, zb_ptr, rsum_ptr, csum_ptr, bias_ptr,
    M, N, K, a_kstep, b_kstep, s_am, s_ak, s_bk, s_bn, s_om, s_on, s_sa, s_sb, s_za, s_zb,
    IS_INT: tl.constexpr, USE_TMA: tl.constexpr, PRECISE_ACC: tl.constexpr,
    HAS_ZA: tl.constexpr, HAS_ZB: tl.constexpr, HAS_BIAS: tl.constexpr, BF16_RNE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """One [BLOCK_M, BLOCK_N] tile of out = epilogue(a @ b). USE_TMA: a_src describes a (M, K)
    and b_src describes b^T (N, K) (tensor descriptors, zero fill out of bounds); else pointers
    with int64 offsets and masks. Tiles in groups of GROUP_M tile rows (L2 reuse of B panels)."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    g = pid // per_group
    row0 = g * GROUP_M
    rows_in_group = tl.minimum(tiles_m - row0, GROUP_M)
    local = pid - g * per_group
    tile_m = row0 + local % rows_in_group
    tile_n = local // rows_in_group

    if IS_INT:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < M
    n_ok = rn < N
    rm64 = rm.to(tl.int64)
    rn64 = rn.to(tl.int64)
    if USE_TMA:
        off_m = tile_m * BLOCK_M
        off_n = tile_n * BLOCK_N
        for k0 in range(0, K, BLOCK_K):
            a = a_src.load([off_m, k0])
            b = b_src.load([off_n, k0])
            acc = _mma(a, b.T, acc, IS_INT, PRECISE_ACC)
    else:
        if IS_INT:
            ZERO: tl.constexpr = 0
        else:
            ZERO: tl.constexpr = 0.0
        rk = tl.arange(0, BLOCK_K)
        rk64 = rk.to(tl.int64)
        a_ptrs = a_src + rm64[:, None] * s_am + rk64[None, :] * s_ak
        b_ptrs = b_src + rk64[:, None] * s_bk + rn64[None, :] * s_bn
        for k0 in range(0, K, BLOCK_K):
            k_ok = rk < K - k0
            a = tl.load(a_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=ZERO)
            b = tl.load(b_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=ZERO)
            acc = _mma(a, b, acc, IS_INT, PRECISE_ACC)
            a_ptrs += a_kstep  # BLOCK_K * s_ak, from the host (int64 when it must be)
            b_ptrs += b_kstep

    # Epilogue on the accumulator: zero-point corrections (int32, wrapping arithmetic: exact
    # whenever the true sum fits in int32), scales, bias; one rounding at the store.
    if IS_INT:
        if HAS_ZB:
            zb = tl.load(zb_ptr + rn64 * s_zb, mask=n_ok, other=0)
            rs = tl.load(rsum_ptr + rm64, mask=m_ok, other=0)
            acc -= rs[:, None] * zb[None, :]
        if HAS_ZA:
            za = tl.load(za_ptr + rm64 * s_za, mask=m_ok, other=0)
            cs = tl.load(csum_ptr + rn64, mask=n_ok, other=0)
            acc -= za[:, None] * cs[None, :]
            if HAS_ZB:
                acc += (za[:, None] * K) * zb[None, :]
        y = acc.to(tl.float32)
    else:
        y = acc
    sa = tl.load(sa_ptr + rm64 * s_sa, mask=m_ok, other=0.0)
    sb = tl.load(sb_ptr + rn64 * s_sb, mask=n_ok, other=0.0)
    y = y * sa[:, None] * sb[None, :]
    if HAS_BIAS:
        y += tl.load(bias_ptr + rn64, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    o_ptrs = out_ptr + rm64[:, None] * s_om + rn64[None, :] * s_on
    tl.store(o_ptrs, _round_for_store(y, out_ptr, BF16_RNE), mask=m_ok[:, None] & n_ok[None, :])


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


def _grid3(v: torch.Tensor):
    P, C, Q = v.shape
    bp, bc, bq = _tile3((P, C, Q), v.stride())
    return (bp, bc, bq), triton.cdiv(P, bp), triton.cdiv(C, bc), triton.cdiv(Q, bq)


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
    qv = q.view(xv.shape)
    P, C, Q = xv.shape
    (bp, bc, bq), n_pb, n_cb, n_qb = _grid3(xv)
    use_int64 = needs_int64(*(s * st for s, st in zip(xv.shape, xv.stride())), q.numel())
    total = n_pb * n_qb
    target = max(1, MINMAX_PROGRAMS_PER_SM * sm_count(x.device) // n_cb)
    splits = min(total, target)
    iters = triton.cdiv(total, splits)
    splits = triton.cdiv(total, iters)
    part = torch.empty((splits, C, 2), dtype=torch.float32, device=x.device)
    warps = 4
    _quantize_minmax_kernel[(n_cb, splits)](
        xv, part, P, C, Q, *xv.stride(), n_qb, iters, total,
        USE_INT64=use_int64, BLOCK_P=bp, BLOCK_C=bc, BLOCK_Q=bq, num_warps=warps,
    )
    # Partials as [BLOCK_S, BLOCK_C] tiles: a per-tensor scale reads its (up to a few hundred)
    # splits in one or two loads instead of a serial chain (41 us -> a few us on the H200).
    pc = min(128, next_pow2(C))
    ps = max(1, min(next_pow2(splits), ELEMWISE_TILE // pc))
    _quantize_params_kernel[(triton.cdiv(C, pc),)](
        part, scale, zp, C, splits, QMIN=qmin, QMAX=qmax, BLOCK_S=ps, BLOCK_C=pc, num_warps=4,
    )
    _quantize_kernel[(n_cb * n_pb * n_qb,)](
        xv, qv, scale, zp, P, C, Q, *xv.stride(), *qv.stride(), n_pb, n_qb,
        QMIN=qmin, QMAX=qmax, USE_INT64=use_int64, BLOCK_P=bp, BLOCK_C=bc, BLOCK_Q=bq, num_warps=warps,
    )
    return q, scale.view(pshape), zp.view(pshape)


def _dequantize_forward(q: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, axis: int | None):
    r = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    if q.numel() == 0:
        return r
    qv = _view3(q, axis)
    rv = r.view(qv.shape)
    P, C, Q = qv.shape
    (bp, bc, bq), n_pb, n_cb, n_qb = _grid3(qv)
    use_int64 = needs_int64(*(s * st for s, st in zip(qv.shape, qv.stride())), r.numel())
    s = scale.reshape(-1).contiguous()
    z = zero_point.reshape(-1).contiguous()
    _dequantize_kernel[(n_cb * n_pb * n_qb,)](
        qv, rv, s, z, P, C, Q, *qv.stride(), *rv.stride(), n_pb, n_qb,
        USE_INT64=use_int64, BLOCK_P=bp, BLOCK_C=bc, BLOCK_Q=bq, num_warps=4,
    )
    return r


def _vec_stride(t: torch.Tensor) -> int:
    """Element stride along the vector of a (M, 1) / (1, N) parameter; 0 for one element."""
    if t.numel() == 1:
        return 0
    return t.stride(0) if t.shape[0] != 1 else t.stride(-1)


def _rowsums(x: torch.Tensor, r_dim: int) -> torch.Tensor:
    """int32 sums of the int8 matrix ``x`` along the dimension other than ``r_dim``."""
    R, L = x.shape[r_dim], x.shape[1 - r_dim]
    out = torch.empty((R,), dtype=torch.int32, device=x.device)
    s_r, s_l = x.stride(r_dim), x.stride(1 - r_dim)
    br = 32 if not interpreter_active() else 16
    bl = min(256, max(16, next_pow2(L)))
    _int8_rowsum_kernel[(triton.cdiv(R, br),)](x, out, R, L, s_r, s_l, BLOCK_R=br, BLOCK_L=bl, num_warps=4)
    return out


def _qmm_forward(a, b, sa, sb, za, zb, bias, out_dtype, is_int: bool, precise: bool, config: GemmConfig | None = None):
    m, k = a.shape
    n = b.shape[1]
    out = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if out.numel() == 0:
        return out
    if k == 0:
        # Empty sums: out = bias (or zeros) broadcast over rows, rounded once.
        return out.copy_(bias.to(torch.float32).expand(m, n)) if bias is not None else out.zero_()
    cfg = config or _gemm_config(m, n, k, a.device)
    if bias is not None:
        bias = bias.contiguous()  # the kernel reads it with unit stride
    use_tma = _tma_ok(a, b)
    rsum = csum = None
    if is_int and zb is not None:
        rsum = _rowsums(a, 0)
    if is_int and za is not None:
        csum = _rowsums(b, 1)
    if use_tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        a_src = TensorDescriptor.from_tensor(a, [cfg.BLOCK_M, cfg.BLOCK_K])
        b_src = TensorDescriptor.from_tensor(b.t(), [cfg.BLOCK_N, cfg.BLOCK_K])
    else:
        a_src, b_src = a, b
    dummy = sa
    grid = (triton.cdiv(m, cfg.BLOCK_M) * triton.cdiv(n, cfg.BLOCK_N),)
    _qmm_kernel[grid](
        a_src, b_src, out, sa, sb,
        za if za is not None else dummy, zb if zb is not None else dummy,
        rsum if rsum is not None else dummy, csum if csum is not None else dummy,
        bias if bias is not None else dummy,
        m, n, k, cfg.BLOCK_K * a.stride(1), cfg.BLOCK_K * b.stride(0),
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        _vec_stride(sa), _vec_stride(sb),
        _vec_stride(za) if za is not None else 0, _vec_stride(zb) if zb is not None else 0,
        IS_INT=is_int, USE_TMA=use_tma, PRECISE_ACC=(cfg.BLOCK_K if precise and not is_int else 0),
        HAS_ZA=za is not None, HAS_ZB=zb is not None, HAS_BIAS=bias is not None, BF16_RNE=bf16_rne(out_dtype),
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, GROUP_M=cfg.GROUP_M,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return out


# ----------------------------------------------------------------------------- custom ops


@torch.library.custom_op("roofkit::quantize", mutates_args=())
def _quantize_op(x: torch.Tensor, axis: int | None, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _quantize_forward(x, axis, dtype)


@_quantize_op.register_fake
def _(x, axis, dtype):
    pshape = _channel_shape(x.shape, axis)
    return (x.new_empty(x.shape, dtype=dtype), x.new_empty(pshape, dtype=torch.float32),
            x.new_empty(pshape, dtype=torch.int32))


@torch.library.custom_op("roofkit::dequantize", mutates_args=())
def _dequantize_op(q: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, axis: int | None) -> torch.Tensor:
    return _dequantize_forward(q, scale, zero_point, axis)


@_dequantize_op.register_fake
def _(q, scale, zero_point, axis):
    return q.new_empty(q.shape, dtype=torch.float32)


@torch.library.custom_op("roofkit::int8_matmul", mutates_args=())
def _int8_matmul_op(
    qa: torch.Tensor, qb: torch.Tensor, scale_a: torch.Tensor, zero_point_a: torch.Tensor | None,
    scale_b: torch.Tensor, zero_point_b: torch.Tensor | None, bias: torch.Tensor | None, out_dtype: torch.dtype,
) -> torch.Tensor:
    return _qmm_forward(qa, qb, scale_a, scale_b, zero_point_a, zero_point_b, bias, out_dtype, True, False)


@_int8_matmul_op.register_fake
def _(qa, qb, scale_a, zero_point_a, scale_b, zero_point_b, bias, out_dtype):
    return qa.new_empty((qa.shape[0], qb.shape[1]), dtype=out_dtype)


@torch.library.custom_op("roofkit::scaled_mm", mutates_args=())
def _scaled_mm_op(
    a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, bias: torch.Tensor | None,
    out_dtype: torch.dtype, use_fast_accum: bool,
) -> torch.Tensor:
    return _qmm_forward(a, b, scale_a, scale_b, None, None, bias, out_dtype, False, not use_fast_accum)


@_scaled_mm_op.register_fake
def _(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum):
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)


# ----------------------------------------------------------------------------- argument checks


def _dtype_name(d) -> str:
    return str(d).removeprefix("torch.")


def _check_axis(op: str, axis, ndim: int) -> int | None:
    if axis is None:
        return None
    if isinstance(axis, bool):
        raise TypeError(f"roofkit.{op}: axis must be None or an int, got bool")
    try:
        axis = operator.index(axis)
    except TypeError:
        raise TypeError(f"roofkit.{op}: axis must be None or an int, got {type(axis).__name__}") from None
    if ndim == 0:
        raise IndexError(f"roofkit.{op}: axis {axis} given for a 0-d input (per-channel needs at least 1 dimension)")
    if not -ndim <= axis < ndim:
        raise IndexError(f"roofkit.{op}: axis {axis} out of range for a {ndim}-d input (expected [{-ndim}, {ndim - 1}])")
    return axis % ndim


def _check_param(op: str, name: str, t, dtypes, ref: torch.Tensor, shapes: list[tuple[int, ...]], what: str) -> None:
    """``t`` a tensor of ``dtypes`` on ``ref``'s device with one element or one of ``shapes``."""
    check_tensor(op, name, t, dtypes)
    check_same_device(op, name, t, ref)
    if t.numel() == 1 and t.dim() <= 2:
        return
    if tuple(t.shape) not in shapes:
        raise ValueError(f"roofkit.{op}: {name} must have one element (per tensor) or shape {what}; got shape {tuple(t.shape)}")


def _check_zero_point_range(op: str, name: str, zp: torch.Tensor, qdtype: torch.dtype) -> None:
    """Zero points outside the quantized type's range break the exactness of the int32 algebra;
    checked without a host sync (a device assert: RuntimeError at the next synchronization on a
    GPU, at once on the CPU)."""
    info = torch.iinfo(qdtype)
    if zp.numel():
        ok = (zp >= info.min).all() & (zp <= info.max).all()
        torch._assert_async(ok, f"roofkit.{op}: {name} must lie in [{info.min}, {info.max}] ({qdtype})")


def _check_out_dtype(op: str, out_dtype) -> None:
    if out_dtype not in OUT_DTYPES:
        raise TypeError(f"roofkit.{op}: out_dtype must be one of bfloat16, float16, float32; got {out_dtype}")


def _check_bias(op: str, bias, n: int, ref: torch.Tensor) -> None:
    if bias is None:
        return
    check_tensor(op, "bias", bias, FLOAT_DTYPES)
    check_same_device(op, "bias", bias, ref)
    if bias.dim() != 1 or bias.shape[0] != n:
        raise ValueError(f"roofkit.{op}: bias must have shape ({n},) (one value per output column); got {tuple(bias.shape)}")


def _check_gemm_operands(op: str, a, b, names, dtypes) -> None:
    check_tensor(op, names[0], a, dtypes)
    check_tensor(op, names[1], b, dtypes)
    check_same_device(op, names[1], b, a)
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"roofkit.{op}: {names[0]} and {names[1]} must be 2-D; got {a.dim()}-d and {b.dim()}-d")
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"roofkit.{op}: inner dimensions differ: {names[0]} is {tuple(a.shape)}, {names[1]} is {tuple(b.shape)} "
            f"(expected {names[0]} (M, K) and {names[1]} (K, N))"
        )


# ----------------------------------------------------------------------------- public functions


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
        RuntimeError: a zero point outside q's integer range (a device-side assert, raised at
            the next synchronization on a GPU).
        IndexError: axis out of range.
    Numerics:
        q - Z exact in int32, one float32 rounding of the product (as torch.dequantize).
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
    _check_zero_point_range("dequantize", "zero_point", zero_point, q.dtype)
    return _dequantize_op(q, scale, zero_point, ax)


def int8_matmul(qa: torch.Tensor, qb: torch.Tensor, scale_a: torch.Tensor, zero_point_a: torch.Tensor | None,
                scale_b: torch.Tensor, zero_point_b: torch.Tensor | None, *, bias: torch.Tensor | None = None,
                out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """out = Sa * Sb * sum_k (qa - Za)(qb - Zb) + bias, from int8 operands.

    Args:
        qa: int8 (M, K), any strides. qb: int8 (K, N), any strides (the transpose of a
            row-major (N, K) tensor takes the tensor-descriptor path on sm90).
        scale_a: float32, one element (per tensor) or (M, 1) (per row of qa).
        zero_point_a: int32 with scale_a's shape rules, or None (symmetric: Za = 0; skips the
            correction and its pre-pass).
        scale_b: float32, one element or (1, N) (per column of qb).
        zero_point_b: int32 with scale_b's shape rules, or None.
        bias: optional (N,) float32 / float16 / bfloat16.
        out_dtype: bfloat16 (default), float16 or float32.
    Returns:
        (M, N) tensor in ``out_dtype``.
    Raises:
        TypeError: wrong dtypes (qa/qb not int8, scales not float32, zero points not int32,
            bias not a float tensor, out_dtype not bf16/fp16/fp32).
        ValueError: not 2-D, inner dimensions differ, scale / zero point / bias of the wrong
            shape, K > INT8_MAX_K (33025), tensors on different devices.
        RuntimeError: a zero point outside [-128, 127] (a device-side assert, raised at the next
            synchronization on a GPU).

    Numerics:
        qa @ qb accumulates in int32 on the tensor cores (exact); the corrections
        - Zb * rowsum(qa) - Za * colsum(qb) + K * Za * Zb are int32 with wrapping arithmetic,
        exact whenever the true sum fits in int32, which K <= 33025 guarantees for any
        int8 data and zero points in [-128, 127]. The corrected sum is converted to float32
        (rounding only past 2**24), times Sa then Sb, plus bias, rounded once to out_dtype.
        Deterministic. K = 0 gives bias (or zeros).
    Cost:
        2*M*N*K integer ops; bytes qa + qb (1 byte each) + scales/zero points + bias + output;
        a given zero_point_b (zero_point_a) adds a pre-pass reading qa (qb) once more.
    Source:
        Jacob et al. 2018 (zero-point corrections); torch._int_mm for the int32 GEMM.
    """
    op = "int8_matmul"
    _check_gemm_operands(op, qa, qb, ("qa", "qb"), (torch.int8,))
    m, k = qa.shape
    n = qb.shape[1]
    _check_param(op, "scale_a", scale_a, (torch.float32,), qa, [(m, 1)], f"({m}, 1)")
    _check_param(op, "scale_b", scale_b, (torch.float32,), qa, [(1, n)], f"(1, {n})")
    if zero_point_a is not None:
        _check_param(op, "zero_point_a", zero_point_a, (torch.int32,), qa, [(m, 1)], f"({m}, 1)")
        _check_zero_point_range(op, "zero_point_a", zero_point_a, qa.dtype)
    if zero_point_b is not None:
        _check_param(op, "zero_point_b", zero_point_b, (torch.int32,), qa, [(1, n)], f"(1, {n})")
        _check_zero_point_range(op, "zero_point_b", zero_point_b, qb.dtype)
    _check_bias(op, bias, n, qa)
    _check_out_dtype(op, out_dtype)
    if k > INT8_MAX_K:
        raise ValueError(f"roofkit.{op}: K = {k} exceeds {INT8_MAX_K}, the largest K for which int32 accumulation is exact")
    return _int8_matmul_op(qa, qb, scale_a, zero_point_a, scale_b, zero_point_b, bias, out_dtype)


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
              bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16,
              use_fast_accum: bool = False) -> torch.Tensor:
    """out = (a @ b) * scale_a * scale_b + bias from fp8 operands, as torch._scaled_mm.

    Args:
        a: (M, K) float8_e4m3fn or float8_e5m2, any strides.
        b: (K, N) of a's dtype, any strides; the transpose of a row-major (N, K) tensor (what
            torch._scaled_mm requires) takes the tensor-descriptor (TMA) path on sm90.
        scale_a: float32, one element (0-d or 1-element: per tensor) or (M, 1) (per row).
        scale_b: float32, one element or (1, N) (per column). Any mix of modes is accepted.
        bias: optional (N,) float32 / float16 / bfloat16.
        out_dtype: bfloat16 (default), float16 or float32.
        use_fast_accum: as torch._scaled_mm: False promotes the tensor cores' fp8 partial sums to
            the fp32 accumulator every BLOCK_K (128) elements of K; True lets them run the
            whole K (faster on sm90, less accurate).
    Returns:
        (M, N) tensor in ``out_dtype``.
    Raises:
        TypeError: a/b not fp8 or of different fp8 dtypes, scales not float32, bias not a
            float tensor, out_dtype not bf16/fp16/fp32.
        ValueError: not 2-D, inner dimensions differ, scale or bias of the wrong shape,
            tensors on different devices.
    Numerics:
        Products exact, accumulated in fp32 (see use_fast_accum); the epilogue
        acc * scale_a * scale_b + bias in fp32, rounded once to out_dtype. K = 0 gives bias
        (or zeros). Deterministic.
    Cost:
        2*M*N*K FLOP; bytes a + b (1 byte each) + scales + bias + output (``scaled_mm_cost``).
    Source:
        torch._scaled_mm semantics; fp8 formats of Micikevicius et al., "FP8 Formats for Deep
        Learning" (2022).
    """
    op = "scaled_mm"
    _check_gemm_operands(op, a, b, ("a", "b"), FP8_DTYPES)
    if a.dtype != b.dtype:
        raise TypeError(f"roofkit.{op}: a and b must have the same fp8 dtype; got {_dtype_name(a.dtype)} and {_dtype_name(b.dtype)}")
    m, n = a.shape[0], b.shape[1]
    _check_param(op, "scale_a", scale_a, (torch.float32,), a, [(m, 1)], f"({m}, 1)")
    _check_param(op, "scale_b", scale_b, (torch.float32,), a, [(1, n)], f"(1, {n})")
    _check_bias(op, bias, n, a)
    _check_out_dtype(op, out_dtype)
    if not isinstance(use_fast_accum, bool):
        raise TypeError(f"roofkit.{op}: use_fast_accum must be a bool, got {type(use_fast_accum).__name__}")
    return _scaled_mm_op(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum)


# ----------------------------------------------------------------------------- specs


def _symmetric(x: torch.Tensor, axis: int | None):
    """Symmetric int8 quantization in torch (zero point 0): S = max|x| / 127, q in [-127, 127]."""
    if axis is None:
        amax = x.abs().amax() if x.numel() else torch.zeros((), device=x.device)
    else:
        amax = x.abs().amax(dim=1 - axis, keepdim=True) if x.numel() else torch.zeros(_channel_shape(x.shape, axis), device=x.device)
    s = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax)).to(torch.float32)
    q = torch.round(x / s).clamp(-127, 127).to(torch.int8)
    return q, s


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


def _gemm_operand(x: torch.Tensor, axis: int | None, zero_points: bool):
    """(q, scale, zero point or None) of a float matrix: asymmetric (quantize_torch) or symmetric."""
    if zero_points:
        return quantize_torch(x, axis=axis, dtype=torch.int8)
    q, s = _symmetric(x, axis)
    return q, s, None


def _int8_make_inputs(case, dtype, generator, device) -> Inputs:
    m, n, k = case["shape"]
    dist = case.get("dist", "normal")
    a = random_tensor((m, k), torch.float32, generator, device, dist)
    b = random_tensor((k, n), torch.float32, generator, device, dist)
    zp = case.get("zero_points", "asym")
    qa, sa, za = _gemm_operand(a, 0 if case.get("scale_a") == "row" else None, zp in ("asym", "a_only"))
    qb, sb, zb = _gemm_operand(b, 1 if case.get("scale_b") == "col" else None, zp in ("asym", "b_only"))
    qa = with_layout(qa, case.get("a_layout", "contiguous"))
    qb = with_layout(qb, case.get("b_layout", "contiguous"))
    kw = {"out_dtype": case.get("out_dtype") or torch.bfloat16}
    if case.get("bias"):
        kw["bias"] = random_tensor((n,), case.get("bias_dtype") or torch.float32, generator, device)
    return Inputs((qa, qb, sa, za, sb, zb), kw)


def _scale(shape, generator, device) -> torch.Tensor:
    return (torch.rand(shape, generator=generator, device=generator.device) + 0.5).to(device)


def _scaled_mm_make_inputs(case, dtype, generator, device) -> Inputs:
    m, n, k = case["shape"]
    mag = case.get("magnitude", 2.0)
    a = (torch.randn((m, k), generator=generator, device=generator.device) * mag).to(device=device, dtype=dtype)
    b = (torch.randn((k, n), generator=generator, device=generator.device) * mag).to(device=device, dtype=dtype)
    a = with_layout(a, case.get("a_layout", "contiguous"))
    b = with_layout(b, case.get("b_layout", "transposed"))
    sa = _scale((m, 1) if case.get("scale_a") == "row" else case.get("scale_shape", ()), generator, device)
    sb = _scale((1, n) if case.get("scale_b") == "col" else case.get("scale_shape", ()), generator, device)
    kw = {"out_dtype": case.get("out_dtype") or torch.bfloat16}
    if case.get("bias"):
        kw["bias"] = random_tensor((n,), case.get("bias_dtype") or torch.bfloat16, generator, device)
    if case.get("use_fast_accum"):
        kw["use_fast_accum"] = True
    return Inputs((a, b, sa, sb), kw)


_F32 = (torch.float32,)
_BF16 = (torch.bfloat16,)
_I8 = (torch.int8,)
_E4M3 = (torch.float8_e4m3fn,)

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
}


def _gemm_cases(prefix_gpu_dtypes):
    return [
        case("small_odd_33x17x40", ["quick"], shape=(33, 17, 40)),
        case("row_col_37x29x50", shape=(37, 29, 50), scale_a="row", scale_b="col"),
        case("row_only_21x40x33", shape=(21, 40, 33), scale_a="row", bias=True),
        case("col_only_out_fp32_19x23x64", shape=(19, 23, 64), scale_b="col", out_dtype=torch.float32),
        case("kmajor_b_row_col_40x48x64", shape=(40, 48, 64), scale_a="row", scale_b="col", b_layout="transposed"),
        case("row_major_b_40x48x64", shape=(40, 48, 64), b_layout="contiguous"),
        case("transposed_a_24x20x35", shape=(24, 20, 35), a_layout="transposed"),
        case("strided_b_offset_a_12x10x36", shape=(12, 10, 36), a_layout="offset", b_layout="strided"),
        case("bias_bf16_out_fp16_17x18x19", shape=(17, 18, 19), bias=True, bias_dtype=torch.bfloat16,
             out_dtype=torch.float16),
        case("k1_9x7x1", shape=(9, 7, 1)),
        case("m1_1x20x70", shape=(1, 20, 70)),
        case("n1_21x1x18", shape=(21, 1, 18), scale_a="row"),
        case("k0_bias_5x6x0", shape=(5, 6, 0), bias=True),
        case("empty_m_0x6x5", ["quick"], shape=(0, 6, 5)),
        case("empty_n_5x0x7", shape=(5, 0, 7)),
        case("gpu_prime_127x257x1021", ["gpu"], shape=(127, 257, 1021), scale_a="row", scale_b="col", bias=True),
        case("gpu_pointer_path_1000x1200x1500", ["gpu"], shape=(1000, 1200, 1500), b_layout="contiguous",
             a_layout="transposed"),
        case("gpu_tma_4096x4096x4096", ["gpu"], shape=(4096, 4096, 4096), b_layout="transposed",
             dtypes=prefix_gpu_dtypes),
        case("gpu_tma_rowwise_odd_4095x4097x4096", ["gpu"], shape=(4095, 4097, 4096), scale_a="row", scale_b="col",
             b_layout="transposed", out_dtype=torch.float32, dtypes=prefix_gpu_dtypes),
        case("gpu_decode_16x14336x4096", ["gpu"], shape=(16, 14336, 4096), scale_b="col", dtypes=prefix_gpu_dtypes),
    ]


INT8_CASES = _gemm_cases(_I8) + [
    case("symmetric_no_zero_points_20x24x64", shape=(20, 24, 64), zero_points="none", scale_a="row", scale_b="col"),
    case("zero_point_a_only_18x22x45", shape=(18, 22, 45), zero_points="a_only", scale_a="row"),
    case("zero_point_b_only_18x22x45", shape=(18, 22, 45), zero_points="b_only", scale_b="col"),
    case("ties_16x16x48", shape=(16, 16, 48), dist="ties", scale_b="col"),
    case("gpu_symmetric_8192x8192x8192", ["gpu"], shape=(8192, 8192, 8192), zero_points="none", b_layout="transposed"),
]

SCALED_MM_CASES = _gemm_cases(_E4M3) + [
    case("scale_one_element_1d_20x24x64", shape=(20, 24, 64), scale_shape=(1,)),
    case("mixed_row_tensor_fast_accum_30x40x96", shape=(30, 40, 96), scale_a="row", use_fast_accum=True),
    case("gpu_large_magnitude_512x512x2048", ["gpu"], shape=(512, 512, 2048), magnitude=40.0, dtypes=_E4M3),
    case("gpu_acceptance_8192_cubed", ["gpu"], shape=(8192, 8192, 8192), dtypes=_E4M3),
]

_GEMM_LLAMA = [
    # llama3-8b at 8192 tokens: o_proj (4096 -> 4096) and ffn up/gate (4096 -> 14336), b as the
    # transpose of a row-major weight (N, K), bf16 out.
    ("o_proj_8192x4096x4096", (8192, 4096, 4096)),
    ("ffn_up_8192x14336x4096", (8192, 14336, 4096)),
]

INT8_SUITES = {
    "llama3-8b": [case(f"{name}_w8a8_sym", shape=s, scale_a="row", scale_b="col", zero_points="none",
                       b_layout="transposed", dtypes=_I8) for name, s in _GEMM_LLAMA]
                 + [case("ffn_up_8192x14336x4096_asym", shape=(8192, 14336, 4096), scale_a="row", scale_b="col",
                         b_layout="transposed", dtypes=_I8)],
    "acceptance": [case("int8_8192_cubed", shape=(8192, 8192, 8192), zero_points="none", b_layout="transposed",
                        dtypes=_I8)],
}

SCALED_MM_SUITES = {
    "llama3-8b": [case(name, shape=s, b_layout="transposed", dtypes=_E4M3) for name, s in _GEMM_LLAMA]
                 + [case("ffn_up_8192x14336x4096_rowwise", shape=(8192, 14336, 4096), scale_a="row", scale_b="col",
                         b_layout="transposed", dtypes=_E4M3)],
    "acceptance": [
        case("e4m3_8192_cubed", shape=(8192, 8192, 8192), b_layout="transposed", dtypes=_E4M3),
        case("e4m3_8192_cubed_fast_accum", shape=(8192, 8192, 8192), b_layout="transposed", use_fast_accum=True,
             dtypes=_E4M3),
    ],
}


def _gemm_k(case) -> int:
    return max(1, case["shape"][2])


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
    baselines={"torch": lambda: quantize_torch, "torch.compile": baselines.compiled(quantize_torch)},
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
    baselines={"torch": lambda: dequantize_torch, "torch.compile": baselines.compiled(dequantize_torch)},
    marker="quant",
)

INT8_MATMUL_SPEC = OpSpec(
    name="int8_matmul",
    impl=int8_matmul,
    reference=int8_matmul_reference,
    torch_impl=int8_matmul_torch,
    make_inputs=_int8_make_inputs,
    cost=int8_matmul_cost,
    reduction_length=_gemm_k,
    dtypes=_I8,
    cases=INT8_CASES,
    suites=INT8_SUITES,
    baselines={"torch": lambda: _torch_int_mm_dequant, "torch.compile": baselines.compiled(_torch_int_mm_dequant)},
    matrix=True,
    marker="quant",
)

# sm90 fp8 tensor cores add their partial sums with about 14 significant bits (DeepSeek-V3
# technical report, section 3.3.2) before each promotion to the fp32 accumulator, so a float32
# output carries ~1e-4 relative error (measured on the H200: 1.3e-4 rel-L2 at K = 4096), far above
# float32's own rounding; the float32 entries are set from that, the 16-bit ones are the defaults
# (their output rounding dominates).
_SCALED_MM_TOLERANCE = Tolerance(
    rtol={**Tolerance().rtol, torch.float32: 1e-3},
    atol={**Tolerance().atol, torch.float32: 2e-4},
    l2_floor={**Tolerance().l2_floor, torch.float32: 5e-4},
)

SCALED_MM_SPEC = OpSpec(
    name="scaled_mm",
    impl=scaled_mm,
    reference=scaled_mm_reference,
    torch_impl=scaled_mm_torch,
    make_inputs=_scaled_mm_make_inputs,
    cost=scaled_mm_cost,
    reduction_length=_gemm_k,
    dtypes=FP8_DTYPES,
    cases=SCALED_MM_CASES,
    suites=SCALED_MM_SUITES,
    baselines={"torch": lambda: _torch_scaled_mm, "torch.compile": baselines.compiled(_torch_scaled_mm)},
    tolerance=_SCALED_MM_TOLERANCE,
    matrix=True,
    marker="quant",
)

SPECS = (QUANTIZE_SPEC, DEQUANTIZE_SPEC, INT8_MATMUL_SPEC, SCALED_MM_SPEC)
