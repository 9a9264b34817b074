"""softmax and log_softmax over any dimension, forward and backward.

    softmax(x)_i = exp(x_i - max x) / sum_j exp(x_j - max x)
    log_softmax(x)_i = x_i - max x - log(sum_j exp(x_j - max x))

Program mapping: the reduced dimension is viewed as the last axis of a 2-D (M rows, N) view with
arbitrary strides (no copy when strides allow one). One program owns BLOCK_M whole rows.
Rows that fit on chip are read once and written once (``ONE_PASS``). Longer 16-bit rows (a
vocabulary of 128256), when there are at least as many rows as SMs, go through cross_entropy's
staged-row kernel on CUDA (``_staged``: the row held in shared memory, read once). Other long
rows take an online pass (per-row running maximum and rescaled sum) and a
normalizing pass that re-reads the row (largely from L2 on an H200: docs/softmax_cross_entropy.md). When
there are fewer such rows than SMs, each row is instead split across ``splits`` programs that
each hold one segment on chip: every program posts its segment's (max, sum of exp) to a small
workspace, waits for the other programs of its row, combines the partials and normalizes its
segment from registers (read once, written once). Programs take their row from a ticket counter
(an atomic), so a waiting program only ever waits for programs that have already started: no
deadlock whatever the number of SMs.
Source: Milakov & Gimelshein, "Online normalizer calculation for softmax" (2018); Triton
tutorial 02 (fused softmax).
"""

from __future__ import annotations

import functools
import math
import os
from typing import NamedTuple

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from ..harness import baselines
from ..harness.inputs import random_tensor
from ..harness.spec import Cost, Inputs, OpSpec, case
from ._jit import _round_for_store, _row_block
from ._common import (FLOAT_DTYPES, INTERPRETED, bf16_rne, check_tensor, next_pow2, normalize_dim, row_view, rows_of,
                      sm_count, cdiv)
from ._runtime import Op, cached_launch, planned

# ----------------------------------------------------------------------------- reference, cost


def softmax_reference(input: torch.Tensor, dim: int = -1, dtype=None) -> torch.Tensor:
    """softmax in float64 (``dtype`` only selects the expected output dtype elsewhere)."""
    return torch.softmax(input.to(torch.float64), dim=dim)


def log_softmax_reference(input: torch.Tensor, dim: int = -1, dtype=None) -> torch.Tensor:
    """log_softmax in float64."""
    return torch.log_softmax(input.to(torch.float64), dim=dim)


def softmax_cost(case, dtype: torch.dtype) -> Cost:
    """Forward: read x, write y; 5 FLOP per element (max, subtract, exp, sum, divide).
    ``mode='fwd_bwd'`` adds the backward: read y and dy, write dx; 4 FLOP per element."""
    numel = math.prod(case["shape"])
    size = torch.empty((), dtype=dtype).element_size()
    if case.get("mode", "fwd") == "fwd_bwd":
        return Cost(flops=9 * numel, bytes=5 * numel * size)
    return Cost(flops=5 * numel, bytes=2 * numel * size)


# ----------------------------------------------------------------------------- launch heuristic

# Longest row held on chip in one pass (elements); longer rows take the online two-pass path.
ONE_PASS_MAX_N = 32768
# Longest segment of a split row held by one program, and the most programs per row.
SPLIT_SEG = 16384
MAX_SPLITS = 64
SPLIT_NUM_WARPS = 16
# Chunk of a long row processed per loop iteration (rows up to 65536 elements / longer rows).
ONLINE_BLOCK_N = 8192
ONLINE_BLOCK_N_LONG = 16384


class Config(NamedTuple):
    """Launch configuration. ``programs_per_sm`` > 0 makes the grid persistent (that many programs
    per SM, possibly fractional, each looping over row blocks); 0: one program per row block.
    ``splits`` > 0 splits each row across that many programs, each holding a segment of up to
    BLOCK_N elements."""

    one_pass: bool
    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    programs_per_sm: float = 0
    splits: int = 0


def _launch_config(n: int, device: torch.device | None = None, m: int | None = None) -> Config:
    """Deterministic heuristic from the row length and row count (docs/softmax_cross_entropy.md has the
    sweeps behind it): rows on chip take tiles of about 2048 elements with 512 elements per
    warp. Longer rows, when there are fewer rows than SMs (``m`` < SM count), are split in
    segments of at most ``SPLIT_SEG`` elements over at most ``MAX_SPLITS`` programs so that every
    SM has work; otherwise (and beyond that) the online path in chunks of ``ONLINE_BLOCK_N``
    (``ONLINE_BLOCK_N_LONG`` past 65536), which measured faster than the split form when rows
    are plentiful (the split form's cross-program wait costs more than the online path's
    second read, much of which the L2 serves)."""
    # Cached per (n, the facts it depends on, the module's tunables): the tunables are read per
    # call so that setting them (tests monkeypatch them) still takes effect once kept plans are
    # dropped (_runtime.clear_plans); the row count
    # matters only through "fewer rows than SMs".
    cfg = _one_pass_config(n, ONE_PASS_MAX_N)
    if cfg is not None:
        return cfg
    on_cuda = device is not None and device.type == "cuda"
    sms = sm_count(device) if on_cuda else 0
    few_rows = m is None or not on_cuda or m < sms
    return _long_row_config(n, sms, few_rows, SPLIT_SEG, MAX_SPLITS, SPLIT_NUM_WARPS, ONLINE_BLOCK_N,
                            ONLINE_BLOCK_N_LONG)


