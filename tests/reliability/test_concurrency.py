"""Class "concurrency": N writer *processes* x 50 rounds on the same file lose nothing. The writers take the
one advisory lock of ``registry/fileio.py`` (``fcntl.flock`` on the file's folder) around every append and
read-modify-write: gate-ledger appends, ``eval compare --into`` quality records, a JSON counter updated in
place. Without the lock the same runs lost records (notes/reliability.md)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from r9k.registry import fileio

from .harness import REPO

ROUNDS = 50


def _run_writers(n: int, script: str, *args: str, timeout: int = 540) -> None:
    """Start ``n`` processes of ``script`` (each gets its index), released together, and wait for all."""
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), str(i), *args],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(n)]
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, err[-2000:]


LEDGER = """
    import sys
    from r9k.registry import fileio
    w, path, rounds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    for r in range(rounds):
        fileio.atomic_append(path, '{"writer": %d, "round": %d, "pad": "%s"}\\n' % (w, r, "x" * (w * 37 % 300)),
                             "gate ledger")
"""


@pytest.mark.parametrize("writers", [2, 8])
def test_ledger_appends_keep_every_record(tmp_path, writers):
    path = tmp_path / "gates.jsonl"
    _run_writers(writers, LEDGER, str(path), str(ROUNDS))
    rows = [obj for _, obj in fileio.read_jsonl(path, "gate ledger")]
    got = sorted((o["writer"], o["round"]) for o in rows)
    assert got == sorted((w, r) for w in range(writers) for r in range(ROUNDS))


COUNTER = """
    import json, sys
    from r9k.registry import fileio
    w, path, rounds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    def bump(old):
        d = json.loads(old) if old else {}
        d[str(w)] = d.get(str(w), 0) + 1
        d["total"] = d.get("total", 0) + 1
        return json.dumps(d)
    for r in range(rounds):
        fileio.update(path, bump, "counter file")
"""


def test_read_modify_write_counter_loses_no_increment(tmp_path):
    path = tmp_path / "counters.json"
    _run_writers(4, COUNTER, str(path), str(ROUNDS))
    d = json.loads(path.read_text())
    assert d["total"] == 4 * ROUNDS and all(d[str(w)] == ROUNDS for w in range(4))


QUALITY = """
    import sys
    from r9k.r9kctl.evidence.quality import append_quality_record
    w, path, rounds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    for r in range(rounds):
        append_quality_record(path, {"config": "w%d-r%d" % (w, r), "eval": "concurrency", "total": 100})
"""


def test_quality_records_into_one_manifest_from_concurrent_processes(tmp_path):
    src = sorted((REPO / "registry" / "releases").glob("*.toml"))[-1]
    manifest = tmp_path / src.name
    shutil.copy(src, manifest)
    import tomllib

    before = len(tomllib.loads(manifest.read_text()).get("quality", []))
    writers, rounds = 3, ROUNDS
    _run_writers(writers, QUALITY, str(manifest), str(rounds))
    recs = tomllib.loads(manifest.read_text()).get("quality", [])
    names = sorted(r["config"] for r in recs[before:])
    assert names == sorted(f"w{w}-r{r}" for w in range(writers) for r in range(rounds))
