"""embedding_bag: sums, means or maxima of bags of embedding rows, forward and backward.

    out[b] = reduce_{i in bag b, input[i] != padding_idx} psw[i] * weight[input[i]]

Program mapping. Forward, sum and mean ("steps" kernel): one program per BAGS consecutive bags
(and block of BLOCK_D columns), walked as one stream of steps of BLOCK_L indices (a bag longer
than a step takes several; an empty bag is one step without indices); the indices of the next
step are loaded before the current step's [BLOCK_L, BLOCK_D] rows are gathered, so each program
keeps a whole step of row gathers in flight with its next indices. DLRM's 512-byte fp32 rows run
on one warp per program (the reduction over a step stays in registers, up to 32 programs per SM).
Max mode: one program per bag (walking it BLOCK_L indices per step). The gather kernels mask
every index outside the table and clamp every offset to the input, so nothing outside either is
ever read. The errors are found by a check kernel launched first (every index against the table,
every offset against the input; CHECK_BLOCK of each per program), whose two flags are copied to
pinned host memory: the host waits for that copy while the device runs the gather, and raises.
Backward (dense): the indices are sorted with their positions (torch.sort, stable, 32-bit keys
where the table allows) and the bag of each sorted entry is gathered once (so the kernel's entry
loads are contiguous); the sorted array is cut into fixed spans of E entries, one program per
span (so a hot row of a power-law distribution is spread over many programs). A program walks
its span BLOCK_K entries at a time, loading the next chunk's entries while it gathers
grad_output[bag of each entry] (times the per-sample weight, or 1/bag size) for the current one,
sums runs of equal indices with a segmented scan, and writes each row it owns completely, once;
a row cut by a span boundary is written as partials that a second kernel adds in span order; a
third kernel writes zeros over the rows no index touched. Deterministic (fixed order
everywhere), no atomics.
Source: torch.nn.functional.embedding_bag (semantics); Naumov et al., "Deep Learning
Recommendation Model for Personalization and Recommendation Systems" (2019) (DLRM shapes);
Blelloch, "Prefix sums and their applications" (1990) (segmented scan).
"""

from __future__ import annotations

import functools
import math
import operator
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from ..harness import baselines
from ..harness.inputs import random_tensor
from ..harness.spec import Cost, Inputs, OpSpec, case
from ._common import (FLOAT_DTYPES, bf16_rne, check_same_device, check_same_dtype, check_tensor, copy_to_host_async,
                      needs_int64, sm_count, cdiv, next_pow2)
from ._jit import _round_for_store
from ._runtime import Op, cached_launch, planned

INDEX_DTYPES = (torch.int32, torch.int64)
MODES = {"sum": 0, "mean": 1, "max": 2}
MODE_SUM, MODE_MEAN, MODE_MAX = 0, 1, 2




# ----------------------------------------------------------------------------- reference, cost


def embedding_bag_reference(input, weight, offsets=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                            mode="mean", sparse=False, per_sample_weights=None, include_last_offset=False,
                            padding_idx=None):
    """embedding_bag in float64 (``weight`` and ``per_sample_weights`` arrive as float64):
    torch's own implementation, whose empty-bag and padding behaviour this module mirrors
    (checked in tests/ops/test_embedding_bag.py against a hand-written loop)."""
    return F.embedding_bag(input, weight, offsets, max_norm, norm_type, scale_grad_by_freq, mode, sparse,
                           per_sample_weights, include_last_offset, padding_idx)


def _index_bytes(case) -> int:
    return 4 if case.get("index_dtype", "int64") == "int32" else 8


def embedding_bag_cost(case, dtype: torch.dtype) -> Cost:
    """Forward: read the N indices (and B+1 offsets, and N per-sample weights), the N requested
    weight rows (every index counts, repeated or not: "requested bytes"), write B x D outputs;
    D FLOP per index (2 D with per-sample weights). ``mode='fwd_bwd'`` adds the backward: read
    grad_output (B x D) and the N indices (and N per-sample weights), write the dense V x D
    weight gradient once; D FLOP per index. ``mode='bwd'``: the backward alone. Ragged cases draw N = B * L indices exactly."""
    b, length = case["shape"]
    d, v = case["dim"], case["num_embeddings"]
    n = b * length
    w = torch.empty((), dtype=dtype).element_size()
    isz = _index_bytes(case)
    psw = case.get("psw", False)
    fwd_bytes = n * isz + n * d * w + b * d * w + (n * w if psw else 0)
    if case.get("layout", "offsets") == "offsets":
        fwd_bytes += (b + 1) * isz
    flops = n * d * (2 if psw else 1)
    bwd_bytes = b * d * w + n * isz + v * d * w + (n * w if psw else 0)
    mode = case.get("mode", "fwd")
    if mode == "fwd_bwd":
        return Cost(flops=flops + n * d, bytes=fwd_bytes + bwd_bytes)
    if mode == "bwd":
        return Cost(flops=n * d, bytes=bwd_bytes)
    return Cost(flops=flops, bytes=fwd_bytes)


# ----------------------------------------------------------------------------- launch heuristic

# Forward, sum and mean ("steps" kernel): each program walks BAGS consecutive bags in steps of
# BLOCK_L indices; the indices of the next step are loaded while the current step's rows are
# gathered. A step's tile is about FWD_STEP_BYTES of rows, FWD_ELEMS_PER_THREAD elements a
# thread: one warp for DLRM's 512-byte rows, so the reduction over the step stays in registers.
FWD_KERNEL = "steps"  # "steps" or "single" (one bag per program, the max-mode kernel)
FWD_STEP_BYTES = 4096
FWD_ELEMS_PER_THREAD = 32
FWD_WAVES = 2  # programs: about FWD_WAVES full waves of the device (SM count read from it)
FWD_MAX_BLOCK_L = 64
FWD_TILE = 4096  # elements of the single-bag kernel's [BLOCK_L, BLOCK_D] tile (max mode)
# Backward: spans of E sorted entries, BLOCK_K at a time, the next chunk's keys and bags loaded
# while the current chunk's grad_output rows are gathered.
BWD_STEP_BYTES = 4096
BWD_ELEMS_PER_THREAD = 32
BWD_MAX_BLOCK_D = 256
BWD_MAX_BLOCK_K = 8  # one warp holds every row of its chunk: more rows cost registers (ptxas -v)
BWD_MAX_CHUNKS = 32  # BLOCK_K-entry chunks per backward span (E = chunks * BLOCK_K)
BWD_WAVES = 2
FIXUP_BLOCK_P = 64  # partials summed per step by the fix-up kernel
ZERO_TILE = 8192  # elements of the zero-fill tile
CHECK_BLOCK = 4096  # indices and bags' offsets per program of the forward's input check
# True: the input check runs as its own kernel before the gather and the host waits for it while
# the device gathers; False: the host reads the gather kernel's own flags after it (the first
# form, kept to time both in one run: docs/data_movement.md, embedding_bag).
EARLY_CHECK = True
MAX_PROGRAMS_PER_SM = 32  # resident-block limit of NVIDIA SMs since Volta (a bound, not a target)


class FwdConfig(NamedTuple):
    BLOCK_L: int
    BLOCK_D: int
    num_warps: int
    BAGS: int = 1  # bags per program (steps kernel; the single-bag kernel takes one)


class BwdConfig(NamedTuple):
    BLOCK_K: int
    BLOCK_D: int
    E: int  # sorted entries per program (a multiple of BLOCK_K)
    num_warps: int


def _warps(tile: int) -> int:
    return 4 if tile >= 2048 else (2 if tile >= 512 else 1)


