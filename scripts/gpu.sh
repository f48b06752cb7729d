#!/usr/bin/env bash
# The one GPU entry point (run on the device machine, from the repository root; results under $OUT):
#   bash scripts/gpu.sh gates [PATH ...]       every gate test under kernels/ and the decode-step test (or PATHs), JUnit XML + provenance
#   bash scripts/gpu.sh bench [OP ...]         every kernel benchmark (python -m r9k.bench.kernels)
#   bash scripts/gpu.sh sweep [OP ...]         the same with the GEMM tile sweeps (writes tuned_<device>.json)
#   bash scripts/gpu.sh decode-step [PLAN]     the decode-step plan (tp4-default against its baselines)
#   bash scripts/gpu.sh ncu                    one launch of each GEMM kernel under Nsight Compute
#   bash scripts/gpu.sh all                    gates, bench, decode-step in that order (each with a time limit)
#   bash scripts/gpu.sh serve [FUSED STOCK]    CUDA vLLM 0.26 from the transferred wheels; the fused profile and its
#                                              stock twin served (r9kctl launch --strict, CUDA graphs), the broken
#                                              kernel refused, agreement, interleaved A/B (scripts/gpu_serve.py;
#                                              notes/gpu-serve.md). Wheels: the pieces part* + wheels.sha256 in
#                                              R9K_WHEELS (/tmp/w), installed into R9K_SITE (/tmp/site); the project's
#                                              own missing wheels (tomlkit, textual, ...) from .gpu-extra/ if present
# vLLM's own kernels (the decode step's stock, the benchmarks' peers) are read from R9K_VLLM_SRC (the folder
# holding vllm/; the device call carries it) when vLLM is not installed. Time limits: T_GATES, T_BENCH, T_STEP.
# $OUT gets (all): gpu.txt, provenance.json, gates-h200.xml, gates.log, kernels.json, bench.log, decode_step.json,
# decode_step.txt; pip, provenance and decode-step stderr logs go to $LOGS.
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/r9k-gpu-out}
LOGS=${LOGS:-/tmp/r9k-gpu-logs}   # side logs stay on the machine: a device call returns at most 8 files of $OUT
mkdir -p "$OUT" "$LOGS"
PLAN_DEFAULT=r9kctl/decode_step/plans/h200_tp4-default_vs_stock.json

setup() {
  [ -n "${GPU_SETUP_DONE:-}" ] && return
  python3 -m pip install -q --no-deps --no-build-isolation -e . >"$LOGS/pip.log" 2>&1 || { echo "pip install failed"; tail -3 "$LOGS/pip.log"; }
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv,noheader | tee "$OUT/gpu.txt"
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
  python3 -c "from r9k.kernels._triton import vllm_peer; print('vLLM peer kernels:', vllm_peer.available())" | tee -a "$OUT/gpu.txt"
  export GPU_SETUP_DONE=1
}

