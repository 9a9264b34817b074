"""sum / mean launch tunables at the llama3-8b rows where roofkit trails torch.compile (8192 x 4096
bf16 over rows, over tokens, in full; 4 x 8192 x 4096 over the middle dim): tile bytes x column
segment bytes (column reductions) x programs per SM before the reduced axis is split x tiles per
split program, through `roofkit.config.override`, next to torch and torch.compile. Every
configuration's result is checked against the default's (to float32 rounding of a different
summation order) before it is timed; timing is the harness's (CUDA events, cold L2, interleaved).

    PYTHONPATH=src python3 benchmarks/sweep_reduce.py      (a GPU)
"""
import itertools

import torch

import roofkit
import roofkit.config
from roofkit.harness import registry
from roofkit.harness.timing import time_providers

dev, bf = "cuda", torch.bfloat16
CASES = [("sum", "hidden_8192x4096", (8192, 4096), -1), ("sum", "tokens_8192x4096", (8192, 4096), 0),
         ("sum", "full_8192x4096", (8192, 4096), None), ("mean", "sequence_4x8192x4096", (4, 8192, 4096), 1),
         ("mean", "hidden_8192x4096", (8192, 4096), -1)]
g = torch.Generator(device=dev).manual_seed(0)
for op, name, shape, dim in CASES:
    x = torch.randn(shape, device=dev, generator=g).to(bf)
    fn = getattr(roofkit, op)
    call = (lambda f: (lambda: f(x))) if dim is None else (lambda f: (lambda: f(x, dim=dim)))
    ref = call(fn)().float()
    column = dim is not None and dim % len(shape) != len(shape) - 1
    # (rows of a row reduction are blocks enough not to split; a full reduction and a column one split)
    splits = column or dim is None
    fns = {"default": call(fn)}
    for tile, seg, pps, chunks in itertools.product((8192, 16384, 32768), (256, 512, 1024) if column else (512,),
                                                    (2, 4, 8) if splits else (4,), (8, 16, 64) if splits else (16,)):
        values = dict(TILE_BYTES=tile, COL_SEGMENT_BYTES=seg, MIN_PROGRAMS_PER_SM=pps, MAX_CHUNKS_PER_PROGRAM=chunks)

        def run(values=values):
            with roofkit.config.override(op, **values):
                return fn(x) if dim is None else fn(x, dim=dim)

        label = f"tile{tile // 1024}K" + (f" seg{seg}" if column else "") + (f" pps{pps} chunks{chunks}" if splits else "")
        if torch.allclose(run().float(), ref, rtol=1e-2, atol=1e-2):
            fns[label] = run
        else:
            print(f"{op} {name} {label}: differs from the default's result: not timed")
    # torch and torch.compile as the bench builds them (the spec's providers: compiled per shape,
    # no dynamic shapes)
    for provider in ("torch", "torch.compile"):
        made = registry.get(op).baselines[provider]()
        try:
            call(made)()
            fns[provider] = call(made)
        except Exception as e:  # noqa: BLE001 (reported, not timed)
            print(f"{op} {name} {provider}: {type(e).__name__}: {e}: not timed")
    res = time_providers(fns, device=dev, rep_ms=30)
    nbytes = x.numel() * x.element_size()
    print(f"--- {op} {name} bf16 ({nbytes / 1e6:.0f} MB read)")
    rows = sorted(res.items(), key=lambda kv: kv[1].median_ms)
    for k, v in rows[:12] + [r for r in rows[12:] if r[0] in ("default", "torch", "torch.compile")]:
        print(f"  {k:36s} {v.median_ms * 1e3:8.1f} us {nbytes / v.median_ms / 1e6:7.0f} GB/s")
