"""scatter_add's atomic path on 16-bit destinations at the llama3-8b MoE combine (16384 top-2 rows
added into 8192 token rows of 4096, bf16: 2 contributions per destination): a float32 copy
(rounded once; FP32_ACCUMULATE_MIN_PER_DEST = 1) against 16-bit atomics (as torch's CUDA
kernels add; 4, the default), and 16-bit atomics with the index range checked at the end of the
call instead of before the adds (PRECHECK_MIN_WIDTH past the width). One timing pass per
setting, the override held around the pass, torch and torch.compile timed in each as anchors;
each provider's relative L2 error against the float64 reference (three seeds).

    PYTHONPATH=src python3 benchmarks/sweep_scatter_accumulate.py      (a GPU)
"""
import torch

import roofkit.config
from roofkit.harness.timing import time_providers
from roofkit.ops.scatter import SCATTER_ADD_SPEC as SPEC

dev, bf = "cuda", torch.bfloat16
case = next(c for c in SPEC.suites["llama3-8b"] if c.name == "moe_combine_8192x4096_top2")


# Each roofkit setting: the float32 copy, 16-bit atomics (the default here), and 16-bit atomics
# with the index range counted inside the adds and checked at the end of the call instead of
# before them (PRECHECK_MIN_WIDTH past the row width): the host's wait then follows the adds
# instead of sitting between the copy of input and the adds.
SETTINGS = {"roofkit float32 copy": dict(FP32_ACCUMULATE_MIN_PER_DEST=1.0),
            "roofkit 16-bit atomics": dict(FP32_ACCUMULATE_MIN_PER_DEST=4.0),
            "roofkit 16-bit atomics, end check": dict(FP32_ACCUMULATE_MIN_PER_DEST=4.0, PRECHECK_MIN_WIDTH=1 << 30)}
baselines = {name: SPEC.baselines[name]() for name in ("torch", "torch.compile")}
errors = {name: [] for name in list(SETTINGS) + list(baselines)}
for seed in range(3):
    g = torch.Generator(device=dev).manual_seed(seed)
    inp = SPEC.make_inputs(case, bf, g, dev)
    dbl = inp.map(lambda t: t.double() if t.is_floating_point() else t)
    ref = SPEC.reference(*dbl.args, **dbl.kwargs)
    for name in errors:
        if name in SETTINGS:
            with roofkit.config.override("scatter_add", **SETTINGS[name]):
                out = SPEC.impl(*inp.args, **inp.kwargs).double()
        else:
            out = baselines[name](*inp.args, **inp.kwargs).double()
        errors[name].append(((out - ref).norm() / ref.norm()).item())
# One timing pass per setting, the override held around the whole pass (entering one drops the kept
# plans: inside a timed call that host work would starve the GPU and be timed), torch and
# torch.compile timed again in each pass as the anchor between passes.
print(f"--- scatter_add {case.name} bf16 (L {case['index_shape'][0]} rows into N {case['shape'][0]})")
for name, setting in SETTINGS.items():
    fns = {name: lambda: SPEC.impl(*inp.args, **inp.kwargs)}
    fns.update({b: (lambda fn=fn: fn(*inp.args, **inp.kwargs)) for b, fn in baselines.items()})
    with roofkit.config.override("scatter_add", **setting):
        res = time_providers(fns, device=dev, rep_ms=100)
    for prov, t in sorted(res.items(), key=lambda kv: kv[1].median_ms):
        err = ", ".join(f"{e:.2e}" for e in errors[prov])
        print(f"  [{name} pass] {prov:24s} {t.median_ms * 1e3:8.1f} us (p20-p80 {t.p20_ms * 1e3:.1f}-{t.p80_ms * 1e3:.1f})"
              f"   relative L2 error vs float64: {err}")
