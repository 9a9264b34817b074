"""linear_cross_entropy 8192x4096x128256 bf16 fwd+bwd: per call, the host time of the call (before
the synchronize) and its CUDA-event time, with plans on and off, fused and unfused (and fused
without a gradient); cProfile of three fused calls; then three back-to-back fused calls under
torch.profiler: kernel time against the span, the largest gaps.

    PYTHONPATH=src python3 benchmarks/probe_lce_host.py
"""
import math, time, torch, collections
import roofkit
from roofkit.ops import _runtime
dev, bf = "cuda", torch.bfloat16
N, H, V = 8192, 4096, 128256
g = torch.Generator(device=dev).manual_seed(0)
x = torch.randn(N, H, device=dev, generator=g).to(bf).requires_grad_()
w = (torch.randn(V, H, device=dev, generator=g) / math.sqrt(H)).to(bf).requires_grad_()
t = torch.randint(0, V, (N,), device=dev, generator=g)
def fused():
    roofkit.linear_cross_entropy(x, w, t).backward()
def fused_fwd_only():
    with torch.no_grad():
        roofkit.linear_cross_entropy(x, w, t)
def unfused():
    lg = roofkit.linear(x, w)
    roofkit.cross_entropy(lg, t).backward()
def marks(fn):
    """host ms at: loss returned, backward returned; event ms."""
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    x.grad = w.grad = None
    torch.cuda.synchronize()
    s.record(); h0 = time.perf_counter(); fn(); h1 = time.perf_counter(); e.record(); torch.cuda.synchronize()
    return (h1 - h0) * 1e3, s.elapsed_time(e)
for plans in (True, False, True):
    _runtime.PLANS[0] = plans; _runtime.clear_plans()
    for name, fn in (("fused", fused), ("unfused", unfused), ("fused-nograd", fused_fwd_only)):
        for _ in range(3):
            x.grad = w.grad = None; fn()
        r = [marks(fn) for _ in range(5)]
        print(f"plans={plans} {name:12s} host ms {[round(a,2) for a,_ in r]}  event ms {[round(b,2) for _,b in r]}", flush=True)
# where does the fused call's host time go (plans on)
_runtime.PLANS[0] = True; _runtime.clear_plans()
for _ in range(3): fused()
import cProfile, pstats, io
torch.cuda.synchronize()
pr = cProfile.Profile(); pr.enable()
for _ in range(3):
    x.grad = w.grad = None; fused()
pr.disable(); torch.cuda.synchronize()
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(20); print(s.getvalue()[-6000:])
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(30); print(s.getvalue()[-8000:])
# back-to-back under the profiler (the as-written path: the profiler's hooks turn plans off)
from torch.profiler import profile, ProfilerActivity
x.grad = w.grad = None
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
    for _ in range(3):
        x.grad = w.grad = None; fused()
    torch.cuda.synchronize()
ev = sorted([e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA], key=lambda e: e.time_range.start)
busy = sum(e.time_range.elapsed_us() for e in ev); span = ev[-1].time_range.end - ev[0].time_range.start
print(f"3 back-to-back fused calls under the profiler: {len(ev)} kernels, busy {busy/1e3:.2f} ms, span {span/1e3:.2f} ms")
gaps = sorted(((ev[i+1].time_range.start - ev[i].time_range.end, i, ev[i].name[:40], ev[i+1].name[:40]) for i in range(len(ev)-1)), reverse=True)
print("largest gaps (us, index):", [(round(a), i, b, c) for a, i, b, c in gaps[:10]])
agg = collections.OrderedDict()
for e in ev:
    a = agg.setdefault(e.name[:70], [0, 0.0]); a[0] += 1; a[1] += e.time_range.elapsed_us()
for k, (n, us) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:14]:
    print(f"   {n:3d} x {us/1e3:8.2f} ms  {k}")
