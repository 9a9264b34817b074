"""roofkit.nn: each module against its torch / transformers counterpart (outputs and gradients),
state dicts loading both ways (strict), and the errors of bad arguments."""

import pytest
import torch
import torch.nn.functional as F

import roofkit
import roofkit.nn as rnn

pytestmark = pytest.mark.nn


def _same_grads(ours, theirs, x, rtol=1e-5, atol=1e-5):
    """Outputs and the gradients of x and of every parameter agree, for a random output gradient."""
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = ours(xa), theirs(xb)
    torch.testing.assert_close(ya, yb, rtol=rtol, atol=atol)
    dy = torch.randn(ya.shape, generator=torch.Generator().manual_seed(5)).to(ya)
    ga = torch.autograd.grad(ya, [xa, *ours.parameters()], dy)
    gb = torch.autograd.grad(yb, [xb, *theirs.parameters()], dy)
    for a, b in zip(ga, gb):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol)


def _loaded(ours, theirs):
    """``ours`` with ``theirs``'s state dict (strict), and the reverse load also strict."""
    ours.load_state_dict(theirs.state_dict(), strict=True)
    theirs.load_state_dict(ours.state_dict(), strict=True)
    return ours


def test_norms_match_torch_and_share_state_dicts(device):
    x = torch.randn(3, 5, 48, generator=torch.Generator().manual_seed(0)).to(device)
    for ours, theirs in [(rnn.RMSNorm(48, eps=1e-5), torch.nn.RMSNorm(48, eps=1e-5)),
                         (rnn.LayerNorm(48), torch.nn.LayerNorm(48)),
                         (rnn.LayerNorm(48, bias=False), torch.nn.LayerNorm(48, bias=False))]:
        torch.nn.init.normal_(theirs.weight)
        if getattr(theirs, "bias", None) is not None:
            torch.nn.init.normal_(theirs.bias)
        _same_grads(_loaded(ours.to(device), theirs.to(device)), theirs, x)


@pytest.mark.parametrize("activation", [None, "silu", "gelu_tanh"])
def test_linear_with_its_activation_matches_torch(activation, device):
    g = torch.Generator().manual_seed(1)
    theirs = torch.nn.Linear(24, 16).to(device)
    ours = _loaded(rnn.Linear(24, 16, activation=activation).to(device), theirs)
    act = {None: lambda y: y, "silu": F.silu, "gelu_tanh": lambda y: F.gelu(y, approximate="tanh")}[activation]
    ref = torch.nn.Sequential(theirs)
    ref.forward = lambda x: act(theirs(x))
    _same_grads(ours, ref, torch.randn(7, 24, generator=g).to(device), rtol=1e-4, atol=1e-4)
    assert ("activation" in repr(ours)) == (activation is not None)
    with pytest.raises(ValueError, match="roofkit.nn.Linear: activation"):
        rnn.Linear(4, 4, activation="tanh")


def test_losses_match_torch(device):
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(9, 13, generator=g).to(device)
    target = torch.randint(0, 13, (9,), generator=g).to(device)
    target[::3] = -100
    cw = (0.5 + torch.rand(13, generator=g)).to(device)
    ours = rnn.CrossEntropyLoss(weight=cw, label_smoothing=0.1)
    theirs = torch.nn.CrossEntropyLoss(weight=cw, label_smoothing=0.1)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    torch.testing.assert_close(ours(logits, target), theirs(logits, target), rtol=1e-5, atol=1e-6)
    x = torch.randn(9, 8, generator=g).to(device)
    w = torch.randn(13, 8, generator=g).to(device)
    lce = rnn.LinearCrossEntropyLoss(weight=cw, reduction="sum")
    torch.testing.assert_close(lce(x, w, target), F.cross_entropy(x @ w.T, target, weight=cw, reduction="sum"),
                               rtol=1e-5, atol=1e-5)


class _TorchMLP(torch.nn.Module):
    """transformers' LlamaMLP / GemmaMLP, written out."""

    def __init__(self, h, i, act):
        super().__init__()
        self.gate_proj, self.up_proj = torch.nn.Linear(h, i, bias=False), torch.nn.Linear(h, i, bias=False)
        self.down_proj = torch.nn.Linear(i, h, bias=False)
        self.act = act

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


