"""GEMM kernels behind roofkit.matmul / roofkit.linear, and their launchers.

Three launch forms, one epilogue (alpha, beta * c, bias, activation on the fp32 accumulator, one
rounding at the store):

- ``tma``: tensor-descriptor (TMA) loads, persistent (a grid of at most ``sm_count *
  ctas_per_sm`` programs, each walking output tiles ``pid, pid + grid, ...`` in grouped order) or
  one tile per program. 2-D operands whose last-dimension stride is 1 (a transposed operand is
  described as its transpose and fed to tl.dot as ``.T``) and whose other stride is 16-byte
  aligned. Operands with misaligned strides (e.g. K = 4095 in 16-bit) are copied once into an
  aligned buffer: the copy costs two passes over the operand, small next to an M*N*K product.
- ``ptr``: pointer loads with any strides (batched, broadcast batch, odd strides).
- ``split-K``: the ``ptr`` kernel over (tiles, splits), each program adding one K chunk into an
  fp32 workspace slot of its own; the last program to finish a tile (per-tile arrival counter)
  sums the slots in slot order and applies the epilogue: one launch, deterministic. For few
  output tiles (GEMV, decode shapes).

Source: classic tiled GEMM with grouped tile order (the L2-grouping idea is described in Triton's
matmul tutorial); persistent tile loops and TMA descriptors as Hopper GEMMs use them (CUTLASS
and Triton's persistent-matmul tutorial describe both); split-K as in CUTLASS's "serial /
parallel split-K", the last-arriving program doing the reduction as in stream-K "fixup" tiles.
"""

from __future__ import annotations

import dataclasses
import functools

import torch
import triton
import triton.language as tl

from ._common import INTERPRETED, bf16_rne, cdiv, interpreter_active, sm_count
from ._jit import _round_for_store
from ._runtime import cached_launch

_LAUNCHES: dict = {}

ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
MAX_GRID_Y = 65535  # CUDA's limit on the grid's second axis: larger batches launch in chunks


@dataclasses.dataclass(frozen=True)
class Config:
    """One launch configuration. ``kind``: "tma" | "ptr" | "pingpong" (``_gemm_ws``: Hopper,
    warp-specialized, BLOCK_M x BLOCK_N per consumer warpgroup); ``split_k`` > 1 selects split-K (ptr
    kernel, the last program of each tile combining); ``persistent``: tma grid capped at sm_count * ctas_per_sm programs."""

    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    GROUP_M: int = 8
    num_warps: int = 8
    num_stages: int = 3
    kind: str = "ptr"
    split_k: int = 1
    persistent: bool = False
    ctas_per_sm: int = 1
    warp_specialize: bool = False
    flatten: bool = False
    epilogue_split: int = 1  # tma only: 2 = the epilogue in two column halves
    store_desc: bool = False  # tma only: store through the output's descriptor when it is aligned

    def label(self) -> str:
        s = f"{self.kind} {self.BLOCK_M}x{self.BLOCK_N}x{self.BLOCK_K} g{self.GROUP_M} w{self.num_warps} s{self.num_stages}"
        if self.split_k > 1:
            s += f" splitk{self.split_k}"
        if self.persistent:
            s += f" persistent{self.ctas_per_sm}"
        if self.warp_specialize:
            s += " ws"
        if self.flatten:
            s += " flat"
        if self.epilogue_split > 1:
            s += f" epi/{self.epilogue_split}"
        if self.store_desc:
            s += " tma-store"
        return s

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


# ----------------------------------------------------------------------------- device code


