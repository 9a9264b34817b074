"""Every registered op captures in a CUDA graph and replays to its eager result, forward and backward.

For every case of every registered op (on a GPU): the spec's inputs are made once and kept as the
graph's input buffers; the call, and where the spec checks gradients ``torch.autograd.grad`` of its
first output for a grad_output buffer, is warmed up on a side stream and captured in one
``torch.cuda.CUDAGraph`` (forward and backward together, as torch's whole-network capture does).
New random values (another seed) are copied into the buffers, the graph is replayed, and its
outputs are compared with an eager call on the same buffers: bitwise where the op promises
determinism (the spec, or a case with ``deterministic=True``), else (atomic adds in an unspecified
order) within twice the spec's elementwise tolerance, as each of the two results is within it of
the exact one, or, where torch's own result is further off (16-bit atomic sums over a hot
destination: verify widens the budget to twice torch's worst error there), each of a forward
output's two results within the op's budget against the float64 reference. Ops whose output size is data (``REFUSES_CAPTURE``) must refuse capture, forward
and backward, with an error that names them and their capturable alternative.
"""

from __future__ import annotations

import re
import warnings

import pytest
import torch

from roofkit.harness import registry
from roofkit.harness.inputs import make_generator, with_layout
from roofkit.harness.spec import Case, Inputs, OpSpec
from roofkit.harness.verify import _as_tuple, _bitwise_equal, compare

# op -> the capturable call its error message must point to
REFUSES_CAPTURE = {"masked_select": "roofkit.compact(input, mask)"}


def _device() -> torch.device:
    return torch.device("cuda")


def _params(refusing: bool):
    out = []
    for spec in registry.all_specs():
        if (spec.name in REFUSES_CAPTURE) != refusing:
            continue
        for case in spec.cases:
            for dtype in spec.case_dtypes(case):
                marks = [pytest.mark.gpu] + ([getattr(pytest.mark, spec.marker)] if spec.marker else [])
                if "slow" in case.tags:
                    marks.append(pytest.mark.slow)
                name = str(dtype).removeprefix("torch.")
                out.append(pytest.param(spec.name, case.name, dtype, marks=marks, id=f"{spec.name}-{case.name}-{name}"))
    return out


# ----------------------------------------------------------------------------- helpers


def _tensors(inputs: Inputs) -> list[tuple]:
    """The tensor arguments of a call as (position or keyword, tensor)."""
    pos = [(i, a) for i, a in enumerate(inputs.args) if isinstance(a, torch.Tensor)]
    return pos + [(k, v) for k, v in inputs.kwargs.items() if isinstance(v, torch.Tensor)]


def _load(dst: torch.Tensor, src: torch.Tensor, what: str) -> None:
    """Copy the values of ``src`` into the buffer ``dst`` (same shape, strides and dtype); a
    broadcast (stride-0) dimension holds one value, written once."""
    assert (dst.shape, dst.stride(), dst.dtype) == (src.shape, src.stride(), src.dtype), (
        f"{what}: the inputs of another seed have another layout ({tuple(src.shape)}, {src.stride()}, {src.dtype} "
        f"vs {tuple(dst.shape)}, {dst.stride()}, {dst.dtype}): a graph cannot replay them"
    )
    if dst.numel():
        distinct = tuple(slice(0, 1) if st == 0 else slice(None) for st in dst.stride())
        with torch.no_grad():
            dst[distinct].copy_(src[distinct])


def _grad_leaves(inputs: Inputs, positions) -> Inputs:
    args = list(inputs.args)
    for i in positions:
        if isinstance(args[i], torch.Tensor):
            args[i] = args[i].detach().requires_grad_(True)
    return Inputs(tuple(args), dict(inputs.kwargs))


def _grad_output(like: torch.Tensor, case: Case, seed: int) -> torch.Tensor:
    """A grad_output for ``like`` as verify draws it (the case's fill and layout)."""
    dy = torch.randn(like.shape, generator=make_generator(seed, like.device), device=like.device)
    if case.get("grad_output", "normal") == "ones":
        dy = torch.ones_like(dy)
    return with_layout(dy.to(like.dtype), case.get("grad_layout", "contiguous"))


def _first(ret):
    return ret[0] if isinstance(ret, (tuple, list)) else ret


def _call(spec: OpSpec, inputs: Inputs, positions, dy) -> list[tuple]:
    """(name, tensor) of every output of one call, then (with a grad_output ``dy``) the gradients
    of its first output with respect to the arguments at ``positions``."""
    ret = spec.impl(*inputs.args, **inputs.kwargs)
    outs = tuple(ret) if isinstance(ret, (tuple, list)) else (ret,)
    res = [(f"out{i}", o) for i, o in enumerate(outs)]
    if dy is not None:
        targets = [(i, inputs.args[i]) for i in positions if isinstance(inputs.args[i], torch.Tensor)]
        grads = torch.autograd.grad(outs[0], [t for _, t in targets], dy, allow_unused=True)
        res += [(f"grad[{i}]", g) for (i, _), g in zip(targets, grads)]
    return res


