#!/usr/bin/env bash
# Session 5's GPU work (2026-12-01), in steps:  bash benchmarks/gpu_session5.sh STEP...
# scatter:   index_add atomic-path sweep (vector reductions, tiles, warps): sweep_scatter.py
# ln:        layer_norm backward sweep (tiles, warps, programs per SM, pipelining, joint sums): sweep_layer_norm.py
# compact:   compaction variant sweep: sweep_compact.py
# embbag:    embedding_bag forward / backward sweep: sweep_embedding_bag.py
# qmm:       scaled_mm fp8 tile sweep with default accumulation: sweep_scaled_mm.py
# lnrace:    layer_norm forward statistics run to run, stored as computed or made identical (probe_ln_race.py), and racecheck with hazard values
# sanitize:  memcheck + racecheck on the small cases of the ops not yet checked (sanitize_registry.py)
# bench5:    roofkit bench of the issue-5 ops changed this session (acceptance suites, all providers)
# tests:     the GPU tests of the ops changed this session (default configurations)
# Outputs accumulate under $OUT/run (across invocations of one run), tarred into $OUT/run.tar.gz after
# every step (a cut-off run still returns data).
set -uo pipefail
OUT=${OUT:-/tmp/roofkit-out}; R=$OUT/run; mkdir -p "$R"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 ROOFKIT_CACHE_DIR=$R/cache
python3 -m pip install -q --no-index --no-deps --target /tmp/peers .peers/*.whl 2>/dev/null && export PYTHONPATH=$PYTHONPATH:/tmp/peers
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
for step in "$@"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    scatter) timeout 200 python3 benchmarks/sweep_scatter.py --json "$R/sweep-scatter.json" > "$R/sweep-scatter.txt" 2>&1; tail -40 "$R/sweep-scatter.txt" ;;
    ln) timeout 200 python3 benchmarks/sweep_layer_norm.py --json "$R/sweep-layer-norm.json" > "$R/sweep-layer-norm.txt" 2>&1; head -14 "$R/sweep-layer-norm.txt"; grep -E "WRONG|Error" "$R/sweep-layer-norm.txt" | head -5 ;;
    compact) timeout 240 python3 benchmarks/sweep_compact.py --json "$R/sweep-compact.json" > "$R/sweep-compact.txt" 2>&1; tail -40 "$R/sweep-compact.txt" ;;
    embbag) timeout 240 python3 benchmarks/sweep_embedding_bag.py --json "$R/sweep-embedding-bag.json" > "$R/sweep-embedding-bag.txt" 2>&1; tail -40 "$R/sweep-embedding-bag.txt" ;;
    qmm) timeout 200 python3 benchmarks/sweep_scaled_mm.py --json "$R/sweep-scaled-mm.json" > "$R/sweep-scaled-mm.txt" 2>&1; tail -14 "$R/sweep-scaled-mm.txt" ;;
    lnrace) timeout 150 python3 benchmarks/probe_ln_race.py > "$R/probe-ln-race.txt" 2>&1; cat "$R/probe-ln-race.txt" | tail -20
        timeout 200 compute-sanitizer --tool racecheck --racecheck-report hazard python3 benchmarks/probe_ln_race.py --reps 1 --no-time --max-numel 400000 > "$R/probe-ln-racecheck.txt" 2>&1; grep -E "Value|hazard|SUMMARY|calls with" "$R/probe-ln-racecheck.txt" | sort | uniq -c | sort -rn | head -20 ;;
    sanitize) for tool in memcheck racecheck; do
        timeout 280 compute-sanitizer --tool $tool --error-exitcode 9 python3 benchmarks/sanitize_registry.py ${SANITIZE_OPS:-layer_norm cross_entropy sum mean amax transpose embedding_bag scatter_add index_add} > "$R/sanitizer-$tool.txt" 2>&1; echo "$tool rc=$?"; tail -3 "$R/sanitizer-$tool.txt"; done ;;
    bench5) IFS=, read -ra benches <<< "${BENCH5:-index_add scatter_add:acceptance,layer_norm:acceptance,masked_select:acceptance,embedding_bag:dlrm}"
      for s in "${benches[@]}"; do
        ops=${s%%:*}; suite=${s##*:}
        timeout 400 python3 -m roofkit.cli bench $ops --suite "$suite" --out "$R/bench-$suite-${ops%% *}" > "$R/bench-$suite-${ops%% *}.txt" 2>&1
        grep -E "│" "$R/bench-$suite-${ops%% *}.txt" | cut -c1-170 | tail -30; done ;;
    tests) ROOFKIT_AUTOTUNE=0 timeout 300 python3 -m pytest -q -m "${TEST_MARK:-not slow}" -p no:cacheprovider ${TEST_FILES:-tests/ops/test_scatter.py tests/ops/test_layer_norm.py tests/ops/test_compact.py tests/ops/test_embedding_bag.py} > "$R/pytest-gpu.txt" 2>&1; tail -15 "$R/pytest-gpu.txt" ;;
    *) echo "unknown step $step" ;;
  esac
  tar -C "$OUT" -czf "$OUT/run.tar.gz" run
done
