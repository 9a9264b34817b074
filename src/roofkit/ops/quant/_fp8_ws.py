"""Warp-specialized fp8 GEMM for Hopper (Gluon; compute capability 9.x only): scaled_mm's
kernel where its layout allows, with the fp32 promotion of the tensor cores' partial sums done
by software, overlapped.

Hopper's fp8 wgmma adds its products into the accumulator with fewer bits than fp32 carries
(the "fast accumulation" of torch._scaled_mm). Without fast accumulation, cuBLAS (and this
kernel) let the tensor cores accumulate one BLOCK_K = 128 slice of K into a fresh register
tile, then add that tile into an fp32 accumulator with ordinary fp32 adds. Triton's own
promotion (``max_num_imprecise_acc``) waits for each slice before issuing the next, idling the
tensor cores (0.67-0.73x torch there, docs/gemm.md). Here each consumer keeps two slice tiles:
it issues slice k + 1 into one while it adds slice k from the other, so the tensor cores always
have work queued.

Partitions (one persistent program per SM, tiles in grouped order):

- a producer warp issues the TMA loads of every tile's K slices into a ring of ``STAGES`` slots;
  a slot holds two 64 x 128 boxes of A (the tile's upper and lower 64 rows) and one
  BLOCK_N x 128 box of B;
- two consumer warpgroups share each 128 x BLOCK_N tile, consumer w taking rows 64 w .. 64 w + 63
  (cooperative: both read each slot's B; a slot is refilled once both have released it). Per
  thread: 64 accumulator registers + 2 x 64 for the slice tiles (BLOCK_N = 128).
- epilogue per consumer: acc * scale_a[row] * scale_b[col] + bias in fp32, one rounding to the
  16-bit output, TMA store through its own shared buffer.

``PRECISE`` = False (use_fast_accum=True) accumulates all of K in the tensor cores instead.

Restrictions (``launchable``): compute capability 9.x, not the interpreter, A (M, K) with unit
K stride and B K-major (``b.t()`` row-major, torch._scaled_mm's layout), rows at least K apart
with 16-byte aligned bases and row strides, 16-bit outputs whose rows are 16-byte aligned.
``gemm._qmm_forward`` also asks M, N >= ``gemm.WS_MIN`` (256) before it tries this kernel. Source: the fp8 "promotion" of CUTLASS
3's Hopper GEMMs (a temporary accumulator added into the main one every few MMAs), with
Gluon's warp_specialize, TMA, mbarrier and warpgroup_mma.
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

from .._common import device_index, interpreter_active, registers_per_sm, shared_memory_limits, sm_count
from .._runtime import cached_launch
from .._gemm_ws import _tile_coords, _tma_load, _tma_store, register_split

BLOCK_M = 128  # two consumers x 64 rows
BLOCK_N = 128
BLOCK_K = 128
GROUP_M = 8
MAX_STAGES = 6


@gluon.jit
def _fp8_producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, GROUP_M: gl.constexpr,
                  STAGES: gl.constexpr):
    HALF_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = b_desc.block_type.shape[1]
    nbytes: gl.constexpr = 2 * a_desc.block_type.nbytes + b_desc.block_type.nbytes
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    tiles_m = gl.cdiv(M, 2 * HALF_M)
    tiles_n = gl.cdiv(N, BLOCK_N)
    k_tiles = gl.cdiv(K, BLOCK_K)
    cnt = 0
    for tile in range(pid, tiles_m * tiles_n, nprog):
        tile_m, tile_n = _tile_coords(tile, tiles_m, tiles_n, GROUP_M)
        off_m = tile_m * 2 * HALF_M
        off_n = tile_n * BLOCK_N
        for kt in range(k_tiles):
            s = cnt % STAGES
            # Slots start empty: the first pass waits on the phase before the barrier's first.
            mbarrier.wait(empty.index(s), ((cnt // STAGES) & 1) ^ 1)
            bar = ready.index(s)
            mbarrier.expect(bar, nbytes)
            off_k = kt * BLOCK_K
            _tma_load(a_desc, [off_m, off_k], bar, a_bufs.index(2 * s))
            _tma_load(a_desc, [off_m + HALF_M, off_k], bar, a_bufs.index(2 * s + 1))
            _tma_load(b_desc, [off_n, off_k], bar, b_bufs.index(s))
            cnt += 1


@gluon.jit
def _promoted_step(a_bufs, b_bufs, ready, empty, t_next, t_prev, acc, cnt, prev, W: gl.constexpr,
                   STAGES: gl.constexpr):
    """One K slice of the promoted path: issue ring entry ``cnt``'s wgmma into ``t_next`` (its
    old contents ignored), wait until only that one is in flight, add ``t_prev`` (the slice
    before) into ``acc`` and release its slot. Returns (t_next, t_prev, acc, cnt + 1, this slot)."""
    s = cnt % STAGES
    mbarrier.wait(ready.index(s), (cnt // STAGES) & 1)
    t_next = warpgroup_mma(a_bufs.index(2 * s + W), b_bufs.index(s).permute((1, 0)), t_next, use_acc=False,
                           is_async=True)
    t_prev, t_next = warpgroup_mma_wait(1, deps=(t_prev, t_next))
    acc = acc + t_prev
    mbarrier.arrive(empty.index(prev))
    return t_next, t_prev, acc, cnt + 1, s


@gluon.jit
def _fp8_consumer(a_bufs, b_bufs, ready, empty, c_bufs, out_desc, sa_ptr, sb_ptr, bias_ptr, M, N, K, s_sa, s_sb,
                  W: gl.constexpr, HAS_BIAS: gl.constexpr, PRECISE: gl.constexpr, GROUP_M: gl.constexpr,
                  STAGES: gl.constexpr):
    HALF_M: gl.constexpr = a_bufs.type.shape[1]
    BLOCK_N: gl.constexpr = b_bufs.type.shape[1]
    BLOCK_K: gl.constexpr = b_bufs.type.shape[2]
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BLOCK_N, 32])
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    tiles_m = gl.cdiv(M, 2 * HALF_M)
    tiles_n = gl.cdiv(N, BLOCK_N)
    k_tiles = gl.cdiv(K, BLOCK_K)
    c_smem = c_bufs.index(W)
    cnt = 0
    for tile in range(pid, tiles_m * tiles_n, nprog):
        tile_m, tile_n = _tile_coords(tile, tiles_m, tiles_n, GROUP_M)
        off_m = tile_m * 2 * HALF_M + W * HALF_M
        off_n = tile_n * BLOCK_N
        acc = gl.zeros([HALF_M, BLOCK_N], gl.float32, mma_layout)
        s = cnt % STAGES
        mbarrier.wait(ready.index(s), (cnt // STAGES) & 1)
        if PRECISE:
            # Two slice tiles, t0 and t1, each always the destination of its own wgmmas (no
            # register copies between them: ptxas would serialize the wgmmas). Slice 0 into t0,
            # then slices alternate t1, t0, ...: issue the next slice, wait for the previous one
            # (one group stays queued), add it into acc, release its slot. Each wait lists both
            # tiles so both stay plain tensors across the loop; the one still in flight is only
            # read after a later wait.
            t0 = warpgroup_mma(a_bufs.index(2 * s + W), b_bufs.index(s).permute((1, 0)),
                               gl.zeros([HALF_M, BLOCK_N], gl.float32, mma_layout), use_acc=False, is_async=True)
            t0 = warpgroup_mma_wait(1, deps=(t0, ))  # returns at once (one group pending)
            t1 = gl.zeros([HALF_M, BLOCK_N], gl.float32, mma_layout)
            prev = s
            cnt += 1
            for _pair in range((k_tiles - 1) // 2):
                t1, t0, acc, cnt, prev = _promoted_step(a_bufs, b_bufs, ready, empty, t1, t0, acc, cnt, prev, W,
                                                        STAGES)
                t0, t1, acc, cnt, prev = _promoted_step(a_bufs, b_bufs, ready, empty, t0, t1, acc, cnt, prev, W,
                                                        STAGES)
            if k_tiles % 2 == 0:  # one slice left, into t1
                t1, t0, acc, cnt, prev = _promoted_step(a_bufs, b_bufs, ready, empty, t1, t0, acc, cnt, prev, W,
                                                        STAGES)
                t1 = warpgroup_mma_wait(0, deps=(t1, ))
                acc = acc + t1
            else:
                t0 = warpgroup_mma_wait(0, deps=(t0, ))
                acc = acc + t0
            mbarrier.arrive(empty.index(prev))
        else:
            acc = warpgroup_mma(a_bufs.index(2 * s + W), b_bufs.index(s).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(1, deps=(acc, ))  # returns at once (one group pending)
            prev = s
            cnt += 1
            for kt in range(1, k_tiles):
                s = cnt % STAGES
                mbarrier.wait(ready.index(s), (cnt // STAGES) & 1)
                acc = warpgroup_mma(a_bufs.index(2 * s + W), b_bufs.index(s).permute((1, 0)), acc, is_async=True)
                acc = warpgroup_mma_wait(1, deps=(acc, ))
                mbarrier.arrive(empty.index(prev))
                prev = s
                cnt += 1
            acc = warpgroup_mma_wait(0, deps=(acc, ))
            mbarrier.arrive(empty.index(prev))

        # Epilogue in fp32: scales, bias, one rounding; TMA store of this consumer's 64 rows.
        rm = off_m + gl.arange(0, HALF_M, layout=gl.SliceLayout(1, mma_layout))
        rn = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_layout))
        sa = gl.load(sa_ptr + rm.to(gl.int64) * s_sa, mask=rm < M, other=0.0)
        sb = gl.load(sb_ptr + rn.to(gl.int64) * s_sb, mask=rn < N, other=0.0)
        y = acc * sa[:, None] * sb[None, :]
        if HAS_BIAS:
            bv = gl.load(bias_ptr + rn, mask=rn < N, other=0.0)
            y = y + bv.to(gl.float32)[None, :]
        # The previous tile's store from this buffer must have read it before it is rewritten.
        tma.store_wait(0)
        c_smem.store(y.to(out_desc.dtype))
        fence_async_shared()
        _tma_store(out_desc, [off_m, off_n], c_smem)
    tma.store_wait(0)


@gluon.jit
def _fp8_ws_kernel(a_desc, b_desc, out_desc, sa_ptr, sb_ptr, bias_ptr, M, N, K, s_sa, s_sb,
                   HAS_BIAS: gl.constexpr, PRECISE: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                   CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [2 * STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    c_bufs = gl.allocate_shared_memory(out_desc.dtype, [2] + out_desc.block_type.shape, out_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=2)  # both consumers release each slot
    fence_async_shared()
    gl.warp_specialize([
        (_fp8_consumer, (a_bufs, b_bufs, ready, empty, c_bufs, out_desc, sa_ptr, sb_ptr, bias_ptr, M, N, K, s_sa, s_sb,
                         0, HAS_BIAS, PRECISE, GROUP_M, STAGES)),
        (_fp8_consumer, (a_bufs, b_bufs, ready, empty, c_bufs, out_desc, sa_ptr, sb_ptr, bias_ptr, M, N, K, s_sa, s_sb,
                         1, HAS_BIAS, PRECISE, GROUP_M, STAGES)),
        (_fp8_producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, GROUP_M, STAGES)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


# ----------------------------------------------------------------------------- host side

_GL = {torch.float8_e4m3fn: gl.float8e4nv, torch.float8_e5m2: gl.float8e5, torch.float16: gl.float16,
       torch.bfloat16: gl.bfloat16}
_BUILT: set = set()
FAILED: set = set()
# (a, b, out dtypes) -> launches: the descriptors' element types are part of the compiled kernel,
# and the launch cache keys descriptors by type alone.
_LAUNCHES: dict = {}


def launchable(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether this kernel can run ``out = a @ b`` (see the module's restrictions)."""
    if interpreter_active() or a.device.type != "cuda" or torch.cuda.get_device_capability(a.device)[0] != 9:
        return False
    if a.dtype not in _GL or b.dtype not in _GL or a.element_size() != 1 or b.element_size() != 1:
        return False
    if out.dtype not in (torch.float16, torch.bfloat16) or min(out.shape) == 0 or a.shape[1] == 0:
        return False
    k = a.shape[1]
    aligned = lambda t, stride: (stride % 16 == 0 and t.data_ptr() % 16 == 0)  # noqa: E731
    # Rows at least K apart (an expanded or overlapping operand, stride 0, is not a TMA tensor).
    return (a.stride(1) == 1 and a.stride(0) >= k and aligned(a, a.stride(0))
            and b.stride(0) == 1 and b.stride(1) >= k and aligned(b, b.stride(1))
            and out.stride(1) == 1 and aligned(out, out.stride(0) * out.element_size()))


