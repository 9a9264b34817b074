"""The ops' tunables, read and overridden through one API instead of module globals.

Each op's launcher chooses its configuration (tile sizes, warps, which path runs) by a heuristic
whose thresholds and sizes are that op family's *tunables*: the names its module lists in
``TUNABLES``. :func:`tunables` reads them; :func:`override` sets some for the length of a block
and puts them back after it, dropping kept plans on the way in and out (a plan freezes the
configuration it recorded):

    import roofkit.config
    roofkit.config.tunables("softmax")                    # {'ONE_PASS_MAX_N': 32768, ...}
    with roofkit.config.override("softmax", ONE_PASS_MAX_N=1024):
        y = roofkit.softmax(x, -1)                        # the long-row path on short rows

An override is process-wide while its block is open (the values are the module's: autograd runs
CUDA backward passes on threads of its own, which must see them too); blocks nest. A name the op
family does not list, or a value of another type than the tunable's own, raises at once. The
matmul family's whole configuration has its own override: ``roofkit.ops.matmul.config_override``.
"""

from __future__ import annotations

import contextlib
import importlib
import types

__all__ = ["families", "override", "tunables"]

# Each public op: the module whose TUNABLES its launchers read.
_MODULES = {
    "softmax": "softmax", "log_softmax": "softmax", "rms_norm": "rms_norm", "add_rms_norm": "rms_norm",
    "layer_norm": "layer_norm", "cross_entropy": "cross_entropy", "sum": "reduce", "mean": "reduce",
    "amax": "reduce", "transpose": "transpose", "embedding_bag": "embedding_bag", "scatter_add": "scatter._launch",
    "index_add": "scatter._launch", "masked_select": "compact", "compact": "compact", "quantize": "quant.affine",
    "dequantize": "quant.affine", "int8_matmul": "quant.gemm", "scaled_mm": "quant.gemm",
    "scaled_dot_product_attention": "attention._launch", "flash_attention": "attention._launch",
    "swiglu": "glu", "geglu": "glu", "rope": "rope", "linear_cross_entropy": "linear_cross_entropy",
}


def families() -> dict[str, str]:
    """Each op with tunables, and the module that holds them (ops of one family share them)."""
    return {op: f"roofkit.ops.{m}" for op, m in _MODULES.items()}


def _module(op: str) -> types.ModuleType:
    if not isinstance(op, str) or op not in _MODULES:
        raise ValueError(f"roofkit.config: no tunables for op {op!r}; ops with tunables: {', '.join(sorted(_MODULES))} "
                         "(matmul and linear: roofkit.ops.matmul.config_override)")
    return importlib.import_module(f"roofkit.ops.{_MODULES[op]}")


def tunables(op: str) -> dict[str, object]:
    """The current values of ``op``'s tunables, by name."""
    mod = _module(op)
    return {name: getattr(mod, name) for name in mod.TUNABLES}


def _check(op: str, mod: types.ModuleType, name: str, value) -> None:
    if name not in mod.TUNABLES:
        raise ValueError(f"roofkit.config.override: {op} has no tunable {name!r}; its tunables: "
                         f"{', '.join(mod.TUNABLES)}")
    current = getattr(mod, name)
    kind = type(current)
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise TypeError(f"roofkit.config.override: {op}'s {name} must be of type {kind.__name__} (now {current!r}); "
                        f"got {type(value).__name__} {value!r}")


def _as_kind(op: str, name: str, value, current):
    """``value`` as the tunable's own type (an int given for a float tunable becomes a float)."""
    if type(current) is not float:
        return value
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"roofkit.config.override: {op}'s {name} must fit in a float; got {value!r}") from None


@contextlib.contextmanager
def override(op: str, **values):
    """Within the block, ``op``'s family runs with these tunables (see the module's notes)."""
    from .ops._runtime import clear_plans

    mod = _module(op)
    for name, value in values.items():
        _check(op, mod, name, value)
    old = {name: getattr(mod, name) for name in values}
    new = {name: _as_kind(op, name, value, old[name]) for name, value in values.items()}  # before any is set
    for name, value in new.items():
        setattr(mod, name, value)
    clear_plans()
    try:
        yield tunables(op)
    finally:
        for name, value in old.items():
            setattr(mod, name, value)
        clear_plans()
