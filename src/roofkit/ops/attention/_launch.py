"""Attention's launch side: tile configurations, the module switches (ATOMIC_DQ, DECODE_*) and the
host launchers of the forward (incl. split-KV decoding) and backward kernels. Tests monkeypatch
the settings, config choosers and kernel names on this module: it is the one that reads them."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .._common import INTERPRETED, bf16_rne, cdiv, device_index, next_pow2, shared_memory_limits, sm_count
from .._gemm import tma_supported
from .._runtime import launch
from ._kernels import (
    _attn_bwd_dkdv_kernel,
    _attn_bwd_dq_kernel,
    _attn_bwd_preprocess_kernel,
    _attn_decode_combine_kernel,
    _attn_decode_kernel,
    _attn_fwd_kernel,
)

_LAUNCHES: dict = {}

LOG2E = 1.4426950408889634
FP32_MIN_NORMAL = 2.0**-126  # below it a float32 scale may be flushed to zero on the device


# ----------------------------------------------------------------------------- launch heuristic


class Config(NamedTuple):
    """Tile of one kernel: BLOCK_M query rows x BLOCK_N keys, warps and pipeline stages."""

    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    num_stages: int


# dQ with fp32 atomics inside the dK/dV kernel (True) or from its own kernel, no atomics (False:
# bitwise reproducible, and measured faster on the H200: 355 vs 310 TFLOP/s for the backward of
# b4 h16 s8448 d128 causal). ``deterministic=True`` always takes the atomic-free kernel.
ATOMIC_DQ = False

# Forward K / V loads through tensor descriptors (TMA) where the layout allows them (Hopper or
# newer, or the interpreter; 16-bit inputs; head dim a power of two; 16-byte aligned strides).
FWD_DESC = True

# With an attn_mask of at least MASK_RANGES_MIN_PAIRS (query, key) pairs the kernels visit only the
# span of blocks the mask leaves visible (``_mask_ranges``: a pre-pass over the mask on the device):
# a causal or padding mask that transformers builds (while torch.compile traces, even for plain
# causal attention) costs about the causal band, not every pair. Below it the pre-pass's few
# launches would cost more host time than they save.
MASK_RANGES_MIN_PAIRS = 1 << 20

# Element offsets from this many on are formed in 64 bits in the kernels (USE_INT64): 2**31, the
# first that 32-bit arithmetic cannot hold (tests lower it to run the 64-bit forms on small inputs).
INT64_FROM = 2**31

# Decoding (split-KV) is taken when a GQA group's query rows fit one tile of at most
# DECODE_MAX_ROWS rows and the KV sequence has at least DECODE_MIN_SK keys.
DECODE_MAX_ROWS = 64
DECODE_MIN_SK = 512
# Split-KV: aim for this many programs per SM in all, each with at least DECODE_MIN_BLOCKS KV blocks.
DECODE_PROGRAMS_PER_SM = 4
DECODE_MIN_BLOCKS = 4


def _fwd_config(d_pad: int, causal: bool, dtype: torch.dtype, sq: int) -> Config:
    """Forward tiles, from sweeps on the H200 (bf16, 2026-11-30, ``benchmarks/sweep_attention.py``;
    K / V through tensor descriptors): d <= 64: 128 x 64 keys, 8 warps, 3 stages (343 TFLOP/s
    causal s2048); d <= 128: causal 128 x 128, 8 warps, 3 stages (534 causal s8448; 128 x 64
    4 stages: 501), non-causal 256 x 64, 8 warps, 3 stages (533; 128 x 128: 515); the same
    order holds for pointer loads. d = 256: 64 x 64, 4 warps, 2 stages (the shared-memory ring
    and the accumulator grow with d); fp32 inputs (IEEE dots) 64 x 32. Short query sequences
    shrink BLOCK_M. Interpreter: 16 x 16."""
    if INTERPRETED:
        return Config(16, 16, 4, 1)
    if dtype == torch.float32:
        cfg = Config(64, 32, 4, 2)
    elif d_pad <= 64:
        cfg = Config(128, 64, 8, 3)
    elif d_pad <= 128:
        cfg = Config(128, 128, 8, 3) if causal else Config(256, 64, 8, 3)
    else:
        cfg = Config(64, 64, 4, 2)
    bm = min(cfg.BLOCK_M, max(16, next_pow2(sq)))
    return cfg._replace(BLOCK_M=bm, num_warps=min(cfg.num_warps, max(4, bm // 16)))


def _bwd_config(d_pad: int, dtype: torch.dtype) -> tuple[Config, Config]:
    """(dK/dV kernel: BLOCK_M query rows per step x BLOCK_N keys per program,
    dQ kernel: BLOCK_M query rows per program x BLOCK_N keys per step)."""
    if INTERPRETED:
        return Config(16, 16, 4, 1), Config(16, 16, 4, 1)
    if dtype == torch.float32:
        return Config(32, 64, 4, 2), Config(64, 32, 4, 2)
    if d_pad <= 128:
        # H200 sweep (bf16, d128, 2026-12-02; 22 + 18 configurations, every one checked against
        # the previous default): dK/dV 32 x 64, 4 warps, 4 stages and dQ 128 x 64, 8 warps, 4
        # stages against the previous 64 x 128 / 8 warps / 3 stages and 128 x 64 / 8 / 3:
        # b4 h32/8 s2048 causal 1192 -> 1171 us, b1 h32/8 s8192 causal 3757 -> 3703 us,
        # b4 h16 s8448 16048 -> 15218 us (cuDNN: 831, 2590, 10325 us).
        return Config(32, 64, 4, 4), Config(128, 64, 8, 4)
    return Config(32, 64, 4, 2), Config(64, 32, 4, 2)


# Bytes of shared memory Triton takes beside the pipeline ring (barriers, the layout
# conversions' scratch); measured 1 KiB on the H200 (the forward's 3 x 96 KiB ring asked 295936).
SHARED_SLACK = 4096


def _fit_shared(cfg: Config, stage_bytes, limit: int) -> Config:
    """``cfg`` shrunk until its pipeline ring fits ``limit`` bytes of shared memory: Triton keeps
    num_stages copies of each tile a kernel's loop streams, and an attn_mask adds a BLOCK_M x
    BLOCK_N tile of the mask's dtype per stage (float32, 256 x 64: 64 KiB a stage, which the
    sweep-tuned tiles without a mask do not count on). ``stage_bytes(cfg)``: one stage's bytes.
    Fewer stages first (down to 2), then half the query rows (warps follow), then one stage."""
    while stage_bytes(cfg) * cfg.num_stages + SHARED_SLACK > limit:
        if cfg.num_stages > 2:
            cfg = cfg._replace(num_stages=cfg.num_stages - 1)
        elif cfg.BLOCK_M > 16:
            bm = cfg.BLOCK_M // 2
            cfg = cfg._replace(BLOCK_M=bm, num_warps=min(cfg.num_warps, max(4, bm // 16)))
        elif cfg.num_stages > 1:
            cfg = cfg._replace(num_stages=1)
        else:
            break
    return cfg


def _shared_limit(device: torch.device) -> int:
    """Shared memory one program may use on ``device`` (read from the device); no limit under the
    interpreter."""
    return 1 << 62 if INTERPRETED or device.type != "cuda" else shared_memory_limits(device_index(device))[0]


def _decode_config(d_pad: int, dtype: torch.dtype, rows: int) -> Config:
    """Split-KV tile: BLOCK_M covers the group's query rows (>= 16 for tl.dot); 64 keys per step
    (32 for d = 256 or fp32), 4 warps, 4 stages so that several K/V loads are in flight."""
    bm = max(16, next_pow2(rows))
    if INTERPRETED:
        return Config(bm, 16, 4, 1)
    bn = 32 if (d_pad > 128 or dtype == torch.float32) else 64
    return Config(bm, bn, 4, 3 if d_pad > 128 else 4)


def _use_decode(g: int, sq: int, sk: int) -> bool:
    return g * sq <= DECODE_MAX_ROWS and sk >= DECODE_MIN_SK


def _decode_splits(pairs: int, sk: int, block_n: int, device: torch.device) -> tuple[int, int]:
    """(number of KV chunks, chunk length in keys, a multiple of block_n): enough programs for
    DECODE_PROGRAMS_PER_SM per SM, each chunk at least DECODE_MIN_BLOCKS blocks long."""
    n_blocks = cdiv(sk, block_n)
    want = cdiv(DECODE_PROGRAMS_PER_SM * sm_count(device), max(1, pairs))
    splits = max(1, min(want, n_blocks // DECODE_MIN_BLOCKS))
    per = cdiv(n_blocks, splits)
    return cdiv(n_blocks, per), per * block_n


# ----------------------------------------------------------------------------- host side


def _flags(q: torch.Tensor, d: int, d_pad: int) -> dict:
    return dict(
        EVEN_D=d == d_pad,
        IEEE=q.dtype == torch.float32 or (q.dtype == torch.bfloat16 and INTERPRETED),
        UPCAST=INTERPRETED,
    )


def _kv_descriptors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, d: int, d_pad: int, block_n: int):
    """(K descriptor, V descriptor) with block [1, 1, block_n, d], or None when FWD_DESC is off or
    the layout cannot be described (then the kernel loads through pointers)."""
    if not (FWD_DESC and d == d_pad and q.dtype in (torch.float16, torch.bfloat16) and tma_supported(q.device)):
        return None
    for t in (k, v):
        if t.stride(-1) != 1 or t.data_ptr() % 16 or any((st * t.element_size()) % 16 for st in t.stride()[:-1]):
            return None
        if any(st == 0 for st, size in zip(t.stride(), t.shape) if size > 1):
            return None  # a broadcast (expanded) dimension: the copy engine wants real strides
    from triton.tools.tensor_descriptor import TensorDescriptor

    return tuple(TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, block_n, d]) for t in (k, v))


def _head_dim_pad(d: int) -> int:
    return max(16, next_pow2(d))


class Band(NamedTuple):
    """Which keys a query row sees, as the kernels take it: row i sees key j iff j <= i + diag
    (when ``causal``: causal masking, or a window's right edge) and j >= i + diag_lo (when
    ``left``: a window's left edge)."""

    causal: bool
    left: bool
    diag: int
    diag_lo: int


def _band(sq: int, sk: int, window: tuple[int, int], bottom_right: bool) -> Band:
    """The band of ``window`` = (left, right) (-1: unbounded; causal is (-1, 0)), aligned to the
    top-left corner (query i's diagonal is key i: torch's is_causal) or, with ``bottom_right``,
    to the bottom-right one (key i + Sk - Sq: FlashAttention's)."""
    left, right = window
    d0 = sk - sq if bottom_right else 0
    return Band(right >= 0, left >= 0, d0 + right if right >= 0 else 0, d0 - left if left >= 0 else 0)


def _mask_ranges(m: torch.Tensor, mask_bool: bool, block_m: int, block_n: int, g: int, over_queries: bool):
    """The span of the mask's visible pairs per block, for the kernels to visit nothing outside it
    (RANGED), computed on the device (no synchronization). ``m``: the mask as ``_mask_args`` gives
    it, (B, Hq, Sq, Sk) with stride-0 broadcast dimensions; a pair is visible where a boolean mask
    is nonzero or an additive one is not -inf (a finite bias, however negative, takes part).
    Returns (ranges, (stride_b, stride_h, stride_block)): int32 [..., 2] = (first, last + 1), for
    each (batch, query head, block of block_m query rows) the keys (``over_queries`` False), or
    for each (batch, KV head, block of block_n keys) the query rows of the KV head's g query heads
    (True); first > last + 1 where the mask hides every pair. Broadcast dimensions keep stride 0."""
    B, hq, sq, sk = m.shape
    # the mask's own extent: a broadcast dimension is read once
    own = m[tuple(slice(0, 1) if st == 0 else slice(None) for st in m.stride())]
    vis = own != 0 if mask_bool else own != float("-inf")
    bd, hd, qd, kd = vis.shape
    if over_queries:
        if kd > 1:  # any visible pair per (row, block of keys)
            n_blk = cdiv(sk, block_n)
            vis = torch.nn.functional.pad(vis, (0, n_blk * block_n - sk)).view(bd, hd, qd, n_blk, block_n).any(4)
        if hd > 1 and g > 1:  # a KV head serves its group's query heads: their union
            vis = vis.view(bd, hd // g, g, qd, vis.shape[-1]).any(2)
        extent, length = vis.transpose(2, 3), sq  # (b, h, key blocks, rows)
    else:
        if qd > 1:  # any visible pair per (block of rows, key)
            n_blk = cdiv(sq, block_m)
            vis = torch.nn.functional.pad(vis, (0, 0, 0, n_blk * block_m - sq)).view(bd, hd, n_blk, block_m, kd).any(3)
        extent, length = vis, sk  # (b, h, row blocks, keys)
    n = extent.shape[-1]
    if n == 1:  # broadcast along the spanned dimension: all of it or none
        first = torch.where(extent[..., 0], 0, length)
        last = torch.where(extent[..., 0], length, 0)
    else:
        idx = torch.arange(n, device=m.device, dtype=torch.int32)
        first = torch.where(extent, idx, n).amin(-1)
        last = torch.where(extent, idx + 1, 0).amax(-1)
    ranges = torch.stack((first, last), -1).to(torch.int32)
    heads, blocks = (hq // g, cdiv(sk, block_n)) if over_queries else (hq, cdiv(sq, block_m))
    ranges = ranges.expand(B, heads, blocks, 2)
    return ranges, tuple(ranges.stride()[:3])


def _ranged(has_mask: bool, sq: int, sk: int) -> bool:
    return has_mask and sq * sk >= MASK_RANGES_MIN_PAIRS


_NO_RANGES = (0, 0, 0)


def _mask_args(mask: torch.Tensor | None, q: torch.Tensor, sk: int):
    """(tensor, its 4 strides as (B, Hq, Sq, Sk), HAS_MASK, MASK_BOOL) for the kernels: the
    mask broadcast to (B, Hq, Sq, Sk) as a view (broadcast dimensions get stride 0, nothing is
    materialized), a boolean one reinterpreted as uint8; no mask: ``q`` with zero strides (never
    read). A key stride that would overflow 32-bit offsets (a transposed mask of more than 2**31
    elements) is copied to a contiguous layout first."""
    if mask is None:
        return q, (0, 0, 0, 0), False, False
    B, hq, sq = q.shape[:3]
    m = mask.expand(B, hq, sq, sk)
    if sk * abs(m.stride(3)) >= 2**31:
        m = m.contiguous()
    is_bool = m.dtype == torch.bool
    if is_bool:
        m = m.view(torch.uint8)
    return m, tuple(m.stride()), True, is_bool


def _segment_args(segments: torch.Tensor | None, q: torch.Tensor):
    """(tensor, batch stride, SEGMENTS) for the kernels: ``segments`` (B, Sq + Sk + 1) with each
    batch's query ids, its key ids and 1 if both are sorted (else 0), contiguous along the
    sequence; no segments: ``q`` with stride 0 (never read)."""
    if segments is None:
        return q, 0, False
    return segments, segments.stride(0), True


def _segment_mask(segments: torch.Tensor, sq: int) -> torch.Tensor:
    """The boolean (B, 1, Sq, Sk) mask of ``segments`` (query i and key j take part iff their
    ids are equal): for the split-KV decoding kernel, which reads masks but not segment ids."""
    return (segments[:, :sq, None] == segments[:, None, sq:-1]).unsqueeze(1)


def _output(q: torch.Tensor) -> torch.Tensor:
    """The output, (B, Hq, Sq, D) laid out (B, Sq, Hq, D) in memory as torch's flash and
    memory-efficient backends return it: a model's ``out.transpose(1, 2).reshape(B, Sq, -1)``
    then copies nothing, and the projection after it saves the same storage the attention's
    backward keeps. (The launch and the fakes both make it here.)"""
    B, hq, sq, d = q.shape
    return q.new_empty((B, sq, hq, d)).transpose(1, 2)


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, window: tuple[int, int],
             bottom_right: bool, scale: float, keep_lo: bool, segments: torch.Tensor | None = None):
    """(out [B, Hq, Sq, D] in q's dtype, base-2 lse [2, B, Hq, Sq] fp32 as hi (the rounded lse)
    and lo (what hi's rounding dropped; ``_kernels._lse_hi_lo``), out's rounding residual in q's
    dtype or an empty tensor): with the residual (``keep_lo``) the backward forms delta =
    rowsum(dO * O) from O to about twice its dtype's precision (delta from the rounded O alone
    misses a 16-bit dtype's error budget). ``mask``: the attn_mask (boolean or additive, broadcastable to
    (B, Hq, Sq, Sk)) or None; ``window``, ``bottom_right``: the band (``_band``); ``segments``:
    segment ids as ``_segment_args`` takes them (not together with ``mask``) or None. Empty inputs
    launch nothing."""
    B, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    out = _output(q)
    lse = torch.empty((2, B, hq, sq), dtype=torch.float32, device=q.device)
    lse_hi, lse_lo = lse[0], lse[1]
    o_lo = torch.empty((B, hq, sq, d) if keep_lo else (0,), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out, lse, o_lo
    if sk == 0:  # no key at all: every row sees nothing
        lse_hi.fill_(-math.inf)
        lse_lo.zero_()
        return out.zero_(), lse, o_lo.zero_()
    g = hq // hkv
    d_pad = _head_dim_pad(d)
    qk_scale = scale * LOG2E
    flags = _flags(q, d, d_pad)
    band = _band(sq, sk, window, bottom_right)
    if segments is not None and _use_decode(g, sq, sk):
        mask, segments = _segment_mask(segments, sq), None
    m, m_strides, has_mask, mask_bool = _mask_args(mask, q, sk)
    seg, seg_stride, has_segments = _segment_args(segments, q)
    strides = (*q.stride(), *k.stride(), *v.stride(), *out.stride(), *m_strides)
    edges = dict(IS_CAUSAL=band.causal, HAS_LEFT=band.left, HAS_MASK=has_mask, MASK_BOOL=mask_bool)
    if _use_decode(g, sq, sk):
        cfg = _decode_config(d_pad, q.dtype, g * sq)
        splits, chunk = _decode_splits(B * hkv, sk, cfg.BLOCK_N, q.device)
        if splits > 1:
            po = torch.empty((B * hq * sq, splits, d), dtype=torch.float32, device=q.device)
            plse = torch.empty((2, B * hq * sq, splits), dtype=torch.float32, device=q.device)
        else:
            po, plse = lse_hi, lse  # unused
        launch(_LAUNCHES, _attn_decode_kernel, (B * hkv, splits),
            q, k, v, out, lse_hi, lse_lo, o_lo, po, plse[0], plse[1], m, *strides, hkv, g, sq, sk, d,
            band.diag, band.diag_lo, qk_scale, chunk, splits,
            BF16_RNE=bf16_rne(q.dtype), FINAL=splits == 1, STORE_O_LO=keep_lo,
            USE_INT64=sk * max(abs(k.stride(2)), abs(v.stride(2))) >= INT64_FROM,
            BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, BLOCK_D=d_pad,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages, **edges, **flags,
        )
        if splits > 1:
            launch(_LAUNCHES, _attn_decode_combine_kernel, (B * hq * sq,),
                po, plse[0], plse[1], out, lse_hi, lse_lo, o_lo, *out.stride(), hq, sq, d, splits,
                BF16_RNE=bf16_rne(q.dtype), STORE_O_LO=keep_lo, BLOCK_S=next_pow2(splits), BLOCK_D=d_pad,
                num_warps=4,
            )
        return out, lse, o_lo
    cfg = _fwd_config(d_pad, band.causal, q.dtype, sq)
    if has_mask:  # a stage: a K and a V tile, and the mask's tile (the tiles without one fit as tuned)
        cfg = _fit_shared(cfg, lambda c: c.BLOCK_N * (2 * d_pad * q.element_size() + c.BLOCK_M * m.element_size()),
                          _shared_limit(q.device))
    use_int64 = max(sq * abs(q.stride(2)), sk * abs(k.stride(2)), sk * abs(v.stride(2)), sq * out.stride(2)) >= INT64_FROM
    grid = (B * hq, cdiv(sq, cfg.BLOCK_M))
    descs = _kv_descriptors(q, k, v, d, d_pad, cfg.BLOCK_N)
    ranged = _ranged(has_mask, sq, sk)
    rng, r_strides = _mask_ranges(m, mask_bool, cfg.BLOCK_M, cfg.BLOCK_N, g, False) if ranged else (lse, _NO_RANGES)
    launch(_LAUNCHES, _attn_fwd_kernel, grid,
        q, k, v, out, lse_hi, lse_lo, o_lo, *(descs or (k, v)), m, *strides, rng, *r_strides, seg, seg_stride,
        hq, g, sq, sk, d, band.diag, band.diag_lo, qk_scale, RANGED=ranged, SEGMENTS=has_segments,
        BF16_RNE=bf16_rne(q.dtype), USE_INT64=use_int64, STORE_O_LO=keep_lo, DESC=descs is not None,
        # An additive mask is added to the scaled scores: the scale cannot be folded.
        FOLD=math.isfinite(qk_scale) and qk_scale >= FP32_MIN_NORMAL and not (has_mask and not mask_bool),
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, BLOCK_D=d_pad,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **edges, **flags,
    )
    return out, lse, o_lo


def _grad_buffers(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """(dq, dk, dv), each laid out as its operand is (``torch.empty_like``: a dense operand's
    strides, else contiguous), dv with dk's strides (the dK/dV kernel stores both through one set).
    A model's q, k, v are usually views (B, H, S, D) of a projection's (B, S, H, D) output: their
    gradients then reach the projection in its own layout, and autograd's view of them back to
    (B, S, H * D) copies nothing (a (B, H, S, D)-contiguous gradient costs a transposing copy each).
    (The launch and the fakes both make them here.)"""
    dq = torch.empty_like(q)
    dk = torch.empty_like(k)
    dv = torch.empty_strided(v.shape, dk.stride(), dtype=v.dtype, device=v.device)
    return dq, dk, dv


def _backward(do, q, k, v, out, out_lo, lse, dlse, mask, window: tuple[int, int], bottom_right: bool,
              scale: float, deterministic: bool, segments: torch.Tensor | None = None):
    """(dq, dk, dv) in the input dtype, shaped like q, k, v. ``out``: the forward output,
    ``out_lo``: its rounding residual when kept (else None), ``lse``: base-2 hi and lo as ``_forward`` returns it, ``dlse``: its gradient or
    None (hi's is the lse's: the public functions read hi alone); ``mask``, ``window``,
    ``bottom_right``, ``segments``: as the forward's."""
    B, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    dq, dk, dv = _grad_buffers(q, k, v)
    if q.numel() == 0 or k.numel() == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    g = hq // hkv
    d_pad = _head_dim_pad(d)
    flags = _flags(q, d, d_pad)
    rne = bf16_rne(q.dtype)
    band = _band(sq, sk, window, bottom_right)
    m, m_strides, has_mask, mask_bool = _mask_args(mask, q, sk)
    seg, seg_stride, has_segments = _segment_args(segments, q)
    edges = dict(IS_CAUSAL=band.causal, HAS_LEFT=band.left, HAS_MASK=has_mask, MASK_BOOL=mask_bool,
                 SEGMENTS=has_segments)
    # lse's low part moves P by at most |lse| * 2^-25 relative: it matters for fp32 inputs (16-bit
    # P is rounded to 2^-9 or 2^-12 before use), where it costs one subtraction per score, and
    # under an additive mask, whose huge values (finfo.min) can leave all of log2(l) in the low part.
    lse_lo = q.dtype == torch.float32 or (has_mask and not mask_bool)
    delta = torch.empty((B, hq, sq), dtype=torch.float32, device=q.device)
    # every row offset of q, k, v, out, dO and the gradients (dk and dv share strides)
    use_int64 = max(sq * max(abs(q.stride(2)), abs(out.stride(2)), abs(do.stride(2)), abs(dq.stride(2))),
                    sk * max(abs(k.stride(2)), abs(v.stride(2)), abs(dk.stride(2)))) >= INT64_FROM
    pre_m = 64 if not INTERPRETED else 16
    has_dlse = dlse is not None
    launch(_LAUNCHES, _attn_bwd_preprocess_kernel, (B * hq, cdiv(sq, pre_m)),
        out, out if out_lo is None else out_lo, do, dlse[0].contiguous() if has_dlse else lse[0], delta,
        *out.stride(), *do.stride(), hq, sq, d, HAS_LO=out_lo is not None, HAS_DLSE=has_dlse, USE_INT64=use_int64, BLOCK_M=pre_m, BLOCK_D=d_pad, num_warps=4,
    )
    kv_cfg, q_cfg = _bwd_config(d_pad, q.dtype)
    if has_mask:  # a stage: the dK/dV kernel streams q and dO tiles, the dQ kernel k and v tiles; both the mask's
        limit, mask_size = _shared_limit(q.device), m.element_size()
        kv_cfg = _fit_shared(kv_cfg, lambda c: c.BLOCK_M * (2 * d_pad * q.element_size() + c.BLOCK_N * mask_size), limit)
        q_cfg = _fit_shared(q_cfg, lambda c: c.BLOCK_N * (2 * d_pad * q.element_size() + c.BLOCK_M * mask_size), limit)
    deterministic = deterministic or not ATOMIC_DQ
    if deterministic:
        dq_acc = dq  # not touched by the dK/dV kernel
    else:
        dq_acc = torch.zeros((B, hq, sq, d), dtype=torch.float32, device=q.device)
    common = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    ranged = _ranged(has_mask, sq, sk)
    rng, r_strides = (_mask_ranges(m, mask_bool, kv_cfg.BLOCK_M, kv_cfg.BLOCK_N, g, True) if ranged
                      else (delta, _NO_RANGES))
    launch(_LAUNCHES, _attn_bwd_dkdv_kernel, (B * hkv, cdiv(sk, kv_cfg.BLOCK_N)),
        q, k, v, do, lse[0], lse[1], delta, dk, dv, dq_acc, m, *common, *dk.stride(), *m_strides,
        rng, *r_strides, seg, seg_stride, hkv, g, sq, sk, d, band.diag, band.diag_lo, scale, scale * LOG2E,
        RANGED=ranged,
        ATOMIC_DQ=not deterministic, EVEN_N=sk % kv_cfg.BLOCK_N == 0, BF16_RNE=rne, LSE_LO=lse_lo, USE_INT64=use_int64,
        BLOCK_M=kv_cfg.BLOCK_M, BLOCK_N=kv_cfg.BLOCK_N, BLOCK_D=d_pad,
        num_warps=kv_cfg.num_warps, num_stages=kv_cfg.num_stages, **edges, **flags,
    )
    if deterministic:
        rng, r_strides = (_mask_ranges(m, mask_bool, q_cfg.BLOCK_M, q_cfg.BLOCK_N, g, False) if ranged
                          else (delta, _NO_RANGES))
        launch(_LAUNCHES, _attn_bwd_dq_kernel, (B * hq, cdiv(sq, q_cfg.BLOCK_M)),
            q, k, v, do, lse[0], lse[1], delta, dq, m, *common, *dq.stride(), *m_strides,
            rng, *r_strides, seg, seg_stride, hq, g, sq, sk, d, band.diag, band.diag_lo, scale, scale * LOG2E,
            RANGED=ranged,
            BF16_RNE=rne, LSE_LO=lse_lo, USE_INT64=use_int64,
            BLOCK_M=q_cfg.BLOCK_M, BLOCK_N=q_cfg.BLOCK_N, BLOCK_D=d_pad,
            num_warps=q_cfg.num_warps, num_stages=q_cfg.num_stages, **edges, **flags,
        )
        return dq, dk, dv
    return dq.copy_(dq_acc), dk, dv


# The tunables of this family's heuristics: what roofkit.config.override may set.
TUNABLES = ("ATOMIC_DQ", "FWD_DESC", "MASK_RANGES_MIN_PAIRS", "INT64_FROM", "DECODE_MAX_ROWS", "DECODE_MIN_SK", "DECODE_PROGRAMS_PER_SM",
            "DECODE_MIN_BLOCKS")
