"""roofkit.matmul / roofkit.linear and gemm_waves (CPU: fp16 and fp32 under the interpreter).

No module-level marker yet: the "matmul" marker is not registered in pyproject.toml.
"""

import dataclasses
import importlib

import pytest
import torch
import torch.nn.functional as F

from roofkit.harness.roofline import gemm_waves
from roofkit.harness.verify import verify_op
from roofkit.ops.matmul import SPEC, Config, linear, matmul, matmul_cost

pytestmark = pytest.mark.matmul

mm = importlib.import_module("roofkit.ops.matmul")

SMALL_TILES = Config(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_warps=4, num_stages=2)
TMA_SMALL = Config(16, 16, 16, 2, 4, 2, kind="tma")
TMA_PERSISTENT = Config(16, 16, 16, 2, 4, 2, kind="tma", persistent=True)  # grid = CPU count (2) < tiles
SPLIT_K = Config(16, 16, 16, 2, 4, 2, kind="ptr", split_k=3)
TMA_EPI_SPLIT = Config(16, 32, 16, 2, 4, 2, kind="tma", persistent=True, epilogue_split=2)
TMA_STORE = Config(16, 32, 16, 2, 4, 2, kind="tma", persistent=True, epilogue_split=2, store_desc=True)


def _t(shape, device, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(device=device, dtype=dtype)


# (Every registry case, in every dtype with three seeds: tests/test_ops_generic.py.)


def test_matmul_multi_tile_grouped_order_and_k_loop(monkeypatch, device):
    # 16x16x16 tiles: 3x2 tiles (ragged), GROUP_M 2 with a short last group, 2 K steps.
    monkeypatch.setattr(mm, "_launch_config", lambda *a: SMALL_TILES)
    cases = ["small_odd_33x17x29", "transposed_b_19x23x37", "c_transposed_batched_2x13x14x15",
             "broadcast_a2d_9x10x11", "broadcast_b2d_9x10x11", "gelu_bias_17x18x19", "alpha_beta_c_13x14x15"]
    report = verify_op(SPEC, cases=cases, seeds=2, device=device)
    assert report.passed, report.summary()


def test_matmul_batches_beyond_grid_limit_launch_in_chunks(monkeypatch, device):
    monkeypatch.setattr(mm._gemm, "MAX_GRID_Y", 1)
    cases = ["batched_3x9x10x11", "broadcast_a2d_9x10x11", "broadcast_b2d_shared_c_9x10x11",
             "c_transposed_batched_2x13x14x15"]
    report = verify_op(SPEC, cases=cases, seeds=1, device=device)
    assert report.passed, report.summary()


def test_matmul_every_output_tile_written_once(monkeypatch, device):
    # A wrong grouped mapping would skip some tiles (NaN from poisoned memory) or repeat others.
    monkeypatch.setattr(mm, "_launch_config", lambda *a: SMALL_TILES)
    a, b = _t((81, 23), device), _t((23, 50), device, seed=1)  # 6 x 4 tiles, 3 groups of 2
    y = matmul(a, b)
    torch.testing.assert_close(y, (a.double() @ b.double()).float(), rtol=1e-5, atol=1e-5)


def test_matmul_upstream_case_small_cpu(device):
    # The Triton matmul tutorial's check (fp16 randn vs torch.matmul, atol 1e-2, rtol 0) at 64^3.
    a, b = _t((64, 64), device, torch.float16), _t((64, 64), device, torch.float16, seed=1)
    assert torch.allclose(matmul(a, b), torch.matmul(a, b), atol=1e-2, rtol=0)


@pytest.mark.gpu
def test_matmul_upstream_case_512(device):
    a, b = _t((512, 512), device, torch.float16), _t((512, 512), device, torch.float16, seed=1)
    assert torch.allclose(matmul(a, b), torch.matmul(a, b), atol=1e-2, rtol=0)


def test_matmul_activation_rounds_once_from_fp32_accumulator(device):
    # fp16 out: equal to the fp32-epilogue result rounded once (not torch's stepwise rounding).
    a, b = _t((20, 24), device, torch.float16), _t((24, 12), device, torch.float16, seed=1)
    bias = _t((12,), device, torch.float16, seed=2)
    y = matmul(a, b, bias=bias, activation="gelu")
    want = F.gelu(a.double() @ b.double() + bias.double()).to(torch.float16)
    ulps = (y.float() - want.float()).abs() / torch.finfo(torch.float16).eps / want.float().abs().clamp_min(1e-3)
    assert ulps.max() <= 1.01  # at most one fp16 ulp away from the exactly rounded value


def test_matmul_tf32_flag_selects_input_precision():
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        assert mm._gemm.input_precision(torch.float32) == "ieee"
        torch.backends.cuda.matmul.allow_tf32 = True
        assert mm._gemm.input_precision(torch.float32) == "tf32"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def test_matmul_beta_zero_ignores_nan_in_c(device):
    a, b = _t((5, 6), device), _t((6, 7), device, seed=1)
    c = torch.full((5, 7), float("nan"), device=device)
    y = matmul(a, b, c=c, beta=0.0)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, torch.addmm(c, a, b, beta=0.0))


