"""linear_cross_entropy at 8192 x 4096 x 128256 bf16, forward + backward, fused against roofkit's
unfused sequence: CUDA-event times of 5 calls, then one call under torch.profiler (kernel time by
kernel, busy time against the span, the largest gaps between kernels).

    PYTHONPATH=src python3 benchmarks/profile_lce.py
"""
import math, torch, collections
import roofkit
from torch.profiler import profile, ProfilerActivity
dev, bf = "cuda", torch.bfloat16
N, H, V = 8192, 4096, 128256
g = torch.Generator(device=dev).manual_seed(0)
x = torch.randn(N, H, device=dev, generator=g).to(bf).requires_grad_()
w = (torch.randn(V, H, device=dev, generator=g) / math.sqrt(H)).to(bf).requires_grad_()
t = torch.randint(0, V, (N,), device=dev, generator=g)
def fused():
    roofkit.linear_cross_entropy(x, w, t).backward()
def unfused():
    lg = roofkit.linear(x, w)
    roofkit.cross_entropy(lg, t).backward()
for name, fn in (("fused", fused), ("unfused", unfused)):
    for _ in range(4):
        x.grad = w.grad = None; fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    ts = []
    for _ in range(5):
        x.grad = w.grad = None
        s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    print(name, "event ms", [round(v, 2) for v in ts])
    x.grad = w.grad = None
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        fn(); torch.cuda.synchronize()
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    ev.sort(key=lambda e: e.time_range.start)
    busy = sum(e.time_range.elapsed_us() for e in ev)
    span = ev[-1].time_range.end - ev[0].time_range.start
    print(f"{name}: {len(ev)} kernels, busy {busy/1e3:.2f} ms, span {span/1e3:.2f} ms")
    agg = collections.OrderedDict()
    for e in ev:
        k = e.name[:70]
        a = agg.setdefault(k, [0, 0.0]); a[0] += 1; a[1] += e.time_range.elapsed_us()
    for k, (n, us) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"   {n:3d} x {us/1e3:8.2f} ms  {k}")
    gaps = [(ev[i+1].time_range.start - ev[i].time_range.end, ev[i].name[:40], ev[i+1].name[:40]) for i in range(len(ev)-1)]
    gaps.sort(reverse=True)
    print("   largest gaps (us):", [(round(gp), a, b) for gp, a, b in gaps[:6]])
