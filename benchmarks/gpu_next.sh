#!/usr/bin/env bash
# GPU work still to run after session 5 (its runs: benchmarks/gpu_session5.sh), in priority order:
#   bash benchmarks/gpu_next.sh [sanitize] [slow] [tests] [bench]
# sanitize: memcheck + racecheck on the small cases: layer_norm and embedding_bag first (their
#           last change, identical copies before layout conversions, was made after the last GPU
#           run), then every op not yet checked (benchmarks/sanitize_registry.py)
# slow:     the > 2**31-element cases (compaction's two-pass default has not run them yet)
# tests:    every GPU test (default configurations: ROOFKIT_AUTOTUNE=0; the autotuner has its own GPU test)
# bench:    quantized GEMM acceptance (int8 / fp8, default accumulation) through roofkit bench
set -uo pipefail
OUT=${OUT:-/tmp/roofkit-out}; R=$OUT/run; mkdir -p "$R"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 ROOFKIT_CACHE_DIR=$R/cache
python3 -m pip install -q --no-index --no-deps --target /tmp/peers .peers/*.whl 2>/dev/null && export PYTHONPATH=$PYTHONPATH:/tmp/peers
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(sanitize slow tests bench)
for step in "${steps[@]}"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    tests) ROOFKIT_AUTOTUNE=0 timeout 400 python3 -m pytest -q -m "gpu and not slow" -p no:cacheprovider --durations=10 > "$R/pytest-gpu.txt" 2>&1; tail -15 "$R/pytest-gpu.txt" ;;
    sanitize) for tool in memcheck racecheck; do
        timeout 280 compute-sanitizer --tool $tool --error-exitcode 9 python3 benchmarks/sanitize_registry.py layer_norm embedding_bag flash_attention quantize dequantize int8_matmul scaled_mm cross_entropy sum mean amax transpose > "$R/sanitizer-$tool.txt" 2>&1; tail -4 "$R/sanitizer-$tool.txt"; done ;;
    slow) timeout 150 python3 -m pytest -q -m slow -p no:cacheprovider > "$R/pytest-slow.txt" 2>&1; tail -5 "$R/pytest-slow.txt" ;;
    bench) for s in "int8_matmul scaled_mm quantize:acceptance"; do
        ops=${s%%:*}; suite=${s##*:}
        timeout 500 python3 -m roofkit.cli bench $ops --suite "$suite" --out "$R/bench-$suite-${ops%% *}" > "$R/bench-$suite-${ops%% *}.txt" 2>&1
        grep -E "│" "$R/bench-$suite-${ops%% *}.txt" | cut -c1-200 | tail -25; done ;;
    *) echo "unknown step $step" ;;
  esac
done
tar -C "$OUT" -czf "$OUT/run.tar.gz" run && rm -rf "$OUT/run"
