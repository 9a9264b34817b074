"""Optimizers whose update runs in roofkit's kernels: :class:`AdamW`.

``roofkit.optim.AdamW`` is ``torch.optim.AdamW`` (same constructor, hyperparameters, state and
state dict: a checkpoint moves between the two) whose step updates each parameter in one
kernel pass (:mod:`roofkit.ops.adamw`): read the parameter, its gradient and both moments, write
the parameter and both moments, in float32 with one rounding per stored value, as torch's fused
AdamW computes. What the kernel does not cover runs torch's own step, unchanged: ``amsgrad``,
``capturable``, ``differentiable``, a learning rate or betas held in a CUDA tensor, sparse or
non-contiguous gradients or parameters, a gradient of another dtype than its parameter,
distributed (DTensor) parameters, parameters on a device roofkit's kernels do not run on.
The step is eager: it reads the step count on the host, so it cannot be captured in a CUDA graph
(use ``capturable=True``, which runs torch's step).
"""

from __future__ import annotations

import torch

from .ops._common import FLOAT_DTYPES, interpreter_active
from .ops.adamw import adamw_update_

__all__ = ["AdamW"]


def _plain(t) -> bool:
    return type(t) is torch.Tensor or type(t) is torch.nn.Parameter


def _number(x) -> float | None:
    """x as a float, or None when reading it would need a device sync (a CUDA tensor)."""
    if isinstance(x, torch.Tensor):
        return None if x.is_cuda or x.numel() != 1 else float(x)
    return float(x)


class AdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` with the update of each parameter in one roofkit kernel pass.

    Args: those of ``torch.optim.AdamW``. ``fused`` and ``foreach`` choose torch's own path for
    what falls back to it (see the module's notes); the parameters roofkit updates take its
    kernel either way.
    """

    def _kernel_ok(self, group: dict) -> bool:
        return not (group.get("amsgrad") or group.get("capturable") or group.get("differentiable"))

    @staticmethod
    def _param_ok(p: torch.Tensor) -> bool:
        g = p.grad
        if not (_plain(p) and _plain(g) and p.dtype in FLOAT_DTYPES and g.dtype == p.dtype
                and g.layout == torch.strided and p.is_contiguous() and g.is_contiguous() and g.shape == p.shape
                and g.device == p.device):
            return False
        return p.is_cuda or (p.device.type == "cpu" and interpreter_active())

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        rest = []  # (group, params) that torch's step takes
        for group in self.param_groups:
            lr, beta1, beta2 = _number(group["lr"]), *(_number(b) for b in group["betas"])
            take = self._kernel_ok(group) and None not in (lr, beta1, beta2)
            left = []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if not take or not self._param_ok(p):
                    left.append(p)
                    continue
                if p.is_cuda and torch.cuda.is_current_stream_capturing():
                    raise RuntimeError("roofkit.optim.AdamW: step() is being captured in a CUDA graph; it reads the "
                                       "step count on the host (pass capturable=True for torch's capturable step)")
                state = self.state[p]
                if len(state) == 0:  # as torch's AdamW starts it (a state dict moves between the two)
                    state["step"] = torch.tensor(0.0, dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                m, v, step_t = state["exp_avg"], state["exp_avg_sq"], state["step"]
                if not (m.is_contiguous() and v.is_contiguous() and m.dtype == p.dtype == v.dtype
                        and m.device == p.device == v.device and not step_t.is_cuda):
                    left.append(p)
                    continue
                step_t += 1
                adamw_update_(p, p.grad, m, v, lr=lr, beta1=beta1, beta2=beta2, eps=group["eps"],
                              weight_decay=group["weight_decay"], step=int(step_t.item()),
                              maximize=group["maximize"])
            if left:
                rest.append({**group, "params": left})
        if rest:
            groups = self.param_groups
            self.param_groups = rest
            try:
                _torch_step(self)
            finally:
                self.param_groups = groups
        return loss


def _torch_step(opt: AdamW) -> None:
    """torch's own step function for ``opt``, without the step hooks torch wraps around it once
    any of its optimizers has been made (this step's hooks have run already: they run once)."""
    fn = next(vars(cls)["step"] for cls in AdamW.__mro__[1:] if "step" in vars(cls))
    while getattr(fn, "hooked", False) and hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    fn(opt)
