"""Attention's public functions (scaled_dot_product_attention, flash_attention), their argument
checks, and the custom ops with autograd that wrap the host launchers of ``_launch.py``."""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from .._common import check_same_device, check_tensor
from .._runtime import Op, planned
from ._launch import _backward, _forward, _grad_buffers, _output

MAX_HEAD_DIM = 256


# ----------------------------------------------------------------------------- custom ops, autograd


def _attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                   segments: torch.Tensor | None, left: int, right: int, bottom_right: bool, scale: float,
                   deterministic: bool, keep_lo: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, base-2 lse as [2, B, Hq, Sq] hi and lo, out's rounding residual or empty). ``mask``: attn_mask or
    None; ``segments``: (B, Sq + Sk + 1) segment ids as ``_segments_of`` makes them, or None;
    (left, right): the window (-1 unbounded; causal is (-1, 0)), aligned bottom-right or
    top-left; ``deterministic`` only selects the backward."""
    return _forward(q, k, v, mask, (left, right), bottom_right, scale, keep_lo, segments)


def _attention_fwd_fake(q, k, v, mask, segments, left, right, bottom_right, scale, deterministic, keep_lo):
    B, hq, sq, d = q.shape
    return (_output(q), q.new_empty((2, B, hq, sq), dtype=torch.float32),
            q.new_empty((B, hq, sq, d) if keep_lo else (0,)))


def _attention_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                   out_lo: torch.Tensor | None, lse: torch.Tensor, dlse: torch.Tensor | None,
                   mask: torch.Tensor | None, segments: torch.Tensor | None, left: int, right: int,
                   bottom_right: bool, scale: float,
                   deterministic: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _backward(do, q, k, v, out, out_lo, lse, dlse, mask, (left, right), bottom_right, scale, deterministic,
                     segments)


def _attention_bwd_fake(do, q, k, v, out, out_lo, lse, dlse, mask, segments, left, right, bottom_right, scale,
                        deterministic):
    return _grad_buffers(q, k, v)


def _setup_context(ctx, inputs, output):
    q, k, v, mask, segments, left, right, bottom_right, scale, deterministic, keep_lo = inputs
    out, lse, o_lo = output
    ctx.band = (left, right, bottom_right)
    ctx.scale, ctx.deterministic = scale, deterministic
    # (the output's rounding residual when kept: delta = rowsum(dO * O) from O to ~2x its
    # dtype's precision, as from a float32 copy, in half the memory)
    ctx.save_for_backward(q, k, v, out, o_lo if keep_lo else None, lse, mask, segments)


def _attention_backward(ctx, dout, dlse, do_lo):
    q, k, v, out, out_lo, lse, mask, segments = ctx.saved_tensors
    if dout is None:
        dout = torch.zeros(out.shape, dtype=q.dtype, device=q.device)
    dq, dk, dv = _attention_bwd_op(dout, q, k, v, out, out_lo, lse, dlse, mask, segments, *ctx.band, ctx.scale,
                                   ctx.deterministic)
    # attn_mask and the segment ids get no gradient (the public function refuses a mask that requires one).
    return dq, dk, dv, None, None, None, None, None, None, None, None


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


def _keep_lo(q, k, v) -> bool:
    """Keep a 16-bit output's rounding residual for the backward (only when a gradient can flow)."""
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


