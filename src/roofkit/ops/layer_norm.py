"""LayerNorm over the trailing dimensions, forward and backward.

    y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias      (biased variance, as torch)

Program mapping: the input is viewed as (M rows, N) with N the product of ``normalized_shape``.
One forward program owns BLOCK_M rows; rows up to ``ONE_PASS_MAX_N`` are held on chip (one read,
one write; mean, then the variance of the centred values from registers). Longer rows take a pass
that combines per-chunk (count, mean, sum of squared deviations) exactly (Chan et al.), then a
normalizing pass. The backward runs a fixed grid of G programs (a multiple of the SM count), each
over a contiguous range of rows, writing dx and one fp32 row of partial dweight and dbias; a
second kernel sums the G partial rows column by column in a fixed order, so dweight and dbias are
deterministic. mean and 1/std (fp32, one per row) are saved by the forward for the backward.
Source: Ba, Kiros & Hinton, "Layer Normalization" (2016); Chan, Golub & LeVeque, "Algorithms for
computing the sample variance" (1983); Triton tutorial 05 (two-stage weight-gradient reduction).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from ..harness import baselines
from ..harness.inputs import with_layout
from ..harness.spec import Cost, Inputs, OpSpec, case
from ._common import FLOAT_DTYPES, bf16_rne, cdiv, check_tensor, next_pow2
from ._jit import _round_for_store, _row_block
from ._runtime import Op, cached_launch, planned
from ._norm import (Config, as_shape, bwd_grid, check_param, eps_as_float, fwd_grid, gpu_row_cases, host_suite,
                    layout_cases, random_input, random_weight, row_cases, value_cases)

# ----------------------------------------------------------------------------- reference, cost

DEFAULT_EPS = 1e-5  # torch.nn.functional.layer_norm's default


def layer_norm_reference(input, normalized_shape, weight=None, bias=None, eps=DEFAULT_EPS):
    """LayerNorm in float64 over the trailing ``len(normalized_shape)`` dimensions."""
    k = len(normalized_shape) if isinstance(normalized_shape, (tuple, list, torch.Size)) else 1
    dims = tuple(range(-k, 0))
    x = input.to(torch.float64)
    mean = x.mean(dim=dims, keepdim=True)
    xc = x - mean
    y = xc * torch.rsqrt(xc.pow(2).mean(dim=dims, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(torch.float64)
    if bias is not None:
        y = y + bias.to(torch.float64)
    return y


def _problem(case) -> tuple[int, int]:
    """(M, N) of a case: N is the product of its ``norm_dims`` trailing dimensions."""
    shape = tuple(case["shape"])
    k = case.get("norm_dims", 1)
    return math.prod(shape[:-k]), math.prod(shape[-k:])


def layer_norm_cost(case, dtype: torch.dtype) -> Cost:
    """Forward: read x (M*N), weight and bias (N each, when present), write y (M*N); about
    5 FLOP per element plus one each for the weight and the bias.
    ``mode='fwd_bwd'`` adds the backward: read x, dy and weight, write dx, dweight and dbias (the
    five M*N passes of the pair); about 8 FLOP per element plus 3 with a weight and 1 with a
    bias. The per-row mean and 1/std (8 bytes a row) are not counted: an implementation may
    recompute them."""
    m, n = _problem(case)
    size = torch.empty((), dtype=dtype).element_size()
    has_w, has_b = int(case.get("weight", True)), int(case.get("bias", True))
    fwd = Cost(flops=(5 + has_w + has_b) * m * n, bytes=(2 * m * n + (has_w + has_b) * n) * size)
    if case.get("mode", "fwd") == "fwd_bwd":
        bwd_bytes = (3 * m * n + (2 * has_w + has_b) * n) * size
        return Cost(flops=fwd.flops + (8 + 3 * has_w + has_b) * m * n, bytes=fwd.bytes + bwd_bytes)
    return fwd


# ----------------------------------------------------------------------------- launch heuristic

ONE_PASS_MAX_N = 16384  # longest row the forward holds on chip (elements)
BWD_ONE_PASS_MAX_N = 8192  # the backward also holds two fp32 accumulator rows: a lower bound
LOOP_BLOCK_N = 4096  # chunk of a longer row per loop iteration
PROGRAMS_PER_SM = 2  # backward grid: G = PROGRAMS_PER_SM * SM count (capped by the row count)


def _fwd_config(n: int) -> Config:
    """Deterministic heuristic from the row length (see docs/norms.md): tiles of about 2048
    elements (one row from 2048 on), 1024 elements per warp, 4 to 8 warps; longer rows in
    chunks of ``LOOP_BLOCK_N`` with 16 warps. (rms_norm's two rows of 8192 a tile need 255
    registers a thread here, with the mean and bias: one 8192 row on 8 warps ran 30 % faster.)"""
    # Cached per (n, the module's tunables): the tunables are read per call so that setting
    # them (tests monkeypatch them) still takes effect, once kept plans are dropped
    # (_runtime.clear_plans).
    return _fwd_config_of(n, ONE_PASS_MAX_N, LOOP_BLOCK_N)


@functools.lru_cache(maxsize=None)
def _fwd_config_of(n: int, one_pass_max_n: int, loop_block_n: int) -> Config:
    block_n = next_pow2(n)
    if block_n <= one_pass_max_n:
        block_m = max(1, 2048 // block_n)
        return Config(True, block_m, block_n, max(4, min(8, block_m * block_n // 1024)))
    return Config(False, 1, loop_block_n, 16)


def _bwd_config(n: int) -> Config:
    """Tiles of about 2048 elements, 512 per warp (4 to 16 warps); 2 programs per SM for tiles
    up to 4096 elements, else 1; a 3-deep software-pipelined row loop (H200 sweep at 32768 x 4096
    bf16, docs/norms.md: 8 warps 225 us, the former 16 warps 276 us). Rows longer than
    ``BWD_ONE_PASS_MAX_N`` (x, dy, weight and two accumulator rows would not fit the registers)
    take the chunked path."""
    return _bwd_config_of(n, BWD_ONE_PASS_MAX_N, LOOP_BLOCK_N, PROGRAMS_PER_SM)


@functools.lru_cache(maxsize=None)
def _bwd_config_of(n: int, one_pass_max_n: int, loop_block_n: int, programs_per_sm: int) -> Config:
    block_n = next_pow2(n)
    if block_n <= one_pass_max_n:
        block_m = max(1, 2048 // block_n)
        tile = block_m * block_n
        warps = max(4, min(16, tile // 512))
        return Config(True, block_m, block_n, warps, programs_per_sm if tile <= 4096 else 1, 3)
    return Config(False, 1, loop_block_n, 16, programs_per_sm)


# ----------------------------------------------------------------------------- kernels


@triton.jit
def _layer_norm_fwd_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, M, N, eps,
    stride_xm, stride_ym,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, ONE_PASS: tl.constexpr, BF16_RNE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """y, mean and 1/std of BLOCK_M rows per iteration, the program looping over row blocks pid,
    pid + num_programs, ... Tile [BLOCK_M, BLOCK_N]; rows longer than BLOCK_N are walked twice."""
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    for rb in range(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.num_programs(0)):
        rows, row_mask, rows64 = _row_block(rb * BLOCK_M, M, BLOCK_M)
        x_rows = x_ptr + rows64[:, None] * stride_xm
        y_rows = y_ptr + rows64[:, None] * stride_ym
        if ONE_PASS:
            mask = row_mask[:, None] & col_mask[None, :]
            x = tl.load(x_rows + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            # Sums of x - pivot (the row's first element), then the variance of the centred
            # values: a large common offset costs no precision (no E[x^2] - E[x]^2 either).
            pivot = tl.load(x_ptr + rows64 * stride_xm, mask=row_mask, other=0.0).to(tl.float32)
            xs = tl.where(mask, x - pivot[:, None], 0.0)
            mean_s = tl.sum(xs, axis=1) / N
            if BLOCK_N <= 64:
                # Short rows, 16-bit: the compiler moves the row statistics to the load layout
                # through shared memory (H200 racecheck: odd_3x7 / 4x5 bf16 and fp16), where copies
                # of a sum that differ in the last bit race. An exact max over the copies makes
                # them identical first (cheap at these widths).
                mean_s = tl.max(tl.broadcast_to(mean_s[:, None], [BLOCK_M, BLOCK_N]), axis=1)
            xc = tl.where(mask, xs - mean_s[:, None], 0.0)
            rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / N + eps)
            if BLOCK_N <= 64:
                rstd = tl.max(tl.broadcast_to(rstd[:, None], [BLOCK_M, BLOCK_N]), axis=1)
            mean = pivot + mean_s
            y = xc * rstd[:, None]
            # weight and bias are loaded late (from L1/L2): fewer live registers, more programs
            # per SM.
            if HAS_WEIGHT:
                y = y * tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
            if HAS_BIAS:
                y = y + tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
            tl.store(y_rows + cols[None, :], _round_for_store(y, y_ptr, BF16_RNE), mask=mask)
        else:
            # Chunk statistics (count c, mean mu, squared deviations q) of x - pivot merged
            # exactly into the running ones: mean += d*c/n_new, m2 += q + d*d*n_old*c/n_new,
            # d = mu - mean.
            pivot = tl.load(x_ptr + rows64 * stride_xm, mask=row_mask, other=0.0).to(tl.float32)
            mean_s = tl.zeros([BLOCK_M], tl.float32)
            m2 = tl.zeros([BLOCK_M], tl.float32)
            for start in range(0, N, BLOCK_N):
                offs = start + cols
                mask = row_mask[:, None] & (offs[None, :] < N)
                x = tl.load(x_rows + offs[None, :], mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
                x = tl.where(mask, x - pivot[:, None], 0.0)
                n_old = (start + tl.zeros([BLOCK_M], tl.int32)).to(tl.float32)
                cnt = (tl.minimum(N - start, BLOCK_N) + tl.zeros([BLOCK_M], tl.int32)).to(tl.float32)
                mu = tl.sum(x, axis=1) / cnt
                dev = tl.where(mask, x - mu[:, None], 0.0)
                q = tl.sum(dev * dev, axis=1)
                n_new = n_old + cnt
                d = mu - mean_s
                mean_s = mean_s + d * (cnt / n_new)
                m2 = m2 + q + d * d * (n_old * cnt / n_new)
            rstd = 1.0 / tl.sqrt(m2 / N + eps)
            mean = pivot + mean_s
            for start in range(0, N, BLOCK_N):
                offs = start + cols
                cmask = offs < N
                mask = row_mask[:, None] & cmask[None, :]
                x = tl.load(x_rows + offs[None, :], mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
                y = ((x - pivot[:, None]) - mean_s[:, None]) * rstd[:, None]
                if HAS_WEIGHT:
                    y = y * tl.load(w_ptr + offs, mask=cmask, other=0.0).to(tl.float32)[None, :]
                if HAS_BIAS:
                    y = y + tl.load(b_ptr + offs, mask=cmask, other=0.0).to(tl.float32)[None, :]
                tl.store(y_rows + offs[None, :], _round_for_store(y, y_ptr, BF16_RNE), mask=mask)
        # The threads of a row hold copies of its statistics that racecheck found to differ on
        # some shapes (H200; cf. triton-lang/triton#7264), and a 1-D store gathers one
        # copy per row through shared memory, where they race: the saved statistics could change
        # from run to run. Stored instead from the tile's own layout, by the one thread that holds
        # column 0 of the row: no shared memory, the same copy every run.
        first = (cols == 0)[None, :] & row_mask[:, None]
        stat = rows64[:, None] + cols[None, :]  # column 0 only: the row's own slot
        tl.store(mean_ptr + stat, tl.broadcast_to(mean[:, None], [BLOCK_M, BLOCK_N]), mask=first)
        tl.store(rstd_ptr + stat, tl.broadcast_to(rstd[:, None], [BLOCK_M, BLOCK_N]), mask=first)


@triton.jit
def _layer_norm_bwd_kernel(
    dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_part_ptr, db_part_ptr, c_ptr,
    M, N, inv_n, rows_per_program,
    stride_dym, stride_xm, stride_dxm,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, ONE_PASS: tl.constexpr, BF16_RNE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LOOP_STAGES: tl.constexpr,
):
    """dx for rows [pid * rows_per_program, ...) and this program's fp32 rows of partial dweight
    (sum of dy * xhat) and dbias (sum of dy). With xhat = (x - mean) * rstd and g = dy * weight:
    dx = rstd * (g - xhat * mean(g * xhat) - mean(g)). Tile [BLOCK_M, BLOCK_N]. The means multiply
    by ``inv_n`` (1/N rounded once on the host) rather than divide: the GPU's fast fp32 division
    is not correctly rounded, and with N = 1 dx must come out exactly zero."""
    pid = tl.program_id(0)
    row_start = pid * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, M)
    cols = tl.arange(0, BLOCK_N)
    w_part = dw_part_ptr + pid.to(tl.int64) * N
    b_part = db_part_ptr + pid.to(tl.int64) * N
    if ONE_PASS:
        col_mask = cols < N
        if HAS_WEIGHT:
            w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
            dw_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        if HAS_BIAS:
            db_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for r0 in tl.range(row_start, row_end, BLOCK_M, num_stages=LOOP_STAGES):
            _, row_mask, rows = _row_block(r0, row_end, BLOCK_M)
            mask = row_mask[:, None] & col_mask[None, :]
            x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + rows[:, None] * stride_dym + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            mean = tl.load(mean_ptr + rows, mask=row_mask, other=0.0)
            rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
            xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
            if HAS_WEIGHT:
                g = dy * w[None, :]
            else:
                g = dy
            c1 = tl.sum(g * xhat, axis=1) * inv_n
            c2 = tl.sum(g, axis=1) * inv_n
            dx = (g - (xhat * c1[:, None] + c2[:, None])) * rstd[:, None]
            # N == 1: dx is exactly zero (y does not depend on x); the compiler's fused
            # multiply-add of g = dy * w into g - c2 would leave a rounding residue.
            dx = tl.where(N == 1, 0.0, dx)
            tl.store(dx_ptr + rows[:, None] * stride_dxm + cols[None, :], _round_for_store(dx, dx_ptr, BF16_RNE), mask=mask)
            if HAS_WEIGHT:
                dw_acc += dy * xhat
            if HAS_BIAS:
                db_acc += dy
        if HAS_WEIGHT:
            tl.store(w_part + cols, tl.sum(dw_acc, axis=0), mask=col_mask)
        if HAS_BIAS:
            tl.store(b_part + cols, tl.sum(db_acc, axis=0), mask=col_mask)
    else:
        # Long rows. Pass 1, row by row: the two row constants mean(g * xhat), mean(g) go to the
        # scratch c_ptr (fp32 [M, 2]). Pass 2, column chunk by column chunk: dx of every row of
        # the chunk, the chunk's partial dweight / dbias accumulated in registers and stored
        # once (no read-modify-write of the partial rows).
        for row in range(row_start, row_end):
            r = tl.cast(row, tl.int64)
            mean = tl.load(mean_ptr + r)
            rstd = tl.load(rstd_ptr + r)
            acc1 = tl.zeros([BLOCK_N], tl.float32)
            acc2 = tl.zeros([BLOCK_N], tl.float32)
            for start in range(0, N, BLOCK_N):
                offs = start + cols
                mask = offs < N
                x = tl.load(x_ptr + r * stride_xm + offs, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_ptr + r * stride_dym + offs, mask=mask, other=0.0).to(tl.float32)
                xhat = tl.where(mask, (x - mean) * rstd, 0.0)
                if HAS_WEIGHT:
                    dy = dy * tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
                acc1 += dy * xhat
                acc2 += dy
            tl.store(c_ptr + 2 * r, tl.sum(acc1, axis=0) * inv_n)
            tl.store(c_ptr + 2 * r + 1, tl.sum(acc2, axis=0) * inv_n)
        # Every thread of the program reads the constants the program stored above.
        tl.debug_barrier()
        for start in range(0, N, BLOCK_N):
            offs = start + cols
            mask = offs < N
            if HAS_WEIGHT:
                wc = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            dw_acc = tl.zeros([BLOCK_N], tl.float32)
            db_acc = tl.zeros([BLOCK_N], tl.float32)
            for row in range(row_start, row_end):
                r = tl.cast(row, tl.int64)
                mean = tl.load(mean_ptr + r)
                rstd = tl.load(rstd_ptr + r)
                c1 = tl.load(c_ptr + 2 * r)
                c2 = tl.load(c_ptr + 2 * r + 1)
                x = tl.load(x_ptr + r * stride_xm + offs, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_ptr + r * stride_dym + offs, mask=mask, other=0.0).to(tl.float32)
                xhat = tl.where(mask, (x - mean) * rstd, 0.0)
                if HAS_WEIGHT:
                    g = dy * wc
                else:
                    g = dy
                dx = (g - (xhat * c1 + c2)) * rstd
                tl.store(dx_ptr + r * stride_dxm + offs, _round_for_store(dx, dx_ptr, BF16_RNE), mask=mask)
                dw_acc += dy * xhat
                db_acc += dy
            if HAS_WEIGHT:
                tl.store(w_part + offs, dw_acc, mask=mask)
            if HAS_BIAS:
                tl.store(b_part + offs, db_acc, mask=mask)


@triton.jit
def _column_sum(p_ptr, cols, col_mask, G, N, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr):
    """Sum over g of p[g, cols] (fp32 [G, N]), g in a fixed order."""
    acc = tl.zeros([BLOCK_G, BLOCK_N], tl.float32)
    for start in range(0, G, BLOCK_G):
        g = start + tl.arange(0, BLOCK_G)
        mask = (g[:, None] < G) & col_mask[None, :]
        acc += tl.load(p_ptr + g[:, None].to(tl.int64) * N + cols[None, :], mask=mask, other=0.0)
    return tl.sum(acc, axis=0)


@triton.jit
def _layer_norm_param_grad_kernel(
    dw_part_ptr, db_part_ptr, dw_ptr, db_ptr, G, N,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, BF16_RNE: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """dweight (program_id(1) == 0 when HAS_WEIGHT) or dbias for BLOCK_N columns: the column sums
    of the backward's G partial rows, in a fixed order (deterministic). Tile [BLOCK_G, BLOCK_N]."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    if HAS_WEIGHT:
        if tl.program_id(1) == 0:
            s = _column_sum(dw_part_ptr, cols, col_mask, G, N, BLOCK_G, BLOCK_N)
            tl.store(dw_ptr + cols, _round_for_store(s, dw_ptr, BF16_RNE), mask=col_mask)
        else:
            s = _column_sum(db_part_ptr, cols, col_mask, G, N, BLOCK_G, BLOCK_N)
            tl.store(db_ptr + cols, _round_for_store(s, db_ptr, BF16_RNE), mask=col_mask)
    elif HAS_BIAS:
        s = _column_sum(db_part_ptr, cols, col_mask, G, N, BLOCK_G, BLOCK_N)
        tl.store(db_ptr + cols, _round_for_store(s, db_ptr, BF16_RNE), mask=col_mask)


