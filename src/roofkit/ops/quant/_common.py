"""Shared by the affine (quantize / dequantize) and GEMM (int8_matmul / scaled_mm) halves of
roofkit.ops.quant: dtype sets, element sizes, the per-channel parameter shape, the zero-point
range check."""

from __future__ import annotations

import torch

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
Q_DTYPES = (torch.int8, torch.uint8)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)

# Test-case dtype lists shared by both halves.
_I8 = (torch.int8,)


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
    GPU, at once on the CPU)."""
    info = torch.iinfo(qdtype)
    if zp.numel():
        ok = (zp >= info.min).all() & (zp <= info.max).all()
        torch._assert_async(ok, f"roofkit.{op}: {name} must lie in [{info.min}, {info.max}] ({qdtype})")
