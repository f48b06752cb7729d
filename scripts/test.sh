#!/usr/bin/env bash
# Sets up .venv (scripts/setup.sh) and runs the whole test suite: the registry and command line, the
# kernels' gates under the Triton interpreter, the control panel (Pilot + snapshots), the evidence tools,
# and the plugin's end-to-end launch of real vLLM on its CPU backend.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYTHONUNBUFFERED=1
# Two workers (pytest-xdist): a vLLM launch under test mostly keeps one core busy (the Triton interpreter and
# Python are single-threaded), so the other core runs the rest meanwhile. Serial: add -n 0. The slowest tests
# are listed at the end, to keep an eye on the suite's time (under 30 minutes on a 2-core CI machine).
exec .venv/bin/python -m pytest -p no:cacheprovider -n 2 --dist loadgroup --no-loadscope-reorder --durations=25 "$@"
