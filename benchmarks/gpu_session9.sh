#!/usr/bin/env bash
# Session 9's GPU runs (2026-12-01), issue 3.
#   bash benchmarks/gpu_session9.sh STEP...
# tests:    GPU tests never run on a GPU since session 8's last run: the ping-pong tests, matmul,
#           embedding_bag (ROOFKIT_AUTOTUNE=0)
# sanitize: compute-sanitizer memcheck, racecheck and synccheck on benchmarks/sanitize_pingpong.py
# wd2:      the WAIT_DEPTH = 2 ping-pong on the sanitizer's small case, under a 60 s timeout
#           (session 8's attempt hung)
# epi:      benchmarks/probe_epilogue_cost.py (epilogue parts, WAIT_DEPTH 1 and, if wd2 passed, 2)
# forms:    benchmarks/probe_epilogue_cost.py --set forms (the GELU's last-step form, epilogues
#           repeated 1-3 times)
# fused:    benchmarks/check_fused_gelu.py, 3 rounds
# fp8tests: tests/ops/test_scaled_mm_ws.py, tests/ops/test_quant.py and the embedding_bag
#           float64 test on the GPU
# fp8:      benchmarks/check_scaled_mm_ws.py (8192^3 e4m3: warp-specialized vs Triton kernel vs
#           torch._scaled_mm, default and fast accumulation), 3 rounds
# flush:    benchmarks/probe_flush.py (GEMV, copy and pure 32 MiB reads after each L2 flush kind)
# pptests:  tests/ops/test_matmul_pingpong.py on the GPU
# fp8bench: roofkit bench scaled_mm --suite acceptance and --suite llama3-8b (roofkit, torch)
set -uo pipefail
. benchmarks/gpu_env.sh
WD2=0
for step in "$@"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    tests) ROOFKIT_AUTOTUNE=0 timeout 420 python3 -m pytest -q -m "not slow" -p no:cacheprovider tests/ops/test_matmul_pingpong.py tests/ops/test_matmul.py tests/ops/test_embedding_bag.py > "$R/pytest-gpu.txt" 2>&1; echo "rc=$?"; grep -E "passed|failed|FAILED|Error" "$R/pytest-gpu.txt" | tail -12 ;;
    sanitize) for tool in memcheck racecheck synccheck; do
        timeout 200 compute-sanitizer --tool $tool python3 benchmarks/sanitize_pingpong.py > "$R/sanitizer-$tool.txt" 2>&1; echo "$tool rc=$?"; tail -4 "$R/sanitizer-$tool.txt"; done ;;
    wd2) timeout 60 python3 benchmarks/sanitize_pingpong.py 2 > "$R/wd2.txt" 2>&1; rc=$?; echo "rc=$rc"; cat "$R/wd2.txt" | tail -3; [ $rc = 0 ] && WD2=1 ;;
    epi) if [ $WD2 = 1 ]; then depths="1 2"; else depths="1"; fi
        timeout 400 python3 benchmarks/probe_epilogue_cost.py --wait-depth $depths --json "$R/probe-epilogue-cost.json" > "$R/probe-epilogue-cost.txt" 2>&1; echo "rc=$?"; grep -v "^round" "$R/probe-epilogue-cost.txt" | tail -20 ;;
    forms) timeout 400 python3 benchmarks/probe_epilogue_cost.py --set forms --json "$R/probe-epilogue-forms.json" > "$R/probe-epilogue-forms.txt" 2>&1; echo "rc=$?"; grep -v "^round" "$R/probe-epilogue-forms.txt" | tail -14 ;;
    fp8tests) ROOFKIT_AUTOTUNE=0 timeout 400 python3 -m pytest -q -m "not slow" -p no:cacheprovider tests/ops/test_scaled_mm_ws.py tests/ops/test_quant.py > "$R/pytest-gpu-fp8.txt" 2>&1; echo "rc=$?"; grep -E "passed|failed|FAILED|Error" "$R/pytest-gpu-fp8.txt" | tail -12
        ROOFKIT_AUTOTUNE=0 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/ops/test_embedding_bag.py -k float64_reference > "$R/pytest-gpu-eb.txt" 2>&1; echo "rc=$?"; tail -2 "$R/pytest-gpu-eb.txt" ;;
    fp8) timeout 400 python3 benchmarks/check_scaled_mm_ws.py --rounds 3 --json "$R/check-scaled-mm-ws.json" > "$R/check-scaled-mm-ws.txt" 2>&1; echo "rc=$?"; grep -v "^round" "$R/check-scaled-mm-ws.txt" | tail -24 ;;
    fp8bench) for suite in acceptance llama3-8b; do
        timeout 300 python3 -m roofkit.cli bench scaled_mm --suite $suite --providers roofkit torch --out "$R/bench-$suite-scaled_mm" > "$R/bench-$suite-scaled_mm.txt" 2>&1; echo "$suite rc=$?"; grep -E "TFLOP|geomean|FAIL" "$R/bench-$suite-scaled_mm.txt" | cut -c1-170 | head -14; done ;;
    flush) timeout 200 python3 benchmarks/probe_flush.py > "$R/probe-flush.txt" 2>&1; echo "rc=$?"; cat "$R/probe-flush.txt" | tail -8 ;;
    pptests) ROOFKIT_AUTOTUNE=0 timeout 300 python3 -m pytest -q -m "not slow" -p no:cacheprovider tests/ops/test_matmul_pingpong.py > "$R/pytest-gpu-pingpong.txt" 2>&1; echo "rc=$?"; tail -2 "$R/pytest-gpu-pingpong.txt" ;;
    fused) timeout 300 python3 benchmarks/check_fused_gelu.py --rounds 3 --json "$R/check-fused-gelu.json" > "$R/check-fused-gelu.txt" 2>&1; echo "rc=$?"; tail -6 "$R/check-fused-gelu.txt" ;;
    *) echo "unknown step $step" ;;
  esac
  tar -C "$OUT" -czf "$OUT/run.tar.gz" run
done
