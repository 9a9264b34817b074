"""Forward attention launch-configuration sweep on the GPU: tile configurations x K/V
load path (tensor descriptors or pointers) on the acceptance shapes, torch SDPA's flash and
cuDNN backends alongside.

    PYTHONPATH=src python3 benchmarks/sweep_attention.py [--json PATH]

Every configuration's output is checked against torch's flash backend (relative L2 < 1e-2)
before it is timed; timing is the harness's (CUDA events, cold L2, interleaved providers).
TFLOP/s count 4 * B * H * Sq * Sk * D (halved when causal), as the op's cost model does.
"""

import argparse
import importlib
import json
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from roofkit.harness.device import environment
from roofkit.harness.timing import time_providers

L = importlib.import_module("roofkit.ops.attention._launch")
from roofkit.ops.attention import Config, scaled_dot_product_attention  # noqa: E402

SHAPES = [  # name, (B, H, S, D), causal
    ("b4_h16_s8448_d128", (4, 16, 8448, 128), False),
    ("b4_h16_s8448_d128_causal", (4, 16, 8448, 128), True),
    ("b16_h16_s2048_d64_causal", (16, 16, 2048, 64), True),
]
CONFIGS = {  # head dim -> (BLOCK_M, BLOCK_N, warps, stages)
    128: [(128, 64, 8, 4), (256, 64, 8, 3), (128, 128, 8, 3), (128, 128, 8, 2), (256, 64, 8, 2)],
    64: [(128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 8, 4)],
}


def rel_l2(x, ref):
    return float((x.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    args = p.parse_args()
    log = []
    for name, (b, h, s, d), causal in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn((b, h, s, d), device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
        flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        fns = {}
        for backend, label in ((SDPBackend.FLASH_ATTENTION, "torch flash"), (SDPBackend.CUDNN_ATTENTION, "torch cudnn")):
            def run(backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            fns[label] = run
        for cfg in CONFIGS[d]:
            for desc in (True, False):
                label = f"{'x'.join(map(str, cfg[:2]))} w{cfg[2]} s{cfg[3]} {'desc' if desc else 'ptr'}"

                def run(cfg=Config(*cfg), desc=desc):
                    L._fwd_config = lambda *a, cfg=cfg: cfg
                    L.FWD_DESC = desc
                    return scaled_dot_product_attention(q, k, v, is_causal=causal)
                fns[label] = run
        good = {}
        for label, fn in fns.items():
            t0 = time.time()
            try:
                err = rel_l2(fn(), ref)
                torch.cuda.synchronize()
                if err < 1e-2:
                    good[label] = fn
                else:
                    log.append({"case": name, "config": label, "status": f"WRONG rel_l2 {err:.3g}"})
            except Exception as exc:  # a configuration the compiler or the device refuses
                log.append({"case": name, "config": label, "status": f"{type(exc).__name__}: {str(exc)[:120]}"})
            print(f"  {name} {label}: compiled/checked in {time.time() - t0:.1f} s", flush=True)
        # The setting a roofkit provider patches is re-applied inside each call, so interleaving is safe.
        times = time_providers(good, warmup_ms=20.0, rep_ms=150.0)
        for label, t in times.items():
            log.append({"case": name, "config": label, "ms": t.median_ms, "tflops": flops / t.median_ms / 1e9})
    env = environment()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "rows": log}, f, indent=1)
    for name, *_ in SHAPES:
        rows = sorted((r for r in log if r["case"] == name and "tflops" in r), key=lambda r: -r["tflops"])
        print(f"\n{name}")
        for r in rows:
            print(f"  {r['config']:28s} {r['tflops']:7.1f} TFLOP/s  {r['ms'] * 1e3:9.1f} us")
        for r in log:
            if r["case"] == name and "status" in r:
                print(f"  {r['config']:28s} {r['status']}")


if __name__ == "__main__":
    main()
