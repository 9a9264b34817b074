"""sm_90 PTX of the row-wise and attention kernels, compiled ahead of time (no GPU needed), as a
hash per kernel variant: a refactor that should not change the generated code is checked by
running this on the tree before and after and comparing (debug info and the parameter list are
left out: a new argument shifts parameter names only).

    PYTHONPATH=<tree>/src python benchmarks/ptx_hashes.py [--ranged] [--int64] > hashes.json

``--ranged``: attention's masked variants with the mask spans on; ``--int64``: the 64-bit offset
forms. Hashes depend on the Triton version: compare trees with the same one.
"""
import hashlib
import inspect
import importlib
import json
import re
import sys

from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import triton

T = GPUTarget("cuda", 90, 32)
FLOATS = {"inv_n", "label_smoothing", "qk_scale", "sm_scale", "scale", "eps", "alpha"}
INT64 = "--int64" in sys.argv


def sig_for(fn, consts, ptr_types):
    sig = {}
    for name in fn.arg_names:
        if name in consts:
            sig[name] = "constexpr"
        elif name.endswith("_ptr") or name.endswith("_desc"):
            sig[name] = ptr_types.get(name, "*bf16")
        elif name in FLOATS:
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


def build(fn, consts, ptr_types=None, warps=4, stages=3):
    """(hash, length) of ``fn``'s PTX for sm_90 with these constants, debug info and parameter
    declarations left out."""
    if "USE_INT64" in fn.arg_names:
        consts = dict(consts, USE_INT64=INT64)
    # constexpr parameters left out take their defaults (a new defaulted one keeps old hashes)
    consts = {**{p.name: p.default for p in fn.params
                 if p.is_constexpr and p.default is not inspect.Parameter.empty}, **consts}
    sig = sig_for(fn, consts, ptr_types or {})
    k = triton.compile(ASTSource(fn, sig, consts, {}), target=T, options={"num_warps": warps, "num_stages": stages})
    ptx = k.asm["ptx"].split(".section\t.debug")[0].split(".section .debug")[0]
    body = "\n".join(line for line in ptx.splitlines() if ".param" not in line
                     and not re.match(r"\s*(\.loc|\.file|//|\$L__)", line))
    return hashlib.sha256(body.encode()).hexdigest()[:16], len(body)


out = {}
A = importlib.import_module("roofkit.ops.attention._kernels")
att_ptrs = {"lse_ptr": "*fp32", "lse_lo_ptr": "*fp32", "delta_ptr": "*fp32", "mask_ptr": "*u8", "range_ptr": "*i32",
            "dq_ptr": "*bf16"}
ranged = "RANGED" in A._attn_fwd_kernel.arg_names


segmented = "SEGMENTS" in A._attn_fwd_kernel.arg_names
if segmented:
    att_ptrs["seg_ptr"] = "*i16"


def edges(causal, mask, segments=False):
    e = dict(IS_CAUSAL=causal, HAS_LEFT=False, HAS_MASK=mask, MASK_BOOL=mask, EVEN_D=True, IEEE=False, UPCAST=False)
    if ranged:
        e["RANGED"] = mask and "--ranged" in sys.argv
    if segmented:
        e["SEGMENTS"] = segments
    return e


for causal, mask, segments in ((True, False, False), (False, False, False), (False, True, False), (True, True, False),
                               *(((True, False, True), (False, False, True)) if segmented else ())):
    tag = " seg" if segments else ""
    c = dict(edges(causal, mask, segments), BF16_RNE=False, STORE_O_LO=True, DESC=False, FOLD=not mask,
             BLOCK_M=128, BLOCK_N=128 if causal else 64, BLOCK_D=128)
    out[f"attn_fwd c{causal:d} m{mask:d}{tag}"] = build(A._attn_fwd_kernel, c, att_ptrs, warps=8, stages=3)
    c = dict(edges(causal, mask, segments), ATOMIC_DQ=False, EVEN_N=True, BF16_RNE=False, LSE_LO=False, BLOCK_M=32,
             BLOCK_N=64, BLOCK_D=128)
    out[f"attn_dkdv c{causal:d} m{mask:d}{tag}"] = build(A._attn_bwd_dkdv_kernel, c, att_ptrs, warps=4, stages=4)
    c = dict(edges(causal, mask, segments), BF16_RNE=False, LSE_LO=False, BLOCK_M=128, BLOCK_N=64, BLOCK_D=128)
    out[f"attn_dq c{causal:d} m{mask:d}{tag}"] = build(A._attn_bwd_dq_kernel, c, att_ptrs, warps=8, stages=4)
