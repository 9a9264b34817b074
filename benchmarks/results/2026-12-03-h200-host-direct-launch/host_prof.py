# As run on the H200 (2026-12-03) against a trial of ops/_runtime.py with a DIRECT_LAUNCH switch:
# compiled kernels without scratch launched through Triton's C launch function instead of its
# launcher object. The trial measured no gain (host-prof.txt) and was not kept; the switch is gone.
"""Host cost per call: wall us of 2000 back-to-back calls (direct launch on/off, interleaved),
then cProfile of 2000 calls, for a few host-suite rows."""
import cProfile, pstats, io, time, sys, torch
import roofkit
from roofkit.ops import _runtime
from roofkit.harness import registry
from roofkit.harness.bench import _timed_call, _grad_outputs
from roofkit.harness.inputs import make_generator
dev = torch.device("cuda")
want = [("rms_norm", "hidden_8x4096"), ("rms_norm", "hidden_8x4096_fwd_bwd"), ("cross_entropy", "logits_8x32000"),
        ("softmax", "attn_8x4096_fwd_bwd"), ("matmul", "linear_8x4096x4096_fwd_bwd"), ("layer_norm", "hidden_8x4096")]
def wall(fn, n=2000):
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(n): fn()
    torch.cuda.synchronize(); return (time.perf_counter() - t0) / n * 1e6
summary = []
for opname, cname in want:
    spec = registry.get(opname)
    case = [c for c in spec.suites["host"] if c.name == cname][0]
    dtype = torch.bfloat16
    inputs = spec.make_inputs(case, dtype, make_generator(0, dev), dev)
    mode = case.get("mode", "fwd")
    grad_pos = spec.grad_args if mode == "fwd_bwd" else ()
    dys = []
    if grad_pos:
        out = spec.impl(*inputs.args, **inputs.kwargs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        dys = [(i, torch.randn_like(o)) for i, o in enumerate(outs) if isinstance(o, torch.Tensor) and o.is_floating_point()]
    tfn = spec.torch_impl
    calls = {"roofkit": _timed_call(spec.impl, inputs, grad_pos, dys, mode), "torch": _timed_call(tfn, inputs, grad_pos, dys, mode)}
    for f in calls.values():
        for _ in range(300): f()
    res = {"roofkit": [], "roofkit-nodirect": [], "torch": []}
    for r in range(3):
        res["torch"].append(wall(calls["torch"]))
        res["roofkit"].append(wall(calls["roofkit"]))
        _runtime.DIRECT_LAUNCH[0] = False; _runtime.clear_plans()
        f2 = _timed_call(spec.impl, inputs, grad_pos, dys, mode)
        for _ in range(50): f2()
        res["roofkit-nodirect"].append(wall(f2))
        _runtime.DIRECT_LAUNCH[0] = True; _runtime.clear_plans()
        for _ in range(50): calls["roofkit"]()
    med = {k: sorted(v)[1] for k, v in res.items()}
    print(f"== {opname} {cname}: " + ", ".join(f"{k} {v:.1f} us {['%.1f'%x for x in res[k]]}" for k, v in med.items()), flush=True)
    summary.append((opname, cname, med))
    pr = cProfile.Profile(); pr.enable()
    for _ in range(2000): calls["roofkit"]()
    torch.cuda.synchronize(); pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(28); print(s.getvalue()[-9000:])
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(22); print(s.getvalue()[-7000:])
print("\nSUMMARY (median of 3 runs, us per call)")
for opname, cname, med in summary:
    print(f"{opname:14s} {cname:30s} torch {med['torch']:7.1f} roofkit {med['roofkit']:7.1f} ({med['roofkit']/med['torch']:.2f}x) nodirect {med['roofkit-nodirect']:7.1f}")
