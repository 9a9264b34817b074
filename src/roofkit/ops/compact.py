"""masked_select and compact: the elements of input where mask is True, in their original order.

    compact(x, m) -> (values, count):  values[:count] = x[m] (row-major order of the broadcast shape)
    masked_select(x, m) = x[m]  (torch.masked_select)

Program mapping: the (broadcast) elements in row-major order, one tile of CHUNK * CHUNKS
elements per program, one launch, a single-pass scan with decoupled look-back:
1. the program takes a ticket (atomic counter) as its tile index, so it only ever waits for tiles
   whose programs already run;
2. it counts its tile's kept elements (the mask read from DRAM once, as int32 words), publishes
   the count in the tile's int64 word ((value << 2) | flag: one atomic, one load reads both), reads
   its predecessors' words WINDOW at a time until an inclusive prefix, and publishes its own;
3. it walks its tile CHUNK elements at a time (mask re-read from cache): exclusive in-chunk scan
   (tl.cumsum), input loaded only where kept, kept elements stored at prefix + rank. Every access
   of that loop is one element per thread, consecutive elements on consecutive lanes, so a warp's
   kept elements go to consecutive addresses (whole sectors written).
The order is the input's and the result deterministic (positions come from counts, not from the
order atomics happen in). The backward of masked_select maps the same way and gathers grad back
(zeros elsewhere). Values are moved as raw bits (an integer view of their width): NaN payloads
and -0.0 survive.
Source: decoupled look-back (Merrill & Garland, "Single-pass Parallel Prefix Scan with
Decoupled Look-back", NVIDIA NVR-2016-002) applied to stream compaction (Billeter, Olsson &
Assarsson, "Efficient stream compaction on wide SIMD many-core architectures", HPG 2009).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..harness import baselines
from ..harness.inputs import random_tensor, with_layout
from ..harness.spec import Cost, Inputs, OpSpec, case
from ._common import FLOAT_DTYPES, check_same_device, check_tensor, needs_int64

VALUE_DTYPES = FLOAT_DTYPES + (
    torch.float64, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
)
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

# ----------------------------------------------------------------------------- reference, cost


def masked_select_reference(input: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """torch.masked_select of the float64 input."""
    return torch.masked_select(input.to(torch.float64), mask)


def _kept(case) -> int:
    """Kept elements of a case: the expected count for a random mask, exact for the patterns."""
    shape = torch.broadcast_shapes(tuple(case["shape"]), tuple(case.get("mask_shape", case["shape"])))
    return round(case.get("keep", 0.5) * math.prod(shape))


SECTOR_BYTES = 32  # DRAM access granularity of an input element that is read


def _input_fraction(case, size: int) -> float:
    """Expected fraction of input's bytes any implementation must read: only the 32-byte sectors
    holding a kept element (1 - (1-p)^k for a random mask keeping p, k elements per sector; about
    p for clustered masks; all of it when input is broadcast)."""
    p = case.get("keep", 0.5)
    shape = tuple(case["shape"])
    if torch.broadcast_shapes(shape, tuple(case.get("mask_shape", shape))) != shape:
        return 1.0
    if case.get("pattern", "random") != "random":
        return p
    return 1.0 - (1.0 - p) ** max(1, SECTOR_BYTES // size)


def masked_select_cost(case, dtype: torch.dtype) -> Cost:
    """Read the mask once and the input sectors holding kept elements (``_input_fraction``: all
    of them from about 50% kept on), write the kept elements once; no FLOPs. ``mode='fwd_bwd'``
    adds the backward: read the mask and the kept gradients, write input's gradient."""
    size = torch.empty((), dtype=dtype).element_size()
    numel_x = math.prod(case["shape"])
    numel_m = math.prod(case.get("mask_shape", case["shape"]))
    fwd = numel_x * size * _input_fraction(case, size) + _kept(case) * size + numel_m
    if case.get("mode", "fwd") == "fwd_bwd":
        numel_b = math.prod(torch.broadcast_shapes(tuple(case["shape"]), tuple(case.get("mask_shape", case["shape"]))))
        return Cost(flops=0, bytes=fwd + numel_m + (_kept(case) + numel_b) * size)
    return Cost(flops=0, bytes=fwd)


# ----------------------------------------------------------------------------- launch heuristic

