"""scatter_add / index_add properties the registry-wide test cannot state."""

import contextlib
import importlib

import pytest
import torch

from roofkit.harness.spec import case
from roofkit.harness.verify import verify_op
from roofkit.ops.scatter import (
    INDEX_ADD_SPEC,
    SCATTER_ADD_SPEC,
    index_add,
    index_add_cost,
    scatter_add,
    scatter_add_cost,
)

# The package's launch submodule: tests patch the launch settings (SORTED_TILE, UNROLL,
# SPLIT_MIN), ``_use_int64`` and kernel names on it (the module whose launchers read them), and
# call its canonical-form and config helpers.
launch = importlib.import_module("roofkit.ops.scatter._launch")

pytestmark = pytest.mark.scatter

_KERNELS = ("_scatter_add_atomic_kernel", "_scatter_add_sorted_kernel", "_scatter_gather_kernel", "_index_range_kernel")


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _randn(shape, device, dtype=torch.float32, seed=0):
    return torch.randn(shape, generator=_gen(seed)).to(device=device, dtype=dtype)


# (Every registry case, in every dtype with three seeds: tests/test_ops_generic.py.)


def test_scatter_add_tmp_path_4d_matches_torch(device):
    # index smaller than input in two leading dimensions: the destinations cannot be viewed as
    # (outer, N, W), so both paths compute into a contiguous stand-in and copy it back.
    x = _randn((3, 4, 5, 6), device)
    idx = torch.randint(0, 5, (2, 3, 7, 6), generator=_gen(1)).to(device)
    src = _randn((2, 3, 7, 6), device, seed=2)
    c = launch._canonical(x, 2, idx, src, False)
    assert launch._as3(launch._restrict(x, c.space, 2, True), c.outer, c.N, c.W) is None
    want = torch.scatter_add(x.double(), 2, idx, src.double())
    for det in (False, True):
        got = scatter_add(x, 2, idx, src, deterministic=det)
        torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-6)


def test_scatter_add_grad_src_is_zero_outside_index_extent(device):
    # torch refuses this backward (index smaller than src); roofkit returns src's shape with
    # the gathered gradient under index and zeros elsewhere (the 4-d layout takes the stand-in path).
    x = _randn((3, 4, 5, 6), device).requires_grad_(True)
    idx = torch.randint(0, 5, (2, 3, 7, 6), generator=_gen(3)).to(device)
    src = _randn((3, 4, 9, 6), device, seed=4).requires_grad_(True)
    out = scatter_add(x, 2, idx, src)
    dy = _randn(out.shape, device, seed=5)
    gx, gs = torch.autograd.grad(out, (x, src), dy)
    assert torch.equal(gx, dy)
    want = torch.zeros_like(src)
    want[:2, :3, :7, :6] = dy[:2, :3].gather(2, idx)
    assert torch.equal(gs, want)


def _sequential_fp32(x, dim, idx, src, alpha=1.0):
    """The deterministic path's promised order: per destination, a float32 sum of its
    contributions in index order starting from 0, then one add to input and one rounding."""
    xs = x.float().movedim(dim, 0).clone()
    acc = torch.zeros_like(xs)
    touched = torch.zeros(xs.shape[0], dtype=torch.bool)
    s = src.float().movedim(dim, 0)
    for l, d in enumerate(idx.tolist()):
        acc[d] += s[l]
        touched[d] = True
    y = torch.where(touched.view(-1, *([1] * (xs.dim() - 1))), xs + acc * alpha, xs)
    return y.movedim(0, dim).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_index_add_deterministic_is_bitwise_reproducible_and_in_index_order(dtype, tunables, device):
    x = _randn((6, 5), device, dtype)
    idx = torch.randint(0, 6, (200,), generator=_gen(7)).to(device)
    idx[:50] = 2  # a hot destination
    src = _randn((200, 5), device, dtype, seed=8) * 100
    bits = torch.int32 if dtype == torch.float32 else torch.int16
    first = index_add(x, 0, idx, src, alpha=0.5, deterministic=True)
    for _ in range(2):
        again = index_add(x, 0, idx, src, alpha=0.5, deterministic=True)
        assert torch.equal(again.view(bits), first.view(bits))
    assert torch.equal(first, _sequential_fp32(x.cpu(), 0, idx.cpu(), src.cpu(), 0.5).to(device))
    # The order is fixed by the sort, not by the launch: other tiles give the same bits.
    tunables("scatter_add", SORTED_TILE=16, UNROLL=1)
    assert torch.equal(index_add(x, 0, idx, src, alpha=0.5, deterministic=True), first)


