"""masked_select / compact properties the registry-wide test cannot state."""

import importlib

import pytest
import torch
import triton
import triton.language as tl

from roofkit.harness.spec import case
from roofkit.harness.verify import select_cases, verify_op
from roofkit.ops.compact import SPEC, compact, masked_select

compact_module = importlib.import_module("roofkit.ops.compact")

pytestmark = pytest.mark.compact

_KERNELS = ("_compact_kernel", "_masked_expand_kernel", "_compact_count_kernel", "_compact_rows_kernel",
            "_compact_lookback_rows_kernel")
_NEW_VARIANTS = ("lookback_rows", "two_pass", "two_pass_bytes")


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _mask(shape, keep, device, seed=0, pattern="random"):
    return compact_module._make_mask(shape, keep, pattern, _gen(seed), device)


def _bits(t):
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


@pytest.mark.parametrize("name", [c.name for c in select_cases(SPEC, torch.device("cpu"))])
def test_masked_select_matches_float64_reference(name, device):
    report = verify_op(SPEC, cases=[name], seeds=2, device=device)
    assert report.rows and report.passed, report.summary()


def _small_tiles(tunables, chunk, chunks):
    tunables("compact", CHUNK=chunk, CHUNKS=chunks)


@pytest.mark.parametrize("pattern", ["random", "runs", "prefix"])
@pytest.mark.parametrize("keep", [0.0, 0.05, 0.5, 0.95, 1.0])
def test_compact_keeps_order_exactly_across_tiles(keep, pattern, tunables, device):
    # Tiles of 2 chunks of 32: 2003 elements make 32 tiles (the last one partial, its last mask
    # word half outside the tensor), so the look-back prefix and the in-tile chunk loop matter.
    _small_tiles(tunables, 32, 2)
    x = torch.randn(2003, generator=_gen(1)).to(device)
    m = _mask((2003,), keep, device, seed=2, pattern=pattern)
    want = torch.masked_select(x, m)
    values, count = compact(x, m)
    assert count.shape == () and count.dtype == torch.int64 and count.device == x.device
    assert int(count) == int(m.sum()) == want.numel()
    assert values.shape == (2003,) and values.dtype == x.dtype
    assert torch.equal(_bits(values[: int(count)]), _bits(want))
    assert torch.equal(_bits(masked_select(x, m)), _bits(want))


def test_look_back_across_50_tiles_with_an_unaligned_mask(tunables, device):
    # 50 tiles of 16 elements, mask a view starting one byte into its storage (copied aligned).
    _small_tiles(tunables, 8, 2)
    x = torch.randint(-1000, 1000, (797,), generator=_gen(20), dtype=torch.int32).to(device)
    m = _mask((798,), 0.5, device, seed=21)[1:]
    assert m.data_ptr() % 4 == 1 or device.type != "cpu"
    values, count = compact(x, m)
    assert triton.cdiv(797, 16) == 50 and int(count) == int(m.sum())
    assert torch.equal(values[: int(count)], x[m])
    g = torch.arange(int(count), dtype=torch.float32, device=device)
    want = torch.zeros(797, device=device)
    want[m] = g
    assert torch.equal(compact_module._masked_expand(g, m), want)


@triton.jit
def _look_back_probe(state_ptr, out_ptr, tile, total, WINDOW: tl.constexpr):
    tl.store(out_ptr, compact_module._look_back(state_ptr, tile, total.to(tl.int64), True, WINDOW))


@pytest.mark.parametrize("inclusive_at", [None, 3, 40, 48])
def test_look_back_walks_several_windows_back_to_the_newest_inclusive_word(inclusive_at, device):
    # The interpreter runs programs in ticket order, so a real launch always finds its
    # predecessor's inclusive word at once: here the look-back of tile 49 runs on a workspace
    # whose predecessors published only their counts (aggregates), but for one inclusive word
    # (or none: the walk then reaches tile 0's predecessors, read as "inclusive, 0").
    counts = torch.randint(0, 1000, (50,), generator=_gen(22), dtype=torch.int64)
    words = counts * 4 + 1
    want = int(counts[:49].sum())
    if inclusive_at is not None:
        words[inclusive_at] = int(counts[: inclusive_at + 1].sum()) * 4 + 2
    state = torch.cat([torch.tensor([50]), words]).to(device)
    state[1 + 49] = 0  # tile 49 has not published yet
    out = torch.full((1,), -1, dtype=torch.int64, device=device)
    _look_back_probe[(1,)](state, out, 49, int(counts[49]), WINDOW=8)
    assert int(out) == want
    assert int(state[1 + 49]) == (want + int(counts[49])) * 4 + 2  # its inclusive prefix, published
    assert torch.equal(state[1:50].cpu(), words[:49])  # predecessors untouched


