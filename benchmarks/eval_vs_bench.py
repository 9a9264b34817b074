"""`roofkit eval`'s timing of a candidate against `roofkit bench`'s timing of the same function:
the straightforward Triton softmax of the eval zoo (tests/harness/eval_zoo/honest_triton.py) on a
few GPU cases of softmax, judged and timed by `roofkit.harness.evaluate.evaluate` (in the
candidate's own process), then timed here by `harness.timing.time_providers` (bench's method:
cold L2, CUDA events, median) on the same case's inputs. Prints a table; writes
$OUT/eval_vs_bench.json.

    python benchmarks/eval_vs_bench.py     (CASES, DTYPES, REPS, BASELINES=0|1 in the environment)
"""
import importlib.util
import json
import os
from pathlib import Path

import torch

from roofkit.harness import registry
from roofkit.harness.device import environment
from roofkit.harness.evaluate import evaluate
from roofkit.harness.inputs import make_generator
from roofkit.harness.timing import time_providers

CANDIDATE = Path(__file__).resolve().parents[1] / "tests" / "harness" / "eval_zoo" / "honest_triton.py"
CASES = os.environ.get("CASES", "gpu_4000x4000 gpu_row_32768 gpu_1823x781 gpu_row_4096").split()
DTYPES = [getattr(torch, d) for d in os.environ.get("DTYPES", "float32 bfloat16").split()]
REPS = int(os.environ.get("REPS", "30"))
BASELINES = os.environ.get("BASELINES", "1") == "1"  # roofkit, torch, torch.compile timed by the judge too


def main():
    spec = registry.get("softmax")
    device = torch.device("cuda")
    rep = evaluate(CANDIDATE, "softmax", cases=CASES, dtypes=DTYPES, seeds=2, hidden=0, reps=REPS, device="cuda",
                   baselines=BASELINES)
    print(rep.summary())
    print(rep.table())
    mod_spec = importlib.util.spec_from_file_location("honest_triton", CANDIDATE)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    rows = []
    for t in rep.timings:
        case, dtype = spec.case(t["case"]), getattr(torch, t["dtype"])
        inputs = spec.make_inputs(case, dtype, make_generator(0, device), device)
        bench = time_providers({"candidate": lambda: mod.softmax(*inputs.args, **inputs.kwargs)}, device=device)
        b = bench["candidate"].median_ms
        rows.append(dict(case=t["case"], dtype=t["dtype"], eval_ms=t["median_ms"], eval_p20_ms=t["p20_ms"],
                         eval_p80_ms=t["p80_ms"], bench_ms=b, bench_p20_ms=bench["candidate"].p20_ms,
                         bench_p80_ms=bench["candidate"].p80_ms, ratio=t["median_ms"] / b, baselines=t["baselines"],
                         roof_pct=t["roof_pct"]))
    out = os.environ.get("OUT", "/tmp")
    json.dump(dict(environment=environment(device), accepted=rep.accepted, findings=[f.__dict__ for f in rep.findings],
                   method=dict(eval=rep.timings[0]["method"] if rep.timings else "", bench=bench["candidate"].method),
                   rows=rows), open(f"{out}/eval_vs_bench.json", "w"), indent=1)
    print(f"{'case':<22} {'dtype':<9} {'eval ms':>9} {'bench ms':>9} {'eval/bench':>10}")
    for r in rows:
        print(f"{r['case']:<22} {r['dtype']:<9} {r['eval_ms']:>9.4f} {r['bench_ms']:>9.4f} {r['ratio']:>10.3f}")


if __name__ == "__main__":
    main()
