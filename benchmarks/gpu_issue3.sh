#!/usr/bin/env bash
# Issue 3 GPU runs: bash benchmarks/gpu_issue3.sh STEP... with STEP in
#   tests (matmul GPU tests, default configurations), sweep[:CASES] (sweep_matmul.py), bench (llama3-8b + acceptance suites)
set -uo pipefail
OUT=${OUT:-/tmp/roofkit-out}; R=$OUT/run; mkdir -p "$R"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 ROOFKIT_CACHE_DIR=$R/cache
python3 -m pip install -q --no-index --no-deps --target /tmp/peers .peers/*.whl 2>/dev/null && export PYTHONPATH=$PYTHONPATH:/tmp/peers
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
for step in "$@"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    tests) ROOFKIT_AUTOTUNE=0 timeout 300 python3 -m pytest ${ROOFKIT_TESTS:-tests/ops/test_matmul.py tests/ops/test_autotune.py} -q -m "gpu and not slow" -p no:cacheprovider --durations=8 > "$R/pytest-gpu.txt" 2>&1; tail -25 "$R/pytest-gpu.txt" ;;
    sweep*) IFS=: read -r _ only <<<"$step"
      timeout 420 python3 benchmarks/sweep_matmul.py --json "$R/sweep-matmul.json" ${only:+--only "$only"} > "$R/sweep-matmul.txt" 2>&1; grep -A20 "best per case" "$R/sweep-matmul.txt"; grep -c WRONG "$R/sweep-matmul.txt" ;;
    bench) timeout 500 python3 -m roofkit.cli bench matmul --suite llama3-8b --out "$R/bench-llama3-8b" > "$R/bench-llama3-8b.txt" 2>&1
      timeout 400 python3 -m roofkit.cli bench matmul --suite acceptance --out "$R/bench-acceptance" > "$R/bench-acceptance.txt" 2>&1
      for f in "$R"/bench-*.txt; do echo "== $f"; grep -E "│|unverified|error" "$f" | cut -c1-190 | tail -30; done ;;
    *) echo "unknown step $step" ;;
  esac
done
tar -C "$OUT" -czf "$OUT/run.tar.gz" run && rm -rf "$OUT/run"
