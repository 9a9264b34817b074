"""swiglu and geglu: bad input, the torch expression's NaN / inf behaviour, torch.compile, the
backward's saved tensors, and the harness rejecting wrong implementations. (Every registry case
runs against the float64 reference in tests/test_ops_generic.py.)"""

import math
import sys

import pytest
import torch
import torch.nn.functional as F

import roofkit
from roofkit.harness.verify import verify_op

pytestmark = pytest.mark.glu
import roofkit.ops  # noqa: E402,F401 (defines the kernels)

glu = sys.modules["roofkit.ops.glu"]


def _pair(shape, device, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 3).to(device, dtype), torch.randn(shape, generator=g).to(device, dtype)


@pytest.mark.parametrize("op", ["swiglu", "geglu"])
def test_bad_input_names_the_op_and_argument(op, device):
    fn = getattr(roofkit, op)
    gate, up = _pair((4, 8), device)
    with pytest.raises(ValueError, match=rf"roofkit\.{op}: gate and up must have the same shape"):
        fn(gate, up[:, :4])
    with pytest.raises(ValueError, match="no broadcasting"):
        fn(gate, up[:1])
    with pytest.raises(TypeError, match=rf"roofkit\.{op}: up dtype"):
        fn(gate, up.half())
    with pytest.raises(TypeError, match=rf"roofkit\.{op}: gate must have dtype"):
        fn(gate.long(), up)
    with pytest.raises(TypeError, match=rf"roofkit\.{op}: up must be a torch.Tensor"):
        fn(gate, 1.0)
    if op == "geglu":
        with pytest.raises(ValueError, match=r"roofkit\.geglu: approximate must be 'none' or 'tanh'"):
            fn(gate, up, approximate="fast")


def test_empty_inputs_give_empty_results(device):
    gate, up = _pair((0, 5), device)
    assert roofkit.swiglu(gate, up).shape == (0, 5)
    assert roofkit.geglu(gate, up, "tanh").shape == (0, 5)


def test_non_finite_values_behave_as_the_torch_expression(device):
    specials = torch.tensor([-math.inf, math.inf, math.nan, -100.0, 100.0, 0.0, -0.0, 3.0])
    gate = specials.repeat_interleave(len(specials)).to(device)
    up = specials.repeat(len(specials)).to(device)
    # The torch expression in float32 (where silu(-100) underflows, so silu(-100) * inf is NaN
    # there, as here; float64 would give -inf), and the float64 reference for the values.
    exact = F.gelu(gate)
    exact = torch.where(gate == math.inf, gate, exact)  # +inf, as CUDA torch (CPU torch: NaN)
    for got, same_dtype, want in [
        (roofkit.swiglu(gate, up), F.silu(gate) * up, F.silu(gate.double()) * up.double()),
        (roofkit.geglu(gate, up, "tanh"), F.gelu(gate, approximate="tanh") * up,
         F.gelu(gate.double(), approximate="tanh") * up.double()),
        (roofkit.geglu(gate, up), exact * up, glu.geglu_reference(gate, up)),
    ]:
        assert torch.equal(torch.isnan(got), torch.isnan(same_dtype))
        finite = ~torch.isnan(want) & ~torch.isnan(got)
        torch.testing.assert_close(got[finite].double(), want[finite], rtol=1e-5, atol=1e-30)


@pytest.mark.parametrize("op,ref", [("swiglu", lambda g, u: F.silu(g) * u),
                                    ("geglu", lambda g, u: F.gelu(g, approximate="tanh") * u)])
