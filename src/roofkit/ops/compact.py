"""masked_select and compact: the elements of input where mask is True, in their original order.

    compact(x, m) -> (values, count):  values[:count] = x[m] (row-major order of the broadcast shape)
    masked_select(x, m) = x[m]  (torch.masked_select)

Program mapping: the (broadcast) elements in row-major order, split into tiles; the kernels are
chosen by the module switch VARIANT (the default, "lookback", is the first below):
- "lookback": one tile of CHUNK * CHUNKS elements per program, one launch, a single-pass scan with
  decoupled look-back:
  1. the program takes a ticket (atomic counter) as its tile index, so it only ever waits for
     tiles whose programs already run;
  2. it counts its tile's kept elements (the mask read from DRAM once, as int32 words), publishes
     the count in the tile's int64 word ((value << 2) | flag: one atomic, one load reads both),
     reads its predecessors' words WINDOW at a time until an inclusive prefix, publishes its own;
  3. it walks its tile CHUNK elements at a time (mask re-read from cache): exclusive in-chunk scan
     (tl.cumsum), input loaded only where kept, kept elements stored at prefix + rank. Every
     access of that loop is one element per thread, consecutive elements on consecutive lanes,
     so a warp's kept elements go to consecutive addresses (whole sectors written).
- "lookback_rows": the same look-back, one tile of LR_CHUNK elements per program, the mask read
  once into one uint32 of flags per row of 32 elements (kept in registers); the kept input is
  loaded before the look-back (its latency hides the wait); a kept element's rank is the tile's
  prefix + the kept elements of earlier rows (a scan over rows, not elements) + popc(its row's
  flags below its lane). One element per lane, a row on a warp: loads and stores coalesced.
- "two_pass": a count pass (TP_BLOCK elements per program: the mask read once as 16-byte vectors,
  the tile's count and its row flag words stored, 1/8 of the mask's bytes, kept in L2; the pass's
  last program, found by an arrival counter, scans the counts into tile prefixes and writes the
  total), then a write pass with no dependency between programs (rows as in "lookback_rows", the
  next step's flag words loaded before this step's stores). "two_pass_bytes": the write pass
  re-reads the mask bytes instead of the flag words.
The order is the input's and the result deterministic (positions come from counts, not from the
order atomics happen in). The backward of masked_select maps the same way and gathers grad back
(zeros elsewhere). Values are moved as raw bits (an integer view of their width): NaN payloads
and -0.0 survive.
Source: decoupled look-back (Merrill & Garland, "Single-pass Parallel Prefix Scan with
Decoupled Look-back", NVIDIA NVR-2016-002) applied to stream compaction (Billeter, Olsson &
Assarsson, "Efficient stream compaction on wide SIMD many-core architectures", HPG 2009); the
two-pass variants are reduce-then-scan (Merrill & Grimshaw, "Parallel Scan for Stream
Architectures", UVA CS2009-14) with the flags packed one bit per element.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait, libdevice

from ..harness import baselines
from ..harness.inputs import random_tensor, with_layout
from ..harness.spec import Cost, Inputs, OpSpec, case
from ._common import FLOAT_DTYPES, check_same_device, check_tensor, interpreter_active, needs_int64, on_input_device
from ._runtime import planned

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

# Which kernels run (module-level switches, read at each call; the sweep tries them all):
# VARIANT "lookback": one pass with decoupled look-back (_compact_kernel);
#         "lookback_rows": one pass, look-back, the mask read once into row bit words in
#         registers and the kept input loaded before the look-back (_compact_lookback_rows_kernel);
#         "two_pass": count pass (mask -> per-tile counts + one bit per element, the counts scanned
#         by the pass's last program), then a write pass with no cross-program dependency;
#         "two_pass_bytes": the same, the write pass re-reading the mask bytes instead of the bits.
VARIANT = "two_pass"
# masked_select's read of the output size: "item" (a device-to-host copy, then the sync) or
# "pinned" (the kernel stores the count into page-locked host memory; the host waits for the count
# pass only with the two-pass variants, for the whole stream with the others; CUDA only).
SYNC = "pinned"
SHRINK_BELOW = 0.25  # masked_select copies its result out when fewer than this share is kept

# VARIANT "lookback"
CHUNK = 1024  # elements per step of a program's write loop: 8 per thread with 4 warps
CHUNKS = 8  # steps per tile: a tile (one look-back) is CHUNK * CHUNKS = 8192 elements
#            (H200 sweep, 2026-11-30: 8 beat 16 by 7-10 %)
NUM_WARPS = 4
WINDOW = 128  # predecessor words read at once by the look-back (raised to one per thread)

# VARIANT "lookback_rows" (sm_90 registers, ptxas: 4096 w8 64, 4096 w4 126, 2048 w4 64, 8192 w8 122)
LR_CHUNK = 4096  # elements per program (one look-back): 16 per thread at 8 warps
LR_WARPS = 8

# VARIANT "two_pass" / "two_pass_bytes" (sm_90 registers, ptxas: write pass 4096 w4 124, 4096 w8
# 128, 2048 w4 128; count pass 16384 w8 56; no spills)
TP_BLOCK = 16384  # elements per program in both passes (one count, one prefix); a multiple of TP_CHUNK
TP_CHUNK = 4096  # elements per step of the write pass: rows of 32, one element per lane
TP_WARPS = 4  # write pass
TP_COUNT_WARPS = 8  # count pass (its last program also scans the counts)
TP_SCAN_BLOCK = 1024  # tile counts per step of that scan (4096 would need ~190 registers at 8 warps)
TP_PDL = False  # launch the write pass as a programmatic dependent of the count pass (sm_90+)

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


@triton.jit
def _popc(v, NATIVE_POPC: tl.constexpr):
    """Set bits of each uint32 in ``v`` (int32): the hardware's popc on the GPU, a SWAR count
    under the interpreter (which has no libdevice)."""
    if NATIVE_POPC:
        return libdevice.popc(v.to(tl.int32, bitcast=True))
    v = v - ((v >> 1) & 0x55555555)
    v = (v & 0x33333333) + ((v >> 2) & 0x33333333)
    v = (v + (v >> 4)) & 0x0F0F0F0F
    return ((v * 0x01010101) >> 24).to(tl.int32)


@triton.jit
def _row_bits(mask_ptr, start, n, ROWS: tl.constexpr, EVICT: tl.constexpr):
    """mask[start : start + 32 * ROWS] as one uint32 per row of 32 elements (bit j: element
    32 r + j kept; elements at or past n read as dropped, any non-zero byte as kept). Read as
    int32 words: mask_ptr 4-byte aligned, start a multiple of 32. A span inside the mask is read
    without a mask on the loads (16-byte vectors); the last one word by word. Tile [ROWS, 8]."""
    cols = tl.arange(0, 8)
    words = start // 4 + tl.arange(0, ROWS)[:, None] * 8 + cols[None, :]
    ptrs = mask_ptr.to(tl.pointer_type(tl.int32)) + words
    if start + 32 * ROWS <= n:
        w = tl.load(ptrs, eviction_policy=EVICT).to(tl.uint32, bitcast=True)
    else:
        left = n - words * 4  # flags of this word inside the mask (>= 4: all of them)
        w = tl.load(ptrs, mask=left > 0, other=0, eviction_policy=EVICT).to(tl.uint32, bitcast=True)
        tail = ((1 << (tl.minimum(tl.maximum(left, 0), 3) * 8)) - 1).to(tl.uint32)
        w = tl.where(left >= 4, w, w & tail)
    w = w | (w >> 4)
    w = w | (w >> 2)
    w = (w | (w >> 1)) & 0x01010101  # each byte's flag in its lowest bit
    nib = (w | (w >> 7) | (w >> 14) | (w >> 21)) & 0xF  # the word's 4 flags in bits 0..3
    return tl.sum(nib << (cols * 4).to(tl.uint32)[None, :], axis=1)  # disjoint bits: the sum is an or


# Row-wise ranks: the math runs on [CHUNK / 32, 32] tiles (a row of 32 elements per warp, an
# element per lane) and only the results are reshaped to 1-D, which Triton maps onto the same
# registers: every load and store using them stays one element per lane, consecutive elements on
# consecutive lanes (coalesced), with no layout conversion through shared memory. (Reshaping the
# row words to 1-D first and doing the math there made Triton convert the flags through shared
# memory: twice the instructions per element.)


@triton.jit
def _row_elements(bits, start, CHUNK: tl.constexpr):
    """Offsets and kept flags ([CHUNK], row-major) of the CHUNK elements at ``start``, from their
    rows' flag words ``bits`` ([CHUNK / 32]). Tile [CHUNK / 32, 32]."""
    ROWS: tl.constexpr = CHUNK // 32
    lane = tl.arange(0, 32)
    keep = ((bits[:, None] >> lane.to(tl.uint32)[None, :]) & 1) != 0
    offs = start + tl.arange(0, ROWS)[:, None] * 32 + lane[None, :]
    return tl.reshape(offs, (CHUNK,)), tl.reshape(keep, (CHUNK,))


