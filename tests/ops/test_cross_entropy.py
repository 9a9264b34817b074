"""cross_entropy properties the registry-wide test cannot state."""

import dataclasses
import importlib
import math
import os
import pathlib

import pytest
import torch
import torch.nn.functional as F

from roofkit.harness.spec import case
from roofkit.harness.verify import verify_op

ce_module = importlib.import_module("roofkit.ops.cross_entropy")
cross_entropy = ce_module.cross_entropy
SPEC = ce_module.SPEC

pytestmark = pytest.mark.cross_entropy

_KERNELS = ("_cross_entropy_prologue_kernel", "_cross_entropy_fwd_kernel", "_cross_entropy_split_kernel",
            "_cross_entropy_reduce_kernel", "_cross_entropy_scale_grad_kernel")


def _x(shape, device, dtype=torch.float32, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(shape, generator=g)).to(device=device, dtype=dtype)


def _t(m, c, device, seed=1, ignore_every=0, ignore_index=-100):
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, c, (m,), generator=g)
    if ignore_every:
        t[::ignore_every] = ignore_index
    return t.to(device)


@pytest.mark.parametrize(
    "names",
    [
        ["tiny_1x1", "odd_3x7", "none_6x50", "weight_mean_7x33", "smoothing_weight_mean_9x40",
         "smoothing_weight_sum_9x40", "smoothing_none_6x40", "all_ignored_mean_4x20", "all_ignored_sum_4x20",
         "ignore_index_in_range_8x10"],
        ["vector_input_scalar_target_50", "spatial_2x5x3x4", "strided_9x65", "expanded_rows_5x40", "grad_ones_8x64",
         "neg_inf_8x129", "nan_8x129", "large_logits_8x300", "forward_only_6x50", "empty_rows_0x7",
         "empty_rows_sum_0x7", "empty_classes_all_ignored_3x0"],
    ],
    ids=["options", "shapes_values"],
)
def test_cross_entropy_matches_float64_reference(names, device):
    report = verify_op(SPEC, cases=names, seeds=2, dtypes=(torch.float32, torch.bfloat16), device=device)
    assert report.rows and report.passed, report.summary()


_PATH_CASES = [
    case("split_ragged_2x100", shape=(2, 100), weight=True, label_smoothing=0.2),
    case("split_none_3x129", shape=(3, 129), dist="neg_inf", reduction="none"),
    case("split_nan_3x70", shape=(3, 70), dist="nan", reduction="sum", weight=True),
    case("split_transposed_3x64", shape=(3, 64), layout="transposed", label_smoothing=0.1, reduction="none"),
    case("split_all_ignored_3x40", shape=(3, 40), ignore_frac=1.0),
    case("split_forward_only_3x100", shape=(3, 100), label_smoothing=0.1, weight=True, grad=False),
]


