"""The Gluon ping-pong GEMM (roofkit.ops._gemm_ws): CPU checks of its host side, its epilogue's
constants and its sm_90 build (offline, Triton's bundled ptxas); GPU checks against float64.

The kernel itself runs only on a Hopper GPU (wgmma): the GPU tests are marked ``gpu``.
"""

import importlib
import json
import math
import os
import pathlib
import struct
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

from roofkit.ops.matmul import Config, matmul

pytestmark = pytest.mark.matmul

mm = importlib.import_module("roofkit.ops.matmul")
try:
    ws = importlib.import_module("roofkit.ops._gemm_ws")
except ImportError:  # a Triton without Gluon's Hopper module
    ws = None

needs_gluon = pytest.mark.skipif(ws is None, reason="this Triton has no Gluon Hopper module")
HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
PP = [mm.PINGPONG_DEFAULT, Config(128, 128, 64, 8, 4, 4, kind="pingpong", persistent=True),
      Config(64, 256, 64, 8, 4, 4, kind="pingpong", persistent=True)]


# ----------------------------------------------------------------------------- CPU


@needs_gluon
def test_pingpong_not_launchable_off_hopper(device):
    a = torch.randn(256, 256, device=device, dtype=torch.float16)
    out = torch.empty(256, 256, device=device, dtype=torch.float16)
    assert ws.launchable(a, a, out) == HOPPER
    if not HOPPER:  # the default stays the Triton kernel and the tuner does not offer it
        assert mm._default_config(a, a, out).kind != "pingpong"
        assert not mm._pingpong_ok(a, a, out)


def test_pingpong_candidates_only_when_offered():
    dev = torch.device("cpu")
    with_pp = mm._candidates(4096, 4096, 4096, torch.bfloat16, dev, True, pingpong=True)
    without = mm._candidates(4096, 4096, 4096, torch.bfloat16, dev, True)
    assert [c for c in with_pp if c.kind == "pingpong"] and not [c for c in without if c.kind == "pingpong"]
    assert mm.PINGPONG_DEFAULT in with_pp


def _ex2(x):
    # the kernel's ex2.approx.ftz: ~2 ulp, inf -> inf, -inf -> 0, results below 2**-126 -> 0
    y = torch.exp2(x)
    return torch.where(y.abs() < 2.0**-126, torch.zeros_like(y), y)


def _rcp(x):
    return 1.0 / x  # rcp.approx.ftz: ~1 ulp, inf -> 0


def _epilogue_as_built(x: torch.Tensor, act: str, out_bits: int = 2, form: int = 0) -> torch.Tensor:
    """The kernel's activations (``_gemm_ws._consumer`` / ``_gelu``), step by step in float32
    with the module's constants; exact exp2 / reciprocal (flushing results below 2**-126)
    stand in for the SFU's approximations. ``out_bits`` and ``form`` as ``_gelu``'s OUT_BITS
    (2 bfloat16, 1 float16, 0 float32) and FORM (0, 2 or 3)."""
    L = ws.LOG2E_C.value
    if act == "gelu_tanh":
        u2 = (2.0 * 0.7978845608028654 * L) * (x + 0.044715 * x * x * x)
        return x * _rcp(1.0 + _ex2(-u2))
    if act == "silu":
        return x * _rcp(1.0 + _ex2(x * -L))
    if form == 2 or (form == 0 and out_bits > 0):  # the logistic forms
        coeffs = (ws.G0, ws.G1, ws.G2, ws.G3, ws.G4) if form == 0 and out_bits == 2 else \
            (ws.H0, ws.H1, ws.H2, ws.H3, ws.H4, ws.H5, ws.H6)
        s = x * x
        h = s * coeffs[-1].value + coeffs[-2].value
        for c in reversed(coeffs[:-2]):
            h = h * s + c.value
        return x * _rcp(1.0 + _ex2(x * h))
    ax = x.abs()
    zs = ax * ws.ZS.value
    if form == 3:
        e = _ex2(-(zs * zs))
        t = _rcp(ax * ws.AS_P.value + 1.0)
        p = t * ws.A5.value + ws.A4.value
        for c in (ws.A3, ws.A2, ws.A1):
            p = p * t + c.value
        q = (t * p) * e
    else:
        t = _rcp(ax * ws.HALF_RSQRT2.value + 1.0)
        p = t * ws.P9.value + ws.P8.value
        for c in (ws.P7, ws.P6, ws.P5, ws.P4, ws.P3, ws.P2, ws.P1, ws.P0):
            p = p * t + c.value
        q = t * _ex2(p - zs * zs)
    return x * torch.where(x < 0, q, 1.0 - q)