CHUNK = 1024  # elements per step of a program's write loop: 8 per thread with 4 warps
CHUNKS = 8  # steps per tile: a tile (one look-back) is CHUNK * CHUNKS = 8192 elements (H200 sweep, 2026-11-30: 8 beat 16 by 7-10 %)
NUM_WARPS = 4
WINDOW = 128  # predecessor words read at once by the look-back (raised to one per thread)
SHRINK_BELOW = 0.25  # masked_select copies its result out when fewer than this share is kept

# One int64 word per tile in the look-back workspace: (value << 2) | flag, written by one atomic,
# so one load sees a consistent (flag, value) pair and no fence is needed. Flags: 0 = not yet
# published, 1 = aggregate (value = the tile's own kept count), 2 = inclusive (value = kept count
# of every tile up to and including this one).


# ----------------------------------------------------------------------------- kernels


@triton.jit
def _tile_count(mask_ptr, base, n, TILE: tl.constexpr):
    """Kept elements of mask[base : base + TILE] (clipped to n), read as int32 words (4 flags
    each, vectorized; mask_ptr 4-byte aligned, base a multiple of 4). Bytes of the last word past
    n are cleared; a byte counts when non-zero. Tile [TILE / 4]."""
    words = base // 4 + tl.arange(0, TILE // 4)
    left = n - words * 4  # flags of this word inside the mask (>= 4: all of them)
    w = tl.load(mask_ptr.to(tl.pointer_type(tl.int32)) + words, mask=left > 0, other=0)
    w = tl.where(left >= 4, w, w & ((1 << (tl.minimum(tl.maximum(left, 0), 3) * 8)) - 1))
    # Any non-zero byte counts as kept (a bool tensor viewed from uint8 may hold 2..255, and the
    # write pass keeps every byte != 0): fold each byte's bits into its lowest bit. The shifts
    # only move bits within a byte into that bit (sign-extended bits land above it).
    w = w | (w >> 4)
    w = w | (w >> 2)
    w = (w | (w >> 1)) & 0x01010101
    s = w + (w >> 16)  # bytes 0 + 2 and 1 + 3 (no carries: each sum <= 2)
    return tl.sum((s + (s >> 8)) & 0xFF, axis=0)


@triton.jit
def _ticket(state_ptr, USE_INT64: tl.constexpr):
    """This program's tile: a ticket from the counter at state_ptr[0] (the order programs
    *started* in), so every tile a program waits for belongs to a program already running."""
    tile = tl.atomic_add(state_ptr, 1, sem="relaxed", scope="gpu")  # int64
    if not USE_INT64:
        tile = tile.to(tl.int32)
    return tile


@triton.jit
def _look_back(state_ptr, tile, total, USE_INT64: tl.constexpr, WINDOW: tl.constexpr):
    """The kept elements of all tiles before ``tile`` (decoupled look-back), given the tile's own
    count ``total`` (int64). ``state_ptr`` (int64, zeroed): [0] the ticket counter, [1 + t] tile
    t's word. Publish the count (tile 0: as its inclusive prefix); read the predecessors' words
    WINDOW at a time, newest first, summing until an inclusive word (polling again while a word
    after the newest inclusive one is still unpublished); publish the inclusive prefix. Tickets
    make this deadlock-free without co-residency; under the interpreter (programs one after
    another) the first read finds the predecessor's inclusive word. Tile [WINDOW]."""
    words = state_ptr + 1
    flag = tl.where(tile == 0, 2, 1).to(tl.int64)
    tl.atomic_xchg(words + tile, total * 4 + flag, sem="relaxed", scope="gpu")
    prefix = total * 0
    top = tile - 1
    lanes = tl.arange(0, WINDOW)
    while top >= 0:
        idx = top - (WINDOW - 1) + lanes
        # Volatile: every poll reads L2. Words before tile 0 read as "inclusive, 0".
        w = tl.load(words + idx, mask=idx >= 0, other=2, volatile=True)
        f = w & 3
        last = tl.max(tl.where(f == 2, lanes, -1), axis=0)  # newest inclusive word, -1 if none
        unpublished = tl.sum(((lanes > last) & (f == 0)).to(tl.int32), axis=0)
        if unpublished == 0:
            prefix += tl.sum(tl.where(lanes >= last, w >> 2, 0), axis=0)
            top = tl.where(last >= 0, -1, top - WINDOW)
    if tile > 0:
        tl.atomic_xchg(words + tile, (prefix + total) * 4 + 2, sem="relaxed", scope="gpu")
    if not USE_INT64:
        prefix = prefix.to(tl.int32)  # n < 2**31: every output position fits
    return prefix