@triton.jit
def _row_ranks(bits, first, CHUNK: tl.constexpr, NATIVE_POPC: tl.constexpr):
    """Output positions ([CHUNK], meaningful where kept) of those elements: the rank of their
    row's first kept element (``first``, [CHUNK / 32]) + popc(their row's flags below them)."""
    lane = tl.arange(0, 32).to(tl.uint32)
    below = (tl.full((32,), 1, tl.uint32) << lane) - 1  # the flags of the lanes before each lane
    rank = first[:, None] + _popc(bits[:, None] & below[None, :], NATIVE_POPC)
    return tl.reshape(rank, (CHUNK,))


@triton.jit
def _compact_count_kernel(
    mask_ptr, bits_ptr, prefix_ptr, count_ptr, arrivals_ptr, n, tiles,
    WRITE_BITS: tl.constexpr, NATIVE_POPC: tl.constexpr, USE_INT64: tl.constexpr,
    BLOCK: tl.constexpr, SCAN_BLOCK: tl.constexpr, PDL: tl.constexpr,
):
    """Count pass: kept elements of tile pid (BLOCK elements, mask read once as int32 words) into
    prefix[pid], with WRITE_BITS its row bit words into bits; the last program to arrive (arrival
    counter, acq_rel, put back to 0 by that program) turns prefix[:tiles] into exclusive prefixes
    and writes the total to count. PDL: the write pass may be scheduled as soon as every program
    of this one runs (it waits for this grid's completion itself). Tiles [BLOCK / 32, 8] and
    [SCAN_BLOCK]."""
    if PDL:
        gdc_launch_dependents()
    tile = tl.program_id(0)
    if USE_INT64:
        tile = tile.to(tl.int64)
    ROWS: tl.constexpr = BLOCK // 32
    bits = _row_bits(mask_ptr, tile * BLOCK, n, ROWS, "evict_first" if WRITE_BITS else "")
    if WRITE_BITS:  # kept in L2 for the write pass (1/8 of the mask's bytes)
        tl.store(bits_ptr + tile * ROWS + tl.arange(0, ROWS), bits.to(tl.int32, bitcast=True),
                 eviction_policy="evict_last")
    tl.store(prefix_ptr + tile, tl.sum(_popc(bits, NATIVE_POPC), axis=0).to(tl.int64))
    tl.debug_barrier()  # the count's store precedes the release below
    arrived = tl.atomic_add(arrivals_ptr, 1, sem="acq_rel", scope="gpu")
    if arrived == tiles - 1:
        carry = tl.zeros((), dtype=tl.int64)
        idx = tl.arange(0, SCAN_BLOCK)
        c = tl.load(prefix_ptr + idx, mask=idx < tiles, other=0, cache_modifier=".cg")
        for start in range(0, tiles, SCAN_BLOCK):
            idx = start + tl.arange(0, SCAN_BLOCK)
            # the next block's counts are read before this block's prefixes are written
            nxt = tl.load(prefix_ptr + idx + SCAN_BLOCK, mask=idx + SCAN_BLOCK < tiles, other=0,
                          cache_modifier=".cg")
            tl.store(prefix_ptr + idx, carry + tl.cumsum(c, axis=0) - c, mask=idx < tiles)
            carry += tl.sum(c, axis=0)
            c = nxt
        tl.store(count_ptr, carry)
        tl.atomic_xchg(arrivals_ptr, 0, sem="relaxed", scope="gpu")  # ready for the next launch


