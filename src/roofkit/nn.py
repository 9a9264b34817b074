"""Modules over roofkit's ops, drop-in for their torch / transformers counterparts.

Each keeps its counterpart's constructor, parameters, buffers and state-dict keys (a state dict
saved from one loads into the other, strict), and only its ``forward`` differs:

- :class:`RMSNorm`, :class:`LayerNorm`, :class:`Linear`, :class:`CrossEntropyLoss`: subclasses
  of ``torch.nn.RMSNorm`` / ``LayerNorm`` / ``Linear`` / ``CrossEntropyLoss`` (``Linear`` also takes
  ``activation``, fused into the GEMM's epilogue);
- :class:`SwiGLU` / :class:`GeGLU`: the gated MLP of Llama / Gemma (``gate_proj``, ``up_proj``,
  ``down_proj``, as transformers names them), the gated product through roofkit, the projections
  through torch's GEMM;
- :class:`RotaryEmbedding`: transformers' default rotary embedding (``forward(x, position_ids)``
  returns ``(cos, sin)``), with :meth:`RotaryEmbedding.rotate` through :func:`roofkit.rope`;
- :class:`LinearCrossEntropyLoss`: :func:`roofkit.linear_cross_entropy` as a loss module.

The numerics are those of the ops (float32 statistics, one rounding per output); see each op's
docstring.
"""

from __future__ import annotations

import torch

import roofkit
from roofkit.ops._runtime import needs_grad
from roofkit.ops.glu import glu_linear, glu_linear_stands_for

__all__ = ["RMSNorm", "LayerNorm", "Linear", "CrossEntropyLoss", "LinearCrossEntropyLoss", "SwiGLU", "GeGLU",
           "RotaryEmbedding"]


class RMSNorm(torch.nn.RMSNorm):
    """``torch.nn.RMSNorm`` through :func:`roofkit.rms_norm` (same arguments and parameters)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return roofkit.rms_norm(input, self.normalized_shape, self.weight, self.eps)


class LayerNorm(torch.nn.LayerNorm):
    """``torch.nn.LayerNorm`` through :func:`roofkit.layer_norm` (same arguments and parameters)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return roofkit.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)