@pytest.mark.parametrize("path", ["split", "online"])
def test_cross_entropy_long_row_paths_match_reference(path, monkeypatch, tunables, device):
    # Force long-row kernels onto short rows: the split kernel (segments of 32 with a ragged
    # last one; under the interpreter its two-launch form, on the GPU the fused one where the
    # programs of a row wait for each other) and the online two-pass kernel (chunks of 32).
    tunables("cross_entropy", ONE_PASS_MAX_N=16, SPLIT_SEG=32, SPLIT_SEG_WEIGHTED=16,
             FWD_SPLIT_MAX_ROWS_PER_SM=10**6, GRAD_SPLIT_MAX_ROWS_PER_SM=10**6)
    if path == "online":
        # As on a GPU with more rows than GRAD/FWD_SPLIT_MAX_ROWS_PER_SM allow to split.
        tunables("cross_entropy", GRAD_SPLIT_MAX_ROWS_PER_SM=0, FWD_SPLIT_MAX_ROWS_PER_SM=0,
                 ONLINE_BLOCK_N=32)
        assert not ce_module._launch_config(100, 4, True).one_pass
    else:
        cfg = ce_module._launch_config(100, 4, True)
        assert cfg.splits > 1 and cfg.BLOCK_N <= 32 and cfg.splits * cfg.BLOCK_N > 100
    used = []
    launch = ce_module.cached_launch
    monkeypatch.setattr(ce_module, "cached_launch",
                        lambda cache, fn, grid, **c: used.append((fn, c)) or launch(cache, fn, grid, **c))
    # float32 and bfloat16 in turn (bfloat16 changes the loads and the interpreter's rounding of
    # the stores alone; the registry-wide test runs every spec case in every dtype).
    cases = [dataclasses.replace(c, dtypes=((torch.float32, torch.bfloat16)[i % 2],)) for i, c in enumerate(_PATH_CASES)]
    report = verify_op(SPEC, cases=cases, seeds=1, device=device)
    assert len(report.rows) == len(cases) and report.passed, report.summary()
    if device.type == "cpu":  # every forward took the path asked for
        split = [c for fn, c in used if fn is ce_module._cross_entropy_split_kernel]
        rows = [c for fn, c in used if fn is ce_module._cross_entropy_fwd_kernel]
        if path == "split":
            assert split and not rows
        else:
            assert rows and not split and not any(c["ONE_PASS"] for c in rows)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"reduction": "sum", "label_smoothing": 0.25},
        {"reduction": "none", "ignore_index": 2},
        {"weight": True, "label_smoothing": 0.1},
        {"weight": True, "reduction": "none", "label_smoothing": 0.7},
    ],
)
def test_cross_entropy_reference_is_torchs_definition(kwargs, device):
    # The float64 reference is written out by hand; it must be F.cross_entropy's definition
    # (weights, ignored rows, mean denominator, label smoothing) for 2-D and K-dimensional input.
    kwargs = dict(kwargs)
    for shape in [(9, 6), (3, 6, 2, 2)]:
        x = _x(shape, device).double()
        t = torch.randint(0, 6, (shape[0],) + shape[2:], generator=torch.Generator().manual_seed(3)).to(device)
        t.view(-1)[::4] = kwargs.get("ignore_index", -100)
        kw = dict(kwargs)
        if kw.pop("weight", False):
            kw["weight"] = torch.rand(6, generator=torch.Generator().manual_seed(4), dtype=torch.float64).to(device) + 0.5
        torch.testing.assert_close(ce_module.cross_entropy_reference(x, t, **kw), F.cross_entropy(x, t, **kw),
                                   rtol=1e-12, atol=1e-12)


def test_cross_entropy_grad_is_written_once_and_scaled_by_grad_output(device):
    x = _x((6, 40), device)
    t = _t(6, 40, device, ignore_every=4)
    for reduction, go in [("mean", torch.tensor(1.0)), ("mean", torch.tensor(-2.5)), ("sum", torch.tensor(0.5)),
                          ("none", torch.linspace(-1.0, 2.0, 6)), ("none", torch.ones(6))]:
        go = go.to(device)
        xa, xb = x.clone().requires_grad_(True), x.double().requires_grad_(True)
        (ga,) = torch.autograd.grad(cross_entropy(xa, t, reduction=reduction, label_smoothing=0.1), xa, go)
        (gb,) = torch.autograd.grad(F.cross_entropy(xb, t, reduction=reduction, label_smoothing=0.1), xb, go.double())
        torch.testing.assert_close(ga.double(), gb, rtol=1e-5, atol=1e-7)
        assert (ga[::4] == 0).all()  # ignored rows


def test_cross_entropy_loss_is_the_same_with_and_without_grad(device):
    x = _x((7, 300), device, dtype=torch.bfloat16)
    t = _t(7, 300, device, ignore_every=3)
    w = _x((300,), device, dtype=torch.bfloat16, seed=2, scale=0.2) + 1.0
    for kw in [{}, {"weight": w, "label_smoothing": 0.3, "reduction": "none"}]:
        with torch.no_grad():
            a = cross_entropy(x, t, **kw)
        b = cross_entropy(x.clone().requires_grad_(True), t, **kw)
        # Same statistics code in both kernels: equal to within one bf16 rounding (bitwise on CPU).
        torch.testing.assert_close(b.detach(), a, rtol=2**-8, atol=0)


