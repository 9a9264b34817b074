"""Attention's Triton kernels (``@triton.jit`` only): forward, split-KV decode + combine, backward
preprocess / dK-dV / dQ. The program mapping is described in the package docstring; the host
launchers and tile configurations are in ``_launch.py``."""

import triton
import triton.language as tl

from .._jit import _round_for_store


@triton.jit
def _mma(a, b, IEEE: tl.constexpr, UPCAST: tl.constexpr):
    """a @ b with fp32 accumulation. IEEE: exact fp32 products for fp32 inputs (not tf32).
    UPCAST (the host sets it under the Triton interpreter only): the operands are converted to
    float64 and the product rounded to fp32 once. The interpreter cannot multiply bf16, and its
    float32 product is numpy's sgemm, whose summation order, so rounding, depends on the
    processor's BLAS kernel (2x larger score errors with OpenBLAS's Haswell / Zen kernels than
    with its SkylakeX kernel): the CPU verdicts must not."""
    if UPCAST:
        return tl.dot(a.to(tl.float64), b.to(tl.float64), input_precision="ieee").to(tl.float32)
    if IEEE:
        return tl.dot(a, b, input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def _lse_hi_lo(m, l, dead):
    """The base-2 lse m + log2(l) as an unevaluated sum hi + lo (TwoSum, exact): hi is the fp32
    lse, lo what its rounding dropped. One fp32 number of magnitude |m| is off by up to
    |m| * 2^-25, which the backward's P = 2^(s * scale - lse) would carry as a relative error of
    every P in the row (for logits of std 30, 10x torch's own); hi and lo together keep the lse
    to a few ulps of log2(l). Rows that saw no key: (-inf, 0)."""
    ll = tl.math.log2(tl.where(dead, 1.0, l))
    hi = m + ll
    bb = hi - m
    lo = (m - (hi - bb)) + (ll - bb)
    return tl.where(dead, -float("inf"), hi), tl.where(dead, 0.0, lo)


@triton.jit
def _bias2(am):
    """An additive attn_mask tile in base 2 (fp32): am * log2(e). Values below -2^126 count as
    -2^126 (times log2(e) they would overflow to -inf, and a row masked by finfo.min everywhere
    must stay a uniform softmax, as torch gives); -inf stays -inf (the pair takes no part)."""
    am = am.to(tl.float32)
    b2 = tl.maximum(am, -8.507059173023462e37) * 1.4426950408889634
    return tl.where(am == -float("inf"), -float("inf"), b2)


@triton.jit
def _visible(offs_m, offs_n, Sk, diag, diag_lo, IS_CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr):
    """[rows, keys] of the band: key j < Sk, j <= i + diag (IS_CAUSAL: causal, or a window's
    right edge) and j >= i + diag_lo (HAS_LEFT: a window's left edge)."""
    ok = offs_n[None, :] < Sk
    if IS_CAUSAL:
        ok = ok & (offs_n[None, :] <= offs_m[:, None] + diag)
    if HAS_LEFT:
        ok = ok & (offs_n[None, :] >= offs_m[:, None] + diag_lo)
    return ok


@triton.jit
def _rows_mask(s, mask_rows, row_ok, offs_n, Sk, stride_mn, seg_q, segk_base, q_id, q_mixed, check,
               HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, SEGMENTS: tl.constexpr):
    """Scores [rows, keys] (the forward's and the dQ kernel's layout) with the attn_mask tile
    applied (HAS_MASK: boolean, masked-out pairs -inf, or added in base 2) and, SEGMENTS, the
    pairs of other segments at -inf: ``check`` False (every key of the program's range has the
    rows' one id) skips the test, as does a block whose keys all have the rows' one id."""
    if HAS_MASK:
        am = tl.load(mask_rows + offs_n[None, :] * stride_mn, mask=row_ok[:, None] & (offs_n[None, :] < Sk), other=0)
        if MASK_BOOL:
            s = tl.where(am != 0, s, -float("inf"))
        else:
            s = s + _bias2(am)
    if SEGMENTS:
        if check:
            # (keys past Sk read as the rows' id: the band's edge hides them)
            seg_k = tl.load(segk_base + offs_n, mask=offs_n < Sk, other=q_id)
            if q_mixed | (tl.min(seg_k, 0) != q_id) | (tl.max(seg_k, 0) != q_id):  # not all one segment
                s = tl.where(seg_q[:, None] == seg_k[None, :], s, -float("inf"))
    return s


@triton.jit
def _attn_fwd_inner(
    acc, m_i, l_i, q, k_base, v_base, k_desc, v_desc, mask_rows, row_ok, b, hk,
    stride_kn, stride_kd, stride_vn, stride_vd, stride_mn,
    offs_m, offs_d, lo, hi, Sk, D, diag, diag_lo, qk_scale, seg_q, segk_base, q_id, q_mixed, check,
    EDGE: tl.constexpr, IS_CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_MASK: tl.constexpr,
    MASK_BOOL: tl.constexpr, EVEN_D: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
    DESC: tl.constexpr, FOLD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    USE_INT64: tl.constexpr = False, SEGMENTS: tl.constexpr = False,
):
    """Online softmax over the KV blocks [lo, hi). EDGE: apply the key bound and the band's edges
    (causal diagonal, window). HAS_MASK: the attn_mask tile (rows ``mask_rows``: one pointer per
    query row) is applied in every block, boolean (MASK_BOOL: nonzero = take part) or added to
    the scaled scores; a row with no visible key so far keeps max -inf, so the subtraction uses
    0 instead (every p is 0). SEGMENTS: a row sees only the keys of its own segment (ids ``seg_q``
    of the rows, the keys' at ``segk_base``). DESC: K and V blocks through tensor descriptors (TMA; rows past Sk
    arrive zero-filled), else pointer loads. FOLD (the host sets it when qk_scale is a positive
    normal float and no additive mask is given): the scale is folded into the exponent's argument
    (one FMA per score: s * qk_scale - m; scaling commutes with the max and keeps -inf).
    Otherwise the scores are scaled (and the additive mask added, in base 2) first, then masked."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        if USE_INT64:
            offs_n = offs_n.to(tl.int64)
        if DESC:
            k = k_desc.load([b, hk, start_n, 0]).reshape(BLOCK_N, BLOCK_D)
            v = v_desc.load([b, hk, start_n, 0]).reshape(BLOCK_N, BLOCK_D)
        elif EDGE:
            kv_mask = offs_n[:, None] < Sk
            if not EVEN_D:
                kv_mask = kv_mask & (offs_d[None, :] < D)
            k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd, mask=kv_mask, other=0.0)
            v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0)
        elif EVEN_D:
            k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd)
            v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd)
        else:
            k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                        mask=offs_d[None, :] < D, other=0.0)
            v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                        mask=offs_d[None, :] < D, other=0.0)
        s = _mma(q, tl.trans(k), IEEE, UPCAST)
        if not FOLD:
            s = s * qk_scale
        s = _rows_mask(s, mask_rows, row_ok, offs_n, Sk, stride_mn, seg_q, segk_base, q_id, q_mixed, check,
                       HAS_MASK, MASK_BOOL, SEGMENTS)
        if EDGE:
            s = tl.where(_visible(offs_m, offs_n, Sk, diag, diag_lo, IS_CAUSAL, HAS_LEFT), s, -float("inf"))
        if FOLD:
            m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale)
        else:
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
        if EDGE or HAS_MASK or SEGMENTS:
            # A row that has seen no visible key keeps max -inf: subtract 0 instead (every p is 0).
            m_use = tl.where(m_new == -float("inf"), 0.0, m_new)
        else:
            m_use = m_new
        alpha = tl.math.exp2(m_i - m_use)
        if FOLD:
            p = tl.math.exp2(s * qk_scale - m_use[:, None])
        else:
            p = tl.math.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + _mma(p.to(v.dtype), v, IEEE, UPCAST)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _segment_ids(ids_base, offs, ok, start, others_base, flag_ptr, lo, hi, SEGMENTS: tl.constexpr):
    """(ids, one_id, mixed, check) of a program's block (its query rows, or the dK/dV kernel's
    keys): the ids at ``ids_base + offs`` (``ok``: in range; others read as the first), the
    first one's id, whether they differ among themselves, and whether the other side's ids
    over [lo, hi) at ``others_base`` may differ from ``one_id``: False only when the batch row's
    ids are sorted (the host's flag at ``flag_ptr``, after the row's ids) and the block is one
    id that the range's two ends have too, so that the loops skip every per-block id test.
    Without SEGMENTS: placeholders, never read."""
    if SEGMENTS:
        one_id = tl.load(ids_base + start)
        ids = tl.load(ids_base + offs, mask=ok, other=one_id)
        mixed = tl.min(ids, 0) != tl.max(ids, 0)
        first = tl.load(others_base + tl.minimum(lo, tl.maximum(hi - 1, 0)))
        last = tl.load(others_base + tl.maximum(hi - 1, 0))
        ordered = tl.load(flag_ptr) != 0
        check = mixed | (first != one_id) | (last != one_id) | (not ordered)
    else:
        ids, one_id, mixed, check = offs, start, False, False
    return ids, one_id, mixed, check


@triton.jit
def _kv_range(m0, Sk, diag, diag_lo, IS_CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """(lo, a, b, hi): the keys rows [m0, m0 + BLOCK_M) can see lie in [lo, hi); every row sees
    every key of the blocks in [a, b) (no edge inside them: unmasked), and [lo, a), [b, hi) hold
    the band's edges and the ragged last block (masked). lo, a, b are multiples of BLOCK_N."""
    if IS_CAUSAL:
        hi = tl.minimum(Sk, tl.maximum(m0 + BLOCK_M + diag, 0))
        b = tl.minimum(tl.maximum(m0 + diag + 1, 0) // BLOCK_N, Sk // BLOCK_N) * BLOCK_N
    else:
        hi = Sk
        b = (Sk // BLOCK_N) * BLOCK_N
    if HAS_LEFT:
        lo = tl.minimum(tl.maximum(m0 + diag_lo, 0) // BLOCK_N * BLOCK_N, hi)
        a = tl.minimum(tl.maximum(tl.cdiv(tl.maximum(m0 + BLOCK_M - 1 + diag_lo, 0), BLOCK_N) * BLOCK_N, lo), hi)
    else:
        lo = 0
        a = 0
    b = tl.minimum(tl.maximum(b, a), hi)
    return lo, a, b, hi


@triton.jit
def _clamp_to_range(lo, a, b, hi, range_ptr, BLOCK: tl.constexpr):
    """(lo, a, b, hi) of ``_kv_range`` (or the dK/dV kernel's query bounds) cut to the span
    [r_lo, r_hi) at ``range_ptr`` outside which the attn_mask hides every pair of this block
    (RANGED; r_lo > r_hi when it hides all), r_lo rounded down and r_hi up to whole blocks: the
    sections stay block-aligned and disjoint, and a block skipped held only masked pairs (whose
    p is exactly 0: skipping them changes no bit)."""
    r_lo = tl.load(range_ptr)
    r_hi = tl.load(range_ptr + 1)
    lo = tl.maximum(lo, (r_lo // BLOCK) * BLOCK)
    hi = tl.minimum(hi, tl.cdiv(r_hi, BLOCK) * BLOCK)
    a = tl.minimum(tl.maximum(a, lo), hi)
    b = tl.minimum(tl.maximum(b, a), hi)
    return lo, a, b, hi


@triton.jit
def _attn_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, lse_lo_ptr, o_lo_ptr, k_desc, v_desc, mask_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_mb, stride_mh, stride_mm, stride_mn,
    range_ptr, stride_rb, stride_rh, stride_rm, seg_ptr, stride_sb,
    Hq, G, Sq, Sk, D, diag, diag_lo, qk_scale,
    IS_CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr,
    RANGED: tl.constexpr, SEGMENTS: tl.constexpr, EVEN_D: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
    BF16_RNE: tl.constexpr, USE_INT64: tl.constexpr, STORE_O_LO: tl.constexpr, DESC: tl.constexpr, FOLD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Output rows [BLOCK_M, D] and their base-2 lse for one (batch, query head, query block);
    tiles Q [BLOCK_M, BLOCK_D] (registers), K and V [BLOCK_N, BLOCK_D] per step (DESC: through
    4-D tensor descriptors of K and V, block [1, 1, BLOCK_N, BLOCK_D]), the attn_mask
    [BLOCK_M, BLOCK_N] per step (HAS_MASK; broadcast dimensions have stride 0). SEGMENTS: segment
    ids at ``seg_ptr`` (per batch: Sq query ids, then Sk key ids), a row seeing only its segment's
    keys. STORE_O_LO: also the unrounded output (contiguous fp32) for the backward's delta."""
    tl.static_assert(not (FOLD and HAS_MASK and not MASK_BOOL), "an additive mask needs the scores scaled first")
    pid_bh = tl.program_id(0)
    pid_m = tl.num_programs(1) - 1 - tl.program_id(1)  # heaviest (last) query blocks first
    b = (pid_bh // Hq).to(tl.int64)
    h = (pid_bh % Hq).to(tl.int64)
    hk = h // G
    q_base = q_ptr + b * stride_qb + h * stride_qh
    k_base = k_ptr + b * stride_kb + hk * stride_kh
    v_base = v_ptr + b * stride_vb + hk * stride_vh
    o_base = o_ptr + b * stride_ob + h * stride_oh

    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    if USE_INT64:
        offs_m = offs_m.to(tl.int64)
    row_ok = offs_m < Sq
    io_mask = row_ok[:, None] & (offs_d[None, :] < D)
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd, mask=io_mask, other=0.0)
    # One pointer per query row into the mask (64-bit row offsets; a key's is added per block).
    mask_rows = mask_ptr + b * stride_mb + h * stride_mh + offs_m[:, None].to(tl.int64) * stride_mm

    lo, n_a, n_b, hi = _kv_range(m0, Sk, diag, diag_lo, IS_CAUSAL, HAS_LEFT, BLOCK_M, BLOCK_N)
    if RANGED:  # the mask's span of keys for this query block (host: _mask_ranges)
        lo, n_a, n_b, hi = _clamp_to_range(lo, n_a, n_b, hi, range_ptr + b * stride_rb + h * stride_rh
                                           + pid_m * stride_rm, BLOCK_N)
    seg_base = seg_ptr + b * stride_sb
    # (the rows' ids; a block of keys all of the rows' one id needs no per-pair test)
    seg_q, q_id, q_mixed, check = _segment_ids(seg_base, offs_m, row_ok, m0, seg_base + Sq, seg_base + Sq + Sk,
                                               lo, hi, SEGMENTS)
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    b32 = b.to(tl.int32)
    hk32 = hk.to(tl.int32)
    if HAS_LEFT:  # (without a left edge [lo, n_a) is empty: RANGED moves both to the span's start)
        acc, m_i, l_i = _attn_fwd_inner(acc, m_i, l_i, q, k_base, v_base, k_desc, v_desc, mask_rows, row_ok, b32, hk32,
                                        stride_kn, stride_kd, stride_vn, stride_vd, stride_mn,
                                        offs_m, offs_d, lo, n_a, Sk, D, diag, diag_lo, qk_scale,
                                        seg_q, seg_base + Sq, q_id, q_mixed, check,
                                        True, IS_CAUSAL, HAS_LEFT, HAS_MASK, MASK_BOOL, EVEN_D, IEEE, UPCAST, DESC,
                                        FOLD, BLOCK_N, BLOCK_D, USE_INT64, SEGMENTS)
    n_s = n_a
    if SEGMENTS:  # the whole blocks: with ids where the program has pairs to test, else [n_a, n_a) ...
        n_s = tl.where(check, n_b, n_a)
        acc, m_i, l_i = _attn_fwd_inner(acc, m_i, l_i, q, k_base, v_base, k_desc, v_desc, mask_rows, row_ok, b32, hk32,
                                        stride_kn, stride_kd, stride_vn, stride_vd, stride_mn,
                                        offs_m, offs_d, n_a, n_s, Sk, D, diag, diag_lo, qk_scale,
                                        seg_q, seg_base + Sq, q_id, q_mixed, check,
                                        False, IS_CAUSAL, HAS_LEFT, HAS_MASK, MASK_BOOL, EVEN_D, IEEE, UPCAST, DESC,
                                        FOLD, BLOCK_N, BLOCK_D, USE_INT64, SEGMENTS)
    # ... and the rest without them (a loop with no per-block branch: causal attention's)
    acc, m_i, l_i = _attn_fwd_inner(acc, m_i, l_i, q, k_base, v_base, k_desc, v_desc, mask_rows, row_ok, b32, hk32,
                                    stride_kn, stride_kd, stride_vn, stride_vd, stride_mn,
                                    offs_m, offs_d, n_s, n_b, Sk, D, diag, diag_lo, qk_scale,
                                    seg_q, seg_base + Sq, q_id, q_mixed, check,
                                    False, IS_CAUSAL, HAS_LEFT, HAS_MASK, MASK_BOOL, EVEN_D, IEEE, UPCAST, DESC,
                                    FOLD, BLOCK_N, BLOCK_D, USE_INT64)
    acc, m_i, l_i = _attn_fwd_inner(acc, m_i, l_i, q, k_base, v_base, k_desc, v_desc, mask_rows, row_ok, b32, hk32,
                                    stride_kn, stride_kd, stride_vn, stride_vd, stride_mn,
                                    offs_m, offs_d, n_b, hi, Sk, D, diag, diag_lo, qk_scale,
                                    seg_q, seg_base + Sq, q_id, q_mixed, check,
                                    True, IS_CAUSAL, HAS_LEFT, HAS_MASK, MASK_BOOL, EVEN_D, IEEE, UPCAST, DESC,
                                    FOLD, BLOCK_N, BLOCK_D, USE_INT64, SEGMENTS)
    dead = l_i == 0.0
    l_safe = tl.where(dead, 1.0, l_i)
    out = acc / l_safe[:, None]
    lse_hi, lse_lo = _lse_hi_lo(m_i, l_i, dead)
    o_hi = _round_for_store(out, o_ptr, BF16_RNE)
    tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od, o_hi, mask=io_mask)
    rows = pid_bh.to(tl.int64) * Sq + offs_m
    tl.store(lse_ptr + rows, lse_hi, mask=row_ok)
    tl.store(lse_lo_ptr + rows, lse_lo, mask=row_ok)
    if STORE_O_LO:  # the output's rounding residual, itself rounded to the output's dtype
        # (64-bit base per program, the tile's offsets in offs_m's width: a 64-bit offset per
        # element would hold two registers each)
        o_lo_base = o_lo_ptr + pid_bh.to(tl.int64) * Sq * D
        tl.store(o_lo_base + offs_m[:, None] * D + offs_d[None, :],
                 _round_for_store(out - o_hi.to(tl.float32), o_lo_ptr, BF16_RNE), mask=io_mask)


@triton.jit
def _attn_decode_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, lse_lo_ptr, o_lo_ptr, po_ptr, plse_ptr, plse_lo_ptr, mask_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_mb, stride_mh, stride_mm, stride_mn,
    Hkv, G, Sq, Sk, D, diag, diag_lo, qk_scale, CHUNK, SPLITS,
    IS_CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr,
    EVEN_D: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
    BF16_RNE: tl.constexpr, FINAL: tl.constexpr, STORE_O_LO: tl.constexpr, USE_INT64: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """One KV chunk [CHUNK keys] of one (batch, kv head) against all G * Sq query rows of the
    group (row r: head h = hk * G + r // Sq, query r % Sq); tiles Q [BLOCK_M, BLOCK_D], K and V
    [BLOCK_N, BLOCK_D], the attn_mask [BLOCK_M, BLOCK_N] (HAS_MASK). FINAL (one chunk): writes
    out and base-2 lse (and the fp32 output when STORE_O_LO); else fp32 partials (normalized
    output, base-2 lse) for the combining kernel; a chunk no row sees into writes lse -inf."""
    pid_bh = tl.program_id(0)
    split = tl.program_id(1)
    b = (pid_bh // Hkv).to(tl.int64)
    hk = (pid_bh % Hkv).to(tl.int64)
    rows = tl.arange(0, BLOCK_M)
    row_ok = rows < G * Sq
    g = rows // Sq
    qi = rows % Sq
    h = hk * G + g
    offs_d = tl.arange(0, BLOCK_D)
    io_mask = row_ok[:, None] & (offs_d[None, :] < D)
    q = tl.load(q_ptr + b * stride_qb + h[:, None] * stride_qh + qi[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=io_mask, other=0.0)
    k_base = k_ptr + b * stride_kb + hk * stride_kh
    v_base = v_ptr + b * stride_vb + hk * stride_vh
    mask_rows = mask_ptr + b * stride_mb + h[:, None] * stride_mh + qi[:, None].to(tl.int64) * stride_mm

    lo = split * CHUNK
    hi = tl.minimum(Sk, lo + CHUNK)
    if IS_CAUSAL:  # no row sees past key Sq - 1 + diag
        hi = tl.minimum(hi, Sq + diag)
    if HAS_LEFT:  # nor before key diag_lo
        lo = tl.maximum(lo, diag_lo)
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        if USE_INT64:
            offs_n = offs_n.to(tl.int64)
        key_ok = offs_n < hi
        kv_mask = key_ok[:, None]
        if not EVEN_D:
            kv_mask = kv_mask & (offs_d[None, :] < D)
        k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd, mask=kv_mask, other=0.0)
        v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0)
        s = _mma(q, tl.trans(k), IEEE, UPCAST) * qk_scale
        ok = _visible(qi, offs_n, hi, diag, diag_lo, IS_CAUSAL, HAS_LEFT)
        if HAS_MASK:
            am = tl.load(mask_rows + offs_n[None, :] * stride_mn, mask=row_ok[:, None] & key_ok[None, :], other=0)
            if MASK_BOOL:
                ok = ok & (am != 0)
            else:
                s = s + _bias2(am)
        s = tl.where(ok, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = tl.where(m_new == -float("inf"), 0.0, m_new)
        alpha = tl.math.exp2(m_i - m_use)
        p = tl.math.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + _mma(p.to(v.dtype), v, IEEE, UPCAST)
        m_i = m_new
    dead = l_i == 0.0
    l_safe = tl.where(dead, 1.0, l_i)
    out = acc / l_safe[:, None]
    lse_hi, lse_lo = _lse_hi_lo(m_i, l_i, dead)
    row = (b * Hkv * G + h) * Sq + qi  # (batch, query head, query) row index
    if FINAL:
        o_hi = _round_for_store(out, o_ptr, BF16_RNE)
        tl.store(o_ptr + b * stride_ob + h[:, None] * stride_oh + qi[:, None] * stride_om + offs_d[None, :] * stride_od,
                 o_hi, mask=io_mask)
        tl.store(lse_ptr + row, lse_hi, mask=row_ok)
        tl.store(lse_lo_ptr + row, lse_lo, mask=row_ok)
        if STORE_O_LO:
            tl.store(o_lo_ptr + row[:, None] * D + offs_d[None, :],
                     _round_for_store(out - o_hi.to(tl.float32), o_lo_ptr, BF16_RNE), mask=io_mask)
    else:
        part = row * SPLITS + split
        tl.store(po_ptr + part[:, None] * D + offs_d[None, :], out, mask=io_mask)
        tl.store(plse_ptr + part, lse_hi, mask=row_ok)
        tl.store(plse_lo_ptr + part, lse_lo, mask=row_ok)


@triton.jit
def _attn_decode_combine_kernel(
    po_ptr, plse_ptr, plse_lo_ptr, o_ptr, lse_ptr, lse_lo_ptr, o_lo_ptr,
    stride_ob, stride_oh, stride_om, stride_od,
    Hq, Sq, D, SPLITS,
    BF16_RNE: tl.constexpr, STORE_O_LO: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Merge the SPLITS partial (output, lse hi + lo) of one query row: weights
    2^(hi_s - max + lo_s); a row no chunk saw keeps output 0 and lse -inf. Tile [BLOCK_S, BLOCK_D]."""
    row = tl.program_id(0).to(tl.int64)
    s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    lse_s = tl.load(plse_ptr + row * SPLITS + s, mask=s < SPLITS, other=-float("inf"))
    lo_s = tl.load(plse_lo_ptr + row * SPLITS + s, mask=s < SPLITS, other=0.0)
    m = tl.max(lse_s, axis=0)
    m_use = tl.where(m == -float("inf"), 0.0, m)
    w = tl.math.exp2((lse_s - m_use) + lo_s)
    part = tl.load(po_ptr + (row * SPLITS + s)[:, None] * D + offs_d[None, :],
                   mask=(s[:, None] < SPLITS) & (offs_d[None, :] < D), other=0.0)
    total = tl.sum(w, axis=0)
    dead = total == 0.0
    t_safe = tl.where(dead, 1.0, total)
    out = tl.sum(part * w[:, None], axis=0) / t_safe
    lse_hi, lse_lo = _lse_hi_lo(m_use, total, dead)
    b = row // (Hq * Sq)
    h = (row // Sq) % Hq
    qi = row % Sq
    o_hi = _round_for_store(out, o_ptr, BF16_RNE)
    tl.store(o_ptr + b * stride_ob + h * stride_oh + qi * stride_om + offs_d * stride_od, o_hi, mask=offs_d < D)
    tl.store(lse_ptr + row, lse_hi)
    tl.store(lse_lo_ptr + row, lse_lo)
    if STORE_O_LO:
        tl.store(o_lo_ptr + row * D + offs_d, _round_for_store(out - o_hi.to(tl.float32), o_lo_ptr, BF16_RNE),
                 mask=offs_d < D)


@triton.jit
def _attn_bwd_preprocess_kernel(
    o_ptr, o_lo_ptr, do_ptr, dlse_ptr, delta_ptr,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_dob, stride_doh, stride_dom, stride_dod,
    Hq, Sq, D,
    HAS_LO: tl.constexpr, HAS_DLSE: tl.constexpr, USE_INT64: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """delta = rowsum(dO * O) - dlse2 * log2(e) (fp32) for BLOCK_M rows of one (batch, head);
    tile [BLOCK_M, BLOCK_D]. O is the stored output plus, with HAS_LO, its rounding residual
    (rows of D contiguous elements). (dlse2: the gradient reaching the base-2 lse, when lse is
    used downstream: d lse2 / d s = P / ln 2.)"""
    pid_bh = tl.program_id(0)
    b = (pid_bh // Hq).to(tl.int64)
    h = (pid_bh % Hq).to(tl.int64)
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    if USE_INT64:
        offs_m = offs_m.to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_m[:, None] < Sq) & (offs_d[None, :] < D)
    o = tl.load(o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
                mask=mask, other=0.0).to(tl.float32)
    rows = pid_bh.to(tl.int64) * Sq + offs_m
    if HAS_LO:
        o += tl.load(o_lo_ptr + rows[:, None] * D + offs_d[None, :], mask=mask, other=0.0).to(tl.float32)
    do = tl.load(do_ptr + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dom + offs_d[None, :] * stride_dod,
                 mask=mask, other=0.0).to(tl.float32)
    delta = tl.sum(o * do, axis=1)
    if HAS_DLSE:
        delta -= tl.load(dlse_ptr + rows, mask=offs_m < Sq, other=0.0) * 1.4426950408889634
    tl.store(delta_ptr + rows, delta, mask=offs_m < Sq)


@triton.jit
def _attn_bwd_dkdv_inner(
    dk, dv, k, v, offs_n, q_base, do_base, dq_base, lse_base, lse_lo_base, delta_base, mask_base,
    stride_qm, stride_qd, stride_dom, stride_dod, stride_mm, stride_mn,
    lo, hi, Sq, Sk, D, diag, diag_lo, sm_scale, qk_scale, seg_k, segq_base, k_id, k_mixed, check,
    EDGE: tl.constexpr, MASK_KEYS: tl.constexpr, IS_CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr,
    HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, ATOMIC_DQ: tl.constexpr, EVEN_D: tl.constexpr,
    IEEE: tl.constexpr, UPCAST: tl.constexpr, LSE_LO: tl.constexpr, USE_INT64: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr, SEGMENTS: tl.constexpr = False,
):
    """dK, dV contributions of the query blocks [lo, hi) of one head (transposed tiles: keys x
    queries). EDGE: the band's edges (causal diagonal, window); MASK_KEYS: the ragged last key
    block; HAS_MASK: the attn_mask tile (transposed), in every block; SEGMENTS: a key meets only
    the rows of its segment (the keys' ids ``seg_k``, the rows' at ``segq_base``). ATOMIC_DQ: also adds this
    block's dQ share to the fp32 buffer with atomics."""
    offs_d = tl.arange(0, BLOCK_D)
    for m0 in range(lo, hi, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        if USE_INT64:
            offs_m = offs_m.to(tl.int64)
        row_ok = offs_m < Sq
        if EVEN_D:
            io_mask = row_ok[:, None]
        else:
            io_mask = row_ok[:, None] & (offs_d[None, :] < D)
        q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd, mask=io_mask, other=0.0)
        do = tl.load(do_base + offs_m[:, None] * stride_dom + offs_d[None, :] * stride_dod, mask=io_mask, other=0.0)
        # Rows past Sq and rows that saw no key (lse -inf) get lse +inf: their P is exactly 0.
        lse2 = tl.load(lse_base + offs_m, mask=row_ok, other=float("inf"))
        lse2 = tl.where(lse2 == -float("inf"), float("inf"), lse2)
        delta = tl.load(delta_base + offs_m, mask=row_ok, other=0.0)
        s_t = _mma(k, tl.trans(q), IEEE, UPCAST) * qk_scale
        if HAS_MASK:  # a masked-out pair gets score -inf, so P = 2^(-inf - lse) = 0 (lse is never -inf here)
            am = tl.load(mask_base + offs_m[None, :].to(tl.int64) * stride_mm + offs_n[:, None] * stride_mn,
                         mask=row_ok[None, :] & (offs_n[:, None] < Sk), other=0)
            if MASK_BOOL:
                s_t = tl.where(am != 0, s_t, -float("inf"))
            else:
                s_t = s_t + _bias2(am)
        if SEGMENTS:
            if check:  # (False: every row of [lo, hi) has the keys' one id)
                seg_q = tl.load(segq_base + offs_m, mask=row_ok, other=k_id)  # (rows past Sq: P is 0 anyway)
                if k_mixed | (tl.min(seg_q, 0) != k_id) | (tl.max(seg_q, 0) != k_id):  # not all one segment
                    s_t = tl.where(seg_k[:, None] == seg_q[None, :], s_t, -float("inf"))
        if LSE_LO:
            lse_lo = tl.load(lse_lo_base + offs_m, mask=row_ok, other=0.0)
            p_t = tl.math.exp2((s_t - lse2[None, :]) - lse_lo[None, :])
        else:
            p_t = tl.math.exp2(s_t - lse2[None, :])
        if EDGE:
            ok = offs_n[:, None] < Sk
            if IS_CAUSAL:
                ok = ok & (offs_n[:, None] <= offs_m[None, :] + diag)
            if HAS_LEFT:
                ok = ok & (offs_n[:, None] >= offs_m[None, :] + diag_lo)
            p_t = tl.where(ok, p_t, 0.0)
        elif MASK_KEYS:
            p_t = tl.where(offs_n[:, None] < Sk, p_t, 0.0)
        dv += _mma(p_t.to(do.dtype), do, IEEE, UPCAST)
        dp_t = _mma(v, tl.trans(do), IEEE, UPCAST)
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk += _mma(ds_t, q, IEEE, UPCAST)
        if ATOMIC_DQ:
            dq = _mma(tl.trans(ds_t), k, IEEE, UPCAST) * sm_scale
            tl.atomic_add(dq_base + offs_m[:, None] * D + offs_d[None, :], dq,
                          mask=row_ok[:, None] & (offs_d[None, :] < D), sem="relaxed")
    return dk, dv


@triton.jit
def _attn_bwd_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, lse_lo_ptr, delta_ptr, dk_ptr, dv_ptr, dq_ptr, mask_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_dom, stride_dod,
    stride_dkb, stride_dkh, stride_dkn, stride_dkd,
    stride_mb, stride_mh, stride_mm, stride_mn,
    range_ptr, stride_rb, stride_rh, stride_rm, seg_ptr, stride_sb,
    Hkv, G, Sq, Sk, D, diag, diag_lo, sm_scale, qk_scale,
    IS_CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr,
    RANGED: tl.constexpr, SEGMENTS: tl.constexpr, ATOMIC_DQ: tl.constexpr, EVEN_D: tl.constexpr, EVEN_N: tl.constexpr,
    IEEE: tl.constexpr, UPCAST: tl.constexpr, BF16_RNE: tl.constexpr, LSE_LO: tl.constexpr, USE_INT64: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """dK, dV [BLOCK_N, D] of one (batch, kv head, key block), summed over the G query heads of
    the group in order; K, V tiles [BLOCK_N, BLOCK_D] stay on chip, Q/dO [BLOCK_M, BLOCK_D] and
    the attn_mask [BLOCK_N, BLOCK_M] (HAS_MASK) per step. dK and dV share strides (both
    allocated here)."""
    pid_bh = tl.program_id(0)
    n0 = tl.program_id(1) * BLOCK_N  # first key blocks see the most queries under causal masking
    b = (pid_bh // Hkv).to(tl.int64)
    hk = (pid_bh % Hkv).to(tl.int64)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    if USE_INT64:
        offs_n = offs_n.to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    kv_mask = (offs_n[:, None] < Sk) & (offs_d[None, :] < D)
    k = tl.load(k_ptr + b * stride_kb + hk * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + b * stride_vb + hk * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    # The query rows that see some of these keys lie in [m_lo, m_hi); every row of the blocks in
    # [m_a, m_b) sees all of them (unmasked); [m_lo, m_a) and [m_b, m_hi) hold the band's edges.
    if IS_CAUSAL:  # row i sees key j iff j <= i + diag: rows from n0 - diag on see some
        m_lo = (tl.maximum(n0 - diag, 0) // BLOCK_M) * BLOCK_M
        m_a = m_lo + tl.cdiv(tl.maximum(n0 + BLOCK_N - 1 - diag - m_lo, 0), BLOCK_M) * BLOCK_M
    else:
        m_lo = 0
        m_a = 0
    if HAS_LEFT:  # row i sees key j iff j >= i + diag_lo: rows up to n0 + BLOCK_N - 1 - diag_lo see some
        m_hi = tl.minimum(Sq, tl.maximum(n0 + BLOCK_N - diag_lo, 0))
        m_b = (tl.maximum(n0 - diag_lo + 1, 0) // BLOCK_M) * BLOCK_M
    else:
        m_hi = Sq
        m_b = Sq
    m_lo = tl.minimum(m_lo, m_hi)
    m_a = tl.minimum(tl.maximum(m_a, m_lo), m_hi)
    m_b = tl.minimum(tl.maximum(m_b, m_a), m_hi)
    if RANGED:  # the mask's span of query rows for these keys, over the group's heads (host: _mask_ranges)
        m_lo, m_a, m_b, m_hi = _clamp_to_range(m_lo, m_a, m_b, m_hi, range_ptr + b * stride_rb + hk * stride_rh
                                               + tl.program_id(1) * stride_rm, BLOCK_M)
    seg_base = seg_ptr + b * stride_sb  # (SEGMENTS: Sq query ids, then Sk key ids)
    # (the keys' ids; a block of rows all of the keys' one id needs no per-pair test)
    seg_k, k_id, k_mixed, check = _segment_ids(seg_base + Sq, offs_n, offs_n < Sk, n0, seg_base, seg_base + Sq + Sk,
                                               m_lo, m_hi, SEGMENTS)
    for g in range(0, G):
        h = hk * G + g
        bh = b * (Hkv * G) + h
        q_base = q_ptr + b * stride_qb + h * stride_qh
        do_base = do_ptr + b * stride_dob + h * stride_doh
        dq_base = dq_ptr + bh * Sq * D
        lse_base = lse_ptr + bh * Sq
        lse_lo_base = lse_lo_ptr + bh * Sq
        delta_base = delta_ptr + bh * Sq
        mask_base = mask_ptr + b * stride_mb + h * stride_mh
        if IS_CAUSAL:
            dk, dv = _attn_bwd_dkdv_inner(dk, dv, k, v, offs_n, q_base, do_base, dq_base, lse_base, lse_lo_base,
                                          delta_base, mask_base, stride_qm, stride_qd, stride_dom, stride_dod,
                                          stride_mm, stride_mn, m_lo, m_a, Sq, Sk, D, diag, diag_lo, sm_scale, qk_scale,
                                          seg_k, seg_base, k_id, k_mixed, check, True, not EVEN_N, IS_CAUSAL, HAS_LEFT,
                                          HAS_MASK, MASK_BOOL, ATOMIC_DQ, EVEN_D, IEEE, UPCAST, LSE_LO, USE_INT64,
                                          BLOCK_M, BLOCK_D, SEGMENTS)
        dk, dv = _attn_bwd_dkdv_inner(dk, dv, k, v, offs_n, q_base, do_base, dq_base, lse_base, lse_lo_base,
                                      delta_base, mask_base, stride_qm, stride_qd, stride_dom, stride_dod,
                                      stride_mm, stride_mn, m_a, m_b, Sq, Sk, D, diag, diag_lo, sm_scale, qk_scale,
                                      seg_k, seg_base, k_id, k_mixed, check, False, not EVEN_N, IS_CAUSAL, HAS_LEFT,
                                      HAS_MASK, MASK_BOOL, ATOMIC_DQ, EVEN_D, IEEE, UPCAST, LSE_LO, USE_INT64, BLOCK_M,
                                      BLOCK_D, SEGMENTS)
        if HAS_LEFT:
            dk, dv = _attn_bwd_dkdv_inner(dk, dv, k, v, offs_n, q_base, do_base, dq_base, lse_base, lse_lo_base,
                                          delta_base, mask_base, stride_qm, stride_qd, stride_dom, stride_dod,
                                          stride_mm, stride_mn, m_b, m_hi, Sq, Sk, D, diag, diag_lo, sm_scale,
                                          qk_scale, seg_k, seg_base, k_id, k_mixed, check, True, not EVEN_N, IS_CAUSAL,
                                          HAS_LEFT, HAS_MASK, MASK_BOOL, ATOMIC_DQ, EVEN_D, IEEE, UPCAST, LSE_LO,
                                          USE_INT64, BLOCK_M, BLOCK_D, SEGMENTS)
    dk = dk * sm_scale
    # (64-bit bases per program, the tile's offsets in offs_n's width: a 64-bit offset per element
    # would hold two registers each while dK and dV are live)
    base = b * stride_dkb + hk * stride_dkh
    out = offs_n[:, None] * stride_dkn + offs_d[None, :] * stride_dkd
    tl.store(dk_ptr + base + out, _round_for_store(dk, dk_ptr, BF16_RNE), mask=kv_mask)
    tl.store(dv_ptr + base + out, _round_for_store(dv, dv_ptr, BF16_RNE), mask=kv_mask)


@triton.jit
def _attn_bwd_dq_inner(
    dq, q, do, lse2, lse_lo, delta, k_base, v_base, mask_rows, row_ok,
    stride_kn, stride_kd, stride_vn, stride_vd, stride_mn,
    offs_m, offs_d, lo, hi, Sk, D, diag, diag_lo, qk_scale, seg_q, segk_base, q_id, q_mixed, check,
    EDGE: tl.constexpr, IS_CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_MASK: tl.constexpr,
    MASK_BOOL: tl.constexpr, EVEN_D: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
    LSE_LO: tl.constexpr, USE_INT64: tl.constexpr, BLOCK_N: tl.constexpr, SEGMENTS: tl.constexpr = False,
):
    """dQ (unscaled) over the KV blocks [lo, hi); EDGE: key bound and the band's edges;
    HAS_MASK: the attn_mask tile, in every block; SEGMENTS: only the keys of the row's segment."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        if USE_INT64:
            offs_n = offs_n.to(tl.int64)
        kv_mask = offs_n[:, None] < Sk
        if not EVEN_D:
            kv_mask = kv_mask & (offs_d[None, :] < D)
        k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd, mask=kv_mask, other=0.0)
        v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0)
        s = _mma(q, tl.trans(k), IEEE, UPCAST) * qk_scale
        # (a masked-out pair gets score -inf, so P = 2^(-inf - lse) = 0: lse is never -inf here)
        s = _rows_mask(s, mask_rows, row_ok, offs_n, Sk, stride_mn, seg_q, segk_base, q_id, q_mixed, check,
                       HAS_MASK, MASK_BOOL, SEGMENTS)
        if LSE_LO:
            p = tl.math.exp2((s - lse2[:, None]) - lse_lo[:, None])
        else:
            p = tl.math.exp2(s - lse2[:, None])
        if EDGE:
            p = tl.where(_visible(offs_m, offs_n, Sk, diag, diag_lo, IS_CAUSAL, HAS_LEFT), p, 0.0)
        dp = _mma(do, tl.trans(v), IEEE, UPCAST)
        ds = (p * (dp - delta[:, None])).to(k.dtype)
        dq += _mma(ds, k, IEEE, UPCAST)
    return dq


@triton.jit
def _attn_bwd_dq_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, lse_lo_ptr, delta_ptr, dq_ptr, mask_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_dom, stride_dod,
    stride_dqb, stride_dqh, stride_dqm, stride_dqd,
    stride_mb, stride_mh, stride_mm, stride_mn,
    range_ptr, stride_rb, stride_rh, stride_rm, seg_ptr, stride_sb,
    Hq, G, Sq, Sk, D, diag, diag_lo, sm_scale, qk_scale,
    IS_CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr,
    RANGED: tl.constexpr, SEGMENTS: tl.constexpr, EVEN_D: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
    BF16_RNE: tl.constexpr, LSE_LO: tl.constexpr, USE_INT64: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """dQ [BLOCK_M, D] of one (batch, query head, query block), looping over its visible KV
    blocks (no atomics: the deterministic path); Q, dO [BLOCK_M, BLOCK_D] in registers, the
    attn_mask [BLOCK_M, BLOCK_N] per step (HAS_MASK)."""
    pid_bh = tl.program_id(0)
    pid_m = tl.num_programs(1) - 1 - tl.program_id(1)
    b = (pid_bh // Hq).to(tl.int64)
    h = (pid_bh % Hq).to(tl.int64)
    hk = h // G
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    if USE_INT64:
        offs_m = offs_m.to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < Sq
    io_mask = row_ok[:, None] & (offs_d[None, :] < D)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=io_mask, other=0.0)
    do = tl.load(do_ptr + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dom + offs_d[None, :] * stride_dod,
                 mask=io_mask, other=0.0)
    rows = pid_bh.to(tl.int64) * Sq + offs_m
    lse2 = tl.load(lse_ptr + rows, mask=row_ok, other=float("inf"))
    lse2 = tl.where(lse2 == -float("inf"), float("inf"), lse2)
    lse_lo = tl.load(lse_lo_ptr + rows, mask=row_ok, other=0.0)  # one load per row; used when LSE_LO
    delta = tl.load(delta_ptr + rows, mask=row_ok, other=0.0)
    k_base = k_ptr + b * stride_kb + hk * stride_kh
    v_base = v_ptr + b * stride_vb + hk * stride_vh
    mask_rows = mask_ptr + b * stride_mb + h * stride_mh + offs_m[:, None].to(tl.int64) * stride_mm
    lo, n_a, n_b, hi = _kv_range(m0, Sk, diag, diag_lo, IS_CAUSAL, HAS_LEFT, BLOCK_M, BLOCK_N)
    if RANGED:  # the mask's span of keys for this query block (host: _mask_ranges)
        lo, n_a, n_b, hi = _clamp_to_range(lo, n_a, n_b, hi, range_ptr + b * stride_rb + h * stride_rh
                                           + pid_m * stride_rm, BLOCK_N)
    seg_base = seg_ptr + b * stride_sb  # (SEGMENTS: Sq query ids, then Sk key ids)
    # (the rows' ids; a block of keys all of the rows' one id needs no per-pair test)
    seg_q, q_id, q_mixed, check = _segment_ids(seg_base, offs_m, row_ok, m0, seg_base + Sq, seg_base + Sq + Sk,
                                               lo, hi, SEGMENTS)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    if HAS_LEFT:  # (without a left edge [lo, n_a) is empty: RANGED moves both to the span's start)
        dq = _attn_bwd_dq_inner(dq, q, do, lse2, lse_lo, delta, k_base, v_base, mask_rows, row_ok,
                                stride_kn, stride_kd, stride_vn, stride_vd, stride_mn,
                                offs_m, offs_d, lo, n_a, Sk, D, diag, diag_lo, qk_scale,
                                seg_q, seg_base + Sq, q_id, q_mixed, check,
                                True, IS_CAUSAL, HAS_LEFT, HAS_MASK, MASK_BOOL, EVEN_D, IEEE, UPCAST, LSE_LO, USE_INT64,
                                BLOCK_N, SEGMENTS)
    n_s = n_a
    if SEGMENTS:  # the whole blocks with ids only where the program has pairs to test (as the forward)
        n_s = tl.where(check, n_b, n_a)
        dq = _attn_bwd_dq_inner(dq, q, do, lse2, lse_lo, delta, k_base, v_base, mask_rows, row_ok,
                                stride_kn, stride_kd, stride_vn, stride_vd, stride_mn,
                                offs_m, offs_d, n_a, n_s, Sk, D, diag, diag_lo, qk_scale,
                                seg_q, seg_base + Sq, q_id, q_mixed, check,
                                False, IS_CAUSAL, HAS_LEFT, HAS_MASK, MASK_BOOL, EVEN_D, IEEE, UPCAST, LSE_LO, USE_INT64,
                                BLOCK_N, SEGMENTS)
    dq = _attn_bwd_dq_inner(dq, q, do, lse2, lse_lo, delta, k_base, v_base, mask_rows, row_ok,
                            stride_kn, stride_kd, stride_vn, stride_vd, stride_mn,
                            offs_m, offs_d, n_s, n_b, Sk, D, diag, diag_lo, qk_scale,
                            seg_q, seg_base + Sq, q_id, q_mixed, check,
                            False, IS_CAUSAL, HAS_LEFT, HAS_MASK, MASK_BOOL, EVEN_D, IEEE, UPCAST, LSE_LO, USE_INT64,
                            BLOCK_N)
    dq = _attn_bwd_dq_inner(dq, q, do, lse2, lse_lo, delta, k_base, v_base, mask_rows, row_ok,
                            stride_kn, stride_kd, stride_vn, stride_vd, stride_mn,
                            offs_m, offs_d, n_b, hi, Sk, D, diag, diag_lo, qk_scale,
                            seg_q, seg_base + Sq, q_id, q_mixed, check,
                            True, IS_CAUSAL, HAS_LEFT, HAS_MASK, MASK_BOOL, EVEN_D, IEEE, UPCAST, LSE_LO, USE_INT64,
                            BLOCK_N, SEGMENTS)
    dq = dq * sm_scale
    tl.store(dq_ptr + b * stride_dqb + h * stride_dqh + offs_m[:, None] * stride_dqm + offs_d[None, :] * stride_dqd,
             _round_for_store(dq, dq_ptr, BF16_RNE), mask=io_mask)
