"""``roofkit eval``: every exploit of the eval zoo is rejected with its class named; honest
candidates are accepted; the command line's exit statuses.

The zoo is judged once (one worker process forks a process per candidate) on two small softmax
cases in float32, so the whole file stays cheap on one CPU core.
"""

import json
import statistics
import time
from pathlib import Path

import pytest
import torch

from roofkit.cli import main
from roofkit.harness import registry
from roofkit.harness import evaluate as evaluate_module
from roofkit.harness.device import Ceilings
from roofkit.harness.evaluate import CLASSES, HIDDEN_CASES, EvaluationError, Report, evaluate, evaluate_many

pytestmark = pytest.mark.harness

ZOO = Path(__file__).parent / "eval_zoo"
CASES = ["odd_3x7", "leading_dims_2x3x50"]
CALL_TIMEOUT_S = 4.0

# zoo file -> the class its rejection must name
EXPLOITS = {
    "zeros": "wrong_result",
    "uniform": "wrong_result",
    "returns_input": "wrong_result",
    "cached_by_shape": "cached",
    "stateful": "stateful",
    "mutates_input": "input_mutation",
    "drops_last_column": "wrong_result",
    "low_precision": "wrong_result",
    "exits_early": "exit",
    "fake_verdict": "wrong_result",
    "tensor_subclass": "tensor_subclass",
    "returns_nan": "nan",
    "wrong_dtype": "wrong_dtype",
    "wrong_shape": "wrong_shape",
    "returns_list": "wrong_type",
    "raises": "exception",
    "sys_exit": "exit",
    "segfaults": "crash",
    "returns_meta": "wrong_type",
    "forges_channel_frame": "protocol",
    "public_shapes_only": "wrong_result",  # caught on the hidden shapes
    "small_shapes_only": "wrong_result",
    "patches_comparison": "wrong_result",  # (the judge compares in its own process)
    "stack_walking": "wrong_result",  # (no expected output in the candidate's process)
    "wrong_backward": "wrong_gradient",  # the right forward, a wrong backward
    "reuses_freed_memory": "wrong_result",
    "hangs": "hang",  # last: a hang costs the call limit and a fresh worker
}
HONEST = ["honest_torch", "honest_triton"]
BROKEN = {"no_function": "defines no function named 'softmax'", "import_error": "ModuleNotFoundError"}


def test_eval_cases_exist():
    names = {c.name for c in registry.get("softmax").cases}
    assert set(CASES) <= names


@pytest.fixture(scope="module")
def zoo_reports():
    names = HONEST + list(BROKEN) + list(EXPLOITS)
    reports = evaluate_many([ZOO / f"{n}.py" for n in names], "softmax", cases=CASES, seeds=2,
                            timeout_s=CALL_TIMEOUT_S, dtypes=[torch.float32], device="cpu")
    return dict(zip(names, reports))


@pytest.mark.parametrize("name", list(EXPLOITS))
def test_eval_rejects_exploit(zoo_reports, name):
    rep = zoo_reports[name]
    assert rep.error is None, rep.error
    assert not rep.accepted
    assert EXPLOITS[name] in rep.classes, rep.summary()
    assert rep.classes <= set(CLASSES)


@pytest.mark.parametrize("name", HONEST)
def test_eval_accepts_honest(zoo_reports, name):
    rep = zoo_reports[name]
    assert rep.accepted, rep.summary()
    assert len(rep.rows) == 2 * (len(CASES) + HIDDEN_CASES)  # the cases and the hidden shapes, 2 calls each
    assert sum(r.case.startswith("hidden_") for r in rep.rows) == 2 * HIDDEN_CASES
    assert all(r.err_l2 <= r.budget_l2 for r in rep.rows)
    assert len({r.seed for r in rep.rows}) == len(rep.rows)  # fresh inputs on every call


@pytest.mark.parametrize("name", list(BROKEN))
def test_eval_broken_candidate_could_not_run(zoo_reports, name):
    rep = zoo_reports[name]
    assert not rep.accepted
    assert BROKEN[name] in rep.error


def test_eval_findings_name_figures(zoo_reports):
    low = next(f for f in zoo_reports["low_precision"].findings if f.cls == "wrong_result")
    assert "budget" in low.detail and (low.case in ("odd_3x7[float32]", "leading_dims_2x3x50[float32]")
                                       or low.case.startswith("hidden_"))
    hidden = next(f for f in zoo_reports["public_shapes_only"].findings if f.cls == "wrong_result")
    assert hidden.case.startswith("hidden_")  # right on every published shape, caught on a hidden one
    hang = zoo_reports["hangs"].findings[0]
    assert f"{CALL_TIMEOUT_S:g} s" in hang.detail
    # The forged verdict went to the candidate's log, never into the judge's channel.
    assert "protocol" not in zoo_reports["fake_verdict"].classes