def test_compact_makes_no_host_synchronization(monkeypatch, device):
    # Host-side proxy for "no sync": any tensor-to-Python conversion inside compact fails.
    x = torch.randn(300, generator=_gen(3)).to(device)
    m = _mask((300,), 0.5, device, seed=4)
    want = torch.masked_select(x, m)

    def refuse(*args, **kwargs):
        raise AssertionError("host synchronization inside compact")

    with monkeypatch.context() as mp:
        for name in ("item", "tolist", "__int__", "__bool__", "__index__", "__float__"):
            mp.setattr(torch.Tensor, name, refuse)
        values, count = compact(x, m)
    assert torch.equal(values[: int(count)], want)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
              torch.int16, torch.int8, torch.uint8, torch.bool],
)
def test_masked_select_moves_raw_bits_for_every_dtype(dtype, device):
    base = torch.randn(7, 33, generator=_gen(5)) * 50
    if dtype.is_floating_point:
        x = base.to(dtype)
        x[0, :4] = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf")]).to(dtype)
        x.view(torch.uint8 if x.element_size() == 1 else _bits(x).dtype)[1, 0] = -1  # a NaN with a payload
    elif dtype == torch.bool:
        x = base > 0
    else:
        x = base.to(torch.int64).clamp(-100, 100).to(dtype)
    x = x.to(device)
    m = _mask((7, 33), 0.5, device, seed=6)
    m[0, :4] = True
    m[1, 0] = True
    assert torch.equal(_bits(masked_select(x, m)), _bits(torch.masked_select(x, m)))


def test_masked_select_backward_with_broadcast_matches_torch(device):
    x = torch.randn(7, 1, generator=_gen(7)).to(device).requires_grad_(True)
    m = _mask((7, 9), 0.5, device, seed=8)
    out = masked_select(x, m)
    dy = torch.randint(-4, 5, out.shape, generator=_gen(9)).float().to(device)
    (g,) = torch.autograd.grad(out, x, dy)
    x2 = x.detach().clone().requires_grad_(True)
    (g2,) = torch.autograd.grad(torch.masked_select(x2, m), x2, dy)
    assert torch.equal(g, g2)


def test_compact_backward_reads_only_the_kept_slots(tunables, device):
    _small_tiles(tunables, 16, 2)
    x = torch.randn(5, 40, generator=_gen(10)).to(device).requires_grad_(True)
    m = _mask((5, 40), 0.3, device, seed=11)
    values, count = compact(x, m)
    dv = torch.randn(values.shape, generator=_gen(12)).to(device)
    (g,) = torch.autograd.grad(values, x, dv)
    want = torch.zeros(5, 40, device=device)
    want[m] = dv[: int(count)]
    assert torch.equal(g, want)


@pytest.mark.parametrize("variant", ("lookback",) + _NEW_VARIANTS)
def test_empty_inputs_return_without_launch(variant, forbid_launch, tunables, device):
    tunables("compact", VARIANT=variant)
    for k in _KERNELS:
        forbid_launch(compact_module, k)
    for xs, ms in [((0, 5), (0, 5)), ((3, 1), (3, 0)), ((0,), ())]:
        x = torch.randn(xs).to(device)
        m = torch.ones(ms, dtype=torch.bool, device=device)
        assert masked_select(x, m).shape == (0,)
        values, count = compact(x, m)
        assert values.shape == (0,) and count.shape == () and int(count) == 0


