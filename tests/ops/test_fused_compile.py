"""The fused LLM ops' kernels build for sm_90 (no GPU needed): Triton's compiler in a fresh
process without the interpreter (the test process runs the interpreter, which checks neither
types across branches nor layouts), including argument specializations Triton makes on a GPU
(an integer equal to 1 becomes a constant)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

_COMPILE = r'''
import importlib, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

out = []
T = GPUTarget("cuda", 90, 32)

def build(fn, sig, consts, warps=4):
    sig = dict(sig); sig.update({k: "constexpr" for k in consts})
    k = triton.compile(ASTSource(fn, sig, consts, {}), target=T, options={"num_warps": warps})
    return k.metadata.shared, k.n_regs if hasattr(k, "n_regs") else None

glu = importlib.import_module("roofkit.ops.glu")
for act in (0, 1, 2):
    out.append(("glu_fwd", act, build(glu._glu_fwd_kernel, {"gate_ptr": "*bf16", "up_ptr": "*bf16", "y_ptr": "*bf16", "n": "i64"},
                                        {"ACT": act, "BF16_RNE": False, "BLOCK": glu.BLOCK}, glu.NUM_WARPS)))
    out.append(("glu_bwd", act, build(glu._glu_bwd_kernel, {"dy_ptr": "*bf16", "gate_ptr": "*bf16", "up_ptr": "*bf16",
                                        "dgate_ptr": "*bf16", "dup_ptr": "*bf16", "y_ptr": "*bf16", "n": "i32"},
                                        {"ACT": act, "STORE_Y": act == 0, "BF16_RNE": False, "BLOCK": glu.BLOCK},
                                        glu.NUM_WARPS)))
rope = importlib.import_module("roofkit.ops.rope")
names = ["q_ptr", "k_ptr", "c_ptr", "s_ptr", "oq_ptr", "ok_ptr", "S", "H_q", "H_k", "HALF", "n_sblk", "n_hg_q", "n_hg",
         "sqb", "sqh", "sqs", "skb", "skh", "sks", "scb", "scs", "ssb", "sss", "soqb", "soqh", "soqs", "sokb", "sokh",
         "soks"]
# arguments Triton specializes as the constant 1; the backward with its own warp count
for ones, backward, stream in (([], False, False), (["sqb", "scb"], False, False), (["skb", "sks", "S", "n_hg"], False, False),
                              ([], True, False), ([], False, True)):
    sig = {n: ("*bf16" if n.endswith("_ptr") and n[0] in "qko" else "*fp32" if n.endswith("_ptr") else "i32")
           for n in names if n not in ones}
    consts = {n: 1 for n in ones}
    consts.update({"BACKWARD": backward, "BF16_RNE": False, "S_BLOCK": rope.S_BLOCK, "HG": rope.HEADS_PER_PROGRAM,
                   "BLOCK_H": 64})
    if stream:  # STREAMING's hints reach q / k's loads and the outputs' stores
        consts.update({"EVICT": "evict_first", "STORE_CACHE": ".cs"})
    full = {n: sig.get(n, "constexpr") for n in names}
    for n in consts: full[n] = "constexpr"
    warps = rope.BACKWARD_NUM_WARPS if backward else rope.NUM_WARPS
    k = triton.compile(ASTSource(rope._rope_kernel, full, consts, {}), target=T, options={"num_warps": warps})
    hints = ("evict_first" in k.asm["ptx"], "st.global.cs" in k.asm["ptx"])
    out.append(("rope_stream" if stream else "rope_bwd" if backward else "rope", hints if stream or not ones else ones,
                k.metadata.shared))
rms = importlib.import_module("roofkit.ops.rms_norm")
fwd_names = ["x_ptr", "w_ptr", "y_ptr", "rstd_ptr", "M", "N", "eps", "stride_xm", "stride_ym", "res_ptr", "rout_ptr",
             "stride_resm", "stride_routm"]
for one_pass, bn, stream in ((True, 4096, False), (False, 4096, False), (True, 4096, True), (True, 4096, "prefetch")):
    sig = {n: ("*bf16" if n in ("x_ptr", "w_ptr", "y_ptr", "res_ptr", "rout_ptr") else "*fp32" if n == "rstd_ptr"
               else "fp32" if n == "eps" else "i32") for n in fwd_names}
    consts = {"HAS_WEIGHT": True, "ONE_PASS": one_pass, "BF16_RNE": False, "BLOCK_M": 1, "BLOCK_N": bn,
              "HAS_RESIDUAL": True}
    if stream == "prefetch":  # the persistent forward that loads the next row block first
        consts.update({"PREFETCH": True, "BLOCK_M": 2})
    elif stream:  # the streaming configuration's hints reach the loads and stores
        consts.update({"EVICT": "evict_first", "STORE_CACHE": ".cs"})
    sig.update({k: "constexpr" for k in consts})
    k = triton.compile(ASTSource(rms._rms_norm_fwd_kernel, sig, consts, {}), target=T, options={"num_warps": 8})
    ptx = k.asm["ptx"]
    hints = ("evict_first" in ptx, "st.global.cs" in ptx)
    out.append(("add_rms_fwd_prefetch" if stream == "prefetch" else "add_rms_fwd_stream" if stream else "add_rms_fwd",
                hints if stream is True or one_pass else one_pass, k.metadata.shared))
bwd_names = ["dy_ptr", "x_ptr", "w_ptr", "rstd_ptr", "dx_ptr", "dw_partial_ptr", "M", "N", "rows_per_program",
             "stride_dym", "stride_xm", "stride_dxm", "dres_ptr", "stride_dresm"]
for one_pass, prefetch in ((True, False), (False, False), (True, True)):
    sig = {n: ("*bf16" if n in ("dy_ptr", "x_ptr", "w_ptr", "dx_ptr", "dres_ptr") else "*fp32" if n.endswith("_ptr")
               else "i32") for n in bwd_names}
    consts = {"HAS_WEIGHT": True, "ONE_PASS": one_pass, "BF16_RNE": False, "BLOCK_M": 2 if prefetch else 1,
              "BLOCK_N": 4096, "LOOP_STAGES": 3, "HAS_DRES": True, "PREFETCH": prefetch}
    sig.update({k: "constexpr" for k in consts})
    k = triton.compile(ASTSource(rms._rms_norm_bwd_kernel, sig, consts, {}), target=T, options={"num_warps": 16})
    out.append(("add_rms_bwd_prefetch" if prefetch else "add_rms_bwd", one_pass, k.metadata.shared))
print(json.dumps([[o[0], str(o[1])] for o in out]))
'''


@pytest.mark.rope
def test_fused_op_kernels_compile_for_sm90(tmp_path):
    import roofkit.ops.glu as glu  # noqa: F401 (the package must import)

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    src = str(pathlib.Path(sys.modules["roofkit.ops.glu"].__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [src, env.get("PYTHONPATH", "")] if p)
    run = subprocess.run([sys.executable, "-c", _COMPILE], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    built = json.loads(run.stdout.strip().splitlines()[-1])
    names = [b[0] for b in built]
    assert names.count("glu_fwd") == names.count("glu_bwd") == 3  # silu, exact and tanh GELU
    assert names.count("rope") == 3 and names.count("rope_bwd") == 1 and names.count("add_rms_fwd") == names.count("add_rms_bwd") == 2
    hints = {b[0]: b[1] for b in built if b[0] in ("add_rms_fwd_stream", "add_rms_fwd") and b[1] != "False"}
    assert hints == {"add_rms_fwd_stream": "(True, True)", "add_rms_fwd": "(False, False)"}, hints
    assert names.count("add_rms_bwd_prefetch") == names.count("add_rms_fwd_prefetch") == 1
    hints = {b[0]: b[1] for b in built if b[0] in ("rope_stream", "rope", "rope_bwd") and b[1].startswith("(")}
    assert hints == {"rope_stream": "(True, True)", "rope": "(False, False)", "rope_bwd": "(False, False)"}, hints
