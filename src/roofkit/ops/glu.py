"""Gated activations of LLM MLPs, forward and backward: swiglu and geglu.

    swiglu(gate, up) = silu(gate) * up                      silu(g) = g * sigmoid(g)
    geglu(gate, up, approximate) = gelu(gate, approximate) * up

One elementwise pass over flat, contiguous views: the forward reads gate and up once and writes
the product once, in float32 arithmetic with one rounding to the output dtype (the unfused torch
expression rounds twice: the activation, then the product). The backward recomputes the
activation from the saved inputs (nothing else is saved) and writes both gradients in one pass:

    d gate = dy * up * act'(gate)        d up = dy * act(gate)

Source: Shazeer, "GLU Variants Improve Transformer" (2020); Hendrycks & Gimpel (GELU, 2016).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from ..harness import baselines
from ..harness.inputs import random_tensor
from ..harness.spec import Cost, Inputs, OpSpec, case
from ._common import FLOAT_DTYPES, bf16_rne, cdiv, check_same_device, check_same_dtype, check_tensor
from ._jit import _round_for_store
from ._runtime import Op, cached_launch, planned

# The activation, a compile-time constant of the kernels.
SILU, GELU, GELU_TANH = 0, 1, 2
_GELU_KINDS = {"none": GELU, "tanh": GELU_TANH}
BLOCK = 2048  # elements per program
NUM_WARPS = 8


# ----------------------------------------------------------------------------- reference, cost


def swiglu_reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up in float64."""
    return F.silu(gate.to(torch.float64)) * up.to(torch.float64)


