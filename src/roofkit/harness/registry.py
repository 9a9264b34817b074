"""The op registry: the harness reads every op's spec from here.

The registry imports the op modules named in ``SPEC_MODULES`` on first use and registers their
``SPECS``; the ops never import the registry (one direction: harness -> ops -> harness.spec).
A module outside that list registers its specs itself with :func:`register`.
"""

from __future__ import annotations

import importlib

from .spec import OpSpec

# The modules whose SPECS are roofkit's ops, in the order the registry lists them.
SPEC_MODULES = ("softmax", "rms_norm", "layer_norm", "cross_entropy", "reduce", "transpose", "embedding_bag",
                "scatter", "compact", "matmul", "quant", "attention", "glu", "rope", "linear_cross_entropy")

_REGISTRY: dict[str, OpSpec] = {}
_LOADED = [False]


def register(spec: OpSpec) -> OpSpec:
    """Add ``spec`` under ``spec.name``; a second spec with the same name is an error."""
    if spec.name in _REGISTRY and _REGISTRY[spec.name] is not spec:
        raise ValueError(f"registry: an op named {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def _load() -> None:
    if _LOADED[0]:
        return
    for name in SPEC_MODULES:
        for spec in importlib.import_module(f"roofkit.ops.{name}").SPECS:
            register(spec)
    _LOADED[0] = True


def get(name: str) -> OpSpec:
    """The spec registered as ``name``; KeyError listing the known names otherwise."""
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no op named {name!r}; registered: {', '.join(sorted(_REGISTRY))}") from None


def all_specs() -> list[OpSpec]:
    """Every registered spec, in registration order."""
    _load()
    return list(_REGISTRY.values())
