"""Registers, spills and shared memory of attention's forward kernel for sm_90, compiled ahead of
time (no GPU needed: Triton's own ptxas): the d128 tiles the H200 runs, with and without segment
ids, 16-bit K / V through tensor descriptors.

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


if __name__ == "__main__":
    main()
