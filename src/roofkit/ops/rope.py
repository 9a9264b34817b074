"""Rotary position embedding of queries and keys, as transformers applies it (rotate-half).

    q_embed = q * cos + rotate_half(q) * sin,   rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])

so for the two halves of every head vector (x1, x2) with the halves of cos and sin:

    out1 = x1 * c1 - x2 * s1        out2 = x2 * c2 + x1 * s2

and the backward (the transposed map) is the same pass with the signs of sin moved:

    d x1 = g1 * c1 + g2 * s2        d x2 = g2 * c2 - g1 * s1

One launch covers q and k: a program takes a block of positions of one batch row and a group of
heads of q or of k as one tile, the heads of a position sharing its cos / sin;
any strides (the model passes (B, S, H, D) tensors transposed to (B, H, S, D)), outputs laid
out as the operands.

Source: Su et al., "RoFormer" (2021); transformers' ``apply_rotary_pos_emb``.
"""

from __future__ import annotations

import numbers

import torch
import triton
import triton.language as tl

from ..harness import baselines
from ..harness.spec import Cost, Inputs, OpSpec, case
from ._common import (FLOAT_DTYPES, bf16_rne, cdiv, check_same_device,
                      check_same_dtype, check_tensor, next_pow2, sm_count)
from ._jit import _round_for_store
from ._runtime import Op, cached_launch, planned

S_BLOCK = 4  # positions per program
HEADS_PER_PROGRAM = 8  # heads of q or k per program (fewer when the grid would be small)
NUM_WARPS = 4
# The backward's warps: its output gradients arrive as (B, H, S, D) while its results go back to
# the operands' (B, S, H, D) layout; with 2 warps per tile it ran 49.7 us against 53.3 with 4 at
# llama3-8b shapes (benchmarks/sweep_rope.py, H200, 2026-12-03; the forward is flat, 46.9-47.6 us
# over the ten best configurations).
BACKWARD_NUM_WARPS = 2
# Streaming cache hints on q / k and the outputs (each read or written once): evict-first loads and
# .cs stores; cos / sin, shared by the heads, keep the default. Off until measured.
STREAMING = False