@pytest.mark.parametrize("kind", ["swiglu", "geglu"])
def test_gated_mlps_match_transformers_layout(kind, device):
    theirs = _TorchMLP(16, 40, F.silu if kind == "swiglu" else lambda g: F.gelu(g, approximate="tanh")).to(device)
    ours = (rnn.SwiGLU(16, 40) if kind == "swiglu" else rnn.GeGLU(16, 40)).to(device)
    _same_grads(_loaded(ours, theirs), theirs, torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(3)).to(device),
                rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="roofkit.nn.GeGLU: approximate"):
        rnn.GeGLU(4, 8, approximate="erf")


def _rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def test_rotary_embedding_is_transformers_default_and_rotates_through_rope(device):
    g = torch.Generator().manual_seed(4)
    rot = rnn.RotaryEmbedding(16, base=500000.0).to(device)
    assert "inv_freq" not in rot.state_dict()  # non-persistent, as transformers keeps it
    pos = torch.tensor([[0, 1, 2, 7, 100], [3, 4, 5, 6, 7]], device=device)
    x = torch.randn(2, 5, 16, generator=g).to(device)
    cos, sin = rot(x, pos)
    inv = 1.0 / 500000.0 ** (torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    ang = pos.double().cpu()[..., None] * inv
    ang = torch.cat((ang, ang), -1)
    torch.testing.assert_close(cos.double().cpu(), ang.cos(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sin.double().cpu(), ang.sin(), rtol=1e-5, atol=1e-5)
    q = torch.randn(2, 3, 5, 16, generator=g).to(device)
    k = torch.randn(2, 1, 5, 16, generator=g).to(device)
    oq, ok = rot.rotate(q, k, cos, sin)
    c, s = cos[:, None], sin[:, None]
    torch.testing.assert_close(oq, q * c + _rotate_half(q) * s, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ok, k * c + _rotate_half(k) * s, rtol=1e-5, atol=1e-5)
    calls = []
    torch.nn.Sequential(rot).apply(lambda m: calls.append(type(m).__name__))  # Module.apply untouched
    assert "RotaryEmbedding" in calls
    with pytest.raises(ValueError, match="roofkit.nn.RotaryEmbedding: dim"):
        rnn.RotaryEmbedding(15)


def test_roofkit_nn_is_reachable_from_the_package():
    assert roofkit.nn is rnn


class _Adapter(torch.nn.Linear):
    """A LoRA-like down projection: a Linear subclass with a forward of its own."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.b = torch.nn.Parameter(torch.full((self.out_features,), 0.5))

    def forward(self, x):
        return super().forward(x) + self.b


def test_gated_mlp_keeps_what_its_down_projection_does(device):
    # The fused down projection (product not saved) stands in only for a plain, unhooked
    # nn.Linear: an adapter's forward, the projection's backward hooks and global module hooks
    # run as the module would run them, with and without a gradient.
    torch.manual_seed(0)
    mlp = rnn.SwiGLU(16, 24).to(device)
    x = torch.randn(3, 16, device=device)
    plain = [t.detach().clone() for t in (mlp(x),)][0]
    fired = []
    h1 = mlp.down_proj.register_full_backward_hook(lambda *a: fired.append("bwd"))
    h2 = torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: fired.append(type(m).__name__))
    try:
        mlp(x.requires_grad_()).sum().backward()
    finally:
        h1.remove()
        h2.remove()
    assert fired.count("Linear") == 3 and "bwd" in fired
    adapted = rnn.SwiGLU(16, 24).to(device)
    adapted.load_state_dict(mlp.state_dict())
    adapted.down_proj = _Adapter(24, 16, bias=False).to(device)
    adapted.down_proj.load_state_dict(mlp.down_proj.state_dict(), strict=False)
    y = adapted(x)
    with torch.no_grad():
        torch.testing.assert_close(y, adapted(x))
    torch.testing.assert_close(y, plain + 0.5)
    y.sum().backward()
    assert adapted.down_proj.b.grad is not None


def test_gated_mlp_trains_under_autocast(device):
    mlp = rnn.SwiGLU(16, 24).to(device)
    x = torch.randn(3, 16, device=device, requires_grad=True)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        y = mlp(x)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()  # (the backward outside autocast, as training loops run it)
    assert mlp.down_proj.weight.grad is not None and mlp.down_proj.weight.grad.dtype == torch.float32