def test_scatter_add_deterministic_element_mode_is_bitwise_reproducible(tunables, device):
    x = _randn((5, 7), device)
    idx = torch.randint(0, 5, (40, 7), generator=_gen(9)).to(device)
    src = _randn((40, 7), device, seed=10) * 1000
    first = scatter_add(x, 0, idx, src, deterministic=True)
    assert not launch._canonical(x, 0, idx, src, False).row_index
    tunables("scatter_add", SORTED_TILE=8)
    assert torch.equal(scatter_add(x, 0, idx, src, deterministic=True).view(torch.int32), first.view(torch.int32))
    # Column by column, the same promised order as index_add.
    for j in range(7):
        want = _sequential_fp32(x[:, j].cpu(), 0, idx[:, j].cpu(), src[:, j].cpu())
        assert torch.equal(first[:, j].cpu(), want)


def test_deterministic_long_segments_are_split_into_pieces(monkeypatch, tunables, device):
    # Pieces of 2 contributions: every mode (shared rows with several outer slices, batched
    # rows, element mode, and a destination region that is not the whole output) sums its long
    # segments through the piece kernel and still matches the reference, reproducibly.
    tunables("scatter_add", SPLIT_MIN=2)
    launches = []
    real = launch._scatter_add_piece_kernel

    class Spy:
        def __getitem__(self, grid):
            launches.append(grid)
            return real[grid]

    monkeypatch.setattr(launch, "_scatter_add_piece_kernel", Spy())
    dts = (torch.float32, torch.bfloat16)
    for spec, names in ((INDEX_ADD_SPEC, ["deterministic_dim1_3x6x5_L8", "deterministic_1d_L300_into_7",
                                          "deterministic_same_alpha_6x3_L50"]),
                        (SCATTER_ADD_SPEC, ["deterministic_batched_rows_3x6x5", "deterministic_smaller_3d",
                                            "deterministic_expanded_dim1_3x6x5"])):
        report = verify_op(spec, cases=names, seeds=1, dtypes=dts, device=device)
        assert report.passed, report.summary()
    assert len(launches) >= 6 * len(dts)
    x = _randn((5, 3), device)
    idx = torch.randint(0, 5, (64,), generator=_gen(15)).to(device)
    src = _randn((64, 3), device, seed=16) * 100
    first = index_add(x, 0, idx, src, deterministic=True)
    assert torch.equal(index_add(x, 0, idx, src, deterministic=True).view(torch.int32), first.view(torch.int32))


@pytest.mark.parametrize("deterministic", [False, True])
def test_every_contribution_to_one_destination_counts(deterministic, device):
    # Small integers: every partial sum is exact in float32, so a lost update shows exactly.
    x = torch.randint(-3, 4, (9, 4), generator=_gen(11)).float().to(device)
    src = torch.randint(-3, 4, (5000, 4), generator=_gen(12)).float().to(device)
    idx = torch.full((5000,), 6, dtype=torch.int64, device=device)
    want = x.clone()
    want[6] += src.sum(0)
    assert torch.equal(index_add(x, 0, idx, src, deterministic=deterministic), want)
    eidx = idx[:, None].expand(5000, 4)
    assert torch.equal(scatter_add(x, 0, eidx, src, deterministic=deterministic), want)
    assert torch.equal(scatter_add(x, 0, eidx.contiguous(), src, deterministic=deterministic), want)


def test_expanded_index_is_read_per_row(device):
    x = _randn((7, 5), device)
    idx = torch.randint(0, 7, (12, 1), generator=_gen(13)).to(device)
    src = _randn((12, 5), device)
    assert launch._canonical(x, 0, idx.expand(12, 5), src, False).row_index
    assert not launch._canonical(x, 0, idx.expand(12, 5).contiguous(), src, False).row_index
    assert launch._canonical(x, 0, idx.view(-1), src, True).shared


