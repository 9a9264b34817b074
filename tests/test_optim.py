"""roofkit.optim.AdamW: torch's AdamW step for step (float32), the fused arithmetic with one
rounding per stored value (16-bit), torch's own step for what the kernel does not cover, and
state dicts that move between the two optimizers."""

import copy

import pytest
import torch

import roofkit


def _params(device, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(37, 5), (130,), (3, 4, 2049), (0, 3)]  # odd sizes, a block tail, an empty one
    return [torch.nn.Parameter((torch.randn(s, generator=g) + 0.5).to(device, dtype)) for s in shapes]


def _grads(params, seed):
    g = torch.Generator().manual_seed(1000 + seed)
    return [(torch.randn(p.shape, generator=g) * (1 + i)).to(p.device, p.dtype) for i, p in enumerate(params)]


def _run(opt, params, steps, seed=0):
    for s in range(steps):
        for p, g in zip(params, _grads(params, seed + s)):
            p.grad = g.clone()
        opt.step()


@pytest.mark.parametrize("kw", [dict(), dict(weight_decay=0.1, maximize=True), dict(betas=(0.8, 0.95), eps=1e-6),
                                dict(weight_decay=0.0, lr=torch.tensor(3e-3))])
@pytest.mark.parametrize("seed", [0, 1])
def test_float32_steps_match_torch(kw, seed, device):
    ours, theirs = _params(device, seed=seed), _params(device, seed=seed)
    kw = {"lr": 1e-2, **kw}
    _run(roofkit.optim.AdamW(ours, **kw), ours, 6, seed)
    _run(torch.optim.AdamW(theirs, foreach=False, **kw), theirs, 6, seed)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=2e-6, atol=2e-6)


def _reference(p, m, v, g, step, lr, b1, b2, eps, wd, dtype):
    """The fused AdamW arithmetic in float64, each stored value rounded to ``dtype``."""
    p, m, v, g = (t.double() for t in (p, m, v, g))
    p = p - lr * wd * p
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    p = p - (lr / (1 - b1 ** step)) * m / (v.sqrt() / (1 - b2 ** step) ** 0.5 + eps)
    return p.to(dtype), m.to(dtype), v.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_parameters_round_each_stored_value_once(dtype, device):
    params = _params(device, dtype, seed=3)
    opt = roofkit.optim.AdamW(params, lr=3e-2, weight_decay=0.05)
    state = [(p.detach().clone(), torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    for step in range(1, 5):
        grads = _grads(params, step)
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()
        state = [_reference(*s, g, step, 3e-2, 0.9, 0.999, 1e-8, 0.05, dtype) for s, g in zip(state, grads)]
        for i, (p, (want, m, v)) in enumerate(zip(params, state)):
            ulp = torch.finfo(dtype).eps * want.double().abs().clamp_min(1e-3)
            assert ((p.double() - want.double()).abs() <= ulp).all()  # one rounding: within one spacing
            torch.testing.assert_close(opt.state[p]["exp_avg"].double(), m.double(), rtol=2 * torch.finfo(dtype).eps,
                                       atol=1e-6)
            state[i] = (p.detach().clone(), opt.state[p]["exp_avg"].clone(),
                                      opt.state[p]["exp_avg_sq"].clone())


def test_what_the_kernel_does_not_cover_runs_torch_step(device):
    # amsgrad in one group, a non-contiguous parameter and a parameter without a gradient in
    # the other: the result is torch's in every case.
    def make():
        ps = _params(device, seed=5)
        g = torch.Generator().manual_seed(6)
        nc = torch.nn.Parameter(torch.randn(6, 4, generator=g).to(device).t())  # not contiguous
        idle = torch.nn.Parameter(torch.randn(3, generator=g).to(device))
        return ps, nc, idle

    runs = []
    for cls in (roofkit.optim.AdamW, torch.optim.AdamW):
        ps, nc, idle = make()
        opt = cls([{"params": ps[:2], "amsgrad": True}, {"params": [ps[2], nc, idle]}], lr=1e-2,
                  **({"foreach": False} if cls is torch.optim.AdamW else {}))
        for s in range(3):
            for p, g in zip([*ps[:3], nc], _grads([*ps[:3], nc], s)):
                p.grad = g
            opt.step()
        runs.append([*ps[:3], nc, idle])
    for a, b in zip(*runs):
        torch.testing.assert_close(a, b, rtol=2e-6, atol=2e-6)


def test_state_dicts_move_between_torch_and_roofkit(device):
    # torch for 3 steps, then either optimizer from torch's state dict: the same parameters
    ps, qs = _params(device, seed=7), _params(device, seed=7)
    first = torch.optim.AdamW(ps, lr=1e-2, foreach=False)
    _run(first, ps, 3)
    with torch.no_grad():
        for p, q in zip(ps, qs):
            q.copy_(p)
    a = roofkit.optim.AdamW(qs, lr=1e-2)
    a.load_state_dict(copy.deepcopy(first.state_dict()))  # (loading shares the tensors otherwise)
    _run(a, qs, 3, seed=10)
    _run(first, ps, 3, seed=10)
    for p, q in zip(ps, qs):
        torch.testing.assert_close(q, p, rtol=2e-6, atol=2e-6)
    b = torch.optim.AdamW(_params(device, seed=7), lr=1e-2)
    b.load_state_dict(a.state_dict())  # and back
    assert float(b.state_dict()["state"][0]["step"]) == 6.0


def test_closure_loss_is_returned(device):
    w = torch.nn.Parameter(torch.randn(8, device=device))
    opt = roofkit.optim.AdamW([w], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = (w ** 2).sum()
        loss.backward()
        return loss

    before = w.detach().clone()
    loss = opt.step(closure)
    assert torch.equal(loss, (before ** 2).sum()) and not torch.equal(w, before)


def test_step_hooks_run_once_when_torch_step_takes_part(device):
    # a complex parameter falls back to torch's step, which torch has wrapped with the step hooks
    # once any of its optimizers exists: the hooks still run once per step
    torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1, device=device))])
    p = torch.nn.Parameter(torch.randn(4, device=device))
    c = torch.nn.Parameter(torch.randn(4, dtype=torch.complex64, device=device))
    opt = roofkit.optim.AdamW([p, c], lr=0.1)
    calls = []
    opt.register_step_pre_hook(lambda *a: calls.append("pre"))
    opt.register_step_post_hook(lambda *a: calls.append("post"))
    p.grad, c.grad = torch.ones_like(p), torch.ones_like(c)
    before = c.detach().clone()
    opt.step()
    assert calls == ["pre", "post"] and not torch.equal(c, before)
