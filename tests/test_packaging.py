"""What a kernel user installs (torch, triton, numpy) is enough for the ops; the command line says
which extra it needs instead of failing on an import."""

import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.harness

# Run in a fresh process where the bench extra's packages cannot be imported.
_BLOCK = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("rich", "matplotlib", "pynvml"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
        return None
sys.meta_path.insert(0, Block())
import importlib.util
_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name.split(".")[0] in ("rich", "matplotlib", "pynvml") else _find_spec(name, *a)
"""


def _run(code: str) -> subprocess.CompletedProcess:
    import roofkit

    env = dict(os.environ, TRITON_INTERPRET="1")
    src = str(pathlib.Path(roofkit.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [src, env.get("PYTHONPATH", "")] if p)
    return subprocess.run([sys.executable, "-c", _BLOCK + code], env=env, capture_output=True, text=True, timeout=300)


def test_ops_modules_and_registry_need_no_bench_extra():
    run = _run(
        "import torch, roofkit, roofkit.nn\n"
        "x = torch.randn(4, 33)\n"
        "assert torch.allclose(roofkit.softmax(x, dim=-1), torch.softmax(x, dim=-1), atol=1e-6)\n"
        "assert roofkit.nn.RMSNorm(33)(x).shape == x.shape\n"
        "from roofkit.harness import registry\n"
        "from roofkit.harness.verify import verify_op\n"
        "assert verify_op('softmax', cases=['odd_3x7'], seeds=1).passed\n"
        "assert len(registry.all_specs()) >= 25\n"
        "assert not any(m.split('.')[0] in ('rich', 'matplotlib', 'pynvml') for m in sys.modules)\n"
        "print('ok')\n"
    )
    assert run.returncode == 0 and "ok" in run.stdout, run.stderr[-3000:]


def test_cli_without_the_bench_extra_says_how_to_install_it():
    run = _run("from roofkit.cli import main\nsys.exit(main(['list']))\n")
    assert run.returncode == 2, (run.stdout, run.stderr[-2000:])
    assert "needs the bench extra (rich, matplotlib not installed)" in run.stderr
    assert 'pip install "roofkit[bench]"' in run.stderr


def test_the_ops_never_import_the_registry():
    # One direction: the harness's registry imports the op modules (SPEC_MODULES) and reads their
    # SPECS; an op module importing the registry back would make the import cycle again.
    import ast
    import pathlib

    from roofkit.harness import registry

    ops = pathlib.Path(registry.__file__).resolve().parents[1] / "ops"
    offenders = []
    for path in ops.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
            module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            if "registry" in module or any("registry" in n for n in names):
                offenders.append(f"{path.relative_to(ops)}:{node.lineno}")
    assert not offenders, offenders
    # and every module the registry names has SPECS, each registered under its own name
    names = [s.name for s in registry.all_specs()]
    assert len(names) == len(set(names)) >= 25
