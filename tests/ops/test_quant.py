"""quantize / dequantize / int8_matmul / scaled_mm: properties the registry-wide test cannot state."""

import dataclasses
import importlib

import pytest
import torch

from roofkit.harness.spec import case
from roofkit.harness.verify import verify_op

quant = importlib.import_module("roofkit.ops.quant")
# Launch settings, kernels and private helpers live in the submodule that reads them; patch them there.
affine = importlib.import_module("roofkit.ops.quant.affine")
gemm = importlib.import_module("roofkit.ops.quant.gemm")
from roofkit.ops.quant import dequantize, int8_matmul, quantize, scaled_mm  # noqa: E402

pytestmark = pytest.mark.quant


@pytest.fixture
def fp8_inputs_comparable():
    """verify compares float8 inputs by their bytes (harness/verify.py); kept as a named fixture."""


def _cpu_cases(spec, names=None):
    return [c for c in spec.cases if "gpu" not in c.tags and (names is None or c.name in names)]


def _randn(shape, device, dtype=torch.float32, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(device=device, dtype=dtype)


# ----------------------------------------------------------------------------- against the references


def test_quantize_matches_exact_reference(device):
    # Every CPU case once, its dtypes taken in turn (one a case) and one seed: a fast signal from
    # this file alone. The registry-wide test runs each case in every dtype with three seeds.
    spec = quant.QUANTIZE_SPEC
    cases = [dataclasses.replace(c, dtypes=(spec.case_dtypes(c)[i % len(spec.case_dtypes(c))],))
             for i, c in enumerate(_cpu_cases(spec))]
    report = verify_op(spec, cases=cases, seeds=1, device=device)
    assert report.rows and report.passed, report.summary()
    assert len(report.rows) == len(cases)


# (Every registry case, in every dtype with three seeds: tests/test_ops_generic.py.)


def test_scaled_mm_matches_float64_reference(device, fp8_inputs_comparable):
    report = verify_op(quant.SCALED_MM_SPEC, cases=_cpu_cases(quant.SCALED_MM_SPEC), seeds=2, device=device)
    assert report.rows and report.passed, report.summary()


_TMA_CASES = ["kmajor_b_row_col_40x48x64", "row_major_b_40x48x64", "col_only_out_fp32_19x23x64", "m1_1x20x70"]


@pytest.mark.parametrize("spec_name", ["INT8_MATMUL_SPEC", "SCALED_MM_SPEC"])
def test_gemm_tensor_descriptor_path_matches_reference(spec_name, tunables, device, fp8_inputs_comparable):
    # The interpreter runs the TMA (tensor-descriptor) branch too when forced: same indexing,
    # zero fill past the edges, b read as its (N, K) transpose.
    spec = getattr(quant, spec_name)
    tunables("int8_matmul", TMA_MODE="force")
    c = spec.case("kmajor_b_row_col_40x48x64")
    inp = spec.make_inputs(c, spec.dtypes[0], torch.Generator().manual_seed(0), device)
    assert gemm._tma_ok(inp.args[0], inp.args[1])
    c2 = spec.case("row_major_b_40x48x64")
    inp2 = spec.make_inputs(c2, spec.dtypes[0], torch.Generator().manual_seed(0), device)
    assert not gemm._tma_ok(inp2.args[0], inp2.args[1])
    report = verify_op(spec, cases=_TMA_CASES, seeds=2, device=device)
    assert report.passed, report.summary()


def test_gemm_layout_choice_of_tma_mode(tunables, device):
    a = torch.zeros(64, 32, dtype=torch.int8, device=device)
    b = torch.zeros(48, 32, dtype=torch.int8, device=device).t()
    tunables("int8_matmul", TMA_MODE="off")
    assert not gemm._tma_ok(a, b)
    tunables("int8_matmul", TMA_MODE="force")
    assert gemm._tma_ok(a, b)
    assert not gemm._tma_ok(a[:, 1:], b[1:])  # misaligned rows: pointer path
    if not torch.cuda.is_available():
        tunables("int8_matmul", TMA_MODE="auto")
        assert not gemm._tma_ok(a, b)  # never on the interpreter by default


# ----------------------------------------------------------------------------- quantize properties


def test_quantize_rounds_half_to_even(device):
    # uint8, lo = 0, hi = 255/8: S = 1/8 exactly, so x = k/8 + 1/16 are exact ties of x / S.
    x = torch.tensor([0.0, 255 / 8, 0.5 / 8, 1.5 / 8, 2.5 / 8, 3.5 / 8, 100.5 / 8, 7 / 8], device=device)
    q, s, z = quantize(x, dtype=torch.uint8)
    assert s.item() == 0.125 and z.item() == 0
    assert q.tolist() == [0, 255, 0, 2, 2, 4, 100, 7]
    # int8 on the same data: Z = -128, the same ties shifted.
    q8, s8, z8 = quantize(x, dtype=torch.int8)
    assert s8.item() == 0.125 and z8.item() == -128
    assert q8.tolist() == [v - 128 for v in [0, 255, 0, 2, 2, 4, 100, 7]]


def test_quantize_symmetric_range_has_zero_point_zero_and_exact_zero(device):
    # lo = -128/16, hi = 127/16: S = 1/16 exactly and Z = 0, as symmetric int8.
    x = torch.tensor([-8.0, -1.0, 0.0, 0.3, 127 / 16], device=device)
    q, s, z = quantize(x)
    assert z.item() == 0 and s.item() == 0.0625
    assert q.tolist() == [-128, -16, 0, 5, 127]
    r = dequantize(q, s, z)
    assert r[2].item() == 0.0  # 0 is exactly representable (Z is an integer)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_quantize_round_trip_error_within_half_a_step(axis, device):
    x = _randn((13, 37), device, seed=axis if axis is not None else 7, scale=5.0)
    q, s, z = quantize(x, axis=axis)
    r = dequantize(q, s, z, axis=axis)
    step = s.expand_as(x) if axis is not None else s
    assert (r - x).abs().le(step * 0.5 * (1 + 1e-5) + 1e-7).all()
    # The parameters broadcast along x's other dimensions (keepdim shape).
    if axis is not None:
        expect = [1, 1]
        expect[axis] = x.shape[axis]
        assert list(s.shape) == expect and list(z.shape) == expect
        assert s.dtype == torch.float32 and z.dtype == torch.int32
    else:
        assert s.dim() == 0 and z.dim() == 0


def test_quantize_constant_and_zero_channels(device):
    x = torch.zeros(3, 5, device=device)
    x[1] = 2.5  # positive constant channel
    x[2] = -0.75  # negative constant channel
    q, s, z = quantize(x, axis=0)
    assert s[0].item() == 1.0 and z[0].item() == -128  # all-zero channel: S = 1, Z = qmin
    assert (q[0] == -128).all()
    r = dequantize(q, s, z, axis=0)
    torch.testing.assert_close(r, x, rtol=1e-6, atol=0.0)
    assert torch.isfinite(s).all() and (s > 0).all()


# The interpreter's numpy reductions warn on the NaN lanes; the GPU has no such warning.
@pytest.mark.filterwarnings("ignore:All-NaN slice encountered:RuntimeWarning")
def test_quantize_non_finite_input_gives_non_finite_scale(device):
    x = _randn((4, 50), device)
    x[2, 7] = float("nan")
    _, s, _ = quantize(x)
    assert torch.isnan(s)
    _, s_axis, _ = quantize(x, axis=0)
    assert torch.isnan(s_axis[2]).item() and torch.isfinite(s_axis[[0, 1, 3]]).all()
    x[2, 7] = float("inf")
    _, s_inf, _ = quantize(x)
    assert torch.isinf(s_inf)


def test_quantize_many_splits_agree_with_one(tunables, device):
    # The min/max reduction split over many programs (partials combined in a fixed order)
    # gives the same bits as a single program per channel block.
    x = _randn((64, 40), device, scale=3.0, seed=3)
    x[50, 3] = 40.0
    x[5, 30] = -17.0
    tunables("quantize", ELEMWISE_TILE=64, MINMAX_PROGRAMS_PER_SM=0)
    one = quantize(x)
    tunables("quantize", MINMAX_PROGRAMS_PER_SM=64)
    many = quantize(x)
    ref = quant.quantize_torch(x)
    for a, b, r in zip(one, many, ref):
        assert torch.equal(a, b) and torch.equal(a, r)


def test_tile_heuristic_puts_the_long_edge_on_the_unit_stride_dimension():
    assert affine._tile3((1, 1, 5000), (5000, 5000, 1)) == [1, 1, 1024]
    assert affine._tile3((8192, 4096, 1), (4096, 1, 1)) == [4, 1024, 1]
    assert affine._tile3((300, 1, 200), (1, 300, 300)) == [512, 1, 8]
    assert affine._tile3((3, 5, 7), (35, 7, 1)) == [4, 8, 8]


# ----------------------------------------------------------------------------- GEMM properties


def test_int8_matmul_zero_point_algebra_exact_against_int64(device):
    g = torch.Generator().manual_seed(5)
    qa = torch.randint(-128, 128, (19, 70), generator=g, dtype=torch.int8).to(device)
    qb = torch.randint(-128, 128, (70, 23), generator=g, dtype=torch.int8).to(device)
    za = torch.randint(-128, 128, (19, 1), generator=g, dtype=torch.int32).to(device)
    zb = torch.randint(-128, 128, (1, 23), generator=g, dtype=torch.int32).to(device)
    one_a = torch.ones(19, 1, device=device)
    one_b = torch.ones(1, 23, device=device)
    exact = (qa.long() - za.long()).cpu() @ (qb.long() - zb.long()).cpu()
    out = int8_matmul(qa, qb, one_a, za, one_b, zb, out_dtype=torch.float32)
    assert torch.equal(out.cpu().long(), exact)  # |sums| < 2**24: exact in fp32 too
    sym = int8_matmul(qa, qb, one_a, None, one_b, None, out_dtype=torch.float32)
    assert torch.equal(sym.cpu().long(), qa.long().cpu() @ qb.long().cpu())


@pytest.mark.parametrize("fmt", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_scaled_mm_per_row_and_column_scales_apply_to_rows_and_columns(fmt, device):
    a = _randn((33, 48), device, seed=1).to(fmt)
    b = _randn((20, 48), device, seed=2).to(fmt).t()
    sa = torch.arange(1, 34, device=device, dtype=torch.float32).reshape(33, 1) / 8
    sb = torch.arange(1, 21, device=device, dtype=torch.float32).reshape(1, 20) / 4
    bias = _randn((40,), device, seed=3)[::2]  # a strided bias
    out = scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.float32)
    ref = (a.double() @ b.double()) * sa.double() * sb.double() + bias.double()
    # The interpreter sums exactly; a GPU's fp8 tensor cores accumulate these 48 products with
    # fewer bits than fp32 (~1e-4 relative). A scale applied along the wrong axis errs by O(1).
    exact = torch.device(device).type == "cpu"
    tol = 1e-5 if exact else 2**-10 * ref.abs().max().item()
    torch.testing.assert_close(out.double(), ref, rtol=1e-5 if exact else 2**-10, atol=tol)


@pytest.mark.parametrize("op", ["int8", "fp8"])
def test_gemm_k0_gives_bias_or_zeros_without_launch(op, forbid_launch, device):
    forbid_launch(gemm, "_qmm_kernel")
    forbid_launch(gemm, "_int8_rowsum_kernel")
    bias = _randn((6,), device)
    one = torch.ones((), device=device)
    if op == "int8":
        a = torch.empty(5, 0, dtype=torch.int8, device=device)
        b = torch.empty(0, 6, dtype=torch.int8, device=device)
        z = torch.tensor(3, dtype=torch.int32, device=device)
        out = int8_matmul(a, b, one, z, one, z, bias=bias, out_dtype=torch.float32)
        zeros = int8_matmul(a, b, one, z, one, z)
    else:
        a = torch.empty(5, 0, device=device).to(torch.float8_e4m3fn)
        b = torch.empty(0, 6, device=device).to(torch.float8_e4m3fn)
        out = scaled_mm(a, b, one, one, bias=bias, out_dtype=torch.float32)
        zeros = scaled_mm(a, b, one, one)
    assert torch.equal(out, bias.expand(5, 6))
    assert zeros.dtype == torch.bfloat16 and zeros.shape == (5, 6) and (zeros == 0).all()


def test_empty_inputs_return_empty_without_launch(forbid_launch, device):
    for module, name in ((gemm, "_qmm_kernel"), (gemm, "_int8_rowsum_kernel"), (affine, "_quantize_minmax_kernel"),
                         (affine, "_quantize_params_kernel"), (affine, "_quantize_kernel"), (affine, "_dequantize_kernel")):
        forbid_launch(module, name)
    one = torch.ones((), device=device)
    out = int8_matmul(torch.empty(0, 4, dtype=torch.int8, device=device), torch.empty(4, 3, dtype=torch.int8, device=device),
                      torch.ones(0, 1, device=device), None, one, None)
    assert out.shape == (0, 3)
    f8 = torch.float8_e5m2
    out = scaled_mm(torch.empty(3, 4, device=device).to(f8), torch.empty(4, 0, device=device).to(f8), one, one)
    assert out.shape == (3, 0)
    q, s, z = quantize(torch.empty(0, 5, device=device), axis=1)
    assert q.shape == (0, 5) and s.shape == (1, 5) and (s == 1).all() and (z == -128).all()
    r = dequantize(q, s, z, axis=1)
    assert r.shape == (0, 5) and r.dtype == torch.float32


# ----------------------------------------------------------------------------- torch.compile


def test_quant_ops_compile_fullgraph(device):
    def fn(x, w):
        q, s, z = quantize(x * 2.0, axis=0)
        r = dequantize(q, s, z, axis=0)
        qw, sw, zw = quantize(w, axis=1)
        y = int8_matmul(q, qw, s, z, sw, zw, out_dtype=torch.float32)
        return r.sum(), y

    x = _randn((9, 32), device, seed=1)
    w = _randn((32, 7), device, seed=2)
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    got_r, got_y = compiled(x, w)
    exp_r, exp_y = fn(x, w)
    assert torch.equal(got_y, exp_y)
    torch.testing.assert_close(got_r, exp_r)


def test_scaled_mm_compiles_fullgraph(device):
    def fn(a, b, sa, sb):
        return scaled_mm(a, b, sa, sb, out_dtype=torch.float32) * 2.0

    a = _randn((16, 32), device, seed=1).to(torch.float8_e4m3fn)
    b = _randn((8, 32), device, seed=2).to(torch.float8_e4m3fn).t()
    sa, sb = torch.full((16, 1), 0.5, device=device), torch.full((1, 8), 2.0, device=device)
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(a, b, sa, sb), fn(a, b, sa, sb))


