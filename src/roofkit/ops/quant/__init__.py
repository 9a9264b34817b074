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

Layout. ``_common.py``: dtype sets and helpers both halves use. ``affine.py``: quantize and
dequantize. ``gemm.py``: int8_matmul and scaled_mm (imports quantize_torch from affine to make
its test inputs). Launch settings are read at call time from the submodule that uses them, so
patch them there, not on this package (which deliberately does not re-export them):
``affine.MINMAX_PROGRAMS_PER_SM``, ``affine.ELEMWISE_TILE``, ``affine.DEQUANTIZE_*``, ``gemm.TMA_MODE``, ``gemm.WS_MODE`` and
``gemm.WS_MIN`` (when scaled_mm takes the warp-specialized kernel of ``_fp8_ws``).
"""

from .affine import (
    DEQUANTIZE_SPEC,
    QUANT_CLAMP,
    QUANTIZE_SPEC,
    dequantize,
    dequantize_cost,
    dequantize_reference,
    dequantize_torch,
    quantize,
    quantize_cost,
    quantize_reference,
    quantize_torch,
)
from ._common import FP8_DTYPES, OUT_DTYPES, Q_DTYPES
from .gemm import (
    INT8_MATMUL_SPEC,
    INT8_MAX_K,
    INTERPRETER_CONFIG,
    SCALED_MM_SPEC,
    GemmConfig,
    int8_matmul,
    int8_matmul_cost,
    int8_matmul_reference,
    int8_matmul_torch,
    scaled_mm,
    scaled_mm_cost,
    scaled_mm_reference,
    scaled_mm_torch,
)

SPECS = (QUANTIZE_SPEC, DEQUANTIZE_SPEC, INT8_MATMUL_SPEC, SCALED_MM_SPEC)

__all__ = [
    "quantize", "dequantize", "int8_matmul", "scaled_mm",
    "quantize_reference", "quantize_torch", "quantize_cost",
    "dequantize_reference", "dequantize_torch", "dequantize_cost",
    "int8_matmul_reference", "int8_matmul_torch", "int8_matmul_cost",
    "scaled_mm_reference", "scaled_mm_torch", "scaled_mm_cost",
    "QUANTIZE_SPEC", "DEQUANTIZE_SPEC", "INT8_MATMUL_SPEC", "SCALED_MM_SPEC", "SPECS",
    "FP8_DTYPES", "Q_DTYPES", "OUT_DTYPES", "INT8_MAX_K", "QUANT_CLAMP", "GemmConfig", "INTERPRETER_CONFIG",
]
