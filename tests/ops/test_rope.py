"""rope: both outputs' gradients (the harness backpropagates through q_embed only), the
(B, S, H, D) form, bad input, torch.compile. (Every registry case runs against the float64
reference in tests/test_ops_generic.py.)"""

import sys

import pytest
import torch

import roofkit
import roofkit.ops  # noqa: F401 (defines the kernels)

pytestmark = pytest.mark.rope
rope_module = sys.modules["roofkit.ops.rope"]


def _inputs(device, b=2, hq=4, hkv=2, s=6, d=8, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, s, hq, d, generator=g).to(device, dtype).transpose(1, 2)  # the model's views
    k = torch.randn(b, s, hkv, d, generator=g).to(device, dtype).transpose(1, 2)
    ang = torch.randn(b, s, d // 2, generator=g).repeat(1, 1, 2)
    return q, k, ang.cos().to(device, dtype), ang.sin().to(device, dtype)


@pytest.mark.parametrize("unsqueeze_dim", [1, 2])
def test_gradients_of_q_and_k_match_float64(unsqueeze_dim, device):
    q, k, cos, sin = _inputs(device)
    if unsqueeze_dim == 2:
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # (B, S, H, D)
    q, k = q.detach().requires_grad_(), k.detach().requires_grad_()
    oq, ok = roofkit.rope(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    g = torch.Generator().manual_seed(1)
    dq, dk = torch.randn(oq.shape, generator=g).to(device), torch.randn(ok.shape, generator=g).to(device)
    grads = torch.autograd.grad([oq, ok], [q, k], [dq, dk])
    q64, k64 = q.detach().double().requires_grad_(), k.detach().double().requires_grad_()
    rq, rk = rope_module.rope_reference(q64, k64, cos.double(), sin.double(), unsqueeze_dim=unsqueeze_dim)
    want = torch.autograd.grad([rq, rk], [q64, k64], [dq.double(), dk.double()])
    torch.testing.assert_close(oq.double(), rq, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ok.double(), rk, rtol=1e-5, atol=1e-5)
    tq, tk = rope_module.rope_torch(q.detach(), k.detach(), cos, sin, unsqueeze_dim=unsqueeze_dim)
    assert oq.shape == q.shape and oq.stride() == tq.stride() and ok.stride() == tk.stride()  # torch's layout
    for a, b in zip(grads, want):
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-5)


def test_matches_transformers_apply_rotary_pos_emb(device):
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    q, k, cos, sin = _inputs(device, dtype=torch.bfloat16)
    want = llama.apply_rotary_pos_emb(q.float(), k.float(), cos.float(), sin.float())
    got = roofkit.rope(q, k, cos, sin)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.float(), b, rtol=2e-2, atol=2e-2)


def test_bad_input_names_the_op_and_argument(device):
    q, k, cos, sin = _inputs(device)
    for bad in (0, 1.0, 2.5, True):
        with pytest.raises(ValueError, match=r"roofkit\.rope: unsqueeze_dim must be the int 1 or 2"):
            roofkit.rope(q, k, cos, sin, unsqueeze_dim=bad)
    with pytest.raises(TypeError, match=r"roofkit\.rope: k dtype"):
        roofkit.rope(q, k.half(), cos, sin)
    with pytest.raises(TypeError, match=r"roofkit\.rope: cos and sin"):
        roofkit.rope(q, k, cos.half(), sin)
    with pytest.raises(ValueError, match=r"roofkit\.rope: k must match q's batch"):
        roofkit.rope(q, k[:, :, :3], cos, sin)
    with pytest.raises(ValueError, match=r"roofkit\.rope: cos must have shape"):
        roofkit.rope(q, k, cos[:, :3], sin)
    with pytest.raises(ValueError, match=r"roofkit\.rope: the head size D must be even"):
        odd = torch.ones(2, 6, 5, device=device)
        roofkit.rope(torch.ones(2, 4, 6, 5, device=device), torch.ones(2, 2, 6, 5, device=device), odd, odd)
    with pytest.raises(ValueError, match=r"roofkit\.rope: q and k must be 4-D"):
        roofkit.rope(q[0], k[0], cos, sin)
    with pytest.raises(ValueError, match=r"roofkit\.rope: cos and sin must not require a gradient"):
        roofkit.rope(q, k, cos.requires_grad_(), sin)