# ----------------------------------------------------------------------------- cost, heuristics


def test_costs_hand_computed():
    c = case("t", shape=(4, 8, 16), scale_a="row", bias=True, bias_dtype=torch.bfloat16, out_dtype=torch.float32)
    # a 4*16 + b 16*8 (1 byte) + scales 4*(4+1) + bias 8*2 + out 4*8*4
    assert quant.scaled_mm_cost(c, torch.float8_e4m3fn).bytes == 64 + 128 + 20 + 16 + 128
    assert quant.scaled_mm_cost(c, torch.float8_e4m3fn).flops == 2 * 4 * 8 * 16
    # int8 asymmetric: the zero points double the parameter bytes (40); bf16 out 4*8*2.
    ci = case("t", shape=(4, 8, 16), scale_a="row")
    assert quant.int8_matmul_cost(ci, torch.int8).bytes == 64 + 128 + 40 + 64
    ci0 = case("t", shape=(4, 8, 16), scale_a="row", zero_points="none")
    assert quant.int8_matmul_cost(ci0, torch.int8).bytes == 64 + 128 + 20 + 64
    cq = case("t", shape=(6, 10), axis=0)
    assert quant.quantize_cost(cq, torch.bfloat16).bytes == 60 * 2 + 60 + 8 * 6
    assert quant.quantize_cost(case("t", shape=(6, 10)), torch.float32).bytes == 60 * 4 + 60 + 8
    assert quant.dequantize_cost(case("t", shape=(6, 10), axis=1), torch.int8).bytes == 60 + 240 + 80