@triton.jit
def _chunk_bits(mask_ptr, bits_ptr, start, n, ok, FROM_BITS: tl.constexpr, ROWS: tl.constexpr):
    """Row bit words of the chunk at ``start`` (none where ``ok`` is false): from the count
    pass's bits, or rebuilt from the mask bytes."""
    if FROM_BITS:
        rows = start // 32 + tl.arange(0, ROWS)
        # evict_first: the count pass stored the bits as evict_last (to survive until here)
        w = tl.load(bits_ptr + rows, mask=ok & (rows >= 0), other=0, eviction_policy="evict_first")
        return w.to(tl.uint32, bitcast=True)
    return _row_bits(mask_ptr, start, tl.where(ok, n, 0), ROWS, "")


@triton.jit
def _compact_rows_kernel(
    src_ptr, mask_ptr, bits_ptr, out_ptr, prefix_ptr, n,
    EXPAND: tl.constexpr, FROM_BITS: tl.constexpr, NATIVE_POPC: tl.constexpr, USE_INT64: tl.constexpr,
    BLOCK: tl.constexpr, CHUNK: tl.constexpr, PDL: tl.constexpr,
):
    """Write pass: tile pid (BLOCK elements) CHUNK at a time as rows of 32 elements, one per lane;
    a kept element's rank is prefix[pid] + kept in earlier rows + popc(its row's bits below it).
    Compaction: out[rank] = src[i] (src read only where kept); EXPAND: out[i] = src[rank] where
    kept, else 0. The next chunk's bits are loaded before this chunk's stores. No waiting on
    other programs. PDL (launched as a programmatic dependent of the count pass): wait for the
    count pass's completion and memory before reading its results. Tiles [CHUNK / 32], [CHUNK / 32, 32]."""
    if PDL:
        gdc_wait()
    tile = tl.program_id(0)
    if USE_INT64:
        tile = tile.to(tl.int64)
    ROWS: tl.constexpr = CHUNK // 32
    STEPS: tl.constexpr = BLOCK // CHUNK
    base = tile * BLOCK
    prefix = tl.load(prefix_ptr + tile)
    if not USE_INT64:
        prefix = prefix.to(tl.int32)  # n < 2**31: every position fits
    bits = _chunk_bits(mask_ptr, bits_ptr, base, n, True, FROM_BITS, ROWS)
    for c in tl.range(0, STEPS):
        start = base + c * CHUNK
        nxt = _chunk_bits(mask_ptr, bits_ptr, start + CHUNK, n, c + 1 < STEPS, FROM_BITS, ROWS)
        kept = _popc(bits, NATIVE_POPC)
        first = prefix + tl.cumsum(kept, axis=0) - kept  # rank of each row's first kept element
        offs, keep = _row_elements(bits, start, CHUNK)
        rank = _row_ranks(bits, first, CHUNK, NATIVE_POPC)
        if EXPAND:
            v = tl.load(src_ptr + rank, mask=keep, other=0)
            tl.store(out_ptr + offs, v, mask=offs < n)
        else:
            v = tl.load(src_ptr + offs, mask=keep)
            tl.store(out_ptr + rank, v, mask=keep)
        prefix += tl.sum(kept, axis=0)
        bits = nxt


