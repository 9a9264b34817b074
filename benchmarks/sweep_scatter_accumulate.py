"""scatter_add's atomic path on 16-bit destinations: a float32 copy (rounded once) against 16-bit
atomics (as torch's CUDA kernels add), at the llama3-8b MoE combine (16384 top-2 rows added into
8192 token rows of 4096, bf16: 2 contributions per destination, where the default takes the
copy). Times roofkit with FP32_ACCUMULATE_MIN_PER_DEST at 1 (the copy) and 4 (16-bit atomics)
beside torch and torch.compile, and gives each provider's relative L2 error against the float64
reference (three seeds): what the copy buys in accuracy for its extra passes.

    PYTHONPATH=src python3 benchmarks/sweep_scatter_accumulate.py      (a GPU)
"""
import torch

import roofkit.config
from roofkit.harness.timing import time_providers
from roofkit.ops.scatter import SCATTER_ADD_SPEC as SPEC

dev, bf = "cuda", torch.bfloat16
case = next(c for c in SPEC.suites["llama3-8b"] if c.name == "moe_combine_8192x4096_top2")


def with_ratio(ratio):
    def run(*args, **kwargs):
        with roofkit.config.override("scatter_add", FP32_ACCUMULATE_MIN_PER_DEST=ratio):
            return SPEC.impl(*args, **kwargs)
    return run


providers = {"roofkit float32 copy": with_ratio(1.0), "roofkit 16-bit atomics": with_ratio(4.0)}
for name in ("torch", "torch.compile"):
    providers[name] = SPEC.baselines[name]()
errors = {name: [] for name in providers}
for seed in range(3):
    g = torch.Generator(device=dev).manual_seed(seed)
    inp = SPEC.make_inputs(case, bf, g, dev)
    ref = SPEC.reference(*inp.map(lambda t: t.double() if t.is_floating_point() else t).args,
                         **inp.map(lambda t: t.double() if t.is_floating_point() else t).kwargs)
    for name, fn in providers.items():
        out = fn(*inp.args, **inp.kwargs).double()
        errors[name].append(((out - ref).norm() / ref.norm()).item())
fns = {name: (lambda fn=fn: fn(*inp.args, **inp.kwargs)) for name, fn in providers.items()}
res = time_providers(fns, device=dev, rep_ms=100)
print(f"--- scatter_add {case.name} bf16 (L {case['index_shape'][0]} rows into N {case['shape'][0]})")
for name, t in sorted(res.items(), key=lambda kv: kv[1].median_ms):
    err = ", ".join(f"{e:.2e}" for e in errors[name])
    print(f"  {name:24s} {t.median_ms * 1e3:8.1f} us   relative L2 error vs float64: {err}")