def test_gemm_launch_heuristic(monkeypatch):
    monkeypatch.setattr(gemm, "interpreter_active", lambda: False)
    cuda = torch.device("cuda")
    assert gemm._gemm_config(8192, 8192, 8192, cuda) == quant.GemmConfig(128, 256, 128, 8, 8, 4)
    assert gemm._gemm_config(16, 14336, 4096, cuda).BLOCK_M == 64
    assert gemm._gemm_config(500, 300, 40, cuda).BLOCK_K == 64
    assert gemm._gemm_config(8192, 8192, 8192, torch.device("cpu")) == quant.INTERPRETER_CONFIG


# ----------------------------------------------------------------------------- bad input


def _f8(shape, d, fmt=torch.float8_e4m3fn):
    return torch.ones(shape, device=d).to(fmt)


def _i8(shape, d):
    return torch.ones(shape, dtype=torch.int8, device=d)


_ONE = lambda d: torch.ones((), device=d)  # noqa: E731
_ZP = lambda d: torch.zeros((), dtype=torch.int32, device=d)  # noqa: E731


@pytest.mark.parametrize(
    "call,exc,words",
    [
        (lambda d: quantize(torch.ones(3, dtype=torch.int32, device=d)), TypeError, ["roofkit.quantize", "x", "int32"]),
        (lambda d: quantize(torch.ones(3, device=d), dtype=torch.int16), TypeError, ["roofkit.quantize", "dtype"]),
        (lambda d: quantize(torch.ones(3, 4, device=d), axis=2), IndexError, ["roofkit.quantize", "axis 2"]),
        (lambda d: quantize(torch.ones(3, 4, device=d), axis=1.0), TypeError, ["roofkit.quantize", "axis"]),
        (lambda d: quantize(torch.ones((), device=d), axis=0), IndexError, ["roofkit.quantize", "0-d"]),
        (lambda d: dequantize(torch.ones(3, device=d), _ONE(d), _ZP(d)), TypeError, ["roofkit.dequantize", "q"]),
        (lambda d: dequantize(_i8((3, 4), d), _ONE(d).half(), _ZP(d)), TypeError, ["roofkit.dequantize", "scale"]),
        (lambda d: dequantize(_i8((3, 4), d), _ONE(d), torch.zeros((), dtype=torch.int8, device=d)), TypeError,
         ["roofkit.dequantize", "zero_point", "int32"]),
        (lambda d: dequantize(_i8((3, 4), d), torch.ones(4, device=d), torch.zeros(4, dtype=torch.int32, device=d), axis=0),
         ValueError, ["roofkit.dequantize", "scale", "(3,)"]),
        (lambda d: dequantize(_i8((3, 4), d), torch.ones(3, device=d), _ZP(d)), ValueError,
         ["roofkit.dequantize", "scale", "one element"]),
        (lambda d: dequantize(_i8((3, 4), d), _ONE(d), _ZP(d), axis=-3), IndexError, ["roofkit.dequantize", "axis"]),
        (lambda d: scaled_mm(torch.ones(4, 8, device=d).half(), _f8((8, 2), d), _ONE(d), _ONE(d)), TypeError,
         ["roofkit.scaled_mm", "a", "float16"]),
        (lambda d: scaled_mm(_f8((4, 8), d), _f8((8, 2), d, torch.float8_e5m2), _ONE(d), _ONE(d)), TypeError,
         ["roofkit.scaled_mm", "same fp8 dtype"]),
        (lambda d: scaled_mm(_f8((4, 8), d), _f8((7, 2), d), _ONE(d), _ONE(d)), ValueError,
         ["roofkit.scaled_mm", "inner dimensions"]),
        (lambda d: scaled_mm(_f8((4, 8), d), _f8((8, 2), d), torch.ones(1, 4, device=d), _ONE(d)), ValueError,
         ["roofkit.scaled_mm", "scale_a", "(4, 1)"]),
        (lambda d: scaled_mm(_f8((4, 8), d), _f8((8, 2), d), _ONE(d), torch.ones(2, 1, device=d)), ValueError,
         ["roofkit.scaled_mm", "scale_b", "(1, 2)"]),
        (lambda d: scaled_mm(_f8((4, 8), d), _f8((8, 2), d), _ONE(d).double(), _ONE(d)), TypeError,
         ["roofkit.scaled_mm", "scale_a", "float32"]),
        (lambda d: scaled_mm(_f8((4, 8), d), _f8((8, 2), d), _ONE(d), _ONE(d), bias=torch.ones(3, device=d)), ValueError,
         ["roofkit.scaled_mm", "bias", "(2,)"]),
        (lambda d: scaled_mm(_f8((4, 8), d), _f8((8, 2), d), _ONE(d), _ONE(d), out_dtype=torch.int32), TypeError,
         ["roofkit.scaled_mm", "out_dtype"]),
        (lambda d: scaled_mm(_f8((2, 4, 8), d), _f8((8, 2), d), _ONE(d), _ONE(d)), ValueError, ["roofkit.scaled_mm", "2-D"]),
        (lambda d: int8_matmul(_i8((4, 8), d), _i8((8, 2), d).to(torch.uint8), _ONE(d), None, _ONE(d), None), TypeError,
         ["roofkit.int8_matmul", "qb", "uint8"]),
        (lambda d: int8_matmul(_i8((4, 8), d), _i8((9, 2), d), _ONE(d), None, _ONE(d), None), ValueError,
         ["roofkit.int8_matmul", "inner dimensions"]),
        (lambda d: int8_matmul(_i8((4, 8), d), _i8((8, 2), d), _ONE(d), torch.zeros(4, 1, dtype=torch.int8, device=d),
                               _ONE(d), None), TypeError, ["roofkit.int8_matmul", "zero_point_a", "int32"]),
        (lambda d: int8_matmul(_i8((4, 8), d), _i8((8, 2), d), _ONE(d), None, _ONE(d),
                               torch.zeros(2, 1, dtype=torch.int32, device=d)), ValueError,
         ["roofkit.int8_matmul", "zero_point_b", "(1, 2)"]),
        (lambda d: int8_matmul(_i8((4, 8), d), _i8((8, 2), d), torch.ones(3, 1, device=d), None, _ONE(d), None), ValueError,
         ["roofkit.int8_matmul", "scale_a"]),
        (lambda d: int8_matmul(_i8((4, 8), d), _i8((8, 2), d), _ONE(d), None, _ONE(d), None, bias=torch.ones(2, 1, device=d)),
         ValueError, ["roofkit.int8_matmul", "bias"]),
        (lambda d: int8_matmul(torch.empty(1, quant.INT8_MAX_K + 1, dtype=torch.int8, device=d),
                               torch.empty(quant.INT8_MAX_K + 1, 1, dtype=torch.int8, device=d), _ONE(d), None, _ONE(d), None),
         ValueError, ["roofkit.int8_matmul", "K = "]),
    ],
)
def test_bad_input_raises_clear_error(call, exc, words, device, raises_naming):
    raises_naming(exc, words, call, device)