@pytest.mark.parametrize("deterministic", [False, True])
def test_int64_offset_code_paths(deterministic, monkeypatch, device):
    # The interpreter cannot hold 2**31 elements: force the int64-offset kernels on small cases.
    monkeypatch.setattr(launch, "_use_int64", lambda *tensors: True)
    cases = ["dim1_3x6x5_L8", "int32_index_9x4_L12", "alpha_minus_half_6x4_L10"]
    report = verify_op(INDEX_ADD_SPEC, cases=[INDEX_ADD_SPEC.case(n) for n in cases],
                       seeds=1, dtypes=(torch.float32, torch.bfloat16), device=device)
    assert report.passed, report.summary()
    x = _randn((5, 6), device)
    idx = torch.randint(0, 5, (8, 6), generator=_gen(14)).to(device)
    src = _randn((8, 6), device)
    torch.testing.assert_close(scatter_add(x, 0, idx, src, deterministic=deterministic),
                               torch.scatter_add(x, 0, idx, src), rtol=1e-6, atol=1e-6)


def test_default_path_follows_torch_deterministic_flag(forbid_launch, device):
    x = _randn((6, 3), device)
    idx = torch.tensor([1, 1, 4], device=device)
    src = _randn((3, 3), device)
    forbid_launch(launch, "_scatter_add_atomic_kernel")
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        got = index_add(x, 0, idx, src)
    finally:
        torch.use_deterministic_algorithms(before)
    torch.testing.assert_close(got, torch.index_add(x, 0, idx, src))
    with pytest.raises(AssertionError, match="kernel launched"):
        index_add(x, 0, idx, src, deterministic=False)


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("bad", [-1, 6, 1000])
def test_out_of_range_index_raises_index_error(bad, deterministic, device):
    x = _randn((6, 3), device)
    x0 = x.clone()
    idx = torch.tensor([0, bad, 2], device=device)
    with pytest.raises(IndexError, match=r"roofkit\.index_add: index .*\[0, 6\)"):
        index_add(x, 0, idx, _randn((3, 3), device), deterministic=deterministic)
    with pytest.raises(IndexError, match=r"roofkit\.scatter_add: index .*\[0, 6\)"):
        scatter_add(x, 0, idx[:, None].expand(3, 3).contiguous(), _randn((3, 3), device), deterministic=deterministic)
    with pytest.raises(IndexError, match=r"roofkit\.scatter_add: index"):
        scatter_add(x, 0, idx[:, None].expand(3, 3), _randn((3, 3), device), deterministic=deterministic)
    assert torch.equal(x, x0)


@pytest.mark.parametrize("width", [3, 8, 40])
@pytest.mark.parametrize("where", [0, 4095, 4096, 9999])
def test_range_check_before_the_adds(width, where, monkeypatch, tunables, device):
    # Rows at least PRECHECK_MIN_WIDTH wide check the whole index before any add (a separate
    # range kernel over RANGE_BLOCK-index programs, the bad value in any of them), narrower rows
    # inside the atomic kernel; both raise, and neither touches input. A valid index passes
    # through the same paths with the right sums.
    tunables("scatter_add", RANGE_BLOCK=4096 if device.type == "cuda" else 1024)
    calls = []
    real = launch._index_range_kernel

    class Spy:
        def __getitem__(self, grid):
            calls.append(grid)
            return real[grid]
    monkeypatch.setattr(launch, "_index_range_kernel", Spy())
    L = 10000 if device.type == "cuda" else 2500
    where = min(where, L - 1)
    x = _randn((16, width), device)
    x0 = x.clone()
    idx = torch.randint(0, 16, (L,), generator=_gen(31)).to(device)
    src = torch.randint(-3, 4, (L, width), generator=_gen(32)).float().to(device)
    want = torch.index_add(x.cpu().double(), 0, idx.cpu(), src.cpu().double())
    torch.testing.assert_close(index_add(x, 0, idx, src).cpu().double(), want, rtol=1e-6, atol=1e-5)
    assert len(calls) == (1 if width >= launch.PRECHECK_MIN_WIDTH else 0)
    idx[where] = 16
    with pytest.raises(IndexError, match=r"roofkit\.index_add: index .*\[0, 16\)"):
        index_add(x, 0, idx, src)
    idx[where] = -1
    with pytest.raises(IndexError, match=r"roofkit\.scatter_add: index"):
        scatter_add(x, 0, idx[:, None].expand(L, width), src)
    assert torch.equal(x, x0)


