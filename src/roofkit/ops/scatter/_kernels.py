"""scatter_add / index_add Triton kernels (``@triton.jit`` only), shared by both ops: the atomic
path, the deterministic (sorted) path and its piece kernel, and the backward gather. The program
mapping is described in the package docstring; the host launchers and tile settings are in
``_launch.py``."""

import triton
import triton.language as tl

from .._jit import _round_for_store


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
def _negative_zeros(shape: tl.constexpr):
    """float32 -0.0 of ``shape``, built from its bits (a -0.0 literal or -zeros may fold to +0.0)."""
    return tl.full(shape, 0x80000000, tl.uint32).to(tl.float32, bitcast=True)


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
    # -0.0 is the additive identity that keeps signs: a sum of -0.0 contributions stays -0.0, so
    # -0.0 + (-0.0) gives -0.0 as torch's does (+0.0 would turn it into +0.0).
    neg0 = _negative_zeros([BLOCK_D, BLOCK_I])
    acc = neg0
    for j in range(0, tl.max(tl.max(head, axis=1), axis=0), UNROLL):
        for u in tl.static_range(UNROLL):
            valid = (j + u) < head
            p = tl.load(perm_ptr + start + (j + u), mask=valid, other=0) - l_base
            # Masked lanes add -0.0 too (adding +0.0 would also turn a -0.0 sum into +0.0).
            v = tl.load(src_cols + p * stride_sl, mask=valid & tile_mask, other=neg0)
            acc += v.to(tl.float32)  # one destination's contributions in order: deterministic
    if HAS_PIECES:
        n_extra = tl.load(extra_ptr + q, mask=n_mask[:, None], other=0)
        row = tl.load(first_ptr + q, mask=n_mask[:, None], other=0)
        if not BATCHED:
            row += b * n_pieces  # every batch has its own partial sums of the shared pieces
        for e in range(0, tl.max(tl.max(n_extra, axis=1), axis=0), UNROLL):
            for u in tl.static_range(UNROLL):
                valid = (e + u) < n_extra
                acc += tl.load(part_ptr + (row + e + u) * W + c[None, :], mask=valid & tile_mask, other=neg0)
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
    acc = _negative_zeros([BLOCK_I])  # -0.0: see _scatter_add_sorted_kernel
    for s0 in range(a, e, BLOCK_P):
        k = s0 + tl.arange(0, BLOCK_P)
        k_mask = k < e
        p = tl.load(perm_ptr + k, mask=k_mask, other=0) - l_base
        v = tl.load(src_cols + p[:, None] * stride_sl, mask=k_mask[:, None] & c_mask[None, :],
                    other=_negative_zeros([BLOCK_P, BLOCK_I]))
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
    index rows x BLOCK_I columns; 0 for an index value outside [0, N) (which an eager forward
    rejects, and a CUDA-graph replay of the forward skipped). Tile [BLOCK_L, BLOCK_I]."""
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


@triton.jit
def _index_range_kernel(idx_ptr, err_ptr, L, N, n_lb, stride_xo, stride_xl,
                        USE_INT64: tl.constexpr, BLOCK_L: tl.constexpr):
    """Counts the index values outside [0, N) among BLOCK_L of the L row indices of outer slice
    o = pid // n_lb (index[o * stride_xo + l * stride_xl]); a non-zero count goes to err. Tile
    [BLOCK_L]."""
    pid = tl.program_id(0)
    lb = pid % n_lb
    o = pid // n_lb
    rows = lb * BLOCK_L + tl.arange(0, BLOCK_L)
    row_mask = rows < L
    if USE_INT64:
        rows = rows.to(tl.int64)
        o = o.to(tl.int64)
    d = tl.load(idx_ptr + o * stride_xo + rows * stride_xl, mask=row_mask, other=0)
    n_bad = tl.sum((row_mask & ((d < 0) | (d >= N))).to(tl.int32), axis=0)
    # Any non-zero count will do: racing programs only ever store non-zero values.
    tl.store(err_ptr, n_bad, mask=n_bad > 0)
