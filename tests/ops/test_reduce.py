"""sum / mean / amax properties the registry-wide test cannot state."""

import dataclasses
import importlib
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from roofkit.harness.spec import case
from roofkit.harness.verify import verify_op
from roofkit.ops.reduce import AMAX_SPEC, MEAN_SPEC, SPECS, SUM_SPEC, amax, mean, sum

reduce_module = importlib.import_module("roofkit.ops.reduce")

pytestmark = pytest.mark.reduce

_SPEC_BY_NAME = {s.name: s for s in SPECS}


def _x(shape, device, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(device=device, dtype=dtype)


# (Every registry case, in every dtype with three seeds: tests/test_ops_generic.py.)


# Cases that, with 256-byte tiles, split the reduced axis (rows and columns), leave ragged tails
# and put NaN / inf / ties across split boundaries. Some spec cases reshaped (their own shapes run
# in the registry-wide test): 3 rows where rows split (8 rows are already as many row blocks as
# a 2-CPU machine's 8-program target: no split), a reduced middle dimension of 20 or 18 (a
# column tile holds 8), rows of 700 (11 tiles: 6 programs of at most 2 tiles a row).
_SPLIT_CASES = {"full_781": None, "full_2d_37x41": None, "rows_long_3x5000": (3, 700), "cols_33x16": None,
                "middle_4x5x6": (2, 20, 6), "outer_two_dims_2x3x40": (6, 3, 8), "transposed_full_16x33": None,
                "nan_8x129": (3, 129), "nan_cols_70x6": None, "neg_inf_8x129": (3, 129), "ties_cols_40x9": None,
                "large_magnitude_8x300": (3, 300)}


def _split_cases(spec):
    out = []
    for name, shape in _SPLIT_CASES.items():
        c = spec.case(name)
        if shape is not None:
            new_name = f"{name.rsplit('_', 1)[0]}_{'x'.join(map(str, shape))}"
            c = dataclasses.replace(c, name=new_name, params={**c.params, "shape": shape})
        out.append(c)
    return out


@pytest.mark.parametrize("name", ["sum", "mean", "amax"])
def test_reduce_split_paths_match_reference(name, monkeypatch, tunables, device):
    tunables("sum", TILE_BYTES=256, COL_SEGMENT_BYTES=32, MAX_CHUNKS_PER_PROGRAM=2)
    rows = reduce_module._rows_config(1, 781, 4, device)
    cols = reduce_module._cols_config(1, 33, 16, 4, device)
    assert rows.splits > 1 and rows.chunks_per_split * rows.splits >= math.ceil(781 / rows.BLOCK_N)
    assert cols.splits > 1
    spec = _SPEC_BY_NAME[name]
    partial = []
    launch = reduce_module.cached_launch
    monkeypatch.setattr(reduce_module, "cached_launch",
                        lambda cache, fn, grid, **c: partial.append(c.get("PARTIAL", False)) or launch(cache, fn, grid, **c))
    cases = _split_cases(spec)
    if name == "mean":
        # mean is sum with a division in the final (combining) launch: the row and column splits,
        # a divisor over two dims and NaN / -inf through it suffice.
        kept = ("full_2d_37x41", "rows_long_3x700", "cols_33x16", "outer_two_dims_6x3x8", "nan_3x129", "neg_inf_3x129")
        cases = [c for c in cases if c.name in kept]
        assert len(cases) == len(kept)
    for i, c in enumerate(cases):
        # mean: float32 suffices for it. sum and amax take float32 and bfloat16 in turn
        # (bfloat16 changes the loads and the final store alone; the registry-wide test runs
        # every case in every dtype).
        turn = [d for d in spec.case_dtypes(c) if d in (torch.float32, torch.bfloat16)]
        dtypes = (torch.float32,) if name == "mean" else (turn[i % len(turn)],)
        partial.clear()
        report = verify_op(spec, cases=[c], seeds=1, dtypes=dtypes, device=device)
        assert report.rows and report.passed, report.summary()
        assert any(partial), f"{c.name}: the reduced axis was not split"


def test_reduce_launch_heuristic_on_an_h200_sized_device(monkeypatch):
    monkeypatch.setattr(reduce_module, "sm_count", lambda device: 132)
    dev = torch.device("cuda")
    # 256Mi fp32, full: 16 KiB tiles, many short programs (16 tiles each), then one combine.
    cfg = reduce_module._rows_config(1, 1 << 28, 4, dev)
    assert (cfg.BLOCK_M, cfg.BLOCK_N, cfg.num_warps) == (1, 4096, 8)
    assert cfg.chunks_per_split == 16 and cfg.splits == 4096
    # bf16 logits rows: enough rows to fill the GPU, no split.
    cfg = reduce_module._rows_config(8192, 128256, 2, dev)
    assert (cfg.BLOCK_N, cfg.splits) == (8192, 1)
    # Short rows share a tile.
    cfg = reduce_module._rows_config(65536, 128, 4, dev)
    assert (cfg.BLOCK_M, cfg.BLOCK_N, cfg.splits) == (32, 128, 1)
    # Mean over the sequence of (4, 8192, 4096) bf16: 128 column blocks of 128 (256-byte
    # segments), each split into 8 runs of 16 tiles of 64 rows.
    cfg = reduce_module._cols_config(4, 8192, 4096, 2, dev)
    assert (cfg.BLOCK_M, cfg.BLOCK_N, cfg.splits, cfg.chunks_per_split) == (128, 64, 8, 16)


def test_reduce_int64_offsets_for_more_than_2pow31_elements(monkeypatch, device):
    launches = []

    class Recorder:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                launches.append((grid, args, kwargs))
            return launch

    monkeypatch.setattr(reduce_module, "_reduce_rows_kernel", Recorder())
    monkeypatch.setattr(reduce_module, "sm_count", lambda device: 132)
    src = torch.empty(16, dtype=torch.bfloat16, device=device)  # never read: the kernel is recorded
    out = torch.empty(1, dtype=torch.bfloat16, device=device)
    n = 2**31 + 17
    reduce_module._launch_rows(src, out, 1, n, n, False, 1.0, device)
    (grid1, args1, kw1), (grid2, args2, kw2) = launches
    assert kw1["USE_INT64"] and kw1["PARTIAL"] and args1[4] == 0  # one row: stride 0
    splits = args1[5]
    assert grid1 == (splits,) and splits * args1[6] * kw1["BLOCK_N"] >= n
    assert not kw2["USE_INT64"] and not kw2["PARTIAL"] and args2[3] == splits
    launches.clear()
    reduce_module._launch_rows(src, out, 1, 781, 781, False, 1.0, device)
    assert not launches[0][2]["USE_INT64"]


def test_reduce_layout_avoids_copies_for_permuted_inputs(device):
    x = _x((16, 33), device).t()  # a transposed layout: dense, no copy
    src, outer, n, inner, kept = reduce_module._layout(x, {1})
    assert src.data_ptr() == x.data_ptr() and (outer, n, inner) == (1, 16, 33) and kept == [0]
    src, outer, n, inner, _ = reduce_module._layout(x, {0, 1})
    assert src.data_ptr() == x.data_ptr() and (outer, n, inner) == (1, 16 * 33, 1)
    y = _x((4, 5, 6), device)
    src, outer, n, inner, kept = reduce_module._layout(y, {0, 2})  # reduced dims apart: one copy
    assert src.data_ptr() != y.data_ptr() and (outer, n, inner) == (5, 24, 1) and kept == [1]
    z = _x((9, 130), device)[:, ::2]  # not dense: one copy
    src, *_ = reduce_module._layout(z, {1})
    assert src.is_contiguous() and src.data_ptr() != z.data_ptr()


def test_amax_propagates_nan_like_torch(tunables, device):
    tunables("sum", TILE_BYTES=64)  # NaN inside a split, away from the ends
    x = _x((3, 300), device)
    x[1, 150] = float("nan")
    x[2, 7] = float("inf")
    y = amax(x, dim=1)
    assert torch.isnan(y[1]) and y[2] == float("inf") and torch.isfinite(y[0])
    assert torch.isnan(amax(x))
    assert torch.isnan(amax(x.t().contiguous(), dim=0)[1])  # column path
    assert torch.isnan(sum(x, dim=1)[1]) and torch.isnan(mean(x)[()])
    assert torch.isnan(torch.amax(x, dim=1)[1])  # the behaviour we mirror


def test_amax_gradient_is_shared_among_ties(device):
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0], [5.0, 0.0, 5.0, 5.0]], device=device, requires_grad=True)
    y = amax(x, dim=1)
    (g,) = torch.autograd.grad(y, x, torch.tensor([1.0, 3.0], device=device))
    torch.testing.assert_close(g, torch.tensor([[0.0, 0.5, 0.5, 0.0], [1.0, 0.0, 1.0, 1.0]], device=device))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("path", ["kernel", "torch ops"])
