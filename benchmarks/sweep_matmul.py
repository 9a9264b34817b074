"""Matmul launch-configuration sweep on the GPU: every configuration on the acceptance
shapes, each output checked against torch (relative L2) before it is timed, cuBLAS alongside.

    python3 benchmarks/sweep_matmul.py [--quick] [--json PATH]

Timing: the harness's device timer, as the autotuner and ``roofkit bench`` use it (CUDA events,
L2 flushed before each call, host enqueue time hidden). Prints one line per
(shape, configuration) and a summary table of the best per shape last.
"""

import argparse
import importlib
import json
import os
import time

import torch

os.environ["ROOFKIT_AUTOTUNE"] = "0"
mm = importlib.import_module("roofkit.ops.matmul")
G = importlib.import_module("roofkit.ops._gemm")
from roofkit.harness.device import environment  # noqa: E402
from roofkit.ops._autotune import _time_ms, rel_l2  # noqa: E402

Config = G.Config


def big_configs(dtype):
    out = []
    tiles = [(128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 64, 4, 4), (128, 256, 64, 8, 4),
             (128, 256, 128, 8, 2), (128, 128, 128, 8, 3)]
    for bm, bn, bk, w, s in tiles:
        out.append(Config(bm, bn, bk, 8, w, s, kind="tma"))
        out.append(Config(bm, bn, bk, 8, w, s, kind="tma", persistent=True))
        out.append(Config(bm, bn, bk, 8, w, s, kind="ptr"))
    # warp_specialize=True: 765 TFLOP/s at 8192^3 with 128x256x64 (no gain); the 128x128x64 w4
    # persistent variant hung the sweep (2026-11-30): not swept again.
    return out


