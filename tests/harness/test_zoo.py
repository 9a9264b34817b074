"""The wrong-implementation zoo: verification must reject every one of them.

Each entry is a plausible bug. The test asserts that ``verify_op`` fails *and* names the rule
that caught it, so a check that stops working is noticed. As a control, PyTorch's own
implementation (and roofkit's, in the registry-wide test) must pass the same cases.
"""

import pytest
import torch
import torch.nn.functional as F

from roofkit.harness.verify import verify_op

pytestmark = pytest.mark.harness

SOFTMAX_CASES = ["prime_37x781", "odd_3x7", "row_4096"]
RMS_CASES = ["prime_37x781", "row_4096", "eps_default_small_values_6x64"]


# ----------------------------------------------------------------------------- softmax zoo


def softmax_writes_nothing(input, dim=-1, dtype=None):
    return torch.empty_like(input)


def softmax_returns_zeros(input, dim=-1, dtype=None):
    return torch.zeros_like(input)


def softmax_drops_last_column(input, dim=-1, dtype=None):
    out = torch.empty_like(input)
    out[..., :-1] = F.softmax(input[..., :-1], dim=-1)
    return out


def softmax_off_by_one_mask(input, dim=-1, dtype=None):
    # The reduction ignores the last element; every element is still written.
    x = input.float()
    m = x[..., :-1].amax(dim=-1, keepdim=True)
    s = (x[..., :-1] - m).exp().sum(dim=-1, keepdim=True)
    return ((x - m).exp() / s).to(input.dtype)


def softmax_bf16_accumulation(input, dim=-1, dtype=None):
    x = input.float()
    e = (x - x.amax(dim=-1, keepdim=True)).exp()
    acc = torch.zeros(e.shape[:-1], dtype=torch.bfloat16, device=e.device)
    for j in range(e.shape[-1]):  # a running sum rounded to bf16 at every step
        acc = acc + e[..., j].to(torch.bfloat16)
    return (e / acc.float().unsqueeze(-1)).to(input.dtype)


def softmax_returns_input(input, dim=-1, dtype=None):
    return input


_cache = {}


def softmax_cached(input, dim=-1, dtype=None):
    key = (tuple(input.shape), input.dtype)
    if key not in _cache:
        _cache[key] = F.softmax(input, dim=dim)
    return _cache[key]


def softmax_mutates_input(input, dim=-1, dtype=None):
    y = F.softmax(input, dim=dim)
    input.data.mul_(0.5)  # behind autograd's back, as a kernel writing its input would
    return y


def softmax_nondeterministic(input, dim=-1, dtype=None):
    y = F.softmax(input.float(), dim=dim)
    jitter = 1 + torch.rand_like(y) * 1e-7  # sub-tolerance noise that changes from call to call
    return (y * jitter).to(input.dtype)


def softmax_wrong_dtype(input, dim=-1, dtype=None):
    return F.softmax(input.float(), dim=dim)


class _SoftmaxLastDim(torch.autograd.Function):
    """A correct forward; subclasses supply a wrong backward."""

    @staticmethod
    def forward(ctx, x):
        y = F.softmax(x, dim=-1)
        ctx.save_for_backward(y)
        return y


class _WrongGrad(_SoftmaxLastDim):
    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return y * g  # forgets the - sum(g * y) term


def softmax_wrong_backward(input, dim=-1, dtype=None):
    return _WrongGrad.apply(input)


def softmax_returns_a_list(input, dim=-1, dtype=None):
    return [F.softmax(input, dim=dim)]


def softmax_negative_dim_means_last(input, dim=-1, dtype=None):
    return F.softmax(input, dim=-1 if dim < 0 else dim)


def softmax_first_64_rows_only(input, dim=-1, dtype=None):
    out = torch.zeros_like(input)
    out[:64] = F.softmax(input[:64], dim=dim)
    return out


_shared = {}


def softmax_reuses_one_output_buffer(input, dim=-1, dtype=None):
    key = (tuple(input.shape), input.dtype, input.device)
    if key not in _shared:
        _shared[key] = torch.empty_like(input)
    _shared[key].copy_(F.softmax(input, dim=dim))
    return _shared[key]


class _GradInPlace(_SoftmaxLastDim):
    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        s = (g * y).sum(-1, keepdim=True)
        return g.sub_(s).mul_(y)  # right values, but written into grad_output


def softmax_backward_overwrites_grad_output(input, dim=-1, dtype=None):
    return _GradInPlace.apply(input)


ZOO = [
    (softmax_writes_nothing, "NaN/inf position"),
    (softmax_returns_zeros, "relative L2 error"),
    (softmax_returns_zeros, "no gradient returned"),
    (softmax_drops_last_column, "NaN/inf position"),
    (softmax_off_by_one_mask, "element(s) outside"),
    (softmax_bf16_accumulation, "relative L2 error"),
    (softmax_returns_input, "relative L2 error"),
    (softmax_cached, "relative L2 error"),
    (softmax_mutates_input, "input was modified"),
    (softmax_nondeterministic, "not bitwise identical"),
    (softmax_wrong_dtype, "dtype"),
    (softmax_wrong_backward, "grad[0]"),
    (softmax_returns_a_list, "a tensor where torch returns a tensor"),
    (softmax_negative_dim_means_last, "relative L2 error"),
    (softmax_first_64_rows_only, "relative L2 error"),
    (softmax_reuses_one_output_buffer, "overwritten by a later call"),
    (softmax_backward_overwrites_grad_output, "modified grad_output"),
]