def _check_mask(op: str, mask, q: torch.Tensor, k: torch.Tensor, causal: bool) -> None:
    """Validate attn_mask as torch's SDPA takes it: a boolean (True = take part) or additive float
    tensor of query's dtype or float32, broadcastable to (B, Hq, Sq, Sk), on query's device, not
    together with is_causal; one that requires grad is refused (no gradient is computed for it)."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"roofkit.{op}: attn_mask must be a torch.Tensor or None; got {type(mask).__name__}")
    if mask.layout != torch.strided:
        raise TypeError(f"roofkit.{op}: attn_mask must be a dense (strided) tensor; got layout {mask.layout}")
    if mask.dtype not in (torch.bool, torch.float32, q.dtype):
        floats = "float32" if q.dtype == torch.float32 else f"{str(q.dtype).removeprefix('torch.')} (query's) or float32"
        raise TypeError(f"roofkit.{op}: attn_mask must be bool (True = take part) or an additive float mask of dtype "
                        f"{floats}; got {str(mask.dtype).removeprefix('torch.')}")
    if mask.device != q.device:
        raise ValueError(f"roofkit.{op}: attn_mask is on {mask.device} but query is on {q.device}; they must be on "
                         "the same device")
    target = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    if mask.dim() > 4 or any(m != 1 and m != t for m, t in zip(reversed(mask.shape), reversed(target))):
        raise ValueError(f"roofkit.{op}: attn_mask of shape {tuple(mask.shape)} is not broadcastable to (batch, "
                         f"query heads, query length, key length) = {target}")
    if causal:
        raise ValueError(f"roofkit.{op}: attn_mask and is_causal=True cannot both be given (as in torch); put the "
                         "causal pattern into attn_mask")
    if mask.requires_grad and torch.is_grad_enabled():
        raise NotImplementedError(f"roofkit.{op}: attn_mask requires grad, but no gradient is computed for it; pass "
                                  "attn_mask.detach() (or torch's SDPA for a learned bias)")


def _window_of(op: str, window_size, causal: bool) -> tuple[int, int]:
    """(left, right) from ``window_size`` (two ints >= -1, -1 unbounded); causal sets right = 0."""
    ok = isinstance(window_size, (tuple, list)) and len(window_size) == 2
    if not ok or any(isinstance(w, (bool, np.bool_)) or not isinstance(w, numbers.Integral) for w in window_size):
        raise TypeError(f"roofkit.{op}: window_size must be a pair of ints (left, right); got {window_size!r}")
    left, right = (int(w) for w in window_size)
    if left < -1 or right < -1:
        raise ValueError(f"roofkit.{op}: window_size entries must be >= 0, or -1 for unbounded; got {window_size!r}")
    return left, 0 if causal else right


def _segments_of(op: str, segment_ids, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The kernels' (B, Sq + Sk + 1) segment ids (each batch's query ids, then its key ids, then
    1 if both are sorted; int16 or int32 labels, contiguous) from ``segment_ids``: a (B, S)
    tensor when Sq == Sk, or a pair (query ids (B, Sq), key ids (B, Sk)); a batch dimension of
    1 broadcasts."""
    B, sq, sk = q.shape[0], q.shape[2], k.shape[2]
    if isinstance(segment_ids, torch.Tensor):
        if sq != sk:
            raise ValueError(f"roofkit.{op}: one segment_ids tensor needs as many queries as keys; got Sq={sq}, "
                             f"Sk={sk} (pass a pair (query ids, key ids))")
        pair = (segment_ids, segment_ids)
    elif isinstance(segment_ids, (tuple, list)) and len(segment_ids) == 2:
        pair = tuple(segment_ids)
    else:
        raise TypeError(f"roofkit.{op}: segment_ids must be a tensor or a pair of tensors (query ids, key ids); got "
                        f"{type(segment_ids).__name__}")
    for name, ids, n in (("query segment_ids", pair[0], sq), ("key segment_ids", pair[1], sk)):
        if not isinstance(ids, torch.Tensor):
            raise TypeError(f"roofkit.{op}: {name} must be a torch.Tensor; got {type(ids).__name__}")
        if ids.layout != torch.strided:
            raise TypeError(f"roofkit.{op}: {name} must be a dense (strided) tensor; got layout {ids.layout}")
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            got = str(ids.dtype).removeprefix("torch.")
            raise TypeError(f"roofkit.{op}: {name} must be an integer tensor; got {got}")
        if ids.device != q.device:
            raise ValueError(f"roofkit.{op}: {name} is on {ids.device} but q is on {q.device}; they must be on the "
                             "same device")
        if ids.dim() != 2 or ids.shape[0] not in (1, B) or ids.shape[1] != n:
            raise ValueError(f"roofkit.{op}: {name} must have shape ({B}, {n}) (or (1, {n})); got {tuple(ids.shape)}")
    dtype = pair[0].dtype
    if pair[1].dtype != dtype:  # (int64, not torch.promote_types: it holds every value of either dtype)
        wide = (torch.uint16, torch.uint32, torch.uint64)
        if dtype in wide or pair[1].dtype in wide:
            names = (str(t.dtype).removeprefix("torch.") for t in pair)
            raise TypeError(f"roofkit.{op}: query and key segment_ids have dtypes {' and '.join(names)}; with "
                            "uint16, uint32 or uint64 ids give both the same dtype")
        dtype = torch.int64  # holds every value of the other integer dtypes
    ids = torch.cat([ids.to(dtype).expand(B, -1) for ids in pair], dim=1)
    ids = ids.to(torch.int16) if dtype in (torch.int8, torch.uint8, torch.int16) else _relabel(ids)
    # after each row's ids, whether both its query ids and its key ids are sorted (labels keep the
    # order): the kernels then tell a range of one id from its two ends
    q_ids, k_ids = ids[:, :sq], ids[:, sq:]
    ordered = (q_ids[:, 1:] >= q_ids[:, :-1]).all(1) & (k_ids[:, 1:] >= k_ids[:, :-1]).all(1)
    return torch.cat([ids, ordered.to(ids.dtype)[:, None]], dim=1)


