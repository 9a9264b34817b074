"""Small launches of every kernel path, forward and backward, for compute-sanitizer
(memcheck / racecheck) on the GPU: ``compute-sanitizer --tool memcheck python3 benchmarks/sanitize_cases.py``."""

import importlib

import torch

import roofkit

sm = importlib.import_module("roofkit.ops.softmax")
rn = importlib.import_module("roofkit.ops.rms_norm")


def run():
    g = torch.Generator(device="cuda").manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        for shape, dim in [((37, 781), -1), ((5, 40000), -1), ((33, 16), 0), ((4, 5, 6), 1), ((3, 1), -1)]:
            x = torch.randn(shape, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
            for op in (roofkit.softmax, roofkit.log_softmax):
                y = op(x, dim=dim)
                torch.autograd.grad(y, x, torch.randn_like(y))
        for shape in [(37, 781), (3, 20000), (2, 1)]:
            x = torch.randn(shape, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
            w = torch.randn(shape[-1:], device="cuda", dtype=dtype, generator=g).requires_grad_(True)
            y = roofkit.rms_norm(x, shape[-1:], w)
            torch.autograd.grad(y, (x, w), torch.randn_like(y))
            xt = torch.randn(shape[::-1], device="cuda", dtype=dtype, generator=g).t()
            roofkit.rms_norm(xt, shape[-1:])
    # The online long-row path (split rows switched off) and the split path with many segments.
    for max_splits, shape in [(0, (5, 40000)), (64, (3, 300000))]:
        sm.MAX_SPLITS = max_splits
        x = torch.randn(shape, device="cuda", generator=g).requires_grad_(True)
        for op in (roofkit.softmax, roofkit.log_softmax):
            y = op(x, dim=-1)
            torch.autograd.grad(y, x, torch.randn_like(y))
    torch.cuda.synchronize()
    print("sanitize cases ran")


if __name__ == "__main__":
    run()