def test_cross_entropy_backward_is_single_use(device):
    x = _x((3, 10), device).requires_grad_(True)
    loss = cross_entropy(x, _t(3, 10, device))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_cross_entropy_allocates_no_float32_logit_sized_buffer(monkeypatch, tunables, device):
    # "No (M, C) fp32 intermediate beyond the gradient itself": record every allocation made
    # during a forward+backward, on each kernel path.
    m, c = 4, 100
    seen = []
    for name in ("empty", "zeros", "full", "empty_like"):
        orig = getattr(torch, name)

        def rec(*args, _orig=orig, **kwargs):
            out = _orig(*args, **kwargs)
            seen.append((out.dtype, out.numel()))
            return out

        monkeypatch.setattr(torch, name, rec)
    for one_pass_max in (128, 16):
        tunables("cross_entropy", ONE_PASS_MAX_N=one_pass_max, SPLIT_SEG=32)
        x = _x((m, c), device, dtype=torch.bfloat16).requires_grad_(True)
        seen.clear()
        (g,) = torch.autograd.grad(cross_entropy(x, _t(m, c, device), label_smoothing=0.1), x)
        assert g.dtype == torch.bfloat16
        big = [s for s in seen if s[1] >= m * c]
        assert big == [(torch.bfloat16, m * c)], big  # the gradient, nothing else


def test_cross_entropy_empty_input_returns_torchs_result_without_launch(forbid_launch, tunables, device):
    tunables("cross_entropy", SYNC_TARGET_CHECK=True)  # the IndexError below, on a GPU too
    for name in _KERNELS:
        forbid_launch(ce_module, name)
    if ce_module._ce_smem is not None:
        forbid_launch(ce_module._ce_smem, "_ce_smem_kernel")
    x = torch.empty((0, 7), device=device, requires_grad=True)
    t = torch.empty((0,), dtype=torch.int64, device=device)
    loss = cross_entropy(x, t)
    assert loss.shape == () and math.isnan(loss.item()) and math.isnan(F.cross_entropy(x, t).item())
    (g,) = torch.autograd.grad(loss, x)
    assert g.shape == (0, 7)
    assert cross_entropy(x, t, reduction="sum").item() == 0.0
    assert cross_entropy(x, t, reduction="none").shape == (0,)
    # Zero classes: every target must be ignored; label smoothing gives NaN, as torch.
    x0 = torch.empty((3, 0), device=device)
    t0 = torch.full((3,), -100, device=device)
    assert torch.equal(cross_entropy(x0, t0, reduction="none"), torch.zeros(3, device=device))
    assert torch.isnan(cross_entropy(x0, t0, reduction="sum", label_smoothing=0.1))
    with pytest.raises(IndexError, match="roofkit.cross_entropy"):
        cross_entropy(x0, torch.zeros(3, dtype=torch.int64, device=device))


@pytest.mark.parametrize("bad", [7, -1, 1 << 40])
def test_cross_entropy_out_of_range_target_raises_index_error(bad, tunables, device):
    tunables("cross_entropy", SYNC_TARGET_CHECK=True)  # on a GPU: ROOFKIT_CE_CHECK_TARGETS=1
    x = _x((5, 7), device)
    t = torch.tensor([1, -100, bad, 3, bad], device=device)
    for requires_grad in (False, True):
        with pytest.raises(IndexError) as info:
            cross_entropy(x.clone().requires_grad_(requires_grad), t)
        msg = str(info.value)
        assert "roofkit.cross_entropy" in msg and "target" in msg and "[0, 7)" in msg
        assert "2 do not" in msg and f"position 2: {bad}" in msg


@pytest.mark.gpu
def test_cross_entropy_out_of_range_target_on_gpu_gives_nan_without_waiting(tunables):
    # By default a GPU call never reads back to the host (it captures in a CUDA graph): the
    # out-of-range rows give NaN, the others their loss.
    tunables("cross_entropy", SYNC_TARGET_CHECK=False)
    x = _x((5, 7), "cuda")
    t = torch.tensor([1, -100, 7, 3, -1], device="cuda")
    loss = cross_entropy(x, t, reduction="none")
    assert torch.isnan(loss[[2, 4]]).all() and torch.isfinite(loss[[0, 1, 3]]).all()
    assert torch.isnan(cross_entropy(x, t))
    x0 = torch.empty((3, 0), device="cuda")
    t0 = torch.tensor([-100, 0, -100], device="cuda")
    assert torch.isnan(cross_entropy(x0, t0, reduction="none")).tolist() == [False, True, False]
    assert torch.isnan(cross_entropy(x0, t0, reduction="sum"))