def ring_slots(smem_per_block: int, out_size: int) -> int:
    """Ring slots that fit beside the two 64 x BLOCK_N output buffers and 1 KB of barriers."""
    slot = (BLOCK_M + BLOCK_N) * BLOCK_K
    room = smem_per_block - 2 * (BLOCK_M // 2) * BLOCK_N * out_size - 1024
    return max(2, min(MAX_STAGES, room // slot))


def launch(a, b, scale_a, scale_b, s_sa: int, s_sb: int, bias, out, precise: bool) -> bool:
    """out (M, N) = (a @ b) * scale_a * scale_b + bias. a (M, K) fp8, b (K, N) fp8 K-major,
    scale_a / scale_b fp32 read at row * s_sa / col * s_sb (0: one scale), bias (N,) or None.
    Returns False without launching when ``launchable`` is false or (with a warning once per
    specialization) when the kernel does not build here; launch errors propagate."""
    if not launchable(a, b, out):
        return False
    m, k = a.shape
    n = b.shape[1]
    idx = device_index(a.device)
    stages = ring_slots(shared_memory_limits(idx)[0], out.element_size())
    launch_regs, consumer_regs, producer_regs = register_split(registers_per_sm(idx))
    kw = dict(HAS_BIAS=bias is not None, PRECISE=bool(precise), GROUP_M=GROUP_M, STAGES=stages,
              CONSUMER_REGS=consumer_regs, PRODUCER_REGS=producer_regs, num_warps=4, maxnreg=launch_regs)
    key = (tuple(sorted(kw.items())), a.dtype, b.dtype, out.dtype, idx, m % 16 == 0, n % 16 == 0, k % 16 == 0,
           m == 1, n == 1, k == 1, None if bias is None else (bias.dtype, bias.data_ptr() % 16 == 0), scale_a.dtype,
           scale_b.dtype, s_sa == 0, s_sb == 0, s_sa == 1, s_sb == 1, s_sa % 16 == 0, s_sb % 16 == 0,
           scale_a.data_ptr() % 16 == 0, scale_b.data_ptr() % 16 == 0)
    if key in FAILED:
        return False
    try:
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        def desc(t, block):
            layout = gl.NVMMASharedLayout.get_default_for(block, _GL[t.dtype])
            return TensorDescriptor(t, list(t.shape), [t.stride(0), 1], block, layout)

        a_desc = desc(a, [BLOCK_M // 2, BLOCK_K])
        b_desc = desc(b.t(), [BLOCK_N, BLOCK_K])
        out_desc = desc(out, [BLOCK_M // 2, BLOCK_N])
        args = (a_desc, b_desc, out_desc, scale_a, scale_b, bias if bias is not None else out, m, n, k, s_sa, s_sb)
        if key not in _BUILT:
            kernel = _fp8_ws_kernel.warmup(*args, grid=(1, ), **kw)
            kernel._init_handles()
            _BUILT.add(key)
    except Exception as e:  # noqa: BLE001 (any build failure means: use the Triton kernel)
        FAILED.add(key)
        warnings.warn(f"roofkit.scaled_mm: the warp-specialized fp8 kernel did not build with this Triton / device "
                      f"({type(e).__name__}: {str(e)[:200]}); using the Triton kernel", RuntimeWarning, stacklevel=3)
        return False
    tiles = triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N)
    launches = _LAUNCHES.setdefault((a.dtype, b.dtype, out.dtype), {})
    cached_launch(launches, _fp8_ws_kernel, min(tiles, sm_count(a.device)), **kw)(*args)
    return True
