"""RMSNorm over the last dimension, forward and backward.

    y = x / sqrt(mean(x**2) + eps) * weight

Program mapping: the input is viewed as (M rows, N); one forward program owns BLOCK_M rows
(rows up to ``ONE_PASS_MAX_N`` held on chip: one read, one write; longer rows loop twice). The
backward runs a fixed grid of G programs (a multiple of the SM count), each over a contiguous
range of rows, writing dx and one fp32 row of partial weight gradients; a second kernel sums the
G partials column by column in a fixed order, so dweight is deterministic.
Source: Zhang & Sennrich, "Root Mean Square Layer Normalization" (2019); Triton tutorial 05
(layer norm, two-stage weight-gradient reduction).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from ..harness import baselines
from ..harness.inputs import random_tensor, with_layout
from ..harness.spec import Cost, Inputs, OpSpec, case
from ._jit import _round_for_store, _row_block
from ._common import FLOAT_DTYPES, bf16_rne, cdiv, check_same_device, check_same_dtype, check_tensor, next_pow2, rows_of
from ._norm import (Config, as_shape, bwd_grid, check_param, eps_as_float, fwd_grid, gpu_row_cases, host_suite,
                    layout_cases, random_input, random_weight, row_cases, value_cases)
from ._runtime import Op, Plans, cached_launch, fast_path_ok, needs_grad, planned

# ----------------------------------------------------------------------------- reference, cost

# torch's default eps: the machine epsilon of the type it computes in, float32 for all three
# supported input dtypes (torch.finfo(torch.float32).eps = 1.19e-7).
DEFAULT_EPS = torch.finfo(torch.float32).eps


def rms_norm_reference(input, normalized_shape, weight=None, eps=None):
    """RMSNorm in float64; ``eps=None`` means torch's default for float32/float16/bfloat16
    inputs, the epsilon of the float32 computation type (torch.finfo(torch.float32).eps)."""
    x = input.to(torch.float64)
    eps = DEFAULT_EPS if eps is None else eps
    y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(torch.float64)
    return y


def rms_norm_cost(case, dtype: torch.dtype) -> Cost:
    """Forward: read x (M*N) and weight (N), write y (M*N); 4 FLOP per element.
    ``mode='fwd_bwd'`` adds the backward: read x, dy, weight; write dx and dweight (the five
    M*N passes of the forward+backward pair); about 8 FLOP per element."""
    m, n = math.prod(case["shape"][:-1]), case["shape"][-1]
    size = torch.empty((), dtype=dtype).element_size()
    fwd = Cost(flops=4 * m * n, bytes=(2 * m * n + n) * size)
    if case.get("mode", "fwd") == "fwd_bwd":
        return Cost(flops=fwd.flops + 8 * m * n, bytes=fwd.bytes + (3 * m * n + 2 * n) * size)
    return fwd


# ----------------------------------------------------------------------------- launch heuristic

ONE_PASS_MAX_N = 16384  # longest row held on chip (elements)
LOOP_BLOCK_N = 4096  # chunk of a longer row per loop iteration
PROGRAMS_PER_SM = 2  # backward grid: G = PROGRAMS_PER_SM * SM count (capped by the row count)


def _fwd_config(n: int, residual: bool = False) -> Config:
    """Deterministic heuristic from the row length (docs/norms.md has the sweeps behind it):
    tiles of about 2048 elements (two rows from 8192 on), 1024 elements per warp, at most 8 warps;
    add_rms_norm's rows of 4096 (two more streams) with 16 warps (measured: 70.3 us against 72.0
    with 4 or 8 at 8192 x 4096 bf16 on an H200)."""
    block_n = next_pow2(n)
    if block_n <= ONE_PASS_MAX_N:
        block_m = 2 if block_n == 8192 else max(1, 2048 // block_n)
        warps = 16 if (residual and block_n == 4096) else max(4, min(8, block_m * block_n // 1024))
        return Config(True, block_m, block_n, warps)
    return Config(False, 1, LOOP_BLOCK_N, 16)


def _bwd_config(n: int) -> Config:
    """Tiles of about 2048 elements, 256 per warp (at most 16 warps); 2 programs per SM for tiles
    up to 4096 elements, else 1; a 3-deep software-pipelined row loop."""
    block_n = next_pow2(n)
    if block_n == 4096:  # measured at 8192 x 4096 bf16 on an H200: 67.1 us against 70.4 (rms_norm)
        return Config(True, 2, block_n, 16, 1, 3)
    if block_n <= ONE_PASS_MAX_N:
        block_m = max(1, 2048 // block_n)
        tile = block_m * block_n
        warps = max(4, min(16, tile // 256))
        return Config(True, block_m, block_n, warps, PROGRAMS_PER_SM if tile <= 4096 else 1, 3)
    return Config(False, 1, LOOP_BLOCK_N, 16, PROGRAMS_PER_SM)


# ----------------------------------------------------------------------------- kernels


@triton.jit
def _add_residual(x, res_ptrs, rout_ptrs, mask, BF16_RNE: tl.constexpr, STORE: tl.constexpr,
                  EVICT: tl.constexpr, STORE_CACHE: tl.constexpr):
    """x + residual rounded to the output's dtype, as float32 (the model's residual stream is in
    the input dtype); stored to ``rout_ptrs`` when STORE. EVICT / STORE_CACHE: the load's eviction
    policy and the store's cache modifier ("": the defaults)."""
    return _residual_sum(x, tl.load(res_ptrs, mask=mask, other=0.0, eviction_policy=EVICT), rout_ptrs, mask, BF16_RNE,
                         STORE, STORE_CACHE)


@triton.jit
def _residual_sum(x, res, rout_ptrs, mask, BF16_RNE: tl.constexpr, STORE: tl.constexpr, STORE_CACHE: tl.constexpr):
    """x + the loaded residual ``res``, rounded and returned as ``_add_residual`` does."""
    r = _round_for_store(x + res.to(tl.float32), rout_ptrs, BF16_RNE)
    if STORE:
        tl.store(rout_ptrs, r, mask=mask, cache_modifier=STORE_CACHE)
    return r.to(tl.float32)


@triton.jit
def _rms_norm_fwd_tile(x, w, N, eps, HAS_WEIGHT: tl.constexpr):
    """(y, 1/rms) of a one-pass tile of rows (float32, zeros past the row ends)."""
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)
    y = x * rstd[:, None]
    if HAS_WEIGHT:
        y = y * w[None, :]
    return y, rstd


