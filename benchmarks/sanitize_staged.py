"""Small launches for compute-sanitizer of the staged-row kernel in its three modes (cross_entropy
forward+backward, softmax, log_softmax: rows of 36872 and 40000 classes, as many rows as the
device has SMs and a few more, a partial last chunk) and of amax's backward kernel (rows with
ties, NaN and -inf; bf16, fp16, fp32).

    compute-sanitizer --tool memcheck python3 benchmarks/sanitize_staged.py
    compute-sanitizer --tool racecheck python3 benchmarks/sanitize_staged.py
"""
import importlib
import math

import torch

import roofkit
import roofkit.config

ce = importlib.import_module("roofkit.ops.cross_entropy")
sms = torch.cuda.get_device_properties(0).multi_processor_count
g = torch.Generator(device="cuda").manual_seed(0)
for dtype in (torch.bfloat16, torch.float16):
    for m, c in ((sms, 36872), (sms + 3, 40000)):
        x = (3 * torch.randn(m, c, device="cuda", generator=g)).to(dtype)
        x[1] = -math.inf
        assert ce._smem_plan(x, True, False) is not None, (m, c)
        roofkit.softmax(x, dim=-1)
        roofkit.log_softmax(x, dim=-1)
        xg = x.clone().requires_grad_(True)
        t = torch.randint(0, c, (m,), device="cuda", generator=g)
        t[::5] = -100
        torch.autograd.grad(roofkit.cross_entropy(xg, t, label_smoothing=0.1), xg)
with roofkit.config.override("amax", AMAX_BWD_MIN_ROWS_PER_SM=1):
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for m, n in ((sms, 1000), (sms + 1, 7), (2 * sms, 5003)):
            x = torch.randn(m, n, device="cuda", generator=g).to(dtype)
            x[0, ::3] = x[0].max()
            x[1, 2] = math.nan
            x[2] = -math.inf
            x.requires_grad_(True)
            y = roofkit.amax(x, dim=-1)
            torch.autograd.grad(y, x, torch.randn_like(y))
torch.cuda.synchronize()
print("sanitize staged / amax cases ran")
