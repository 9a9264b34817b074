"""The warp-specialized fp8 GEMM (roofkit.ops.quant._fp8_ws): its host-side choices and its sm_90
build on CPU (offline, Triton's bundled ptxas), its results against float64 on a Hopper GPU
(marked ``gpu``).
"""

import importlib
import json
import os
import pathlib
import subprocess
import sys
import warnings

import pytest
import torch

pytestmark = pytest.mark.quant

Q = importlib.import_module("roofkit.ops.quant.gemm")
try:
    ws = importlib.import_module("roofkit.ops.quant._fp8_ws")
except ImportError:  # a Triton without Gluon's Hopper module
    ws = None

needs_gluon = pytest.mark.skipif(ws is None, reason="this Triton has no Gluon Hopper module")
HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


# ----------------------------------------------------------------------------- CPU


@needs_gluon
@pytest.mark.skipif(HOPPER, reason="checks the refusal off Hopper")
def test_fp8_ws_not_launchable_off_hopper(device):
    a = torch.ones(256, 256, device=device).to(E4M3)
    b = torch.ones(256, 256, device=device).to(E4M3).t()
    out = torch.empty(256, 256, device=device, dtype=torch.bfloat16)
    assert not ws.launchable(a, b, out)


@needs_gluon
def test_fp8_ws_ring_slots():
    # 227 KB per block: 6 slots of 32 KB beside two 64 x 128 16-bit output buffers; 2 at least.
    assert ws.ring_slots(232448, 2) == 6
    assert ws.ring_slots(100 * 1024, 2) == 2
    assert ws.ring_slots(10 * 1024, 2) == 2


def test_fp8_ws_import_failure_warns_once_and_falls_back(monkeypatch):
    # Where the module does not import (a Triton without Gluon), scaled_mm says so once and keeps
    # using the Triton kernel; the failed import is not retried on every call.
    monkeypatch.setattr(Q, "_FP8_WS", [])
    monkeypatch.setitem(sys.modules, "roofkit.ops.quant._fp8_ws", None)  # the import raises ImportError
    with pytest.warns(RuntimeWarning, match="warp-specialized fp8 kernel is unavailable"):
        assert Q._fp8_ws_module() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Q._fp8_ws_module() is None


_COMPILE_FP8 = r"""
import importlib, json, re, subprocess, sys
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.runtime.jit import mangle_type
ws = importlib.import_module("roofkit.ops.quant._fp8_ws")
gemm_ws = importlib.import_module("roofkit.ops._gemm_ws")
out = []
for precise, dt, odt, bias in json.loads(sys.argv[1]):
    dt, odt = getattr(torch, dt), getattr(torch, odt)
    def desc(block, dtype):
        t = torch.empty((1024, 1024), dtype=dtype)
        return TensorDescriptor(t, [1024, 1024], [1024, 1], block, gl.NVMMASharedLayout.get_default_for(block, ws._GL[dtype]))
    d = [desc([ws.BLOCK_M // 2, ws.BLOCK_K], dt), desc([ws.BLOCK_N, ws.BLOCK_K], dt), desc([ws.BLOCK_M // 2, ws.BLOCK_N], odt)]
    sig = {"a_desc": mangle_type(d[0]), "b_desc": mangle_type(d[1]), "out_desc": mangle_type(d[2]), "sa_ptr": "*fp32",
           "sb_ptr": "*fp32", "bias_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32", "s_sa": "i32", "s_sb": "i32"}
    launch, consumer, producer = gemm_ws.register_split(65536)
    stages = ws.ring_slots(232448, odt.itemsize)
    consts = {"HAS_BIAS": bias, "PRECISE": precise, "GROUP_M": ws.GROUP_M, "STAGES": stages, "CONSUMER_REGS": consumer,
              "PRODUCER_REGS": producer}
    sig.update({n: "constexpr" for n in consts})
    k = triton.compile(GluonASTSource(ws._fp8_ws_kernel, sig, consts, {}), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 4, "maxnreg": launch})
    ptx = k.asm["ptx"]
    path = sys.argv[2] + f"/k{len(out)}"
    open(path + ".ptx", "w").write(ptx)
    ptxas = None
    try:
        from triton.backends.nvidia.compiler import get_ptxas
        v = subprocess.run([get_ptxas(90).path, "-arch=sm_90a", "-v", path + ".ptx", "-o", path + ".cubin"],
                           capture_output=True, text=True, timeout=300)
        ptxas = {"rc": v.returncode, "log": v.stderr[-3000:]}
    except ImportError:
        pass
    waits = re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)
    out.append({"shared": k.metadata.shared, "waits": {n: waits.count(n) for n in sorted(set(waits))}, "wgmma_types": sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k32\.f32\.\w+\.\w+)", ptx))),
                "setmaxnreg": sorted({int(v) for v in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)}),
                "ptxas": ptxas})
print(json.dumps(out))
"""