def test_empty_inputs_return_without_launch(forbid_launch, device):
    for k in _KERNELS:
        forbid_launch(launch, k)
    x = _randn((4, 3), device)
    for det in (False, True):
        out = index_add(x, 0, torch.empty(0, dtype=torch.int64, device=device), torch.empty(0, 3, device=device),
                        deterministic=det)
        assert torch.equal(out, x) and out.data_ptr() != x.data_ptr()
        out = scatter_add(x, 1, torch.empty(4, 0, dtype=torch.int64, device=device), torch.empty(4, 0, device=device),
                          deterministic=det)
        assert torch.equal(out, x)
        e = torch.empty(0, 3, device=device)
        assert index_add(e, 0, torch.empty(0, dtype=torch.int64, device=device), e, deterministic=det).shape == (0, 3)
        z = torch.empty(5, 0, device=device)
        out = index_add(z, 0, torch.tensor([1, 2], device=device), torch.empty(2, 0, device=device), deterministic=det)
        assert out.shape == (5, 0)


def test_scalar_inputs_like_torch(device):
    x = torch.tensor(1.5, device=device)
    assert scatter_add(x, 0, torch.tensor(0, device=device), torch.tensor(2.0, device=device)).item() == 3.5
    out = index_add(x, 0, torch.tensor(0, device=device), torch.tensor(2.0, device=device), alpha=2)
    assert out.shape == () and out.item() == 5.5


_X = lambda d: torch.zeros(4, 3, device=d)  # noqa: E731
_I = lambda d: torch.tensor([[0, 1, 2]], device=d)  # noqa: E731
_S = lambda d: torch.ones(1, 3, device=d)  # noqa: E731
_O = lambda d, *shape: torch.ones(shape, device=d)  # noqa: E731
_SA, _IA = "roofkit.scatter_add", "roofkit.index_add"


@pytest.mark.parametrize(
    "call,exc,words",
    [
        (lambda d: scatter_add(_X(d), 0, _I(d).float(), _S(d)), TypeError, [_SA, "index", "int64"]),
        (lambda d: scatter_add(_X(d), 0, _I(d), _S(d).double()), TypeError, [_SA, "src", "float64"]),
        (lambda d: scatter_add(_X(d), 0, _I(d), _S(d).half()), TypeError, [_SA, "src", "dtype"]),
        (lambda d: scatter_add(_X(d), 2, _I(d), _S(d)), IndexError, [_SA, "dim 2"]),
        (lambda d: scatter_add(_X(d), 0, _I(d)[0], _S(d)), ValueError, [_SA, "index", "dimensions"]),
        (lambda d: scatter_add(_X(d), 0, torch.zeros(2, 3, dtype=torch.long, device=d), _S(d)), ValueError,
         [_SA, "index", "src"]),
        (lambda d: scatter_add(_X(d), 0, torch.zeros(1, 4, dtype=torch.long, device=d), _O(d, 1, 4)), ValueError,
         [_SA, "input", "dimension 1"]),
        (lambda d: scatter_add(_X(d), 0, _I(d).to("meta"), _S(d)), ValueError, [_SA, "index", "meta"]),
        (lambda d: scatter_add([0.0], 0, _I(d), _S(d)), TypeError, [_SA, "input", "torch.Tensor"]),
        (lambda d: scatter_add(_X(d), 0, _I(d), _S(d), deterministic=1), TypeError, [_SA, "deterministic"]),
        (lambda d: index_add(_X(d), 0, _I(d)[0].short(), _S(d)), TypeError, [_IA, "index", "int16"]),
        (lambda d: index_add(_X(d), 0, _I(d), _O(d, 3, 3)), ValueError, [_IA, "index", "1-D"]),
        (lambda d: index_add(_X(d), 0, _I(d)[0], _O(d, 2, 3)), ValueError, [_IA, "source", "(2, 3)"]),
        (lambda d: index_add(_X(d), 1, _I(d)[0], _O(d, 4, 3, 1)), ValueError, [_IA, "source"]),
        (lambda d: index_add(_X(d), 0, _I(d)[0], _O(d, 3, 3), alpha="2"), TypeError, [_IA, "alpha"]),
        (lambda d: index_add(_X(d), 0, _I(d)[0], _O(d, 3, 3), alpha=1j), TypeError, [_IA, "alpha"]),
        (lambda d: index_add(_X(d), -3, _I(d)[0], _O(d, 3, 3)), IndexError, [_IA, "dim -3"]),
        (lambda d: index_add(_X(d), 0, _I(d)[0], _O("meta", 3, 3)), ValueError, [_IA, "source", "meta"]),
        (lambda d: index_add(_X(d).long(), 0, _I(d)[0], _O(d, 3, 3).long()), TypeError, [_IA, "input"]),
    ],
)
def test_bad_input_raises_clear_error(call, exc, words, device, raises_naming):
    raises_naming(exc, words, call, device)