def test_matmul_k0_matches_addmm(device):
    a, b = torch.empty((4, 0), device=device), torch.empty((0, 3), device=device)
    c, bias = _t((4, 3), device), _t((3,), device, seed=1)
    torch.testing.assert_close(matmul(a, b, c=c, beta=0.5, bias=bias), torch.addmm(c, a, b, beta=0.5) + bias)


def test_matmul_empty_inputs_no_launch(forbid_launch, device):
    for name in ("_matmul_kernel", "_matmul_tma_kernel"):
        forbid_launch(mm._gemm, name)
    for sa, sb, want in [((0, 5), (5, 3), (0, 3)), ((4, 5), (5, 0), (4, 0)), ((0, 4, 5), (5, 3), (0, 4, 3)),
                         ((1, 4, 5), (0, 5, 3), (0, 4, 3))]:
        y = matmul(torch.empty(sa, device=device), torch.empty(sb, device=device))
        assert tuple(y.shape) == want
    y = matmul(torch.empty((4, 0), device=device), torch.empty((0, 3), device=device), activation="gelu")
    assert y.shape == (4, 3) and (y == 0).all()
    y = linear(torch.empty((0, 5), device=device), _t((3, 5), device))
    assert y.shape == (0, 3)


def test_matmul_cost_hand_computed():
    case = SPEC.case("alpha_beta_c_13x14x15")  # fp16: A 13*15, B 15*14, bias 14, c 13*14, out 13*14
    cost = matmul_cost(case, torch.float16)
    assert cost.flops == 2 * 13 * 14 * 15
    assert cost.bytes == 2 * (13 * 15 + 15 * 14 + 14 + 13 * 14 + 13 * 14)
    bc = matmul_cost(SPEC.case("broadcast_b2d_9x10x11"), torch.float32)  # (3,9,11) @ (11,10) + bias
    assert bc.flops == 2 * 3 * 9 * 10 * 11
    assert bc.bytes == 4 * (3 * 9 * 11 + 11 * 10 + 10 + 3 * 9 * 10)
    out32 = matmul_cost(SPEC.case("out_fp32_11x12x13"), torch.float16)
    assert out32.bytes == 2 * (11 * 13 + 13 * 12 + 12) + 4 * 11 * 12