def test_nothing_kept_gives_empty_result_and_zero_gradient(device):
    x = torch.randn(50, generator=_gen(13)).to(device).requires_grad_(True)
    m = torch.zeros(50, dtype=torch.bool, device=device)
    out = masked_select(x, m)
    assert out.shape == (0,)
    (g,) = torch.autograd.grad(out, x, torch.empty(0, device=device))
    assert torch.equal(g, torch.zeros(50, device=device))


@pytest.mark.parametrize(
    "call,exc,words",
    [
        (lambda d: masked_select(torch.ones(3, device=d), torch.ones(3, dtype=torch.uint8, device=d)), TypeError,
         ["roofkit.masked_select", "mask", "bool", "uint8"]),
        (lambda d: compact(torch.ones(3, device=d), torch.ones(3, device=d)), TypeError,
         ["roofkit.compact", "mask", "float32"]),
        (lambda d: masked_select(torch.ones(3, dtype=torch.complex64, device=d), torch.ones(3, dtype=torch.bool, device=d)),
         TypeError, ["roofkit.masked_select", "input", "complex64"]),
        (lambda d: masked_select([1.0, 2.0], torch.ones(2, dtype=torch.bool, device=d)), TypeError,
         ["roofkit.masked_select", "input", "torch.Tensor"]),
        (lambda d: masked_select(torch.ones(3, 4, device=d), torch.ones(3, dtype=torch.bool, device=d)), ValueError,
         ["roofkit.masked_select", "(3, 4)", "(3,)", "broadcast"]),
        (lambda d: compact(torch.ones(3, device=d), torch.ones(3, dtype=torch.bool, device="meta")), ValueError,
         ["roofkit.compact", "mask", "meta"]),
    ],
)
def test_bad_input_raises_clear_error(call, exc, words, device, raises_naming):
    raises_naming(exc, words, call, device)


def test_compaction_compiles_fullgraph_with_backward(device):
    m = _mask((6, 10), 0.5, device, seed=14)

    def fn(x):
        values, count = compact(x * 2.0, m)
        # values' slots past count are uninitialized memory (NaN / inf possible): clamped to
        # finite values before they are multiplied by 0, so the graph still holds compact's
        # backward without the garbage reaching the sum
        return masked_select(x * 3.0, m).sum() + values.nan_to_num().clamp(-1, 1).sum() * 0 + count

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    x = torch.randn(6, 10, generator=_gen(15)).to(device).requires_grad_(True)
    out = compiled(x)
    (g,) = torch.autograd.grad(out, x)
    torch.testing.assert_close(out, (x * 3.0)[m].sum() + m.sum(), rtol=1e-5, atol=1e-5)
    assert torch.equal(g, torch.where(m, 3.0, 0.0))


def test_int64_offset_code_path(monkeypatch, tunables, device):
    monkeypatch.setattr(compact_module, "needs_int64", lambda *extents: True)
    _small_tiles(tunables, 32, 2)
    x = torch.randn(1000, generator=_gen(16)).to(device).requires_grad_(True)
    m = _mask((1000,), 0.4, device, seed=17, pattern="runs")
    out = masked_select(x, m)
    assert torch.equal(out, torch.masked_select(x.detach(), m))
    (g,) = torch.autograd.grad(out, x, torch.ones_like(out))
    assert torch.equal(g, m.float())


