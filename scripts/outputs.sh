#!/usr/bin/env bash
# Every r9kctl command's output on the shipped registry, one file each, to compare two trees byte for byte:
#   bash scripts/outputs.sh OUT            (run in each checkout, then: diff -r OUT_A OUT_B)
# Each OUT/NNN.txt holds the command, its stdout and stderr, and its exit status. The checkout's path reads
# CHECKOUT and the per-launch server id (launch --dry-run) SERVER-ID, so two checkouts compare equal.
# Python: this checkout's .venv (python -m from the checkout root, so its own code runs), or $PYTHON.
set -u
cd "$(dirname "$0")/.."
CO=$PWD; OUT=$1; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-$CO/.venv/bin/python}
export COLUMNS=160 NO_COLOR=1 TERM=dumb
n=0
r() {
  n=$((n + 1))
  { echo "\$ r9kctl $*"; timeout 120 "$PY" -m r9k.r9kctl.cli "$@" 2>&1; echo "rc=$?"; } 2>&1 |
    sed -E "s#$CO#CHECKOUT#g; s#[0-9]{8}T[0-9]{6}-[0-9a-f]{8}#SERVER-ID#g" >"$OUT/$(printf %03d $n).txt"
}
r --help
for c in list show resolve validate diff profiles releases launch doctor tui status gate eval bisect bench schema \
  completion recipes; do
  r "$c" --help
done
r list --plain; r list --format json; r list --format ids; r list --vllm --plain; r list --tp 2 --plain
r list --vllm-version 0.32 --plain
for v in $("$PY" -m r9k.r9kctl.cli list --format ids 2>/dev/null); do r show "$v" --plain; done
for p in $("$PY" -m r9k.r9kctl.cli profiles --format names 2>/dev/null); do
  r resolve "$p" --plain; r resolve "$p" --format json; r validate -p "$p" --plain
  r validate -p "$p" --strict --plain; r launch --profile "$p" --dry-run --plain
done
r profiles --plain; r releases --plain; r validate --all --plain; r validate --all --format json
r diff v0.3.0 v0.3.1 --plain; r diff v0.3.0 v0.3.1 --format json; r diff tp4-default tp2-default --plain
r diff v0.1.0 v0.3.2-r9k.1 --plain
r schema; r completion bash; r completion zsh; r completion fish; r recipes; r recipes --format json
r gate --status --all --plain; r bench decode-step --help
echo "$n commands -> $OUT"