def test_gemm_waves_hand_computed():
    w = gemm_waves(4096, 4096, 4096, 128, 128, 132)  # 32*32 = 1024 tiles on 132 SMs
    assert (w.tiles, w.slots, w.waves) == (1024, 132, 8)
    assert w.last_wave_occupancy == pytest.approx(100 / 132)  # 1024 - 7*132 = 100
    assert w.wave_efficiency == pytest.approx(1024 / 1056)
    w = gemm_waves(1000, 300, 7, 128, 128, 10, ctas_per_sm=2)  # 8*3 = 24 tiles, 20 slots
    assert (w.tiles, w.waves) == (24, 2) and w.last_wave_occupancy == pytest.approx(0.2)
    assert w.wave_efficiency == pytest.approx(24 / 40)
    w = gemm_waves(256, 256, 1, 128, 128, 4)  # exactly one full wave
    assert (w.tiles, w.waves, w.last_wave_occupancy, w.wave_efficiency) == (4, 1, 1.0, 1.0)
    assert gemm_waves(0, 256, 64, 128, 128, 4).waves == 0
    with pytest.raises(ValueError):
        gemm_waves(1, 1, 1, 0, 128, 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh", "silu"])
def test_linear_autograd_matches_torch(dtype, activation, device):
    x = _t((2, 5, 19), device, dtype).requires_grad_()
    w = (0.3 * _t((13, 19), device, dtype, seed=1)).requires_grad_()
    b = _t((13,), device, dtype, seed=2).requires_grad_()
    dy = _t((2, 5, 13), device, dtype, seed=3)
    y = linear(x, w, b, activation)
    grads = torch.autograd.grad(y, (x, w, b), dy)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    y64 = mm._activation_torch(F.linear(x64, w64, b64), activation)
    grads64 = torch.autograd.grad(y64, (x64, w64, b64), dy.double())
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    assert y.dtype == dtype and y.shape == (2, 5, 13)
    torch.testing.assert_close(y.double(), y64, **tol)
    for g, g64 in zip(grads, grads64):
        assert g.dtype == dtype
        torch.testing.assert_close(g.double(), g64, **tol)


def test_linear_no_bias_and_transposed_input(device):
    x = _t((19, 7), device).t().requires_grad_()  # (7, 19) transposed view
    w = _t((5, 19), device, seed=1).requires_grad_()
    y = linear(x, w)
    torch.testing.assert_close(y, F.linear(x, w), rtol=1e-5, atol=1e-5)
    gx, gw = torch.autograd.grad(y.sum(), (x, w))
    rx, rw = torch.autograd.grad(F.linear(x, w).sum(), (x, w))
    torch.testing.assert_close(gx, rx, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gw, rw, rtol=1e-5, atol=1e-5)


def test_linear_1d_input_like_torch(device):
    x, w = _t((9,), device), _t((4, 9), device, seed=1)
    y = linear(x, w)
    assert y.shape == (4,)
    torch.testing.assert_close(y, F.linear(x, w), rtol=1e-5, atol=1e-5)


def test_linear_torch_compile_fullgraph_backward(device):
    torch._dynamo.reset()

    def f(x, w, b):
        return linear(x, w, b, "silu").sum()

    cf = torch.compile(f, fullgraph=True, backend="aot_eager")
    x = _t((6, 9), device).requires_grad_()
    w = _t((4, 9), device, seed=1).requires_grad_()
    b = _t((4,), device, seed=2).requires_grad_()
    out = cf(x, w, b)
    grads = torch.autograd.grad(out, (x, w, b))
    ref = torch.autograd.grad(F.silu(F.linear(x, w, b)).sum(), (x, w, b))
    torch.testing.assert_close(out, F.silu(F.linear(x, w, b)).sum(), rtol=1e-5, atol=1e-5)
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)


def test_matmul_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    cf = torch.compile(lambda a, b, bias: matmul(a, b, bias=bias, activation="relu", alpha=2.0), fullgraph=True,
                       backend="aot_eager")
    a, b, bias = _t((2, 5, 6), device), _t((6, 3), device, seed=1), _t((3,), device, seed=2)
    torch.testing.assert_close(cf(a, b, bias), torch.relu(2.0 * (a @ b) + bias), rtol=1e-5, atol=1e-5)


