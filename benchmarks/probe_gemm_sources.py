"""The llama3-8b GEMMs with roofkit's matmul from another commit and from this tree, in one
process, interleaved with cuBLAS (cold L2, the harness's timing, two rounds) separates a change
in the code from the GPU's own drift between processes (under the H200's power cap every
provider's GEMM rate moves by up to 8 % between runs).

    PYTHONPATH=src python3 benchmarks/probe_gemm_sources.py REV      (a GPU; REV: a commit)

The other commit's package is extracted with `git archive` into a temporary directory as
``roofkit_old`` (its imports rewritten), so both import side by side.
"""
import importlib
import pathlib
import re
import subprocess
import sys
import tempfile
import time

import torch

from roofkit.harness.timing import time_providers

rev = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
tmp = pathlib.Path(tempfile.mkdtemp(prefix="roofkit-old-"))
archive = subprocess.run(["git", "archive", rev, "src/roofkit"], check=True, capture_output=True).stdout
subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
old = tmp / "roofkit_old"
(tmp / "src" / "roofkit").rename(old)
for f in old.rglob("*.py"):
    s = f.read_text()
    s = re.sub(r"\broofkit\.(ops|harness|config|_env|cli)", r"roofkit_old.\1", s)
    s = re.sub(r"^(\s*)import roofkit$", r"\1import roofkit_old as roofkit", s, flags=re.M)
    f.write_text(s.replace("from roofkit import", "from roofkit_old import"))
sys.path.insert(0, str(tmp))
OM = importlib.import_module("roofkit_old.ops.matmul")
NM = importlib.import_module("roofkit.ops.matmul")
dev = "cuda"
shapes = {"qkv": (8192, 6144, 4096), "o_proj": (8192, 4096, 4096), "ffn_up": (8192, 14336, 4096),
          "ffn_down": (8192, 4096, 14336), "lm_head": (8192, 128256, 4096)}
g = torch.Generator(device=dev).manual_seed(0)
for rnd in range(2):
    for name, (m, n, k) in shapes.items():
        a = torch.randn(m, k, device=dev, generator=g).to(torch.bfloat16)
        b = torch.randn(k, n, device=dev, generator=g).to(torch.bfloat16)
        fns = {"old": lambda: OM.matmul(a, b), "new": lambda: NM.matmul(a, b), "torch": lambda: a @ b}
        ref = (a @ b).float()
        for p, f in fns.items():
            e = ((f().float() - ref).norm() / ref.norm()).item()
            assert e < 1e-2, (p, e)
        t0 = time.time()
        res = time_providers(fns, device=dev, l2="cold", rep_ms=200)
        fl = 2 * m * n * k
        print(f"round {rnd} {name:9s} " + "  ".join(f"{p} {fl / r.median_ms / 1e9:6.1f}" for p, r in res.items())
              + f"  TFLOP/s ({time.time() - t0:.1f} s)", flush=True)
        del a, b, ref
