#!/usr/bin/env bash
# Pre-training throughput on a GPU (issue 14): bf16 base/large, with and without --compile,
# padded and packed (--pack; MFU also counted on real tokens only).
# Runs from the working tree on the machine's own torch; writes $OUT/gpu_bench.json.
# Without CUDA it runs a short CPU fallback (tiny preset, fp32, no MFU).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/results/gpu}"
PYTHON="${PYTHON:-python}"
PYTHONPATH=. exec "$PYTHON" -m bench.gpu_bench --out "$OUT" "$@"
