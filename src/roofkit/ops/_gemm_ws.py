"""Warp-specialized "ping-pong" GEMM for Hopper (Gluon; compute capability 9.x only).

One persistent program per SM walks output tiles pid, pid + grid, ... in grouped order. Three
partitions of warps share a ring of ``STAGES`` shared-memory slots, each holding one
[BLOCK_M, BLOCK_K] block of A and one [BLOCK_K, BLOCK_N] block of B:

- a producer (one warp, few registers) issues the TMA loads of every tile's K blocks, in tile
  order, into the ring, waiting on a slot's "empty" barrier before refilling it;
- two consumers (one warpgroup each, most of the registers) take alternate tiles: consumer 0
  the program's 1st, 3rd, ... tile, consumer 1 the 2nd, 4th, ... Each waits on a slot's
  "ready" barrier, issues its wgmma asynchronously (one in flight), releases the slot whose wgmma
  has finished, and after its tile's last K block runs the epilogue (alpha, beta * c, bias,
  activation on the fp32 accumulator, one rounding) and a TMA store.

The consumers' main loops take turns (two "turn" mbarriers; the producer fills the ring in
the same tile order), so consumer 1's main loop starts as consumer 0's ends: one consumer's
epilogue (for the exact GELU, ~16 instructions per element) runs while the other keeps the
tensor cores busy. That overlap is what a single-partition persistent kernel
cannot give, and why this form exists (docs/gemm.md, the fused epilogue).

Restrictions (``launchable`` checks them): CUDA device of compute capability 9.x (wgmma), not
the interpreter, 16-bit inputs of one dtype, 2-D operands a descriptor can describe after
``_gemm._aligned``, a 16-bit output whose rows are 16-byte aligned (it is stored by TMA).
Source: the "ping-pong" kernel schedule of CUTLASS 3's Hopper GEMMs (producer warp, two consumer
warpgroups on alternate tiles, register reallocation), written with Gluon's warp_specialize,
TMA, mbarrier and warpgroup_mma.
"""

from __future__ import annotations

import warnings

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ._common import cdiv, device_index, interpreter_active, registers_per_sm, shared_memory_limits, sm_count
from ._runtime import cached_launch

# TMA copies under the names Triton 3.9 keeps (async_load / async_store); 3.6 has only the older
# names (same arguments), which 3.9 turned into errors.
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global

LOG2E = 1.4426950408889634
# Constexpr overrides for diagnostic runs only (benchmarks/probe_pingpong_diag.py, which clears
# it in a ``finally``): SERIAL = the other consumer starts after this one's epilogue (no
# overlap), EPI_REPEAT = the GELU applied that many times (a longer epilogue), WAIT_DEPTH = wgmma
# groups a consumer keeps in flight (default 1), GELU_FORM (``_gelu``'s FORM): 1 = the erfc fit's
# last step as max(x, 0) - |x| q (-inf gives 0), 2 = the degree-6 logistic form, 3 = the 5-term
# erfc fit (bfloat16's GELU before the logistic form), for every output dtype. Other keys are refused.
# Not thread-safe; empty in normal use.
DIAGNOSTIC: dict = {}


@gluon.jit
def _tile_coords(tile, tiles_m, tiles_n, GROUP_M: gl.constexpr):
    """Grouped order, as ``_gemm._tile_coords``."""
    per_group = GROUP_M * tiles_n
    g = tile // per_group
    row0 = g * GROUP_M
    rows_in_group = gl.minimum(tiles_m - row0, GROUP_M)
    local = tile - g * per_group
    return row0 + local % rows_in_group, local // rows_in_group


@gluon.constexpr_function
def _block_dims(shape, transposed):
    """(rows, cols) of the operand a ring slot holds: the slot is [STAGES, rows, cols], or
    [STAGES, cols, rows] when the descriptor describes the operand's transpose."""
    return (shape[2], shape[1]) if transposed else (shape[1], shape[2])


