#!/usr/bin/env bash
# Part-2 kernels on the H200 (one device call): GPU gate tests at the real TP4/TP2 shapes, then the CUDA-graph
# benchmarks of qsa_glue, qk_norm_rope, shared_expert and gdn_decode. Full output under $OUT; short table last.
# Usage (device tool): bash scripts/h200_kernels_part2.sh
set -o pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/r9k-part2}
mkdir -p "$OUT"; export OUT
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/pip.txt" 2>&1 || echo "pip install failed (see pip.txt)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"

# 1. gates at the real shapes (bounded, so the benchmarks always get their time)
timeout "${R9K_TEST_TIMEOUT:-140}" python3 -m pytest -q -m gpu -p no:cacheprovider \
  kernels/qsa_glue kernels/qk_rope kernels/shared_expert kernels/gdn_decode >"$OUT/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?"; tail -n 25 "$OUT/gpu_tests.txt"

# 2. benchmarks
python3 - <<'PY' 2>&1 | tee "$OUT/bench.txt"
import json, os, traceback
from r9k.kernels._bench import fmt_table
from r9k.kernels.gdn_decode._part2_bench import COLS, main_bw

bw = main_bw()
print(f"copy bandwidth {bw / 1e12:.2f} TB/s (read + write)")
rows, extra = [], {}
def step(name, fn):
    try:
        return fn()
    except Exception:
        print(f"{name} FAILED"); traceback.print_exc()
        return None
from r9k.kernels.qsa_glue import bench_qsa_glue
from r9k.kernels.qk_rope import bench_qk_rope
from r9k.kernels.shared_expert import bench_shared_expert
from r9k.kernels.gdn_decode import bench_gdn_decode
for name, fn in [("qsa_glue", lambda: bench_qsa_glue.run(bw)), ("qk_rope", lambda: bench_qk_rope.run(bw)),
                 ("shared_expert", lambda: bench_shared_expert.run(bw))]:
    r = step(name, fn)
    if r:
        rows += r
        print(fmt_table(r, COLS + ["fused p10-p90"]))
r = step("gdn_decode", lambda: bench_gdn_decode.run(bw))
if r:
    rows += r[0]; extra["gdn_warps"] = r[1]
    print(fmt_table(r[1], ["M", "block_v", "num_warps", "fused us"]))
s = step("gemm sweep", bench_shared_expert.sweep_gemm)
if s:
    extra["gemm_sweep"] = s
    print(fmt_table(s, ["config", "gate_up us"]))
json.dump({"bw": bw, "rows": rows, "extra": extra}, open(os.path.join(os.environ.get("OUT", "/tmp"), "bench.json"), "w"), indent=1)
print("\nPART-2 TABLE (H200, CUDA-graph replay, median us per call)")
print(fmt_table(rows, COLS))
PY
