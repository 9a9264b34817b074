"""Every registered op's small (CPU-sized) cases, forward and backward, for compute-sanitizer:

    compute-sanitizer --tool memcheck python3 benchmarks/sanitize_registry.py [OPS...]
    compute-sanitizer --tool racecheck python3 benchmarks/sanitize_registry.py matmul ...
    ROOFKIT_SANITIZE_FORCE=split_k,ptr_attention compute-sanitizer ... matmul scaled_dot_product_attention

ROOFKIT_SANITIZE_FORCE names launch paths the small cases would not take by default, forced for
the whole run: ``split_k`` (matmul's one-launch split-K, 3 K chunks per tile, 16x16 tiles),
``ptr_attention`` (the attention forward's pointer loads instead of tensor descriptors) and
``smem_ce`` (cross_entropy's staged-row kernel for every 16-bit case with a multiple of 8
classes, plus rows of 9000, 20000 and 128256 classes: several chunks and a tail read from
global memory).

The CPU cases are the ones that reach the kernels' edges (ragged tiles, empty rows, odd strides,
broadcast batches), at sizes the sanitizer runs in seconds. Without CUDA it runs the same calls
through the Triton interpreter (a smoke test of this script). Prints one line per op.
"""

import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from roofkit.harness import registry  # noqa: E402
from roofkit.harness.inputs import make_generator  # noqa: E402


def _force(paths: set[str]) -> None:
    import importlib

    if "split_k" in paths:
        mm = importlib.import_module("roofkit.ops.matmul")
        cfg = mm.Config(16, 16, 16, 2, 4, 2, kind="ptr", split_k=3)
        mm._launch_config = lambda *a: cfg
        os.environ["ROOFKIT_AUTOTUNE"] = "0"
    if "ptr_attention" in paths:
        importlib.import_module("roofkit.ops.attention._launch").FWD_DESC = False
    if "smem_ce" in paths:
        ce = importlib.import_module("roofkit.ops.cross_entropy")
        ce.ONE_PASS_MAX_N = 8
        ce.GRAD_SPLIT_MAX_ROWS_PER_SM = 0


def _smem_ce_rows(device: torch.device) -> int:
    """cross_entropy's staged-row kernel on rows of several chunks (and a tail)."""
    import importlib

    ce = importlib.import_module("roofkit.ops.cross_entropy")
    g = make_generator(1, device)
    calls = 0
    for (m, c), ls in [((3, 9000), 0.0), ((3, 20000), 0.1), ((2, 128256), 0.0)]:
        x = (3 * torch.randn(m, c, generator=g, device=device)).to(torch.bfloat16).requires_grad_(True)
        assert ce._smem_plan(x.detach(), True, False) is not None
        t = torch.randint(0, c, (m,), generator=g, device=device)
        loss = ce.cross_entropy(x, t, label_smoothing=ls)
        torch.autograd.grad(loss, x, torch.randn_like(loss))
        calls += 1
    return calls


def run(ops: list[str]) -> None:
    _force({p for p in os.environ.get("ROOFKIT_SANITIZE_FORCE", "").split(",") if p})
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    specs = [s for s in registry.all_specs() if not ops or s.name in ops]
    for spec in specs:
        calls = 0
        for case in spec.cases:
            if "gpu" in case.tags or "slow" in case.tags:
                continue
            for dtype in spec.case_dtypes(case):
                inputs = spec.make_inputs(case, dtype, make_generator(0, device), device)
                args = list(inputs.args)
                for i in spec.grad_args:
                    if isinstance(args[i], torch.Tensor) and args[i].is_floating_point():
                        args[i] = args[i].detach().requires_grad_(True)
                out = spec.impl(*args, **inputs.kwargs)
                outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])
                        if isinstance(o, torch.Tensor) and o.requires_grad and o.numel()]
                leaves = [args[i] for i in spec.grad_args if isinstance(args[i], torch.Tensor) and args[i].requires_grad]
                if leaves and outs:
                    torch.autograd.grad(outs, leaves, [torch.randn_like(o) for o in outs], allow_unused=True)
                calls += 1
        if spec.name == "cross_entropy" and "smem_ce" in os.environ.get("ROOFKIT_SANITIZE_FORCE", "") \
                and device.type == "cuda":
            calls += _smem_ce_rows(device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        print(f"{spec.name}: {calls} calls", flush=True)
    print("sanitize registry cases ran")


if __name__ == "__main__":
    run(sys.argv[1:])
