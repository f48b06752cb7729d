#!/usr/bin/env bash
# Part-1 kernels on the H200, one device call: benchmarks (CUDA-graph replay, optional tile sweep),
# then the real-shape gate tests. Full logs and JSON under $OUT; short tables printed last.
#   bash scripts/h200_kernels_part1.sh [--sweep]
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/r9k_k1_out}
mkdir -p "$OUT"
SWEEP=${1:-}
python3 -m pip install -q --no-deps --no-build-isolation -e . >/tmp/pip.log 2>&1 || { echo "pip install failed"; tail /tmp/pip.log; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
T_FP8=${T_FP8:-100}; T_HC=${T_HC:-65}; T_ROUTER=${T_ROUTER:-45}; T_TEST=${T_TEST:-50}; T_NCU=${T_NCU:-25}
# results.tar (tuned files + bench JSON) is refreshed after every step, so a run cut short still returns them.
pack() { mkdir -p /tmp/res && for d in fp8_block hc_mix router; do cp kernels/$d/tuned_h200.json /tmp/res/tuned_$d.json 2>/dev/null; done; mv "$OUT"/*.json /tmp/res/ 2>/dev/null; tar cf "$OUT/results.tar" -C /tmp/res .; }
timeout "$T_FP8" python3 -m r9k.kernels.fp8_block.bench_fp8_block $SWEEP --json "$OUT/fp8.json" >"$OUT/fp8.log" 2>&1; echo "fp8 bench rc=$?"; pack
timeout "$T_HC" python3 -m r9k.kernels.hc_mix.bench_hc_mix $SWEEP --json "$OUT/hc.json" >"$OUT/hc.log" 2>&1; echo "hc bench rc=$?"; pack
timeout "$T_ROUTER" python3 -m r9k.kernels.router.bench_router $SWEEP --json "$OUT/router.json" >"$OUT/router.log" 2>&1; echo "router bench rc=$?"; pack
timeout "$T_TEST" python3 -m pytest -q -m gpu -p no:cacheprovider kernels/fp8_block kernels/hc_mix kernels/router \
  >"$OUT/pytest_gpu.log" 2>&1; echo "pytest gpu rc=$?"
tail -n 12 "$OUT/pytest_gpu.log"
echo "results.tar: $(tar tf "$OUT/results.tar" | tr "\n" " ")"
grep -h "^best\|copy bandwidth" "$OUT"/*.log
for f in fp8 hc router; do echo "== $f"; grep -A40 "^| op" "$OUT/$f.log" | cut -c1-400; done
# What bounds each kernel: one cold launch of each under Nsight Compute (clocks left alone).
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  timeout "$T_NCU" "$NCU" --clock-control none --profile-from-start off --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section WarpStateStats python3 -m r9k.kernels._profile_part1 >"$OUT/ncu.txt" 2>&1
  echo "ncu rc=$?"; grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Grid Size" "$OUT/ncu.txt" | head -40
fi
