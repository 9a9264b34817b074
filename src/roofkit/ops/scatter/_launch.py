"""scatter_add / index_add launch side, shared by both ops: the launch settings (ATOMIC_TILE,
SORTED_TILE, UNROLL, SPLIT_MIN, ...), tile configs, the canonical (outer, L, W) form of a call and
the host launchers of the atomic path, the deterministic path and the backward gather. Tests
monkeypatch the settings, ``_use_int64`` and kernel names on this module: it is the one that
reads them."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import triton

from .._common import bf16_rne, copy_to_host_async, interpreter_active, needs_int64, next_pow2
from ._kernels import (
    _index_range_kernel,
    _scatter_add_atomic_kernel,
    _scatter_add_piece_kernel,
    _scatter_add_sorted_kernel,
    _scatter_gather_kernel,
)


# ----------------------------------------------------------------------------- launch heuristic

ATOMIC_TILE = 4096  # elements per atomic-path (and gather) tile: 16 per thread with 8 warps
ATOMIC_MAX_BLOCK_I = 512
ATOMIC_WARPS = 8
# Row-index calls whose rows are at least this wide check the index range before the adds, the
# wait for that check overlapping the copy of input into the output (see _atomic_path); narrower
# ones (1-D: the index is as large as the source) check inside the atomic kernel and wait at the end.
PRECHECK_MIN_WIDTH = 8
RANGE_BLOCK = 4096  # index values per program of the range check
SORTED_TILE = 1024  # destination elements per deterministic-path tile (64 registers at most on sm_90)
SORTED_MAX_BLOCK_I = 256
UNROLL = 4  # contributions loaded together per step of the deterministic path (memory-level parallelism)
# A destination with more contributions than the piece length (at least SPLIT_MIN, about the
# square root of L, the most contributions one destination can have) has its segment cut into
# pieces summed by separate programs; its own program adds the pieces' partial sums in piece
# order. Bounds the serial work of a hot destination (every index equal: 65536 contributions ->
# 256 pieces of 256). The length depends on the shapes only, never on the index values, so a
# CUDA-graph replay (which cannot size anything from the data) sums in the same pieces as an
# eager call: the same bits.
SPLIT_MIN = 256
PIECE_TILE = 2048  # contributions x columns per step of a piece program
# The atomic path on 16-bit destinations adds into a float32 copy (rounded once) when there are
# at least this many contributions per destination on average, else with 16-bit atomics as torch's
# CUDA kernels do. The copy costs two extra passes over a float32 output: at a MoE combine of 2
# contributions per token row it took 2.1x the atomics' time for a relative error of 1.7e-3
# instead of torch's 2.3e-3 (docs/data_movement.md), so it starts at 4.
FP32_ACCUMULATE_MIN_PER_DEST = 4.0


class Config(NamedTuple):
    """Tile of BLOCK_R rows (index rows, or destination rows) x BLOCK_I columns, and its warps."""

    BLOCK_R: int
    BLOCK_I: int
    num_warps: int


def _atomic_config(width: int) -> Config:
    """Tiles of ATOMIC_TILE elements; a row's columns stay contiguous (coalesced atomics) up to
    ATOMIC_MAX_BLOCK_I wide; W = 1 (1-D index_add) gives a column of 4096 index rows."""
    block_i = min(next_pow2(width), ATOMIC_MAX_BLOCK_I)
    return Config(max(1, ATOMIC_TILE // block_i), block_i, ATOMIC_WARPS)


def _sorted_config(width: int) -> Config:
    """Tiles of SORTED_TILE destination elements, 8 warps: 4 per thread, each with UNROLL gathers
    in flight (4 x 4 independent loads per thread; about 64 registers, so 4 programs per SM)."""
    block_i = min(next_pow2(width), SORTED_MAX_BLOCK_I)
    return Config(max(1, SORTED_TILE // block_i), block_i, 8)


def _piece_length(L: int) -> int:
    """Piece length of the deterministic path for at most L contributions per destination."""
    return max(SPLIT_MIN, next_pow2(math.isqrt(max(L, 1))))


def _max_offset(t: torch.Tensor) -> int:
    return sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()) if s > 0) + 1


def _use_int64(*tensors: torch.Tensor) -> bool:
    """Whether any element offset of these tensors can reach 2**31 (then kernels index in int64)."""
    return any(needs_int64(_max_offset(t)) for t in tensors)


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


def _capturing(device: torch.device) -> bool:
    """Whether the work queued now for ``device`` is being captured into a CUDA graph: then the
    host may neither wait for the device nor read its memory, so the index range is not checked
    on the host (out-of-range values are skipped by the kernels). CPU work is never captured."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _precheck(c: _Canon) -> bool:
    """Whether an eager call checks its index range before the adds (row-index calls at least
    PRECHECK_MIN_WIDTH wide)."""
    return c.row_index and c.W >= PRECHECK_MIN_WIDTH


