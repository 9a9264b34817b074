"""Test set-up: the Triton interpreter without a GPU, device fixture, gpu/slow selection.

TRITON_INTERPRET must be set before triton defines any kernel, so this runs first.
"""

import os

# Under pytest-xdist each worker process takes one thread (the workers already fill the cores;
# two threads per worker on two cores measured 15 % slower): set before torch and numpy load.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import torch  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA and os.environ.get("TRITON_INTERPRET", "").lower() not in ("1", "true", "on", "yes", "y"):
    os.environ["TRITON_INTERPRET"] = "1"  # also over an inherited value Triton reads as off

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_plans():
    """Every test starts without kept plans (a test may patch what a plan froze)."""
    from roofkit.ops import _runtime

    _runtime.clear_plans()
    yield


@pytest.fixture
def raises_naming():
    """``raises_naming(exc, words, call, *args)``: ``call(*args)`` raises ``exc``, and its message
    holds every one of ``words`` (the op's name, the argument, what was expected)."""

    def check(exc, words, call, *args):
        with pytest.raises(exc) as info:
            call(*args)
        missing = [w for w in words if w not in str(info.value)]
        assert not missing, f"{type(info.value).__name__}: {info.value} -- lacks {missing}"

    return check


@pytest.fixture
def tunables():
    """``tunables(op, NAME=value, ...)``: set op tunables for the rest of the test through
    ``roofkit.config.override`` (checked names and types; put back after the test)."""
    import contextlib

    import roofkit.config

    with contextlib.ExitStack() as stack:
        yield lambda op, **values: stack.enter_context(roofkit.config.override(op, **values))


class _PlanClearingMonkeyPatch(pytest.MonkeyPatch):
    """pytest's monkeypatch, dropping roofkit's plans on every change: a plan freezes the
    module globals, functions and environment variables its recorded call read."""

    def _clear(self):
        from roofkit.ops import _runtime

        _runtime.clear_plans()

    def setattr(self, *args, **kwargs):
        super().setattr(*args, **kwargs)
        self._clear()

    def delattr(self, *args, **kwargs):
        super().delattr(*args, **kwargs)
        self._clear()

    def setitem(self, *args, **kwargs):
        super().setitem(*args, **kwargs)
        self._clear()

    def setenv(self, *args, **kwargs):
        super().setenv(*args, **kwargs)
        self._clear()

    def delenv(self, *args, **kwargs):
        super().delenv(*args, **kwargs)
        self._clear()

    def undo(self):
        super().undo()
        self._clear()


@pytest.fixture
def monkeypatch():
    patch = _PlanClearingMonkeyPatch()
    yield patch
    patch.undo()


@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda" if HAS_CUDA else "cpu")


@pytest.fixture
def forbid_launch(monkeypatch):
    """``forbid_launch(module, "_kernel")``: any launch of that kernel fails the test."""

    class NoLaunch:
        def __getitem__(self, grid):
            raise AssertionError("kernel launched on an empty input")

    def forbid(module, name: str) -> None:
        monkeypatch.setattr(module, name, NoLaunch())

    return forbid


def pytest_collection_modifyitems(config, items):
    markexpr = config.getoption("-m") or ""
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device (run `pytest -m gpu` on a GPU)"))
        elif "slow" in item.keywords and "slow" not in markexpr:
            item.add_marker(pytest.mark.skip(reason="slow: run with `-m slow` on a GPU"))