S = importlib.import_module("roofkit.ops.softmax")
sm_ptrs = {"part_ptr": "*fp32", "count_ptr": "*i32"}
for log in (False, True):
    c = dict(LOG=log, USE_INT64=False, BF16_RNE=False, SPLITS=4, SPLITS_P2=4, BLOCK_N=4096, PHASE=0)
    out[f"sm_split_fwd {log}"] = build(S._softmax_split_fwd_kernel, c, sm_ptrs, warps=8)
    out[f"sm_split_bwd {log}"] = build(S._softmax_split_bwd_kernel, c, sm_ptrs, warps=8)
for log in (False, True):
    c = dict(LOG=log, ONE_PASS=False, USE_INT64=False, BF16_RNE=False, BLOCK_M=1, BLOCK_N=4096)
    out[f"sm_fwd {log}"] = build(S._softmax_fwd_kernel, c, {}, warps=8)
C = importlib.import_module("roofkit.ops.cross_entropy")
ce_ptrs = {"t_ptr": "*i64", "w_ptr": "*fp32", "scal_ptr": "*fp32", "loss_ptr": "*fp32", "part_ptr": "*fp32", "count_ptr": "*i32"}
for smooth in (False, True):
    c = dict(HAS_WEIGHT=smooth, SMOOTH=smooth, MEAN=True, WRITE_GRAD=True, ONE_PASS=False, USE_INT64=False,
             GRAD_RNE=False, LOSS_RNE=False, BLOCK_M=1, BLOCK_N=4096)
    out[f"ce_fwd {smooth}"] = build(C._cross_entropy_fwd_kernel, c, ce_ptrs, warps=8)
    c = dict(HAS_WEIGHT=smooth, SMOOTH=smooth, MEAN=True, WRITE_GRAD=True, USE_INT64=False, GRAD_RNE=False,
             LOSS_RNE=False, SPLITS=4, SPLITS_P2=4, BLOCK_N=4096, PHASE=0)
    out[f"ce_split {smooth}"] = build(C._cross_entropy_split_kernel, c, ce_ptrs, warps=8)
N_ = importlib.import_module("roofkit.ops.rms_norm")
L_ = importlib.import_module("roofkit.ops.layer_norm")
nptr = {"rstd_ptr": "*fp32", "mean_ptr": "*fp32", "dw_partial_ptr": "*fp32", "dw_part_ptr": "*fp32", "db_part_ptr": "*fp32"}
for one in (True, False):
    c = dict(HAS_WEIGHT=True, ONE_PASS=one, BF16_RNE=False, BLOCK_M=1, BLOCK_N=4096, HAS_RESIDUAL=True)
    out[f"rms_fwd {one}"] = build(N_._rms_norm_fwd_kernel, c, nptr, warps=8)
    c = dict(HAS_WEIGHT=True, ONE_PASS=one, BF16_RNE=False, BLOCK_M=1, BLOCK_N=4096, LOOP_STAGES=3, HAS_DRES=True)
    out[f"rms_bwd {one}"] = build(N_._rms_norm_bwd_kernel, c, nptr, warps=16)
    c = dict(HAS_WEIGHT=True, HAS_BIAS=True, ONE_PASS=one, BF16_RNE=False, BLOCK_M=1, BLOCK_N=4096)
    out[f"ln_fwd {one}"] = build(L_._layer_norm_fwd_kernel, c, nptr, warps=8)
    c = dict(HAS_WEIGHT=True, HAS_BIAS=True, ONE_PASS=one, BF16_RNE=False, BLOCK_M=1, BLOCK_N=4096, LOOP_STAGES=3)
    out[f"ln_bwd {one}"] = build(L_._layer_norm_bwd_kernel, c, nptr, warps=16)
for log in (False, True):
    c = dict(LOG=log, ONE_PASS=False, USE_INT64=False, BF16_RNE=False, BLOCK_M=1, BLOCK_N=4096)
    fn = getattr(S, "_softmax_bwd_kernel", None)
    if fn is not None:
        c2 = {k: v for k, v in c.items() if k in fn.arg_names}
        out[f"sm_bwd {log}"] = build(fn, c2, {}, warps=8)
print(json.dumps(out, indent=0))