@pytest.mark.parametrize("impl,reason", ZOO, ids=[f.__name__ for f, _ in ZOO])
def test_verify_rejects_wrong_softmax(impl, reason, device):
    _cache.clear()
    _shared.clear()
    cases = SOFTMAX_CASES + ["dim_minus2_4d_2x3x9x5", "many_rows_130x33"]
    report = verify_op("softmax", impl, cases=cases, seeds=2, device=device)
    assert not report.passed, f"{impl.__name__} passed verification"
    assert reason in report.summary(), report.summary()


def test_verify_accepts_torch_softmax_as_control(device):
    report = verify_op("softmax", F.softmax, cases=SOFTMAX_CASES, seeds=2, device=device)
    assert report.passed, report.summary()


@pytest.mark.gpu
def test_verify_rejects_side_stream_without_sync():
    def softmax_side_stream(input, dim=-1, dtype=None):
        out = torch.empty_like(input)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(20_000_000)  # ~10 ms: the caller reads before this finishes
            out.copy_(F.softmax(input, dim=dim))
        return out  # no current_stream().wait_stream(side)

    report = verify_op("softmax", softmax_side_stream, cases=["prime_37x781"], seeds=1, device="cuda")
    assert not report.passed
    assert "NaN/inf position" in report.summary(), report.summary()


# ----------------------------------------------------------------------------- rms_norm zoo


def rms_ignores_weight(input, normalized_shape, weight=None, eps=None):
    return F.rms_norm(input, normalized_shape, None, eps)


def rms_bf16_accumulation(input, normalized_shape, weight=None, eps=None):
    x = input.float()
    acc = torch.zeros(x.shape[:-1], dtype=torch.bfloat16, device=x.device)
    for j in range(x.shape[-1]):
        acc = acc + (x[..., j] * x[..., j]).to(torch.bfloat16)
    eps = torch.finfo(torch.float32).eps if eps is None else eps
    y = x * torch.rsqrt(acc.float() / x.shape[-1] + eps).unsqueeze(-1)
    return (y * weight.float() if weight is not None else y).to(input.dtype)


def rms_eps_outside_sqrt(input, normalized_shape, weight=None, eps=None):
    x = input.float()
    y = x / (x.pow(2).mean(-1, keepdim=True).sqrt() + 1e-2)
    return (y * weight.float() if weight is not None else y).to(input.dtype)


def rms_writes_nothing(input, normalized_shape, weight=None, eps=None):
    return torch.empty_like(input)


def rms_default_eps_of_input_dtype(input, normalized_shape, weight=None, eps=None):
    eps = torch.finfo(input.dtype).eps if eps is None else eps
    return F.rms_norm(input, normalized_shape, weight, eps)


RMS_ZOO = [
    (rms_ignores_weight, "relative L2 error"),
    (rms_bf16_accumulation, "relative L2 error"),
    (rms_eps_outside_sqrt, "element(s) outside"),
    (rms_writes_nothing, "NaN/inf position"),
    (rms_default_eps_of_input_dtype, "relative L2 error"),
]


@pytest.mark.parametrize("impl,reason", RMS_ZOO, ids=[f.__name__ for f, _ in RMS_ZOO])
def test_verify_rejects_wrong_rms_norm(impl, reason, device):
    report = verify_op("rms_norm", impl, cases=RMS_CASES, seeds=2, device=device)
    assert not report.passed, f"{impl.__name__} passed verification"
    assert reason in report.summary(), report.summary()


def test_verify_accepts_torch_rms_norm_as_control(device):
    report = verify_op("rms_norm", F.rms_norm, cases=RMS_CASES, seeds=2, device=device)
    assert report.passed, report.summary()


@pytest.mark.parametrize("impl,passes", [(F.softmax, True), (softmax_off_by_one_mask, False), (softmax_writes_nothing, False)])
def test_verify_chunked_comparison_agrees(impl, passes, monkeypatch, device):
    # Outputs larger than one chunk are compared piecewise; force tiny chunks.
    import importlib

    monkeypatch.setattr(importlib.import_module("roofkit.harness.verify"), "COMPARE_CHUNK", 37)
    report = verify_op("softmax", impl, cases=["prime_37x781", "neg_inf_8x129"], seeds=1, device=device)
    assert report.passed is passes, report.summary()


def test_compare_integer_outputs_is_exact(device):
    from roofkit.harness.verify import compare

    ref = torch.arange(10, device=device, dtype=torch.int64)
    kw = dict(rtol=0.5, atol=0.5, l2_factor=2.0, l2_floor=1.0, device=device)
    assert compare("count", ref.clone(), ref, ref, **kw).passed
    off = ref.clone()
    off[7] += 1  # off by one: any float tolerance would let it through
    check = compare("count", off, ref, ref, **kw)
    assert not check.passed and check.mismatches == 1 and "(7,)" in check.worst


def test_compare_budget_never_below_the_references_own_rounding(device):
    # A scalar whose float64 reference lies a quarter ulp above 1 in fp16, and a torch result
    # that overflowed (non-finite: its error is not counted, so it gives no budget). The
    # correctly rounded answer must pass; an answer one ulp off must still fail.
    from roofkit.harness.verify import compare

    ref = torch.tensor([1.0 + 2.0**-12], dtype=torch.float64, device=device)
    torch_overflowed = torch.tensor([float("inf")], dtype=torch.float16, device=device)
    kw = dict(rtol=2e-3, atol=5e-4, l2_factor=2.0, l2_floor=1e-4, device=device)
    rounded = torch.tensor([1.0], dtype=torch.float16, device=device)
    check = compare("loss", rounded, ref, torch_overflowed, **kw)
    assert check.passed, check.reasons
    assert check.torch_err_l2 == 0.0 and check.budget_l2 > 2 * 2.0**-12
    one_ulp_up = torch.tensor([1.0 + 2.0**-10], dtype=torch.float16, device=device)
    assert not compare("loss", one_ulp_up, ref, torch_overflowed, **kw).passed
