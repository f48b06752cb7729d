#!/usr/bin/env bash
# The decode step on the H200, one device call: the CPU-made plan (resolved profiles as JSON, since the H200 has
# no pydantic/registry dependencies) is run by r9k.kernels.decode_step.bench: agreement checks, launch sites,
# CUDA-graph nodes and replay times at each request count, per-part device time, the ablation, memory.
#   bash scripts/h200_decode_step.sh [PLAN]
# Plan made here with:
#   r9kctl bench decode-step --profile tp4-default --against stock --requests 1,2,4 --context 4096 --ablate \
#       --export-plan kernels/decode_step/plans/h200_tp4-default_vs_stock.json
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/r9k_ds_out}
mkdir -p "$OUT"
PLAN=${1:-kernels/decode_step/plans/h200_tp4-default_vs_stock.json}
T_TEST=${T_TEST:-60}; T_BENCH=${T_BENCH:-290}
python3 -m pip install -q --no-deps --no-build-isolation -e . >/tmp/pip.log 2>&1 || { echo "pip install failed"; tail /tmp/pip.log; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version,memory.used --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
# GPU-side tests of this package (graph node counter, plain kernels, documented launch counts); registry tests skip.
timeout "$T_TEST" python3 -m pytest -q -p no:cacheprovider kernels/decode_step >"$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; tail -n 4 "$OUT/pytest.log"
timeout "$T_BENCH" python3 -m r9k.kernels.decode_step.bench --plan "$PLAN" --out "$OUT/result.json" \
  2>"$OUT/bench.log" >"$OUT/table.txt"
echo "bench rc=$?"
grep -E "Error|error|Traceback" "$OUT/bench.log" | head -5
cat "$OUT/table.txt"