@triton.jit
def _rms_norm_fwd_rows_prefetched(x_ptr, y_ptr, rstd_ptr, res_ptr, rout_ptr, M, N, eps, stride_xm, stride_ym,
                                  stride_resm, stride_routm, w, cols,
                                  HAS_WEIGHT: tl.constexpr, BF16_RNE: tl.constexpr, BLOCK_M: tl.constexpr,
                                  HAS_RESIDUAL: tl.constexpr, EVICT: tl.constexpr, STORE_CACHE: tl.constexpr):
    """``_rms_norm_fwd_kernel``'s one-pass loop over row blocks pid, pid + num_programs, ... with
    the next block's x (and residual) loaded, in their own dtype, before this block's arithmetic."""
    col_mask = cols < N
    step = tl.num_programs(0)
    _, mask_n, rows_n = _row_block(tl.program_id(0).to(tl.int64) * BLOCK_M, M, BLOCK_M)
    tile_n = mask_n[:, None] & col_mask[None, :]
    x_n = tl.load(x_ptr + rows_n[:, None] * stride_xm + cols[None, :], mask=tile_n, other=0.0, eviction_policy=EVICT)
    if HAS_RESIDUAL:
        r_n = tl.load(res_ptr + rows_n[:, None] * stride_resm + cols[None, :], mask=tile_n, other=0.0,
                      eviction_policy=EVICT)
    else:
        r_n = x_n  # (unused)
    for rb in range(tl.program_id(0), tl.cdiv(M, BLOCK_M), step):
        x = x_n.to(tl.float32)
        res = r_n
        _, row_mask, rows = _row_block(rb * BLOCK_M, M, BLOCK_M)
        mask = row_mask[:, None] & col_mask[None, :]
        # (the next block's first row in 64 bits: past the last block it may not fit 32)
        _, mask_n, rows_n = _row_block((rb + step).to(tl.int64) * BLOCK_M, M, BLOCK_M)
        tile_n = mask_n[:, None] & col_mask[None, :]
        x_n = tl.load(x_ptr + rows_n[:, None] * stride_xm + cols[None, :], mask=tile_n, other=0.0,
                      eviction_policy=EVICT)
        if HAS_RESIDUAL:
            r_n = tl.load(res_ptr + rows_n[:, None] * stride_resm + cols[None, :], mask=tile_n, other=0.0,
                          eviction_policy=EVICT)
            x = _residual_sum(x, res, rout_ptr + rows[:, None] * stride_routm + cols[None, :], mask, BF16_RNE, True,
                              STORE_CACHE)
        y, rstd = _rms_norm_fwd_tile(x, w, N, eps, HAS_WEIGHT)
        tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], _round_for_store(y, y_ptr, BF16_RNE), mask=mask,
                 cache_modifier=STORE_CACHE)
        tl.store(rstd_ptr + rows, rstd, mask=row_mask)


