"""Attention with segment ids at an 8-layer llama3-8b training step's shape (b4 s2048, 32 / 8 heads,
d128, bf16, causal): per variant, the forward timed by triton.testing.do_bench (host work included
when the GPU waits for it) and each kernel's own device time over 20 forward + backward calls
(torch.profiler): causal, one sequence a row (int16 ids), three a row (int16 and int64 ids).

    python benchmarks/attention_segment_kernels.py
"""
import torch
import triton
from torch.profiler import ProfilerActivity, profile

import roofkit

B, HQ, HKV, S, D = 4, 32, 8, 2048, 128
g = torch.Generator(device="cuda").manual_seed(0)
q = torch.randn(B, HQ, S, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
k = torch.randn(B, HKV, S, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
v = torch.randn(B, HKV, S, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
dy = torch.randn(B, HQ, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
i = torch.arange(S, device="cuda")
one = torch.zeros(B, S, dtype=torch.int16, device="cuda")
p3 = ((i >= 500).long() + (i >= 1300).long()).to(torch.int16).expand(B, S).contiguous()
runs = {"causal": dict(), "seg_one_i16": dict(segment_ids=one), "seg_packed3_i16": dict(segment_ids=p3),
        "seg_packed3_i64": dict(segment_ids=p3.long())}
for name, kw in runs.items():
    fw = lambda: roofkit.flash_attention(q, k, v, causal=True, **kw)
    print(f"{name}: do_bench fwd {triton.testing.do_bench(fw, warmup=50, rep=300)*1e3:.1f} us", flush=True)
    f = lambda: torch.autograd.grad(roofkit.flash_attention(q, k, v, causal=True, **kw), (q, k, v), dy)
    for _ in range(5): f()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(20): f()
        torch.cuda.synchronize()
    rows = [(e.key, e.self_device_time_total / e.count, e.count) for e in p.key_averages() if e.self_device_time_total > 0]
    rows.sort(key=lambda r: -r[1] * r[2])
    print(f"== {name}: " + "; ".join(f"{kname[:40]} {t:.1f}us x{c//20}" for kname, t, c in rows[:8]), flush=True)
