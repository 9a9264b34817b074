"""Exact attention (FlashAttention-style): forward, backward, causal (bottom-right), GQA, split-KV.

    out = softmax(scale * q @ k^T + mask) @ v,    lse = log(sum_j exp(scale * q . k_j)) per row

Layout (B, H, S, D), any strides. Query head h reads key/value head h // (Hq // Hkv) (GQA/MQA).
Causal masking is aligned to the bottom-right corner (FlashAttention 2.1): query i sees key j
when j <= i + Sk - Sq; a query row that sees no key gives an output of zeros and lse -inf.

Program mapping.
- Forward (``_attn_fwd_kernel``): one program per (batch x query head, BLOCK_M query rows); Q
  stays in registers while the program walks the visible KV blocks with the online-softmax
  recurrence in base 2 (log2(e) folded into the scale): running max, rescaled sum and an fp32
  output accumulator, normalized once at the end. The KV loop is split into an unmasked part
  (blocks every row sees) and a masked part (the causal diagonal and the ragged last block);
  fully masked blocks are never visited. The grid's second axis runs the query blocks from the
  last (heaviest under causal masking) to the first, so the longest programs start first.
- Decoding (``_attn_decode_kernel`` + ``_attn_decode_combine_kernel``): when a GQA group's query
  rows (G * Sq) fit one tile, one program owns one chunk of the KV sequence of one (batch, kv
  head) and all query rows of that kv head's group, so K and V are read once per kv head; it
  writes a partial (output, lse) in fp32, and a combining kernel in the same stream merges the
  chunks. The number of chunks is chosen from the shape and the SM count.
- Backward: a preprocess kernel (delta = rowsum(dO * O) - dlse, fp32); ``_attn_bwd_dkdv_kernel``
  with one program per (batch x kv head, BLOCK_N keys) that keeps its K, V tile on chip, loops
  over the query heads of its group and their visible query blocks, recomputes P from the saved
  lse and accumulates dK and dV in fp32 (GQA sums in a fixed order: deterministic). dQ comes from
  ``_attn_bwd_dq_kernel`` (one program per query block looping over KV blocks, no atomics:
  bitwise reproducible; the default, measured faster), or, with the module switch
  ``ATOMIC_DQ = True`` and ``deterministic=False``, accumulates in the dK/dV program with fp32
  atomics. No (Sq, Sk) matrix is ever stored.
Source: Dao et al., "FlashAttention" (2022) and "FlashAttention-2" (2023); Dao et al.,
"Flash-Decoding for long-context inference" (2023); Milakov & Gimelshein (2018, online softmax).
"""

from __future__ import annotations

import math
import numbers
import os
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.utils.checkpoint import checkpoint

from ..harness import baselines
from ..harness.inputs import random_tensor
from ..harness.spec import Cost, Inputs, OpSpec, case
from ._common import FLOAT_DTYPES, bf16_rne, check_same_device, check_tensor, interpreter_active, next_pow2, sm_count
from ._jit import _round_for_store

LOG2E = 1.4426950408889634
MAX_HEAD_DIM = 256

# ----------------------------------------------------------------------------- reference, cost


def _visible(sq: int, sk: int, causal: bool, device) -> torch.Tensor | None:
    """Boolean (Sq, Sk) mask of visible pairs (bottom-right causal), or None when all are visible."""
    if not causal:
        return None
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    return j <= i + (sk - sq)