def test_amax_backward_matches_torch_on_both_paths(dtype, path, tunables, device, monkeypatch):
    # amax's backward over trailing dims of a contiguous input runs its own kernel when rows are
    # many (AMAX_BWD_MIN_ROWS_PER_SM); else torch's ops. Both must give torch's gradient exactly:
    # ties share it, a NaN row is NaN everywhere (no element equals its NaN maximum), a row of
    # -inf shares it among all, keepdim and an expanded (stride-0) output gradient included.
    launches = {}
    monkeypatch.setattr(reduce_module, "_LAUNCHES", launches)
    tunables("amax", AMAX_BWD_MIN_ROWS_PER_SM=0 if path == "kernel" else 10**9)
    x = _x((6, 3, 40), device).to(dtype)
    x[0, 0, ::3] = x[0, 0].max()  # ties
    x[1, 1, 7] = math.nan
    x[2, 2] = -math.inf
    x[3, 0, 5] = math.inf
    cases = [(x, (2,), False, None), (x, (1, 2), True, None), (x, (2,), False, "expanded"),
             # rows of ties past what a 16-bit count holds exactly (torch divides by the rounded count)
             (torch.zeros(2, 2049, device=device, dtype=dtype), (1,), False, None),
             (torch.zeros(2, 257, device=device, dtype=dtype), (1,), False, 3.0)]
    for x, dims, keepdim, dy in cases:
        xr = x.clone().requires_grad_(True)
        xt = x.clone().requires_grad_(True)
        y, yt = amax(xr, dim=dims, keepdim=keepdim), torch.amax(xt, dim=dims, keepdim=keepdim)
        g = (torch.randn(yt.shape, generator=torch.Generator().manual_seed(3)).to(device=device, dtype=dtype)
             if dy is None else torch.ones((), device=device, dtype=dtype).expand(yt.shape) if dy == "expanded"
             else torch.full(yt.shape, dy, device=device, dtype=dtype))
        (got,) = torch.autograd.grad(y, xr, g)
        (want,) = torch.autograd.grad(yt, xt, g)
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    kernels = {key[0] for key in launches}
    assert (reduce_module._amax_bwd_rows_kernel in kernels) == (path == "kernel")