def _bad_cases():
    f32 = lambda d, *s: torch.ones(*s, device=d)  # noqa: E731
    return [
        (lambda d: matmul(f32(d, 3, 4), f32(d, 5, 2)), ValueError, ["roofkit.matmul", "inner", "K=4"]),
        (lambda d: matmul(f32(d, 2, 3, 4), f32(d, 3, 4, 2)), ValueError, ["roofkit.matmul", "batch"]),
        (lambda d: matmul(f32(d, 3, 4), f32(d, 4, 2).half()), TypeError, ["roofkit.matmul", "other", "mixed"]),
        (lambda d: matmul(f32(d, 3, 4).double(), f32(d, 4, 2).double()), TypeError, ["roofkit.matmul", "input", "float64"]),
        (lambda d: matmul(f32(d, 3, 4).int(), f32(d, 4, 2)), TypeError, ["roofkit.matmul", "input"]),
        (lambda d: matmul(f32(d, 3, 4), f32(d, 4, 2), bias=f32(d, 3)), ValueError, ["roofkit.matmul", "bias", "(2,)"]),
        (lambda d: matmul(f32(d, 3, 4), f32(d, 4, 2), bias=f32(d, 2).half()), TypeError, ["roofkit.matmul", "bias"]),
        (lambda d: matmul(f32(d, 3, 4), f32(d, 4, 2), activation="tanh"), ValueError, ["roofkit.matmul", "activation", "tanh"]),
        (lambda d: matmul(f32(d, 3, 4), f32(d, 4, 2), activation=1), TypeError, ["roofkit.matmul", "activation"]),
        (lambda d: matmul(f32(d, 3, 4), f32(d, 4, 2), alpha="2"), TypeError, ["roofkit.matmul", "alpha"]),
        (lambda d: matmul(f32(d, 3, 4), f32(d, 4, 2), c=f32(d, 3, 3), beta=1.0), ValueError, ["roofkit.matmul", "c"]),
        (lambda d: matmul(f32(d, 3, 4), f32(d, 4, 2), out_dtype=torch.int32), TypeError, ["roofkit.matmul", "out_dtype"]),
        (lambda d: matmul(f32(d, 4), f32(d, 4, 2)), ValueError, ["roofkit.matmul", "input", "dimensions"]),
        (lambda d: matmul([[1.0]], f32(d, 1, 2)), TypeError, ["roofkit.matmul", "input", "torch.Tensor"]),
        (lambda d: linear(f32(d, 3, 4), f32(d, 2, 5)), ValueError, ["roofkit.linear", "weight", "(N, 4)"]),
        (lambda d: linear(f32(d, 3, 4), f32(d, 2, 4), bias=f32(d, 3)), ValueError, ["roofkit.linear", "bias"]),
        (lambda d: linear(f32(d, 3, 4), f32(d, 2, 4).half()), TypeError, ["roofkit.linear", "weight"]),
        (lambda d: linear(f32(d, 3, 4), f32(d, 2, 4), activation="gelu_erf"), ValueError, ["roofkit.linear", "activation"]),
        (lambda d: linear(torch.tensor(1.0, device=d), f32(d, 2, 1)), ValueError, ["roofkit.linear", "input"]),
    ]


@pytest.mark.parametrize("i", range(len(_bad_cases())))
def test_bad_input_raises_naming_op_and_argument(i, device):
    call, exc, words = _bad_cases()[i]
    with pytest.raises(exc) as info:
        call(device)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


@pytest.mark.parametrize("cfg", [TMA_SMALL, TMA_PERSISTENT, TMA_EPI_SPLIT, TMA_STORE, SPLIT_K, SMALL_TILES], ids=lambda c: c.label())
def test_matmul_each_launch_form_matches_float64_reference(monkeypatch, device, cfg):
    # Multi-tile grids for each form: descriptor loads (plain and persistent, where each program
    # walks several tiles), split-K (3 K chunks, the last program combining in order) and pointer loads.
    # One seed (with the repeat-call checks): the registry-wide test draws three of each case.
    monkeypatch.setattr(mm, "_launch_config", lambda *a: cfg)
    cases = ["small_odd_33x17x29", "transposed_a_19x23x37", "transposed_b_19x23x37", "strided_both_12x10x9",
             "gelu_bias_17x18x19", "alpha_beta_c_13x14x15", "c_row_broadcast_13x14x15", "broadcast_b2d_folded_c_9x10x11",
             "out_fp32_11x12x13", "m1_1x20x19", "n1_21x1x18", "aligned_fp32_24x40x17"]
    if device.type == "cpu":
        # Under the interpreter (fp16 upcast in the kernel) the cases in float16 alone, float32
        # through aligned_fp32 (a multi-tile grid with bias and GELU); the registry-wide test runs
        # every case in both.
        cases = [n if n == "aligned_fp32_24x40x17" else dataclasses.replace(SPEC.case(n), dtypes=(torch.float16,))
                 for n in cases]
    report = verify_op(SPEC, cases=cases, seeds=1, device=device)
    assert report.passed, report.summary()


def test_matmul_misaligned_strides_are_copied_for_descriptors(device):
    # K = 13 fp16: a row stride of 26 bytes cannot be described by a tensor descriptor.
    a = _t((20, 13), device, torch.float16)
    assert mm._gemm._aligned(a).stride(0) == 16 and mm._gemm._aligned(a).data_ptr() != a.data_ptr()
    aligned = _t((20, 16), device, torch.float16)
    assert mm._gemm._aligned(aligned).data_ptr() == aligned.data_ptr()
    assert mm._gemm._aligned(aligned.t()).data_ptr() == aligned.data_ptr()  # column-major, described as its transpose


