#!/usr/bin/env bash
# Session 7's GPU runs (2026-12-01): cross_entropy's staged-row path (roofkit.ops._ce_smem).
#   bash benchmarks/gpu_session7.sh STEP...   (carry .peers for the bench step's peers)
# ce:      benchmarks/probe_ce_smem.py: plans, float64 verification of the new path, bitwise
#          stability, fwd+bwd time against the online path and torch (exits non-zero on a failure)
# cetests: tests/ops/test_cross_entropy.py on the GPU (gpu-marked included, not slow)
# cebench: roofkit bench cross_entropy --suite acceptance, every provider
# cegeneric: the registry's cross_entropy cases on the GPU (tests/test_ops_generic.py -k cross_entropy)
# sanitize: memcheck + racecheck of cross_entropy's registry cases with the staged-row kernel
#           forced onto them (ROOFKIT_SANITIZE_FORCE=smem_ce) and on multi-chunk rows
# ebcheck:  benchmarks/gpu_next.sh's step (embedding_bag's EARLY_CHECK True / False / True)
set -uo pipefail
. benchmarks/gpu_env.sh
for step in "$@"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    ce) timeout 300 python3 benchmarks/probe_ce_smem.py --out "$R" > "$R/probe-ce-smem.txt" 2>&1; rc=$?
        grep -v "^  " "$R/probe-ce-smem.txt" | tail -22; [ $rc -eq 0 ] || { tar -C "$OUT" -czf "$OUT/run.tar.gz" run; exit $rc; } ;;
    cetests) ROOFKIT_AUTOTUNE=0 timeout 240 python3 -m pytest -q -m "not slow" -p no:cacheprovider tests/ops/test_cross_entropy.py > "$R/pytest-gpu-cross_entropy.txt" 2>&1; tail -4 "$R/pytest-gpu-cross_entropy.txt" ;;
    cebench) timeout 300 python3 -m roofkit.cli bench cross_entropy --suite acceptance --out "$R/bench-acceptance-cross_entropy" > "$R/bench-acceptance-cross_entropy.txt" 2>&1
        grep -E "fwd_bwd|GB/s" "$R/bench-acceptance-cross_entropy.txt" | cut -c1-170 | head -40 ;;
    cegeneric) ROOFKIT_AUTOTUNE=0 timeout 200 python3 -m pytest -q -m "not slow" -p no:cacheprovider tests/test_ops_generic.py -k cross_entropy > "$R/pytest-gpu-generic-cross_entropy.txt" 2>&1; tail -4 "$R/pytest-gpu-generic-cross_entropy.txt" ;;
    sanitize) for tool in memcheck racecheck; do
        ROOFKIT_SANITIZE_FORCE=smem_ce timeout ${SANITIZE_TIMEOUT:-150} compute-sanitizer --tool $tool --error-exitcode 9 python3 benchmarks/sanitize_registry.py cross_entropy > "$R/sanitizer-$tool-ce.txt" 2>&1; echo "$tool rc=$?"; tail -3 "$R/sanitizer-$tool-ce.txt"; done ;;
    ebcheck) bash benchmarks/gpu_next.sh ebcheck ;;
    *) echo "unknown step $step" ;;
  esac
  tar -C "$OUT" -czf "$OUT/run.tar.gz" run
done