def test_cpu_tensor_without_interpreter_is_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match=r"roofkit\.quantize: x is on cpu"):
        quantize(torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"roofkit\.int8_matmul: qa is on cpu"):
        int8_matmul(torch.ones(2, 3, dtype=torch.int8), torch.ones(3, 2, dtype=torch.int8), torch.ones(()), None,
                    torch.ones(()), None)


_ZP_ON_GPU = r"""
import sys, torch, roofkit.ops.quant as quant
qa = torch.full((2, 64), -128, dtype=torch.int8, device="cuda")
qb = torch.full((64, 3), -128, dtype=torch.int8, device="cuda")
s = torch.ones((), device="cuda")
quant.int8_matmul(qa, qb, s, torch.tensor(int(sys.argv[1]), dtype=torch.int32, device="cuda"), s, None)
torch.cuda.synchronize()
"""


def test_int8_matmul_refuses_zero_points_outside_the_integer_range(device):
    # int8_matmul's int32 accumulation is exact only for zero points in q's range.
    if torch.device(device).type != "cpu":
        # On a GPU the check is a device assert: it poisons the process's CUDA context, so the
        # call runs in a child process, which must fail with the message on its stderr.
        import subprocess
        import sys

        run = subprocess.run([sys.executable, "-c", _ZP_ON_GPU, "20000"], capture_output=True, text=True, timeout=300)
        assert run.returncode != 0 and "zero_point_a must lie in" in run.stderr, run.stderr[-2000:]
        return
    qa = torch.full((2, 64), -128, dtype=torch.int8, device=device)
    qb = torch.full((64, 3), -128, dtype=torch.int8, device=device)
    s = torch.ones((), device=device)
    zp = torch.tensor(20000, dtype=torch.int32, device=device)
    with pytest.raises(RuntimeError, match="zero_point_a must lie in"):
        quant.int8_matmul(qa, qb, s, zp, s, None)