def test_amax_backward_kernel_rows_rule(tunables, device):
    # Which inputs the backward's kernel takes: the trailing dims of a contiguous input, rows
    # enough per SM.
    tunables("amax", AMAX_BWD_MIN_ROWS_PER_SM=0)
    x = _x((5, 33), device)
    assert reduce_module._amax_bwd_rows(x, [1]) == (5, 33)
    assert reduce_module._amax_bwd_rows(x.view(5, 3, 11), [1, 2]) == (5, 33)
    assert reduce_module._amax_bwd_rows(x.t(), [1]) is None  # not contiguous
    assert reduce_module._amax_bwd_rows(x, [0]) is None  # not the trailing dims
    tunables("amax", AMAX_BWD_MIN_ROWS_PER_SM=10**9)
    assert reduce_module._amax_bwd_rows(x, [1]) is None  # too few rows


def test_sum_mean_gradients_are_broadcasts(device):
    x = _x((3, 4, 5), device).requires_grad_(True)
    dy = _x((3, 5), device, seed=1)
    (gs,) = torch.autograd.grad(sum(x, dim=1), x, dy)
    (gm,) = torch.autograd.grad(mean(x, dim=1), x, dy)
    torch.testing.assert_close(gs, dy[:, None, :].expand(3, 4, 5))
    torch.testing.assert_close(gm, dy[:, None, :].expand(3, 4, 5) / 4)
    xh = _x((6, 7), device, dtype=torch.float16).requires_grad_(True)
    (gh,) = torch.autograd.grad(sum(xh, dtype=torch.float32), xh)
    assert gh.dtype == torch.float16 and bool((gh == 1).all())


def test_reduce_empty_inputs_follow_torch_without_launch(forbid_launch, device):
    forbid_launch(reduce_module, "_reduce_rows_kernel")
    forbid_launch(reduce_module, "_reduce_cols_kernel")
    e = torch.empty((0, 7), device=device)
    assert torch.equal(sum(e, dim=0), torch.zeros(7, device=device))
    assert torch.isnan(mean(e, dim=0)).all() and mean(e, dim=0).shape == (7,)
    assert sum(e).item() == 0.0 and math.isnan(mean(e).item())
    assert sum(e, dim=1).shape == (0,) and amax(e, dim=1).shape == (0,)
    assert sum(e, dim=0, keepdim=True).shape == (1, 7)
    for call in (lambda: amax(e, dim=0), lambda: amax(e)):
        with pytest.raises(IndexError, match=r"roofkit\.amax: reduced dim 0"):
            call()
    with pytest.raises(IndexError):
        torch.amax(e, dim=0)  # torch raises too