@triton.jit
def _rms_norm_fwd_kernel(
    x_ptr, w_ptr, y_ptr, rstd_ptr, M, N, eps,
    stride_xm, stride_ym, res_ptr, rout_ptr, stride_resm, stride_routm,
    HAS_WEIGHT: tl.constexpr, ONE_PASS: tl.constexpr, BF16_RNE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HAS_RESIDUAL: tl.constexpr = False,
    EVICT: tl.constexpr = "", STORE_CACHE: tl.constexpr = "", PREFETCH: tl.constexpr = False,
):
    """y and 1/rms of BLOCK_M rows per iteration, the program looping over row blocks pid,
    pid + num_programs, ... Tile [BLOCK_M, BLOCK_N]; rows longer than BLOCK_N are walked twice.
    HAS_RESIDUAL (add_rms_norm): the row normalized is x + residual rounded to x's dtype, which
    is also stored (rout); the second walk of a long row recomputes it. EVICT / STORE_CACHE: the
    one-pass tile's eviction policy for its loads and cache modifier for its stores ("": the
    defaults; streaming hints for data read and written once). PREFETCH (one pass): the next row
    block is loaded before this one's arithmetic (the same operations, the same bits)."""
    cols = tl.arange(0, BLOCK_N)
    if ONE_PASS and HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    else:
        w = tl.zeros([BLOCK_N], tl.float32)  # (unused)
    if ONE_PASS and PREFETCH:
        _rms_norm_fwd_rows_prefetched(x_ptr, y_ptr, rstd_ptr, res_ptr, rout_ptr, M, N, eps, stride_xm, stride_ym,
                                      stride_resm, stride_routm, w, cols, HAS_WEIGHT, BF16_RNE, BLOCK_M, HAS_RESIDUAL,
                                      EVICT, STORE_CACHE)
        return
    for rb in range(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.num_programs(0)):
        rows, row_mask, rows64 = _row_block(rb * BLOCK_M, M, BLOCK_M)
        x_rows = x_ptr + rows64[:, None] * stride_xm
        y_rows = y_ptr + rows64[:, None] * stride_ym
        if ONE_PASS:
            mask = row_mask[:, None] & (cols[None, :] < N)
            x = tl.load(x_rows + cols[None, :], mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
            if HAS_RESIDUAL:
                x = _add_residual(x, res_ptr + rows64[:, None] * stride_resm + cols[None, :],
                                  rout_ptr + rows64[:, None] * stride_routm + cols[None, :], mask, BF16_RNE, True,
                                  EVICT, STORE_CACHE)
            y, rstd = _rms_norm_fwd_tile(x, w, N, eps, HAS_WEIGHT)
            tl.store(y_rows + cols[None, :], _round_for_store(y, y_ptr, BF16_RNE), mask=mask,
                     cache_modifier=STORE_CACHE)
        else:
            acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            for start in range(0, N, BLOCK_N):
                offs = start + cols
                mask = row_mask[:, None] & (offs[None, :] < N)
                x = tl.load(x_rows + offs[None, :], mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
                if HAS_RESIDUAL:
                    x = _add_residual(x, res_ptr + rows64[:, None] * stride_resm + offs[None, :],
                                      rout_ptr + rows64[:, None] * stride_routm + offs[None, :], mask, BF16_RNE, True,
                                      "", "")
                acc += x * x
            rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=1) / N + eps)
            for start in range(0, N, BLOCK_N):
                offs = start + cols
                mask = row_mask[:, None] & (offs[None, :] < N)
                x = tl.load(x_rows + offs[None, :], mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
                if HAS_RESIDUAL:
                    x = _add_residual(x, res_ptr + rows64[:, None] * stride_resm + offs[None, :],
                                      rout_ptr + rows64[:, None] * stride_routm + offs[None, :], mask, BF16_RNE, False,
                                      "", "")
                y = x * rstd[:, None]
                if HAS_WEIGHT:
                    wc = tl.load(w_ptr + offs, mask=offs < N, other=0.0).to(tl.float32)
                    y = y * wc[None, :]
                tl.store(y_rows + offs[None, :], _round_for_store(y, y_ptr, BF16_RNE), mask=mask)
        tl.store(rstd_ptr + rows64, rstd, mask=row_mask)


@triton.jit
def _rms_norm_bwd_kernel(
    dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_partial_ptr, M, N, rows_per_program,
    stride_dym, stride_xm, stride_dxm, dres_ptr, stride_dresm,
    HAS_WEIGHT: tl.constexpr, ONE_PASS: tl.constexpr, BF16_RNE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LOOP_STAGES: tl.constexpr, HAS_DRES: tl.constexpr = False,
    PREFETCH: tl.constexpr = False,
):
    """dx for rows [pid * rows_per_program, ...), BLOCK_M rows per step, and this program's fp32
    row of partial dweight. dx = rstd * (dy*w - xhat * mean(dy*w*xhat)), xhat = x*rstd;
    dweight_partial = sum over its rows of dy * xhat. Tile [BLOCK_M, BLOCK_N]. PREFETCH (one
    pass): the next step's rows are loaded into registers before this step's reduction, so their
    loads are in flight while it reduces and stores (the same arithmetic, the same bits)."""
    pid = tl.program_id(0)
    row_start = pid * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, M)
    cols = tl.arange(0, BLOCK_N)
    part = dw_partial_ptr + pid.to(tl.int64) * N
    if ONE_PASS:
        col_mask = cols < N
        if HAS_WEIGHT:
            w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
        else:
            w = tl.zeros([BLOCK_N], tl.float32)  # (unused)
        dw_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        if PREFETCH:
            dw_acc = _rms_norm_bwd_rows_prefetched(
                dy_ptr, x_ptr, rstd_ptr, dx_ptr, dres_ptr, row_start, row_end, N, stride_dym, stride_xm, stride_dxm,
                stride_dresm, w, cols, col_mask, dw_acc, HAS_WEIGHT, BF16_RNE, BLOCK_M, HAS_DRES)
        else:
            for r0 in tl.range(row_start, row_end, BLOCK_M, num_stages=LOOP_STAGES):
                _, row_mask, rows = _row_block(r0, row_end, BLOCK_M)
                mask = row_mask[:, None] & col_mask[None, :]
                x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_ptr + rows[:, None] * stride_dym + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
                dx, xhat = _rms_norm_bwd_rows(x, dy, rstd, w, N, HAS_WEIGHT)
                if HAS_DRES:  # add_rms_norm: the residual stream's own gradient joins
                    dx += tl.load(dres_ptr + rows[:, None] * stride_dresm + cols[None, :], mask=mask,
                                  other=0.0).to(tl.float32)
                tl.store(dx_ptr + rows[:, None] * stride_dxm + cols[None, :], _round_for_store(dx, dx_ptr, BF16_RNE),
                         mask=mask)
                if HAS_WEIGHT:
                    dw_acc += dy * xhat
        if HAS_WEIGHT:
            tl.store(part + cols, tl.sum(dw_acc, axis=0), mask=col_mask)
    else:
        # Long rows, one at a time: the partial row lives in memory (this program alone owns it;
        # zero-filled by the host) and is updated chunk by chunk in a fixed order.
        for row in range(row_start, row_end):
            r = tl.cast(row, tl.int64)
            rstd = tl.load(rstd_ptr + r)
            acc = tl.zeros([BLOCK_N], tl.float32)
            for start in range(0, N, BLOCK_N):
                offs = start + cols
                mask = offs < N
                x = tl.load(x_ptr + r * stride_xm + offs, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_ptr + r * stride_dym + offs, mask=mask, other=0.0).to(tl.float32)
                if HAS_WEIGHT:
                    dy = dy * tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
                acc += dy * x
            c = tl.sum(acc, axis=0) * rstd / N
            for start in range(0, N, BLOCK_N):
                offs = start + cols
                mask = offs < N
                x = tl.load(x_ptr + r * stride_xm + offs, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_ptr + r * stride_dym + offs, mask=mask, other=0.0).to(tl.float32)
                xhat = x * rstd
                if HAS_WEIGHT:
                    wc = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
                    wdy = dy * wc
                    p = tl.load(part + offs, mask=mask, other=0.0)
                    tl.store(part + offs, p + dy * xhat, mask=mask)
                else:
                    wdy = dy
                dx = (wdy - xhat * c) * rstd
                if HAS_DRES:
                    dx += tl.load(dres_ptr + r * stride_dresm + offs, mask=mask, other=0.0).to(tl.float32)
                tl.store(dx_ptr + r * stride_dxm + offs, _round_for_store(dx, dx_ptr, BF16_RNE), mask=mask)


@triton.jit
def _rms_norm_bwd_rows(x, dy, rstd, w, N, HAS_WEIGHT: tl.constexpr):
    """(dx, xhat) of a tile of rows (float32): dx = rstd * (dy*w - xhat * mean(dy*w*xhat))."""
    xhat = x * rstd[:, None]
    if HAS_WEIGHT:
        wdy = dy * w[None, :]
    else:
        wdy = dy
    c = tl.sum(wdy * xhat, axis=1) / N
    return (wdy - xhat * c[:, None]) * rstd[:, None], xhat


