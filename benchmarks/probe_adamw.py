"""One AdamW step alone on the parameters of `roofkit e2e`'s model (llama3-8b shapes, 8 layers,
bf16, 2.8 G parameters): torch's fused AdamW against roofkit.optim.AdamW (CUDA events, median of
10 steps), and how far apart the parameters are after 13 steps. Usage: python benchmarks/probe_adamw.py"""
import torch, roofkit.optim
shapes = [(128256, 4096), (128256, 4096), (4096,)]
for _ in range(8):
    shapes += [(4096, 4096), (1024, 4096), (1024, 4096), (4096, 4096), (14336, 4096), (14336, 4096), (4096, 14336), (4096,), (4096,)]
def make():
    g = torch.Generator(device="cuda").manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(s, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02) for s in shapes]
    for p in ps: p.grad = torch.randn(p.shape, device="cuda", dtype=torch.bfloat16, generator=g) * 1e-3
    return ps
n = sum(torch.Size(s).numel() for s in shapes)
res = {}
for name, mk in [("torch fused", lambda ps: torch.optim.AdamW(ps, lr=1e-5, fused=True)), ("roofkit", lambda ps: roofkit.optim.AdamW(ps, lr=1e-5))]:
    ps = make(); opt = mk(ps)
    for _ in range(3): opt.step()
    torch.cuda.synchronize()
    ts = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); opt.step(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    ms = sorted(ts)[5]; res[name] = (ps, opt)
    print(f"adamw {name}: {ms:.2f} ms median, {14 * n / (ms * 1e-3) / 1e9:.0f} GB/s effective "
          f"({n / 1e9:.2f} G params, 14 B/param)")
# same result after 3+10 steps
(pa, _), (pb, _) = res["torch fused"], res["roofkit"]
d = max(((a.float() - b.float()).abs().max() / a.float().abs().max()).item() for a, b in zip(pa, pb))
print(f"adamw max rel diff roofkit vs torch fused after 13 steps: {d:.2e}")