@pytest.mark.parametrize("deterministic", [False, True])
def test_scatter_ops_compile_fullgraph_with_backward(deterministic, device):
    idx = torch.tensor([2, 0, 2, 5, 2], device=device)

    def fn(x, s, op):
        y = op["index_add"](x * 2.0, 0, idx, s, alpha=0.5, **op["kw"])
        return op["scatter_add"](y, 0, idx[:, None].expand(5, 4), s * s, **op["kw"]).sum(dim=1)

    ours = {"index_add": index_add, "scatter_add": scatter_add, "kw": {"deterministic": deterministic}}
    ref = {"index_add": torch.index_add, "scatter_add": torch.scatter_add, "kw": {}}
    compiled = torch.compile(lambda x, s: fn(x, s, ours), fullgraph=True, backend="aot_eager")
    x = _randn((6, 4), device).requires_grad_(True)
    s = _randn((5, 4), device, seed=3).requires_grad_(True)
    out = compiled(x, s)
    gx, gs = torch.autograd.grad(out, (x, s), torch.ones_like(out))
    x2, s2 = x.detach().clone().requires_grad_(True), s.detach().clone().requires_grad_(True)
    out2 = fn(x2, s2, ref)
    gx2, gs2 = torch.autograd.grad(out2, (x2, s2), torch.ones_like(out2))
    torch.testing.assert_close(out, out2, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gx, gx2, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gs, gs2, rtol=1e-5, atol=1e-6)


def test_cost_counts_each_operand_once():
    c = case("t", shape=(8, 4), L=5)
    cost = index_add_cost(c, torch.float32)
    assert cost.bytes == (2 * 32 + 5 * 4) * 4 + 5 * 8 and cost.flops == 20
    assert index_add_cost(case("t", shape=(8, 4), L=5, index_dtype="int32", alpha=2), torch.bfloat16).bytes \
        == (2 * 32 + 20) * 2 + 5 * 4
    assert index_add_cost(case("t", shape=(8, 4), L=5, alpha=2), torch.float32).flops == 40
    s = case("t", shape=(6, 4), index_shape=(9, 4))
    assert scatter_add_cost(s, torch.float32).bytes == (2 * 24 + 36) * 4 + 36 * 8
    assert scatter_add_cost(s, torch.float32).flops == 36
    e = case("t", shape=(6, 4), index_shape=(9, 4), index_layout="expanded")
    assert scatter_add_cost(e, torch.float32).bytes == (2 * 24 + 36) * 4 + 9 * 8
    # The acceptance reading "64Mi fp32 into 1Mi rows" (rows of 64): 256+256+256 MiB + 8 MiB.
    a = INDEX_ADD_SPEC.suites["acceptance"][0]
    assert index_add_cost(a, torch.float32).bytes == 3 * 2**28 + 2**23


def test_launch_heuristics():
    assert launch._atomic_config(64) == (64, 64, 8)
    assert launch._atomic_config(1) == (4096, 1, 8)
    assert launch._atomic_config(4096) == (8, 512, 8)
    assert launch._sorted_config(64) == (16, 64, 8)
    assert launch._sorted_config(1) == (1024, 1, 8)


def test_specs_declare_what_the_harness_needs():
    for spec in (INDEX_ADD_SPEC, SCATTER_ADD_SPEC):
        assert spec.suites["llama3-8b"] and spec.suites["acceptance"]
        assert {"torch", "torch.compile"} <= set(spec.baselines)
        assert any("gpu" in c.tags for c in spec.cases)
        assert any(0 in c["shape"] for c in spec.cases)
        assert any(c.get("deterministic") for c in spec.cases if "gpu" in c.tags)
        names = [c.name for c in spec.cases]
        assert len(names) == len(set(names))


def test_torch_deterministic_baseline_restores_the_global_flags(device):
    import torch.utils.deterministic as det

    run = INDEX_ADD_SPEC.baselines["torch.deterministic"]()
    x, idx, s = _randn((5, 3), device), torch.tensor([1, 1, 3], device=device), _randn((3, 3), device)
    before = (torch.are_deterministic_algorithms_enabled(), det.fill_uninitialized_memory)
    torch.testing.assert_close(run(x, 0, idx, s, alpha=2.0, deterministic=True), torch.index_add(x, 0, idx, s, alpha=2.0))
    assert (torch.are_deterministic_algorithms_enabled(), det.fill_uninitialized_memory) == before


