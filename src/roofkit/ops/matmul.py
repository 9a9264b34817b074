"""Matrix multiplication with a fused epilogue (roofkit.matmul) and a fused linear layer
(roofkit.linear), forward, plus the linear layer's backward through the same kernel.

    out = act(alpha * (input @ other) + beta * c + bias)

Program mapping: one Triton program owns one [BLOCK_M, BLOCK_N] tile of one output matrix and
walks K in BLOCK_K steps with an fp32 accumulator (tl.dot); programs are numbered in groups of
GROUP_M tile rows so that programs running together share A row-panels and B column-panels in
L2. The epilogue (alpha, beta * c, bias, activation) runs on the fp32 accumulator; the result is
rounded once, to the output dtype. A batch (3-D operands) is the grid's second axis, each operand
carrying its own batch stride (0 for an operand broadcast over the batch).

Status (2026-11-30): verified on CPU through the interpreter (fp16 / fp32) only; not yet run on a
GPU, so not yet registered with the harness nor exported as ``roofkit.matmul`` (import it from
``roofkit.ops.matmul``); registration follows its first GPU verification.
Not yet here (later work on issue 3): autotuning, split-K, persistent / stream-K scheduling, TMA
descriptors, fp8 / int8 inputs. The launch configuration comes from a small deterministic
heuristic (``_launch_config``).
Source: the classic tiled GEMM with grouped tile order (Triton's matmul tutorial describes the
L2-grouping idea); torch.addmm semantics for alpha / beta / c.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from ..harness import baselines
from ..harness.inputs import random_tensor
from ..harness.spec import Cost, Inputs, OpSpec, case
from ._jit import _round_for_store
from ._common import FLOAT_DTYPES, bf16_rne, check_same_device, check_tensor, next_pow2

ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
MAX_GRID_Y = 65535  # CUDA's limit on the grid's second axis: larger batches launch in chunks

# ----------------------------------------------------------------------------- torch-side math


def _activation_torch(y: torch.Tensor, activation: str | None) -> torch.Tensor:
    if activation is None:
        return y
    if activation == "relu":
        return torch.relu(y)
    if activation == "gelu":
        return F.gelu(y)
    if activation == "gelu_tanh":
        return F.gelu(y, approximate="tanh")
    return F.silu(y)


def _activation_grad(pre: torch.Tensor, activation: str | None) -> torch.Tensor:
    """d act / d pre, evaluated on the (float32) pre-activation."""
    if activation == "relu":
        return (pre > 0).to(pre.dtype)
    if activation == "gelu":
        return 0.5 * (1.0 + torch.erf(pre * math.sqrt(0.5))) + pre * torch.exp(-0.5 * pre * pre) / math.sqrt(2 * math.pi)
    if activation == "gelu_tanh":
        k = math.sqrt(2.0 / math.pi)
        t = torch.tanh(k * (pre + 0.044715 * pre**3))
        return 0.5 * (1.0 + t) + 0.5 * pre * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * pre * pre)
    s = torch.sigmoid(pre)
    return s * (1.0 + pre * (1.0 - s))


def matmul_torch(input, other, *, bias=None, activation=None, alpha=1.0, beta=0.0, c=None, out_dtype=None):
    """The torch baseline: torch.matmul in the input dtype, then the epilogue in torch (each step
    rounded to the dtype, as an unfused eager program computes it)."""
    y = torch.matmul(input, other)
    if alpha != 1.0:
        y = y * alpha
    if c is not None and beta != 0.0:
        y = y + beta * c
    if bias is not None:
        y = y + bias
    y = _activation_torch(y, activation)
    return y.to(out_dtype) if out_dtype is not None else y


def matmul_reference(input, other, *, bias=None, activation=None, alpha=1.0, beta=0.0, c=None, out_dtype=None):
    """float64 reference (the harness passes float64 copies); ``out_dtype`` is ignored."""
    y = alpha * torch.matmul(input.double(), other.double())
    if c is not None and beta != 0.0:
        y = y + beta * c.double()
    if bias is not None:
        y = y + bias.double()
    return _activation_torch(y, activation)


def _esize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def matmul_cost(case, dtype: torch.dtype) -> Cost:
    """2*M*N*K FLOP per output matrix; bytes: A (M*K per A batch), B (K*N per B batch), the output
    (M*N per batch), bias (N) and c (M*N per batch) once each (a broadcast operand is read once)."""
    m, n, k = case["shape"]
    ba, bb = case.get("batch", (None, None))
    na, nb = ba or 1, bb or 1
    nbatch = max(na, nb) if (ba is not None or bb is not None) else 1
    if 0 in (na, nb):
        nbatch = 0
    s_in = _esize(dtype)
    s_out = _esize(case.get("out_dtype") or dtype)
    elems_in = na * m * k + nb * k * n + (n if case.get("bias") else 0) + (nbatch * m * n if case.get("c") else 0)
    return Cost(flops=2 * nbatch * m * n * k, bytes=elems_in * s_in + nbatch * m * n * s_out)


# ----------------------------------------------------------------------------- launch heuristic


class Config(NamedTuple):
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    GROUP_M: int
    num_warps: int
    num_stages: int


def _launch_config(m: int, n: int, k: int, dtype: torch.dtype) -> Config:
    """Deterministic heuristic: 128x128 tiles, 8 warps, 3 stages for large problems (BLOCK_K 64
    for 16-bit inputs, 32 for fp32 to keep the 3-stage ring within shared memory); a short side
    (M or N <= 64) gets a tile edge of next_pow2(side) (at least 16, tl.dot's minimum) and 4 warps."""
    bk = 32 if dtype == torch.float32 else 64
    bk = min(bk, max(16, next_pow2(k)))
    bm = 128 if m > 64 else max(16, next_pow2(m))
    bn = 128 if n > 64 else max(16, next_pow2(n))
    if bm == 128 and bn == 128:
        return Config(bm, bn, bk, 8, 8, 3)
    return Config(bm, bn, bk, 8, 4, 4)


# ----------------------------------------------------------------------------- kernel


@triton.jit
def _matmul_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, out_ptr, M, N, K, alpha, beta, a_kstep, b_kstep,
    s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_cb, s_cm, s_cn, s_ob, s_om, s_on,
    HAS_C: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, BF16_RNE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """One [BLOCK_M, BLOCK_N] output tile of batch program_id(1). Tile order along axis 0: groups
    of GROUP_M tile rows, walked column by column inside a group (L2 reuse of the B panel).
    Offsets are int64 (M*K, K*N, batch * stride may pass 2**31)."""
    pid = tl.program_id(0)
    bid = tl.program_id(1).to(tl.int64)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    g = pid // per_group
    row0 = g * GROUP_M
    rows_in_group = tl.minimum(tiles_m - row0, GROUP_M)
    local = pid - g * per_group
    tile_m = row0 + local % rows_in_group
    tile_n = local // rows_in_group

    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < N
    rm64 = rm.to(tl.int64)
    rn64 = rn.to(tl.int64)
    rk64 = rk.to(tl.int64)
    a_ptrs = a_ptr + bid * s_ab + rm64[:, None] * s_am + rk64[None, :] * s_ak
    b_ptrs = b_ptr + bid * s_bb + rk64[:, None] * s_bk + rn64[None, :] * s_bn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = rk < K - k0
        a = tl.load(a_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += a_kstep  # BLOCK_K * s_ak, computed on the host (int64 when it must be)
        b_ptrs += b_kstep

    # Epilogue on the fp32 accumulator; one rounding at the store.
    acc = acc * alpha
    mask = m_ok[:, None] & n_ok[None, :]
    if HAS_C:
        cv = tl.load(c_ptr + bid * s_cb + rm64[:, None] * s_cm + rn64[None, :] * s_cn, mask=mask, other=0.0)
        acc += beta * cv.to(tl.float32)
    if HAS_BIAS:
        bv = tl.load(bias_ptr + rn64, mask=n_ok, other=0.0)
        acc += bv.to(tl.float32)[None, :]
    if ACTIVATION == 1:
        acc = tl.maximum(acc, 0.0)
    elif ACTIVATION == 2:
        acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    elif ACTIVATION == 3:
        u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        t = 1.0 - 2.0 / (tl.exp(2.0 * u) + 1.0)  # tanh(u), saturating to +-1
        acc = 0.5 * acc * (1.0 + t)
    elif ACTIVATION == 4:
        acc = acc / (1.0 + tl.exp(-acc))
    o_ptrs = out_ptr + bid * s_ob + rm64[:, None] * s_om + rn64[None, :] * s_on
    tl.store(o_ptrs, _round_for_store(acc, out_ptr, BF16_RNE), mask=mask)


# ----------------------------------------------------------------------------- host launcher


def _as3(t: torch.Tensor, batch: int) -> torch.Tensor:
    """(batch, rows, cols) view: a 2-D tensor broadcast with batch stride 0."""
    if t.dim() == 2:
        return t.unsqueeze(0).expand(batch, *t.shape)
    return t.expand(batch, *t.shape[1:])


def _input_precision(dtype: torch.dtype) -> str:
    if dtype == torch.float32:
        return "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"
    return "tf32"  # ignored by tl.dot for 16-bit inputs


def _matmul_forward(a, b, c, bias, activation: str | None, alpha: float, beta: float, out_dtype, config: Config | None = None):
    """Checked operands in; returns the (batch?, M, N) result."""
    out_dtype = out_dtype or a.dtype
    batched = a.dim() == 3 or b.dim() == 3
    m, k = a.shape[-2:]
    n = b.shape[-1]
    nb = max(a.shape[0] if a.dim() == 3 else 1, b.shape[0] if b.dim() == 3 else 1)
    if batched and 0 in ((a.shape[0] if a.dim() == 3 else 1), (b.shape[0] if b.dim() == 3 else 1)):
        nb = 0
    shape = (nb, m, n) if batched else (m, n)
    out = torch.empty(shape, dtype=out_dtype, device=a.device)
    if out.numel() == 0:
        return out
    use_c = c is not None and beta != 0.0
    if k == 0 and not use_c and bias is None:
        return out.zero_()  # act(0) == 0 for every supported activation
    a3, b3, o3 = _as3(a, nb), _as3(b, nb), _as3(out, nb)
    c3 = c.expand(shape) if use_c else None
    if c3 is not None and c3.dim() == 2:
        c3 = _as3(c3, nb)
    # A batch that B shares, stored as one (nb*M, K) matrix, is one big GEMM (better tiles).
    if nb > 1 and b3.stride(0) == 0 and a3.stride(0) == m * a3.stride(1) and o3.stride(0) == m * o3.stride(1) and (
        c3 is None or c3.stride(0) == m * c3.stride(1)
    ):
        a3 = a3.as_strided((1, nb * m, k), (0, a3.stride(1), a3.stride(2)))
        o3 = o3.as_strided((1, nb * m, n), (0, o3.stride(1), o3.stride(2)))
        if c3 is not None:
            c3 = c3.as_strided((1, nb * m, n), (0, c3.stride(1), c3.stride(2)))
        b3 = b3[:1]
    bm_rows = a3.shape[1]
    cfg = config or _launch_config(bm_rows, n, k, a.dtype)
    tiles = triton.cdiv(bm_rows, cfg.BLOCK_M) * triton.cdiv(n, cfg.BLOCK_N)
    cs = c3.stride() if c3 is not None else (0, 0, 0)
    for b0 in range(0, a3.shape[0], MAX_GRID_Y):
        b1 = min(a3.shape[0], b0 + MAX_GRID_Y)
        ca, cb, co = a3[b0:b1], b3[b0:b1], o3[b0:b1]
        cc = c3[b0:b1] if c3 is not None else ca
        _matmul_kernel[(tiles, b1 - b0)](
            ca, cb, cc, bias if bias is not None else ca, co, bm_rows, n, k, float(alpha), float(beta),
            cfg.BLOCK_K * ca.stride(2), cfg.BLOCK_K * cb.stride(1),
            *ca.stride(), *cb.stride(), *cs, *co.stride(),
            HAS_C=c3 is not None, HAS_BIAS=bias is not None, ACTIVATION=ACTIVATIONS[activation],
            INPUT_PRECISION=_input_precision(a.dtype), BF16_RNE=bf16_rne(out_dtype),
            BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, GROUP_M=cfg.GROUP_M,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )
    return out


# ----------------------------------------------------------------------------- custom ops


def _act_name(activation: str) -> str | None:
    return None if activation == "none" else activation


@torch.library.custom_op("roofkit::matmul", mutates_args=())
def _matmul_op(
    a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None, bias: torch.Tensor | None, activation: str,
    alpha: float, beta: float, out_dtype: torch.dtype | None,
) -> torch.Tensor:
    return _matmul_forward(a, b, c, bias, _act_name(activation), alpha, beta, out_dtype)


def _out_shape(a, b):
    m, n = a.shape[-2], b.shape[-1]
    if a.dim() == 2 and b.dim() == 2:
        return (m, n)
    ba = a.shape[0] if a.dim() == 3 else 1
    bb = b.shape[0] if b.dim() == 3 else 1
    return (0 if 0 in (ba, bb) else max(ba, bb), m, n)


@_matmul_op.register_fake
def _(a, b, c, bias, activation, alpha, beta, out_dtype):
    return a.new_empty(_out_shape(a, b), dtype=out_dtype or a.dtype)


@torch.library.custom_op("roofkit::linear", mutates_args=())
def _linear_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str) -> torch.Tensor:
    k, n = x.shape[-1], weight.shape[0]
    y = _matmul_forward(x.reshape(-1, k), weight.t(), None, bias, _act_name(activation), 1.0, 0.0, None)
    return y.view(*x.shape[:-1], n)


@_linear_op.register_fake
def _(x, weight, bias, activation):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _linear_setup(ctx, inputs, output):
    x, weight, bias, activation = inputs
    ctx.activation = activation
    ctx.has_bias = bias is not None
    ctx.save_for_backward(x, weight, bias)


def _linear_backward(ctx, dy):
    """dY' = dY * act'(pre) (pre recomputed in fp32 by the same kernel: no activation memory is
    kept between forward and backward), dX = dY' @ W, dW = dY'^T @ X, db = sum over rows of dY'
    (fp32 sum, rounded once)."""
    x, weight, bias = ctx.saved_tensors
    k, n = x.shape[-1], weight.shape[0]
    x2 = x.reshape(-1, k)
    g = dy.reshape(-1, n)
    if ctx.activation != "none":
        pre = _matmul_op(x2, weight.t(), None, bias, "none", 1.0, 0.0, torch.float32)
        g = (g.to(torch.float32) * _activation_grad(pre, ctx.activation)).to(x.dtype)
    dx = dw = db = None
    if ctx.needs_input_grad[0]:
        dx = _matmul_op(g, weight, None, None, "none", 1.0, 0.0, None).view(x.shape)
    if ctx.needs_input_grad[1]:
        dw = _matmul_op(g.t(), x2, None, None, "none", 1.0, 0.0, None)
    if ctx.has_bias and ctx.needs_input_grad[2]:
        db = g.to(torch.float32).sum(0).to(bias.dtype)
    return dx, dw, db, None


torch.library.register_autograd("roofkit::linear", _linear_backward, setup_context=_linear_setup)


# ----------------------------------------------------------------------------- public functions


def _check_activation(op: str, activation) -> str:
    if activation is not None and not isinstance(activation, str):
        raise TypeError(f"roofkit.{op}: activation must be None or a str, got {type(activation).__name__}")
    if activation not in ACTIVATIONS:
        names = ", ".join(repr(a) for a in ACTIVATIONS)
        raise ValueError(f"roofkit.{op}: activation must be one of {names}; got {activation!r}")
    return "none" if activation is None else activation


def _check_scalar(op: str, name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"roofkit.{op}: {name} must be a real number, got {type(v).__name__}")
    return float(v)


def _check_operand(op: str, name: str, t, ref, dims) -> None:
    check_tensor(op, name, t)
    if ref is not None:
        check_same_device(op, name, t, ref)
        if t.dtype != ref.dtype:
            raise TypeError(f"roofkit.{op}: {name} dtype {t.dtype} differs from input dtype {ref.dtype} (mixed dtypes are not supported)")
    if t.dim() not in dims:
        raise ValueError(f"roofkit.{op}: {name} must have {' or '.join(map(str, dims))} dimensions, got shape {tuple(t.shape)}")


def _check_bias(op: str, bias, input, n: int) -> None:
    if bias is None:
        return
    _check_operand(op, "bias", bias, input, (1,))
    if bias.shape[0] != n:
        raise ValueError(f"roofkit.{op}: bias must have shape ({n},), got {tuple(bias.shape)}")


def matmul(input, other, *, bias=None, activation=None, alpha=1.0, beta=0.0, c=None, out_dtype=None):
    """out = act(alpha * (input @ other) + beta * c + bias), in one kernel.

    Args:
        input: (M, K) or (B, M, K); float32, float16 or bfloat16; any strides (transposed views
            are read in place, no copy).
        other: (K, N) or (B, K, N), same dtype and device. Batches broadcast as in torch.matmul
            (a 2-D operand or a batch of 1 is shared by every batch entry).
        bias: optional (N,) of the input dtype, added to every row.
        activation: None, "relu", "gelu" (erf form), "gelu_tanh" or "silu".
        alpha, beta: real scalars; ``c``: optional tensor of the input dtype broadcastable to the
            output shape. As in torch.addmm, beta == 0 ignores c (NaN/inf in c do not propagate).
        out_dtype: output dtype (float32/float16/bfloat16); default the input dtype.
    Returns:
        A new contiguous (M, N) or (B, M, N) tensor of ``out_dtype``.
    Raises:
        TypeError: non-tensors, unsupported or mixed dtypes, non-real alpha/beta, bad out_dtype
            or activation type.
        ValueError: operands not 2-D/3-D, inner dimensions that differ, batches that do not
            broadcast, bias of the wrong length, c not broadcastable, unknown activation name,
            tensors on different or unsupported devices.
    Numerics:
        Products accumulate in float32 (fp32 inputs use TF32 tensor cores only when
        torch.backends.cuda.matmul.allow_tf32 is True, else IEEE fp32). alpha, beta * c, bias and
        the activation are applied to the float32 accumulator; the single rounding point is the
        final store in out_dtype (torch's eager epilogue rounds after each step). K = 0 gives
        act(beta * c + bias), zero-filled without a kernel launch when c and bias are absent;
        empty outputs launch nothing. No autograd (use ``linear`` for a differentiable layer).
    Cost:
        2*M*N*K FLOP per batch entry; reads A, B, bias and c once and writes the output once in
        the ideal case (each A row-panel is re-read per tile column, mostly from L2).
    """
    op = "matmul"
    _check_operand(op, "input", input, None, (2, 3))
    _check_operand(op, "other", other, input, (2, 3))
    if input.shape[-1] != other.shape[-2]:
        raise ValueError(
            f"roofkit.{op}: inner dimensions differ: input {tuple(input.shape)} has K={input.shape[-1]}, "
            f"other {tuple(other.shape)} has K={other.shape[-2]}"
        )
    if input.dim() == 3 and other.dim() == 3 and 1 not in (input.shape[0], other.shape[0]) and input.shape[0] != other.shape[0]:
        raise ValueError(f"roofkit.{op}: batch dimensions {input.shape[0]} (input) and {other.shape[0]} (other) do not broadcast")
    shape = _out_shape(input, other)
    _check_bias(op, bias, input, other.shape[-1])
    alpha = _check_scalar(op, "alpha", alpha)
    beta = _check_scalar(op, "beta", beta)
    if c is not None:
        _check_operand(op, "c", c, input, (0, 1, 2, 3))
        try:
            ok = torch.broadcast_shapes(c.shape, shape) == torch.Size(shape)
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(f"roofkit.{op}: c of shape {tuple(c.shape)} does not broadcast to the output shape {shape}")
    if out_dtype is not None and out_dtype not in FLOAT_DTYPES:
        raise TypeError(f"roofkit.{op}: out_dtype must be None, torch.float32, torch.float16 or torch.bfloat16; got {out_dtype!r}")
    act = _check_activation(op, activation)
    return _matmul_op(input, other, c, bias, act, alpha, beta, out_dtype)


def linear(input, weight, bias=None, activation=None):
    """act(input @ weight.T + bias), mirroring torch.nn.functional.linear plus a fused activation.

    Args:
        input: (..., K) float32/float16/bfloat16 (1-D input (K,) gives (N,), as in torch).
        weight: (N, K) of the input dtype; bias: optional (N,).
        activation: None, "relu", "gelu", "gelu_tanh" or "silu".
    Returns:
        (..., N) tensor of the input dtype.
    Raises:
        TypeError / ValueError naming roofkit.linear and the argument (see ``matmul``).
    Numerics:
        Forward as ``matmul``. Backward (first order): the pre-activation is recomputed in fp32
        by the same kernel (nothing beyond the inputs is saved), dY' = dY * act'(pre) rounded to
        the input dtype, dX = dY' @ W and dW = dY'^T @ X by the matmul kernel (fp32
        accumulation), db = fp32 column sum of dY'.
    Cost:
        Forward 2*R*N*K FLOP (R = rows of input); backward 4*R*N*K (+2*R*N*K to recompute the
        pre-activation when an activation is fused).
    """
    op = "linear"
    _check_operand(op, "input", input, None, tuple(range(1, 9)))
    _check_operand(op, "weight", weight, input, (2,))
    if weight.shape[1] != input.shape[-1]:
        raise ValueError(
            f"roofkit.{op}: weight must have shape (N, {input.shape[-1]}) to match input's last dimension; got {tuple(weight.shape)}"
        )
    _check_bias(op, bias, input, weight.shape[0])
    act = _check_activation(op, activation)
    return _linear_op(input, weight, bias, act)


# ----------------------------------------------------------------------------- spec

_CPU = (torch.float32, torch.float16)  # tl.dot on bf16 does not run in the interpreter
_BF16 = (torch.bfloat16,)


def _make_inputs(case, dtype, generator, device) -> Inputs:
    m, n, k = case["shape"]
    ba, bb = case.get("batch", (None, None))
    a_shape = ((ba,) if ba is not None else ()) + (m, k)
    b_shape = ((bb,) if bb is not None else ()) + (k, n)
    a = random_tensor(a_shape, dtype, generator, device, case.get("dist", "normal"), layout=case.get("a_layout", "contiguous"))
    b = random_tensor(b_shape, dtype, generator, device, case.get("dist", "normal"), layout=case.get("b_layout", "contiguous"))
    kw = {}
    out_shape = _out_shape(a, b)
    if case.get("bias"):
        kw["bias"] = random_tensor((n,), dtype, generator, device)
    if case.get("c"):
        c_shape = case.get("c_shape", out_shape)
        kw["c"] = random_tensor(c_shape, dtype, generator, device, layout=case.get("c_layout", "contiguous"))
        kw["beta"] = case.get("beta", 1.0)
    for key in ("activation", "alpha", "out_dtype"):
        if case.get(key) is not None:
            kw[key] = case[key]
    return Inputs((a, b), kw)


def _c(name, tags=(), dtypes=_CPU, **p):
    return case(name, tags, dtypes=dtypes, **p)


CASES = [
    _c("small_odd_33x17x29", ["quick"], shape=(33, 17, 29)),
    _c("k1_9x7x1", shape=(9, 7, 1)),
    _c("m1_1x20x19", shape=(1, 20, 19)),
    _c("n1_21x1x18", shape=(21, 1, 18)),
    _c("transposed_a_19x23x37", shape=(19, 23, 37), a_layout="transposed"),
    _c("transposed_b_19x23x37", shape=(19, 23, 37), b_layout="transposed"),
    _c("strided_both_12x10x9", shape=(12, 10, 9), a_layout="strided", b_layout="offset"),
    _c("batched_3x9x10x11", shape=(9, 10, 11), batch=(3, 3)),
    _c("broadcast_a2d_9x10x11", shape=(9, 10, 11), batch=(None, 3)),
    _c("broadcast_b2d_9x10x11", shape=(9, 10, 11), batch=(3, None), bias=True),
    _c("broadcast_b2d_folded_c_9x10x11", shape=(9, 10, 11), batch=(3, None), c=True, beta=0.5),
    _c("broadcast_b2d_shared_c_9x10x11", shape=(9, 10, 11), batch=(3, None), c=True, c_shape=(9, 10), activation="relu"),
    _c("broadcast_batch1_9x10x11", shape=(9, 10, 11), batch=(1, 2)),
    _c("relu_bias_17x18x19", shape=(17, 18, 19), bias=True, activation="relu"),
    _c("gelu_bias_17x18x19", shape=(17, 18, 19), bias=True, activation="gelu"),
    _c("gelu_tanh_bias_17x18x19", shape=(17, 18, 19), bias=True, activation="gelu_tanh"),
    _c("silu_17x18x19", shape=(17, 18, 19), activation="silu"),
    _c("alpha_beta_c_13x14x15", shape=(13, 14, 15), alpha=0.5, c=True, beta=-2.0, bias=True),
    _c("c_row_broadcast_13x14x15", shape=(13, 14, 15), c=True, c_shape=(1, 14), beta=0.75),
    _c("c_transposed_batched_2x13x14x15", shape=(13, 14, 15), batch=(2, 2), c=True, c_layout="transposed"),
    _c("out_fp32_11x12x13", shape=(11, 12, 13), out_dtype=torch.float32, bias=True),
    _c("k0_with_c_bias_5x6x0", shape=(5, 6, 0), c=True, beta=0.5, bias=True, activation="silu"),
    _c("empty_m_0x6x5", ["quick"], shape=(0, 6, 5)),
    _c("empty_n_5x0x5", shape=(5, 0, 5)),
    _c("empty_batch_0x5x6x7", shape=(5, 6, 7), batch=(0, None)),
    # gpu: acceptance shapes (bf16 runs only on the GPU)
    case("gpu_upstream_512x512x512", ["gpu"], shape=(512, 512, 512), dtypes=(torch.float16,)),
    case("gpu_small_odd_bf16", ["gpu"], shape=(33, 17, 29), dtypes=_BF16, bias=True, activation="gelu"),
    case("gpu_prime_127x257x1021", ["gpu"], shape=(127, 257, 1021)),
    case("gpu_4095_cubed", ["gpu"], shape=(4095, 4095, 4095)),
    case("gpu_transposed_1000x1200x1500", ["gpu"], shape=(1000, 1200, 1500), a_layout="transposed", b_layout="transposed"),
    case("gpu_batched_bcast_8x256x384x200", ["gpu"], shape=(256, 384, 200), batch=(8, None), bias=True, activation="silu"),
    case("gpu_alpha_beta_c_777x555x333", ["gpu"], shape=(777, 555, 333), alpha=1.5, c=True, beta=0.25, activation="gelu_tanh"),
    case("gpu_m1_1x4096x4096", ["gpu"], shape=(1, 4096, 4096)),
    case("gpu_k1_2048x2048x1", ["gpu"], shape=(2048, 2048, 1), bias=True, activation="relu"),
]

SUITES = {
    # llama3-8b: hidden 4096, 32 q heads + 8 kv heads of 128 (qkv 6144), ffn 14336, vocab 128256;
    # 8192 tokens.
    "llama3-8b": [
        case("qkv_8192x6144x4096", shape=(8192, 6144, 4096), dtypes=_BF16),
        case("o_proj_8192x4096x4096", shape=(8192, 4096, 4096), dtypes=_BF16),
        case("ffn_up_8192x14336x4096", shape=(8192, 14336, 4096), dtypes=_BF16),
        case("ffn_up_silu_8192x14336x4096", shape=(8192, 14336, 4096), dtypes=_BF16, activation="silu"),
        case("ffn_down_8192x4096x14336", shape=(8192, 4096, 14336), dtypes=_BF16),
        case("lm_head_8192x128256x4096", shape=(8192, 128256, 4096), dtypes=_BF16),
    ],
    "edge": [
        case("fp32_4095_cubed", shape=(4095, 4095, 4095), dtypes=(torch.float32,)),
        case("decode_m16_16x14336x4096", shape=(16, 14336, 4096), dtypes=_BF16),
        case("prime_127x257x1021", shape=(127, 257, 1021), dtypes=_BF16),
    ],
}

SPEC = OpSpec(
    name="matmul",
    impl=matmul,
    reference=matmul_reference,
    torch_impl=matmul_torch,
    make_inputs=_make_inputs,
    cost=matmul_cost,
    reduction_length=lambda case: max(1, case["shape"][2]),
    dtypes=FLOAT_DTYPES,
    cases=CASES,
    suites=SUITES,
    baselines={"torch": lambda: matmul_torch, "torch.compile": baselines.compiled(matmul_torch)},
    matrix=True,
    marker="matmul",
)

SPECS = (SPEC,)