@needs_gluon
def test_fp8_ws_kernel_compiles_for_sm90_without_spills_or_serialized_wgmma(tmp_path):
    # No GPU needed: built for sm_90 in a fresh process (the test process runs the interpreter),
    # then ptxas reports its registers and whether it had to serialize the wgmmas. The promoted
    # path keeps two slice tiles as the fixed destinations of their wgmmas: any register copy
    # into them between a wgmma's issue and its wait makes ptxas serialize (warning C7515), which
    # would undo the overlap this kernel exists for (ptxas warns C7514 / C7515: "serialized").
    # The waits in the PTX pin the schedule: per consumer, the promoted path waits with one group
    # left in flight at each of its 4 slice steps (pair loop x 2, odd tail, first slice) and
    # drains twice (the two tails); a wait(0) in the loop would keep no slice queued.
    limit = 232448
    cases = [(True, "float8_e4m3fn", "bfloat16", True), (False, "float8_e4m3fn", "bfloat16", False),
             (True, "float8_e5m2", "float16", False)]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    src = str(pathlib.Path(Q.__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [src, env.get("PYTHONPATH", "")] if p)
    run = subprocess.run([sys.executable, "-c", _COMPILE_FP8, json.dumps(cases), str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(results) == len(cases)
    for (precise, dt, odt, _), r in zip(cases, results):
        assert 0 < r["shared"] <= limit, r
        fmt = "e4m3" if "e4m3" in dt else "e5m2"
        assert r["wgmma_types"] == [f"m64n{ws.BLOCK_N}k32.f32.{fmt}.{fmt}"], r
        assert {232, 40} <= set(r["setmaxnreg"]), r
        assert r["waits"] == ({"0": 4, "1": 8} if precise else {"0": 2, "1": 4}), r
    for r in results:
        if r["ptxas"] is None:
            pytest.skip("this Triton does not say which ptxas it uses (the build itself passed)")
        assert r["ptxas"]["rc"] == 0, r["ptxas"]["log"]
        assert "0 bytes spill stores" in r["ptxas"]["log"], r["ptxas"]["log"]
        assert "C7515" not in r["ptxas"]["log"] and "serialized" not in r["ptxas"]["log"], r["ptxas"]["log"]


# ----------------------------------------------------------------------------- GPU


def _operands(m, n, k, dtype, seed, scales):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(m, k, device="cuda", generator=g) * 2).to(dtype)
    b = (torch.randn(n, k, device="cuda", generator=g) * 2).to(dtype).t()  # K-major, as torch._scaled_mm
    if scales == "tensor":
        sa = torch.tensor(0.75, device="cuda")
        sb = torch.tensor(1.5, device="cuda")
    else:
        sa = torch.rand(m, 1, device="cuda", generator=g) + 0.5
        sb = torch.rand(1, n, device="cuda", generator=g) + 0.5
    bias = torch.randn(n, device="cuda", generator=g)
    return a, b, sa, sb, bias


def _reference(a, b, sa, sb, bias):
    y = (a.double() @ b.double()) * sa.double() * sb.double()
    return y + bias.double() if bias is not None else y


def _launch(a, b, sa, sb, bias, out_dtype, precise):
    m, n = a.shape[0], b.shape[1]
    out = torch.full((m, n), float("nan"), device="cuda", dtype=out_dtype)  # poisoned
    assert ws.launch(a, b, sa, sb, Q._vec_stride(sa), Q._vec_stride(sb), bias, out, precise)
    torch.cuda.synchronize()
    return out


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="the warp-specialized fp8 kernel needs a Hopper GPU")
@pytest.mark.parametrize("shape", [(256, 256, 4096), (300, 520, 1040), (1000, 264, 128), (130, 136, 256), (2048, 2176, 384),
                                   (64, 128, 16)])
@pytest.mark.parametrize("precise", [True, False])
@pytest.mark.parametrize("dtype,out_dtype,scales,with_bias", [(E4M3, torch.bfloat16, "tensor", False),
                                                              (E4M3, torch.float16, "row", True),
                                                              (E5M2, torch.bfloat16, "row", True)])
def test_fp8_ws_matches_float64(shape, precise, dtype, out_dtype, scales, with_bias):
    # Odd and even numbers of K slices (1, 2, 3, 9, 32), partial slices (K = 16, 1040), edge
    # tiles in M and N, 2048 x 2176 (272 tiles: two or three per program), per-tensor and
    # per-row / per-column scales, bias; two seeds (a moving error is a race).
    m, n, k = shape
    for seed in (0, 1):
        a, b, sa, sb, bias = _operands(m, n, k, dtype, seed, scales)
        bias = bias if with_bias else None
        ref = _reference(a, b, sa, sb, bias)
        out = _launch(a, b, sa, sb, bias, out_dtype, precise)
        assert not torch.isnan(out).any()
        err = ((out.double() - ref).norm() / ref.norm()).item()
        # bf16 rounding alone ~1.7e-3, fp16 ~2.4e-4; fast accumulation adds ~1e-3 at K = 4096
        assert err < (3e-3 if out_dtype == torch.bfloat16 else 1e-3) + (0 if precise else 3e-3), err
        torch.testing.assert_close(out.double(), ref, rtol=2**-6, atol=2**-6 * ref.abs().max().item())


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="the warp-specialized fp8 kernel needs a Hopper GPU")
def test_fp8_ws_promotion_is_more_accurate_than_fast_accumulation():
    # fp16 output (fine enough to show the accumulation error) at K = 8192: the promoted sums
    # are within fp16's rounding (H200 at 8192^3: 2.4e-4 promoted, 2.1e-3 fast, as torch's
    # two modes); a promotion that silently fell back to the tensor cores' accumulation fails.
    a, b, sa, sb, _ = _operands(256, 384, 8192, E4M3, 5, "tensor")
    ref = _reference(a, b, sa, sb, None)
    errs = {}
    for precise in (True, False):
        out = _launch(a, b, sa, sb, None, torch.float16, precise)
        errs[precise] = ((out.double() - ref).norm() / ref.norm()).item()
    assert errs[True] < 4e-4 and errs[True] < 0.5 * errs[False], errs


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="the warp-specialized fp8 kernel needs a Hopper GPU")
def test_scaled_mm_takes_the_ws_kernel_for_large_16bit_outputs(monkeypatch):
    calls = []
    real = ws.launch

    def spy(*args, **kw):
        launched = real(*args, **kw)
        calls.append((args[-1], launched))  # (precise, whether it ran)
        return launched

    monkeypatch.setattr(ws, "launch", spy)
    a, b, sa, sb, bias = _operands(512, 384, 512, E4M3, 3, "row")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a build failure warns and falls back: fail instead
        for fast in (False, True):
            out = Q.scaled_mm(a, b, sa, sb, bias=bias, use_fast_accum=fast)
            ref = _reference(a, b, sa, sb, bias)
            assert ((out.double() - ref).norm() / ref.norm()).item() < 3e-3
        assert calls == [(True, True), (False, True)]  # precise, then fast accumulation: both ran
        Q.scaled_mm(a[:100], b, sa[:100], sb)  # M < WS_MIN: the Triton kernel, not asked
        Q.scaled_mm(a, b, sa, sb, out_dtype=torch.float32)  # fp32 output: asked, refused
    assert calls[2:] == [(True, False)]


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="the warp-specialized fp8 kernel needs a Hopper GPU")
@pytest.mark.parametrize("layout", ["expanded_a", "a_offset_by_one", "k_not_16_aligned", "b_row_major",
                                    "scale_column_slice"])
