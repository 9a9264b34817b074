"""Small launches for compute-sanitizer of the staged-row kernel in its three modes (cross_entropy
forward+backward, softmax, log_softmax: rows of 36872 and 40000 classes, as many rows as the
device has SMs and a few more, a partial last chunk) and of amax's backward kernel (rows with
ties, NaN and -inf; bf16, fp16, fp32), rms_norm / add_rms_norm's prefetching and streaming
configurations and rope's streaming hints.

    compute-sanitizer --tool memcheck python3 benchmarks/sanitize_staged.py
    compute-sanitizer --tool racecheck python3 benchmarks/sanitize_staged.py
"""
import importlib
import math

import torch
import triton

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
# rms_norm / add_rms_norm's prefetching loops (persistent grids, partial last steps, with and
# without weight and residual) and the streaming hints; rope with its STREAMING tunable.
rms = importlib.import_module("roofkit.ops.rms_norm")
for dtype in (torch.bfloat16, torch.float32):
    for m, n in ((3 * sms + 5, 4096), (7, 1000)):
        x, r, dy, dr = (torch.randn(m, n, device="cuda", generator=g).to(dtype) for _ in range(4))
        w = torch.randn(n, device="cuda", generator=g).to(dtype)
        for bm, pps, prefetch in ((1, 1, True), (2, 2, True), (2, 0, False)):
            for weight, res in ((w, r), (None, None)):
                cfg = rms.Config(True, bm, triton.next_power_of_2(n), 8, pps, prefetch=prefetch, streaming=True)
                out = rms._rms_norm_forward(x, weight, 1e-6, cfg, residual=res)
                rin = out[2] if res is not None else x
                rms._rms_norm_backward(dy, rin, weight, out[1], cfg._replace(streaming=False, programs_per_sm=pps or 1),
                                       dres=dr if res is not None else None)
with roofkit.config.override("rope", STREAMING=True):
    q = torch.randn(2, 9, 5, 64, device="cuda", generator=g).to(torch.bfloat16).requires_grad_(True)
    k = torch.randn(2, 9, 3, 64, device="cuda", generator=g).to(torch.bfloat16).requires_grad_(True)
    cos, sin = (torch.randn(2, 9, 64, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
    oq, ok = roofkit.rope(q, k, cos, sin, unsqueeze_dim=2)
    torch.autograd.grad([oq, ok], [q, k], [torch.randn_like(oq), torch.randn_like(ok)])
torch.cuda.synchronize()
print("sanitize staged / amax / prefetch / streaming cases ran")
