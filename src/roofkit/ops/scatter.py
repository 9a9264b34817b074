"""scatter_add and index_add, out of place: every contribution to a duplicated destination counts.

    scatter_add: out = input;  out[p with coordinate dim replaced by index[p]] += src[p]
                 for every position p of index's shape
    index_add:   out = input;  out[..., index[l], ...] += alpha * source[..., l, ...]

Program mapping. Every call is brought to one canonical form: the *index space* (index's shape
for scatter_add, source's shape for index_add) viewed as (outer, L, W) around ``dim`` and the
output as (outer, N, W), each with its own strides (views; a copy only where a layout cannot be
viewed that way). When the index does not vary along W (index_add, or scatter_add with an index
expanded along the trailing dims, as ``idx[:, None].expand_as(src)`` gives) it is read once per
row (``ROW_INDEX``), else once per element.

- Atomic path (default): the output starts as a copy of input; one program per tile of
  BLOCK_L index rows x BLOCK_I columns of one outer slice loads its indices and source tile and
  adds them with relaxed atomics (lowered to ``red``, vectorized along contiguous rows on sm90).
  Indices outside [0, N) are skipped and counted in a device flag; the host raises IndexError
  after the launch (one synchronization per call).
- Deterministic path (``deterministic=True``): a stable sort of the destination keys
  (torch.sort), segment bounds per destination (torch.searchsorted), then one program per tile of
  BLOCK_D destination rows x BLOCK_I columns sums each destination's contributions in sorted
  (= original) order in float32 and writes every destination once (rows without contributions
  copy input). A hot destination's segment longer than the piece length (``_piece_length``) is
  cut into pieces that other programs sum first (``_scatter_add_piece_kernel``); its own program
  adds their partial sums in piece order. No atomics anywhere: bitwise reproducible run to run,
  and for destinations of at most SPLIT_MIN contributions the bits are those of a sequential
  float32 sum in index order, whatever the tile sizes.
- Backward: grad_input = grad; grad_src = alpha * grad gathered at index (a Triton gather with the
  atomic path's tiling).
Source: the scatter/segment-reduction formulation of torch.Tensor.scatter_add_ / index_add_
(semantics) and of segmented reductions over sorted keys (Blelloch, "Prefix sums and their
applications", 1990).
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..harness import baselines
from ..harness.inputs import random_tensor, with_layout
from ..harness.spec import Cost, Inputs, OpSpec, case
from ._common import (FLOAT_DTYPES, bf16_rne, check_same_device, check_tensor, interpreter_active, needs_int64,
                      next_pow2, normalize_dim)
from ._jit import _round_for_store

INDEX_DTYPES = (torch.int64, torch.int32)

# ----------------------------------------------------------------------------- reference, cost


def scatter_add_reference(input, dim, index, src, *, deterministic=None):
    """torch.scatter_add in float64."""
    return torch.scatter_add(input.to(torch.float64), dim, index, src.to(torch.float64))


def index_add_reference(input, dim, index, source, *, alpha=1, deterministic=None):
    """torch.index_add in float64."""
    return torch.index_add(input.to(torch.float64), dim, index, source.to(torch.float64), alpha=alpha)


def _size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _index_space(case) -> tuple[int, ...]:
    """The shape of the index space of a case: index's shape (scatter_add) or source's (index_add)."""
    if "index_shape" in case.params:
        return tuple(case["index_shape"])
    shape = list(case["shape"])
    shape[case.get("dim", 0)] = case["L"]
    return tuple(shape)


def index_add_cost(case, dtype: torch.dtype) -> Cost:
    """Read input, source and index once, write the output once; one add per source element
    (two FLOP with an alpha other than 1)."""
    numel_in = math.prod(case["shape"])
    numel_src = math.prod(_index_space(case))
    idx_size = _size(getattr(torch, case.get("index_dtype", "int64")))
    flops = numel_src * (2 if case.get("alpha", 1) != 1 else 1)
    return Cost(flops=flops, bytes=(2 * numel_in + numel_src) * _size(dtype) + case["L"] * idx_size)


def scatter_add_cost(case, dtype: torch.dtype) -> Cost:
    """Read input once, the src elements under index once, the index's distinct elements once (an
    index expanded along the trailing dims holds one element per row), write the output once;
    one add per index element."""
    numel_in = math.prod(case["shape"])
    space = _index_space(case)
    numel_idx = math.prod(space)
    dim = case.get("dim", 0) % len(space)
    distinct = math.prod(space[: dim + 1]) if case.get("index_layout") == "expanded" else numel_idx
    idx_size = _size(getattr(torch, case.get("index_dtype", "int64")))
    return Cost(flops=numel_idx, bytes=(2 * numel_in + numel_idx) * _size(dtype) + distinct * idx_size)


# ----------------------------------------------------------------------------- launch heuristic

ATOMIC_TILE = 4096  # elements per atomic-path (and gather) tile: 16 per thread with 8 warps
ATOMIC_MAX_BLOCK_I = 512
SORTED_TILE = 1024  # destination elements per deterministic-path tile (64 registers at most on sm_90)
SORTED_MAX_BLOCK_I = 256
UNROLL = 4  # contributions loaded together per step of the deterministic path (memory-level parallelism)
# A destination with more contributions than the piece length (at least SPLIT_MIN, about the
# square root of the longest segment) has its segment cut into pieces summed by separate
# programs; its own program adds the pieces' partial sums in piece order. Bounds the serial
# work of a hot destination (every index equal: 65536 contributions -> 256 pieces of 256).
SPLIT_MIN = 256
PIECE_TILE = 2048  # contributions x columns per step of a piece program


class Config(NamedTuple):
    """Tile of BLOCK_R rows (index rows, or destination rows) x BLOCK_I columns, and its warps."""

    BLOCK_R: int
    BLOCK_I: int
    num_warps: int


def _atomic_config(width: int) -> Config:
    """Tiles of ATOMIC_TILE elements; a row's columns stay contiguous (vectorized atomics) up to
    ATOMIC_MAX_BLOCK_I wide; W = 1 (1-D index_add) gives a column of 4096 index rows."""
    block_i = min(next_pow2(width), ATOMIC_MAX_BLOCK_I)
    return Config(max(1, ATOMIC_TILE // block_i), block_i, 8)


def _sorted_config(width: int) -> Config:
    """Tiles of SORTED_TILE destination elements, 8 warps: 4 per thread, each with UNROLL gathers
    in flight (4 x 4 independent loads per thread; about 64 registers, so 4 programs per SM)."""
    block_i = min(next_pow2(width), SORTED_MAX_BLOCK_I)
    return Config(max(1, SORTED_TILE // block_i), block_i, 8)


def _piece_length(longest: int) -> int:
    return max(SPLIT_MIN, next_pow2(math.isqrt(max(longest, 1))))


def _max_offset(t: torch.Tensor) -> int:
    return sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()) if s > 0) + 1


def _use_int64(*tensors: torch.Tensor) -> bool:
    """Whether any element offset of these tensors can reach 2**31 (then kernels index in int64)."""
    return any(needs_int64(_max_offset(t)) for t in tensors)


# ----------------------------------------------------------------------------- kernels


@triton.jit
def _scatter_add_atomic_kernel(
    out_ptr, idx_ptr, src_ptr, err_ptr, alpha,
    L, N, W, n_lb, n_ib,
    stride_oo, stride_on, stride_oi,
    stride_xo, stride_xl, stride_xi,
    stride_so, stride_sl, stride_si,
    ROW_INDEX: tl.constexpr, HAS_ALPHA: tl.constexpr, USE_INT64: tl.constexpr,
    BLOCK_L: tl.constexpr, BLOCK_I: tl.constexpr,
):
    """out[o, index[o, l, i], i] += alpha * src[o, l, i] for a tile of BLOCK_L index rows x BLOCK_I
    columns of one outer slice o, with relaxed atomics; indices outside [0, N) are skipped and
    counted in err. Tile [BLOCK_L, BLOCK_I]."""
    pid = tl.program_id(0)
    ib = pid % n_ib
    rest = pid // n_ib
    lb = rest % n_lb
    o = rest // n_lb
    rows = lb * BLOCK_L + tl.arange(0, BLOCK_L)
    cols = ib * BLOCK_I + tl.arange(0, BLOCK_I)
    row_mask = rows < L
    col_mask = cols < W
    if USE_INT64:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
        o = o.to(tl.int64)
    tile_mask = row_mask[:, None] & col_mask[None, :]
    if ROW_INDEX:
        d = tl.load(idx_ptr + o * stride_xo + rows * stride_xl, mask=row_mask, other=0)
        ok = (d >= 0) & (d < N)
        n_bad = tl.sum((row_mask & ~ok).to(tl.int32), axis=0)
        m = tile_mask & ok[:, None]
        d = d[:, None]
    else:
        d = tl.load(idx_ptr + o * stride_xo + rows[:, None] * stride_xl + cols[None, :] * stride_xi,
                    mask=tile_mask, other=0)
        ok = (d >= 0) & (d < N)
        n_bad = tl.sum(tl.sum((tile_mask & ~ok).to(tl.int32), axis=1), axis=0)
        m = tile_mask & ok
    if USE_INT64:
        d = d.to(tl.int64)
    v = tl.load(src_ptr + o * stride_so + rows[:, None] * stride_sl + cols[None, :] * stride_si, mask=m, other=0.0)
    if HAS_ALPHA:
        v = v.to(tl.float32) * alpha
    # Relaxed and unused: lowered to `red` (no return value, no ordering), the fastest form.
    tl.atomic_add(out_ptr + o * stride_oo + d * stride_on + cols[None, :] * stride_oi,
                  v.to(out_ptr.dtype.element_ty), mask=m, sem="relaxed")
    # Any non-zero count will do: racing programs only ever store non-zero values.
    tl.store(err_ptr, n_bad, mask=n_bad > 0)


@triton.jit
def _scatter_add_sorted_kernel(
    inp_ptr, out_ptr, src_ptr, perm_ptr, bounds_ptr, extra_ptr, first_ptr, part_ptr, alpha,
    N, L, W, B_INNER, n_db, n_ib, SEG, n_pieces,
    stride_io, stride_in, stride_ii,
    stride_oo, stride_on, stride_oi,
    stride_so, stride_sl, stride_si,
    BATCHED: tl.constexpr, HAS_PIECES: tl.constexpr, HAS_ALPHA: tl.constexpr, USE_INT64: tl.constexpr,
    BF16_RNE: tl.constexpr, UNROLL: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_I: tl.constexpr,
):
    """Destination rows n of batch b (outer slice o = b // B_INNER, first column i0 = b % B_INNER):
    out = inp + alpha * the float32 sum, in sorted order, of the src rows whose positions
    perm[bounds[q] : bounds[q+1]] holds (q = n, or b * N + n when BATCHED): the first SEG of them
    here, then (HAS_PIECES) the partial sums of the segment's further pieces, in piece order.
    Each destination is written once. Tile [BLOCK_D, BLOCK_I]."""
    pid = tl.program_id(0)
    ib = pid % n_ib
    rest = pid // n_ib
    db = rest % n_db
    b = rest // n_db
    o = b // B_INNER
    i0 = b % B_INNER
    n = db * BLOCK_D + tl.arange(0, BLOCK_D)
    c = ib * BLOCK_I + tl.arange(0, BLOCK_I)
    n_mask = n < N
    tile_mask = n_mask[:, None] & (c < W)[None, :]
    cols = i0 + c
    if USE_INT64:
        n = n.to(tl.int64)
        cols = cols.to(tl.int64)
        o = o.to(tl.int64)
        b = b.to(tl.int64)
    # Per-destination values are kept as [BLOCK_D, 1] columns: 1-D vectors here make Triton 3.6's
    # layout pass fail on sm_90 ("mask type matches ptr type") once the src rows vectorize.
    q = n[:, None]
    l_base = 0
    if BATCHED:
        q += b * N
        l_base = b * L
    start = tl.load(bounds_ptr + q, mask=n_mask[:, None], other=0)
    cnt = tl.load(bounds_ptr + q + 1, mask=n_mask[:, None], other=0) - start
    head = tl.minimum(cnt, SEG)
    src_cols = src_ptr + o * stride_so + cols[None, :] * stride_si
    acc = tl.zeros([BLOCK_D, BLOCK_I], tl.float32)
    for j in range(0, tl.max(tl.max(head, axis=1), axis=0), UNROLL):
        for u in tl.static_range(UNROLL):
            valid = (j + u) < head
            p = tl.load(perm_ptr + start + (j + u), mask=valid, other=0) - l_base
            v = tl.load(src_cols + p * stride_sl, mask=valid & tile_mask, other=0.0)
            acc += v.to(tl.float32)  # one destination's contributions in order: deterministic
    if HAS_PIECES:
        n_extra = tl.load(extra_ptr + q, mask=n_mask[:, None], other=0)
        row = tl.load(first_ptr + q, mask=n_mask[:, None], other=0)
        if not BATCHED:
            row += b * n_pieces  # every batch has its own partial sums of the shared pieces
        for e in range(0, tl.max(tl.max(n_extra, axis=1), axis=0), UNROLL):
            for u in tl.static_range(UNROLL):
                valid = (e + u) < n_extra
                acc += tl.load(part_ptr + (row + e + u) * W + c[None, :], mask=valid & tile_mask, other=0.0)
    x = tl.load(inp_ptr + o * stride_io + n[:, None] * stride_in + cols[None, :] * stride_ii,
                mask=tile_mask, other=0.0).to(tl.float32)
    if HAS_ALPHA:
        acc = acc * alpha
    # Destinations without contributions keep input's exact bits (x + 0.0 would turn -0.0 into +0.0).
    y = tl.where(cnt > 0, x + acc, x)
    tl.store(out_ptr + o * stride_oo + n[:, None] * stride_on + cols[None, :] * stride_oi,
             _round_for_store(y, out_ptr, BF16_RNE), mask=tile_mask)


@triton.jit
def _scatter_add_piece_kernel(
    src_ptr, perm_ptr, piece_ptr, part_ptr,
    N, L, W, B_INNER, n_pieces, n_ib,
    stride_so, stride_sl, stride_si,
    BATCHED: tl.constexpr, USE_INT64: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_I: tl.constexpr,
):
    """Partial sum (float32) of one piece of a long segment: the src rows at perm[start:end) for
    BLOCK_I columns, BLOCK_P rows per step, steps in order. piece = (q, start, end); batch b from q
    (BATCHED) or from the grid. Tile [BLOCK_P, BLOCK_I]."""
    pid = tl.program_id(0)
    ib = pid % n_ib
    rest = pid // n_ib
    pc = rest % n_pieces
    bg = rest // n_pieces
    q = tl.load(piece_ptr + 3 * pc)
    a = tl.load(piece_ptr + 3 * pc + 1)
    e = tl.load(piece_ptr + 3 * pc + 2)
    if BATCHED:
        b = q // N
        l_base = b * L
    else:
        b = bg.to(q.dtype)
        l_base = 0
    o = b // B_INNER
    i0 = b % B_INNER
    c = ib * BLOCK_I + tl.arange(0, BLOCK_I)
    c_mask = c < W
    cols = i0 + c
    if USE_INT64:
        cols = cols.to(tl.int64)
    src_cols = src_ptr + o * stride_so + cols[None, :] * stride_si
    acc = tl.zeros([BLOCK_I], tl.float32)
    for s0 in range(a, e, BLOCK_P):
        k = s0 + tl.arange(0, BLOCK_P)
        k_mask = k < e
        p = tl.load(perm_ptr + k, mask=k_mask, other=0) - l_base
        v = tl.load(src_cols + p[:, None] * stride_sl, mask=k_mask[:, None] & c_mask[None, :], other=0.0)
        acc += tl.sum(v.to(tl.float32), axis=0)
    row = bg.to(tl.int64) * n_pieces + pc
    tl.store(part_ptr + row * W + c, acc, mask=c_mask)


@triton.jit
def _scatter_gather_kernel(
    grad_ptr, idx_ptr, out_ptr, alpha,
    L, N, W, n_lb, n_ib,
    stride_go, stride_gn, stride_gi,
    stride_xo, stride_xl, stride_xi,
    stride_uo, stride_ul, stride_ui,
    ROW_INDEX: tl.constexpr, HAS_ALPHA: tl.constexpr, USE_INT64: tl.constexpr, BF16_RNE: tl.constexpr,
    BLOCK_L: tl.constexpr, BLOCK_I: tl.constexpr,
):
    """Backward to src: out[o, l, i] = alpha * grad[o, index[o, l, i], i] for a tile of BLOCK_L
    index rows x BLOCK_I columns (the forward already checked the index range). Tile
    [BLOCK_L, BLOCK_I]."""
    pid = tl.program_id(0)
    ib = pid % n_ib
    rest = pid // n_ib
    lb = rest % n_lb
    o = rest // n_lb
    rows = lb * BLOCK_L + tl.arange(0, BLOCK_L)
    cols = ib * BLOCK_I + tl.arange(0, BLOCK_I)
    if USE_INT64:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
        o = o.to(tl.int64)
    tile_mask = (rows < L)[:, None] & (cols < W)[None, :]
    if ROW_INDEX:
        d = tl.load(idx_ptr + o * stride_xo + rows * stride_xl, mask=rows < L, other=0)[:, None]
    else:
        d = tl.load(idx_ptr + o * stride_xo + rows[:, None] * stride_xl + cols[None, :] * stride_xi,
                    mask=tile_mask, other=0)
    if USE_INT64:
        d = d.to(tl.int64)
    m = tile_mask & (d >= 0) & (d < N)
    g = tl.load(grad_ptr + o * stride_go + d * stride_gn + cols[None, :] * stride_gi, mask=m, other=0.0).to(tl.float32)
    if HAS_ALPHA:
        g = g * alpha
    tl.store(out_ptr + o * stride_uo + rows[:, None] * stride_ul + cols[None, :] * stride_ui,
             _round_for_store(g, out_ptr, BF16_RNE), mask=tile_mask)


# ----------------------------------------------------------------------------- host side


class _Canon(NamedTuple):
    """A call in canonical form: index space (outer, L, W) around dim, destinations (outer, N, W)."""

    space: tuple[int, ...]  # index-space shape (the input's rank)
    dim: int
    outer: int
    L: int
    N: int
    W: int
    idx: torch.Tensor  # indexable as idx[o * s_o + l * s_l + i * s_i]
    idx_strides: tuple[int, int, int]
    src: torch.Tensor  # (outer, L, W)
    row_index: bool  # index constant along W
    shared: bool  # index constant along outer
    full: bool  # index space covers input outside dim (the output needs no separate copy)


def _restrict(t: torch.Tensor, space, dim: int, keep_dim: bool) -> torch.Tensor:
    """``t`` sliced to ``space`` (all of dimension ``dim`` when ``keep_dim``)."""
    sl = tuple(slice(None) if (d == dim and keep_dim) else slice(0, s) for d, s in enumerate(space))
    return t[sl]


def _as3(t: torch.Tensor, a: int, b: int, c: int) -> torch.Tensor | None:
    try:
        return t.view(a, b, c)
    except RuntimeError:
        return None


def _canonical(input, dim, index, src, index_add: bool) -> _Canon:
    if index_add:
        space = list(input.shape)
        space[dim] = index.numel()
        space = tuple(space)
    else:
        space = tuple(index.shape)
    outer = math.prod(space[:dim])
    L = space[dim]
    W = math.prod(space[dim + 1:])
    N = input.shape[dim]
    if index_add:
        idx = index.reshape(-1)
        strides = (0, idx.stride(0) if idx.numel() else 1, 0)
        row_index, shared = True, True
    else:
        idx = index.reshape(outer, L, W)
        strides = tuple(idx.stride())
        row_index = W == 1 or idx.stride(2) == 0
        shared = outer == 1 or idx.stride(0) == 0
    src3 = _restrict(src, space, dim, keep_dim=False).reshape(outer, L, W)
    full = all(space[d] == input.shape[d] for d in range(input.dim()) if d != dim)
    return _Canon(space, dim, outer, L, N, W, idx, strides, src3, row_index, shared, full)


def _out_view(out: torch.Tensor, c: _Canon) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """(out3, tmp, view): the destinations of ``out`` as (outer, N, W); ``tmp`` is a contiguous
    stand-in to copy back into ``view`` when that region cannot be viewed in three dimensions."""
    view = out if c.full else _restrict(out, c.space, c.dim, keep_dim=True)
    out3 = _as3(view, c.outer, c.N, c.W)
    if out3 is not None:
        return out3, None, view
    tmp = view.contiguous()
    return tmp.view(c.outer, c.N, c.W), tmp, view


def _index_error(op: str, c: _Canon) -> IndexError:
    return IndexError(
        f"roofkit.{op}: index holds values outside [0, {c.N}) (the size of dimension {c.dim} of input)"
    )


def _atomic_path(op: str, input: torch.Tensor, out: torch.Tensor, c: _Canon, alpha: float) -> None:
    out.copy_(input)
    out3, tmp, view = _out_view(out, c)
    work = out3
    if out3.dtype != torch.float32 and interpreter_active():
        # Under the interpreter 16-bit destinations accumulate in a float32 copy, rounded once:
        # Triton 3.6's interpreter has no bfloat16 atomics, and torch's CPU kernels (the error
        # budget of CPU runs) accumulate 16-bit index_add in float32. On the GPU the atomics add
        # in the destination's dtype, as torch's CUDA kernels do.
        work = out3.to(torch.float32)
    err = torch.zeros((1,), dtype=torch.int32, device=out.device)
    cfg = _atomic_config(c.W)
    n_lb, n_ib = triton.cdiv(c.L, cfg.BLOCK_R), triton.cdiv(c.W, cfg.BLOCK_I)
    s = c.src
    _scatter_add_atomic_kernel[(c.outer * n_lb * n_ib,)](
        work, c.idx, s, err, alpha, c.L, c.N, c.W, n_lb, n_ib,
        *work.stride(), *c.idx_strides, *s.stride(),
        ROW_INDEX=c.row_index, HAS_ALPHA=alpha != 1, USE_INT64=_use_int64(work, c.idx, s),
        BLOCK_L=cfg.BLOCK_R, BLOCK_I=cfg.BLOCK_I, num_warps=cfg.num_warps,
    )
    if work is not out3:
        out3.copy_(work)
    if tmp is not None:
        view.copy_(tmp.view(view.shape))
    if int(err.item()):
        raise _index_error(op, c)


def _sort_keys(c: _Canon) -> tuple[torch.Tensor, int, int, int, bool, torch.Tensor]:
    """(keys, B, B_INNER, width, batched, index values used): one key per contribution, ordered so
    that a stable sort groups each destination's contributions in their original order."""
    dev = c.src.device
    if c.row_index:
        rows = torch.as_strided(c.idx, (c.outer, c.L), (c.idx_strides[0], c.idx_strides[1]))
        if c.shared:
            vals = rows[0]
            return vals, c.outer, 1, c.W, False, vals
        base = torch.arange(c.outer, device=dev, dtype=torch.int64)[:, None] * c.N
        return (base + rows).reshape(-1), c.outer, 1, c.W, True, rows
    # Element mode: one batch per (o, i) column, keys ordered (o, i, l).
    full = torch.as_strided(c.idx, (c.outer, c.L, c.W), c.idx_strides)
    b = torch.arange(c.outer * c.W, device=dev, dtype=torch.int64).view(c.outer, c.W, 1)
    return (b * c.N + full.permute(0, 2, 1)).reshape(-1), c.outer * c.W, c.W, 1, True, full


def _sorted_path(op: str, input: torch.Tensor, out: torch.Tensor, c: _Canon, alpha: float) -> None:
    keys, B, b_inner, width, batched, used = _sort_keys(c)
    n_dest = (B if batched else 1) * c.N
    dev = keys.device
    bad = ((used < 0) | (used >= c.N)).any()
    # int32 keys halve the radix sort's passes and traffic whenever they fit.
    kdt = torch.int32 if n_dest < 2**31 else torch.int64
    sorted_keys, perm = torch.sort(keys.to(kdt), stable=True)
    bounds = torch.searchsorted(sorted_keys, torch.arange(n_dest + 1, device=dev, dtype=kdt))
    counts = bounds[1:] - bounds[:-1]
    bad, longest = torch.stack((bad.to(torch.int64), counts.max())).tolist()  # one synchronization
    if bad:
        raise _index_error(op, c)
    if c.full:
        inp3 = input.reshape(c.outer, c.N, c.W)
        out3, tmp, view = out.view(c.outer, c.N, c.W), None, out
    else:
        out.copy_(input)
        out3, tmp, view = _out_view(out, c)
        inp3 = out3  # each element is read and written by the same program
    s = c.src
    seg = _piece_length(longest)
    has_pieces = longest > seg
    extra = first = part = bounds  # placeholders, never read without pieces
    n_pieces = 0
    if has_pieces:
        extra = torch.where(counts > 0, (counts - 1) // seg, 0)
        first = torch.cumsum(extra, 0) - extra
        n_pieces = int(extra.sum())
        q = torch.repeat_interleave(torch.arange(n_dest, device=dev), extra, output_size=n_pieces)
        a = bounds[q] + (torch.arange(n_pieces, device=dev) - first[q] + 1) * seg
        pieces = torch.stack((q, a, torch.minimum(a + seg, bounds[q + 1])), dim=1).contiguous()
        n_bg = 1 if batched else B
        part = torch.empty((n_bg * n_pieces, width), dtype=torch.float32, device=dev)
        block_i = min(next_pow2(width), SORTED_MAX_BLOCK_I)
        block_p = max(1, min(seg, PIECE_TILE // block_i))
        n_ib = triton.cdiv(width, block_i)
        _scatter_add_piece_kernel[(n_bg * n_pieces * n_ib,)](
            s, perm, pieces, part, c.N, c.L, width, b_inner, n_pieces, n_ib, *s.stride(),
            BATCHED=batched, USE_INT64=_use_int64(s, perm, part), BLOCK_P=block_p, BLOCK_I=block_i, num_warps=4,
        )
    cfg = _sorted_config(width)
    n_db, n_ib = triton.cdiv(c.N, cfg.BLOCK_R), triton.cdiv(width, cfg.BLOCK_I)
    _scatter_add_sorted_kernel[(B * n_db * n_ib,)](
        inp3, out3, s, perm, bounds, extra, first, part, alpha, c.N, c.L, width, b_inner, n_db, n_ib,
        seg, n_pieces, *inp3.stride(), *out3.stride(), *s.stride(),
        BATCHED=batched, HAS_PIECES=has_pieces, HAS_ALPHA=alpha != 1,
        USE_INT64=_use_int64(inp3, out3, s, bounds, perm, part), BF16_RNE=bf16_rne(out.dtype),
        UNROLL=UNROLL, BLOCK_D=cfg.BLOCK_R, BLOCK_I=cfg.BLOCK_I, num_warps=cfg.num_warps,
    )
    if tmp is not None:
        view.copy_(tmp.view(view.shape))


def _scatter_add_forward(op, input, dim, index, src, alpha, index_add, deterministic) -> torch.Tensor:
    out = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    c = _canonical(input, dim, index, src, index_add)
    if c.N == 0 and c.outer * c.L * c.W:
        raise _index_error(op, c)  # every index value is out of range of an empty dimension
    if out.numel() == 0:
        return out
    if c.outer * c.L * c.W == 0:
        out.copy_(input)
        return out
    (_sorted_path if deterministic else _atomic_path)(op, input, out, c, alpha)
    return out


def _scatter_gather_backward(grad, dim, index, src_shape, alpha, index_add) -> torch.Tensor:
    grad_src = torch.empty(src_shape, dtype=grad.dtype, device=grad.device)
    c = _canonical(grad, dim, index, grad_src, index_add)
    if grad_src.numel() == 0:
        return grad_src
    if tuple(c.space) != tuple(src_shape):
        grad_src.zero_()  # src elements outside index's extent receive no gradient
    if c.outer * c.L * c.W == 0:
        return grad_src
    g3 = _restrict(grad, c.space, dim, keep_dim=True).reshape(c.outer, c.N, c.W)
    view = _restrict(grad_src, c.space, dim, keep_dim=False)
    u3 = _as3(view, c.outer, c.L, c.W)
    tmp = None
    if u3 is None:
        tmp = torch.empty((c.outer, c.L, c.W), dtype=grad.dtype, device=grad.device)
        u3 = tmp
    cfg = _atomic_config(c.W)
    n_lb, n_ib = triton.cdiv(c.L, cfg.BLOCK_R), triton.cdiv(c.W, cfg.BLOCK_I)
    _scatter_gather_kernel[(c.outer * n_lb * n_ib,)](
        g3, c.idx, u3, alpha, c.L, c.N, c.W, n_lb, n_ib,
        *g3.stride(), *c.idx_strides, *u3.stride(),
        ROW_INDEX=c.row_index, HAS_ALPHA=alpha != 1, USE_INT64=_use_int64(g3, c.idx, u3),
        BF16_RNE=bf16_rne(grad.dtype), BLOCK_L=cfg.BLOCK_R, BLOCK_I=cfg.BLOCK_I, num_warps=cfg.num_warps,
    )
    if tmp is not None:
        view.copy_(tmp.view(view.shape))
    return grad_src


# ----------------------------------------------------------------------------- custom ops, autograd


@torch.library.custom_op("roofkit::scatter_add", mutates_args=())
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
    if src.dtype != input.dtype:
        raise TypeError(f"roofkit.{op}: {src_name} dtype {src.dtype} differs from input dtype {input.dtype}")


def _resolve_deterministic(op: str, deterministic) -> bool:
    if deterministic is None:
        return torch.are_deterministic_algorithms_enabled()
    if not isinstance(deterministic, bool):
        raise TypeError(f"roofkit.{op}: deterministic must be True, False or None, got {type(deterministic).__name__}")
    return deterministic


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
            the device: one host synchronization per call).
    Numerics:
        Atomic path: each contribution is added atomically in input's dtype (as torch does), in
        an unspecified order (not bitwise reproducible). Deterministic path: each destination's
        contributions are summed in float32 in index order (a destination with more than
        ``SPLIT_MIN`` of them: in fixed pieces, combined in order) and added to input with one
        rounding (more accurate than torch for float16/bfloat16); bitwise reproducible.
        Backward: grad_input = grad, grad_src = grad gathered at index (zero outside index's
        extent, where torch refuses); first order only.
    Cost:
        Reads input, the src elements under index and the index once, writes the output once;
        one add per index element (``scatter_add_cost``). The atomic path writes the output twice
        (a copy of input, then the atomics). The deterministic path adds a stable sort of the
        keys (torch.sort; int32 keys when they fit), per-destination segment bounds
        (torch.searchsorted) and gathers of src in sorted order; with an index that varies along
        the trailing dimensions it sorts one key per element and writes destinations with the
        stride of the trailing dimensions (a general fallback, not a fast path).
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
        IndexError: ``dim`` out of range; index values outside [0, input.size(dim)) (checked on
            the device: one host synchronization per call).
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


# ----------------------------------------------------------------------------- spec


def _make_index(kind: str, shape, N: int, dtype: torch.dtype, generator, device) -> torch.Tensor:
    """Index values in [0, N) of ``shape``: uniform, same (one destination for all), sorted,
    skewed (power law: a few hot destinations, as token ids), unique (a permutation prefix),
    repeat (every destination equally often, shuffled: top-k routing)."""
    gdev = generator.device
    numel = math.prod(shape)
    if kind == "uniform":
        x = torch.randint(0, N, (numel,), generator=generator, device=gdev)
    elif kind == "same":
        x = torch.randint(0, N, (1,), generator=generator, device=gdev).expand(numel)
    elif kind == "sorted":
        x = torch.randint(0, N, (numel,), generator=generator, device=gdev).sort().values
    elif kind == "skewed":
        u = torch.rand(numel, generator=generator, device=gdev, dtype=torch.float64)
        hot = torch.randperm(N, generator=generator, device=gdev)
        x = hot[(u**4 * N).long().clamp_max(N - 1)]
    elif kind == "unique":
        x = torch.randperm(N, generator=generator, device=gdev)[:numel]
    elif kind == "repeat":
        x = torch.randperm(numel, generator=generator, device=gdev) % N
    else:
        raise ValueError(f"unknown index kind {kind!r}")
    return x.reshape(shape).to(device=device, dtype=dtype).contiguous()


def _index_add_inputs(case, dtype, generator, device) -> Inputs:
    shape, dim, L = tuple(case["shape"]), case.get("dim", 0), case["L"]
    d = dim % max(len(shape), 1)
    N = shape[d] if shape else 1
    dist = case.get("dist", "normal")
    x = random_tensor(shape, dtype, generator, device, dist, layout=case.get("layout", "contiguous"))
    src = random_tensor(_index_space(case), dtype, generator, device, dist,
                        layout=case.get("source_layout", "contiguous"))
    idx_dtype = getattr(torch, case.get("index_dtype", "int64"))
    idx = _make_index(case.get("index", "uniform"), (L,), max(N, 1), idx_dtype, generator, device)
    kwargs = {"alpha": case.get("alpha", 1)}
    if "deterministic" in case.params:
        kwargs["deterministic"] = case["deterministic"]
    return Inputs((x, dim, idx, src), kwargs)


def _scatter_add_inputs(case, dtype, generator, device) -> Inputs:
    shape, dim = tuple(case["shape"]), case.get("dim", 0)
    space = tuple(case["index_shape"])
    d = dim % len(space)
    dist = case.get("dist", "normal")
    x = random_tensor(shape, dtype, generator, device, dist, layout=case.get("layout", "contiguous"))
    src = random_tensor(tuple(case.get("src_shape", space)), dtype, generator, device, dist,
                        layout=case.get("src_layout", "contiguous"))
    idx_dtype = getattr(torch, case.get("index_dtype", "int64"))
    kind = case.get("index", "uniform")
    if case.get("index_layout") == "expanded":
        rows = space[: d + 1] + (1,) * (len(space) - d - 1)
        idx = _make_index(kind, rows, max(shape[d], 1), idx_dtype, generator, device).expand(space)
    else:
        idx = with_layout(_make_index(kind, space, max(shape[d], 1), idx_dtype, generator, device),
                          case.get("index_layout", "contiguous"))
    kwargs = {"deterministic": case["deterministic"]} if "deterministic" in case.params else {}
    return Inputs((x, dim, idx, src), kwargs)


def _multiplicity(case) -> int:
    """Expected largest number of contributions to one destination (reduction-aware atol)."""
    space = _index_space(case)
    dim = case.get("dim", 0) % len(space)
    L, N = space[dim], max(case["shape"][dim], 1)
    if case.get("index", "uniform") == "same":
        return L
    if case.get("index") == "skewed":
        return max(1, L // 8)
    return max(1, 4 * math.ceil(L / N))


def _torch_scatter_add(input, dim, index, src, *, deterministic=None):
    return torch.scatter_add(input, dim, index, src)


def _torch_index_add(input, dim, index, source, *, alpha=1, deterministic=None):
    return torch.index_add(input, dim, index, source, alpha=alpha)


def _torch_deterministic(fn):
    """``fn`` run with torch's deterministic algorithms on (sort-based index_add on CUDA; torch
    raises where it has none), without the NaN fill of fresh allocations that mode adds."""

    def factory():
        import torch.utils.deterministic as det

        def run(*args, **kwargs):
            before, fill = torch.are_deterministic_algorithms_enabled(), det.fill_uninitialized_memory
            torch.use_deterministic_algorithms(True)
            det.fill_uninitialized_memory = False
            try:
                return fn(*args, **kwargs)
            finally:
                torch.use_deterministic_algorithms(before)
                det.fill_uninitialized_memory = fill

        return run

    return factory


_F32 = (torch.float32,)
_BF16 = (torch.bfloat16,)
_MI = 1 << 20

INDEX_ADD_CASES = [
    case("tiny_1d_L5_into_3", ["quick"], shape=(3,), L=5),
    case("rows_dim0_7x5_L9", ["quick"], shape=(7, 5), L=9),
    case("dim1_3x6x5_L8", shape=(3, 6, 5), dim=1, L=8),
    case("dim_last_4x7_L10", shape=(4, 7), dim=-1, L=10),
    case("same_destination_6x3_L300", shape=(6, 3), L=300, index="same"),
    case("int32_index_9x4_L12", shape=(9, 4), L=12, index_dtype="int32"),
    case("alpha_minus_half_6x4_L10", shape=(6, 4), L=10, alpha=-0.5),
    case("unique_16x3_L16", shape=(16, 3), L=16, index="unique"),
    case("skewed_40x8_L200", shape=(40, 8), L=200, index="skewed"),
    case("transposed_8x6_L9", shape=(8, 6), L=9, layout="transposed", source_layout="transposed"),
    case("strided_source_6x8_L7", shape=(6, 8), L=7, source_layout="strided", grad=False),
    case("wide_rows_5x700_L9", shape=(5, 700), L=9, dtypes=_F32),
    case("large_magnitude_9x5_L20", shape=(9, 5), L=20, dist="large"),
    case("nan_9x5_L20", shape=(9, 5), L=20, dist="nan", grad=False),
    case("deterministic_rows_9x5_L20", ["quick"], shape=(9, 5), L=20, deterministic=True),
    case("deterministic_dim1_3x6x5_L8", shape=(3, 6, 5), dim=1, L=8, deterministic=True),
    case("deterministic_1d_L300_into_7", shape=(7,), L=300, deterministic=True),
    case("deterministic_same_alpha_6x3_L50", shape=(6, 3), L=50, index="same", alpha=2.0, deterministic=True),
    case("deterministic_int32_offset_8x6_L9", shape=(8, 6), L=9, index_dtype="int32", layout="offset",
         deterministic=True),
    case("empty_index_4x3_L0", ["quick"], shape=(4, 3), L=0),
    case("empty_input_0x3_L0", shape=(0, 3), L=0),
    case("empty_rows_5x0_L4", shape=(5, 0), L=4),
    # On the GPU: the acceptance shapes of issue 5 and the llama3-8b embedding backward.
    case("gpu_rows_1Mix64_L1Mi", ["gpu"], shape=(_MI, 64), L=_MI, dtypes=_F32, grad=False),
    case("gpu_rows_1Mix64_L1Mi_deterministic", ["gpu"], shape=(_MI, 64), L=_MI, dtypes=_F32, deterministic=True,
         grad=False),
    case("gpu_1d_L64Mi_into_1Mi", ["gpu"], shape=(_MI,), L=64 * _MI, dtypes=_F32, grad=False),
    case("gpu_1d_L4Mi_into_1Mi_deterministic", ["gpu"], shape=(_MI,), L=4 * _MI, dtypes=_F32, deterministic=True,
         grad=False),
    case("gpu_same_destination_1d_L4Mi_ties", ["gpu"], shape=(1000,), L=4 * _MI, index="same", dist="ties",
         dtypes=_F32),
    case("gpu_same_destination_rows_L65536_ties", ["gpu"], shape=(4096, 64), L=65536, index="same", dist="ties",
         dtypes=_F32),
    case("gpu_duplicates_65536x128_L262144", ["gpu"], shape=(65536, 128), L=262144),
    case("gpu_duplicates_65536x128_L262144_deterministic", ["gpu"], shape=(65536, 128), L=262144, deterministic=True),
    case("gpu_embedding_bwd_16384x4096_L8192", ["gpu"], shape=(16384, 4096), L=8192, index="skewed", dtypes=_BF16),
    case("gpu_dim1_64x1000x96_L3000", ["gpu"], shape=(64, 1000, 96), dim=1, L=3000, alpha=0.5),
    case("gpu_int32_1d_L1Mi_into_4097", ["gpu"], shape=(4097,), L=_MI, index_dtype="int32", dtypes=_F32, grad=False),
    case("gpu_over_2pow31_elements", ["gpu", "slow"], shape=(2**21 + 1, 1024), L=4096, dtypes=_BF16, grad=False),
]

INDEX_ADD_SUITES = {
    # llama3-8b: the embedding backward, 8192 token gradients of width 4096 added into the
    # 128256 x 4096 embedding gradient (token ids skewed like real text).
    "llama3-8b": [
        case("embedding_bwd_128256x4096_8192tok", shape=(128256, 4096), L=8192, index="skewed", dtypes=_BF16),
        case("embedding_bwd_128256x4096_8192tok_deterministic", shape=(128256, 4096), L=8192, index="skewed",
             dtypes=_BF16, deterministic=True),
    ],
    # Issue 5: 64Mi fp32 source elements into 1Mi destination rows. Two readings, both measured:
    # rows of 64 (input 1Mi x 64, source 1Mi x 64, 1Mi indices) and the 1-D form (input 1Mi,
    # source and index 64Mi). Bytes: input + output + source + index (index_add_cost).
    "acceptance": [
        case("rows_1Mix64_L1Mi", shape=(_MI, 64), L=_MI, dtypes=_F32),
        case("rows_1Mix64_L1Mi_deterministic", shape=(_MI, 64), L=_MI, dtypes=_F32, deterministic=True),
        case("1d_L64Mi_into_1Mi", shape=(_MI,), L=64 * _MI, dtypes=_F32),
        case("1d_L64Mi_into_1Mi_deterministic", shape=(_MI,), L=64 * _MI, dtypes=_F32, deterministic=True),
    ],
}

SCATTER_ADD_CASES = [
    case("tiny_1d_5_into_3", ["quick"], shape=(3,), index_shape=(5,)),
    case("dim0_6x4_from_9x4", ["quick"], shape=(6, 4), index_shape=(9, 4)),
    case("dim1_5x6_from_5x11", shape=(5, 6), dim=1, index_shape=(5, 11)),
    case("dim1_3d_3x5x4_from_3x8x4", shape=(3, 5, 4), dim=1, index_shape=(3, 8, 4)),
    case("index_smaller_than_src_4x6", shape=(4, 6), index_shape=(3, 4), src_shape=(5, 6), grad=False),
    case("index_smaller_than_input_3d", shape=(4, 6, 5), dim=1, index_shape=(3, 7, 2), src_shape=(3, 9, 4), grad=False),
    case("expanded_rows_7x5_from_12x5", ["quick"], shape=(7, 5), index_shape=(12, 5), index_layout="expanded"),
    case("expanded_dim1_3x6x5_from_3x9x5", shape=(3, 6, 5), dim=1, index_shape=(3, 9, 5), index_layout="expanded"),
    case("same_destination_4x3_from_200x3", shape=(4, 3), index_shape=(200, 3), index="same"),
    case("int32_index_6x4_from_9x4", shape=(6, 4), index_shape=(9, 4), index_dtype="int32"),
    case("transposed_index_8x6_from_10x6", shape=(8, 6), index_shape=(10, 6), index_layout="transposed",
         layout="transposed", src_layout="transposed"),
    case("large_magnitude_7x5_from_20x5", shape=(7, 5), index_shape=(20, 5), dist="large"),
    case("pos_inf_7x5_from_20x5", shape=(7, 5), index_shape=(20, 5), dist="pos_inf", grad=False),
    case("deterministic_dim0_6x4_from_9x4", ["quick"], shape=(6, 4), index_shape=(9, 4), deterministic=True),
    case("deterministic_expanded_dim1_3x6x5", shape=(3, 6, 5), dim=1, index_shape=(3, 9, 5), index_layout="expanded",
         deterministic=True),
    case("deterministic_batched_rows_3x6x5", shape=(3, 6, 5), dim=1, index_shape=(3, 9, 1), src_shape=(3, 9, 1),
         deterministic=True),
    case("deterministic_smaller_3d", shape=(4, 6, 5), dim=1, index_shape=(3, 7, 2), src_shape=(3, 9, 4),
         deterministic=True, grad=False),
    case("deterministic_same_4x3_from_60x3", shape=(4, 3), index_shape=(60, 3), index="same", deterministic=True),
    case("empty_index_4x3_from_0x3", ["quick"], shape=(4, 3), index_shape=(0, 3)),
    case("empty_input_0x3", shape=(0, 3), index_shape=(0, 3)),
    # On the GPU: the acceptance shapes of issue 5.
    case("gpu_expanded_rows_1Mix64", ["gpu"], shape=(_MI, 64), index_shape=(_MI, 64), index_layout="expanded",
         dtypes=_F32, grad=False),
    case("gpu_expanded_rows_1Mix64_deterministic", ["gpu"], shape=(_MI, 64), index_shape=(_MI, 64),
         index_layout="expanded", dtypes=_F32, deterministic=True, grad=False),
    case("gpu_1d_64Mi_into_1Mi", ["gpu"], shape=(_MI,), index_shape=(64 * _MI,), dtypes=_F32, grad=False),
    case("gpu_same_destination_1d_4Mi_ties", ["gpu"], shape=(1000,), index_shape=(4 * _MI,), index="same",
         dist="ties", dtypes=_F32),
    case("gpu_same_destination_rows_65536x64_ties", ["gpu"], shape=(4096, 64), index_shape=(65536, 64), index="same",
         index_layout="expanded", dist="ties", dtypes=_F32),
    case("gpu_same_destination_deterministic", ["gpu"], shape=(4096, 64), index_shape=(65536, 64), index="same",
         index_layout="expanded", deterministic=True),
    case("gpu_materialized_3d_dim1_32x500x64", ["gpu"], shape=(32, 500, 64), dim=1, index_shape=(32, 700, 64)),
    case("gpu_materialized_3d_deterministic", ["gpu"], shape=(32, 500, 64), dim=1, index_shape=(32, 700, 64),
         deterministic=True),
    case("gpu_moe_combine_8192x4096_top2", ["gpu"], shape=(8192, 4096), index_shape=(16384, 4096), index="repeat",
         index_layout="expanded", dtypes=_BF16),
    case("gpu_over_2pow31_elements", ["gpu", "slow"], shape=(2**21 + 1, 1024), index_shape=(4096, 1024),
         index_layout="expanded", dtypes=_BF16, grad=False),
]

SCATTER_ADD_SUITES = {
    # llama3-8b: a mixture-of-experts combine at llama3-8b's width (8192 tokens, top-2 routing:
    # 16384 expert-output rows of 4096 added back into their tokens), and the embedding backward
    # written as a scatter_add (index expanded along the hidden dimension).
    "llama3-8b": [
        case("moe_combine_8192x4096_top2", shape=(8192, 4096), index_shape=(16384, 4096), index="repeat",
             index_layout="expanded", dtypes=_BF16),
        case("moe_combine_8192x4096_top2_deterministic", shape=(8192, 4096), index_shape=(16384, 4096),
             index="repeat", index_layout="expanded", dtypes=_BF16, deterministic=True),
        case("embedding_bwd_128256x4096_8192tok", shape=(128256, 4096), index_shape=(8192, 4096), index="skewed",
             index_layout="expanded", dtypes=_BF16),
    ],
    # Issue 5: 64Mi fp32 into 1Mi rows (expanded row index, and the 1-D form with a 64Mi index),
    # and every index on the same destination.
    "acceptance": [
        case("expanded_rows_1Mix64", shape=(_MI, 64), index_shape=(_MI, 64), index_layout="expanded", dtypes=_F32),
        case("expanded_rows_1Mix64_deterministic", shape=(_MI, 64), index_shape=(_MI, 64), index_layout="expanded",
             dtypes=_F32, deterministic=True),
        case("1d_64Mi_into_1Mi", shape=(_MI,), index_shape=(64 * _MI,), dtypes=_F32),
        case("same_destination_rows_65536x64", shape=(4096, 64), index_shape=(65536, 64), index="same",
             index_layout="expanded", dist="ties", dtypes=_F32),
        case("same_destination_rows_65536x64_deterministic", shape=(4096, 64), index_shape=(65536, 64), index="same",
             index_layout="expanded", dist="ties", dtypes=_F32, deterministic=True),
    ],
}

SCATTER_ADD_SPEC = OpSpec(
    name="scatter_add",
    impl=scatter_add,
    reference=scatter_add_reference,
    torch_impl=_torch_scatter_add,
    make_inputs=_scatter_add_inputs,
    cost=scatter_add_cost,
    reduction_length=_multiplicity,
    dtypes=FLOAT_DTYPES,
    cases=SCATTER_ADD_CASES,
    suites=SCATTER_ADD_SUITES,
    baselines={
        "torch": lambda: _torch_scatter_add,
        "torch.compile": baselines.compiled(_torch_scatter_add),
        "torch.deterministic": _torch_deterministic(_torch_scatter_add),
        "flaggems": baselines.flaggems(_torch_scatter_add),
    },
    grad_args=(0, 3),
    # The default (atomic) path is not bitwise reproducible; deterministic=True cases are checked
    # for bitwise reproducibility by tests/ops/test_scatter.py.
    deterministic=False,
    marker="scatter",
)

INDEX_ADD_SPEC = OpSpec(
    name="index_add",
    impl=index_add,
    reference=index_add_reference,
    torch_impl=_torch_index_add,
    make_inputs=_index_add_inputs,
    cost=index_add_cost,
    reduction_length=_multiplicity,
    dtypes=FLOAT_DTYPES,
    cases=INDEX_ADD_CASES,
    suites=INDEX_ADD_SUITES,
    baselines={
        "torch": lambda: _torch_index_add,
        "torch.compile": baselines.compiled(_torch_index_add),
        "torch.deterministic": _torch_deterministic(_torch_index_add),
        "flaggems": baselines.flaggems(_torch_index_add),
    },
    grad_args=(0, 3),
    deterministic=False,
    marker="scatter",
)

SPECS = (SCATTER_ADD_SPEC, INDEX_ADD_SPEC)
