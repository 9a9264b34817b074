"""cross_entropy forward+backward with the row staged in shared memory (Gluon, CUDA only).

Persistent programs (one per SM at 128256 classes: 224 KB of shared memory each) own whole rows
in turn: pid, pid + grid, ... The first ``NR`` chunks of ``CH`` classes of a row live in shared
memory, copied by cp.async in commit groups of ``GROUP`` chunks; the classes past them (the
tail, ``NT`` chunks) are read from global memory in both passes. Pass A keeps, per thread, a
running maximum and rescaled sum of exp over its ``VEC`` contiguous classes (one exponential
per logit, one more per VEC); the block combines them into the row's log-sum-exp. Pass B
computes each chunk's gradient from shared memory, stores it, and refills the chunk's slot at
once with the same chunk of the program's next row; pass A of that next row runs ``LAG`` groups
behind the refills, interleaved with this row's pass B, so the exponentials overlap the SM's
memory traffic. The target's gradient (the one logit with the extra -b term) is stored last,
after a block barrier, instead of a compare per logit. DRAM traffic per row: the logits once
(plus the tail again, mostly from L2) and the gradient once.

Restrictions (``cross_entropy._smem_plan`` checks them and otherwise takes the Triton kernels):
16-bit logits with unit class stride, rows of a multiple of 8 classes with a row stride that
keeps 16-byte alignment, no class weight, a gradient written, compute capability >= 8.0.
Measured on the H200 (docs/softmax_cross_entropy.md): 8192x128256 bf16 in 1.13 ms, 3724 GB/s.
Known limit: exponents are x * log2 e - fl(m * log2 e) by one FMA, with the rounding of
m * log2 e corrected in the loss; past |m| ~ 1.49e9 that rounding exceeds the exponent range and
the row's loss is inf / NaN. (x - m) * log2 e is exact at any magnitude at one more instruction
per logit per pass; not yet timed.
Source: the per-thread online normalizer of Milakov & Gimelshein (2018); staging a row in
shared memory with asynchronous copies as Ampere-era softmax kernels do.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy

# Gluon builtins renamed in later Triton releases (same arguments): cp.async's async_load (3.8),
# the block barrier (gl.barrier in 3.9).
_async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared
_block_barrier = getattr(gl, "thread_barrier", None) or gl.barrier

# Classes per chunk, classes per thread-vector (16 bytes of a 16-bit dtype), warps.
CH = 8192
VEC = 8
NUM_WARPS = 32
# Chunks per wait / refill (each costs block-wide barriers) and the groups by which pass A of the
# next row trails the refills in pass B. None: the launcher's default, two groups of half the
# resident chunks with a lag of one (measured best at 8192x128256 on the H200: 1134.5 us, against
# 1196.5 for groups of 2 with a lag of 2 and 1159.7 with a lag of 3; docs/softmax_cross_entropy.md).
GROUP = None
LAG = None
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


@gluon.jit
def _exp2(x):
    """2**x with one SFU instruction (ex2.approx.ftz: results below 2**-126 flush to 0, which no
    sum of probabilities notices); Triton's exp2 also handles denormal results, 3 more
    instructions per logit."""
    return gl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=gl.float32, is_pure=True,
                                     pack=1)


@gluon.jit
def _online_update(x, m_t, s_t, LOG2E: gl.constexpr, EXACT: gl.constexpr):
    """Per-thread online max / rescaled sum of exp over the VEC classes each thread row holds
    (one exponential per logit, one per VEC for the rescale); rows with nothing finite yet keep
    max -inf and sum 0. EXACT: exponents (x - m) * log2 e (exact at any magnitude, one more
    instruction per logit), else x * log2 e - fl(m * log2 e) by one FMA."""
    m_new = gl.maximum(m_t, gl.max(x, axis=1))
    m_zero = gl.where(m_new == -float("inf"), 0.0, m_new)
    if EXACT:
        alpha = _exp2((m_t - m_zero) * LOG2E)
        e = _exp2((x - gl.expand_dims(m_zero, 1)) * LOG2E)
    else:
        m_safe = m_zero * LOG2E
        alpha = _exp2(m_t * LOG2E - m_safe)
        e = _exp2(gl.fma(x, LOG2E, -gl.expand_dims(m_safe, 1)))
    return m_new, s_t * alpha + gl.sum(e, axis=1)


@gluon.jit
def _chunk_grad(x, ml, a_s, c, SMOOTH: gl.constexpr, LOG2E: gl.constexpr, MODE: gl.constexpr):
    """What pass B writes for logits x: cross-entropy's gradient a / s * p - c (MODE 0, ``ml`` =
    fl(m log2 e)); softmax's p / s (MODE 1, ``ml`` = m, exact exponents); log_softmax's
    (x - m) - log s (MODE 2, ``ml`` = m, ``a_s`` = log s)."""
    if MODE == 2:
        g = (x - ml) - a_s
    elif MODE == 1:
        g = _exp2((x - ml) * LOG2E) * a_s
    else:
        g = _exp2(gl.fma(x, LOG2E, -ml)) * a_s
        if SMOOTH:
            g = g - c
    return g


@gluon.jit
def _pass_a(x, m_t, s_t, sx_t, mask, MASKED: gl.constexpr, SMOOTH: gl.constexpr, LOG2E: gl.constexpr,
            EXACT: gl.constexpr):
    """Pass A over one chunk (x as float32, -inf already in masked-off classes when MASKED)."""
    m_t, s_t = _online_update(x, m_t, s_t, LOG2E, EXACT)
    if SMOOTH:
        if MASKED:
            sx_t += gl.sum(gl.where(mask, x, 0.0), axis=1)
        else:
            sx_t += gl.sum(x, axis=1)
    return m_t, s_t, sx_t


@gluon.jit
def _pass_a_smem(slot, kd, m_t, s_t, sx_t, r_idx, CV, layout: gl.constexpr, ROWS: gl.constexpr, NCH: gl.constexpr,
                 SMOOTH: gl.constexpr, LOG2E: gl.constexpr, EXACT: gl.constexpr):
    """Pass A over resident chunk ``kd`` (a runtime index); only the row's last chunk is masked
    (a uniform branch)."""
    x = slot.load(layout).to(gl.float32)
    if kd == NCH - 1:
        cm = gl.expand_dims(kd * ROWS + r_idx < CV, 1)
        x = gl.where(cm, x, -float("inf"))
        m_t, s_t, sx_t = _pass_a(x, m_t, s_t, sx_t, cm, True, SMOOTH, LOG2E, EXACT)
    else:
        m_t, s_t, sx_t = _pass_a(x, m_t, s_t, sx_t, x == x, False, SMOOTH, LOG2E, EXACT)
    return m_t, s_t, sx_t


@gluon.jit
def _ce_smem_kernel(
    x_ptr, t_ptr, scal_ptr, loss_ptr, grad_ptr, M, C, stride_xm, stride_t, ignore_index, label_smoothing,
    SMOOTH: gl.constexpr, MEAN: gl.constexpr, MODE: gl.constexpr,
    CH: gl.constexpr, VEC: gl.constexpr, NR: gl.constexpr, NT: gl.constexpr, NUM_WARPS: gl.constexpr,
    GROUP: gl.constexpr, LAG: gl.constexpr, LOG2E: gl.constexpr, LN2: gl.constexpr,
):
    """Rows pid, pid + G, ... of the logits; see the module docstring. Chunks move in groups of
    GROUP (one cp.async commit group each, NG groups per row; GROUP divides NR). Pass A of the next row runs
    interleaved with pass B of this one, LAG groups behind the refills, so the device's
    exponentials overlap this SM's memory traffic; the last LAG groups of pass A run at the top
    of the next iteration. MODE 0: cross-entropy (losses and the gradient); 1: softmax, 2:
    log_softmax of the rows into ``grad_ptr`` (``t_ptr``, ``scal_ptr``, ``loss_ptr`` unread),
    with exact exponents (see ``_online_update``)."""
    ROWS: gl.constexpr = CH // VEC
    EXACT: gl.constexpr = MODE != 0
    NCH: gl.constexpr = NR + NT
    NG: gl.constexpr = NR // GROUP
    gl.static_assert(NR % GROUP == 0)
    gl.static_assert((LAG >= 1) & (LAG <= NR // GROUP))
    layout: gl.constexpr = gl.BlockedLayout([1, VEC], [32, 1], [NUM_WARPS, 1], [1, 0])
    row_l: gl.constexpr = gl.SliceLayout(1, layout)
    smem = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [NR, ROWS, VEC],
                                     gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    r_idx = gl.arange(0, ROWS, layout=row_l)
    v_idx = gl.arange(0, VEC, layout=gl.SliceLayout(0, layout))
    offs = gl.expand_dims(r_idx * VEC, 1) + gl.expand_dims(v_idx, 0)
    # Masks are built per 8-class vector (C is a multiple of VEC), so the compiler sees them
    # constant over each 16-byte copy whatever C's divisibility; only the last chunk of a row
    # (NCH = cdiv(C, CH)) can be partial.
    CV = C // VEC

    pid = gl.program_id(0)
    G = gl.num_programs(0)
    if MEAN:
        gscale = gl.load(scal_ptr + 1)
    else:
        gscale = 1.0

    # The first row: its groups put in flight with pass A LAG groups behind (as in the loop
    # below, without a pass B), then its tail.
    x_first = x_ptr + gl.multiple_of(pid.to(gl.int64) * stride_xm, VEC)
    m_t = gl.full([ROWS], -float("inf"), gl.float32, layout=row_l)
    s_t = gl.zeros([ROWS], gl.float32, layout=row_l)
    sx_t = gl.zeros([ROWS], gl.float32, layout=row_l)
    for qq in range(NG):
        for u in gl.static_range(GROUP):
            kd = qq * GROUP + u
            cm = gl.expand_dims(kd * ROWS + r_idx < CV, 1)
            _async_load(smem.index(kd), x_first + (kd * CH + offs), mask=cm)
        async_copy.commit_group()
        if qq >= LAG:
            async_copy.wait_group(LAG)
            for u in gl.static_range(GROUP):
                kd = (qq - LAG) * GROUP + u
                m_t, s_t, sx_t = _pass_a_smem(smem.index(kd), kd, m_t, s_t, sx_t, r_idx, CV, layout, ROWS, NCH, SMOOTH,
                                              LOG2E, EXACT)
    for jd in range(NR, NCH):
        cm = gl.expand_dims(jd * ROWS + r_idx < CV, 1)
        xv = gl.load(x_first + (jd * CH + offs), mask=cm, other=-float("inf"), eviction_policy="evict_last")
        m_t, s_t, sx_t = _pass_a(xv.to(gl.float32), m_t, s_t, sx_t, cm, True, SMOOTH, LOG2E, EXACT)

    # The first two tail chunks of a row are loaded well before their use (their latency would
    # otherwise stall every warp at once); any further ones in a runtime loop.
    cm_t0 = gl.expand_dims(NR * ROWS + r_idx < CV, 1)
    cm_t1 = gl.expand_dims((NR + 1) * ROWS + r_idx < CV, 1)
    for row in range(pid, M, G):
        row64 = row.to(gl.int64)
        x_row = x_ptr + gl.multiple_of(row64 * stride_xm, VEC)
        g_row = grad_ptr + gl.multiple_of(row64 * C, VEC)
        if MODE == 0:
            t = gl.load(t_ptr + row64 * stride_t)
            keep = t != ignore_index
            ok = (t >= 0) & (t < C)
        if NT >= 1:
            b0 = gl.load(x_row + (NR * CH + offs), mask=cm_t0, other=0.0, eviction_policy="evict_first")
        if NT >= 2:
            b1 = gl.load(x_row + ((NR + 1) * CH + offs), mask=cm_t1, other=0.0, eviction_policy="evict_first")

        # Pass A's last LAG groups of this row (put in flight during the previous pass B).
        async_copy.wait_group(0)
        for kd in range((NG - LAG) * GROUP, NR):
            m_t, s_t, sx_t = _pass_a_smem(smem.index(kd), kd, m_t, s_t, sx_t, r_idx, CV, layout, ROWS, NCH, SMOOTH, LOG2E,
                                          EXACT)
        m = gl.max(m_t, axis=0)
        dead = m == -float("inf")
        # The exponentials are taken relative to ml = fl(m * log2 e), not m * log2 e: sum_j
        # exp(x_j) = 2**ml * s, so log-sum-exp = m + (log s - r ln 2) with r = m log2 e - ml, the
        # product's rounding error, exact by an FMA. (The kernel is compiled without FP
        # contraction, so every other product by LOG2E is rounded the same way as here, and a
        # rescale by an unchanged maximum is exactly 1.)
        if MODE == 0:
            ml = gl.where(dead, 0.0, m) * LOG2E
            s = gl.sum(s_t * _exp2(m_t * LOG2E - ml), axis=0)
            log_s = gl.log(s) - gl.where(dead, 0.0, gl.fma(m, LOG2E, -ml)) * LN2

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
            # Every logit's gradient is a * p - c; the target's, a * p - b - c, is stored again at
            # the end (after a barrier, so it lands last).
            a_s = a / s
        else:
            # Exact exponents relative to m itself (a row of only -inf: m = -inf, s = 0, and
            # every output NaN, as torch's).
            ml = m
            m_zero = gl.where(dead, 0.0, m)
            s = gl.sum(s_t * _exp2((m_t - m_zero) * LOG2E), axis=0)
            c = 0.0
            if MODE == 1:
                a_s = 1.0 / s
            else:
                a_s = gl.log(s)

        # Pass B of this row: the tail from global memory, then each resident group from shared
        # memory, its slots refilled at once with the same group of the next row (masked off
        # when there is none: the commit groups still count), and pass A of the next row LAG
        # groups behind.
        nxt = row + G
        has_next = nxt < M
        x_next = x_ptr + gl.multiple_of(nxt.to(gl.int64) * stride_xm, VEC)
        if NT >= 1:
            gv = _chunk_grad(b0.to(gl.float32), ml, a_s, c, SMOOTH, LOG2E, MODE).to(grad_ptr.dtype.element_ty)
            gl.store(g_row + (NR * CH + offs), gv, mask=cm_t0, eviction_policy="evict_first")
        if NT >= 2:
            gv = _chunk_grad(b1.to(gl.float32), ml, a_s, c, SMOOTH, LOG2E, MODE).to(grad_ptr.dtype.element_ty)
            gl.store(g_row + ((NR + 1) * CH + offs), gv, mask=cm_t1, eviction_policy="evict_first")
        for jd in range(NR + 2, NCH):
            cm = gl.expand_dims(jd * ROWS + r_idx < CV, 1)
            xv = gl.load(x_row + (jd * CH + offs), mask=cm, other=0.0, eviction_policy="evict_first").to(gl.float32)
            gv = _chunk_grad(xv, ml, a_s, c, SMOOTH, LOG2E, MODE).to(grad_ptr.dtype.element_ty)
            gl.store(g_row + (jd * CH + offs), gv, mask=cm, eviction_policy="evict_first")
        if NT >= 1:
            a0 = gl.load(x_next + (NR * CH + offs), mask=cm_t0 & has_next, other=-float("inf"),
                         eviction_policy="evict_last")
        if NT >= 2:
            a1 = gl.load(x_next + ((NR + 1) * CH + offs), mask=cm_t1 & has_next, other=-float("inf"),
                         eviction_policy="evict_last")
        m_t = gl.full([ROWS], -float("inf"), gl.float32, layout=row_l)
        s_t = gl.zeros([ROWS], gl.float32, layout=row_l)
        sx_t = gl.zeros([ROWS], gl.float32, layout=row_l)
        # Group 0 (its pass B and refill) while the tail loads are in flight, then their pass A.
        for u in gl.static_range(GROUP):
            cm = gl.expand_dims(u * ROWS + r_idx < CV, 1)
            xv = smem.index(u).load(layout).to(gl.float32)
            gv = _chunk_grad(xv, ml, a_s, c, SMOOTH, LOG2E, MODE).to(grad_ptr.dtype.element_ty)
            gl.store(g_row + (u * CH + offs), gv, mask=cm)
        for u in gl.static_range(GROUP):
            cm = gl.expand_dims(u * ROWS + r_idx < CV, 1)
            _async_load(smem.index(u), x_next + (u * CH + offs), mask=cm & has_next)
        async_copy.commit_group()
        if NT >= 1:
            m_t, s_t, sx_t = _pass_a(a0.to(gl.float32), m_t, s_t, sx_t, cm_t0, True, SMOOTH, LOG2E, EXACT)
        if NT >= 2:
            m_t, s_t, sx_t = _pass_a(a1.to(gl.float32), m_t, s_t, sx_t, cm_t1, True, SMOOTH, LOG2E, EXACT)
        for jd in range(NR + 2, NCH):
            cm = gl.expand_dims(jd * ROWS + r_idx < CV, 1)
            xv = gl.load(x_next + (jd * CH + offs), mask=cm & has_next, other=-float("inf"),
                         eviction_policy="evict_last").to(gl.float32)
            m_t, s_t, sx_t = _pass_a(xv, m_t, s_t, sx_t, cm, True, SMOOTH, LOG2E, EXACT)
        for qq in range(1, NG):
            for u in gl.static_range(GROUP):
                kd = qq * GROUP + u
                cm = gl.expand_dims(kd * ROWS + r_idx < CV, 1)
                xv = smem.index(kd).load(layout).to(gl.float32)
                gv = _chunk_grad(xv, ml, a_s, c, SMOOTH, LOG2E, MODE).to(grad_ptr.dtype.element_ty)
                gl.store(g_row + (kd * CH + offs), gv, mask=cm)
            for u in gl.static_range(GROUP):
                kd = qq * GROUP + u
                cm = gl.expand_dims(kd * ROWS + r_idx < CV, 1)
                _async_load(smem.index(kd), x_next + (kd * CH + offs),
                                                       mask=cm & has_next)
            async_copy.commit_group()
            if qq >= LAG:
                async_copy.wait_group(LAG)
                for u in gl.static_range(GROUP):
                    kd = (qq - LAG) * GROUP + u
                    m_t, s_t, sx_t = _pass_a_smem(smem.index(kd), kd, m_t, s_t, sx_t, r_idx, CV, layout, ROWS, NCH,
                                                  SMOOTH, LOG2E, EXACT)
        if MODE == 0:
            _block_barrier()
            g_t = _chunk_grad(x_t, ml, a_s, c, SMOOTH, LOG2E, MODE) - b
            gl.store(g_row + t, g_t.to(grad_ptr.dtype.element_ty), mask=keep & ok)
    async_copy.wait_group(0)
