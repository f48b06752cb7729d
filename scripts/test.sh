#!/usr/bin/env bash
# Sets up .venv (scripts/setup.sh) and runs the whole test suite: the registry and command line, the
# kernels' gates under the Triton interpreter, the control panel (Pilot + snapshots), the evidence tools,
# and the plugin's end-to-end launch of real vLLM on its CPU backend.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYTHONUNBUFFERED=1
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
