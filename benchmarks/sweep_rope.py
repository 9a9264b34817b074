"""rope's launch parameters at llama3-8b shapes (8192 tokens, 32 + 8 heads x 128, bf16): positions
per program (S_BLOCK) x heads per program (HG) x warps (NUM_WARPS forward, BACKWARD_NUM_WARPS
backward) x streaming cache hints (STREAMING), forward on the model's transposed q / k,
backward on contiguous (B, H, S, D) output gradients; every configuration checked against the
default's output before it is timed. Warm L2 off (the harness's cold-L2 timing), one process.

    PYTHONPATH=src python3 benchmarks/sweep_rope.py
    S_BLOCKS="2 4 8" HEADS="4 8" WARPS="2 4" PYTHONPATH=src python3 benchmarks/sweep_rope.py   (a smaller grid)
"""
import importlib, itertools, os, torch
from roofkit.harness.timing import time_providers
P = importlib.import_module("roofkit.ops.rope")
dev, bf = "cuda", torch.bfloat16
COPY = float(os.environ.get("COPY_GBPS", 4274))
g = torch.Generator(device=dev).manual_seed(0)
B, S, Hq, Hk, D = 1, 8192, 32, 8, 128
q = torch.randn(B, S, Hq, D, device=dev, generator=g).to(bf).transpose(1, 2)
k = torch.randn(B, S, Hk, D, device=dev, generator=g).to(bf).transpose(1, 2)
ang = torch.randn(S, D // 2, device=dev, generator=g).repeat(1, 2)[None]
cos, sin = ang.cos().to(bf), ang.sin().to(bf)
dq = torch.randn(B, Hq, S, D, device=dev, generator=g).to(bf)
dk = torch.randn(B, Hk, S, D, device=dev, generator=g).to(bf)
GRID = {k: [int(v) for v in os.environ.get(k, d).split()]
        for k, d in (("S_BLOCKS", "2 4 8 16"), ("HEADS", "2 4 8 16"), ("WARPS", "2 4 8"))}
nbytes = 2 * (Hq + Hk) * S * D * 2 + 2 * S * D * 2
default = (P.S_BLOCK, P.HEADS_PER_PROGRAM, P.NUM_WARPS, P.BACKWARD_NUM_WARPS)
for label, a, b_, bwd in (("rope fwd (transposed q, k)", q, k, False), ("rope bwd (contiguous grads)", dq, dk, True)):
    P.S_BLOCK, P.HEADS_PER_PROGRAM, P.NUM_WARPS, P.BACKWARD_NUM_WARPS = default
    P.STREAMING = False
    ref = P._rope(a, b_, cos, sin, 1, bwd, bf)
    default_here = default[:2] + (default[3] if bwd else default[2], P.STREAMING)
    fns = {}
    for sb, hg, wp, st in itertools.product(*(GRID[k] for k in ("S_BLOCKS", "HEADS", "WARPS")), (False, True)):
        def f(sb=sb, hg=hg, wp=wp, st=st, a=a, b_=b_, bwd=bwd):
            P.S_BLOCK, P.HEADS_PER_PROGRAM, P.STREAMING = sb, hg, st
            if bwd:
                P.BACKWARD_NUM_WARPS = wp
            else:
                P.NUM_WARPS = wp
            return P._rope(a, b_, cos, sin, 1, bwd, bf)
        out = f()
        name = f"sb{sb} hg{hg} w{wp}" + (" stream" if st else "")
        if all(torch.equal(o, r) for o, r in zip(out, ref)):
            fns[name + (" (default)" if (sb, hg, wp, st) == default_here else "")] = f
        else:
            print(f"{name}: output differs from the default's: not timed")
    t = time_providers(fns, device=dev, rep_ms=40)
    rows = sorted((v.median_ms * 1e3, kname) for kname, v in t.items())
    print(f"== {label}: copy roof {nbytes / COPY / 1e3:.1f} us")
    for us, kname in rows[:10] + [r for r in rows[10:] if "default" in r[1]]:
        print(f"  {kname:24s} {us:7.1f} us {nbytes / (us * 1e3) / COPY * 100:5.1f} % of the copy roof")
P.S_BLOCK, P.HEADS_PER_PROGRAM, P.NUM_WARPS, P.BACKWARD_NUM_WARPS = default
P.STREAMING = False