def _relabel(ids: torch.Tensor) -> torch.Tensor:
    """``ids`` (B, N) relabeled per row to 0, 1, ... in sorted order (equal ids get equal labels,
    different ones different labels), int16 when N < 2**15, else int32, on the device without a
    synchronization: the kernels stream the key ids through their pipeline (shared memory per
    stage) and compare them per pair, so narrow labels cost less than any integer dtype given."""
    values, order = torch.sort(ids, dim=1, stable=True)
    starts = torch.ones_like(values, dtype=torch.bool)
    starts[:, 1:] = values[:, 1:] != values[:, :-1]
    dtype = torch.int16 if ids.shape[1] < 2**15 else torch.int32
    labels = (torch.cumsum(starts, dim=1, dtype=torch.int32) - 1).to(dtype)
    return torch.empty_like(labels).scatter_(1, order, labels)


@planned
def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask=None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> torch.Tensor:
    """out = softmax(scale * query @ key^T + mask) @ value, as ``torch.nn.functional.scaled_dot_product_attention``.

    Args:
        query: (B, Hq, Sq, D) float16, bfloat16 or float32, any strides, on CUDA (or CPU with
            TRITON_INTERPRET=1).
        key, value: (B, Hkv, Sk, D), same dtype and device. Hkv divides Hq (GQA) when
            ``enable_gqa``; Hkv == 1 (MQA) broadcasts as in torch.
        attn_mask: None, or a tensor broadcastable to (B, Hq, Sq, Sk) (e.g. (Sq, Sk), (B, 1, 1, Sk),
            (B, 1, Sq, Sk)), on query's device: boolean (True = the pair takes part) or additive
            (query's dtype or float32; added to the scaled scores, -inf excludes a pair).
            Broadcast dimensions are read with stride 0, never materialized. It gets no
            gradient: one that requires grad is refused. Blocks of pairs it hides entirely are
            skipped (for masks of ``MASK_RANGES_MIN_PAIRS`` pairs or more), so a NaN / inf in
            q, k, v (or a +inf in the mask) that only such pairs would meet does not make the
            output NaN, as torch's math backend (0 * NaN) would; finite values give the same bits.
        dropout_p: must be 0.0 (dropout is not supported).
        is_causal: query i sees key j iff j <= i (top-left alignment, exactly torch's; with
            Sq > Sk every row sees key 0, with Sq < Sk the last Sk - Sq keys are seen by no
            row). For a KV cache (queries at the end of the keys) pass is_causal=False when
            Sq == 1, or a mask, as transformers does.
        scale: softmax scale, default 1 / sqrt(D).
        enable_gqa: allow Hq != Hkv.
    Returns:
        (B, Hq, Sq, D) tensor in query's dtype, laid out (B, Sq, Hq, D) in memory, as torch's
        flash and memory-efficient backends return it (``out.transpose(1, 2)`` is contiguous:
        reshaping it to (B, Sq, Hq * D) copies nothing). A query row that sees no key (every
        key masked out by attn_mask, or Sk == 0) is 0 and gets zero gradients, as torch's math
        and CPU backends give (torch >= 2.5; never NaN).
    Raises:
        NotImplementedError: dropout_p != 0; attn_mask requires grad (with grad mode on).
        TypeError: non-tensor, dtype other than float16/bfloat16/float32, mismatched dtypes, bad
            scale, attn_mask of another dtype than bool, float32 or query's, or not a tensor.
        ValueError: not 4-D, mismatched batch / head dim / key-value lengths or heads, a head count
            GQA cannot map (or Hq != Hkv without enable_gqa), head dim outside [1, 256], wrong
            device (inputs or attn_mask), attn_mask not broadcastable to (B, Hq, Sq, Sk),
            attn_mask together with is_causal=True.
    Numerics:
        fp32 scores and softmax statistics (online softmax in base 2, log2(e) folded into the
        scale; an additive mask is converted to fp32 and added to the scaled scores), P rounded
        to the input dtype before P @ V, fp32 output accumulator normalized once;
        fp32 inputs use IEEE fp32 dots (not tf32). The backward recomputes P from an lse kept
        as two fp32 numbers (hi + lo), so large logits cost it no extra error. Forward
        deterministic. Backward: dK, dV
        deterministic; dQ from its own kernel without atomics (bitwise reproducible) unless the
        switch roofkit.ops.attention._launch.ATOMIC_DQ is set, in which case dQ accumulates with fp32 atomics unless
        ``torch.use_deterministic_algorithms(True)`` is on (then a separate dQ kernel, bitwise
        reproducible). First-order only.
    Cost:
        4 * B * Hq * Sq * Sk * D FLOPs (halved for causal with Sq == Sk; visible pairs otherwise;
        with attn_mask every pair is computed); reads q, k, v once (and the mask, per query
        head) and writes out (+ fp32 lse, B * Hq * Sq * 4 bytes). Backward 2.5x the forward
        FLOPs. Decoding (G * Sq <= 64, Sk >= 512) reads K and V once per kv head.
    Source:
        FlashAttention / FlashAttention-2 (Dao et al. 2022, 2023), Flash-Decoding (2023).
    """
    op = "scaled_dot_product_attention"
    if dropout_p != 0.0:
        raise NotImplementedError(f"roofkit.{op}: dropout_p must be 0.0 (dropout is not supported yet); got {dropout_p}")
    _check(op, query, key, value, gqa=_flag(op, "enable_gqa", enable_gqa))
    causal = _flag(op, "is_causal", is_causal)
    if attn_mask is not None:
        _check_mask(op, attn_mask, query, key, causal)
    s = _scale_of(op, scale, query.shape[-1])
    out, _, _ = _attention_fwd_op.apply(query, key, value, attn_mask, None, -1, 0 if causal else -1, False, s,
                                        torch.are_deterministic_algorithms_enabled(), _keep_lo(query, key, value))
    return out


