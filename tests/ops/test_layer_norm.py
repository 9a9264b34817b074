"""layer_norm properties the registry-wide test cannot state."""

import importlib

import pytest
import torch
import torch.nn.functional as F

from roofkit.harness.spec import case
from roofkit.harness.verify import verify_op

ln_module = importlib.import_module("roofkit.ops.layer_norm")
layer_norm = ln_module.layer_norm
SPEC = ln_module.SPEC

pytestmark = pytest.mark.layer_norm


def _x(shape, device, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(device=device, dtype=dtype)


# (Every registry case, in every dtype with three seeds: tests/test_ops_generic.py.)


@pytest.mark.parametrize("one_pass_max,programs_per_sm", [(64, 4), (16384, 1), (16384, 1000)])
def test_layer_norm_all_kernel_paths_match_reference(one_pass_max, programs_per_sm, tunables, device):
    # Chunked forward and backward on short rows (ragged last chunk); one program per SM; one
    # program per row block.
    tunables("layer_norm", ONE_PASS_MAX_N=one_pass_max,
             BWD_ONE_PASS_MAX_N=min(one_pass_max, ln_module.BWD_ONE_PASS_MAX_N), LOOP_BLOCK_N=32,
             PROGRAMS_PER_SM=programs_per_sm)
    cases = [SPEC.case("odd_3x7"), SPEC.case("no_bias_5x96"), SPEC.case("transposed_16x33"),
             case("mean_offset_9x100", shape=(9, 100), shift=1e3, dtypes=(torch.float32,)),
             case("no_weight_11x70", shape=(11, 70), weight=False, dtypes=(torch.bfloat16,))]
    if one_pass_max == 64:
        assert not ln_module._fwd_config(96).one_pass and not ln_module._bwd_config(96).one_pass
    report = verify_op(SPEC, cases=cases, seeds=1, dtypes=(torch.float32, torch.bfloat16), device=device)
    assert report.rows and report.passed, report.summary()


def test_layer_norm_output_has_zero_mean_unit_variance_without_affine(device):
    x = _x((5, 300), device) * 3.0 + 7.0
    y = layer_norm(x, 300, eps=0.0).double()
    torch.testing.assert_close(y.mean(-1), torch.zeros(5, dtype=torch.float64, device=device), rtol=0, atol=1e-6)
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(5, dtype=torch.float64, device=device), rtol=1e-5, atol=0)


def test_layer_norm_is_shift_and_scale_invariant(device):
    x = _x((6, 100), device)
    w, b = _x((100,), device, seed=1), _x((100,), device, seed=2)
    ref = layer_norm(x, (100,), w, b, eps=0.0)
    torch.testing.assert_close(layer_norm(4.0 * x - 3.0, (100,), w, b, eps=0.0), ref, rtol=1e-5, atol=1e-5)


def test_layer_norm_saves_mean_and_rstd_for_backward(device):
    x = _x((4, 50), device) + 2.0
    y, mean, rstd = ln_module._layer_norm_fwd_op(x, None, None, 1, 1e-5)
    xd = x.double()
    torch.testing.assert_close(mean.double(), xd.mean(-1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rstd.double(), torch.rsqrt(xd.var(-1, unbiased=False) + 1e-5), rtol=1e-5, atol=0)
    assert mean.dtype == rstd.dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_default_eps_and_grads_match_torch(dtype, device):
    x = (_x((7, 64), device) * 0.01).to(dtype)  # small enough that eps matters
    w, b = _x((64,), device, dtype, seed=3), _x((64,), device, dtype, seed=4)
    dy = _x((7, 64), device, dtype, seed=5)
    got = [t.requires_grad_(True) for t in (x.clone(), w.clone(), b.clone())]
    ref = [t.double().requires_grad_(True) for t in (x, w, b)]
    y = layer_norm(got[0], (64,), got[1], got[2])
    y_ref = F.layer_norm(ref[0], (64,), ref[1], ref[2])  # torch's default eps, in float64
    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2}[dtype]
    torch.testing.assert_close(y.double(), y_ref, rtol=tol, atol=tol)
    for a, r in zip(torch.autograd.grad(y, got, dy), torch.autograd.grad(y_ref, ref, dy.double())):
        torch.testing.assert_close(a.double(), r, rtol=tol, atol=tol * r.abs().max().item())


def test_layer_norm_param_grads_are_bitwise_reproducible(device):
    x = _x((64, 200), device, dtype=torch.bfloat16)
    w = _x((200,), device, dtype=torch.bfloat16, seed=3)
    b = _x((200,), device, dtype=torch.bfloat16, seed=4)
    dy = _x((64, 200), device, dtype=torch.bfloat16, seed=5)
    grads = []
    for _ in range(3):
        xi, wi, bi = (t.clone().requires_grad_(True) for t in (x, w, b))
        grads.append(torch.autograd.grad(layer_norm(xi, (200,), wi, bi), (xi, wi, bi), dy))
    for g in grads[1:]:
        assert all(torch.equal(a, r) for a, r in zip(g, grads[0]))


