"""Shared by the affine (quantize / dequantize) and GEMM (int8_matmul / scaled_mm) halves of
roofkit.ops.quant: dtype sets, element sizes, the per-channel parameter shape, the zero-point
range check."""

from __future__ import annotations

import functools

import torch

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
Q_DTYPES = (torch.int8, torch.uint8)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)

# Test-case dtype lists shared by both halves.
_I8 = (torch.int8,)


def _cdiv(a: int, b: int) -> int:
    """``triton.cdiv`` for host integers: Triton's is a constexpr function whose wrapper costs
    microseconds a call on the host path."""
    return -(-a // b)


def _pow2(n: int) -> int:
    """``next_pow2`` (the next power of two of max(n, 1)) without ``triton.next_power_of_2``'s
    constexpr-function wrapper."""
    return 1 << (max(int(n), 1) - 1).bit_length()


@functools.lru_cache(maxsize=None)
def _esize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _channel_shape(shape, axis: int | None) -> tuple[int, ...]:
    """Shape of per-channel parameters: 1 everywhere but ``axis`` (0-d per tensor)."""
    if axis is None:
        return ()
    return tuple(s if d == axis else 1 for d, s in enumerate(shape))


def _check_zero_point_range(op: str, name: str, zp: torch.Tensor, qdtype: torch.dtype) -> None:
    """Zero points outside the quantized type's range break the exactness of the int32 algebra;
    checked without a host sync (a device assert: RuntimeError at the next synchronization on a
    GPU, at once on the CPU). Three small kernels and the assert: zp equals its clamp to the range."""
    if zp.numel():
        lo, hi = _INT_RANGES.get(qdtype) or (torch.iinfo(qdtype).min, torch.iinfo(qdtype).max)
        ok = torch.eq(zp.clamp(lo, hi), zp).all()
        torch._assert_async(ok, f"roofkit.{op}: {name} must lie in [{lo}, {hi}] ({qdtype})")


# (min, max) of the quantized dtypes: a dict, not a cached function (this runs in the public
# functions, which torch.compile traces, and Dynamo warns on functools caches).
_INT_RANGES = {d: (torch.iinfo(d).min, torch.iinfo(d).max) for d in Q_DTYPES}