def _reference(x64: torch.Tensor, act: str) -> torch.Tensor:
    if act == "gelu":
        return x64 * 0.5 * torch.erfc(-x64 / math.sqrt(2))
    if act == "gelu_tanh":
        return F.gelu(x64, approximate="tanh")
    return F.silu(x64)


@needs_gluon
@pytest.mark.parametrize("act,out_bits,form,abs_tol,rel_tol,small_abs", [
    # bfloat16: logistic, degree 4; documented 2.53e-4 relative, 4.3e-7 absolute where |GELU| <= 1e-3
    ("gelu", 2, 0, 4e-5, 2.6e-4, 4.3e-7),
    ("gelu", 1, 0, 3e-6, 1.6e-5, 2.8e-8),  # float16: logistic, degree 6; documented 1.54e-5, 2.8e-8
    ("gelu", 0, 0, 6e-7, 3e-6, 6e-7),  # float32: the 10-term erfc fit (about 1.8e-6 in float32)
    ("gelu", 2, 3, 6e-7, 2e-4, 6e-7),  # the 5-term erfc fit (diagnostic)
    ("gelu_tanh", 2, 0, 1e-6, 1e-5, 1e-6), ("silu", 2, 0, 1e-6, 1e-5, 1e-6)])
def test_pingpong_activation_constants_and_forms(act, out_bits, form, abs_tol, rel_tol, small_abs):
    # The folded coefficients (0.5 and log2 e moved into the fits) and the forms chosen to avoid
    # cancellation must still give the activation: error <= abs_tol + 2 float32 ulp of the
    # result over [-20, 20], relative error <= rel_tol where |result| > 1e-3 or, for the GELUs'
    # negative side, down to x = -3, and absolute error <= small_abs where |result| <= 1e-3 (the
    # logistic forms' bounds as documented in matmul's docstring).
    x = torch.linspace(-20, 20, 800001, dtype=torch.float64)
    ref = _reference(x, act)
    got = _epilogue_as_built(x.float(), act, out_bits, form).double()
    err = (got - ref).abs()
    assert (err <= abs_tol + 2.0**-22 * ref.abs()).all(), (err - 2.0**-22 * ref.abs()).max()  # + 2 ulp of the result
    keep = (ref.abs() > 1e-3) | ((x >= -3) & (x != 0))
    rel = (err[keep] / ref[keep].abs()).max()
    assert rel <= rel_tol, rel
    small = ref.abs() <= 1e-3
    assert err[small].max() <= small_abs, err[small].max()


@needs_gluon
@pytest.mark.parametrize("act,form", [("gelu", 0), ("gelu", 3), ("gelu_tanh", 0), ("silu", 0)])
@pytest.mark.parametrize("out_bits", [2, 1, 0])
def test_pingpong_activation_special_values_follow_torch(act, form, out_bits):
    # +-inf, NaN and -0 come out as torch's float64 activation gives them (NaN where it is NaN).
    x = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0, 0.0, -100.0, 100.0, 3e38, -3e38,
                      -1e10, 1e10, -2000.0, 2000.0])  # past the fitted range: Horner's overflow
    got = _epilogue_as_built(x, act, out_bits, form).double()
    ref = _reference(x.double(), act)
    assert torch.equal(torch.isnan(got), torch.isnan(ref)), (got, ref)
    fin = ~torch.isnan(ref)
    torch.testing.assert_close(got[fin], ref[fin], rtol=1e-6, atol=1e-30)


