"""linear_cross_entropy: several chunks against the unfused float64 sequence (outputs and the
gradients of input, linear_weight and linear_bias), every reduction, bad input, torch.compile.
(Every registry case runs against the float64 reference in tests/test_ops_generic.py.)"""

import sys

import pytest
import torch
import torch.nn.functional as F

import roofkit
import roofkit.ops  # noqa: F401 (defines the kernels)

pytestmark = pytest.mark.cross_entropy
lce = sys.modules["roofkit.ops.linear_cross_entropy"]


def _inputs(device, n=11, h=16, v=23, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, h, generator=g).to(device, dtype)
    w = (torch.randn(v, h, generator=g) / 4).to(device, dtype)
    b = torch.randn(v, generator=g).to(device, dtype)
    t = torch.randint(0, v, (n,), generator=g).to(device)
    t[::4] = -100
    cw = (0.5 + torch.rand(v, generator=g)).to(device, dtype)
    return x, w, b, t, cw


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_chunks_match_the_unfused_float64_sequence_with_every_gradient(reduction, device, tunables):
    tunables("linear_cross_entropy", MIN_CHUNK_ROWS=4, CHUNKS=3)  # 11 tokens: chunks of 4, 4 and 3
    x, w, b, t, cw = _inputs(device)
    x, w, b = (a.requires_grad_() for a in (x, w, b))
    kw = dict(weight=cw, reduction=reduction, label_smoothing=0.1)
    loss = roofkit.linear_cross_entropy(x, w, t, linear_bias=b, **kw)
    g = torch.rand(loss.shape, generator=torch.Generator().manual_seed(3)).to(device) + 0.5
    grads = torch.autograd.grad(loss, [x, w, b], g)
    x64, w64, b64 = (a.detach().double().requires_grad_() for a in (x, w, b))
    ref = F.cross_entropy(F.linear(x64, w64, b64), t, weight=cw.double(), reduction=reduction, label_smoothing=0.1)
    want = torch.autograd.grad(ref, [x64, w64, b64], g.double())
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss.double(), ref, rtol=1e-5, atol=1e-6)
    for a, e in zip(grads, want):
        torch.testing.assert_close(a.double(), e, rtol=1e-4, atol=1e-6)


def test_leading_dims_and_ignore_index_none(device):
    x, w, _, t, _ = _inputs(device, n=12)
    t = t.clamp(min=0)
    got = roofkit.linear_cross_entropy(x.view(3, 4, -1), w, t.view(3, 4), ignore_index=None, reduction="none")
    want = F.cross_entropy(F.linear(x, w), t, reduction="none").view(3, 4)
    assert got.shape == (3, 4)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_all_ignored_mean_is_nan_with_zero_gradients(device):
    x, w, _, t, _ = _inputs(device, n=5)
    x.requires_grad_()
    loss = roofkit.linear_cross_entropy(x, w, torch.full_like(t[:5], -100))
    (gx,) = torch.autograd.grad(loss, x)
    assert torch.isnan(loss) and torch.equal(gx, torch.zeros_like(gx))


def test_bad_input_names_the_op_and_argument(device):
    x, w, b, t, cw = _inputs(device)
    op = r"roofkit\.linear_cross_entropy"
    with pytest.raises(ValueError, match=op + r": input \(\.\.\., H\) and linear_weight \(V, H\) must share H"):
        roofkit.linear_cross_entropy(x, w[:, :5], t)
    with pytest.raises(TypeError, match=op + r": linear_weight dtype"):
        roofkit.linear_cross_entropy(x, w.half(), t)
    with pytest.raises(TypeError, match=op + r": target must be an int64 tensor"):
        roofkit.linear_cross_entropy(x, w, t.int())
    with pytest.raises(ValueError, match=op + r": target must have input's leading shape"):
        roofkit.linear_cross_entropy(x, w, t[:3])
    with pytest.raises(ValueError, match=op + r": linear_bias must be"):
        roofkit.linear_cross_entropy(x, w, t, linear_bias=b[:3])
    with pytest.raises(ValueError, match=op + r": reduction must be"):
        roofkit.linear_cross_entropy(x, w, t, reduction="avg")
    with pytest.raises(ValueError, match=op + r": label_smoothing must be"):
        roofkit.linear_cross_entropy(x, w, t, label_smoothing=1.5)


def test_compiles_fullgraph_with_backward(device):
    x, w, b, t, _ = _inputs(device)
    x, w = x.requires_grad_(), w.requires_grad_()
    fn = torch.compile(lambda x, w: roofkit.linear_cross_entropy(x * 2, w, t), fullgraph=True, backend="aot_eager")
    loss = fn(x, w)
    gx, gw = torch.autograd.grad(loss, [x, w])
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    ref = F.cross_entropy(F.linear(x2 * 2, w2), t)
    gx2, gw2 = torch.autograd.grad(ref, [x2, w2])
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gx, gx2, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(gw, gw2, rtol=1e-4, atol=1e-6)


