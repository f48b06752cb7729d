"""How much ``register()`` adds to a vLLM process start.

Each measurement is a fresh interpreter that imports what vLLM has when it loads its general plugins
(``vllm.engine.arg_utils``), then times ``r9k.plugin.register()`` (and a second call). Cases: ``inactive`` (no
R9K_* variable), ``first-cold`` (profile cpu-smoke, empty caches), ``first`` (a launch's API server, parse cache
filled), ``manifest`` (from ``r9kctl launch``'s manifest) and ``later`` (the engine core / a worker: the launch
snapshot). The children's bytecode cache is on (``--no-bytecode`` keeps the caller's setting).

Usage: ``python -m r9k.bench.bench_register [--runs N]``: per case, median and min in ms, and whether textual or
rich got imported.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from ..registry import envvars

CHILD = r"""
import json, os, sys, time
import vllm.engine.arg_utils  # what the API server has imported when vLLM loads general plugins
t0 = time.perf_counter()
import r9k.plugin as plugin
import r9k.plugin.report as report
report.emit = lambda level, line: None  # time the work, not the terminal
plugin.register()
t1 = time.perf_counter()
plugin.register()
t2 = time.perf_counter()
print(json.dumps({"first_ms": (t1 - t0) * 1e3, "second_ms": (t2 - t1) * 1e3,
                  "ui": [m for m in ("textual", "rich") if m in sys.modules]}))
"""


def run_case(env: dict, runs: int) -> tuple[list[float], list[float], list[str]]:
    firsts, seconds, ui = [], [], set()
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            raise SystemExit(f"benchmark child failed:\n{out.stderr[-3000:]}")
        d = json.loads(out.stdout.strip().splitlines()[-1])
        firsts.append(d["first_ms"])
        seconds.append(d["second_ms"])
        ui.update(d["ui"])
    return firsts, seconds, sorted(ui)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-bytecode", action="store_true", help="keep PYTHONDONTWRITEBYTECODE as it is")
    args = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("R9K_", "_R9K_"))}
    if not args.no_bytecode:
        base.pop("PYTHONDONTWRITEBYTECODE", None)

    CACHE, PROFILE, MANIFEST, TP = (envvars.CACHE_DIR.name, envvars.PROFILE.name, envvars.MANIFEST.name,
                                    envvars.TP.name)
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        prof = dict(base, **{CACHE: str(cache), PROFILE: "cpu-smoke"})

        def report(name, firsts, seconds=None, ui=()):
            line = f"{name:<12} register(): median {statistics.median(firsts):6.1f} ms  min {min(firsts):6.1f} ms"
            if seconds is not None:
                line += f"  | second call median {statistics.median(seconds) * 1e3:6.1f} us"
            line += f"  | textual/rich imported: {', '.join(ui) or 'no'}"
            print(line, flush=True)

        run_case(dict(prof), 1)  # warm-up: bytecode and the TOML parse cache
        report("inactive", *run_case(dict(base, **{CACHE: str(cache)}), args.runs))
        colds = []
        for _ in range(args.runs):  # a fresh cache each run: the registry is parsed
            with tempfile.TemporaryDirectory() as c:
                ff, _, ui = run_case(dict(prof, **{CACHE: c}), 1)
                colds += ff
        report("first-cold", colds, None, ui)
        report("first", *run_case(prof, args.runs))

        # a manifest as r9kctl launch writes it, and the environment it exports
        from ..registry import fileio, load_registry
        from ..registry.resolve import resolve

        rs = resolve(load_registry(), "cpu-smoke", env={})
        mpath = Path(tmp) / "manifest.json"
        fileio.atomic_write(mpath, json.dumps(rs.to_manifest()), "manifest")
        menv = dict(base, **{CACHE: str(cache), MANIFEST: str(mpath), PROFILE: "cpu-smoke", TP: "1"})
        menv.update(rs.env())
        report("manifest", *run_case(menv, args.runs))

        # what the first process exports to the engine core and the workers it starts
        probe = ("import os, json, r9k.plugin as p, r9k.plugin.report as rp; rp.emit = lambda l, x: None; p.register(); "
                 "print(json.dumps({k: v for k, v in os.environ.items() if k.startswith(('R9K_', '_R9K_'))}))")
        out = subprocess.run([sys.executable, "-c", probe], env=menv, capture_output=True, text=True, timeout=300)
        later = dict(menv, **json.loads(out.stdout.strip().splitlines()[-1]))
        report("later", *run_case(later, args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
