"""rms_norm properties the registry-wide test cannot state."""

import pytest
import torch
import torch.nn.functional as F

import roofkit
from roofkit.harness.spec import case
from roofkit.harness.verify import verify_op
import importlib

rms_module = importlib.import_module("roofkit.ops.rms_norm")

pytestmark = pytest.mark.rms_norm


def _x(shape, device, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(device=device, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rms_norm_default_eps_matches_torch(dtype, device):
    # torch's default is the epsilon of its float32 computation type for every input dtype.
    x = (_x((4, 64), device) * 0.05).to(dtype)  # small enough that eps matters
    w = _x((64,), device, seed=1).to(dtype)
    y = roofkit.rms_norm(x, (64,), w)
    ref = rms_module.rms_norm_reference(x.double(), (64,), w.double(), torch.finfo(torch.float32).eps)
    rtol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    torch.testing.assert_close(y.double(), ref, rtol=rtol, atol=rtol * 1e-1)
    torch.testing.assert_close(y, F.rms_norm(x, (64,), w), rtol=rtol, atol=rtol * 1e-1)


def test_rms_norm_is_scale_invariant(device):
    x = _x((6, 100), device)
    w = _x((100,), device, seed=2)
    torch.testing.assert_close(roofkit.rms_norm(37.0 * x, 100, w, eps=0.0), roofkit.rms_norm(x, 100, w, eps=0.0), rtol=1e-5, atol=1e-6)


def test_rms_norm_output_has_unit_rms_without_weight(device):
    y = roofkit.rms_norm(_x((5, 300), device), [300])
    rms = y.double().pow(2).mean(-1).sqrt()
    torch.testing.assert_close(rms, torch.ones_like(rms), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("one_pass_max,programs_per_sm", [(64, 4), (16384, 1), (16384, 1000)])
def test_rms_norm_all_kernel_paths_match_reference(one_pass_max, programs_per_sm, tunables, device):
    # Loop path on short rows; one program per SM; one program per row. 19 x 301 (the spec's
    # prime_37x781 runs in the registry-wide test): 3 chunks of 128 with a ragged last one, and
    # more rows than the backward's programs (8 on 2 CPUs) so that programs walk several rows.
    tunables("rms_norm", ONE_PASS_MAX_N=one_pass_max, LOOP_BLOCK_N=128, PROGRAMS_PER_SM=programs_per_sm)
    loop = one_pass_max < 96  # prime_19x301 and no_weight_5x96 take the loop path (odd_3x7, 16x33 one pass)
    for n in (301, 96):
        assert rms_module._fwd_config(n).one_pass is not loop and rms_module._bwd_config(n).one_pass is not loop
    cases = [case("prime_19x301", shape=(19, 301)), "no_weight_5x96", "transposed_16x33", "odd_3x7"]
    report = verify_op("rms_norm", cases=cases, seeds=2, device=device)
    assert report.passed, report.summary()


def test_rms_norm_weight_grad_is_bitwise_reproducible(device):
    x = _x((64, 200), device, dtype=torch.bfloat16)
    w = _x((200,), device, dtype=torch.bfloat16, seed=3)
    dy = _x((64, 200), device, dtype=torch.bfloat16, seed=4)
    grads = []
    for _ in range(3):
        xi, wi = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        grads.append(torch.autograd.grad(roofkit.rms_norm(xi, (200,), wi), (xi, wi), dy))
    for g in grads[1:]:
        assert torch.equal(g[0], grads[0][0]) and torch.equal(g[1], grads[0][1])


def test_rms_norm_empty_input_returns_empty_without_launch(forbid_launch, device):
    forbid_launch(rms_module, "_rms_norm_fwd_kernel")
    x = torch.empty((0, 8), device=device)
    y = roofkit.rms_norm(x, (8,), torch.ones(8, device=device))
    assert y.shape == (0, 8)


@pytest.mark.parametrize(
    "call,exc,words",
    [
        (lambda d: roofkit.rms_norm(torch.ones(2, 3, device=d, dtype=torch.int32), (3,)), TypeError, ["roofkit.rms_norm", "input"]),
        (lambda d: roofkit.rms_norm(torch.ones(2, 3, device=d), (2, 3)), ValueError, ["roofkit.rms_norm", "normalized_shape"]),
        (lambda d: roofkit.rms_norm(torch.ones(2, 3, device=d), (4,)), ValueError, ["roofkit.rms_norm", "normalized_shape"]),
        (lambda d: roofkit.rms_norm(torch.ones(2, 3, device=d), (3,), torch.ones(4, device=d)), ValueError, ["roofkit.rms_norm", "weight", "(3,)"]),
        (lambda d: roofkit.rms_norm(torch.ones(2, 3, device=d), (3,), torch.ones(3, device=d, dtype=torch.float16)), TypeError, ["roofkit.rms_norm", "weight dtype"]),
        (lambda d: roofkit.rms_norm(torch.ones(2, 3, device=d), (3,), None, -1.0), ValueError, ["roofkit.rms_norm", "eps"]),
        (lambda d: roofkit.rms_norm(torch.ones(2, 3, device=d), (3,), None, "x"), TypeError, ["roofkit.rms_norm", "eps"]),
        (lambda d: roofkit.rms_norm(torch.ones(2, 3, device=d), (3,), [1.0, 1.0, 1.0]), TypeError, ["roofkit.rms_norm", "weight"]),
        (lambda d: roofkit.rms_norm(torch.ones(2, 3, device=d), (3.0,)), TypeError, ["roofkit.rms_norm", "normalized_shape"]),
        (lambda d: roofkit.rms_norm(torch.ones(2, 3, device=d), "ab"), TypeError, ["roofkit.rms_norm", "normalized_shape"]),
        (lambda d: roofkit.rms_norm(torch.ones(2, 1, device=d), True), TypeError, ["roofkit.rms_norm", "normalized_shape"]),
        (lambda d: roofkit.rms_norm(torch.ones(2, 3, device=d), (3,), None, 10**400), ValueError, ["roofkit.rms_norm", "eps"]),
        (lambda d: roofkit.rms_norm(torch.ones(2, 3, device=d).to_sparse(), (3,)), TypeError, ["roofkit.rms_norm", "dense"]),
    ],
)
def test_rms_norm_bad_input_raises_clear_error(call, exc, words, device, raises_naming):
    raises_naming(exc, words, call, device)


def test_rms_norm_compiles_fullgraph_with_backward(device):
    def fn(x, w):
        return roofkit.rms_norm(x + 1.0, (48,), w).square().sum()

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    x = _x((7, 48), device).requires_grad_(True)
    w = _x((48,), device, seed=5).requires_grad_(True)
    gx, gw = torch.autograd.grad(compiled(x, w), (x, w))
    x2, w2 = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
    gx2, gw2 = torch.autograd.grad(F.rms_norm(x2 + 1.0, (48,), w2, torch.finfo(torch.float32).eps).square().sum(), (x2, w2))
    torch.testing.assert_close(gx, gx2, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gw, gw2, rtol=1e-4, atol=1e-5)


def test_rms_norm_cost_counts_five_passes_for_fwd_bwd():
    c = case("t", shape=(2, 3, 8))
    assert rms_module.rms_norm_cost(c, torch.bfloat16).bytes == (2 * 48 + 8) * 2
    fb = case("t", shape=(2, 3, 8), mode="fwd_bwd")
    assert rms_module.rms_norm_cost(fb, torch.bfloat16).bytes == (5 * 48 + 3 * 8) * 2


@pytest.mark.gpu
def test_rms_norm_eager_plans_match_the_checked_path():
    # Repeated inference calls launch a kept plan (no checks, the compiled kernel directly): every
    # call must give the checked path's bits, also when a call differs from a kept plan only in
    # what the plan key must separate (weight layout, alignment, eps, dtype, no weight).
    rms_module._PLANS.clear()
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    buf = torch.randn(8 * 4096 + 8, generator=g, device=dev, dtype=torch.bfloat16)
    w = torch.randn(4096, generator=g, device=dev, dtype=torch.bfloat16)
    w_strided = torch.randn(4096, 2, generator=g, device=dev, dtype=torch.bfloat16)[:, 0]
    calls = [
        (buf[:8 * 4096].view(8, 4096), w, None),
        (buf[1:1 + 8 * 4096].view(8, 4096), w, None),  # 2-byte offset: another specialization
        (buf[:8 * 4096].view(8, 4096), w_strided, None),  # same shapes, strided weight
        (buf[:8 * 4096].view(8, 4096), None, 1e-3),
        (buf[:8 * 4096].view(2, 4, 4096).float(), w.float(), None),
    ]
    for _ in range(3):
        for x, weight, eps in calls:
            got = roofkit.rms_norm(x, (4096,), weight, eps)
            want, _ = rms_module._rms_norm_fwd_op(x, None if weight is None else weight.contiguous(),
                                                   rms_module.DEFAULT_EPS if eps is None else eps)
            assert torch.equal(got, want)
    assert len(rms_module._PLANS) == 4  # the strided weight is checked every time (no plan)
    # Inside a CUDA graph: the plan launches on the capturing stream and replays.
    x = buf[:8 * 4096].view(8, 4096)
    roofkit.rms_norm(x, (4096,), w)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = roofkit.rms_norm(x, (4096,), w)
    x.copy_(torch.randn(8, 4096, generator=g, device=dev, dtype=torch.bfloat16))
    graph.replay()
    assert torch.equal(y, rms_module._rms_norm_fwd_op(x, w, rms_module.DEFAULT_EPS)[0])


@pytest.mark.gpu
def test_rms_norm_planned_backward_matches_the_checked_path():
    # Training calls through kept plans (forward with rstd, bound backward launches) give the
    # checked custom-op path's bits for y, dx and dweight, with and without a weight, repeatedly.
    rms_module._PLANS.clear()
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(1)
    for dtype, with_weight in ((torch.bfloat16, True), (torch.float32, True), (torch.bfloat16, False)):
        for _ in range(3):
            x = torch.randn(8, 4096, generator=g, device=dev, dtype=dtype).requires_grad_(True)
            w = torch.randn(4096, generator=g, device=dev, dtype=dtype).requires_grad_(True) if with_weight else None
            dy = torch.randn(8, 4096, generator=g, device=dev, dtype=dtype)
            y = roofkit.rms_norm(x, (4096,), w)
            grads = torch.autograd.grad(y, (x, w) if with_weight else (x,), dy)
            xr = x.detach().clone().requires_grad_(True)
            wr = w.detach().clone().requires_grad_(True) if with_weight else None
            yr, _ = rms_module._rms_norm_fwd_op.custom(xr, wr, rms_module.DEFAULT_EPS)
            want = torch.autograd.grad(yr, (xr, wr) if with_weight else (xr,), dy)
            assert torch.equal(y, yr)
            for got, ref in zip(grads, want):
                assert torch.equal(got, ref)
    assert any(k[0] for k in rms_module._PLANS)  # the training calls did go through plans