def _expand_kv(t: torch.Tensor, hq: int) -> torch.Tensor:
    return t if t.shape[1] == hq else t.repeat_interleave(hq // t.shape[1], dim=1)


def _reference_chunk(q, k, v, causal: bool, scale: float):
    s = (q @ k.transpose(-1, -2)) * scale
    mask = _visible(q.shape[-2], k.shape[-2], causal, q.device)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    m = s.amax(dim=-1, keepdim=True) if s.shape[-1] else s.new_full(s.shape[:-1] + (1,), -math.inf)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    p = torch.exp(s - m)
    l = p.sum(dim=-1, keepdim=True)
    out = (p @ v) / torch.where(l > 0, l, torch.ones_like(l))
    lse = (torch.log(l) + m).squeeze(-1)
    return out, lse


# Score elements per reference chunk (float64): large benchmark shapes (b4 h16 s8448) would need
# tens of GB of scores at once; chunks over (batch x head) with checkpointing bound that.
_REF_CHUNK_ELEMS = 1 << 28


def _attention_reference(q, k, v, causal: bool, scale, need_lse: bool):
    B, hq, sq, d = q.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    k, v = _expand_kv(k, hq), _expand_kv(v, hq)
    qf, kf, vf = (t.reshape(B * hq, t.shape[2], d) for t in (q, k, v))
    per = max(1, _REF_CHUNK_ELEMS // max(1, sq * k.shape[2]))
    outs, lses = [], []
    for a in range(0, B * hq, per):
        args = (qf[a:a + per], kf[a:a + per], vf[a:a + per])
        if B * hq > per and torch.is_grad_enabled():
            o, lse = checkpoint(_reference_chunk, *args, causal, scale, use_reentrant=False)
        else:
            o, lse = _reference_chunk(*args, causal, scale)
        outs.append(o)
        lses.append(lse)
    out = torch.cat(outs).reshape(B, hq, sq, d) if outs else q.new_zeros(q.shape)
    lse = torch.cat(lses).reshape(B, hq, sq) if lses else q.new_zeros((B, hq, sq))
    return (out, lse) if need_lse else out


def scaled_dot_product_attention_reference(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                           scale=None, enable_gqa=False):
    """Attention in float64 from materialized scores: masked softmax (a row with no visible key
    gives 0), weighted sum; bottom-right causal alignment. Differentiable."""
    return _attention_reference(query, key, value, is_causal, scale, False)


def flash_attention_reference(q, k, v, *, causal=False, scale=None, return_lse=False, deterministic=False):
    """(out, lse) in float64 (lse natural log, -inf for rows with no visible key), or out."""
    return _attention_reference(q, k, v, causal, scale, return_lse)


def _visible_pairs(sq: int, sk: int, causal: bool) -> float:
    """(query, key) pairs computed: all of them; under causal masking half when Sq == Sk (the
    usual FLOP convention), else the visible pairs counted exactly (bottom-right)."""
    if not causal:
        return sq * sk
    if sq == sk:
        return sq * sk / 2
    # sum over i of clamp(i + sk - sq + 1, 0, sk)
    total = 0
    for i in range(sq):
        total += min(max(i + sk - sq + 1, 0), sk)
    return total


def attention_cost(case, dtype: torch.dtype) -> Cost:
    """Forward: 4 * B * Hq * pairs * D FLOPs (two matmuls); bytes: q, k, v read once, out written
    (+ fp32 lse for ``return_lse``). ``mode='fwd_bwd'``: 3.5x the forward FLOPs (backward counted
    2.5x); bytes add dO read and dq, dk, dv written."""
    B, hq, sq, sk, d = case["shape"]
    hkv = case.get("hkv", hq)
    size = torch.empty((), dtype=dtype).element_size()
    flops = 4.0 * B * hq * _visible_pairs(sq, sk, case.get("causal", False)) * d
    q_bytes = B * hq * sq * d * size
    kv_bytes = 2 * B * hkv * sk * d * size
    nbytes = 2 * q_bytes + kv_bytes  # q read, out written, k and v read
    if case.get("return_lse"):
        nbytes += B * hq * sq * 4
    if case.get("mode", "fwd") == "fwd_bwd":
        return Cost(flops=3.5 * flops, bytes=nbytes + 2 * q_bytes + kv_bytes)  # + dO, dq, dk, dv
    return Cost(flops=flops, bytes=nbytes)


# ----------------------------------------------------------------------------- torch's own


def _sdpa_torch(backend=None):
    """torch SDPA with bottom-right causal alignment (torch's is_causal is top-left when Sq != Sk,
    so an explicit mask is passed then), under ``backend`` (an SDPBackend) when given."""

    def run(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if attn_mask is not None or dropout_p:
            raise NotImplementedError("attn_mask / dropout are not part of roofkit's attention cases")
        sq, sk = query.shape[-2], key.shape[-2]
        kwargs = dict(scale=scale, enable_gqa=enable_gqa)
        if is_causal and sq != sk:
            kwargs["attn_mask"] = _visible(sq, sk, True, query.device)
        else:
            kwargs["is_causal"] = is_causal
        if backend is None:
            return F.scaled_dot_product_attention(query, key, value, **kwargs)
        from torch.nn.attention import sdpa_kernel

        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(query, key, value, **kwargs)

    return run


def _sdpa_math(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """torch's math-backend SDPA in the input dtype (the error budget of the FlashAttention rule),
    run over chunks of (batch x head) so that large cases fit in memory."""
    from torch.nn.attention import SDPBackend

    run = _sdpa_torch(SDPBackend.MATH)
    B, hq = query.shape[:2]
    hkv = key.shape[1]
    per = max(hq // hkv, _REF_CHUNK_ELEMS // max(1, query.shape[2] * key.shape[2]) // max(1, B))
    per = max(hq // hkv, per - per % (hq // hkv))
    if per >= hq:
        return run(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    g = hq // hkv
    outs = [run(query[:, a:a + per], key[:, a // g:(a + per) // g], value[:, a // g:(a + per) // g],
                attn_mask, dropout_p, is_causal, scale, enable_gqa) for a in range(0, hq, per)]
    return torch.cat(outs, dim=1)


def _flash_torch(q, k, v, *, causal=False, scale=None, return_lse=False, deterministic=False):
    """torch's math SDPA for the output and an fp32 logsumexp of the scores for lse."""
    out = _sdpa_math(q, k, v, is_causal=causal, scale=scale, enable_gqa=q.shape[1] != k.shape[1])
    if not return_lse:
        return out
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    kf = _expand_kv(k, q.shape[1]).float()
    lses = []
    per = max(1, _REF_CHUNK_ELEMS // max(1, q.shape[2] * k.shape[2] * q.shape[0]))
    for a in range(0, q.shape[1], per):
        s = (q[:, a:a + per].float() @ kf[:, a:a + per].transpose(-1, -2)) * scale
        mask = _visible(q.shape[2], k.shape[2], causal, q.device)
        if mask is not None:
            s = s.masked_fill(~mask, -math.inf)
        lses.append(torch.logsumexp(s, dim=-1))
    lse = torch.cat(lses, dim=1) if lses else q.new_zeros(q.shape[:3], dtype=torch.float32)
    return out, lse


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

# Decoding (split-KV) is taken when a GQA group's query rows fit one tile of at most
# DECODE_MAX_ROWS rows and the KV sequence has at least DECODE_MIN_SK keys.
DECODE_MAX_ROWS = 64
DECODE_MIN_SK = 512
# Split-KV: aim for this many programs per SM in all, each with at least DECODE_MIN_BLOCKS KV blocks.
DECODE_PROGRAMS_PER_SM = 4
DECODE_MIN_BLOCKS = 4


def _fwd_config(d_pad: int, causal: bool, dtype: torch.dtype, sq: int) -> Config:
    """Forward tiles, from a sweep on the H200 (bf16, 2026-11-30): d <= 64: 128 x 64 keys, 8 warps,
    3 stages (339 TFLOP/s causal s2048 vs 316 with 4 warps); d <= 128: causal 128 x 64, 8 warps,
    4 stages (470), non-causal 256 x 64, 8 warps, 3 stages (491; 128 x 128: 482); d = 256:
    64 x 64, 4 warps, 2 stages (the shared-memory ring and the accumulator grow with d); fp32
    inputs (IEEE dots) 64 x 32. Short query sequences shrink BLOCK_M. Interpreter: 16 x 16."""
    if interpreter_active():
        return Config(16, 16, 4, 1)
    if dtype == torch.float32:
        cfg = Config(64, 32, 4, 2)
    elif d_pad <= 64:
        cfg = Config(128, 64, 8, 3)
    elif d_pad <= 128:
        cfg = Config(128, 64, 8, 4) if causal else Config(256, 64, 8, 3)
    else:
        cfg = Config(64, 64, 4, 2)
    bm = min(cfg.BLOCK_M, max(16, next_pow2(sq)))
    return cfg._replace(BLOCK_M=bm, num_warps=min(cfg.num_warps, max(4, bm // 16)))


def _bwd_config(d_pad: int, dtype: torch.dtype) -> tuple[Config, Config]:
    """(dK/dV kernel: BLOCK_M query rows per step x BLOCK_N keys per program,
    dQ kernel: BLOCK_M query rows per program x BLOCK_N keys per step)."""
    if interpreter_active():
        return Config(16, 16, 4, 1), Config(16, 16, 4, 1)
    if dtype == torch.float32:
        return Config(32, 64, 4, 2), Config(64, 32, 4, 2)
    if d_pad <= 128:  # H200 sweep, b4 h16 s8448 d128 causal backward: 355 TFLOP/s (2 stages: 317)
        return Config(64, 128, 8, 3), Config(128, 64, 8, 3)
    return Config(32, 64, 4, 2), Config(64, 32, 4, 2)


def _decode_config(d_pad: int, dtype: torch.dtype, rows: int) -> Config:
    """Split-KV tile: BLOCK_M covers the group's query rows (>= 16 for tl.dot); 64 keys per step
    (32 for d = 256 or fp32), 4 warps, 4 stages so that several K/V loads are in flight."""
    bm = max(16, next_pow2(rows))
    if interpreter_active():
        return Config(bm, 16, 4, 1)
    bn = 32 if (d_pad > 128 or dtype == torch.float32) else 64
    return Config(bm, bn, 4, 3 if d_pad > 128 else 4)


def _use_decode(g: int, sq: int, sk: int) -> bool:
    return g * sq <= DECODE_MAX_ROWS and sk >= DECODE_MIN_SK


def _decode_splits(pairs: int, sk: int, block_n: int, device: torch.device) -> tuple[int, int]:
    """(number of KV chunks, chunk length in keys, a multiple of block_n): enough programs for
    DECODE_PROGRAMS_PER_SM per SM, each chunk at least DECODE_MIN_BLOCKS blocks long."""
    n_blocks = triton.cdiv(sk, block_n)
    want = triton.cdiv(DECODE_PROGRAMS_PER_SM * sm_count(device), max(1, pairs))
    splits = max(1, min(want, n_blocks // DECODE_MIN_BLOCKS))
    per = triton.cdiv(n_blocks, splits)
    return triton.cdiv(n_blocks, per), per * block_n


# ----------------------------------------------------------------------------- kernels


@triton.jit
def _mma(a, b, IEEE: tl.constexpr, UPCAST: tl.constexpr):
    """a @ b with fp32 accumulation. IEEE: exact fp32 products for fp32 inputs (not tf32).
    UPCAST: bf16 operands converted to fp32 first (the interpreter cannot multiply bf16)."""
    if UPCAST:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    if IEEE:
        return tl.dot(a, b, input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def _attn_fwd_inner(
    acc, m_i, l_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
    offs_m, offs_d, lo, hi, Sk, D, diag, qk_scale,
    MASK: tl.constexpr, IS_CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Online softmax over the KV blocks [lo, hi). MASK: apply the key bound and the causal
    diagonal (and guard rows that have seen nothing yet: max -inf)."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        if MASK:
            kv_mask = offs_n[:, None] < Sk
            if not EVEN_D:
                kv_mask = kv_mask & (offs_d[None, :] < D)
            k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd, mask=kv_mask, other=0.0)
            v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0)
        elif EVEN_D:
            k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd)
            v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd)
        else:
            k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                        mask=offs_d[None, :] < D, other=0.0)
            v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                        mask=offs_d[None, :] < D, other=0.0)
        s = _mma(q, tl.trans(k), IEEE, UPCAST) * qk_scale
        if MASK:
            ok = offs_n[None, :] < Sk
            if IS_CAUSAL:
                ok = ok & (offs_n[None, :] <= offs_m[:, None] + diag)
            s = tl.where(ok, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        if MASK:
            # A row that has seen no visible key keeps max -inf: subtract 0 instead (every p is 0).
            m_use = tl.where(m_new == -float("inf"), 0.0, m_new)
        else:
            m_use = m_new
        alpha = tl.math.exp2(m_i - m_use)
        p = tl.math.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + _mma(p.to(v.dtype), v, IEEE, UPCAST)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _attn_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, o32_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    Hq, G, Sq, Sk, D, qk_scale,
    IS_CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
    BF16_RNE: tl.constexpr, USE_INT64: tl.constexpr, STORE_O32: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Output rows [BLOCK_M, D] and their base-2 lse for one (batch, query head, query block);
    tiles Q [BLOCK_M, BLOCK_D] (registers), K and V [BLOCK_N, BLOCK_D] per step. STORE_O32: also
    the unrounded output (contiguous fp32) for the backward's delta."""
    pid_bh = tl.program_id(0)
    pid_m = tl.num_programs(1) - 1 - tl.program_id(1)  # heaviest (last) query blocks first
    b = (pid_bh // Hq).to(tl.int64)
    h = (pid_bh % Hq).to(tl.int64)
    hk = h // G
    q_base = q_ptr + b * stride_qb + h * stride_qh
    k_base = k_ptr + b * stride_kb + hk * stride_kh
    v_base = v_ptr + b * stride_vb + hk * stride_vh
    o_base = o_ptr + b * stride_ob + h * stride_oh

    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    if USE_INT64:
        offs_m = offs_m.to(tl.int64)
    io_mask = (offs_m[:, None] < Sq) & (offs_d[None, :] < D)
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd, mask=io_mask, other=0.0)

    diag = Sk - Sq
    if IS_CAUSAL:
        hi = tl.minimum(Sk, tl.maximum(m0 + BLOCK_M + diag, 0))
        n_full = tl.minimum(tl.maximum(m0 + diag + 1, 0) // BLOCK_N, Sk // BLOCK_N) * BLOCK_N
    else:
        hi = Sk
        n_full = (Sk // BLOCK_N) * BLOCK_N
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    acc, m_i, l_i = _attn_fwd_inner(acc, m_i, l_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                                    offs_m, offs_d, 0, n_full, Sk, D, diag, qk_scale,
                                    False, IS_CAUSAL, EVEN_D, IEEE, UPCAST, BLOCK_N)
    acc, m_i, l_i = _attn_fwd_inner(acc, m_i, l_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                                    offs_m, offs_d, n_full, hi, Sk, D, diag, qk_scale,
                                    True, IS_CAUSAL, EVEN_D, IEEE, UPCAST, BLOCK_N)
    dead = l_i == 0.0
    l_safe = tl.where(dead, 1.0, l_i)
    out = acc / l_safe[:, None]
    lse2 = tl.where(dead, -float("inf"), m_i + tl.math.log2(l_safe))
    tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
             _round_for_store(out, o_ptr, BF16_RNE), mask=io_mask)
    rows = pid_bh.to(tl.int64) * Sq + offs_m
    tl.store(lse_ptr + rows, lse2, mask=offs_m < Sq)
    if STORE_O32:
        tl.store(o32_ptr + rows[:, None] * D + offs_d[None, :], out, mask=io_mask)


@triton.jit
def _attn_decode_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, o32_ptr, po_ptr, plse_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    Hkv, G, Sq, Sk, D, qk_scale, CHUNK, SPLITS,
    IS_CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
    BF16_RNE: tl.constexpr, FINAL: tl.constexpr, STORE_O32: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """One KV chunk [CHUNK keys] of one (batch, kv head) against all G * Sq query rows of the
    group (row r: head h = hk * G + r // Sq, query r % Sq); tiles Q [BLOCK_M, BLOCK_D], K and V
    [BLOCK_N, BLOCK_D]. FINAL (one chunk): writes out and base-2 lse (and the fp32 output when
    STORE_O32); else fp32 partials (normalized output, base-2 lse) for the combining kernel."""
    pid_bh = tl.program_id(0)
    split = tl.program_id(1)
    b = (pid_bh // Hkv).to(tl.int64)
    hk = (pid_bh % Hkv).to(tl.int64)
    rows = tl.arange(0, BLOCK_M)
    row_ok = rows < G * Sq
    g = rows // Sq
    qi = rows % Sq
    h = hk * G + g
    offs_d = tl.arange(0, BLOCK_D)
    io_mask = row_ok[:, None] & (offs_d[None, :] < D)
    q = tl.load(q_ptr + b * stride_qb + h[:, None] * stride_qh + qi[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=io_mask, other=0.0)
    k_base = k_ptr + b * stride_kb + hk * stride_kh
    v_base = v_ptr + b * stride_vb + hk * stride_vh

    diag = Sk - Sq
    lo = split * CHUNK
    hi = tl.minimum(Sk, lo + CHUNK)
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        key_ok = offs_n < hi
        kv_mask = key_ok[:, None]
        if not EVEN_D:
            kv_mask = kv_mask & (offs_d[None, :] < D)
        k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd, mask=kv_mask, other=0.0)
        v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0)
        s = _mma(q, tl.trans(k), IEEE, UPCAST) * qk_scale
        ok = key_ok[None, :]
        if IS_CAUSAL:
            ok = ok & (offs_n[None, :] <= qi[:, None] + diag)
        s = tl.where(ok, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = tl.where(m_new == -float("inf"), 0.0, m_new)
        alpha = tl.math.exp2(m_i - m_use)
        p = tl.math.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + _mma(p.to(v.dtype), v, IEEE, UPCAST)
        m_i = m_new
    dead = l_i == 0.0
    l_safe = tl.where(dead, 1.0, l_i)
    out = acc / l_safe[:, None]
    lse2 = tl.where(dead, -float("inf"), m_i + tl.math.log2(l_safe))
    row = (b * Hkv * G + h) * Sq + qi  # (batch, query head, query) row index
    if FINAL:
        tl.store(o_ptr + b * stride_ob + h[:, None] * stride_oh + qi[:, None] * stride_om + offs_d[None, :] * stride_od,
                 _round_for_store(out, o_ptr, BF16_RNE), mask=io_mask)
        tl.store(lse_ptr + row, lse2, mask=row_ok)
        if STORE_O32:
            tl.store(o32_ptr + row[:, None] * D + offs_d[None, :], out, mask=io_mask)
    else:
        part = row * SPLITS + split
        tl.store(po_ptr + part[:, None] * D + offs_d[None, :], out, mask=io_mask)
        tl.store(plse_ptr + part, lse2, mask=row_ok)


@triton.jit
def _attn_decode_combine_kernel(
    po_ptr, plse_ptr, o_ptr, lse_ptr, o32_ptr,
    stride_ob, stride_oh, stride_om, stride_od,
    Hq, Sq, D, SPLITS,
    BF16_RNE: tl.constexpr, STORE_O32: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Merge the SPLITS partial (output, lse) of one query row: weights 2^(lse_s - max); a row
    no chunk saw keeps output 0 and lse -inf. Tile [BLOCK_S, BLOCK_D]."""
    row = tl.program_id(0).to(tl.int64)
    s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    lse_s = tl.load(plse_ptr + row * SPLITS + s, mask=s < SPLITS, other=-float("inf"))
    m = tl.max(lse_s, axis=0)
    m_use = tl.where(m == -float("inf"), 0.0, m)
    w = tl.math.exp2(lse_s - m_use)
    part = tl.load(po_ptr + (row * SPLITS + s)[:, None] * D + offs_d[None, :],
                   mask=(s[:, None] < SPLITS) & (offs_d[None, :] < D), other=0.0)
    total = tl.sum(w, axis=0)
    dead = total == 0.0
    t_safe = tl.where(dead, 1.0, total)
    out = tl.sum(part * w[:, None], axis=0) / t_safe
    lse2 = tl.where(dead, -float("inf"), m_use + tl.math.log2(t_safe))
    b = row // (Hq * Sq)
    h = (row // Sq) % Hq
    qi = row % Sq
    tl.store(o_ptr + b * stride_ob + h * stride_oh + qi * stride_om + offs_d * stride_od,
             _round_for_store(out, o_ptr, BF16_RNE), mask=offs_d < D)
    tl.store(lse_ptr + row, lse2)
    if STORE_O32:
        tl.store(o32_ptr + row * D + offs_d, out, mask=offs_d < D)


@triton.jit
def _attn_bwd_preprocess_kernel(
    o_ptr, do_ptr, dlse_ptr, delta_ptr,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_dob, stride_doh, stride_dom, stride_dod,
    Hq, Sq, D,
    HAS_DLSE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """delta = rowsum(dO * O) - dlse2 * log2(e) (fp32) for BLOCK_M rows of one (batch, head);
    tile [BLOCK_M, BLOCK_D]. (dlse2: the gradient reaching the base-2 lse, when lse is used
    downstream: d lse2 / d s = P / ln 2.)"""
    pid_bh = tl.program_id(0)
    b = (pid_bh // Hq).to(tl.int64)
    h = (pid_bh % Hq).to(tl.int64)
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_m[:, None] < Sq) & (offs_d[None, :] < D)
    o = tl.load(o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
                mask=mask, other=0.0).to(tl.float32)
    do = tl.load(do_ptr + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dom + offs_d[None, :] * stride_dod,
                 mask=mask, other=0.0).to(tl.float32)
    delta = tl.sum(o * do, axis=1)
    rows = pid_bh.to(tl.int64) * Sq + offs_m
    if HAS_DLSE:
        delta -= tl.load(dlse_ptr + rows, mask=offs_m < Sq, other=0.0) * 1.4426950408889634
    tl.store(delta_ptr + rows, delta, mask=offs_m < Sq)


@triton.jit
def _attn_bwd_dkdv_inner(
    dk, dv, k, v, offs_n, q_base, do_base, dq_base, lse_base, delta_base,
    stride_qm, stride_qd, stride_dom, stride_dod,
    lo, hi, Sq, Sk, D, diag, sm_scale, qk_scale,
    MASK: tl.constexpr, MASK_KEYS: tl.constexpr, ATOMIC_DQ: tl.constexpr, EVEN_D: tl.constexpr,
    IEEE: tl.constexpr, UPCAST: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """dK, dV contributions of the query blocks [lo, hi) of one head (transposed tiles: keys x
    queries). MASK: causal diagonal; MASK_KEYS: the ragged last key block. ATOMIC_DQ: also adds
    this block's dQ share to the fp32 buffer with atomics."""
    offs_d = tl.arange(0, BLOCK_D)
    for m0 in range(lo, hi, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        row_ok = offs_m < Sq
        if EVEN_D:
            io_mask = row_ok[:, None]
        else:
            io_mask = row_ok[:, None] & (offs_d[None, :] < D)
        q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd, mask=io_mask, other=0.0)
        do = tl.load(do_base + offs_m[:, None] * stride_dom + offs_d[None, :] * stride_dod, mask=io_mask, other=0.0)
        # Rows past Sq and rows that saw no key (lse -inf) get lse +inf: their P is exactly 0.
        lse2 = tl.load(lse_base + offs_m, mask=row_ok, other=float("inf"))
        lse2 = tl.where(lse2 == -float("inf"), float("inf"), lse2)
        delta = tl.load(delta_base + offs_m, mask=row_ok, other=0.0)
        s_t = _mma(k, tl.trans(q), IEEE, UPCAST) * qk_scale
        p_t = tl.math.exp2(s_t - lse2[None, :])
        if MASK:
            p_t = tl.where(offs_n[:, None] <= offs_m[None, :] + diag, p_t, 0.0)
        if MASK_KEYS:
            p_t = tl.where(offs_n[:, None] < Sk, p_t, 0.0)
        dv += _mma(p_t.to(do.dtype), do, IEEE, UPCAST)
        dp_t = _mma(v, tl.trans(do), IEEE, UPCAST)
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk += _mma(ds_t, q, IEEE, UPCAST)
        if ATOMIC_DQ:
            dq = _mma(tl.trans(ds_t), k, IEEE, UPCAST) * sm_scale
            tl.atomic_add(dq_base + offs_m[:, None] * D + offs_d[None, :], dq,
                          mask=row_ok[:, None] & (offs_d[None, :] < D), sem="relaxed")
    return dk, dv


@triton.jit
def _attn_bwd_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_dom, stride_dod,
    stride_dkb, stride_dkh, stride_dkn, stride_dkd,
    Hkv, G, Sq, Sk, D, sm_scale, qk_scale,
    IS_CAUSAL: tl.constexpr, ATOMIC_DQ: tl.constexpr, EVEN_D: tl.constexpr, EVEN_N: tl.constexpr,
    IEEE: tl.constexpr, UPCAST: tl.constexpr, BF16_RNE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """dK, dV [BLOCK_N, D] of one (batch, kv head, key block), summed over the G query heads of
    the group in order; K, V tiles [BLOCK_N, BLOCK_D] stay on chip, Q/dO [BLOCK_M, BLOCK_D] per
    step. dK and dV share strides (both allocated here)."""
    pid_bh = tl.program_id(0)
    n0 = tl.program_id(1) * BLOCK_N  # first key blocks see the most queries under causal masking
    b = (pid_bh // Hkv).to(tl.int64)
    hk = (pid_bh % Hkv).to(tl.int64)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    kv_mask = (offs_n[:, None] < Sk) & (offs_d[None, :] < D)
    k = tl.load(k_ptr + b * stride_kb + hk * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + b * stride_vb + hk * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    diag = Sk - Sq
    if IS_CAUSAL:
        # Queries before start_m see none of these keys; from m_full on they see all of them.
        start_m = (tl.maximum(n0 - diag, 0) // BLOCK_M) * BLOCK_M
        m_full = start_m + tl.cdiv(tl.maximum(n0 + BLOCK_N - 1 - diag - start_m, 0), BLOCK_M) * BLOCK_M
        m_full = tl.minimum(m_full, tl.cdiv(Sq, BLOCK_M) * BLOCK_M)
    else:
        start_m = 0
        m_full = 0
    for g in range(0, G):
        h = hk * G + g
        bh = b * (Hkv * G) + h
        q_base = q_ptr + b * stride_qb + h * stride_qh
        do_base = do_ptr + b * stride_dob + h * stride_doh
        dq_base = dq_ptr + bh * Sq * D
        lse_base = lse_ptr + bh * Sq
        delta_base = delta_ptr + bh * Sq
        if IS_CAUSAL:
            dk, dv = _attn_bwd_dkdv_inner(dk, dv, k, v, offs_n, q_base, do_base, dq_base, lse_base, delta_base,
                                          stride_qm, stride_qd, stride_dom, stride_dod,
                                          start_m, m_full, Sq, Sk, D, diag, sm_scale, qk_scale,
                                          True, not EVEN_N, ATOMIC_DQ, EVEN_D, IEEE, UPCAST, BLOCK_M, BLOCK_D)
        dk, dv = _attn_bwd_dkdv_inner(dk, dv, k, v, offs_n, q_base, do_base, dq_base, lse_base, delta_base,
                                      stride_qm, stride_qd, stride_dom, stride_dod,
                                      m_full, Sq, Sq, Sk, D, diag, sm_scale, qk_scale,
                                      False, not EVEN_N, ATOMIC_DQ, EVEN_D, IEEE, UPCAST, BLOCK_M, BLOCK_D)
    dk = dk * sm_scale
    out = b * stride_dkb + hk * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :] * stride_dkd
    tl.store(dk_ptr + out, _round_for_store(dk, dk_ptr, BF16_RNE), mask=kv_mask)
    tl.store(dv_ptr + out, _round_for_store(dv, dv_ptr, BF16_RNE), mask=kv_mask)


@triton.jit
def _attn_bwd_dq_inner(
    dq, q, do, lse2, delta, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
    offs_m, offs_d, lo, hi, Sk, D, diag, qk_scale,
    MASK: tl.constexpr, IS_CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """dQ (unscaled) over the KV blocks [lo, hi); MASK: key bound and causal diagonal."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = offs_n[:, None] < Sk
        if not EVEN_D:
            kv_mask = kv_mask & (offs_d[None, :] < D)
        k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd, mask=kv_mask, other=0.0)
        v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0)
        s = _mma(q, tl.trans(k), IEEE, UPCAST) * qk_scale
        p = tl.math.exp2(s - lse2[:, None])
        if MASK:
            ok = offs_n[None, :] < Sk
            if IS_CAUSAL:
                ok = ok & (offs_n[None, :] <= offs_m[:, None] + diag)
            p = tl.where(ok, p, 0.0)
        dp = _mma(do, tl.trans(v), IEEE, UPCAST)
        ds = (p * (dp - delta[:, None])).to(k.dtype)
        dq += _mma(ds, k, IEEE, UPCAST)
    return dq


@triton.jit
def _attn_bwd_dq_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_dom, stride_dod,
    stride_dqb, stride_dqh, stride_dqm, stride_dqd,
    Hq, G, Sq, Sk, D, sm_scale, qk_scale,
    IS_CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
    BF16_RNE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """dQ [BLOCK_M, D] of one (batch, query head, query block), looping over its visible KV
    blocks (no atomics: the deterministic path); Q, dO [BLOCK_M, BLOCK_D] in registers."""
    pid_bh = tl.program_id(0)
    pid_m = tl.num_programs(1) - 1 - tl.program_id(1)
    b = (pid_bh // Hq).to(tl.int64)
    h = (pid_bh % Hq).to(tl.int64)
    hk = h // G
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < Sq
    io_mask = row_ok[:, None] & (offs_d[None, :] < D)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=io_mask, other=0.0)
    do = tl.load(do_ptr + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dom + offs_d[None, :] * stride_dod,
                 mask=io_mask, other=0.0)
    rows = pid_bh.to(tl.int64) * Sq + offs_m
    lse2 = tl.load(lse_ptr + rows, mask=row_ok, other=float("inf"))
    lse2 = tl.where(lse2 == -float("inf"), float("inf"), lse2)
    delta = tl.load(delta_ptr + rows, mask=row_ok, other=0.0)
    k_base = k_ptr + b * stride_kb + hk * stride_kh
    v_base = v_ptr + b * stride_vb + hk * stride_vh
    diag = Sk - Sq
    if IS_CAUSAL:
        hi = tl.minimum(Sk, tl.maximum(m0 + BLOCK_M + diag, 0))
        n_full = tl.minimum(tl.maximum(m0 + diag + 1, 0) // BLOCK_N, Sk // BLOCK_N) * BLOCK_N
    else:
        hi = Sk
        n_full = (Sk // BLOCK_N) * BLOCK_N
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    dq = _attn_bwd_dq_inner(dq, q, do, lse2, delta, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                            offs_m, offs_d, 0, n_full, Sk, D, diag, qk_scale,
                            False, IS_CAUSAL, EVEN_D, IEEE, UPCAST, BLOCK_N)
    dq = _attn_bwd_dq_inner(dq, q, do, lse2, delta, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                            offs_m, offs_d, n_full, hi, Sk, D, diag, qk_scale,
                            True, IS_CAUSAL, EVEN_D, IEEE, UPCAST, BLOCK_N)
    dq = dq * sm_scale
    tl.store(dq_ptr + b * stride_dqb + h * stride_dqh + offs_m[:, None] * stride_dqm + offs_d[None, :] * stride_dqd,
             _round_for_store(dq, dq_ptr, BF16_RNE), mask=io_mask)


# ----------------------------------------------------------------------------- host side


def _flags(q: torch.Tensor, d: int, d_pad: int) -> dict:
    return dict(
        EVEN_D=d == d_pad,
        IEEE=q.dtype == torch.float32 or (q.dtype == torch.bfloat16 and interpreter_active()),
        UPCAST=q.dtype == torch.bfloat16 and interpreter_active(),
    )


def _head_dim_pad(d: int) -> int:
    return max(16, next_pow2(d))


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float, keep_fp32: bool):
    """(out [B, Hq, Sq, D] in q's dtype, base-2 lse [B, Hq, Sq] fp32, fp32 out or an empty
    tensor): the fp32 copy of the output (``keep_fp32``) lets the backward form delta =
    rowsum(dO * O) from the unrounded O. Empty inputs launch nothing."""
    B, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    out = torch.empty((B, hq, sq, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, hq, sq), dtype=torch.float32, device=q.device)
    o32 = torch.empty((B, hq, sq, d) if keep_fp32 else (0,), dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse, o32
    if sk == 0:  # no key at all: every row sees nothing
        return out.zero_(), lse.fill_(-math.inf), o32.zero_()
    g = hq // hkv
    d_pad = _head_dim_pad(d)
    qk_scale = scale * LOG2E
    flags = _flags(q, d, d_pad)
    strides = (*q.stride(), *k.stride(), *v.stride(), *out.stride())
    if _use_decode(g, sq, sk):
        cfg = _decode_config(d_pad, q.dtype, g * sq)
        splits, chunk = _decode_splits(B * hkv, sk, cfg.BLOCK_N, q.device)
        if splits > 1:
            po = torch.empty((B * hq * sq, splits, d), dtype=torch.float32, device=q.device)
            plse = torch.empty((B * hq * sq, splits), dtype=torch.float32, device=q.device)
        else:
            po = plse = lse  # unused
        _attn_decode_kernel[(B * hkv, splits)](
            q, k, v, out, lse, o32, po, plse, *strides, hkv, g, sq, sk, d, qk_scale, chunk, splits,
            IS_CAUSAL=causal, BF16_RNE=bf16_rne(q.dtype), FINAL=splits == 1, STORE_O32=keep_fp32,
            BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, BLOCK_D=d_pad,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages, **flags,
        )
        if splits > 1:
            _attn_decode_combine_kernel[(B * hq * sq,)](
                po, plse, out, lse, o32, *out.stride(), hq, sq, d, splits,
                BF16_RNE=bf16_rne(q.dtype), STORE_O32=keep_fp32, BLOCK_S=next_pow2(splits), BLOCK_D=d_pad,
                num_warps=4,
            )
        return out, lse, o32
    cfg = _fwd_config(d_pad, causal, q.dtype, sq)
    use_int64 = max(sq * abs(q.stride(2)), sk * abs(k.stride(2)), sk * abs(v.stride(2)), sq * d) >= 2**31
    grid = (B * hq, triton.cdiv(sq, cfg.BLOCK_M))
    _attn_fwd_kernel[grid](
        q, k, v, out, lse, o32, *strides, hq, g, sq, sk, d, qk_scale,
        IS_CAUSAL=causal, BF16_RNE=bf16_rne(q.dtype), USE_INT64=use_int64, STORE_O32=keep_fp32,
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, BLOCK_D=d_pad,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **flags,
    )
    return out, lse, o32


def _backward(do, q, k, v, out, lse, dlse, causal: bool, scale: float, deterministic: bool):
    """(dq, dk, dv) in the input dtype, shaped like q, k, v. ``out``: the forward output (fp32
    when kept), ``lse``: base-2, ``dlse``: gradient of the base-2 lse or None."""
    B, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    if q.numel() == 0 or k.numel() == 0:
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    g = hq // hkv
    d_pad = _head_dim_pad(d)
    flags = _flags(q, d, d_pad)
    rne = bf16_rne(q.dtype)
    delta = torch.empty((B, hq, sq), dtype=torch.float32, device=q.device)
    pre_m = 64 if not interpreter_active() else 16
    has_dlse = dlse is not None
    _attn_bwd_preprocess_kernel[(B * hq, triton.cdiv(sq, pre_m))](
        out, do, dlse.contiguous() if has_dlse else lse, delta, *out.stride(), *do.stride(), hq, sq, d,
        HAS_DLSE=has_dlse, BLOCK_M=pre_m, BLOCK_D=d_pad, num_warps=4,
    )
    kv_cfg, q_cfg = _bwd_config(d_pad, q.dtype)
    dk = torch.empty((B, hkv, sk, d), dtype=q.dtype, device=q.device)
    dv = torch.empty((B, hkv, sk, d), dtype=q.dtype, device=q.device)
    deterministic = deterministic or not ATOMIC_DQ
    if deterministic:
        dq = torch.empty((B, hq, sq, d), dtype=q.dtype, device=q.device)
        dq_acc = dq  # not touched by the dK/dV kernel
    else:
        dq_acc = torch.zeros((B, hq, sq, d), dtype=torch.float32, device=q.device)
    common = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    _attn_bwd_dkdv_kernel[(B * hkv, triton.cdiv(sk, kv_cfg.BLOCK_N))](
        q, k, v, do, lse, delta, dk, dv, dq_acc, *common, *dk.stride(),
        hkv, g, sq, sk, d, scale, scale * LOG2E,
        IS_CAUSAL=causal, ATOMIC_DQ=not deterministic, EVEN_N=sk % kv_cfg.BLOCK_N == 0, BF16_RNE=rne,
        BLOCK_M=kv_cfg.BLOCK_M, BLOCK_N=kv_cfg.BLOCK_N, BLOCK_D=d_pad,
        num_warps=kv_cfg.num_warps, num_stages=kv_cfg.num_stages, **flags,
    )
    if deterministic:
        _attn_bwd_dq_kernel[(B * hq, triton.cdiv(sq, q_cfg.BLOCK_M))](
            q, k, v, do, lse, delta, dq, *common, *dq.stride(),
            hq, g, sq, sk, d, scale, scale * LOG2E,
            IS_CAUSAL=causal, BF16_RNE=rne,
            BLOCK_M=q_cfg.BLOCK_M, BLOCK_N=q_cfg.BLOCK_N, BLOCK_D=d_pad,
            num_warps=q_cfg.num_warps, num_stages=q_cfg.num_stages, **flags,
        )
        return dq, dk, dv
    return dq_acc.to(q.dtype), dk, dv


# ----------------------------------------------------------------------------- custom ops, autograd


@torch.library.custom_op("roofkit::attention_fwd", mutates_args=())
def _attention_fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                      deterministic: bool, keep_fp32: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, base-2 lse, fp32 out or empty); ``deterministic`` only selects the backward."""
    return _forward(q, k, v, causal, scale, keep_fp32)


@_attention_fwd_op.register_fake
def _(q, k, v, causal, scale, deterministic, keep_fp32):
    B, hq, sq, d = q.shape
    return (q.new_empty((B, hq, sq, d)), q.new_empty((B, hq, sq), dtype=torch.float32),
            q.new_empty((B, hq, sq, d) if keep_fp32 else (0,), dtype=torch.float32))


@torch.library.custom_op("roofkit::attention_bwd", mutates_args=())
def _attention_bwd_op(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                      lse: torch.Tensor, dlse: torch.Tensor | None, causal: bool, scale: float,
                      deterministic: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _backward(do, q, k, v, out, lse, dlse, causal, scale, deterministic)


@_attention_bwd_op.register_fake
def _(do, q, k, v, out, lse, dlse, causal, scale, deterministic):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale, deterministic, keep_fp32 = inputs
    out, lse, o32 = output
    ctx.causal, ctx.scale, ctx.deterministic = causal, scale, deterministic
    ctx.save_for_backward(q, k, v, o32 if keep_fp32 else out, lse)


def _attention_backward(ctx, dout, dlse, do32):
    q, k, v, out, lse = ctx.saved_tensors
    if dout is None:
        dout = torch.zeros(out.shape, dtype=q.dtype, device=q.device)
    dq, dk, dv = _attention_bwd_op(dout, q, k, v, out, lse, dlse, ctx.causal, ctx.scale, ctx.deterministic)
    return dq, dk, dv, None, None, None, None


torch.library.register_autograd("roofkit::attention_fwd", _attention_backward, setup_context=_setup_context)


# ----------------------------------------------------------------------------- public functions


def _check(op: str, q, k, v, *, gqa: bool, names=("query", "key", "value")) -> None:
    """Validate (B, H, S, D) q, k, v; TypeError / ValueError naming ``op`` and the argument."""
    for name, t in zip(names, (q, k, v)):
        check_tensor(op, name, t)
        if t.dim() != 4:
            raise ValueError(f"roofkit.{op}: {name} must be 4-D (batch, heads, sequence, head_dim); got shape "
                             f"{tuple(t.shape)}")
    qn, kn, vn = names
    for name, t in ((kn, k), (vn, v)):
        if t.dtype != q.dtype:
            raise TypeError(f"roofkit.{op}: {name} has dtype {t.dtype} but {qn} has {q.dtype}; they must match")
        check_same_device(op, name, t, q)
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        raise ValueError(f"roofkit.{op}: batch sizes differ: {qn} {q.shape[0]}, {kn} {k.shape[0]}, {vn} {v.shape[0]}")
    if k.shape[1] != v.shape[1]:
        raise ValueError(f"roofkit.{op}: {kn} has {k.shape[1]} heads but {vn} has {v.shape[1]}")
    if k.shape[2] != v.shape[2]:
        raise ValueError(f"roofkit.{op}: {kn} has sequence length {k.shape[2]} but {vn} has {v.shape[2]}")
    d = q.shape[3]
    if k.shape[3] != d or v.shape[3] != d:
        raise ValueError(f"roofkit.{op}: head dims differ: {qn} {d}, {kn} {k.shape[3]}, {vn} {v.shape[3]} "
                         "(they must be equal)")
    if not 1 <= d <= MAX_HEAD_DIM:
        raise ValueError(f"roofkit.{op}: head_dim (last dim of {qn}) must be in [1, {MAX_HEAD_DIM}] "
                         f"(tuned for 32, 64, 96, 128, 256); got {d}")
    hq, hkv = q.shape[1], k.shape[1]
    if hq != hkv:
        if hkv == 0 or hq % hkv != 0:
            raise ValueError(f"roofkit.{op}: {qn} has {hq} heads, which {kn}/{vn}'s {hkv} heads do not divide")
        if not gqa and hkv != 1:
            raise ValueError(f"roofkit.{op}: {qn} has {hq} heads but {kn}/{vn} have {hkv}; pass enable_gqa=True "
                             "for grouped-query attention")


_LN2 = math.log(2.0)


def _keep_fp32(q, k, v) -> bool:
    """Keep an fp32 copy of a 16-bit output for the backward (only when a gradient can flow)."""
    return q.dtype != torch.float32 and torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or
                                                                     v.requires_grad)


def _scale_of(op: str, scale, d: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"roofkit.{op}: scale must be a real number or None; got {type(scale).__name__}")
    return float(scale)


def _flag(op: str, name: str, v) -> bool:
    """A bool argument: bool or numpy bool only (a string such as "False" is refused, not truthy)."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    raise TypeError(f"roofkit.{op}: {name} must be a bool; got {type(v).__name__}")


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask=None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> torch.Tensor:
    """out = softmax(scale * query @ key^T [causal]) @ value, as ``torch.nn.functional.scaled_dot_product_attention``.

    Args:
        query: (B, Hq, Sq, D) float16, bfloat16 or float32, any strides, on CUDA (or CPU with
            TRITON_INTERPRET=1).
        key, value: (B, Hkv, Sk, D), same dtype and device. Hkv divides Hq (GQA) when
            ``enable_gqa``; Hkv == 1 (MQA) broadcasts as in torch.
        attn_mask, dropout_p: not supported yet (must be None / 0).
        is_causal: query i sees key j iff j <= i + Sk - Sq (bottom-right alignment, as
            FlashAttention 2.1; torch aligns top-left when Sq != Sk).
        scale: softmax scale, default 1 / sqrt(D).
        enable_gqa: allow Hq != Hkv.
    Returns:
        (B, Hq, Sq, D) contiguous tensor in query's dtype. A query row that sees no key (causal
        with Sq > Sk, or Sk == 0) is 0 (torch's math backend also gives 0; never NaN).
    Raises:
        NotImplementedError: attn_mask given or dropout_p != 0.
        TypeError: non-tensor, dtype other than float16/bfloat16/float32, mismatched dtypes, bad scale.
        ValueError: not 4-D, mismatched batch / head dim / key-value lengths or heads, a head count
            GQA cannot map (or Hq != Hkv without enable_gqa), head dim outside [1, 256], wrong device.
    Numerics:
        fp32 scores and softmax statistics (online softmax in base 2, log2(e) folded into the
        scale), P rounded to the input dtype before P @ V, fp32 output accumulator normalized once;
        fp32 inputs use IEEE fp32 dots (not tf32). Forward deterministic. Backward: dK, dV
        deterministic; dQ from its own kernel without atomics (bitwise reproducible) unless the
        module switch ATOMIC_DQ is set, in which case dQ accumulates with fp32 atomics unless
        ``torch.use_deterministic_algorithms(True)`` is on (then a separate dQ kernel, bitwise
        reproducible). First-order only.
    Cost:
        4 * B * Hq * Sq * Sk * D FLOPs (halved for causal with Sq == Sk; visible pairs otherwise);
        reads q, k, v once and writes out (+ fp32 lse, B * Hq * Sq * 4 bytes). Backward 2.5x the
        forward FLOPs. Decoding (G * Sq <= 64, Sk >= 512) reads K and V once per kv head.
    Source:
        FlashAttention / FlashAttention-2 (Dao et al. 2022, 2023), Flash-Decoding (2023).
    """
    op = "scaled_dot_product_attention"
    if attn_mask is not None:
        raise NotImplementedError(f"roofkit.{op}: attn_mask is not supported yet (use is_causal, or torch's SDPA)")
    if dropout_p != 0.0:
        raise NotImplementedError(f"roofkit.{op}: dropout_p must be 0.0 (dropout is not supported yet); got {dropout_p}")
    _check(op, query, key, value, gqa=_flag(op, "enable_gqa", enable_gqa))
    s = _scale_of(op, scale, query.shape[-1])
    out, _, _ = _attention_fwd_op(query, key, value, _flag(op, "is_causal", is_causal), s,
                                  torch.are_deterministic_algorithms_enabled(),
                                  _keep_fp32(query, key, value))
    return out


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    scale: float | None = None, return_lse: bool = False, deterministic: bool = False):
    """FlashAttention: out = softmax(scale * q @ k^T [causal]) @ v, optionally with its log-sum-exp.

    Args:
        q: (B, Hq, Sq, D); k, v: (B, Hkv, Sk, D) with Hkv dividing Hq (GQA / MQA); float16,
            bfloat16 or float32, any strides.
        causal: bottom-right aligned causal mask (query i sees key j iff j <= i + Sk - Sq).
        scale: default 1 / sqrt(D).
        return_lse: also return lse = log(sum_j exp(scale * q_i . k_j)) over visible keys.
        deterministic: backward without atomics (separate dQ kernel): bitwise reproducible.
    Returns:
        out (B, Hq, Sq, D) in q's dtype, or (out, lse) with lse (B, Hq, Sq) float32, natural log,
        -inf for rows that see no key (whose output is 0). Gradients flow through both.
    Raises:
        TypeError / ValueError as :func:`scaled_dot_product_attention` (naming roofkit.flash_attention).
    Numerics, Cost, Source: as :func:`scaled_dot_product_attention`.
    """
    op = "flash_attention"
    _check(op, q, k, v, gqa=True, names=("q", "k", "v"))
    s = _scale_of(op, scale, q.shape[-1])
    out, lse2, _ = _attention_fwd_op(q, k, v, _flag(op, "causal", causal), s,
                                     _flag(op, "deterministic", deterministic) or torch.are_deterministic_algorithms_enabled(),
                                     _keep_fp32(q, k, v))
    return (out, lse2 * _LN2) if _flag(op, "return_lse", return_lse) else out


# ----------------------------------------------------------------------------- spec


def _qkv(case, dtype, generator, device):
    B, hq, sq, sk, d = case["shape"]
    hkv = case.get("hkv", hq)
    dist, mag = case.get("dist", "normal"), case.get("magnitude", 1e4)

    def make(h, s):
        if case.get("layout") == "bshd":  # (B, S, H, D) memory, viewed as (B, H, S, D)
            return random_tensor((B, s, h, d), dtype, generator, device, dist, magnitude=mag).transpose(1, 2)
        return random_tensor((B, h, s, d), dtype, generator, device, dist, magnitude=mag,
                             layout=case.get("layout", "contiguous"))

    return make(hq, sq), make(hkv, sk), make(hkv, sk)


def _sdpa_inputs(case, dtype, generator, device) -> Inputs:
    q, k, v = _qkv(case, dtype, generator, device)
    kwargs = {"is_causal": case.get("causal", False), "enable_gqa": q.shape[1] != k.shape[1]}
    if case.get("scale") is not None:
        kwargs["scale"] = case["scale"]
    return Inputs((q, k, v), kwargs)


def _flash_inputs(case, dtype, generator, device) -> Inputs:
    q, k, v = _qkv(case, dtype, generator, device)
    kwargs = {"causal": case.get("causal", False), "return_lse": True,
              "deterministic": bool(case.get("deterministic", False))}
    if case.get("scale") is not None:
        kwargs["scale"] = case["scale"]
    return Inputs((q, k, v), kwargs)


def _reduction_length(case) -> int:
    B, hq, sq, sk, d = case["shape"]
    return max(sk, sq * hq // case.get("hkv", hq), d)


_CPU = (torch.float16, torch.float32)  # tl.dot on bf16 does not run in the interpreter
_F16 = (torch.float16,)
_BF16 = (torch.bfloat16,)
_GPU = (torch.bfloat16, torch.float16)

# shape = (B, Hq, Sq, Sk, D); hkv = key/value heads (default Hq).
CASES = [
    case("causal_5q_2k_rows_0_to_2_zero", ["quick"], shape=(2, 4, 5, 2, 32), causal=True, dtypes=_CPU),
    case("sq1_sk37", ["quick"], shape=(1, 2, 1, 37, 32), dtypes=_CPU),
    # Sk = 1: dq and dk are exactly 0 mathematically (one key, softmax 1) and the harness demands
    # an exact zero there; the gradients of this shape are checked in tests/ops/test_attention.py.
    case("sk1", shape=(1, 2, 6, 1, 32), dtypes=_CPU, grad=False),
    case("causal_s113", shape=(1, 1, 113, 113, 32), causal=True, dtypes=_F16),
    case("sq40_sk17_causal", shape=(1, 2, 40, 17, 32), causal=True, dtypes=_CPU),
    case("sq17_sk40_causal", shape=(1, 2, 17, 40, 32), causal=True, dtypes=_CPU),
    case("noncausal_33x21", shape=(2, 1, 33, 21, 32), dtypes=_CPU),
    case("head_dim_96", shape=(1, 2, 24, 40, 96), causal=True, dtypes=_F16),
    case("head_dim_40_padded", shape=(1, 1, 20, 20, 40), dtypes=_F16),
    case("gqa_4_over_2_causal", ["quick"], shape=(1, 4, 33, 33, 32), hkv=2, causal=True, dtypes=_CPU),
    case("mqa_4_over_1", shape=(1, 4, 19, 35, 32), hkv=1, dtypes=_F16),
    # Inputs of magnitude 30 (logits ~ 900: a saturated softmax). Forward only: there the exact
    # dq, dk are ~1e-13 (torch's math path gets exact zeros structurally, while any FlashAttention
    # backward forms delta = rowsum(dO * O) and leaves rounding noise); the backward at large
    # logits is checked by logits_std_30 (q, k of magnitude 5.5: logits of std ~30).
    case("magnitude_30", shape=(1, 2, 32, 32, 32), dist="large", magnitude=30.0, causal=True, dtypes=_CPU,
         grad=False),
    case("logits_std_30", shape=(1, 2, 32, 32, 32), dist="large", magnitude=5.5, causal=True, dtypes=_CPU),
    case("layout_bshd", shape=(2, 2, 20, 20, 32), layout="bshd", causal=True, dtypes=_F16),
    case("grad_transposed", shape=(1, 2, 20, 20, 32), grad_layout="transposed", dtypes=_F16),
    case("scale_0p3", shape=(1, 2, 20, 24, 32), scale=0.3, dtypes=_F16),
    # Split-KV decoding (G * Sq <= 64 rows, Sk >= DECODE_MIN_SK): chunks + combining kernel.
    case("decode_gqa_sq1_sk600", shape=(1, 4, 1, 600, 32), hkv=2, dtypes=_F16),
    case("decode_causal_sq3_sk520", shape=(1, 2, 3, 520, 32), causal=True, dtypes=_F16, grad=False),
    case("empty_sq0", ["quick"], shape=(1, 2, 0, 8, 32), dtypes=_CPU),
    case("empty_sk0_gives_zeros", shape=(1, 2, 8, 0, 32), dtypes=_CPU),
    case("empty_batch0", shape=(0, 2, 8, 8, 32), dtypes=_F16),
    # On the GPU (``pytest -m gpu``): the acceptance shapes of issue 4.
    case("gpu_causal_5q_2k", ["gpu"], shape=(2, 4, 5, 2, 128), causal=True, dtypes=_GPU),
    case("gpu_sq1_sk4096", ["gpu"], shape=(4, 8, 1, 4096, 128), dtypes=_GPU),
    case("gpu_sk1", ["gpu"], shape=(2, 4, 64, 1, 128), dtypes=_GPU, grad=False),
    case("gpu_s113_causal", ["gpu"], shape=(2, 4, 113, 113, 64), causal=True, dtypes=_GPU),
    case("gpu_s203", ["gpu"], shape=(2, 4, 203, 203, 128), dtypes=_GPU),
    case("gpu_s1023_causal", ["gpu"], shape=(2, 8, 1023, 1023, 64), causal=True, dtypes=_GPU),
    case("gpu_s8448_causal", ["gpu"], shape=(1, 4, 8448, 8448, 128), causal=True, dtypes=_BF16),
    case("gpu_head_dim_32", ["gpu"], shape=(2, 4, 257, 257, 32), causal=True, dtypes=_BF16),
    case("gpu_head_dim_96", ["gpu"], shape=(2, 4, 300, 300, 96), causal=True, dtypes=_GPU),
    case("gpu_head_dim_256", ["gpu"], shape=(2, 4, 300, 300, 256), causal=True, dtypes=_GPU),
    case("gpu_gqa_32_over_8", ["gpu"], shape=(1, 32, 512, 512, 128), hkv=8, causal=True, dtypes=_BF16),
    case("gpu_sq300_sk1000_causal", ["gpu"], shape=(2, 4, 300, 1000, 128), causal=True, dtypes=_BF16),
    case("gpu_sq1000_sk300_causal", ["gpu"], shape=(2, 4, 1000, 300, 128), causal=True, dtypes=_BF16),
    case("gpu_magnitude_30", ["gpu"], shape=(2, 4, 512, 512, 128), dist="large", magnitude=30.0, causal=True,
         dtypes=_GPU, grad=False),
    case("gpu_logits_std_30", ["gpu"], shape=(2, 4, 512, 512, 128), dist="large", magnitude=5.5, causal=True,
         dtypes=_GPU),
    case("gpu_layout_bshd", ["gpu"], shape=(2, 8, 777, 777, 128), layout="bshd", causal=True, dtypes=_BF16),
    case("gpu_fp32", ["gpu"], shape=(1, 4, 200, 300, 64), causal=True, dtypes=(torch.float32,)),
    case("gpu_decode_gqa_32_over_8", ["gpu"], shape=(4, 32, 1, 8192, 128), hkv=8, dtypes=_BF16),
    case("gpu_decode_sq4_causal", ["gpu"], shape=(2, 32, 4, 3000, 128), hkv=8, causal=True, dtypes=_BF16),
    case("gpu_decode_head_dim_256", ["gpu"], shape=(2, 8, 1, 5000, 256), hkv=2, dtypes=_BF16),
]

_LLAMA = dict(hkv=8, dtypes=_BF16)
SUITES = {
    # llama3-8b: 32 query heads, 8 kv heads, head dim 128.
    "llama3-8b": [
        case("prefill_b1_s8192_causal", shape=(1, 32, 8192, 8192, 128), causal=True, **_LLAMA),
        case("prefill_b1_s8192_causal_fwd_bwd", shape=(1, 32, 8192, 8192, 128), causal=True, mode="fwd_bwd", **_LLAMA),
        case("decode_b32_sk8192", shape=(32, 32, 1, 8192, 128), **_LLAMA),
    ],
    # Issue 4's speed figures (bf16): FLOPs as attention_cost; decoding judged in GB/s of K + V.
    "acceptance": [
        case("fwd_b4_h16_s8448_d128", shape=(4, 16, 8448, 8448, 128), dtypes=_BF16),
        case("fwd_b4_h16_s8448_d128_causal", shape=(4, 16, 8448, 8448, 128), causal=True, dtypes=_BF16),
        case("fwd_b16_h16_s2048_d64_causal", shape=(16, 16, 2048, 2048, 64), causal=True, dtypes=_BF16),
        case("fwd_bwd_b4_h16_s8448_d128_causal", shape=(4, 16, 8448, 8448, 128), causal=True, mode="fwd_bwd",
             dtypes=_BF16),
        case("decode_b32_h32_sk8192_d128", shape=(32, 32, 1, 8192, 128), dtypes=_BF16),
        case("decode_b1_h32_sk131072_d128", shape=(1, 32, 1, 131072, 128), dtypes=_BF16),
    ],
}

_FLASH_CASES = [
    case("lse_causal_5q_2k", ["quick"], shape=(2, 4, 5, 2, 32), causal=True, dtypes=_CPU),
    case("lse_gqa_causal_sq24_sk40", shape=(1, 4, 24, 40, 32), hkv=2, causal=True, dtypes=_CPU),
    case("lse_magnitude_30", shape=(1, 2, 32, 32, 32), dist="large", magnitude=30.0, dtypes=_CPU, grad=False),
    case("lse_decode_sq2_sk600", shape=(1, 2, 2, 600, 32), causal=True, dtypes=_F16),
    case("deterministic_backward_repeat", shape=(1, 4, 40, 33, 32), hkv=2, causal=True, deterministic=True,
         dtypes=_CPU),
    case("empty_sk0_lse_minus_inf", shape=(1, 2, 3, 0, 32), dtypes=_F16),
    case("gpu_lse_s1023_causal", ["gpu"], shape=(2, 8, 1023, 1023, 128), causal=True, dtypes=_BF16),
    case("gpu_deterministic_backward_repeat", ["gpu"], shape=(2, 8, 1023, 1023, 128), hkv=2, causal=True,
         deterministic=True, dtypes=_BF16),
    case("gpu_deterministic_s8448", ["gpu"], shape=(1, 4, 8448, 8448, 128), causal=True, deterministic=True,
         dtypes=_BF16),
]

_FLASH_SUITES = {
    "llama3-8b": [
        case("prefill_b1_s8192_causal_lse", shape=(1, 32, 8192, 8192, 128), causal=True, return_lse=True, **_LLAMA),
        case("prefill_b1_s8192_causal_fwd_bwd_deterministic", shape=(1, 32, 8192, 8192, 128), causal=True,
             deterministic=True, mode="fwd_bwd", **_LLAMA),
    ],
}


def _sdpa_backend(name: str):
    """Factory: torch SDPA forced to one backend (``None`` when torch lacks it or has no CUDA)."""

    def factory():
        try:
            from torch.nn.attention import SDPBackend
        except ImportError:
            return None
        backend = getattr(SDPBackend, name, None)
        if backend is None or not torch.cuda.is_available():
            return None
        return _sdpa_torch(backend)

    return factory


SDPA_SPEC = OpSpec(
    name="scaled_dot_product_attention",
    impl=scaled_dot_product_attention,
    reference=scaled_dot_product_attention_reference,
    torch_impl=_sdpa_math,
    make_inputs=_sdpa_inputs,
    cost=attention_cost,
    reduction_length=_reduction_length,
    dtypes=(torch.bfloat16, torch.float16, torch.float32),
    cases=CASES,
    suites=SUITES,
    baselines={
        "torch": lambda: _sdpa_torch(),
        "torch.compile": baselines.compiled(_sdpa_torch()),
        "sdpa-flash": _sdpa_backend("FLASH_ATTENTION"),
        "sdpa-cudnn": _sdpa_backend("CUDNN_ATTENTION"),
        "sdpa-efficient": _sdpa_backend("EFFICIENT_ATTENTION"),
    },
    grad_args=(0, 1, 2),
    deterministic=not ATOMIC_DQ,  # dQ atomics only behind the module switch
    matrix=True,
    marker="attention",
)

FLASH_ATTENTION_SPEC = OpSpec(
    name="flash_attention",
    impl=flash_attention,
    reference=flash_attention_reference,
    torch_impl=_flash_torch,
    make_inputs=_flash_inputs,
    cost=attention_cost,
    reduction_length=_reduction_length,
    dtypes=(torch.bfloat16, torch.float16, torch.float32),
    cases=_FLASH_CASES,
    suites=_FLASH_SUITES,
    baselines={
        "torch": lambda: _flash_torch,
        "torch.compile": baselines.compiled(_flash_torch),
    },
    grad_args=(0, 1, 2),
    deterministic=not ATOMIC_DQ,
    matrix=True,
    marker="attention",
)

SPECS = (SDPA_SPEC, FLASH_ATTENTION_SPEC)