@triton.jit
def _chunk(mask_ptr, base, c, n, unit, CHUNK: tl.constexpr):
    """Offsets, kept flags, exclusive in-chunk ranks and count of chunk c of the tile at base.
    ``unit`` is 1 at run time, opaque to the compiler: it keeps every access of the loop one
    element per thread with consecutive elements on consecutive lanes, so a warp's kept elements
    land on consecutive output addresses (coalesced stores of whole sectors)."""
    offs = base + c * CHUNK + tl.arange(0, CHUNK) * unit
    keep = tl.load(mask_ptr + offs, mask=offs < n, other=0) != 0
    k = keep.to(tl.int32)
    return offs, keep, tl.cumsum(k, axis=0) - k, tl.sum(k, axis=0)


@triton.jit(do_not_specialize=["unit"])
def _compact_kernel(
    x_ptr, mask_ptr, out_ptr, state_ptr, count_ptr, n, last_tile, unit,
    USE_INT64: tl.constexpr, CHUNK: tl.constexpr, CHUNKS: tl.constexpr, WINDOW: tl.constexpr,
):
    """One tile of CHUNK * CHUNKS elements per program: count (mask read from DRAM as words),
    look back, then per chunk: out[prefix + rank] = x[i] for the kept i (mask re-read from
    cache, input read only where kept). The last tile writes the total count.
    Tiles [CHUNK * CHUNKS / 4], [WINDOW] and [CHUNK]."""
    tile = _ticket(state_ptr, USE_INT64)
    base = tile * (CHUNK * CHUNKS)
    total = _tile_count(mask_ptr, base, n, CHUNK * CHUNKS).to(tl.int64)
    prefix = _look_back(state_ptr, tile, total, USE_INT64, WINDOW)
    tl.store(count_ptr, prefix.to(tl.int64) + total, mask=tile == last_tile)
    for c in tl.range(0, CHUNKS):
        offs, keep, rank, kept = _chunk(mask_ptr, base, c, n, unit, CHUNK)
        x = tl.load(x_ptr + offs, mask=keep)
        tl.store(out_ptr + prefix + rank, x, mask=keep)
        prefix += kept


@triton.jit(do_not_specialize=["unit"])
def _masked_expand_kernel(
    g_ptr, mask_ptr, out_ptr, state_ptr, n, unit,
    USE_INT64: tl.constexpr, CHUNK: tl.constexpr, CHUNKS: tl.constexpr, WINDOW: tl.constexpr,
):
    """Backward, same mapping: out[i] = g[prefix + rank(i)] where mask[i], else 0."""
    tile = _ticket(state_ptr, USE_INT64)
    base = tile * (CHUNK * CHUNKS)
    total = _tile_count(mask_ptr, base, n, CHUNK * CHUNKS).to(tl.int64)
    prefix = _look_back(state_ptr, tile, total, USE_INT64, WINDOW)
    for c in tl.range(0, CHUNKS):
        offs, keep, rank, kept = _chunk(mask_ptr, base, c, n, unit, CHUNK)
        g = tl.load(g_ptr + prefix + rank, mask=keep, other=0)
        tl.store(out_ptr + offs, g, mask=offs < n)
        prefix += kept


# ----------------------------------------------------------------------------- host launchers


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(_BITS[t.element_size()])


def _launch(n: int, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int, dict]:
    """(uint8 mask, zeroed look-back state, tiles, kernel options) for n elements: the state is
    the ticket counter and one word per tile. The count reads the mask as int32 words, so a mask
    that is not 4-byte aligned, or whose length is not a multiple of 4 (its last word would reach
    past the end of the caller's memory), is copied into a zero-padded buffer first."""
    m8 = mask.view(torch.uint8)
    if m8.data_ptr() % 4 or n % 4:
        padded = torch.zeros((triton.cdiv(n, 4) * 4,), dtype=torch.uint8, device=mask.device)
        padded[:n].copy_(m8.reshape(-1)[:n])
        m8 = padded
    tiles = triton.cdiv(n, CHUNK * CHUNKS)
    state = torch.zeros((tiles + 1,), dtype=torch.int64, device=mask.device)
    # One look-back word per thread at least: no warp holds a replica of another warp's words
    # (replicas polled at different times could disagree and split the program's control flow).
    opts = dict(USE_INT64=needs_int64(n + CHUNK * CHUNKS), CHUNK=CHUNK, CHUNKS=CHUNKS,
                WINDOW=max(WINDOW, 32 * NUM_WARPS), num_warps=NUM_WARPS)
    return m8, state, tiles, opts