@pytest.mark.parametrize(
    "call,exc,words",
    [
        (lambda d: cross_entropy(torch.ones(2, 3, device=d, dtype=torch.int32), torch.zeros(2, dtype=torch.int64, device=d)), TypeError, ["roofkit.cross_entropy", "input"]),
        (lambda d: cross_entropy(torch.ones(2, 3, device=d), torch.zeros(2, dtype=torch.int32, device=d)), TypeError, ["roofkit.cross_entropy", "target", "int64"]),
        (lambda d: cross_entropy(torch.ones(2, 3, device=d), [0, 1]), TypeError, ["roofkit.cross_entropy", "target", "torch.Tensor"]),
        (lambda d: cross_entropy(torch.ones(2, 3, device=d), torch.zeros(2, 3, device=d)), NotImplementedError, ["roofkit.cross_entropy", "class-probability"]),
        (lambda d: cross_entropy(torch.ones(2, 3, device=d), torch.zeros(2, device=d)), TypeError, ["roofkit.cross_entropy", "target", "int64"]),
        (lambda d: cross_entropy(torch.ones(2, 3, device=d), torch.zeros(3, dtype=torch.int64, device=d)), ValueError, ["roofkit.cross_entropy", "target", "(2,)"]),
        (lambda d: cross_entropy(torch.ones(2, 3, 4, device=d), torch.zeros(2, 3, dtype=torch.int64, device=d)), ValueError, ["roofkit.cross_entropy", "target", "(2, 4)"]),
        (lambda d: cross_entropy(torch.ones(3, device=d), torch.zeros(1, dtype=torch.int64, device=d)), ValueError, ["roofkit.cross_entropy", "target", "()"]),
        (lambda d: cross_entropy(torch.tensor(1.0, device=d), torch.tensor(0, device=d)), ValueError, ["roofkit.cross_entropy", "input", "0-d"]),
        (lambda d: cross_entropy(torch.ones(2, 3, device=d), torch.zeros(2, dtype=torch.int64, device="meta")), ValueError, ["roofkit.cross_entropy", "target", "meta"]),
        (lambda d: cross_entropy(torch.ones(2, 3, device=d), torch.zeros(2, dtype=torch.int64, device=d), torch.ones(4, device=d)), ValueError, ["roofkit.cross_entropy", "weight", "(3,)"]),
        (lambda d: cross_entropy(torch.ones(2, 3, device=d), torch.zeros(2, dtype=torch.int64, device=d), torch.ones(3, device=d, dtype=torch.float16)), TypeError, ["roofkit.cross_entropy", "weight dtype"]),
        (lambda d: cross_entropy(torch.ones(2, 3, device=d), torch.zeros(2, dtype=torch.int64, device=d), ignore_index=1.5), TypeError, ["roofkit.cross_entropy", "ignore_index"]),
        (lambda d: cross_entropy(torch.ones(2, 3, device=d), torch.zeros(2, dtype=torch.int64, device=d), reduction="avg"), ValueError, ["roofkit.cross_entropy", "reduction", "avg"]),
        (lambda d: cross_entropy(torch.ones(2, 3, device=d), torch.zeros(2, dtype=torch.int64, device=d), reduction=None), TypeError, ["roofkit.cross_entropy", "reduction"]),
        (lambda d: cross_entropy(torch.ones(2, 3, device=d), torch.zeros(2, dtype=torch.int64, device=d), label_smoothing=1.5), ValueError, ["roofkit.cross_entropy", "label_smoothing"]),
        (lambda d: cross_entropy(torch.ones(2, 3, device=d), torch.zeros(2, dtype=torch.int64, device=d), label_smoothing="a"), TypeError, ["roofkit.cross_entropy", "label_smoothing"]),
    ],
)
def test_cross_entropy_bad_input_raises_clear_error(call, exc, words, device, raises_naming):
    raises_naming(exc, words, call, device)


