"""layer_norm forward launch sweep on the GPU at 16384 x 8192 bf16 (where the default one-pass
tile of 2 x 8192 on 8 warps needs 255 registers a thread and one program per SM: 2544 GB/s against
torch.compile's 3574) and 32768 x 4096 (the acceptance shape, to see that a change there does not
lose): rows per tile x warps, one pass, and the two-pass chunked loop (rows per tile x chunk x
warps), next to torch and torch.compile. Every configuration's
output, mean and 1/std are checked against the default's (to rounding: the reduction order
follows the warps) before timing; timing is the
harness's (CUDA events, cold L2, interleaved). Bytes: x read and y written once.

    PYTHONPATH=src python3 benchmarks/sweep_layer_norm_fwd.py
"""
import importlib
import itertools

import torch
import torch.nn.functional as F

from roofkit.harness.timing import time_providers

LN = importlib.import_module("roofkit.ops.layer_norm")
dev, bf = "cuda", torch.bfloat16
for m, n in ((16384, 8192), (32768, 4096)):
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(m, n, device=dev, generator=g).to(bf)
    w = torch.randn(n, device=dev, generator=g).to(bf)
    b = torch.randn(n, device=dev, generator=g).to(bf)
    ref = LN._layer_norm_forward(x, w, b, 1, 1e-5)
    fns = {"default " + str(tuple(LN._fwd_config(n))[:4]): lambda: LN._layer_norm_forward(x, w, b, 1, 1e-5)}

    def add(name, cfg):
        """Time ``cfg`` under ``name`` if its output, mean and 1/std match the default's."""
        got = LN._layer_norm_forward(x, w, b, 1, 1e-5, cfg)
        if all(torch.allclose(a.float(), r.float(), rtol=2e-2, atol=2e-2) for a, r in zip(got, ref)):
            fns[name] = lambda: LN._layer_norm_forward(x, w, b, 1, 1e-5, cfg)
        else:
            print(f"{name}: differs from the default's output: not timed")

    for bm, warps in itertools.product((1, 2, 4), (8, 16, 32)):
        if bm * n <= 32768:
            add(f"bm{bm} w{warps}", LN.Config(True, bm, n, warps))
    # Two passes over each row in chunks (the second from L1 / L2): few registers, many programs.
    for bm, bn, warps in itertools.product((1, 2), (1024, 2048, 4096), (4, 8, 16)):
        if bn < n and bm * bn // (32 * warps) >= 4:
            add(f"loop bm{bm} bn{bn} w{warps}", LN.Config(False, bm, bn, warps))
    fns["torch"] = lambda: F.layer_norm(x, (n,), w, b, 1e-5)
    compiled = torch.compile(F.layer_norm)
    fns["torch.compile"] = lambda: compiled(x, (n,), w, b, 1e-5)
    res = time_providers(fns, device=dev, rep_ms=80)
    nbytes = 2 * m * n * 2
    print(f"--- layer_norm forward {m} x {n} bf16")
    for k, v in sorted(res.items(), key=lambda kv: kv[1].median_ms):
        print(f"{k:28s} {v.median_ms * 1e3:8.1f} us {nbytes / v.median_ms / 1e6:7.0f} GB/s")