@gluon.jit
def _ex2(x):
    """2**x by one SFU instruction (ex2.approx.ftz: results below 2**-126 flush to 0); Triton's
    exp adds the scaling that keeps denormal results, 3 more instructions per element."""
    return gl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=gl.float32, is_pure=True,
                                     pack=1)


@gluon.jit
def _rcp(x):
    """1 / x by one SFU instruction (rcp.approx.ftz, ~1 ulp); '/' adds range checks and a Newton
    step."""
    return gl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=gl.float32, is_pure=True,
                                     pack=1)


# The erfc fit of ``_gemm._phi`` (Numerical Recipes' erfcc, fractional error < 1.2e-7) with its
# exponential taken as 2**(.): Phi(-|x|) = 0.5 t exp(P(t) - z^2) = t * 2**(P(t) log2 e - 1 - (z sqrt(log2 e))^2),
# z = |x| / sqrt(2), t = 1 / (1 + z / 2). The coefficients below are P's times log2 e, the constant
# term less 1 (the 0.5).
_P = [c * LOG2E for c in (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418,
                          0.37409196, 1.00002368, -1.26551223)]
_P[-1] -= 1.0
P9 = gl.constexpr(_P[0])
P8 = gl.constexpr(_P[1])
P7 = gl.constexpr(_P[2])
P6 = gl.constexpr(_P[3])
P5 = gl.constexpr(_P[4])
P4 = gl.constexpr(_P[5])
P3 = gl.constexpr(_P[6])
P2 = gl.constexpr(_P[7])
P1 = gl.constexpr(_P[8])
P0 = gl.constexpr(_P[9])
HALF_RSQRT2 = gl.constexpr(0.5 * 0.7071067811865476)  # z / 2 = |x| / (2 sqrt 2)
ZS = gl.constexpr((LOG2E / 2.0) ** 0.5)  # z sqrt(log2 e) = |x| sqrt(log2 e / 2)
LOG2E_C = gl.constexpr(LOG2E)


# Diagnostic (GELU_FORM 3; bfloat16's GELU before the erfc fit): Abramowitz & Stegun 7.1.26,
# erfc(z) = t (a1 + a2 t + ... + a5 t^4) exp(-z^2), t = 1 / (1 + p z), absolute error <= 1.5e-7,
# i.e. Phi within 7.5e-8 absolute: GELU within 2e-4 relative where |GELU(x)| > 1e-3. Four fused
# multiply-adds instead of nine. Coefficients times 0.5 (the 0.5 of Phi = erfc / 2).
AS_P = gl.constexpr(0.3275911 * 0.7071067811865476)  # p z = |x| p / sqrt(2)
A5 = gl.constexpr(0.5 * 1.061405429)
A4 = gl.constexpr(0.5 * -1.453152027)
A3 = gl.constexpr(0.5 * 1.421413741)
A2 = gl.constexpr(0.5 * -0.284496736)
A1 = gl.constexpr(0.5 * 0.254829592)


