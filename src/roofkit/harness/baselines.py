"""Provider factories shared by the op specs: each returns a zero-argument factory that builds a
callable with the op's signature, or None when the provider is not installed."""

from __future__ import annotations

import importlib.util
from typing import Callable

# Peer libraries a spec may name as providers: provider -> (module imported, how to install it).
PEERS = {
    "liger": ("liger_kernel", "pip install roofkit[peers]"),
    "flaggems": ("flag_gems", "pip install roofkit[peers]"),
}


def installed(module: str) -> bool:
    """Whether the peer library ``module`` can be imported here (found, not imported)."""
    return importlib.util.find_spec(module) is not None


def unavailable_reason(name: str) -> str:
    """Why provider ``name`` built no callable here (its factory returned None): a peer library
    that is not installed, with the command that installs it, or a provider that needs a CUDA GPU
    (torch SDPA pinned to one backend, a peer that imports only with CUDA), or neither known."""
    import torch

    peer = PEERS.get(name)
    if peer is not None and not installed(peer[0]):
        return f"not installed ({peer[1]})"
    if not torch.cuda.is_available():
        return "not available without a CUDA GPU"
    return "not available here"


def compiled(fn: Callable, mode: str | None = None) -> Callable[[], Callable]:
    """``torch.compile(fn, mode=mode)`` with static shapes, built once per bench case."""

    def factory():
        import torch

        return torch.compile(fn, dynamic=False, mode=mode)

    return factory


def eager_and_compiled(fn: Callable) -> dict[str, Callable[[], Callable]]:
    """The two torch providers of an op whose torch form is ``fn``: "torch" (``fn`` itself) and
    "torch.compile" (:func:`compiled`), as an OpSpec's ``baselines`` entries."""
    return {"torch": lambda: fn, "torch.compile": compiled(fn)}


def flaggems(fn: Callable) -> Callable[[], Callable | None]:
    """``fn`` run inside ``flag_gems.use_gems()`` (FlagGems replaces aten ops only there)."""

    def factory():
        try:
            import flag_gems
        except ImportError:
            return None

        def run(*args, **kwargs):
            with flag_gems.use_gems():
                return fn(*args, **kwargs)

        return run

    return factory
