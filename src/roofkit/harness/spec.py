"""OpSpec: the single declaration an op module makes about itself.

Everything the harness does (verify, bench, roofline, the CLI, the registry-wide test) reads an
op through its spec; nothing about an op is written twice.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch


@dataclass(frozen=True)
class Cost:
    """Work of one call: floating-point operations and ideal unique DRAM bytes.

    ``bytes`` counts each input read once and each output written once (the minimum any
    implementation must move); ``flops`` counts arithmetic a float implementation must do.
    """

    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP per byte."""
        return self.flops / self.bytes if self.bytes else math.inf


@dataclass(frozen=True)
class Case:
    """One problem instance: a name, the op's parameters, and tags.

    Tags: ``gpu`` (needs a CUDA device), ``slow`` (large; GPU only, run with ``-m slow``),
    ``quick`` (part of ``roofkit verify --quick`` and of ``roofkit bench`` without a GPU).
    ``dtypes`` narrows the spec's dtypes for this case (None: all of them).
    Parameters the harness itself reads: ``mode`` ("fwd", "fwd_bwd", or "bwd": the backward
    alone, timed by replaying it over a graph built once; for bench), ``grad``
    (False: forward only), ``grad_layout`` (layout of grad_output) and ``grad_output``
    ("normal" random, or "ones" as ``loss.backward()`` on a scalar loss gives).
    """

    name: str
    params: Mapping[str, Any]
    tags: frozenset[str] = frozenset()
    dtypes: tuple[torch.dtype, ...] | None = None

    def __getitem__(self, key: str) -> Any:
        return self.params[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.params.get(key, default)


def case(name: str, tags: Sequence[str] = (), dtypes=None, **params: Any) -> Case:
    """Shorthand for ``Case(name, params, frozenset(tags), dtypes)``."""
    return Case(name, dict(params), frozenset(tags), tuple(dtypes) if dtypes else None)


@dataclass
class Inputs:
    """Positional and keyword arguments of one call, as the op's public signature takes them."""

    args: tuple
    kwargs: dict = field(default_factory=dict)

    def map(self, fn: Callable[[torch.Tensor], Any]) -> "Inputs":
        """Apply ``fn`` to every tensor argument (other arguments are kept)."""

        def f(a):
            return fn(a) if isinstance(a, torch.Tensor) else a

        return Inputs(tuple(f(a) for a in self.args), {k: f(v) for k, v in self.kwargs.items()})


# Elementwise tolerance per dtype: |impl - ref| <= atol * scale + rtol * |ref|, where scale is the
# largest finite |ref| of the output (so atol is relative to the output's magnitude) times the
# reduction factor below. The relative-L2 budget adds `l2_floor` to 2x torch's own error.
DEFAULT_RTOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float64: 1e-12}
DEFAULT_ATOL = {torch.float32: 2e-6, torch.float16: 5e-4, torch.bfloat16: 4e-3, torch.float64: 1e-14}
DEFAULT_L2_FLOOR = {torch.float32: 1e-6, torch.float16: 1e-4, torch.bfloat16: 1e-3, torch.float64: 1e-13}


@dataclass(frozen=True)
class Tolerance:
    """Error policy of an op.

    ``l2_factor``: the relative-L2 error may be at most this times torch's own error in the same
    dtype, plus ``l2_floor[dtype]``. ``grad_l2_floor`` (optional): the floor for the gradients
    instead, for ops whose documented numerics round a gradient more often than torch does.
    Elementwise: ``rtol[dtype]`` and ``atol[dtype]`` as above; ``atol`` grows as
    sqrt(reduction_length / 1024) for reductions longer than 1024 elements.
    """

    rtol: Mapping[torch.dtype, float] = field(default_factory=lambda: dict(DEFAULT_RTOL))
    atol: Mapping[torch.dtype, float] = field(default_factory=lambda: dict(DEFAULT_ATOL))
    l2_floor: Mapping[torch.dtype, float] = field(default_factory=lambda: dict(DEFAULT_L2_FLOOR))
    l2_factor: float = 2.0
    grad_l2_floor: Mapping[torch.dtype, float] | None = None

    def floor(self, dtype: torch.dtype, gradient: bool = False) -> float:
        """The relative-L2 floor of an output (``gradient``: an input's gradient) of ``dtype``."""
        if gradient and self.grad_l2_floor is not None:
            return self.grad_l2_floor[dtype]
        return self.l2_floor[dtype]

    def elementwise(self, dtype: torch.dtype, reduction_length: int = 1) -> tuple[float, float]:
        grow = math.sqrt(max(1.0, reduction_length / 1024))
        return self.rtol[dtype], self.atol[dtype] * grow


