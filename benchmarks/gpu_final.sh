#!/usr/bin/env bash
# Session 3's last GPU run (2026-11-30): attention GPU tests + acceptance suite, matmul
# acceptance suite (roofkit vs cuBLAS; torch.compile max-autotune left out for device time).
set -uo pipefail
OUT=${OUT:-/tmp/roofkit-out}; R=$OUT/run; mkdir -p "$R"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 ROOFKIT_CACHE_DIR=$R/cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rk() { timeout "$1" python3 -m roofkit.cli bench "${@:2}"; }
timeout 100 python3 -m pytest tests/test_ops_generic.py tests/ops/test_attention.py -q -m "gpu and not slow" -k "attention" -p no:cacheprovider -x > "$R/pytest-gpu-attention.txt" 2>&1; tail -3 "$R/pytest-gpu-attention.txt"
rk 110 scaled_dot_product_attention --suite acceptance --providers roofkit torch sdpa-flash sdpa-cudnn --out "$R/bench-acceptance-attention" > "$R/bench-attention.txt" 2>&1
rk 80 matmul --suite acceptance --providers roofkit torch --out "$R/bench-acceptance-matmul" > "$R/bench-matmul.txt" 2>&1
for f in "$R"/bench-*.txt; do echo "== $f"; grep -E "│|unverified|error|Error" "$f" | cut -c1-230 | tail -30; done
tar -C "$OUT" -czf "$OUT/run.tar.gz" run && rm -rf "$OUT/run"