class Linear(torch.nn.Linear):
    """``torch.nn.Linear`` through :func:`roofkit.linear`, with an optional ``activation`` (None,
    "relu", "gelu", "gelu_tanh" or "silu") applied in the GEMM's epilogue."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None,
                 activation: str | None = None):
        super().__init__(in_features, out_features, bias, device, dtype)
        if activation not in (None, "relu", "gelu", "gelu_tanh", "silu"):
            raise ValueError(f"roofkit.nn.Linear: activation must be None, 'relu', 'gelu', 'gelu_tanh' or 'silu'; "
                             f"got {activation!r}")
        self.activation = activation

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return roofkit.linear(input, self.weight, self.bias, activation=self.activation)

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", activation={self.activation!r}" if self.activation else "")


class CrossEntropyLoss(torch.nn.CrossEntropyLoss):
    """``torch.nn.CrossEntropyLoss`` through :func:`roofkit.cross_entropy`: class-index targets,
    (N, C) or (C,) logits (what roofkit.cross_entropy takes; it raises for the rest)."""

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return roofkit.cross_entropy(input, target, self.weight, self.ignore_index, self.reduction,
                                     self.label_smoothing)


class LinearCrossEntropyLoss(torch.nn.Module):
    """``cross_entropy(linear(input, linear_weight, linear_bias), target)`` without the full
    logits, as :func:`roofkit.linear_cross_entropy` (the output layer's weight is passed in, so
    the model keeps owning it)."""

    def __init__(self, weight: torch.Tensor | None = None, ignore_index: int | None = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__()
        self.register_buffer("weight", weight)
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, label_smoothing

    def forward(self, input: torch.Tensor, linear_weight: torch.Tensor, target: torch.Tensor,
                linear_bias: torch.Tensor | None = None) -> torch.Tensor:
        return roofkit.linear_cross_entropy(input, linear_weight, target, linear_bias=linear_bias, weight=self.weight,
                                            reduction=self.reduction, ignore_index=self.ignore_index,
                                            label_smoothing=self.label_smoothing)


def gated_mlp_forward(mlp: torch.nn.Module, x: torch.Tensor, activation: str, product) -> torch.Tensor:
    """``mlp.down_proj(product(mlp.gate_proj(x), mlp.up_proj(x)))``; with a gradient wanted and a
    ``down_proj`` that :func:`roofkit.ops.glu.glu_linear_stands_for`, the product and the projection
    through :func:`roofkit.ops.glu.glu_linear` (``activation``: its name of the product), which
    makes the product again in the backward instead of saving it."""
    gate, up = mlp.gate_proj(x), mlp.up_proj(x)
    down = mlp.down_proj
    if needs_grad(gate, up, down.weight, down.bias) and glu_linear_stands_for(down, gate.dtype):  # (cheap test first)
        return glu_linear(gate, up, down.weight, down.bias, activation=activation)
    return down(product(gate, up))


class SwiGLU(torch.nn.Module):
    """The gated MLP of Llama, Mistral and Qwen: ``down_proj(silu(gate_proj(x)) * up_proj(x))``,
    parameters named as transformers' ``LlamaMLP`` (its state dict loads as it is); the product
    through :func:`roofkit.swiglu`. With a gradient wanted, the product and ``down_proj`` go through
    :func:`roofkit.ops.glu.glu_linear`: the product is made again in the backward, not saved."""

    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False, device=None, dtype=None):
        super().__init__()
        kw = dict(bias=bias, device=device, dtype=dtype)
        self.gate_proj = torch.nn.Linear(hidden_size, intermediate_size, **kw)
        self.up_proj = torch.nn.Linear(hidden_size, intermediate_size, **kw)
        self.down_proj = torch.nn.Linear(intermediate_size, hidden_size, **kw)

    _activation = "silu"

    def _product(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return roofkit.swiglu(gate, up)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gated_mlp_forward(self, x, self._activation, self._product)


class GeGLU(SwiGLU):
    """Gemma's gated MLP: ``down_proj(gelu(gate_proj(x), approximate) * up_proj(x))``
    (``approximate="tanh"`` is Gemma's gelu_pytorch_tanh), through :func:`roofkit.geglu`."""

    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False, device=None, dtype=None,
                 approximate: str = "tanh"):
        super().__init__(hidden_size, intermediate_size, bias, device, dtype)
        if approximate not in ("none", "tanh"):
            raise ValueError(f"roofkit.nn.GeGLU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate
        self._activation = "gelu_tanh" if approximate == "tanh" else "gelu"

    def _product(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return roofkit.geglu(gate, up, approximate=self.approximate)


class RotaryEmbedding(torch.nn.Module):
    """transformers' default rotary embedding (``rope_type="default"``): ``forward(x,
    position_ids)`` returns ``(cos, sin)`` of shape (B, S, dim) in x's dtype, computed in float32
    from the non-persistent buffer ``inv_freq`` = 1 / base ** (arange(0, dim, 2) / dim);
    :meth:`rotate` rotates q and k by them through :func:`roofkit.rope` (transformers'
    ``apply_rotary_pos_emb``; ``Module.apply`` keeps its own meaning)."""

    def __init__(self, dim: int, base: float = 10000.0, device=None):
        super().__init__()
        if dim <= 0 or dim % 2:
            raise ValueError(f"roofkit.nn.RotaryEmbedding: dim must be a positive even int, got {dim}")
        self.dim, self.base = dim, base
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
        pos = position_ids[:, None, :].float()
        with torch.autocast(device_type=x.device.type if x.device.type != "mps" else "cpu", enabled=False):
            freqs = (inv.float() @ pos.float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos(), emb.sin()
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)

    @staticmethod
    def rotate(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
              unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """transformers' ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=...)`` through
        :func:`roofkit.rope`."""
        return roofkit.rope(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, base={self.base}"
