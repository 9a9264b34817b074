"""Every registered op's small (CPU-sized) cases, forward and backward, for compute-sanitizer:

    compute-sanitizer --tool memcheck python3 benchmarks/sanitize_registry.py [OPS...]
    compute-sanitizer --tool racecheck python3 benchmarks/sanitize_registry.py matmul ...
    ROOFKIT_SANITIZE_FORCE=split_k,ptr_attention compute-sanitizer ... matmul scaled_dot_product_attention

ROOFKIT_SANITIZE_FORCE names launch paths the small cases would not take by default, forced for
the whole run: ``split_k`` (matmul's one-launch split-K, 3 K chunks per tile, 16x16 tiles) and
``ptr_attention`` (the attention forward's pointer loads instead of tensor descriptors).

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
                first = out[0] if isinstance(out, (tuple, list)) else out
                leaves = [args[i] for i in spec.grad_args if isinstance(args[i], torch.Tensor) and args[i].requires_grad]
                if leaves and first.requires_grad and first.numel():
                    torch.autograd.grad(first, leaves, torch.randn_like(first), allow_unused=True)
                calls += 1
        if device.type == "cuda":
            torch.cuda.synchronize()
        print(f"{spec.name}: {calls} calls", flush=True)
    print("sanitize registry cases ran")


if __name__ == "__main__":
    run(sys.argv[1:])
