#!/usr/bin/env bash
# Session 4's GPU work (2026-11-30), in steps:  bash benchmarks/gpu_session4.sh STEP...
# gemv:      matmul sweep of the small-M shapes (one-launch split-K), device timer
# attention: forward sweep, tile configurations x K/V load path (descriptors / pointers)
# mm:        roofkit bench matmul --suite acceptance (autotuner on: GEMV split-K, fused GELU candidates)
# compact:   roofkit bench masked_select --suite acceptance (all providers)
# flush:     probe_flush.py (how much of a small kernel's cold-L2 time is the flush's write-back)
# llama:     roofkit bench matmul / attention --suite llama3-8b (roofkit and torch; default configurations)
# attn:      roofkit bench scaled_dot_product_attention --suite acceptance (roofkit and torch)
# ctests:    the GPU tests of masked_select / compact
# csweep:    compaction tile / warps sweep (sweep_compact.py)
# sanitize:  memcheck + racecheck on the small cases of matmul (split-K forced), attention, masked_select
# tests:     the GPU tests of matmul and attention (default configurations)
set -uo pipefail
OUT=${OUT:-/tmp/roofkit-out}; R=$OUT/run; mkdir -p "$R"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 ROOFKIT_CACHE_DIR=$R/cache
python3 -m pip install -q --no-index --no-deps --target /tmp/peers .peers/*.whl 2>/dev/null && export PYTHONPATH=$PYTHONPATH:/tmp/peers
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
for step in "$@"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    gemv) timeout 150 python3 benchmarks/sweep_matmul.py --only "gemv 1x4096x4096,decode 16x14336x4096" --json "$R/sweep-gemv.json" > "$R/sweep-gemv.txt" 2>&1
          sed -n '/best per case/,$p' "$R/sweep-gemv.txt"
          python3 - "$R/sweep-gemv.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
for case in sorted({r["case"] for r in rows}):
    rs = sorted((r for r in rows if r["case"] == case and "ms" in r), key=lambda r: r["ms"])[:6]
    for r in rs:
        print(f"{case[:20]:20s} {r['config']:44s} {r['ms'] * 1e3:8.2f} us {r.get('gbps', 0):7.0f} GB/s")
PY
          ;;
    attention) timeout 300 python3 benchmarks/sweep_attention.py --json "$R/sweep-attention.json" > "$R/sweep-attention.txt" 2>&1
          grep -v "compiled/checked" "$R/sweep-attention.txt" | tail -40 ;;
    mm) timeout 250 python3 -m roofkit.cli bench matmul --suite acceptance --providers roofkit torch --out "$R/bench-acceptance-matmul" > "$R/bench-acceptance-matmul.txt" 2>&1
        grep -E "│" "$R/bench-acceptance-matmul.txt" | cut -c1-230 | tail -12 ;;
    compact) timeout 100 python3 -m roofkit.cli bench masked_select --suite acceptance --out "$R/bench-acceptance-compact" > "$R/bench-acceptance-compact.txt" 2>&1
        grep -E "│" "$R/bench-acceptance-compact.txt" | cut -c1-200 | tail -25 ;;
    tests) ROOFKIT_AUTOTUNE=0 timeout 280 python3 -m pytest -q -m "gpu and not slow" -p no:cacheprovider tests/ops/test_matmul.py tests/ops/test_attention.py tests/test_ops_generic.py -k "matmul or attention" > "$R/pytest-gpu.txt" 2>&1; tail -4 "$R/pytest-gpu.txt" ;;
    flush) timeout 60 python3 benchmarks/probe_flush.py > "$R/probe-flush.txt" 2>&1; cat "$R/probe-flush.txt" | tail -8 ;;
    llama) for ops in matmul "scaled_dot_product_attention flash_attention"; do
        f=bench-llama3-8b-${ops%% *}
        ROOFKIT_AUTOTUNE=0 timeout 150 python3 -m roofkit.cli bench $ops --suite llama3-8b --providers roofkit torch --out "$R/$f" > "$R/$f.txt" 2>&1
        grep -E "│" "$R/$f.txt" | cut -c1-150 | grep -v "│  *│  *│" | tail -16; done ;;
    attn) timeout 180 python3 -m roofkit.cli bench scaled_dot_product_attention --suite acceptance --providers roofkit sdpa-flash sdpa-cudnn sdpa-efficient --out "$R/bench-acceptance-attention" > "$R/bench-acceptance-attention.txt" 2>&1
        grep -E "│" "$R/bench-acceptance-attention.txt" | cut -c1-150 | grep -v "│  *│  *│" | tail -14 ;;
    ctests) timeout 90 python3 -m pytest -q -m "gpu and not slow" -p no:cacheprovider tests/ops/test_compact.py tests/test_ops_generic.py -k "compact or masked_select" > "$R/pytest-gpu-compact.txt" 2>&1; tail -2 "$R/pytest-gpu-compact.txt" ;;
    csweep) timeout 120 python3 benchmarks/sweep_compact.py --json "$R/sweep-compact.json" > "$R/sweep-compact.txt" 2>&1; tail -34 "$R/sweep-compact.txt" ;;
    sanitize) for tool in memcheck racecheck; do
        ROOFKIT_SANITIZE_FORCE=split_k timeout 140 compute-sanitizer --tool $tool --error-exitcode 9 python3 benchmarks/sanitize_registry.py matmul scaled_dot_product_attention masked_select > "$R/sanitizer-$tool.txt" 2>&1
        echo "$tool rc=$?"; tail -3 "$R/sanitizer-$tool.txt"; done ;;
    *) echo "unknown step $step" ;;
  esac
  tar -C "$OUT" -czf "$OUT/run.tar.gz.part" run && mv "$OUT/run.tar.gz.part" "$OUT/run.tar.gz"  # what a cut-off run still returns
done
tar -C "$OUT" -czf "$OUT/run.tar.gz" run && rm -rf "$OUT/run"
