#!/usr/bin/env bash
# Session 8's GPU runs (2026-12-01): the Gluon ping-pong GEMM (roofkit.ops._gemm_ws), issue 3.
#   bash benchmarks/gpu_session8.sh STEP...
# pp:       benchmarks/probe_pingpong.py: float64 verification of every ping-pong configuration,
#           then timing against cuBLAS, the unfused torch sequence and the Triton kernels
# ppquick:  the same, timing only the fused-GELU / ffn_up / 8192^3 shapes
# power:    benchmarks/probe_pingpong_power.py: per epilogue, steady-state time with the SM clock,
#           board power and throttle reasons sampled through NVML
# diag:     benchmarks/probe_pingpong_diag.py: GELU epilogue overlapped vs forced serial
# fused:    benchmarks/check_fused_gelu.py: plain / fused / unfused / cuBLAS interleaved, 3 rounds
# ppverify: the probe's float64 verification only
# mmtests:  tests/ops/test_matmul.py and the registry's matmul / linear cases on the GPU
# bench:    roofkit bench matmul --suite acceptance and --suite llama3-8b (roofkit, torch)
# t3:       GPU tests of the ops whose input checks moved to _common.copy_to_host_async
#           (cross_entropy, embedding_bag, scatter), not run on a GPU since that change
set -uo pipefail
. benchmarks/gpu_env.sh
for step in "$@"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    pp) timeout 420 python3 benchmarks/probe_pingpong.py --json "$R/probe-pingpong.json" > "$R/probe-pingpong.txt" 2>&1; echo "rc=$?"
        grep -v "^ok \|^  " "$R/probe-pingpong.txt" | tail -30 ;;
    ppquick) timeout 420 python3 benchmarks/probe_pingpong.py --quick --json "$R/probe-pingpong.json" > "$R/probe-pingpong.txt" 2>&1; echo "rc=$?"
        grep -v "^ok \|^  " "$R/probe-pingpong.txt" | tail -30 ;;
    power) timeout 300 python3 benchmarks/probe_pingpong_power.py > "$R/probe-pingpong-power.txt" 2>&1; echo "rc=$?"; tail -14 "$R/probe-pingpong-power.txt" ;;
    diag) timeout 300 python3 benchmarks/probe_pingpong_diag.py > "$R/probe-pingpong-diag.txt" 2>&1; echo "rc=$?"; tail -13 "$R/probe-pingpong-diag.txt" ;;
    fused) timeout 300 python3 benchmarks/check_fused_gelu.py --rounds 3 --json "$R/check-fused-gelu.json" > "$R/check-fused-gelu.txt" 2>&1; echo "rc=$?"; tail -8 "$R/check-fused-gelu.txt" ;;
    ppverify) timeout 300 python3 benchmarks/probe_pingpong.py --skip-timing --json "$R/probe-pingpong-verify.json" > "$R/probe-pingpong-verify.txt" 2>&1; echo "rc=$?"; grep -v "^ok \|^  " "$R/probe-pingpong-verify.txt" | tail -8 ;;
    mmtests) ROOFKIT_AUTOTUNE=0 timeout 400 python3 -m pytest -q -m "not slow" -p no:cacheprovider tests/ops/test_matmul.py > "$R/pytest-gpu-matmul.txt" 2>&1; tail -4 "$R/pytest-gpu-matmul.txt"
        ROOFKIT_AUTOTUNE=0 timeout 300 python3 -m pytest -q -m "not slow" -p no:cacheprovider tests/test_ops_generic.py -k "matmul or linear" > "$R/pytest-gpu-generic-matmul.txt" 2>&1; tail -3 "$R/pytest-gpu-generic-matmul.txt" ;;
    bench) timeout 400 python3 -m roofkit.cli bench matmul --suite acceptance --providers roofkit torch --out "$R/bench-acceptance-matmul" > "$R/bench-acceptance-matmul.txt" 2>&1; echo "rc=$?"; grep -E "TFLOP|GB/s" "$R/bench-acceptance-matmul.txt" | cut -c1-170 | head -20
        timeout 400 python3 -m roofkit.cli bench matmul --suite llama3-8b --providers roofkit torch --out "$R/bench-llama3-8b-matmul" > "$R/bench-llama3-8b-matmul.txt" 2>&1; echo "rc=$?"; grep -E "TFLOP|geomean" "$R/bench-llama3-8b-matmul.txt" | cut -c1-170 | head -20 ;;
    t3) ROOFKIT_AUTOTUNE=0 timeout 300 python3 -m pytest -q -m "not slow" -p no:cacheprovider tests/ops/test_cross_entropy.py tests/ops/test_embedding_bag.py tests/ops/test_scatter.py > "$R/pytest-gpu-t3.txt" 2>&1; tail -4 "$R/pytest-gpu-t3.txt" ;;
    *) echo "unknown step $step" ;;
  esac
  tar -C "$OUT" -czf "$OUT/run.tar.gz" run
done