@triton.jit
def _compact_lookback_rows_kernel(
    src_ptr, mask_ptr, out_ptr, state_ptr, count_ptr, n, last_tile,
    EXPAND: tl.constexpr, NATIVE_POPC: tl.constexpr, USE_INT64: tl.constexpr, CHUNK: tl.constexpr,
    WINDOW: tl.constexpr,
):
    """VARIANT "lookback_rows": one tile of CHUNK elements per program (ticketed), one pass: the
    mask read once (as row bit words, kept in registers), the count published, the kept input
    loaded (in flight during the look-back), then the stores at prefix + rank (ranks as in
    _compact_rows_kernel). EXPAND: out[i] = src[rank] where kept, else 0 (loads after the
    look-back). The last tile writes the total count. Tiles [CHUNK / 32, 8], [CHUNK], [WINDOW]."""
    tile = _ticket(state_ptr, USE_INT64)
    ROWS: tl.constexpr = CHUNK // 32
    start = tile * CHUNK
    bits = _row_bits(mask_ptr, start, n, ROWS, "")
    kept = _popc(bits, NATIVE_POPC)
    total = tl.sum(kept, axis=0).to(tl.int64)
    offs, keep = _row_elements(bits, start, CHUNK)
    if not EXPAND:
        v = tl.load(src_ptr + offs, mask=keep)
    prefix = _look_back(state_ptr, tile, total, USE_INT64, WINDOW)
    tl.store(count_ptr, prefix.to(tl.int64) + total, mask=tile == last_tile)
    rank = _row_ranks(bits, prefix + tl.cumsum(kept, axis=0) - kept, CHUNK, NATIVE_POPC)
    if EXPAND:
        g = tl.load(src_ptr + rank, mask=keep, other=0)
        tl.store(out_ptr + offs, g, mask=offs < n)
    else:
        tl.store(out_ptr + rank, v, mask=keep)