def test_cross_entropy_compiles_fullgraph_with_backward(device):
    def fn(x, t, w):
        return cross_entropy(x * 2.0, t, w, label_smoothing=0.1) + cross_entropy(x, t, reduction="none").sum() * 0.5

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    x = _x((6, 40), device).requires_grad_(True)
    t = _t(6, 40, device, ignore_every=3)
    w = _x((40,), device, seed=5, scale=0.1) + 1.0
    out = compiled(x, t, w)
    (gx,) = torch.autograd.grad(out, x)
    x2 = x.detach().clone().requires_grad_(True)
    out2 = F.cross_entropy(x2 * 2.0, t, w, label_smoothing=0.1) + F.cross_entropy(x2, t, reduction="none").sum() * 0.5
    (gx2,) = torch.autograd.grad(out2, x2)
    torch.testing.assert_close(out, out2, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gx, gx2, rtol=1e-4, atol=1e-6)


def test_cross_entropy_cost_counts_one_read_and_one_gradient_write():
    c = case("t", shape=(4, 10))
    assert ce_module.cross_entropy_cost(c, torch.bfloat16).bytes == 40 * 2 + 4 * 8 + 2
    fb = case("t", shape=(4, 10), mode="fwd_bwd", reduction="none", weight=True)
    assert ce_module.cross_entropy_cost(fb, torch.float32).bytes == 2 * 40 * 4 + 4 * 8 + 10 * 4 + 4 * 4
    assert ce_module.cross_entropy_cost(fb, torch.float32).flops == 8 * 40
    k = case("t", shape=(2, 5, 3), label_smoothing=0.1)  # (N, C, d): 6 rows of 5 classes
    assert ce_module.cross_entropy_cost(k, torch.float32).bytes == 30 * 4 + 6 * 8 + 4
    assert ce_module.cross_entropy_cost(k, torch.float32).flops == 6 * 30


def test_cross_entropy_launch_heuristic_paths(tunables):
    lc = ce_module._launch_config  # no device: up to MAX_SPLITS programs per row, one "SM"
    assert lc(4096, 8192, True) == ce_module.Config(True, 1, 4096, 8)
    assert lc(100, 8192, True).BLOCK_M == 16
    # With a gradient and more rows than SMs: the online form (measured faster on the H200).
    assert lc(128256, 8192, True) == ce_module.Config(False, 1, 8192, 16)
    # Split forms, as taken when rows are fewer than the limit allows:
    tunables("cross_entropy", GRAD_SPLIT_MAX_ROWS_PER_SM=10**6)
    assert lc(128256, 8192, True) == ce_module.Config(True, 1, 16384, 32, splits=8)
    assert lc(128256, 8192, True, None, True, True) == ce_module.Config(True, 1, 8192, 16, splits=16)
    assert lc(50257, 16384, True).splits == 4 and lc(262144, 4096, True).splits == 16
    assert lc(8193, 10, True).splits == 2
    # Forward only over many rows: one program streams each row once.
    assert lc(128256, 8192, False) == ce_module.Config(False, 1, 16384, 32)
    assert lc(128256, 8192, False, None, True) == ce_module.Config(False, 1, 8192, 16)
    assert not lc(ce_module.SPLIT_SEG * ce_module.MAX_SPLITS + 1, 8, True).one_pass


def test_cross_entropy_large_logits_keep_their_digits(device):
    # Logits offset by 1e6 (fp32): the loss is (max - x_t) + log(sum exp), not
    # (max + log(sum exp)) - x_t, which would lose ~1e-2 of a loss near 2.
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(4, 8, generator=g) + 1e6).to(device)
    t = torch.tensor([0, 3, 5, 7], device=device)
    ref = F.cross_entropy(x.double(), t, reduction="none")
    got = cross_entropy(x, t, reduction="none")
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-6)
    const = torch.full((1, 7), 1e30, device=device)  # every class equal: log 7, not 0
    assert abs(float(cross_entropy(const, torch.tensor([0], device=device))) - math.log(7)) < 1e-5


def test_cross_entropy_refuses_double_backward_and_weight_grad(device):
    a = torch.randn(4, 5, device=device, requires_grad=True)
    t = torch.tensor([0, 1, 2, 3], device=device)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(cross_entropy(a, t), a, create_graph=True)
    w = torch.rand(5, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="weight"):
        cross_entropy(a, t, weight=w)