@planned
def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    scale: float | None = None, return_lse: bool = False, deterministic: bool = False,
                    window_size: tuple[int, int] = (-1, -1), segment_ids=None):
    """FlashAttention: out = softmax(scale * q @ k^T [causal / window]) @ v, optionally with its log-sum-exp.

    Masks are aligned to the bottom-right corner (FlashAttention 2.1): with diag = Sk - Sq, query
    i sees key j iff i + diag - left <= j <= i + diag + right.

    Args:
        q: (B, Hq, Sq, D); k, v: (B, Hkv, Sk, D) with Hkv dividing Hq (GQA / MQA); float16,
            bfloat16 or float32, any strides.
        causal: bottom-right aligned causal mask (query i sees key j iff j <= i + Sk - Sq); the
            window's right edge is then 0 (FlashAttention's convention).
        scale: default 1 / sqrt(D).
        return_lse: also return lse = log(sum_j exp(scale * q_i . k_j)) over visible keys.
        deterministic: backward without atomics (separate dQ kernel): bitwise reproducible.
        window_size: (left, right) sliding-window (local) attention, as FlashAttention's; -1 is
            unbounded, (-1, -1) (default) no window; only the KV blocks inside the band are read.
        segment_ids: None, or the segment (document) of each position, for several sequences
            packed into one row: query i sees key j only if both ids are equal (on top of causal
            / window). A tensor (B, S) of integers when Sq == Sk (queries and keys are the same
            positions), or a pair (query ids (B, Sq), key ids (B, Sk)); a batch dimension of 1
            broadcasts. Any integer values (equal = same segment; they need not be sorted). A
            row that sees no key is 0, as everywhere. No mask is made: the ids are compared
            inside the tiles (H200, llama3-8b shapes: 1.25x causal attention's forward time,
            1.1x forward+backward, against 2.4x and 1.6x through the same pattern as a boolean
            attn_mask; docs/attention.md). Ids wider than int16 are relabeled per call.
    Returns:
        out (B, Hq, Sq, D) in q's dtype (laid out as scaled_dot_product_attention's), or (out, lse) with lse (B, Hq, Sq) float32, natural log,
        -inf for rows that see no key (whose output is 0). Gradients flow through both.
    Raises:
        TypeError / ValueError as :func:`scaled_dot_product_attention` (naming roofkit.flash_attention);
        TypeError for a window_size that is not two ints, ValueError for an entry below -1;
        TypeError / ValueError for segment_ids that are not integer tensors of (B or 1, Sq) and
        (B or 1, Sk) on q's device (or one (B, S) tensor while Sq != Sk).
    Numerics, Source: as :func:`scaled_dot_product_attention`.
    Cost: as :func:`scaled_dot_product_attention`, over the pairs the band lets through (with
        segment_ids, every pair of the band is computed: blocks across segments are not skipped).
    """
    op = "flash_attention"
    _check(op, q, k, v, gqa=True, names=("q", "k", "v"))
    s = _scale_of(op, scale, q.shape[-1])
    causal = _flag(op, "causal", causal)
    left, right = _window_of(op, window_size, causal)
    segments = None if segment_ids is None else _segments_of(op, segment_ids, q, k)
    out, lse2, _ = _attention_fwd_op.apply(q, k, v, None, segments, left, right, True, s,
                                           _flag(op, "deterministic", deterministic)
                                           or torch.are_deterministic_algorithms_enabled(), _keep_lo(q, k, v))
    return (out, lse2[0] * _LN2) if _flag(op, "return_lse", return_lse) else out
