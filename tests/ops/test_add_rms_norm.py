"""add_rms_norm: both outputs' gradients (the harness backpropagates through the first output
only), bad input, torch.compile. (Every registry case runs against the float64 reference in
tests/test_ops_generic.py.)"""

import sys

import pytest
import torch
import torch.nn.functional as F

import roofkit
import roofkit.ops  # noqa: F401 (defines the kernels)

pytestmark = pytest.mark.rms_norm
rms = sys.modules["roofkit.ops.rms_norm"]


def _inputs(shape, device, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, r = (torch.randn(shape, generator=g).to(device, dtype) for _ in range(2))
    w = (1 + 0.5 * torch.randn(shape[-1:], generator=g)).to(device, dtype)
    return x, r, w


@pytest.mark.parametrize("shape,loop", [((5, 96), False), ((2, 40), True)])
def test_gradients_of_both_outputs_match_float64(shape, loop, device, tunables):
    if loop:  # the long-row path, on a short row
        tunables("add_rms_norm", ONE_PASS_MAX_N=16, LOOP_BLOCK_N=16)
    x, r, w = (t.requires_grad_() for t in _inputs(shape, device))
    g = torch.Generator().manual_seed(1)
    dy, dr = (torch.randn(shape, generator=g).to(device) for _ in range(2))
    y, rout = roofkit.add_rms_norm(x, r, shape[-1:], w, 1e-5)
    grads = torch.autograd.grad([y, rout], [x, r, w], [dy, dr], retain_graph=True)
    x64, r64, w64 = (t.detach().double().requires_grad_() for t in (x, r, w))
    s64 = x64 + r64
    y64 = F.rms_norm(s64, shape[-1:], w64, 1e-5)
    want = torch.autograd.grad([y64, s64], [x64, r64, w64], [dy.double(), dr.double()])
    torch.testing.assert_close(y.double(), y64, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rout.double(), s64, rtol=1e-6, atol=1e-6)
    for a, b in zip(grads, want):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-4)
    # only the residual stream's gradient, the norm's output unused
    gx_only = torch.autograd.grad(rout, x, dr, retain_graph=True)[0]
    torch.testing.assert_close(gx_only, dr)


def test_residual_out_is_the_rounded_sum_the_norm_sees(device):
    x, r, w = _inputs((4, 64), device, torch.bfloat16)
    y, rout = roofkit.add_rms_norm(x, r, (64,), w)
    assert torch.equal(rout, x + r)  # the model's bf16 residual stream, bit for bit
    torch.testing.assert_close(y, F.rms_norm(x + r, (64,), w), rtol=2e-2, atol=2e-2)


def test_bad_input_names_the_op(device):
    x, r, w = _inputs((4, 8), device)
    with pytest.raises(ValueError, match=r"roofkit\.add_rms_norm: residual must have input's shape"):
        roofkit.add_rms_norm(x, r[:, :4], (8,), w)
    with pytest.raises(TypeError, match=r"roofkit\.add_rms_norm: residual dtype"):
        roofkit.add_rms_norm(x, r.half(), (8,), w)
    with pytest.raises(TypeError, match=r"roofkit\.add_rms_norm: residual must be a torch.Tensor"):
        roofkit.add_rms_norm(x, 1.0, (8,), w)
    with pytest.raises(ValueError, match=r"roofkit\.add_rms_norm: normalized_shape must be the last dimension"):
        roofkit.add_rms_norm(x, r, (4,), w[:4])
    with pytest.raises(ValueError, match=r"roofkit\.add_rms_norm: eps must be >= 0"):
        roofkit.add_rms_norm(x, r, (8,), w, -1.0)


def test_compiles_fullgraph_with_backward(device):
    x, r, w = (t.requires_grad_() for t in _inputs((5, 40), device))
    fn = torch.compile(lambda x, r, w: [t.sum(0) for t in roofkit.add_rms_norm(x * 2, r, (40,), w)],
                       fullgraph=True, backend="aot_eager")
    y, rout = fn(x, r, w)
    grads = torch.autograd.grad([y, rout], [x, r, w], [torch.ones_like(y), torch.ones_like(rout)])
    x2, r2, w2 = (t.detach().clone().requires_grad_() for t in (x, r, w))
    s = x2 * 2 + r2
    y2, rout2 = F.rms_norm(s, (40,), w2).sum(0), s.sum(0)
    want = torch.autograd.grad([y2, rout2], [x2, r2, w2], [torch.ones_like(y2), torch.ones_like(rout2)])
    torch.testing.assert_close(y, y2, rtol=1e-4, atol=1e-5)
    for a, b in zip(grads, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def _bits_equal(got, want) -> None:
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(got[0], torch.zeros_like(got[0]))


@pytest.mark.parametrize("variant", ["streaming", "prefetch"])
@pytest.mark.parametrize("residual,weight,block_m", [(True, True, 2), (False, True, 1), (True, False, 1)])
def test_forward_variants_give_the_default_bits(variant, residual, weight, block_m, device):
    # streaming: evict-first loads and .cs stores change where data is cached, never the
    # arithmetic. prefetch: on a persistent grid whose programs walk several row blocks, the next
    # one is loaded before this one's arithmetic. y, 1/rms and the residual sum equal the default
    # configuration's bitwise (rows not a multiple of the tile).
    m, n = 11, 96
    x, r, w = _inputs((m, n), device, torch.bfloat16, seed=9)
    w = w if weight else None
    res = r if residual else None
    cfg = rms.Config(True, block_m, 128, 4, 1)
    assert not (cfg.streaming or cfg.prefetch) and rms._fwd_config(n, residual)[-2:] == (False, False)
    want = rms._rms_norm_forward(x, w, 1e-6, cfg, residual=res)
    got = rms._rms_norm_forward(x, w, 1e-6, cfg._replace(**{variant: True}), residual=res)
    assert len(got) == len(want) == (3 if residual else 2)
    _bits_equal(got, want)


@pytest.mark.parametrize("residual,weight,block_m", [(True, True, 2), (False, True, 1), (True, False, 2)])
def test_prefetching_backward_configuration_gives_the_default_bits(residual, weight, block_m, device):
    # The prefetching backward loads the next step's rows before this step's arithmetic: the same
    # operations in the same order, so dx and the weight's gradient equal the default's bitwise
    # (rows not a multiple of the tile, programs with a partial last step).
    m, n = 13, 96
    x, r, w = _inputs((m, n), device, torch.bfloat16, seed=7)
    g = torch.Generator().manual_seed(8)
    dy, dres = (torch.randn((m, n), generator=g).to(device, torch.bfloat16) for _ in range(2))
    w = w if weight else None
    _, rstd, rout = rms._rms_norm_forward(x, w, 1e-6, None, residual=r)
    cfg = rms.Config(True, block_m, 128, 4, 1, 1)
    dres = dres if residual else None
    want = rms._rms_norm_backward(dy, rout, w, rstd, cfg, dres=dres)
    got = rms._rms_norm_backward(dy, rout, w, rstd, cfg._replace(prefetch=True), dres=dres)
    _bits_equal(got, want)
