"""scatter_add's atomic path on 16-bit destinations: a float32 copy (rounded once) against 16-bit
atomics (as torch's CUDA kernels add), at the llama3-8b MoE combine (16384 top-2 rows added into
8192 token rows of 4096, bf16: 2 contributions per destination, where the default takes the
copy). Times roofkit with FP32_ACCUMULATE_MIN_PER_DEST at 1 (the copy) and 4 (16-bit atomics)
beside torch and torch.compile (one timing pass per setting, the override held around the
pass), and gives each provider's relative L2 error against the float64
reference (three seeds): what the copy buys in accuracy for its extra passes.

    PYTHONPATH=src python3 benchmarks/sweep_scatter_accumulate.py      (a GPU)
"""
import torch

import roofkit.config
from roofkit.harness.timing import time_providers
from roofkit.ops.scatter import SCATTER_ADD_SPEC as SPEC

dev, bf = "cuda", torch.bfloat16
case = next(c for c in SPEC.suites["llama3-8b"] if c.name == "moe_combine_8192x4096_top2")


RATIOS = {"roofkit float32 copy": 1.0, "roofkit 16-bit atomics": 4.0}
baselines = {name: SPEC.baselines[name]() for name in ("torch", "torch.compile")}
errors = {name: [] for name in list(RATIOS) + list(baselines)}
for seed in range(3):
    g = torch.Generator(device=dev).manual_seed(seed)
    inp = SPEC.make_inputs(case, bf, g, dev)
    dbl = inp.map(lambda t: t.double() if t.is_floating_point() else t)
    ref = SPEC.reference(*dbl.args, **dbl.kwargs)
    for name in errors:
        if name in RATIOS:
            with roofkit.config.override("scatter_add", FP32_ACCUMULATE_MIN_PER_DEST=RATIOS[name]):
                out = SPEC.impl(*inp.args, **inp.kwargs).double()
        else:
            out = baselines[name](*inp.args, **inp.kwargs).double()
        errors[name].append(((out - ref).norm() / ref.norm()).item())
# One timing pass per ratio, the override held around the whole pass (entering one drops the kept
# plans: inside a timed call that host work would starve the GPU and be timed), torch and
# torch.compile timed again in each pass as the anchor between passes.
print(f"--- scatter_add {case.name} bf16 (L {case['index_shape'][0]} rows into N {case['shape'][0]})")
for name, ratio in RATIOS.items():
    fns = {name: lambda: SPEC.impl(*inp.args, **inp.kwargs)}
    fns.update({b: (lambda fn=fn: fn(*inp.args, **inp.kwargs)) for b, fn in baselines.items()})
    with roofkit.config.override("scatter_add", FP32_ACCUMULATE_MIN_PER_DEST=ratio):
        res = time_providers(fns, device=dev, rep_ms=100)
    for prov, t in sorted(res.items(), key=lambda kv: kv[1].median_ms):
        err = ", ".join(f"{e:.2e}" for e in errors[prov])
        print(f"  [{name} pass] {prov:24s} {t.median_ms * 1e3:8.1f} us (p20-p80 {t.p20_ms * 1e3:.1f}-{t.p80_ms * 1e3:.1f})"
              f"   relative L2 error vs float64: {err}")
