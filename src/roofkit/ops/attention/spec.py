"""Attention's harness declarations: float64 references, cost model, torch baselines, inputs,
cases, suites and the two OpSpecs (SDPA_SPEC, FLASH_ATTENTION_SPEC; SPECS in that order)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from ...harness import baselines
from ...harness.inputs import random_tensor
from ...harness.spec import Cost, Inputs, OpSpec, case
from ._launch import ATOMIC_DQ
from .api import flash_attention, scaled_dot_product_attention


# ----------------------------------------------------------------------------- reference, cost


def _band_mask(sq: int, sk: int, window: tuple[int, int], bottom_right: bool, device) -> torch.Tensor | None:
    """Boolean (Sq, Sk) mask of the pairs inside the band of ``window`` = (left, right) (-1:
    unbounded; causal is (-1, 0)), aligned top-left (query i's diagonal is key i, torch's
    is_causal) or bottom-right (key i + Sk - Sq, FlashAttention's); None when all are visible."""
    left, right = window
    if left < 0 and right < 0:
        return None
    i = torch.arange(sq, device=device)[:, None] + (sk - sq if bottom_right else 0)
    j = torch.arange(sk, device=device)[None, :]
    ok = torch.ones((sq, sk), dtype=torch.bool, device=device)
    if right >= 0:
        ok &= j <= i + right
    if left >= 0:
        ok &= j >= i - left
    return ok


def _expand_kv(t: torch.Tensor, hq: int) -> torch.Tensor:
    return t if t.shape[1] == hq else t.repeat_interleave(hq // t.shape[1], dim=1)


def _reference_chunk(q, k, v, band, mask, scale: float):
    """Masked softmax attention of a chunk of (batch x head) slices from materialized scores:
    ``band`` (Sq, Sk) boolean or None, ``mask`` (chunk, Sq, Sk) boolean (True = take part) or
    additive, or None. A row with no visible key gives 0 and lse -inf."""
    s = (q @ k.transpose(-1, -2)) * scale
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else s + mask
    if band is not None:
        s = s.masked_fill(~band, -math.inf)
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


def _attention_reference(q, k, v, attn_mask, window: tuple[int, int], bottom_right: bool, scale, need_lse: bool):
    B, hq, sq, d = q.shape
    sk = k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    k, v = _expand_kv(k, hq), _expand_kv(v, hq)
    qf, kf, vf = (t.reshape(B * hq, t.shape[2], d) for t in (q, k, v))
    band = _band_mask(sq, sk, window, bottom_right, q.device)
    mask = attn_mask.expand(B, hq, sq, sk) if attn_mask is not None else None
    per = max(1, _REF_CHUNK_ELEMS // max(1, sq * sk))
    outs, lses = [], []
    for a in range(0, B * hq, per):
        rows = torch.arange(a, min(a + per, B * hq), device=q.device)
        m = mask[rows // hq, rows % hq] if mask is not None else None  # this chunk's slices only
        args = (qf[a:a + per], kf[a:a + per], vf[a:a + per], band, m)
        if B * hq > per and torch.is_grad_enabled():
            o, lse = checkpoint(_reference_chunk, *args, scale, use_reentrant=False)
        else:
            o, lse = _reference_chunk(*args, scale)
        outs.append(o)
        lses.append(lse)
    out = torch.cat(outs).reshape(B, hq, sq, d) if outs else q.new_zeros(q.shape)
    lse = torch.cat(lses).reshape(B, hq, sq) if lses else q.new_zeros((B, hq, sq))
    return (out, lse) if need_lse else out


def scaled_dot_product_attention_reference(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                           scale=None, enable_gqa=False):
    """Attention in float64 from materialized scores, with torch's semantics: attn_mask boolean
    (True = take part) or added to the scaled scores, causal aligned top-left (key j <= query
    i); a row with no visible key gives 0 (torch's math backend does too). Differentiable."""
    return _attention_reference(query, key, value, attn_mask, (-1, 0 if is_causal else -1), False, scale, False)


def segment_mask(segment_ids, B: int, sq: int, sk: int) -> torch.Tensor:
    """The boolean (B, 1, Sq, Sk) mask of flash_attention's ``segment_ids`` (one (B | 1, S) tensor,
    or a pair (query ids, key ids)): query i and key j take part iff their ids are equal."""
    q_ids, k_ids = (segment_ids, segment_ids) if isinstance(segment_ids, torch.Tensor) else segment_ids
    return (q_ids.expand(B, sq)[:, :, None] == k_ids.expand(B, sk)[:, None, :]).unsqueeze(1)


def flash_attention_reference(q, k, v, *, causal=False, scale=None, return_lse=False, deterministic=False,
                              window_size=(-1, -1), segment_ids=None):
    """(out, lse) in float64 (lse natural log, -inf for rows with no visible key), or out; causal
    mask and window aligned bottom-right (query i sees key j iff i + Sk - Sq - left <= j <=
    i + Sk - Sq + right; causal sets right = 0), and with ``segment_ids`` only keys of the
    query's segment."""
    window = (window_size[0], 0 if causal else window_size[1])
    mask = None if segment_ids is None else segment_mask(segment_ids, q.shape[0], q.shape[2], k.shape[2])
    return _attention_reference(q, k, v, mask, window, True, scale, return_lse)


def _visible_pairs(sq: int, sk: int, window: tuple[int, int], bottom_right: bool) -> float:
    """(query, key) pairs computed: all of them without a band; causal with Sq == Sk half (the
    usual FLOP convention); else the pairs inside the band, counted exactly."""
    left, right = window
    if left < 0 and right < 0:
        return sq * sk
    if sq == sk and (left, right) == (-1, 0):
        return sq * sk / 2
    d0 = sk - sq if bottom_right else 0
    total = 0
    for i in range(sq):
        hi = min(i + d0 + right, sk - 1) if right >= 0 else sk - 1
        lo = max(i + d0 - left, 0) if left >= 0 else 0
        total += max(hi - lo + 1, 0)
    return total


def attention_cost(case, dtype: torch.dtype, *, bottom_right: bool = False) -> Cost:
    """Forward: 4 * B * Hq * pairs * D FLOPs (two matmuls; pairs as ``_visible_pairs``, the causal
    band aligned top-left as scaled_dot_product_attention's or, ``bottom_right``, as
    flash_attention's); bytes: q, k, v read once, out written (+ fp32 lse for ``return_lse``; the
    attn_mask is not counted). ``mode='fwd_bwd'``: 3.5x the forward FLOPs (backward counted
    2.5x); bytes add dO read and dq, dk, dv written."""
    B, hq, sq, sk, d = case["shape"]
    hkv = case.get("hkv", hq)
    size = torch.empty((), dtype=dtype).element_size()
    left, right = case.get("window", (-1, -1))
    window = (left, 0 if case.get("causal", False) else right)
    if case.get("segments") is not None:  # the pairs the band and the segments leave, counted exactly
        band = _band_mask(sq, sk, window, bottom_right, "cpu")
        seen = segment_mask(_segment_ids(case, "cpu"), B, sq, sk)
        pairs = float((seen if band is None else seen & band).sum()) / B
    else:
        pairs = _visible_pairs(sq, sk, window, bottom_right)
    flops = 4.0 * B * hq * pairs * d
    q_bytes = B * hq * sq * d * size
    kv_bytes = 2 * B * hkv * sk * d * size
    nbytes = 2 * q_bytes + kv_bytes  # q read, out written, k and v read
    if case.get("return_lse"):
        nbytes += B * hq * sq * 4
    if case.get("mode", "fwd") == "fwd_bwd":
        return Cost(flops=3.5 * flops, bytes=nbytes + 2 * q_bytes + kv_bytes)  # + dO, dq, dk, dv
    return Cost(flops=flops, bytes=nbytes)


def flash_attention_cost(case, dtype: torch.dtype) -> Cost:
    """``attention_cost`` with the band aligned bottom-right (flash_attention's)."""
    return attention_cost(case, dtype, bottom_right=True)


# ----------------------------------------------------------------------------- torch's own


def _sdpa_torch(backend=None):
    """torch SDPA (the same function as roofkit's: top-left causal, attn_mask as given), under
    ``backend`` (an SDPBackend) when given."""

    def run(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        kwargs = dict(attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                      enable_gqa=enable_gqa)
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
    mask = attn_mask.expand(B, hq, query.shape[2], key.shape[2]) if attn_mask is not None else None
    outs = [run(query[:, a:a + per], key[:, a // g:(a + per) // g], value[:, a // g:(a + per) // g],
                mask[:, a:a + per] if mask is not None else None, dropout_p, is_causal, scale, enable_gqa)
            for a in range(0, hq, per)]
    return torch.cat(outs, dim=1)


def _flash_torch(q, k, v, *, causal=False, scale=None, return_lse=False, deterministic=False, window_size=(-1, -1),
                 segment_ids=None):
    """flash_attention through torch: math SDPA for the output, with the bottom-right band (and
    the segments) passed as a boolean mask (torch's is_causal aligns top-left; the same when
    Sq == Sk), and an fp32 logsumexp of the masked scores for lse."""
    sq, sk = q.shape[2], k.shape[2]
    window = (window_size[0], 0 if causal else window_size[1])
    band = _band_mask(sq, sk, window, True, q.device)
    if segment_ids is not None:
        seg = segment_mask(segment_ids, q.shape[0], sq, sk)
        band = seg if band is None else band & seg
    kwargs = dict(scale=scale, enable_gqa=q.shape[1] != k.shape[1])
    if window == (-1, 0) and sq == sk and segment_ids is None:
        out = _sdpa_math(q, k, v, is_causal=True, **kwargs)
    else:
        out = _sdpa_math(q, k, v, attn_mask=band, **kwargs)
    if not return_lse:
        return out
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    kf = _expand_kv(k, q.shape[1]).float()
    lses = []
    per = max(1, _REF_CHUNK_ELEMS // max(1, sq * sk * q.shape[0]))
    for a in range(0, q.shape[1], per):
        s = (q[:, a:a + per].float() @ kf[:, a:a + per].transpose(-1, -2)) * scale
        if band is not None:
            s = s.masked_fill(~band, -math.inf)
        lses.append(torch.logsumexp(s, dim=-1))
    lse = torch.cat(lses, dim=1) if lses else q.new_zeros(q.shape[:3], dtype=torch.float32)
    return out, lse


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


def _attn_mask(case, dtype, generator, device) -> torch.Tensor | None:
    """The case's attn_mask (``mask``): "padding" boolean (B, 1, 1, Sk), batch b > 0 with its
    first 3b and last 2b keys padded out (left and right padding); "additive" (B, 1, Sq, Sk) in
    the inputs' dtype: a normal bias (ALiBi-like) with about 20% of the pairs at -inf and 20% at
    the dtype's lowest value (transformers' masked pairs), key i % Sk always kept;
    "bool_2d_dead_row" (Sq, Sk) boolean, about half the pairs kept and row 3 none (a row that
    sees no key); "bottom_right" (1, 1, Sq, Sk) boolean: key j <= query i + Sk - Sq (a KV cache's
    causal mask, as transformers builds it)."""
    kind = case.get("mask")
    if kind is None:
        return None
    B, hq, sq, sk, d = case["shape"]
    gdev = generator.device
    if kind == "padding":
        j = torch.arange(sk, device=gdev)
        keep = torch.stack([(j >= 3 * b) & (j < sk - 2 * b) for b in range(B)])
        return keep.reshape(B, 1, 1, sk).to(device)
    if kind == "additive":
        bias = torch.randn((B, 1, sq, sk), generator=generator, device=gdev)
        u = torch.rand((B, 1, sq, sk), generator=generator, device=gdev)
        kept = torch.arange(sk, device=gdev)[None, :] == (torch.arange(sq, device=gdev) % max(sk, 1))[:, None]
        bias = bias.masked_fill((u < 0.2) & ~kept, -math.inf)
        bias = bias.to(dtype).masked_fill((u > 0.8) & ~kept, torch.finfo(dtype).min)
        return bias.to(device)
    if kind == "bool_2d_dead_row":
        keep = torch.rand((sq, sk), generator=generator, device=gdev) < 0.5
        keep[3] = False
        return keep.to(device)
    if kind == "bottom_right":
        return _band_mask(sq, sk, (-1, 0), True, device).reshape(1, 1, sq, sk)
    raise ValueError(f"unknown attention mask kind {kind!r}")


def _sdpa_inputs(case, dtype, generator, device) -> Inputs:
    q, k, v = _qkv(case, dtype, generator, device)
    kwargs = {"is_causal": case.get("causal", False), "enable_gqa": q.shape[1] != k.shape[1]}
    mask = _attn_mask(case, dtype, generator, device)
    if mask is not None:
        kwargs["attn_mask"] = mask
    if case.get("scale") is not None:
        kwargs["scale"] = case["scale"]
    return Inputs((q, k, v), kwargs)


def _flash_inputs(case, dtype, generator, device) -> Inputs:
    q, k, v = _qkv(case, dtype, generator, device)
    kwargs = {"causal": case.get("causal", False), "return_lse": True,
              "deterministic": bool(case.get("deterministic", False))}
    if case.get("window") is not None:
        kwargs["window_size"] = case["window"]
    if case.get("scale") is not None:
        kwargs["scale"] = case["scale"]
    if case.get("segments") is not None:
        kwargs["segment_ids"] = _segment_ids(case, device)
    return Inputs((q, k, v), kwargs)


def _segment_ids(case, device):
    """The case's flash_attention ``segment_ids`` (``segments``), fixed by the case (its cost
    counts the pairs they leave): "packed" one (B, S) tensor, batch b holding sequences of
    lengths about S/4, S/2 + b and the rest (b = 1 the whole row as one sequence); "pair" (query
    ids (B, Sq), key ids (1, Sk)), the keys in three ids, the queries cycling through four
    (id 3 has no key: those rows see nothing), unsorted; "runs" (B, S) runs of 20 positions
    alternating ids 0 and 1, batch b starting at id b % 2 (an id recurs after another: blocks of
    one id meet blocks of both, whose other id is above or below it); "pair_sorted" query ids 0
    for the first half of the rows and 1 for the rest, every key id 0."""
    kind = case["segments"]
    B, _, sq, sk, _ = case["shape"]
    if kind == "packed":
        i = torch.arange(sq)
        rows = [torch.zeros(sq, dtype=torch.long) if b == 1 else
                (i >= sq // 4).long() + (i >= sq // 2 + b).long() for b in range(B)]
        return torch.stack(rows).to(device)
    if kind == "pair_sorted":  # rows of ids 0 then 1, every key id 0: the second half sees no key
        return ((torch.arange(sq) >= sq // 2).long().expand(B, sq).to(device),
                torch.zeros(1, sk, dtype=torch.long, device=device))
    if kind == "runs":
        return ((torch.arange(sq)[None] // 20 + torch.arange(B)[:, None]) % 2).to(device)
    if kind == "pair":
        return (torch.arange(sq, dtype=torch.int32).mul(7).remainder(4).reshape(1, sq).expand(B, sq).to(device),
                (torch.arange(sk, dtype=torch.int32) * 3 // max(sk, 1)).reshape(1, sk).to(device))
    raise ValueError(f"unknown attention segments kind {kind!r}")


def _reduction_length(case) -> int:
    B, hq, sq, sk, d = case["shape"]
    return max(sk, sq * hq // case.get("hkv", hq), d)


_CPU = (torch.float16, torch.float32)  # tl.dot on bf16 does not run in the interpreter
_F16 = (torch.float16,)
_BF16 = (torch.bfloat16,)
_GPU = (torch.bfloat16, torch.float16)

# shape = (B, Hq, Sq, Sk, D); hkv = key/value heads (default Hq); mask = attn_mask kind (_attn_mask).
# is_causal aligns top-left (torch's): causal_5q_2k, sq40_sk17_causal and sq17_sk40_causal have
# Sq != Sk both ways.
CASES = [
    case("causal_5q_2k_top_left", ["quick"], shape=(2, 4, 5, 2, 32), causal=True, dtypes=_CPU),
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
    # Split-KV decoding (G * Sq <= 64 rows, Sk >= DECODE_MIN_SK): chunks + combining kernel. The
    # decoding kernels are forward only; the backward of a combined lse is checked by
    # flash_attention's lse_decode_sq2_sk600, of Sq = 1 by sq1_sk37, of GQA by gqa_4_over_2_causal.
    case("decode_gqa_sq1_sk600", shape=(1, 4, 1, 600, 32), hkv=2, dtypes=_F16, grad=False),
    # A KV cache's causal step: 3 queries at the end of 520 keys, through a bottom-right mask.
    case("decode_sq3_sk520_bottom_right_mask", shape=(1, 2, 3, 520, 32), mask="bottom_right", dtypes=_F16,
         grad=False),
    # attn_mask: broadcast boolean padding (left and right), additive with GQA, 2-D with a row
    # that sees no key (output 0, gradients 0).
    case("mask_padding_b11k", ["quick"], shape=(2, 2, 24, 24, 32), mask="padding", dtypes=_CPU),
    case("mask_additive_gqa_b1qk", shape=(1, 4, 20, 27, 32), hkv=2, mask="additive", dtypes=_CPU),
    case("mask_2d_dead_row", shape=(1, 2, 21, 35, 16), mask="bool_2d_dead_row", dtypes=_CPU),
    case("empty_sq0", ["quick"], shape=(1, 2, 0, 8, 32), dtypes=_CPU),
    case("empty_sk0_gives_zeros", shape=(1, 2, 8, 0, 32), dtypes=_CPU),
    case("empty_batch0", shape=(0, 2, 8, 8, 32), dtypes=_F16),
    # On the GPU (``pytest -m gpu``): the acceptance shapes of the attention kernels.
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
    case("gpu_decode_sq4_bottom_right_mask", ["gpu"], shape=(2, 32, 4, 3000, 128), hkv=8, mask="bottom_right",
         dtypes=_BF16),
    case("gpu_mask_padding", ["gpu"], shape=(2, 8, 777, 777, 128), hkv=2, mask="padding", dtypes=_BF16),
    case("gpu_mask_additive", ["gpu"], shape=(2, 8, 300, 1000, 128), mask="additive", dtypes=_GPU),
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
    # The attention kernels' speed figures (bf16): FLOPs as attention_cost; decoding judged in GB/s of K + V.
    "acceptance": [
        case("fwd_b4_h16_s8448_d128", shape=(4, 16, 8448, 8448, 128), dtypes=_BF16),
        case("fwd_b4_h16_s8448_d128_causal", shape=(4, 16, 8448, 8448, 128), causal=True, dtypes=_BF16),
        case("fwd_b16_h16_s2048_d64_causal", shape=(16, 16, 2048, 2048, 64), causal=True, dtypes=_BF16),
        case("fwd_bwd_b4_h16_s8448_d128_causal", shape=(4, 16, 8448, 8448, 128), causal=True, mode="fwd_bwd",
             dtypes=_BF16),
        case("decode_b32_h32_sk8192_d128", shape=(32, 32, 1, 8192, 128), dtypes=_BF16),
        case("decode_b1_h32_sk131072_d128", shape=(1, 32, 1, 131072, 128), dtypes=_BF16),
    ],
    # host: one decoding step (one query, 2048 cached keys, GQA 32 / 8 heads) and a short causal
    # forward+backward of 128 tokens, where the host's cost per call is the time.
    "host": [
        case("decode_b1_sk2048", shape=(1, 32, 1, 2048, 128), **_LLAMA),
        case("short_b1_s128_causal_fwd_bwd", shape=(1, 32, 128, 128, 128), causal=True, mode="fwd_bwd", **_LLAMA),
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
    # Sliding window (left 7, right 3): both edges of the band cross the 16-row tiles.
    case("window_7_3_sq24_sk40", shape=(1, 2, 24, 40, 32), window=(7, 3), dtypes=_CPU),
    # Packed sequences (segment_ids): causal within each, two of the three boundaries inside a
    # 16-row tile; a pair of query / key ids with rows that see no key, with a window and GQA.
    case("segments_packed_causal", ["quick"], shape=(2, 2, 37, 37, 32), causal=True, segments="packed", dtypes=_CPU),
    # (the kernels skip the per-block id tests where a sorted row's range of ids is one id: these
    # make each part of that decision matter)
    case("segments_packed_noncausal", shape=(2, 2, 70, 70, 32), segments="packed", dtypes=_CPU),
    case("segments_runs_noncausal", shape=(2, 2, 60, 60, 32), segments="runs", dtypes=_CPU),
    case("segments_pair_sorted_causal", shape=(1, 2, 16, 16, 32), causal=True, segments="pair_sorted", dtypes=_CPU),
    case("segments_pair_window_gqa", shape=(2, 4, 24, 40, 32), hkv=2, window=(20, 5), segments="pair", dtypes=_CPU),
    case("gpu_lse_s1023_causal", ["gpu"], shape=(2, 8, 1023, 1023, 128), causal=True, dtypes=_BF16),
    case("gpu_deterministic_backward_repeat", ["gpu"], shape=(2, 8, 1023, 1023, 128), hkv=2, causal=True,
         deterministic=True, dtypes=_BF16),
    case("gpu_deterministic_s8448", ["gpu"], shape=(1, 4, 8448, 8448, 128), causal=True, deterministic=True,
         dtypes=_BF16),
    case("gpu_window_512_causal", ["gpu"], shape=(2, 8, 2048, 2048, 128), hkv=2, causal=True, window=(512, 0),
         dtypes=_BF16),
]

_FLASH_SUITES = {
    "llama3-8b": [
        case("prefill_b1_s8192_causal_lse", shape=(1, 32, 8192, 8192, 128), causal=True, return_lse=True, **_LLAMA),
        case("prefill_b1_s8192_causal_fwd_bwd_deterministic", shape=(1, 32, 8192, 8192, 128), causal=True,
             deterministic=True, mode="fwd_bwd", **_LLAMA),
        # a training batch of packed documents (transformers' packed-sequence mask, as segment ids)
        case("train_b4_s2048_packed_fwd_bwd", shape=(4, 32, 2048, 2048, 128), causal=True,
             segments="packed", mode="fwd_bwd", **_LLAMA),
    ],
    # host: as SUITES["host"], with the logsumexp flash_attention always returns.
    "host": [
        case("decode_b1_sk2048_lse", shape=(1, 32, 1, 2048, 128), return_lse=True, **_LLAMA),
        case("short_b1_s128_causal_lse_fwd_bwd", shape=(1, 32, 128, 128, 128), causal=True, return_lse=True,
             mode="fwd_bwd", **_LLAMA),
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

FLASH_ATTENTION_SPEC = SDPA_SPEC.sibling(
    name="flash_attention",
    impl=flash_attention,
    reference=flash_attention_reference,
    torch_impl=_flash_torch,
    make_inputs=_flash_inputs,
    cost=flash_attention_cost,
    cases=_FLASH_CASES,
    suites=_FLASH_SUITES,
    baselines={
        **baselines.eager_and_compiled(_flash_torch),
    },
)

SPECS = (SDPA_SPEC, FLASH_ATTENTION_SPEC)