def test_cost_counts_mask_kept_input_sectors_and_output():
    # Clustered mask: the kept half of the input is read, the mask once, the kept half written.
    c = case("t", shape=(10, 10), keep=0.5, pattern="prefix")
    assert compact_module.masked_select_cost(c, torch.float32).bytes == 50 * 4 + 50 * 4 + 100
    assert compact_module.masked_select_cost(c, torch.bfloat16).bytes == 50 * 2 + 50 * 2 + 100
    assert compact_module.masked_select_cost(c, torch.float32).flops == 0
    # Random mask: sectors of 8 float32 (16 bfloat16) holding at least one kept element.
    r = case("t", shape=(10, 10), keep=0.25)
    assert compact_module.masked_select_cost(r, torch.float32).bytes == pytest.approx(400 * (1 - 0.75**8) + 25 * 4 + 100)
    assert compact_module.masked_select_cost(r, torch.bfloat16).bytes == pytest.approx(200 * (1 - 0.75**16) + 25 * 2 + 100)
    assert compact_module.masked_select_cost(case("t", shape=(64,), keep=0.0), torch.float32).bytes == 64
    assert compact_module.masked_select_cost(case("t", shape=(64,), keep=1.0), torch.float32).bytes == 64 * 9
    # A broadcast input is read whole.
    b = case("t", shape=(10, 1), mask_shape=(10, 10), keep=0.05)
    assert compact_module.masked_select_cost(b, torch.float32).bytes == (10 + 5) * 4 + 100
    fb = case("t", shape=(10, 10), keep=0.5, pattern="prefix", mode="fwd_bwd")
    assert compact_module.masked_select_cost(fb, torch.float32).bytes == (50 * 4 + 50 * 4 + 100) + 100 + (50 + 100) * 4
    # The acceptance shape: 64Mi fp32 keeping half: 256 MiB (all but 0.4% of the sectors) + 64 + 128 MiB.
    a = [s for s in SPEC.suites["acceptance"] if s.name == "64Mi_keep_50pct"][0]
    assert compact_module.masked_select_cost(a, torch.float32).bytes == pytest.approx(2**28 * (1 - 0.5**8) + 2**26 + 2**27)


def test_spec_declares_what_the_harness_needs():
    assert SPEC.suites["llama3-8b"] and len(SPEC.suites["acceptance"]) == 5
    assert {"torch", "torch.compile"} <= set(SPEC.baselines)
    gpu = {c.get("keep") for c in SPEC.cases if "gpu" in c.tags and c["shape"] == (64 << 20,)}
    assert gpu == {0.0, 0.05, 0.5, 0.95, 1.0}
    assert any(0 in c["shape"] for c in SPEC.cases)


def test_mask_bytes_other_than_one_count_as_true(device):
    # A bool tensor viewed from uint8 may hold 2..255 (torch treats any non-zero byte as True);
    # the count and the write pass must agree on that.
    raw = torch.tensor([2, 0, 1, 2, 0, 1, 1, 255, 128, 0, 3], dtype=torch.uint8, device=device)
    m = raw.view(torch.bool)
    x = torch.arange(11.0, device=device)
    want = x[raw != 0]
    torch.testing.assert_close(masked_select(x, m), want)
    values, count = compact(x, m)
    assert int(count) == want.numel()
    torch.testing.assert_close(values[: int(count)], want)


# ----------------------------------------------------------------------------- the faster variants


def _variant(tunables, variant, block=128, chunk=64, lr_chunk=64, scan_block=4):
    """Switch the module to ``variant`` with tiny tiles: 1003 elements make 8 two-pass tiles of
    two write steps each (the next step's bits prefetched), a count scan over 2 blocks of 4 tile
    counts (the carry between blocks), and 16 look-back tiles."""
    tunables("compact", VARIANT=variant, TP_BLOCK=block, TP_CHUNK=chunk, TP_SCAN_BLOCK=scan_block,
             LR_CHUNK=lr_chunk)


def _check_all_paths(x, m, select=True):
    """compact, masked_select and the backward's scatter, bit for bit against torch."""
    want = torch.masked_select(x, m)
    values, count = compact(x, m)
    assert count.shape == () and count.dtype == torch.int64 and count.device == x.device
    assert int(count) == int(m.sum()) == want.numel()
    assert values.shape == (x.numel(),) and values.dtype == x.dtype
    assert torch.equal(_bits(values[: int(count)]), _bits(want))
    if select:
        assert torch.equal(_bits(masked_select(x, m)), _bits(want))
    g = torch.randn(want.shape, generator=_gen(99)).to(x.device)
    back = torch.zeros(x.shape, device=x.device)
    back[m] = g
    assert torch.equal(_bits(compact_module._masked_expand(g, m)), _bits(back.reshape(-1)))


