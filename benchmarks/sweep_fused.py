"""Sweeps for add_rms_norm's launch parameters (forward and backward, with and without streaming cache
hints / prefetching the next rows) at llama3-8b shapes (rope's: benchmarks/sweep_rope.py).

    PYTHONPATH=src python3 benchmarks/sweep_fused.py      (a GPU)
"""
import importlib, json, os, torch
from roofkit.harness.timing import time_providers
R = importlib.import_module("roofkit.ops.rms_norm")

dev, bf = "cuda", torch.bfloat16
COPY = float(os.environ.get("COPY_GBPS", 4248))
out = {}


def run(name, fns, nbytes):
    t = time_providers(fns, device=dev, rep_ms=60)
    rows = sorted(((v.median_ms * 1e3, k) for k, v in t.items()))
    print(f"== {name} (copy roof {nbytes / COPY / 1e3:.1f} us)")
    for us, k in rows[:8]:
        print(f"  {k:40s} {us:8.1f} us {nbytes / (us * 1e3) / COPY * 100:5.1f}% copy")
    out[name] = {k: us for us, k in rows}


def same_bits(a, b) -> bool:
    a, b = (t if isinstance(t, (tuple, list)) else (t,) for t in (a, b))
    return len(a) == len(b) and all(torch.equal(u, v) for u, v in zip(a, b))


def add_variant(fns, name, fn, base_out):
    """Time ``fn`` (a prefetch / streaming variant) only if it gives its base configuration's bits."""
    if same_bits(fn(), base_out):
        fns[name] = fn
    else:
        print(f"{name}: differs from its base configuration's bits: not timed")


g = torch.Generator(device=dev).manual_seed(0)
M, N = 8192, 4096
x = torch.randn(M, N, device=dev, generator=g).to(bf)
r = torch.randn(M, N, device=dev, generator=g).to(bf)
w = torch.randn(N, device=dev, generator=g).to(bf)
fns = {}
for bm, wp, pps in [(1, 4, 0), (1, 8, 0), (2, 8, 0), (1, 16, 0), (2, 16, 0), (4, 16, 0), (1, 4, 8), (1, 8, 4), (2, 8, 2),
                    (1, 8, 8), (2, 16, 2), (1, 16, 2)]:
    # streaming: evict-first loads, .cs stores (data read and written once); prefetch (persistent
    # grids): the next row block loaded before this one's arithmetic
    base = R.Config(True, bm, N, wp, pps)
    fns[f"fwd bm{bm} w{wp} pps{pps}"] = lambda cfg=base: R._rms_norm_forward(x, w, 1e-6, cfg, residual=r)
    base_out = R._rms_norm_forward(x, w, 1e-6, base, residual=r)
    for stream, pf in ((True, False),) + (((False, True), (True, True)) if pps else ()):
        cfg = base._replace(streaming=stream, prefetch=pf)
        add_variant(fns, f"fwd bm{bm} w{wp} pps{pps}" + (" stream" if stream else "") + (" prefetch" if pf else ""),
                    lambda cfg=cfg: R._rms_norm_forward(x, w, 1e-6, cfg, residual=r), base_out)
run("add_rms_norm fwd 8192x4096", fns, 4 * M * N * 2)
y, rstd, rout = R._rms_norm_forward(x, w, 1e-6, None, residual=r)
dy = torch.randn(M, N, device=dev, generator=g).to(bf)
dro = torch.randn(M, N, device=dev, generator=g).to(bf)
fns = {}
for bm, wp, pps, st in [(1, 8, 2, 3), (1, 16, 1, 3), (1, 8, 4, 3), (1, 8, 2, 2), (1, 4, 4, 3), (2, 16, 1, 3), (2, 16, 2, 2),
                        (1, 16, 2, 2), (1, 8, 3, 3), (1, 4, 8, 2)]:
    # prefetch: the next step's rows loaded before this step's reduction (its loop has no stages:
    # one per (bm, wp, pps))
    base = R.Config(True, bm, N, wp, pps, st)
    fns[f"bwd bm{bm} w{wp} pps{pps} st{st}"] = lambda cfg=base: R._rms_norm_backward(dy, rout, w, rstd, cfg, dres=dro)
    if f"bwd bm{bm} w{wp} pps{pps} prefetch" not in fns:
        cfg = base._replace(prefetch=True)
        add_variant(fns, f"bwd bm{bm} w{wp} pps{pps} prefetch",
                    lambda cfg=cfg: R._rms_norm_backward(dy, rout, w, rstd, cfg, dres=dro),
                    R._rms_norm_backward(dy, rout, w, rstd, base, dres=dro))
run("add_rms_norm bwd 8192x4096", fns, 4 * M * N * 2)
fns = {}
for bm, wp, pps, st in [(1, 8, 2, 3), (1, 16, 1, 3), (1, 8, 4, 3), (1, 4, 4, 3), (2, 16, 1, 3), (1, 4, 8, 2)]:
    base = R.Config(True, bm, N, wp, pps, st)
    fns[f"rms bwd bm{bm} w{wp} pps{pps} st{st}"] = lambda cfg=base: R._rms_norm_backward(dy, rout, w, rstd, cfg)
    if f"rms bwd bm{bm} w{wp} pps{pps} prefetch" not in fns:
        cfg = base._replace(prefetch=True)
        add_variant(fns, f"rms bwd bm{bm} w{wp} pps{pps} prefetch",
                    lambda cfg=cfg: R._rms_norm_backward(dy, rout, w, rstd, cfg),
                    R._rms_norm_backward(dy, rout, w, rstd, base))
run("rms_norm bwd 8192x4096", fns, 3 * M * N * 2)

json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "fused_sweep.json"), "w"), indent=1)