def test_compiles_fullgraph_with_backward(op, ref, device):
    fn = getattr(roofkit, op)
    kwargs = {"approximate": "tanh"} if op == "geglu" else {}
    compiled = torch.compile(lambda g, u: fn(g * 1.5, u, **kwargs).sum(0), fullgraph=True, backend="aot_eager")
    g, u = (t.requires_grad_() for t in _pair((5, 40), device))
    out = compiled(g, u)
    grads = torch.autograd.grad(out, (g, u), torch.ones_like(out))
    g2, u2 = (t.detach().clone().requires_grad_() for t in (g, u))
    out2 = ref(g2 * 1.5, u2).sum(0)
    grads2 = torch.autograd.grad(out2, (g2, u2), torch.ones_like(out2))
    torch.testing.assert_close(out, out2, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads, grads2):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_backward_keeps_only_the_inputs(device):
    # Recompute in the backward: the graph holds gate and up, nothing of the forward's making.
    gate, up = (t.requires_grad_() for t in _pair((6, 10), device))
    y = roofkit.swiglu(gate, up)
    saved = y.grad_fn.saved_tensors
    assert len(saved) == 2 and {t.data_ptr() for t in saved} == {gate.data_ptr(), up.data_ptr()}


@pytest.mark.parametrize("wrong", [
    lambda g, u: g * u,                                    # no activation
    lambda g, u: F.silu(g) * u + 1e-2 * u,                 # a small bias
    lambda g, u: F.silu(u) * g,                            # operands swapped
    lambda g, u: (F.silu(g.detach()) * u),                 # no gradient through gate
])
def test_harness_rejects_wrong_swiglu(wrong, device):
    report = verify_op("swiglu", impl=wrong, cases=["odd_3x7", "leading_dims_2x3x50"], seeds=1,
                       dtypes=(torch.float32,), device=device)
    assert not report.passed


def test_harness_rejects_exact_gelu_for_tanh(device):
    wrong = lambda g, u, approximate="none": F.gelu(g) * u  # noqa: E731 (ignores approximate)
    report = verify_op("geglu", impl=wrong, cases=["tanh_large_magnitude_8x300"], seeds=1,
                       dtypes=(torch.float32,), device=device)
    assert not report.passed


def test_cost_counts_reads_and_writes():
    from roofkit.harness.spec import case

    assert glu.glu_cost(case("t", shape=(4, 8)), torch.bfloat16).bytes == 3 * 32 * 2
    assert glu.glu_cost(case("t", shape=(4, 8), mode="fwd_bwd"), torch.float32).bytes == 8 * 32 * 4


def test_tanh_gelu_keeps_its_accuracy_where_tanh_is_near_minus_one(device):
    # 0.5 * (1 + tanh(u)) cancels for negative gates; sigmoid(2u) does not.
    gate = torch.linspace(-6, 0, 601).to(device)
    up = torch.ones_like(gate)
    g64 = gate.double().requires_grad_()
    want = F.gelu(g64, approximate="tanh")
    (dwant,) = torch.autograd.grad(want.sum(), g64)
    g = gate.clone().requires_grad_()
    got = roofkit.geglu(g, up, "tanh")
    (dgot,) = torch.autograd.grad(got.sum(), g)
    torch.testing.assert_close(got.double(), want, rtol=2e-6, atol=1e-12)
    torch.testing.assert_close(dgot.double(), dwant, rtol=2e-5, atol=2e-7)  # (d gate crosses 0 near -0.75)


_ACTS = {"silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda g: F.gelu(g, approximate="tanh")}


@pytest.mark.parametrize("activation", list(_ACTS))
@pytest.mark.parametrize("bias", [False, True])
def test_glu_linear_matches_float64_and_saves_no_product(activation, bias, device):
    glu_linear = glu.glu_linear
    g = torch.Generator().manual_seed(len(activation) + bias)
    gate = (torch.randn(3, 5, 40, generator=g) * 3).to(device).requires_grad_()
    up = torch.randn(3, 5, 40, generator=g).to(device).requires_grad_()
    w = (torch.randn(24, 40, generator=g) / 6).to(device).requires_grad_()
    b = torch.randn(24, generator=g).to(device).requires_grad_() if bias else None
    leaves = [t for t in (gate, up, w, b) if t is not None]
    y = glu_linear(gate, up, w, b, activation=activation)
    saved = {t.data_ptr() for t in y.grad_fn.saved_tensors}
    assert saved == {gate.data_ptr(), up.data_ptr(), w.data_ptr()}  # the product is not kept
    dy = torch.randn(y.shape, generator=g).to(device)
    grads = torch.autograd.grad(y, leaves, dy)
    ref = [t.detach().double().requires_grad_() for t in leaves]
    bref = ref[3] if bias else None
    want = F.linear(_ACTS[activation](ref[0]) * ref[1], ref[2], bref)
    want_grads = torch.autograd.grad(want, ref, dy.double())
    torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-5)
    for got, exp in zip(grads, want_grads):
        torch.testing.assert_close(got.double(), exp, rtol=1e-4, atol=1e-5)
    # the weight's gradient comes from the same product the forward projected (made again)
    kind = {"silu": "swiglu", "gelu": "geglu", "gelu_tanh": "geglu"}[activation]
    kw = {} if kind == "swiglu" else {"approximate": "tanh" if activation == "gelu_tanh" else "none"}
    h = getattr(roofkit, kind)(gate.detach(), up.detach(), **kw).reshape(-1, 40)
    assert torch.equal(grads[2], dy.reshape(-1, 24).t() @ h)


