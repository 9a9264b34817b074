"""The command line: exit statuses and what it prints."""

import json
import os

import pytest
import torch
import torch.nn.functional as F

from roofkit.cli import main
from roofkit.harness import registry


def test_cli_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("softmax", "log_softmax", "rms_norm"):
        assert name in out


def test_cli_list_providers_names_those_not_installed_and_how_to_install_them(monkeypatch, capsys):
    from roofkit.harness import baselines

    spec = registry.get("softmax")
    monkeypatch.setitem(spec.baselines, "liger", lambda: None)  # what its factory gives without the package
    monkeypatch.setattr(baselines, "installed", lambda module: module != "liger_kernel")
    assert main(["list", "softmax", "--providers"]) == 0
    out = capsys.readouterr().out
    assert "liger (not installed)" in out
    assert "liger: not installed (pip install roofkit[peers]); for softmax" in out
    assert out.count("liger: not installed") == 1
    assert "roofkit, torch, torch.compile" in out
    # without --providers nothing is built, but a peer library that is not there is still named
    monkeypatch.setattr(baselines, "installed", lambda module: module not in ("liger_kernel", "flag_gems"))
    assert main(["list", "softmax", "rope"]) == 0
    out = capsys.readouterr().out
    assert "liger (not installed)" in out and "flaggems (not installed)" in out
    assert "liger: not installed (pip install roofkit[peers]); for softmax, rope" in out
    monkeypatch.setattr(baselines, "installed", lambda module: True)
    assert main(["list", "softmax"]) == 0
    out = capsys.readouterr().out
    assert "not installed" not in out and "liger, flaggems" in out


def test_cli_verify_quick_passes(capsys):
    assert main(["verify", "softmax", "--quick", "--dtype", "float32", "--seeds", "1"]) == 0
    assert "pass" in capsys.readouterr().out


