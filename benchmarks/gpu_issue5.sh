#!/usr/bin/env bash
# Issue 5 GPU runs (2026-11-30): part A (tests + norms/cross-entropy/reductions/transpose) or
# part B (embedding_bag, scatter/index_add, compaction), part C (cross-entropy profile, dlrm
# re-run), part D (cross-entropy after the fix, llama3-8b suite). Usage: bash benchmarks/gpu_issue5.sh A|B|C|D
set -uo pipefail
OUT=${OUT:-/tmp/roofkit-out}; R=$OUT/run; mkdir -p "$R"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 ROOFKIT_CACHE_DIR=$R/cache
python3 -m pip install -q --no-index --no-deps --target /tmp/peers .peers/*.whl 2>/dev/null && export PYTHONPATH=$PYTHONPATH:/tmp/peers
rk() { timeout "$1" python3 -m roofkit.cli bench "${@:2}"; }
if [ "$1" = D ]; then
  timeout 60 python3 benchmarks/profile_ce.py > "$R/profile-ce.txt" 2>&1; tail -4 "$R/profile-ce.txt"
  rk 100 cross_entropy --suite acceptance --cases logits_8192x128256_fwd_bwd --out "$R/bench-acceptance-ce" > "$R/bench-ce.txt" 2>&1
  rk 330 layer_norm cross_entropy sum mean amax transpose embedding_bag scatter_add index_add masked_select --suite llama3-8b --out "$R/bench-llama3-8b" > "$R/bench-llama3-8b.txt" 2>&1
elif [ "$1" = C ]; then
  timeout 120 python3 benchmarks/profile_ce.py > "$R/profile-ce.txt" 2>&1; tail -22 "$R/profile-ce.txt"
  rk 240 embedding_bag --suite dlrm --cases sum_uniform sum_powerlaw sum_uniform_bwd sum_powerlaw_bwd --out "$R/bench-dlrm" > "$R/bench-dlrm.txt" 2>&1
elif [ "$1" = A ]; then
  timeout 150 python3 -m pytest tests/test_ops_generic.py tests/ops/test_layer_norm.py tests/ops/test_cross_entropy.py -q -m "gpu and not slow" -p no:cacheprovider \
    -k "layer_norm or cross_entropy or gpu_full_odd or embedding_bag-gpu_repeated or embedding_bag-gpu_padding_psw" > "$R/pytest-gpu-rerun.txt" 2>&1; tail -3 "$R/pytest-gpu-rerun.txt"
  rk 200 layer_norm cross_entropy --suite acceptance --cases hidden_32768x4096 hidden_32768x4096_fwd_bwd logits_8192x128256 logits_8192x128256_fwd_bwd --out "$R/bench-acceptance-norm-ce" > "$R/bench-norm-ce.txt" 2>&1
  rk 150 sum transpose --suite acceptance --cases full_256Mi_fp32 square_16384x16384 odd_4095x4097 --out "$R/bench-acceptance-sum-transpose" > "$R/bench-sum-transpose.txt" 2>&1
  timeout 90 python3 benchmarks/sweep.py > "$R/sweep.txt" 2>&1
else
  rk 100 cross_entropy --suite acceptance --cases logits_8192x128256_fwd_bwd --out "$R/bench-acceptance-ce-online" > "$R/bench-ce-online.txt" 2>&1
  rk 200 embedding_bag --suite dlrm --cases sum_uniform sum_powerlaw sum_uniform_bwd sum_powerlaw_bwd --out "$R/bench-dlrm" > "$R/bench-dlrm.txt" 2>&1
  rk 160 scatter_add index_add --suite acceptance --cases rows_1Mix64_L1Mi rows_1Mix64_L1Mi_deterministic 1d_L64Mi_into_1Mi 1d_L64Mi_into_1Mi_deterministic expanded_rows_1Mix64 --out "$R/bench-acceptance-scatter" > "$R/bench-scatter.txt" 2>&1
  rk 120 masked_select --suite acceptance --cases 64Mi_keep_5pct 64Mi_keep_50pct 64Mi_keep_95pct --out "$R/bench-acceptance-compact" > "$R/bench-compact.txt" 2>&1
fi
for f in "$R"/bench-*.txt; do echo "== $f"; grep -E "│|unverified|error" "$f" | cut -c1-170 | tail -40; done
tar -C "$OUT" -czf "$OUT/run.tar.gz" run && rm -rf "$OUT/run"
cat "$R/sweep.txt" 2>/dev/null | grep GB/s
