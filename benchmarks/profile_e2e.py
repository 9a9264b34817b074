"""One profiled training step of `roofkit e2e`'s model (llama3-8b shapes, 8 layers, batch 4 x 2048,
bf16, torch's fused AdamW) per provider: median step time, kernel time by rough category, the top
kernels; the full kernel list to $R/prof-<provider>.txt (R defaults to /tmp).
Usage: python benchmarks/profile_e2e.py [PROVIDER...]   (default: eager roofkit)"""
import collections
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from roofkit import e2e

CATEGORIES = [("attention", ("attn", "attention", "fmha", "flash")),
              ("gemm", ("gemm", "nvjet", "cutlass", "xmma", "_mm_", "matmul")),
              ("optimizer", ("adam", "multi_tensor")), ("ce", ("cross_entropy", "_ce")), ("norm", ("norm",)),
              ("rope", ("rope", "rotary")), ("glu", ("glu", "silu"))]


def category(name: str) -> str:
    low = name.lower()
    return next((c for c, words in CATEGORIES if any(w in low for w in words)), "other")


def main(providers):
    out = os.environ.get("R", "/tmp")
    for prov in providers:
        spec = dict(model="llama3-8b", layers=8, seq=2048, batch=4, mode="train", tiny=False, provider=prov)
        model, family = e2e._build(spec, torch.device("cuda"), torch.bfloat16)
        model = e2e._apply(prov, model, family)
        ids = torch.randint(0, model.config.vocab_size, (4, 2048), device="cuda")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)

        def step():
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        for _ in range(4):
            step()
        torch.cuda.synchronize()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as p:
            step()
            torch.cuda.synchronize()
        # (ranges such as "<op>_function" carry their kernels' time too: categories overlap)
        rows = sorted(((e.self_device_time_total, e.count, e.key) for e in p.key_averages()
                       if e.self_device_time_total > 0 and not e.key.startswith(("aten::", "autograd"))), reverse=True)
        cats = collections.Counter()
        for t, _, k in rows:
            cats[category(k)] += t
        print(f"=== {prov}: step median {sorted(times)[2]:.1f} ms, peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
        print("   ", ", ".join(f"{k} {v / 1e3:.1f} ms" for k, v in cats.most_common()))
        with open(f"{out}/prof-{prov.replace('+', '-')}.txt", "w") as f:
            for t, c, k in rows:
                f.write(f"{t / 1e3:9.3f} ms {c:5d}  {k[:160]}\n")
        for t, c, k in rows[:14]:
            print(f"   {t / 1e3:8.2f} ms {c:4d} {k[:110]}")
        model = opt = None  # (freed before the next provider builds its model)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


if __name__ == "__main__":
    main(sys.argv[1:] or ["eager", "roofkit"])