def small_configs(m, n, k):
    out = []
    bm = max(16, min(64, 1 << (m - 1).bit_length()))
    tiles = lambda bn: -(-m // bm) * -(-n // bn)  # noqa: E731
    for bn in (32, 64, 128):
        for bk in (128, 256):
            for split in (1, 2, 4, 8, 16, 32):
                if tiles(bn) * split <= 8 * 132 and k // split >= bk:
                    for w, s in ((4, 4), (8, 3)):
                        if bn * bk * s * 2 <= 160 * 1024:
                            out.append(Config(bm, bn, bk, 8, w, s, kind="ptr", split_k=split))
    return out


def run_case(name, m, n, k, dtype, cfgs, act=0, bias=False, log=None):
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=dtype, generator=g)
    bv = torch.randn(n, device="cuda", dtype=dtype, generator=g) if bias else None
    ref = torch.matmul(a, b).float()
    if bv is not None:
        ref += bv.float()
    ref = mm._activation_torch(ref, mm._ACT_NAMES[act])
    flops = 2 * m * n * k
    t_cublas = _time_ms(lambda: torch.matmul(a, b))
    rows = [{"case": name, "config": "cuBLAS torch.matmul", "ms": t_cublas, "tflops": flops / t_cublas / 1e9}]
    if act or bias:
        import torch.nn.functional as F

        def unfused():
            y = torch.matmul(a, b)
            if bv is not None:
                y = y + bv
            return F.gelu(y) if act else y

        t = _time_ms(unfused)
        rows.append({"case": name, "config": "torch unfused matmul+bias+gelu", "ms": t, "tflops": flops / t / 1e9})
    print(f"{name}: cuBLAS {t_cublas * 1e3:.1f} us {flops / t_cublas / 1e9:.0f} TFLOP/s", flush=True)
    for cfg in cfgs:
        out = torch.empty(m, n, device="cuda", dtype=dtype)
        t0 = time.time()
        try:
            mm._launch(cfg, a, b, None, bv, out, 1.0, 0.0, act)
            torch.cuda.synchronize()
            err = rel_l2(out, ref)
            if not err < 2e-2:
                row = {"case": name, "config": cfg.label(), "error": err, "status": "WRONG"}
            else:
                t = _time_ms(lambda: mm._launch(cfg, a, b, None, bv, out, 1.0, 0.0, act))
                row = {"case": name, "config": cfg.label(), "ms": t, "tflops": flops / t / 1e9, "vs_cublas": t_cublas / t, "error": err,
                       "gbps": (m * k + k * n + m * n) * a.element_size() / t / 1e6}
        except Exception as exc:
            row = {"case": name, "config": cfg.label(), "status": f"{type(exc).__name__}: {str(exc)[:150]}"}
        row["compile_s"] = time.time() - t0
        rows.append(row)
        print("  ", {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items() if k != "case"}, flush=True)
    if log is not None:
        log.extend(rows)
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", default=None)
    p.add_argument("--only", default=None, help="comma-separated case names")
    args = p.parse_args()
    bf16 = torch.bfloat16
    log = []
    big = big_configs(bf16)
    flat = [Config(128, 256, 64, 8, 8, 3, kind="tma", persistent=True, flatten=True),
            Config(128, 256, 64, 8, 8, 4, kind="tma", persistent=True, flatten=True),
            Config(128, 128, 64, 8, 8, 4, kind="tma", persistent=True, flatten=True)]
    # Can a second CTA per SM hide the GELU epilogue behind the other CTA's main loop?
    # (one warpgroup of 4 warps per 128x128 tile, two resident CTAs; warp specialization)
    overlap = [Config(128, 256, 64, 8, 8, 3, kind="tma", persistent=True),
               Config(128, 128, 64, 8, 4, 3, kind="tma", persistent=True, ctas_per_sm=2),
               Config(128, 128, 64, 8, 4, 4, kind="tma", persistent=True, ctas_per_sm=2),
               Config(128, 128, 64, 8, 4, 3, kind="tma", persistent=True, ctas_per_sm=2, epilogue_split=2),
               Config(128, 128, 64, 8, 8, 3, kind="tma", persistent=True, ctas_per_sm=2),
               Config(128, 256, 64, 8, 8, 3, kind="tma", persistent=True, warp_specialize=True),
               Config(128, 128, 64, 8, 4, 3, kind="tma", ctas_per_sm=2),
               Config(128, 256, 64, 8, 8, 4, kind="ptr")]
    cases = [
        ("overlap ffn_up+bias+gelu", 8192, 14336, 4096, overlap, 2, True),
        ("overlap ffn_up", 8192, 14336, 4096, overlap, 0, False),
        ("8192^3", 8192, 8192, 8192, big, 0, False),
        ("4095^3", 4095, 4095, 4095, [big[i] for i in (0, 1, 12, 13, 6, 9, 2)], 0, False),
        ("gemv 1x4096x4096", 1, 4096, 4096, small_configs(1, 4096, 4096), 0, False),
        ("decode 16x14336x4096", 16, 14336, 4096, small_configs(16, 14336, 4096), 0, False),
        ("ffn_up+bias+gelu 8192x14336x4096", 8192, 14336, 4096, [big[i] for i in (12, 0, 1)] + flat, 2, True),
        ("ffn_up+bias 8192x14336x4096", 8192, 14336, 4096, [big[1]] + flat, 0, True),
        ("ffn_up+gelu 8192x14336x4096", 8192, 14336, 4096, [big[1]] + flat, 2, False),
        ("ffn_up+relu 8192x14336x4096", 8192, 14336, 4096, [big[1]], 1, False),
        ("ffn_up 8192x14336x4096", 8192, 14336, 4096, [big[i] for i in (12, 0, 1)] + flat, 0, False),
        ("qkv 8192x6144x4096", 8192, 6144, 4096, [big[i] for i in (12, 0, 1, 7)], 0, False),
        ("o_proj 8192x4096x4096", 8192, 4096, 4096, [big[i] for i in (12, 0, 1, 7)], 0, False),
        ("ffn_down 8192x4096x14336", 8192, 4096, 14336, [big[i] for i in (12, 0, 1, 7)], 0, False),
        ("lm_head 8192x128256x4096", 8192, 128256, 4096, [big[i] for i in (12, 1)], 0, False),
    ]
    only = set(args.only.split(",")) if args.only else None
    for name, m, n, k, cfgs, act, bias in cases:
        if only and name not in only:
            continue
        run_case(name, m, n, k, bf16, cfgs[:4] if args.quick else cfgs, act, bias, log)
    env = environment()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "rows": log}, f, indent=1)
    print("\nbest per case:")
    for name, *_ in cases:
        rs = [r for r in log if r["case"] == name and "tflops" in r and not r["config"].startswith(("cuBLAS", "torch"))]
        cb = [r for r in log if r["case"] == name and r["config"].startswith("cuBLAS")]
        if rs and cb:
            best = max(rs, key=lambda r: r["tflops"])
            print(f"{name:36s} best {best['config']:44s} {best['tflops']:7.1f} TFLOP/s  {best['ms'] * 1e3:9.1f} us  "
                  f"cuBLAS {cb[0]['tflops']:7.1f}  ratio {best['vs_cublas']:.2f}")


if __name__ == "__main__":
    main()