# ----------------------------------------------------------------------------- host launchers


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(_BITS[t.element_size()])


def _mask_words(n: int, mask: torch.Tensor) -> torch.Tensor:
    """The mask as uint8, readable as int32 words: a mask that is not 4-byte aligned, or whose
    length is not a multiple of 4 (its last word would reach past the end of the caller's memory),
    is copied into a zero-padded buffer first."""
    m8 = mask.view(torch.uint8)
    if m8.data_ptr() % 4 or n % 4:
        padded = torch.zeros((triton.cdiv(n, 4) * 4,), dtype=torch.uint8, device=mask.device)
        padded[:n].copy_(m8.reshape(-1)[:n])
        m8 = padded
    return m8


def _launch(n: int, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int, dict]:
    """VARIANT "lookback": (uint8 mask, zeroed look-back state, tiles, kernel options) for n
    elements; the state is the ticket counter and one word per tile."""
    m8 = _mask_words(n, mask)
    tiles = triton.cdiv(n, CHUNK * CHUNKS)
    state = torch.zeros((tiles + 1,), dtype=torch.int64, device=mask.device)
    # One look-back word per thread at least: no warp holds a replica of another warp's words
    # (replicas polled at different times could disagree and split the program's control flow).
    opts = dict(USE_INT64=needs_int64(n + CHUNK * CHUNKS), CHUNK=CHUNK, CHUNKS=CHUNKS,
                WINDOW=max(WINDOW, 32 * NUM_WARPS), num_warps=NUM_WARPS)
    return m8, state, tiles, opts