def _capture(fn):
    """(graph, outputs): ``fn`` warmed up on a side stream (compilation, tuning and lazy state
    happen there), then one call captured."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*CUDA Graph is empty")  # zero-size cases launch nothing
        with torch.cuda.graph(graph):
            outs = fn()
    return graph, outs


def _where_different(got: torch.Tensor, want: torch.Tensor, ok: torch.Tensor) -> str:
    bad = (~ok).reshape(-1).nonzero()
    j = int(bad[0])
    idx = tuple(int(v) for v in torch.unravel_index(torch.tensor(j), want.shape)) if want.dim() else ()
    return (f"{bad.numel()} of {want.numel()} element(s) differ, first at {idx}: "
            f"replay {got.reshape(-1)[j].item()!r}, eager {want.reshape(-1)[j].item()!r}")


def _within_budget(spec: OpSpec, case: Case, inputs: Inputs, name: str, results: dict) -> None:
    """Judge a forward output of each run in ``results`` against the float64 reference by
    verify's rules (the op's own promise: the dtype's tolerance, widened to twice torch's own
    worst error where torch's same-dtype result is that far off, as atomic 16-bit sums are)."""
    i = int(name.removeprefix("out"))
    ref_in = inputs.map(lambda t: t.detach().to(torch.float64) if t.is_floating_point() else t.detach())
    ref = _as_tuple(spec.reference(*ref_in.args, **ref_in.kwargs))[i]
    plain = inputs.map(lambda t: t.detach())
    expected = _as_tuple(spec.torch_impl(*plain.args, **plain.kwargs))[i]
    rtol, atol = spec.tolerance.elementwise(expected.dtype, spec.reduction_length(case))
    for label, t in results.items():
        check = compare(name, t, ref, expected, rtol=rtol, atol=atol, l2_factor=spec.tolerance.l2_factor,
                        l2_floor=spec.tolerance.floor(expected.dtype), device=t.device)
        if not check.passed:
            pytest.fail(f"{name}: the {label} misses the op's error budget against the float64 reference: "
                        f"{'; '.join(check.reasons)}")


def _assert_replay_matches_eager(spec: OpSpec, case: Case, got: list[tuple], want: list[tuple],
                                 inputs: Inputs | None = None) -> None:
    assert [n for n, _ in got] == [n for n, _ in want]
    bitwise = spec.deterministic or bool(case.get("deterministic", False))
    for (name, g), (_, w) in zip(got, want):
        if g is None or w is None:
            assert g is None and w is None, f"{name}: None in one run only"
            continue
        assert (g.shape, g.dtype) == (w.shape, w.dtype), \
            f"{name}: {tuple(g.shape)} {g.dtype} vs {tuple(w.shape)} {w.dtype}"
        if bitwise or not w.is_floating_point():
            if not _bitwise_equal(g, w):
                if g.element_size() == 1 and g.is_floating_point():
                    g, w = g.view(torch.uint8), w.view(torch.uint8)
                same = (g == w) | (torch.isnan(g) & torch.isnan(w)) if g.is_floating_point() else g == w
                if g.is_floating_point():
                    same &= torch.signbit(g) == torch.signbit(w)
                pytest.fail(f"{name}: replay not bitwise identical to eager: {_where_different(g, w, same)}")
            continue
        rtol, atol = spec.tolerance.elementwise(w.dtype, spec.reduction_length(case))
        gd, wd = g.double(), w.double()
        finite = torch.isfinite(wd)
        scale = float(wd[finite].abs().max()) if bool(finite.any()) else 0.0
        limit = 2 * (atol * scale + rtol * wd.abs())
        ok = (gd == wd) | (torch.isnan(gd) & torch.isnan(wd)) | ((gd - wd).abs() <= limit)
        if not bool(ok.all()) and inputs is not None and name.startswith("out"):
            # Unordered atomic sums can be further apart than twice the tolerance where torch's
            # own result is (its error widens the budget): then each must meet the budget itself.
            _within_budget(spec, case, inputs, name, {"replay": g, "eager call": w})
        elif not bool(ok.all()):
            pytest.fail(f"{name}: replay outside 2x the tolerance (rtol {rtol:.3g}, atol {atol:.3g} x {scale:.3g}) "
                        f"of eager: {_where_different(g, w, ok)}")


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("op,case,dtype", _params(refusing=False))
def test_op_graph_replay_matches_eager(op, case, dtype):
    spec, dev = registry.get(op), _device()
    c = spec.case(case)
    positions = spec.grad_args if c.get("grad", True) else ()
    buffers = _grad_leaves(spec.make_inputs(c, dtype, make_generator(1, dev), dev), positions)
    out0 = _first(spec.impl(*buffers.args, **buffers.kwargs))
    dy = None
    if positions and isinstance(out0, torch.Tensor) and out0.requires_grad:
        dy = _grad_output(out0, c, seed=2)
    del out0
    graph, captured = _capture(lambda: _call(spec, buffers, positions, dy))

    fresh = spec.make_inputs(c, dtype, make_generator(3, dev), dev)
    pairs = list(zip(_tensors(buffers), _tensors(fresh)))
    assert [k for (k, _), _ in pairs] == [k for _, (k, _) in pairs]
    for (key, dst), (_, src) in pairs:
        _load(dst, src, f"{op} argument {key}")
    if dy is not None:
        _load(dy, _grad_output(dy, c, seed=4), f"{op} grad_output")
    graph.replay()
    got = [(n, t.detach().clone() if isinstance(t, torch.Tensor) else t) for n, t in captured]
    if spec.mutates:  # what the replay wrote into its inputs, then the values again for eager
        got += [(f"input[{k}]", t.detach().clone()) for k, t in _tensors(buffers) if k in spec.mutates]
        for (key, dst), (_, src) in pairs:
            _load(dst, src, f"{op} argument {key}")
    want = [(n, t.detach() if isinstance(t, torch.Tensor) else t) for n, t in _call(spec, buffers, positions, dy)]
    if spec.mutates:
        want += [(f"input[{k}]", t.detach()) for k, t in _tensors(buffers) if k in spec.mutates]
    torch.cuda.synchronize()
    _assert_replay_matches_eager(spec, c, got, want, None if spec.mutates else buffers)