def test_layer_norm_empty_input_returns_empty_without_launch(forbid_launch, device):
    for name in ("_layer_norm_fwd_kernel", "_layer_norm_bwd_kernel", "_layer_norm_param_grad_kernel"):
        forbid_launch(ln_module, name)
    x = torch.empty((0, 8), device=device, requires_grad=True)
    w = torch.ones(8, device=device, requires_grad=True)
    b = torch.zeros(8, device=device, requires_grad=True)
    y = layer_norm(x, (8,), w, b)
    assert y.shape == (0, 8)
    gx, gw, gb = torch.autograd.grad(y, (x, w, b), torch.empty_like(y))
    assert gx.shape == (0, 8) and torch.equal(gw, torch.zeros(8, device=device)) and torch.equal(gb, torch.zeros(8, device=device))
    assert layer_norm(torch.empty((3, 0), device=device), 0).shape == (3, 0)


@pytest.mark.parametrize(
    "call,exc,words",
    [
        (lambda d: layer_norm(torch.ones(2, 3, device=d, dtype=torch.int32), (3,)), TypeError, ["roofkit.layer_norm", "input"]),
        (lambda d: layer_norm(torch.ones(2, 3, device=d), (2,)), ValueError, ["roofkit.layer_norm", "normalized_shape"]),
        (lambda d: layer_norm(torch.ones(2, 3, device=d), (1, 2, 3)), ValueError, ["roofkit.layer_norm", "normalized_shape"]),
        (lambda d: layer_norm(torch.ones(2, 3, device=d), ()), ValueError, ["roofkit.layer_norm", "normalized_shape"]),
        (lambda d: layer_norm(torch.ones(2, 3, device=d), (3.0,)), TypeError, ["roofkit.layer_norm", "normalized_shape"]),
        (lambda d: layer_norm(torch.ones(2, 3, device=d), (3,), torch.ones(4, device=d)), ValueError, ["roofkit.layer_norm", "weight", "(3,)"]),
        (lambda d: layer_norm(torch.ones(2, 3, device=d), (3,), None, torch.ones(2, 3, device=d)), ValueError, ["roofkit.layer_norm", "bias", "(3,)"]),
        (lambda d: layer_norm(torch.ones(2, 3, device=d), (3,), torch.ones(3, device=d, dtype=torch.float16)), TypeError, ["roofkit.layer_norm", "weight dtype"]),
        (lambda d: layer_norm(torch.ones(2, 3, device=d), (3,), None, [0.0, 0.0, 0.0]), TypeError, ["roofkit.layer_norm", "bias"]),
        (lambda d: layer_norm(torch.ones(2, 3, device=d), (3,), None, None, -1.0), ValueError, ["roofkit.layer_norm", "eps"]),
        (lambda d: layer_norm(torch.ones(2, 3, device=d), (3,), None, None, float("nan")), ValueError, ["roofkit.layer_norm", "eps"]),
        (lambda d: layer_norm(torch.ones(2, 3, device=d), (3,), None, None, "x"), TypeError, ["roofkit.layer_norm", "eps"]),
        (lambda d: layer_norm(torch.ones(2, 3, device=d).to_sparse(), (3,)), TypeError, ["roofkit.layer_norm", "dense"]),
        (lambda d: layer_norm(torch.ones(2, 3, device=d), (3,), torch.ones(3, device="meta")), ValueError, ["roofkit.layer_norm", "weight", "meta"]),
    ],
)
def test_layer_norm_bad_input_raises_clear_error(call, exc, words, device, raises_naming):
    raises_naming(exc, words, call, device)


def test_layer_norm_compiles_fullgraph_with_backward(device):
    def fn(x, w, b):
        return layer_norm(x + 1.0, (3, 16), w, b).square().sum()

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    x = _x((5, 3, 16), device).requires_grad_(True)
    w = _x((3, 16), device, seed=6).requires_grad_(True)
    b = _x((3, 16), device, seed=7).requires_grad_(True)
    got = torch.autograd.grad(compiled(x, w, b), (x, w, b))
    x2, w2, b2 = (t.detach().clone().requires_grad_(True) for t in (x, w, b))
    ref = torch.autograd.grad(F.layer_norm(x2 + 1.0, (3, 16), w2, b2).square().sum(), (x2, w2, b2))
    for a, r in zip(got, ref):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-4)


def test_layer_norm_cost_counts_five_passes_for_fwd_bwd():
    c = case("t", shape=(2, 3, 8))
    assert ln_module.layer_norm_cost(c, torch.bfloat16).bytes == (2 * 48 + 2 * 8) * 2
    assert ln_module.layer_norm_cost(c, torch.bfloat16).flops == 7 * 48
    fb = case("t", shape=(2, 3, 8), mode="fwd_bwd")
    # x, y forward; x, dy, dx backward; weight and bias read, dweight and dbias written.
    assert ln_module.layer_norm_cost(fb, torch.bfloat16).bytes == (5 * 48 + 5 * 8) * 2
    two = case("t", shape=(4, 3, 8), norm_dims=2, weight=False, bias=False)
    assert ln_module.layer_norm_cost(two, torch.float32).bytes == 2 * 96 * 4


def test_layer_norm_launch_heuristic_paths():
    assert ln_module._fwd_config(4096) == ln_module.Config(True, 1, 4096, 4)
    assert ln_module._fwd_config(1).BLOCK_M == 2048
    assert not ln_module._fwd_config(65536).one_pass
    assert ln_module._bwd_config(8192).one_pass and not ln_module._bwd_config(8193).one_pass
