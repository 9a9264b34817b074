"""The op registry: importing :mod:`roofkit.ops` fills it; everything else reads it."""

from __future__ import annotations

from .spec import OpSpec

_REGISTRY: dict[str, OpSpec] = {}


def register(spec: OpSpec) -> OpSpec:
    """Add ``spec`` under ``spec.name``; a second spec with the same name is an error."""
    if spec.name in _REGISTRY and _REGISTRY[spec.name] is not spec:
        raise ValueError(f"registry: an op named {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def _load() -> None:
    import roofkit.ops  # noqa: F401  (importing the ops registers their specs)


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