def test_index_add_alpha_beyond_float32_raises(device):
    x = torch.zeros(3, device=device)
    with pytest.raises(ValueError, match="alpha"):
        index_add(x, 0, torch.tensor([0], device=device), torch.ones(1, device=device), alpha=1e300)



@pytest.mark.parametrize("deterministic", [False, True])
def test_negative_zero_sums_keep_their_sign(deterministic, device):
    # -0.0 + -0.0 is -0.0 in IEEE arithmetic and in torch; an accumulator started at +0.0 would
    # return +0.0. (Not covered: the split-segment pieces, summed with tl.sum, whose -0.0 the
    # interpreter's reduction does not keep.)
    x = torch.full((3, 8), -0.0, device=device)
    src = torch.full((9, 8), -0.0, device=device)
    idx = torch.tensor([0, 0, 0, 0, 0, 0, 0, 0, 2], device=device)
    got = index_add(x, 0, idx, src, deterministic=deterministic)
    want = torch.index_add(x.cpu(), 0, idx.cpu(), src.cpu())
    assert torch.equal(torch.signbit(got.cpu()), torch.signbit(want)) and torch.signbit(want).all()


def test_scatter_add_expanded_index_narrower_than_input(device):
    x = torch.zeros((3, 5, 5), device=device)
    src = torch.ones((1, 4, 4), device=device)
    idx = torch.tensor([1], device=device).view(1, 1, 1).expand(1, 4, 4)
    want = torch.zeros(3, 5, 5)
    want[1, :4, :4] = 1
    assert torch.equal(scatter_add(x, 0, idx, src).cpu(), want)
    from roofkit.ops.scatter.spec import scatter_add_reference
    assert torch.equal(scatter_add_reference(x.cpu(), 0, idx.cpu(), src.cpu()).float(), want)


# ----------------------------------------------------------------------------- CUDA-graph capture
# Without a GPU the capture is simulated: ``launch._capturing`` (where the launchers ask whether the
# current stream is capturing; torch.cuda.is_current_stream_capturing itself raises on a CPU-only
# build and is never asked about CPU tensors) answers True, and every way of reading a tensor's
# value on the host or synchronizing fails the test. tests/test_cuda_graphs.py captures for real.


def _refuse(*args, **kwargs):
    raise AssertionError("host read of a device value or synchronization while capturing a CUDA graph")


@contextlib.contextmanager
def _capture_simulated(monkeypatch):
    with monkeypatch.context() as mp:
        mp.setattr(launch, "_capturing", lambda device: True)
        for name in ("item", "tolist", "__int__", "__bool__", "__index__", "__float__"):
            mp.setattr(torch.Tensor, name, _refuse)
        mp.setattr(torch.cuda, "synchronize", _refuse)
        mp.setattr(torch.cuda.Event, "synchronize", _refuse)
        mp.setattr(torch.cuda.Stream, "synchronize", _refuse)
        mp.setattr(launch, "copy_to_host_async", _refuse)
        yield


def _capture_problem(kind: str, device, seed: int = 40):
    """(op, input, dim, index, src, kwargs) of each canonical form: shared rows wide enough for the
    eager pre-check, 1-D (checked after the adds) with a hot destination, element mode, and
    batched rows (an expanded index that differs per outer slice)."""
    g = _gen(seed)
    if kind == "index_add_rows":
        op, shape, dim, idx, kw = index_add, (16, 8), 0, torch.randint(0, 16, (40,), generator=g), {"alpha": 0.5}
        src_shape = (40, 8)
    elif kind == "index_add_1d":
        op, shape, dim, idx, kw = index_add, (16,), 0, torch.randint(0, 16, (300,), generator=g), {}
        idx[:100] = 3
        src_shape = (300,)
    elif kind == "scatter_add_elements":
        op, shape, dim, idx, kw = scatter_add, (6, 5), 0, torch.randint(0, 6, (40, 5), generator=g), {}
        src_shape = (40, 5)
    else:
        op, shape, dim, kw = scatter_add, (3, 6, 5), 1, {}
        idx = torch.randint(0, 6, (3, 20, 1), generator=g).expand(3, 20, 5)
        src_shape = (3, 20, 5)
    return op, _randn(shape, device, seed=seed), dim, idx.to(device), _randn(src_shape, device, seed=seed + 1), kw