def test_split_k_heuristic_only_for_few_tiles_and_long_k():
    dev = torch.device("cpu")
    sms = mm.sm_count(dev)
    cfg = mm._split_k_config(1, 1024, 16384, torch.bfloat16, 132)
    assert cfg is not None and cfg.split_k > 1 and cfg.BLOCK_M == 16
    assert cfg.split_k * 16 <= 2 * 132  # tiles * split <= 2 programs per SM
    assert mm._split_k_config(1, 4096, 4096, torch.bfloat16, 132) is None  # measured no faster
    assert mm._split_k_config(8192, 8192, 8192, torch.bfloat16, 132) is None  # plenty of tiles
    assert mm._split_k_config(1, 4096, 512, torch.bfloat16, 132) is None  # short K
    assert mm._launch_config(4096, 4096, 4096, torch.bfloat16, dev, True).kind == "tma"
    assert mm._launch_config(4096, 4096, 4096, torch.bfloat16, dev, False).kind == "ptr"
    assert sms >= 1


def test_gemv_default_streams_the_weight(monkeypatch):
    # M <= 16 with 16-bit inputs: 16x64 pointer tiles, BLOCK_K 256 where 4 stages fit the
    # device's shared memory per block (halved until they do), min(SMs // tiles, K // 2048) K
    # chunks; fp32 and M > 16 keep the general default.
    cuda = torch.device("cuda", 0)  # device facts patched: no GPU needed
    monkeypatch.setattr(mm, "sm_count", lambda d: 132)
    monkeypatch.setattr(mm, "shared_memory_limits", lambda i: (232448, 233472))
    cfg = mm._launch_config(1, 4096, 4096, torch.bfloat16, cuda, True)
    assert (cfg.kind, cfg.BLOCK_M, cfg.BLOCK_N, cfg.BLOCK_K, cfg.split_k) == ("ptr", 16, 64, 256, 2)
    assert mm._launch_config(16, 14336, 4096, torch.float16, cuda, True).split_k == 1  # 224 tiles > SMs / 2
    assert mm._launch_config(1, 1024, 6144, torch.bfloat16, cuda, True).split_k == 3  # 16 tiles: K // 2048
    assert mm._launch_config(1, 4096, 100, torch.bfloat16, cuda, True).BLOCK_K == 128  # next_pow2(K)
    monkeypatch.setattr(mm, "shared_memory_limits", lambda i: (101376, 102400))  # a 99 KB part
    cfg = mm._launch_config(1, 4096, 4096, torch.bfloat16, cuda, True)
    assert cfg.BLOCK_K == 128 and 4 * (16 * 128 + 128 * 64) * 2 + 4096 <= 101376
    assert mm._launch_config(17, 4096, 4096, torch.bfloat16, cuda, True).kind == "tma"
    assert mm._launch_config(1, 4096, 4096, torch.float32, cuda, True).BLOCK_K == 32


def test_gemv_default_matches_float64_in_two_k_chunks(monkeypatch, device):
    # 1 x 4096 x 64 fp16: one 16x64 tile, so the default splits K in two (4096 // 2048).
    monkeypatch.setattr(mm, "sm_count", lambda d: 132)  # as many SMs as the H200 (CPU: cores)
    a, b = _t((1, 4096), device, torch.float16), _t((4096, 64), device, torch.float16, seed=1)
    cfg = mm._launch_config(1, 64, 4096, torch.float16, a.device, mm._gemm.tma_supported(a.device))
    assert cfg.split_k == 2 and cfg.BLOCK_K == 256
    y = matmul(a, b)
    want = a.double() @ b.double()
    assert ((y.double() - want).norm() / want.norm()).item() < 2e-3


def test_split_k_is_bitwise_deterministic(monkeypatch, device):
    monkeypatch.setattr(mm, "_launch_config", lambda *a: SPLIT_K)
    a, b = _t((9, 70), device), _t((70, 11), device, seed=1)
    y1, y2 = matmul(a, b), matmul(a, b)
    assert torch.equal(y1, y2)
    torch.testing.assert_close(y1, (a.double() @ b.double()).float(), rtol=1e-5, atol=1e-5)