# The logistic form of Phi for 16-bit outputs: Phi(x) = 1 / (1 + exp(-g(x))), g = logit(Phi), odd,
# fitted as g(x) = x h(x^2) by weighted minimax over |x| <= 5.5 (benchmarks/fit_gelu_logistic.py).
# An error d in g is a relative error (1 - Phi) d in Phi: the fit (weighted to 2e-4 where
# |GELU| > 1e-3, relaxed past that into the tail) bounds the GELU's relative error where
# |GELU| > 1e-3 and its absolute error elsewhere (in the far negative tail the relative error
# grows: 18 % at x = -5 for degree 4, on values below 1.5e-6). Over every float32 input:
# h of degree 4 (bfloat16 outputs) 2.53e-4 relative / 4.3e-7 absolute, about a fifteenth of a
# bf16 unit in the last place; degree 6 (float16 outputs) 1.54e-5 / 2.8e-8, a thirtieth of an
# fp16 unit. (The 5-term erfc fit bf16 took before: 1.7e-4 / 1.7e-7 in ~16 instructions.) Past the
# fitted range no clamp is needed: both h stay above 1.59 for every s >= 0 with a positive
# leading coefficient, so |g| > 15 for |x| > 5 and Horner's overflow goes to -inf (scaled), never
# NaN. Coefficients times -log2 e (the ex2).
_H4 = [c * -LOG2E for c in (1.59501326, 0.0737921717, -0.000539660658, -2.65866471e-05, 9.35111904e-07)]
G0 = gl.constexpr(_H4[0])
G1 = gl.constexpr(_H4[1])
G2 = gl.constexpr(_H4[2])
G3 = gl.constexpr(_H4[3])
G4 = gl.constexpr(_H4[4])
_H6 = [c * -LOG2E for c in (1.59572113, 0.072756021, -0.000111982777, -0.000100453122, 6.89869563e-06,
                            -2.16809274e-07, 2.71569028e-09)]
H0 = gl.constexpr(_H6[0])
H1 = gl.constexpr(_H6[1])
H2 = gl.constexpr(_H6[2])
H3 = gl.constexpr(_H6[3])
H4 = gl.constexpr(_H6[4])
H5 = gl.constexpr(_H6[5])
H6 = gl.constexpr(_H6[6])


@gluon.jit
def _gelu_logistic(x, DEGREE: gl.constexpr):
    """x * Phi(x) as x / (1 + 2**(x h(x^2))), h of DEGREE 4 or 6: 10 or 12 instructions per element
    (two on the SFU). NaN stays NaN; +inf -> +inf, -inf -> NaN (inf * 0, as x * Phi(x) in
    float64); large |x| saturates the ex2 to 0 or inf (x or -0)."""
    s = x * x
    if DEGREE == 4:
        h = s * G4 + G3
        h = h * s + G2
        h = h * s + G1
        h = h * s + G0
    else:
        h = s * H6 + H5
        h = h * s + H4
        h = h * s + H3
        h = h * s + H2
        h = h * s + H1
        h = h * s + H0
    return x * _rcp(1.0 + _ex2(x * h))


@gluon.jit
def _gelu(x, OUT_BITS: gl.constexpr, FORM: gl.constexpr = 0):
    """x * Phi(x), the exact (erf) GELU, as precise as the output needs: OUT_BITS 2 (bfloat16) the
    logistic form of degree 4 (10 instructions per element), 1 (float16) of degree 6 (12), 0
    (float32) the 10-term erfc fit (fractional error < 1.2e-7, ~21): Phi(-|x|) = q, Phi(x) = q for
    x < 0, 1 - q otherwise (NaN stays NaN). FORM (diagnostic): 1 = the erfc fit's last step as
    max(x, 0) - |x| q, 2 = the degree-6 logistic form, 3 = the 5-term erfc fit (A&S 7.1.26)."""
    if FORM == 2 or (FORM == 0 and OUT_BITS == 1):
        return _gelu_logistic(x, 6)
    if FORM == 0 and OUT_BITS == 2:
        return _gelu_logistic(x, 4)
    ax = gl.abs(x)
    zs = ax * ZS
    if FORM == 3:
        e = _ex2(-(zs * zs))  # exp(-z^2)
        t = _rcp(ax * AS_P + 1.0)
        p = t * A5 + A4
        p = p * t + A3
        p = p * t + A2
        p = p * t + A1
        q = (t * p) * e
    else:
        t = _rcp(ax * HALF_RSQRT2 + 1.0)
        p = t * P9 + P8
        p = p * t + P7
        p = p * t + P6
        p = p * t + P5
        p = p * t + P4
        p = p * t + P3
        p = p * t + P2
        p = p * t + P1
        p = p * t + P0
        q = t * _ex2(p - zs * zs)
    if FORM == 1:  # diagnostic only: max(x, 0) - |x| q (-inf -> 0, unlike torch)
        return gl.maximum(x, 0.0) - gl.minimum(ax, 3.0e38) * q
    return x * gl.where(x < 0, q, 1.0 - q)  # +inf -> +inf, -inf -> NaN (as x * Phi(x) in float64)


