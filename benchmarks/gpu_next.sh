#!/usr/bin/env bash
# GPU work still to run (session 4 ran tests, slow, the llama3-8b benches, masked_select acceptance and
# the sanitizer on matmul / attention / masked_select: benchmarks/gpu_session4.sh), in priority order:
#   bash benchmarks/gpu_next.sh [sanitize] [bench] [tests] [slow]
# sanitize: memcheck + racecheck on the small cases of every other op (benchmarks/sanitize_registry.py)
# bench:    quantized GEMM acceptance (int8 / fp8, default accumulation) through roofkit bench
# tests:    every GPU test (default configurations: ROOFKIT_AUTOTUNE=0; the autotuner has its own GPU test)
# slow:     the > 2**31-element cases
set -uo pipefail
OUT=${OUT:-/tmp/roofkit-out}; R=$OUT/run; mkdir -p "$R"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 ROOFKIT_CACHE_DIR=$R/cache
python3 -m pip install -q --no-index --no-deps --target /tmp/peers .peers/*.whl 2>/dev/null && export PYTHONPATH=$PYTHONPATH:/tmp/peers
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(sanitize bench tests slow)
for step in "${steps[@]}"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    tests) ROOFKIT_AUTOTUNE=0 timeout 400 python3 -m pytest -q -m "gpu and not slow" -p no:cacheprovider --durations=10 > "$R/pytest-gpu.txt" 2>&1; tail -15 "$R/pytest-gpu.txt" ;;
    sanitize) for tool in memcheck racecheck; do
        timeout 280 compute-sanitizer --tool $tool --error-exitcode 9 python3 benchmarks/sanitize_registry.py flash_attention quantize dequantize int8_matmul scaled_mm layer_norm cross_entropy sum mean amax transpose embedding_bag scatter_add index_add > "$R/sanitizer-$tool.txt" 2>&1; tail -4 "$R/sanitizer-$tool.txt"; done ;;
    slow) timeout 150 python3 -m pytest -q -m slow -p no:cacheprovider > "$R/pytest-slow.txt" 2>&1; tail -5 "$R/pytest-slow.txt" ;;
    bench) for s in "int8_matmul scaled_mm quantize:acceptance"; do
        ops=${s%%:*}; suite=${s##*:}
        timeout 500 python3 -m roofkit.cli bench $ops --suite "$suite" --out "$R/bench-$suite-${ops%% *}" > "$R/bench-$suite-${ops%% *}.txt" 2>&1
        grep -E "│" "$R/bench-$suite-${ops%% *}.txt" | cut -c1-200 | tail -25; done ;;
    *) echo "unknown step $step" ;;
  esac
done
tar -C "$OUT" -czf "$OUT/run.tar.gz" run && rm -rf "$OUT/run"
