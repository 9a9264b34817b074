"""Attention's public functions (scaled_dot_product_attention, flash_attention), their argument
checks, and the custom ops with autograd that wrap the host launchers of ``_launch.py``."""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from .._common import check_same_device, check_tensor
from .._runtime import Op, planned
from ._launch import _backward, _forward

MAX_HEAD_DIM = 256


# ----------------------------------------------------------------------------- custom ops, autograd


def _attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                   deterministic: bool, keep_fp32: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, base-2 lse as [2, B, Hq, Sq] hi and lo, fp32 out or empty); ``deterministic`` only
    selects the backward."""
    return _forward(q, k, v, causal, scale, keep_fp32)


def _attention_fwd_fake(q, k, v, causal, scale, deterministic, keep_fp32):
    B, hq, sq, d = q.shape
    return (q.new_empty((B, hq, sq, d)), q.new_empty((2, B, hq, sq), dtype=torch.float32),
            q.new_empty((B, hq, sq, d) if keep_fp32 else (0,), dtype=torch.float32))


def _attention_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                   lse: torch.Tensor, dlse: torch.Tensor | None, causal: bool, scale: float,
                   deterministic: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _backward(do, q, k, v, out, lse, dlse, causal, scale, deterministic)


def _attention_bwd_fake(do, q, k, v, out, lse, dlse, causal, scale, deterministic):
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


_attention_bwd_op = Op("roofkit::attention_bwd", _attention_bwd, _attention_bwd_fake)
_attention_fwd_op = Op("roofkit::attention_fwd", _attention_fwd, _attention_fwd_fake).autograd(
    _setup_context, _attention_backward)


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


@planned
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
        fp32 inputs use IEEE fp32 dots (not tf32). The backward recomputes P from an lse kept
        as two fp32 numbers (hi + lo), so large logits cost it no extra error. Forward
        deterministic. Backward: dK, dV
        deterministic; dQ from its own kernel without atomics (bitwise reproducible) unless the
        switch roofkit.ops.attention._launch.ATOMIC_DQ is set, in which case dQ accumulates with fp32 atomics unless
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
    out, _, _ = _attention_fwd_op.apply(query, key, value, _flag(op, "is_causal", is_causal), s,
                                  torch.are_deterministic_algorithms_enabled(),
                                  _keep_fp32(query, key, value))
    return out


@planned
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
    out, lse2, _ = _attention_fwd_op.apply(q, k, v, _flag(op, "causal", causal), s,
                                     _flag(op, "deterministic", deterministic) or torch.are_deterministic_algorithms_enabled(),
                                     _keep_fp32(q, k, v))
    return (out, lse2[0] * _LN2) if _flag(op, "return_lse", return_lse) else out