def test_class_weight_any_layout_and_sign(device, tunables):
    tunables("linear_cross_entropy", MIN_CHUNK_ROWS=4, CHUNKS=3)
    x, w, _, t, _ = _inputs(device)
    x.requires_grad_()
    for cw in (torch.rand(2 * w.shape[0]).to(device)[::2],  # strided
               torch.full((1,), 2.0, device=device).expand(w.shape[0]),  # zero stride
               -torch.rand(w.shape[0]).to(device)):  # negative: the mean divides by a negative sum
        loss = roofkit.linear_cross_entropy(x, w, t, weight=cw)
        (gx,) = torch.autograd.grad(loss, x)
        x64 = x.detach().double().requires_grad_()
        ref = F.cross_entropy(F.linear(x64, w.double()), t, weight=cw.double())
        (gref,) = torch.autograd.grad(ref, x64)
        torch.testing.assert_close(loss.double(), ref, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(gx.double(), gref, rtol=1e-4, atol=1e-6)
    with pytest.raises(RuntimeError, match=r"roofkit\.linear_cross_entropy: the class weight is not differentiable"):
        roofkit.linear_cross_entropy(x, w, t, weight=torch.rand(w.shape[0], device=device, requires_grad=True))


def test_out_of_range_target_is_reported_by_this_op_at_its_position(device, tunables):
    if device.type != "cpu":
        pytest.skip("on a GPU the targets are not read back (ROOFKIT_CE_CHECK_TARGETS=1 checks them)")
    tunables("linear_cross_entropy", MIN_CHUNK_ROWS=3, CHUNKS=3)
    x, w, _, t, _ = _inputs(device, n=9)
    t = t.clamp(min=0)
    t[7] = 99
    with pytest.raises(IndexError, match=r"roofkit\.linear_cross_entropy: .* position 7: 99"):
        roofkit.linear_cross_entropy(x, w, t)


def test_zero_hidden_size(device):
    x, w, b, t, _ = _inputs(device, n=4)
    t = t.clamp(min=0)
    got = roofkit.linear_cross_entropy(x[:, :0], w[:, :0], t, linear_bias=b)
    torch.testing.assert_close(got, F.cross_entropy(b.expand(4, -1), t), rtol=1e-5, atol=1e-6)


def test_frozen_weight_and_a_second_backward(device, tunables):
    """A frozen output layer (LoRA) gets no weight gradient and costs none; the gradients are
    made in the forward and scaled in place, so a second backward of one forward is refused."""
    tunables("linear_cross_entropy", MIN_CHUNK_ROWS=4, CHUNKS=3)
    x, w, b, t, _ = _inputs(device)
    x.requires_grad_()
    loss = roofkit.linear_cross_entropy(x, w, t, linear_bias=b)
    loss.backward(torch.tensor(0.5, device=device), retain_graph=True)
    x64 = x.detach().double().requires_grad_()
    want, = torch.autograd.grad(F.cross_entropy(F.linear(x64, w.double(), b.double()), t) * 0.5, [x64])
    torch.testing.assert_close(x.grad.double(), want, rtol=1e-4, atol=1e-6)
    assert w.grad is None
    with pytest.raises(RuntimeError, match="linear_cross_entropy.*once per forward"):
        loss.backward()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_chunks_accumulate_the_weight_gradient_in_its_dtype(dtype, device, tunables):
    """Several chunks in a 16-bit dtype: the weight gradient accumulated in place in bf16 / fp16
    (one rounding per chunk), the input gradient written per chunk; within 16-bit rounding."""
    tunables("linear_cross_entropy", MIN_CHUNK_ROWS=4, CHUNKS=3)
    x, w, b, t, cw = _inputs(device, dtype=dtype)
    x, w, b = (a.requires_grad_() for a in (x, w, b))
    loss = roofkit.linear_cross_entropy(x, w, t, linear_bias=b, weight=cw, label_smoothing=0.1)
    grads = torch.autograd.grad(loss, [x, w, b], torch.tensor(0.5, device=device))
    x64, w64, b64 = (a.detach().double().requires_grad_() for a in (x, w, b))
    ref = F.cross_entropy(F.linear(x64, w64, b64), t, weight=cw.double(), label_smoothing=0.1)
    want = torch.autograd.grad(ref * 0.5, [x64, w64, b64])
    torch.testing.assert_close(loss.double(), ref, rtol=1e-2, atol=1e-3)
    for a, e in zip(grads, want):
        assert a.dtype == dtype
        torch.testing.assert_close(a.double(), e, rtol=3e-2, atol=3e-3)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_compiles_without_gradients_and_with_the_input_gradient_only(reduction, device):
    """The custom op's unused gradient outputs are distinct tensors (a custom op's outputs may not
    alias), and the backward makes only the gradients asked for."""
    x, w, b, t, _ = _inputs(device)
    fn = torch.compile(lambda x: roofkit.linear_cross_entropy(x, w, t, linear_bias=b, reduction=reduction),
                       fullgraph=True, backend="aot_eager")
    want = F.cross_entropy(F.linear(x, w, b), t, reduction=reduction)
    with torch.no_grad():
        torch.testing.assert_close(fn(x), want, rtol=1e-5, atol=1e-6)
    xg = x.clone().requires_grad_()
    gx, = torch.autograd.grad(fn(xg).sum(), [xg])
    x64 = x.double().requires_grad_()
    ref, = torch.autograd.grad(F.cross_entropy(F.linear(x64, w.double(), b.double()), t, reduction=reduction).sum(), [x64])
    torch.testing.assert_close(gx.double(), ref, rtol=1e-4, atol=1e-6)