def _compact_forward(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n = x.numel()
    values = torch.empty((n,), dtype=x.dtype, device=x.device)
    count = torch.empty((), dtype=torch.int64, device=x.device)
    if n == 0:
        return values, count.zero_()
    m8, state, tiles, opts = _launch(n, mask)
    _compact_kernel[(tiles,)](_bits(x), m8, _bits(values), state, count, n, tiles - 1, 1, **opts)
    return values, count


def _masked_select_forward(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    n = x.numel()
    if n == 0:
        return torch.empty((0,), dtype=x.dtype, device=x.device)
    values, count = _compact_forward(x, mask)
    total = int(count)  # the one host synchronization: the output's size
    out = values[:total]
    # Keep the full-size buffer (no second pass) unless it would hold > 1/SHRINK_BELOW times the
    # result; then a copy of the kept elements (2 * total elements of traffic) frees it.
    return out if total >= SHRINK_BELOW * n else out.clone()


def _masked_expand(grad: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    n = mask.numel()
    out = torch.empty((n,), dtype=grad.dtype, device=grad.device)
    if n == 0:
        return out
    g = grad.contiguous()
    if g.numel() == 0:  # nothing kept: a valid pointer for the (fully masked) loads
        g = out
    m8, state, tiles, opts = _launch(n, mask)
    _masked_expand_kernel[(tiles,)](_bits(g), m8, _bits(out), state, n, 1, **opts)
    return out


# ----------------------------------------------------------------------------- custom ops, autograd


@torch.library.custom_op("roofkit::compact", mutates_args=())
def _compact_op(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _compact_forward(x, mask)


@_compact_op.register_fake
def _(x, mask):
    return x.new_empty((x.numel(),)), x.new_empty((), dtype=torch.int64)


@torch.library.custom_op("roofkit::masked_select", mutates_args=())
def _masked_select_op(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return _masked_select_forward(x, mask)


@_masked_select_op.register_fake
def _(x, mask):
    # The output size depends on the mask's values: an unbacked size for the compiler.
    return x.new_empty((torch.library.get_ctx().new_dynamic_size(),))


@torch.library.custom_op("roofkit::masked_expand", mutates_args=())
def _masked_expand_op(grad: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return _masked_expand(grad, mask)


@_masked_expand_op.register_fake
def _(grad, mask):
    return grad.new_empty((mask.numel(),))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[1])


def _masked_select_backward(ctx, grad):
    (mask,) = ctx.saved_tensors
    return _masked_expand_op(grad, mask), None


def _compact_backward(ctx, grad_values, grad_count):
    (mask,) = ctx.saved_tensors
    if grad_values is None:
        return None, None
    return _masked_expand_op(grad_values, mask), None


torch.library.register_autograd("roofkit::masked_select", _masked_select_backward, setup_context=_setup_context)
torch.library.register_autograd("roofkit::compact", _compact_backward, setup_context=_setup_context)


# ----------------------------------------------------------------------------- public functions


def _prepare(op: str, input, mask) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate; broadcast input and mask and flatten both to contiguous 1-D tensors (views when
    they already are; the expand/reshape stay visible to autograd)."""
    check_tensor(op, "input", input, dtypes=VALUE_DTYPES)
    check_tensor(op, "mask", mask, dtypes=(torch.bool,))
    check_same_device(op, "mask", mask, input)
    try:
        shape = torch.broadcast_shapes(input.shape, mask.shape)
    except RuntimeError:
        raise ValueError(
            f"roofkit.{op}: input of shape {tuple(input.shape)} and mask of shape {tuple(mask.shape)} do not broadcast"
        ) from None
    x = input.expand(shape).reshape(-1)
    m = mask.expand(shape).reshape(-1)
    return x.contiguous(), m.contiguous()


def masked_select(input: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The elements of ``input`` where ``mask`` is True, in row-major order of their broadcast shape.

    Mirrors ``torch.masked_select(input, mask)`` (and ``input[mask]`` for a mask of input's shape).

    Args:
        input: tensor of dtype float32, float16, bfloat16, float64, int64, int32, int16, int8,
            uint8 or bool, any shape and strides, on CUDA (or on CPU with TRITON_INTERPRET=1).
        mask: bool tensor broadcastable with input, on input's device.
    Returns:
        A new 1-D contiguous tensor of input's dtype holding the kept elements in order.
    Raises:
        TypeError: input not a tensor of a supported dtype; mask not a bool tensor.
        ValueError: shapes that do not broadcast; tensors on different or unsupported devices.
    Numerics:
        Exact: values are moved as raw bits (NaN payloads, -0.0 and infinities survive);
        deterministic (atomics only hand out tiles and publish counts; no position depends on their
        order). One host synchronization (the output's size), as in torch; :func:`compact` has
        none. The result is a view of the first ``count`` elements of a buffer of the broadcast
        size when at least a quarter is kept (no second pass); below that it is copied out.
        Backward: grad_input = grad scattered back to the kept positions, zero elsewhere (summed
        over broadcast dimensions by autograd).
    Cost:
        One launch: reads the mask once from DRAM (a second time from cache) and, of input, only
        the elements it keeps (so only the sectors holding them: a fraction 1 - (1-p)^8 of a
        float32 input for a random mask keeping p); writes the kept elements once, plus 8 bytes
        per tile of ``CHUNK * CHUNKS`` (8192) elements of look-back state. Below a quarter kept, masked_select adds a copy of
        the kept elements. ``masked_select_cost`` counts the mask once, those input sectors and
        the kept output. Broadcast or non-contiguous operands are first materialized contiguous.
    Source:
        Single-pass scan with decoupled look-back (Merrill & Garland 2016) for stream compaction
        (Billeter, Olsson & Assarsson, HPG 2009).
    """
    x, m = _prepare("masked_select", input, mask)
    return _masked_select_op(x, m)


def compact(input: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Order-preserving compaction without a host synchronization: ``values[:count]`` equals
    ``torch.masked_select(input, mask)``.

    Args:
        input, mask: as :func:`masked_select` (broadcast together; mask bool).
    Returns:
        ``(values, count)``: ``values`` is a 1-D tensor of input's dtype with one slot per element
        of the broadcast shape; its first ``count`` slots hold the kept elements in row-major
        order and the remaining slots are undefined (uninitialized memory). ``count`` is a 0-d
        int64 tensor on input's device (reading it on the host synchronizes; the call itself does
        not).
    Raises:
        As :func:`masked_select`.
    Numerics:
        As :func:`masked_select`; the backward reads the first ``count`` gradient slots only.
    Cost:
        As :func:`masked_select`, plus the 8-byte count.
    Source:
        As :func:`masked_select`.
    """
    x, m = _prepare("compact", input, mask)
    return _compact_op(x, m)


# ----------------------------------------------------------------------------- spec


def _make_mask(shape, keep: float, pattern: str, generator, device) -> torch.Tensor:
    """A bool mask keeping about ``keep`` of the elements: ``random`` (independent draws),
    ``prefix`` (the first elements in row-major order), ``runs`` (alternating runs of random
    lengths, so whole blocks are kept or dropped)."""
    gdev = generator.device
    numel = math.prod(shape)
    if pattern == "random":
        m = torch.rand(shape, generator=generator, device=gdev) < keep
    elif pattern == "prefix":
        m = (torch.arange(numel, device=gdev) < round(keep * numel)).reshape(shape)
    elif pattern == "runs":
        ends = torch.cumsum(torch.randint(1, 200, (numel // 2 + 1,), generator=generator, device=gdev), 0)
        run = torch.searchsorted(ends, torch.arange(numel, device=gdev), right=True)
        on = torch.rand((ends.numel() + 1,), generator=generator, device=gdev) < keep
        m = on[run].reshape(shape)
    else:
        raise ValueError(f"unknown mask pattern {pattern!r}")
    return m.to(device)


def _make_inputs(case, dtype, generator, device) -> Inputs:
    shape = tuple(case["shape"])
    x = random_tensor(shape, dtype, generator, device, case.get("dist", "normal"),
                      layout=case.get("layout", "contiguous"))
    mshape = tuple(case.get("mask_shape", shape))
    m = _make_mask(mshape, case.get("keep", 0.5), case.get("pattern", "random"), generator, device)
    return Inputs((x, with_layout(m, case.get("mask_layout", "contiguous"))))


def _bool_index(input, mask):
    return input[mask]


_F32 = (torch.float32,)
_BF16 = (torch.bfloat16,)
_MI = 1 << 20

CASES = [
    case("tiny_1", ["quick"], shape=(1,), keep=1.0),
    case("odd_37x13", ["quick"], shape=(37, 13)),
    case("keep_0pct_1000", shape=(1000,), keep=0.0),
    case("keep_5pct_3x1000", shape=(3, 1000), keep=0.05),
    case("keep_95pct_3x1000", shape=(3, 1000), keep=0.95),
    case("keep_100pct_3x1000", shape=(3, 1000), keep=1.0),
    case("prefix_half_999", shape=(999,), keep=0.5, pattern="prefix"),
    case("runs_multi_block_3x4099", ["quick"], shape=(3, 4099), keep=0.5, pattern="runs", dtypes=_F32),
    case("broadcast_input_7x1_mask_7x9", shape=(7, 1), mask_shape=(7, 9)),
    case("broadcast_mask_9_over_5x9", shape=(5, 9), mask_shape=(9,)),
    case("broadcast_both_4x1x6_3x1", shape=(4, 1, 6), mask_shape=(3, 1)),
    case("scalar_input_mask_6", shape=(), mask_shape=(6,)),
    case("transposed_12x20", shape=(12, 20), layout="transposed", mask_layout="transposed"),
    case("offset_9x65", shape=(9, 65), layout="offset"),
    case("expanded_rows_5x40", shape=(5, 40), layout="expanded"),
    case("nan_inf_8x129", shape=(8, 129), dist="nan"),
    case("pos_inf_8x129", shape=(8, 129), dist="pos_inf"),
    case("empty_0x5", ["quick"], shape=(0, 5)),
    case("empty_mask_broadcast_3x0", shape=(3, 1), mask_shape=(3, 0)),
    # On the GPU: the acceptance shapes of issue 5 (order checked exactly by the float64
    # comparison: a misplaced element is off by far more than any tolerance).
    case("gpu_64Mi_keep_0pct", ["gpu"], shape=(64 * _MI,), keep=0.0, dtypes=_F32),
    case("gpu_64Mi_keep_5pct", ["gpu"], shape=(64 * _MI,), keep=0.05, dtypes=_F32),
    case("gpu_64Mi_keep_50pct", ["gpu"], shape=(64 * _MI,), keep=0.5, dtypes=_F32),
    case("gpu_64Mi_keep_95pct", ["gpu"], shape=(64 * _MI,), keep=0.95, dtypes=_F32),
    case("gpu_64Mi_keep_100pct", ["gpu"], shape=(64 * _MI,), keep=1.0, dtypes=_F32),
    case("gpu_runs_8Mi", ["gpu"], shape=(8 * _MI,), keep=0.5, pattern="runs"),
    case("gpu_activation_8192x4096_keep_50pct", ["gpu"], shape=(8192, 4096), dtypes=_BF16),
    case("gpu_broadcast_mask_8192x4096", ["gpu"], shape=(8192, 4096), mask_shape=(4096,), dtypes=_BF16),
    case("gpu_transposed_4096x3000", ["gpu"], shape=(4096, 3000), layout="transposed"),
    case("gpu_over_2pow31_elements", ["gpu", "slow"], shape=(2**31 + 4096,), keep=0.5, dtypes=_BF16, grad=False),
]

SUITES = {
    # llama3-8b: selecting the kept activations of a (8192 tokens x 4096 hidden) bf16 tensor
    # (a dropout / token-pruning mask keeping half), forward and forward+backward.
    "llama3-8b": [
        case("activation_8192x4096_keep_50pct", shape=(8192, 4096), keep=0.5, dtypes=_BF16),
        case("activation_8192x4096_keep_50pct_fwd_bwd", shape=(8192, 4096), keep=0.5, dtypes=_BF16, mode="fwd_bwd"),
    ],
    # Issue 5: 64Mi fp32 keeping 0, 5, 50, 95 and 100% (bytes: input + mask + kept output).
    "acceptance": [
        case(f"64Mi_keep_{round(100 * k)}pct", shape=(64 * _MI,), keep=k, dtypes=_F32)
        for k in (0.0, 0.05, 0.5, 0.95, 1.0)
    ],
}

SPEC = OpSpec(
    name="masked_select",
    impl=masked_select,
    reference=masked_select_reference,
    torch_impl=torch.masked_select,
    make_inputs=_make_inputs,
    cost=masked_select_cost,
    dtypes=FLOAT_DTYPES,
    cases=CASES,
    suites=SUITES,
    baselines={
        "torch": lambda: torch.masked_select,
        "torch.compile": baselines.compiled(torch.masked_select),
        # GPU.md's "boolean-mask filter" figure is input[mask] (same shapes only).
        "torch.bool_index": lambda: _bool_index,
        "flaggems": baselines.flaggems(torch.masked_select),
    },
    grad_args=(0,),
    marker="compact",
)

SPECS = (SPEC,)