def test_reduce_scalar_and_dim_forms_like_torch(device):
    x = _x((2, 3, 4), device)
    for dim in (None, (), 1, -1, (0, 2), [2, 0], torch.Size([1])):
        for keepdim in (False, True):
            want = torch.sum(x.double(), dim=dim, keepdim=keepdim)
            got = sum(x, dim=dim, keepdim=keepdim)
            assert got.shape == want.shape and got.is_contiguous()
            torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    s = torch.tensor(2.5, device=device)
    assert sum(s).shape == () and sum(s, dim=0, keepdim=True).item() == 2.5
    assert amax(s, dim=-1).item() == 2.5 and mean(s).item() == 2.5


def test_reduce_permuted_input_gives_contiguous_output(device):
    base = _x((5, 3, 4), device)
    x = base.permute(1, 2, 0)  # shape (3, 4, 5), memory order (2, 0, 1)
    for dim in (1, (0,), 2):
        got = amax(x, dim=dim)
        assert got.is_contiguous()
        torch.testing.assert_close(got, torch.amax(x, dim=dim))


def test_reduce_dtype_argument(device):
    x = _x((4, 50), device, dtype=torch.float16)
    y = sum(x, dim=-1, dtype=torch.float32)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, torch.sum(x.double(), -1).float(), rtol=1e-5, atol=1e-5)
    xd = _x((3, 20), device).double()
    yd = mean(xd, dim=1, dtype=torch.float32)  # float64 input, cast first as torch does
    assert yd.dtype == torch.float32
    torch.testing.assert_close(yd, torch.mean(xd, 1, dtype=torch.float32), rtol=1e-5, atol=1e-6)
    xi = torch.arange(12, device=device).view(3, 4)
    torch.testing.assert_close(sum(xi, dim=1, dtype=torch.float32), torch.tensor([6.0, 22.0, 38.0], device=device))


def test_sum_bf16_rounds_once_from_float32(device):
    # 2500 ones and 500 halves: exact in float32; 3250 rounds once to 3248 in bf16 (spacing 16).
    # A bf16 running sum would stall at 256 (1 is below half its spacing there).
    x = torch.ones(3000, device=device, dtype=torch.bfloat16)
    x[::6] = 1.5
    got = sum(x)
    assert got.dtype == torch.bfloat16 and got.item() == 3248.0
    rows = x.view(3, 1000)
    assert torch.equal(mean(rows, dim=1), torch.mean(rows.double(), dim=1).to(torch.bfloat16))


@settings(max_examples=12, deadline=None)
@given(
    shape=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    data=st.data(),
    keepdim=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_reduce_any_dims_match_float64(shape, data, keepdim, seed):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dims = data.draw(st.lists(st.integers(0, len(shape) - 1), unique=True, max_size=len(shape)))
    x = _x(tuple(shape), device, seed=seed)
    if data.draw(st.booleans()) and x.dim() >= 2:
        x = x.transpose(0, -1)
    ref = x.double()
    torch.testing.assert_close(sum(x, dim=dims, keepdim=keepdim).double(), torch.sum(ref, dim=dims, keepdim=keepdim),
                               rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mean(x, dim=dims, keepdim=keepdim).double(), torch.mean(ref, dim=dims, keepdim=keepdim),
                               rtol=1e-5, atol=1e-6)
    assert torch.equal(amax(x, dim=dims, keepdim=keepdim), torch.amax(x, dim=dims, keepdim=keepdim))


@pytest.mark.parametrize(
    "call,exc,words",
    [
        (lambda d: sum(torch.arange(6, device=d).view(2, 3)), TypeError, ["roofkit.sum", "input", "int64"]),
        (lambda d: mean(torch.arange(6, device=d)), TypeError, ["roofkit.mean", "input", "int64"]),
        (lambda d: amax(torch.ones(3, device=d, dtype=torch.float64)), TypeError, ["roofkit.amax", "float64"]),
        (lambda d: sum([1.0, 2.0]), TypeError, ["roofkit.sum", "input", "torch.Tensor"]),
        (lambda d: sum(torch.ones(2, 3, device=d), dim=2), IndexError, ["roofkit.sum", "dim 2", "out of range"]),
        (lambda d: amax(torch.ones(2, 3, device=d), dim=(0, -3)), IndexError, ["roofkit.amax", "dim -3"]),
        (lambda d: mean(torch.ones(2, 3, device=d), dim=(1, -1)), ValueError, ["roofkit.mean", "more than once"]),
        (lambda d: sum(torch.ones(2, 3, device=d), dim=1.0), TypeError, ["roofkit.sum", "dim"]),
        (lambda d: sum(torch.ones(2, 3, device=d), dim=True), TypeError, ["roofkit.sum", "dim", "bool"]),
        (lambda d: amax(torch.ones(2, 3, device=d), keepdim=1), TypeError, ["roofkit.amax", "keepdim"]),
        (lambda d: sum(torch.ones(2, 3, device=d), dtype=torch.int32), TypeError, ["roofkit.sum", "dtype"]),
        (lambda d: mean(torch.ones(2, 3, device=d), dtype=torch.float64), TypeError, ["roofkit.mean", "dtype"]),
    ],
)
def test_reduce_bad_input_raises_clear_error(call, exc, words, device, raises_naming):
    raises_naming(exc, words, call, device)


def test_reduce_cpu_tensor_without_interpreter_is_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match=r"roofkit\.sum: input is on cpu"):
        sum(torch.ones(2, 3))