gates() {
  local t0; t0=$(date +%s)
  # The gates' tree is the package folder r9k/ (gate test ids are relative to it: kernels/router/test_router.py::...)
  if [ -f r9k/registry/provenance.py ]; then
    python3 r9k/registry/provenance.py --root r9k --out "$OUT/provenance.json" >"$LOGS/provenance.log" 2>&1 || { echo "provenance failed"; tail -3 "$LOGS/provenance.log"; }
  fi
  local paths=("$@"); [ ${#paths[@]} -eq 0 ] && paths=(r9k/kernels)
  # -p provenance (r9k/registry/provenance.py as a plugin) stamps the XML with the tree hash and toolchain
  timeout "${T_GATES:-240}" env PYTHONPATH="r9k/registry${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest -q \
    -p no:cacheprovider -p provenance --rootdir r9k "${paths[@]}" -o junit_family=xunit1 \
    --junitxml="$OUT/gates-h200.xml" >"$OUT/gates.log" 2>&1
  echo "gates rc=$? in $(( $(date +%s) - t0 )) s"; tail -n 3 "$OUT/gates.log"; grep -E "^(FAILED|ERROR) " "$OUT/gates.log" | head -10
  if [ $# -eq 0 ]; then  # the decode-step model's own tests, on the GPU too (not gates: outside the package)
    timeout "${T_GATES:-240}" python3 -m pytest -q -p no:cacheprovider tests/evidence/test_decode_step.py >"$OUT/decode_step_tests.log" 2>&1
    echo "decode-step tests rc=$?"; tail -n 1 "$OUT/decode_step_tests.log"
  fi
}

bench() {
  local t0; t0=$(date +%s)
  timeout "${T_BENCH:-300}" python3 -m r9k.bench.kernels "$@" --json "$OUT/kernels.json" >"$OUT/bench.log" 2>&1
  echo "bench rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "^FAILED|Error" "$OUT/bench.log" | head -5
}

decode_step() {
  local t0; t0=$(date +%s)
  timeout "${T_STEP:-300}" python3 -m r9k.r9kctl.decode_step.run --plan "${1:-$PLAN_DEFAULT}" \
    --out "$OUT/decode_step.json" 2>"$LOGS/decode_step.log" >"$OUT/decode_step.txt"
  echo "decode-step rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "Error|Traceback" -A3 "$LOGS/decode_step.log" | head -12
}

ncu_calls() {
  local NCU; NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  [ -z "$NCU" ] && { echo "no ncu"; return; }
  timeout "${T_NCU:-60}" "$NCU" --clock-control none --profile-from-start off --section SpeedOfLight --section Occupancy \
    --section LaunchStats python3 -m r9k.bench.ncu_calls >"$OUT/ncu.txt" 2>&1
  echo "ncu rc=$?"; grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Grid Size" "$OUT/ncu.txt" | head -40
}

# CUDA vLLM from the transferred wheel set: join, check, install (once), then check that it imports with this
# torch. A fault is one line naming the missing piece, module or version, exit 2.
vllm_env() {
  local W=${R9K_WHEELS:-/tmp/w} SITE=${R9K_SITE:-/tmp/site}
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  if [ ! -d "$SITE/vllm" ]; then
    local parts; parts=$(ls "$W"/part* 2>/dev/null | sort)
    [ -z "$parts" ] && { echo "gpu.sh serve: error[wheels]: no wheel pieces (part00 ...) in $W and no vLLM in $SITE"; exit 2; }
    [ -f "$W/wheels.sha256" ] || { echo "gpu.sh serve: error[wheels]: $W/wheels.sha256 is missing (it travels with part00)"; exit 2; }
    # shellcheck disable=SC2086
    cat $parts > /tmp/wheels.tar
    local want got; want=$(cut -d' ' -f1 "$W/wheels.sha256"); got=$(sha256sum /tmp/wheels.tar | cut -d' ' -f1)
    [ "$want" = "$got" ] || { echo "gpu.sh serve: error[wheels]: the joined pieces ($(echo $parts | wc -w) of them) have sha256 $got, not $want (a piece missing or out of order)"; exit 2; }
    rm -rf /tmp/wheels && mkdir -p /tmp/wheels && tar -C /tmp/wheels -xf /tmp/wheels.tar
    [ -d .gpu-extra ] && cp .gpu-extra/*.whl /tmp/wheels/ 2>/dev/null
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" /tmp/wheels/*.whl >"$LOGS/pip-vllm.log" 2>&1 \
      || { echo "gpu.sh serve: error[wheels]: pip could not install the set: $(grep -m1 -i error "$LOGS/pip-vllm.log")"; exit 2; }
  fi
  # vLLM's CLI beside the interpreter (r9kctl launch runs <python's folder>/vllm)
  local bin; bin=$(dirname "$(python3 -c 'import sys; print(sys.executable)')")
  [ -x "$bin/vllm" ] || cp "$SITE/bin/vllm" "$bin/vllm" 2>/dev/null || { echo "gpu.sh serve: error[wheels]: no vllm script in $SITE/bin"; exit 2; }
  python3 - <<'PY' || exit 2
import importlib.metadata as md, re, sys
try:
    want = next(r for r in md.requires("vllm") or [] if re.match(r"torch\s*==", r)).split("==")[1].split(";")[0].strip()
except (md.PackageNotFoundError, StopIteration) as exc:
    sys.exit(f"gpu.sh serve: error[wheels]: vLLM's distribution metadata is missing or names no torch pin ({exc})")
import torch
if torch.__version__.split("+")[0] != want:
    sys.exit(f"gpu.sh serve: error[wheels]: vLLM {md.version('vllm')} is built for torch {want}; this python3 has torch {torch.__version__}")
try:
    import vllm, vllm.entrypoints.openai.api_server, vllm.model_executor.layers.fused_moe  # noqa: F401
    import tomlkit, pydantic  # noqa: F401 - the project's own
except ModuleNotFoundError as exc:
    sys.exit(f"gpu.sh serve: error[wheels]: module {exc.name!r} is missing (carry its wheel: device/README.md's Notes)")
except ImportError as exc:
    sys.exit(f"gpu.sh serve: error[wheels]: {exc}")
print("vLLM", md.version("vllm"), "on torch", torch.__version__, torch.cuda.get_device_name(0))
PY
}

serve() {
  local t0; t0=$(date +%s)
  python3 -m r9k.plugin.tiny_model qwen2-moe-h200 >"$LOGS/model.log" 2>&1 || { echo "model build failed"; tail -5 "$LOGS/model.log"; return 1; }
  echo "model built in $(( $(date +%s) - t0 )) s: $(tail -1 "$LOGS/model.log")"
  python3 -m r9k.r9kctl.cli doctor 2>&1 | grep -E "runner:|error\[runner\]|would break" | tee -a "$OUT/gpu.txt"
  # strict mode refuses a default-on variant whose gate is not fresh on this toolchain (vLLM 0.26 is new here): run
  # the fused profile's gates on this GPU first (the ledger the launch reads)
  timeout "${T_GATE:-150}" python3 -m r9k.r9kctl.cli gate --profile "${1:-gpu-qwen2-moe}" >"$LOGS/gate.log" 2>&1
  echo "gates rc=$?: $(grep -E "passed|failed|fresh|stale" "$LOGS/gate.log" | tail -3 | tr '\n' ' ')" | tee -a "$OUT/gpu.txt"
  timeout "${T_SERVE:-900}" python3 scripts/gpu_serve.py --fused "${1:-gpu-qwen2-moe}" --stock "${2:-gpu-qwen2-moe-stock}" \
    --out "$OUT" --logs "$LOGS" ${SERVE_ARGS:-}
  echo "serve rc=$? in $(( $(date +%s) - t0 )) s"
  # the op-sum model's prediction for the same configuration (the GPU is free again)
  timeout "${T_PREDICT:-120}" python3 scripts/gpu_predict.py --out "$OUT/predict.json" 2>"$LOGS/predict.log" \
    || { echo "predict failed"; tail -5 "$LOGS/predict.log"; }
  tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null   # every server's whole log, the gate and model logs
  [ -f "$OUT/summary.txt" ] && cat "$OUT/summary.txt"
}

cmd=${1:-all}; shift || true
[ "$cmd" = serve ] && vllm_env
setup
case "$cmd" in
  gates) gates "$@" ;;
  bench) bench "$@" ;;
  sweep) bench --sweep "$@" ;;
  decode-step) decode_step "$@" ;;
  ncu) ncu_calls ;;
  all) gates; bench; decode_step ;;
  serve) serve "$@" ;;
  *) echo "usage: scripts/gpu.sh gates|bench|sweep|decode-step|ncu|all|serve" >&2; exit 2 ;;
esac
# the short tables last
[ -f "$OUT/bench.log" ] && sed -n '/^KERNELS/,$p' "$OUT/bench.log"
[ -f "$OUT/decode_step.txt" ] && cat "$OUT/decode_step.txt"
exit 0