def _capturing(device: torch.device) -> bool:
    """Whether the work queued now for ``device`` is being captured into a CUDA graph (where the
    host can neither wait for the device nor read its memory). CPU work is never captured."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


_ARRIVALS: dict = {}


def _arrivals(device: torch.device) -> torch.Tensor:
    """The count pass's arrival counter (int32), zero between launches: each launch's last program
    puts it back. One per (device, stream) on CUDA, so launches on different streams never share
    one; a fresh zeroed one under CUDA-graph capture (captured as a memset) and on CPU."""
    if device.type != "cuda" or _capturing(device):
        return torch.zeros((1,), dtype=torch.int32, device=device)
    key = (device, torch.cuda.current_stream(device).cuda_stream)
    buf = _ARRIVALS.get(key)
    if buf is None:
        buf = _ARRIVALS[key] = torch.zeros((1,), dtype=torch.int32, device=device)
    return buf


def _two_pass(src: torch.Tensor, mask: torch.Tensor, out: torch.Tensor, n: int, count, expand: bool,
              counted=None) -> None:
    """VARIANT "two_pass" / "two_pass_bytes": the count pass (per-tile counts scanned in-kernel,
    the total into ``count``: a device tensor, page-locked host memory, or None), then the write
    pass (compaction, or with ``expand`` the backward's scatter back). ``counted``: a CUDA event
    recorded between the two passes (the total is final when it completes)."""
    if TP_BLOCK % TP_CHUNK or TP_CHUNK % 32:
        raise ValueError(f"roofkit.compact: TP_BLOCK ({TP_BLOCK}) must be a multiple of TP_CHUNK ({TP_CHUNK}), "
                         "itself a multiple of 32")
    m8 = _mask_words(n, mask)
    tiles = triton.cdiv(n, TP_BLOCK)
    from_bits = VARIANT == "two_pass"
    # prefix[tiles]: where the total goes when no count is wanted (the backward)
    prefix = torch.empty((tiles + 1,), dtype=torch.int64, device=mask.device)
    bits = torch.empty((tiles * TP_BLOCK // 32,), dtype=torch.int32, device=mask.device) if from_bits else prefix
    use_int64 = needs_int64(n + TP_BLOCK)
    native = not interpreter_active()
    pdl = TP_PDL and mask.is_cuda  # the interpreter has no grid dependency control
    _compact_count_kernel[(tiles,)](
        m8, bits, prefix, prefix[tiles:] if count is None else count, _arrivals(mask.device), n, tiles,
        WRITE_BITS=from_bits, NATIVE_POPC=native, USE_INT64=use_int64, BLOCK=TP_BLOCK, SCAN_BLOCK=TP_SCAN_BLOCK,
        PDL=pdl, num_warps=TP_COUNT_WARPS,
    )
    if counted is not None:
        counted.record(torch.cuda.current_stream(mask.device))
    _compact_rows_kernel[(tiles,)](
        _bits(src), m8, bits, _bits(out), prefix, n,
        EXPAND=expand, FROM_BITS=from_bits, NATIVE_POPC=native, USE_INT64=use_int64, BLOCK=TP_BLOCK, CHUNK=TP_CHUNK,
        PDL=pdl, num_warps=TP_WARPS, **({"launch_pdl": True} if pdl else {}),
    )


def _lookback_rows(src: torch.Tensor, mask: torch.Tensor, out: torch.Tensor, n: int, count, expand: bool) -> None:
    """VARIANT "lookback_rows": one launch (after the look-back state's memset)."""
    if LR_CHUNK % 32:
        raise ValueError(f"roofkit.compact: LR_CHUNK ({LR_CHUNK}) must be a multiple of 32")
    m8 = _mask_words(n, mask)
    tiles = triton.cdiv(n, LR_CHUNK)
    # state[0]: the ticket counter; [1 + t]: tile t's word; [tiles + 1]: the total if no count is wanted
    state = torch.zeros((tiles + 2,), dtype=torch.int64, device=mask.device)
    _compact_lookback_rows_kernel[(tiles,)](
        _bits(src), m8, _bits(out), state, state[tiles + 1:] if count is None else count, n, tiles - 1,
        EXPAND=expand, NATIVE_POPC=not interpreter_active(), USE_INT64=needs_int64(n + LR_CHUNK), CHUNK=LR_CHUNK,
        WINDOW=max(WINDOW, 32 * LR_WARPS), num_warps=LR_WARPS,
    )


VARIANTS = ("lookback", "lookback_rows", "two_pass", "two_pass_bytes")


def _check_variant() -> None:
    if VARIANT not in VARIANTS:
        raise ValueError(f"roofkit.compact: unknown VARIANT {VARIANT!r} (expected one of {', '.join(VARIANTS)})")


def _compact_forward(x: torch.Tensor, mask: torch.Tensor, count: torch.Tensor | None = None,
                     counted=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, count); the count goes into ``count`` when given (masked_select's host buffer);
    ``counted`` (two-pass variants): an event recorded once the count is final."""
    _check_variant()
    n = x.numel()
    values = torch.empty((n,), dtype=x.dtype, device=x.device)
    if count is None:
        count = torch.empty((), dtype=torch.int64, device=x.device)
    if n == 0:
        return values, count.zero_()
    if VARIANT == "lookback":
        m8, state, tiles, opts = _launch(n, mask)
        _compact_kernel[(tiles,)](_bits(x), m8, _bits(values), state, count, n, tiles - 1, 1, **opts)
    elif VARIANT == "lookback_rows":
        _lookback_rows(x, mask, values, n, count, expand=False)
    else:
        _two_pass(x, mask, values, n, count, expand=False, counted=counted)
    return values, count


def _refuse_capture(device: torch.device, what: str) -> None:
    """masked_select's output size is data: refuse CUDA-graph capture with a pointer to compact."""
    if _capturing(device):
        raise RuntimeError(
            f"roofkit.masked_select: {what} cannot be captured in a CUDA graph: the output's size depends "
            "on the mask's values, which the host would have to read (a synchronization) during the capture "
            "and which a replay may change. Use roofkit.compact(input, mask) -> (values, count) instead: "
            "values[:count] holds the same elements and it needs no host synchronization"
        )


def _masked_select_forward(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    _refuse_capture(x.device, "the call")
    n = x.numel()
    if n == 0:
        return torch.empty((0,), dtype=x.dtype, device=x.device)
    if SYNC not in ("item", "pinned"):
        raise ValueError(f"roofkit.masked_select: unknown SYNC {SYNC!r} (expected item or pinned)")
    if SYNC == "pinned" and x.is_cuda:
        # The kernel stores the count straight into page-locked host memory (mapped into the
        # device's address space). With the two-pass variants the host waits only for the count
        # pass, while the device runs the write pass: the result (a view, or the copy below) is
        # ordered after it on the stream, and the host round trip costs no device time.
        host = torch.empty((), dtype=torch.int64, pin_memory=True)
        counted = torch.cuda.Event() if VARIANT in ("two_pass", "two_pass_bytes") else None
        values, _ = _compact_forward(x, mask, host, counted)
        if counted is not None:
            counted.synchronize()
        else:
            torch.cuda.current_stream(x.device).synchronize()
        total = int(host)
    else:
        values, count = _compact_forward(x, mask)
        total = int(count)  # the one host synchronization: the output's size
    out = values[:total]
    # Keep the full-size buffer (no second pass) unless it would hold > 1/SHRINK_BELOW times the
    # result; then a copy of the kept elements (2 * total elements of traffic) frees it.
    return out if total >= SHRINK_BELOW * n else out.clone()


def _masked_expand(grad: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    _check_variant()
    n = mask.numel()
    out = torch.empty((n,), dtype=grad.dtype, device=grad.device)
    if n == 0:
        return out
    g = grad.contiguous()
    if g.numel() == 0:  # nothing kept: a valid pointer for the (fully masked) loads
        g = out
    if VARIANT == "lookback":
        m8, state, tiles, opts = _launch(n, mask)
        _masked_expand_kernel[(tiles,)](_bits(g), m8, _bits(out), state, n, 1, **opts)
    elif VARIANT == "lookback_rows":
        _lookback_rows(g, mask, out, n, None, expand=True)
    else:
        _two_pass(g, mask, out, n, None, expand=True)
    return out


# ----------------------------------------------------------------------------- custom ops, autograd


@torch.library.custom_op("roofkit::compact", mutates_args=())
@on_input_device
def _compact_op(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _compact_forward(x, mask)


@_compact_op.register_fake
def _(x, mask):
    return x.new_empty((x.numel(),)), x.new_empty((), dtype=torch.int64)


@torch.library.custom_op("roofkit::masked_select", mutates_args=())
@on_input_device
def _masked_select_op(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return _masked_select_forward(x, mask)


@_masked_select_op.register_fake
def _(x, mask):
    # The output size depends on the mask's values: an unbacked size for the compiler.
    return x.new_empty((torch.library.get_ctx().new_dynamic_size(),))


@torch.library.custom_op("roofkit::masked_expand", mutates_args=())
@on_input_device
def _masked_expand_op(grad: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return _masked_expand(grad, mask)


@_masked_expand_op.register_fake
def _(grad, mask):
    return grad.new_empty((mask.numel(),))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[1])


def _masked_select_backward(ctx, grad):
    (mask,) = ctx.saved_tensors
    # A replay could run with another mask in the saved buffer than the one that sized grad: the
    # gather would read grad past its end.
    _refuse_capture(grad.device, "the backward")
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


@on_input_device
@planned
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
        RuntimeError: called, or its backward run, while the current CUDA stream is capturing a
            CUDA graph (``torch.cuda.is_current_stream_capturing()``): the output's size depends on
            the mask's values, which the host cannot read during a capture. Use :func:`compact`,
            which captures.
    Numerics:
        Exact: values are moved as raw bits (NaN payloads, -0.0 and infinities survive);
        deterministic (atomics only hand out tiles and publish counts; no position depends on their
        order). One host synchronization (the output's size), as in torch, on CUDA for the count
        pass only: the host reads the size while the device writes the values (the result is
        ordered after them on the current stream); :func:`compact` has none. The result is a view of the first ``count`` elements of a buffer of the broadcast
        size when at least a quarter is kept (no second pass); below that it is copied out.
        Backward: grad_input = grad scattered back to the kept positions, zero elsewhere (summed
        over broadcast dimensions by autograd).
    Cost:
        Reads the mask once from DRAM and, of input, only the elements it keeps (so only the
        sectors holding them: a fraction 1 - (1-p)^8 of a float32 input for a random mask keeping
        p); writes the kept elements once. The default kernel (one launch) also re-reads the mask
        from cache and keeps 8 bytes of look-back state per tile of ``CHUNK * CHUNKS`` (8192)
        elements; the two-pass variants (two launches) add one bit per element written and
        read back (from L2 where it stays; "two_pass_bytes" re-reads the mask bytes instead). Below a quarter kept, masked_select adds a copy of
        the kept elements. ``masked_select_cost`` counts the mask once, those input sectors and
        the kept output. Broadcast or non-contiguous operands are first materialized contiguous.
    Source:
        Single-pass scan with decoupled look-back (Merrill & Garland 2016) for stream compaction
        (Billeter, Olsson & Assarsson, HPG 2009).
    """
    x, m = _prepare("masked_select", input, mask)
    return _masked_select_op(x, m)


@on_input_device
@planned
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
        TypeError, ValueError: as :func:`masked_select`.
    Numerics:
        As :func:`masked_select`; the backward reads the first ``count`` gradient slots only.
        Nothing is read back on the host, forward or backward: both capture in a CUDA graph
        (the output sizes depend on the shapes only; a replay recomputes ``count``).
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
    # On the GPU: the acceptance shapes (order checked exactly by the float64
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
    # Acceptance: 64Mi fp32 keeping 0, 5, 50, 95 and 100% (bytes: input + mask + kept output).
    "acceptance": [
        case(f"64Mi_keep_{round(100 * k)}pct", shape=(64 * _MI,), keep=k, dtypes=_F32)
        for k in (0.0, 0.05, 0.5, 0.95, 1.0)
    ],
    # host: one decoding step's activations (8 tokens x 4096), where the host's cost per call is the
    # time (the kept count is read back to the host by every provider, so none captures in a graph).
    "host": [
        case("activation_8x4096_keep_50pct", shape=(8, 4096), keep=0.5, dtypes=_BF16),
        case("activation_8x4096_keep_50pct_fwd_bwd", shape=(8, 4096), keep=0.5, dtypes=_BF16, mode="fwd_bwd"),
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
        **baselines.eager_and_compiled(torch.masked_select),
        # GPU.md's "boolean-mask filter" figure is input[mask] (same shapes only).
        "torch.bool_index": lambda: _bool_index,
        "flaggems": baselines.flaggems(torch.masked_select),
    },
    grad_args=(0,),
    marker="compact",
)

SPECS = (SPEC,)


# The tunables of this family's heuristics: what roofkit.config.override may set.
TUNABLES = ("VARIANT", "SYNC", "SHRINK_BELOW", "CHUNK", "CHUNKS", "NUM_WARPS", "WINDOW", "LR_CHUNK", "LR_WARPS",
            "TP_BLOCK", "TP_CHUNK", "TP_WARPS", "TP_COUNT_WARPS", "TP_SCAN_BLOCK", "TP_PDL")
