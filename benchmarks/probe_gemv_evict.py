"""Does an L2 evict-first hint on the weight stream take the flush's write-back out of a GEMV?

    PYTHONPATH=src python3 benchmarks/probe_gemv_evict.py [--reps N] [--json PATH]

The GEMV acceptance figure (1x4096x4096 bf16, 3000 GB/s = 11.2 us) meets the harness's cold-L2 rule:
the flush writes 2x L2, so the timed kernel starts with an L2 full of dirty lines, and every line
its 32 MiB weight read allocates evicts one that must be written back first (probe_flush.py:
cuBLAS 18.4 us after the write flush, 14.7 us after a read-only one). With the loads marked
``evict_first`` (PTX ``createpolicy ... L2::evict_first`` + ``L2::cache_hint``) the weight's lines
should be the first victims of the weight's own later misses, so only the first lines of each L2
set evict dirty data, and the write flush should cost what a clean L2 costs.

A standalone split-K GEMV (one K slice per program loaded in one shot, the slices summed in order
by the last program of each column block: the same bits every run) in several shapes, each with
and without the hint, beside roofkit.matmul and cuBLAS, after a write flush (the harness's) and a
read-only flush. Each rep: a device-side sleep (so the host's enqueue never shows), the flush,
then every call once in a rotating order, CUDA events around each. Median of reps, us and GB/s
of the GEMV's own bytes. Every output checked against float64 first.
"""

import argparse
import json
import os

import torch
import triton
import triton.language as tl

os.environ.setdefault("ROOFKIT_AUTOTUNE", "0")
import roofkit  # noqa: E402
from roofkit.harness.device import environment  # noqa: E402


