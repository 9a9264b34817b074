"""The verified autotuner (roofkit.ops._autotune): choice, verification, on-disk cache; when it
may time (only when asked), how a damaged or concurrently written cache is survived, the
``roofkit tune`` driver and matmul's ``config_override``.

The GPU-only gates (``active``: a CUDA device; the device's metadata) are simulated with
monkeypatch, so all of this runs on CPU."""

import importlib
import json
import multiprocessing
import warnings

import pytest
import torch

from roofkit.harness import cache
from roofkit.harness.spec import case
from roofkit.harness.tune import tune_case
from roofkit.ops import _autotune
from roofkit.ops._autotune import Tuner, bucket
from roofkit.ops.matmul import SPEC, Config, config_override, linear, matmul

mm = importlib.import_module("roofkit.ops.matmul")

pytestmark = pytest.mark.matmul

META = {"gpu": "Test GPU", "capability": "9.0", "driver": "1.0", "triton": "3.6.0", "roofkit": "0.1.0", "torch": "x"}
CUDA = torch.device("cuda")


@pytest.fixture
def tuner_env(monkeypatch, tmp_path):
    monkeypatch.setenv("ROOFKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ROOFKIT_AUTOTUNE", "1")
    monkeypatch.setattr(_autotune, "metadata", lambda device: dict(META))
    monkeypatch.setattr(_autotune, "active", lambda device: _autotune.mode() != "off")
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


# ----------------------------------------------------------------------------- when tuning runs


@pytest.fixture
def lookup_env(tuner_env, monkeypatch):
    """The default: ROOFKIT_AUTOTUNE unset (cached configurations, else the default)."""
    monkeypatch.delenv("ROOFKIT_AUTOTUNE")
    return tuner_env


def _spy_tuner(times):
    """``_tuner`` whose timer also records each call."""
    t, st = _tuner(times)
    timed = []
    inner = t.timer

    def timer(fn):
        timed.append(st.get("last"))
        return inner(fn)

    t.timer = timer
    return t, st, timed


def _no_run(cfg):
    raise AssertionError("a candidate ran where only a look-up was expected")


def test_first_call_of_a_new_key_times_nothing_unless_autotune_is_1(lookup_env, monkeypatch):
    t, st, timed = _spy_tuner({0: 5.0, 1: 3.0})
    run, ref = _runner(st)
    built = []

    def candidates():
        built.append(1)
        return [1]

    assert t.choose("k", candidates, 0, run, ref, CUDA, torch.float32) == 0
    assert t.choose("k", candidates, 0, run, ref, CUDA, torch.float32) == 0
    assert timed == [] and built == [] and "last" not in st  # nothing built, run or timed
    assert not list(lookup_env.rglob("*.json"))
    monkeypatch.setenv("ROOFKIT_AUTOTUNE", "1")
    assert t.choose("k", candidates, 0, run, ref, CUDA, torch.float32) == 1
    assert sorted(timed) == [0, 1] and built == [1]


def test_a_tuned_entry_is_used_by_a_later_process_without_timing(lookup_env, monkeypatch):
    monkeypatch.setenv("ROOFKIT_AUTOTUNE", "1")
    t, st = _tuner({0: 5.0, 1: 3.0})
    run, ref = _runner(st)
    assert t.choose("k", [1], 0, run, ref, CUDA, torch.float32) == 1
    monkeypatch.delenv("ROOFKIT_AUTOTUNE")
    t2, _, timed = _spy_tuner({})
    assert t2.choose("k", [1], 0, _no_run, ref, CUDA, torch.float32) == 1
    assert t2.choose("other", [1], 0, _no_run, ref, CUDA, torch.float32) == 0  # not cached: the default
    assert timed == []


def test_autotune_0_does_not_even_read_the_cache(lookup_env, monkeypatch):
    monkeypatch.setenv("ROOFKIT_AUTOTUNE", "1")
    t, st = _tuner({0: 5.0, 1: 3.0})
    run, ref = _runner(st)
    t.choose("k", [1], 0, run, ref, CUDA, torch.float32)
    monkeypatch.setenv("ROOFKIT_AUTOTUNE", "0")

    def no_read(*a, **k):
        raise AssertionError("the cache was read with ROOFKIT_AUTOTUNE=0")

    monkeypatch.setattr(cache, "read", no_read)
    t2, _ = _tuner({})
    assert t2.choose("k", [1], 0, _no_run, ref, CUDA, torch.float32) == 0


