"""Matrix multiplication with a fused epilogue (roofkit.matmul) and a fused linear layer
(roofkit.linear), forward, plus the linear layer's backward through the same kernel.

    out = act(alpha * (input @ other) + beta * c + bias)

Program mapping: one Triton program owns one [BLOCK_M, BLOCK_N] tile of one output matrix and
walks K in BLOCK_K steps with an fp32 accumulator (tl.dot); programs are numbered in groups of
GROUP_M tile rows so that programs running together share A row-panels and B column-panels in
L2. The epilogue (alpha, beta * c, bias, activation) runs on the fp32 accumulator; the result is
rounded once, to the output dtype. A batch (3-D operands) is the grid's second axis, each operand
carrying its own batch stride (0 for an operand broadcast over the batch).

The kernels and their launch forms (TMA-descriptor persistent, pointer, split-K) live in
``_gemm.py``; this module chooses among them and holds the public API, the custom ops and the spec.
The configuration of a call is the one ``roofkit tune`` verified, timed and cached for this GPU,
software and shape bucket (``_autotune.py``), else the documented default (``_launch_config``):
nothing is timed inside a user's call unless ROOFKIT_AUTOTUNE=1 asks for it, and
``config_override`` forces one configuration (tests, sweeps).
Verified on the H200 (2026-11-30, all dtypes) and on CPU through the interpreter (bf16 operands
are upcast to fp32 there: the interpreter cannot multiply bf16). fp8 / int8 GEMMs: ``quant/gemm.py``.
Source: the classic tiled GEMM with grouped tile order (Triton's matmul tutorial describes the
L2-grouping idea); torch.addmm semantics for alpha / beta / c.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import numbers

import torch
import torch.nn.functional as F
import triton

from ..harness import baselines
from ..harness.inputs import random_tensor
from ..harness.roofline import gemm_waves
from ..harness.spec import Cost, Inputs, OpSpec, case
from . import _autotune, _gemm
from ._autotune import Tuner, bucket
from ._common import (FLOAT_DTYPES, cdiv, check_same_device, check_tensor, device_index, next_pow2,
                      shared_memory_limits, sm_count)
from ._gemm import ACTIVATIONS, Config
from ._runtime import Op, bump_epoch, planned

_ACT_NAMES = {v: k for k, v in ACTIVATIONS.items()}

# ----------------------------------------------------------------------------- torch-side math


def _activation_torch(y: torch.Tensor, activation: str | None) -> torch.Tensor:
    if activation is None:
        return y
    if activation == "relu":
        return torch.relu(y)
    if activation == "gelu":
        if y.dtype == torch.float64:  # the reference: erfc keeps the negative tail exact (1 + erf cancels)
            return y * 0.5 * torch.special.erfc(-y * math.sqrt(0.5))
        return F.gelu(y)
    if activation == "gelu_tanh":
        return F.gelu(y, approximate="tanh")
    return F.silu(y)


def _activation_grad(pre: torch.Tensor, activation: str | None) -> torch.Tensor:
    """d act / d pre, evaluated on the (float32) pre-activation."""
    if activation == "relu":
        return (pre > 0).to(pre.dtype)
    if activation == "gelu":
        return 0.5 * (1.0 + torch.erf(pre * math.sqrt(0.5))) + pre * torch.exp(-0.5 * pre * pre) / math.sqrt(2 * math.pi)
    if activation == "gelu_tanh":
        k = math.sqrt(2.0 / math.pi)
        t = torch.tanh(k * (pre + 0.044715 * pre**3))
        return 0.5 * (1.0 + t) + 0.5 * pre * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * pre * pre)
    s = torch.sigmoid(pre)
    return s * (1.0 + pre * (1.0 - s))


def matmul_torch(input, other, *, bias=None, activation=None, alpha=1.0, beta=0.0, c=None, out_dtype=None):
    """The torch baseline: torch.matmul in the input dtype, then the epilogue in torch (each step
    rounded to the dtype, as an unfused eager program computes it)."""
    y = torch.matmul(input, other)
    if alpha != 1.0:
        y = y * alpha
    if c is not None and beta != 0.0:
        y = y + beta * c
    if bias is not None:
        y = y + bias
    y = _activation_torch(y, activation)
    return y.to(out_dtype) if out_dtype is not None else y


def matmul_reference(input, other, *, bias=None, activation=None, alpha=1.0, beta=0.0, c=None, out_dtype=None):
    """float64 reference (the harness passes float64 copies); ``out_dtype`` is ignored."""
    y = alpha * torch.matmul(input.double(), other.double())
    if c is not None and beta != 0.0:
        y = y + beta * c.double()
    if bias is not None:
        y = y + bias.double()
    return _activation_torch(y, activation)


def _esize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def matmul_cost(case, dtype: torch.dtype) -> Cost:
    """2*M*N*K FLOP per output matrix; bytes: A (M*K per A batch), B (K*N per B batch), the output
    (M*N per batch), bias (N) and c (M*N per batch) once each (a broadcast operand is read once)."""
    m, n, k = case["shape"]
    ba, bb = case.get("batch", (None, None))
    na, nb = ba or 1, bb or 1
    nbatch = max(na, nb) if (ba is not None or bb is not None) else 1
    if 0 in (na, nb):
        nbatch = 0
    s_in = _esize(dtype)
    s_out = _esize(case.get("out_dtype") or dtype)
    elems_in = na * m * k + nb * k * n + (n if case.get("bias") else 0) + (nbatch * m * n if case.get("c") else 0)
    return Cost(flops=2 * nbatch * m * n * k, bytes=elems_in * s_in + nbatch * m * n * s_out)


# ----------------------------------------------------------------------------- launch choice

_KINDS = ("ptr", "tma", "pingpong")


def _decode_config(d: dict) -> Config:
    """A cached configuration back from JSON. Raises for anything this build would not launch as
    written (an unknown field, a value of the wrong type, a block size that is not a power of two):
    the tuner then drops the entry instead of failing a user's call."""
    cfg = Config(**d)
    for f in dataclasses.fields(Config):
        v = getattr(cfg, f.name)
        if f.name == "kind":
            ok = v in _KINDS
        elif isinstance(f.default, bool):
            ok = isinstance(v, bool)
        else:
            ok = type(v) is int and v >= 1 and not (f.name.startswith("BLOCK_") and v & (v - 1))
        if not ok:
            raise ValueError(f"roofkit.matmul: cached configuration field {f.name}={v!r} is not valid")
    return cfg


