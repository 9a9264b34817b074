"""transpose properties the registry-wide test cannot state."""

import dataclasses
import importlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from roofkit.harness.spec import case
from roofkit.harness.verify import verify_op
from roofkit.ops.transpose import SPEC, SUPPORTED_DTYPES, transpose

transpose_module = importlib.import_module("roofkit.ops.transpose")

pytestmark = pytest.mark.transpose

_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _x(shape, device, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(device=device, dtype=dtype)


def _random_bits(shape, dtype, device, seed=0):
    """Random bit patterns of ``dtype`` (NaN payloads, -0.0, subnormals included)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).to(device=device, dtype=torch.bool)
    size = dtype.itemsize
    info = torch.iinfo(_BITS[size])
    bits = torch.randint(info.min, info.max, shape, generator=g, dtype=torch.int64).to(_BITS[size])
    return bits.to(device).view(dtype)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype == torch.bool:
        return torch.equal(a, b)
    size = a.element_size()
    return torch.equal(a.contiguous().view(_BITS[size]), b.contiguous().view(_BITS[size]))


def test_transpose_all_cpu_cases_match_reference(device):
    # Every CPU case once, its dtypes taken in turn (one a case) and one seed: a fast signal from
    # this file alone. The registry-wide test runs each case in every dtype with three seeds.
    cases = [c for c in SPEC.cases if not ({"gpu", "slow"} & c.tags)]
    cases = [dataclasses.replace(c, dtypes=(SPEC.case_dtypes(c)[i % len(SPEC.case_dtypes(c))],))
             for i, c in enumerate(cases)]
    report = verify_op(SPEC, cases=cases, seeds=1, device=device)
    assert report.rows and report.passed, report.summary()
    assert len(report.rows) == len(cases)


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_transpose_copies_bits_of_every_supported_dtype(dtype, device):
    x = _random_bits((3, 37, 21), dtype, device)
    bits = _BITS[dtype.itemsize]
    for d0, d1 in ((1, 2), (0, 2), (0, 1)):
        got = transpose(x, d0, d1)
        assert got.is_contiguous() and got.dtype == dtype
        # Compared as raw bits (torch's own copy of some of these dtypes is experimental).
        assert torch.equal(got.view(bits), torch.transpose(x.view(bits), d0, d1).contiguous()), (d0, d1)


@settings(max_examples=12, deadline=None)
@given(
    shape=st.lists(st.integers(1, 12), min_size=1, max_size=5),
    data=st.data(),
    layout=st.sampled_from(["contiguous", "transposed", "strided", "permuted"]),
)
def test_transpose_any_dims_and_layouts(shape, data, layout):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    nd = len(shape)
    d0 = data.draw(st.integers(-nd, nd - 1))
    d1 = data.draw(st.integers(-nd, nd - 1))
    x = _random_bits(tuple(shape), torch.int32, device, seed=data.draw(st.integers(0, 2**16)))
    if layout == "transposed" and nd >= 2:
        x = x.transpose(0, -1).contiguous().transpose(0, -1)
    elif layout == "strided":
        x = torch.cat([x, x], dim=-1)[..., ::2]
    elif layout == "permuted":
        x = x.permute(*reversed(range(nd))).contiguous().permute(*reversed(range(nd)))
    got = transpose(x, d0, d1)
    assert got.is_contiguous() and torch.equal(got, torch.transpose(x, d0, d1))


def test_transpose_keeps_nan_payloads_and_signed_zeros(device):
    x = _x((5, 70), device)
    x[1, 3] = -0.0
    x[2, 4] = float("nan")
    x[3, 5] = float("-inf")
    got = transpose(x, 0, 1)
    assert _same_bits(got, x.t().contiguous())
    assert torch.signbit(got[3, 1]) and got[3, 1] == 0


def test_transpose_paths(forbid_launch, monkeypatch, device):
    x = _x((1, 37), device)
    forbid_launch(transpose_module, "_transpose_kernel")
    # 1xN, Nx1, size-1 dims, same dims and a transposed layout are flat copies.
    assert torch.equal(transpose(x, 0, 1), x.t())
    assert torch.equal(transpose(x.t(), 0, 1), x)
    assert torch.equal(transpose(_x((4, 1, 6), device), 0, 1), _x((4, 1, 6), device).transpose(0, 1))
    y = _x((16, 33), device)
    assert torch.equal(transpose(y.t(), 0, 1), y)
    assert torch.equal(transpose(y, 1, 1), y)
    monkeypatch.undo()
    forbid_launch(transpose_module, "_copy_kernel")
    assert torch.equal(transpose(y, 0, 1), y.t())


def test_transpose_plan_tiles_and_offsets():
    cfg_of = transpose_module._plan
    # 16384^2 fp32: 64x64 tiles across the input's fast dim (K) and the output's (L), int32.
    p = cfg_of([16384, 16384], [1, 16384], 4)
    assert (p.K, p.L, p.config.BLOCK_K, p.config.BLOCK_L, p.use_int64) == (16384, 16384, 64, 64, False)
    assert p.x_strides[3:] == (1, 16384) and p.y_strides[3] == 16384 and p.grid == 256 * 256
    # More than 2**31 elements: int64 in-tile offsets.
    assert cfg_of([46341, 46341], [1, 46341], 2).use_int64
    # Heads <-> tokens of (32, 8192, 128): output (8192, 32, 128), a batched row copy.
    p = cfg_of([8192, 32, 128], [128, 8192 * 128, 1], 2)
    assert (p.K, p.L, p.config.BLOCK_L) == (32, 128, 128) and p.x_strides[3:] == (8192 * 128, 1)
    assert p.grid == 8192 and not p.use_int64
    # A short side lets the other grow (tile area kept).
    p = cfg_of([100003, 5], [1, 100003], 4)
    assert (p.config.BLOCK_K, p.config.BLOCK_L) == (512, 8)
    assert cfg_of([2] * 6, [1, 2, 4, 8, 16, 32], 4) is None


def test_transpose_backward_is_a_transpose(device):
    x = _x((3, 4, 5), device).requires_grad_(True)
    y = transpose(x, 0, 2)
    dy = _x(y.shape, device, seed=3)
    (gx,) = torch.autograd.grad(y, x, dy)
    assert torch.equal(gx, dy.transpose(0, 2))


def test_transpose_empty_input_returns_empty_without_launch(forbid_launch, device):
    forbid_launch(transpose_module, "_transpose_kernel")
    forbid_launch(transpose_module, "_copy_kernel")
    for shape, d0, d1 in [((0, 7), 0, 1), ((5, 0), 1, 0), ((2, 0, 3), 0, 2), ((0,), 0, 0)]:
        x = torch.empty(shape, device=device)
        y = transpose(x, d0, d1)
        assert y.shape == torch.transpose(x, d0, d1).shape and y.numel() == 0


def test_transpose_scalar_like_torch(device):
    x = torch.tensor(4.5, device=device)
    assert transpose(x, 0, -1).shape == () and transpose(x, 0, 0).item() == 4.5


@pytest.mark.parametrize(
    "call,exc,words",
    [
        (lambda d: transpose([[1.0]], 0, 1), TypeError, ["roofkit.transpose", "input", "torch.Tensor"]),
        (lambda d: transpose(torch.ones(2, 3, device=d, dtype=torch.complex128), 0, 1), TypeError,
         ["roofkit.transpose", "input", "complex128"]),
        (lambda d: transpose(torch.ones(2, 3, device=d), 0, 2), IndexError,
         ["roofkit.transpose", "dim1=2", "out of range"]),
        (lambda d: transpose(torch.ones(2, 3, device=d), -3, 0), IndexError, ["roofkit.transpose", "dim0=-3"]),
        (lambda d: transpose(torch.ones(2, 3, device=d), 0.0, 1), TypeError, ["roofkit.transpose", "dim0", "float"]),
        (lambda d: transpose(torch.ones(2, 3, device=d), 0, True), TypeError, ["roofkit.transpose", "dim1", "bool"]),
    ],
)
def test_transpose_bad_input_raises_clear_error(call, exc, words, device, raises_naming):
    raises_naming(exc, words, call, device)


def test_transpose_cpu_tensor_without_interpreter_is_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match=r"roofkit\.transpose: input is on cpu"):
        transpose(torch.ones(2, 3), 0, 1)


def test_transpose_compiles_fullgraph_with_backward(device):
    def fn(x):
        return transpose(x * 2.0, 0, 1).sum(dim=0) + transpose(x, -1, -2)[0]

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    x = _x((4, 6), device).requires_grad_(True)
    out = compiled(x)
    (gx,) = torch.autograd.grad(out, x, torch.ones_like(out))
    x2 = x.detach().clone().requires_grad_(True)
    out2 = (x2 * 2.0).t().sum(dim=0) + x2.t()[0]
    (gx2,) = torch.autograd.grad(out2, x2, torch.ones_like(out2))
    torch.testing.assert_close(out, out2)
    torch.testing.assert_close(gx, gx2)


def test_transpose_cost_counts_one_read_one_write():
    c = case("t", shape=(16384, 16384), dim0=0, dim1=1)
    assert transpose_module.transpose_cost(c, torch.float32).bytes == 2 * 16384 * 16384 * 4
    assert transpose_module.transpose_cost(c, torch.float32).flops == 0
    # (the backward's minimum is a view of the output gradient: no bytes)
    assert transpose_module.transpose_cost(case("t", shape=(3, 5), mode="fwd_bwd"), torch.bfloat16).bytes == 2 * 15 * 2


def test_transpose_spec_declares_what_the_harness_needs():
    assert SPEC.suites.get("llama3-8b") and SPEC.suites.get("acceptance")
    assert {"torch", "torch.compile"} <= set(SPEC.baselines)
    names = [c.name for c in SPEC.cases]
    assert len(names) == len(set(names))
    accept = {c["shape"] for c in SPEC.suites["acceptance"]}
    assert {(16384, 16384), (4095, 4097), (1, 1 << 26), (1 << 26, 1)} <= accept
    assert any(len(s) == 3 for s in accept)  # batched
    # Integer / bool tensors cannot require grad: their cases must be forward only.
    for c in SPEC.cases:
        if any(not d.is_floating_point for d in SPEC.case_dtypes(c)):
            assert c.get("grad") is False, c.name


def test_transpose_backward_is_torchs_view_of_the_output_gradient(device):
    # torch's gradient of transpose(x, d0, d1).contiguous() is the output gradient transposed back,
    # a view copying nothing; roofkit's is the same tensor view (values, strides, storage).
    x = _x((3, 4, 5), device).requires_grad_(True)
    g = _x((5, 4, 3), device)
    (gx,) = torch.autograd.grad(transpose(x, 0, 2), x, g)
    (want,) = torch.autograd.grad(torch.transpose(x, 0, 2).contiguous(), x, g)
    assert torch.equal(gx, want) and gx.stride() == want.stride()
    assert gx.data_ptr() == g.data_ptr()
