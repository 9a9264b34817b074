#!/usr/bin/env bash
# The GPU runs, by named step:   bash benchmarks/gpu.sh STEP...
# Outputs under $OUT/run (benchmarks/gpu_env.sh); a short summary per step on stdout.
# measure:  roofkit device --measure (this GPU's copy / read bandwidth and GEMM rates, cached)
# slow:     pytest -m slow (the > 2**31-element cases)
# tests:    the GPU tests of the op runtime and its plans, attention (large logits), the norms,
#           softmax, reductions, cross_entropy, matmul, scatter, compact and the autotuner
#           (pytest -m gpu; tests/test_plans.py runs in full)
# generic:  the registry-wide float64 checks of attention's GPU cases (gpu_logits_std_30 ...)
# graphs:   tests/test_cuda_graphs.py: every registry case captured in a CUDA graph and replayed
#           (${NPROC}: pytest-xdist workers, whose wheel .peers/ may carry: the cases compile in parallel)
# decode:   benchmarks/hf_decode.py: HF Llama (Llama-3-8B layer shapes, $LAYERS layers) decoding
#           one token at a time, eager against roofkit's RMSNorm and attention
# host:     roofkit bench --suite host (wall time per call and CUDA-graph replay, roofkit and torch)
# e2e:      roofkit e2e llama3-8b, 8 layers, --mode ${MODE:-train}, every provider (${PROVIDERS} to choose;
#           ${PROCESSES}: processes per provider, interleaved; ${STEPS}: timed steps per process;
#           ALTERNATE=1: prefill / decode with the providers in one process, steps alternating)
# training: compute-sanitizer memcheck and racecheck on benchmarks/sanitize_training.py
# staged:   compute-sanitizer memcheck and racecheck on benchmarks/sanitize_staged.py (the staged-row
#           kernel's three modes, amax's backward kernel, rms_norm's prefetching / streaming
#           configurations, rope's streaming hints)
# bench:    roofkit bench $OPS --suite ${SUITE:-llama3-8b} with every installed provider
# eval:     roofkit eval's GPU tests (the zoo on the GPU, the timing exploits) and eval against
#           bench for the straightforward Triton softmax (benchmarks/eval_vs_bench.py)
# sanitize: compute-sanitizer memcheck and racecheck on the small cases of $OPS
# regress:  llama3-8b attention, rms_norm and matmul rows with the sources in $BASE (default
#           scratch/base/src) and with these, then `roofkit report` of the two
set -uo pipefail
. benchmarks/gpu_env.sh
for step in "$@"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    measure) timeout ${T:-300} python3 -m roofkit.cli device --measure --json "$R/device.json" > "$R/device.txt" 2>&1
           echo "rc=$?"; tail -12 "$R/device.txt" ;;
    slow) timeout ${T:-500} python3 -m pytest -q -m slow -p no:cacheprovider ${K:+-k "$K"} > "$R/pytest-gpu-slow.txt" 2>&1
           echo "rc=$?"; grep -E "passed|failed|FAILED|Error" "$R/pytest-gpu-slow.txt" | tail -12 ;;
    tests) timeout ${T:-300} python3 -m pytest -q -m "not slow" -p no:cacheprovider tests/test_plans.py \
             > "$R/pytest-gpu-plans.txt" 2>&1; echo "plans rc=$?"; grep -E "passed|failed|FAILED|Error" "$R/pytest-gpu-plans.txt" | tail -8
           timeout ${T:-300} python3 -m pytest -q -m "gpu and not slow" -p no:cacheprovider tests/test_runtime.py \
             tests/ops/test_attention.py tests/ops/test_rms_norm.py tests/ops/test_layer_norm.py tests/ops/test_softmax.py \
             tests/ops/test_reduce.py tests/ops/test_cross_entropy.py tests/ops/test_matmul.py tests/ops/test_scatter.py \
             tests/ops/test_compact.py tests/ops/test_autotune.py tests/harness/test_host.py > "$R/pytest-gpu.txt" 2>&1; echo "rc=$?"
           grep -E "passed|failed|FAILED|Error" "$R/pytest-gpu.txt" | tail -12 ;;
    eval) timeout ${T:-400} python3 -m pytest -q -m gpu -p no:cacheprovider tests/harness/test_evaluate.py \
             > "$R/pytest-gpu-eval.txt" 2>&1; echo "rc=$?"; grep -E "passed|failed|FAILED|Error" "$R/pytest-gpu-eval.txt" | tail -12
           CASES="gpu_4000x4000 gpu_row_4096" DTYPES=float32 REPS=10 BASELINES=0 timeout 150 python3 \
             benchmarks/eval_vs_bench.py > "$R/eval-vs-bench.txt" 2>&1; echo "eval-vs-bench rc=$?"
           tail -4 "$R/eval-vs-bench.txt" ;;
    generic) timeout ${T:-300} python3 -m pytest -q -m "gpu and not slow" -p no:cacheprovider tests/test_ops_generic.py \
             -k "${K:-attention}" > "$R/pytest-gpu-generic.txt" 2>&1; echo "rc=$?"
           grep -E "passed|failed|FAILED|Error" "$R/pytest-gpu-generic.txt" | tail -12 ;;
    graphs) timeout ${T:-300} python3 -m pytest -q -m "gpu and not slow" -p no:cacheprovider tests/test_cuda_graphs.py \
             ${K:+-k "$K"} ${NPROC:+-n $NPROC} > "$R/pytest-gpu-graphs.txt" 2>&1; echo "rc=$?"
           grep -E "passed|failed|FAILED|Error" "$R/pytest-gpu-graphs.txt" | tail -20 ;;
    host) timeout ${T:-300} python3 -m roofkit.cli bench ${OPS:-} --suite host --providers roofkit torch \
             --out "$R/bench-host" > "$R/bench-host.txt" 2>&1; echo "rc=$?"; tail -40 "$R/bench-host.txt" | cut -c1-200 ;;
    e2e) timeout ${T:-500} python3 -m roofkit.cli e2e --model llama3-8b --layers 8 --mode ${MODE:-train} \
             --providers ${PROVIDERS:-eager torch.compile liger roofkit roofkit-sdpa roofkit+compile} ${PROCESSES:+--processes $PROCESSES} ${STEPS:+--steps $STEPS} ${ALTERNATE:+--alternate} \
             --out "$R/e2e-${MODE:-train}" > "$R/e2e-${MODE:-train}.txt" 2>&1; echo "rc=$?"
           tail -12 "$R/e2e-${MODE:-train}.txt" | cut -c1-200 ;;
    training) for tool in memcheck racecheck; do
             timeout ${T:-200} compute-sanitizer --tool $tool --error-exitcode 9 python3 benchmarks/sanitize_training.py \
               > "$R/sanitizer-training-$tool.txt" 2>&1; echo "$tool rc=$?"; tail -3 "$R/sanitizer-training-$tool.txt"; done ;;
    staged) for tool in memcheck racecheck; do
             timeout ${T:-200} compute-sanitizer --tool $tool --error-exitcode 9 python3 benchmarks/sanitize_staged.py \
               > "$R/sanitizer-staged-$tool.txt" 2>&1; echo "$tool rc=$?"; tail -3 "$R/sanitizer-staged-$tool.txt"; done ;;
    decode) timeout ${T:-300} python3 benchmarks/hf_decode.py --layers ${LAYERS:-4} --json "$R/hf-decode.json" \
             > "$R/hf-decode.txt" 2>&1; echo "rc=$?"; tail -5 "$R/hf-decode.txt" | cut -c1-300 ;;
    bench) timeout ${T:-400} python3 -m roofkit.cli bench ${OPS:-} --suite ${SUITE:-llama3-8b} \
             --out "$R/bench-${SUITE:-llama3-8b}" > "$R/bench-${SUITE:-llama3-8b}.txt" 2>&1; echo "rc=$?"
           tail -60 "$R/bench-${SUITE:-llama3-8b}.txt" | cut -c1-220 ;;
    sanitize) for tool in memcheck racecheck; do
             timeout ${T:-150} compute-sanitizer --tool $tool --error-exitcode 9 python3 benchmarks/sanitize_registry.py \
               ${OPS:-} > "$R/sanitizer-$tool.txt" 2>&1; echo "$tool rc=$?"; tail -8 "$R/sanitizer-$tool.txt"; done ;;
    regress) BASE=${BASE:-$PWD/scratch/base/src}
           for side in before after; do
             src=$PWD/src; [ $side = before ] && src=$BASE
             PYTHONPATH=$src:${PYTHONPATH#*:} timeout ${T:-200} python3 -m roofkit.cli bench ${OPS:-scaled_dot_product_attention} \
               --suite llama3-8b --providers roofkit --out "$R/regress-$side" > "$R/regress-$side.txt" 2>&1; echo "$side rc=$?"
           done
           python3 -m roofkit.cli report "$R/regress-before/results.json" "$R/regress-after/results.json" 2>&1 | tail -15 ;;
    *) echo "unknown step $step" ;;
  esac
  tar -C "$OUT" -czf "$OUT/run.tar.gz" run
done