@triton.jit
def _rms_norm_bwd_rows_prefetched(dy_ptr, x_ptr, rstd_ptr, dx_ptr, dres_ptr, row_start, row_end, N, stride_dym,
                                  stride_xm, stride_dxm, stride_dresm, w, cols, col_mask, dw_acc,
                                  HAS_WEIGHT: tl.constexpr, BF16_RNE: tl.constexpr, BLOCK_M: tl.constexpr,
                                  HAS_DRES: tl.constexpr):
    """``_rms_norm_bwd_kernel``'s one-pass loop with the next step's x, dy, dres and 1/rms loaded
    (in their own dtypes) before this step's arithmetic; returns the dweight accumulator."""
    _, mask_n, rows_n = _row_block(row_start, row_end, BLOCK_M)
    tile_n = mask_n[:, None] & col_mask[None, :]
    x_n = tl.load(x_ptr + rows_n[:, None] * stride_xm + cols[None, :], mask=tile_n, other=0.0)
    dy_n = tl.load(dy_ptr + rows_n[:, None] * stride_dym + cols[None, :], mask=tile_n, other=0.0)
    if HAS_DRES:
        dr_n = tl.load(dres_ptr + rows_n[:, None] * stride_dresm + cols[None, :], mask=tile_n, other=0.0)
    else:
        dr_n = dy_n  # (unused)
    rstd_n = tl.load(rstd_ptr + rows_n, mask=mask_n, other=0.0)
    for r0 in range(row_start, row_end, BLOCK_M):
        x = x_n.to(tl.float32)
        dy = dy_n.to(tl.float32)
        dr = dr_n
        rstd = rstd_n
        _, row_mask, rows = _row_block(r0, row_end, BLOCK_M)
        mask = row_mask[:, None] & col_mask[None, :]
        _, mask_n, rows_n = _row_block(r0 + BLOCK_M, row_end, BLOCK_M)
        tile_n = mask_n[:, None] & col_mask[None, :]
        x_n = tl.load(x_ptr + rows_n[:, None] * stride_xm + cols[None, :], mask=tile_n, other=0.0)
        dy_n = tl.load(dy_ptr + rows_n[:, None] * stride_dym + cols[None, :], mask=tile_n, other=0.0)
        if HAS_DRES:
            dr_n = tl.load(dres_ptr + rows_n[:, None] * stride_dresm + cols[None, :], mask=tile_n, other=0.0)
        rstd_n = tl.load(rstd_ptr + rows_n, mask=mask_n, other=0.0)
        dx, xhat = _rms_norm_bwd_rows(x, dy, rstd, w, N, HAS_WEIGHT)
        if HAS_DRES:
            dx += dr.to(tl.float32)
        tl.store(dx_ptr + rows[:, None] * stride_dxm + cols[None, :], _round_for_store(dx, dx_ptr, BF16_RNE), mask=mask)
        if HAS_WEIGHT:
            dw_acc += dy * xhat
    return dw_acc


