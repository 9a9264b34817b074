"""Attention at an 8-layer llama3-8b training step's shape (b4 s2048, 32 / 8 heads, d128, bf16): causal,
packed sequences as flash_attention's segment ids, and the same pattern as a 4-D boolean attn_mask (what
transformers builds for packed sequences, and while torch.compile traces). Prints a table; writes $OUT/seg_bench.json.

KERNELS=1: instead, per variant (causal; int16 ids, one sequence a row and three; three as int64),
the forward by do_bench (host work included when the GPU waits for it) and each kernel's own
device time over 20 forward + backward calls (torch.profiler)."""
import json
import os

import torch
import triton
from torch.profiler import ProfilerActivity, profile

import roofkit
from roofkit.ops.attention.spec import segment_mask

B, HQ, HKV, S, D = 4, 32, 8, 2048, 128
g = torch.Generator(device="cuda").manual_seed(0)
q = torch.randn(B, HQ, S, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
k = torch.randn(B, HKV, S, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
v = torch.randn(B, HKV, S, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
dy = torch.randn(B, HQ, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
i = torch.arange(S, device="cuda")
rows = {"one_doc": torch.zeros(B, S, dtype=torch.long, device="cuda"),
        "one_doc_i16": torch.zeros(B, S, dtype=torch.int16, device="cuda"),
        "packed_3": ((i >= 500).long() + (i >= 1300).long()).expand(B, S).contiguous()}


def kernel_times():
    p3 = rows["packed_3"].to(torch.int16)
    runs = {"causal": {}, "seg_one_i16": dict(segment_ids=rows["one_doc_i16"]), "seg_packed3_i16": dict(segment_ids=p3),
            "seg_packed3_i64": dict(segment_ids=p3.long())}
    for name, kw in runs.items():
        def fwd(kw=kw):
            return roofkit.flash_attention(q, k, v, causal=True, **kw)

        print(f"{name}: do_bench fwd {triton.testing.do_bench(fwd, warmup=50, rep=300) * 1e3:.1f} us", flush=True)

        def step(kw=kw):
            return torch.autograd.grad(fwd(kw), (q, k, v), dy)

        for _ in range(5):
            step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                step()
            torch.cuda.synchronize()
        got = [(e.key, e.self_device_time_total / e.count, e.count) for e in prof.key_averages()
               if e.self_device_time_total > 0]
        got.sort(key=lambda r: -r[1] * r[2])
        print(f"== {name}: " + "; ".join(f"{kname[:40]} {t:.1f}us x{c // 20}" for kname, t, c in got[:8]), flush=True)


if os.environ.get("KERNELS") == "1":
    kernel_times()
    raise SystemExit(0)
res = {}
for label, seg in rows.items():
    mask = segment_mask(seg, B, S, S) & torch.ones(S, S, dtype=torch.bool, device="cuda").tril()
    runs = {
        "causal": lambda: roofkit.flash_attention(q, k, v, causal=True),
        "segment_ids": lambda: roofkit.flash_attention(q, k, v, causal=True, segment_ids=seg),
        "bool_mask": lambda: roofkit.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True),
    }
    for name, f in runs.items():
        if label != "one_doc" and name != "segment_ids":
            continue
        fwd = triton.testing.do_bench(lambda: f(), warmup=50, rep=300)
        def step():
            out = f()
            torch.autograd.grad(out, (q, k, v), dy)
        both = triton.testing.do_bench(step, warmup=30, rep=300)
        res[f"{label}/{name}"] = dict(fwd_ms=fwd, fwd_bwd_ms=both)
        print(f"{label:8s} {name:12s} fwd {fwd*1e3:8.1f} us  fwd+bwd {both*1e3:8.1f} us", flush=True)
out = os.environ.get("OUT", "/tmp")
json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, results=res),
          open(f"{out}/seg_bench.json", "w"), indent=1)
