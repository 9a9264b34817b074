"""Quick GPU check of cross_entropy's staged-row kernel after a change: it builds (no fallback),
and one timing of forward+backward at 8192x128256 bf16 against the online kernel, cold L2.
``PYTHONPATH=src python3 benchmarks/check_ce_smem.py``"""

import importlib
import warnings

import torch

from roofkit.harness.timing import time_providers

ce = importlib.import_module("roofkit.ops.cross_entropy")
warnings.simplefilter("error", RuntimeWarning)
x = (3 * torch.randn(8192, 128256, device="cuda")).to(torch.bfloat16).requires_grad_(True)
t = torch.randint(0, 128256, (8192,), device="cuda")


def step(smem):
    def call():
        ce.SMEM_PATH = smem
        return torch.autograd.grad(ce.cross_entropy(x, t), x)
    return call


tm = time_providers({"staged": step(True), "online": step(False)}, device="cuda")
assert ce._SMEM_PROGRAMS_PER_SM and not ce._SMEM_FAILED
for name, r in tm.items():
    print(f"{name:8s} {r.median_ms * 1e3:8.1f} us {2 * x.numel() * 2 / (r.median_ms * 1e-3) / 1e9:7.0f} GB/s")
