"""The verified autotuner (roofkit.ops._autotune): choice, verification, on-disk cache."""

import json

import pytest
import torch

from roofkit.ops import _autotune
from roofkit.ops._autotune import Tuner, bucket

pytestmark = pytest.mark.matmul

META = {"gpu": "Test GPU", "capability": "9.0", "driver": "1.0", "triton": "3.6.0", "roofkit": "0.1.0", "torch": "x"}
CUDA = torch.device("cuda")


@pytest.fixture
def tuner_env(monkeypatch, tmp_path):
    monkeypatch.setenv("ROOFKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ROOFKIT_AUTOTUNE", "1")
    monkeypatch.setattr(_autotune, "metadata", lambda device: dict(META))
    monkeypatch.setattr(_autotune, "active", lambda device: _autotune.enabled())
    return tmp_path


def _tuner(times):
    """Configurations are ints; the fake timer reads the time of the config last run."""
    state = {}

    def timer(fn):
        fn()
        return times[state["last"]]

    t = Tuner("unit", encode=lambda c: {"c": c}, decode=lambda d: d["c"], tol={torch.float32: 1e-3}, timer=timer)
    return t, state


def _runner(state, wrong=(), broken=()):
    ref = torch.arange(1.0, 7.0)

    def run(cfg):
        state["last"] = cfg
        if cfg in broken:
            raise RuntimeError("out of resources")
        return ref + 1.0 if cfg in wrong else ref.clone()

    return run, lambda: ref


def test_fastest_verified_candidate_wins_and_wrong_ones_never_do(tuner_env):
    t, st = _tuner({0: 5.0, 1: 3.0, 2: 1.0, 3: 0.5})
    run, ref = _runner(st, wrong=(3,), broken=(2,))
    assert t.choose("k", [1, 2, 3], 0, run, ref, CUDA, torch.float32) == 1
    statuses = {c["config"]["c"]: c["status"] for c in t.log["k"]["candidates"]}
    assert statuses[3] == "failed verification" and statuses[2].startswith("error: RuntimeError")
    assert statuses[0] == statuses[1] == "ok"


def test_choice_is_cached_on_disk_with_metadata_and_reused(tuner_env):
    t, st = _tuner({0: 5.0, 1: 3.0})
    run, ref = _runner(st)
    assert t.choose("k", [1], 0, run, ref, CUDA, torch.float32) == 1
    files = list((tuner_env / "autotune").glob("unit-*.json"))
    assert len(files) == 1
    entry = json.loads(files[0].read_text())["k"]
    assert entry["meta"] == META and entry["verified"] is True and entry["config"] == {"c": 1}
    # A new process (new tuner) reads the cache: it must not run anything.
    t2, _ = _tuner({})

    def no_run(cfg):
        raise AssertionError("re-tuned despite a cache hit")

    assert t2.choose("k", [1], 0, no_run, ref, CUDA, torch.float32) == 1


def test_changed_metadata_retunes(tuner_env, monkeypatch):
    t, st = _tuner({0: 5.0, 1: 3.0})
    run, ref = _runner(st)
    t.choose("k", [1], 0, run, ref, CUDA, torch.float32)
    monkeypatch.setattr(_autotune, "metadata", lambda device: {**META, "driver": "2.0"})
    t2, st2 = _tuner({0: 1.0, 1: 3.0})
    run2, ref2 = _runner(st2)
    assert t2.choose("k", [1], 0, run2, ref2, CUDA, torch.float32) == 0


def test_no_candidate_verified_gives_default_and_nothing_cached(tuner_env):
    t, st = _tuner({0: 1.0, 1: 1.0})
    run, ref = _runner(st, wrong=(0, 1))
    assert t.choose("k", [1], 0, run, ref, CUDA, torch.float32) == 0
    assert not list((tuner_env / "autotune").glob("*.json"))


def test_disabled_returns_default_without_running(tuner_env, monkeypatch):
    monkeypatch.setenv("ROOFKIT_AUTOTUNE", "0")
    t, _ = _tuner({})

    def no_run(cfg):
        raise AssertionError("tuned with ROOFKIT_AUTOTUNE=0")

    assert t.choose("k", [1], 7, no_run, lambda: torch.ones(1), CUDA, torch.float32) == 7


def test_bucket_and_rel_l2():
    assert [bucket(n) for n in (0, 1, 2, 3, 4095, 4096, 4097)] == [0, 1, 2, 4, 4096, 4096, 8192]
    assert _autotune.rel_l2(torch.ones(4), torch.ones(4)) == 0.0
    assert _autotune.rel_l2(torch.tensor([1.0, float("nan")]), torch.ones(2)) == float("inf")
    assert abs(_autotune.rel_l2(torch.tensor([3.0, 4.0]) * 1.01, torch.tensor([3.0, 4.0])) - 0.01) < 1e-6


def test_candidates_are_built_only_on_a_miss(tuner_env):
    t, st = _tuner({0: 5.0, 1: 3.0})
    run, ref = _runner(st)
    built = []

    def candidates():
        built.append(1)
        return [1]

    assert t.choose("k", candidates, 0, run, ref, CUDA, torch.float32) == 1
    assert t.choose("k", candidates, 0, run, ref, CUDA, torch.float32) == 1
    assert built == [1]
