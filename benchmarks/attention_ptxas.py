"""Registers, spills and shared memory of attention's kernels for sm_90, compiled ahead of time (no
GPU needed: Triton's own ptxas): the d128 tiles the H200 runs, with and without segment ids (the
forward with 16-bit K / V through tensor descriptors, with and without the output residual; the
two backward kernels).

    PYTHONPATH=src python benchmarks/attention_ptxas.py
"""
import importlib
import os
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas
from triton.compiler import ASTSource

A = importlib.import_module("roofkit.ops.attention._kernels")
TARGET = GPUTarget("cuda", 90, 32)
POINTERS = {"lse_ptr": "*fp32", "lse_lo_ptr": "*fp32", "mask_ptr": "*u8", "range_ptr": "*i32", "seg_ptr": "*i16"}


def compile_fwd(causal: bool, segments: bool, store_o_lo: bool, block_m: int, block_n: int, warps: int, stages: int):
    consts = dict(IS_CAUSAL=causal, HAS_LEFT=False, HAS_MASK=False, MASK_BOOL=False, EVEN_D=True, IEEE=False,
                  UPCAST=False, RANGED=False, SEGMENTS=segments, USE_INT64=False, BF16_RNE=False,
                  STORE_O_LO=store_o_lo, DESC=True, FOLD=True, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=128)
    sig = {}
    for name in A._attn_fwd_kernel.arg_names:
        if name in consts:
            sig[name] = "constexpr"
        elif name.endswith("_desc"):
            sig[name] = f"tensordesc<bf16[1,1,{block_n},128]>"
        elif name.endswith("_ptr"):
            sig[name] = POINTERS.get(name, "*bf16")
        else:
            sig[name] = "fp32" if name == "qk_scale" else "i32"
    return triton.compile(ASTSource(A._attn_fwd_kernel, sig, consts, {}), target=TARGET,
                          options={"num_warps": warps, "num_stages": stages})


def compile_bwd(kind: str, causal: bool, segments: bool):
    """The dK/dV (32 x 64, 4 warps, 4 stages) or dQ (128 x 64, 8 warps, 4 stages) kernel as the
    H200 runs it at d128, 16-bit."""
    fn = A._attn_bwd_dkdv_kernel if kind == "dkdv" else A._attn_bwd_dq_kernel
    consts = dict(IS_CAUSAL=causal, HAS_LEFT=False, HAS_MASK=False, MASK_BOOL=False, EVEN_D=True, IEEE=False,
                  UPCAST=False, RANGED=False, SEGMENTS=segments, USE_INT64=False, BF16_RNE=False, LSE_LO=False,
                  BLOCK_M=32 if kind == "dkdv" else 128, BLOCK_N=64, BLOCK_D=128)
    if kind == "dkdv":
        consts.update(ATOMIC_DQ=False, EVEN_N=True)
    sig = {}
    for name in fn.arg_names:
        if name in consts:
            sig[name] = "constexpr"
        elif name.endswith("_ptr"):
            sig[name] = dict(POINTERS, delta_ptr="*fp32").get(name, "*bf16")
        else:
            sig[name] = "fp32" if name in ("qk_scale", "sm_scale") else "i32"
    warps = 4 if kind == "dkdv" else 8
    return triton.compile(ASTSource(fn, sig, consts, {}), target=TARGET, options={"num_warps": warps, "num_stages": 4})


def ptxas_info(kernel) -> str:
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "k.ptx")
    with open(path, "w") as f:
        f.write(kernel.asm["ptx"])
    run = subprocess.run([get_ptxas(90).path, "-arch=sm_90a", "-v", path, "-o", os.path.join(folder, "k.o")],
                         capture_output=True, text=True)
    lines = [ln.strip() for ln in run.stderr.splitlines() if "spill" in ln or "registers" in ln]
    return "; ".join(lines)


def main():
    for causal, (bm, bn) in ((True, (128, 128)), (False, (256, 64))):
        for segments in (False, True):
            for store_o_lo in (True, False):
                k = compile_fwd(causal, segments, store_o_lo, bm, bn, 8, 3)
                print(f"fwd causal={causal:d} {bm}x{bn} segments={segments:d} store_o_lo={store_o_lo:d}: "
                      f"shared {k.metadata.shared} B; {ptxas_info(k)}", flush=True)
    for kind in ("dkdv", "dq"):
        for segments in (False, True):
            k = compile_bwd(kind, True, segments)
            print(f"{kind} causal=1 segments={segments:d}: shared {k.metadata.shared} B; {ptxas_info(k)}", flush=True)


if __name__ == "__main__":
    main()
