"""Triton helpers shared by the kernels."""

import triton
import triton.language as tl


@triton.jit
def _row_block(start, end, BLOCK_M: tl.constexpr):
    """Rows [start, start + BLOCK_M) of a row-wise kernel: their indices, which of them lie below
    ``end``, and the indices in 64 bits (for offsets into the tensors)."""
    rows = start + tl.arange(0, BLOCK_M)
    return rows, rows < end, rows.to(tl.int64)


@triton.jit
def _round_for_store(y, ptr, BF16_RNE: tl.constexpr):
    """``y`` (float32) converted to ``ptr``'s element type.

    BF16_RNE rounds to nearest-even by hand before the conversion: Triton 3.6's CPU interpreter
    truncates float32 -> bfloat16 (the GPU rounds to nearest-even), which would double the
    rounding error of CPU runs. The host sets it only under the interpreter.
    """
    if BF16_RNE:
        bits = y.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        y = bits.to(tl.float32, bitcast=True)
    return y.to(ptr.dtype.element_ty)