def test_tuning_block_tunes_whatever_the_variable_says_and_reports_each_choice(lookup_env, monkeypatch):
    monkeypatch.setenv("ROOFKIT_AUTOTUNE", "0")
    t, st = _tuner({0: 5.0, 1: 3.0})
    run, ref = _runner(st)
    with _autotune.tuning() as seen:
        assert t.choose("k", [1], 0, run, ref, CUDA, torch.float32) == 1
        assert t.choose("k", [1], 0, _no_run, ref, CUDA, torch.float32) == 1
    assert [(c["tuner"], c["key"], c["source"], c["config"]) for c in seen] == [("unit", "k", "tuned", {"c": 1}),
                                                                                ("unit", "k", "cached", {"c": 1})]
    assert t.choose("k", [1], 0, _no_run, ref, CUDA, torch.float32) == 0  # the block closed: ROOFKIT_AUTOTUNE=0 again
    monkeypatch.delenv("ROOFKIT_AUTOTUNE")
    assert _tuner({})[0].choose("k", [1], 0, _no_run, ref, CUDA, torch.float32) == 1  # written for later processes


def test_nothing_is_timed_while_timing_is_impossible(tuner_env, monkeypatch):
    # CUDA-graph capture or a torch.compile trace: ROOFKIT_AUTOTUNE=1 gets the default there.
    monkeypatch.setattr(_autotune, "can_time", lambda device: False)
    t, _, timed = _spy_tuner({})
    assert t.choose("k", [1], 0, _no_run, lambda: torch.ones(1), CUDA, torch.float32) == 0
    assert timed == []


def test_unknown_autotune_value_is_a_clear_error(tuner_env, monkeypatch):
    monkeypatch.setenv("ROOFKIT_AUTOTUNE", "maybe")
    t, _ = _tuner({})
    with pytest.raises(ValueError, match="ROOFKIT_AUTOTUNE must be 1 .* got 'maybe'"):
        t.choose("k", [1], 0, _no_run, lambda: torch.ones(1), CUDA, torch.float32)


# ----------------------------------------------------------------------------- damaged caches

VALID = {"verified": True, "meta": META, "config": {"c": 1}, "ms": 3.0}
DAMAGED = {
    "truncated": json.dumps({"k": VALID, "j": VALID})[:50],
    "not UTF-8": b"\x80\x81\xfe\xff{",
    "empty": "",
    "a list": "[1, 2, 3]",
    "an entry that is not an object": json.dumps({"k": 5}),
    "a config that does not decode": json.dumps({"k": {**VALID, "config": {"x": 1}}}),
    "an unverified entry": json.dumps({"k": {**VALID, "verified": False}}),
    "entries of another triton": json.dumps({"k": {**VALID, "meta": {**META, "triton": "9.9.9"}}}),
}


def _write_raw(path, content) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)


def _cache_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, cache.CacheWarning)]


@pytest.mark.parametrize("damage", list(DAMAGED))
def test_a_damaged_cache_costs_one_warning_and_is_rewritten(lookup_env, monkeypatch, damage):
    t, st = _tuner({0: 5.0, 1: 3.0})
    run, ref = _runner(st)
    path = t._file(META)
    _write_raw(path, DAMAGED[damage])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert t.choose("k", [1], 0, run, ref, CUDA, torch.float32) == 0  # the default, not the damaged entry
        assert json.loads(path.read_text()) == {}  # rewritten at once, what was wrong dropped
        assert t.choose("j", [1], 0, run, ref, CUDA, torch.float32) == 0
        monkeypatch.setenv("ROOFKIT_AUTOTUNE", "1")
        assert t.choose("k", [1], 0, run, ref, CUDA, torch.float32) == 1  # tuning still works
        assert _tuner({})[0].choose("k", [1], 0, _no_run, ref, CUDA, torch.float32) == 1
    msgs = _cache_warnings(caught)
    assert len(msgs) == 1 and str(path) in msgs[0], msgs
    assert set(json.loads(path.read_text())) == {"k"}


