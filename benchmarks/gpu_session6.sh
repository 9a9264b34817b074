#!/usr/bin/env bash
# Session 6's GPU work (2026-12-01), in steps:  bash benchmarks/gpu_session6.sh STEP...
# sanitize:  memcheck + racecheck on the small cases of SANITIZE_OPS (default: layer_norm and
#            embedding_bag, whose last change was made after session 5's final GPU run)
# slow:      the > 2**31-element cases (pytest -m slow)
# msprobe:   where masked_select's time goes at 0 / 5 / 50 % kept (probe_masked_select.py)
# mmbench:   roofkit bench matmul, acceptance and llama3-8b suites, every provider (torch,
#            torch.compile max-autotune-no-cudagraphs, and the unfused torch sequence)
# msbench:   roofkit bench masked_select --suite acceptance two ways: every provider, and roofkit
#            and torch only (run 3 also tried SYNC "spin", a host polling the count's event: slower, removed)
# overlap:   sweep_matmul.py's overlap pair (plain / bias+GELU over two-CTA and warp-specialized configurations)
# bench:     roofkit bench BENCH ("ops:suite", comma-separated; default embedding_bag:dlrm), every provider
# tests:     GPU tests (TEST_MARK, default "gpu and not slow"; TEST_FILES, default all)
# Outputs accumulate under $OUT/run, tarred into $OUT/run.tar.gz after every step.
set -uo pipefail
. benchmarks/gpu_env.sh
for step in "$@"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    sanitize) for tool in memcheck racecheck; do
        timeout ${SANITIZE_TIMEOUT:-150} compute-sanitizer --tool $tool --error-exitcode 9 python3 benchmarks/sanitize_registry.py ${SANITIZE_OPS:-layer_norm embedding_bag} > "$R/sanitizer-$tool.txt" 2>&1; echo "$tool rc=$?"; tail -3 "$R/sanitizer-$tool.txt"; done ;;
    slow) timeout 150 python3 -m pytest -q -m slow -p no:cacheprovider > "$R/pytest-slow.txt" 2>&1; tail -5 "$R/pytest-slow.txt" ;;
    msprobe) timeout 150 python3 benchmarks/probe_masked_select.py --json "$R/probe-masked-select.json" > "$R/probe-masked-select.txt" 2>&1; cat "$R/probe-masked-select.txt" | tail -60 ;;
    mmbench) for suite in acceptance llama3-8b; do
        timeout ${MM_TIMEOUT:-280} python3 -m roofkit.cli bench matmul --suite $suite --out "$R/bench-$suite-matmul" > "$R/bench-$suite-matmul.txt" 2>&1; echo "rc=$?"
        grep -E "│" "$R/bench-$suite-matmul.txt" | cut -c1-220 | tail -30; done ;;
    msbench) for v in pinned pinned-2; do
        prov=""; [ $v = pinned-2 ] && prov="--providers roofkit torch"
        timeout 120 python3 -c "import sys, roofkit.ops.compact as C; C.SYNC = '${v%-2}'; from roofkit.cli import main; sys.exit(main(sys.argv[1:]))" \
          bench masked_select --suite acceptance $prov --out "$R/bench-acceptance-masked_select-$v" > "$R/bench-acceptance-masked_select-$v.txt" 2>&1
        echo "SYNC $v rc=$?"; grep -E "│ masked_select.*roofkit|│ masked_select.*torch  " "$R/bench-acceptance-masked_select-$v.txt" | cut -c1-150; done ;;
    overlap) timeout 200 python3 benchmarks/sweep_matmul.py --only "overlap ffn_up+bias+gelu,overlap ffn_up" --json "$R/sweep-overlap.json" > "$R/sweep-overlap.txt" 2>&1; grep -vE "^\s*$" "$R/sweep-overlap.txt" | cut -c1-230 | tail -24 ;;
    bench) IFS=, read -ra benches <<< "${BENCH:-embedding_bag:dlrm}"
      for b in "${benches[@]}"; do ops=${b%%:*}; suite=${b##*:}
        timeout 200 python3 -m roofkit.cli bench $ops --suite "$suite" --out "$R/bench-$suite-${ops%% *}" > "$R/bench-$suite-${ops%% *}.txt" 2>&1
        echo "rc=$?"; grep -E "│" "$R/bench-$suite-${ops%% *}.txt" | cut -c1-170 | tail -30; done ;;
    tests) ROOFKIT_AUTOTUNE=0 timeout ${TEST_TIMEOUT:-400} python3 -m pytest -q -m "${TEST_MARK:-gpu and not slow}" -p no:cacheprovider --durations=10 ${TEST_FILES:-} > "$R/pytest-gpu.txt" 2>&1; tail -15 "$R/pytest-gpu.txt" ;;
    *) echo "unknown step $step" ;;
  esac
  tar -C "$OUT" -czf "$OUT/run.tar.gz" run
done
