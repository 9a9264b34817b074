"""Kernel-level profile of cross_entropy forward+backward at 8192x128256 bf16 (GPU only):
where the time of one call goes. ``PYTHONPATH=src python3 benchmarks/profile_ce.py``."""

import torch
from torch.profiler import ProfilerActivity, profile

import roofkit

x = torch.randn(8192, 128256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
t = torch.randint(0, 128256, (8192,), device="cuda")


def step():
    loss = roofkit.cross_entropy(x, t)
    return torch.autograd.grad(loss, x)


for _ in range(3):
    step()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(5):
        step()
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=60))
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(10):
    step()
end.record()
torch.cuda.synchronize()
print(f"back-to-back fwd+bwd: {start.elapsed_time(end) / 10:.3f} ms per call")
