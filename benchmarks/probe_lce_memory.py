"""Where linear_cross_entropy's peak memory goes (8192 x 4096 x 128256 bf16): the live
allocations at the peak of a forward + backward, with the Python line that made each."""
import math, torch, roofkit
dev, bf = "cuda", torch.bfloat16
N, H, V = 8192, 4096, 128256
g = torch.Generator(device=dev).manual_seed(0)
x = torch.randn(N, H, device=dev, generator=g).to(bf).requires_grad_()
w = (torch.randn(V, H, device=dev, generator=g) / math.sqrt(H)).to(bf).requires_grad_()
t = torch.randint(0, V, (N,), device=dev, generator=g)
for i in range(int(__import__("os").environ.get("CALLS", 3))):
    x.grad = w.grad = None
    torch.cuda.synchronize(); base = torch.cuda.memory_allocated(); torch.cuda.reset_peak_memory_stats()
    if i == int(__import__("os").environ.get("CALLS", 3)) - 1:
        torch.cuda.memory._record_memory_history(max_entries=200000)
    roofkit.linear_cross_entropy(x, w, t).backward(); torch.cuda.synchronize()
    print(f"call {i}: peak above base {(torch.cuda.max_memory_allocated() - base) / 1e6:.1f} MB; "
          f"extra above grads {(torch.cuda.max_memory_allocated() - base - (x.numel() + w.numel()) * 2) / 1e6:.1f} MB; "
          f"x.grad base {x.grad._base is not None}")
snap = torch.cuda.memory._snapshot()
torch.cuda.memory._record_memory_history(enabled=None)
ev = [e for tr in snap["device_traces"] for e in tr if e["action"] in ("alloc", "free_completed")]
live, cur, peak, at = {}, 0, 0, None
for e in ev:
    if e["action"] == "alloc":
        live[e["addr"]] = e; cur += e["size"]
    elif e["addr"] in live:
        cur -= live.pop(e["addr"])["size"]
    if cur > peak:
        peak, at = cur, dict(live)
print(f"traced peak {peak / 1e6:.1f} MB (allocations made during the call)")
for e in sorted(at.values(), key=lambda e: -e["size"])[:8]:
    fr = [f"{f['filename'].split('/')[-1]}:{f['line']} {f['name']}" for f in e.get("frames", []) if ".py" in f["filename"]][:4]
    print(f"  {e['size'] / 1e6:9.1f} MB  {' <- '.join(fr)}")