def geglu_reference(gate: torch.Tensor, up: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """gelu(gate, approximate) * up in float64 (exact GELU of +inf taken as +inf, as CUDA torch
    gives it: CPU torch gives NaN)."""
    g = gate.to(torch.float64)
    y = F.gelu(g, approximate=approximate)
    y = torch.where(g == math.inf, g, y)
    return y * up.to(torch.float64)


def _swiglu_torch(gate, up):
    return F.silu(gate) * up


def _geglu_torch(gate, up, approximate="none"):
    return F.gelu(gate, approximate=approximate) * up


def glu_cost(case, dtype: torch.dtype) -> Cost:
    """Forward: read gate and up, write the product (3 elements of traffic per element); about
    8 FLOP per element (the activation's exp / erf counted as one). ``fwd_bwd`` adds the backward:
    read gate, up and dy, write two gradients (5 more); about 14 FLOP."""
    numel = math.prod(case["shape"])
    size = torch.empty((), dtype=dtype).element_size()
    if case.get("mode", "fwd") == "fwd_bwd":
        return Cost(flops=22 * numel, bytes=8 * numel * size)
    return Cost(flops=8 * numel, bytes=3 * numel * size)


# ----------------------------------------------------------------------------- kernels


@triton.jit
def _act_and_grad(g, ACT: tl.constexpr, GRAD: tl.constexpr):
    """(act(g), act'(g)) in float32; act'(g) is 0 unless GRAD."""
    if ACT == 0:  # silu, as torch writes it: g / (1 + exp(-g)) (silu(-inf) = NaN, silu(+inf) = +inf)
        s = 1.0 / (1.0 + tl.exp(-g))
        a = g / (1.0 + tl.exp(-g))
        d = s * (1.0 + g * (1.0 - s)) if GRAD else s
    elif ACT == 1:  # exact gelu
        cdf = 0.5 * (1.0 + tl.math.erf(g * 0.7071067811865476))
        a = g * cdf
        d = cdf + g * tl.exp(-0.5 * g * g) * 0.3989422804014327 if GRAD else cdf
    else:  # tanh approximation, as 0.5 * (1 + tanh(u)) = sigmoid(2u): no cancellation where tanh(u) ~ -1
        u2 = 1.5957691216057308 * (g + 0.044715 * g * g * g)
        s = 1.0 / (1.0 + tl.exp(-u2))
        a = g * s
        # d/dg: s + g * s * (1 - s) * 2u'(g), 1 - tanh^2 = 4 s (1 - s)
        d = s + g * s * (1.0 - s) * 1.5957691216057308 * (1.0 + 0.134145 * g * g) if GRAD else s
    return a, d


@triton.jit
def _glu_fwd_kernel(gate_ptr, up_ptr, y_ptr, n, ACT: tl.constexpr, BF16_RNE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    a, _ = _act_and_grad(g, ACT, False)
    tl.store(y_ptr + offs, _round_for_store(a * u, y_ptr, BF16_RNE), mask=mask)


@triton.jit
def _glu_bwd_kernel(dy_ptr, gate_ptr, up_ptr, dgate_ptr, dup_ptr, y_ptr, n, ACT: tl.constexpr, STORE_Y: tl.constexpr,
                    BF16_RNE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    a, d = _act_and_grad(g, ACT, True)
    tl.store(dgate_ptr + offs, _round_for_store(dy * u * d, dgate_ptr, BF16_RNE), mask=mask)
    tl.store(dup_ptr + offs, _round_for_store(dy * a, dup_ptr, BF16_RNE), mask=mask)
    if STORE_Y:  # the forward's product again (the same arithmetic, the same rounding)
        tl.store(y_ptr + offs, _round_for_store(a * u, y_ptr, BF16_RNE), mask=mask)


# ----------------------------------------------------------------------------- host launchers

_LAUNCHES: dict = {}


def _glu_fwd(gate: torch.Tensor, up: torch.Tensor, act: int) -> torch.Tensor:
    y = torch.empty_like(gate)  # contiguous: the public function passes contiguous operands
    n = gate.numel()
    if n:
        cached_launch(_LAUNCHES, _glu_fwd_kernel, cdiv(n, BLOCK), ACT=act, BF16_RNE=bf16_rne(gate.dtype),
                      BLOCK=BLOCK, num_warps=NUM_WARPS)(gate, up, y, n)
    return y


def _glu_fwd_fake(gate, up, act):
    return torch.empty_like(gate)


def _glu_bwd_into(dy, gate, up, dgate, dup, y, act: int) -> None:
    """Both gradients from the product's gradient ``dy``; the product itself into ``y`` unless None."""
    n = gate.numel()
    if n:
        cached_launch(_LAUNCHES, _glu_bwd_kernel, cdiv(n, BLOCK), ACT=act, STORE_Y=y is not None,
                      BF16_RNE=bf16_rne(gate.dtype), BLOCK=BLOCK, num_warps=NUM_WARPS)(
            dy, gate, up, dgate, dup, dgate if y is None else y, n)


def _glu_bwd(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, act: int) -> tuple[torch.Tensor, torch.Tensor]:
    dgate, dup = torch.empty_like(gate), torch.empty_like(up)
    _glu_bwd_into(dy, gate, up, dgate, dup, None, act)
    return dgate, dup


def _glu_bwd_fake(dy, gate, up, act):
    return torch.empty_like(gate), torch.empty_like(up)


def _setup_context(ctx, inputs, output):
    gate, up, act = inputs
    ctx.act = act
    ctx.save_for_backward(gate, up)


def _backward(ctx, dy):
    gate, up = ctx.saved_tensors
    dgate, dup = _glu_bwd_op(dy.contiguous(), gate, up, ctx.act)
    return dgate, dup, None


_glu_bwd_op = Op("roofkit::glu_bwd", _glu_bwd, _glu_bwd_fake)
_glu_fwd_op = Op("roofkit::glu_fwd", _glu_fwd, _glu_fwd_fake).autograd(_setup_context, _backward)


# ------------------------------------------------- the gated product and the projection after it
# F.linear(glu(gate, up), weight, bias) with the product left out of what is saved: the
# backward makes it again in the pass that forms the gates' gradients (one more write) and hands
# it to the weight-gradient GEMM. Saved: gate, up (saved by the product anyway) and the weight;
# not saved: the (tokens x intermediate) product, the largest activation of a gated MLP.


def _glu_linear_fwd(gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                    act: int) -> torch.Tensor:
    return F.linear(_glu_fwd(gate, up, act), weight, bias)


def _glu_linear_fwd_fake(gate, up, weight, bias, act):
    return gate.new_empty((*gate.shape[:-1], weight.shape[0]))


def _glu_linear_bwd(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor, act: int,
                    grad_weight: bool, grad_bias: bool
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    tokens = math.prod(gate.shape[:-1])  # (not reshape(-1, ...): a side of 0 features is legal)
    dy = dy.reshape(tokens, weight.shape[0])
    dh = dy @ weight  # (tokens, intermediate), contiguous
    dgate, dup = torch.empty_like(gate), torch.empty_like(up)
    y = torch.empty_like(gate) if grad_weight else None
    _glu_bwd_into(dh, gate, up, dgate, dup, y, act)
    del dh
    dw = dy.t() @ y.reshape(tokens, weight.shape[1]) if grad_weight else weight.new_empty((0,))
    db = dy.sum(0) if grad_bias else weight.new_empty((0,))
    return dgate, dup, dw, db


def _glu_linear_bwd_fake(dy, gate, up, weight, act, grad_weight, grad_bias):
    return (torch.empty_like(gate), torch.empty_like(up),
            torch.empty_like(weight) if grad_weight else weight.new_empty((0,)),
            weight.new_empty((weight.shape[0],) if grad_bias else (0,)))


def _linear_setup_context(ctx, inputs, output):
    gate, up, weight, bias, act = inputs
    ctx.act, ctx.has_bias = act, bias is not None
    ctx.save_for_backward(gate, up, weight)


def _linear_backward(ctx, dy):
    gate, up, weight = ctx.saved_tensors
    need = ctx.needs_input_grad
    dgate, dup, dw, db = _glu_linear_bwd_op(dy.contiguous(), gate, up, weight, ctx.act, need[2],
                                            ctx.has_bias and need[3])
    return dgate, dup, dw if need[2] else None, db if ctx.has_bias and need[3] else None, None


_glu_linear_bwd_op = Op("roofkit::glu_linear_bwd", _glu_linear_bwd, _glu_linear_bwd_fake)
_glu_linear_fwd_op = Op("roofkit::glu_linear_fwd", _glu_linear_fwd, _glu_linear_fwd_fake).autograd(
    _linear_setup_context, _linear_backward)

_ACTIVATIONS = {"silu": SILU, "gelu": GELU, "gelu_tanh": GELU_TANH}


def glu_linear(gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
               activation: str = "silu") -> torch.Tensor:
    """A gated MLP's last two steps, ``F.linear(act(gate) * up, weight, bias)``, without saving
    the product for the backward: the MLP's down projection after :func:`swiglu`
    (``activation="silu"``) or :func:`geglu` (``"gelu"``, ``"gelu_tanh"``).

    Args:
        gate, up: as :func:`swiglu`; the last dimension is the projection's input features.
        weight: (out_features, in_features), bias: (out_features,) or None, in gate's dtype and
            on its device (``torch.nn.Linear``'s parameters).
    Returns:
        ``(*gate.shape[:-1], out_features)`` in gate's dtype: what ``F.linear`` of the rounded
        product returns.
    Numerics:
        The product is rounded once to the input dtype, as :func:`swiglu` rounds it; the backward
        makes the same product again (the same arithmetic: the same bits) for the weight's
        gradient, and forms the gates' gradients in the same pass. The projection and its two
        gradient GEMMs are torch's.
    Memory:
        Saves gate, up and the weight: the product (tokens x in_features) is not kept between the
        forward and the backward. The backward writes it once more (one pass over tokens x
        in_features elements). Under autocast it runs as ``F.linear(swiglu(gate, up), ...)``
        (autocast's casts of the projection's operands), which saves the product.
    """
    if activation not in _ACTIVATIONS:
        raise ValueError(f"roofkit.glu_linear: activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
    gate, up = _prepare("glu_linear", gate, up)
    check_tensor("glu_linear", "weight", weight)
    check_same_device("glu_linear", "weight", weight, gate)
    check_same_dtype("glu_linear", "weight", weight, gate, "gate")
    if gate.dim() == 0 or weight.dim() != 2 or weight.shape[1] != gate.shape[-1]:
        raise ValueError(f"roofkit.glu_linear: weight must be (out_features, in_features) with in_features the last "
                         f"dimension of gate {tuple(gate.shape)}; got {tuple(weight.shape)}")
    if bias is not None:
        check_tensor("glu_linear", "bias", bias)
        check_same_device("glu_linear", "bias", bias, gate)
        check_same_dtype("glu_linear", "bias", bias, gate, "gate")
        if bias.shape != (weight.shape[0],):
            raise ValueError(f"roofkit.glu_linear: bias must be ({weight.shape[0]},); got {tuple(bias.shape)}")
    if torch.is_autocast_enabled(gate.device.type):
        # (autocast casts the projection's operands: the unfused form, which saves the product)
        return F.linear(_glu_fwd_op.apply(gate, up, _ACTIVATIONS[activation]), weight, bias)
    return _glu_linear_fwd_op.apply(gate, up, weight, bias, _ACTIVATIONS[activation])


_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")


def glu_linear_stands_for(linear: torch.nn.Module, dtype: torch.dtype) -> bool:
    """Whether ``glu_linear(gate, up, linear.weight, linear.bias)`` computes what calling
    ``linear`` on the product would, hooks included: a ``torch.nn.Linear`` itself (not a subclass or
    a wrapper, as adapters are), with parameters of ``dtype``, no hook of its own and no global
    module hook, outside autocast."""
    module_hooks = torch.nn.modules.module
    return (type(linear) is torch.nn.Linear and linear.weight.dtype == dtype
            and (linear.bias is None or linear.bias.dtype == dtype)
            and not (linear._forward_hooks or linear._forward_pre_hooks or linear._backward_hooks
                     or linear._backward_pre_hooks)
            and not any(getattr(module_hooks, name, None) for name in _GLOBAL_HOOKS)
            and not torch.is_autocast_enabled(linear.weight.device.type))


# ----------------------------------------------------------------------------- public functions


def _prepare(op: str, gate, up) -> tuple[torch.Tensor, torch.Tensor]:
    check_tensor(op, "gate", gate)
    check_tensor(op, "up", up)
    check_same_device(op, "up", up, gate)
    check_same_dtype(op, "up", up, gate, "gate")
    if up.shape != gate.shape:
        raise ValueError(f"roofkit.{op}: gate and up must have the same shape, got {tuple(gate.shape)} and "
                         f"{tuple(up.shape)} (no broadcasting)")
    return gate.contiguous(), up.contiguous()


@planned
def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """SwiGLU's gated product: ``silu(gate) * up``, the activation of Llama-style MLPs.

    Args:
        gate, up: float32, float16 or bfloat16 tensors of the same shape, dtype and device (any
            strides; non-contiguous operands are copied first), on CUDA (or on CPU with
            TRITON_INTERPRET=1).
    Returns:
        A contiguous tensor of their shape and dtype.
    Raises:
        TypeError: an operand not a float32/float16/bfloat16 tensor, or dtypes that differ.
        ValueError: shapes that differ (no broadcasting), tensors on different or unsupported devices.
    Numerics:
        float32 arithmetic, one rounding to the output dtype (``F.silu(gate) * up`` rounds twice).
        NaN and infinities behave as in the torch expression (silu(-inf) = NaN, silu(+inf) =
        +inf). The backward recomputes silu from gate and up (nothing else is saved) and returns
        the gradients of both; first order only. Deterministic.
    Cost:
        Forward reads gate and up and writes the result once (3 elements per element); backward
        reads gate, up and the output's gradient and writes two gradients (5).
    Source:
        Shazeer 2020 (GLU variants).
    """
    gate, up = _prepare("swiglu", gate, up)
    return _glu_fwd_op.apply(gate, up, SILU)


@planned
def geglu(gate: torch.Tensor, up: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GeGLU's gated product: ``gelu(gate, approximate=approximate) * up`` (Gemma-style MLPs).

    Args:
        gate, up: as :func:`swiglu`.
        approximate: ``"none"`` (exact GELU, with erf) or ``"tanh"``, as ``torch.nn.functional.gelu``.
    Returns:
        A contiguous tensor of their shape and dtype.
    Raises:
        As :func:`swiglu`; ValueError for another ``approximate``.
    Numerics:
        As :func:`swiglu`. NaN propagates and gelu(-inf) is NaN, as in torch; the exact GELU of
        +inf is +inf, as CUDA torch computes it (CPU torch returns NaN there).
    Cost:
        As :func:`swiglu`.
    Source:
        Shazeer 2020 (GLU variants); Hendrycks & Gimpel 2016 (GELU).
    """
    if not isinstance(approximate, str) or approximate not in _GELU_KINDS:
        raise ValueError(f"roofkit.geglu: approximate must be 'none' or 'tanh', got {approximate!r}")
    gate, up = _prepare("geglu", gate, up)
    return _glu_fwd_op.apply(gate, up, _GELU_KINDS[approximate])


# ----------------------------------------------------------------------------- spec


def _make_inputs(case, dtype, generator, device) -> Inputs:
    shape = case["shape"]
    gate = random_tensor(shape, dtype, generator, device, case.get("dist", "normal"),
                         magnitude=case.get("magnitude", 10.0), layout=case.get("layout", "contiguous"))
    up = random_tensor(shape, dtype, generator, device, case.get("up_dist", "normal"),
                       layout=case.get("up_layout", "contiguous"))
    kwargs = {"approximate": case.get("approximate")} if case.get("approximate") else {}
    return Inputs((gate, up), kwargs)


_BF16 = (torch.bfloat16,)
_F32 = (torch.float32,)

# Layouts, broadcast-free shapes and the gradient's layout go through the same host code for
# every dtype and both ops: float32 swiglu covers them; the numeric cases run in every dtype.
_LAYOUT_CASES = [
    case("transposed_16x33", shape=(16, 33), layout="transposed", dtypes=_F32),
    case("offset_9x65", shape=(9, 65), layout="offset", up_layout="strided", dtypes=_F32),
    case("expanded_up_5x40", shape=(5, 40), up_layout="expanded", dtypes=_F32),
    case("grad_transposed_12x40", shape=(12, 40), grad_layout="transposed", dtypes=_F32),
    case("leading_dims_2x3x50", shape=(2, 3, 50), dtypes=_F32),
]
_NUMERIC_CASES = [
    case("scalar", ["quick"], shape=()),
    case("odd_3x7", ["quick"], shape=(3, 7)),
    case("block_tail_2x2049", shape=(2, 2049)),
    case("large_magnitude_8x300", shape=(8, 300), dist="large"),
    case("small_values_8x64", shape=(8, 64), dist="large", magnitude=1e-3),
    case("ties_8x129", shape=(8, 129), dist="ties"),
    case("arange_3x400", shape=(3, 400), dist="arange"),
    case("nan_8x129", shape=(8, 129), dist="nan", grad=False),
    case("neg_inf_8x129", shape=(8, 129), dist="neg_inf", grad=False),
    case("pos_inf_8x129", shape=(8, 129), dist="pos_inf", grad=False),
    case("up_nan_8x129", shape=(8, 129), up_dist="nan", grad=False, dtypes=_F32),
    case("empty_0x7", ["quick"], shape=(0, 7)),
    case("gpu_4096x14336", ["gpu"], shape=(4096, 14336)),
    case("gpu_fp32_1823x781", ["gpu"], shape=(1823, 781), dtypes=_F32),
    case("gpu_transposed_2048x3000", ["gpu"], shape=(2048, 3000), layout="transposed"),
    case("gpu_over_2pow31_elements", ["gpu", "slow"], shape=(150000, 14336), dtypes=_BF16, grad=False),
]
CASES = _NUMERIC_CASES[:2] + _LAYOUT_CASES + _NUMERIC_CASES[2:]

_GEGLU_CASES = _NUMERIC_CASES + [
    case("tanh_odd_3x7", ["quick"], shape=(3, 7), approximate="tanh"),
    case("tanh_large_magnitude_8x300", shape=(8, 300), dist="large", approximate="tanh"),
    case("tanh_inf_8x129", shape=(8, 129), dist="pos_inf", approximate="tanh", grad=False),
    case("tanh_gpu_4096x16384", ["gpu"], shape=(4096, 16384), approximate="tanh"),
]


def _suites(intermediate: dict[str, int], approximate: str | None = None) -> dict:
    extra = {"approximate": approximate} if approximate else {}
    out = {}
    for suite, width in intermediate.items():
        out[suite] = [
            case(f"mlp_8192x{width}", shape=(8192, width), dtypes=_BF16, **extra),
            case(f"mlp_8192x{width}_fwd_bwd", shape=(8192, width), dtypes=_BF16, mode="fwd_bwd", **extra),
        ]
    out["host"] = [
        case("mlp_8x14336", shape=(8, 14336), dtypes=_BF16, **extra),
        case("mlp_8x14336_fwd_bwd", shape=(8, 14336), dtypes=_BF16, mode="fwd_bwd", **extra),
    ]
    return out


def _liger_swiglu():
    try:
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    except ImportError:
        return None
    return LigerSiLUMulFunction.apply


def _liger_geglu():
    try:
        from liger_kernel.ops.geglu import LigerGELUMulFunction
    except ImportError:
        return None

    def run(gate, up, approximate="none"):
        if approximate != "tanh":
            raise NotImplementedError("Liger's GeGLU is the tanh approximation only")
        return LigerGELUMulFunction.apply(gate, up)

    return run


SWIGLU_SPEC = OpSpec(
    name="swiglu",
    impl=swiglu,
    reference=swiglu_reference,
    torch_impl=_swiglu_torch,
    make_inputs=_make_inputs,
    cost=glu_cost,
    dtypes=FLOAT_DTYPES,
    cases=CASES,
    # llama3-8b / llama3-70b / qwen2-7b MLP widths (intermediate 14336 / 28672 / 18944), 8192 tokens.
    suites=_suites({"llama3-8b": 14336, "llama3-70b": 28672, "qwen2-7b": 18944}),
    baselines={**baselines.eager_and_compiled(_swiglu_torch),
               "liger": _liger_swiglu, "flaggems": baselines.flaggems(_swiglu_torch)},
    grad_args=(0, 1),
    marker="glu",
)

GEGLU_SPEC = SWIGLU_SPEC.sibling(
    name="geglu",
    impl=geglu,
    reference=geglu_reference,
    torch_impl=_geglu_torch,
    cases=_GEGLU_CASES,
    # the tanh GELU at llama3-8b's MLP width, and gemma-7b's (intermediate 24576).
    suites=_suites({"llama3-8b": 14336, "gemma-7b": 24576}, approximate="tanh"),
    baselines={**baselines.eager_and_compiled(_geglu_torch),
               "liger": _liger_geglu, "flaggems": baselines.flaggems(_geglu_torch)},
)

SPECS = (SWIGLU_SPEC, GEGLU_SPEC)


# The tunables of this family's heuristics: what roofkit.config.override may set.
TUNABLES = ("BLOCK", "NUM_WARPS")
