#!/usr/bin/env bash
# One GPU session's work, run on the lent H200 through the device tool (see benchmarks/NOTES.md):
#   bash benchmarks/gpu_run.sh STEP...   with STEP in: measure tests slow sanitize sweep bench:SUITE[:OPS]
# ROOFKIT_TESTS="paths..." narrows the pytest steps to those test paths.
# Uses the image's torch/triton (roofkit from src/, no install), the peers from .peers/ when
# carried. Everything lands in $OUT/run (tarred to $OUT/run.tar.gz at the end) and $OUT/log.txt.
set -uo pipefail
OUT=${OUT:-/tmp/roofkit-out}
R=$OUT/run
mkdir -p "$R"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 ROOFKIT_CACHE_DIR=$R/cache
if ls .peers/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/peers .peers/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/peers
fi
rk() { python3 -m roofkit.cli "$@"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$R/nvidia-smi.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
for step in "$@"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    measure) timeout 200 python3 -m roofkit.cli device --measure --json "$R/ceilings.json" ;;
    tests) timeout 400 python3 -m pytest ${ROOFKIT_TESTS:-} -q -m "gpu and not slow" -p no:cacheprovider --durations=15 -x 2>&1 | tee "$R/pytest-gpu.txt" | tail -40 ;;
    slow) timeout 300 python3 -m pytest ${ROOFKIT_TESTS:-} -q -m slow -p no:cacheprovider 2>&1 | tee "$R/pytest-slow.txt" | tail -15 ;;
    sanitize)
      for tool in memcheck racecheck; do
        timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 python3 benchmarks/sanitize_cases.py 2>&1 | tee "$R/sanitizer-$tool.txt" | tail -6
      done ;;
    sweep) timeout 400 python3 benchmarks/sweep.py 2>&1 | tee "$R/sweep.txt" ;;
    bench:*)
      IFS=: read -r _ suite ops <<<"$step"
      timeout 420 python3 -m roofkit.cli bench ${ops//,/ } --suite "$suite" --out "$R/bench-$suite${ops:+-${ops//,/-}}" ;;
    *) echo "unknown step $step" ;;
  esac
done
tar -C "$OUT" -czf "$OUT/run.tar.gz" run && rm -rf "$R"