@pytest.mark.parametrize("qdtype", [torch.int8, torch.uint8])
def test_dequantize_takes_any_int32_zero_point_exactly(qdtype, device):
    # No range check (it cost device time on every call): q - Z is formed in int64, so the
    # extremes of int32 (where an int32 difference wraps) give S * (q - Z) to float32 rounding.
    lo, hi = (-128, 127) if qdtype == torch.int8 else (0, 255)
    q = torch.tensor([[lo, hi, 0, 1, lo + 1]], dtype=qdtype).repeat(4, 1).to(device)
    for z in (2**31 - 1, -(2**31), 20000, -20000, 2**24 + 1):
        for axis, zp, s in ((None, torch.tensor(z, dtype=torch.int32), torch.tensor(0.5)),
                            (0, torch.tensor([z, 0, -z // 2, 7], dtype=torch.int32), torch.tensor([0.5, 2.0, 1e-3, 3.0]))):
            got = quant.dequantize(q, s.to(device), zp.to(device), axis=axis)
            view = (-1, 1) if axis == 0 else ()
            want = (q.cpu().long() - zp.long().view(view)).double() * s.double().view(view)
            assert got.dtype == torch.float32
            torch.testing.assert_close(got.cpu().double(), want, rtol=2.5e-7, atol=0)