@pytest.mark.parametrize("keep", [0.0, 0.05, 0.5, 0.95, 1.0])
@pytest.mark.parametrize("variant", _NEW_VARIANTS)
def test_variant_keeps_order_exactly(variant, keep, tunables, device):
    # 1003 = 17 * 59: no tile, step, row or mask word divides it (the last word is partial).
    _variant(tunables, variant)
    x = torch.randn(1003, generator=_gen(30)).to(device)
    _check_all_paths(x, _mask((1003,), keep, device, seed=31), select=False)


@pytest.mark.parametrize("pattern", ["runs", "prefix"])
@pytest.mark.parametrize("variant", _NEW_VARIANTS)
def test_variant_clustered_masks(variant, pattern, tunables, device):
    # Whole rows / tiles kept or dropped (zero counts between non-zero ones, empty write steps).
    _variant(tunables, variant)
    x = torch.randint(-10**6, 10**6, (999,), generator=_gen(32), dtype=torch.int32).to(device)
    _check_all_paths(x, _mask((999,), 0.4, device, seed=33, pattern=pattern))


@pytest.mark.parametrize("variant", _NEW_VARIANTS)
def test_variant_mask_bytes_other_than_one_in_full_and_tail_rows(variant, tunables, device):
    # Any non-zero byte is True, on the vector path (spans inside the mask) and on the last,
    # word-by-word span; 700 bytes: 21 full rows of 32 and a row of 28.
    _variant(tunables, variant)
    raw = torch.randint(0, 256, (700,), generator=_gen(34), dtype=torch.int16).to(torch.uint8)
    raw[torch.rand(700, generator=_gen(35)) < 0.4] = 0
    raw = raw.to(device)
    x = torch.randn(700, generator=_gen(36)).to(device)
    values, count = compact(x, raw.view(torch.bool))
    assert int(count) == int((raw != 0).sum())
    assert torch.equal(values[: int(count)], x[raw != 0])
    assert torch.equal(masked_select(x, raw.view(torch.bool)), x[raw != 0])


@pytest.mark.parametrize("variant", _NEW_VARIANTS)
def test_variant_unaligned_mask_int64_offsets_and_many_tiles(variant, monkeypatch, tunables, device):
    # A mask view one byte into its storage (copied aligned), the int64 offset code, and the
    # most tiles of the file (40 look-back tiles, 20 two-pass tiles of 2 steps, 3 scan blocks).
    _variant(tunables, variant, block=64, chunk=32, lr_chunk=32, scan_block=8)
    monkeypatch.setattr(compact_module, "needs_int64", lambda *extents: True)
    x = torch.randn(1261, generator=_gen(37)).to(device)
    m = _mask((1262,), 0.5, device, seed=38)[1:]
    assert m.data_ptr() % 4 == 1 or device.type != "cpu"
    _check_all_paths(x, m)


@pytest.mark.parametrize("variant", _NEW_VARIANTS)
def test_variant_backward_and_broadcast_through_autograd(variant, tunables, device):
    _variant(tunables, variant)
    x = torch.randn(37, 1, generator=_gen(39)).to(device).requires_grad_(True)
    m = _mask((37, 41), 0.3, device, seed=40)
    out = masked_select(x, m)
    dy = torch.randint(-4, 5, out.shape, generator=_gen(41)).float().to(device)
    (g,) = torch.autograd.grad(out, x, dy)
    x2 = x.detach().clone().requires_grad_(True)
    (g2,) = torch.autograd.grad(torch.masked_select(x2, m), x2, dy)
    assert torch.equal(out, torch.masked_select(x.detach(), m))
    assert torch.equal(g, g2)