# ----------------------------------------------------------------------------- reference, cost


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_torch(q, k, cos, sin, *, unsqueeze_dim=1):
    """transformers' apply_rotary_pos_emb, in the inputs' dtypes."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def rope_reference(q, k, cos, sin, *, unsqueeze_dim=1):
    """The same in float64."""
    d = torch.float64
    return rope_torch(q.to(d), k.to(d), cos.to(d), sin.to(d), unsqueeze_dim=unsqueeze_dim)


def rope_cost(case, dtype: torch.dtype) -> Cost:
    """Forward: read q, k and write both (cos / sin are read once per position, shared by the
    heads: counted once); 3 FLOP per element. ``fwd_bwd`` doubles both."""
    b, hq, hkv, s, d = (case[k] for k in ("B", "Hq", "Hkv", "S", "D"))
    size = torch.empty((), dtype=dtype).element_size()
    qk = b * (hq + hkv) * s * d
    trig = 2 * b * s * d * size
    passes = 2 if case.get("mode", "fwd") == "fwd_bwd" else 1
    return Cost(flops=3 * qk * passes, bytes=passes * (2 * qk * size + trig))


# ----------------------------------------------------------------------------- kernel


@triton.jit
def _rope_tile(x_ptr, o_ptr, c_ptr, s_ptr, b, s0, h0, H, S, HALF, sxh, sxs, soh, sos, scs, sss,
               BACKWARD: tl.constexpr, BF16_RNE: tl.constexpr, S_BLOCK: tl.constexpr, HG: tl.constexpr,
               BLOCK_H: tl.constexpr, EVICT: tl.constexpr, STORE_CACHE: tl.constexpr):
    """HG heads x S_BLOCK positions of one operand as one tile (every load issued at once);
    x_ptr / o_ptr / c_ptr / s_ptr already at batch row ``b``. The heads of a position share its
    cos / sin (the same addresses: read from DRAM once). EVICT / STORE_CACHE: the operand's loads'
    eviction policy and the outputs' cache modifier ("": the defaults; cos / sin keep theirs)."""
    r = tl.arange(0, HG * S_BLOCK)
    h = h0 + (r // S_BLOCK).to(tl.int64)
    s_idx = s0 + (r % S_BLOCK).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = ((h < H) & (s_idx < S))[:, None] & (cols[None, :] < HALF)
    x_rows = x_ptr + (h * sxh + s_idx * sxs)[:, None]
    c_rows = c_ptr + (s_idx * scs)[:, None]
    s_rows = s_ptr + (s_idx * sss)[:, None]
    x1 = tl.load(x_rows + cols[None, :], mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
    x2 = tl.load(x_rows + HALF + cols[None, :], mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
    c1 = tl.load(c_rows + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    c2 = tl.load(c_rows + HALF + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    s1 = tl.load(s_rows + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    s2 = tl.load(s_rows + HALF + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if BACKWARD:
        o1 = x1 * c1 + x2 * s2
        o2 = x2 * c2 - x1 * s1
    else:
        o1 = x1 * c1 - x2 * s1
        o2 = x2 * c2 + x1 * s2
    o_rows = o_ptr + (h * soh + s_idx * sos)[:, None]
    tl.store(o_rows + cols[None, :], _round_for_store(o1, o_ptr, BF16_RNE), mask=mask, cache_modifier=STORE_CACHE)
    tl.store(o_rows + HALF + cols[None, :], _round_for_store(o2, o_ptr, BF16_RNE), mask=mask,
             cache_modifier=STORE_CACHE)


@triton.jit
def _rope_kernel(
    q_ptr, k_ptr, c_ptr, s_ptr, oq_ptr, ok_ptr,
    S, H_q, H_k, HALF, n_sblk, n_hg_q, n_hg,
    sqb, sqh, sqs, skb, skh, sks, scb, scs, ssb, sss, soqb, soqh, soqs, sokb, sokh, soks,
    BACKWARD: tl.constexpr, BF16_RNE: tl.constexpr, S_BLOCK: tl.constexpr, HG: tl.constexpr,
    BLOCK_H: tl.constexpr, EVICT: tl.constexpr = "", STORE_CACHE: tl.constexpr = "",
):
    """S_BLOCK positions of one batch row for a group of HG heads: q's groups first
    (``n_hg_q`` of them), then k's. Every operand, outputs included, is addressed with its own
    strides (unit stride along D). Each branch calls the tile routine with its own operands (no
    value is merged across the branches: their specializations may differ)."""
    pid = tl.program_id(0)
    hg = pid % n_hg
    t = pid // n_hg
    b = (t // n_sblk).to(tl.int64)
    s0 = (t % n_sblk).to(tl.int64) * S_BLOCK
    if hg < n_hg_q:
        _rope_tile(q_ptr + b * sqb, oq_ptr + b * soqb, c_ptr + b * scb, s_ptr + b * ssb, b, s0, hg.to(tl.int64) * HG,
                   H_q, S, HALF, sqh, sqs, soqh, soqs, scs, sss, BACKWARD, BF16_RNE, S_BLOCK, HG, BLOCK_H,
                   EVICT, STORE_CACHE)
    else:
        _rope_tile(k_ptr + b * skb, ok_ptr + b * sokb, c_ptr + b * scb, s_ptr + b * ssb, b, s0,
                   (hg - n_hg_q).to(tl.int64) * HG, H_k, S, HALF, skh, sks, sokh, soks, scs, sss, BACKWARD, BF16_RNE,
                   S_BLOCK, HG, BLOCK_H, EVICT, STORE_CACHE)


# ----------------------------------------------------------------------------- host launchers

_LAUNCHES: dict = {}


def _as_bhsd(t: torch.Tensor, unsqueeze_dim: int) -> torch.Tensor:
    """A 4-D operand as (B, H, S, D) view: unsqueeze_dim 1 means it already is; 2 means (B, S,
    H, D), transposed here (a view)."""
    return t if unsqueeze_dim == 1 else t.transpose(1, 2)


def _grid(b: int, s: int, hq: int, hk: int, device: torch.device) -> tuple[int, int, int, int, int]:
    """(S_BLOCK, HG, position blocks, q's head groups, all head groups): S_BLOCK positions a
    program (fewer for a short sequence), HG heads (fewer where the grid would leave SMs idle, as
    in decoding, or where an operand has fewer heads)."""
    s_block = min(S_BLOCK, next_pow2(max(s, 1)))
    n_sblk = cdiv(s, s_block)
    hg = min(HEADS_PER_PROGRAM, next_pow2(max(hq, hk, 1)))
    while hg > 1 and b * n_sblk * (cdiv(hq, hg) + cdiv(hk, hg)) < 2 * sm_count(device):
        hg //= 2
    return s_block, hg, n_sblk, cdiv(hq, hg), cdiv(hq, hg) + cdiv(hk, hg)


def _unit_last(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _out_like(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An output laid out as ``t`` (after ``_unit_last``), by the launch and the fakes alike:
    compiled graphs check the real output's strides against the fake's."""
    return torch.empty_like(_unit_last(t), dtype=dtype)


def _rope(q, k, cos, sin, unsqueeze_dim: int, backward: bool, out_dtype: torch.dtype):
    """The launch: outputs of ``out_dtype`` laid out as the operands are (as torch's expression
    gives them), every operand seen as a (B, H, S, D) view (unit stride along D: operands with
    another last stride are copied first)."""
    q, k = (_unit_last(t) for t in (q, k))
    cos, sin = (_unit_last(t) for t in (cos, sin))
    oq, ok = _out_like(q, out_dtype), _out_like(k, out_dtype)
    qv, kv, oqv, okv = (_as_bhsd(t, unsqueeze_dim) for t in (q, k, oq, ok))
    b, hq, s, d = qv.shape
    hk = kv.shape[1]
    if qv.numel() + kv.numel() == 0:
        return oq, ok
    s_block, hg, n_sblk, n_hg_q, n_hg = _grid(b, s, hq, hk, q.device)
    cached_launch(
        _LAUNCHES, _rope_kernel, b * n_sblk * n_hg,
        BACKWARD=backward, BF16_RNE=bf16_rne(out_dtype), S_BLOCK=s_block, HG=hg, BLOCK_H=next_pow2(max(d // 2, 1)),
        num_warps=BACKWARD_NUM_WARPS if backward else NUM_WARPS,
        **({"EVICT": "evict_first", "STORE_CACHE": ".cs"} if STREAMING else {}),
    )(qv, kv, cos, sin, oqv, okv, s, hq, hk, d // 2, n_sblk, n_hg_q, n_hg,
      *qv.stride()[:3], *kv.stride()[:3], cos.stride(0), cos.stride(1), sin.stride(0), sin.stride(1),
      *oqv.stride()[:3], *okv.stride()[:3])
    return oq, ok


def _rope_fwd(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
              unsqueeze_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    # the dtype torch's q * cos gives: q's, or float32 for 16-bit q with float32 cos / sin
    return _rope(q, k, cos, sin, unsqueeze_dim, False, torch.promote_types(q.dtype, cos.dtype))


def _rope_fwd_fake(q, k, cos, sin, unsqueeze_dim):
    dtype = torch.promote_types(q.dtype, cos.dtype)
    return _out_like(q, dtype), _out_like(k, dtype)


def _rope_bwd(dq: torch.Tensor, dk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int,
              grad_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    return _rope(dq, dk, cos, sin, unsqueeze_dim, True, grad_dtype)


def _rope_bwd_fake(dq, dk, cos, sin, unsqueeze_dim, grad_dtype):
    return _out_like(dq, grad_dtype), _out_like(dk, grad_dtype)


def _setup_context(ctx, inputs, output):
    q, k, cos, sin, unsqueeze_dim = inputs
    ctx.unsqueeze_dim, ctx.grad_dtype = unsqueeze_dim, q.dtype
    ctx.save_for_backward(cos, sin)


def _backward(ctx, dq, dk):
    cos, sin = ctx.saved_tensors
    gq, gk = _rope_bwd_op(dq, dk, cos, sin, ctx.unsqueeze_dim, ctx.grad_dtype)
    return gq, gk, None, None, None


_rope_bwd_op = Op("roofkit::rope_bwd", _rope_bwd, _rope_bwd_fake)
_rope_fwd_op = Op("roofkit::rope_fwd", _rope_fwd, _rope_fwd_fake).autograd(_setup_context, _backward)


# ----------------------------------------------------------------------------- public function


@planned
def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *,
         unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary position embedding, exactly transformers' ``apply_rotary_pos_emb`` (rotate-half).

    Args:
        q: (B, Hq, S, D) queries (with ``unsqueeze_dim=2``: (B, S, Hq, D)), any strides.
        k: keys of the same layout, B, S and D; Hkv heads (GQA: any count).
        cos, sin: (B, S, D) as the model's rotary embedding returns them (B may be 1 and is then
            broadcast), in q's dtype or float32, any strides.
        unsqueeze_dim: 1 or 2, where cos / sin gain the head dimension, as in transformers.
    Returns:
        (q_embed, k_embed) of q's and k's shapes and layouts (as torch's expression: a
        transposed q gives a transposed q_embed; a q whose last dimension is strided gives a
        contiguous q_embed), in the dtype torch's ``q * cos`` gives (q's; float32 for 16-bit q
        with float32 cos / sin).
    Raises:
        TypeError: not float32 / float16 / bfloat16 tensors; k's dtype not q's; cos / sin neither
            q's dtype nor float32, or of different dtypes.
        ValueError: not 4-D; shapes that do not match as above; D odd; unsqueeze_dim not 1 or 2;
            tensors on different devices; cos or sin requiring a gradient (only q's and k's are
            computed: the model's rotary embedding runs without autograd).
    Numerics:
        float32 arithmetic with one rounding to q's dtype (the torch expression rounds each
        product and the sum). Backward: the transposed rotation of the output gradients, first
        order only. Deterministic.
    Cost:
        One launch for q and k: reads each once and writes each once, reads cos and sin (shared
        by the heads, mostly from cache).
    Source:
        Su et al. 2021 (RoFormer); transformers' modeling_llama.apply_rotary_pos_emb.
    """
    op = "rope"
    for name, t in (("q", q), ("k", k), ("cos", cos), ("sin", sin)):
        check_tensor(op, name, t)
    for name, t in (("k", k), ("cos", cos), ("sin", sin)):
        check_same_device(op, name, t, q)
    if isinstance(unsqueeze_dim, bool) or not isinstance(unsqueeze_dim, numbers.Integral) or unsqueeze_dim not in (1, 2):
        raise ValueError(f"roofkit.{op}: unsqueeze_dim must be the int 1 or 2, got {unsqueeze_dim!r}")
    unsqueeze_dim = int(unsqueeze_dim)
    check_same_dtype(op, "k", k, q, "q")
    if cos.dtype != sin.dtype or cos.dtype not in (q.dtype, torch.float32):
        raise TypeError(f"roofkit.{op}: cos and sin must both have q's dtype ({q.dtype}) or float32; got "
                        f"{cos.dtype} and {sin.dtype}")
    if q.dim() != 4 or k.dim() != 4 or cos.dim() != 3 or sin.dim() != 3:
        raise ValueError(f"roofkit.{op}: q and k must be 4-D and cos / sin 3-D (B, S, D); got {q.dim()}-D, "
                         f"{k.dim()}-D, {cos.dim()}-D and {sin.dim()}-D")
    s_dim = 2 if unsqueeze_dim == 1 else 1
    b, s, d = q.shape[0], q.shape[s_dim], q.shape[3]
    if (k.shape[0], k.shape[s_dim], k.shape[3]) != (b, s, d):
        raise ValueError(f"roofkit.{op}: k must match q's batch, sequence and head size; got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)} (unsqueeze_dim={unsqueeze_dim})")
    for name, t in (("cos", cos), ("sin", sin)):
        if t.shape[1:] != (s, d) or t.shape[0] not in (1, b):
            batch = f"{b} or 1" if b != 1 else "1"
            raise ValueError(f"roofkit.{op}: {name} must have shape ({batch}, {s}, {d}); got {tuple(t.shape)}")
    if d % 2:
        raise ValueError(f"roofkit.{op}: the head size D must be even (two halves rotate), got {d}")
    if torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad):
        raise ValueError(f"roofkit.{op}: cos and sin must not require a gradient (roofkit computes q's and "
                         f"k's only); detach them, as the model's rotary embedding does")
    if cos.shape[0] != b:
        cos, sin = cos.expand(b, s, d), sin.expand(b, s, d)
    return _rope_fwd_op.apply(q, k, cos, sin, unsqueeze_dim)


# ----------------------------------------------------------------------------- spec


def _make_inputs(c, dtype, generator, device) -> Inputs:
    b, hq, hkv, s, d = (c[k] for k in ("B", "Hq", "Hkv", "S", "D"))
    gdev = generator.device
    layout = c.get("layout", "bhsd")
    unsqueeze_dim = 2 if layout == "bshd" else 1

    def heads(h):
        x = torch.randn((b, s, h, d), generator=generator, device=gdev).to(device=device, dtype=dtype)
        if layout == "bshd":  # the caller's own (B, S, H, D) layout, unsqueeze_dim=2
            return x
        if layout == "transposed":  # the model's (B, S, H, D) projection viewed as (B, H, S, D)
            return x.transpose(1, 2)
        return x.transpose(1, 2).contiguous()

    q, k = heads(hq), heads(hkv)
    theta = c.get("theta", 500000.0)
    inv = 1.0 / theta ** (torch.arange(0, d, 2, device=gdev, dtype=torch.float64) / d)
    pos = torch.arange(s, device=gdev, dtype=torch.float64) + c.get("offset", 0)
    ang = torch.cat([pos[:, None] * inv[None, :]] * 2, dim=-1)
    trig_dtype = torch.float32 if c.get("trig_fp32") else dtype
    bt = c.get("trig_batch", b)
    cos = ang.cos()[None].expand(bt, s, d).to(device=device, dtype=trig_dtype)
    sin = ang.sin()[None].expand(bt, s, d).to(device=device, dtype=trig_dtype)
    if c.get("trig_layout") == "strided":
        cos, sin = (torch.cat([t, t], dim=-1)[..., ::2] for t in (cos, sin))
    kwargs = {"unsqueeze_dim": unsqueeze_dim} if unsqueeze_dim != 1 else {}
    return Inputs((q, k, cos, sin), kwargs)


def _shape(c) -> tuple:
    return (c["B"], c["Hq"], c["S"], c["D"])


_BF16 = (torch.bfloat16,)
_F32 = (torch.float32,)


def _c(name, tags=(), **kw):
    kw.setdefault("B", 1)
    kw["shape"] = (kw["B"], kw["Hq"], kw["S"], kw["D"])
    return case(name, list(tags), **kw)


CASES = [
    _c("tiny_b1_h1_s1_d2", ["quick"], Hq=1, Hkv=1, S=1, D=2),
    _c("gqa_b2_h4_kv2_s5_d8", ["quick"], B=2, Hq=4, Hkv=2, S=5, D=8),
    _c("head_128_s17", Hq=3, Hkv=1, S=17, D=128),
    _c("odd_half_d6_s11", B=2, Hq=2, Hkv=2, S=11, D=6),
    _c("transposed_views_s9", B=2, Hq=4, Hkv=2, S=9, D=16, layout="transposed"),  # 54 rows: 2 programs
    _c("unsqueeze_dim_2_s9", B=2, Hq=3, Hkv=1, S=9, D=8, layout="bshd", dtypes=_F32),
    _c("trig_fp32_s20", Hq=2, Hkv=2, S=20, D=16, trig_fp32=True, dtypes=(torch.float16, torch.bfloat16)),
    _c("trig_batch_1_b3", B=3, Hq=2, Hkv=1, S=7, D=8, trig_batch=1, dtypes=_F32),
    _c("trig_strided_s12", Hq=2, Hkv=2, S=12, D=8, trig_layout="strided", dtypes=_F32),
    _c("far_positions_s16", Hq=2, Hkv=1, S=16, D=32, offset=100000),
    _c("empty_s0", ["quick"], Hq=2, Hkv=1, S=0, D=8),
    _c("gpu_b4_s2048", ["gpu"], B=4, Hq=32, Hkv=8, S=2048, D=128, layout="transposed"),
    _c("gpu_fp32_s333", ["gpu"], B=2, Hq=5, Hkv=5, S=333, D=64, dtypes=_F32),
]


def _suites():
    out = {}
    for suite, (hq, hkv, d) in {"llama3-8b": (32, 8, 128), "llama3-70b": (64, 8, 128),
                                 "qwen2-7b": (28, 4, 128), "gemma-7b": (16, 16, 256)}.items():
        out[suite] = [
            _c(f"b1_s8192_h{hq}_kv{hkv}", Hq=hq, Hkv=hkv, S=8192, D=d, layout="transposed", dtypes=_BF16),
            _c(f"b1_s8192_h{hq}_kv{hkv}_fwd_bwd", Hq=hq, Hkv=hkv, S=8192, D=d, layout="transposed", dtypes=_BF16,
               mode="fwd_bwd"),
        ]
    out["host"] = [_c("decode_b8_s1", B=8, Hq=32, Hkv=8, S=1, D=128, layout="transposed", dtypes=_BF16),
                   _c("decode_b8_s1_fwd_bwd", B=8, Hq=32, Hkv=8, S=1, D=128, layout="transposed", dtypes=_BF16,
                      mode="fwd_bwd")]
    return out


def _liger():
    try:
        from liger_kernel.ops.rope import LigerRopeFunction
    except ImportError:
        return None

    def run(q, k, cos, sin, *, unsqueeze_dim=1):
        if unsqueeze_dim != 1:
            raise NotImplementedError("Liger's rope takes (B, H, S, D) only")
        return LigerRopeFunction.apply(q, k, cos, sin, None, unsqueeze_dim)

    return run


SPEC = OpSpec(
    name="rope",
    impl=rope,
    reference=rope_reference,
    torch_impl=rope_torch,
    make_inputs=_make_inputs,
    cost=rope_cost,
    dtypes=FLOAT_DTYPES,
    cases=CASES,
    suites=_suites(),
    baselines={**baselines.eager_and_compiled(rope_torch), "liger": _liger},
    grad_args=(0, 1),
    marker="rope",
)

SPECS = (SPEC,)


# The tunables of this family's heuristics: what roofkit.config.override may set.
TUNABLES = ("S_BLOCK", "HEADS_PER_PROGRAM", "NUM_WARPS", "BACKWARD_NUM_WARPS", "STREAMING")