def test_compiles_fullgraph_with_backward(device):
    q, k, cos, sin = _inputs(device)
    q, k = q.detach().requires_grad_(), k.detach().requires_grad_()
    fn = torch.compile(lambda q, k: [t.sum() for t in roofkit.rope(q * 2, k, cos, sin)], fullgraph=True,
                       backend="aot_eager")
    a, b = fn(q, k)
    gq, gk = torch.autograd.grad(a + b, [q, k])
    q2, k2 = q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
    a2, b2 = (t.sum() for t in rope_module.rope_torch(q2 * 2, k2, cos, sin))
    gq2, gk2 = torch.autograd.grad(a2 + b2, [q2, k2])
    torch.testing.assert_close(a + b, a2 + b2, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(gq, gq2)
    torch.testing.assert_close(gk, gk2)


def test_fake_outputs_are_laid_out_as_the_real_ones(device):
    # A compiled graph checks each real output's strides against the fake's (and hands the op the
    # strides it traced with): for q / k as transformers passes them (transposed views) and for
    # a q whose last dimension is strided (copied first), fake and real agree.
    from torch._subclasses.fake_tensor import FakeTensorMode

    g = torch.Generator(device=device).manual_seed(5)
    base_q = torch.randn(2, 6, 4, 8, device=device, generator=g)
    qs = [base_q.transpose(1, 2), base_q.transpose(1, 2).contiguous(), torch.randn(2, 4, 6, 16, device=device)[..., ::2]]
    k = torch.randn(2, 6, 2, 8, device=device, generator=g).transpose(1, 2)
    cos, sin = torch.randn(2, 6, 8, device=device), torch.randn(2, 6, 8, device=device)
    assert torch.Tag.needs_fixed_stride_order in torch.ops.roofkit.rope_fwd.default.tags or \
        getattr(torch.Tag, "needs_exact_strides", None) in torch.ops.roofkit.rope_fwd.default.tags
    for q in qs:
        real = rope_module._rope_fwd(q, k, cos, sin, 1)
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fq, fk, fc, fs = (mode.from_tensor(t) for t in (q, k, cos, sin))
            fake = rope_module._rope_fwd_fake(fq, fk, fc, fs, 1)
            fake_bwd = rope_module._rope_bwd_fake(fq, fk, fc, fs, 1, q.dtype)
        real_bwd = rope_module._rope_bwd(q, k, cos, sin, 1, q.dtype)
        for r, f in zip((*real, *real_bwd), (*fake, *fake_bwd)):
            assert (r.shape, r.stride(), r.dtype) == (f.shape, f.stride(), f.dtype)


def test_streaming_hints_give_the_default_bits_forward_and_backward(device, tunables):
    # STREAMING changes where q / k and the outputs are cached, never the arithmetic.
    q, k, cos, sin = _inputs(device, dtype=torch.bfloat16, seed=4)
    q, k = q.detach().requires_grad_(), k.detach().requires_grad_()
    g = torch.Generator().manual_seed(5)

    def run():
        oq, ok = roofkit.rope(q, k, cos, sin)
        dq, dk = (torch.randn(t.shape, generator=g).to(device, t.dtype) for t in (oq, ok))
        return (oq, ok, *torch.autograd.grad([oq, ok], [q, k], [dq, dk]))

    want = run()
    g.manual_seed(5)
    tunables("rope", STREAMING=True)
    got = run()
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    assert not torch.equal(got[0], torch.zeros_like(got[0]))