def test_eval_errors_before_running(tmp_path):
    with pytest.raises(EvaluationError, match="no op named"):
        evaluate(ZOO / "zeros.py", "no_such_op")
    with pytest.raises(EvaluationError, match="no candidate file"):
        evaluate(tmp_path / "missing.py", "softmax")
    with pytest.raises(EvaluationError, match="no case named"):
        evaluate(ZOO / "zeros.py", "softmax", cases=["no_such_case"])


def test_eval_cli_exit_statuses(tmp_path, capsys):
    base = ["--op", "softmax", "--cases", "odd_3x7", "--dtype", "float32", "--timeout", str(CALL_TIMEOUT_S)]
    out = tmp_path / "report.json"
    assert main(["eval", str(ZOO / "honest_torch.py"), *base]) == 0
    assert "ACCEPTED" in capsys.readouterr().out
    assert main(["eval", str(ZOO / "zeros.py"), *base, "--json", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "REJECTED" in printed and "wrong_result" in printed
    rep = json.loads(out.read_text())
    assert rep["accepted"] is False and {f["cls"] for f in rep["findings"]} >= {"wrong_result"}
    assert main(["eval", str(ZOO / "zeros.py"), "--op", "no_such_op"]) == 2
    assert main(["eval", str(tmp_path / "missing.py"), "--op", "softmax"]) == 2
    assert main(["eval", str(ZOO / "no_function.py"), *base]) == 2
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "missing.py"), "--op", "softmax", "--cases", "gpu_4000x4000",
                 "--device", "cpu"]) == 2
    assert "gpu_ cases run on the CPU" in capsys.readouterr().err  # (said before minutes of interpreter)
    # A Triton candidate judged in 16 bits on the CPU: the interpreter's rounding is named, and
    # not for float32 alone or for a candidate without Triton
    cand = tmp_path / "cand.py"
    for text, dtype, said in (("import triton\n", [], True), ("import triton\n", ["--dtype", "float32"], False),
                              ("import torch\n", [], False)):
        cand.write_text(text)
        assert main(["eval", str(cand), "--op", "softmax", "--cases", "no_such_case", "--device", "cpu", *dtype]) == 2
        assert ("truncates float32 to bfloat16" in capsys.readouterr().err) == said


def test_eval_whole_evaluation_limit():
    rep = evaluate(ZOO / "hangs.py", "softmax", cases=["odd_3x7"], dtypes=[torch.float32], timeout_s=60,
                   total_timeout_s=3)
    assert rep.classes == {"hang"}
    assert "whole evaluation" in rep.findings[0].detail
    assert rep.elapsed_s < 30


def test_a_process_the_candidate_detaches_does_not_outlive_it():
    # A double-forked, setsid process (the way to outlive a process-group kill and take over a
    # later evaluation's channel) dies with the candidate (re-parented to the worker, or killed
    # with its PID namespace): its heartbeat, every 0.1 s, stops.
    import time

    beat = Path("/tmp/roofkit-eval-zoo-orphan.pid")
    beat.unlink(missing_ok=True)
    rep = evaluate(ZOO / "leaves_a_process.py", "softmax", cases=CASES[:1], seeds=1, timeout_s=CALL_TIMEOUT_S,
                   dtypes=[torch.float32])
    assert rep.accepted, rep.summary()  # its answers are right: only the leftover process is at stake
    assert beat.exists(), "the detached process never ran"
    last = beat.read_text()
    time.sleep(1.0)
    assert beat.read_text() == last, "the detached process outlived the candidate"
    beat.unlink()