# ----------------------------------------------------------------------------- staged-row path


class _FakeLogits:
    """What ``_smem_plan`` reads of a tensor, for checking its rules without a GPU."""

    def __init__(self, shape, dtype=torch.bfloat16, stride=None, ptr=0, device="cuda:0"):
        self.shape = shape
        self.dtype = dtype
        self.device = torch.device(device)
        self._stride = stride or (shape[1], 1)
        self._ptr = ptr

    def stride(self, dim=None):
        return self._stride if dim is None else self._stride[dim]

    def data_ptr(self):
        return self._ptr

    def element_size(self):
        return torch.empty((), dtype=self.dtype).element_size()


@pytest.fixture
def h200_like(monkeypatch, tunables):
    """A device with 132 SMs and 227 KB of shared memory per block, as the H200 reports."""
    if ce_module._ce_smem is None:
        pytest.skip("this Triton has no Gluon: the staged-row kernel is not built")
    monkeypatch.setattr(ce_module, "interpreter_active", lambda: False)
    monkeypatch.setattr(ce_module, "sm_count", lambda device: 132)
    monkeypatch.setattr(ce_module, "shared_memory_limits", lambda index: (232448, 233472))
    monkeypatch.setattr(ce_module.torch.cuda, "get_device_capability", lambda index=None: (9, 0))
    tunables("cross_entropy", SMEM_PATH=True)


def test_cross_entropy_smem_plan_rules(h200_like, monkeypatch, tunables):
    plan = ce_module._smem_plan
    # The acceptance shape: 14 chunks of 8192 classes in shared memory, 2 read twice (10.6 %).
    assert plan(_FakeLogits((8192, 128256)), True, False) == ce_module.SmemPlan(14, 2)
    assert plan(_FakeLogits((8192, 32000), torch.float16), True, False) == ce_module.SmemPlan(4, 0)
    # Each rule refuses on its own.
    refused = [
        (_FakeLogits((8192, 128256)), False, False),  # no gradient: the forward reads once already
        (_FakeLogits((8192, 128256)), True, True),  # class weights
        (_FakeLogits((8192, 128256), torch.float32), True, False),  # 32-bit rows do not fit
        (_FakeLogits((8192, 50257)), True, False),  # rows not a multiple of 8 classes
        (_FakeLogits((8192, 128256), stride=(128264, 2)), True, False),  # class stride 2
        (_FakeLogits((8192, 128256), stride=(128260, 1)), True, False),  # row stride breaks 16-byte alignment
        (_FakeLogits((8192, 128256), ptr=8), True, False),  # misaligned base
        (_FakeLogits((8192, 8192)), True, False),  # fits one program's registers: row-block kernel
        (_FakeLogits((131, 128256)), True, False),  # fewer rows than SMs: split rows
        (_FakeLogits((8192, 262144)), True, False),  # over a quarter of the row past shared memory
        (_FakeLogits((8192, 128256), device="cpu"), True, False),
    ]
    for x, grad, weight in refused:
        assert plan(x, grad, weight) is None, (x.shape, x.dtype, x.stride(), x.data_ptr(), x.device)
    monkeypatch.setattr(ce_module.torch.cuda, "get_device_capability", lambda index=None: (7, 5))
    assert plan(_FakeLogits((8192, 128256)), True, False) is None  # no cp.async before sm_80
    monkeypatch.setattr(ce_module.torch.cuda, "get_device_capability", lambda index=None: (9, 0))
    tunables("cross_entropy", SMEM_PATH=False)
    assert plan(_FakeLogits((8192, 128256)), True, False) is None  # ROOFKIT_CE_SMEM=0


def test_cross_entropy_smem_grouping():
    if ce_module._ce_smem is None:
        pytest.skip("this Triton has no Gluon: the staged-row kernel is not built")
    assert ce_module._smem_grouping(14) == (7, 1)  # two groups of half the chunks, lag 1
    assert ce_module._smem_grouping(4) == (2, 1)
    assert ce_module._smem_grouping(7) == (1, 2)  # odd: groups of one chunk
    assert ce_module._smem_grouping(1) == (1, 1)


