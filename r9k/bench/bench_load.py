"""Benchmark: cold wall time of ``r9kctl validate --profile tp4-default`` and of loading the registry.

    python -m r9k.bench.bench_load [--runs 7]

Prints medians (and min/max) of a new process validating and of an in-process ``load_registry()``, with and
without the parse cache.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from ..registry import envvars
from ..registry import load_registry


def wall(cmd, env, runs):
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        out.append((time.perf_counter() - t) * 1000)
    return out


def fmt(xs):
    return f"median {statistics.median(xs):7.1f} ms  (min {min(xs):.1f}, max {max(xs):.1f}, n={len(xs)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="r9k-bench-")
    env = dict(os.environ, **{envvars.CACHE_DIR.name: cache, envvars.PLAIN.name: "1"})
    cmd = [sys.executable, "-m", "r9k.r9kctl.cli", "validate", "--profile", "tp4-default"]
    nocache = wall(cmd, dict(env, **{envvars.NO_CACHE.name: "1"}), args.runs)
    wall(cmd, env, 1)  # fills the cache
    cached = wall(cmd, env, args.runs)
    py = [sys.executable, "-c", "pass"]
    bare = wall(py, env, args.runs)

    os.environ[envvars.CACHE_DIR.name] = cache

    def load_times(no_cache: bool):
        os.environ[envvars.NO_CACHE.name] = "1" if no_cache else "0"
        xs = []
        for _ in range(args.runs):
            t = time.perf_counter()
            load_registry()
            xs.append((time.perf_counter() - t) * 1000)
        return xs

    load_nc, load_c = load_times(True), load_times(False)
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}")
    print(f"python -c pass (interpreter start)       {fmt(bare)}")
    print(f"r9kctl validate --profile tp4-default      {fmt(cached)}  [parse cache warm]")
    print(f"r9kctl validate --profile tp4-default      {fmt(nocache)}  [{envvars.NO_CACHE.name}=1]")
    print(f"load_registry() in process                 {fmt(load_c)}  [parse cache warm]")
    print(f"load_registry() in process                 {fmt(load_nc)}  [{envvars.NO_CACHE.name}=1]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
