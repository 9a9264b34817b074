"""cross_entropy forward+backward with the row staged in shared memory (Gluon, CUDA only).

One persistent program per SM owns whole rows in turn. The first ``NR`` chunks of ``CH`` classes
of a row live in shared memory (cp.async copies, one commit group per chunk); the classes past
them (the tail, ``NT`` chunks) are read from global memory in both passes. Pass A waits for the
row's chunks in order and keeps, per thread, a running maximum and rescaled sum of exp over its
``VEC`` contiguous classes (one exponential per logit, one more per ``VEC``); the block then
combines them into the row's log-sum-exp. Pass B computes the gradient of each chunk from shared
memory, stores it, and reuses the chunk's slot at once for the same chunk of the program's next
row, so the next row's read overlaps this row's gradient write. DRAM traffic per row: the
logits once (plus the tail again, mostly from L2) and the gradient once.

Restrictions (the caller checks them and otherwise takes the Triton kernels): 16-bit logits
with unit class stride, a row stride that keeps 16-byte alignment, no class weight, a gradient
written, compute capability >= 8.0. Source: the cp.async staging of Ampere-era softmax kernels
(e.g. PyTorch's persistent softmax keeps a row in shared memory); the per-thread online
normalizer of Milakov & Gimelshein (2018).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy

# Classes per chunk, classes per thread-vector (16 bytes of a 16-bit dtype), warps.
CH = 8192
VEC = 8
NUM_WARPS = 16


@gluon.jit
def _online_update(x, m_t, s_t):
    """Per-thread online max / rescaled sum over the VEC classes each thread row holds."""
    m_new = gl.maximum(m_t, gl.max(x, axis=1))
    dead = m_new == -float("inf")
    alpha = gl.where(dead, 0.0, gl.exp(m_t - m_new))
    e = gl.where(gl.expand_dims(dead, 1), 0.0, gl.exp(x - gl.expand_dims(m_new, 1)))
    return m_new, s_t * alpha + gl.sum(e, axis=1)


@gluon.jit
def _ce_smem_kernel(
    x_ptr, t_ptr, scal_ptr, loss_ptr, grad_ptr, M, C, stride_xm, stride_t, ignore_index, label_smoothing,
    SMOOTH: gl.constexpr, MEAN: gl.constexpr,
    CH: gl.constexpr, VEC: gl.constexpr, NR: gl.constexpr, NT: gl.constexpr, NUM_WARPS: gl.constexpr,
):
    ROWS: gl.constexpr = CH // VEC
    layout: gl.constexpr = gl.BlockedLayout([1, VEC], [32, 1], [NUM_WARPS, 1], [1, 0])
    row_l: gl.constexpr = gl.SliceLayout(1, layout)
    smem = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [NR, ROWS, VEC],
                                     gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    r_idx = gl.arange(0, ROWS, layout=row_l)
    v_idx = gl.arange(0, VEC, layout=gl.SliceLayout(0, layout))
    offs = gl.expand_dims(r_idx * VEC, 1) + gl.expand_dims(v_idx, 0)
    # Masks are built per 8-class vector (C is a multiple of VEC), so the compiler sees them
    # constant over each 16-byte copy whatever C's divisibility.
    CV = C // VEC

    pid = gl.program_id(0)
    G = gl.num_programs(0)
    if MEAN:
        gscale = gl.load(scal_ptr + 1)
    else:
        gscale = 1.0

    # The first row's resident chunks.
    x_row = x_ptr + gl.multiple_of(pid.to(gl.int64) * stride_xm, VEC)
    for k in gl.static_range(NR):
        cols = k * CH + offs
        vmask = gl.expand_dims(k * ROWS + r_idx < CV, 1)
        async_copy.async_copy_global_to_shared(smem.index(k), x_row + cols, mask=vmask)
        async_copy.commit_group()

    for row in range(pid, M, G):
        row64 = row.to(gl.int64)
        x_row = x_ptr + gl.multiple_of(row64 * stride_xm, VEC)
        g_row = grad_ptr + gl.multiple_of(row64 * C, VEC)
        t = gl.load(t_ptr + row64 * stride_t)
        keep = t != ignore_index
        ok = (t >= 0) & (t < C)

        # Pass A: the tail from global memory first (its loads overlap the copies still landing),
        # then the resident chunks as they land.
        m_t = gl.full([ROWS], -float("inf"), gl.float32, layout=row_l)
        s_t = gl.zeros([ROWS], gl.float32, layout=row_l)
        sx_t = gl.zeros([ROWS], gl.float32, layout=row_l)
        for j in gl.static_range(NT):
            cols = (NR + j) * CH + offs
            cmask = gl.expand_dims((NR + j) * ROWS + r_idx < CV, 1)
            x = gl.load(x_row + cols, mask=cmask, other=-float("inf"), eviction_policy="evict_last").to(gl.float32)
            m_t, s_t = _online_update(x, m_t, s_t)
            if SMOOTH:
                sx_t += gl.sum(gl.where(cmask, x, 0.0), axis=1)
        for k in gl.static_range(NR):
            async_copy.wait_group(NR - 1 - k)
            cols = k * CH + offs
            cmask = gl.expand_dims(k * ROWS + r_idx < CV, 1)
            x = gl.where(cmask, smem.index(k).load(layout).to(gl.float32), -float("inf"))
            m_t, s_t = _online_update(x, m_t, s_t)
            if SMOOTH:
                sx_t += gl.sum(gl.where(cmask, x, 0.0), axis=1)
        m = gl.max(m_t, axis=0)
        dead = m == -float("inf")
        s = gl.sum(gl.where(m_t == -float("inf"), 0.0, s_t * gl.exp(m_t - m)), axis=0)
        log_s = gl.log(s)

        # Loss (torch's: 0 on ignored rows; NaN on an out-of-range target, which the host
        # reports as IndexError).
        x_t = gl.load(x_row + t, mask=keep & ok, other=0.0).to(gl.float32)
        w_t = gl.where(keep, 1.0, 0.0)
        w_t = gl.where(keep & (~ok), float("nan"), w_t)
        nll = w_t * ((m - x_t) + log_s)
        coef = gl.where(keep, gscale, 0.0)
        if SMOOTH:
            sx = gl.sum(sx_t, axis=0)
            loss = (1.0 - label_smoothing) * nll + (label_smoothing / C) * ((C * m - sx) + C * log_s)
            b = coef * (1.0 - label_smoothing) * w_t
            a = b + coef * label_smoothing
            c = coef * (label_smoothing / C)
        else:
            loss = nll
            b = coef * w_t
            a = b
            c = coef * 0.0
        loss = gl.where(keep, loss, 0.0)
        gl.store(loss_ptr + row64, loss.to(loss_ptr.dtype.element_ty))
        a_s = a / s

        # Pass B: each chunk's gradient from shared memory, then its slot refilled with the
        # same chunk of the next row (an empty commit group when there is none, so the counts
        # of pass A's waits hold).
        nxt = row + G
        x_next = x_ptr + gl.multiple_of(nxt.to(gl.int64) * stride_xm, VEC)
        has_next = nxt < M
        for k in gl.static_range(NR):
            cols = k * CH + offs
            cmask = gl.expand_dims(k * ROWS + r_idx < CV, 1)
            x = smem.index(k).load(layout).to(gl.float32)
            p = gl.where(dead, 0.0, gl.exp(x - m))
            g = p * a_s - gl.where(cols == t, b, 0.0) - c
            gl.store(g_row + cols, g.to(grad_ptr.dtype.element_ty), mask=cmask)
            async_copy.async_copy_global_to_shared(smem.index(k), x_next + cols, mask=cmask & has_next)
            async_copy.commit_group()
        for j in gl.static_range(NT):
            cols = (NR + j) * CH + offs
            cmask = gl.expand_dims((NR + j) * ROWS + r_idx < CV, 1)
            x = gl.load(x_row + cols, mask=cmask, other=-float("inf"), eviction_policy="evict_first").to(gl.float32)
            p = gl.where(dead, 0.0, gl.exp(x - m))
            g = p * a_s - gl.where(cols == t, b, 0.0) - c
            gl.store(g_row + cols, g.to(grad_ptr.dtype.element_ty), mask=cmask, eviction_policy="evict_first")
    async_copy.wait_group(0)
