"""Does layer_norm's forward store row statistics that change from run to run?

racecheck reported a write-write hazard on the 1-D stores of mean / 1/std (the copies a row's
threads hold were gathered through shared memory). This probe runs the forward on small shapes
and the acceptance shape, ``reps`` times each, and counts calls whose mean / rstd differ bitwise
from the first call's; it also times the acceptance forward. Run it under
``compute-sanitizer --tool racecheck --racecheck-report hazard`` to see the values of any hazard.
(An earlier run compared two forms that are gone: the 1-D store of the copies as computed,
and copies made identical by an exact max first, which cost 7 %; the stores now come from the
tile's layout, one thread per row.)

    PYTHONPATH=src python3 benchmarks/probe_ln_race.py [--reps N] [--no-time] [--max-numel N]
"""

import argparse
import importlib

import torch

from roofkit.harness.timing import time_providers

LN = importlib.import_module("roofkit.ops.layer_norm")

SHAPES = [(3, 7), (5, 96), (16, 33), (9, 100), (11, 70), (64, 1000), (257, 4096), (32768, 4096),
          (3, 20000), (5, 70001)]  # the last two: the chunked path (rows > ONE_PASS_MAX_N)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--no-time", action="store_true")
    p.add_argument("--max-numel", type=int, default=1 << 30, help="skip larger shapes (racecheck is slow)")
    args = p.parse_args()
    g = torch.Generator(device="cuda").manual_seed(0)
    for m, n in SHAPES:
        if m * n > args.max_numel:
            continue
        x = (torch.randn((m, n), device="cuda", generator=g) * 3 + 1).bfloat16()
        w = torch.randn(n, device="cuda", generator=g).bfloat16()
        b = torch.randn(n, device="cuda", generator=g).bfloat16()
        reps = args.reps if m * n < 1 << 24 else 10
        _, mean0, rstd0 = LN._layer_norm_forward(x, w, b, 1, 1e-5)
        moved = 0
        for _ in range(reps):
            _, mean, rstd = LN._layer_norm_forward(x, w, b, 1, 1e-5)
            moved += int(not (torch.equal(mean.view(torch.int32), mean0.view(torch.int32))
                              and torch.equal(rstd.view(torch.int32), rstd0.view(torch.int32))))
        print(f"{m}x{n}: {moved}/{reps} calls with different statistics")
    if not args.no_time:
        x = torch.randn((32768, 4096), device="cuda", generator=g).bfloat16()
        w = torch.randn(4096, device="cuda", generator=g).bfloat16()
        b = torch.randn(4096, device="cuda", generator=g).bfloat16()

        t = time_providers({"stored from the tile layout": lambda: LN._layer_norm_forward(x, w, b, 1, 1e-5)})
        for k, v in t.items():
            print(f"forward 32768x4096 bf16, statistics {k}: {v.median_ms * 1e3:.1f} us, "
                  f"{2 * 32768 * 4096 * 2 / v.median_ms / 1e6:.0f} GB/s (x read + y written)")


if __name__ == "__main__":
    main()