def test_split_k_leaves_tile_counters_at_zero(monkeypatch, device):
    # The last program of each tile resets its arrival counter: a stale count would make the next
    # launch combine before every slot is written. Several shapes in a row reuse one buffer.
    monkeypatch.setattr(mm, "_launch_config", lambda *a: SPLIT_K)
    for i, (m, k, n) in enumerate([(9, 70, 11), (40, 100, 33), (1, 50, 70), (9, 70, 11)]):
        a, b = _t((m, k), device, seed=i), _t((k, n), device, seed=i + 10)
        y = matmul(a, b, bias=_t((n,), device, seed=i + 20), activation="relu")
        want = torch.relu(a.double() @ b.double() + _t((n,), device, seed=i + 20).double()).float()
        torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
        if device.type == "cuda":
            assert int(mm._gemm._tile_locks(device, 1).count_nonzero()) == 0


def test_autotune_key_buckets_nearby_shapes(device):
    a1, b1 = _t((1000, 700), device), _t((700, 900), device)
    a2, b2 = _t((1020, 600), device), _t((600, 1000), device)
    assert mm._tune_key(a1, b1, None, torch.float32) == mm._tune_key(a2, b2, None, torch.float32)
    assert mm._tune_key(a1, b1, None, torch.float32) != mm._tune_key(a1.t().contiguous().t(), b1, None, torch.float32)
    assert mm._tune_key(_t((1100, 700), device), b1, None, torch.float32) != mm._tune_key(a1, b1, None, torch.float32)


