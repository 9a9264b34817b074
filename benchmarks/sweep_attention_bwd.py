"""Attention backward tile sweep on the GPU: the dK/dV kernel's and the dQ kernel's tiles (one
varied at a time, then the refinement around the best), cuDNN's backward alongside (K / V repeated
to the query heads, as HF's SDPA path hands them).

    PYTHONPATH=src python3 benchmarks/sweep_attention_bwd.py OUT.json [--refine]

Every configuration is compiled first in parallel subprocesses (one per configuration, sharing
TRITON_CACHE_DIR), then checked against the first configuration (relative L2 < 1e-2 on dq, dk, dv)
and timed with the harness's interleaved CUDA-event timing. TFLOP/s count 2.5x the forward's
4 * B * Hq * S^2 * D (halved when causal). The first shape is the e2e model's layout: q, k, v
(B, H, S, D) views of (B, S, H, D) projections.
"""
import importlib, json, subprocess, sys, time
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

L = importlib.import_module("roofkit.ops.attention._launch")
from roofkit.ops.attention import Config
from roofkit.harness.timing import time_providers

SHAPES = [  # name, B, hq, hkv, S, D, causal, hf_layout
    ("e2e_b4_h32kv8_s2048_causal", 4, 32, 8, 2048, 128, True, True),
    ("b1_h32kv8_s8192_causal", 1, 32, 8, 8192, 128, True, False),
    ("b4_h16_s8448", 4, 16, 16, 8448, 128, False, False),
]
DEF_KV, DEF_Q = (64, 128, 8, 3), (128, 64, 8, 3)
KV = [DEF_KV, (32, 128, 4, 3), (32, 128, 4, 4), (32, 128, 8, 3), (64, 128, 8, 2), (64, 128, 4, 3),
      (64, 64, 4, 3), (64, 64, 4, 4), (128, 128, 8, 2), (32, 64, 4, 4), (64, 128, 8, 4), (128, 64, 8, 3)]
Q = [DEF_Q, (128, 32, 4, 4), (128, 32, 8, 3), (64, 64, 4, 3), (64, 64, 4, 4), (128, 64, 4, 3),
     (128, 128, 8, 2), (64, 128, 8, 3), (128, 64, 8, 2), (128, 64, 8, 4), (64, 32, 4, 4)]
if "--refine" in sys.argv:
    KV2 = (32, 64, 4, 4)
    KV = [DEF_KV, KV2, (32, 64, 4, 3), (32, 64, 4, 5), (32, 64, 2, 4), (16, 64, 4, 4), (32, 64, 8, 4),
          (64, 64, 4, 5), (32, 128, 4, 5), (16, 128, 4, 4), (64, 64, 8, 4)]
    Q = [(128, 64, 8, 4), (128, 64, 8, 5), (64, 64, 4, 5), (128, 32, 4, 5), (64, 32, 4, 5), (128, 64, 4, 4)]
    CONFIGS = [(kv, DEF_Q) for kv in KV] + [(KV2, q) for q in Q] + [((32, 64, 4, 5), (128, 64, 8, 4))]
else:
    CONFIGS = [(kv, DEF_Q) for kv in KV] + [(DEF_KV, q) for q in Q[1:]]