# ----------------------------------------------------------------------------- host launchers



def _rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """``t`` as (rows, n) with unit stride along n: a view when the strides allow, else a copy."""
    if t.is_contiguous():
        return t.view(-1, n)  # the common case, without reshape's cost on the host path
    r = t.reshape(-1, n)
    return r if r.stride(1) == 1 else r.contiguous()


def _empty_contiguous(x: torch.Tensor) -> torch.Tensor:
    """An uninitialized contiguous tensor like ``x`` (``empty_like`` when ``x`` is contiguous: it
    skips the parsing of a shape, dtype and device, microseconds on the host path)."""
    return torch.empty_like(x) if x.is_contiguous() else torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _flat(t: torch.Tensor) -> torch.Tensor:
    """``t``'s elements contiguous in order (``t`` itself when it already is)."""
    return t if t.is_contiguous() else t.contiguous()


def _layer_norm_forward(x, weight, bias, norm_ndim: int, eps: float, config: Config | None = None):
    n = math.prod(x.shape[x.dim() - norm_ndim:])
    m = x.numel() // n if n else math.prod(x.shape[: x.dim() - norm_ndim])
    y = _empty_contiguous(x)
    mean = torch.empty((m,), dtype=torch.float32, device=x.device)
    rstd = torch.empty((m,), dtype=torch.float32, device=x.device)
    if x.numel() == 0:
        # No rows, or empty rows: mean and 1/std of an empty row are NaN and 1/sqrt(eps) by
        # convention (never read: an empty row has nothing to normalize).
        mean.fill_(float("nan"))
        rstd.fill_(1.0 / math.sqrt(eps) if eps > 0 else float("inf"))
        return y, mean, rstd
    xr = _rows(x, n)
    yr = y.view(-1, n)
    cfg = config or _fwd_config(n)
    grid = fwd_grid(m, cfg, x.device)
    # The kernels index weight and bias as flat contiguous rows of n: passed as they are when
    # contiguous (the public function makes them so), never read without HAS_WEIGHT / HAS_BIAS.
    w = _flat(weight) if weight is not None else xr
    b = _flat(bias) if bias is not None else xr
    cached_launch(
        _LAUNCHES, _layer_norm_fwd_kernel, grid,
        HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None, ONE_PASS=cfg.one_pass,
        BF16_RNE=bf16_rne(x.dtype), BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps,
    )(xr, w, b, yr, mean, rstd, m, n, eps, xr.stride(0), yr.stride(0))
    return y, mean, rstd