_COMPILE_PINGPONG = r"""
import importlib, json, sys
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.runtime.jit import mangle_type
ws = importlib.import_module("roofkit.ops._gemm_ws")
out = []
for bm, bn, bk, stages, act, b_t, dt, odt, c_tma in json.loads(sys.argv[1]):
    dt, odt = getattr(torch, dt), getattr(torch, odt)
    def desc(block, dtype):
        t = torch.empty((1024, 1024), dtype=dtype)
        return TensorDescriptor(t, [1024, 1024], [1024, 1], block,
                                gl.NVMMASharedLayout.get_default_for(block, ws._GL_DTYPES[dtype]))
    descs = [desc([bm, bk], dt), desc([bn, bk] if b_t else [bk, bn], dt), desc([bm, bn], odt)]
    sig = {"a_desc": mangle_type(descs[0]), "b_desc": mangle_type(descs[1]), "out_desc": mangle_type(descs[2]),
           "c_desc": mangle_type(descs[2]), "c_ptr": "*fp16", "bias_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32", "alpha": "fp32",
           "beta": "fp32", "s_cm": "i32", "s_cn": "i32"}
    launch, consumer, producer = ws.register_split(65536)  # the sm_90 register file
    consts = {"A_T": False, "B_T": bool(b_t), "HAS_C": c_tma, "C_TMA": c_tma, "HAS_BIAS": True, "ACTIVATION": act, "GROUP_M": 8,
              "STAGES": stages, "CONSUMER_REGS": consumer, "PRODUCER_REGS": producer, "SERIAL": False, "EPI_REPEAT": 1,
              "WAIT_DEPTH": 1, "HAS_ALPHA": True, "GELU_FORM": 0}
    sig.update({name: "constexpr" for name in consts})
    k = triton.compile(GluonASTSource(ws._matmul_ws_kernel, sig, consts, {}), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 4, "maxnreg": launch})
    ptx = k.asm["ptx"]
    path = sys.argv[2] + f"/k{len(out)}"
    open(path + ".ptx", "w").write(ptx)
    try:  # the ptxas this Triton compiles with, for its register report
        import subprocess
        from triton.backends.nvidia.compiler import get_ptxas
        v = subprocess.run([get_ptxas(90).path, "-arch=sm_90a", "-v", path + ".ptx", "-o", path + ".cubin"],
                           capture_output=True, text=True, timeout=300)
        ptxas = {"rc": v.returncode, "log": v.stderr[-1500:]}
    except ImportError:
        ptxas = None
    import re
    out.append({"shared": k.metadata.shared, "wgmma": ptx.count("wgmma.mma_async"), "tma": "cp.async.bulk.tensor" in ptx,
                "setmaxnreg": sorted({int(v) for v in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)}),
                "maxnreg": int(re.search(r"\.maxnreg\s+(\d+)", ptx).group(1)), "ex2_ftz": "ex2.approx.ftz.f32" in ptx,
                "ptxas": ptxas})
print(json.dumps(out))
"""


