"""Every registered op x dtype x case against its float64 reference (all verification rules)."""

import pytest

from roofkit.harness import registry
from roofkit.harness.verify import verify_op


def _params():
    out = []
    for spec in registry.all_specs():
        for case in spec.cases:
            for dtype in spec.case_dtypes(case):
                marks = [getattr(pytest.mark, spec.marker)] if spec.marker else []
                if "gpu" in case.tags:
                    marks.append(pytest.mark.gpu)
                if "slow" in case.tags:
                    marks.append(pytest.mark.slow)
                name = str(dtype).removeprefix("torch.")
                out.append(pytest.param(spec.name, case.name, dtype, marks=marks, id=f"{spec.name}-{case.name}-{name}"))
    return out


@pytest.mark.parametrize("op,case,dtype", _params())
def test_op_matches_float64_reference(op, case, dtype, device):
    seeds = 1 if "over_2pow31" in case else 3
    report = verify_op(op, cases=[case], dtypes=[dtype], seeds=seeds, device=device)
    assert report.rows, "no rows verified"
    assert report.passed, report.summary()


def test_every_op_has_the_declarations_the_harness_needs():
    specs = registry.all_specs()
    assert {s.name for s in specs} >= {"softmax", "log_softmax", "rms_norm"}
    for s in specs:
        assert s.cases and s.suites.get("llama3-8b"), s.name
        assert "torch" in s.baselines and "torch.compile" in s.baselines, s.name
        names = [c.name for c in s.cases]
        assert len(names) == len(set(names)), f"{s.name}: duplicate case names"
        assert any("gpu" in c.tags for c in s.cases), f"{s.name}: no GPU cases"
        assert any(c.get("shape") and 0 in c["shape"] for c in s.cases), f"{s.name}: no zero-size case"