def _forward_backward(op, x, dim, idx, src, kwargs, dy_seed=41):
    x, src = x.detach().requires_grad_(True), src.detach().requires_grad_(True)
    out = op(x, dim, idx, src, **kwargs)
    dy = _randn(out.shape, x.device, seed=dy_seed)
    gx, gs = torch.autograd.grad(out, (x, src), dy)
    return out.detach(), gx, gs


_CAPTURE_KINDS = ["index_add_rows", "index_add_1d", "scatter_add_elements", "scatter_add_batched_rows"]


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("kind", _CAPTURE_KINDS)
def test_capture_reads_nothing_back_and_matches_eager(kind, deterministic, monkeypatch, device):
    op, x, dim, idx, src, kw = _capture_problem(kind, device)
    kw = dict(kw, deterministic=deterministic)
    # The spy catches the eager path's one host read: this test can fail.
    with pytest.raises(AssertionError, match="host read"):
        with monkeypatch.context() as mp:
            mp.setattr(torch.Tensor, "tolist", _refuse)
            mp.setattr(torch.Tensor, "item", _refuse)
            mp.setattr(torch.Tensor, "__int__", _refuse)
            mp.setattr(launch, "copy_to_host_async", _refuse)
            op(x, dim, idx, src, **kw)
    want = _forward_backward(op, x, dim, idx, src, kw)
    with _capture_simulated(monkeypatch):
        got = _forward_backward(op, x, dim, idx, src, kw)
    for g, w in zip(got, want):
        if deterministic:
            assert torch.equal(g.view(torch.int32), w.view(torch.int32))  # the same bits
        else:
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("hot", [False, True])
def test_capture_sums_in_the_eager_pieces(hot, monkeypatch, tunables, device):
    # Under capture the pieces run whenever L exceeds the piece length (nothing is read back to
    # know whether a destination does): with a hot destination they are the eager call's pieces,
    # without one they are all empty; either way the bits are the eager call's.
    tunables("scatter_add", SPLIT_MIN=2)
    launches = []
    real = launch._scatter_add_piece_kernel

    class Spy:
        def __getitem__(self, grid):
            launches.append(grid)
            return real[grid]

    monkeypatch.setattr(launch, "_scatter_add_piece_kernel", Spy())
    L, N = 1024, 256  # piece length max(2, next_pow2(isqrt(1024))) = 32, from L (not from the data)
    idx = torch.randperm(L, generator=_gen(42)) % N  # 4 contributions each
    if hot:
        idx[::16] = 5  # about 68: 3 pieces of 32 (a length from the longest segment would be 8)
    x, src = _randn((N, 3), device), _randn((L, 3), device, seed=43) * 10
    want = index_add(x, 0, idx.to(device), src, deterministic=True)
    assert len(launches) == (1 if hot else 0)
    with _capture_simulated(monkeypatch):
        got = index_add(x, 0, idx.to(device), src, deterministic=True)
    assert len(launches) == (2 if hot else 1)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("kind", _CAPTURE_KINDS)
def test_capture_skips_out_of_range_indices(kind, deterministic, monkeypatch, device):
    # Under capture nothing raises: an out-of-range value adds nothing anywhere (not to another
    # outer slice's row, which its sort key would name without the sentinel) and gets gradient 0;
    # an eager call on the same index raises.
    op, x, dim, idx, src, kw = _capture_problem(kind, device)
    kw = dict(kw, deterministic=deterministic)
    N = x.shape[dim]
    idx = idx.clone() if idx.stride(-1) else idx[..., :1].clone().expand(idx.shape)
    flat = idx.view(-1) if idx.is_contiguous() else idx[..., 0].reshape(-1)  # a view of idx's values
    assert flat.data_ptr() == idx.data_ptr()
    flat[1], flat[7], flat[-1] = -1, N, 2**33
    with pytest.raises(IndexError, match=r"index .*\[0, %d\)" % N):
        op(x, dim, idx, src, **kw)
    with _capture_simulated(monkeypatch):
        out, gx, gs = _forward_backward(op, x, dim, idx, src, kw)
    # The reference: the same call with the bad contributions made zero and sent to row 0.
    full = idx if op is scatter_add else idx.view([-1 if d == dim else 1 for d in range(x.dim())]).expand(src.shape)
    bad = (full < 0) | (full >= N)
    safe = full.masked_fill(bad, 0).contiguous()
    alpha = kw.get("alpha", 1)
    want = torch.scatter_add(x.cpu().double(), dim, safe.cpu(), alpha * src.masked_fill(bad, 0).cpu().double())
    torch.testing.assert_close(out.cpu().double(), want, rtol=1e-5, atol=1e-5)
    dy = _randn(out.shape, device, seed=41)
    want_gs = (alpha * torch.gather(dy.cpu().double(), dim, safe.cpu())).masked_fill(bad.cpu(), 0)
    torch.testing.assert_close(gs.cpu().double(), want_gs, rtol=1e-6, atol=1e-6)
    assert torch.equal(gx, dy)