@pytest.mark.parametrize("op,ref", [(sum, torch.sum), (mean, torch.mean), (amax, torch.amax)])
def test_reduce_compiles_fullgraph_with_backward(op, ref, device):
    def fn(x):
        return op(x * 2.0, dim=1) + op(x, dim=(0, 2), keepdim=True).sum()

    def fn_ref(x):
        return ref(x * 2.0, dim=1) + ref(x, dim=(0, 2), keepdim=True).sum()

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    x = _x((3, 5, 6), device)
    x[0, 2, 3] = x[0, 1, 3]  # a tie for amax
    x = x.requires_grad_(True)
    out = compiled(x)
    (gx,) = torch.autograd.grad(out, x, torch.ones_like(out))
    x2 = x.detach().clone().requires_grad_(True)
    out2 = fn_ref(x2)
    (gx2,) = torch.autograd.grad(out2, x2, torch.ones_like(out2))
    torch.testing.assert_close(out, out2, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gx, gx2, rtol=1e-5, atol=1e-5)


def test_reduce_cost_counts_one_read_one_write():
    c = case("t", shape=(4, 8), dim=-1)
    assert reduce_module.reduce_cost(c, torch.float32).bytes == 32 * 4 + 4 * 4
    assert reduce_module.reduce_cost(c, torch.bfloat16).bytes == 32 * 2 + 4 * 2
    assert reduce_module.reduce_cost(c, torch.float32).flops == 32
    full = case("t", shape=(1 << 28,))
    assert reduce_module.reduce_cost(full, torch.float32).bytes == (1 << 30) + 4
    cast = case("t", shape=(4, 8), dim=(0, 1), keepdim=True, out_dtype="float32")
    assert reduce_module.reduce_cost(cast, torch.float16).bytes == 32 * 2 + 1 * 4
    assert reduce_module._reduction_length(case("t", shape=(3, 4, 5), dim=(0, 2))) == 15
    fb = case("t", shape=(4, 8), dim=-1, mode="fwd_bwd")  # amax: + read x, dy; write dx
    assert reduce_module.reduce_cost(fb, torch.bfloat16).bytes == (32 + 4) * 2 + (2 * 32 + 4) * 2
    assert reduce_module.reduce_cost(fb, torch.bfloat16).flops == 3 * 32


def test_reduce_specs_declare_what_the_harness_needs():
    for spec in (SUM_SPEC, MEAN_SPEC, AMAX_SPEC):
        assert spec.suites.get("llama3-8b") and spec.suites.get("acceptance")
        assert {"torch", "torch.compile", "flaggems"} <= set(spec.baselines)
        names = [c.name for c in spec.cases]
        assert len(names) == len(set(names))
        assert any("gpu" in c.tags for c in spec.cases)
        assert any(0 in c["shape"] for c in spec.cases)
        big = spec.case("gpu_over_2pow31_elements")
        assert {"gpu", "slow"} <= big.tags and math.prod(big["shape"]) == 2**31 + 17
    accept = {c.name: c for c in SUM_SPEC.suites["acceptance"]}
    assert accept["full_256Mi_fp32"]["shape"] == (1 << 28,)