def _launch_range_check(c: _Canon, err: torch.Tensor):
    """Enqueues the index range check of a row-index call and, on a GPU, the copy of its count to
    pinned host memory. Returns (count on the host, event recorded after that copy, or None when
    the count is already there: the CPU)."""
    outer = 1 if c.shared else c.outer
    n_lb = triton.cdiv(c.L, RANGE_BLOCK)
    _index_range_kernel[(outer * n_lb,)](
        c.idx, err, c.L, c.N, n_lb, c.idx_strides[0], c.idx_strides[1],
        USE_INT64=_use_int64(c.idx), BLOCK_L=RANGE_BLOCK, num_warps=4,
    )
    return copy_to_host_async(err)


def _accumulates_in_float32(dtype: torch.dtype, L: int, N: int) -> bool:
    """Whether the atomic path adds ``L`` contributions into ``N`` destinations of ``dtype``
    through a float32 copy, rounded once: 16-bit destinations with at least
    FP32_ACCUMULATE_MIN_PER_DEST contributions per destination on average, where 16-bit atomics
    (each add rounded, in whatever order the programs arrive) lose the most. With fewer (an
    embedding gradient: 8192 token rows into 128256) the atomics add in the destination's dtype,
    as torch's CUDA kernels do. Always under the interpreter: Triton 3.6's has no bfloat16
    atomics, and torch's CPU kernels (the error budget of CPU runs) accumulate 16-bit index_add
    in float32."""
    ratio = FP32_ACCUMULATE_MIN_PER_DEST
    if not ratio >= 0:  # (NaN fails too)
        raise ValueError(f"roofkit.scatter_add / index_add: FP32_ACCUMULATE_MIN_PER_DEST must be a number >= 0 "
                         f"(contributions per destination), got {ratio!r}")
    return dtype != torch.float32 and (interpreter_active() or L >= ratio * N)


def _atomic_path(op: str, input: torch.Tensor, out: torch.Tensor, c: _Canon, alpha: float) -> None:
    # The kernels skip out-of-range index values and count them in err; under capture no one
    # reads err (the host cannot wait), so nothing outside the output and src is ever touched.
    capturing = _capturing(out.device)
    err = torch.zeros((1,), dtype=torch.int32, device=out.device)
    checked = None
    if not capturing and _precheck(c):
        # The host waits for the range check while the device copies input into the output, so
        # the wait costs no device time; the adds are enqueued only for a valid index.
        checked = _launch_range_check(c, err)
    out.copy_(input)
    if checked is not None:
        host, ready = checked
        if ready is not None:
            ready.synchronize()
        if int(host[0]):
            raise _index_error(op, c)
    out3, tmp, view = _out_view(out, c)
    work = out3
    if _accumulates_in_float32(out3.dtype, c.L, c.N):
        work = out3.to(torch.float32)
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
    if checked is None and not capturing and int(err.item()):
        raise _index_error(op, c)