def test_cli_verify_exits_1_and_prints_the_failing_case(monkeypatch, capsys):
    spec = registry.get("softmax")
    monkeypatch.setattr(spec, "impl", lambda input, dim=-1, dtype=None: F.softmax(input, dim) * 1.01)
    assert main(["verify", "softmax", "--quick", "--dtype", "float32", "--seeds", "1"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "err_l2=" in out


def test_cli_verify_dtype_the_op_does_not_take_is_an_error(capsys):
    assert main(["verify", "softmax", "--quick", "--dtype", "float64"]) == 2
    out = capsys.readouterr().out
    assert "softmax does not take float64" in out and "float32" in out


def test_cli_unknown_op_is_an_error():
    with pytest.raises(SystemExit):
        main(["verify", "no_such_op"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_cli_bench_without_gpu_says_so_and_runs_checks(capsys):
    assert main(["bench", "rms_norm"]) == 0
    out = capsys.readouterr().out
    assert "timing needs a GPU" in out and "rms_norm" in out and "Nothing is written." in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_cli_bench_without_gpu_reports_progress_op_by_op(capsys):
    import re

    assert main(["bench", "softmax", "transpose"]) == 0
    out = capsys.readouterr().out
    first = re.search(r"\[1/2\] softmax: (\d+)/(\d+) rows passed \(\d+\.\d s\)", out)
    second = re.search(r"\[2/2\] transpose: (\d+)/(\d+) rows passed \(\d+\.\d s\)", out)
    assert first and second and first.start() < second.start(), out
    total = int(first[2]) + int(second[2])
    assert f"{total}/{total}" in out  # the progress bar over every (case, dtype, seed) row


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_cli_bench_without_gpu_names_the_options_it_ignores(tmp_path, capsys):
    assert main(["bench", "rms_norm", "--suite", "gpt2", "--out", str(tmp_path / "o"), "--graph"]) == 0
    out = capsys.readouterr().out
    assert "ignored without a GPU: --suite --graph --out" in out and not (tmp_path / "o").exists()


def test_cli_report_compares_two_runs(tmp_path, capsys):
    def write(path, ms):
        rec = dict(op="softmax", case="c", shape="4", dtype="bfloat16", mode="fwd", provider="roofkit",
                   status="ok", median_ms=ms, p20_ms=ms * 0.99, p80_ms=ms * 1.01)
        path.write_text(json.dumps({"environment": {"gpu": "G"}, "ceilings": None, "records": [rec]}))

    write(tmp_path / "a.json", 1.0)
    write(tmp_path / "b.json", 1.5)
    assert main(["report", str(tmp_path / "a.json")]) == 0
    assert main(["report", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 1
    assert "regression" in capsys.readouterr().out


@pytest.mark.parametrize("inherited", ["", "0", "false", "off", "no", " 1", "1 "])
def test_cli_switches_the_interpreter_on_without_a_gpu_whatever_the_environment_says(inherited, monkeypatch):
    # An inherited TRITON_INTERPRET="" (or "0") used to survive setdefault, and every op then
    # failed to compile for a GPU that is not there (found by a fresh-user walkthrough).
    from roofkit import cli

    if torch.cuda.is_available():
        pytest.skip("with a GPU the CLI leaves TRITON_INTERPRET alone")
    monkeypatch.setenv("TRITON_INTERPRET", inherited)
    assert cli._setup_backend() is False
    assert os.environ["TRITON_INTERPRET"] == "1"


def test_cli_verify_runs_on_cpu_in_a_fresh_process_without_triton_interpret():
    # In a fresh process (the test process has the interpreter on before anything is imported):
    # the CLI must switch the interpreter on before roofkit.ops defines its kernels, or every op
    # fails with "0 active drivers" (found by a fresh-user walkthrough: `roofkit bench` on CPU).
    import pathlib
    import subprocess
    import sys

    if torch.cuda.is_available():
        pytest.skip("with a GPU the kernels compile for it")
    import roofkit

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    src = str(pathlib.Path(roofkit.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [src, env.get("PYTHONPATH", "")] if p)
    run = subprocess.run([sys.executable, "-m", "roofkit.cli", "verify", "softmax", "--quick", "--seeds", "1"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:])
    assert "softmax" in run.stdout and "pass" in run.stdout


def test_interpreter_switch_reads_the_variable_as_triton_does(monkeypatch):
    # roofkit and Triton must agree on whether the interpreter is on, or kernels are launched on
    # CPU tensors for a GPU (or refused): compare with Triton's own reader on the values users set.
    from triton._C.libtriton import getenv_bool

    from roofkit._env import interpreter_active

    for v in ["1", " 1", "1 ", "true", "TRUE", "on", "ON", "yes", "Y", "y", "t", "0", "", "false", "off", "no", "2"]:
        monkeypatch.setenv("TRITON_INTERPRET", v)
        assert interpreter_active() == getenv_bool("TRITON_INTERPRET", False), v



@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_cli_tune_without_gpu_exits_2_and_says_tuning_needs_a_gpu(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ROOFKIT_CACHE_DIR", str(tmp_path))
    assert main(["tune"]) == 2
    assert main(["tune", "matmul", "--suite", "acceptance"]) == 2
    out = capsys.readouterr().out
    assert out.count("roofkit tune: tuning needs a CUDA GPU") == 2 and "nothing was tuned or written" in out
    assert not list(tmp_path.iterdir())


def test_cli_tune_names_a_case_the_suite_does_not_hold(capsys):
    # Checked before the GPU: a typo is reported as such on any machine.
    assert main(["tune", "matmul", "--cases", "no_such_case"]) == 2
    out = capsys.readouterr().out
    assert "no case named no_such_case in suite 'llama3-8b' of matmul" in out and "qkv_8192x6144x4096" in out


def test_version_prints_the_package_version(capsys):
    import roofkit
    from roofkit.cli import main

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"roofkit {roofkit.__version__}"


def test_cli_output_into_a_closed_pipe_ends_without_a_traceback():
    # `roofkit eval ... | head -1`: the reader goes away before the verdict is printed; the
    # command stops quietly instead of printing BrokenPipeError's traceback.
    import pathlib
    import subprocess
    import sys

    import roofkit

    env = dict(os.environ)
    src = str(pathlib.Path(roofkit.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [src, env.get("PYTHONPATH", "")] if p)
    zoo = pathlib.Path(__file__).parent / "harness" / "eval_zoo" / "honest_torch.py"
    proc = subprocess.Popen([sys.executable, "-m", "roofkit.cli", "eval", str(zoo), "--op", "softmax", "--cases",
                             "odd_3x7", "--dtype", "float32", "--seeds", "1", "--hidden", "0"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # (before the child has printed anything: it imports torch first)
    err = proc.stderr.read().decode(errors="replace")
    proc.wait(timeout=300)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-2000:]
    assert proc.returncode == 1