@needs_gluon
def test_pingpong_kernel_compiles_for_sm90_without_spills(tmp_path):
    # No GPU needed: the kernel built for sm_90 in a fresh process (the test process runs the
    # interpreter, which cannot build Gluon), then Triton's bundled ptxas reports its registers:
    # the consumers' 128-register accumulators must fit without spilling, in at most the 227 KB
    # of shared memory an sm_90 block can opt in to.
    # The ring slots as the launcher chooses them for an sm_90 block (227 KB): 5, or the 4 a
    # configuration asks for. Every activation form the epilogue has: the bf16 GELU takes the
    # degree-4 logistic form, the fp16 GELU the degree-6 one.
    limit = 232448
    # beta * c read by TMA into the output's buffer (a GEMM accumulating into its output): the
    # default tile with a transposed A, as a chunked weight gradient has it.
    cases = [(mm.PINGPONG_DEFAULT, 2, False, torch.bfloat16, torch.bfloat16, False),
             (PP[1], 3, False, torch.float16, torch.float16, False),
             (PP[1], 2, True, torch.float16, torch.float16, False),
             (PP[2], 4, True, torch.bfloat16, torch.bfloat16, False),
             (mm.PINGPONG_C_DEFAULT, 0, False, torch.bfloat16, torch.bfloat16, True)]
    configs = [(c.BLOCK_M, c.BLOCK_N, c.BLOCK_K, ws.ring_slots(c, dt.itemsize, odt.itemsize, limit), act, b_t,
                str(dt)[6:], str(odt)[6:], c_tma) for c, act, b_t, dt, odt, c_tma in cases]
    assert [c[3] for c in configs] == [5, 4, 4, 4, 4]
    # An fp32 output's two buffers take twice the room: 64x256 tiles keep 2 slots.
    assert ws.ring_slots(PP[2], 2, 4, limit) == 2
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    src = str(pathlib.Path(mm.__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [src, env.get("PYTHONPATH", "")] if p)
    run = subprocess.run([sys.executable, "-c", _COMPILE_PINGPONG, json.dumps(configs), str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(results) == len(configs)
    # The register split on the sm_90 register file, and that it fits the launch-time pool.
    launch, consumer, producer = ws.register_split(65536)
    assert (launch, consumer, producer) == (168, 232, 40)
    assert 2 * 128 * consumer + 128 * producer <= 12 * 32 * launch
    def hexf(v):
        return "0f%08X" % struct.unpack("<I", struct.pack("<f", v))[0]

    as_p, half_rsqrt2 = hexf(ws.AS_P.value), hexf(ws.HALF_RSQRT2.value)
    deg4 = [hexf(c.value) for c in (ws.G0, ws.G1, ws.G2, ws.G3, ws.G4)]
    deg6 = [hexf(c.value) for c in (ws.H0, ws.H1, ws.H2, ws.H3, ws.H4, ws.H5, ws.H6)]
    for i, r in enumerate(results):
        ptx = (tmp_path / f"k{i}.ptx").read_text()
        if configs[i][4] == 2:  # GELU: the form chosen by the output dtype (logistic, degree 4 for bf16, 6 for fp16)
            # every coefficient of the output's polynomial, none of the other's, no erfc fit
            mine, other = (deg4, deg6) if configs[i][7] == "bfloat16" else (deg6, deg4)
            assert all(c in ptx for c in mine) and not any(c in ptx for c in other), i
            assert as_p not in ptx and half_rsqrt2 not in ptx, i
            assert "max.f32" not in ptx and "max.NaN.f32" not in ptx, i
        assert 0 < r["shared"] <= limit, r
        assert r["wgmma"] > 0 and r["tma"], r
        # the launcher's split: 168 at launch, 232 per consumer thread, 40 per producer thread
        # (and the idle pad warps' 120 in between)
        assert r["maxnreg"] == launch and {consumer, producer} <= set(r["setmaxnreg"]) and max(r["setmaxnreg"]) <= 256, r
        assert r["ex2_ftz"] == (configs[i][4] in (2, 3, 4)), r
    for r in results:
        if r["ptxas"] is None:
            pytest.skip("this Triton does not say which ptxas it uses (the build itself passed)")
        assert r["ptxas"]["rc"] == 0, r["ptxas"]["log"]
        assert "0 bytes spill stores" in r["ptxas"]["log"], r["ptxas"]["log"]


# ----------------------------------------------------------------------------- GPU


def _operands(m, n, k, lay, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=dtype, generator=g)
    if lay[0] == "t":
        a = a.t().contiguous().t()
    if lay[1] == "t":
        b = b.t().contiguous().t()
    return a, b, torch.randn(n, device="cuda", dtype=dtype, generator=g), torch.randn(m, n, device="cuda", dtype=dtype, generator=g)


def _check(out: torch.Tensor, ref: torch.Tensor, tor: torch.Tensor) -> None:
    """Relative L2 within 2x torch's (same dtype) + 1e-3, and every element within 2**-6 of the
    float64 reference (relative, or absolute against the output's largest magnitude): a wrong
    K block in one tile moves its elements by O(1)."""
    assert not torch.isnan(out).any()
    err = ((out.double() - ref).norm() / ref.norm()).item()
    terr = ((tor.double() - ref).norm() / ref.norm()).item()
    assert err <= 2 * terr + 1e-3, (err, terr)
    torch.testing.assert_close(out.double(), ref, rtol=2**-6, atol=2**-6 * ref.abs().max().item())


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="the ping-pong kernel needs a Hopper GPU")
@pytest.mark.parametrize("cfg", PP, ids=lambda c: c.label())
@pytest.mark.parametrize("shape,lay", [((2048, 1536, 4096), "nn"), ((1000, 1000, 1000), "nt"), ((300, 4096, 72), "tn"),
                                       ((127, 264, 1021), "tt"), ((2000, 3000, 100), "nn")])
@pytest.mark.parametrize("act", [None, "relu", "gelu", "gelu_tanh", "silu"])
def test_pingpong_matches_float64(cfg, shape, lay, act):
    # Several tiles per program (2048x1536: 192 tiles), ragged edges, every layout, each
    # activation with bias and beta * c; outputs poisoned first, two runs bit-identical.
    m, n, k = shape
    a, b, bias, c = _operands(m, n, k, lay, torch.bfloat16, seed=m + n + k)
    ref = mm._activation_torch(0.5 * (a.double() @ b.double()) - 2.0 * c.double() + bias.double(), act)
    tor = mm.matmul_torch(a, b, bias=bias, activation=act, alpha=0.5, beta=-2.0, c=c)
    outs = []
    for _ in range(2):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        assert ws.launch(cfg, a, b, c, bias, out, 0.5, -2.0, mm.ACTIVATIONS[act])
        outs.append(out)
    torch.cuda.synchronize()
    _check(outs[0], ref, tor)
    assert torch.equal(outs[0], outs[1])


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="the ping-pong kernel needs a Hopper GPU")
@pytest.mark.parametrize("cfg", PP[:2], ids=lambda c: c.label())
@pytest.mark.parametrize("k,out_dtype", [(64, torch.bfloat16), (256, torch.bfloat16), (320, torch.bfloat16),
                                         (384, torch.bfloat16), (256, torch.float16), (320, torch.float16)])
def test_pingpong_many_tiles_per_program(cfg, k, out_dtype):
    # 8192 x 8192: 4096 tiles, ~31 per program, so each consumer cycles the ring and the turn
    # barriers through many phases; K blocks per tile 1, 4, 5, 6 against ring slots 4 or 5,
    # i.e. below, at and past the ring's length; fp16 outputs take the degree-6 logistic GELU.
    a, b, bias, _ = _operands(8192, 8192, k, "nt", torch.bfloat16, seed=k)
    ref = F.gelu(a.double() @ b.double() + bias.double())
    out = torch.full((8192, 8192), float("nan"), device="cuda", dtype=out_dtype)
    assert ws.launch(cfg, a, b, None, bias, out, 1.0, 0.0, mm.ACTIVATIONS["gelu"])
    torch.cuda.synchronize()
    tor = F.gelu((torch.matmul(a, b) + bias).to(out_dtype))
    _check(out, ref, tor)


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="the ping-pong kernel needs a Hopper GPU")
@pytest.mark.parametrize("dtype,out_dtype", [(torch.float16, torch.float16), (torch.bfloat16, torch.bfloat16),
                                             (torch.bfloat16, torch.float32)])
