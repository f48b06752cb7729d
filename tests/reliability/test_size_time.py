"""Class "size and time": work linear in the input. 100k unknown knobs in a profile and a JUnit file of 100k
cases are handled in seconds (figures in notes/reliability.md). The unknown-knob test counts the work
(scans of the profile text, fuzzy matches) instead of timing it; the JUnit test runs in a child process
with a 300 s limit (measured: a few seconds; the quadratic version needed hours)."""
from __future__ import annotations

import json

import subprocess
import sys
import textwrap

from r9k.registry import loader, resolve

from .harness import run_main

N = 100_000


def test_unknown_knobs_cost_one_scan(tmp_path, monkeypatch):
    folder = tmp_path / "profiles"
    folder.mkdir()
    lines = ['extends = "stock"', 'model = "qwen3.8-flash-next"', "tp = 2", "[knobs]"]
    lines += [f'R9K_NOT_A_KNOB_{i} = "1"' for i in range(N)]
    (folder / "many.toml").write_text("\n".join(lines) + "\n")
    scans, fuzzy = [0], [0]
    real_locate, real_suggest = loader.locate, resolve.suggest

    def counting_locate(text, loc):
        scans[0] += 1
        return real_locate(text, loc)

    def counting_suggest(name, cands):
        fuzzy[0] += 1
        return real_suggest(name, cands)

    monkeypatch.setattr(loader, "locate", counting_locate)
    monkeypatch.setattr(resolve, "suggest", counting_suggest)
    code, out, err = run_main(["--profiles-dir", str(folder), "validate", "-p", "many", "--format", "json"])
    assert code == 2
    errors = [e for e in json.loads(out)["errors"] if e["code"] == "unknown-variant"]
    assert len(errors) == N
    assert (errors[-1]["line"], errors[-1]["col"]) == (N + 4, 1)  # each at its own line
    assert scans[0] < 100, scans[0]  # not one scan of the 100k-line text per knob
    assert fuzzy[0] <= resolve.MAX_HINTS


JUNIT = """
    import sys, time
    from pathlib import Path
    from r9k.r9kctl.evidence import junit
    n, path = int(sys.argv[1]), Path(sys.argv[2])
    cases = "".join(f'<testcase classname="tests.test_x" name="test_{i}" file="tests/test_x.py" time="0.1"/>\\n'
                    for i in range(n))
    path.write_text(f'<?xml version="1.0"?>\\n<testsuites><testsuite name="s" tests="{n}">\\n{cases}'
                    '</testsuite></testsuites>\\n')
    t = time.perf_counter()
    got = junit._read(path)[0]
    assert len(got) == n and got["tests/test_x.py::test_7"] == ("passed", 10), got.get("tests/test_x.py::test_7")
    print(f"{time.perf_counter() - t:.2f}")
"""


def test_junit_of_100k_cases_parses_in_linear_time(tmp_path):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(JUNIT), str(N), str(tmp_path / "junit.xml")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