@functools.lru_cache(maxsize=None)
def _one_pass_config(n: int, one_pass_max_n: int) -> Config | None:
    """The configuration of rows held on chip, or None when the row is longer."""
    block_n = next_pow2(n)
    if block_n <= one_pass_max_n:
        block_m = max(1, 2048 // block_n)
        return Config(True, block_m, block_n, max(4, min(32, block_m * block_n // 512)))
    return None


@functools.lru_cache(maxsize=None)
def _long_row_config(n: int, sms: int, few_rows: bool, split_seg: int, max_splits: int, split_num_warps: int,
                     online_block_n: int, online_block_n_long: int) -> Config:
    """Rows longer than one pass holds: split (``sms`` > 0 on CUDA caps the split count), else
    the online path."""
    block_n = next_pow2(n)
    splits = triton.cdiv(n, split_seg)
    if sms:
        max_splits = min(max_splits, sms)
    if few_rows and splits <= max_splits:
        seg = next_pow2(triton.cdiv(n, splits))
        return Config(True, 1, seg, max(4, min(split_num_warps, seg // 512)), splits=splits)
    if block_n <= 65536:
        return Config(False, 1, online_block_n, max(4, online_block_n // 512))
    return Config(False, 1, online_block_n_long, max(4, min(32, online_block_n_long // 512)))


def _grid(m: int, cfg: Config, device: torch.device) -> int:
    blocks = cdiv(m, cfg.BLOCK_M)
    if cfg.programs_per_sm:
        blocks = min(blocks, max(1, int(cfg.programs_per_sm * sm_count(device))))
    return blocks


# ----------------------------------------------------------------------------- kernels


@triton.jit
def _softmax_fwd_kernel(
    x_ptr, y_ptr, M, N,
    stride_xm, stride_xn, stride_ym, stride_yn,
    LOG: tl.constexpr, ONE_PASS: tl.constexpr, USE_INT64: tl.constexpr, BF16_RNE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """softmax (or log_softmax) of BLOCK_M rows of length N per iteration, the program looping
    over row blocks pid, pid + num_programs, ... Tile [BLOCK_M, BLOCK_N]; one pass when the row
    fits (ONE_PASS), else an online pass and a normalizing pass."""
    cols = tl.arange(0, BLOCK_N)
    if USE_INT64:
        cols = cols.to(tl.int64)
    for rb in range(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.num_programs(0)):
        _, row_mask, rows = _row_block(rb * BLOCK_M, M, BLOCK_M)
        x_rows = x_ptr + rows[:, None] * stride_xm
        y_rows = y_ptr + rows[:, None] * stride_ym
        if ONE_PASS:
            mask = row_mask[:, None] & (cols[None, :] < N)
            x = tl.load(x_rows + cols[None, :] * stride_xn, mask=mask, other=-float("inf")).to(tl.float32)
            m = tl.max(x, axis=1)
            z = x - m[:, None]
            e = tl.exp(z)
            s = tl.sum(e, axis=1)
            if LOG:
                y = z - tl.log(s)[:, None]
            else:
                y = e / s[:, None]
            tl.store(y_rows + cols[None, :] * stride_yn, _round_for_store(y, y_ptr, BF16_RNE), mask=mask)
        else:
            # Online pass: a running maximum per row, updated once per chunk, and the sum
            # rescaled by exp(m_old - m_new): one exp per element.
            m = tl.full([BLOCK_M], -float("inf"), tl.float32)
            s = tl.zeros([BLOCK_M], tl.float32)
            for start in range(0, N, BLOCK_N):
                offs = start + cols
                mask = row_mask[:, None] & (offs[None, :] < N)
                x = tl.load(x_rows + offs[None, :] * stride_xn, mask=mask, other=-float("inf"),
                            eviction_policy="evict_last").to(tl.float32)
                m, s = _online_update(m, s, x)
            # An all -inf row has s == 0 and m == -inf: z below is NaN, as in torch.
            log_s = tl.log(s)
            # The normalizing pass walks the row backwards: its last chunks are the likeliest
            # to still be in L2.
            n_chunks = tl.cdiv(N, BLOCK_N)
            for k in range(0, n_chunks):
                offs = (n_chunks - 1 - k) * BLOCK_N + cols
                mask = row_mask[:, None] & (offs[None, :] < N)
                x = tl.load(x_rows + offs[None, :] * stride_xn, mask=mask, other=-float("inf"),
                            eviction_policy="evict_first").to(tl.float32)
                z = x - m[:, None]
                if LOG:
                    y = z - log_s[:, None]
                else:
                    y = tl.exp(z) / s[:, None]
                tl.store(y_rows + offs[None, :] * stride_yn, _round_for_store(y, y_ptr, BF16_RNE), mask=mask,
                         eviction_policy="evict_first")


@triton.jit
def _softmax_bwd_kernel(
    dy_ptr, y_ptr, dx_ptr, M, N,
    stride_dym, stride_dyn, stride_ym, stride_yn, stride_dxm, stride_dxn,
    LOG: tl.constexpr, ONE_PASS: tl.constexpr, USE_INT64: tl.constexpr, BF16_RNE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Gradient of BLOCK_M rows per iteration (row blocks strided by the program count):
    softmax dx = y * (dy - sum(dy * y)); log_softmax dx = dy - exp(y) * sum(dy).
    Tile [BLOCK_M, BLOCK_N]; rows longer than BLOCK_N are walked twice."""
    cols = tl.arange(0, BLOCK_N)
    if USE_INT64:
        cols = cols.to(tl.int64)
    for rb in range(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.num_programs(0)):
        _, row_mask, rows = _row_block(rb * BLOCK_M, M, BLOCK_M)
        dy_rows = dy_ptr + rows[:, None] * stride_dym
        y_rows = y_ptr + rows[:, None] * stride_ym
        dx_rows = dx_ptr + rows[:, None] * stride_dxm
        if ONE_PASS:
            mask = row_mask[:, None] & (cols[None, :] < N)
            dy = tl.load(dy_rows + cols[None, :] * stride_dyn, mask=mask, other=0.0).to(tl.float32)
            y = tl.load(y_rows + cols[None, :] * stride_yn, mask=mask, other=0.0).to(tl.float32)
            if LOG:
                dx = dy - tl.exp(y) * tl.sum(dy, axis=1)[:, None]
            else:
                dx = y * (dy - tl.sum(dy * y, axis=1)[:, None])
            tl.store(dx_rows + cols[None, :] * stride_dxn, _round_for_store(dx, dx_ptr, BF16_RNE), mask=mask)
        else:
            acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            for start in range(0, N, BLOCK_N):
                offs = start + cols
                mask = row_mask[:, None] & (offs[None, :] < N)
                dy = tl.load(dy_rows + offs[None, :] * stride_dyn, mask=mask, other=0.0,
                             eviction_policy="evict_last").to(tl.float32)
                if LOG:
                    acc += dy
                else:
                    y = tl.load(y_rows + offs[None, :] * stride_yn, mask=mask, other=0.0,
                                eviction_policy="evict_last").to(tl.float32)
                    acc += dy * y
            total = tl.sum(acc, axis=1)
            n_chunks = tl.cdiv(N, BLOCK_N)
            for k in range(0, n_chunks):
                offs = (n_chunks - 1 - k) * BLOCK_N + cols
                mask = row_mask[:, None] & (offs[None, :] < N)
                dy = tl.load(dy_rows + offs[None, :] * stride_dyn, mask=mask, other=0.0,
                             eviction_policy="evict_first").to(tl.float32)
                y = tl.load(y_rows + offs[None, :] * stride_yn, mask=mask, other=0.0,
                            eviction_policy="evict_first").to(tl.float32)
                if LOG:
                    dx = dy - tl.exp(y) * total[:, None]
                else:
                    dx = y * (dy - total[:, None])
                tl.store(dx_rows + offs[None, :] * stride_dxn, _round_for_store(dx, dx_ptr, BF16_RNE), mask=mask)


@triton.jit
def _online_update(m, s, x):
    """Rows' running max ``m`` and sum ``s`` of exp(x - m) (fp32) after the chunk ``x`` [BLOCK_M,
    BLOCK_N]: one exp per element, the sum rescaled by exp(m_old - m_new). A row with nothing
    finite yet (max -inf) adds 0 (exp(-inf - -inf) would be NaN); the guard is an equality, so
    NaN still flows into the sum."""
    m_new = tl.maximum(m, tl.max(x, axis=1))
    dead = m_new == -float("inf")
    alpha = tl.where(dead, 0.0, tl.exp(m - m_new))
    e = tl.where(dead[:, None], 0.0, tl.exp(x - m_new[:, None]))
    return m_new, s * alpha + tl.sum(e, axis=1)


@triton.jit
def _post_and_wait(count_ptr, row, SPLITS: tl.constexpr):
    """Count this program's partial (stored before the call) for ``row``, then spin until all
    SPLITS programs of the row have counted theirs. Release/acquire at GPU scope; the barrier
    orders every thread's partial store before the release."""
    tl.debug_barrier()
    seen = tl.atomic_add(count_ptr + row, 1, sem="release", scope="gpu") + 1
    if seen < SPLITS:
        # Poll with plain volatile loads (no atomic traffic at the L2 while waiting), then one
        # acquire to order the partials' loads after the other programs' releases.
        while seen < SPLITS:
            seen = tl.load(count_ptr + row, volatile=True)
        tl.atomic_add(count_ptr + row, 0, sem="acquire", scope="gpu")


@triton.jit
def _split_position(count_ptr, M, SPLITS: tl.constexpr, PHASE: tl.constexpr):
    """(row, segment) of this program. Fused (PHASE 0): from a ticket counter, so that every
    program a waiting program waits for has already started. Two launches (PHASE 1/2): the
    program id."""
    if PHASE == 0:
        ticket = tl.atomic_add(count_ptr + M, 1, sem="relaxed", scope="gpu")
    else:
        ticket = tl.program_id(0)
    return ticket // SPLITS, ticket % SPLITS


@triton.jit
def _segment(count_ptr, M, N, SEG, SPLITS: tl.constexpr, PHASE: tl.constexpr, USE_INT64: tl.constexpr,
             BLOCK_N: tl.constexpr):
    """(row, segment, columns, their mask) of this program in a split kernel: columns seg * SEG +
    [0, BLOCK_N), of which the first SEG below N are the segment's."""
    row, seg = _split_position(count_ptr, M, SPLITS, PHASE)
    cols = tl.arange(0, BLOCK_N)
    offs = seg * SEG + cols
    if USE_INT64:
        offs = offs.to(tl.int64)
    return row, seg, offs, (cols < SEG) & (offs < N)


@triton.jit
def _softmax_split_fwd_kernel(
    x_ptr, y_ptr, part_ptr, count_ptr, M, N, SEG,
    stride_xm, stride_xn, stride_ym, stride_yn,
    LOG: tl.constexpr, USE_INT64: tl.constexpr, BF16_RNE: tl.constexpr,
    SPLITS: tl.constexpr, SPLITS_P2: tl.constexpr, BLOCK_N: tl.constexpr, PHASE: tl.constexpr,
):
    """softmax of one segment (SEG <= BLOCK_N elements) of one row per program; a row's SPLITS
    programs exchange (max, sum of exp) through ``part_ptr`` (fp32 [M, SPLITS, 2]).
    PHASE 0: one launch, programs wait for their row (``_post_and_wait``). PHASE 1 then PHASE 2:
    two launches (partials, then normalize) for the interpreter, which runs programs in turn."""
    row, seg, offs, mask = _segment(count_ptr, M, N, SEG, SPLITS, PHASE, USE_INT64, BLOCK_N)
    row64 = row.to(tl.int64)
    x = tl.load(x_ptr + row64 * stride_xm + offs * stride_xn, mask=mask, other=-float("inf")).to(tl.float32)
    part = part_ptr + row64 * (2 * SPLITS)
    if PHASE != 2:
        m = tl.max(x, axis=0)
        # Guard an all -inf segment (exp(-inf - -inf) is NaN); an equality, so NaN flows on.
        e = tl.where(m == -float("inf"), 0.0, tl.exp(x - m))
        tl.store(part + 2 * seg, m)
        tl.store(part + 2 * seg + 1, tl.sum(e, axis=0))
    if PHASE == 0:
        _post_and_wait(count_ptr, row, SPLITS)
    if PHASE != 1:
        k = tl.arange(0, SPLITS_P2)
        pm = tl.load(part + 2 * k, mask=k < SPLITS, other=-float("inf"), volatile=True)
        ps = tl.load(part + 2 * k + 1, mask=k < SPLITS, other=0.0, volatile=True)
        gm = tl.max(pm, axis=0)
        # Fixed combining order: every program of the row gets bitwise the same (gm, gs).
        gs = tl.sum(tl.where(pm == -float("inf"), 0.0, ps * tl.exp(pm - gm)), axis=0)
        # An all -inf row has gs == 0 and gm == -inf: z is NaN, as in torch.
        z = x - gm
        if LOG:
            y = z - tl.log(gs)
        else:
            y = tl.exp(z) / gs
        tl.store(y_ptr + row64 * stride_ym + offs * stride_yn, _round_for_store(y, y_ptr, BF16_RNE), mask=mask)


@triton.jit
def _softmax_split_bwd_kernel(
    dy_ptr, y_ptr, dx_ptr, part_ptr, count_ptr, M, N, SEG,
    stride_dym, stride_dyn, stride_ym, stride_yn, stride_dxm, stride_dxn,
    LOG: tl.constexpr, USE_INT64: tl.constexpr, BF16_RNE: tl.constexpr,
    SPLITS: tl.constexpr, SPLITS_P2: tl.constexpr, BLOCK_N: tl.constexpr, PHASE: tl.constexpr,
):
    """Gradient of one segment per program (mapping and phases as ``_softmax_split_fwd_kernel``);
    the row's programs exchange their partial sum(dy * y) (log_softmax: sum(dy)) through
    ``part_ptr`` (fp32 [M, SPLITS]) and add the partials in a fixed order."""
    row, seg, offs, mask = _segment(count_ptr, M, N, SEG, SPLITS, PHASE, USE_INT64, BLOCK_N)
    row64 = row.to(tl.int64)
    dy = tl.load(dy_ptr + row64 * stride_dym + offs * stride_dyn, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + row64 * stride_ym + offs * stride_yn, mask=mask, other=0.0).to(tl.float32)
    part = part_ptr + row64 * SPLITS
    if PHASE != 2:
        if LOG:
            tl.store(part + seg, tl.sum(dy, axis=0))
        else:
            tl.store(part + seg, tl.sum(dy * y, axis=0))
    if PHASE == 0:
        _post_and_wait(count_ptr, row, SPLITS)
    if PHASE != 1:
        k = tl.arange(0, SPLITS_P2)
        total = tl.sum(tl.load(part + k, mask=k < SPLITS, other=0.0, volatile=True), axis=0)
        if LOG:
            dx = dy - tl.exp(y) * total
        else:
            dx = y * (dy - total)
        tl.store(dx_ptr + row64 * stride_dxm + offs * stride_dxn, _round_for_store(dx, dx_ptr, BF16_RNE), mask=mask)


# ----------------------------------------------------------------------------- host launchers



def _output_rows(like: torch.Tensor, dim: int, dtype: torch.dtype):
    """A contiguous output shaped like ``like`` and its (rows, N) view, or a scratch buffer when
    no view exists (the caller copies it back with ``_finish``)."""
    if dtype == like.dtype and like.is_contiguous():
        out = torch.empty_like(like)  # skips parsing a shape, dtype and device: microseconds
    else:
        out = torch.empty(like.shape, dtype=dtype, device=like.device)
    if dim == out.dim() - 1:
        return out, out.view(-1, out.shape[-1]), False  # the common case, without movedim's cost
    view = row_view(out, dim)
    if view is not None:
        return out, view, False
    return out, torch.empty((out.numel() // out.shape[dim], out.shape[dim]), dtype=dtype, device=out.device), True


def _finish(out: torch.Tensor, rows: torch.Tensor, dim: int, copied: bool) -> torch.Tensor:
    if copied:
        out.movedim(dim, -1).copy_(rows.view(out.movedim(dim, -1).shape))
    return out


# ``ROOFKIT_SOFTMAX_SPLIT_PHASES=2`` (see ``_split_phases``), read once at import: an environment
# read per call costs microseconds on the host path.
_FORCE_TWO_PHASES = os.environ.get("ROOFKIT_SOFTMAX_SPLIT_PHASES") == "2"


def _split_phases() -> tuple[int, ...]:
    """One fused launch on the GPU; two launches (partials, then normalize) under the
    interpreter, which runs a grid's programs one after another (a waiting program would spin
    forever). ``ROOFKIT_SOFTMAX_SPLIT_PHASES=2`` forces the two-launch form on the GPU too."""
    if INTERPRETED or _FORCE_TWO_PHASES:
        return (1, 2)
    return (0,)


def _staged(xr: torch.Tensor, yr: torch.Tensor, log: bool) -> bool:
    """Whether the rows ``xr`` were written into ``yr`` by cross_entropy's staged-row kernel
    (``_ce_smem``, MODE 1 softmax / 2 log_softmax): rows too long for the one-pass kernel, held
    in shared memory, so each is read once (the online path reads it twice). Taken where that
    kernel applies (``cross_entropy._smem_plan``: CUDA, 16-bit rows of a multiple of 8 elements
    with unit stride and 16-byte alignment, at least as many rows as SMs, at most a quarter of a
    row past shared memory) and the output rows are contiguous; ``ROOFKIT_CE_SMEM=0`` turns it
    off. False: nothing was launched, the caller launches the Triton kernels."""
    from .cross_entropy import _smem_launch, _smem_plan  # (cross_entropy imports this module)

    m, n = xr.shape
    if yr.stride() != (n, 1) or yr.data_ptr() % 16:
        return False
    plan = _smem_plan(xr, True, False)
    if plan is None:
        return False
    return _smem_launch(plan, (xr, xr, xr, yr, yr, m, n, xr.stride(0), 0, 0, 0.0),
                        {"SMOOTH": False, "MEAN": False, "MODE": 2 if log else 1}, m, xr.device,
                        op="log_softmax" if log else "softmax")


def _softmax_forward(x: torch.Tensor, dim: int, log: bool, config: Config | None = None) -> torch.Tensor:
    if x.numel() == 0:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    xr = rows_of(x, dim)
    out, yr, copied = _output_rows(x, dim, x.dtype)
    m, n = xr.shape
    sxm, sxn = xr.stride()
    sym, syn = yr.stride()
    if config is None and n > ONE_PASS_MAX_N and _staged(xr, yr, log):
        return _finish(out, yr, dim, copied)
    cfg = config or _launch_config(n, x.device, m)
    use_int64 = n * (abs(sxn) + abs(syn)) >= 2**31  # needs_int64(n * sxn, n * syn)
    if cfg.splits:
        seg = cdiv(n, cfg.splits)
        splits_p2 = 1 << (cfg.splits - 1).bit_length()  # next_pow2(splits), without triton's call cost
        part = torch.empty((m, cfg.splits, 2), dtype=torch.float32, device=x.device)
        count = torch.zeros(m + 1, dtype=torch.int32, device=x.device)
        for phase in _split_phases():
            cached_launch(
                _LAUNCHES, _softmax_split_fwd_kernel, m * cfg.splits,
                LOG=log, USE_INT64=use_int64, BF16_RNE=bf16_rne(x.dtype), SPLITS=cfg.splits,
                SPLITS_P2=splits_p2, BLOCK_N=cfg.BLOCK_N, PHASE=phase, num_warps=cfg.num_warps,
            )(xr, yr, part, count, m, n, seg, sxm, sxn, sym, syn)
        return _finish(out, yr, dim, copied)
    cached_launch(
        _LAUNCHES, _softmax_fwd_kernel, _grid(m, cfg, x.device),
        LOG=log, ONE_PASS=cfg.one_pass, USE_INT64=use_int64, BF16_RNE=bf16_rne(x.dtype),
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps,
    )(xr, yr, m, n, sxm, sxn, sym, syn)
    return _finish(out, yr, dim, copied)


def _softmax_backward(grad: torch.Tensor, y: torch.Tensor, dim: int, log: bool, config: Config | None = None) -> torch.Tensor:
    if y.numel() == 0:
        return torch.empty(y.shape, dtype=y.dtype, device=y.device)
    dyr = rows_of(grad, dim)
    yr = rows_of(y, dim)
    out, dxr, copied = _output_rows(y, dim, y.dtype)
    m, n = yr.shape
    sdym, sdyn = dyr.stride()
    sym, syn = yr.stride()
    sdxm, sdxn = dxr.stride()
    cfg = config or _launch_config(n, y.device, m)
    use_int64 = n * (abs(sdyn) + abs(syn) + abs(sdxn)) >= 2**31  # needs_int64(n * each column stride)
    if cfg.splits:
        seg = cdiv(n, cfg.splits)
        splits_p2 = 1 << (cfg.splits - 1).bit_length()  # next_pow2(splits), without triton's call cost
        part = torch.empty((m, cfg.splits), dtype=torch.float32, device=y.device)
        count = torch.zeros(m + 1, dtype=torch.int32, device=y.device)
        for phase in _split_phases():
            cached_launch(
                _LAUNCHES, _softmax_split_bwd_kernel, m * cfg.splits,
                LOG=log, USE_INT64=use_int64, BF16_RNE=bf16_rne(y.dtype), SPLITS=cfg.splits,
                SPLITS_P2=splits_p2, BLOCK_N=cfg.BLOCK_N, PHASE=phase, num_warps=cfg.num_warps,
            )(dyr, yr, dxr, part, count, m, n, seg, sdym, sdyn, sym, syn, sdxm, sdxn)
        return _finish(out, dxr, dim, copied)
    cached_launch(
        _LAUNCHES, _softmax_bwd_kernel, _grid(m, cfg, y.device),
        LOG=log, ONE_PASS=cfg.one_pass, USE_INT64=use_int64, BF16_RNE=bf16_rne(y.dtype),
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps,
    )(dyr, yr, dxr, m, n, sdym, sdyn, sym, syn, sdxm, sdxn)
    return _finish(out, dxr, dim, copied)


# ----------------------------------------------------------------------------- custom ops, autograd


def _softmax_fwd(x: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    return _softmax_forward(x, dim, log)


def _softmax_fwd_fake(x, dim, log):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _softmax_bwd(grad: torch.Tensor, y: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    return _softmax_backward(grad, y, dim, log)


def _softmax_bwd_fake(grad, y, dim, log):
    return torch.empty(y.shape, dtype=y.dtype, device=y.device)


def _setup_context(ctx, inputs, output):
    _, dim, log = inputs
    ctx.dim, ctx.log = dim, log
    ctx.save_for_backward(output)


def _backward(ctx, grad):
    (y,) = ctx.saved_tensors
    return _softmax_bwd_op(grad, y, ctx.dim, ctx.log), None, None


_LAUNCHES: dict = {}
_softmax_bwd_op = Op("roofkit::softmax_bwd", _softmax_bwd, _softmax_bwd_fake)
_softmax_fwd_op = Op("roofkit::softmax_fwd", _softmax_fwd, _softmax_fwd_fake).autograd(_setup_context, _backward)


# ----------------------------------------------------------------------------- public functions


def _prepare(op: str, input, dim, dtype):
    if dtype is not None:
        if dtype not in FLOAT_DTYPES:
            raise TypeError(f"roofkit.{op}: dtype must be one of float32, float16, bfloat16 or None; got {dtype}")
        if isinstance(input, torch.Tensor) and input.layout == torch.strided:
            input = input.to(dtype)  # as torch: the input is cast before the operation
    check_tensor(op, "input", input)
    dim = normalize_dim(op, dim, input.dim())
    if input.dim() == 0:
        return input.reshape(1), 0, True
    return input, dim, False


@planned
def softmax(input: torch.Tensor, dim: int = -1, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Softmax along ``dim``: y_i = exp(x_i - max x) / sum_j exp(x_j - max x).

    Mirrors ``torch.nn.functional.softmax`` (``dim`` is required there; here it defaults to -1).

    Args:
        input: float32, float16 or bfloat16 tensor of any shape and strides, on CUDA (or on CPU
            with TRITON_INTERPRET=1).
        dim: dimension to normalize over (any integer-like); negative values count from the end.
        dtype: if given (float32, float16 or bfloat16), ``input`` is cast to it before the
            operation, as in torch (so a float64 input with ``dtype=torch.float32`` is accepted).
    Returns:
        A contiguous tensor of ``input``'s shape in ``dtype`` (default ``input.dtype``).
    Raises:
        TypeError: ``input`` not a tensor or not float32/float16/bfloat16; bad ``dtype`` or ``dim`` type.
        ValueError: ``input`` on an unsupported device.
        IndexError: ``dim`` out of range.
    Numerics:
        float32 accumulation; one rounding to the output dtype. A row that is entirely -inf gives
        NaN, and a row containing NaN or +inf gives NaN everywhere, as in torch. Deterministic.
        Backward is first order (no double backward). Long 16-bit rows (the staged-row kernel)
        take exponentials that flush results below 2**-126 to 0: a bfloat16 softmax output that
        would be subnormal (below 1.2e-38) is 0 there, where torch keeps it.
    Cost:
        Reads the input once and writes the output once (2 * numel * element size bytes) when
        the row fits on chip (up to ``ONE_PASS_MAX_N`` elements) or, for long 16-bit rows on
        CUDA, is staged in shared memory; other long rows read it twice, the second time partly
        from DRAM on an H200 (docs/softmax_cross_entropy.md). About 5 FLOP per element.
    Source:
        Triton tutorial 02 (fused softmax); Milakov & Gimelshein 2018 (online normalizer).
    """
    x, d, scalar = _prepare("softmax", input, dim, dtype)
    y = _softmax_fwd_op.apply(x, d, False)
    return y.reshape(()) if scalar else y


@planned
def log_softmax(input: torch.Tensor, dim: int = -1, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Log-softmax along ``dim``: y_i = x_i - max x - log(sum_j exp(x_j - max x)).

    Mirrors ``torch.nn.functional.log_softmax``. Arguments, returns, errors, numerics and cost as
    :func:`softmax` (an entirely -inf row gives NaN; -inf entries of other rows give -inf).
    Source: as :func:`softmax`.
    """
    x, d, scalar = _prepare("log_softmax", input, dim, dtype)
    y = _softmax_fwd_op.apply(x, d, True)
    return y.reshape(()) if scalar else y


# ----------------------------------------------------------------------------- spec


def _make_inputs(case, dtype, generator, device) -> Inputs:
    mag = case.get("magnitude", 1e4 if dtype != torch.float16 else 1e4)
    x = random_tensor(case["shape"], dtype, generator, device, case.get("dist", "normal"),
                      magnitude=mag, layout=case.get("layout", "contiguous"))
    kwargs = {"dim": case.get("dim", -1)}
    if case.get("out_dtype"):
        kwargs["dtype"] = getattr(torch, case["out_dtype"])
    return Inputs((x,), kwargs)


def _reduction_length(case) -> int:
    shape = case["shape"]
    return shape[case.get("dim", -1)] if shape else 1


_F32 = (torch.float32,)
_BF16 = (torch.bfloat16,)

CASES = [
    case("scalar", ["quick"], shape=()),
    case("tiny_1x1", ["quick"], shape=(1, 1)),
    case("odd_3x7", ["quick"], shape=(3, 7)),
    case("prime_37x781", shape=(37, 781)),
    case("row_4096", shape=(4, 4096)),
    case("leading_dims_2x3x50", shape=(2, 3, 50)),
    case("online_path_3x40000", shape=(3, 40000), dtypes=_F32),
    case("dim0_33x16", ["quick"], shape=(33, 16), dim=0),
    case("dim_last_positive_6x7", shape=(6, 7), dim=1),
    case("dim_minus2_4d_2x3x9x5", shape=(2, 3, 9, 5), dim=-2),
    case("four_dims_last_2x3x4x20", shape=(2, 3, 4, 20)),
    case("many_rows_130x33", shape=(130, 33)),
    case("expanded_rows_5x40", shape=(5, 40), layout="expanded"),
    case("grad_transposed_12x40", shape=(12, 40), grad_layout="transposed"),
    case("pos_inf_8x129", shape=(8, 129), dist="pos_inf", grad=False),
    case("middle_dim_4x5x6", shape=(4, 5, 6), dim=1),
    case("transposed_16x33", shape=(16, 33), layout="transposed"),
    case("offset_9x65", shape=(9, 65), layout="offset"),
    case("strided_9x65", shape=(9, 65), layout="strided"),
    case("large_magnitude_8x300", shape=(8, 300), dist="large"),
    case("neg_inf_8x129", shape=(8, 129), dist="neg_inf"),
    case("nan_8x129", shape=(8, 129), dist="nan", grad=False),
    case("ties_8x129", shape=(8, 129), dist="ties"),
    case("arange_5x1000", shape=(5, 1000), dist="arange"),
    case("out_dtype_float32", shape=(6, 100), out_dtype="float32", dtypes=(torch.float16, torch.bfloat16)),
    case("out_dtype_down_to_float16", shape=(6, 100), out_dtype="float16", dtypes=(torch.float32,)),
    case("empty_rows_0x7", ["quick"], shape=(0, 7)),
    case("empty_cols_5x0", shape=(5, 0)),
    # On the GPU (``pytest -m gpu``): the acceptance shapes.
    case("gpu_1823x781", ["gpu"], shape=(1823, 781), dtypes=_F32),
    case("gpu_4000x4000", ["gpu"], shape=(4000, 4000), dtypes=_F32),
    case("gpu_row_1", ["gpu"], shape=(4096, 1)),
    case("gpu_row_781", ["gpu"], shape=(1000, 781)),
    case("gpu_row_4096", ["gpu"], shape=(1000, 4096)),
    case("gpu_row_32768", ["gpu"], shape=(300, 32768)),
    case("gpu_row_131072", ["gpu"], shape=(64, 131072)),
    case("gpu_row_262144", ["gpu"], shape=(32, 262144)),
    case("gpu_row_online_1100000", ["gpu"], shape=(6, 1100000), dtypes=_F32),
    case("gpu_fp16_magnitude_1e4", ["gpu"], shape=(512, 4096), dist="large", dtypes=(torch.float16,)),
    case("gpu_transposed_2048x3000", ["gpu"], shape=(2048, 3000), layout="transposed"),
    case("gpu_dim0_4096x1024", ["gpu"], shape=(4096, 1024), dim=0),
    case("gpu_neg_inf_1024x50000", ["gpu"], shape=(1024, 50000), dist="neg_inf", grad=False),
    case("gpu_over_2pow31_elements", ["gpu", "slow"], shape=(16385, 131072), dtypes=_BF16, grad=False),
]

SUITES = {
    # llama3-8b: vocab 128256 (logits softmax), 32 heads; attention probabilities of
    # 1024 queries x 4096 keys per head (32768 rows) and of 2048 queries x 1024 keys (65536 rows).
    "llama3-8b": [
        case("attn_32768x4096", shape=(32768, 4096), dtypes=_BF16),
        case("attn_65536x1024", shape=(65536, 1024), dtypes=_BF16),
        case("logits_8192x128256", shape=(8192, 128256), dtypes=_BF16),
        case("attn_32768x4096_fwd_bwd", shape=(32768, 4096), dtypes=_BF16, mode="fwd_bwd"),
    ],
    "llama3-70b": [
        case("attn_65536x8192", shape=(65536, 8192), dtypes=_BF16),
        case("logits_8192x128256", shape=(8192, 128256), dtypes=_BF16),
    ],
    # gpt2: vocab 50257, 12 heads x 1024 x 1024.
    "gpt2": [
        case("attn_12288x1024", shape=(12288, 1024), dtypes=_BF16),
        case("logits_16384x50257", shape=(16384, 50257), dtypes=_BF16),
    ],
    "edge": [
        case("fp32_1823x781", shape=(1823, 781), dtypes=_F32),
        case("fp32_4000x4000", shape=(4000, 4000), dtypes=_F32),
        case("row_1_1Mx1", shape=(1 << 20, 1), dtypes=_BF16),
        case("row_262144", shape=(512, 262144), dtypes=_BF16),
    ],
    # host: decoding 8 sequences one token at a time, where the host's cost per call is the time:
    # rows of 4096 (attention probabilities) and the sampling softmax over mistral-7b's vocab 32000
    # (the logits rows are also log_softmax's host suite).
    "host": [
        case("attn_8x4096", shape=(8, 4096), dtypes=_BF16),
        case("attn_8x4096_fwd_bwd", shape=(8, 4096), dtypes=_BF16, mode="fwd_bwd"),
        case("logits_8x32000", shape=(8, 32000), dtypes=_BF16),
        case("logits_8x32000_fwd_bwd", shape=(8, 32000), dtypes=_BF16, mode="fwd_bwd"),
    ],
}


def _liger_softmax():
    try:
        from liger_kernel.ops.softmax import LigerSoftmaxFunction
    except ImportError:
        return None

    def run(input, dim=-1, dtype=None):
        if dim not in (-1, input.dim() - 1) or dtype is not None:
            raise NotImplementedError("Liger softmax covers the last dimension only")
        return LigerSoftmaxFunction.apply(input)

    return run


SOFTMAX_SPEC = OpSpec(
    name="softmax",
    impl=softmax,
    reference=softmax_reference,
    torch_impl=F.softmax,
    make_inputs=_make_inputs,
    cost=softmax_cost,
    reduction_length=_reduction_length,
    dtypes=FLOAT_DTYPES,
    cases=CASES,
    suites=SUITES,
    baselines={
        **baselines.eager_and_compiled(F.softmax),
        "liger": _liger_softmax,
        "flaggems": baselines.flaggems(F.softmax),
    },
    grad_args=(0,),
    marker="softmax",
)

LOG_SOFTMAX_SPEC = SOFTMAX_SPEC.sibling(
    name="log_softmax",
    impl=log_softmax,
    reference=log_softmax_reference,
    torch_impl=F.log_softmax,
    suites={k: [c for c in v if c.name.startswith("logits")] for k, v in SUITES.items()},
    baselines={
        **baselines.eager_and_compiled(F.log_softmax),
        "flaggems": baselines.flaggems(F.log_softmax),
    },
)

SPECS = (SOFTMAX_SPEC, LOG_SOFTMAX_SPEC)


# The tunables of this family's heuristics: what roofkit.config.override may set.
TUNABLES = ("ONE_PASS_MAX_N", "SPLIT_SEG", "MAX_SPLITS", "SPLIT_NUM_WARPS", "ONLINE_BLOCK_N", "ONLINE_BLOCK_N_LONG")