@pytest.mark.parametrize("op,case,dtype", _params(refusing=True))
def test_op_with_data_dependent_size_refuses_capture(op, case, dtype):
    # Forward captured, then (forward run eagerly on the capture stream) the backward alone: both
    # raise before anything is read back, and the device stays usable.
    spec, dev = registry.get(op), _device()
    c = spec.case(case)
    alternative = re.escape(REFUSES_CAPTURE[op])
    inputs = spec.make_inputs(c, dtype, make_generator(1, dev), dev)
    refusal = rf"roofkit\.{op}: {{}} cannot be captured in a CUDA graph.*{alternative}"
    with pytest.raises(RuntimeError, match=refusal.format("the call")):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            spec.impl(*inputs.args, **inputs.kwargs)
    positions = spec.grad_args if c.get("grad", True) else ()
    if positions:
        leaves = _grad_leaves(inputs, positions)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # autograd runs a backward on its forward's stream
            out = _first(spec.impl(*leaves.args, **leaves.kwargs))
            dy = _grad_output(out, c, seed=2)
        targets = [leaves.args[i] for i in positions if isinstance(leaves.args[i], torch.Tensor)]
        with pytest.raises(RuntimeError, match=refusal.format("the backward")):
            with torch.cuda.graph(torch.cuda.CUDAGraph(), stream=stream):
                torch.autograd.grad(out, targets, dy)
    torch.cuda.synchronize()
    # Eager calls still work.
    assert _bitwise_equal(spec.impl(*inputs.args, **inputs.kwargs), spec.torch_impl(*inputs.args, **inputs.kwargs))


@pytest.mark.gpu
@pytest.mark.compact
@pytest.mark.parametrize("case", ["odd_37x13", "runs_multi_block_3x4099", "broadcast_mask_9_over_5x9",
                                  "transposed_12x20", "gpu_runs_8Mi", "gpu_activation_8192x4096_keep_50pct"])
def test_compact_graph_replay_matches_eager(case):
    # masked_select's capturable alternative: the count stays on the device, so a replay on new
    # values (another count) gives values[:count], count and the gradient of an eager call.
    from roofkit.ops import compact

    spec, dev = registry.get("masked_select"), _device()
    c = spec.case(case)
    dtype = spec.case_dtypes(c)[0]
    buffers = _grad_leaves(spec.make_inputs(c, dtype, make_generator(1, dev), dev), (0,))
    x, m = buffers.args
    values, _ = compact(x, m)
    dv = _grad_output(values, c, seed=2)
    # (an autograd graph made before the capture, on the default stream, may not stay alive into
    # it: torch's AccumulateGrad of x would keep that stream, which capture refuses to join)
    del values

    def call():
        values, count = compact(x, m)
        return values, count, torch.autograd.grad(values, x, dv)[0]

    graph, captured = _capture(call)
    fresh = spec.make_inputs(c, dtype, make_generator(3, dev), dev)
    _load(x, fresh.args[0], "input")
    _load(m, fresh.args[1], "mask")
    _load(dv, _grad_output(dv, c, seed=4), "grad_output")
    graph.replay()
    got_values, got_count, got_grad = (t.clone() for t in captured)
    want_values, want_count, want_grad = call()
    k = int(want_count)
    assert int(got_count) == k == int(torch.broadcast_to(m, torch.broadcast_shapes(x.shape, m.shape)).sum())
    assert _bitwise_equal(got_values[:k], want_values[:k])
    assert _bitwise_equal(got_grad, want_grad)