@gluon.jit
def _producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K,
              A_T: gl.constexpr, B_T: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    BLOCK_M: gl.constexpr = _block_dims(a_bufs.type.shape, A_T)[0]
    BLOCK_K: gl.constexpr = _block_dims(a_bufs.type.shape, A_T)[1]
    BLOCK_N: gl.constexpr = _block_dims(b_bufs.type.shape, not B_T)[0]
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    tiles_m = gl.cdiv(M, BLOCK_M)
    tiles_n = gl.cdiv(N, BLOCK_N)
    k_tiles = gl.cdiv(K, BLOCK_K)
    cnt = 0
    for tile in range(pid, tiles_m * tiles_n, nprog):
        tile_m, tile_n = _tile_coords(tile, tiles_m, tiles_n, GROUP_M)
        off_m = tile_m * BLOCK_M
        off_n = tile_n * BLOCK_N
        for kt in range(k_tiles):
            s = cnt % STAGES
            # Slots start empty: the first pass waits on the phase before the barrier's first.
            mbarrier.wait(empty.index(s), ((cnt // STAGES) & 1) ^ 1)
            bar = ready.index(s)
            mbarrier.expect(bar, nbytes)
            off_k = kt * BLOCK_K
            if A_T:
                _tma_load(a_desc, [off_k, off_m], bar, a_bufs.index(s))
            else:
                _tma_load(a_desc, [off_m, off_k], bar, a_bufs.index(s))
            if B_T:
                _tma_load(b_desc, [off_n, off_k], bar, b_bufs.index(s))
            else:
                _tma_load(b_desc, [off_k, off_n], bar, b_bufs.index(s))
            cnt += 1


@gluon.jit
def _consumer(a_bufs, b_bufs, ready, empty, turn, c_bufs, c_ready, out_desc, c_desc, c_ptr, bias_ptr, M, N, K, alpha,
              beta, s_cm, s_cn, W: gl.constexpr, A_T: gl.constexpr, B_T: gl.constexpr, HAS_C: gl.constexpr,
              C_TMA: gl.constexpr, HAS_BIAS: gl.constexpr,
              ACTIVATION: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, SERIAL: gl.constexpr,
              EPI_REPEAT: gl.constexpr, WAIT_DEPTH: gl.constexpr, HAS_ALPHA: gl.constexpr,
              GELU_FORM: gl.constexpr):
    BLOCK_M: gl.constexpr = _block_dims(a_bufs.type.shape, A_T)[0]
    BLOCK_K: gl.constexpr = _block_dims(a_bufs.type.shape, A_T)[1]
    BLOCK_N: gl.constexpr = _block_dims(b_bufs.type.shape, not B_T)[0]
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 256 // a_bufs.type.element_ty.primitive_bitwidth])
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    tiles_m = gl.cdiv(M, BLOCK_M)
    tiles_n = gl.cdiv(N, BLOCK_N)
    k_tiles = gl.cdiv(K, BLOCK_K)
    c_smem = c_bufs.index(W)
    i = W  # this tile's place in the program's sequence: its K blocks are ring entries i * k_tiles, ...
    j = 0  # this consumer's tiles so far
    for tile in range(pid + W * nprog, tiles_m * tiles_n, 2 * nprog):
        # Main loops take turns: wait until the other consumer has waited for all of its tile's
        # slots. A slot's "ready" barrier can then be at most one phase ahead of this wait, which
        # is what a parity wait needs (it cannot tell phase p from p + 2).
        mbarrier.wait(turn.index(W), (j + W + 1) & 1, pred=(j > 0) | (W == 1))
        tile_m, tile_n = _tile_coords(tile, tiles_m, tiles_n, GROUP_M)
        off_m = tile_m * BLOCK_M
        off_n = tile_n * BLOCK_N
        if C_TMA:
            # c's tile comes by TMA into this consumer's output buffer while the main loop runs
            # (its previous store must have read the buffer first).
            tma.store_wait(0)
            mbarrier.expect(c_ready.index(W), c_desc.block_type.nbytes)
            _tma_load(c_desc, [off_m, off_n], c_ready.index(W), c_smem)
        cnt = i * k_tiles
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, mma_layout)
        first = cnt
        for kt in range(k_tiles):
            s = cnt % STAGES
            mbarrier.wait(ready.index(s), (cnt // STAGES) & 1)
            a = a_bufs.index(s)
            if A_T:
                a = a.permute((1, 0))
            b = b_bufs.index(s)
            if B_T:
                b = b.permute((1, 0))
            acc = warpgroup_mma(a, b, acc, is_async=True)
            # WAIT_DEPTH wgmma groups stay in flight: the one issued WAIT_DEPTH steps ago has
            # finished, so its slot can be refilled.
            acc = warpgroup_mma_wait(WAIT_DEPTH, deps=(acc, ))
            mbarrier.arrive(empty.index((cnt + STAGES - WAIT_DEPTH) % STAGES), pred=kt >= WAIT_DEPTH)
            cnt += 1
        if not SERIAL:
            mbarrier.arrive(turn.index(1 - W))  # the other consumer's main loop may start
        acc = warpgroup_mma_wait(0, deps=(acc, ))
        for d in gl.static_range(WAIT_DEPTH):  # the slots of the tile's last WAIT_DEPTH K blocks
            late = cnt - WAIT_DEPTH + d
            mbarrier.arrive(empty.index((late + STAGES) % STAGES), pred=late >= first)

        # Epilogue, in fp32: alpha * acc + beta * c + bias, then the activation.
        rn = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_layout))
        if HAS_ALPHA:
            acc = acc * alpha
        if HAS_C:
            if C_TMA:
                # Each warp reads back the rows it later overwrites in the same layout: no
                # other warp's write can land before its read.
                mbarrier.wait(c_ready.index(W), j & 1)
                cv = c_smem.load(mma_layout)
            else:
                rm = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, mma_layout))
                mask = (rm < M)[:, None] & (rn < N)[None, :]
                cv = gl.load(c_ptr + rm.to(gl.int64)[:, None] * s_cm + rn.to(gl.int64)[None, :] * s_cn, mask=mask,
                             other=0.0)
            acc += beta * cv.to(gl.float32)
        if HAS_BIAS:
            bv = gl.load(bias_ptr + rn, mask=rn < N, other=0.0)
            acc += bv.to(gl.float32)[None, :]
        if ACTIVATION == 1:
            acc = gl.where(acc < 0.0, 0.0, acc)  # NaN stays NaN (the compare is false), as torch.relu
        elif ACTIVATION == 2:
            for _r in gl.static_range(EPI_REPEAT):
                if out_desc.dtype == gl.bfloat16:
                    acc = _gelu(acc, 2, GELU_FORM)
                elif out_desc.dtype == gl.float16:
                    acc = _gelu(acc, 1, GELU_FORM)
                else:
                    acc = _gelu(acc, 0, GELU_FORM)
        elif ACTIVATION == 3:
            for _r in gl.static_range(EPI_REPEAT):
                u2 = (2.0 * 0.7978845608028654 * LOG2E_C) * (acc + 0.044715 * acc * acc * acc)  # 2u log2 e
                acc = acc * _rcp(1.0 + _ex2(-u2))  # 0.5 x (1 + tanh u) = x / (1 + exp(-2u)): no cancellation
        elif ACTIVATION == 4:
            for _r in gl.static_range(EPI_REPEAT):
                acc = acc * _rcp(1.0 + _ex2(acc * -LOG2E_C))
        # The previous tile's store from this buffer must have read it before it is rewritten.
        tma.store_wait(0)
        c_smem.store(acc.to(out_desc.dtype))
        fence_async_shared()
        _tma_store(out_desc, [off_m, off_n], c_smem)
        if SERIAL:
            mbarrier.arrive(turn.index(1 - W))
        i += 2
        j += 1
    tma.store_wait(0)