@pytest.mark.gpu
def test_autotuned_choice_is_verified_and_cached_gpu(monkeypatch, tmp_path, device):
    # The autotuner on a real device: every candidate checked against torch, the winner cached.
    monkeypatch.setenv("ROOFKIT_AUTOTUNE", "1")
    monkeypatch.setenv("ROOFKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(mm, "_TUNER", mm.Tuner("matmul", mm.Config.as_dict, lambda d: mm.Config(**d), mm._TUNER.tol))
    a, b = _t((1000, 700), device, torch.bfloat16), _t((700, 900), device, torch.bfloat16, seed=1)
    y = matmul(a, b)
    entry = next(iter(mm._TUNER.log.values()))
    assert entry["verified"] and sum(r["status"] == "ok" for r in entry["candidates"]) >= 2
    assert list((tmp_path / "autotune").glob("matmul-*.json"))
    torch.testing.assert_close(y.float(), (a.double() @ b.double()).float(), rtol=2e-2, atol=2e-1)


def test_gelu_epilogue_matches_float64_across_the_range(device):
    # out = gelu(x @ 1): the epilogue's Phi against float64, relative, including the far negative
    # tail (no 1 - erf cancellation) and the saturated positive side.
    x = torch.cat([torch.linspace(-12, 12, 4001), torch.tensor([0.0, -1e-30, 1e-30, 40.0, -40.0])])
    a = x.to(device=device, dtype=torch.float32)[:, None]
    one = torch.ones((1, 1), device=device)
    y = matmul(a, one, activation="gelu").double().cpu()[:, 0]
    want = x.double() * 0.5 * torch.special.erfc(-x.double() / 2**0.5)  # F.gelu cancels (1 + erf) in the tail
    rel = (y - want).abs() / want.abs().clamp_min(1e-300)
    tiny = want.abs() < 1e-36  # below fp32's normal range
    # fp32 rounding of the exponent -x^2/2 costs ~x^2 * 6e-8 relative in the far tail; near 0, ~3 ulp.
    bound = 6e-7 * (1 + x.double() ** 2)  # (GPU exp2 is approximate: ~2 ulp)
    assert (rel <= bound)[~tiny].all(), (rel / bound)[~tiny].max()


def test_matmul_and_linear_read_strided_bias_by_its_strides(device):
    # Hostile review: a bias with stride 2 (or 0) was read as if contiguous.
    a, b = _t((3, 4, 5), device), _t((5, 6), device, seed=1)
    for bias in (_t((12,), device, seed=2)[::2], torch.tensor([1.5], device=device).expand(6)):
        torch.testing.assert_close(matmul(a, b, bias=bias), a @ b + bias, rtol=1e-5, atol=1e-5)
        x, w = _t((4, 5), device, seed=3), _t((6, 5), device, seed=4)
        torch.testing.assert_close(linear(x, w, bias), F.linear(x, w, bias), rtol=1e-5, atol=1e-5)


def test_relu_epilogue_keeps_nan(device):
    # tl.maximum drops NaN on the GPU unless told otherwise; torch.relu keeps it.
    a = torch.ones((1, 1), device=device)
    b = torch.tensor([[float("nan"), -1.0, 2.0]], device=device)
    y = matmul(a, b, activation="relu")
    assert torch.isnan(y[0, 0]) and y[0, 1] == 0 and y[0, 2] == 2


def test_linear_k0_and_high_rank_inputs(device):
    w, bias = torch.empty((2, 0), device=device), torch.ones(2, device=device)
    torch.testing.assert_close(linear(torch.empty((3, 0), device=device), w, bias), torch.ones(3, 2, device=device))
    x = _t((1, 1, 1, 1, 1, 1, 1, 1, 2, 3), device)  # 10-D: torch accepts any rank
    w = _t((4, 3), device, seed=1)
    torch.testing.assert_close(linear(x, w), F.linear(x, w), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="roofkit.linear: input"):
        linear(torch.tensor(1.0, device=device), w)


def test_bf16_operands_under_the_interpreter_or_gpu(device):
    # The interpreter cannot multiply bf16 in tl.dot: the kernels upcast there.
    a, b = _t((20, 24), device, torch.bfloat16), _t((24, 12), device, torch.bfloat16, seed=1)
    want = a.double() @ b.double()
    got = matmul(a, b).double()
    assert ((got - want).norm() / want.norm()) < 1e-2


@pytest.mark.parametrize("activation", [None, "gelu"])
def test_matmul_autograd_all_inputs_with_broadcasts(activation, device):
    # dA, dB (B 2-D, broadcast over A's batch), dc (c broadcast as a row), dbias, against float64.
    a = _t((3, 9, 11), device).requires_grad_()
    b = (0.3 * _t((11, 10), device, seed=1)).requires_grad_()
    c = _t((1, 10), device, seed=2).requires_grad_()
    bias = _t((10,), device, seed=3).requires_grad_()
    dy = _t((3, 9, 10), device, seed=4)
    y = matmul(a, b, c=c, beta=0.5, alpha=1.5, bias=bias, activation=activation)
    grads = torch.autograd.grad(y, (a, b, c, bias), dy)
    leaves64 = [t.detach().double().requires_grad_() for t in (a, b, c, bias)]
    a64, b64, c64, bias64 = leaves64
    y64 = mm.matmul_reference(a64, b64, c=c64, beta=0.5, alpha=1.5, bias=bias64, activation=activation)
    grads64 = torch.autograd.grad(y64, leaves64, dy.double())
    for g, g64, t in zip(grads, grads64, (a, b, c, bias)):
        assert g.shape == t.shape and g.dtype == t.dtype
        torch.testing.assert_close(g.double(), g64, rtol=1e-4, atol=1e-4)


def test_matmul_autograd_batch_of_one_broadcast(device):
    a = _t((1, 5, 7), device).requires_grad_()
    b = _t((4, 7, 6), device, seed=1).requires_grad_()
    y = matmul(a, b)
    ga, gb = torch.autograd.grad(y, (a, b), torch.ones_like(y))
    a64, b64 = (t.detach().double().requires_grad_() for t in (a, b))
    ga64, gb64 = torch.autograd.grad(torch.matmul(a64, b64), (a64, b64), torch.ones(4, 5, 6, dtype=torch.float64, device=device))
    assert ga.shape == (1, 5, 7)
    torch.testing.assert_close(ga.double(), ga64, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gb.double(), gb64, rtol=1e-5, atol=1e-5)


def test_matmul_torch_compile_fullgraph_backward(device):
    torch._dynamo.reset()

    def f(a, b, bias):
        return matmul(a, b, bias=bias, activation="relu").sum()

    cf = torch.compile(f, fullgraph=True, backend="aot_eager")
    a, b = _t((2, 6, 9), device).requires_grad_(), _t((9, 5), device, seed=1).requires_grad_()
    bias = _t((5,), device, seed=2).requires_grad_()
    grads = torch.autograd.grad(cf(a, b, bias), (a, b, bias))
    ref = torch.autograd.grad(torch.relu(a @ b + bias).sum(), (a, b, bias))
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)
