#!/usr/bin/env bash
# Session 10's GPU runs (2026-12-01), issue 3.
#   bash benchmarks/gpu_session10.sh STEP...
# logistic:  benchmarks/probe_epilogue_cost.py --set logistic (the GELU's logistic form against the
#            5-term erfc fit, gelu_tanh, silu), on the bench's data and on inputs scaled by 1/64
# fused:     benchmarks/check_fused_gelu.py, 3 rounds (the acceptance figure, the default GELU)
# pptests:   tests/ops/test_matmul_pingpong.py on the GPU
# gemv:      benchmarks/probe_gemv_evict.py (evict-first weight loads after write / read flushes)
# mmtests:   tests/ops/test_matmul.py on the GPU
# bench:     roofkit bench matmul --suite acceptance (roofkit, torch)
# edge:      ROOFKIT_AUTOTUNE=0 roofkit bench matmul --suite edge (the documented defaults: decode M = 16)
# gemvgraph: roofkit bench matmul --suite acceptance --cases gemv_1x4096x4096, eager and --graph
# clocks:    benchmarks/probe_epilogue_clocks.py (time, NVML SM clock, power and cycles per call)
# ncu:       Nsight Compute on one launch of each of probe_epilogue_clocks.py's variants (after a
#            warm-up launch each): speed of light, compute workload, warp states, cycles
set -uo pipefail
. benchmarks/gpu_env.sh
for step in "$@"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    logistic) for sc in ${SCALES:-1 0.015625}; do
        timeout 300 python3 benchmarks/probe_epilogue_cost.py --set logistic --input-scale $sc --json "$R/probe-logistic-$sc.json" > "$R/probe-logistic-$sc.txt" 2>&1; echo "scale $sc rc=$?"; grep -v "^round" "$R/probe-logistic-$sc.txt" | tail -9; done ;;
    fused) timeout 300 python3 benchmarks/check_fused_gelu.py --rounds 3 --json "$R/check-fused-gelu.json" > "$R/check-fused-gelu.txt" 2>&1; echo "rc=$?"; tail -6 "$R/check-fused-gelu.txt" ;;
    pptests) ROOFKIT_AUTOTUNE=0 timeout 300 python3 -m pytest -q -m "not slow" -p no:cacheprovider tests/ops/test_matmul_pingpong.py > "$R/pytest-gpu-pingpong.txt" 2>&1; echo "rc=$?"; grep -E "passed|failed|FAILED|Error" "$R/pytest-gpu-pingpong.txt" | tail -8 ;;
    mmtests) ROOFKIT_AUTOTUNE=0 timeout 400 python3 -m pytest -q -m "not slow" -p no:cacheprovider tests/ops/test_matmul.py > "$R/pytest-gpu-matmul.txt" 2>&1; echo "rc=$?"; grep -E "passed|failed|FAILED|Error" "$R/pytest-gpu-matmul.txt" | tail -8 ;;
    gemv) timeout 200 python3 benchmarks/probe_gemv_evict.py --json "$R/probe-gemv-evict.json" > "$R/probe-gemv-evict.txt" 2>&1; echo "rc=$?"; grep -v "^verify.*ok" "$R/probe-gemv-evict.txt" | tail -16 ;;
    bench) timeout 330 python3 -m roofkit.cli bench matmul --suite acceptance --providers roofkit torch --out "$R/bench-acceptance-matmul" > "$R/bench-acceptance-matmul.txt" 2>&1; echo "rc=$?"; grep -E "TFLOP|GB/s|geomean|FAIL" "$R/bench-acceptance-matmul.txt" | cut -c1-170 | head -14 ;;
    clocks) timeout 200 python3 benchmarks/probe_epilogue_clocks.py --json "$R/probe-epilogue-clocks.json" > "$R/probe-epilogue-clocks.txt" 2>&1; echo "rc=$?"; tail -6 "$R/probe-epilogue-clocks.txt" ;;
    ncu) timeout 300 ncu --clock-control none --kernel-name regex:_matmul_ws_kernel --launch-count 12 --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --metrics gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_elapsed.avg.per_second python3 benchmarks/probe_epilogue_clocks.py --once > "$R/ncu-epilogue.txt" 2>&1; echo "rc=$?"; grep -E "gpu__time_duration.sum|sm__cycles_elapsed.max|per_second|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc Active" "$R/ncu-epilogue.txt" | tail -40 ;;
    edge) ROOFKIT_AUTOTUNE=0 timeout 200 python3 -m roofkit.cli bench matmul --suite edge --providers roofkit torch --out "$R/bench-edge-matmul" > "$R/bench-edge-matmul.txt" 2>&1; echo "rc=$?"; grep -E "roofkit|torch" "$R/bench-edge-matmul.txt" | grep -v "^GPU" | cut -c1-200 | head -12 ;;
    gemvgraph) for g in "" "--graph"; do
        timeout 150 python3 -m roofkit.cli bench matmul --suite acceptance --cases gemv_1x4096x4096 --providers roofkit torch $g --out "$R/bench-gemv$g" > "$R/bench-gemv$g.txt" 2>&1; echo "graph '$g' rc=$?"; grep -E "roofkit|torch" "$R/bench-gemv$g.txt" | grep -v "^GPU" | cut -c1-200 | head -4; done ;;
    *) echo "unknown step $step" ;;
  esac
  tar -C "$OUT" -czf "$OUT/run.tar.gz" run
done