@gluon.jit
def _matmul_ws_kernel(a_desc, b_desc, out_desc, c_desc, c_ptr, bias_ptr, M, N, K, alpha, beta, s_cm, s_cn,
                      A_T: gl.constexpr, B_T: gl.constexpr, HAS_C: gl.constexpr, C_TMA: gl.constexpr,
                      HAS_BIAS: gl.constexpr,
                      ACTIVATION: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                      CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr, SERIAL: gl.constexpr,
                      EPI_REPEAT: gl.constexpr, WAIT_DEPTH: gl.constexpr, HAS_ALPHA: gl.constexpr,
                      GELU_FORM: gl.constexpr):
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    c_bufs = gl.allocate_shared_memory(out_desc.dtype, [2] + out_desc.block_type.shape, out_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    c_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    for w in gl.static_range(2):
        mbarrier.init(turn.index(w), count=1)
        mbarrier.init(c_ready.index(w), count=1)
    fence_async_shared()
    gl.warp_specialize([
        (_consumer, (a_bufs, b_bufs, ready, empty, turn, c_bufs, c_ready, out_desc, c_desc, c_ptr, bias_ptr, M, N, K,
                     alpha, beta, s_cm, s_cn, 0, A_T, B_T, HAS_C, C_TMA, HAS_BIAS, ACTIVATION, GROUP_M, STAGES, SERIAL,
                     EPI_REPEAT, WAIT_DEPTH, HAS_ALPHA, GELU_FORM)),
        (_consumer, (a_bufs, b_bufs, ready, empty, turn, c_bufs, c_ready, out_desc, c_desc, c_ptr, bias_ptr, M, N, K,
                     alpha, beta, s_cm, s_cn, 1, A_T, B_T, HAS_C, C_TMA, HAS_BIAS, ACTIVATION, GROUP_M, STAGES, SERIAL,
                     EPI_REPEAT, WAIT_DEPTH, HAS_ALPHA, GELU_FORM)),
        (_producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, A_T, B_T, GROUP_M, STAGES)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


# ----------------------------------------------------------------------------- host side

_GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16, torch.float32: gl.float32}
# Specializations (constexprs, operand layouts, tile, dtypes, device) built once / that failed to build.
_BUILT: set = set()
FAILED: set = set()
_LAUNCHES: dict = {}


def launchable(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether the ping-pong kernel can run this 2-D problem (see the module's restrictions)."""
    if interpreter_active() or a.device.type != "cuda" or torch.cuda.get_device_capability(a.device)[0] != 9:
        return False
    if a.dtype not in (torch.float16, torch.bfloat16) or b.dtype != a.dtype or out.dtype not in (torch.float16, torch.bfloat16):
        return False  # fp32 outputs: not measured, and the fp32 GELU epilogue spills registers (Triton 3.6)
    e = out.element_size()
    return out.stride(1) == 1 and (out.stride(0) * e) % 16 == 0 and out.data_ptr() % 16 == 0 and min(out.shape) > 0


def c_loadable(c: torch.Tensor | None, out: torch.Tensor) -> bool:
    """Whether ``c`` (of ``beta * c``) is read by TMA into the output's staging buffer: the
    output's shape and dtype, rows contiguous and 16-byte aligned (``out`` itself, for a GEMM
    accumulating into its output). Other c's take per-element loads, which spill registers."""
    if c is None or c.dtype != out.dtype or tuple(c.shape) != tuple(out.shape) or c.dim() != 2:
        return False
    e = c.element_size()
    return c.stride(1) == 1 and (c.stride(0) * e) % 16 == 0 and c.data_ptr() % 16 == 0 and c.stride(0) >= c.shape[1]


def ring_slots(cfg, in_size: int, out_size: int, smem_per_block: int) -> int:
    """Ring slots for ``cfg``: as many as it asks for that fit, with the two output buffers (an
    fp32 output's take twice the room) and 1 KB for the barriers, in ``smem_per_block`` bytes
    of shared memory; at least 2."""
    slot = (cfg.BLOCK_M + cfg.BLOCK_N) * cfg.BLOCK_K * in_size
    room = smem_per_block - 2 * cfg.BLOCK_M * cfg.BLOCK_N * out_size - 1024
    return max(2, min(cfg.num_stages, room // slot))


def register_split(regs_per_sm: int, producer_regs: int = 40) -> tuple[int, int, int]:
    """(registers per thread at launch, per consumer thread, per producer thread). The 12 warps
    (the producer's warpgroup is padded to 4) share the SM's register file: an equal share each
    at launch (a multiple of 8), then setmaxnreg gives ``producer_regs`` to the producer's
    warpgroup and splits the rest of that pool between the two consumer warpgroups (multiples of
    8, at most 256). 65536 registers: (168, 232, 40)."""
    launch = min(255, regs_per_sm // (12 * 32) // 8 * 8)
    consumer = min(256, (launch * 12 * 32 - 128 * producer_regs) // 256 // 8 * 8)
    return launch, consumer, producer_regs


def _descriptor_layout(t: torch.Tensor) -> bool:
    """Whether ``_descriptor`` describes ``t`` as its transpose (``t`` column-major)."""
    return not (t.stride(1) == 1 and (t.shape[1] > 1 or t.stride(0) != 1))


def _descriptor(t: torch.Tensor, rows: int, cols: int):
    """(Gluon descriptor, transposed) for an operand that ``_gemm._aligned`` accepted."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    transposed = _descriptor_layout(t)
    block, tt = ([cols, rows], t.t()) if transposed else ([rows, cols], t)
    layout = gl.NVMMASharedLayout.get_default_for(block, _GL_DTYPES[t.dtype])
    return TensorDescriptor(tt, list(tt.shape), [tt.stride(0), 1], block, layout), transposed


def launch(cfg, a, b, c, bias, out, alpha, beta, act: int) -> bool:
    """2-D a (M, K), b (K, N), out (M, N); c None or broadcast to (M, N). ``cfg``: a
    ``_gemm.Config`` of kind "pingpong" (BLOCK_M x BLOCK_N per consumer warpgroup, BLOCK_K,
    GROUP_M, num_stages ring slots). Returns False without launching when ``launchable`` is
    false, or, with a warning once per specialization, when the kernel does not build here
    (Gluon is an experimental dialect whose API moves between Triton releases): the caller then
    takes the Triton kernels. Errors of the launch itself propagate."""
    if not launchable(a, b, out):
        return False
    unknown = set(DIAGNOSTIC) - {"SERIAL", "EPI_REPEAT", "WAIT_DEPTH", "GELU_FORM"}
    if unknown:
        raise ValueError(f"roofkit.ops._gemm_ws.DIAGNOSTIC: unknown overrides {sorted(unknown)}")
    if int(DIAGNOSTIC.get("GELU_FORM", 0)) not in (0, 1, 2, 3):
        raise ValueError(f"roofkit.ops._gemm_ws.DIAGNOSTIC: GELU_FORM must be 0-3, got {DIAGNOSTIC['GELU_FORM']}")
    from ._gemm import _aligned

    m, k = a.shape
    n = b.shape[1]
    idx = device_index(a.device)
    stages = ring_slots(cfg, a.element_size(), out.element_size(), shared_memory_limits(idx)[0])
    tiles = cdiv(m, cfg.BLOCK_M) * cdiv(n, cfg.BLOCK_N)
    grid = min(tiles, sm_count(a.device))
    cs = (c.stride(0), c.stride(1)) if c is not None else (0, 0)
    launch_regs, consumer_regs, producer_regs = register_split(registers_per_sm(idx))
    c_tma = c_loadable(c, out)
    kw = dict(HAS_C=c is not None, C_TMA=c_tma, HAS_BIAS=bias is not None, ACTIVATION=act, GROUP_M=cfg.GROUP_M, STAGES=stages,
              CONSUMER_REGS=consumer_regs, PRODUCER_REGS=producer_regs, num_warps=4, maxnreg=launch_regs,
              SERIAL=bool(DIAGNOSTIC.get("SERIAL", False)), EPI_REPEAT=int(DIAGNOSTIC.get("EPI_REPEAT", 1)),
              WAIT_DEPTH=int(DIAGNOSTIC.get("WAIT_DEPTH", 1)), HAS_ALPHA=float(alpha) != 1.0,
              GELU_FORM=int(DIAGNOSTIC.get("GELU_FORM", 0)))
    a = _aligned(a)
    b = _aligned(b)
    # Triton compiles a variant per divisibility of the sizes and alignment of the pointers: the
    # key separates them, so every variant is first built inside the guard.
    key = (tuple(sorted(kw.items())), _descriptor_layout(a), _descriptor_layout(b), cfg.BLOCK_M, cfg.BLOCK_N,
           cfg.BLOCK_K, a.dtype, out.dtype, idx, m % 16 == 0, n % 16 == 0, k % 16 == 0, m == 1, n == 1, k == 1,
           bias is None or bias.data_ptr() % 16 == 0, c is None or (c.data_ptr() % 16 == 0, c.stride(0) % 16 == 0,
                                                                   c.stride(1) % 16 == 0, c.stride(1) == 1))
    if not 1 <= kw["WAIT_DEPTH"] < stages:  # a deeper queue than the ring deadlocks
        raise ValueError(f"roofkit.ops._gemm_ws.DIAGNOSTIC: WAIT_DEPTH must lie in [1, {stages - 1}], "
                         f"got {kw['WAIT_DEPTH']}")
    if key in FAILED:
        return False
    try:  # descriptors and the build: a failure here means this Triton / device cannot run it
        a_desc, a_t = _descriptor(a, cfg.BLOCK_M, cfg.BLOCK_K)
        b_desc, b_t = _descriptor(b, cfg.BLOCK_K, cfg.BLOCK_N)
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        out_layout = gl.NVMMASharedLayout.get_default_for([cfg.BLOCK_M, cfg.BLOCK_N], _GL_DTYPES[out.dtype])
        out_desc = TensorDescriptor(out, [m, n], [out.stride(0), 1], [cfg.BLOCK_M, cfg.BLOCK_N], out_layout)
        c_desc = out_desc
        if c_tma and c is not out:
            c_desc = TensorDescriptor(c, [m, n], [c.stride(0), 1], [cfg.BLOCK_M, cfg.BLOCK_N], out_layout)
        kw.update(A_T=a_t, B_T=b_t)
        args = (a_desc, b_desc, out_desc, c_desc, c if c is not None else out, bias if bias is not None else out,
                m, n, k, float(alpha), float(beta), *cs)
        if key not in _BUILT:
            kernel = _matmul_ws_kernel.warmup(*args, grid=(1, ), **kw)
            kernel._init_handles()  # loads it: shared memory / registers too large fail here
            _BUILT.add(key)
    except Exception as e:  # noqa: BLE001 (any build failure means: use the Triton kernels)
        FAILED.add(key)
        warnings.warn(f"roofkit.matmul: the ping-pong kernel did not build with this Triton / device "
                      f"({type(e).__name__}: {str(e)[:200]}); using the Triton kernels", RuntimeWarning, stacklevel=3)
        return False
    cached_launch(_LAUNCHES, _matmul_ws_kernel, grid, **kw)(*args)
    return True