def test_glu_linear_frozen_weight_and_bad_input(device):
    glu_linear = glu.glu_linear
    gate, up = (t.requires_grad_() for t in _pair((4, 8), device))
    w = torch.randn(3, 8, device=device)  # frozen: no weight gradient GEMM
    (dg, du) = torch.autograd.grad(glu_linear(gate, up, w).sum(), (gate, up))
    g2, u2 = (t.detach().clone().requires_grad_() for t in (gate, up))
    torch.testing.assert_close((dg, du), torch.autograd.grad(F.linear(F.silu(g2) * u2, w).sum(), (g2, u2)))
    with pytest.raises(ValueError, match=r"roofkit\.glu_linear: weight must be \(out_features, in_features\)"):
        glu_linear(gate, up, torch.randn(3, 7, device=device))
    with pytest.raises(TypeError, match=r"roofkit\.glu_linear: weight"):
        glu_linear(gate, up, w.double())
    with pytest.raises(ValueError, match=r"roofkit\.glu_linear: bias must be \(3,\)"):
        glu_linear(gate, up, w, torch.zeros(4, device=device))
    with pytest.raises(ValueError, match=r"roofkit\.glu_linear: activation must be one of"):
        glu_linear(gate, up, w, activation="relu")
    assert glu_linear(gate[:0], up[:0], w).shape == (0, 3)


def test_glu_linear_compiles_fullgraph_with_backward(device):
    gate, up = (t.requires_grad_() for t in _pair((5, 16), device))
    w = torch.randn(6, 16, device=device).requires_grad_()
    fn = torch.compile(lambda g, u, w: glu.glu_linear(g * 1.5, u, w), fullgraph=True, backend="aot_eager")
    out = fn(gate, up, w)
    grads = torch.autograd.grad(out.sum(), (gate, up, w))
    ref = [t.detach().clone().requires_grad_() for t in (gate, up, w)]
    out2 = F.linear(F.silu(ref[0] * 1.5) * ref[1], ref[2])
    torch.testing.assert_close(out, out2, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads, torch.autograd.grad(out2.sum(), ref)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_glu_linear_zero_features_and_autocast(device):
    # in_features or out_features 0 (torch's expression takes them), and autocast: the unfused
    # form, whose projection autocast casts (a backward outside autocast then works)
    g = torch.Generator().manual_seed(5)
    for inter, out in ((0, 4), (8, 0)):
        gate, up = (torch.randn(3, inter, generator=g).to(device).requires_grad_() for _ in range(2))
        w = torch.randn(out, inter, generator=g).to(device).requires_grad_()
        y = glu.glu_linear(gate, up, w)
        assert y.shape == (3, out)
        dg, du, dw = torch.autograd.grad(y, (gate, up, w), torch.ones_like(y), allow_unused=True)
        assert dw.shape == w.shape and not dw.any() and dg.shape == gate.shape
    gate, up = (t.requires_grad_() for t in _pair((4, 8), device))
    w = torch.randn(3, 8, device=device, requires_grad=True)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        y = glu.glu_linear(gate, up, w)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert w.grad.dtype == torch.float32 and gate.grad is not None
