#!/usr/bin/env bash
# One device call that (1) runs every kernel test on the H200 (the GPU gates at the real TP4/TP2 shard shapes
# included) and writes JUnit XML for `r9kctl gate --import-junit` here, and (2) re-runs the decode-step plan
# (stock vs tp4-default, per-op agreement, graph nodes, ablation).
#   bash scripts/h200_final.sh            (on the device machine; $OUT collects the results)
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/r9k_final_out}
mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/tmp/pip.log 2>&1 || { echo "pip install failed"; tail /tmp/pip.log; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
git rev-parse HEAD 2>/dev/null | tee "$OUT/commit.txt"
t0=$(date +%s)
timeout "${T_GATES:-230}" python3 -m pytest -q -p no:cacheprovider kernels -o junit_family=xunit1 \
  --junitxml="$OUT/gates-h200.xml" >"$OUT/gates.log" 2>&1
echo "gates rc=$? in $(( $(date +%s) - t0 )) s"; tail -n 12 "$OUT/gates.log"
t0=$(date +%s)
timeout "${T_BENCH:-200}" python3 -m r9k.kernels.decode_step.bench --plan kernels/decode_step/plans/h200_tp4-default_vs_stock.json \
  --out "$OUT/decode_step.json" 2>"$OUT/decode_step.log" >"$OUT/decode_step.txt"
echo "decode-step rc=$? in $(( $(date +%s) - t0 )) s"
grep -E "Error|Traceback" "$OUT/decode_step.log" | head -5
cat "$OUT/decode_step.txt"