def test_good_entries_beside_a_bad_one_are_kept(lookup_env):
    t, _ = _tuner({})
    path = t._file(META)
    _write_raw(path, json.dumps({"good": VALID, "bad": {"config": {"c": 2}}}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert t.choose("good", [1], 0, _no_run, lambda: torch.ones(1), CUDA, torch.float32) == 1
    assert len(_cache_warnings(caught)) == 1 and "1 malformed entries (first: 'bad')" in _cache_warnings(caught)[0]
    assert json.loads(path.read_text()) == {"good": VALID}


def test_an_unwritable_cache_directory_costs_only_retuning(tuner_env, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Read-only file system")

    monkeypatch.setattr(cache, "_write", refuse)
    t, st, timed = _spy_tuner({0: 5.0, 1: 3.0})
    run, ref = _runner(st)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert t.choose("k", [1], 0, run, ref, CUDA, torch.float32) == 1
        assert t.choose("k", [1], 0, _no_run, ref, CUDA, torch.float32) == 1  # kept in memory
    assert not _cache_warnings(caught) and not list(tuner_env.rglob("*.json"))
    t2, st2, timed2 = _spy_tuner({0: 5.0, 1: 3.0})
    run2, _ = _runner(st2)
    assert t2.choose("k", [1], 0, run2, ref, CUDA, torch.float32) == 1 and timed2  # a new process tunes again


def _hammer(cache_dir: str, tag: str, n: int) -> None:
    """One of two processes writing the cache at once: the same key every time, and a key of its
    own; every read between writes must find a whole, valid file."""
    import os

    os.environ["ROOFKIT_CACHE_DIR"] = cache_dir
    _autotune.metadata = lambda device: dict(META)
    for i in range(n):
        t, _ = _tuner({})
        t._save(META, "shared", {**VALID, "writer": tag})
        t._save(META, f"{tag}-{i}", VALID)
        data, problem = cache.read(t._file(META), t._clean(META))
        assert problem is None and data["shared"]["meta"] == META, problem


def test_two_processes_writing_one_key_at_once_leave_a_valid_file_with_every_entry(tmp_path):
    n = 60
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_hammer, args=(str(tmp_path), tag, n)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0, 0]
    (path,) = (tmp_path / "autotune").glob("unit-*.json")
    data = json.loads(path.read_text())
    # Each write re-read the file under the lock: no process lost the other's entries.
    assert set(data) == {"shared"} | {f"{tag}-{i}" for tag in ("a", "b") for i in range(n)}
    assert data["shared"]["writer"] in ("a", "b") and data["shared"]["config"] == {"c": 1}
    assert not [f for f in path.parent.iterdir() if f.name.endswith(".tmp")]


# ----------------------------------------------------------------------------- matmul, roofkit tune

FAST = Config(16, 16, 16, 2, 4, 2)
SLOW = Config(32, 32, 16, 2, 4, 2)


def _t(shape, seed=0, device="cpu"):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(device)


@pytest.fixture
def matmul_env(monkeypatch, tmp_path):
    """matmul's tuner as on a GPU, also with CPU tensors: the CUDA gate open, fake metadata, a fake
    timer (FAST 1 ms, SLOW 2 ms, the default 9 ms), FAST and SLOW as the candidates, empty
    in-memory state; every launch recorded in ``launched``, every timing in ``timed``."""
    monkeypatch.setenv("ROOFKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("ROOFKIT_AUTOTUNE", raising=False)
    monkeypatch.setattr(_autotune, "metadata", lambda device: dict(META))
    monkeypatch.setattr(_autotune, "active", lambda device: _autotune.mode() != "off")
    _fresh_process(monkeypatch)
    launched, timed = [], []
    real = mm._launch

    def spy(cfg, *args):
        launched.append(cfg)
        return real(cfg, *args)

    def timer(fn):
        fn()
        timed.append(launched[-1])
        return {FAST: 1.0, SLOW: 2.0}.get(launched[-1], 9.0)

    monkeypatch.setattr(mm, "_launch", spy)
    monkeypatch.setattr(mm._TUNER, "timer", timer)
    monkeypatch.setattr(mm, "_candidates", lambda *a, **k: [FAST, SLOW])
    return tmp_path, launched, timed


def _fresh_process(monkeypatch):
    """matmul's tuner as a new process has it: nothing in memory."""
    for name, value in (("mem", {}), ("log", {}), ("_files", {}), ("_misses", set())):
        monkeypatch.setattr(mm._TUNER, name, value)


def _close(y, a, b):
    torch.testing.assert_close(y, (a.double() @ b.double()).float(), rtol=1e-5, atol=1e-5)


def test_matmul_first_call_of_a_new_shape_times_nothing_unless_asked(matmul_env, monkeypatch, device):
    _, launched, timed = matmul_env
    a, b = _t((33, 29), device=device), _t((29, 17), seed=1, device=device)
    _close(matmul(a, b), a, b)
    assert timed == [] and len(launched) == 1 and launched[0] not in (FAST, SLOW)  # the default
    monkeypatch.setenv("ROOFKIT_AUTOTUNE", "1")
    a2 = _t((70, 29), device=device)
    _close(matmul(a2, b), a2, b)  # a new size bucket: tuned in the call
    assert FAST in timed and SLOW in timed and launched[-1] == FAST


def test_matmul_tune_then_call_uses_the_tuned_configuration(matmul_env, monkeypatch, device):
    tmp_path, launched, timed = matmul_env
    small = case("small_33x17x29", shape=(33, 17, 29), dtypes=(torch.float32,))
    res = tune_case(SPEC, small, torch.float32, device)  # what `roofkit tune` runs per case
    assert res.ok and [(c["source"], c["label"], c["ms"]) for c in res.choices] == [("tuned", FAST.label(), 1.0)]
    (path,) = (tmp_path / "autotune").glob("matmul-*.json")
    (entry,) = json.loads(path.read_text()).values()
    assert entry["config"] == FAST.as_dict() and entry["verified"] is True
    _fresh_process(monkeypatch)  # a later process, ROOFKIT_AUTOTUNE unset
    launched.clear()
    timed.clear()
    a, b = _t((40, 29), device=device), _t((29, 20), seed=1, device=device)  # the size bucket of 33x17x29: 64x32x32
    _close(matmul(a, b), a, b)
    assert launched == [FAST] and timed == []
    with config_override(SLOW):  # an override beats the cache
        _close(matmul(a, b), a, b)
    assert launched[-1] == SLOW


@pytest.mark.parametrize("damage", ["truncated", "a list", "block size not a power of two", "another driver's entry"])
def test_matmul_survives_a_damaged_cache_with_one_warning(matmul_env, damage, device):
    tmp_path, launched, timed = matmul_env
    a, b = _t((33, 29), device=device), _t((29, 17), seed=1, device=device)
    key = mm._tune_key(a, b, None, torch.float32)
    entry = {"verified": True, "meta": META, "config": FAST.as_dict()}
    content = {
        "truncated": json.dumps({key: entry})[:30],
        "a list": json.dumps([entry]),
        "block size not a power of two": json.dumps({key: {**entry, "config": {**FAST.as_dict(), "BLOCK_M": 24}}}),
        "another driver's entry": json.dumps({key: {**entry, "meta": {**META, "driver": "0.1"}}}),
    }[damage]
    path = mm._TUNER._file(META)
    _write_raw(path, content)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _close(matmul(a, b), a, b)
        a2 = _t((100, 29), device=device)
        _close(matmul(a2, b), a2, b)
    msgs = _cache_warnings(caught)
    assert len(msgs) == 1 and str(path) in msgs[0], msgs
    assert FAST not in launched and timed == []  # the damaged entry was not launched; nothing timed
    assert json.loads(path.read_text()) == {}


def test_matmul_config_override_forces_forward_and_backward(monkeypatch, device):
    launched = []
    real = mm._launch
    monkeypatch.setattr(mm, "_launch", lambda cfg, *args: (launched.append(cfg), real(cfg, *args))[1])
    x = _t((33, 29), device=device).requires_grad_()
    w = _t((17, 29), seed=1, device=device).requires_grad_()
    with config_override(FAST):
        y = linear(x, w)
        y.backward(torch.ones_like(y))
    assert launched == [FAST, FAST, FAST]  # y, dx, dw
    torch.testing.assert_close(x.grad, torch.ones(33, 17, device=device) @ w.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad, torch.ones(17, 33, device=device) @ x.detach(), rtol=1e-5, atol=1e-5)
    with config_override(FAST):
        with config_override(SLOW):
            matmul(x.detach(), w.detach().t())
        matmul(x.detach(), w.detach().t())
    assert launched[-2:] == [SLOW, FAST]
    matmul(x.detach(), w.detach().t())
    assert launched[-1] not in (FAST, SLOW)  # the block closed
    with pytest.raises(TypeError, match="config_override: config must be a roofkit.ops.matmul.Config, got dict"):
        with config_override(FAST.as_dict()):
            pass
