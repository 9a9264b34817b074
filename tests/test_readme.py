"""The README's results tables are what the committed records give (benchmarks/readme_tables.py),
and the README keeps the two set-up commands CI runs."""

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.harness
ROOT = Path(__file__).resolve().parents[1]


def _tables_module():
    spec = importlib.util.spec_from_file_location("readme_tables", ROOT / "benchmarks" / "readme_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_results_tables_are_generated_from_the_records():
    module = _tables_module()
    assert module.main(["--check"]) == 0, "run: python benchmarks/readme_tables.py"
    text = (ROOT / "README.md").read_text()
    assert "| swiglu | mlp_8192x14336 |" in text  # a row the records hold


def test_readme_holds_the_commands_ci_runs_and_stays_short():
    text = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    test_command = 'python -m pip install -e ".[test]" && python -m pytest -n 2'
    assert test_command in text and test_command in ci
    assert 'python -m pip install -e ".[bench]" && roofkit bench' in text
    assert len(text.splitlines()) <= 250