def test_cross_entropy_smem_kernel_that_does_not_build_falls_back_with_a_warning(monkeypatch):
    # Gluon moves between Triton releases: a build failure must not fail the call, only turn
    # the staged-row kernel off for that specialization (warned once) so the caller takes the
    # Triton kernels.
    if ce_module._ce_smem is None:
        pytest.skip("this Triton has no Gluon: the staged-row kernel is not built")
    attempts = []

    class Broken:
        def warmup(self, *args, **kwargs):
            attempts.append(kwargs["NR"])
            raise RuntimeError("async_copy_global_to_shared has been removed")

        def __getitem__(self, grid):
            raise AssertionError("launched a kernel that did not build")

    monkeypatch.setattr(ce_module._ce_smem, "_ce_smem_kernel", Broken())
    monkeypatch.setattr(ce_module, "_SMEM_FAILED", set())
    monkeypatch.setattr(ce_module, "_SMEM_PROGRAMS_PER_SM", {})
    x = torch.empty(8, 16, dtype=torch.bfloat16)
    args = (x, torch.zeros(8, dtype=torch.int64), None, torch.empty(8), x, 8, 16, 16, 1, -100, 0.0)
    plan = ce_module.SmemPlan(1, 0)
    with pytest.warns(RuntimeWarning, match="staged-row kernel did not build"):
        assert ce_module._smem_launch(plan, args, dict(SMOOTH=False, MEAN=True), 8, torch.device("cuda", 0)) is False
    assert ce_module._smem_launch(plan, args, dict(SMOOTH=False, MEAN=True), 8, torch.device("cuda", 0)) is False
    assert attempts == [1]  # built (and warned) once per specialization


_COMPILE_SMEM_KERNEL = r"""
import importlib, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
ce = importlib.import_module("roofkit.ops.cross_entropy")
k = ce._ce_smem
out = []
for c, smooth, mode in json.loads(sys.argv[1]):
    nch = triton.cdiv(c, k.CH)
    nr = min(nch, (232448 - ce.SMEM_RESERVE) // (k.CH * 2))
    group, lag = ce._smem_grouping(nr)
    sig = {"x_ptr": "*bf16", "t_ptr": "*i64", "scal_ptr": "*fp32", "loss_ptr": "*fp32", "grad_ptr": "*bf16",
           "M": "i32", "C": "i32", "stride_xm": "i32", "stride_t": "i32", "ignore_index": "i64",
           "label_smoothing": "fp32"}
    consts = {"SMOOTH": smooth, "MEAN": mode == 0, "MODE": mode, "CH": k.CH, "VEC": k.VEC, "NR": nr, "NT": nch - nr,
              "NUM_WARPS": k.NUM_WARPS, "GROUP": group, "LAG": lag, "LOG2E": k.LOG2E, "LN2": k.LN2}
    sig.update({name: "constexpr" for name in consts})
    attrs = {(0,): [["tt.divisibility", 16]], (4,): [["tt.divisibility", 16]]}
    compiled = triton.compile(GluonASTSource(k._ce_smem_kernel, sig, consts, attrs),
                              target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": k.NUM_WARPS, "enable_fp_fusion": False})
    ptx = compiled.asm["ptx"]
    out.append({"c": c, "mode": mode, "resident_bytes": nr * k.CH * 2, "shared": compiled.metadata.shared,
                "cp_async_16": "cp.async.cg.shared.global" in ptx and ", 0x10," in ptx,
                "ex2_ftz": "ex2.approx.ftz.f32" in ptx})
print(json.dumps(out))
"""