@triton.jit
def _column_sum_kernel(p_ptr, out_ptr, G, N, BF16_RNE: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr):
    """out[n] = sum over g of p[g, n] for BLOCK_N columns, g in a fixed order (deterministic).
    Tile [BLOCK_G, BLOCK_N]."""
    pid = tl.program_id(0)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    acc = tl.zeros([BLOCK_G, BLOCK_N], tl.float32)
    for start in range(0, G, BLOCK_G):
        g = start + tl.arange(0, BLOCK_G)
        mask = (g[:, None] < G) & col_mask[None, :]
        acc += tl.load(p_ptr + g[:, None].to(tl.int64) * N + cols[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + cols, _round_for_store(tl.sum(acc, axis=0), out_ptr, BF16_RNE), mask=col_mask)


# ----------------------------------------------------------------------------- host launchers


def _rows_unit_stride(t: torch.Tensor) -> torch.Tensor:
    """(rows, N) with unit stride along N (a view when possible, else a copy)."""
    r = rows_of(t, -1)
    return r if r.stride(1) == 1 else r.contiguous()


def _rms_norm_forward(x: torch.Tensor, weight: torch.Tensor | None, eps: float, config: Config | None = None,
                      residual: torch.Tensor | None = None):
    """(y, rstd) of rms_norm(x); with ``residual``, (y, rstd, residual_out) of add_rms_norm."""
    n = x.shape[-1]
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    m = x.numel() // n if n else 0
    rstd = torch.empty((m,), dtype=torch.float32, device=x.device)
    rout = torch.empty(x.shape, dtype=x.dtype, device=x.device) if residual is not None else None
    if x.numel() == 0:
        return (y, rstd) if residual is None else (y, rstd, rout)
    xr = _rows_unit_stride(x)
    yr = y.view(-1, n)
    cfg = config or _fwd_config(n, residual is not None)
    grid = fwd_grid(m, cfg, x.device)
    w = weight if weight is not None else xr  # never read when HAS_WEIGHT is False
    resr, routr = (_rows_unit_stride(residual), rout.view(-1, n)) if residual is not None else (xr, yr)
    cached_launch(
        _LAUNCHES, _rms_norm_fwd_kernel, grid,
        HAS_WEIGHT=weight is not None, ONE_PASS=cfg.one_pass, BF16_RNE=bf16_rne(x.dtype),
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, HAS_RESIDUAL=residual is not None, num_warps=cfg.num_warps,
        **({"EVICT": "evict_first", "STORE_CACHE": ".cs"} if cfg.streaming else {}),
        **({"PREFETCH": True} if cfg.prefetch else {}),
    )(xr, w, yr, rstd, m, n, eps, xr.stride(0), yr.stride(0), resr, routr, resr.stride(0), routr.stride(0))
    return (y, rstd) if residual is None else (y, rstd, rout)


def _rms_norm_backward(dy, x, weight, rstd, config: Config | None = None, dres: torch.Tensor | None = None):
    """(dx, dweight) of rms_norm; with ``dres`` (add_rms_norm: the gradient of residual_out, of
    x's shape) added to dx in the same pass."""
    n = x.shape[-1]
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    has_w = weight is not None
    dw = torch.empty((n,) if has_w else (0,), dtype=weight.dtype if has_w else x.dtype, device=x.device)
    m = x.numel() // n if n else 0
    if x.numel() == 0:
        if has_w:
            dw.zero_()
        return dx, dw
    xr = _rows_unit_stride(x)
    dyr = _rows_unit_stride(dy)
    dxr = dx.view(-1, n)
    cfg = config or _bwd_config(n)
    g, rows_per_program = bwd_grid(m, cfg, x.device)
    alloc = torch.zeros if (has_w and not cfg.one_pass) else torch.empty
    partial = alloc((g, n) if has_w else (1, 1), dtype=torch.float32, device=x.device)
    w = weight if has_w else xr
    dresr = _rows_unit_stride(dres) if dres is not None else dyr
    cached_launch(
        _LAUNCHES, _rms_norm_bwd_kernel, g,
        HAS_WEIGHT=has_w, ONE_PASS=cfg.one_pass, BF16_RNE=bf16_rne(x.dtype),
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, LOOP_STAGES=cfg.loop_stages, HAS_DRES=dres is not None,
        num_warps=cfg.num_warps, **({"PREFETCH": True} if cfg.prefetch else {}),
    )(dyr, xr, w, rstd, dxr, partial, m, n, rows_per_program, dyr.stride(0), xr.stride(0), dxr.stride(0), dresr,
      dresr.stride(0))
    if has_w:
        block_cols = 256
        cached_launch(
            _LAUNCHES, _column_sum_kernel, cdiv(n, block_cols),
            BF16_RNE=bf16_rne(dw.dtype), BLOCK_G=32, BLOCK_N=block_cols, num_warps=4,
        )(partial, dw, g, n)
    return dx, dw


# ----------------------------------------------------------------------------- custom ops, autograd


def _rms_norm_fwd(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return _rms_norm_forward(x, weight, eps)


def _rms_norm_fwd_fake(x, weight, eps):
    n = x.shape[-1]
    m = x.numel() // n if n else 0
    return torch.empty(x.shape, dtype=x.dtype, device=x.device), x.new_empty((m,), dtype=torch.float32)


def _rms_norm_bwd(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    return _rms_norm_backward(dy, x, weight, rstd)


def _rms_norm_bwd_fake(dy, x, weight, rstd):
    n = x.shape[-1]
    dw = x.new_empty((n,) if weight is not None else (0,), dtype=weight.dtype if weight is not None else x.dtype)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device), dw


def _setup_context(ctx, inputs, output):
    x, weight, _ = inputs
    _, rstd = output
    ctx.has_weight = weight is not None
    ctx.save_for_backward(x, weight, rstd)
    ctx.mark_non_differentiable(rstd)


def _backward(ctx, grad_y, grad_rstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dw = _rms_norm_bwd_op(grad_y.contiguous(), x, weight, rstd)
    return dx, (dw if ctx.has_weight else None), None


_LAUNCHES: dict = {}
_rms_norm_bwd_op = Op("roofkit::rms_norm_bwd", _rms_norm_bwd, _rms_norm_bwd_fake)
_rms_norm_fwd_op = Op("roofkit::rms_norm_fwd", _rms_norm_fwd, _rms_norm_fwd_fake).autograd(_setup_context, _backward)


# ----------------------------------------------------------------------------- public function


def _checked(op: str, input, normalized_shape, weight, eps) -> tuple[torch.Tensor | None, float]:
    """rms_norm's argument checks (shared with add_rms_norm): the contiguous weight and the eps
    as a float, or a TypeError / ValueError naming ``op`` and the argument."""
    check_tensor(op, "input", input)
    normalized_shape = as_shape(op, normalized_shape)
    if input.dim() == 0 or normalized_shape != tuple(input.shape[-1:]):
        raise ValueError(
            f"roofkit.{op}: normalized_shape must be the last dimension of input, "
            f"({input.shape[-1] if input.dim() else '?'},); got {normalized_shape} for input of shape {tuple(input.shape)}"
        )
    if weight is not None:
        weight = check_param(op, "weight", weight, input, normalized_shape)
    if eps is None:
        eps = DEFAULT_EPS
    eps = eps_as_float(op, eps, "a real number or None")
    if not eps >= 0:
        raise ValueError(f"roofkit.{op}: eps must be >= 0, got {eps}")
    return weight, eps


def _fwd_plan(x: torch.Tensor, weight: torch.Tensor | None, eps: float, grad: bool):
    """A checked call's forward as a plan (see ``_PLANS``) and its first result. Contiguous
    inputs only (the row stride is N). ``grad``: the plan is ``_Planned``'s forward, returning
    (y, rstd) and, on autograd's behalf, the backward's plan; else it returns y, and rstd goes to
    a scratch buffer the plan keeps (nobody reads it)."""
    n = x.shape[-1]
    m = x.numel() // n
    cfg = _fwd_config(n)
    grid = fwd_grid(m, cfg, x.device)
    rstd = torch.empty((m,), dtype=torch.float32, device=x.device)
    y = torch.empty_like(x)
    launch = cached_launch(
        _LAUNCHES, _rms_norm_fwd_kernel, grid,
        HAS_WEIGHT=weight is not None, ONE_PASS=cfg.one_pass, BF16_RNE=bf16_rne(x.dtype),
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps,
    )
    bound = launch.bind(x, weight if weight is not None else x, y, rstd, m, n, eps, n, n, x, y, n, n)
    if bound is None:
        return None, (y, rstd) if grad else y
    if not grad:
        # rstd is allocated per call, unread: a buffer kept by the plan could be freed (plans
        # start over past their limit) while a captured graph or another stream still writes it.
        def plan(x, weight):
            y = torch.empty_like(x)
            bound(x, x if weight is None else weight, y, torch.empty((m,), dtype=torch.float32, device=x.device),
                  m, n, eps, n, n, x, y, n, n)
            return y

        return plan, y

    backward = _BwdPlan(m, n, x, weight)

    def plan_grad(x, weight):
        y = torch.empty_like(x)
        rstd = torch.empty((m,), dtype=torch.float32, device=x.device)
        bound(x, x if weight is None else weight, y, rstd, m, n, eps, n, n, x, y, n, n)
        return y, rstd, backward

    return plan_grad, (y, rstd, backward)


class _BwdPlan:
    """The backward of one planned forward: both launches bound on first use (the gradient's
    layout and alignment are part of its key; any other gradient takes the checked launcher)."""

    def __init__(self, m: int, n: int, x: torch.Tensor, weight: torch.Tensor | None):
        self.m, self.n, self.has_w = m, n, weight is not None
        self.bound: dict = {}

    def __call__(self, dy, x, weight, rstd):
        if not (dy.is_contiguous() and type(dy) is torch.Tensor) or not fast_path_ok(dy):
            return _rms_norm_bwd_op(dy.contiguous(), x, weight, rstd)
        key = (dy.dtype, dy.data_ptr() & 15)
        b = self.bound.get(key)
        m, n = self.m, self.n
        if b is None:
            dx, dw, b = _bwd_bind(dy, x, weight, rstd)
            if b is not None:
                self.bound[key] = b
            return dx, dw
        main, colsum, g, rows_per_program, partial_shape = b
        dx = torch.empty_like(x)
        if self.has_w:
            dw = torch.empty((n,), dtype=weight.dtype, device=x.device)
            partial = torch.empty(partial_shape, dtype=torch.float32, device=x.device)
            main(dy, x, weight, rstd, dx, partial, m, n, rows_per_program, n, n, n, dy, n)
            colsum(partial, dw, g, n)
            return dx, dw
        main(dy, x, x, rstd, dx, rstd, m, n, rows_per_program, n, n, n, dy, n)
        return dx, None


def _bwd_bind(dy, x, weight, rstd):
    """The checked backward's launches for contiguous dy, x (one-pass rows only), bound: (dx,
    dw, (main, column sum, G, rows per program, partial's shape)) or a None binding."""
    n = x.shape[-1]
    m = x.numel() // n
    cfg = _bwd_config(n)
    has_w = weight is not None
    if not cfg.one_pass:  # the looping backward accumulates into zeroed partials: not planned
        dx, dw = _rms_norm_bwd_op(dy, x, weight, rstd)
        return dx, dw, None
    g, rows_per_program = bwd_grid(m, cfg, x.device)
    dx = torch.empty_like(x)
    partial_shape = (g, n) if has_w else (1, 1)
    partial = torch.empty(partial_shape, dtype=torch.float32, device=x.device)
    main = cached_launch(
        _LAUNCHES, _rms_norm_bwd_kernel, g,
        HAS_WEIGHT=has_w, ONE_PASS=True, BF16_RNE=bf16_rne(x.dtype),
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, LOOP_STAGES=cfg.loop_stages, num_warps=cfg.num_warps,
    ).bind(dy, x, weight if has_w else x, rstd, dx, partial if has_w else rstd, m, n, rows_per_program, n, n, n, dy, n)
    if not has_w:
        return dx, None, (main, None, g, rows_per_program, partial_shape) if main is not None else None
    dw = torch.empty((n,), dtype=weight.dtype, device=x.device)
    block_cols = 256
    colsum = cached_launch(
        _LAUNCHES, _column_sum_kernel, cdiv(n, block_cols),
        BF16_RNE=bf16_rne(dw.dtype), BLOCK_G=32, BLOCK_N=block_cols, num_warps=4,
    ).bind(partial, dw, g, n)
    if main is None or colsum is None:
        return dx, dw, None
    return dx, dw, (main, colsum, g, rows_per_program, partial_shape)


class _Planned(torch.autograd.Function):
    """rms_norm through kept plans, forward and backward (one output: y)."""

    @staticmethod
    def forward(ctx, x, weight, plan):
        y, rstd, backward = plan(x, weight)
        ctx.save_for_backward(x, weight, rstd)
        ctx.backward_plan = backward
        ctx.set_materialize_grads(False)
        return y

    @staticmethod
    def backward(ctx, dy):
        if torch.is_grad_enabled():
            raise RuntimeError("roofkit (rms_norm): double backward is not supported (the op is first order); "
                               "compute this gradient without create_graph=True")
        if dy is None:
            return None, None, None
        x, weight, rstd = ctx.saved_tensors
        dx, dw = ctx.backward_plan(dy, x, weight, rstd)
        return dx, dw if ctx.needs_input_grad[1] else None, None


# Plans of checked inference calls, by everything the checks and the kernel's specialization
# read: a repeated call skips both and launches the compiled kernel directly.
_PLANS = Plans()


def _plan_key(input, normalized_shape, weight, eps):
    """Everything the checks and the kernel's specialization read, with the scalars' types (an
    eps of True or a normalized_shape of 8.0 equals a valid one but must meet the checks)."""
    if type(normalized_shape) is int:
        shape = normalized_shape
    elif type(normalized_shape) in (tuple, torch.Size) and all(type(v) is int for v in normalized_shape):
        shape = tuple(normalized_shape)
    else:
        raise TypeError("not a plan key")
    if not (eps is None or type(eps) is float):
        raise TypeError("not a plan key")
    w = None if weight is None else (weight.shape, weight.stride(), weight.dtype, weight.get_device(),
                                      weight.data_ptr() & 15)
    return (input.shape, input.stride(), input.dtype, input.get_device(), input.data_ptr() & 15, shape, w, eps)


def rms_norm(
    input: torch.Tensor,
    normalized_shape,
    weight: torch.Tensor | None = None,
    eps: float | None = None,
) -> torch.Tensor:
    """RMSNorm over the last dimension: y = x / sqrt(mean(x**2, -1) + eps) * weight.

    Mirrors ``torch.nn.functional.rms_norm`` for a normalized_shape of one (the last) dimension.

    Args:
        input: float32, float16 or bfloat16 tensor (..., N), any strides, on CUDA (or on CPU with
            TRITON_INTERPRET=1).
        normalized_shape: ``N`` or ``(N,)``: the last dimension of ``input``.
        weight: optional tensor (N,) of the input's dtype, on the input's device.
        eps: added to the mean square inside the square root; default, as in torch, the
            epsilon of the float32 computation type, ``torch.finfo(torch.float32).eps``.
    Returns:
        A contiguous tensor of ``input``'s shape and dtype.
    Raises:
        TypeError: ``input`` or ``weight`` not a float32/float16/bfloat16 tensor, weight dtype
            different from input's, ``eps`` not a number.
        ValueError: ``normalized_shape`` other than the last dimension, weight of the wrong
            shape, tensors on an unsupported or different device, negative ``eps``.
    Numerics:
        float32 accumulation of the sum of squares and of the scaling; one rounding to the
        output dtype. The backward returns dx and dweight; dweight is reduced across rows in
        float32 by a fixed two-stage reduction (bitwise reproducible on a given GPU). Backward is
        first order (no double backward). Unlike torch, a float32 weight with a 16-bit input is
        refused (TypeError) rather than promoted.
    Cost:
        Forward reads x and weight once and writes y once (2*M*N + N elements) for rows up to
        ``ONE_PASS_MAX_N``; backward reads x and dy and writes dx (3*M*N) plus G*N floats of
        partials. About 4 FLOP per element forward, 8 backward.
    Source:
        Zhang & Sennrich 2019; Triton tutorial 05 (two-stage weight-gradient reduction).
    """
    fast = type(input) is torch.Tensor and (weight is None or isinstance(weight, torch.Tensor))
    if fast:
        try:
            fast = fast_path_ok(input, weight)
            if fast:
                grad = needs_grad(input, weight)
                key = (grad, _plan_key(input, normalized_shape, weight, eps))
                plan = _PLANS.get(key)
        except (TypeError, AttributeError, RuntimeError):  # arguments only the checks can judge
            fast = False
        if fast:
            if plan is not None:
                return _Planned.apply(input, weight, plan) if grad else plan(input, weight)
            fast = input.is_contiguous() and input.numel() > 0 and (weight is None or weight.is_contiguous())
    weight, eps = _checked("rms_norm", input, normalized_shape, weight, eps)
    if fast:  # a plain, contiguous CUDA call: keep its plan
        plan, first = _fwd_plan(input, weight, eps, grad)
        if plan is not None:
            _PLANS.add(key, plan)
            if grad:
                return _Planned.apply(input, weight, lambda x, w: first)
            return first
        if not grad:
            return first
    y, _ = _rms_norm_fwd_op.apply(input, weight, eps)
    return y


# ----------------------------------------------------------------------------- add_rms_norm


def _add_rms_norm_fwd(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
                      eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y, rstd, rout = _rms_norm_forward(x, weight, eps, residual=residual)
    return y, rout, rstd


def _add_rms_norm_fwd_fake(x, residual, weight, eps):
    y, rstd = _rms_norm_fwd_fake(x, weight, eps)
    return y, torch.empty(x.shape, dtype=x.dtype, device=x.device), rstd


def _add_rms_norm_bwd(dy: torch.Tensor, rout: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor,
                      drout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _rms_norm_backward(dy, rout, weight, rstd, dres=drout)


def _add_setup_context(ctx, inputs, output):
    x, residual, weight, _ = inputs
    _, rout, rstd = output
    ctx.has_weight = weight is not None
    ctx.save_for_backward(rout, weight, rstd)
    ctx.mark_non_differentiable(rstd)
    if not (x.requires_grad or residual.requires_grad):  # as input + residual: no graph of its own
        ctx.mark_non_differentiable(rout)


def _add_backward(ctx, grad_y, grad_rout, grad_rstd):
    rout, weight, rstd = ctx.saved_tensors
    if grad_y is None:  # (None only when autograd does not materialize: zeros then)
        grad_y = torch.zeros_like(rout)
    if grad_rout is None:
        grad_rout = torch.zeros_like(rout)
    dx, dw = _add_rms_norm_bwd_op(grad_y.contiguous(), rout, weight, rstd, grad_rout.contiguous())
    # input + residual: both receive the residual stream's gradient (one tensor, as torch's add)
    return dx, dx, (dw if ctx.has_weight else None), None


def _add_rms_norm_bwd_fake(dy, rout, weight, rstd, drout):
    return _rms_norm_bwd_fake(dy, rout, weight, rstd)


_add_rms_norm_bwd_op = Op("roofkit::add_rms_norm_bwd", _add_rms_norm_bwd, _add_rms_norm_bwd_fake)
_add_rms_norm_fwd_op = Op("roofkit::add_rms_norm_fwd", _add_rms_norm_fwd, _add_rms_norm_fwd_fake).autograd(
    _add_setup_context, _add_backward)


@planned
def add_rms_norm(
    input: torch.Tensor,
    residual: torch.Tensor,
    normalized_shape,
    weight: torch.Tensor | None = None,
    eps: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual add before a pre-norm transformer's RMSNorm, fused: returns
    ``(rms_norm(residual_out, normalized_shape, weight, eps), residual_out)`` with
    ``residual_out = input + residual``.

    Args:
        input, residual: float32, float16 or bfloat16 tensors of the same shape and dtype (...,
            N), any strides, on the same CUDA device (or on CPU with TRITON_INTERPRET=1).
        normalized_shape, weight, eps: as :func:`rms_norm`.
    Returns:
        (output, residual_out): contiguous tensors of input's shape and dtype.
    Raises:
        As :func:`rms_norm`, naming add_rms_norm; TypeError / ValueError for a residual of another
        dtype, shape or device.
    Numerics:
        residual_out is the sum rounded to the input dtype (the model's residual stream), and the
        norm is taken of that rounded sum, as the unfused model computes it; float32 inside.
        Backward: the gradient of input and of residual is the norm's input gradient plus
        residual_out's own gradient (one tensor, returned for both, as torch's add does); the
        weight's gradient is reduced as rms_norm's (fixed order, bitwise reproducible). First
        order only.
    Cost:
        Forward reads input and residual once and writes output and residual_out once (4*M*N
        elements + N); backward reads residual_out, the two output gradients and writes one
        input gradient (4*M*N) plus rms_norm's weight partials.
    Source:
        Zhang & Sennrich 2019 (RMSNorm); the pre-norm residual block of Llama-style models.
    """
    op = "add_rms_norm"
    check_tensor(op, "residual", residual)
    weight, eps = _checked(op, input, normalized_shape, weight, eps)
    check_same_device(op, "residual", residual, input)
    check_same_dtype(op, "residual", residual, input)
    if residual.shape != input.shape:
        raise ValueError(f"roofkit.{op}: residual must have input's shape {tuple(input.shape)}, got "
                         f"{tuple(residual.shape)}")
    y, rout, _ = _add_rms_norm_fwd_op.apply(input, residual, weight, eps)
    return y, rout


def add_rms_norm_reference(input, residual, normalized_shape, weight=None, eps=None):
    """(rms_norm(input + residual), input + residual) in float64."""
    r = input.to(torch.float64) + residual.to(torch.float64)
    return rms_norm_reference(r, normalized_shape, weight, eps), r


def _add_rms_norm_torch(input, residual, normalized_shape, weight=None, eps=None):
    r = input + residual
    return F.rms_norm(r, normalized_shape, weight, eps), r


def add_rms_norm_cost(case, dtype: torch.dtype) -> Cost:
    """Forward: read input and residual, write output and residual_out (4 elements per element)
    plus the weight; ``fwd_bwd`` adds the backward's 4 (residual_out, two gradients in, one out)."""
    shape = case["shape"]
    numel, n = math.prod(shape), shape[-1] if shape else 1
    size = torch.empty((), dtype=dtype).element_size()
    if case.get("mode", "fwd") == "fwd_bwd":
        return Cost(flops=14 * numel, bytes=(8 * numel + 2 * n) * size)
    return Cost(flops=5 * numel, bytes=(4 * numel + n) * size)


# ----------------------------------------------------------------------------- spec


def _make_inputs(case, dtype, generator, device) -> Inputs:
    shape = case["shape"]
    x = random_input(case, shape, dtype, generator, device)
    weight = None
    if case.get("weight", True):
        # Not all ones: an implementation that ignores the weight must fail.
        weight = random_weight(shape[-1:], dtype, generator, device)
    eps = case.get("eps", torch.finfo(dtype).eps)
    if case.get("weight_layout"):
        weight = with_layout(weight, case["weight_layout"])
    return Inputs((x, shape[-1:], weight, None if eps == "default" else eps))


CASES = [
    *row_cases(),
    case("no_weight_5x96", shape=(5, 96), weight=False),
    *layout_cases(),
    case("eps_default_small_values_6x64", shape=(6, 64), eps="default", dist="large", magnitude=1e-3),
    case("many_rows_130x33", shape=(130, 33)),
    case("four_dims_2x3x4x20", shape=(2, 3, 4, 20)),
    case("expanded_rows_5x40", shape=(5, 40), layout="expanded"),
    case("strided_weight_grad_7x48", shape=(7, 48), weight_layout="strided", grad_layout="transposed"),
    *value_cases(),
    case("gpu_1823x781", ["gpu"], shape=(1823, 781), dtypes=(torch.float32,)),
    case("gpu_4000x4000", ["gpu"], shape=(4000, 4000), dtypes=(torch.float32,)),
    *gpu_row_cases(),
    case("gpu_row_32768", ["gpu"], shape=(300, 32768)),
    case("gpu_row_131072", ["gpu"], shape=(64, 131072)),
    case("gpu_row_262144", ["gpu"], shape=(32, 262144)),
    case("gpu_fp16_magnitude_1e4", ["gpu"], shape=(512, 4096), dist="large", magnitude=1e4, dtypes=(torch.float16,)),
    case("gpu_transposed_2048x3000", ["gpu"], shape=(2048, 3000), layout="transposed"),
    case("gpu_over_2pow31_elements", ["gpu", "slow"], shape=(262145, 8192), dtypes=(torch.bfloat16,), grad=False),
]

_BF16 = (torch.bfloat16,)
SUITES = {
    # llama3-8b: hidden 4096; 8192 tokens per sequence, batches of 1 and 4.
    "llama3-8b": [
        case("hidden_8192x4096", shape=(8192, 4096), dtypes=_BF16),
        case("hidden_32768x4096", shape=(32768, 4096), dtypes=_BF16),
        case("hidden_32768x4096_fwd_bwd", shape=(32768, 4096), dtypes=_BF16, mode="fwd_bwd"),
    ],
    # llama3-70b: hidden 8192.
    "llama3-70b": [
        case("hidden_8192x8192", shape=(8192, 8192), dtypes=_BF16),
        case("hidden_16384x8192", shape=(16384, 8192), dtypes=_BF16),
        case("hidden_16384x8192_fwd_bwd", shape=(16384, 8192), dtypes=_BF16, mode="fwd_bwd"),
    ],
    # gpt2 uses LayerNorm; RMSNorm at its hidden size 768 stands for small-hidden models.
    "gpt2": [case("hidden_16384x768", shape=(16384, 768), dtypes=_BF16)],
    "edge": [
        case("fp32_1823x781", shape=(1823, 781), dtypes=(torch.float32,)),
        case("hidden_65536x1024", shape=(65536, 1024), dtypes=_BF16),
        case("row_262144", shape=(512, 262144), dtypes=_BF16),
    ],
    "host": host_suite(),
}


def _liger():
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    except ImportError:
        return None

    def run(input, normalized_shape, weight=None, eps=None):
        eps = torch.finfo(input.dtype).eps if eps is None else eps
        # casting_mode "gemma": everything in fp32 like torch and roofkit; in_place=False keeps dy.
        return LigerRMSNormFunction.apply(input, weight, eps, 0.0, "gemma", False)

    return run


SPEC = OpSpec(
    name="rms_norm",
    impl=rms_norm,
    reference=rms_norm_reference,
    torch_impl=F.rms_norm,
    make_inputs=_make_inputs,
    cost=rms_norm_cost,
    reduction_length=lambda case: case["shape"][-1],
    dtypes=FLOAT_DTYPES,
    cases=CASES,
    suites=SUITES,
    baselines={**baselines.eager_and_compiled(F.rms_norm), "liger": _liger,
               "flaggems": baselines.flaggems(F.rms_norm)},
    grad_args=(0, 2),
    marker="rms_norm",
)

def _add_make_inputs(case, dtype, generator, device) -> Inputs:
    x, normalized_shape, weight, eps = _make_inputs(case, dtype, generator, device).args
    residual = random_tensor(case["shape"], dtype, generator, device, case.get("residual_dist", "normal"),
                             magnitude=case.get("magnitude", 1e2), layout=case.get("residual_layout", "contiguous"))
    return Inputs((x, residual, normalized_shape, weight, eps))


ADD_CASES = [
    # N = 1 with a large eps: with a small one the input gradient is eps / |s|^3, a cancellation
    # of two equal terms whose error no float32 formula keeps within 2x torch's on every seed.
    case("tiny_1x1_eps_large", ["quick"], shape=(1, 1), eps=0.5),
    case("odd_3x7", ["quick"], shape=(3, 7)),
    case("prime_9x781", shape=(9, 781)),
    case("row_4096", shape=(3, 4096)),
    case("leading_dims_2x3x50", shape=(2, 3, 50)),
    case("no_weight_5x96", shape=(5, 96), weight=False),
    case("transposed_16x33", shape=(16, 33), layout="transposed", residual_layout="strided", dtypes=(torch.float32,)),
    case("expanded_residual_5x40", shape=(5, 40), residual_layout="expanded", dtypes=(torch.float32,)),
    case("grad_transposed_7x48", shape=(7, 48), grad_layout="transposed", dtypes=(torch.float32,)),
    case("eps_large_8x64", shape=(8, 64), eps=0.5),
    case("cancelling_sum_8x300", shape=(8, 300), dist="large", magnitude=1e3, residual_dist="large"),
    case("nan_8x129", shape=(8, 129), dist="nan", grad=False),
    case("empty_rows_0x7", ["quick"], shape=(0, 7)),
    case("gpu_row_4096", ["gpu"], shape=(2048, 4096)),
    case("gpu_row_131072", ["gpu"], shape=(64, 131072)),  # the long-row loop (on CPU: tests/ops/test_add_rms_norm.py)
    case("gpu_fp32_1823x781", ["gpu"], shape=(1823, 781), dtypes=(torch.float32,)),
]


def _add_suites():
    out = {}
    for suite, hidden in {"llama3-8b": 4096, "llama3-70b": 8192, "qwen2-7b": 3584, "gemma-7b": 3072}.items():
        out[suite] = [case(f"hidden_8192x{hidden}", shape=(8192, hidden), dtypes=_BF16),
                      case(f"hidden_8192x{hidden}_fwd_bwd", shape=(8192, hidden), dtypes=_BF16, mode="fwd_bwd")]
    out["host"] = host_suite()
    return out


def _liger_add():
    try:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
    except ImportError:
        return None

    def run(input, residual, normalized_shape, weight=None, eps=None):
        eps = torch.finfo(input.dtype).eps if eps is None else eps
        return LigerFusedAddRMSNormFunction.apply(input, residual, weight, eps, 0.0, "gemma", False)

    return run


ADD_SPEC = OpSpec(
    name="add_rms_norm",
    impl=add_rms_norm,
    reference=add_rms_norm_reference,
    torch_impl=_add_rms_norm_torch,
    make_inputs=_add_make_inputs,
    cost=add_rms_norm_cost,
    reduction_length=lambda case: case["shape"][-1],
    dtypes=FLOAT_DTYPES,
    cases=ADD_CASES,
    suites=_add_suites(),
    baselines={**baselines.eager_and_compiled(_add_rms_norm_torch),
               "liger": _liger_add},
    grad_args=(0, 1, 3),
    marker="rms_norm",
)

SPECS = (SPEC, ADD_SPEC)


# The tunables of this family's heuristics: what roofkit.config.override may set.
TUNABLES = ("ONE_PASS_MAX_N", "LOOP_BLOCK_N", "PROGRAMS_PER_SM")
