"""sum, mean and amax over any set of dimensions, with autograd.

    sum(x)[o] = sum_{r in reduced} x[o, r]      mean = sum / (number of reduced elements)
    amax(x)[o] = max_{r in reduced} x[o, r]     (NaN if any reduced element is NaN)

Program mapping: the input's dimensions are put in memory order (no copy when the input is a
permutation of a contiguous tensor) and merged, so the problem is a contiguous (outer, N, inner)
block with N the reduced extent. ``inner == 1`` is a row reduction: one program owns BLOCK_M
rows and walks them in [BLOCK_M, BLOCK_N] tiles, every thread accumulating its own elements in
float32 registers, the block combining them once at the end. ``inner > 1`` is a column
reduction: one program owns BLOCK_I contiguous columns of one outer slab and walks the reduced
axis in [BLOCK_N, BLOCK_I] tiles (each tile row is a contiguous, coalesced segment). When these
programs are too few to fill the GPU (fewer than MIN_PROGRAMS_PER_SM per SM, read from the
device; a full reduction is the row case with one row), the reduced axis is also split into
contiguous runs of at most MAX_CHUNKS_PER_PROGRAM tiles, one program each, that write float32
partials; a second launch of the same kernel combines them in a fixed order. Both stages have a
fixed shape for a given device, so results are bitwise reproducible.
Layouts that are not a permutation of a contiguous tensor (e.g. every other element, stride 0),
and reductions over dims that are not adjacent in memory, take one contiguous copy first.
Source: the two-stage tree reduction of M. Harris, "Optimizing Parallel Reduction in CUDA"
(NVIDIA, 2007), with per-thread register accumulation ("algorithm cascading").
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl

from ..harness import baselines
from ..harness.inputs import random_tensor
from ..harness.spec import Cost, Inputs, OpSpec, case
from ._common import FLOAT_DTYPES, as_int, bf16_rne, check_power_of_two, check_tensor, next_pow2, sm_count, cdiv
from ._jit import _round_for_store
from ._runtime import Op, cached_launch, planned

# ----------------------------------------------------------------------------- reference, cost


def sum_reference(input, dim=None, keepdim=False, *, dtype=None):
    """sum in float64 (``dtype`` only selects the expected output dtype elsewhere)."""
    return torch.sum(input.to(torch.float64), dim=dim, keepdim=keepdim)


def mean_reference(input, dim=None, keepdim=False, *, dtype=None):
    """mean in float64 (NaN for an empty reduction, as torch)."""
    return torch.mean(input.to(torch.float64), dim=dim, keepdim=keepdim)


def amax_reference(input, dim=(), keepdim=False):
    """amax in float64; its autograd splits the gradient evenly among tied maxima, as torch."""
    return torch.amax(input.to(torch.float64), dim=dim, keepdim=keepdim)


def _case_dims(shape, dim) -> tuple[int, ...]:
    nd = max(len(shape), 1)
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return tuple(range(len(shape)))
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    return tuple(sorted({d % nd for d in dims})) if shape else ()


def reduce_cost(case, dtype: torch.dtype) -> Cost:
    """Read the input once and write the output once; one FLOP (add or max) per input element.
    The output has the case's ``out_dtype`` if given, else the input's dtype.
    ``mode='fwd_bwd'`` (amax) adds the backward: read x and dy, write dx; 2 FLOP per element
    (compare, scale)."""
    shape = tuple(case["shape"])
    numel = math.prod(shape)
    dims = _case_dims(shape, case.get("dim"))
    out_numel = math.prod(s for i, s in enumerate(shape) if i not in dims)
    out_dtype = getattr(torch, case["out_dtype"]) if case.get("out_dtype") else dtype
    in_size = torch.empty((), dtype=dtype).element_size()
    out_size = torch.empty((), dtype=out_dtype).element_size()
    fwd = Cost(flops=numel, bytes=numel * in_size + out_numel * out_size)
    if case.get("mode", "fwd") == "fwd_bwd":
        return Cost(flops=fwd.flops + 2 * numel, bytes=fwd.bytes + 2 * numel * in_size + out_numel * out_size)
    return fwd


def _reduction_length(case) -> int:
    shape = tuple(case["shape"])
    return max(1, math.prod(shape[d] for d in _case_dims(shape, case.get("dim"))))


# ----------------------------------------------------------------------------- launch heuristic

TILE_BYTES = 16384  # input bytes one program reads per loop iteration (16 B x 4 loads per thread)
BYTES_PER_THREAD = 64  # sets num_warps: TILE_BYTES / (32 * 64) = 8 warps for a full tile
COL_SEGMENT_BYTES = 256  # contiguous bytes per tile row in the column kernel (docs/data_movement.md: 512 measured slower)
MIN_PROGRAMS_PER_SM = 4  # fewer row / column blocks than this per SM: split the reduced axis
MAX_CHUNKS_PER_PROGRAM = 16  # a split program reads at most this many tiles (256 KiB)
# amax's backward over the trailing dims of a contiguous input runs one kernel (a program a row)
# when there are at least this many rows per SM; otherwise (a few long rows) torch's ops.
AMAX_BWD_MIN_ROWS_PER_SM = 1


class Config(NamedTuple):
    """BLOCK_M rows (row kernel) or BLOCK_I columns (column kernel) per program, BLOCK_N along the
    reduced axis; ``splits`` programs share each row / column block, each reading a contiguous
    run of ``chunks_per_split`` tiles (splits == 1: no split)."""

    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    splits: int = 1
    chunks_per_split: int = 1


def _warps(tile_elems: int, elem_size: int, bytes_per_thread: int | None = None) -> int:
    per_thread = BYTES_PER_THREAD if bytes_per_thread is None else bytes_per_thread
    return max(1, min(8, tile_elems * elem_size // (32 * per_thread)))


def _splits(programs: int, chunks: int, device: torch.device) -> tuple[int, int]:
    """(splits, chunks per split). No split when the blocks alone give MIN_PROGRAMS_PER_SM per
    SM. Otherwise enough splits to reach that, and at most MAX_CHUNKS_PER_PROGRAM tiles per
    program: a full reduction becomes many short programs (many waves, so the hardware
    scheduler balances them whatever the occupancy) rather than one resident wave."""
    return _split_counts(programs, chunks, MIN_PROGRAMS_PER_SM * sm_count(device), MAX_CHUNKS_PER_PROGRAM)


def _split_counts(programs: int, chunks: int, target: int, max_chunks: int) -> tuple[int, int]:
    """``_splits`` for a target program count and at most ``max_chunks`` tiles per program."""
    if programs >= target or chunks <= 1:
        return 1, chunks
    want = max(triton.cdiv(target, programs), triton.cdiv(chunks, max_chunks))
    per = triton.cdiv(chunks, min(want, chunks))
    return triton.cdiv(chunks, per), per


# The configurations are cached per problem and per value of what they read (the SM count and
# the module's tunables, read per call so that setting them, as tests do, still takes effect
# once kept plans are dropped: _runtime.clear_plans).
# Bounded: the keys hold the row / column counts, which vary more than a row length.
_CONFIG_CACHE = 4096


def _rows_config(m: int, n: int, elem_size: int, device: torch.device, split: bool = True) -> Config:
    """Row reduction of an (m, n) block: tiles of TILE_BYTES (several short rows per tile)."""
    target = MIN_PROGRAMS_PER_SM * sm_count(device) if split else 0
    return _rows_config_of(m, n, elem_size, split, target, TILE_BYTES, BYTES_PER_THREAD, MAX_CHUNKS_PER_PROGRAM)


@functools.lru_cache(maxsize=_CONFIG_CACHE)
def _rows_config_of(m: int, n: int, elem_size: int, split: bool, target: int, tile_bytes: int,
                    bytes_per_thread: int, max_chunks: int) -> Config:
    check_power_of_two("sum / mean / amax", "TILE_BYTES", tile_bytes)
    tile = max(1, tile_bytes // elem_size)
    block_n = min(next_pow2(n), tile)
    block_m = min(max(1, tile // block_n), next_pow2(m))
    splits, per = (_split_counts(triton.cdiv(m, block_m), triton.cdiv(n, block_n), target, max_chunks)
                   if split else (1, 1))
    return Config(block_m, block_n, _warps(block_m * block_n, elem_size, bytes_per_thread), splits, per)


def _cols_config(outer: int, n: int, inner: int, elem_size: int, device: torch.device, split: bool = True) -> Config:
    """Column reduction of an (outer, n, inner) block: tile rows of COL_SEGMENT_BYTES."""
    target = MIN_PROGRAMS_PER_SM * sm_count(device) if split else 0
    return _cols_config_of(outer, n, inner, elem_size, split, target, TILE_BYTES, COL_SEGMENT_BYTES,
                           BYTES_PER_THREAD, MAX_CHUNKS_PER_PROGRAM)


@functools.lru_cache(maxsize=_CONFIG_CACHE)
def _cols_config_of(outer: int, n: int, inner: int, elem_size: int, split: bool, target: int, tile_bytes: int,
                    col_segment_bytes: int, bytes_per_thread: int, max_chunks: int) -> Config:
    check_power_of_two("sum / mean / amax", "TILE_BYTES", tile_bytes)
    check_power_of_two("sum / mean / amax", "COL_SEGMENT_BYTES", col_segment_bytes)
    tile = max(1, tile_bytes // elem_size)
    block_i = min(next_pow2(inner), max(1, col_segment_bytes // elem_size))
    block_n = min(next_pow2(n), max(1, tile // block_i))
    programs = outer * triton.cdiv(inner, block_i)
    splits, per = _split_counts(programs, triton.cdiv(n, block_n), target, max_chunks) if split else (1, 1)
    return Config(block_i, block_n, _warps(block_i * block_n, elem_size, bytes_per_thread), splits, per)


# ----------------------------------------------------------------------------- kernels


@triton.jit
def _max_nan(a, b):
    """max that returns NaN if either side is NaN (the GPU's default max drops NaN)."""
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _accumulate(acc, x, IS_MAX: tl.constexpr):
    """Fold tile ``x`` into the per-thread running sum or maximum."""
    if IS_MAX:
        acc = _max_nan(acc, x)
    else:
        acc = acc + x
    return acc


@triton.jit
def _finalize(acc, axis: tl.constexpr, IS_MAX: tl.constexpr):
    """Combine the per-thread accumulators of a tile along ``axis``."""
    if IS_MAX:
        # The accumulators already carry NaN; the block-wide max is told about it explicitly
        # (a single pass over the registers, done once per program).
        has_nan = tl.sum((acc != acc).to(tl.int32), axis=axis) > 0
        res = tl.where(has_nan, float("nan"), tl.max(acc, axis=axis))
    else:
        res = tl.sum(acc, axis=axis)
    return res


@triton.jit
def _reduce_rows_kernel(
    x_ptr, out_ptr, M, N, stride_xm, SPLITS, CHUNKS_PER_SPLIT, n_div,
    IS_MAX: tl.constexpr, DIVIDE: tl.constexpr, PARTIAL: tl.constexpr, USE_INT64: tl.constexpr,
    BF16_RNE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Reduces BLOCK_M rows of length N (unit stride) over chunks [s * CHUNKS_PER_SPLIT, ...) of
    BLOCK_N elements (s = this program's split). Tile [BLOCK_M, BLOCK_N], float32 accumulators;
    PARTIAL writes float32 partials out[row, s], else the final value in out's dtype."""
    pid = tl.program_id(0)
    rb = pid // SPLITS
    s = pid % SPLITS
    rows = rb * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < M
    rows64 = rows.to(tl.int64)
    x_rows = x_ptr + rows64[:, None] * stride_xm
    cols = tl.arange(0, BLOCK_N)
    if IS_MAX:
        init = -float("inf")
    else:
        init = 0.0
    acc = tl.full([BLOCK_M, BLOCK_N], init, tl.float32)
    n_full = N // BLOCK_N
    c0 = s * CHUNKS_PER_SPLIT
    c1 = c0 + CHUNKS_PER_SPLIT
    # Whole chunks without a column mask (vectorized 16-byte loads), then the ragged tail, read
    # by the program whose run covers it.
    for c in range(c0, tl.minimum(c1, n_full)):
        if USE_INT64:
            start = c.to(tl.int64) * BLOCK_N
        else:
            start = c * BLOCK_N
        x = tl.load(x_rows + (start + cols)[None, :], mask=row_mask[:, None], other=init).to(tl.float32)
        acc = _accumulate(acc, x, IS_MAX)
    if (n_full * BLOCK_N < N) & (c0 <= n_full) & (n_full < c1):
        if USE_INT64:
            offs = n_full.to(tl.int64) * BLOCK_N + cols
        else:
            offs = n_full * BLOCK_N + cols
        mask = row_mask[:, None] & (offs < N)[None, :]
        x = tl.load(x_rows + offs[None, :], mask=mask, other=init).to(tl.float32)
        acc = _accumulate(acc, x, IS_MAX)
    res = _finalize(acc, 1, IS_MAX)
    if PARTIAL:
        tl.store(out_ptr + rows64 * SPLITS + s, res, mask=row_mask)
    else:
        if DIVIDE:
            res = res / n_div
        tl.store(out_ptr + rows64, _round_for_store(res, out_ptr, BF16_RNE), mask=row_mask)


@triton.jit
def _reduce_cols_kernel(
    x_ptr, out_ptr, N, I, stride_xo, SPLITS, CHUNKS_PER_SPLIT, n_div,
    IS_MAX: tl.constexpr, DIVIDE: tl.constexpr, PARTIAL: tl.constexpr, USE_INT64: tl.constexpr,
    BF16_RNE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_I: tl.constexpr,
):
    """Reduces BLOCK_I contiguous columns of one (N, I) slab (slabs stride_xo apart) over the
    chunks [s * CHUNKS_PER_SPLIT, ...) of BLOCK_N rows. Tile [BLOCK_N, BLOCK_I], float32
    accumulators; PARTIAL writes float32 partials out[o, s, col], else the final out[o, col]."""
    pid = tl.program_id(0)
    s = pid % SPLITS
    t = pid // SPLITS
    col_blocks = tl.cdiv(I, BLOCK_I)
    ib = t % col_blocks
    o = (t // col_blocks).to(tl.int64)
    cols = ib * BLOCK_I + tl.arange(0, BLOCK_I)
    col_mask = cols < I
    x_slab = x_ptr + o * stride_xo
    rows = tl.arange(0, BLOCK_N)
    if IS_MAX:
        init = -float("inf")
    else:
        init = 0.0
    acc = tl.full([BLOCK_N, BLOCK_I], init, tl.float32)
    c0 = s * CHUNKS_PER_SPLIT
    for c in range(c0, tl.minimum(c0 + CHUNKS_PER_SPLIT, tl.cdiv(N, BLOCK_N))):
        if USE_INT64:
            r = c.to(tl.int64) * BLOCK_N + rows
        else:
            r = c * BLOCK_N + rows
        mask = (r < N)[:, None] & col_mask[None, :]
        x = tl.load(x_slab + r[:, None] * I + cols[None, :], mask=mask, other=init).to(tl.float32)
        acc = _accumulate(acc, x, IS_MAX)
    res = _finalize(acc, 0, IS_MAX)
    if PARTIAL:
        tl.store(out_ptr + (o * SPLITS + s) * I + cols, res, mask=col_mask)
    else:
        if DIVIDE:
            res = res / n_div
        tl.store(out_ptr + o * I + cols, _round_for_store(res, out_ptr, BF16_RNE), mask=col_mask)


@triton.jit
def _amax_bwd_rows_kernel(x_ptr, y_ptr, g_ptr, dx_ptr, N, stride_g, BF16_RNE: tl.constexpr, BLOCK_N: tl.constexpr):
    """amax's gradient for one row of length N (contiguous rows): the row's output gradient g
    split evenly among the elements equal to its maximum y, as torch computes it, (g / count) *
    (x == y) in float32 with the count in the gradient's dtype: a row whose maximum no element
    equals (NaN) has count 0 and gets NaN everywhere (inf * 0), as torch's. Two passes over the
    row: the count, then the gradient."""
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * N
    dx_row = dx_ptr + row * N
    y = tl.load(y_ptr + row).to(tl.float32)  # (compared in float32: exact for every input dtype)
    cols = tl.arange(0, BLOCK_N)
    cnt = tl.zeros([BLOCK_N], tl.int32)
    for start in range(0, N, BLOCK_N):
        offs = start + cols
        x = tl.load(x_row + offs, mask=offs < N, other=float("nan")).to(tl.float32)  # NaN equals nothing
        cnt += (x == y).to(tl.int32)
    # torch divides by the count converted to the gradient's dtype (a 16-bit count rounds past
    # 256 / 2048 ties, and is inf in float16 from 65520), in IEEE division (``/`` in Triton 3.6
    # is the approximate div.full.f32)
    count = _round_for_store(tl.sum(cnt, axis=0).to(tl.float32), dx_ptr, BF16_RNE).to(tl.float32)
    scale = tl.div_rn(tl.load(g_ptr + row * stride_g).to(tl.float32), count)
    for start in range(0, N, BLOCK_N):
        offs = start + cols
        m = offs < N
        x = tl.load(x_row + offs, mask=m, other=float("nan")).to(tl.float32)
        tl.store(dx_row + offs, _round_for_store(scale * (x == y).to(tl.float32), dx_ptr, BF16_RNE), mask=m)


# ----------------------------------------------------------------------------- host launchers



def _out_shape(shape, dims, keepdim: bool) -> list[int]:
    if keepdim:
        return [1 if i in dims else s for i, s in enumerate(shape)]
    return [s for i, s in enumerate(shape) if i not in dims]


def _dense_in_order(x: torch.Tensor, order: list[int]) -> bool:
    """True if ``x`` with its dims in ``order`` is contiguous (size-1 dims left out)."""
    expected = 1
    for d in reversed(order):
        if x.stride(d) != expected:
            return False
        expected *= x.shape[d]
    return True


def _layout(x: torch.Tensor, red: set[int]):
    """(src, outer, n, inner, kept): ``src`` holds the input as a contiguous (outer, n, inner)
    block starting at its data pointer, n the reduced extent; ``kept`` lists the kept dims (of
    size > 1) in the order the kernels write them. Copies only for layouts that are not a
    permutation of a contiguous tensor, or reduced dims that are not adjacent in memory."""
    nd = x.dim()
    if red and min(red) == nd - len(red) and x.is_contiguous():
        # The common case, the trailing dims of a contiguous tensor reduced: what the general
        # walk below finds (one kept group, then one reduced group), without its cost.
        shape = x.shape
        k = nd - len(red)
        return x, math.prod(shape[:k]), math.prod(shape[k:]), 1, [d for d in range(k) if shape[d] > 1]
    big = [d for d in range(x.dim()) if x.shape[d] > 1]
    order = sorted(big, key=lambda d: x.stride(d), reverse=True)  # memory order (stable)
    if not _dense_in_order(x, order):
        x = x.contiguous()
        order = big
    groups: list[list] = []  # [is_reduced, extent] of runs of adjacent dims
    for d in order:
        r = d in red
        if groups and groups[-1][0] == r:
            groups[-1][1] *= x.shape[d]
        else:
            groups.append([r, x.shape[d]])
    kept = [d for d in order if d not in red]
    if [g[0] for g in groups].count(True) > 1:
        reduced = [d for d in order if d in red]
        ones = [d for d in range(x.dim()) if x.shape[d] == 1]
        x = x.permute(kept + reduced + ones).contiguous()
        groups = [[False, math.prod(x.shape[: len(kept)])], [True, math.prod(x.shape[len(kept):])]]
    outer = n = inner = 1
    seen = False
    for r, extent in groups:
        if r:
            n, seen = extent, True
        elif seen:
            inner = extent
        else:
            outer = extent
    return x, outer, n, inner, kept


def _launch_rows(src, out, m, n, stride_m, is_max, n_div, device, config=None):
    """Row reduction of the (m, n) block at ``src`` (row stride ``stride_m``, unit column
    stride) into ``out`` (m values); split over the columns when the config says so."""
    cfg = config or _rows_config(m, n, src.element_size(), device)
    if m == 1:
        stride_m = 0  # lets Triton see 16-byte alignment whatever n is
    grid = cdiv(m, cfg.BLOCK_M)
    use_int64 = n + cfg.BLOCK_N >= 2**31
    if cfg.splits == 1:
        cached_launch(
            _LAUNCHES, _reduce_rows_kernel, grid,
            DIVIDE=n_div != 1.0, PARTIAL=False, BF16_RNE=bf16_rne(out.dtype), IS_MAX=is_max, USE_INT64=use_int64,
            BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps,
        )(src, out, m, n, stride_m, 1, cdiv(n, cfg.BLOCK_N), n_div)
        return
    s = cfg.splits
    part = torch.empty((m, s), dtype=torch.float32, device=device)
    cached_launch(
        _LAUNCHES, _reduce_rows_kernel, grid * s,
        DIVIDE=False, PARTIAL=True, BF16_RNE=False, IS_MAX=is_max, USE_INT64=use_int64,
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps,
    )(src, part, m, n, stride_m, s, cfg.chunks_per_split, 1.0)
    _launch_rows(part, out, m, s, s, is_max, n_div, device, _rows_config(m, s, 4, device, split=False))


def _launch_cols(src, out, outer, n, inner, is_max, n_div, device, config=None):
    """Column reduction of the (outer, n, inner) contiguous block at ``src`` into ``out``
    (outer * inner values); split along n when the config says so."""
    cfg = config or _cols_config(outer, n, inner, src.element_size(), device)
    blocks = outer * cdiv(inner, cfg.BLOCK_M)
    use_int64 = (n + cfg.BLOCK_N) * inner >= 2**31
    if cfg.splits == 1:
        cached_launch(
            _LAUNCHES, _reduce_cols_kernel, blocks,
            DIVIDE=n_div != 1.0, PARTIAL=False, BF16_RNE=bf16_rne(out.dtype), IS_MAX=is_max, USE_INT64=use_int64,
            BLOCK_N=cfg.BLOCK_N, BLOCK_I=cfg.BLOCK_M, num_warps=cfg.num_warps,
        )(src, out, n, inner, n * inner, 1, cdiv(n, cfg.BLOCK_N), n_div)
        return
    s = cfg.splits
    part = torch.empty((outer, s, inner), dtype=torch.float32, device=device)
    cached_launch(
        _LAUNCHES, _reduce_cols_kernel, blocks * s,
        DIVIDE=False, PARTIAL=True, BF16_RNE=False, IS_MAX=is_max, USE_INT64=use_int64,
        BLOCK_N=cfg.BLOCK_N, BLOCK_I=cfg.BLOCK_M, num_warps=cfg.num_warps,
    )(src, part, n, inner, n * inner, s, cfg.chunks_per_split, 1.0)
    split_free = _cols_config(outer, s, inner, 4, device, split=False)
    _launch_cols(part, out, outer, s, inner, is_max, n_div, device, split_free)


def _reduce_forward(x: torch.Tensor, dims: list[int], keepdim: bool, kind: str, out_dtype) -> torch.Tensor:
    dims_set = set(dims)
    odt = out_dtype if out_dtype is not None else x.dtype
    out_shape = _out_shape(x.shape, dims_set, keepdim)
    n_total = math.prod(x.shape[d] for d in dims_set)
    if x.numel() == 0:
        # torch's empty reductions: sum 0, mean NaN; amax's empty reduced dims were refused.
        fill = 0.0 if kind == "sum" else math.nan
        return torch.full(out_shape, fill, dtype=odt, device=x.device)
    src, outer, n, inner, kept = _layout(x, dims_set)
    out = torch.empty(outer * inner, dtype=odt, device=x.device)
    is_max = kind == "amax"
    n_div = float(n_total) if kind == "mean" else 1.0
    if inner == 1:
        _launch_rows(src, out, outer, n, n, is_max, n_div, x.device)
    else:
        _launch_cols(src, out, outer, n, inner, is_max, n_div, x.device)
    if kept != sorted(kept):
        # Kept dims laid out out of order in memory: put them in shape order (a small copy).
        out = out.view([x.shape[d] for d in kept]).permute([kept.index(d) for d in sorted(kept)]).contiguous()
    return out.view(out_shape)


# ----------------------------------------------------------------------------- custom op, autograd


def _reduce(
    x: torch.Tensor, dims: list[int], keepdim: bool, kind: str, out_dtype: Optional[torch.dtype]
) -> torch.Tensor:
    return _reduce_forward(x, dims, keepdim, kind, out_dtype)


def _reduce_fake(x, dims, keepdim, kind, out_dtype):
    shape = _out_shape(x.shape, set(dims), keepdim)
    return x.new_empty(shape, dtype=out_dtype if out_dtype is not None else x.dtype)


def _amax_bwd(grad: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The gradient of amax over the rows of the contiguous 2-D ``x`` (M, N) from ``grad`` and the
    maxima ``y`` (M,), by ``_amax_bwd_rows_kernel``."""
    m, n = x.shape
    dx = torch.empty_like(x)
    if m and n:
        block = min(4096, next_pow2(n))
        cached_launch(_LAUNCHES, _amax_bwd_rows_kernel, m, BF16_RNE=bf16_rne(x.dtype), BLOCK_N=block,
                      num_warps=max(1, min(8, block // 256)))(x, y, grad, dx, n, grad.stride(0))
    return dx


def _amax_bwd_fake(grad, x, y):
    return torch.empty_like(x)


def _amax_bwd_rows(x: torch.Tensor, dims: list[int]) -> tuple[int, int] | None:
    """(rows, row length) when amax's backward of ``x`` over ``dims`` (sorted) can run as
    ``_amax_bwd_rows_kernel``: the trailing dims of a contiguous tensor reduced, and rows enough
    to fill the device (``AMAX_BWD_MIN_ROWS_PER_SM`` per SM), rows short enough for int32
    offsets within a row, and fewer rows than a grid may have programs; else None."""
    nd = x.dim()
    if not dims or dims[0] != nd - len(dims) or not x.is_contiguous() or x.numel() == 0:
        return None
    m = math.prod(x.shape[: nd - len(dims)])
    n = x.numel() // m
    if m < AMAX_BWD_MIN_ROWS_PER_SM * sm_count(x.device) or n >= 2**31 - 4096 or m >= 2**31:
        return None
    return m, n


def _setup_context(ctx, inputs, output):
    x, dims, keepdim, kind, _ = inputs
    ctx.dims, ctx.keepdim, ctx.kind = sorted(dims), keepdim, kind
    ctx.shape, ctx.dtype = x.shape, x.dtype
    if kind == "amax":
        ctx.save_for_backward(x, output)


def _backward(ctx, grad):
    if ctx.kind == "amax":
        x, y = ctx.saved_tensors
        rows = _amax_bwd_rows(x, ctx.dims)
        if rows is not None:  # one kernel over the rows (before any view of grad is made)
            m, n = rows
            return _amax_bwd_op(grad.reshape(m), x.view(m, n), y.reshape(m)).view(ctx.shape), None, None, None, None
    g = grad
    if not ctx.keepdim:
        for d in ctx.dims:
            g = g.unsqueeze(d)
    if ctx.kind == "amax":
        # As torch: the gradient is shared evenly among the elements equal to the maximum.
        if not ctx.keepdim:
            for d in ctx.dims:
                y = y.unsqueeze(d)
        mask = x == y
        gx = g / mask.sum(dim=ctx.dims, keepdim=True) * mask
    else:
        if ctx.kind == "mean":
            g = g / math.prod(ctx.shape[d] for d in ctx.dims)
        gx = g.to(ctx.dtype).expand(ctx.shape)
    return gx, None, None, None, None


_LAUNCHES: dict = {}
_amax_bwd_op = Op("roofkit::amax_bwd", _amax_bwd, _amax_bwd_fake)
_reduce_op = Op("roofkit::reduce", _reduce, _reduce_fake).autograd(_setup_context, _backward)


# ----------------------------------------------------------------------------- public functions


def _prepare(op: str, input, dim, keepdim, dtype=None):
    """Validated (input, sorted non-negative dims, keepdim, scalar?) for the custom op."""
    if dtype is not None:
        if dtype not in FLOAT_DTYPES:
            raise TypeError(f"roofkit.{op}: dtype must be one of float32, float16, bfloat16 or None; got {dtype}")
        if isinstance(input, torch.Tensor) and input.layout == torch.strided and input.dtype not in FLOAT_DTYPES:
            input = input.to(dtype)  # as torch: the input is cast before the operation
    check_tensor(op, "input", input)
    if not isinstance(keepdim, bool):
        raise TypeError(f"roofkit.{op}: keepdim must be a bool, got {type(keepdim).__name__}")
    items = dim if isinstance(dim, (tuple, list, torch.Size)) else (() if dim is None else (dim,))
    nd = input.dim()
    lim = max(nd, 1)
    dims = []
    for d in items:
        d = as_int(op, "dim", d, "None, an int or a tuple of ints")
        if not -lim <= d < lim:
            raise IndexError(f"roofkit.{op}: dim {d} out of range for a {nd}-d input (expected [{-lim}, {lim - 1}])")
        d %= lim
        if d in dims:
            raise ValueError(f"roofkit.{op}: dim {d} appears more than once in dim={dim!r}")
        dims.append(d)
    if not dims:
        dims = list(range(lim))  # None or (): every dimension, as torch
    scalar = nd == 0
    if scalar:
        input = input.reshape(1)
    return input, sorted(dims), scalar


@planned
def sum(input: torch.Tensor, dim=None, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Sum over ``dim``: out[o] = sum of input[o, r] over the reduced positions r.

    Mirrors ``torch.sum(input, dim=None, keepdim=False, *, dtype=None)``.

    Args:
        input: float32, float16 or bfloat16 tensor of any shape and strides, on CUDA (or on CPU
            with TRITON_INTERPRET=1). Other dtypes need ``dtype``.
        dim: None or () (every dimension), an int, or a tuple/list of distinct ints; negative
            values count from the end.
        keepdim: keep the reduced dimensions with size 1.
        dtype: output dtype (float32, float16 or bfloat16). A float32/float16/bfloat16 input is
            read as is; an input of another dtype is cast to ``dtype`` first, as in torch.
    Returns:
        A contiguous tensor of the reduced shape in ``dtype`` (default: the input's dtype). The
        sum of an empty set of elements is 0.
    Raises:
        TypeError: input not a tensor or not float32/float16/bfloat16 (without ``dtype``); bad
            ``dtype``, ``dim`` or ``keepdim`` type.
        ValueError: input on an unsupported device; a dim repeated.
        IndexError: a dim out of range.
    Numerics:
        float32 accumulation, one rounding to the output dtype; NaN and inf propagate as in IEEE
        arithmetic. The summation order is fixed for a given device (deterministic) but differs
        from torch's, so float32 results differ from torch in the last bits.
    Cost:
        Reads the input once, writes the output once (plus, when the reduced axis is split,
        one float32 partial per MAX_CHUNKS_PER_PROGRAM tiles of 16 KiB or fewer: under 0.03% of
        the input); one FLOP per input element. Inputs that are not a permutation of a contiguous tensor, or reductions
        over dims that are not adjacent in memory, add one contiguous copy (a read and a write).
        The backward is a broadcast of the gradient (torch ops).
    Source:
        M. Harris, "Optimizing Parallel Reduction in CUDA" (two-stage, per-thread accumulation).
    """
    x, dims, scalar = _prepare("sum", input, dim, keepdim, dtype)
    y = _reduce_op.apply(x, dims, keepdim, "sum", dtype)
    return y.reshape(()) if scalar else y


@planned
def mean(input: torch.Tensor, dim=None, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Mean over ``dim``: the float32 sum of the reduced elements divided by their count.

    Mirrors ``torch.mean(input, dim=None, keepdim=False, *, dtype=None)``. Arguments, returns,
    errors, numerics and cost as :func:`sum`; the mean of an empty set of elements is NaN, and
    an integer input without ``dtype`` raises TypeError (torch refuses it too).
    Source: as :func:`sum`.
    """
    x, dims, scalar = _prepare("mean", input, dim, keepdim, dtype)
    y = _reduce_op.apply(x, dims, keepdim, "mean", dtype)
    return y.reshape(()) if scalar else y


@planned
def amax(input: torch.Tensor, dim=(), keepdim: bool = False) -> torch.Tensor:
    """Maximum over ``dim``: out[o] = max of input[o, r]; NaN if any of those elements is NaN.

    Mirrors ``torch.amax(input, dim=(), keepdim=False)`` (``dim=()`` or None: every dimension).

    Args:
        input: float32, float16 or bfloat16 tensor of any shape and strides.
        dim, keepdim: as :func:`sum`.
    Returns:
        A contiguous tensor of the reduced shape and the input's dtype (exact: no rounding).
    Raises:
        TypeError, ValueError: as :func:`sum`.
        IndexError: a dim out of range, or a reduced dimension of size 0 (the maximum of
            nothing; torch raises IndexError for it too).
    Numerics:
        Exact. NaN propagates (tracked beside the maximum: the GPU's max ignores NaN). The
        backward shares the gradient evenly among the elements equal to the maximum, as torch
        (torch ops: a compare, a count and a broadcast).
    Cost:
        As :func:`sum`.
    Source:
        As :func:`sum`.
    """
    x, dims, scalar = _prepare("amax", input, dim, keepdim)
    if input.numel() == 0:
        empty = [d for d in dims if x.shape[d] == 0]
        if empty:
            raise IndexError(
                f"roofkit.amax: reduced dim {empty[0]} of input of shape {tuple(input.shape)} has size 0 "
                "(the maximum of no elements is undefined)"
            )
    y = _reduce_op.apply(x, dims, keepdim, "amax", None)
    return y.reshape(()) if scalar else y


# ----------------------------------------------------------------------------- spec


def _make_inputs(case, dtype, generator, device) -> Inputs:
    shape = tuple(case["shape"])
    layout = case.get("layout", "contiguous")
    dist = case.get("dist", "normal")
    mag = case.get("magnitude", 1e2)
    if layout == "permuted":
        # Memory order (last, first, middle...): a dense layout whose kept dims are out of order.
        perm_shape = shape[-1:] + shape[:-1]
        x = random_tensor(perm_shape, dtype, generator, device, dist, magnitude=mag)
        x = x.permute(*range(1, len(shape)), 0)
    else:
        x = random_tensor(shape, dtype, generator, device, dist, magnitude=mag, layout=layout)
    kwargs = {"dim": case.get("dim"), "keepdim": case.get("keepdim", False)}
    if case.get("out_dtype"):
        kwargs["dtype"] = getattr(torch, case["out_dtype"])
    return Inputs((x,), kwargs)


_F32 = (torch.float32,)
_BF16 = (torch.bfloat16,)
_16BIT = (torch.float16, torch.bfloat16)

# Cases every op runs.
_COMMON = [
    case("scalar", ["quick"], shape=()),
    case("scalar_dim0_keepdim", shape=(), dim=0, keepdim=True),
    case("full_1", ["quick"], shape=(1,)),
    case("full_781", ["quick"], shape=(781,)),
    case("full_2d_37x41", shape=(37, 41)),
    case("rows_3x7", ["quick"], shape=(3, 7), dim=-1),
    case("rows_keepdim_5x33", shape=(5, 33), dim=1, keepdim=True),
    case("rows_long_3x5000", shape=(3, 5000), dim=-1, dtypes=_F32),
    case("rows_two_dims_2x3x4x5", shape=(2, 3, 4, 5), dim=(2, 3)),
    case("cols_33x16", ["quick"], shape=(33, 16), dim=0),
    case("middle_4x5x6", shape=(4, 5, 6), dim=1),
    case("middle_keepdim_neg_2x3x9x5", shape=(2, 3, 9, 5), dim=-2, keepdim=True),
    case("outer_two_dims_2x3x40", shape=(2, 3, 40), dim=(0, 1)),
    case("split_dims_keepdim_4x5x6", shape=(4, 5, 6), dim=(0, 2), keepdim=True),
    case("size1_dims_3x1x5", shape=(3, 1, 5), dim=(1, 2)),
    case("transposed_rows_16x33", shape=(16, 33), dim=-1, layout="transposed"),
    case("transposed_cols_16x33", shape=(16, 33), dim=0, layout="transposed"),
    case("transposed_full_16x33", shape=(16, 33), layout="transposed"),
    case("permuted_middle_3x4x5", shape=(3, 4, 5), dim=1, layout="permuted"),
    case("offset_9x65", shape=(9, 65), dim=-1, layout="offset"),
    case("strided_9x65", shape=(9, 65), dim=-1, layout="strided"),
    case("expanded_5x40", shape=(5, 40), dim=0, layout="expanded"),
    case("large_magnitude_8x300", shape=(8, 300), dim=-1, dist="large", magnitude=1e4),
    case("ties_8x129", shape=(8, 129), dim=-1, dist="ties"),
    case("ties_cols_40x9", shape=(40, 9), dim=0, dist="ties"),
    case("arange_5x1000", shape=(5, 1000), dim=-1, dist="arange"),
    case("nan_8x129", shape=(8, 129), dim=-1, dist="nan"),
    case("nan_cols_70x6", shape=(70, 6), dim=0, dist="nan"),
    case("pos_inf_8x129", shape=(8, 129), dim=-1, dist="pos_inf"),
    case("neg_inf_8x129", shape=(8, 129), dim=-1, dist="neg_inf"),
    case("empty_rows_0x7", ["quick"], shape=(0, 7), dim=-1),
    # On the GPU (``pytest -m gpu``): the acceptance shapes and real layouts.
    case("gpu_full_1", ["gpu"], shape=(1,)),
    case("gpu_full_781", ["gpu"], shape=(781,)),
    case("gpu_full_16Mi", ["gpu"], shape=(1 << 24,)),
    # Long full sums of zero-mean data cancel (|sum| ~ sqrt(n) while sum |x| ~ n), so their
    # relative error is set by the cancellation, and one scalar's luck decides the 2x-torch rule.
    # The long full reduction is judged on data with a non-zero mean.
    case("gpu_full_odd_10000019", ["gpu"], shape=(10000019,), dtypes=_F32, dist="shifted"),
    case("gpu_rows_1000x781", ["gpu"], shape=(1000, 781), dim=-1),
    case("gpu_rows_8192x4096", ["gpu"], shape=(8192, 4096), dim=-1),
    case("gpu_rows_few_long_4x1000003", ["gpu"], shape=(4, 1000003), dim=-1),
    case("gpu_rows_256x128256", ["gpu"], shape=(256, 128256), dim=-1, dtypes=_BF16),
    case("gpu_cols_8192x4096", ["gpu"], shape=(8192, 4096), dim=0),
    case("gpu_middle_4x8192x4096", ["gpu"], shape=(4, 2048, 4096), dim=1, dtypes=_BF16),
    case("gpu_cols_odd_4095x4097", ["gpu"], shape=(4095, 4097), dim=0, dtypes=_F32),
    case("gpu_transposed_2048x3000", ["gpu"], shape=(2048, 3000), dim=-1, layout="transposed"),
    case("gpu_nan_1024x5000", ["gpu"], shape=(1024, 5000), dim=-1, dist="nan"),
    case("gpu_over_2pow31_elements", ["gpu", "slow"], shape=(2**31 + 17,), dtypes=_BF16, grad=False),
]

# Cases where amax differs: an output dtype (amax has none) and empty reduced dims (it raises).
_SUM_MEAN_ONLY = [
    case("out_dtype_float32", shape=(6, 100), dim=-1, out_dtype="float32", dtypes=_16BIT),
    case("out_dtype_float32_full", shape=(300,), out_dtype="float32", dtypes=_16BIT),
    case("out_dtype_down_to_float16", shape=(6, 100), dim=0, out_dtype="float16", dtypes=_F32),
    case("empty_reduced_5x0", shape=(5, 0), dim=-1),
    case("empty_reduced_dim0_0x7", shape=(0, 7), dim=0),
    case("empty_full_0x3", shape=(0, 3)),
]

SUM_CASES = _COMMON + _SUM_MEAN_ONLY
MEAN_CASES = _COMMON + _SUM_MEAN_ONLY
AMAX_CASES = _COMMON

_ACCEPTANCE = [
    case("full_1", shape=(1,), dtypes=_F32),
    case("full_781", shape=(781,), dtypes=_F32),
    case("full_256Mi_fp32", shape=(1 << 28,), dtypes=_F32),
    case("full_2pow31_plus_17_bf16", shape=(2**31 + 17,), dtypes=_BF16),
]


def _suites(llama: list) -> dict:
    return {
        "llama3-8b": llama,
        "acceptance": _ACCEPTANCE,
        "edge": [
            case("rows_1823x781_fp32", shape=(1823, 781), dim=-1, dtypes=_F32),
            case("cols_4095x4097_fp32", shape=(4095, 4097), dim=0, dtypes=_F32),
            case("rows_few_long_4x16Mi", shape=(4, 1 << 24), dim=-1, dtypes=_BF16),
        ],
        # host: decoding 8 sequences one token at a time, where the host's cost per call is the time.
        "host": [
            case("hidden_8x4096", shape=(8, 4096), dim=-1, dtypes=_BF16),
            case("hidden_8x4096_fwd_bwd", shape=(8, 4096), dim=-1, dtypes=_BF16, mode="fwd_bwd"),
        ],
    }


# llama3-8b: hidden 4096, vocab 128256, 8192 tokens per sequence.
SUM_SUITES = _suites([
    case("hidden_8192x4096", shape=(8192, 4096), dim=-1, dtypes=_BF16),
    case("tokens_8192x4096", shape=(8192, 4096), dim=0, dtypes=_BF16),
    case("full_8192x4096", shape=(8192, 4096), dtypes=_BF16),
])
MEAN_SUITES = _suites([
    case("sequence_4x8192x4096", shape=(4, 8192, 4096), dim=1, dtypes=_BF16),
    case("hidden_8192x4096", shape=(8192, 4096), dim=-1, dtypes=_BF16),
])
AMAX_SUITES = _suites([
    case("logits_8192x128256", shape=(8192, 128256), dim=-1, dtypes=_BF16),
    case("hidden_8192x4096", shape=(8192, 4096), dim=-1, dtypes=_BF16),
    case("logits_8192x128256_fwd_bwd", shape=(8192, 128256), dim=-1, dtypes=_BF16, mode="fwd_bwd"),
])


def _torch_sum(input, dim=None, keepdim=False, *, dtype=None):
    return torch.sum(input, dim=dim, keepdim=keepdim, dtype=dtype)


def _torch_mean(input, dim=None, keepdim=False, *, dtype=None):
    return torch.mean(input, dim=dim, keepdim=keepdim, dtype=dtype)


def _torch_amax(input, dim=(), keepdim=False):
    return torch.amax(input, dim=dim if dim is not None else (), keepdim=keepdim)


def _spec(name, impl, reference, torch_fn, cases, suites) -> OpSpec:
    return OpSpec(
        name=name,
        impl=impl,
        reference=reference,
        torch_impl=torch_fn,
        make_inputs=_make_inputs,
        cost=reduce_cost,
        reduction_length=_reduction_length,
        dtypes=FLOAT_DTYPES,
        cases=cases,
        suites=suites,
        baselines={
            **baselines.eager_and_compiled(torch_fn),
            "flaggems": baselines.flaggems(torch_fn),
        },
        grad_args=(0,),
        marker="reduce",
    )


SUM_SPEC = _spec("sum", sum, sum_reference, _torch_sum, SUM_CASES, SUM_SUITES)
MEAN_SPEC = _spec("mean", mean, mean_reference, _torch_mean, MEAN_CASES, MEAN_SUITES)
AMAX_SPEC = _spec("amax", amax, amax_reference, _torch_amax, AMAX_CASES, AMAX_SUITES)

SPECS = (SUM_SPEC, MEAN_SPEC, AMAX_SPEC)


# The tunables of this family's heuristics: what roofkit.config.override may set.
TUNABLES = ("TILE_BYTES", "BYTES_PER_THREAD", "COL_SEGMENT_BYTES", "MIN_PROGRAMS_PER_SM", "MAX_CHUNKS_PER_PROGRAM",
            "AMAX_BWD_MIN_ROWS_PER_SM")