def test_cross_entropy_smem_kernel_compiles_for_sm90_within_its_shared_memory(tmp_path):
    # No GPU needed: the Gluon kernel compiled for sm_90 by Triton's bundled ptxas, with the
    # launcher's grouping, in a fresh process (the test process runs the interpreter, which
    # cannot build Gluon) and a fresh cache. The shared memory it asks for must stay inside
    # what the plan counted (resident chunks + SMEM_RESERVE), and its copies must be 16-byte
    # cp.async.
    if ce_module._ce_smem is None:
        pytest.skip("this Triton has no Gluon: the staged-row kernel is not built")
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    src = str(pathlib.Path(ce_module.__file__).resolve().parents[2])  # the directory holding roofkit/
    env["PYTHONPATH"] = os.pathsep.join(p for p in [src, env.get("PYTHONPATH", "")] if p)
    # (classes, label smoothing, MODE: 0 cross-entropy, 1 softmax, 2 log_softmax)
    configs = [[128256, False, 0], [32000, True, 0], [9000, False, 0], [128256, False, 1], [128256, False, 2]]
    run = subprocess.run([sys.executable, "-c", _COMPILE_SMEM_KERNEL, json.dumps(configs)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])
    assert [(r["c"], r["mode"]) for r in results] == [(c, mode) for c, _, mode in configs]
    for r in results:
        assert r["resident_bytes"] <= r["shared"] <= r["resident_bytes"] + ce_module.SMEM_RESERVE, r
        assert r["cp_async_16"] and r["ex2_ftz"], r


@pytest.mark.gpu
def test_cross_entropy_smem_path_is_taken_and_matches_the_online_path(tunables):
    # The acceptance shape's rows take the staged-row kernel on a GPU like the H200 (the plan
    # read from the device), and it agrees with the online two-pass kernel row by row.
    x = (3 * torch.randn(264, 128256, device="cuda")).to(torch.bfloat16).requires_grad_(True)
    t = torch.randint(0, 128256, (264,), device="cuda")
    t[::7] = -100
    assert ce_module._smem_plan(x.detach(), True, False) is not None
    out = {}
    for smem in (True, False):
        tunables("cross_entropy", SMEM_PATH=smem)
        loss = cross_entropy(x, t, reduction="none", label_smoothing=0.1)
        out[smem] = (loss.float(), torch.autograd.grad(loss.sum(), x)[0].float())
    torch.testing.assert_close(out[True][0], out[False][0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[True][1], out[False][1], rtol=2e-2, atol=1e-7)
    # It was built and launched, not quietly replaced by the fallback.
    assert ce_module._SMEM_PROGRAMS_PER_SM and not ce_module._SMEM_FAILED


@pytest.mark.gpu
def test_cross_entropy_smem_path_keeps_confident_rows_exact():
    # Rows whose target holds nearly all the probability (1 - p_t ~ 1e-5): the target's gradient
    # a * (p_t - 1) cancels, so the row's sum of exponentials must be right to ~1e-7 relative.
    # An FMA-fused rescale (alpha = 2**(m*log2e - fl(m*log2e)) != 1 for an unchanged maximum,
    # once per chunk) put it off by 1e-5 and the target's gradient by 30 % (hostile review).
    g = torch.Generator(device="cuda").manual_seed(5)
    m, c = 264, 128256
    x = 3 * torch.randn(m, c, device="cuda", generator=g)
    t = torch.randint(0, c, (m,), device="cuda", generator=g)
    x[torch.arange(m), t] = x.max(dim=1).values + 14.0  # the target leads by 14
    x = x.to(torch.bfloat16)
    assert ce_module._smem_plan(x, True, False) is not None
    xg = x.clone().requires_grad_(True)
    loss = cross_entropy(xg, t, reduction="none")
    (grad,) = torch.autograd.grad(loss.sum(), xg)
    x64 = x.double().requires_grad_(True)
    ref = F.cross_entropy(x64, t, reduction="none")
    (ref_grad,) = torch.autograd.grad(ref.sum(), x64)
    rows = torch.arange(m, device="cuda")
    g_t, r_t = grad[rows, t].double(), ref_grad[rows, t]
    assert (r_t < 0).all()
    # Bound: a few float32 units of p_t ~ 1 (the exponential and the division are the SFU's
    # approximations, ~2**-22 relative each): 5e-7 absolute on values of 1e-5 - 4e-5.
    err = (g_t - r_t).abs()
    assert (err <= 5e-7 + 0.02 * r_t.abs()).all(), err.max()
    # The loss (~1e-5 per row) to a few ulp of float32 log-sum-exp, not ~|max| * 2**-24 off.
    assert ((loss.double() - ref).abs() <= 1e-6 + 0.02 * ref.abs()).all(), (loss.double() - ref).abs().max()