def test_pingpong_is_the_default_for_16bit_outputs(dtype, out_dtype, monkeypatch):
    # Through the public op with the documented default (ROOFKIT_AUTOTUNE=0): 4096 x 2048 (512
    # tiles of 128 x 128, >= 2 per SM) takes the ping-pong kernel for 16-bit outputs, and it
    # really runs (no build warning, its launcher returns True); an fp32 output keeps the
    # Triton kernels. Checked against float64 either way.
    monkeypatch.setenv("ROOFKIT_AUTOTUNE", "0")
    ran = []
    real = ws.launch
    monkeypatch.setattr(ws, "launch", lambda *args: ran.append(real(*args)) or ran[-1])
    a, b, bias, _ = _operands(4096, 2048, 256, "nt", dtype, seed=3)
    out = torch.empty(4096, 2048, device="cuda", dtype=out_dtype)
    pingpong = out_dtype != torch.float32
    assert (mm._default_config(a, b, out).kind == "pingpong") == pingpong
    # offered with a c it can load by TMA (the output's shape, dtype and row layout), not with
    # a strided or broadcast one (the Triton kernels take those)
    assert mm._pingpong_ok(a, b, out) == pingpong and mm._pingpong_ok(a, b, out, torch.zeros_like(out)) == pingpong
    assert not mm._pingpong_ok(a, b, out, torch.zeros(out.shape[1], out.shape[0], device="cuda", dtype=out.dtype).t())
    assert not mm._pingpong_ok(a, b, out, torch.zeros(out.shape[1], device="cuda", dtype=out.dtype).expand(out.shape))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = matmul(a, b, bias=bias, activation="gelu", out_dtype=out_dtype)
    assert ran == ([True] if pingpong else [])
    ref = F.gelu(a.double() @ b.double() + bias.double())
    assert got.dtype == out_dtype
    _check(got, ref, F.gelu((torch.matmul(a, b) + bias).to(out_dtype)))


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="the ping-pong kernel needs a Hopper GPU")
@pytest.mark.parametrize("m,n,k", [(4096, 2048, 256), (4000, 2104, 200)])
def test_pingpong_accumulates_into_its_output(m, n, k):
    # out += a @ b in place, a transposed (a chunked weight gradient: logit gradient^T @ input),
    # c read by TMA from the output itself, three chunks accumulated, ragged edges; against the
    # float64 sum of the rounded steps. (At least two 128 x 128 tiles per SM: the default.)
    g = torch.Generator(device="cuda").manual_seed(m + k)
    out = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=g)
    assert ws.c_loadable(out, out)
    ran = []
    real = ws.launch
    try:
        ws.launch = lambda *args: ran.append(real(*args)) or ran[-1]
        for step in range(3):
            a = torch.randn(k, m, device="cuda", dtype=torch.bfloat16, generator=g).t()
            b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
            before = out.double()
            mm._matmul_into(a, b, out, beta=1.0)
            torch.cuda.synchronize()
            exact = before + a.double() @ b.double()
            tor = (torch.matmul(a, b).float() + before.float()).to(torch.bfloat16)
            _check(out, exact, tor)
    finally:
        ws.launch = real
    assert ran and all(ran), ran  # the ping-pong kernel ran every step


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="the ping-pong kernel needs a Hopper GPU")
def test_pingpong_strided_c_takes_per_element_loads():
    # A c the TMA load cannot take (column-major) still gives the right sum through the kernel's
    # per-element loads when launched directly.
    m, n, k = 1000, 1200, 300
    a, b, bias, _ = _operands(m, n, k, "nn", torch.bfloat16, seed=7)
    c = torch.randn(n, m, device="cuda", dtype=torch.bfloat16).t()
    assert not ws.c_loadable(c, torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    assert ws.launch(mm.PINGPONG_DEFAULT, a, b, c, bias, out, 1.0, 0.5, mm.ACTIVATIONS[None])
    torch.cuda.synchronize()
    ref = a.double() @ b.double() + 0.5 * c.double() + bias.double()
    _check(out, ref, (torch.matmul(a, b).float() + 0.5 * c.float() + bias.float()).to(torch.bfloat16))