@dataclass
class OpSpec:
    """Declaration of one op (see docs/design.md, "OpSpec").

    Attributes:
        name: public function name, CLI name and registry key.
        impl: roofkit's implementation (the public function).
        reference: same signature as ``impl``; receives float64 copies of the floating inputs and
            returns float64 output(s). Must be differentiable with torch autograd when ``grad_args``
            is non-empty.
        torch_impl: PyTorch's implementation in the input dtype; its error against the reference
            sets the budget of rule 3 and its output dtype/shape is the one expected of ``impl``.
        make_inputs: ``(case, dtype, generator, device) -> Inputs`` with fresh random data.
        cost: ``(case, dtype) -> Cost``.
        reduction_length: ``(case) -> int`` for the reduction-aware atol.
        cases: correctness cases; suites: benchmark cases by suite name.
        baselines: provider name -> zero-argument factory returning a callable with the op's
            signature (called once per bench process); ``None`` when the provider is not installed.
        grad_args: positions of the arguments whose gradients verify checks (empty: forward only).
        mutates: positions of arguments the op writes in place.
        deterministic: repeat calls must be bitwise identical.
        matrix: runs on matrix units (its compute roof is the dtype's matrix rate, else fp32's).
        marker: pytest marker of the op's tests.
        describe: optional ``(case, dtype, device) -> str`` called by ``roofkit bench`` after
            roofkit's run of a case (e.g. the launch configuration chosen and its waves); shown
            in the table's notes column and stored with the record.
        tuners: the op's autotuners (``ops._autotune.Tuner``): ``roofkit tune`` runs the op on
            every case of a suite with tuning on, filling their caches. Empty: nothing to tune.
    """

    name: str
    impl: Callable
    reference: Callable
    torch_impl: Callable
    make_inputs: Callable[[Case, torch.dtype, torch.Generator, torch.device], Inputs]
    cost: Callable[[Case, torch.dtype], Cost]
    dtypes: tuple[torch.dtype, ...]
    cases: Sequence[Case]
    suites: Mapping[str, Sequence[Case]]
    baselines: Mapping[str, Callable[[], Callable | None]] = field(default_factory=dict)
    reduction_length: Callable[[Case], int] = lambda case: 1
    tolerance: Tolerance = field(default_factory=Tolerance)
    grad_args: tuple[int, ...] = ()
    mutates: tuple[int, ...] = ()
    deterministic: bool = True
    matrix: bool = False
    marker: str | None = None
    describe: Callable[[Case, torch.dtype, torch.device], str] | None = None
    tuners: tuple = ()

    def sibling(self, **changes: Any) -> "OpSpec":
        """The spec of a sibling op that shares this one's other fields.

        ``changes`` are the fields that differ (``name`` at least); every other field is this
        spec's value, the same object (``dataclasses.replace``).
        """
        return dataclasses.replace(self, **changes)

    def case(self, name: str) -> Case:
        for c in self.cases:
            if c.name == name:
                return c
        raise KeyError(f"{self.name}: no case named {name!r}")

    def case_dtypes(self, case: Case) -> tuple[torch.dtype, ...]:
        return case.dtypes if case.dtypes is not None else self.dtypes
