"""softmax / log_softmax properties the registry-wide test cannot state."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import roofkit
from roofkit.harness.spec import case
from roofkit.harness.verify import verify_op
import importlib

softmax_module = importlib.import_module("roofkit.ops.softmax")

pytestmark = pytest.mark.softmax


def _x(shape, device, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(device=device, dtype=dtype)


@settings(max_examples=15, deadline=None)
@given(m=st.integers(1, 9), n=st.integers(1, 300), shift=st.floats(-50, 50), seed=st.integers(0, 2**16))
def test_softmax_rows_sum_to_one_and_shift_invariant(m, n, shift, seed):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    x = _x((m, n), device, seed=seed)
    y = roofkit.softmax(x, dim=-1)
    assert torch.allclose(y.double().sum(-1), torch.ones(m, dtype=torch.float64, device=device), atol=1e-5)
    assert (y >= 0).all()
    y_shift = roofkit.softmax(x + shift, dim=-1)
    torch.testing.assert_close(y_shift, y, rtol=1e-4, atol=1e-6)


def test_softmax_all_masked_row_is_nan_like_torch(device):
    x = _x((3, 10), device)
    x[1] = float("-inf")
    y = roofkit.softmax(x, dim=-1)
    assert torch.isnan(y[1]).all()
    assert torch.isfinite(y[0]).all() and torch.isfinite(y[2]).all()
    assert torch.isnan(F.softmax(x, dim=-1)[1]).all()  # the torch behaviour we mirror
    ly = roofkit.log_softmax(x, dim=-1)
    assert torch.isnan(ly[1]).all()


def test_log_softmax_minus_inf_entries_stay_minus_inf(device):
    x = _x((2, 8), device)
    x[0, 3] = float("-inf")
    ly = roofkit.log_softmax(x, dim=-1)
    assert ly[0, 3] == float("-inf")
    torch.testing.assert_close(ly.exp().sum(-1), torch.ones(2, device=device))


def _spy_launch_configs(monkeypatch):
    """The configurations the launchers choose, in call order (a shrunk shape cannot silently
    fall back to another path)."""
    seen = []
    choose = softmax_module._launch_config

    def spy(*args, **kwargs):
        seen.append(choose(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(softmax_module, "_launch_config", spy)
    return seen


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_online_path_matches_reference(op, monkeypatch, tunables, device):
    # Force the two-pass online kernel (forward and backward) onto short rows: rows of 129
    # (3 chunks of 64, a ragged last one), 300 (5 chunks) and 100 strided ones (2 chunks; the
    # spec's transposed_16x33 / dim0_33x16 rows of 33 fit one pass). 3 rows a case (the spec's
    # 8-row cases run in the registry-wide test); neg_inf makes row 0 all -inf. float32 and
    # bfloat16 as in the split-row test (float16 differs from bfloat16 in the conversions of the
    # loads and stores alone; the registry-wide test runs every dtype).
    tunables("softmax", ONE_PASS_MAX_N=64, ONLINE_BLOCK_N=64, MAX_SPLITS=0)
    assert softmax_module._launch_config(129).one_pass is False
    seen = _spy_launch_configs(monkeypatch)
    cases = [case("neg_inf_3x129", shape=(3, 129), dist="neg_inf"),
             case("nan_3x129", shape=(3, 129), dist="nan", grad=False),
             case("pos_inf_3x129", shape=(3, 129), dist="pos_inf", grad=False),
             case("ties_3x129", shape=(3, 129), dist="ties"),
             case("large_magnitude_3x300", shape=(3, 300), dist="large"),
             case("transposed_3x100", shape=(3, 100), layout="transposed"),
             case("dim0_100x3", shape=(100, 3), dim=0)]
    report = verify_op(op, cases=cases, seeds=2, dtypes=(torch.float32, torch.bfloat16), device=device)
    assert report.passed, report.summary()
    assert seen and all(not c.one_pass and not c.splits and c.BLOCK_N == 64 for c in seen), set(seen)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_split_row_path_matches_reference(op, monkeypatch, tunables, device):
    # Force the split-row kernels (forward and backward) onto short rows: 129 -> 5 segments of
    # 26 (a ragged last one), 40 -> 2 segments. Under the interpreter the two-launch form runs;
    # on the GPU the fused one (programs of a row wait for each other).
    # 3 rows (5 for the strided layouts) a case: the spec's 8- to 16-row ones run in the
    # registry-wide test; neg_inf makes row 0 all -inf.
    tunables("softmax", ONE_PASS_MAX_N=16, SPLIT_SEG=32)
    cfg = softmax_module._launch_config(129)
    assert cfg.splits == 5 and cfg.BLOCK_N == 32
    seen = _spy_launch_configs(monkeypatch)
    cases = [case("neg_inf_3x129", shape=(3, 129), dist="neg_inf"),
             case("nan_3x129", shape=(3, 129), dist="nan", grad=False),
             case("pos_inf_3x129", shape=(3, 129), dist="pos_inf", grad=False),
             case("ties_3x129", shape=(3, 129), dist="ties"),
             case("transposed_5x33", shape=(5, 33), layout="transposed"),
             case("dim0_33x5", shape=(33, 5), dim=0),
             case("grad_transposed_5x40", shape=(5, 40), grad_layout="transposed")]
    report = verify_op(op, cases=cases, seeds=2, dtypes=(torch.float32, torch.bfloat16), device=device)
    assert report.passed, report.summary()
    assert seen and all(c.splits in (2, 5) for c in seen) and any(c.splits == 5 for c in seen), set(seen)


def test_softmax_split_row_all_minus_inf_segment_is_finite_elsewhere(tunables, device):
    # One segment of a row entirely -inf (its partial max is -inf): the row stays finite and
    # those entries are exactly 0; a fully -inf row is NaN, as in torch.
    tunables("softmax", ONE_PASS_MAX_N=16, SPLIT_SEG=32)
    x = _x((3, 100), device)
    x[0, :40] = float("-inf")
    x[2] = float("-inf")
    y = roofkit.softmax(x, dim=-1)
    assert (y[0, :40] == 0).all() and torch.isfinite(y[0]).all()
    torch.testing.assert_close(y[:2], F.softmax(x[:2], dim=-1), rtol=1e-5, atol=1e-7)
    assert torch.isnan(y[2]).all()


def test_softmax_launch_heuristic_paths():
    assert softmax_module._launch_config(4096).one_pass and not softmax_module._launch_config(4096).splits
    assert softmax_module._launch_config(softmax_module.ONE_PASS_MAX_N).splits == 0
    cfg = softmax_module._launch_config(128256, m=64)
    assert cfg.splits == 8 and cfg.BLOCK_N == 16384
    assert softmax_module._launch_config(softmax_module.SPLIT_SEG * softmax_module.MAX_SPLITS + 1).one_pass is False
    if torch.cuda.is_available():  # many rows: every SM already busy, the online path
        cuda = torch.device("cuda")
        assert softmax_module._launch_config(128256, cuda, m=8192).splits == 0
        assert softmax_module._launch_config(128256, cuda, m=64).splits == 8


def test_softmax_dtype_argument_sets_output_dtype(device):
    x = _x((4, 33), device, dtype=torch.float16)
    y = roofkit.softmax(x, dim=-1, dtype=torch.float32)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, F.softmax(x, dim=-1, dtype=torch.float32), rtol=1e-5, atol=1e-6)


def test_softmax_dtype_argument_casts_first_like_torch(device):
    import numpy as np

    x = _x((3, 20), device).double()
    y = roofkit.softmax(x, dim=np.int64(1), dtype=torch.float32)  # float64 input, cast first
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, F.softmax(x, dim=1, dtype=torch.float32), rtol=1e-5, atol=1e-6)


def test_softmax_empty_input_returns_empty_without_launch(forbid_launch, device):
    forbid_launch(softmax_module, "_softmax_fwd_kernel")
    for shape in [(0, 7), (5, 0), (0,)]:
        x = torch.empty(shape, device=device)
        y = roofkit.softmax(x, dim=-1)
        assert y.shape == x.shape and y.numel() == 0


def test_softmax_scalar_input_like_torch(device):
    x = torch.tensor(3.0, device=device)
    assert roofkit.softmax(x, dim=0).item() == 1.0
    assert roofkit.log_softmax(x, dim=-1).item() == 0.0


@pytest.mark.parametrize(
    "call,exc,words",
    [
        (lambda d: roofkit.softmax(torch.arange(6, device=d).view(2, 3)), TypeError, ["roofkit.softmax", "input", "int64"]),
        (lambda d: roofkit.softmax([1.0, 2.0]), TypeError, ["roofkit.softmax", "input", "torch.Tensor"]),
        (lambda d: roofkit.softmax(torch.ones(2, 3, device=d), dim=2), IndexError, ["roofkit.softmax", "dim 2"]),
        (lambda d: roofkit.log_softmax(torch.ones(2, 3, device=d), dim=1.0), TypeError, ["roofkit.log_softmax", "dim"]),
        (lambda d: roofkit.softmax(torch.ones(2, 3, device=d), dtype=torch.int32), TypeError, ["roofkit.softmax", "dtype"]),
        (lambda d: roofkit.softmax(torch.ones(2, 3, device=d, dtype=torch.float64)), TypeError, ["roofkit.softmax", "float64"]),
    ],
)
def test_softmax_bad_input_raises_clear_error(call, exc, words, device, raises_naming):
    raises_naming(exc, words, call, device)


def test_softmax_cpu_tensor_without_interpreter_is_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match=r"roofkit\.softmax: input is on cpu"):
        roofkit.softmax(torch.ones(2, 3))


@pytest.mark.parametrize("op", [roofkit.softmax, roofkit.log_softmax])
def test_softmax_compiles_fullgraph_with_backward(op, device):
    ref_op = {roofkit.softmax: F.softmax, roofkit.log_softmax: F.log_softmax}[op]

    def fn(x):
        return op(x * 2.0, dim=-1).sum(dim=0)

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    x = _x((5, 40), device).requires_grad_(True)
    out = compiled(x)
    (gx,) = torch.autograd.grad(out, x, torch.ones_like(out))
    x2 = x.detach().clone().requires_grad_(True)
    out2 = ref_op(x2 * 2.0, dim=-1).sum(dim=0)
    (gx2,) = torch.autograd.grad(out2, x2, torch.ones_like(out2))
    torch.testing.assert_close(out, out2, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gx, gx2, rtol=1e-4, atol=1e-5)


def test_softmax_cost_counts_one_read_one_write():
    from roofkit.harness.spec import case

    c = case("t", shape=(4, 8))
    assert softmax_module.softmax_cost(c, torch.float32).bytes == 2 * 32 * 4
    assert softmax_module.softmax_cost(c, torch.bfloat16).bytes == 2 * 32 * 2
    assert softmax_module.softmax_cost(c, torch.float32).flops == 5 * 32
    fb = case("t", shape=(4, 8), mode="fwd_bwd")
    assert softmax_module.softmax_cost(fb, torch.bfloat16).bytes == 5 * 32 * 2
    assert math.isclose(softmax_module.softmax_cost(fb, torch.bfloat16).flops, 9 * 32)




@pytest.mark.gpu
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_softmax_long_rows_take_the_staged_row_kernel_and_match_the_reference(op, dtype, tunables):
    # Rows of 128256 (more rows than SMs) run through cross_entropy's staged-row kernel (MODE 1 /
    # 2): checked against float64 and against the online two-pass kernel, with rows of only
    # -inf (NaN, as torch), a NaN, +inf, -inf among finite values, and logits past 2**31 in
    # magnitude (exact exponents: the cross-entropy form's fl(m * log2 e) would be off there).
    ce = importlib.import_module("roofkit.ops.cross_entropy")
    fn = getattr(roofkit, op)
    g = torch.Generator(device="cuda").manual_seed(11)
    m, c = 264, 128256
    x = 4 * torch.randn(m, c, device="cuda", generator=g)
    x[1] = -math.inf
    x[2, 77] = math.nan
    x[3, 5] = math.inf
    x[4, ::3] = -math.inf
    if dtype == torch.bfloat16:
        x[5] = x[5] + 3e9
        x[6] = x[6] * 1e4 - 5e9
    x = x.to(dtype)
    assert ce._smem_plan(x, True, False) is not None
    ce._SMEM_PROGRAMS_PER_SM.clear()
    staged = fn(x, dim=-1)
    assert ce._SMEM_PROGRAMS_PER_SM and not ce._SMEM_FAILED  # built and launched, no fallback
    tunables("cross_entropy", SMEM_PATH=False)
    online = fn(x, dim=-1)
    ref = getattr(torch, op)(x.double(), dim=-1)
    assert staged.dtype == dtype and staged.shape == x.shape
    for got in (staged, online):
        torch.testing.assert_close(got.double(), ref.to(dtype).double(), rtol=2 ** -6, atol=1e-6, equal_nan=True)
    torch.testing.assert_close(staged, online, rtol=2 ** -6, atol=1e-6, equal_nan=True)
    # The gradient flows from the staged output: the backward reads the saved (rounded) output
    # y, so the float64 gradient is formed from that y (log_softmax's exp(y) of a 16-bit y is
    # only as exact as y).
    xg = x.clone().requires_grad_(True)
    dy = torch.randn(m, c, device="cuda", generator=g).to(dtype)
    y = fn(xg, dim=-1)
    (gx,) = torch.autograd.grad(y, xg, dy)
    ok = torch.isfinite(x).all(dim=1)
    ok[3] = ok[5] = ok[6] = False
    yd, dyd = y.detach().double(), dy.double()
    gref = (yd * (dyd - (dyd * yd).sum(-1, keepdim=True)) if op == "softmax"
            else dyd - yd.exp() * dyd.sum(-1, keepdim=True))
    torch.testing.assert_close(gx[ok].double(), gref[ok], rtol=2 ** -6, atol=2e-5)


def test_softmax_staged_path_asks_cross_entropys_kernel_for_its_mode(monkeypatch):
    # The host side of the staged-row path without a GPU: softmax asks for MODE 1, log_softmax
    # for MODE 2, the output rows as the kernel's gradient and loss pointers; a non-contiguous
    # output or a refused plan leaves the Triton kernels (False).
    ce = importlib.import_module("roofkit.ops.cross_entropy")
    calls = []
    monkeypatch.setattr(ce, "_smem_plan", lambda x, grad, weight: ce.SmemPlan(3, 1) if grad and not weight else None)
    monkeypatch.setattr(ce, "_smem_launch", lambda plan, args, consts, m, device, op="": calls.append(
        (plan, args, consts, m, op)) or True)
    x = torch.randn(6, 40)
    y = torch.empty(6, 40)
    for log, mode, name in ((False, 1, "softmax"), (True, 2, "log_softmax")):
        assert softmax_module._staged(x, y, log) is True
        plan, args, consts, m, op = calls.pop()
        assert plan == ce.SmemPlan(3, 1) and consts["MODE"] == mode and op == name and m == 6
        assert args[0] is x and args[3] is y and args[4] is y and args[5:8] == (6, 40, 40)
    assert softmax_module._staged(x, torch.empty(40, 6).t(), False) is False and not calls
    monkeypatch.setattr(ce, "_smem_plan", lambda x, grad, weight: None)
    assert softmax_module._staged(x, y, False) is False and not calls


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_staged_rows_replay_from_plans_and_cuda_graphs(op):
    # The staged-row path as a decoding / training loop meets it: repeated calls (recorded, then
    # replayed from the op's plan) and a CUDA graph of the call, each bitwise equal to the first
    # eager result on fresh values in the same buffers.
    ce = importlib.import_module("roofkit.ops.cross_entropy")
    fn = getattr(roofkit, op)
    g = torch.Generator(device="cuda").manual_seed(2)
    x = (3 * torch.randn(264, 128256, device="cuda", generator=g)).to(torch.bfloat16)
    assert ce._smem_plan(x, True, False) is not None
    for _ in range(4):  # as written, recorded, replayed
        x.copy_((3 * torch.randn(264, 128256, device="cuda", generator=g)).to(torch.bfloat16))
        want = getattr(torch, op)(x.float(), dim=-1).to(torch.bfloat16)
        got = fn(x, dim=-1)
        torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -6, atol=1e-6)
    first = fn(x, dim=-1).clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(x, dim=-1)  # warm-up on the capturing stream
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(x, dim=-1)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, first)
    x.copy_((3 * torch.randn(264, 128256, device="cuda", generator=g)).to(torch.bfloat16))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, fn(x, dim=-1))