def _warps_for(elems: int, per_thread: int) -> int:
    """Warps (1 to 8, a power of two) giving each thread about ``per_thread`` tile elements."""
    return min(8, next_pow2(max(1, elems // (32 * per_thread))))


# The configurations below are cached per (their arguments, the SM count, the module's tunables):
# the tunables are read per call so that setting them (tests monkeypatch them) still takes effect,
# once kept plans are dropped (_runtime.clear_plans).
# Bounded caches: the bag count and index count are part of the key.
_CONFIG_CACHE = 4096


def _fwd_single_config(avg_len: float, d: int, elem_size: int) -> FwdConfig:
    """Single-bag kernel (max mode): tiles of about FWD_TILE elements, the whole row when it fits
    (up to 8 KiB of it), then as many indices of the bag as fill the tile."""
    return _fwd_single_config_of(avg_len, d, elem_size, FWD_TILE, FWD_MAX_BLOCK_L)


@functools.lru_cache(maxsize=_CONFIG_CACHE)
def _fwd_single_config_of(avg_len: float, d: int, elem_size: int, fwd_tile: int, fwd_max_block_l: int) -> FwdConfig:
    block_d = min(next_pow2(d), 8192 // elem_size)
    block_l = min(next_pow2(math.ceil(avg_len)), max(1, fwd_tile // block_d), fwd_max_block_l)
    return FwdConfig(block_l, block_d, _warps(block_l * block_d), 1)


def _fwd_config(avg_len: float, d: int, elem_size: int, num_bags: int, device: torch.device) -> FwdConfig:
    """Steps kernel (sum, mean): [BLOCK_L, BLOCK_D] steps of about FWD_STEP_BYTES (up to 8 KiB
    of a row, BLOCK_L up to the average bag length), warps for FWD_ELEMS_PER_THREAD elements a
    thread, and BAGS bags per program so the grid makes about FWD_WAVES full waves."""
    return _fwd_config_of(avg_len, d, elem_size, num_bags, sm_count(device), FWD_STEP_BYTES, FWD_MAX_BLOCK_L,
                          FWD_ELEMS_PER_THREAD, MAX_PROGRAMS_PER_SM, FWD_WAVES)


@functools.lru_cache(maxsize=_CONFIG_CACHE)
def _fwd_config_of(avg_len: float, d: int, elem_size: int, num_bags: int, sms: int, fwd_step_bytes: int,
                   fwd_max_block_l: int, fwd_elems_per_thread: int, max_programs_per_sm: int,
                   fwd_waves: int) -> FwdConfig:
    block_d = min(next_pow2(d), 8192 // elem_size)
    block_l = min(next_pow2(math.ceil(avg_len)), max(1, fwd_step_bytes // (block_d * elem_size)), fwd_max_block_l)
    warps = _warps_for(block_l * block_d, fwd_elems_per_thread)
    per_sm = max(1, max_programs_per_sm // warps)
    programs = fwd_waves * per_sm * sms // cdiv(d, block_d)
    return FwdConfig(block_l, block_d, warps, max(1, cdiv(num_bags, max(1, programs))))


def _bwd_config(n: int, d: int, device: torch.device) -> BwdConfig:
    """[BLOCK_K, BLOCK_D] chunks of about BWD_STEP_BYTES of float32 gradient rows (up to
    BWD_MAX_BLOCK_D columns and BWD_MAX_BLOCK_K rows), warps for BWD_ELEMS_PER_THREAD elements a
    thread, and spans of E = chunks * BLOCK_K sorted entries: as long as possible (fewer rows cut
    by span boundaries) while the grid still makes about BWD_WAVES full waves of the device."""
    return _bwd_config_of(n, d, sm_count(device), BWD_MAX_BLOCK_D, BWD_MAX_BLOCK_K, BWD_STEP_BYTES,
                          BWD_ELEMS_PER_THREAD, BWD_WAVES, MAX_PROGRAMS_PER_SM, BWD_MAX_CHUNKS)


@functools.lru_cache(maxsize=_CONFIG_CACHE)
def _bwd_config_of(n: int, d: int, sms: int, bwd_max_block_d: int, bwd_max_block_k: int, bwd_step_bytes: int,
                   bwd_elems_per_thread: int, bwd_waves: int, max_programs_per_sm: int,
                   bwd_max_chunks: int) -> BwdConfig:
    block_d = min(next_pow2(d), bwd_max_block_d)
    block_k = max(1, min(bwd_max_block_k, bwd_step_bytes // (4 * block_d), next_pow2(n)))
    warps = _warps_for(block_k * block_d, bwd_elems_per_thread)
    d_blocks = cdiv(d, block_d)
    want = max(1, bwd_waves * max(1, max_programs_per_sm // warps) * sms // d_blocks)
    chunks = max(1, min(bwd_max_chunks, n // (block_k * want)))
    # Spans of a multiple of 16 entries keep every program's entry loads 16-byte aligned (vector
    # loads; Triton specializes integer arguments divisible by 16).
    m = max(1, 16 // block_k)
    return BwdConfig(block_k, block_d, max(m, chunks // m * m) * block_k, warps)


# ----------------------------------------------------------------------------- kernels


@triton.jit
def _embedding_bag_fwd_kernel(
    idx_ptr, off_ptr, w_ptr, psw_ptr, out_ptr, count_ptr, argmax_ptr, bag_ptr, err_ptr,
    N, V, D, L, B, n_off, padding_idx,
    stride_wv, stride_wd,
    MODE: tl.constexpr, HAS_OFFSETS: tl.constexpr, HAS_PSW: tl.constexpr, HAS_PAD: tl.constexpr,
    WRITE_ARGMAX: tl.constexpr, WRITE_BAGS: tl.constexpr, BF16_RNE: tl.constexpr,
    BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """One bag's output over BLOCK_D columns, walking the bag BLOCK_L indices per step (tile
    [BLOCK_L, BLOCK_D] of gathered rows). Flags bad indices (err[0]) and bad offsets (err[1])."""
    bag = tl.program_id(0).to(tl.int64)
    pid_d = tl.program_id(1)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < D
    if HAS_OFFSETS:
        start = tl.load(off_ptr + bag).to(tl.int64)
        # The last bag runs to the end of the input; with include_last_offset the extra entry
        # must say so (torch's documented precondition).
        end = tl.load(off_ptr + bag + 1, mask=bag + 1 < B, other=N).to(tl.int64)
        # (bag * 0 + n_off: a tensor, not a comparison of two scalar arguments, which Triton 3.9's
        # interpreter rejects as a mask)
        last = tl.load(off_ptr + bag + 1, mask=(bag + 1 == B) & (bag * 0 + n_off > B), other=N).to(tl.int64)
        bad_off = (start < 0) | (start > end) | (end > N) | ((bag == 0) & (start != 0)) | (last != N)
        tl.store(err_ptr + 1, 1, mask=bad_off)
        start = tl.minimum(tl.maximum(start, 0), N)
        end = tl.minimum(tl.maximum(end, start), N)
    else:
        start = bag * L
        end = start + L
    lanes = tl.arange(0, BLOCK_L).to(tl.int64)  # positions may pass 2**31
    bad = tl.zeros([BLOCK_L], tl.int32)
    cnt = tl.zeros([BLOCK_L], tl.int32)
    acc = tl.zeros([BLOCK_D], tl.float32)
    best = tl.full([BLOCK_D], float("-inf"), tl.float32)
    best_pos = tl.full([BLOCK_D], -1, tl.int64)
    for s in range(start, end, BLOCK_L):
        pos = s + lanes
        in_bag = pos < end
        idx = tl.load(idx_ptr + pos, mask=in_bag, other=0).to(tl.int64)
        in_table = (idx >= 0) & (idx < V)
        bad = bad | (in_bag & ~in_table).to(tl.int32)
        keep = in_bag & in_table
        if HAS_PAD:
            keep = keep & (idx != padding_idx)
        cnt += keep.to(tl.int32)
        m2 = keep[:, None] & col_mask[None, :]
        x = tl.load(w_ptr + idx[:, None] * stride_wv + cols[None, :] * stride_wd, mask=m2, other=0.0).to(tl.float32)
        if HAS_PSW:
            x = x * tl.load(psw_ptr + pos, mask=keep, other=0.0).to(tl.float32)[:, None]
        if MODE == 2:
            xm = tl.where(m2, x, float("-inf"))
            # NaN propagates (as roofkit.amax and IEEE max do): a column holding NaN takes the
            # first NaN, which then stays; torch's result there depends on the NaN's position.
            is_nan = m2 & (xm != xm)
            step_nan = tl.max(is_nan.to(tl.int32), axis=0) > 0
            step_max = tl.where(step_nan, float("nan"), tl.max(xm, axis=0))
            # First position holding the step's maximum (torch keeps the first of tied maxima).
            hit = tl.where(step_nan[None, :], is_nan, m2 & (xm == step_max[None, :]))
            step_pos = tl.min(tl.where(hit, pos[:, None], 9223372036854775807), axis=0)
            found = step_pos != 9223372036854775807
            best_nan = best != best
            take = found & ~best_nan & ((step_max > best) | step_nan | (best_pos < 0))
            best = tl.where(take, step_max, best)
            best_pos = tl.where(take, step_pos, best_pos)
        else:
            acc += tl.sum(x, axis=0)
        if WRITE_BAGS:
            tl.store(bag_ptr + pos, tl.zeros([BLOCK_L], bag_ptr.dtype.element_ty) + bag.to(bag_ptr.dtype.element_ty),
                     mask=(in_bag & (pid_d == 0)) != 0)
    tl.store(err_ptr, 1, mask=tl.max(bad, axis=0) > 0)
    n = tl.sum(cnt, axis=0)
    if MODE == 2:
        res = tl.where(best_pos >= 0, best, 0.0)
        if WRITE_ARGMAX:
            tl.store(argmax_ptr + bag * D + cols, best_pos, mask=col_mask)
    elif MODE == 1:
        res = acc / tl.maximum(n, 1).to(tl.float32)
        tl.store(count_ptr + bag, n, mask=pid_d == 0)
    else:
        res = acc
    tl.store(out_ptr + bag * D + cols, _round_for_store(res, out_ptr, BF16_RNE), mask=col_mask)


@triton.jit
def _ix(x, USE_INT64: tl.constexpr):
    """``x`` in the kernel's offset type: int64 where an offset can pass 2**31, else int32."""
    if USE_INT64:
        return x.to(tl.int64)
    else:
        return x.to(tl.int32)


@triton.jit
def _bag_end(off_ptr, b, B, N, L, mask, HAS_OFFSETS: tl.constexpr, USE_INT64: tl.constexpr):
    """End of bag ``b`` in the input (offsets[b + 1], or N for the last bag), clamped to
    [0, N] so that no window ever leaves the input; the offsets themselves are checked apart."""
    if HAS_OFFSETS:
        e = tl.load(off_ptr + b + 1, mask=mask & (b + 1 < B), other=N)
        e = tl.minimum(tl.maximum(e, 0), N)
    else:
        e = (b + 1) * L
    return _ix(e, USE_INT64)


@triton.jit
def _flag_bad_offsets(off_ptr, err_ptr, bb, inb, N, B, n_off):
    """err[1] = 1 if one of bags bb (where inb) has bad offsets: a first offset other than 0, a
    decrease, an offset past N, or with include_last_offset (n_off > B) a last offset other than
    N. Racing programs only ever store 1."""
    st = tl.load(off_ptr + bb, mask=inb, other=0)
    en = tl.load(off_ptr + bb + 1, mask=inb & (bb + 1 < B), other=N)
    last = tl.load(off_ptr + bb + 1, mask=inb & (bb + 1 == B) & (bb * 0 + n_off > B), other=N)
    bad = inb & ((st < 0) | (st > en) | (en > N) | ((bb == 0) & (st != 0)) | (last != N))
    tl.store(err_ptr + 1, 1, mask=tl.max(bad.to(tl.int32), axis=0) > 0)


@triton.jit
def _embedding_bag_check_kernel(idx_ptr, off_ptr, err_ptr, N, V, B, n_off,
                                HAS_OFFSETS: tl.constexpr, USE_INT64: tl.constexpr, BLOCK: tl.constexpr):
    """The forward's input check, before the gather: err[0] = 1 if one of indices
    [pid * BLOCK, pid * BLOCK + BLOCK) is outside [0, V); err[1] = 1 if one of bags
    [pid * BLOCK, ...)'s offsets is bad (a first offset other than 0, a decrease, an offset past N,
    with include_last_offset (n_off > B) a last offset other than N), the conditions the gather
    kernels assume. Racing programs only ever store 1. Tile [BLOCK]."""
    pos = _ix(tl.program_id(0), USE_INT64) * BLOCK + tl.arange(0, BLOCK)
    inb = pos < N
    d = tl.load(idx_ptr + pos, mask=inb, other=0)
    bad_idx = inb & ((d < 0) | (d >= V))
    tl.store(err_ptr, 1, mask=tl.max(bad_idx.to(tl.int32), axis=0) > 0)
    if HAS_OFFSETS:
        _flag_bad_offsets(off_ptr, err_ptr, pos, pos < B, N, B, n_off)


@triton.jit
def _embedding_bag_steps_fwd_kernel(
    idx_ptr, off_ptr, w_ptr, psw_ptr, out_ptr, count_ptr, bag_ptr, err_ptr,
    N, V, D, L, B, n_off, padding_idx, BAGS,
    stride_wv, stride_wd,
    MEAN: tl.constexpr, HAS_OFFSETS: tl.constexpr, HAS_PSW: tl.constexpr, HAS_PAD: tl.constexpr,
    WRITE_BAGS: tl.constexpr, BF16_RNE: tl.constexpr, USE_INT64: tl.constexpr,
    BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_V: tl.constexpr,
):
    """Sums (means) of bags [pid * BAGS, pid * BAGS + BAGS) over BLOCK_D columns, walked as one
    stream of steps of BLOCK_L indices (tile [BLOCK_L, BLOCK_D]); the next step's indices are
    loaded before the current step's rows are gathered. Flags bad indices (err[0]), offsets (err[1])."""
    pid_d = tl.program_id(1)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < D
    lanes = _ix(tl.arange(0, BLOCK_L), USE_INT64)
    b_lo = _ix(tl.program_id(0), USE_INT64) * BAGS
    b_hi = tl.minimum(b_lo + BAGS, B)
    if HAS_OFFSETS:
        # The offsets of this program's bags, checked in one vectorized pass (the step loop
        # below only reads them clamped).
        for c in range(b_lo, b_hi, BLOCK_V):
            bb = c + tl.arange(0, BLOCK_V)
            _flag_bad_offsets(off_ptr, err_ptr, bb, bb < b_hi, N, B, n_off)
        cs = _ix(tl.minimum(tl.maximum(tl.load(off_ptr + b_lo), 0), N), USE_INT64)
    else:
        cs = b_lo * L
    # The step being reduced: bag cb, window [cs, min(cs + BLOCK_L, ce)); c_after ends bag cb + 1.
    cb = b_lo
    ce = tl.maximum(_bag_end(off_ptr, cb, B, N, L, True, HAS_OFFSETS, USE_INT64), cs)
    c_after = _bag_end(off_ptr, cb + 1, B, N, L, cb + 1 < b_hi, HAS_OFFSETS, USE_INT64)
    cidx = tl.load(idx_ptr + cs + lanes, mask=cs + lanes < ce, other=0)
    acc = tl.zeros([BLOCK_D], tl.float32)
    cnt = tl.full([], 0, tl.int32)
    bad = tl.zeros([BLOCK_L], tl.int32)
    while cb < b_hi:
        # The next step: the rest of this bag, or the start of the next one (an empty bag is
        # one step without indices, which writes its zeros).
        more = cs + BLOCK_L < ce
        nb = tl.where(more, cb, cb + 1)
        ns = tl.where(more, cs + BLOCK_L, ce)
        ne = tl.where(more, ce, tl.maximum(c_after, ce))
        n_after = tl.where(more, c_after,
                           _bag_end(off_ptr, cb + 2, B, N, L, (~more) & (cb + 2 < b_hi), HAS_OFFSETS, USE_INT64))
        nidx = tl.load(idx_ptr + ns + lanes, mask=((ns + lanes < ne) & (nb < b_hi)) != 0, other=0)
        # The current step: gather its rows (several in flight per thread) and add them up.
        pos = cs + lanes
        in_bag = pos < ce
        in_table = (cidx >= 0) & (cidx < V)
        bad = bad | (in_bag & ~in_table).to(tl.int32)
        keep = in_bag & in_table
        if HAS_PAD:
            keep = keep & (cidx != padding_idx)
        row = _ix(tl.where(keep, cidx, 0), USE_INT64)
        x = tl.load(w_ptr + row[:, None] * stride_wv + cols[None, :] * stride_wd,
                    mask=keep[:, None] & col_mask[None, :], other=0.0).to(tl.float32)
        if HAS_PSW:
            x = x * tl.load(psw_ptr + pos, mask=keep, other=0.0).to(tl.float32)[:, None]
        acc += tl.sum(x, axis=0)
        if MEAN:
            cnt += tl.sum(keep.to(tl.int32), axis=0)
        if WRITE_BAGS:
            tl.store(bag_ptr + pos, tl.zeros([BLOCK_L], bag_ptr.dtype.element_ty) + cb.to(bag_ptr.dtype.element_ty),
                     mask=(in_bag & (pid_d == 0)) != 0)
        # The bag ends with this step: write its row (a bag's row is written exactly once).
        done = ~more
        if MEAN:
            res = acc / tl.maximum(cnt, 1).to(tl.float32)
            tl.store(count_ptr + cb, cnt, mask=(done & (pid_d == 0)) != 0)
        else:
            res = acc
        tl.store(out_ptr + cb * D + cols, _round_for_store(res, out_ptr, BF16_RNE), mask=(col_mask & done) != 0)
        acc = tl.where(done, 0.0, acc)
        if MEAN:
            cnt = tl.where(done, 0, cnt)
        cb, cs, ce, c_after, cidx = nb, ns, ne, n_after, nidx
    tl.store(err_ptr, 1, mask=tl.max(bad, axis=0) > 0)


@triton.jit
def _segmented_add(key_a, val_a, key_b, val_b):
    """Combine of a segmented sum over sorted keys: restart the sum where the key changes."""
    return key_b, tl.where(key_a == key_b, val_a + val_b, val_b)


@triton.jit
def _bwd_entries(key_ptr, perm_ptr, sbag_ptr, k, hi, N, NEED_POS: tl.constexpr, HAS_BAGS: tl.constexpr):
    """Sorted entries k (< hi): their keys, the key after each, positions, bags (contiguous loads,
    as stored: the caller converts them where it uses them)."""
    valid = k < hi
    keys = tl.load(key_ptr + k, mask=valid, other=-1)
    nxt = tl.load(key_ptr + k + 1, mask=k + 1 < N, other=-1)
    if NEED_POS:
        pos = tl.load(perm_ptr + k, mask=valid, other=0)
    else:
        pos = k
    if HAS_BAGS:
        bag = tl.load(sbag_ptr + k, mask=valid, other=-1)
    else:
        bag = k
    return keys, nxt, pos, bag


@triton.jit
def _embedding_bag_bwd_kernel(
    key_ptr, perm_ptr, sbag_ptr, psw_ptr, count_ptr, argmax_ptr, gout_ptr, gw_ptr, head_ptr, tail_ptr, flag_ptr,
    dest_ptr, N, V, D, L, B, E, padding_idx,
    stride_gb, stride_gd,
    MODE: tl.constexpr, HAS_BAGS: tl.constexpr, HAS_PSW: tl.constexpr, HAS_PAD: tl.constexpr,
    SPARSE: tl.constexpr, BF16_RNE: tl.constexpr, USE_INT64: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Weight-gradient rows of the sorted entries [pid * E, pid * E + E) over BLOCK_D columns,
    BLOCK_K entries per step (tile [BLOCK_K, BLOCK_D]), the next step's entries loaded while the
    current step's grad_output rows are gathered. Runs of equal indices are summed by a
    segmented scan; a run wholly inside the span is written to its row, the run cut by the left
    boundary to head[pid], the one cut by the right boundary to tail[pid] (both float32)."""
    NEED_POS: tl.constexpr = (MODE == 2) or HAS_PSW or (not HAS_BAGS)
    pid = _ix(tl.program_id(0), USE_INT64)
    pid_d = tl.program_id(1)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < D
    lo = pid * E
    hi = tl.minimum(lo + E, N)
    first_key = tl.load(key_ptr + lo)
    last_key = tl.load(key_ptr + hi - 1)
    cross_left = tl.load(key_ptr + lo - 1, mask=pid > 0, other=-1) == first_key
    cross_right = tl.load(key_ptr + hi, mask=hi < N, other=-1) == last_key
    lanes = _ix(tl.arange(0, BLOCK_K), USE_INT64)
    carry = tl.zeros([BLOCK_D], tl.float32)
    carry_key = tl.full([], -1, key_ptr.dtype.element_ty)
    keys, nxt, pos, bag = _bwd_entries(key_ptr, perm_ptr, sbag_ptr, lo + lanes, hi, N, NEED_POS, HAS_BAGS)
    for s in range(lo, hi, BLOCK_K):
        # The next step's entries (contiguous loads) go out before this step's gathers.
        keys_n, nxt_n, pos_n, bag_n = _bwd_entries(key_ptr, perm_ptr, sbag_ptr, s + BLOCK_K + lanes, hi, N, NEED_POS,
                                                   HAS_BAGS)
        k = s + lanes
        valid = k < hi
        ok = valid & (keys >= 0) & (keys < V)
        use = ok
        if HAS_PAD:
            use = use & (keys != padding_idx)
        p = _ix(pos, USE_INT64)
        if HAS_BAGS:
            bg = _ix(bag, USE_INT64)
        else:
            bg = p // L
        use = use & (bg >= 0) & (bg < B)
        m2 = use[:, None] & col_mask[None, :]
        g = tl.load(gout_ptr + bg[:, None] * stride_gb + cols[None, :] * stride_gd, mask=m2, other=0.0,
                    eviction_policy="evict_last").to(tl.float32)
        if MODE == 2:
            am = tl.load(argmax_ptr + bg[:, None] * D + cols[None, :], mask=m2, other=-1)
            g = tl.where(am == p.to(tl.int64)[:, None], g, 0.0)
        elif HAS_PSW:
            g = g * tl.load(psw_ptr + p, mask=use, other=0.0).to(tl.float32)[:, None]
        elif MODE == 1:
            c = tl.load(count_ptr + bg, mask=use, other=1)
            g = g * (1.0 / tl.maximum(c, 1).to(tl.float32))[:, None]
        keys2 = keys[:, None] + tl.zeros([BLOCK_K, BLOCK_D], keys.dtype)
        _, run = tl.associative_scan((keys2, g), 0, _segmented_add)
        # Only the chunk's first run can continue the previous chunk's last one.
        run = run + tl.where(keys2 == carry_key, carry[None, :], 0.0)
        ends = valid & (keys != nxt)
        # (x != 0 keeps these masks boolean in every Triton version: 3.9's interpreter turns a
        # scalar-and-vector & into int32, which tl.store refuses as a mask.)
        first_run = (cross_left & (keys == first_key)) != 0
        to_row = ends & ok & ~first_run
        if SPARSE:
            dest = _ix(tl.load(dest_ptr + k, mask=to_row, other=0), USE_INT64)
        else:
            dest = _ix(keys, USE_INT64)  # (masked store: rows outside the table are never written)
        tl.store(gw_ptr + dest[:, None] * D + cols[None, :], _round_for_store(run, gw_ptr, BF16_RNE),
                 mask=to_row[:, None] & col_mask[None, :], eviction_policy="evict_first")
        to_head = ends & first_run
        tl.store(head_ptr + pid * D + lanes[:, None] * 0 + cols[None, :], run,
                 mask=to_head[:, None] & col_mask[None, :])
        if not SPARSE:
            tl.store(flag_ptr + keys, tl.full([BLOCK_K], 1, tl.int8), mask=(ok & (pid_d == 0)) != 0)
        hold = valid & (k == tl.minimum(s + BLOCK_K, hi) - 1) & ~ends
        carry = tl.sum(tl.where(hold[:, None], run, 0.0), axis=0)
        carry_key = tl.max(tl.where(hold, keys, -1), axis=0)
        keys, nxt, pos, bag = keys_n, nxt_n, pos_n, bag_n
    # The run still open at the span's end continues in the next span.
    single = (cross_left & (first_key == last_key)) != 0
    tl.store(head_ptr + pid * D + cols, carry, mask=(col_mask & cross_right & single) != 0)
    tl.store(tail_ptr + pid * D + cols, carry, mask=(col_mask & cross_right & ~single) != 0)


@triton.jit
def _embedding_bag_bwd_fixup_kernel(
    key_ptr, head_ptr, tail_ptr, gw_ptr, dest_ptr, N, V, D, E, P,
    SPARSE: tl.constexpr, BF16_RNE: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Row cut by span boundary pid + 1 (if this is the first boundary it crosses): tail of the
    span where it starts plus the heads of the following spans it covers, in span order, BLOCK_P
    partials per step (tile [BLOCK_P, BLOCK_D]), the next step's keys and heads loaded before
    this step's are added (a hot row of a power law covers hundreds of spans); writes the row once."""
    b = tl.program_id(0).to(tl.int64) + 1
    pid_d = tl.program_id(1)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    col_mask = cols < D
    at = b * E
    r = tl.load(key_ptr + at)
    crosses = tl.load(key_ptr + at - 1) == r
    earlier = tl.load(key_ptr + at - E - 1, mask=b > 1, other=-1) == r
    owner = crosses & ~earlier & (r >= 0) & (r < V)
    row_mask = (col_mask & owner) != 0  # boolean in every Triton version (see the bwd kernel)
    acc = tl.load(tail_ptr + (b - 1) * D + cols, mask=row_mask, other=0.0)
    qs = b + tl.arange(0, BLOCK_P)
    in_p = ((qs < P) & owner) != 0  # boolean in every Triton version (see the bwd kernel)
    hk = tl.load(key_ptr + qs * E, mask=in_p, other=-1)
    h = tl.load(head_ptr + qs[:, None] * D + cols[None, :], mask=in_p[:, None] & col_mask[None, :], other=0.0)
    more = owner
    while more:
        hit = in_p & (hk == r)
        more = tl.sum(hit.to(tl.int32), axis=0) == BLOCK_P
        qs_n = qs + BLOCK_P
        in_n = ((qs_n < P) & more) != 0
        hk_n = tl.load(key_ptr + qs_n * E, mask=in_n, other=-1)
        h_n = tl.load(head_ptr + qs_n[:, None] * D + cols[None, :], mask=in_n[:, None] & col_mask[None, :], other=0.0)
        acc += tl.sum(tl.where(hit[:, None], h, 0.0), axis=0)
        qs, in_p, hk, h = qs_n, in_n, hk_n, h_n
    if SPARSE:
        dest = tl.load(dest_ptr + at, mask=owner != 0, other=0)
    else:
        dest = r.to(tl.int64)
    tl.store(gw_ptr + dest * D + cols, _round_for_store(acc, gw_ptr, BF16_RNE), mask=row_mask)


@triton.jit
def _embedding_bag_zero_rows_kernel(flag_ptr, gw_ptr, V, D, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    """Zeros over the rows of BLOCK_R x BLOCK_D (tile) that no index touched (flag 0)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    untouched = tl.load(flag_ptr + rows, mask=rows < V, other=1) == 0
    tl.store(gw_ptr + rows[:, None] * D + cols[None, :], tl.zeros([BLOCK_R, BLOCK_D], gw_ptr.dtype.element_ty),
             mask=untouched[:, None] & (cols < D)[None, :], eviction_policy="evict_first")


@triton.jit
def _embedding_bag_psw_grad_kernel(
    idx_ptr, bag_ptr, w_ptr, gout_ptr, gpsw_ptr, N, V, D, L, B, padding_idx,
    stride_wv, stride_wd, stride_gb, stride_gd,
    HAS_BAGS: tl.constexpr, HAS_PAD: tl.constexpr, BF16_RNE: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """d out / d psw for BLOCK_K index positions: dot(grad_output[bag], weight[index]) over D in
    steps of BLOCK_D (tile [BLOCK_K, BLOCK_D]); 0 for padding entries."""
    pos = tl.program_id(0).to(tl.int64) * BLOCK_K + tl.arange(0, BLOCK_K)
    valid = pos < N
    idx = tl.load(idx_ptr + pos, mask=valid, other=-1).to(tl.int64)
    use = valid & (idx >= 0) & (idx < V)
    if HAS_PAD:
        use = use & (idx != padding_idx)
    if HAS_BAGS:
        bag = tl.load(bag_ptr + pos, mask=use, other=-1).to(tl.int64)
    else:
        bag = pos // L
    use = use & (bag >= 0) & (bag < B)
    acc = tl.zeros([BLOCK_K], tl.float32)
    for d0 in range(0, D, BLOCK_D):
        cols = d0 + tl.arange(0, BLOCK_D)
        m2 = use[:, None] & (cols < D)[None, :]
        w = tl.load(w_ptr + idx[:, None] * stride_wv + cols[None, :] * stride_wd, mask=m2, other=0.0).to(tl.float32)
        g = tl.load(gout_ptr + bag[:, None] * stride_gb + cols[None, :] * stride_gd, mask=m2, other=0.0).to(tl.float32)
        acc += tl.sum(w * g, axis=1)
    # Stored from the tile's layout by the one thread holding column 0 of each position: a 1-D
    # store would gather the threads' copies of the sum through shared memory, where copies
    # that differ in the last bit race (compute-sanitizer racecheck, H200; with this
    # store alone racecheck still reported it on some small cases, hence the max below).
    # The copies are made identical first (an exact max over them): where the compiler still moves
    # acc to another layout for the store, identical copies cannot race.
    acc = tl.max(tl.broadcast_to(acc[:, None], [BLOCK_K, BLOCK_D]), axis=1)
    first = (tl.arange(0, BLOCK_D) == 0)[None, :] & valid[:, None]
    dst = gpsw_ptr + pos[:, None] + tl.arange(0, BLOCK_D)[None, :]  # column 0 only: the position's own slot
    tl.store(dst, _round_for_store(tl.broadcast_to(acc[:, None], [BLOCK_K, BLOCK_D]), gpsw_ptr, BF16_RNE), mask=first)


# ----------------------------------------------------------------------------- host launchers


def _bag_dtype(num_bags: int) -> torch.dtype:
    return torch.int32 if num_bags < 2**31 else torch.int64


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _raise_bad_input(err, indices, offsets, num_embeddings: int) -> None:
    """Raise the error the forward flagged (err: [bad index, bad offsets]); the details are
    gathered on this (failing) path only."""
    bad_index, bad_offsets = err
    if bad_index:
        idx = indices.to(torch.int64)  # num_embeddings may not fit the indices' int32
        wrong = idx[(idx < 0) | (idx >= num_embeddings)]
        example = int(wrong[0]) if wrong.numel() else "?"
        raise IndexError(
            f"roofkit.embedding_bag: input holds index {example} outside the table; expected "
            f"0 <= index < num_embeddings = {num_embeddings}"
        )
    if bad_offsets:
        raise ValueError(
            "roofkit.embedding_bag: offsets must start at 0, be non-decreasing, not exceed len(input) = "
            f"{indices.numel()} and, with include_last_offset, end at len(input); got "
            f"{offsets.tolist()[:8]}{'...' if offsets.numel() > 8 else ''}"
        )


def _embedding_bag_forward(indices, offsets, weight, psw, mode: int, padding_idx: int, num_bags: int,
                           bag_length: int, need_argmax: bool, need_bags: bool, config: FwdConfig | None = None):
    v, d = weight.shape
    n = indices.numel()
    dev = weight.device
    out = torch.empty((num_bags, d), dtype=weight.dtype, device=dev)
    count = torch.empty((num_bags,) if mode == MODE_MEAN else (0,), dtype=torch.int32, device=dev)
    argmax = torch.empty((num_bags, d) if mode == MODE_MAX and need_argmax else (0, 0), dtype=torch.int64, device=dev)
    bags = torch.empty((n,) if need_bags else (0,), dtype=_bag_dtype(num_bags), device=dev)
    if num_bags == 0 or n == 0 or d == 0:
        # Nothing to gather: every bag is empty (or has no columns). Offsets are still checked
        # (outside CUDA-graph capture, where reading them back would break the capture).
        if offsets is not None and n == 0 and offsets.numel() and not _capturing(dev) \
                and bool((offsets != 0).any()):
            _raise_bad_input((0, 1), indices, offsets, v)
        out.zero_()
        count.zero_()
        argmax.fill_(-1)
        bags.zero_()
        if n and d == 0 and num_bags and not _capturing(dev):
            # Indices and offsets are checked even when there is nothing to gather.
            _raise_if_flagged(_launch_input_check(indices, offsets, num_bags, v), indices, offsets, v)
        return out, count, argmax, bags
    has_off = offsets is not None
    checked = None
    if EARLY_CHECK and not _capturing(dev):
        checked = _launch_input_check(indices, offsets, num_bags, v)
        # The gather kernels' own flags go to the check's buffer: they flag what it flagged
        # already, after its copy to the host was enqueued (no second buffer and fill per call).
        err = checked[2]
    else:
        # The gather kernels' own flags (they mask what they would flag): read after the launch
        # without EARLY_CHECK; under CUDA-graph capture by no one (the host cannot wait).
        err = torch.zeros(2, dtype=torch.int32, device=dev)
    args = (indices, offsets if has_off else indices, weight, psw if psw is not None else weight, out, count)
    n_off = offsets.numel() if has_off else 0
    if mode != MODE_MAX and FWD_KERNEL == "steps":
        cfg = config or _fwd_config(n / num_bags, d, weight.element_size(), num_bags, dev)
        use_int64 = needs_int64(n + cfg.BLOCK_L, num_bags * d,
                                (v - 1) * abs(weight.stride(0)) + (d - 1) * abs(weight.stride(1)) + 1)
        cached_launch(
            _LAUNCHES, _embedding_bag_steps_fwd_kernel, (cdiv(num_bags, cfg.BAGS), cdiv(d, cfg.BLOCK_D)),
            MEAN=mode == MODE_MEAN, HAS_OFFSETS=has_off, HAS_PSW=psw is not None, HAS_PAD=padding_idx >= 0,
            WRITE_BAGS=need_bags, BF16_RNE=bf16_rne(weight.dtype), USE_INT64=use_int64,
            BLOCK_L=cfg.BLOCK_L, BLOCK_D=cfg.BLOCK_D, BLOCK_V=128, num_warps=cfg.num_warps, num_stages=1,
        )(*args, bags, err, n, v, d, bag_length, num_bags, n_off, padding_idx, cfg.BAGS, weight.stride(0),
          weight.stride(1))
    else:
        cfg = config or _fwd_single_config(n / num_bags, d, weight.element_size())
        cached_launch(
            _LAUNCHES, _embedding_bag_fwd_kernel, (num_bags, cdiv(d, cfg.BLOCK_D)),
            MODE=mode, HAS_OFFSETS=has_off, HAS_PSW=psw is not None, HAS_PAD=padding_idx >= 0,
            WRITE_ARGMAX=argmax.numel() > 0, WRITE_BAGS=need_bags, BF16_RNE=bf16_rne(weight.dtype),
            BLOCK_L=cfg.BLOCK_L, BLOCK_D=cfg.BLOCK_D, num_warps=cfg.num_warps, num_stages=1,
        )(*args, argmax, bags, err, n, v, d, bag_length, num_bags, n_off, padding_idx, weight.stride(0),
          weight.stride(1))
    if checked is None and not EARLY_CHECK and not _capturing(dev):
        checked = err, None  # read after the gather (synchronizes)
    if checked is not None:
        _raise_if_flagged(checked, indices, offsets, v)  # the forward's one host synchronization
    return out, count, argmax, bags


def _raise_if_flagged(checked, indices, offsets, num_embeddings: int) -> None:
    """Waits for the input check's flags ((flags, event or None) from _launch_input_check, or
    the gather kernel's device flags) and raises the error they report."""
    host, ready = checked[0], checked[1]
    if ready is not None:
        ready.synchronize()
    flags = host.tolist()
    if any(flags):
        _raise_bad_input(flags, indices, offsets, num_embeddings)


def _launch_input_check(indices, offsets, num_bags: int, num_embeddings: int):
    """Enqueues the forward's input check and, on a GPU, the copy of its two flags to pinned host
    memory. Returns (flags on the host, event recorded after that copy, or None on the CPU, where
    the flags are already there, the flags on the device)."""
    n = indices.numel()
    has_off = offsets is not None
    err = torch.zeros(2, dtype=torch.int32, device=indices.device)
    work = max(n, num_bags if has_off else 0)
    cached_launch(
        _LAUNCHES, _embedding_bag_check_kernel, cdiv(work, CHECK_BLOCK),
        HAS_OFFSETS=has_off, USE_INT64=needs_int64(work + CHECK_BLOCK + 1), BLOCK=CHECK_BLOCK, num_warps=4,
    )(indices, offsets if has_off else indices, err, n, num_embeddings, num_bags, offsets.numel() if has_off else 0)
    return (*copy_to_host_async(err), err)


def _sorted_entries(indices: torch.Tensor, num_embeddings: int):
    """(sorted keys, their positions): a stable sort, on 32-bit keys where the table allows."""
    keys = indices
    if num_embeddings <= 2**31 and keys.dtype != torch.int32:
        keys = keys.to(torch.int32)
    return torch.sort(keys, stable=True)


def _launch_bwd(sorted_keys, perm, grad, weight, psw, count, argmax, bags, out, dest, flags, mode, padding_idx,
                num_bags, bag_length, has_bags, sparse: bool, config: BwdConfig | None):
    v, d = weight.shape
    n = sorted_keys.numel()
    cfg = config or _bwd_config(n, d, weight.device)
    spans = cdiv(n, cfg.E)
    d_blocks = cdiv(d, cfg.BLOCK_D)
    head = torch.empty((spans, d), dtype=torch.float32, device=weight.device)
    tail = torch.empty((spans, d), dtype=torch.float32, device=weight.device)
    # The bag of every sorted entry, gathered once here so that the kernel's entry loads are all
    # contiguous (its only random loads are the grad_output rows); fixed-size bags divide instead.
    sorted_bags = bags.index_select(0, perm) if has_bags else perm
    use_int64 = needs_int64(n + cfg.E, v * d, out.numel(), num_bags * abs(grad.stride(0)) + d * abs(grad.stride(1)),
                            num_bags * d)
    rne = bf16_rne(out.dtype)
    cached_launch(
        _LAUNCHES, _embedding_bag_bwd_kernel, (spans, d_blocks),
        MODE=mode, HAS_BAGS=has_bags, HAS_PSW=psw is not None, HAS_PAD=padding_idx >= 0, SPARSE=sparse,
        BF16_RNE=rne, USE_INT64=use_int64, BLOCK_K=cfg.BLOCK_K, BLOCK_D=cfg.BLOCK_D, num_warps=cfg.num_warps,
        num_stages=1,
    )(sorted_keys, perm, sorted_bags, psw if psw is not None else grad, count, argmax, grad, out, head, tail, flags,
      dest, n, v, d, bag_length, num_bags, cfg.E, padding_idx, grad.stride(0), grad.stride(1))
    if spans > 1:
        cached_launch(
            _LAUNCHES, _embedding_bag_bwd_fixup_kernel, (spans - 1, d_blocks),
            SPARSE=sparse, BF16_RNE=rne, BLOCK_P=FIXUP_BLOCK_P, BLOCK_D=cfg.BLOCK_D,
            num_warps=_warps_for(FIXUP_BLOCK_P * cfg.BLOCK_D, 64), num_stages=1,
        )(sorted_keys, head, tail, out, dest, n, v, d, cfg.E, spans)


def _launch_zero_rows(flags, gw) -> None:
    """Zeros over the rows of the dense gradient ``gw`` that no index touched (flag 0)."""
    v, d = gw.shape
    block_d = min(next_pow2(d), 1024)
    block_r = max(1, ZERO_TILE // block_d)
    cached_launch(
        _LAUNCHES, _embedding_bag_zero_rows_kernel, (cdiv(v, block_r), cdiv(d, block_d)),
        BLOCK_R=block_r, BLOCK_D=block_d, num_warps=4,
    )(flags, gw, v, d)


def _embedding_bag_backward(grad, indices, weight, psw, count, argmax, bags, mode: int, padding_idx: int,
                            num_bags: int, bag_length: int, has_bags: bool, need_weight_grad: bool,
                            need_psw_grad: bool, config: BwdConfig | None = None):
    v, d = weight.shape
    n = indices.numel()
    dev = weight.device
    gw = torch.empty((v, d) if need_weight_grad else (0, 0), dtype=weight.dtype, device=dev)
    gpsw = torch.empty((n,) if need_psw_grad else (0,), dtype=weight.dtype, device=dev)
    empty = n == 0 or d == 0 or num_bags == 0
    if need_weight_grad and gw.numel():
        if empty:
            gw.zero_()
        else:
            sorted_keys, perm = _sorted_entries(indices, v)
            flags = torch.zeros((v,), dtype=torch.int8, device=dev)
            _launch_bwd(sorted_keys, perm, grad, weight, psw, count, argmax, bags, gw, perm, flags, mode, padding_idx,
                        num_bags, bag_length, has_bags, False, config)
            _launch_zero_rows(flags, gw)
    if need_psw_grad and gpsw.numel():
        if d == 0 or num_bags == 0:
            gpsw.zero_()
        else:
            block_d = min(next_pow2(d), 256)
            block_k = max(1, min(128, 4096 // block_d))
            cached_launch(
                _LAUNCHES, _embedding_bag_psw_grad_kernel, cdiv(n, block_k),
                HAS_BAGS=has_bags, HAS_PAD=padding_idx >= 0, BF16_RNE=bf16_rne(gpsw.dtype),
                BLOCK_K=block_k, BLOCK_D=block_d, num_warps=4,
            )(indices, bags, weight, grad, gpsw, n, v, d, bag_length, num_bags, padding_idx,
              weight.stride(0), weight.stride(1), grad.stride(0), grad.stride(1))
    return gw, gpsw


def _embedding_bag_sparse_backward(grad, indices, weight, psw, count, argmax, bags, mode: int, padding_idx: int,
                                   num_bags: int, bag_length: int, has_bags: bool, config: BwdConfig | None = None):
    """(rows, values): the coalesced COO gradient, one value row per distinct index (padding
    excluded, as torch); synchronizes once to learn the number of distinct indices."""
    v, d = weight.shape
    n = indices.numel()
    dev = weight.device
    if n == 0 or num_bags == 0:
        return torch.empty((0,), dtype=torch.int64, device=dev), torch.empty((0, d), dtype=weight.dtype, device=dev)
    sorted_keys, perm = _sorted_entries(indices, v)
    starts = torch.ones((n,), dtype=torch.bool, device=dev)
    starts[1:] = sorted_keys[1:] != sorted_keys[:-1]
    ordinal = torch.cumsum(starts, 0) - 1
    rows = sorted_keys[starts].to(torch.int64)  # synchronizes: the number of distinct indices
    values = torch.empty((rows.numel(), d), dtype=weight.dtype, device=dev)
    if d:
        _launch_bwd(sorted_keys, perm, grad, weight, psw, count, argmax, bags, values, ordinal, starts, mode,
                    padding_idx, num_bags, bag_length, has_bags, True, config)
    if padding_idx >= 0:
        keep = rows != padding_idx
        rows, values = rows[keep], values[keep]
    return rows, values


# ----------------------------------------------------------------------------- custom ops, autograd


def _embedding_bag_fwd(
    indices: torch.Tensor, offsets: Optional[torch.Tensor], weight: torch.Tensor,
    per_sample_weights: Optional[torch.Tensor], mode: int, padding_idx: int, num_bags: int, bag_length: int,
    need_argmax: bool, need_bags: bool, sparse: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _embedding_bag_forward(indices, offsets, weight, per_sample_weights, mode, padding_idx, num_bags,
                                  bag_length, need_argmax, need_bags)


def _embedding_bag_fwd_fake(indices, offsets, weight, per_sample_weights, mode, padding_idx, num_bags, bag_length,
                            need_argmax, need_bags, sparse):
    d = weight.shape[1]
    return (
        weight.new_empty((num_bags, d)),
        weight.new_empty((num_bags,) if mode == MODE_MEAN else (0,), dtype=torch.int32),
        weight.new_empty((num_bags, d) if mode == MODE_MAX and need_argmax else (0, 0), dtype=torch.int64),
        weight.new_empty((indices.numel(),) if need_bags else (0,), dtype=_bag_dtype(num_bags)),
    )


def _embedding_bag_bwd(
    grad: torch.Tensor, indices: torch.Tensor, weight: torch.Tensor, per_sample_weights: Optional[torch.Tensor],
    count: torch.Tensor, argmax: torch.Tensor, bags: torch.Tensor, mode: int, padding_idx: int, num_bags: int,
    bag_length: int, has_bags: bool, need_weight_grad: bool, need_psw_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    return _embedding_bag_backward(grad, indices, weight, per_sample_weights, count, argmax, bags, mode, padding_idx,
                                   num_bags, bag_length, has_bags, need_weight_grad, need_psw_grad)


def _embedding_bag_bwd_fake(grad, indices, weight, per_sample_weights, count, argmax, bags, mode, padding_idx,
                            num_bags, bag_length, has_bags, need_weight_grad, need_psw_grad):
    return (
        weight.new_empty(tuple(weight.shape) if need_weight_grad else (0, 0)),
        weight.new_empty((indices.numel(),) if need_psw_grad else (0,)),
    )


def _embedding_bag_sparse_bwd(
    grad: torch.Tensor, indices: torch.Tensor, weight: torch.Tensor, per_sample_weights: Optional[torch.Tensor],
    count: torch.Tensor, argmax: torch.Tensor, bags: torch.Tensor, mode: int, padding_idx: int, num_bags: int,
    bag_length: int, has_bags: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    return _embedding_bag_sparse_backward(grad, indices, weight, per_sample_weights, count, argmax, bags, mode,
                                          padding_idx, num_bags, bag_length, has_bags)


def _embedding_bag_sparse_bwd_fake(grad, indices, weight, per_sample_weights, count, argmax, bags, mode, padding_idx,
                                   num_bags, bag_length, has_bags):
    u = torch.library.get_ctx().new_dynamic_size()
    return weight.new_empty((u,), dtype=torch.int64), weight.new_empty((u, weight.shape[1]))


def _setup_context(ctx, inputs, output):
    indices, offsets, weight, psw, mode, padding_idx, num_bags, bag_length, _, _, sparse = inputs
    _, count, argmax, bags = output
    ctx.save_for_backward(indices, weight, psw, count, argmax, bags)
    ctx.mark_non_differentiable(count, argmax, bags)
    ctx.mode, ctx.padding_idx, ctx.num_bags, ctx.bag_length = mode, padding_idx, num_bags, bag_length
    ctx.has_bags, ctx.sparse = offsets is not None, sparse


def _backward(ctx, grad_out, grad_count, grad_argmax, grad_bags):
    indices, weight, psw, count, argmax, bags = ctx.saved_tensors
    need_w, need_p = ctx.needs_input_grad[2], ctx.needs_input_grad[3]
    if grad_out is None:
        grad_out = weight.new_zeros((ctx.num_bags, weight.shape[1]))
    args = (grad_out, indices, weight, psw, count, argmax, bags, ctx.mode, ctx.padding_idx, ctx.num_bags,
            ctx.bag_length, ctx.has_bags)
    gw = gp = None
    if ctx.sparse and need_w:
        rows, values = _embedding_bag_sparse_bwd_op(*args)
        gw = torch.sparse_coo_tensor(rows.unsqueeze(0), values, tuple(weight.shape), is_coalesced=True,
                                     check_invariants=False)
        need_w = False
    if need_w or need_p:
        dense, gp = _embedding_bag_bwd_op(*args, need_w, need_p)
        gw = dense if need_w else gw
        gp = gp if need_p else None
    return None, None, gw, gp, None, None, None, None, None, None, None


_LAUNCHES: dict = {}
_embedding_bag_bwd_op = Op("roofkit::embedding_bag_bwd", _embedding_bag_bwd, _embedding_bag_bwd_fake)
_embedding_bag_sparse_bwd_op = Op("roofkit::embedding_bag_sparse_bwd", _embedding_bag_sparse_bwd,
                                  _embedding_bag_sparse_bwd_fake)
_embedding_bag_fwd_op = Op("roofkit::embedding_bag_fwd", _embedding_bag_fwd, _embedding_bag_fwd_fake).autograd(
    _setup_context, _backward)


# ----------------------------------------------------------------------------- public function


def _check_companion(op: str, name: str, t, input: torch.Tensor, dtypes) -> None:
    """Checks of a tensor that must live beside ``input``: the device mismatch is named first."""
    if isinstance(t, torch.Tensor):
        check_same_device(op, name, t, input)
    check_tensor(op, name, t, dtypes=dtypes)


@planned
def embedding_bag(
    input: torch.Tensor,
    weight: torch.Tensor,
    offsets: torch.Tensor | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    mode: str = "mean",
    sparse: bool = False,
    per_sample_weights: torch.Tensor | None = None,
    include_last_offset: bool = False,
    padding_idx: int | None = None,
) -> torch.Tensor:
    """Sum, mean or maximum of bags of rows of ``weight``:
    out[b] = reduce over i in bag b (input[i] != padding_idx) of psw[i] * weight[input[i]].

    Mirrors ``torch.nn.functional.embedding_bag`` (same arguments, order and defaults).

    Args:
        input: int32/int64 indices into ``weight``: 1-D (N,) with ``offsets``, or 2-D (B, L) for
            B bags of L indices (``offsets`` then None).
        weight: the table, (V, D) float32/float16/bfloat16, any strides, on CUDA (or on CPU with
            TRITON_INTERPRET=1).
        offsets: 1-D int32/int64, start of each bag in ``input`` (B entries, or B + 1 with
            ``include_last_offset``, the last one then equal to N as torch documents; torch's
            CPU kernels disagree with each other when it is not, so it is enforced); must start
            at 0, be non-decreasing and stay <= N. The last bag runs to the end of ``input``.
        max_norm, norm_type, scale_grad_by_freq: not supported (NotImplementedError unless
            None / ignored / False).
        mode: "sum", "mean" (default, as torch) or "max".
        sparse: the weight gradient is a coalesced sparse COO tensor (one value row per distinct
            index, padding excluded) instead of a dense (V, D) tensor; modes sum and mean (as
            torch); eager mode only.
        per_sample_weights: weights of ``input``'s shape and ``weight``'s dtype (mode "sum" only);
            differentiable.
        include_last_offset: ``offsets`` holds B + 1 entries (1-D input only).
        padding_idx: index (in [-V, V)) whose entries are skipped: they add nothing, do not count
            toward a bag's size for "mean", and get no gradient.
    Returns:
        (B, D) tensor of ``weight``'s dtype; empty bags (or bags of padding only) give zeros.
    Raises:
        TypeError: non-tensor arguments, index tensors not int32/int64, weight not a float
            dtype, per_sample_weights of another dtype than weight, non-int padding_idx.
        ValueError: wrong dimensions or shapes, offsets given with 2-D input or missing with 1-D
            input, tensors on another device, unknown mode, sparse with mode "max", padding_idx
            out of range, offsets that do not start at 0, decrease, pass len(input) or (with
            include_last_offset) end short of it (found by the kernel).
        IndexError: an index outside [0, V) (found by the kernel; no row outside the table is
            ever read).
        NotImplementedError: max_norm, scale_grad_by_freq, per_sample_weights with mode != "sum".
    Numerics:
        float32 accumulation in a fixed order (a tree over each step of BLOCK_L indices, steps
        in index order), one rounding to the output dtype.
        Max keeps the first index holding the maximum (the backward routes gradient there).
        Backward: deterministic (bitwise reproducible), no atomics: indices sorted (stable),
        each gradient row summed in float32 in a fixed order and rounded once.
    Cost:
        Forward reads the indices (and offsets, per-sample weights) and the N requested weight
        rows and writes B x D outputs: (N*D + B*D) elements plus the index bytes; a check kernel
        first reads the indices and offsets once more, and the host waits for its result (copied
        to pinned memory) while the device gathers, to raise the error (skipped under CUDA-graph
        capture, where bad indices are skipped, never read, and offsets clamped to the input).
        Backward: a sort of N 32-bit keys, a gather of the bag id of each sorted entry (1-D
        input with offsets), a pass over the sorted entries gathering grad_output rows, and one
        write of the dense (V, D) gradient (touched rows by the pass, the others by a zero-fill);
        no host synchronization. D FLOP per index each way.
    Source:
        torch.nn.functional.embedding_bag (semantics); Blelloch 1990 (segmented scan).
    """
    op = "embedding_bag"
    check_tensor(op, "input", input, dtypes=INDEX_DTYPES)
    _check_companion(op, "weight", weight, input, FLOAT_DTYPES)
    if weight.dim() != 2:
        raise ValueError(f"roofkit.{op}: weight must be 2-D (num_embeddings, embedding_dim), "
                         f"got shape {tuple(weight.shape)}")
    if max_norm is not None:
        raise NotImplementedError(f"roofkit.{op}: max_norm is not supported (got {max_norm})")
    if scale_grad_by_freq:
        raise NotImplementedError(f"roofkit.{op}: scale_grad_by_freq=True is not supported")
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"roofkit.{op}: mode must be 'sum', 'mean' or 'max', got {mode!r}")
    for name, flag in (("sparse", sparse), ("include_last_offset", include_last_offset)):
        if not isinstance(flag, bool):
            raise TypeError(f"roofkit.{op}: {name} must be a bool, got {type(flag).__name__}")
    if sparse and mode == "max":
        raise ValueError(f"roofkit.{op}: mode='max' does not support sparse=True (as torch)")
    v = weight.shape[0]
    if padding_idx is None:
        pad = -1
    else:
        if isinstance(padding_idx, bool):
            raise TypeError(f"roofkit.{op}: padding_idx must be an int or None, got bool")
        try:
            pad = operator.index(padding_idx)
        except TypeError:
            raise TypeError(f"roofkit.{op}: padding_idx must be an int or None, "
                            f"got {type(padding_idx).__name__}") from None
        if not -v <= pad < v:
            raise ValueError(f"roofkit.{op}: padding_idx must be within [-{v}, {v - 1}] "
                             f"(num_embeddings {v}), got {pad}")
        pad %= v

    if input.dim() == 2:
        if offsets is not None:
            raise ValueError(f"roofkit.{op}: offsets must be None when input is 2-D (fixed-size bags); got a tensor")
        if include_last_offset:
            raise ValueError(f"roofkit.{op}: include_last_offset=True needs 1-D input with offsets")
        num_bags, bag_length = input.shape
        flat = input.reshape(-1)
    elif input.dim() == 1:
        if offsets is None:
            raise ValueError(f"roofkit.{op}: offsets must be a 1-D tensor when input is 1-D; got None")
        _check_companion(op, "offsets", offsets, input, INDEX_DTYPES)
        if offsets.dim() != 1:
            raise ValueError(f"roofkit.{op}: offsets must be 1-D, got shape {tuple(offsets.shape)}")
        num_bags = offsets.numel() - (1 if include_last_offset else 0)
        if num_bags < 0:
            raise ValueError(f"roofkit.{op}: offsets must hold at least one entry with include_last_offset=True")
        if num_bags == 0 and offsets.numel() and not _capturing(offsets.device):
            # No bag reaches the kernel's offset checks: check the lone offset here (a sync on
            # an empty result only; not under CUDA-graph capture, where nothing is read back).
            first = int(offsets[0])
            if first != 0 or first != input.numel():
                raise ValueError(f"roofkit.{op}: with include_last_offset=True and no bags the only offset "
                                 f"must be 0 and equal len(input) = {input.numel()}; got {first}")
        bag_length = 0
        flat = input
        offsets = offsets.contiguous()
    else:
        raise ValueError(f"roofkit.{op}: input must be 1-D (with offsets) or 2-D (bags, length), "
                         f"got shape {tuple(input.shape)}")
    flat = flat.contiguous()

    psw = per_sample_weights
    if psw is not None:
        if mode != "sum":
            raise NotImplementedError(f"roofkit.{op}: per_sample_weights is only supported for mode='sum' "
                                      f"(got mode={mode!r})")
        _check_companion(op, "per_sample_weights", psw, input, FLOAT_DTYPES)
        check_same_dtype(op, "per_sample_weights", psw, weight, "weight")
        if tuple(psw.shape) != tuple(input.shape):
            raise ValueError(f"roofkit.{op}: per_sample_weights must have input's shape {tuple(input.shape)}, "
                             f"got {tuple(psw.shape)}")
        psw = psw.reshape(-1).contiguous()

    grad_on = torch.is_grad_enabled() and (weight.requires_grad or (psw is not None and psw.requires_grad))
    mode_id = MODES[mode]
    out, _, _, _ = _embedding_bag_fwd_op.apply(
        flat, offsets, weight, psw, mode_id, pad, num_bags, bag_length,
        grad_on and mode_id == MODE_MAX, grad_on and offsets is not None, sparse,
    )
    return out


# ----------------------------------------------------------------------------- spec


def _draw_indices(dist: str, n: int, v: int, generator: torch.Generator) -> torch.Tensor:
    """``n`` indices in [0, v): "uniform"; "powerlaw" (Zipf, p(rank) ~ rank**-1.05, ranks placed
    on rows by a random permutation, as hashed ids are); "repeat" (from the first three rows, so
    bags repeat indices)."""
    g = generator.device
    if dist == "uniform":
        return torch.randint(0, v, (n,), generator=generator, device=g)
    if dist == "powerlaw":
        p = torch.arange(1, v + 1, device=g, dtype=torch.float64).pow(-1.05)
        ranks = torch.multinomial(p / p.sum(), n, replacement=True, generator=generator)
        return torch.randperm(v, generator=generator, device=g)[ranks]
    if dist == "repeat":
        return torch.randint(0, min(v, 3), (n,), generator=generator, device=g)
    raise ValueError(f"unknown index distribution {dist!r}")


def _make_offsets(b: int, n: int, ragged: bool, generator: torch.Generator) -> torch.Tensor:
    """Bag starts of b bags over n indices: fixed length, or ragged (b - 1 random cuts, and every
    fifth bag forced empty) with exactly n indices in all."""
    g = generator.device
    if not ragged or b <= 1:
        return torch.arange(b, device=g, dtype=torch.int64) * (n // max(b, 1))
    cuts, _ = torch.sort(torch.randint(0, n + 1, (b - 1,), generator=generator, device=g))
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64, device=g), cuts])
    k = torch.arange(3, b, 5, device=g)
    offsets[k] = offsets[k - 1]
    return offsets


def _make_inputs(case, dtype, generator, device) -> Inputs:
    b, length = case["shape"]
    v, d = case["num_embeddings"], case["dim"]
    n = b * length
    idx = _draw_indices(case.get("dist", "uniform"), n, v, generator)
    pad = case.get("padding_idx")
    if pad is not None and n:
        idx[::4] = pad % v  # padding entries in most bags
    layout = case.get("layout", "offsets")
    offsets = None
    if layout == "offsets":
        offsets = _make_offsets(b, n, case.get("ragged", False), generator)
        if case.get("include_last_offset", False):
            offsets = torch.cat([offsets, torch.full((1,), n, dtype=torch.int64, device=offsets.device)])
        off_dtype = case.get("offsets_dtype", case.get("index_dtype", "int64"))
        offsets = offsets.to(device=device, dtype=getattr(torch, off_dtype))
    idx = idx.to(device=device, dtype=getattr(torch, case.get("index_dtype", "int64")))
    inp = idx.view(b, length) if layout == "2d" else idx
    weight = random_tensor((v, d), dtype, generator, device, case.get("weight_dist", "normal"), magnitude=1e2,
                           layout=case.get("weight_layout", "contiguous"))
    psw = None
    if case.get("psw", False):
        psw = torch.randn(tuple(inp.shape), generator=generator, device=generator.device).to(device=device, dtype=dtype)
    mode = case.get("bag_mode", "sum")
    return Inputs((inp, weight, offsets, None, 2.0, False, mode, False, psw),
                  {"include_last_offset": case.get("include_last_offset", False), "padding_idx": pad})


_F32 = (torch.float32,)
_BF16 = (torch.bfloat16,)
_ALL = FLOAT_DTYPES
# torch's CUDA backward for mode max and for per_sample_weights has no bfloat16 kernel, so the
# error budget (2x torch's same-dtype error) cannot be formed there: those cases run fp32/fp16.
_NO_BF16 = (torch.float32, torch.float16)


def _c(name, tags=(), dtypes=_F32, **params):
    params.setdefault("num_embeddings", 40)
    params.setdefault("dim", 8)  # the interpreter scans N x dim elements one by one: keep it small
    return case(name, tags, dtypes=dtypes, **params)


CASES = [
    _c("tiny_2d_sum_3x5", ["quick"], dtypes=_ALL, shape=(3, 5), layout="2d", bag_mode="sum"),
    _c("ragged_mean_empty_bags_9x4", ["quick"], dtypes=_ALL, shape=(9, 4), ragged=True, bag_mode="mean", dim=24),
    _c("ragged_max_ties_9x4", dtypes=_ALL, shape=(9, 4), ragged=True, bag_mode="max", weight_dist="ties"),
    _c("max_2d_7x6", shape=(7, 6), layout="2d", bag_mode="max"),
    _c("repeated_indices_sum_5x8", shape=(5, 8), dist="repeat", bag_mode="sum"),
    _c("repeated_indices_mean_2d_5x8", shape=(5, 8), layout="2d", dist="repeat", bag_mode="mean"),
    _c("padding_mean_6x5", shape=(6, 5), ragged=True, bag_mode="mean", padding_idx=7),
    _c("padding_negative_max_6x5", shape=(6, 5), bag_mode="max", padding_idx=-3),
    _c("psw_sum_ragged_7x4", dtypes=_ALL, shape=(7, 4), ragged=True, bag_mode="sum", psw=True),
    _c("psw_padding_2d_5x4", shape=(5, 4), layout="2d", bag_mode="sum", psw=True, padding_idx=2),
    _c("powerlaw_sum_8x6", shape=(8, 6), dist="powerlaw", num_embeddings=200, bag_mode="sum"),
    _c("include_last_offset_mean_6x3", shape=(6, 3), ragged=True, include_last_offset=True, bag_mode="mean"),
    _c("int32_indices_sum_6x5", shape=(6, 5), index_dtype="int32", bag_mode="sum"),
    _c("mixed_index_dtypes_mean_6x5", shape=(6, 5), index_dtype="int32", offsets_dtype="int64", bag_mode="mean"),
    _c("odd_dim_37_sum_4x5", shape=(4, 5), dim=37, bag_mode="sum"),
    _c("weight_transposed_mean_4x5", shape=(4, 5), weight_layout="transposed", bag_mode="mean"),
    _c("weight_offset_max_4x5", shape=(4, 5), weight_layout="offset", bag_mode="max"),
    _c("grad_transposed_sum_6x3", shape=(6, 3), bag_mode="sum", grad_layout="transposed"),
    _c("bags_of_one_2d_12x1", shape=(12, 1), layout="2d", bag_mode="sum", dim=20),
    _c("no_bags_0x4", ["quick"], shape=(0, 4), layout="2d", bag_mode="sum"),
    _c("no_indices_3x0", shape=(3, 0), bag_mode="mean"),
    # On the GPU (``pytest -m gpu``): the acceptance features at realistic sizes.
    _c("gpu_dlrm_uniform_sum", ["gpu"], shape=(16384, 32), num_embeddings=200_000, dim=128, bag_mode="sum"),
    _c("gpu_dlrm_powerlaw_sum", ["gpu"], shape=(16384, 32), num_embeddings=200_000, dim=128, dist="powerlaw",
       bag_mode="sum"),
    _c("gpu_empty_bags_ragged_mean", ["gpu"], dtypes=_ALL, shape=(8192, 20), num_embeddings=50_000, dim=128,
       ragged=True, bag_mode="mean"),
    _c("gpu_repeated_indices_max", ["gpu"], dtypes=_NO_BF16, shape=(4096, 32), num_embeddings=1000, dim=64,
       dist="repeat", bag_mode="max"),
    _c("gpu_padding_psw_powerlaw", ["gpu"], dtypes=_NO_BF16, shape=(8192, 24), num_embeddings=100_000, dim=96,
       dist="powerlaw", padding_idx=5, psw=True, bag_mode="sum", ragged=True),
    _c("gpu_powerlaw_max_padding", ["gpu"], shape=(8192, 16), num_embeddings=100_000, dim=128, dist="powerlaw",
       padding_idx=-1, bag_mode="max"),
    _c("gpu_token_embedding_bf16", ["gpu"], dtypes=_BF16, shape=(2048, 1), layout="2d", num_embeddings=128256,
       dim=4096, bag_mode="sum"),
    _c("gpu_odd_dim_100_int32", ["gpu"], dtypes=_ALL, shape=(3000, 7), num_embeddings=10_007, dim=100,
       index_dtype="int32", bag_mode="mean"),
    _c("gpu_weight_transposed", ["gpu"], shape=(2000, 8), num_embeddings=5000, dim=64, weight_layout="transposed",
       bag_mode="sum"),
    _c("gpu_include_last_offset_grad_transposed", ["gpu"], shape=(3000, 9), num_embeddings=20_000, dim=128,
       ragged=True, include_last_offset=True, bag_mode="sum", grad_layout="transposed"),
    _c("gpu_long_bags_2d_sum", ["gpu"], shape=(64, 3000), layout="2d", num_embeddings=4000, dim=128, bag_mode="sum"),
    _c("gpu_over_2pow31_indices", ["gpu", "slow"], shape=(67_108_865, 32), layout="2d", num_embeddings=1000, dim=4,
       bag_mode="sum", grad=False),
]


def _dlrm(name, dist="uniform", mode="fwd", bag_mode="sum", dtypes=_F32, **extra):
    return case(name, dtypes=dtypes, shape=(65536, 32), num_embeddings=1 << 20, dim=128, dist=dist,
                bag_mode=bag_mode, mode=mode, **extra)


SUITES = {
    # llama3-8b token embedding: vocab 128256 x hidden 4096 bf16, 8192 tokens = bags of one.
    "llama3-8b": [
        case("tokens_8192", dtypes=_BF16, shape=(8192, 1), layout="2d", num_embeddings=128256, dim=4096,
             bag_mode="sum"),
        case("tokens_8192_fwd_bwd", dtypes=_BF16, shape=(8192, 1), layout="2d", num_embeddings=128256, dim=4096,
             bag_mode="sum", mode="fwd_bwd"),
    ],
    # DLRM: a 1M x 128 fp32 table, 65536 bags of 32 indices (offsets), uniform and power law.
    "dlrm": [
        _dlrm("sum_uniform", "uniform"),
        _dlrm("sum_powerlaw", "powerlaw"),
        _dlrm("sum_uniform_fwd_bwd", "uniform", "fwd_bwd"),
        _dlrm("sum_powerlaw_fwd_bwd", "powerlaw", "fwd_bwd"),
        _dlrm("sum_uniform_bwd", "uniform", "bwd"),
        _dlrm("sum_powerlaw_bwd", "powerlaw", "bwd"),
    ],
    # The acceptance features at DLRM scale: empty bags (ragged), repeated indices (power law),
    # padding, per-sample weights, mean and max, bf16.
    "acceptance": [
        _dlrm("mean_ragged_empty_bags", bag_mode="mean", ragged=True),
        _dlrm("mean_ragged_empty_bags_fwd_bwd", mode="fwd_bwd", bag_mode="mean", ragged=True),
        _dlrm("sum_padding_psw_powerlaw", "powerlaw", padding_idx=0, psw=True),
        _dlrm("sum_padding_psw_powerlaw_fwd_bwd", "powerlaw", "fwd_bwd", padding_idx=0, psw=True),
        _dlrm("max_powerlaw", "powerlaw", bag_mode="max"),
        _dlrm("max_powerlaw_fwd_bwd", "powerlaw", "fwd_bwd", bag_mode="max"),
        _dlrm("sum_bf16_powerlaw_fwd_bwd", "powerlaw", "fwd_bwd", dtypes=_BF16),
    ],
    # host: one decoding step's token embedding (8 bags of one) from gpt2's 50257 x 768 table, where
    # the host's cost per call is the time. A small table on purpose: the backward's dense weight
    # gradient is written whole, and llama3's 1 GiB would make that write, not the host, the time.
    "host": [
        case("tokens_8", dtypes=_BF16, shape=(8, 1), layout="2d", num_embeddings=50257, dim=768, bag_mode="sum"),
        case("tokens_8_fwd_bwd", dtypes=_BF16, shape=(8, 1), layout="2d", num_embeddings=50257, dim=768,
             bag_mode="sum", mode="fwd_bwd"),
    ],
}

def embedding_bag_torch(input, weight, offsets=None, *args, **kwargs):
    """torch.nn.functional.embedding_bag, the harness's "torch" provider. torch has no CUDA
    kernel for the max-mode backward in 16-bit dtypes ("embedding_bag_backward_cuda_max" not
    implemented for BFloat16) nor for the bfloat16 per_sample_weights gradient
    ("_embedding_bag_per_sample_weights_backward_cuda"): when such a gradient is needed, the
    same-dtype call runs on CPU copies (autograd flows through the copies), so verification
    still has torch's own error."""
    mode = kwargs.get("mode", args[3] if len(args) > 3 else "mean")
    psw = kwargs.get("per_sample_weights", args[5] if len(args) > 5 else None)
    max_grad = mode == "max" and weight.dtype in (torch.float16, torch.bfloat16) and weight.requires_grad
    psw_grad = isinstance(psw, torch.Tensor) and psw.dtype == torch.bfloat16 and psw.requires_grad
    if weight.is_cuda and (max_grad or psw_grad) and torch.is_grad_enabled():
        cpu = lambda t: t.cpu() if isinstance(t, torch.Tensor) else t  # noqa: E731
        args = tuple(cpu(a) for a in args)
        kwargs = {k: cpu(v) for k, v in kwargs.items()}
        return F.embedding_bag(input.cpu(), weight.cpu(), cpu(offsets), *args, **kwargs).to(weight.device)
    return F.embedding_bag(input, weight, offsets, *args, **kwargs)


SPEC = OpSpec(
    name="embedding_bag",
    impl=embedding_bag,
    reference=embedding_bag_reference,
    torch_impl=embedding_bag_torch,
    make_inputs=_make_inputs,
    cost=embedding_bag_cost,
    reduction_length=lambda case: max(1, case["shape"][1]),
    dtypes=FLOAT_DTYPES,
    cases=CASES,
    suites=SUITES,
    baselines={
        **baselines.eager_and_compiled(F.embedding_bag),
    },
    grad_args=(1, 8),
    marker="embedding_bag",
)

SPECS = (SPEC,)


# The tunables of this family's heuristics: what roofkit.config.override may set.
TUNABLES = ("FWD_KERNEL", "FWD_STEP_BYTES", "FWD_ELEMS_PER_THREAD", "FWD_WAVES", "FWD_MAX_BLOCK_L", "FWD_TILE",
            "BWD_STEP_BYTES", "BWD_ELEMS_PER_THREAD", "BWD_MAX_BLOCK_D", "BWD_MAX_BLOCK_K", "BWD_MAX_CHUNKS",
            "BWD_WAVES", "FIXUP_BLOCK_P", "ZERO_TILE", "CHECK_BLOCK", "EARLY_CHECK", "MAX_PROGRAMS_PER_SM")