@triton.jit
def _tile_coords(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """Grouped order: GROUP_M tile rows at a time, walked column by column (the B panel of one
    column is reused by the GROUP_M programs that run together)."""
    per_group = GROUP_M * tiles_n
    g = tile // per_group
    row0 = g * GROUP_M
    rows_in_group = tl.minimum(tiles_m - row0, GROUP_M)
    local = tile - g * per_group
    return row0 + local % rows_in_group, local // rows_in_group


@triton.jit
def _phi(x):
    """The standard normal CDF, Phi(x) = 0.5 * erfc(-x / sqrt(2)), for the exact (erf) GELU.

    0.5 * erfc(|x| / sqrt(2)) comes from a Chebyshev fit of erfc with fractional error below
    1.2e-7 everywhere (Numerical Recipes' erfcc, the form t * exp(-z^2 + P(t)), t = 1 / (1 + z/2)):
    about 20 instructions against libdevice erff's ~2x that, and accurate relative to Phi in the
    negative tail too (no 1 - erf cancellation). Measured on the H200: the libdevice form made
    the fused epilogue cost 15 % at 8192x14336x4096 (docs/gemm.md, the fused epilogue)."""
    z = tl.abs(x) * 0.7071067811865476
    t = 1.0 / (1.0 + 0.5 * z)
    p = 0.17087277
    p = p * t - 0.82215223
    p = p * t + 1.48851587
    p = p * t - 1.13520398
    p = p * t + 0.27886807
    p = p * t - 0.18628806
    p = p * t + 0.09678418
    p = p * t + 0.37409196
    p = p * t + 1.00002368
    p = p * t - 1.26551223
    q = 0.5 * t * tl.exp(p - z * z)  # Phi(-|x|)
    return tl.where(x < 0, q, 1.0 - q)


@triton.jit
def _epilogue(acc, rm64, rn64, mask, n_ok, c_base, s_cm, s_cn, bias_ptr, alpha, beta,
              HAS_C: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr):
    """alpha * acc + beta * c + bias, then the activation; all in fp32."""
    acc = acc * alpha
    if HAS_C:
        cv = tl.load(c_base + rm64[:, None] * s_cm + rn64[None, :] * s_cn, mask=mask, other=0.0)
        acc += beta * cv.to(tl.float32)
    if HAS_BIAS:
        bv = tl.load(bias_ptr + rn64, mask=n_ok, other=0.0)
        acc += bv.to(tl.float32)[None, :]
    if ACTIVATION == 1:
        acc = tl.maximum(acc, 0.0, propagate_nan=tl.PropagateNan.ALL)  # NaN stays NaN, as torch.relu
    elif ACTIVATION == 2:
        acc = acc * _phi(acc)
    elif ACTIVATION == 3:
        u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        t = 1.0 - 2.0 / (tl.exp(2.0 * u) + 1.0)  # tanh(u), saturating to +-1
        acc = 0.5 * acc * (1.0 + t)
    elif ACTIVATION == 4:
        acc = acc / (1.0 + tl.exp(-acc))
    return acc


@triton.jit
def _epilogue_store(acc, off_m, off_n, M, N, c_ptr, s_cm, s_cn, bias_ptr, out_ptr, out_desc, s_om, s_on, alpha, beta,
                    HAS_C: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, BF16_RNE: tl.constexpr,
                    OUT_DESC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The epilogue of the [BLOCK_M, BLOCK_N] block at (off_m, off_n) and its store: through the
    output's descriptor when it has one (no per-element int64 pointers: those cost 2 registers per
    element of the tile), else masked pointer stores."""
    rm = off_m + tl.arange(0, BLOCK_M)
    rn = off_n + tl.arange(0, BLOCK_N)
    n_ok = rn < N
    mask = (rm < M)[:, None] & n_ok[None, :]
    rm64 = rm.to(tl.int64)
    rn64 = rn.to(tl.int64)
    acc = _epilogue(acc, rm64, rn64, mask, n_ok, c_ptr, s_cm, s_cn, bias_ptr, alpha, beta, HAS_C, HAS_BIAS, ACTIVATION)
    if OUT_DESC:
        out_desc.store([off_m, off_n], _round_for_store(acc, out_ptr, BF16_RNE))
    else:
        tl.store(out_ptr + rm64[:, None] * s_om + rn64[None, :] * s_on, _round_for_store(acc, out_ptr, BF16_RNE), mask=mask)


@triton.jit
def _matmul_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, out_ptr, ws_ptr, lock_ptr, M, N, K, alpha, beta, k_chunk, a_step, b_step,
    s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_cb, s_cm, s_cn, s_ob, s_om, s_on,
    HAS_C: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, PARTIAL: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, BF16_RNE: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """Pointer form: one [BLOCK_M, BLOCK_N] tile per program along axis 0; axis 1 is the batch
    entry, or with PARTIAL the split-K slot: K chunk [slot * k_chunk, (slot + 1) * k_chunk), its
    fp32 accumulator stored raw to workspace slot ``slot`` (M * N floats each, ``ws_ptr``); the
    program that finishes a tile last (a per-tile counter at ``lock_ptr``, acq_rel) sums the
    slots in slot order, applies the epilogue, stores the tile and puts the counter back to 0.
    Offsets are int64; a_step / b_step (BLOCK_K times the K strides) come from the host, int64
    when they must be."""
    pid = tl.program_id(0)
    bid = tl.program_id(1).to(tl.int64)
    tile_m, tile_n = _tile_coords(pid, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < N
    rm64 = rm.to(tl.int64)
    rn64 = rn.to(tl.int64)
    if PARTIAL:
        k_lo = bid * k_chunk
        k_hi = tl.minimum(k_lo + k_chunk, K)
        a_base = a_ptr + k_lo * s_ak
        b_base = b_ptr + k_lo * s_bk
    else:
        k_lo = 0
        k_hi = K
        a_base = a_ptr + bid * s_ab
        b_base = b_ptr + bid * s_bb
    rk64 = rk.to(tl.int64)
    a_ptrs = a_base + rm64[:, None] * s_am + rk64[None, :] * s_ak
    b_ptrs = b_base + rk64[:, None] * s_bk + rn64[None, :] * s_bn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        k_ok = rk < k_hi - k0
        a = tl.load(a_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += a_step
        b_ptrs += b_step
    mask = m_ok[:, None] & n_ok[None, :]
    if PARTIAL:
        w_ptrs = ws_ptr + rm64[:, None] * N + rn64[None, :]
        slot = (bid * 0 + M) * N  # int64: M * N floats per workspace slot
        tl.store(w_ptrs + bid * slot, acc, mask=mask)
        tl.debug_barrier()  # every thread's slot stores precede the release below
        arrived = tl.atomic_add(lock_ptr + pid, 1, sem="acq_rel", scope="gpu")
        if arrived == tl.num_programs(1) - 1:
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for s in range(0, tl.num_programs(1)):  # slot order: the same bits whoever is last
                acc += tl.load(w_ptrs + s * slot, mask=mask, other=0.0, cache_modifier=".cg")
            acc = _epilogue(acc, rm64, rn64, mask, n_ok, c_ptr, s_cm, s_cn, bias_ptr, alpha, beta,
                            HAS_C, HAS_BIAS, ACTIVATION)
            tl.store(out_ptr + rm64[:, None] * s_om + rn64[None, :] * s_on, _round_for_store(acc, out_ptr, BF16_RNE),
                     mask=mask)
            tl.atomic_xchg(lock_ptr + pid, 0, sem="relaxed", scope="gpu")  # ready for the next launch
    else:
        acc = _epilogue(acc, rm64, rn64, mask, n_ok, c_ptr + bid * s_cb, s_cm, s_cn, bias_ptr, alpha, beta,
                        HAS_C, HAS_BIAS, ACTIVATION)
        tl.store(out_ptr + bid * s_ob + rm64[:, None] * s_om + rn64[None, :] * s_on,
                 _round_for_store(acc, out_ptr, BF16_RNE), mask=mask)


@triton.jit
def _matmul_tma_kernel(
    a_desc, b_desc, out_desc, c_ptr, bias_ptr, out_ptr, M, N, K, alpha, beta, s_cm, s_cn, s_om, s_on, NUM_PROGRAMS,
    A_T: tl.constexpr, B_T: tl.constexpr, UPCAST: tl.constexpr,
    HAS_C: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, BF16_RNE: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, FLATTEN: tl.constexpr,
    EPILOGUE_SPLIT: tl.constexpr, OUT_DESC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """Descriptor form: program p handles tiles p, p + NUM_PROGRAMS, ... (grouped order). A_T /
    B_T: the operand's descriptor describes its transpose (the operand was column-major), so the
    loaded block is transposed before tl.dot. Out-of-range rows / columns / K are zero-filled by
    the descriptor; the store is masked."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    num_tiles = tiles_m * tiles_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(pid, num_tiles, NUM_PROGRAMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        tile_m, tile_n = _tile_coords(tile, tiles_m, tiles_n, GROUP_M)
        off_m = tile_m * BLOCK_M
        off_n = tile_n * BLOCK_N
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for kt in range(0, k_tiles):
            off_k = kt * BLOCK_K
            if A_T:
                a = a_desc.load([off_k, off_m]).T
            else:
                a = a_desc.load([off_m, off_k])
            if B_T:
                b = b_desc.load([off_n, off_k]).T
            else:
                b = b_desc.load([off_k, off_n])
            if UPCAST:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        if EPILOGUE_SPLIT == 1:
            _epilogue_store(acc, off_m, off_n, M, N, c_ptr, s_cm, s_cn, bias_ptr, out_ptr, out_desc, s_om, s_on, alpha, beta,
                            HAS_C, HAS_BIAS, ACTIVATION, BF16_RNE, OUT_DESC, BLOCK_M, BLOCK_N)
        else:
            # Two column halves, one after the other: half the epilogue's live registers.
            halves = tl.permute(tl.reshape(acc, [BLOCK_M, 2, BLOCK_N // 2]), [0, 2, 1])
            acc0, acc1 = tl.split(halves)
            _epilogue_store(acc0, off_m, off_n, M, N, c_ptr, s_cm, s_cn, bias_ptr, out_ptr, out_desc, s_om, s_on, alpha, beta,
                            HAS_C, HAS_BIAS, ACTIVATION, BF16_RNE, OUT_DESC, BLOCK_M, BLOCK_N // 2)
            _epilogue_store(acc1, off_m, off_n + BLOCK_N // 2, M, N, c_ptr, s_cm, s_cn, bias_ptr, out_ptr, out_desc, s_om, s_on,
                            alpha, beta, HAS_C, HAS_BIAS, ACTIVATION, BF16_RNE, OUT_DESC, BLOCK_M, BLOCK_N // 2)


# ----------------------------------------------------------------------------- host side


def input_precision(dtype: torch.dtype) -> str:
    if dtype == torch.float32:
        return "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"
    return "tf32"  # ignored by tl.dot for 16-bit inputs


def upcast(dtype: torch.dtype) -> bool:
    """bf16 tiles go through tl.dot as fp32 under the interpreter (it cannot multiply bf16: it
    treats the bit patterns as integers); on the GPU they stay bf16."""
    return dtype == torch.bfloat16 and INTERPRETED


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """``t`` (2-D) itself when a descriptor can describe it (one unit stride, the other stride a
    multiple of 16 bytes, base 16-byte aligned), else a row-major copy with padded row stride."""
    e = t.element_size()
    if t.data_ptr() % 16 == 0:
        if t.stride(1) == 1 and (t.stride(0) * e) % 16 == 0 and t.stride(0) >= t.shape[1]:
            return t
        if t.stride(0) == 1 and (t.stride(1) * e) % 16 == 0 and t.stride(1) >= t.shape[0]:
            return t
    rows, cols = t.shape
    pad = 16 // e
    ld = (cols + pad - 1) // pad * pad
    buf = torch.empty((rows, ld), dtype=t.dtype, device=t.device)
    view = buf[:, :cols]
    view.copy_(t)
    return view


def _descriptor(t: torch.Tensor, block_rows: int, block_cols: int):
    """(descriptor, transposed) for a 2-D operand passed through ``_aligned``: a row-major
    operand is described directly with block [block_rows, block_cols]; a column-major one as its
    transpose with block [block_cols, block_rows]."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    if t.stride(1) == 1 and (t.shape[1] > 1 or t.stride(0) != 1):
        return TensorDescriptor(t, list(t.shape), [t.stride(0), 1], [block_rows, block_cols]), False
    tt = t.t()
    return TensorDescriptor(tt, list(tt.shape), [tt.stride(0), 1], [block_cols, block_rows]), True


@functools.lru_cache(maxsize=None)
def tma_supported(device: torch.device) -> bool:
    """Tensor descriptors: Hopper or newer on CUDA; the interpreter emulates them."""
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device)[0] >= 9
    return interpreter_active()


def launch_tma(cfg: Config, a, b, c, bias, out, alpha, beta, act: int):
    """2-D a (M, K), b (K, N), out (M, N); c None or broadcast to (M, N)."""
    m, k = a.shape
    n = b.shape[1]
    a = _aligned(a)
    b = _aligned(b)
    a_desc, a_t = _descriptor(a, cfg.BLOCK_M, cfg.BLOCK_K)
    b_desc, b_t = _descriptor(b, cfg.BLOCK_K, cfg.BLOCK_N)
    tiles = cdiv(m, cfg.BLOCK_M) * cdiv(n, cfg.BLOCK_N)
    grid = min(tiles, sm_count(a.device) * cfg.ctas_per_sm) if cfg.persistent else tiles
    cs = (c.stride(0), c.stride(1)) if c is not None else (0, 0)
    e = out.element_size()
    out_desc = None
    if cfg.store_desc and out.stride(1) == 1 and (out.stride(0) * e) % 16 == 0 and out.data_ptr() % 16 == 0 and cfg.BLOCK_N // cfg.epilogue_split * e >= 16:
        from triton.tools.tensor_descriptor import TensorDescriptor

        out_desc = TensorDescriptor(out, list(out.shape), [out.stride(0), 1], [cfg.BLOCK_M, cfg.BLOCK_N // cfg.epilogue_split])
    cached_launch(
        _LAUNCHES, _matmul_tma_kernel, grid,
        A_T=a_t, B_T=b_t, UPCAST=upcast(a.dtype), HAS_C=c is not None, HAS_BIAS=bias is not None, ACTIVATION=act,
        INPUT_PRECISION=input_precision(a.dtype), BF16_RNE=bf16_rne(out.dtype), WARP_SPECIALIZE=cfg.warp_specialize, FLATTEN=cfg.flatten, EPILOGUE_SPLIT=cfg.epilogue_split, OUT_DESC=out_desc is not None,
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, GROUP_M=cfg.GROUP_M,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )(a_desc, b_desc, out_desc, c if c is not None else out, bias if bias is not None else out, out,
      m, n, k, float(alpha), float(beta), *cs, out.stride(0), out.stride(1), grid)


def launch_ptr(cfg: Config, a3, b3, c3, bias, o3, alpha, beta, act: int):
    """(batch, M, K) @ (batch, K, N) -> o3 (batch, M, N); any strides (batch stride 0 = shared)."""
    nb, m, k = a3.shape
    n = b3.shape[2]
    tiles = cdiv(m, cfg.BLOCK_M) * cdiv(n, cfg.BLOCK_N)
    for b0 in range(0, nb, MAX_GRID_Y):
        b1 = min(nb, b0 + MAX_GRID_Y)
        ca, cb, co = a3[b0:b1], b3[b0:b1], o3[b0:b1]
        cc = c3[b0:b1] if c3 is not None else ca
        cs = cc.stride() if c3 is not None else (0, 0, 0)
        cached_launch(
            _LAUNCHES, _matmul_kernel, (tiles, b1 - b0),
            HAS_C=c3 is not None, HAS_BIAS=bias is not None, ACTIVATION=act, PARTIAL=False,
            INPUT_PRECISION=input_precision(a3.dtype), BF16_RNE=bf16_rne(o3.dtype), UPCAST=upcast(a3.dtype),
            BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, GROUP_M=cfg.GROUP_M,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )(ca, cb, cc, bias if bias is not None else ca, co, ca, ca, m, n, k, float(alpha), float(beta), k,
          cfg.BLOCK_K * ca.stride(2), cfg.BLOCK_K * cb.stride(1),
          *ca.stride(), *cb.stride(), *cs, *co.stride())


_LOCKS: dict[tuple[torch.device, int], torch.Tensor] = {}


def _tile_locks(device: torch.device, tiles: int) -> torch.Tensor:
    """Per-tile arrival counters, all zero between launches (the last program of a tile puts its
    counter back), one buffer per (device, stream) so that launches on different streams never
    share one. Under CUDA-graph capture a fresh zeroed buffer (captured as a memset)."""
    if device.type != "cuda" or torch.cuda.is_current_stream_capturing():
        return torch.zeros(tiles, dtype=torch.int32, device=device)
    key = (device, torch.cuda.current_stream(device).cuda_stream)
    buf = _LOCKS.get(key)
    if buf is None or buf.numel() < tiles:
        buf = _LOCKS[key] = torch.zeros(max(tiles, 1024), dtype=torch.int32, device=device)
    return buf


def launch_split_k(cfg: Config, a, b, c, bias, out, alpha, beta, act: int):
    """2-D split-K in one launch: ``cfg.split_k`` K chunks (multiples of BLOCK_K) per output
    tile, each into its own fp32 workspace slot; the tile's last program combines them in slot
    order with the epilogue (deterministic)."""
    m, k = a.shape
    n = b.shape[1]
    chunk = cdiv(cdiv(k, cfg.split_k), cfg.BLOCK_K) * cfg.BLOCK_K
    splits = cdiv(k, chunk)
    ws = torch.empty((splits, m, n), dtype=torch.float32, device=a.device)
    tiles = cdiv(m, cfg.BLOCK_M) * cdiv(n, cfg.BLOCK_N)
    locks = _tile_locks(a.device, tiles)
    cs = (c.stride(0), c.stride(1)) if c is not None else (0, 0)
    cached_launch(
        _LAUNCHES, _matmul_kernel, (tiles, splits),
        HAS_C=c is not None, HAS_BIAS=bias is not None, ACTIVATION=act, PARTIAL=True,
        INPUT_PRECISION=input_precision(a.dtype), BF16_RNE=bf16_rne(out.dtype), UPCAST=upcast(a.dtype),
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, GROUP_M=cfg.GROUP_M,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )(a, b, c if c is not None else a, bias if bias is not None else a, out, ws, locks, m, n, k, float(alpha), float(beta),
      chunk, cfg.BLOCK_K * a.stride(1), cfg.BLOCK_K * b.stride(0),
      0, a.stride(0), a.stride(1), 0, b.stride(0), b.stride(1), 0, *cs, 0, out.stride(0), out.stride(1))