def test_scaled_mm_refused_layouts_fall_back_and_stay_correct(layout):
    # One unusual layout each at M, N >= 256: refused where TMA cannot describe it (stride 0, a
    # misaligned base, b row-major), taken where it can (K % 16 != 0 inside 16-byte aligned rows,
    # a strided per-row scale); never an error, always the float64 result.
    m, n, k = 512, 384, 512
    a, b, sa, sb, bias = _operands(m, n, k, E4M3, 7, "row")
    expect = False
    if layout == "expanded_a":
        a = a[:1].expand(m, k)
    elif layout == "a_offset_by_one":
        a = torch.empty(m * k + 16, device="cuda", dtype=torch.uint8).view(E4M3)[1:1 + m * k].view(m, k).copy_(a)
    elif layout == "k_not_16_aligned":
        a, b = a[:, :k - 8], b[:k - 8]  # K = 504 in rows 512 apart: TMA-legal (its shape bounds the reads): taken
        expect = True
    elif layout == "b_row_major":
        b = b.contiguous()
    elif layout == "scale_column_slice":
        sa = torch.rand(m, 17, device="cuda")[:, 3:4] + 0.5  # (M, 1) with row stride 17
        expect = True
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    assert ws.launchable(a, b, out) == expect
    got = Q.scaled_mm(a, b, sa, sb, bias=bias)
    ref = _reference(a, b, sa, sb, bias)
    assert ((got.double() - ref).norm() / ref.norm()).item() < 3e-3