def test_count_pass_writes_prefixes_and_total_and_puts_the_arrival_counter_back(monkeypatch, device):
    # The count pass alone: exclusive prefixes of the per-tile counts (scanned by its last
    # program, 3 blocks of 4 with carries), the total, the row bit words, the counter back at 0.
    n, block = 1333, 128
    m = _mask((n,), 0.5, device, seed=42, pattern="runs")
    tiles = triton.cdiv(n, block)
    arrivals = torch.zeros(1, dtype=torch.int32, device=device)
    prefix = torch.full((tiles + 1,), -7, dtype=torch.int64, device=device)
    bits = torch.full((tiles * block // 32,), -7, dtype=torch.int32, device=device)
    count = torch.full((), -7, dtype=torch.int64, device=device)
    m8 = compact_module._mask_words(n, m)
    compact_module._compact_count_kernel[(tiles,)](
        m8, bits, prefix, count, arrivals, n, tiles,
        WRITE_BITS=True, NATIVE_POPC=False, USE_INT64=False, BLOCK=block, SCAN_BLOCK=4, PDL=False)
    per_tile = torch.nn.functional.pad(m.cpu(), (0, tiles * block - n)).reshape(tiles, block).sum(1)
    assert torch.equal(prefix[:tiles].cpu(), torch.cumsum(per_tile, 0) - per_tile)
    assert int(count) == int(m.sum()) and int(arrivals) == 0
    flags = torch.nn.functional.pad(m.cpu(), (0, tiles * block - n)).reshape(-1, 32).to(torch.int64)
    want = (flags << torch.arange(32)).sum(1)
    assert torch.equal(bits.cpu().to(torch.int64) & 0xFFFFFFFF, want)


@triton.jit
def _popc_probe(v_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    v = tl.load(v_ptr + offs).to(tl.uint32, bitcast=True)
    tl.store(out_ptr + offs, compact_module._popc(v, False))


def test_swar_popcount_matches_python(device):
    # The interpreter's population count (the GPU uses the hardware's): every bit position, the
    # sign bit, all ones, zero, and random words.
    vals = [0, 1, -1, -(2**31), 2**31 - 1, 0x55555555, -0x55555556] + [1 << k for k in range(31)]
    vals += torch.randint(-(2**31), 2**31 - 1, (128 - len(vals),), generator=_gen(43)).tolist()
    v = torch.tensor(vals, dtype=torch.int32, device=device)
    out = torch.empty(128, dtype=torch.int32, device=device)
    _popc_probe[(1,)](v, out, N=128)
    assert out.cpu().tolist() == [bin(x & 0xFFFFFFFF).count("1") for x in vals]


def test_unknown_switch_values_raise(tunables, device):
    x = torch.randn(10).to(device)
    m = torch.ones(10, dtype=torch.bool, device=device)
    tunables("compact", VARIANT="fastest")
    with pytest.raises(ValueError, match="VARIANT"):
        compact(x, m)
    tunables("compact", VARIANT="two_pass", SYNC="later")
    with pytest.raises(ValueError, match="SYNC"):
        masked_select(x, m)


# ----------------------------------------------------------------------------- on the GPU


@pytest.mark.gpu
@pytest.mark.parametrize("keep", [0.0, 0.05, 0.5, 0.95, 1.0])
@pytest.mark.parametrize("variant", ("lookback",) + _NEW_VARIANTS + ("two_pass_pdl",))
def test_variant_on_gpu_at_acceptance_size(variant, keep, tunables):
    # Default tiles; 2**26 + 7 elements (a partial last tile and mask word); both sync modes.
    if variant == "two_pass_pdl":  # the write pass as a programmatic dependent launch
        variant = "two_pass"
        tunables("compact", TP_PDL=True)
    tunables("compact", VARIANT=variant)
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(44)
    x = torch.randn(2**26 + 7, device=dev, generator=g)
    m = torch.rand(2**26 + 7, device=dev, generator=g) < keep
    want = torch.masked_select(x, m)
    values, count = compact(x, m)
    assert int(count) == want.numel() and torch.equal(values[: int(count)], want)
    for sync in ("item", "pinned"):
        tunables("compact", SYNC=sync)
        assert torch.equal(masked_select(x, m), want)
    dv = torch.randn(want.numel(), device=dev, generator=g)
    back = torch.zeros_like(x)
    back[m] = dv
    assert torch.equal(compact_module._masked_expand(dv, m), back)
    if variant.startswith("two_pass"):  # the cached arrival counter is back at zero
        assert int(compact_module._arrivals(dev)) == 0


@pytest.mark.gpu
@pytest.mark.parametrize("variant", _NEW_VARIANTS)
def test_variant_on_gpu_bf16_rows_and_repeat_calls_identical(variant, tunables):
    tunables("compact", VARIANT=variant)
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(45)
    x = torch.randn(8192, 4096, device=dev, generator=g).to(torch.bfloat16)
    m = torch.rand(8192, 4096, device=dev, generator=g) < 0.5
    first = masked_select(x, m)
    assert torch.equal(first, x[m])
    for _ in range(3):
        assert torch.equal(masked_select(x, m), first)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("variant", _NEW_VARIANTS)
def test_variant_over_2pow31_elements(variant, tunables):
    tunables("compact", VARIANT=variant)
    dev = torch.device("cuda")
    n = 2**31 + 4099
    g = torch.Generator(device=dev).manual_seed(46)
    m = torch.rand(n, device=dev, generator=g) < 0.5
    x = torch.randint(-(2**31), 2**31 - 1, (n,), device=dev, generator=g, dtype=torch.int32)
    values, count = compact(x, m)
    want = x[m]
    assert int(count) == want.numel() and torch.equal(values[: int(count)], want)


# ----------------------------------------------------------------------------- CUDA-graph capture
# Without a GPU the capture is simulated: ``compact_module._capturing`` answers True (see
# tests/ops/test_scatter.py for why not torch.cuda.is_current_stream_capturing itself);
# tests/test_cuda_graphs.py captures for real.

_CAPTURE_ERROR = (r"roofkit\.masked_select: {} cannot be captured in a CUDA graph: the output's size depends on the "
                  r"mask's values.*roofkit\.compact\(input, mask\) -> \(values, count\)")


def test_masked_select_refuses_capture_with_a_pointer_to_compact(monkeypatch, device):
    x = torch.randn(5, 40, generator=_gen(20)).to(device)
    m = _mask((5, 40), 0.5, device, seed=21)
    monkeypatch.setattr(compact_module, "_capturing", lambda dev: True)
    # An empty input too: whether a call captures does not depend on its size.
    for xs, ms in ((x, m), (x[:0], m[:0])):
        with pytest.raises(RuntimeError, match=_CAPTURE_ERROR.format("the call")):
            masked_select(xs, ms)


def test_masked_select_backward_refuses_capture(monkeypatch, device):
    # Forward eager, backward captured: a replay could see another mask than the one that sized
    # grad (and read grad past its end), so the backward refuses too.
    x = torch.randn(5, 40, generator=_gen(22)).to(device).requires_grad_(True)
    out = masked_select(x, _mask((5, 40), 0.5, device, seed=23))
    monkeypatch.setattr(compact_module, "_capturing", lambda dev: True)
    with pytest.raises(RuntimeError, match=_CAPTURE_ERROR.format("the backward")):
        torch.autograd.grad(out, x, torch.ones_like(out))


@pytest.mark.parametrize("variant", ("lookback",) + _NEW_VARIANTS)
def test_compact_under_capture_reads_nothing_back_forward_and_backward(variant, monkeypatch, tunables, device):
    tunables("compact", VARIANT=variant)
    x = torch.randn(7, 300, generator=_gen(24)).to(device).requires_grad_(True)
    m = _mask((7, 300), 0.4, device, seed=25)
    dv = torch.randn(2100, generator=_gen(26)).to(device)

    def run():
        values, count = compact(x, m)
        return values, count, torch.autograd.grad(values, x, dv)[0]

    want = run()

    def refuse(*args, **kwargs):
        raise AssertionError("host read of a device value or synchronization while capturing a CUDA graph")

    with monkeypatch.context() as mp:
        mp.setattr(compact_module, "_capturing", lambda dev: True)
        for name in ("item", "tolist", "__int__", "__bool__", "__index__", "__float__"):
            mp.setattr(torch.Tensor, name, refuse)
        mp.setattr(torch.cuda, "synchronize", refuse)
        mp.setattr(torch.cuda.Event, "synchronize", refuse)
        mp.setattr(torch.cuda.Stream, "synchronize", refuse)
        values, count, g = run()
    k = int(count)
    assert k == int(want[1]) == int(m.sum())
    assert torch.equal(_bits(values[:k]), _bits(want[0][:k])) and torch.equal(g, want[2])
