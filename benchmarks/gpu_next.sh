#!/usr/bin/env bash
# GPU work still to run after session 7 (its runs: benchmarks/gpu_session7.sh), in priority order:
#   bash benchmarks/gpu_next.sh [tests] [multigpu] [mm4095] [ebcheck]
# multigpu: tests/test_device_guard.py on a two-GPU machine (kind nvidia-h200-x2; none was lent in
#          session 7): every op on cuda:1 with cuda:0 current, and a direct torch.ops call
# ebcheck: (done in session 7, run 9: both forms within 1 %) embedding_bag's forward with the input
#          check before / after the gather, dlrm suite, back to back
# tests:   every GPU test in one step (ROOFKIT_AUTOTUNE=0; ~460 tests, ~6.5 minutes: session 6's
#          run was cut at 438 by its own timeout and finished the rest separately)
# mm4095:  a profile of matmul 4095^3 (copies to aligned strides + the GEMM: 274 us against a
#          predicted ~215, torch.compile 218 us)
set -uo pipefail
. benchmarks/gpu_env.sh
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(tests mm4095)
for step in "${steps[@]}"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    ebcheck) for early in True False True; do
        timeout 150 python3 -c "import sys, roofkit.ops.embedding_bag as E; E.EARLY_CHECK = $early; from roofkit.cli import main; sys.exit(main(sys.argv[1:]))" \
          bench embedding_bag --suite dlrm --providers roofkit torch --out "$R/bench-dlrm-embedding_bag-early-$early" > "$R/bench-dlrm-embedding_bag-early-$early.txt" 2>&1
        echo "EARLY_CHECK=$early"; grep -E "│ embedding_bag.*(roofkit|torch )" "$R/bench-dlrm-embedding_bag-early-$early.txt" | cut -c1-150 | head -4; done ;;
    tests) ROOFKIT_AUTOTUNE=0 timeout 560 python3 -m pytest -q -m "gpu and not slow" -p no:cacheprovider --durations=10 > "$R/pytest-gpu.txt" 2>&1; tail -15 "$R/pytest-gpu.txt" ;;
    multigpu) ROOFKIT_AUTOTUNE=0 timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_device_guard.py > "$R/pytest-multigpu.txt" 2>&1; tail -5 "$R/pytest-multigpu.txt" ;;
    mm4095) timeout 200 python3 -c "
import torch, roofkit
a = torch.randn(4095, 4095, device='cuda', dtype=torch.bfloat16); b = torch.randn_like(a)
for _ in range(3): roofkit.matmul(a, b)
torch.cuda.synchronize()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
    for _ in range(5): roofkit.matmul(a, b)
    torch.cuda.synchronize()
print(p.key_averages().table(sort_by='cuda_time_total', row_limit=12))" > "$R/profile-mm4095.txt" 2>&1; tail -20 "$R/profile-mm4095.txt" ;;
    *) echo "unknown step $step" ;;
  esac
  tar -C "$OUT" -czf "$OUT/run.tar.gz" run
done
