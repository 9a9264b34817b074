"""Launch-configuration sweep for the heuristics of softmax and rms_norm (GPU only).

    PYTHONPATH=src python3 benchmarks/sweep.py [--quick] > sweep.txt

For each acceptance shape, every candidate configuration is checked against torch (allclose in
float32) and timed interleaved with the others (cold L2, CUDA events, roofkit.harness.timing);
GB/s counts the op's ideal bytes (its cost model). The chosen heuristics and the outcome are
recorded in docs/softmax_cross_entropy.md and docs/norms.md.
"""

import importlib
import sys

import torch
import torch.nn.functional as F

from roofkit.harness.spec import case
from roofkit.harness.timing import time_providers

sm = importlib.import_module("roofkit.ops.softmax")
rn = importlib.import_module("roofkit.ops.rms_norm")
ce = importlib.import_module("roofkit.ops.cross_entropy")
SC, RC = sm.Config, rn.Config


def run(title, nbytes, fns, check):
    good = {}
    for name, fn in fns.items():
        try:
            out = fn()
            check(out)
            good[name] = fn
        except Exception as exc:
            print(f"  {title} {name}: FAILED {type(exc).__name__}: {str(exc)[:160]}")
        torch.cuda.synchronize()
    t = time_providers(good, rep_ms=100)
    best = min(t, key=lambda k: t[k].median_ms)
    for name, v in t.items():
        mark = " <- best" if name == best else ""
        print(f"  {title:28s} {name:34s} {v.median_ms * 1e3:9.1f} us  {nbytes / v.median_ms / 1e6:7.0f} GB/s  spread {v.spread:5.1%}{mark}")
    sys.stdout.flush()


def close(ref):
    def check(out):
        torch.testing.assert_close(out.float(), ref.float(), rtol=2e-2, atol=2e-3)
    return check


def softmax_fwd(m, n, configs):
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    nbytes = sm.softmax_cost(case("c", shape=(m, n)), torch.bfloat16).bytes
    fns = {"heuristic " + str(tuple(sm._launch_config(n, x.device, m))): lambda: sm._softmax_forward(x, 1, False)}
    for c in configs:
        fns[str(tuple(c))] = (lambda c=c: sm._softmax_forward(x, 1, False, c))
    fns["torch"] = lambda: F.softmax(x, -1)
    run(f"softmax fwd {m}x{n}", nbytes, fns, close(F.softmax(x.float(), -1)))


def softmax_bwd(m, n, configs):
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    y = F.softmax(x, -1)
    dy = torch.randn_like(y)
    nbytes = 3 * m * n * 2
    ref = torch.ops.aten._softmax_backward_data(dy, y, 1, torch.bfloat16)
    fns = {"heuristic": lambda: sm._softmax_backward(dy, y, 1, False)}
    for c in configs:
        fns[str(tuple(c))] = (lambda c=c: sm._softmax_backward(dy, y, 1, False, c))
    run(f"softmax bwd {m}x{n}", nbytes, fns, close(ref))


def rms_fwd(m, n, configs):
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    eps = 1e-6
    nbytes = rn.rms_norm_cost(case("c", shape=(m, n)), torch.bfloat16).bytes
    fns = {"heuristic " + str(tuple(rn._fwd_config(n))): lambda: rn._rms_norm_forward(x, w, eps)[0]}
    for c in configs:
        fns[str(tuple(c))] = (lambda c=c: rn._rms_norm_forward(x, w, eps, c)[0])
    fns["torch"] = lambda: F.rms_norm(x, (n,), w, eps)
    run(f"rms_norm fwd {m}x{n}", nbytes, fns, close(F.rms_norm(x.float(), (n,), w.float(), eps)))


def rms_bwd(m, n, configs):
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    _, rstd = rn._rms_norm_forward(x, w, 1e-6)
    nbytes = 3 * m * n * 2
    xr = x.float().requires_grad_(True)
    ref = torch.autograd.grad(F.rms_norm(xr, (n,), w.float(), 1e-6), xr, dy.float())[0]
    fns = {"heuristic " + str(tuple(rn._bwd_config(n))): lambda: rn._rms_norm_backward(dy, x, w, rstd)[0]}
    for c in configs:
        fns[str(tuple(c))] = (lambda c=c: rn._rms_norm_backward(dy, x, w, rstd, c)[0])
    run(f"rms_norm bwd {m}x{n}", nbytes, fns, close(ref))


def ce_fused(m, n, configs):
    """cross_entropy forward writing the gradient (the fused op): logits read once + grad written."""
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    t = torch.randint(0, n, (m,), device="cuda")
    nbytes = 2 * m * n * 2 + 8 * m
    ref = F.cross_entropy(x.float(), t)
    fns = {"heuristic " + str(tuple(ce._launch_config(n, m, True, x.device))):
           lambda: ce._cross_entropy_forward(x, t, None, -100, "mean", 0.0, True)[0]}
    for c in configs:
        fns[str(tuple(c))] = (lambda c=c: ce._cross_entropy_forward(x, t, None, -100, "mean", 0.0, True, c)[0])
    run(f"cross_entropy fused {m}x{n}", nbytes, fns, close(ref))


def main():
    print(torch.cuda.get_device_name(), torch.__version__)
    # round 9: cross_entropy fused forward+gradient: split rows vs online
    C = ce.Config
    ce_fused(8192, 128256, [C(True, 1, 16384, 32, 8), C(True, 1, 16384, 16, 8), C(False, 1, 8192, 16),
                            C(False, 1, 16384, 32)])
    ce_fused(16384, 50257, [C(True, 1, 16384, 32, 4), C(False, 1, 8192, 16)])

if __name__ == "__main__":
    main()