def test_hidden_shapes_are_new_buildable_and_bounded():
    import random

    from roofkit.harness.evaluate import _hidden, _plan

    spec = registry.get("softmax")
    keys = _plan(spec, CASES, [torch.float32], False)  # shapes (3, 7) and (2, 3, 50)
    bases = {len(c["shape"]): c["shape"] for c, _ in keys}
    public = {tuple(c.get("shape")) for c in spec.cases if c.get("shape") is not None}
    for seed in range(5):
        drawn = _hidden(spec, keys, 3, random.Random(seed))
        assert len(drawn) == 3 and len({c["shape"] for c, _ in drawn}) == 3
        for case, dtype in drawn:
            shape, base = case["shape"], bases[len(case["shape"])]
            assert shape not in public and case.name == "hidden_" + "x".join(map(str, shape))
            assert all(max(2, b // 2) <= d <= 2 * b + 7 for d, b in zip(shape, base))
            assert dtype == torch.float32 and case.get("dim") == next(c for c, _ in keys if c["shape"] == base).get("dim")
    assert _hidden(spec, keys, 0, random.Random(0)) == []
    rep = evaluate(ZOO / "honest_torch.py", "softmax", cases=CASES[:1], seeds=1, dtypes=[torch.float32],
                   timeout_s=CALL_TIMEOUT_S, hidden=2)
    assert rep.accepted and sum(r.case.startswith("hidden_") for r in rep.rows) == 2
    with pytest.raises(EvaluationError, match="hidden must be an integer >= 0"):
        evaluate(ZOO / "zeros.py", "softmax", hidden=-1)


def test_eval_judges_gradients_when_the_output_carries_a_graph(zoo_reports):
    # torch's softmax carries autograd: every call's gradient is judged (and right); the Triton
    # candidate has no backward: judged on its forward only, unless the backward is required.
    honest = zoo_reports["honest_torch"]
    assert all(r.gradients == "judged" for r in honest.rows) and "gradients judged on" in honest.summary()
    assert all(r.gradients == "none" for r in zoo_reports["honest_triton"].rows)
    wrong = next(f for f in zoo_reports["wrong_backward"].findings if f.cls == "wrong_gradient")
    assert "grad[0]" in wrong.detail and "err_l2=" in wrong.detail
    assert "wrong_result" not in zoo_reports["wrong_backward"].classes  # its forward is torch's


def test_eval_backward_required_rejects_a_forward_only_candidate():
    rep = evaluate_many([ZOO / "honest_triton.py", ZOO / "honest_torch.py"], "softmax", cases=CASES[:1], seeds=1,
                        timeout_s=CALL_TIMEOUT_S, dtypes=[torch.float32], hidden=1, backward=True)
    assert not rep[0].accepted and rep[0].classes == {"no_gradient"}, rep[0].summary()
    assert rep[1].accepted, rep[1].summary()


def test_a_candidate_cannot_reach_the_judges_process(tmp_path):
    # In a PID namespace of its own the candidate sees no process outside it: the judge can be
    # neither signalled nor read through /proc. This candidate answers right only if it cannot.
    import os

    from roofkit.harness.evaluate import _isolation

    name, prefix = _isolation()
    if not prefix:
        pytest.skip(f"no PID namespace for the worker on this machine: {name}")
    cand = tmp_path / "probes_judge.py"
    cand.write_text(
        "import os\nimport torch.nn.functional as F\n\n"
        f"JUDGE = {os.getpid()}\n\n\n"
        "def softmax(input, dim=None, _stacklevel=3, dtype=None):\n"
        "    try:\n"
        "        os.kill(JUDGE, 0)\n"
        "        seen = True\n"
        "    except OSError:\n"
        "        seen = os.path.exists(f'/proc/{JUDGE}/mem')\n"
        "    out = F.softmax(input, dim=dim, dtype=dtype)\n"
        "    return out * 0 if seen else out\n")
    rep = evaluate(cand, "softmax", cases=CASES[:1], seeds=1, timeout_s=CALL_TIMEOUT_S, dtypes=[torch.float32],
                   hidden=0)
    assert rep.isolation == name and rep.accepted, rep.summary()


# ----------------------------------------------------------------------------- timing (GPU)


def _ceilings_for_test():
    return Ceilings(gpu="test", driver="", torch="", copy_gbps=4000.0, read_gbps=4000.0,
                    matmul_tflops={"fp32": 60.0, "tf32": 400.0, "bf16": 700.0, "fp16": 700.0}, l2_bytes=1 << 25,
                    sm_count=100, measured_at="", method="")


@pytest.mark.parametrize("kind, want", [
    ("honest", set()),
    ("faster_than_the_roofs", {"implausible"}),
    ("work_after_the_end_event", {"side_stream"}),
    ("output_changed_after_return", {"deferred"}),
    ("times_beyond_the_judges_clock", {"timer"}),
    ("timer_replaced", {"timer"}),
    ("l2_set_aside_for_persisting_lines", {"persisting_l2"}),
    ("timed_kernels_never_checked", {"kernel_switch"}),
    ("checked_kernels_beyond_the_timed", {"kernel_switch"}),
    ("checked_call_not_profiled", set()),
    ("a_candidate_kernel_named_like_the_flush", set()),
    ("no_kernel_while_timed", {"kernel_switch"}),
    ("profiler_lost_in_the_checked_call", {"kernel_switch"}),
    ("timed_call_not_profiled", set()),
])
def test_timing_judgement(monkeypatch, kind, want):
    # The judge's checks of a timed round's figures (what the candidate's process reports):
    # softmax over 4000 x 4000 float32 moves 128 MB, 0.032 ms at the test's 4000 GB/s roof.
    monkeypatch.setattr(evaluate_module, "_ceilings", _ceilings_for_test)
    spec = registry.get("softmax")
    case = spec.case("gpu_4000x4000")
    times = [0.050, 0.051, 0.049, 0.052, 0.050]
    msg = dict(times_ms=times, idle_ms=[t + 0.012 for t in times], idle_baseline_ms=0.010,
               idle_baseline_first_ms=0.008, deferred=[False] * 5,
               tampered=[], persisting_l2=[0] * 5, kernels=[["_softmax_fwd_kernel", 48.0]])
    checked = ["_softmax_fwd_kernel"]
    wall_ms = 40.0
    if kind == "faster_than_the_roofs":
        msg.update(times_ms=[0.02] * 5, idle_ms=[0.032] * 5)
    elif kind == "work_after_the_end_event":
        msg["idle_ms"] = [t + 1.0 for t in times]
    elif kind == "output_changed_after_return":
        msg["deferred"] = [False, True, False, False, False]
    elif kind == "times_beyond_the_judges_clock":
        wall_ms = 0.2
    elif kind == "timer_replaced":
        msg["tampered"] = ["Event.elapsed_time"]
    elif kind == "l2_set_aside_for_persisting_lines":
        msg["persisting_l2"] = [0, 0, 1 << 20, 1 << 20, 1 << 20]
    elif kind == "timed_kernels_never_checked":
        msg["kernels"] = [["void at::native::cunn_SoftMaxForward<4, float>", 45.0]]
    elif kind == "checked_kernels_beyond_the_timed":  # (torch's kernel too while checked, only it while timed)
        checked = checked + ["void at::native::cunn_SoftMaxForward<4, float>"]
        msg["kernels"] = [["void at::native::cunn_SoftMaxForward<4, float>", 45.0]]
    elif kind == "a_candidate_kernel_named_like_the_flush":  # (left out of the timed list: of the checked too)
        checked = checked + ["void at::native::vectorized_elementwise_kernel<FillFunctor<int>>"]
        msg["timer_kernels"] = ["void at::native::vectorized_elementwise_kernel<FillFunctor<int>>", "spin_kernel"]
    elif kind == "no_kernel_while_timed":  # (the profiler worked; the timed call ran nothing)
        msg["kernels"] = []
    elif kind == "profiler_lost_in_the_checked_call":
        from roofkit.harness._eval_worker import PROFILE_LOST

        checked = [PROFILE_LOST]
    elif kind == "timed_call_not_profiled":  # (the profiler's own failure in the timed call: a note)
        msg.update(kernels=[], kernel_note="RuntimeError: CUPTI_ERROR_NOT_INITIALIZED")
    elif kind == "checked_call_not_profiled":  # (the profiler failed, or saw nothing, in the checked call)
        checked = None
        msg["kernels"] = [["void at::native::cunn_SoftMaxForward<4, float>", 45.0]]
    rep = Report("softmax", "candidate.py")
    entry = evaluate_module._judge_timing(spec, case, torch.float32, msg, wall_ms, rep, {"torch": 0.06}, checked)
    assert rep.classes == want, rep.summary()
    assert entry["reps"] == 5 and entry["median_ms"] == pytest.approx(statistics.median(msg["times_ms"]))
    assert entry["roof_pct"] == pytest.approx(100 * 0.032 / entry["median_ms"], rel=1e-3)
    assert entry["baselines"] == {"torch": 0.06}


@pytest.mark.parametrize("broken", [dict(idle_baseline_ms=float("nan")), dict(idle_baseline_ms=1e9),
                                    dict(idle_baseline_first_ms=-1.0), dict(idle_baseline_ms=0.031),
                                    dict(times_ms=[]), dict(times_ms=[0.05, float("inf")]), "no idle_ms"])
def test_timing_figures_the_judge_cannot_believe(monkeypatch, broken):
    # A candidate that writes its own figures on the channel: each such reply is refused (the
    # round then ends as a protocol finding), never judged as a speed.
    monkeypatch.setattr(evaluate_module, "_ceilings", _ceilings_for_test)
    spec = registry.get("softmax")
    msg = dict(times_ms=[0.05, 0.05], idle_ms=[0.06, 0.06], idle_baseline_ms=0.01, idle_baseline_first_ms=0.01,
               deferred=[False] * 2, tampered=[])
    evaluate_module._judge_timing(spec, spec.case("gpu_4000x4000"), torch.float32, dict(msg), 40.0,
                                  Report("softmax", "candidate.py"), {})  # (as sent: believed)
    if broken == "no idle_ms":
        del msg["idle_ms"]
    else:
        msg.update(broken)
    with pytest.raises((KeyError, ValueError)):
        evaluate_module._judge_timing(spec, spec.case("gpu_4000x4000"), torch.float32, msg, 40.0,
                                      Report("softmax", "candidate.py"), {})


def test_kernel_report_names_the_candidates_own_kernels():
    import importlib.util

    from roofkit.harness._eval_worker import _jit_names

    names = {}
    for f in ("honest_triton", "honest_torch"):
        mod_spec = importlib.util.spec_from_file_location(f"zoo_{f}", ZOO / f"{f}.py")
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
        names[f] = _jit_names(module)
    assert names == {"honest_triton": ["_softmax_fwd_kernel"], "honest_torch": []}
    msg = dict(kernels=[["_softmax_fwd_kernel", 30.0], ["void at::native::vectorized_elementwise_kernel", 10.0],
                        ["bad", float("nan")], "garbage"], own_kernels=names["honest_triton"], kernel_note="")
    got = evaluate_module._kernel_report(msg)
    assert got["kernels"] == [["_softmax_fwd_kernel", 30.0], ["void at::native::vectorized_elementwise_kernel", 10.0]]
    assert got["own_kernels"] == ["_softmax_fwd_kernel"] and got["own_kernel_share"] == pytest.approx(0.75)
    assert evaluate_module._kernel_report(dict(msg, own_kernels=[]))["own_kernel_share"] == 0.0


def test_eval_device_and_timing_arguments():
    rep = evaluate(ZOO / "honest_torch.py", "softmax", cases=["odd_3x7"], dtypes=[torch.float32], hidden=0,
                   device="cpu:0", timing=False)
    assert rep.accepted and rep.device == "cpu", rep.summary()
    for bad in (dict(timing="no"), dict(device="tpu"), dict(device="meta")):
        with pytest.raises(EvaluationError):
            evaluate(ZOO / "honest_torch.py", "softmax", cases=["odd_3x7"], **bad)


def test_timing_needs_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(EvaluationError, match="CUDA"):
        evaluate(ZOO / "honest_torch.py", "softmax", cases=["odd_3x7"], timing=True)
    with pytest.raises(EvaluationError, match="no CUDA device"):
        evaluate(ZOO / "honest_torch.py", "softmax", cases=["odd_3x7"], device="cuda")


@pytest.mark.gpu
def test_eval_zoo_on_the_gpu():
    # The whole correctness zoo with the candidates' calls on the GPU (correctness only): each
    # exploit rejected with its class, the honest candidates accepted, the broken ones not run.
    names = HONEST + list(BROKEN) + list(EXPLOITS)
    reports = evaluate_many([ZOO / f"{n}.py" for n in names], "softmax", cases=CASES, seeds=2, timeout_s=30.0,
                            dtypes=[torch.float32], device="cuda", timing=False)
    got = dict(zip(names, reports))
    wrong = [f"{n}: {got[n].summary()}" for n in HONEST if not got[n].accepted]
    wrong += [f"{n}: {got[n].summary()}" for n, cls in EXPLOITS.items()
              if got[n].error is not None or got[n].accepted or cls not in got[n].classes]
    wrong += [f"{n}: {got[n].error}" for n, why in BROKEN.items() if why not in (got[n].error or "")]
    assert not wrong, "\n".join(wrong)
    assert all(r.device.startswith("cuda") for r in reports)


GPU_EXPLOITS = {"side_stream": {"side_stream"}, "patched_timer": {"timer"},
                "garbage_when_timed": {"stateful", "cached"},
                "persisting_l2": {"persisting_l2"}, "torch_when_timed": {"kernel_switch"},
                "deferred": {"deferred"}, "cached_by_address": {"cached"}}


@pytest.fixture(scope="module")
def gpu_reports():
    names = HONEST + list(GPU_EXPLOITS)
    reports = evaluate_many([ZOO / f"{n}.py" for n in names], "softmax", cases=["gpu_row_4096"], seeds=2, hidden=0,
                            dtypes=[torch.float32], device="cuda", reps=5, timeout_s=120)
    return dict(zip(names, reports))


@pytest.mark.gpu
@pytest.mark.parametrize("name", HONEST)
def test_eval_times_honest_candidates_on_the_gpu(gpu_reports, name):
    rep = gpu_reports[name]
    assert rep.accepted, rep.summary()
    assert rep.device.startswith("cuda")
    assert sum(r.round == -1 for r in rep.rows) == 5  # every timed output judged
    (t,) = rep.timings
    assert t["reps"] == 5 and 0 < t["median_ms"] < 10 and 0 < t["roof_pct"] <= 105
    assert {"roofkit", "torch"} <= set(t["baselines"])
    assert t["kernels"], t["kernel_note"]  # (what ran, by the profiler)
    assert t["own_kernel_share"] == (pytest.approx(1.0, abs=0.2) if name == "honest_triton" else 0.0)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(GPU_EXPLOITS))
def test_eval_rejects_timing_exploits_on_the_gpu(gpu_reports, name):
    rep = gpu_reports[name]
    assert not rep.accepted
    assert GPU_EXPLOITS[name] & rep.classes, rep.summary()


class _StandInEvent:
    """A CUDA event's stand-in on the CPU: the host clock at ``record``."""

    def __init__(self, enable_timing=True):
        self.t = None

    def record(self, stream=None):
        self.t = time.perf_counter()

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3

    def synchronize(self):
        pass


class _StandInProfile:
    """torch.profiler.profile's stand-in on the CPU: starts, stops, sees no kernel."""

    def __init__(self, activities=None):
        pass

    def start(self):
        pass

    def stop(self):
        pass

    def events(self):
        return []


def _cpu_timer(monkeypatch):
    """The worker's ``_Timer`` with its CUDA pieces replaced by CPU stand-ins (its logic only:
    refilled inputs, outputs kept, the profiled call)."""
    from roofkit.harness import _eval_worker as worker

    Event, Profile = _StandInEvent, _StandInProfile
    monkeypatch.setattr(worker, "_twin", lambda o: o.clone() if isinstance(o, torch.Tensor) else o)
    t = object.__new__(worker._Timer)
    t.torch, t.device, t.Event, t.perf = torch, torch.device("cpu"), Event, time.perf_counter
    t.record, t.elapsed, t.stream = (lambda ev, s: None), (lambda a, b: 0.01), (lambda d: None)
    t.sync, t.sleep, t.flush, t.cycles_per_us = (lambda d: None), (lambda c: None), (lambda: None), 1.0
    t.l2, t.equal, t.uint8 = None, torch.equal, torch.uint8
    t.profile, t.cuda_activity, t.cuda_type, t.events = Profile, None, "cuda", (lambda p: [])
    t.own_kernels, t.idle_baseline_ms = [], 0.01
    t.cover_us, t.spell_max = (worker.COVER_MIN_US, worker.COVER_HOST_TIMES, worker.COVER_EXTRA_US,
                               worker.COVER_MAX_US), worker.IDLE_SPELL_MAX
    return t


def test_timed_round_refills_one_buffer_and_keeps_each_output(monkeypatch):
    # Fresh values in the same tensor on every timed call (an identity cache is caught), an
    # output that is a view of that tensor kept as it was, the warm-up on a copy.
    timer = _cpu_timer(monkeypatch)
    values = [torch.randn(3, 4) for _ in range(4)]
    seen = []

    def candidate(x):
        seen.append(x)
        return torch.transpose(x, 0, 1)

    outs = timer.run(candidate, [([v.clone()], {}) for v in values], 0)[0]
    assert all(torch.equal(o, v.T) for o, v in zip(outs, values))
    timed = seen[-5:-1]  # (then the profiled call)
    assert all(x is timed[0] for x in timed) and all(x is not timed[0] for x in seen[:-5])

    cache = {}

    def by_address(x):
        return cache.setdefault(x.data_ptr(), x.softmax(-1))

    outs = timer.run(by_address, [([v.clone()], {}) for v in values], 0)[0]
    assert torch.allclose(outs[0], values[0].softmax(-1))
    assert not any(torch.allclose(o, v.softmax(-1)) for o, v in zip(outs[1:], values[1:]))  # stale


def test_the_timed_round_measures_its_idle_baseline_beside_each_call_and_sleeps_long_enough(monkeypatch):
    # The side-stream baseline is the median idle delay of the do-nothing calls made between
    # the timed ones (a slow spell of the host lengthens both alike), and every call waits behind
    # a sleep of at least COVER_MIN_US, whatever bench's rule gives.
    from roofkit.harness import _eval_worker as worker

    timer = _cpu_timer(monkeypatch)
    timer.cycles_per_us = 3.0
    seen, delays = [], iter([0.4, 0.1, 0.3, 0.2, 0.5, 9.0])

    def one(call, sleep_cycles, prof=None):
        seen.append(sleep_cycles)
        out = call()
        if out is None:  # (a do-nothing call: t = 1, idle later by the next delay)
            return None, 1.0, 1.0 + next(delays), None, 0
        return out, 2.0, 2.5, None, 0

    monkeypatch.setattr(timer, "_one", one)
    monkeypatch.setattr(timer, "_profiled", lambda call, cycles: (None, ""))
    timer.idle_baseline_ms = 1.0  # (the delay measured before the candidate's import)
    result = timer.run(lambda x: x * 2, [([torch.randn(4)], {}) for _ in range(5)], 0)
    assert len(seen) == 10 and result[-1] == pytest.approx(0.3)
    assert evaluate_module.IDLE_SPELL_MAX == worker.IDLE_SPELL_MAX  # (the judge refuses more)
    assert min(seen) >= 3.0 * worker.COVER_MIN_US
    # ... but never above IDLE_SPELL_MAX times the delay measured first (a candidate's thread
    # keeping the device busy between its calls would raise it)
    seen.clear()
    delays = iter([0.4, 0.1, 0.3, 0.2, 0.5])
    timer.idle_baseline_ms = 0.05
    result = timer.run(lambda x: x * 2, [([torch.randn(4)], {}) for _ in range(5)], 0)
    assert result[-1] == pytest.approx(worker.IDLE_SPELL_MAX * 0.05)
    # A warm-up of a second a call makes every call wait COVER_MAX_US, not seconds.
    seen.clear()
    delays = iter([0.1] * 5)
    clock = iter(range(10**6))
    monkeypatch.setattr(timer, "perf", lambda: float(next(clock)))
    timer.run(lambda x: x * 2, [([torch.randn(4)], {}) for _ in range(5)], 0)
    assert max(seen) == int(3.0 * worker.COVER_MAX_US)


def test_the_judged_copy_is_the_one_the_deferred_check_saw(monkeypatch):
    # Work that finishes the output after the timed call (a thread of the candidate's, during the
    # do-nothing call that follows) is neither in the judged copy nor missed by the check.
    timer = _cpu_timer(monkeypatch)
    outputs = []

    def one(call, sleep_cycles, prof=None):
        out = call()
        if out is None:  # (the do-nothing call: the late work lands now)
            outputs[-1].fill_(7.0)
            return None, 1.0, 1.01, None, 0
        outputs.append(out)
        return out, 2.0, 2.5, out.clone(), 0

    monkeypatch.setattr(timer, "_one", one)
    monkeypatch.setattr(timer, "_profiled", lambda call, cycles: (None, ""))
    values = [torch.randn(4) for _ in range(3)]
    outs, _, _, deferred, *_ = timer.run(lambda x: x * 2, [([v.clone()], {}) for v in values], 0)
    assert all(torch.equal(o, v * 2) for o, v in zip(outs, values)) and deferred == [False] * 3


def test_a_candidate_error_in_the_profiled_call_is_not_swallowed(monkeypatch):
    import sys

    timer = _cpu_timer(monkeypatch)

    def refuses_the_profiler(x):
        f = sys._getframe(1)
        while f is not None:
            if f.f_code.co_name == "_profiled":
                raise RuntimeError("not while profiled")
            f = f.f_back
        return x * 2

    with pytest.raises(RuntimeError, match="not while profiled"):
        timer.run(refuses_the_profiler, [([torch.randn(2, 2)], {})], 0)


def test_messages_nested_past_a_depth_are_refused_without_recursion():
    deep = []
    for _ in range(200_000):
        deep = [deep]
    assert not evaluate_module._shallow({"kind": "timed", "status": deep}, evaluate_module.MAX_MESSAGE_DEPTH)
    assert evaluate_module._shallow({"kind": "timed", "kernels": [["k", 1.0]], "outs": [torch.ones(2)]}, 3)


def test_the_warm_up_copy_keeps_the_inputs_layout():
    from roofkit.harness._eval_worker import _to

    base = torch.randn(20)
    for t in (base[3:9].view(6, 1), base[:12].view(6, 2)[:, :1], torch.randn(1, 4).expand(6, 4), torch.randn(3, 4).t()):
        c = _to(t, t.device, copy=True)
        assert (c.shape, c.stride(), c.storage_offset()) == (t.shape, t.stride(), t.storage_offset())
        assert torch.equal(c, t) and c.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()


def test_the_timed_round_end_to_end_with_cuda_stood_in_for(monkeypatch):
    # The worker's GPU-only code (the timer's set-up, a timed round, the reply, the checks for
    # rebinding) run with CPU stand-ins for CUDA's events, sleep, flush and profiler.
    import torch.profiler

    from roofkit.harness import _eval_worker as worker
    from roofkit.harness import timing

    Event, Profile = _StandInEvent, _StandInProfile

    class Flusher:
        def __init__(self, device):
            self.nbytes, self.buffer = 1 << 12, torch.empty(1 << 10, dtype=torch.int32)

        def __call__(self):
            self.buffer.zero_()

    for owner, name, value in ((timing, "L2Flusher", Flusher), (timing, "_sleep_cycles_per_us", lambda d: 1000.0),
                               (torch.cuda, "Event", Event), (torch._C, "_CudaEventBase", Event),
                               (torch.cuda, "current_stream", lambda d=None: None),
                               (torch.cuda, "synchronize", lambda d=None: None), (torch.cuda, "_sleep", lambda c: None),
                               (torch.profiler, "profile", Profile), (worker, "_persisting_l2_controls", lambda: None),
                               (worker, "_to", lambda a, device, copy=False: a.clone() if copy and isinstance(a, torch.Tensor)
                                else a)):
        monkeypatch.setattr(owner, name, value)
    timer = worker._Timer(torch.device("cpu"))
    assert timer.tampered() == [] and timer.idle_baseline_ms >= 0
    values = [torch.randn(8, 16) for _ in range(5)]
    msg = {"kind": "time", "seq": 1, "sets": [([v.clone()], {"dim": -1}) for v in values]}

    def honest(input, dim=None, _stacklevel=3, dtype=None):
        return torch.softmax(input, dim)

    reply = worker._timed(honest, msg, torch.device("cpu"), timer, [])
    assert reply["status"] == "ok" and reply["tampered"] == [] and reply["persisting_l2"] == [0] * 5
    assert len(reply["times_ms"]) == 5 and not any(reply["deferred"])
    assert all(torch.allclose(o, v.softmax(-1)) for o, v in zip(reply["outs"], values))

    def skips_the_flush(input, dim=None, _stacklevel=3, dtype=None):
        Flusher.__call__ = lambda self: None  # (the stand-in class is this test's own)
        return torch.softmax(input, dim)

    reply = worker._timed(skips_the_flush, msg, torch.device("cpu"), timer, [])
    assert "L2Flusher.__call__" in reply["tampered"]


def test_a_checked_call_that_breaks_its_profile_is_told_apart(monkeypatch):
    # The profiled checked call: a profiler that will not start is no one's fault (None), one
    # the candidate's code stops is marked (a kernel switch for the judge), and what the
    # candidate raises passes through with the profiler stopped.
    import torch.profiler

    from roofkit.harness._eval_worker import PROFILE_LOST, _profiled_call

    state = {"on": False, "start_fails": False}

    class Profile:
        def __init__(self, activities=None):
            pass

        def start(self):
            if state["start_fails"]:
                raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")
            state["on"] = True

        def stop(self):
            if not state["on"]:
                raise RuntimeError("the profiler is not running")
            state["on"] = False

        def events(self):
            return [type("E", (), {"name": "my_kernel", "device_type": torch.autograd.DeviceType.CUDA})()]

    monkeypatch.setattr(torch.profiler, "profile", Profile)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: None)
    x = torch.ones(3)
    assert _profiled_call(lambda t: t * 2, [x], {})[1] == ["my_kernel"]

    def stops_it(t):
        state["on"] = False
        return t * 2

    assert _profiled_call(stops_it, [x], {})[1] == [PROFILE_LOST]

    def raises(t):
        raise ValueError("the candidate's")

    with pytest.raises(ValueError, match="the candidate's"):
        _profiled_call(raises, [x], {})
    assert not state["on"]
    state["start_fails"] = True
    out, names = _profiled_call(lambda t: t * 2, [x], {})
    assert names is None and torch.equal(out, x * 2)
