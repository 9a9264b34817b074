"""linear_cross_entropy at N x H x V (bf16): per provider, fwd+bwd time, peak memory above inputs +
weights + gradients, and rel-L2 errors of loss / dx / dw against float64. Plus two prototypes (torch
GEMMs): P3 = three GEMMs with the weight gradient accumulated in bf16 over token chunks (Liger's
scheme), P4 = forward over token chunks keeping lse, backward over vocabulary chunks (exact dW)."""
import json, math, os, sys, time
import torch
import torch.nn.functional as F
import roofkit
from roofkit.ops import linear_cross_entropy as L

N, H, V = (int(a) for a in (sys.argv[1:4] if len(sys.argv) > 3 else (8192, 4096, 128256)))
dev, bf = "cuda", torch.bfloat16
g = torch.Generator(device=dev).manual_seed(0)
x = torch.randn(N, H, device=dev, generator=g).to(bf)
w = (torch.randn(V, H, device=dev, generator=g) / math.sqrt(H)).to(bf)
t = torch.randint(0, V, (N,), device=dev, generator=g)
go = torch.tensor(0.75, device=dev)


def ref():
    xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
    loss = F.cross_entropy(xd @ wd.T, t)
    dx, dw = torch.autograd.grad(loss * go.double(), (xd, wd))
    return loss.detach(), dx, dw


R = ref()
torch.cuda.empty_cache()


def err(a, r):
    a = a.double()
    return float((a - r).norm() / r.norm())


def rnd(r):
    return err(r.to(bf), r)


def p3(xx, ww, tt, rows=1024):
    class F3(torch.autograd.Function):
        @staticmethod
        def forward(ctx, xx, ww):
            dx = torch.empty_like(xx); dw = torch.zeros_like(ww); tot = torch.zeros((), device=dev)
            for s in range(0, N, rows):
                lg = xx[s:s + rows] @ ww.T
                lf = lg.float(); lse = lf.logsumexp(1)
                tot += (lse - lf.gather(1, tt[s:s + rows, None])[:, 0]).sum()
                gg = torch.softmax(lf, 1); gg[torch.arange(gg.shape[0], device=dev), tt[s:s + rows]] -= 1
                gg = (gg / N).to(bf); del lf, lg
                dx[s:s + rows] = gg @ ww
                dw.addmm_(gg.T, xx[s:s + rows])
            ctx.save_for_backward(dx, dw)
            return tot / N

        @staticmethod
        def backward(ctx, gl):
            dx, dw = ctx.saved_tensors
            return dx * gl.to(bf), dw * gl.to(bf)
    return F3.apply(xx, ww)


def p4(xx, ww, tt, rows=1024, vc=8192):
    class F4(torch.autograd.Function):
        @staticmethod
        def forward(ctx, xx, ww):
            lse = torch.empty(N, device=dev); tot = torch.zeros((), device=dev)
            for s in range(0, N, rows):
                lf = (xx[s:s + rows] @ ww.T).float(); lse[s:s + rows] = lf.logsumexp(1)
                tot += (lse[s:s + rows] - lf.gather(1, tt[s:s + rows, None])[:, 0]).sum()
            ctx.save_for_backward(xx, ww, lse)
            return tot / N

        @staticmethod
        def backward(ctx, gl):
            xx, ww, lse = ctx.saved_tensors
            dx32 = torch.zeros(xx.shape, dtype=torch.float32, device=dev); dw = torch.empty_like(ww)
            sc = gl.float() / N
            for v0 in range(0, V, vc):
                lg = (xx @ ww[v0:v0 + vc].T).float()
                gg = torch.exp(lg - lse[:, None]); del lg
                m = (tt >= v0) & (tt < v0 + vc)
                idx = m.nonzero()[:, 0]
                gg[idx, tt[idx] - v0] -= 1
                gg = (gg * sc).to(bf)
                dw[v0:v0 + vc] = gg.T @ xx
                dx32 += (gg @ ww[v0:v0 + vc]).float()
            return dx32.to(bf), dw
    return F4.apply(xx, ww)


def torch_unfused(xx, ww, tt):
    return F.cross_entropy(xx @ ww.T, tt).float()


provs = {"torch": torch_unfused, "roofkit": lambda a, b, c: roofkit.linear_cross_entropy(a, b, c),
         "roofkit.unfused": lambda a, b, c: roofkit.cross_entropy(roofkit.linear(a, b), c).float(),
         "P3": p3, "P4": p4}
if not os.environ.get("PROTOS"):
    del provs["P3"], provs["P4"]
try:
    from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction as LF
    provs["liger"] = lambda a, b, c: LF.apply(a, b, c, None, None, -100, 0.0, 0.0, "mean")[0]
except Exception as e:
    print("no liger", e)
provs["torch.compile"] = torch.compile(torch_unfused)

out = {"N": N, "H": H, "V": V, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
       "rounding_err": {"loss": rnd(R[0]), "dx": rnd(R[1]), "dw": rnd(R[2])}, "rows": {}}
print(out["rounding_err"])
for name, fn in provs.items():
    try:
        xx, ww = x.detach().requires_grad_(), w.detach().requires_grad_()
        for i in range(2):
            xx.grad = ww.grad = None
            loss = fn(xx, ww, t); (loss * go).backward()
        e = {"loss": err(loss.detach(), R[0]), "dx": err(xx.grad, R[1]), "dw": err(ww.grad, R[2])}
        xx.grad = ww.grad = None; del loss
        torch.cuda.synchronize(); torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss = fn(xx, ww, t); (loss * go).backward(); torch.cuda.synchronize()
        extra = torch.cuda.max_memory_allocated() - base - xx.numel() * 2 - ww.numel() * 2
        ts = []
        for i in range(5):
            xx.grad = ww.grad = None
            a, b = torch.cuda.Event(True), torch.cuda.Event(True)
            a.record(); loss = fn(xx, ww, t); (loss * go).backward(); b.record(); torch.cuda.synchronize()
            ts.append(a.elapsed_time(b))
        ms = sorted(ts)[len(ts) // 2]
        row = {"ms": ms, "tflops": 6 * N * H * V / ms / 1e9, "extra_MB": extra / 1e6, "err": e}
    except Exception as ex:
        row = {"error": f"{type(ex).__name__}: {str(ex)[:300]}"}
    out["rows"][name] = row
    print(name, json.dumps(row), flush=True)
    del xx, ww
    torch.cuda.empty_cache()
os.makedirs(os.environ.get("OUT", "/tmp"), exist_ok=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "lce_probe.json"), "w"), indent=1)
print("logits bf16 MB", N * V * 2 / 1e6, "1/8:", N * V * 2 / 8e6)
for k, r in out["rows"].items():
    print(f"{k:16s}", r.get("ms", "-"), r.get("tflops", "-"), r.get("extra_MB", "-"), r.get("err", r.get("error")))