def _layer_norm_backward(dy, x, weight, has_bias: bool, mean, rstd, norm_ndim: int, config: Config | None = None):
    pshape = x.shape[x.dim() - norm_ndim:]
    n = math.prod(pshape)
    has_w = weight is not None
    dx = _empty_contiguous(x)
    dw = torch.empty(pshape if has_w else (0,), dtype=x.dtype, device=x.device)
    db = torch.empty(pshape if has_bias else (0,), dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        dw.zero_()
        db.zero_()
        return dx, dw, db
    m = x.numel() // n
    xr = _rows(x, n)
    dyr = _rows(dy, n)
    dxr = dx.view(-1, n)
    cfg = config or _bwd_config(n)
    g, rows_per_program = bwd_grid(m, cfg, x.device)
    # Buffers a configuration does not use are not allocated: an fp32 tensor at hand stands in
    # (never read or written: partials without HAS_WEIGHT / HAS_BIAS, row constants on ONE_PASS).
    dw_part = torch.empty((g, n), dtype=torch.float32, device=x.device) if has_w else rstd
    db_part = torch.empty((g, n), dtype=torch.float32, device=x.device) if has_bias else rstd
    c = torch.empty((m, 2), dtype=torch.float32, device=x.device) if not cfg.one_pass else rstd
    w = _flat(weight) if has_w else xr
    cached_launch(
        _LAUNCHES, _layer_norm_bwd_kernel, g,
        HAS_WEIGHT=has_w, HAS_BIAS=has_bias, ONE_PASS=cfg.one_pass, BF16_RNE=bf16_rne(x.dtype),
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, LOOP_STAGES=cfg.loop_stages, num_warps=cfg.num_warps,
    )(dyr, xr, w, mean, rstd, dxr, dw_part, db_part, c, m, n, 1.0 / n, rows_per_program,
      dyr.stride(0), xr.stride(0), dxr.stride(0))
    if has_w or has_bias:
        block_cols = 256
        # dw and db are fresh contiguous tensors: passed as they are (flat rows of n).
        cached_launch(
            _LAUNCHES, _layer_norm_param_grad_kernel, (cdiv(n, block_cols), int(has_w) + int(has_bias)),
            HAS_WEIGHT=has_w, HAS_BIAS=has_bias, BF16_RNE=bf16_rne(x.dtype),
            BLOCK_G=32, BLOCK_N=block_cols, num_warps=4,
        )(dw_part, db_part, dw if has_w else dx, db if has_bias else dx, g, n)
    return dx, dw, db


# ----------------------------------------------------------------------------- custom ops, autograd


def _layer_norm_fwd(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, norm_ndim: int, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _layer_norm_forward(x, weight, bias, norm_ndim, eps)


def _layer_norm_fwd_fake(x, weight, bias, norm_ndim, eps):
    m = math.prod(x.shape[: x.dim() - norm_ndim])
    stats = x.new_empty((m,), dtype=torch.float32)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device), stats, stats.new_empty((m,))


def _layer_norm_bwd(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, has_bias: bool,
    mean: torch.Tensor, rstd: torch.Tensor, norm_ndim: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _layer_norm_backward(dy, x, weight, has_bias, mean, rstd, norm_ndim)


def _layer_norm_bwd_fake(dy, x, weight, has_bias, mean, rstd, norm_ndim):
    pshape = x.shape[x.dim() - norm_ndim:]
    dw = x.new_empty(pshape if weight is not None else (0,))
    db = x.new_empty(pshape if has_bias else (0,))
    return torch.empty(x.shape, dtype=x.dtype, device=x.device), dw, db


def _setup_context(ctx, inputs, output):
    x, weight, bias, norm_ndim, _ = inputs
    _, mean, rstd = output
    ctx.has_weight = weight is not None
    ctx.has_bias = bias is not None
    ctx.norm_ndim = norm_ndim
    ctx.save_for_backward(x, weight, mean, rstd)
    ctx.mark_non_differentiable(mean, rstd)


def _backward(ctx, grad_y, grad_mean, grad_rstd):
    x, weight, mean, rstd = ctx.saved_tensors
    dx, dw, db = _layer_norm_bwd_op(grad_y, x, weight, ctx.has_bias, mean, rstd, ctx.norm_ndim)
    return dx, (dw if ctx.has_weight else None), (db if ctx.has_bias else None), None, None


_LAUNCHES: dict = {}
_layer_norm_bwd_op = Op("roofkit::layer_norm_bwd", _layer_norm_bwd, _layer_norm_bwd_fake)
_layer_norm_fwd_op = Op("roofkit::layer_norm_fwd", _layer_norm_fwd, _layer_norm_fwd_fake).autograd(
    _setup_context, _backward)


# ----------------------------------------------------------------------------- public function


@planned
def layer_norm(
    input: torch.Tensor,
    normalized_shape,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = DEFAULT_EPS,
) -> torch.Tensor:
    """LayerNorm over the trailing dimensions: y = (x - mean) / sqrt(var + eps) * weight + bias.

    Mirrors ``torch.nn.functional.layer_norm``; mean and (biased) variance are taken over the
    last ``len(normalized_shape)`` dimensions, viewed as one row of N = prod(normalized_shape).

    Args:
        input: float32, float16 or bfloat16 tensor (..., *normalized_shape), any strides, on CUDA
            (or on CPU with TRITON_INTERPRET=1).
        normalized_shape: an int or a sequence of ints equal to the trailing dimensions of input.
        weight, bias: optional tensors of shape ``normalized_shape`` and the input's dtype, on the
            input's device; either, both or neither may be given.
        eps: added to the variance inside the square root (default 1e-5, as torch).
    Returns:
        A contiguous tensor of ``input``'s shape and dtype.
    Raises:
        TypeError: ``input``, ``weight`` or ``bias`` not a float32/float16/bfloat16 dense tensor,
            weight or bias dtype different from input's, ``normalized_shape`` not ints, ``eps``
            not a real number.
        ValueError: ``normalized_shape`` empty or not the trailing dimensions of input, weight or
            bias of the wrong shape, tensors on an unsupported or different device, negative or
            non-finite ``eps``.
    Numerics:
        float32 accumulation: the mean, then the variance of the centred values (no
        E[x^2] - E[x]^2 cancellation; rows longer than ``ONE_PASS_MAX_N`` merge per-chunk
        statistics exactly), one rounding to the output dtype. The backward returns dx, dweight
        and dbias; dweight and dbias are reduced across rows in float32 by a fixed two-stage
        reduction (bitwise reproducible on a given GPU). First-order backward only. Unlike torch,
        a float32 weight or bias with a 16-bit input is refused (TypeError) rather than promoted.
    Cost:
        Forward reads x once and weight and bias once and writes y once (2*M*N + 2*N elements)
        for rows up to ``ONE_PASS_MAX_N`` (longer rows read x twice, the second time mostly from
        L2), plus 8 bytes of mean and 1/std per row. Backward reads x and dy and writes dx
        (3*M*N) plus 2*G*N floats of partials. About 7 FLOP per element forward, 12 backward.
    Source:
        Ba, Kiros & Hinton 2016; Chan, Golub & LeVeque 1983 (merging chunk variances); Triton
        tutorial 05 (two-stage weight-gradient reduction).
    """
    op = "layer_norm"
    check_tensor(op, "input", input)
    normalized_shape = as_shape(op, normalized_shape)
    k = len(normalized_shape)
    if k == 0 or k > input.dim() or tuple(input.shape[input.dim() - k:]) != normalized_shape:
        raise ValueError(
            f"roofkit.{op}: normalized_shape must be the trailing dimension(s) of input (at least one); "
            f"got {normalized_shape} for input of shape {tuple(input.shape)}"
        )
    if weight is not None:
        weight = check_param(op, "weight", weight, input, normalized_shape, " (normalized_shape)")
    if bias is not None:
        bias = check_param(op, "bias", bias, input, normalized_shape, " (normalized_shape)")
    eps = eps_as_float(op, eps, "a real number")
    if not (eps >= 0 and math.isfinite(eps)):
        raise ValueError(f"roofkit.{op}: eps must be finite and >= 0, got {eps}")
    y, _, _ = _layer_norm_fwd_op.apply(input, weight, bias, k, eps)
    return y


# ----------------------------------------------------------------------------- spec


def _make_inputs(case, dtype, generator, device) -> Inputs:
    shape = tuple(case["shape"])
    k = case.get("norm_dims", 1)
    x = random_input(case, shape, dtype, generator, device)
    if case.get("shift"):
        # A large common offset: the variance must come from centred values, not E[x^2]-E[x]^2.
        x = x + case["shift"]
    pshape = shape[len(shape) - k:]
    gdev = generator.device
    weight = bias = None
    if case.get("weight", True):
        # Not all ones (nor the bias zeros): an implementation ignoring either must fail.
        weight = random_weight(pshape, dtype, generator, device)
    if case.get("bias", True):
        bias = (0.5 * torch.randn(pshape, generator=generator, device=gdev)).to(device=device, dtype=dtype)
    if case.get("param_layout") and weight is not None:
        weight = with_layout(weight, case["param_layout"])
    return Inputs((x, pshape, weight, bias, case.get("eps", DEFAULT_EPS)))


_F32 = (torch.float32,)
_BF16 = (torch.bfloat16,)

CASES = [
    *row_cases(),
    case("two_norm_dims_2x3x4x5", shape=(2, 3, 4, 5), norm_dims=2),
    case("all_dims_normalized_3x5x7", shape=(3, 5, 7), norm_dims=3),
    case("no_weight_5x96", shape=(5, 96), weight=False),
    case("no_bias_5x96", shape=(5, 96), bias=False),
    case("no_affine_5x96", shape=(5, 96), weight=False, bias=False),
    *layout_cases(),
    case("eps_zero_8x64", shape=(8, 64), eps=0.0),
    case("mean_offset_1e3_8x300", shape=(8, 300), shift=1e3, dtypes=_F32),
    case("many_rows_130x33", shape=(130, 33)),
    case("expanded_rows_5x40", shape=(5, 40), layout="expanded"),
    case("strided_weight_grad_7x48", shape=(7, 48), param_layout="strided", grad_layout="transposed"),
    *value_cases(),
    # On the GPU (``pytest -m gpu``): the acceptance shapes and each kernel path.
    *gpu_row_cases(),
    case("gpu_row_8192", ["gpu"], shape=(1024, 8192)),
    case("gpu_row_16384_bwd_loop", ["gpu"], shape=(300, 16384)),
    case("gpu_row_65536", ["gpu"], shape=(64, 65536)),
    case("gpu_row_262144", ["gpu"], shape=(16, 262144)),
    case("gpu_two_norm_dims_64x32x128", ["gpu"], shape=(64, 32, 128), norm_dims=2),
    case("gpu_no_affine_1000x4096", ["gpu"], shape=(1000, 4096), weight=False, bias=False),
    case("gpu_fp16_magnitude_1e4", ["gpu"], shape=(512, 4096), dist="large", magnitude=1e4, dtypes=(torch.float16,)),
    case("gpu_mean_offset_1e3", ["gpu"], shape=(512, 4096), shift=1e3, dtypes=_F32),
    case("gpu_transposed_2048x3000", ["gpu"], shape=(2048, 3000), layout="transposed"),
    case("gpu_over_2pow31_elements", ["gpu", "slow"], shape=(262145, 8192), dtypes=_BF16, grad=False),
]

SUITES = {
    # llama3-8b's hidden size 4096 (8192 tokens per sequence, batch 4) and the 70b's 8192.
    "llama3-8b": [
        case("hidden_32768x4096", shape=(32768, 4096), dtypes=_BF16),
        case("hidden_32768x4096_fwd_bwd", shape=(32768, 4096), dtypes=_BF16, mode="fwd_bwd"),
        case("hidden_16384x8192", shape=(16384, 8192), dtypes=_BF16),
        case("hidden_16384x8192_fwd_bwd", shape=(16384, 8192), dtypes=_BF16, mode="fwd_bwd"),
    ],
    # gpt2: hidden 768, LayerNorm with weight and bias; 16 sequences of 1024 tokens.
    "gpt2": [
        case("hidden_16384x768", shape=(16384, 768), dtypes=_BF16),
        case("hidden_16384x768_fwd_bwd", shape=(16384, 768), dtypes=_BF16, mode="fwd_bwd"),
    ],
    # Acceptance: rows of 1 and 65536; >= 3900 GB/s forward and >= 3300 GB/s
    # forward+backward at 32768x4096 bf16.
    "acceptance": [
        case("hidden_32768x4096", shape=(32768, 4096), dtypes=_BF16),
        case("hidden_32768x4096_fwd_bwd", shape=(32768, 4096), dtypes=_BF16, mode="fwd_bwd"),
        case("row_1_1Mx1", shape=(1 << 20, 1), dtypes=_BF16),
        case("row_65536_2048x65536", shape=(2048, 65536), dtypes=_BF16),
        case("row_65536_2048x65536_fwd_bwd", shape=(2048, 65536), dtypes=_BF16, mode="fwd_bwd"),
    ],
    "host": host_suite(),
}


def _liger():
    try:
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction
    except ImportError:
        return None

    def run(input, normalized_shape, weight=None, bias=None, eps=DEFAULT_EPS):
        shape = as_shape("layer_norm", normalized_shape)
        if weight is None or bias is None or len(shape) != 1:
            raise NotImplementedError("Liger's LayerNorm needs a weight, a bias and one normalized dimension")
        return LigerLayerNormFunction.apply(input, weight, bias, eps)

    return run


SPEC = OpSpec(
    name="layer_norm",
    impl=layer_norm,
    reference=layer_norm_reference,
    torch_impl=F.layer_norm,
    make_inputs=_make_inputs,
    cost=layer_norm_cost,
    reduction_length=lambda case: _problem(case)[1],
    dtypes=FLOAT_DTYPES,
    cases=CASES,
    suites=SUITES,
    baselines={**baselines.eager_and_compiled(F.layer_norm), "liger": _liger,
               "flaggems": baselines.flaggems(F.layer_norm)},
    grad_args=(0, 2, 3),
    marker="layer_norm",
)

SPECS = (SPEC,)


# The tunables of this family's heuristics: what roofkit.config.override may set.
TUNABLES = ("ONE_PASS_MAX_N", "BWD_ONE_PASS_MAX_N", "LOOP_BLOCK_N", "PROGRAMS_PER_SM")
