"""Quantized GEMMs: int8_matmul (int8 x int8 -> int32 with zero points) and scaled_mm (fp8, as
torch._scaled_mm), sharing one tile kernel, its launch heuristic, custom ops, references, costs,
test cases and specs. The math, program mapping and sources are in the package docstring
(roofkit/ops/quant/__init__.py).

Settings read at call time from this module (tests patch them here): TMA_MODE, and
interpreter_active / the kernels through this module's globals.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ...harness import baselines
from ...harness.inputs import random_tensor, with_layout
from ...harness.spec import Cost, Inputs, OpSpec, Tolerance, case
from .._common import FLOAT_DTYPES, INTERPRETED, bf16_rne, check_same_device, check_tensor
from .._jit import _round_for_store
from .._runtime import Op, cached_launch, planned
from ._common import (FP8_DTYPES, OUT_DTYPES, _I8, _cdiv, _channel_shape, _check_zero_point_range, _esize,
                      _pow2)
from .affine import quantize_torch

# int8_matmul accumulates in int32: sum_k (qa - Za)(qb - Zb) is exact while its magnitude stays
# below 2**31, which holds for every input (|qa - Za|, |qb - Zb| <= 255) when K <= 2**31 // 255**2.
INT8_MAX_K = (2**31 - 1) // (255 * 255)


def interpreter_active() -> bool:
    """Whether this module's kernels run through Triton's interpreter: decided when they were
    defined, so read once (``_common.INTERPRETED``), not from the environment per call. Tests
    patch this name."""
    return INTERPRETED


@functools.lru_cache(maxsize=None)
def _capability(index: int | None) -> tuple[int, int]:
    """The compute capability of CUDA device ``index``, read from the device once."""
    return torch.cuda.get_device_capability(index)


# ----------------------------------------------------------------------------- references (torch math)


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
    return _gpu_gemm_config(m, n, k)


@functools.lru_cache(maxsize=4096)
def _gpu_gemm_config(m: int, n: int, k: int) -> GemmConfig:
    bk = 128 if k >= 128 else max(32, _pow2(k))
    if m <= 64:
        return GemmConfig(64, 128 if n >= 128 else max(32, _pow2(n)), bk, 8, 4, 4)
    if m >= 1024 and n >= 1024:
        return GemmConfig(128, 256, bk, 8, 8, 4)
    return GemmConfig(128, 128 if n >= 128 else max(32, _pow2(n)), bk, 8, 8, 4)


# "auto": scaled_mm on Hopper takes the warp-specialized fp8 kernel (``_fp8_ws``) where it can run
# and both M and N are at least WS_MIN; "off": always the Triton kernel below (tests, benchmarks).
WS_MODE = "auto"
WS_MIN = 256


_FP8_WS = []  # [module or None] once imported


def _fp8_ws_module():
    """``roofkit.ops.quant._fp8_ws``, or None where it does not import (a Triton without Gluon's
    Hopper module): tried once, with a warning naming the error; the Triton kernel serves."""
    if not _FP8_WS:
        try:
            import importlib

            _fp8_ws = importlib.import_module("._fp8_ws", __package__)
        except Exception as e:  # noqa: BLE001 (any import failure: the Triton kernel serves)
            import warnings

            warnings.warn(f"roofkit.scaled_mm: the warp-specialized fp8 kernel is unavailable ({type(e).__name__}: "
                          f"{str(e)[:200]}); using the Triton kernel", RuntimeWarning, stacklevel=3)
            _fp8_ws = None
        _FP8_WS.append(_fp8_ws)
    return _FP8_WS[0]


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
        if interpreter_active() or a.device.type != "cuda" or _capability(a.device.index) < (9, 0):
            return False
    es = a.element_size()
    k = a.shape[1]
    return (
        a.stride(1) == 1 and b.stride(0) == 1 and a.stride(0) >= k and b.stride(1) >= k  # rows K apart
        and (a.stride(0) * es) % 16 == 0 and (b.stride(1) * es) % 16 == 0
        and a.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0
        and a.shape[0] >= 1 and b.shape[1] >= 1
    )


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
    bl = min(256, max(16, _pow2(L)))
    cached_launch(_LAUNCHES, _int8_rowsum_kernel, _cdiv(R, br), BLOCK_R=br, BLOCK_L=bl, num_warps=4)(
        x, out, R, L, s_r, s_l)
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
    if not is_int and config is None and WS_MODE == "auto" and m >= WS_MIN and n >= WS_MIN:
        ws = _fp8_ws_module()
        if ws is not None and ws.launch(a, b, sa, sb, _vec_stride(sa), _vec_stride(sb), bias, out, precise):
            return out
    use_tma = _tma_ok(a, b)
    rsum = csum = None
    if is_int and zb is not None:
        rsum = _rowsums(a, 0)
    if is_int and za is not None:
        csum = _rowsums(b, 1)
    if use_tma:
        a_src = _tensor_descriptor_class().from_tensor(a, [cfg.BLOCK_M, cfg.BLOCK_K])
        b_src = _tensor_descriptor_class().from_tensor(b.t(), [cfg.BLOCK_N, cfg.BLOCK_K])
        # A descriptor's element type is part of the compiled kernel, but the launch cache keys
        # descriptors by type alone: one launch cache per operand dtype.
        launches = _TMA_LAUNCHES.setdefault(a.dtype, {})
    else:
        a_src, b_src = a, b
        launches = _LAUNCHES
    dummy = sa
    cached_launch(
        launches, _qmm_kernel, _cdiv(m, cfg.BLOCK_M) * _cdiv(n, cfg.BLOCK_N),
        IS_INT=is_int, USE_TMA=use_tma, PRECISE_ACC=(cfg.BLOCK_K if precise and not is_int else 0),
        HAS_ZA=za is not None, HAS_ZB=zb is not None, HAS_BIAS=bias is not None, BF16_RNE=bf16_rne(out_dtype),
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, GROUP_M=cfg.GROUP_M,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )(a_src, b_src, out, sa, sb,
      za if za is not None else dummy, zb if zb is not None else dummy,
      rsum if rsum is not None else dummy, csum if csum is not None else dummy,
      bias if bias is not None else dummy,
      m, n, k, cfg.BLOCK_K * a.stride(1), cfg.BLOCK_K * b.stride(0),
      a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
      _vec_stride(sa), _vec_stride(sb),
      _vec_stride(za) if za is not None else 0, _vec_stride(zb) if zb is not None else 0)
    return out


_LAUNCHES: dict = {}
_TMA_LAUNCHES: dict = {}  # operand dtype -> launches (see _qmm_forward)


@functools.lru_cache(maxsize=None)
def _tensor_descriptor_class():
    """Triton's host tensor descriptor class, imported on first use."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor


# ----------------------------------------------------------------------------- custom ops


def _int8_matmul(
    qa: torch.Tensor, qb: torch.Tensor, scale_a: torch.Tensor, zero_point_a: torch.Tensor | None,
    scale_b: torch.Tensor, zero_point_b: torch.Tensor | None, bias: torch.Tensor | None, out_dtype: torch.dtype,
) -> torch.Tensor:
    return _qmm_forward(qa, qb, scale_a, scale_b, zero_point_a, zero_point_b, bias, out_dtype, True, False)


def _int8_matmul_fake(qa, qb, scale_a, zero_point_a, scale_b, zero_point_b, bias, out_dtype):
    return qa.new_empty((qa.shape[0], qb.shape[1]), dtype=out_dtype)


def _scaled_mm(
    a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, bias: torch.Tensor | None,
    out_dtype: torch.dtype, use_fast_accum: bool,
) -> torch.Tensor:
    return _qmm_forward(a, b, scale_a, scale_b, None, None, bias, out_dtype, False, not use_fast_accum)


def _scaled_mm_fake(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum):
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)


_int8_matmul_op = Op("roofkit::int8_matmul", _int8_matmul, _int8_matmul_fake)
_scaled_mm_op = Op("roofkit::scaled_mm", _scaled_mm, _scaled_mm_fake)


