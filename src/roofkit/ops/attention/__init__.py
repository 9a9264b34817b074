"""Exact attention (FlashAttention-style): forward, backward, causal, attn_mask, sliding window, GQA, split-KV.

    out = softmax(scale * q @ k^T + mask) @ v,    lse = log(sum_j exp(scale * q . k_j + mask_ij)) per row

Layout (B, H, S, D), any strides. Query head h reads key/value head h // (Hq // Hkv) (GQA/MQA).
Two alignments of the causal band, one per public function:
- ``scaled_dot_product_attention`` is torch's function: is_causal aligned top-left (query i sees
  key j iff j <= i, whatever Sq and Sk), attn_mask boolean (True = take part) or additive (query's
  dtype or float32), broadcastable to (B, Hq, Sq, Sk) and read through stride-0 dimensions (never
  materialized), not together with is_causal. A row that sees no key (all keys masked out) is 0
  with zero gradients, as torch's math backend gives.
- ``flash_attention`` is FlashAttention's: causal and ``window_size`` = (left, right) aligned
  bottom-right (FlashAttention 2.1): with diag = Sk - Sq, query i sees key j iff
  i + diag - left <= j <= i + diag + right (-1: unbounded; causal: right = 0); a row that sees no
  key gives zeros and lse -inf.
The kernels take the band as two offsets (``_launch.Band``: key j <= i + diag when IS_CAUSAL,
j >= i + diag_lo when HAS_LEFT) and the mask as a pointer with four strides (HAS_MASK, MASK_BOOL).

Program mapping.
- Forward (``_attn_fwd_kernel``): one program per (batch x query head, BLOCK_M query rows); Q
  stays in registers while the program walks the visible KV blocks with the online-softmax
  recurrence in base 2 (log2(e) folded into the scale): running max, rescaled sum and an fp32
  output accumulator, normalized once at the end. The KV loop is split into an unmasked part
  (blocks every row sees) and masked parts (the band's edges and the ragged last block); blocks
  outside the band are never visited. An attn_mask tile is loaded and applied in every block
  (boolean: -inf where False; additive: added to the scaled scores, in base 2, the scale then
  not folded into the exponent); with a large mask (``MASK_RANGES_MIN_PAIRS``) the blocks it
  hides entirely are skipped too (RANGED: each block's visible span from a device pre-pass over
  the mask, ``_launch._mask_ranges``; the backward kernels likewise). The grid's second axis runs the query blocks from the last
  (heaviest under causal masking) to the first, so the longest programs start first. K and
  V blocks come through 4-D tensor descriptors (TMA; rows past Sk zero-filled per (batch, head))
  on Hopper and newer when the head dim is a power of two and the strides are 16-byte aligned,
  else through masked pointer loads (module switch ``FWD_DESC``).
- Decoding (``_attn_decode_kernel`` + ``_attn_decode_combine_kernel``): when a GQA group's query
  rows (G * Sq) fit one tile, one program owns one chunk of the KV sequence of one (batch, kv
  head) and all query rows of that kv head's group, so K and V are read once per kv head; it
  writes a partial (output, lse) in fp32, and a combining kernel in the same stream merges the
  chunks (a chunk outside the band contributes lse -inf). The number of chunks is chosen from the
  shape and the SM count.
- Backward: a preprocess kernel (delta = rowsum(dO * O) - dlse, fp32); ``_attn_bwd_dkdv_kernel``
  with one program per (batch x kv head, BLOCK_N keys) that keeps its K, V tile on chip, loops
  over the query heads of its group and their visible query blocks, recomputes P from the saved
  lse and accumulates dK and dV in fp32 (GQA sums in a fixed order: deterministic). dQ comes from
  ``_attn_bwd_dq_kernel`` (one program per query block looping over KV blocks, no atomics:
  bitwise reproducible; the default, measured faster), or, with the module switch
  ``ATOMIC_DQ = True`` and ``deterministic=False``, accumulates in the dK/dV program with fp32
  atomics. No (Sq, Sk) matrix is ever stored.
- The saved lse is two fp32 numbers per row, hi + lo (``_kernels._lse_hi_lo``): the backward
  recomputes P = 2^(s * scale - lse), and one fp32 lse of magnitude |m| would be off by up to
  |m| * 2^-25, a relative error shared by every P of the row (at logits of std 30, 10x torch's
  own error in dV); with lo the row sums of P stay within a few ulps of one at any magnitude.
- Under the Triton interpreter the dots run in float64 and round once (``_mma``'s UPCAST):
  numpy's float32 product is OpenBLAS's sgemm, whose rounding depends on the processor.
Source: Dao et al., "FlashAttention" (2022) and "FlashAttention-2" (2023); Dao et al.,
"Flash-Decoding for long-context inference" (2023); Milakov & Gimelshein (2018, online softmax).

Package layout: ``_kernels.py`` (the @triton.jit kernels), ``_launch.py`` (tile configs, the
module switches ATOMIC_DQ / DECODE_*, host launchers), ``api.py`` (checks, custom ops, autograd,
public functions), ``spec.py`` (references, cost, torch baselines, cases, specs).
"""

from ._launch import Config
from .api import flash_attention, scaled_dot_product_attention
from .spec import (
    CASES,
    FLASH_ATTENTION_SPEC,
    SDPA_SPEC,
    SPECS,
    SUITES,
    attention_cost,
    flash_attention_cost,
    flash_attention_reference,
    scaled_dot_product_attention_reference,
)

__all__ = ["scaled_dot_product_attention", "flash_attention",
           "scaled_dot_product_attention_reference", "flash_attention_reference", "attention_cost",
           "flash_attention_cost", "Config", "CASES", "SUITES", "SDPA_SPEC", "FLASH_ATTENTION_SPEC", "SPECS"]