def inputs(shape, seed=0):
    name, B, hq, hkv, S, D, causal, hf = shape
    g = torch.Generator(device="cuda").manual_seed(seed)
    def mk(h):
        if hf:
            return torch.randn(B, S, h, D, device="cuda", dtype=torch.bfloat16, generator=g).transpose(1, 2)
        return torch.randn(B, h, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v = mk(hq), mk(hkv), mk(hkv)
    do = mk(hq)
    window = (-1, 0) if causal else (-1, -1)
    scale = D ** -0.5
    out, lse, o_lo = L._forward(q, k, v, None, window, False, scale, True)
    return q, k, v, do, out, lse, o_lo, window, scale


def bwd(args, cfg):
    q, k, v, do, out, lse, o_lo, window, scale = args
    kv, qc = cfg
    L._bwd_config = lambda d_pad, dtype, kv=Config(*kv), qc=Config(*qc): (kv, qc)
    return L._backward(do, q, k, v, out, o_lo, lse, None, None, window, False, scale, False)


def compile_one(idx):
    cfg = CONFIGS[idx]
    for shape in SHAPES:
        # a short sequence with the same specialization (S multiple of 128, same strides pattern)
        small = (shape[0], 1, shape[2], shape[3], 1024, *shape[5:])
        try:
            bwd(inputs(small), cfg)
            torch.cuda.synchronize()
        except Exception as e:
            print(f"compile {cfg} {shape[0]}: {type(e).__name__} {str(e)[:100]}", flush=True)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--compile":
        compile_one(int(sys.argv[2]))
        return
    out_json = sys.argv[1]
    t0 = time.time()
    procs, running = list(range(len(CONFIGS))), []
    while procs or running:
        while procs and len(running) < 14:
            i = procs.pop(0)
            running.append(subprocess.Popen([sys.executable, __file__, "--compile", str(i)] + sys.argv[2:]))
        running = [p for p in running if p.poll() is None]
        time.sleep(0.2)
    print(f"precompiled {len(CONFIGS)} configs in {time.time() - t0:.0f} s", flush=True)
    log = []
    for shape in SHAPES:
        name, B, hq, hkv, S, D, causal, hf = shape
        args = inputs(shape)
        q, k, v, do = args[:4]
        flops = 2.5 * 4 * B * hq * S * S * D * (0.5 if causal else 1.0)
        ref = bwd(args, (DEF_KV, DEF_Q))
        fns = {}
        for cfg in CONFIGS:
            label = f"kv{'x'.join(map(str, cfg[0]))} q{'x'.join(map(str, cfg[1]))}"
            try:
                got = bwd(args, cfg)
                torch.cuda.synchronize()
                err = max(float((a.float() - b.float()).norm() / b.float().norm()) for a, b in zip(got, ref))
                if err > 1e-2:
                    log.append({"case": name, "config": label, "status": f"WRONG {err:.3g}"}); continue
                fns[label] = lambda cfg=cfg: bwd(args, cfg)
            except Exception as e:
                log.append({"case": name, "config": label, "status": f"{type(e).__name__}: {str(e)[:100]}"})
        # cuDNN backward (K/V expanded to the query heads, as HF's SDPA path hands them)
        qc, kc, vc = (t.detach().clone().requires_grad_() for t in (q, k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)))
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            oc = F.scaled_dot_product_attention(qc, kc, vc, is_causal=causal)
        cref = torch.autograd.grad(oc, (qc,), do, retain_graph=True)[0]
        log.append({"case": name, "config": "cudnn dq vs roofkit", "status": f"rel {float((cref.float()-ref[0].float()).norm()/cref.float().norm()):.3g}"})
        fns["cudnn"] = lambda: torch.autograd.grad(oc, (qc, kc, vc), do, retain_graph=True)
        times = time_providers(fns, warmup_ms=20.0, rep_ms=120.0)
        for label, t in times.items():
            log.append({"case": name, "config": label, "ms": t.median_ms, "tflops": flops / t.median_ms / 1e9})
        torch.cuda.empty_cache()
    from roofkit.harness.device import environment
    json.dump({"environment": environment(), "rows": log}, open(out_json, "w"), indent=1)
    for shape in SHAPES:
        rows = sorted((r for r in log if r["case"] == shape[0] and "tflops" in r), key=lambda r: -r["tflops"])
        print(f"\n{shape[0]}")
        for r in rows[:12]:
            print(f"  {r['config']:32s} {r['tflops']:7.1f} TFLOP/s {r['ms']*1e3:9.1f} us")
        for r in log:
            if r["case"] == shape[0] and "status" in r:
                print(f"  {r['config']:32s} {r['status']}")


if __name__ == "__main__":
    main()
