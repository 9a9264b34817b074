"""linear_cross_entropy's pieces at 8192 x 4096 x 128256 bf16: each GEMM and the CE pass per chunk
(roofkit and torch), and the memory of the fused op by stage."""
import importlib, math, os, torch
import roofkit
from roofkit.harness.timing import time_providers
L = importlib.import_module("roofkit.ops.linear_cross_entropy")
CE = importlib.import_module("roofkit.ops.cross_entropy")
MM = importlib.import_module("roofkit.ops.matmul")
dev, bf = "cuda", torch.bfloat16
N, H, V = 8192, 4096, 128256
g = torch.Generator(device=dev).manual_seed(0)
x = torch.randn(N, H, device=dev, generator=g).to(bf)
w = (torch.randn(V, H, device=dev, generator=g) / math.sqrt(H)).to(bf)
t = torch.randint(0, V, (N,), device=dev, generator=g)
dw = torch.empty_like(w)
dx = torch.empty_like(x)
for R in (512, 1024):
    xs, ts = x[:R], t[:R]
    lg = roofkit.linear(xs, w)
    gg = lg.clone()
    fl = 2 * R * H * V
    fns = {
        f"R{R} logits roofkit.linear": lambda: roofkit.linear(xs, w),
        f"R{R} logits torch.mm": lambda: torch.mm(xs, w.t()),
        f"R{R} ce in place": lambda: CE._cross_entropy_forward(gg, ts, None, -100, "sum", 0.0, True, loss_dtype=torch.float32, grad_into=gg),
        f"R{R} dx _matmul_into": lambda: MM._matmul_into(lg, w, dx[:R]),
        f"R{R} dx torch.mm": lambda: torch.mm(lg, w),
        f"R{R} dw _matmul_into beta1": lambda: MM._matmul_into(lg.t(), xs, dw, beta=1.0),
        f"R{R} dw torch.addmm_": lambda: dw.addmm_(lg.t(), xs),
        f"R{R} dw contiguous-T copy + mm": lambda: MM._matmul_into(lg.t().contiguous(), xs, dw, beta=1.0),
    }
    res = time_providers(fns, device=dev, rep_ms=50, l2="warm")
    for k, v in res.items():
        us = v.median_ms * 1e3
        tf = fl / (us * 1e-6) / 1e12 if "ce" not in k else float("nan")
        print(f"{k:40s} {us:9.1f} us  {tf:6.0f} TFLOP/s  x{N // R} = {us * N / R / 1e3:6.2f} ms")
    for k in ("R{} logits roofkit.linear", "R{} dx _matmul_into", "R{} dw _matmul_into beta1"):
        a, b = (lg, w.t()) if "logits" in k else (lg, w) if "dx" in k else (lg.t(), xs)
        print("   config", k.format(R), MM._default_config(a.contiguous() if False else a, b, torch.empty(a.shape[0], b.shape[1], dtype=bf, device=dev)))
# memory by stage
xx, ww = x.detach().requires_grad_(), w.detach().requires_grad_()
for i in range(3):
    xx.grad = ww.grad = None
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated()
    loss = roofkit.linear_cross_entropy(xx, ww, t)
    torch.cuda.synchronize()
    f_peak, f_now = torch.cuda.max_memory_allocated() - base, torch.cuda.memory_allocated() - base
    loss.backward(); torch.cuda.synchronize()
    print(f"call {i}: forward peak +{f_peak / 1e6:.0f} MB, after forward +{f_now / 1e6:.0f} MB, overall peak +{(torch.cuda.max_memory_allocated() - base) / 1e6:.0f} MB;"
          f" grads {(xx.numel() + ww.numel()) * 2 / 1e6:.0f} MB; after backward +{(torch.cuda.memory_allocated() - base) / 1e6:.0f} MB;"
          f" x.grad shares? {xx.grad.data_ptr()}")