# ----------------------------------------------------------------------------- argument checks


def _dtype_name(d) -> str:
    return str(d).removeprefix("torch.")

def _check_param(op: str, name: str, t, dtypes, ref: torch.Tensor, shapes: list[tuple[int, ...]], what: str) -> None:
    """``t`` a tensor of ``dtypes`` on ``ref``'s device with one element or one of ``shapes``."""
    check_tensor(op, name, t, dtypes)
    check_same_device(op, name, t, ref)
    if t.numel() == 1 and t.dim() <= 2:
        return
    if tuple(t.shape) not in shapes:
        raise ValueError(f"roofkit.{op}: {name} must have one element (per tensor) or shape {what}; got shape {tuple(t.shape)}")

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


@planned
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


@planned
def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
              bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16,
              use_fast_accum: bool = False) -> torch.Tensor:
    """out = (a @ b) * scale_a * scale_b + bias from fp8 operands, as torch._scaled_mm.

    Args:
        a: (M, K) float8_e4m3fn or float8_e5m2, any strides.
        b: (K, N) of a's dtype, any strides; the transpose of a row-major (N, K) tensor (what
            torch._scaled_mm requires) is the fast layout (see Kernels).
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
    Kernels:
        On a GPU of compute capability 9.x (Hopper), with a (M, K) of unit K stride, b K-major,
        both with 16-byte aligned bases and row strides, a 16-bit out_dtype and M, N >= 256:
        the warp-specialized kernel of ``roofkit.ops.quant._fp8_ws`` (a TMA producer warp, two
        consumer warpgroups on 128x128 tiles, the promotion overlapped with the next slice's
        wgmma). Otherwise, or if that kernel does not build with the installed Triton (a
        RuntimeWarning once per specialization), the Triton tile kernel of this module (tensor
        descriptors when the layout allows on sm90+, else pointer loads).
        ``gemm.WS_MODE = "off"`` forces the Triton kernel.
    Numerics:
        Products exact, accumulated in fp32 (see use_fast_accum); the epilogue
        acc * scale_a * scale_b + bias in fp32, rounded once to out_dtype. K = 0 gives bias
        (or zeros). Deterministic for a given kernel; the two kernels may round differently
        (different tiles), so results can differ in the last bits across the M, N >= 256 edge.
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

_E4M3 = (torch.float8_e4m3fn,)


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
    # host: one decoding step of 8 tokens through o_proj (4096 -> 4096), W8A8 as in llama3-8b above,
    # where the host's cost per call is the time.
    "host": [case("o_proj_8x4096x4096_w8a8_sym", shape=(8, 4096, 4096), scale_a="row", scale_b="col",
                  zero_points="none", b_layout="transposed", dtypes=_I8)],
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
    # host: one decoding step of 8 tokens through o_proj (4096 -> 4096), per-tensor and row-wise
    # scales, where the host's cost per call is the time.
    "host": [
        case("o_proj_8x4096x4096", shape=(8, 4096, 4096), b_layout="transposed", dtypes=_E4M3),
        case("o_proj_8x4096x4096_rowwise", shape=(8, 4096, 4096), scale_a="row", scale_b="col", b_layout="transposed",
             dtypes=_E4M3),
    ],
}


def _gemm_k(case) -> int:
    return max(1, case["shape"][2])

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
    baselines={**baselines.eager_and_compiled(_torch_int_mm_dequant)},
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
    baselines={**baselines.eager_and_compiled(_torch_scaled_mm)},
    tolerance=_SCALED_MM_TOLERANCE,
    matrix=True,
    marker="quant",
)


# The tunables of this family's heuristics: what roofkit.config.override may set.
TUNABLES = ("WS_MODE", "WS_MIN", "TMA_MODE")
