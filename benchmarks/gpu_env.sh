# Sourced by benchmarks/gpu.sh (and by hand before a probe): outputs under
# $OUT/run (R), the repository's sources first on PYTHONPATH, a per-run cache (autotuner,
# ceilings), the peer wheels of .peers/ when carried, and the GPU's identity and clocks printed.
OUT=${OUT:-/tmp/roofkit-out}; R=$OUT/run; mkdir -p "$R"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 ROOFKIT_CACHE_DIR=$R/cache
python3 -m pip install -q --no-index --no-deps --target /tmp/peers .peers/*.whl 2>/dev/null && export PYTHONPATH=$PYTHONPATH:/tmp/peers
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
