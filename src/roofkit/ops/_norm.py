"""Host-side pieces shared by the norm ops (rms_norm, layer_norm): argument checks, launch
configurations and grids, input makers and test cases."""

from __future__ import annotations

import numbers
import operator
from typing import NamedTuple

import torch

from ..harness.inputs import random_tensor
from ..harness.spec import case
from ._common import cdiv, check_same_device, check_same_dtype, check_tensor, sm_count

# ----------------------------------------------------------------------------- launch configuration


class Config(NamedTuple):
    """Launch configuration; ``programs_per_sm`` > 0 makes the grid persistent."""

    one_pass: bool
    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    programs_per_sm: int = 0
    loop_stages: int = 1  # software-pipelining depth of the backward's row loop
    streaming: bool = False  # rms_norm's one-pass forward: evict-first loads, streaming (.cs) stores
    prefetch: bool = False  # rms_norm's one-pass loops: the next step's rows loaded before this one's arithmetic


def fwd_grid(m: int, cfg: Config, device) -> int:
    """The forward's grid for ``m`` rows: one program per row block, capped when persistent."""
    grid = cdiv(m, cfg.BLOCK_M)
    if cfg.programs_per_sm:
        grid = min(grid, cfg.programs_per_sm * sm_count(device))
    return grid


def bwd_grid(m: int, cfg: Config, device) -> tuple[int, int]:
    """(G, rows per program) of the backward's fixed grid over ``m`` rows."""
    g = max(1, min(cdiv(m, cfg.BLOCK_M), cfg.programs_per_sm * sm_count(device)))
    rows_per_program = cdiv(m, g)
    return cdiv(m, rows_per_program), rows_per_program


# ----------------------------------------------------------------------------- argument checks


def as_shape(op: str, normalized_shape) -> tuple[int, ...]:
    """normalized_shape as a tuple of ints (int, sequence of ints, torch.Size); TypeError else."""
    items = normalized_shape if isinstance(normalized_shape, (tuple, list, torch.Size)) else (normalized_shape,)
    out = []
    for s in items:
        if isinstance(s, bool):
            raise TypeError(f"roofkit.{op}: normalized_shape must hold ints, got a bool")
        try:
            out.append(operator.index(s))
        except TypeError:
            raise TypeError(
                f"roofkit.{op}: normalized_shape must be an int or a sequence of ints, got {normalized_shape!r}"
            ) from None
    return tuple(out)


def check_param(op: str, name: str, t, input: torch.Tensor, normalized_shape: tuple[int, ...],
                note: str = "") -> torch.Tensor:
    """A weight or bias checked against ``input`` and ``normalized_shape`` (``note`` follows the
    shape in the error), made contiguous."""
    check_tensor(op, name, t)
    check_same_device(op, name, t, input)
    if tuple(t.shape) != normalized_shape:
        raise ValueError(f"roofkit.{op}: {name} must have shape {normalized_shape}{note}, got {tuple(t.shape)}")
    check_same_dtype(op, name, t, input)
    return t.contiguous()


def eps_as_float(op: str, eps, what: str) -> float:
    """eps as a float: a TypeError unless a real number (``what`` names what is accepted), a
    ValueError when it does not fit a float."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"roofkit.{op}: eps must be {what}, got {type(eps).__name__}")
    try:
        return float(eps)
    except OverflowError:
        raise ValueError(f"roofkit.{op}: eps {eps} does not fit a float") from None


# ----------------------------------------------------------------------------- inputs, cases


def random_input(case, shape, dtype, generator, device) -> torch.Tensor:
    """The input x of a case: its ``dist``, ``magnitude`` and ``layout``."""
    return random_tensor(shape, dtype, generator, device, case.get("dist", "normal"),
                         magnitude=case.get("magnitude", 1e2), layout=case.get("layout", "contiguous"))


def random_weight(shape, dtype, generator, device) -> torch.Tensor:
    """A weight about 1, not all ones: an implementation that ignores it must fail."""
    return (1.0 + 0.5 * torch.randn(shape, generator=generator, device=generator.device)).to(device=device, dtype=dtype)


def row_cases() -> list:
    """Small rows: one element, odd and prime lengths, a row of 4096, leading dimensions."""
    return [
        case("tiny_1x1", ["quick"], shape=(1, 1)),
        case("odd_3x7", ["quick"], shape=(3, 7)),
        case("prime_37x781", shape=(37, 781)),
        case("row_4096", ["quick"], shape=(6, 4096)),
        case("leading_dims_2x3x50", shape=(2, 3, 50)),
    ]


def layout_cases() -> list:
    """The long-row loop, input layouts and a large eps."""
    return [
        case("long_row_loop_3x20000", shape=(3, 20000), dtypes=(torch.float32,)),
        case("transposed_16x33", shape=(16, 33), layout="transposed"),
        case("offset_9x65", shape=(9, 65), layout="offset"),
        case("strided_9x65", shape=(9, 65), layout="strided"),
        case("eps_large_8x64", shape=(8, 64), eps=0.5),
    ]


def value_cases() -> list:
    """Large, tied, ordered and NaN values; empty rows and columns."""
    return [
        case("magnitude_1e3_8x300", shape=(8, 300), dist="large", magnitude=1e3),
        case("ties_8x129", shape=(8, 129), dist="ties"),
        case("arange_5x1000", shape=(5, 1000), dist="arange"),
        case("nan_8x129", shape=(8, 129), dist="nan", grad=False),
        case("empty_rows_0x7", ["quick"], shape=(0, 7)),
        case("empty_cols_5x0", shape=(5, 0)),
    ]


def gpu_row_cases() -> list:
    """GPU rows of 1, 781 and 4096 elements."""
    return [
        case("gpu_row_1", ["gpu"], shape=(4096, 1)),
        case("gpu_row_781", ["gpu"], shape=(1000, 781)),
        case("gpu_row_4096", ["gpu"], shape=(2048, 4096)),
    ]


def host_suite() -> list:
    """Decoding 8 sequences one token at a time, where the host's cost per call is the time."""
    bf16 = (torch.bfloat16,)
    return [
        case("hidden_8x4096", shape=(8, 4096), dtypes=bf16),
        case("hidden_8x4096_fwd_bwd", shape=(8, 4096), dtypes=bf16, mode="fwd_bwd"),
    ]