def test_deterministic_path_reads_back_once(monkeypatch, tunables, device):
    # Whether an index was out of range and the longest segment, in one read; the pieces are sized
    # from the shapes (no second read for their number).
    tunables("scatter_add", SPLIT_MIN=2)
    reads = []

    def counted(name):
        real = getattr(torch.Tensor, name)

        def read(self, *args, **kwargs):
            reads.append(name)
            return real(self, *args, **kwargs)
        return read

    for name in ("item", "tolist", "__int__", "__bool__"):
        monkeypatch.setattr(torch.Tensor, name, counted(name))
    idx = torch.full((200,), 4, dtype=torch.int64, device=device)
    out = index_add(torch.zeros(8, 2, device=device), 0, idx, torch.ones(200, 2, device=device), deterministic=True)
    assert reads == ["tolist"]
    monkeypatch.undo()
    assert torch.equal(out[4].cpu(), torch.full((2,), 200.0))


@pytest.mark.gpu
@pytest.mark.parametrize("deterministic", [False, True])
def test_captured_graph_replays_out_of_range_indices_without_error_or_fault(deterministic):
    # A real capture: valid indices at capture time, then out-of-range values copied into the
    # captured index buffer; the replays skip them (no IndexError, no illegal memory access: the
    # synchronization after the replay would report one).
    dev = torch.device("cuda")
    x = _randn((64, 32), dev)
    idx = torch.randint(0, 64, (500,), generator=_gen(44)).to(dev)
    src = _randn((500, 32), dev, seed=45)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            index_add(x, 0, idx, src, deterministic=deterministic)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = index_add(x, 0, idx, src, deterministic=deterministic)
    bad = torch.zeros(500, dtype=torch.bool)
    bad[[0, 250, 499]] = True
    idx.copy_(idx.cpu().masked_fill(bad, 0).masked_scatter(bad, torch.tensor([-5, 64, 2**40])).to(dev))
    graph.replay()
    torch.cuda.synchronize()
    safe = idx.cpu().masked_fill(bad, 0)
    want = torch.index_add(x.cpu().double(), 0, safe, src.cpu().double().masked_fill(bad[:, None], 0))
    torch.testing.assert_close(out.cpu().double(), want, rtol=1e-5, atol=1e-5)


def test_16bit_atomics_accumulate_in_float32_from_the_tunable_ratio(monkeypatch, tunables):
    # A float32 copy for 16-bit destinations with at least FP32_ACCUMULATE_MIN_PER_DEST
    # contributions per destination (on a GPU; always under the interpreter, which has no
    # bfloat16 atomics); float32 destinations never take one.
    monkeypatch.setattr(launch, "interpreter_active", lambda: False)
    assert launch.FP32_ACCUMULATE_MIN_PER_DEST == 4.0
    for dt in (torch.bfloat16, torch.float16):
        assert launch._accumulates_in_float32(dt, 32768, 8192) and launch._accumulates_in_float32(dt, 65536, 8192)
        assert not launch._accumulates_in_float32(dt, 16384, 8192)  # a top-2 MoE combine: atomics
        assert not launch._accumulates_in_float32(dt, 8192, 128256)
    assert not launch._accumulates_in_float32(torch.float32, 65536, 8192)
    tunables("scatter_add", FP32_ACCUMULATE_MIN_PER_DEST=1.0)
    assert launch._accumulates_in_float32(torch.bfloat16, 16384, 8192)
    assert not launch._accumulates_in_float32(torch.bfloat16, 8191, 8192)
    monkeypatch.setattr(launch, "interpreter_active", lambda: True)
    assert launch._accumulates_in_float32(torch.bfloat16, 1, 8192)
    for bad in (-1.0, float("nan")):
        monkeypatch.setattr(launch, "FP32_ACCUMULATE_MIN_PER_DEST", bad)
        with pytest.raises(ValueError, match="FP32_ACCUMULATE_MIN_PER_DEST must be a number >= 0"):
            launch._accumulates_in_float32(torch.bfloat16, 1, 8192)
