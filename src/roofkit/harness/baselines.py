"""Provider factories shared by the op specs: each returns a zero-argument factory that builds a
callable with the op's signature, or None when the provider is not installed."""

from __future__ import annotations

from typing import Callable


def compiled(fn: Callable, mode: str | None = None) -> Callable[[], Callable]:
    """``torch.compile(fn, mode=mode)`` with static shapes, built once per bench case."""

    def factory():
        import torch

        return torch.compile(fn, dynamic=False, mode=mode)

    return factory


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