@triton.jit
def _gemv_probe(x_ptr, w_ptr, out_ptr, ws_ptr, lock_ptr, K, N, s_wk,
                BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr, EV: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    split = tl.num_programs(1)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = rn < N
    k_len = tl.cdiv(K, split)
    k_lo = pid_k * k_len
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for k0 in range(k_lo, tl.minimum(k_lo + k_len, K), BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        k_ok = rk < tl.minimum(k_lo + k_len, K)
        xv = tl.load(x_ptr + rk, mask=k_ok, other=0.0).to(tl.float32)
        wv = tl.load(w_ptr + rk.to(tl.int64)[:, None] * s_wk + rn[None, :], mask=k_ok[:, None] & n_ok[None, :],
                     other=0.0, eviction_policy=EV)
        acc += tl.sum(wv.to(tl.float32) * xv[:, None], axis=0)
    if split == 1:
        tl.store(out_ptr + rn, acc.to(out_ptr.dtype.element_ty), mask=n_ok)
    else:
        tl.store(ws_ptr + pid_k * N + rn, acc, mask=n_ok)
        tl.debug_barrier()
        arrived = tl.atomic_add(lock_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        if arrived == split - 1:
            acc = tl.zeros([BLOCK_N], dtype=tl.float32)
            for s in range(0, split):
                acc += tl.load(ws_ptr + s * N + rn, mask=n_ok, other=0.0, cache_modifier=".cg")
            tl.store(out_ptr + rn, acc.to(out_ptr.dtype.element_ty), mask=n_ok)
            tl.atomic_xchg(lock_ptr + pid_n, 0, sem="relaxed", scope="gpu")


@triton.jit
def _empty(out_ptr):
    pass


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    dev = torch.device("cuda")
    K = N = 4096
    g = torch.Generator(device=dev).manual_seed(3)
    x = torch.randn(1, K, device=dev, dtype=torch.bfloat16, generator=g)
    w = torch.randn(K, N, device=dev, dtype=torch.bfloat16, generator=g)
    ref = x.double() @ w.double()
    out = torch.empty(1, N, device=dev, dtype=torch.bfloat16)
    ws = torch.empty(64, N, device=dev, dtype=torch.float32)
    locks = torch.zeros(N, device=dev, dtype=torch.int32)
    nbytes = 2 * (K * N + K + N)

    def probe(bk, bn, split, nw, ev):
        grid = (triton.cdiv(N, bn), split)
        return lambda: _gemv_probe[grid](x, w, out, ws, locks, K, N, w.stride(0), BLOCK_K=bk, BLOCK_N=bn, EV=ev,
                                         num_warps=nw)

    calls = {"cuBLAS": lambda: torch.matmul(x, w), "roofkit.matmul": lambda: roofkit.matmul(x, w)}
    # (BLOCK_K, BLOCK_N, split, warps, eviction policy); the second run: the first pair is
    # the first run's best, the rest wider rows / other program counts, all evict-first
    shapes = [(4096, 16, 1, 8, ""), (4096, 16, 1, 8, "evict_first"), (256, 64, 16, 4, "evict_first"),
              (512, 128, 8, 8, "evict_first"), (256, 256, 16, 8, "evict_first"), (128, 512, 33, 8, "evict_first"),
              (1024, 64, 4, 8, "evict_first"), (512, 64, 8, 4, "evict_first"), (2048, 32, 2, 8, "evict_first")]
    for bk, bn, split, nw, ev in shapes:
        calls[f"probe k{bk} n{bn} s{split} w{nw} {ev or 'normal'}"] = probe(bk, bn, split, nw, ev)
    calls["empty kernel (event overhead)"] = lambda: _empty[(1, )](out)
    verify = {}
    for name, fn in calls.items():
        if name.startswith("empty"):
            continue
        out.fill_(float("nan"))
        got = fn()
        got = got if isinstance(got, torch.Tensor) else out  # a Triton launch returns its kernel
        torch.cuda.synchronize()
        err = ((got.double() - ref).norm() / ref.norm()).item()
        verify[name] = err
        print(f"verify {name:36s} rel L2 {err:.2e} {'ok' if err < 4e-3 else 'FAIL'}", flush=True)
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    wbuf = torch.empty(2 * l2 // 4, dtype=torch.int32, device=dev)
    rbuf = torch.ones(2 * l2 // 4, dtype=torch.int32, device=dev)
    sink = torch.empty((), dtype=torch.int64, device=dev)
    flushes = {"write": lambda: wbuf.zero_(), "read": lambda: torch.sum(rbuf, dim=0, out=sink)}
    names = list(calls)
    times = {f: {n: [] for n in names} for f in flushes}
    for _ in range(5):  # warm-up: compile, clocks
        for fn in calls.values():
            fn()
    torch.cuda.synchronize()
    for r in range(args.reps):
        for fname, flush in flushes.items():
            order = names[r % len(names):] + names[:r % len(names)]
            ev = []
            torch.cuda._sleep(2_000_000)  # ~1 ms of device time: the host enqueues everything below meanwhile
            for n in order:
                flush()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                calls[n]()
                e.record()
                ev.append((n, s, e))
            torch.cuda.synchronize()
            for n, s, e in ev:
                times[fname][n].append(s.elapsed_time(e) * 1e3)
    med = {f: {n: sorted(v)[len(v) // 2] for n, v in t.items()} for f, t in times.items()}
    print(f"median of {args.reps} reps, us (GB/s of the GEMV's {nbytes / 1e6:.1f} MB)")
    print(f"{'call':38s}" + "".join(f"{f + ' flush':>22s}" for f in flushes))
    for n in names:
        print(f"{n:38s}" + "".join(f"{med[f][n]:12.2f} ({nbytes / med[f][n] / 1e3:6.0f})" for f in flushes))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": environment(), "verify_rel_l2": verify, "median_us": med,
                       "reps": args.reps, "bytes": nbytes}, f, indent=1)
    raise SystemExit(0 if all(v < 4e-3 for v in verify.values()) else 1)


if __name__ == "__main__":
    main()