_TUNER = Tuner(
    "matmul", encode=Config.as_dict, decode=_decode_config,
    tol={torch.float16: 2e-2, torch.bfloat16: 2e-2, torch.float32: 2e-2},
)


def _split_k_config(m: int, n: int, k: int, dtype: torch.dtype, sms: int) -> Config | None:
    """Split-K when the output has very few tiles (fewer than SMs / 8) and K >= 8192: the K chunks
    of one tile run on different SMs (at most 2 programs per SM in all, chunks >= 256 long).
    Conservative on purpose: at 1x4096x4096 one-launch split-K measured the same as one split
    (17.6-17.9 us for every configuration, cuBLAS 18.0; H200 sweep of 2026-12-01: the time there
    is not set by idle SMs); the autotuner still tries it."""
    bk = 32 if dtype == torch.float32 else 128
    bm = max(16, min(64, next_pow2(m)))
    bn = 64 if m <= 64 else 128
    tiles = cdiv(m, bm) * cdiv(n, bn)
    if tiles * 8 > sms or k < 8192:
        return None
    split = min(2 * sms // tiles, k // 256, 64)
    if split < 2:
        return None
    return Config(bm, bn, bk, 8, 4, 4, kind="ptr", split_k=split)


def _gemv_config(n: int, k: int, dtype: torch.dtype, device: torch.device) -> Config:
    """M <= 16, 16-bit inputs (GEMV, decode): the weight is streamed once, so bytes in flight
    decide. 16x64 pointer tiles, BLOCK_K 256 (halved while 4 stages of buffers would not fit the
    device's shared memory per block: a conservative count, Triton's build needs less), and
    min(SMs // tiles, K // 2048) K chunks (split-K) when that is 2 or more. H200, 1x4096x4096
    bf16 (64 tiles, 2 chunks): an earlier tuned pick; a later tuning took 16x64x256
    without split-K and, in another run, 16x64x128 with 2 chunks, all 17.6-17.7 us (cuBLAS
    17.6-18.4). The TMA 16x128x64 tiles this shape took before ran 29.3 us
    (docs/gemm.md, GEMV)."""
    limit = shared_memory_limits(device_index(device))[0] if device.type == "cuda" else None
    bk = min(256, max(16, next_pow2(k)))
    while limit is not None and bk > 64 and 4 * (16 * bk + bk * 64) * dtype.itemsize + 4096 > limit:
        bk //= 2
    tiles = cdiv(n, 64)
    split = max(1, min(sm_count(device) // tiles, k // 2048))
    return Config(16, 64, bk, 8, 4, 4, kind="ptr", split_k=split)


def _launch_config(m: int, n: int, k: int, dtype: torch.dtype, device: torch.device, tma: bool) -> Config:
    """The documented default (no tuned entry cached for the shape, ROOFKIT_AUTOTUNE=0, CPU):
    - very few output tiles and K >= 8192: split-K (see ``_split_k_config``);
    - M <= 16 with 16-bit inputs: ``_gemv_config``;
    - otherwise 128x256 tiles (BLOCK_K 64, 8 warps, 3 stages, persistent: best or within 1 % of
      the best on every llama3-8b shape, 8192^3 and 4095^3 in the H200 sweep of 2026-11-30) for
      16-bit inputs with M and N above 128, 128x128x32 for fp32 (the 3-stage ring within shared memory), a short side (<= 64)
      getting an edge of next_pow2(side) (>= 16, tl.dot's minimum) and 4 warps;
    - descriptor (TMA) loads on Hopper and newer for 2-D problems (but M <= 16 above), pointer
      loads otherwise."""
    sk = _split_k_config(m, n, k, dtype, sm_count(device))
    if sk is not None:
        return sk
    if m <= 16 and dtype != torch.float32:
        return _gemv_config(n, k, dtype, device)
    kind = "tma" if tma else "ptr"
    bk = 32 if dtype == torch.float32 else 64
    bk = min(bk, max(16, next_pow2(k)))
    bm = 128 if m > 64 else max(16, next_pow2(m))
    bn = 128 if n > 64 else max(16, next_pow2(n))
    if bm == 128 and bn == 128:
        if dtype != torch.float32 and n > 128:
            return Config(bm, 256, bk, 8, 8, 3, kind=kind, persistent=True)
        return Config(bm, bn, bk, 8, 8, 3, kind=kind)
    return Config(bm, bn, bk, 8, 4, 4, kind=kind)


# The default on Hopper for 16-bit inputs and outputs without c, when the output has at least
# 2 x SMs tiles of 128 x 128 (each program then has tiles for both consumer warpgroups), also
# with ROOFKIT_AUTOTUNE=0: the Gluon ping-pong kernel, 128x128 per consumer warpgroup, 5 ring
# slots. H200, 2026-12-01 (docs/gemm.md, ping-pong): on the llama3-8b shapes within
# -8 % / +3 % of the Triton 128x256 kernel (qkv 541 vs 587 us, lm_head 12.52 vs 13.04 ms), and
# its GELU epilogue runs under the other warpgroup's main loop.
PINGPONG_DEFAULT = Config(128, 128, 64, 8, 4, 5, kind="pingpong", persistent=True)
# With beta * c loaded by TMA (a GEMM accumulating into its output): 4 ring slots and groups of
# 16 tile rows. H200, 2026-12-02, 128256 x 4096 x 1024 bf16 accumulating (a chunked weight
# gradient): 1645 us (654 TFLOP/s) against 1806 us with 5 slots and 2079 us for the Triton
# 128x256 kernel it replaces; cuBLAS addmm_ 1678 us (docs/fused_llm_ops.md, linear_cross_entropy).
PINGPONG_C_DEFAULT = Config(128, 128, 64, 16, 4, 4, kind="pingpong", persistent=True)


def _pingpong_ok(a, b, out, c=None) -> bool:
    """The Gluon ping-pong kernel can run this problem (Hopper, 16-bit inputs, TMA-storable
    output) and is offered for it: with c only when c is TMA-loadable like the output
    (``_gemm_ws.c_loadable``; per-element loads of a strided or broadcast c spill registers: the
    Triton kernels take those)."""
    if a.device.type != "cuda" or torch.cuda.get_device_capability(a.device)[0] != 9:
        return False
    try:
        from . import _gemm_ws
    except (ImportError, AttributeError):  # a Triton without Gluon's Hopper module, or other names
        return False
    return (c is None or _gemm_ws.c_loadable(c, out)) and _gemm_ws.launchable(a, b, out)


def _default_config(a, b, out, c=None, pingpong_ok: bool | None = None) -> Config:
    """``_launch_config``, or ``PINGPONG_DEFAULT`` where that kernel runs (see there);
    ``pingpong_ok``: ``_pingpong_ok(a, b, out, c)`` when the caller has it already."""
    m, k = a.shape
    n = b.shape[1]
    default = _launch_config(m, n, k, a.dtype, a.device, _gemm.tma_supported(a.device))
    if pingpong_ok is None:
        pingpong_ok = _pingpong_ok(a, b, out, c)
    if (default.split_k == 1 and out.element_size() == 2 and m >= 256 and n >= 256
            and cdiv(m, 128) * cdiv(n, 128) >= 2 * sm_count(a.device) and pingpong_ok):
        return PINGPONG_DEFAULT if c is None else PINGPONG_C_DEFAULT
    return default


def _candidates(m: int, n: int, k: int, dtype: torch.dtype, device: torch.device, tma: bool,
                pingpong: bool = False) -> list[Config]:
    """What the autotuner tries (besides the default)."""
    sms = sm_count(device)
    kinds = ("tma", "ptr") if tma else ("ptr",)
    out = []
    if m <= 64 or n <= 64:
        bm = max(16, min(64, next_pow2(m)))
        for bn in (64, 128):
            for bk in ((32, 64) if dtype == torch.float32 else (64, 128, 256)):
                tiles = cdiv(m, bm) * cdiv(n, bn)
                for split in (1, 2, 4, 8, 16, 32):
                    if split == 1 or (tiles * split <= 4 * sms and k // split >= bk):
                        out.append(Config(bm, bn, bk, 8, 4, 4, kind="ptr", split_k=split))
        return out
    big = [(128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 64, 4, 4), (128, 256, 64, 8, 4)]
    if dtype == torch.float32:
        big = [(128, 128, 32, 8, 3), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4)]
    for kind in kinds:
        for bm, bn, bk, w, s in big:
            out.append(Config(bm, bn, bk, 8, w, s, kind=kind))
            if kind == "tma":
                out.append(Config(bm, bn, bk, 8, w, s, kind=kind, persistent=True))
    if tma and dtype != torch.float32:
        # Two programs per SM: one's epilogue overlaps the other's main loop (shared memory of
        # 3 x 32 KiB per program).
        out += [Config(128, 128, 64, 8, 8, 3, kind="tma", persistent=True, ctas_per_sm=2),
                Config(128, 128, 64, 8, 4, 3, kind="tma", persistent=True, ctas_per_sm=2),
                Config(128, 256, 64, 8, 8, 3, kind="tma", persistent=True, epilogue_split=2),
                # Stores through the output's descriptor: no per-element int64 pointers (ptxas
                # reports 2.3-4.9 KB of spills for 128x256 tiles with pointer stores, 1.7 KB with
                # these). Not yet measured on a GPU: the tuner verifies and times them.
                Config(128, 256, 64, 8, 8, 3, kind="tma", persistent=True, store_desc=True),
                Config(128, 256, 64, 8, 8, 3, kind="tma", persistent=True, epilogue_split=2, store_desc=True)]
    if pingpong:
        # Producer warp + two consumer warpgroups on alternate tiles (``_gemm_ws``): one tile's
        # epilogue runs under the other's main loop. BLOCK_M x BLOCK_N per warpgroup.
        out += [Config(128, 128, 64, 8, 4, 4, kind="pingpong", persistent=True),
                Config(128, 128, 64, 8, 4, 5, kind="pingpong", persistent=True),
                Config(64, 256, 64, 8, 4, 4, kind="pingpong", persistent=True), PINGPONG_C_DEFAULT]
    return out


def _tune_key(a, b, c, dtype, act: int = 0) -> str:
    """Bucketed sizes, operand layouts, c present, a costly activation (gelu / gelu_tanh / silu:
    their epilogue favours configurations that overlap it), the tf32 flag."""
    m, k = a.shape
    n = b.shape[1]
    lay = "".join("n" if t.stride(-1) == 1 else "t" for t in (a, b))
    return (f"{str(dtype).removeprefix('torch.')}-{bucket(m)}x{bucket(n)}x{bucket(k)}-{lay}-c{int(c is not None)}"
            f"-act{int(act > 1)}-tf32{int(torch.backends.cuda.matmul.allow_tf32)}")


def _launch(cfg: Config, a, b, c, bias, out, alpha, beta, act: int) -> torch.Tensor:
    """2-D problem with configuration ``cfg``."""
    if cfg.split_k > 1:
        _gemm.launch_split_k(cfg, a, b, c, bias, out, alpha, beta, act)
    elif cfg.kind == "tma":
        _gemm.launch_tma(cfg, a, b, c, bias, out, alpha, beta, act)
    elif cfg.kind == "pingpong":
        from . import _gemm_ws  # Gluon (Hopper only): imported where it can run

        # A tuned entry is shared by a size bucket: this output may not be TMA-storable, or the
        # kernel may not build here (warned once): then the Triton kernels.
        if not (_pingpong_ok(a, b, out, c) and _gemm_ws.launch(cfg, a, b, c, bias, out, alpha, beta, act)):
            m, k = a.shape
            fallback = _launch_config(m, b.shape[1], k, a.dtype, a.device, _gemm.tma_supported(a.device))
            _launch(fallback, a, b, c, bias, out, alpha, beta, act)
    else:
        _gemm.launch_ptr(cfg, a[None], b[None], c[None] if c is not None else None, bias, out[None], alpha, beta, act)
    return out


def _choose(a, b, c, bias, out, alpha, beta, act: int) -> Config:
    m, k = a.shape
    n = b.shape[1]
    tma = _gemm.tma_supported(a.device)
    ok = _pingpong_ok(a, b, out, c)  # once per call: the default and the tuner's candidates both use it
    default = _default_config(a, b, out, c, ok)
    pingpong = m > 64 and n > 64 and ok
    if not _autotune.active(a.device):
        return default

    def run(cfg):
        return _launch(cfg, a, b, c, bias, torch.empty_like(out), alpha, beta, act)

    def reference():
        y = torch.matmul(a, b).float() * alpha
        if c is not None:
            y += beta * c.float()
        if bias is not None:
            y += bias.float()
        return _activation_torch(y, _ACT_NAMES[act])

    return _TUNER.choose(_tune_key(a, b, c, a.dtype, act), lambda: _candidates(m, n, k, a.dtype, a.device, tma, pingpong), default,
                         run, reference, a.device, a.dtype)


# Open config_override blocks, innermost last: (token, configuration).
_OVERRIDES: list[tuple[object, Config]] = []


@contextlib.contextmanager
def config_override(config: Config):
    """Run every GEMM of roofkit.matmul and roofkit.linear (forward and backward) called inside
    the block with ``config`` instead of the cached or default configuration: for tests and
    sweeps, which would otherwise patch module globals.

        from roofkit.ops.matmul import Config, config_override
        with config_override(Config(64, 64, 32, num_warps=4, num_stages=3)):
            y = roofkit.matmul(a, b)

    ``config`` is launched as given, unchecked: one this device cannot build raises at launch, and
    the caller verifies the results. Batched problems whose B is not shared by the batch run the
    pointer kernel, so there ``config`` is taken in its pointer, one-split form. Process-wide
    while the block is open (autograd runs the backward of CUDA tensors on its own threads);
    blocks nest, the innermost winning."""
    if not isinstance(config, Config):
        raise TypeError(f"roofkit.matmul.config_override: config must be a roofkit.ops.matmul.Config, got {type(config).__name__}")
    token = object()
    _OVERRIDES.append((token, config))
    bump_epoch()  # plans made outside the block used other configurations
    try:
        yield config
    finally:
        _OVERRIDES[:] = [o for o in _OVERRIDES if o[0] is not token]
        bump_epoch()


# ----------------------------------------------------------------------------- host launcher


def _as3(t: torch.Tensor, batch: int) -> torch.Tensor:
    """(batch, rows, cols) view: a 2-D tensor broadcast with batch stride 0."""
    if t.dim() == 2:
        return t.unsqueeze(0).expand(batch, *t.shape)
    return t.expand(batch, *t.shape[1:])


def _matmul_forward(a, b, c, bias, activation: str | None, alpha: float, beta: float, out_dtype, config: Config | None = None):
    """Checked operands in; returns the (batch?, M, N) result."""
    if config is None and _OVERRIDES:
        config = _OVERRIDES[-1][1]
    out_dtype = out_dtype or a.dtype
    batched = a.dim() == 3 or b.dim() == 3
    m, k = a.shape[-2:]
    n = b.shape[-1]
    nb = max(a.shape[0] if a.dim() == 3 else 1, b.shape[0] if b.dim() == 3 else 1)
    if batched and 0 in ((a.shape[0] if a.dim() == 3 else 1), (b.shape[0] if b.dim() == 3 else 1)):
        nb = 0
    shape = (nb, m, n) if batched else (m, n)
    out = torch.empty(shape, dtype=out_dtype, device=a.device)
    if out.numel() == 0:
        return out
    use_c = c is not None and beta != 0.0
    if k == 0 and not use_c and bias is None:
        return out.zero_()  # act(0) == 0 for every supported activation
    act = ACTIVATIONS[activation]
    if bias is not None:
        bias = bias.contiguous()  # the kernels read it at unit stride (N elements: a negligible copy when strided)
    a3, b3, o3 = _as3(a, nb), _as3(b, nb), _as3(out, nb)
    c3 = c.expand(shape) if use_c else None
    if c3 is not None and c3.dim() == 2:
        c3 = _as3(c3, nb)
    # A batch that B shares, stored as one (nb*M, K) matrix, is one big GEMM (better tiles).
    if nb > 1 and b3.stride(0) == 0 and a3.stride(0) == m * a3.stride(1) and o3.stride(0) == m * o3.stride(1) and (
        c3 is None or c3.stride(0) == m * c3.stride(1)
    ):
        a3 = a3.as_strided((1, nb * m, k), (0, a3.stride(1), a3.stride(2)))
        o3 = o3.as_strided((1, nb * m, n), (0, o3.stride(1), o3.stride(2)))
        if c3 is not None:
            c3 = c3.as_strided((1, nb * m, n), (0, c3.stride(1), c3.stride(2)))
        b3 = b3[:1]
    if a3.shape[0] == 1 and k > 0:
        a2, b2, o2 = a3[0], b3[0], o3[0]
        c2 = c3[0] if c3 is not None else None
        cfg = config or _choose(a2, b2, c2, bias, o2, alpha, beta, act)
        _launch(cfg, a2, b2, c2, bias, o2, alpha, beta, act)
        return out
    cfg = config or _launch_config(a3.shape[1], n, k, a.dtype, a.device, False)
    if cfg.split_k > 1 or cfg.kind != "ptr":
        cfg = dataclasses.replace(cfg, kind="ptr", split_k=1, persistent=False)
    _gemm.launch_ptr(cfg, a3, b3, c3, bias, o3, alpha, beta, act)
    return out


def _matmul_into(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, beta: float = 0.0) -> torch.Tensor:
    """``out = a @ b + beta * out`` in place, 2-D, ``out`` any strides of the kernels' output
    dtype: a GEMM writing a slice of a larger result, or accumulating into its own output (a
    chunked weight gradient). With ``beta`` != 0 the K loop is never split (partial sums would
    race with the read of ``out``); each tile reads its part of ``out`` before writing it."""
    m, k = a.shape
    if out.numel() == 0:
        return out
    c = out if beta != 0.0 else None
    if k == 0:
        return out.mul_(beta) if c is not None else out.zero_()
    act = ACTIVATIONS[None]
    cfg = _OVERRIDES[-1][1] if _OVERRIDES else _choose(a, b, c, None, out, 1.0, beta, act)
    if c is not None and cfg.split_k > 1:
        cfg = dataclasses.replace(cfg, split_k=1)
    _launch(cfg, a, b, c, None, out, 1.0, beta, act)
    return out


# ----------------------------------------------------------------------------- custom ops


def _act_name(activation: str) -> str | None:
    return None if activation == "none" else activation


def _matmul(
    a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None, bias: torch.Tensor | None, activation: str,
    alpha: float, beta: float, out_dtype: torch.dtype | None,
) -> torch.Tensor:
    return _matmul_forward(a, b, c, bias, _act_name(activation), alpha, beta, out_dtype)


def _out_shape(a, b):
    m, n = a.shape[-2], b.shape[-1]
    if a.dim() == 2 and b.dim() == 2:
        return (m, n)
    ba = a.shape[0] if a.dim() == 3 else 1
    bb = b.shape[0] if b.dim() == 3 else 1
    return (0 if 0 in (ba, bb) else max(ba, bb), m, n)


def _matmul_fake(a, b, c, bias, activation, alpha, beta, out_dtype):
    return a.new_empty(_out_shape(a, b), dtype=out_dtype or a.dtype)


def _matmul_setup(ctx, inputs, output):
    a, b, c, bias, activation, alpha, beta, out_dtype = inputs
    ctx.activation, ctx.alpha, ctx.beta, ctx.out_dtype = activation, alpha, beta, out_dtype
    ctx.has_c, ctx.has_bias = c is not None, bias is not None
    ctx.save_for_backward(a, b, c, bias)


def _grad_product(x: torch.Tensor, y: torch.Tensor, alpha: float, like: torch.Tensor) -> torch.Tensor:
    """alpha * x @ y as the gradient of ``like``: when ``like`` was broadcast over the batch (a
    2-D operand, or a batch of 1), the per-batch products stay fp32 and are summed before the one
    rounding to like's dtype."""
    if _out_shape(x, y) == tuple(like.shape):
        return _matmul_op(x, y, None, None, "none", alpha, 0.0, None)
    t = _matmul_op(x, y, None, None, "none", alpha, 0.0, torch.float32).sum(0)
    return (t.unsqueeze(0) if like.dim() == 3 else t).to(like.dtype)


def _matmul_backward(ctx, dy):
    """g = dY * act'(pre) (pre recomputed in fp32 by the same kernel), rounded to the input dtype;
    dA = alpha * g @ B^T and dB = alpha * A^T @ g by roofkit.matmul (fp32 accumulation), summed
    over the batch for an operand that was broadcast; dc = beta * g summed to c's shape and
    dbias = the fp32 column sum of g (both rounded once)."""
    a, b, c, bias = ctx.saved_tensors
    if ctx.activation != "none":
        pre = _matmul_op(a, b, c, bias, "none", ctx.alpha, ctx.beta, torch.float32)
        g = dy.to(torch.float32) * _activation_grad(pre, ctx.activation)
    else:
        g = dy.to(torch.float32) if ctx.needs_input_grad[2] or ctx.needs_input_grad[3] else dy
    g_in = g.to(a.dtype)
    da = db = dc = dbias = None
    if ctx.needs_input_grad[0]:
        da = _grad_product(g_in, b.transpose(-1, -2), ctx.alpha, a)
    if ctx.needs_input_grad[1]:
        db = _grad_product(a.transpose(-1, -2), g_in, ctx.alpha, b)
    if ctx.has_c and ctx.needs_input_grad[2] and ctx.beta != 0.0:
        dc = (ctx.beta * g.to(torch.float32)).sum_to_size(c.shape).to(c.dtype)
    if ctx.has_bias and ctx.needs_input_grad[3]:
        dbias = g.to(torch.float32).reshape(-1, g.shape[-1]).sum(0).to(bias.dtype)
    return da, db, dc, dbias, None, None, None, None


_matmul_op = Op("roofkit::matmul", _matmul, _matmul_fake).autograd(_matmul_setup, _matmul_backward)


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str) -> torch.Tensor:
    k, n = x.shape[-1], weight.shape[0]
    y = _matmul_forward(x.reshape(_rows(x), k), weight.t(), None, bias, _act_name(activation), 1.0, 0.0, None)
    return y.view(*x.shape[:-1], n)


def _rows(x: torch.Tensor) -> int:
    """Rows of ``x`` seen as (rows, K) (explicit: reshape(-1, 0) is ambiguous when K = 0)."""
    return math.prod(x.shape[:-1])


def _linear_fake(x, weight, bias, activation):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _linear_setup(ctx, inputs, output):
    x, weight, bias, activation = inputs
    ctx.activation = activation
    ctx.has_bias = bias is not None
    ctx.save_for_backward(x, weight, bias)


def _linear_backward(ctx, dy):
    """dY' = dY * act'(pre) (pre recomputed in fp32 by the same kernel: no activation memory is
    kept between forward and backward), dX = dY' @ W, dW = dY'^T @ X, db = sum over rows of dY'
    (fp32 sum, rounded once)."""
    x, weight, bias = ctx.saved_tensors
    k, n = x.shape[-1], weight.shape[0]
    x2 = x.reshape(_rows(x), k)
    g = dy.reshape(_rows(x), n)
    if ctx.activation != "none":
        pre = _matmul_op(x2, weight.t(), None, bias, "none", 1.0, 0.0, torch.float32)
        g = (g.to(torch.float32) * _activation_grad(pre, ctx.activation)).to(x.dtype)
    dx = dw = db = None
    if ctx.needs_input_grad[0]:
        dx = _matmul_op(g, weight, None, None, "none", 1.0, 0.0, None).view(x.shape)
    if ctx.needs_input_grad[1]:
        dw = _matmul_op(g.t(), x2, None, None, "none", 1.0, 0.0, None)
    if ctx.has_bias and ctx.needs_input_grad[2]:
        db = g.to(torch.float32).sum(0).to(bias.dtype)
    return dx, dw, db, None


_linear_op = Op("roofkit::linear", _linear, _linear_fake).autograd(_linear_setup, _linear_backward)


# ----------------------------------------------------------------------------- public functions


def _check_activation(op: str, activation) -> str:
    if activation is not None and not isinstance(activation, str):
        raise TypeError(f"roofkit.{op}: activation must be None or a str, got {type(activation).__name__}")
    if activation not in ACTIVATIONS:
        names = ", ".join(repr(a) for a in ACTIVATIONS)
        raise ValueError(f"roofkit.{op}: activation must be one of {names}; got {activation!r}")
    return "none" if activation is None else activation


def _check_scalar(op: str, name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"roofkit.{op}: {name} must be a real number, got {type(v).__name__}")
    return float(v)


def _check_operand(op: str, name: str, t, ref, dims) -> None:
    check_tensor(op, name, t)
    if ref is not None:
        check_same_device(op, name, t, ref)
        if t.dtype != ref.dtype:
            raise TypeError(f"roofkit.{op}: {name} dtype {t.dtype} differs from input dtype {ref.dtype} (mixed dtypes are not supported)")
    if t.dim() not in dims:
        raise ValueError(f"roofkit.{op}: {name} must have {' or '.join(map(str, dims))} dimensions, got shape {tuple(t.shape)}")


def _check_bias(op: str, bias, input, n: int) -> None:
    if bias is None:
        return
    _check_operand(op, "bias", bias, input, (1,))
    if bias.shape[0] != n:
        raise ValueError(f"roofkit.{op}: bias must have shape ({n},), got {tuple(bias.shape)}")


@planned
def matmul(input, other, *, bias=None, activation=None, alpha=1.0, beta=0.0, c=None, out_dtype=None):
    """out = act(alpha * (input @ other) + beta * c + bias), in one kernel.

    Args:
        input: (M, K) or (B, M, K); float32, float16 or bfloat16; any strides (transposed views
            are read in place, no copy).
        other: (K, N) or (B, K, N), same dtype and device. Batches broadcast as in torch.matmul
            (a 2-D operand or a batch of 1 is shared by every batch entry).
        bias: optional (N,) of the input dtype, added to every row.
        activation: None, "relu", "gelu" (erf form), "gelu_tanh" or "silu".
        alpha, beta: real scalars; ``c``: optional tensor of the input dtype broadcastable to the
            output shape. As in torch.addmm, beta == 0 ignores c (NaN/inf in c do not propagate).
        out_dtype: output dtype (float32/float16/bfloat16); default the input dtype.
    Returns:
        A new contiguous (M, N) or (B, M, N) tensor of ``out_dtype``.
    Raises:
        TypeError: non-tensors, unsupported or mixed dtypes, non-real alpha/beta, bad out_dtype
            or activation type.
        ValueError: operands not 2-D/3-D, inner dimensions that differ, batches that do not
            broadcast, bias of the wrong length, c not broadcastable, unknown activation name,
            tensors on different or unsupported devices.
    Numerics:
        Products accumulate in float32 (fp32 inputs use TF32 tensor cores only when
        torch.backends.cuda.matmul.allow_tf32 is True, else IEEE fp32). alpha, beta * c, bias and
        the activation are applied to the float32 accumulator; the single rounding point is the
        final store in out_dtype (torch's eager epilogue rounds after each step). The exact GELU
        is evaluated as precisely as the output needs: on the Hopper ping-pong kernel x * Phi(x)
        with Phi in a fitted logistic form, relative error <= 2.53e-4 for bfloat16 outputs and
        1.54e-5 for float16 where |GELU| > 1e-3 (about a fifteenth and a thirtieth of the
        output's unit in the last place); below that only the absolute error is bounded, 4.3e-7
        and 2.8e-8. Elsewhere an erfc fit (fractional error < 1.2e-7, about 2e-6 relative as
        evaluated in float32). K = 0 gives act(beta * c + bias), zero-filled without a kernel
        launch when c and bias are absent; empty outputs launch nothing. Differentiable (first
        order) in input, other, c and bias: the backward recomputes the pre-activation in fp32
        and runs two roofkit GEMMs.
    Cost:
        2*M*N*K FLOP per batch entry; reads A, B, bias and c once and writes the output once in
        the ideal case (each A row-panel is re-read per tile column, mostly from L2).
    Launch configuration:
        The one ``roofkit tune`` verified and cached for this GPU, its software and the shape's
        size bucket, else the documented default (``_launch_config``); nothing is timed inside
        the call unless ROOFKIT_AUTOTUNE=1 (then a shape missing from the cache is tuned in its
        first call). ``config_override`` forces one configuration.
    """
    op = "matmul"
    _check_operand(op, "input", input, None, (2, 3))
    _check_operand(op, "other", other, input, (2, 3))
    if input.shape[-1] != other.shape[-2]:
        raise ValueError(
            f"roofkit.{op}: inner dimensions differ: input {tuple(input.shape)} has K={input.shape[-1]}, "
            f"other {tuple(other.shape)} has K={other.shape[-2]}"
        )
    if input.dim() == 3 and other.dim() == 3 and 1 not in (input.shape[0], other.shape[0]) and input.shape[0] != other.shape[0]:
        raise ValueError(f"roofkit.{op}: batch dimensions {input.shape[0]} (input) and {other.shape[0]} (other) do not broadcast")
    shape = _out_shape(input, other)
    _check_bias(op, bias, input, other.shape[-1])
    alpha = _check_scalar(op, "alpha", alpha)
    beta = _check_scalar(op, "beta", beta)
    if c is not None:
        _check_operand(op, "c", c, input, (0, 1, 2, 3))
        try:
            ok = torch.broadcast_shapes(c.shape, shape) == torch.Size(shape)
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(f"roofkit.{op}: c of shape {tuple(c.shape)} does not broadcast to the output shape {shape}")
    if out_dtype is not None and out_dtype not in FLOAT_DTYPES:
        raise TypeError(f"roofkit.{op}: out_dtype must be None, torch.float32, torch.float16 or torch.bfloat16; got {out_dtype!r}")
    act = _check_activation(op, activation)
    return _matmul_op.apply(input, other, c, bias, act, alpha, beta, out_dtype)


@planned
def linear(input, weight, bias=None, activation=None):
    """act(input @ weight.T + bias), mirroring torch.nn.functional.linear plus a fused activation.

    Args:
        input: (..., K) float32/float16/bfloat16 (1-D input (K,) gives (N,), as in torch).
        weight: (N, K) of the input dtype; bias: optional (N,).
        activation: None, "relu", "gelu", "gelu_tanh" or "silu".
    Returns:
        (..., N) tensor of the input dtype.
    Raises:
        TypeError / ValueError naming roofkit.linear and the argument (see ``matmul``).
    Numerics:
        Forward as ``matmul``. Backward (first order): the pre-activation is recomputed in fp32
        by the same kernel (nothing beyond the inputs is saved), dY' = dY * act'(pre) rounded to
        the input dtype, dX = dY' @ W and dW = dY'^T @ X by the matmul kernel (fp32
        accumulation), db = fp32 column sum of dY'.
    Cost:
        Forward 2*R*N*K FLOP (R = rows of input); backward 4*R*N*K (+2*R*N*K to recompute the
        pre-activation when an activation is fused).
    """
    op = "linear"
    if isinstance(input, torch.Tensor) and input.dim() == 0:
        raise ValueError(f"roofkit.{op}: input must have at least 1 dimension, got a 0-d tensor")
    _check_operand(op, "input", input, None, (input.dim(),) if isinstance(input, torch.Tensor) else (1,))
    _check_operand(op, "weight", weight, input, (2,))
    if weight.shape[1] != input.shape[-1]:
        raise ValueError(
            f"roofkit.{op}: weight must have shape (N, {input.shape[-1]}) to match input's last dimension; got {tuple(weight.shape)}"
        )
    _check_bias(op, bias, input, weight.shape[0])
    act = _check_activation(op, activation)
    return _linear_op.apply(input, weight, bias, act)


# ----------------------------------------------------------------------------- spec

_CPU = (torch.float32, torch.float16)  # tl.dot on bf16 does not run in the interpreter
_BF16 = (torch.bfloat16,)


def describe_launch(case, dtype, device) -> str:
    """The configuration roofkit used for a 2-D case (tuned or default) and its wave figures."""
    m, n, k = case["shape"]
    if case.get("batch", (None, None)) != (None, None):
        return "batched: pointer kernel, default configuration"
    a = torch.empty((k, m), dtype=dtype, device=device).t() if case.get("a_layout") == "transposed" else torch.empty((m, k), dtype=dtype, device=device)
    b = torch.empty((n, k), dtype=dtype, device=device).t() if case.get("b_layout") == "transposed" else torch.empty((k, n), dtype=dtype, device=device)
    c = torch.empty((m, n), dtype=dtype, device=device) if case.get("c") else None
    key = _tune_key(a, b, c, dtype, _gemm.ACTIVATIONS[case.get("activation")])
    if _OVERRIDES:
        cfg, source = _OVERRIDES[-1][1], "override"
    elif key in _TUNER.mem:
        cfg, source = _TUNER.mem[key], "tuned"
    else:
        cfg, source = _default_config(a, b, torch.empty((m, n), dtype=case.get("out_dtype") or dtype, device=device), c), "default"
    w = gemm_waves(m, n, k, cfg.BLOCK_M, cfg.BLOCK_N, sm_count(device), cfg.ctas_per_sm)
    tiles = w.tiles * cfg.split_k
    return f"{cfg.label()} ({source}); tiles {tiles}, waves {w.waves if cfg.split_k == 1 else -(-tiles // w.slots)}, wave eff {w.wave_efficiency:.2f}"


def _make_inputs(case, dtype, generator, device) -> Inputs:
    m, n, k = case["shape"]
    ba, bb = case.get("batch", (None, None))
    a_shape = ((ba,) if ba is not None else ()) + (m, k)
    b_shape = ((bb,) if bb is not None else ()) + (k, n)
    a = random_tensor(a_shape, dtype, generator, device, case.get("dist", "normal"), layout=case.get("a_layout", "contiguous"))
    b = random_tensor(b_shape, dtype, generator, device, case.get("dist", "normal"), layout=case.get("b_layout", "contiguous"))
    kw = {}
    out_shape = _out_shape(a, b)
    if case.get("bias"):
        kw["bias"] = random_tensor((n,), dtype, generator, device)
    if case.get("c"):
        c_shape = case.get("c_shape", out_shape)
        kw["c"] = random_tensor(c_shape, dtype, generator, device, layout=case.get("c_layout", "contiguous"))
        kw["beta"] = case.get("beta", 1.0)
    for key in ("activation", "alpha", "out_dtype"):
        if case.get(key) is not None:
            kw[key] = case[key]
    return Inputs((a, b), kw)


def _c(name, tags=(), dtypes=_CPU, **p):
    return case(name, tags, dtypes=dtypes, **p)


CASES = [
    _c("small_odd_33x17x29", ["quick"], shape=(33, 17, 29)),
    _c("k1_9x7x1", shape=(9, 7, 1)),
    _c("m1_1x20x19", shape=(1, 20, 19)),
    _c("n1_21x1x18", shape=(21, 1, 18)),
    _c("transposed_a_19x23x37", shape=(19, 23, 37), a_layout="transposed"),
    _c("transposed_b_19x23x37", shape=(19, 23, 37), b_layout="transposed"),
    _c("strided_both_12x10x9", shape=(12, 10, 9), a_layout="strided", b_layout="offset"),
    _c("batched_3x9x10x11", shape=(9, 10, 11), batch=(3, 3)),
    _c("broadcast_a2d_9x10x11", shape=(9, 10, 11), batch=(None, 3)),
    _c("broadcast_b2d_9x10x11", shape=(9, 10, 11), batch=(3, None), bias=True),
    _c("broadcast_b2d_folded_c_9x10x11", shape=(9, 10, 11), batch=(3, None), c=True, beta=0.5),
    _c("broadcast_b2d_shared_c_9x10x11", shape=(9, 10, 11), batch=(3, None), c=True, c_shape=(9, 10), activation="relu"),
    _c("broadcast_batch1_9x10x11", shape=(9, 10, 11), batch=(1, 2)),
    _c("relu_bias_17x18x19", shape=(17, 18, 19), bias=True, activation="relu"),
    _c("gelu_bias_17x18x19", shape=(17, 18, 19), bias=True, activation="gelu"),
    _c("gelu_tanh_bias_17x18x19", shape=(17, 18, 19), bias=True, activation="gelu_tanh"),
    _c("silu_17x18x19", shape=(17, 18, 19), activation="silu"),
    _c("alpha_beta_c_13x14x15", shape=(13, 14, 15), alpha=0.5, c=True, beta=-2.0, bias=True),
    _c("c_row_broadcast_13x14x15", shape=(13, 14, 15), c=True, c_shape=(1, 14), beta=0.75),
    _c("c_transposed_batched_2x13x14x15", shape=(13, 14, 15), batch=(2, 2), c=True, c_layout="transposed"),
    _c("out_fp32_11x12x13", shape=(11, 12, 13), out_dtype=torch.float32, bias=True),
    _c("aligned_fp32_24x40x17", shape=(24, 40, 17), dtypes=(torch.float32,), bias=True, activation="gelu"),
    _c("k0_with_c_bias_5x6x0", shape=(5, 6, 0), c=True, beta=0.5, bias=True, activation="silu"),
    _c("empty_m_0x6x5", ["quick"], shape=(0, 6, 5)),
    _c("empty_n_5x0x5", shape=(5, 0, 5)),
    _c("empty_batch_0x5x6x7", shape=(5, 6, 7), batch=(0, None)),
    # gpu: acceptance shapes (bf16 runs only on the GPU)
    case("gpu_upstream_512x512x512", ["gpu"], shape=(512, 512, 512), dtypes=(torch.float16,)),
    case("gpu_small_odd_bf16", ["gpu"], shape=(33, 17, 29), dtypes=_BF16, bias=True, activation="gelu"),
    case("gpu_prime_127x257x1021", ["gpu"], shape=(127, 257, 1021)),
    case("gpu_4095_cubed", ["gpu"], shape=(4095, 4095, 4095)),
    case("gpu_transposed_1000x1200x1500", ["gpu"], shape=(1000, 1200, 1500), a_layout="transposed", b_layout="transposed"),
    case("gpu_batched_bcast_8x256x384x200", ["gpu"], shape=(256, 384, 200), batch=(8, None), bias=True, activation="silu"),
    case("gpu_alpha_beta_c_777x555x333", ["gpu"], shape=(777, 555, 333), alpha=1.5, c=True, beta=0.25, activation="gelu_tanh"),
    case("gpu_m1_1x4096x4096", ["gpu"], shape=(1, 4096, 4096)),
    case("gpu_k1_2048x2048x1", ["gpu"], shape=(2048, 2048, 1), bias=True, activation="relu"),
]

SUITES = {
    # llama3-8b: hidden 4096, 32 q heads + 8 kv heads of 128 (qkv 6144), ffn 14336, vocab 128256;
    # 8192 tokens.
    "llama3-8b": [
        case("qkv_8192x6144x4096", shape=(8192, 6144, 4096), dtypes=_BF16),
        case("o_proj_8192x4096x4096", shape=(8192, 4096, 4096), dtypes=_BF16),
        case("ffn_up_8192x14336x4096", shape=(8192, 14336, 4096), dtypes=_BF16),
        case("ffn_up_silu_8192x14336x4096", shape=(8192, 14336, 4096), dtypes=_BF16, activation="silu"),
        case("ffn_down_8192x4096x14336", shape=(8192, 4096, 14336), dtypes=_BF16),
        case("lm_head_8192x128256x4096", shape=(8192, 128256, 4096), dtypes=_BF16),
    ],
    # The issue-3 speed figures not already in llama3-8b.
    "acceptance": [
        case("square_8192", shape=(8192, 8192, 8192), dtypes=_BF16),
        case("odd_4095_cubed", shape=(4095, 4095, 4095), dtypes=_BF16),
        case("gemv_1x4096x4096", shape=(1, 4096, 4096), dtypes=_BF16),
        case("ffn_up_8192x14336x4096", shape=(8192, 14336, 4096), dtypes=_BF16),
        case("ffn_up_bias_gelu_8192x14336x4096", shape=(8192, 14336, 4096), dtypes=_BF16, bias=True, activation="gelu"),
    ],
    "edge": [
        case("fp32_4095_cubed", shape=(4095, 4095, 4095), dtypes=(torch.float32,)),
        case("decode_m16_16x14336x4096", shape=(16, 14336, 4096), dtypes=_BF16),
        case("prime_127x257x1021", shape=(127, 257, 1021), dtypes=_BF16),
    ],
    # host: one decoding step of 8 tokens through a linear layer 4096 -> 4096 (F.linear's layout:
    # the weight row-major (N, K), so b is its transpose; with a bias), where the host's cost per
    # call is the time.
    "host": [
        case("linear_8x4096x4096", shape=(8, 4096, 4096), b_layout="transposed", bias=True, dtypes=_BF16),
        case("linear_8x4096x4096_fwd_bwd", shape=(8, 4096, 4096), b_layout="transposed", bias=True, dtypes=_BF16,
             mode="fwd_bwd"),
    ],
}

SPEC = OpSpec(
    name="matmul",
    impl=matmul,
    reference=matmul_reference,
    torch_impl=matmul_torch,
    make_inputs=_make_inputs,
    cost=matmul_cost,
    reduction_length=lambda case: max(1, case["shape"][2]),
    dtypes=FLOAT_DTYPES,
    cases=CASES,
    suites=SUITES,
    baselines={
        "torch": lambda: matmul_torch,
        "torch.compile": baselines.compiled(matmul_torch, mode="max-autotune-no-cudagraphs"),
    },
    matrix=True,
    grad_args=(0, 1),
    marker="matmul",
    describe=describe_launch,
    tuners=(_TUNER,),
)

SPECS = (SPEC,)
