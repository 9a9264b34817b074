"""Named input distributions and memory layouts shared by every op's ``make_inputs``.

Distributions: ``normal`` (standard normal), ``large`` (normal times a magnitude that stays finite
in the dtype, 1e4 by default), ``neg_inf`` (normal with about 10% of entries -inf and, for 2-D and
larger, one row entirely -inf), ``pos_inf`` (normal with about 3% +inf), ``nan`` (normal with a few NaN), ``ties`` (small integers, so
maxima are tied), ``arange`` (a structured ramp that exposes index mistakes), ``shifted`` (normal
plus 2: a non-zero mean, so long sums are well conditioned and their error reflects the
summation, not cancellation).
Layouts: ``contiguous``, ``transposed`` (last two dims swapped in memory), ``offset`` (a view with
a non-zero storage offset), ``strided`` (every other element of the last dim), ``expanded``
(the first row broadcast to every row with stride 0: changes the values, all rows equal).
"""

from __future__ import annotations

import torch

DISTRIBUTIONS = ("normal", "large", "neg_inf", "pos_inf", "nan", "ties", "arange", "shifted")
LAYOUTS = ("contiguous", "transposed", "offset", "strided", "expanded")


def random_tensor(
    shape,
    dtype: torch.dtype,
    generator: torch.Generator,
    device,
    dist: str = "normal",
    *,
    magnitude: float = 1e4,
    layout: str = "contiguous",
) -> torch.Tensor:
    """A fresh tensor of ``shape`` drawn from ``dist`` (computed in float32, then cast)."""
    shape = tuple(shape)
    gdev = generator.device
    if dist == "ties":
        x = torch.randint(-2, 3, shape, generator=generator, device=gdev).to(torch.float32)
    elif dist == "arange":
        n = shape[-1] if shape else 1
        ramp = torch.arange(n, device=gdev, dtype=torch.float32) * (4.0 / max(n, 1)) - 2.0
        offs = torch.randn(shape[:-1] + (1,), generator=generator, device=gdev) if shape else 0.0
        x = (ramp + offs).expand(shape).clone() if shape else ramp.reshape(())
    else:
        x = torch.randn(shape, generator=generator, device=gdev, dtype=torch.float32)
        if dist == "large":
            x = x * magnitude
        elif dist == "shifted":
            x = x + 2.0
        elif dist == "neg_inf":
            u = torch.rand(shape, generator=generator, device=gdev)
            x = x.masked_fill(u < 0.1, float("-inf"))
            if len(shape) >= 2 and shape[0] > 1:
                x[0] = float("-inf")
        elif dist == "pos_inf":
            u = torch.rand(shape, generator=generator, device=gdev)
            x = x.masked_fill(u < 0.03, float("inf"))
        elif dist == "nan":
            u = torch.rand(shape, generator=generator, device=gdev)
            x = x.masked_fill(u < 0.02, float("nan"))
        elif dist != "normal":
            raise ValueError(f"unknown distribution {dist!r}; expected one of {DISTRIBUTIONS}")
    return with_layout(x.to(device=device, dtype=dtype), layout)


def with_layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    """Same values as ``x`` in the memory layout named ``layout``."""
    if layout == "contiguous" or x.dim() == 0:
        return x.contiguous()
    if layout == "transposed":
        if x.dim() < 2:
            return x.contiguous()
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "offset":
        flat = torch.empty(x.numel() + 3, dtype=x.dtype, device=x.device)
        flat[:3] = 0
        view = flat[3:].view(x.shape)
        view.copy_(x)
        return view
    if layout == "strided":
        buf = torch.empty(x.shape[:-1] + (2 * x.shape[-1],), dtype=x.dtype, device=x.device)
        buf.zero_()
        view = buf[..., ::2]
        view.copy_(x)
        return view
    if layout == "expanded":
        if x.dim() < 2:
            return x.contiguous()
        return x[:1].contiguous().expand(x.shape)
    raise ValueError(f"unknown layout {layout!r}; expected one of {LAYOUTS}")


def make_generator(seed: int, device) -> torch.Generator:
    """A generator on ``device`` (CPU or CUDA) seeded with ``seed``."""
    g = torch.Generator(device=torch.device(device))
    g.manual_seed(seed)
    return g