def _sort_keys(c: _Canon) -> tuple[torch.Tensor, int, int, int, bool, torch.Tensor]:
    """(keys, B, B_INNER, width, batched, bad): one key per contribution, ordered so that a stable
    sort groups each destination's contributions in their original order. An out-of-range index
    value gets the key n_dest (past every destination: sorted last, never summed, so no kernel
    reads src or the output through it) instead of another batch's destination; ``bad`` (0-d
    bool, on the device) says whether there was one. Keys are int32 when n_dest < 2**31 (half
    the radix sort's passes and traffic), else int64."""
    dev = c.src.device
    if c.row_index:
        vals = torch.as_strided(c.idx, (c.outer, c.L), (c.idx_strides[0], c.idx_strides[1]))
        if c.shared:
            vals, base, B, b_inner, width, batched = vals[0], None, c.outer, 1, c.W, False
        else:
            base = torch.arange(c.outer, device=dev, dtype=torch.int64)[:, None] * c.N
            B, b_inner, width, batched = c.outer, 1, c.W, True
    else:
        # Element mode: one batch per (o, i) column, keys ordered (o, i, l).
        vals = torch.as_strided(c.idx, (c.outer, c.L, c.W), c.idx_strides).permute(0, 2, 1)
        base = torch.arange(c.outer * c.W, device=dev, dtype=torch.int64).view(c.outer, c.W, 1) * c.N
        B, b_inner, width, batched = c.outer * c.W, c.W, 1, True
    n_dest = (B if batched else 1) * c.N
    kdt = torch.int32 if n_dest < 2**31 else torch.int64
    ok = (vals >= 0) & (vals < c.N)
    # Where ok is false the converted key may wrap: it is replaced by n_dest (which fits kdt).
    keys = torch.where(ok, (vals if base is None else base + vals).to(kdt), n_dest).reshape(-1)
    return keys, B, b_inner, width, batched, ~ok.all()


def _pieces(bounds: torch.Tensor, counts: torch.Tensor, seg: int, slots: int):
    """(extra, first, pieces) of the deterministic path, sized from the shapes only: extra[q]
    pieces of seg contributions after the first seg of destination q, its partial sums in rows
    first[q] ... of a batch's ``slots`` rows, and pieces[p] = (q, start, end) in sorted order for
    p < sum(extra) (later slots are empty: start = end = 0). ``slots`` (the number of keys // seg)
    bounds sum(extra) whatever the index values, so nothing is read back to size the pieces."""
    n_dest = counts.numel()
    extra = torch.where(counts > 0, (counts - 1) // seg, 0)
    ends = torch.cumsum(extra, 0)
    first = ends - extra
    slot = torch.arange(slots, device=counts.device)
    q = torch.searchsorted(ends, slot, right=True).clamp_max_(n_dest - 1)  # the destination of each slot
    used = slot < ends[-1]
    a = torch.where(used, bounds[q] + (slot - first[q] + 1) * seg, 0)
    e = torch.where(used, torch.minimum(a + seg, bounds[q + 1]), 0)
    return extra, first, torch.stack((q, a, e), dim=1).contiguous()


def _sorted_path(op: str, input: torch.Tensor, out: torch.Tensor, c: _Canon, alpha: float) -> None:
    keys, B, b_inner, width, batched, bad = _sort_keys(c)
    n_dest = (B if batched else 1) * c.N
    dev = keys.device
    sorted_keys, perm = torch.sort(keys, stable=True)
    bounds = torch.searchsorted(sorted_keys, torch.arange(n_dest + 1, device=dev, dtype=keys.dtype))
    counts = bounds[1:] - bounds[:-1]
    seg = _piece_length(c.L)  # no destination has more than L contributions
    if _capturing(dev):
        # Nothing can be read back: pieces whenever some destination could need them (the same
        # pieces, so the same bits, as an eager call); out-of-range values were keyed n_dest.
        has_pieces = c.L > seg
    else:
        bad, longest = torch.stack((bad.to(torch.int64), counts.max())).tolist()  # one synchronization
        if bad:
            raise _index_error(op, c)
        has_pieces = longest > seg
    if c.full:
        inp3 = input.reshape(c.outer, c.N, c.W)
        out3, tmp, view = out.view(c.outer, c.N, c.W), None, out
    else:
        out.copy_(input)
        out3, tmp, view = _out_view(out, c)
        inp3 = out3  # each element is read and written by the same program
    s = c.src
    extra = first = part = bounds  # placeholders, never read without pieces
    n_pieces = 0
    if has_pieces:
        n_pieces = keys.numel() // seg
        extra, first, pieces = _pieces(bounds, counts, seg, n_pieces)
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


# The tunables of this family's heuristics: what roofkit.config.override may set.
TUNABLES = ("ATOMIC_TILE", "ATOMIC_MAX_BLOCK_I", "ATOMIC_WARPS", "PRECHECK_MIN_WIDTH", "RANGE_BLOCK", "SORTED_TILE",
            "SORTED_MAX_BLOCK_I", "UNROLL", "SPLIT_MIN", "PIECE_TILE", "FP32_ACCUMULATE_MIN_PER_DEST")
