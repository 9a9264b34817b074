"""transpose(input, dim0, dim1) as a contiguous tensor, forward and backward.

    out = torch.transpose(input, dim0, dim1).contiguous()

Program mapping: the transposed view's dimensions are merged where memory allows (size-1 dims
dropped), giving at most five dims for a contiguous input; the output is contiguous in them.
When the output's fast (last) dim is not the input's fast dim, a program moves one
[BLOCK_K, BLOCK_L] tile: K is the dim along which the input is contiguous, L the output's last
dim. The tile is loaded with the input's fast axis contiguous and stored with the output's fast
axis contiguous, so both sides are coalesced; Triton exchanges the layouts through shared
memory. When both fast dims coincide (a batched row copy, e.g. swapping heads and tokens), the
same kernel copies [BLOCK_K rows, BLOCK_L] tiles with no exchange. The remaining (batch) dims,
up to three, are taken from the program id, so the grid is one flat axis. When the transposed
view is already contiguous in memory (1xN, Nx1, size-1 dims, an input laid out transposed) the
op is a flat copy. Data are moved as raw bits (integers of the element's size), so every
dtype of 1, 2, 4 or 8 bytes is supported.
Source: the shared-memory tiled transpose of M. Harris, "An Efficient Matrix Transpose in CUDA
C/C++" (NVIDIA, 2013).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..harness import baselines
from ..harness.inputs import random_tensor, with_layout
from ..harness.spec import Cost, Inputs, OpSpec, case
from ._common import as_int, interpreter_active, next_pow2, cdiv
from ._runtime import Op, cached_launch, planned

# ----------------------------------------------------------------------------- reference, cost


def transpose_reference(input: torch.Tensor, dim0: int, dim1: int) -> torch.Tensor:
    """The transposed tensor, materialized contiguously (float64 for floating inputs: exact)."""
    return torch.transpose(input, dim0, dim1).contiguous()


def transpose_cost(case, dtype: torch.dtype) -> Cost:
    """Read every element once and write it once: 2 * numel * element size bytes, no FLOPs.
    ``mode='fwd_bwd'`` adds nothing: the backward's minimum is a view of the output gradient
    (torch's gradient of ``transpose(...).contiguous()`` is one, and so is roofkit's)."""
    numel = math.prod(case["shape"])
    size = torch.empty((), dtype=dtype).element_size()
    return Cost(flops=0, bytes=2 * numel * size)


# ----------------------------------------------------------------------------- launch heuristic

# Side of a transposing tile, by element size: 128 B and longer contiguous runs on both sides.
TILE_SIDE = {1: 128, 2: 64, 4: 64, 8: 64}
TILE_WARPS = {1: 8, 2: 4, 4: 4, 8: 8}
ROW_TILE_BYTES = 16384  # a row-copy tile (both fast dims equal)
COPY_BLOCK_BYTES = 16384  # a flat-copy block
MAX_DIMS = 5  # merged dims the kernel handles (a contiguous input never needs more)

# The kernels move raw bits: each element size maps to an integer dtype of that size.
_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
SUPPORTED_DTYPES = tuple(
    d for d in (
        torch.float32, torch.float16, torch.bfloat16, torch.float64,
        torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool,
        torch.complex64, torch.complex32,
        getattr(torch, "uint16", None), getattr(torch, "uint32", None), getattr(torch, "uint64", None),
        getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None),
    ) if d is not None
)


class Config(NamedTuple):
    BLOCK_K: int
    BLOCK_L: int
    num_warps: int


def _tile_config(k: int, l: int, elem_size: int, transposing: bool) -> Config:
    """Deterministic heuristic: square tiles of TILE_SIDE[elem] when the fast dims differ (a short
    side lets the other grow, tile area kept), rows of up to ROW_TILE_BYTES when they are equal."""
    return _tile_config_of(k, l, elem_size, transposing, TILE_SIDE[elem_size], TILE_WARPS[elem_size], ROW_TILE_BYTES)


def _tile_config_of(k: int, l: int, elem_size: int, transposing: bool, side: int, side_warps: int,
                    row_tile_bytes: int) -> Config:
    """``_tile_config`` with the tunables it reads given."""
    if transposing:
        area = side * side
        block_l = min(next_pow2(l), side)
        block_k = min(next_pow2(k), area // block_l)
        block_l = min(next_pow2(l), area // block_k)
        return Config(block_k, block_l, side_warps)
    tile = row_tile_bytes // elem_size
    block_l = min(next_pow2(l), tile)
    block_k = min(next_pow2(k), max(1, tile // block_l))
    warps = max(1, min(8, block_k * block_l * elem_size // 2048))
    return Config(block_k, block_l, warps)


# ----------------------------------------------------------------------------- kernels


@triton.jit
def _transpose_kernel(
    x_ptr, y_ptr, K, L, B1, B2,
    stride_xb0, stride_xb1, stride_xb2, stride_xk, stride_xl,
    stride_yb0, stride_yb1, stride_yb2, stride_yk,
    USE_INT64: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_L: tl.constexpr,
):
    """y[b, k, l] = x[b, k, l] for one [BLOCK_K, BLOCK_L] tile of one batch index b = (b0, b1,
    b2); y is unit-stride along l. Program id = batch * tiles + tile, tiles K-major."""
    pid = tl.program_id(0)
    tiles_k = tl.cdiv(K, BLOCK_K)
    tiles = tiles_k * tl.cdiv(L, BLOCK_L)
    t = pid % tiles
    b = pid // tiles
    tk = t % tiles_k
    tn = t // tiles_k
    b2 = (b % B2).to(tl.int64)
    b = b // B2
    b1 = (b % B1).to(tl.int64)
    b0 = (b // B1).to(tl.int64)
    x_base = x_ptr + b0 * stride_xb0 + b1 * stride_xb1 + b2 * stride_xb2
    y_base = y_ptr + b0 * stride_yb0 + b1 * stride_yb1 + b2 * stride_yb2
    kk = tk * BLOCK_K + tl.arange(0, BLOCK_K)
    ll = tn * BLOCK_L + tl.arange(0, BLOCK_L)
    mask = (kk < K)[:, None] & (ll < L)[None, :]
    if USE_INT64:
        kk = kk.to(tl.int64)
        ll = ll.to(tl.int64)
    v = tl.load(x_base + kk[:, None] * stride_xk + ll[None, :] * stride_xl, mask=mask)
    tl.store(y_base + kk[:, None] * stride_yk + ll[None, :], v, mask=mask)


@triton.jit
def _copy_kernel(x_ptr, y_ptr, numel, USE_INT64: tl.constexpr, BLOCK: tl.constexpr):
    """y[i] = x[i] for one block of BLOCK elements. Tile [BLOCK]."""
    pid = tl.program_id(0)
    if USE_INT64:
        start = pid.to(tl.int64) * BLOCK
    else:
        start = pid * BLOCK
    offs = start + tl.arange(0, BLOCK)
    mask = offs < numel
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


# ----------------------------------------------------------------------------- host launchers



def _merged(t: torch.Tensor) -> tuple[list[int], list[int]]:
    """Shape and strides of ``t`` with size-1 dims dropped and adjacent dims merged wherever
    the strides allow (the element order is unchanged)."""
    return _merged_of(t.shape, t.stride())


def _merged_of(sizes, strides_in) -> tuple[list[int], list[int]]:
    """``_merged`` of a tensor of these sizes and strides."""
    shape, strides = [], []
    for size, stride in zip(sizes, strides_in):
        if size == 1:
            continue
        if shape and strides[-1] == stride * size:
            shape[-1] *= size
            strides[-1] = stride
        else:
            shape.append(size)
            strides.append(stride)
    return shape, strides


class Plan(NamedTuple):
    """Arguments of one ``_transpose_kernel`` launch (see its signature)."""

    grid: int
    K: int
    L: int
    B1: int
    B2: int
    x_strides: tuple[int, int, int, int, int]  # b0, b1, b2, k, l
    y_strides: tuple[int, int, int, int]  # b0, b1, b2, k (l is 1)
    use_int64: bool
    config: Config


def _plan(shape: list[int], xs: list[int], elem_size: int) -> Plan | None:
    """Launch plan for writing, contiguously, a view of merged ``shape`` and input strides
    ``xs`` (at most MAX_DIMS dims); None if there are more dims than the kernel takes."""
    # Cached per problem and per value of the tunables it reads (read per call so that setting
    # them still takes effect once kept plans are dropped: _runtime.clear_plans); bounded, the
    # keys hold shapes.
    return _plan_of(tuple(shape), tuple(xs), elem_size, MAX_DIMS, TILE_SIDE[elem_size], TILE_WARPS[elem_size],
                    ROW_TILE_BYTES)


@functools.lru_cache(maxsize=4096)
def _plan_of(shape: tuple[int, ...], xs: tuple[int, ...], elem_size: int, max_dims: int, side: int, side_warps: int,
             row_tile_bytes: int) -> Plan | None:
    shape, xs = list(shape), list(xs)
    if len(shape) > max_dims:
        return None
    while len(shape) < 2:
        shape.insert(0, 1)
        xs.insert(0, 0)
    r = len(shape)
    ys = [math.prod(shape[i + 1:]) for i in range(r)]
    last = r - 1
    # K: the dim along which the input is densest (its fast axis) unless that is the output's
    # fast axis too, in which case K is the output dim next to it (a batched row copy).
    k = min(range(last), key=lambda d: (abs(xs[d]), -d))
    transposing = abs(xs[k]) < abs(xs[last])
    if not transposing:
        k = last - 1
    batch = [d for d in range(r) if d not in (k, last)]
    batch = [None] * (3 - len(batch)) + batch
    bs = [shape[d] if d is not None else 1 for d in batch]
    bxs = [xs[d] if d is not None else 0 for d in batch]
    bys = [ys[d] if d is not None else 0 for d in batch]
    cfg = _tile_config_of(shape[k], shape[last], elem_size, transposing, side, side_warps, row_tile_bytes)
    tiles = triton.cdiv(shape[k], cfg.BLOCK_K) * triton.cdiv(shape[last], cfg.BLOCK_L)
    # In-tile offsets are int32 unless they can reach 2**31 (batch offsets are always int64).
    reach = (shape[k] + cfg.BLOCK_K) * (abs(xs[k]) + ys[k]) + (shape[last] + cfg.BLOCK_L) * (abs(xs[last]) + 1)
    return Plan(
        grid=tiles * math.prod(bs), K=shape[k], L=shape[last], B1=bs[1], B2=bs[2],
        x_strides=(bxs[0], bxs[1], bxs[2], xs[k], xs[last]), y_strides=(bys[0], bys[1], bys[2], ys[k]),
        use_int64=reach >= 2**31, config=cfg,
    )


def _transpose_forward(x: torch.Tensor, dim0: int, dim1: int) -> torch.Tensor:
    size = x.element_size()
    bits = _BITS[size]
    # The transposed view's sizes and strides, without making the view (the kernels take the
    # input's data pointer; the strides say where each element is).
    shape, strides = list(x.shape), list(x.stride())
    shape[dim0], shape[dim1] = shape[dim1], shape[dim0]
    strides[dim0], strides[dim1] = strides[dim1], strides[dim0]
    # Allocated as raw bits of the element's size (torch warns on some dtypes' allocation).
    yb = torch.empty(shape, dtype=bits, device=x.device)
    out = yb.view(x.dtype)
    if x.numel() == 0:
        return out
    xb = x if x.dtype == bits else x.view(bits)
    merged_shape, merged_strides = _merged_of(shape, strides)
    if not merged_shape or (len(merged_shape) == 1 and merged_strides[0] == 1):
        # The transposed view is already in memory order (contiguous): a flat copy from the data
        # pointer.
        block = COPY_BLOCK_BYTES // size
        n = x.numel()
        cached_launch(
            _LAUNCHES, _copy_kernel, cdiv(n, block), USE_INT64=n + block >= 2**31, BLOCK=block, num_warps=8,
        )(xb, yb, n)
        return out
    plan = _plan(merged_shape, merged_strides, size)
    if plan is None:
        # Only inputs with many unmergeable strides get here: one contiguous copy first.
        return _transpose_forward(x.contiguous(), dim0, dim1)
    cfg = plan.config
    cached_launch(
        _LAUNCHES, _transpose_kernel, plan.grid,
        USE_INT64=plan.use_int64, BLOCK_K=cfg.BLOCK_K, BLOCK_L=cfg.BLOCK_L, num_warps=cfg.num_warps,
    )(xb, yb, plan.K, plan.L, plan.B1, plan.B2, *plan.x_strides, *plan.y_strides)
    return out


# ----------------------------------------------------------------------------- custom op, autograd


def _transpose(x: torch.Tensor, dim0: int, dim1: int) -> torch.Tensor:
    return _transpose_forward(x, dim0, dim1)


def _transpose_fake(x, dim0, dim1):
    return x.new_empty(torch.transpose(x, dim0, dim1).shape)


def _setup_context(ctx, inputs, output):
    _, ctx.dim0, ctx.dim1 = inputs


def _backward(ctx, grad):
    # The gradient of torch.transpose(input, dim0, dim1).contiguous() is the output gradient
    # transposed back, as a view (torch copies nothing in this backward either).
    return grad.transpose(ctx.dim0, ctx.dim1), None, None


_LAUNCHES: dict = {}
_transpose_op = Op("roofkit::transpose", _transpose, _transpose_fake).autograd(_setup_context, _backward)


# ----------------------------------------------------------------------------- public function


def _check_input(op: str, input) -> None:
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"roofkit.{op}: input must be a torch.Tensor, got {type(input).__name__}")
    if input.layout != torch.strided:
        raise TypeError(f"roofkit.{op}: input must be a dense (strided) tensor, got layout {input.layout}")
    if input.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"roofkit.{op}: input must have a dtype of 1, 2, 4 or 8 bytes (e.g. float32, bfloat16, "
            f"int64, bool, complex64); got {str(input.dtype).removeprefix('torch.')}"
        )
    if input.device.type == "cuda" or (input.device.type == "cpu" and interpreter_active()):
        return
    raise ValueError(
        f"roofkit.{op}: input is on {input.device}; roofkit's kernels need a CUDA tensor "
        "(or TRITON_INTERPRET=1 to run them on CPU tensors through the Triton interpreter)"
    )


def _check_dim(op: str, name: str, d, ndim: int) -> int:
    d = as_int(op, name, d)
    lim = max(ndim, 1)
    if not -lim <= d < lim:
        raise IndexError(f"roofkit.{op}: {name}={d} out of range for a {ndim}-d input (expected [{-lim}, {lim - 1}])")
    return d % lim


@planned
def transpose(input: torch.Tensor, dim0: int, dim1: int) -> torch.Tensor:
    """``input`` with dims ``dim0`` and ``dim1`` swapped, as a new contiguous tensor.

    Same values as ``torch.transpose(input, dim0, dim1).contiguous()`` (torch returns a view).

    Args:
        input: tensor of any shape (0-d included) and strides, of any dtype of 1, 2, 4 or 8
            bytes (floats, ints, bool, float8, complex64), on CUDA (or on CPU with
            TRITON_INTERPRET=1).
        dim0, dim1: the dims to swap (any integer-like; negative values count from the end).
    Returns:
        A contiguous tensor of the transposed shape and the input's dtype.
    Raises:
        TypeError: input not a tensor, not strided, or of an unsupported dtype (complex128,
            quantized); a dim not an int.
        ValueError: input on an unsupported device.
        IndexError: a dim out of range.
    Numerics:
        Exact (bits are copied). Deterministic. The backward returns the output gradient
        transposed back as a view, as torch's ``transpose(...).contiguous()`` does (no copy; a
        consumer that needs it contiguous makes the copy, as with torch).
    Cost:
        Reads and writes every element once: 2 * numel * element size bytes, 0 FLOPs. Only
        inputs whose strides leave more than five unmergeable dims take one extra copy.
    Source:
        M. Harris, "An Efficient Matrix Transpose in CUDA C/C++" (shared-memory tiles).
    """
    op = "transpose"
    _check_input(op, input)
    d0 = _check_dim(op, "dim0", dim0, input.dim())
    d1 = _check_dim(op, "dim1", dim1, input.dim())
    if input.dim() == 0:
        return _transpose_op.apply(input.reshape(1), 0, 0).reshape(())
    return _transpose_op.apply(input, d0, d1)


# ----------------------------------------------------------------------------- spec

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_F32 = (torch.float32,)
_BF16 = (torch.bfloat16,)
_INTS = (torch.int32, torch.int64)


def _make_inputs(case, dtype, generator, device) -> Inputs:
    shape = tuple(case["shape"])
    layout = case.get("layout", "contiguous")
    if dtype.is_floating_point:
        x = random_tensor(shape, dtype, generator, device, case.get("dist", "normal"), magnitude=1e3, layout=layout)
    else:
        # Integers spread over a wide range, so a misplaced element cannot match by chance.
        hi = 2 if dtype == torch.bool else (100 if dtype in (torch.int8, torch.uint8) else 1 << 20)
        lo = 0 if dtype in (torch.bool, torch.uint8) else -hi
        x = torch.randint(lo, hi, shape, generator=generator, device=generator.device).to(device=device, dtype=dtype)
        x = with_layout(x, layout)
    return Inputs((x, case["dim0"], case["dim1"]))


CASES = [
    case("scalar", ["quick"], shape=(), dim0=0, dim1=-1),
    case("tiny_1x1", ["quick"], shape=(1, 1), dim0=0, dim1=1),
    case("odd_3x7", ["quick"], shape=(3, 7), dim0=0, dim1=1),
    case("row_1x37", shape=(1, 37), dim0=0, dim1=1),
    case("col_37x1", shape=(37, 1), dim0=1, dim1=0),
    case("same_dim_4x5", shape=(4, 5), dim0=1, dim1=1),
    case("one_dim_7", shape=(7,), dim0=0, dim1=-1),
    case("prime_37x131", ["quick"], shape=(37, 131), dim0=0, dim1=1),
    case("multi_tile_70x130", shape=(70, 130), dim0=1, dim1=0),
    case("batched_last_two_3x5x7", ["quick"], shape=(3, 5, 7), dim0=-1, dim1=-2),
    case("batched_rows_3x5x4", shape=(3, 5, 4), dim0=0, dim1=1),
    case("outer_pair_3x4x5", shape=(3, 4, 5), dim0=0, dim1=2),
    case("four_dims_2x3x4x5", shape=(2, 3, 4, 5), dim0=1, dim1=3),
    case("four_dims_rows_2x3x4x5", shape=(2, 3, 4, 5), dim0=0, dim1=2),
    case("five_dims_2x3x2x3x5", shape=(2, 3, 2, 3, 5), dim0=1, dim1=3),
    case("short_side_3x200", shape=(3, 200), dim0=0, dim1=1),
    case("size1_middle_4x1x6", shape=(4, 1, 6), dim0=0, dim1=2),
    case("transposed_16x33", shape=(16, 33), dim0=0, dim1=1, layout="transposed"),
    case("transposed_batched_3x16x33", shape=(3, 16, 33), dim0=0, dim1=2, layout="transposed"),
    case("offset_9x65", shape=(9, 65), dim0=0, dim1=1, layout="offset"),
    case("strided_9x65", shape=(9, 65), dim0=0, dim1=1, layout="strided"),
    case("expanded_5x40", shape=(5, 40), dim0=0, dim1=1, layout="expanded"),
    case("grad_transposed_12x40", shape=(12, 40), dim0=0, dim1=1, grad_layout="transposed"),
    case("nan_inf_8x129", shape=(8, 129), dim0=0, dim1=1, dist="nan"),
    case("neg_inf_8x129", shape=(8, 129), dim0=1, dim1=0, dist="neg_inf"),
    case("ints_37x131", shape=(37, 131), dim0=0, dim1=1, dtypes=_INTS, grad=False),
    case("ints_batched_3x5x7", shape=(3, 5, 7), dim0=0, dim1=2, dtypes=_INTS, grad=False),
    case("bytes_37x131", shape=(37, 131), dim0=0, dim1=1, dtypes=(torch.int8, torch.uint8, torch.bool), grad=False),
    case("float64_37x131", shape=(37, 131), dim0=0, dim1=1, dtypes=(torch.float64,)),
    case("empty_rows_0x7", ["quick"], shape=(0, 7), dim0=0, dim1=1),
    case("empty_cols_5x0", shape=(5, 0), dim0=0, dim1=1),
    case("empty_batched_2x0x3", shape=(2, 0, 3), dim0=0, dim1=2),
    # On the GPU (``pytest -m gpu``): the acceptance shapes and model layouts.
    case("gpu_row_1xN", ["gpu"], shape=(1, 1 << 20), dim0=0, dim1=1),
    case("gpu_col_Nx1", ["gpu"], shape=(1 << 20, 1), dim0=0, dim1=1),
    case("gpu_4095x4097", ["gpu"], shape=(4095, 4097), dim0=0, dim1=1),
    case("gpu_4096x4096", ["gpu"], shape=(4096, 4096), dim0=0, dim1=1),
    case("gpu_batched_kt_32x2048x128", ["gpu"], shape=(32, 2048, 128), dim0=1, dim1=2),
    case("gpu_batched_heads_32x2048x128", ["gpu"], shape=(32, 2048, 128), dim0=0, dim1=1),
    case("gpu_batched_odd_7x1001x999", ["gpu"], shape=(7, 1001, 999), dim0=-1, dim1=-2),
    case("gpu_short_side_5x100003", ["gpu"], shape=(5, 100003), dim0=0, dim1=1),
    case("gpu_transposed_2048x3000", ["gpu"], shape=(2048, 3000), dim0=0, dim1=1, layout="transposed"),
    case("gpu_strided_1024x999", ["gpu"], shape=(1024, 999), dim0=0, dim1=1, layout="strided"),
    case("gpu_ints_4095x4097", ["gpu"], shape=(4095, 4097), dim0=0, dim1=1, dtypes=_INTS, grad=False),
    case("gpu_bytes_4095x4097", ["gpu"], shape=(4095, 4097), dim0=0, dim1=1, dtypes=(torch.int8,), grad=False),
    case("gpu_over_2pow31_elements", ["gpu", "slow"], shape=(46341, 46341), dim0=0, dim1=1, dtypes=_BF16, grad=False),
]

SUITES = {
    # llama3-8b: hidden 4096, FFN 14336, 32 heads of 128, 8192 tokens.
    "llama3-8b": [
        case("ffn_weight_4096x14336", shape=(4096, 14336), dim0=0, dim1=1, dtypes=_BF16),
        case("heads_tokens_32x8192x128", shape=(32, 8192, 128), dim0=0, dim1=1, dtypes=_BF16),
        case("keys_t_32x8192x128", shape=(32, 8192, 128), dim0=1, dim1=2, dtypes=_BF16),
        case("ffn_weight_4096x14336_fwd_bwd", shape=(4096, 14336), dim0=0, dim1=1, dtypes=_BF16, mode="fwd_bwd"),
    ],
    "acceptance": [
        case("row_1x64Mi", shape=(1, 1 << 26), dim0=0, dim1=1, dtypes=_F32),
        case("col_64Mix1", shape=(1 << 26, 1), dim0=0, dim1=1, dtypes=_F32),
        case("odd_4095x4097", shape=(4095, 4097), dim0=0, dim1=1, dtypes=_F32),
        case("batched_32x8192x128", shape=(32, 8192, 128), dim0=1, dim1=2, dtypes=_F32),
        case("square_16384x16384", shape=(16384, 16384), dim0=0, dim1=1, dtypes=_F32),
    ],
    "edge": [
        case("square_16384x16384_bf16", shape=(16384, 16384), dim0=0, dim1=1, dtypes=_BF16),
        case("short_side_8x4Mi", shape=(8, 1 << 22), dim0=0, dim1=1, dtypes=_F32),
        case("int8_8192x8192", shape=(8192, 8192), dim0=0, dim1=1, dtypes=(torch.int8,)),
    ],
    # host: one decoding step of 8 tokens x 32 heads of 128 put head-major, where the host's cost
    # per call is the time.
    "host": [
        case("tokens_heads_8x32x128", shape=(8, 32, 128), dim0=0, dim1=1, dtypes=_BF16),
        case("tokens_heads_8x32x128_fwd_bwd", shape=(8, 32, 128), dim0=0, dim1=1, dtypes=_BF16, mode="fwd_bwd"),
    ],
}


def _torch_transpose(input, dim0, dim1):
    return torch.transpose(input, dim0, dim1).contiguous()


SPEC = OpSpec(
    name="transpose",
    impl=transpose,
    reference=transpose_reference,
    torch_impl=torch.transpose,
    make_inputs=_make_inputs,
    cost=transpose_cost,
    dtypes=_FLOATS,
    cases=CASES,
    suites=SUITES,
    baselines={**baselines.eager_and_compiled(_torch_transpose)},
    grad_args=(0,),
    marker="transpose",
)

SPECS = (SPEC,)


# The tunables of this family's heuristics: what roofkit.config.override may set.
TUNABLES = ("ROW_TILE_BYTES", "COPY_BLOCK_BYTES")
