"""The shortcuts a cold ``r9kctl validate`` takes answer as the long way does: the JSON nesting check without a
walk, the Python version without ``platform``, the toolchain's versions without ``importlib.metadata``, a gate
record's outcome per test found once per state, ``module_exists`` without importing, ``missing_tests`` without a
pattern per test."""
from __future__ import annotations

import dataclasses
import importlib.metadata as md
import json
import platform
import shutil
import subprocess
import sys

import pytest

from r9k.registry import fileio, ledger, load_registry
from r9k.registry import provenance as P


@pytest.mark.parametrize("depth", [fileio.MAX_DEPTH - 1, fileio.MAX_DEPTH, fileio.MAX_DEPTH + 1])
@pytest.mark.parametrize("kind", ["[]", "{}"])
def test_json_nesting_at_the_limit(tmp_path, depth, kind):
    """A value nested exactly MAX_DEPTH deep loads, one level more is a located too-deep error (the shortcut
    counts brackets: at the limit it must still walk), in a JSON file and in a JSON Lines ledger."""
    o, c = kind
    text = (o + '"a": ' if o == "{" else o) * (depth - 1) + ("{}" if o == "{" else "[]") + c * (depth - 1)
    assert json.loads(text) is not None
    deep = depth > fileio.MAX_DEPTH
    if deep:
        with pytest.raises(fileio.FileError, match="nests deeper"):
            fileio.parse_json(text, tmp_path / "x.json")
    else:
        fileio.parse_json(text, tmp_path / "x.json")
    p = tmp_path / "l.jsonl"
    p.write_text('{"ok": 1}\n' + (text if o == "{" else '{"v": ' + text + "}") + "\n")
    problems: list = []
    rows = fileio.read_jsonl(p, problems=problems)
    nested_too_deep = depth + (0 if o == "{" else 1) > fileio.MAX_DEPTH
    assert len(rows) == (1 if nested_too_deep else 2)
    assert [d.code for d in problems] == (["too-deep"] if nested_too_deep else [])


def test_the_python_version_is_platforms():
    assert P._python_version() == platform.python_version()


def test_gate_states_with_the_per_state_memo_are_those_without(monkeypatch):
    """Every gate's state on the shipped registry and ledger, with the outcomes shared within a state, is the
    state computed with every outcome looked up again."""
    reg = load_registry()
    fast = {k: dataclasses.asdict(v) for k, v in ledger.gate_states(reg).items()}
    real = ledger._test_status
    monkeypatch.setattr(ledger, "_test_status", lambda t, r, c, tcs, seen=None: real(t, r, c, tcs, None))
    slow = {k: dataclasses.asdict(v) for k, v in ledger.gate_states(reg).items()}
    assert len(fast) >= 10 and fast == slow


def test_the_memo_tells_the_tests_of_one_record_apart():
    """One record, two declared tests, one passed and one failed: each keeps its own outcome when the calls of
    a state share what they found."""
    tc = {"python": "3.11.7", "torch": "2.13.0", "triton": "3.9.0", "vllm": "0.32.0", "device": None}
    a, b = "tests/x.py::test_a", "tests/x.py::test_b"
    recs = [ledger.GateRecord(variant="v", tests=[a, b], result="fail", outcomes={a: ledger.PASSED, b: ledger.FAILED},
                              platform="cpu", date="2026-12-01", source_hash="h", toolchain=tc)]
    tcs = ledger.Toolchains(recs, local=tc)
    seen: dict = {}
    for t in (a, b, a, b):
        assert ledger._test_status(t, recs, "h", tcs, seen)[:2] == ledger._test_status(t, recs, "h", tcs)[:2]
    assert ledger._test_status(a, recs, "h", tcs, seen)[0] == "passed"
    assert ledger._test_status(b, recs, "h", tcs, seen)[0] == "failed"


def test_toolchain_versions_are_importlib_metadatas():
    names = sorted({d.metadata["Name"] for d in md.distributions() if d.metadata["Name"]})
    assert len(names) > 20
    asked = [n for n in names if P._fast_version(n) is P._ASK]
    assert len(asked) <= len(names) // 10, asked  # the fast path answers (its fallback would hide its errors)
    for name in names:
        assert P._dist_version.__wrapped__((name,)) == md.version(name), name
    assert P._dist_version.__wrapped__(("no-such-dist-r9k",)) is None
    assert P._dist_version.__wrapped__(("no-such-dist-r9k", names[0])) == md.version(names[0])


def test_toolchain_versions_ask_importlib_metadata_when_unsure(tmp_path, monkeypatch):
    """Two candidates in one folder: importlib.metadata decides, whatever it decides."""
    for v in ("1.0", "2.0"):
        d = tmp_path / f"r9k_probe_dist-{v}.dist-info"
        d.mkdir()
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: r9k-probe-dist\nVersion: {v}\n\nbody\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert P._fast_version("r9k-probe-dist") is P._ASK
    assert P._dist_version.__wrapped__(("r9k-probe-dist",)) == md.version("r9k-probe-dist")
    shutil.rmtree(tmp_path / "r9k_probe_dist-2.0.dist-info")
    assert P._fast_version("R9K.Probe_Dist") == "1.0" == md.version("R9K.Probe_Dist")


def test_module_exists_answers_as_find_spec_without_importing_the_parents():
    """availability.module_exists looks into a package not imported yet instead of importing it: the same
    answers as importlib.util.find_spec (asked afterwards, in the same new process) for every module the
    registry and the adapters name, their parents, and names that do not exist."""
    code = (
        "import importlib.util, json, sys\n"
        "from r9k.registry import availability as A, load_registry\n"
        "reg = load_registry()\n"
        "names = sorted({v.implementation.module for v in reg.variants.values() if v.implementation.module}\n"
        "               | {a.adapter_module for a in A.load_adapters().adapters.values()})\n"
        "names += sorted({n.rpartition('.')[0] for n in names}) + ['r9k.kernels.no_such_op', 'r9k.no_such.x',\n"
        "          'r9k.plugin.no_such.deeper', 'json.decoder.not_a_package', 'no_such_top.x', 'os.path', 'r9k']\n"
        "before = [m for m in ('r9k.plugin', 'r9k.kernels') if m in sys.modules]\n"
        "fast = [A.module_exists(n) for n in names]\n"
        "imported = [m for m in ('r9k.plugin', 'r9k.kernels') if m in sys.modules and m not in before]\n"
        "def real(n):\n"
        "    try:\n"
        "        return importlib.util.find_spec(n) is not None\n"
        "    except (ImportError, ValueError):\n"
        "        return False\n"
        "print(json.dumps([names, fast, [real(n) for n in names], imported]))\n")
    names, fast, real, imported = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                                            text=True, timeout=600, check=True).stdout)
    assert len(names) > 15 and any(fast) and not all(fast)
    assert dict(zip(names, fast)) == dict(zip(names, real))
    assert imported == []


def test_missing_tests_finds_what_the_pattern_per_test_found(tmp_path):
    """availability.missing_tests scans a file's def lines once instead of compiling a pattern per test id:
    the same answers as the pattern (``^\\s*(async\\s+)?def NAME\\s*\\(``) for every declared gate test and for
    near misses (a longer name, a name only in a comment or string, a class method, async, parameters)."""
    import re

    from r9k.registry import availability as A
    from r9k.registry.ledger import repo_root

    def old(tests, root):
        out = []
        for t in tests:
            file, _, name = t.partition("::")
            try:
                text = (root / file).read_text(encoding="utf-8")
            except OSError:
                out.append(f"{t} (no file {file})")
                continue
            func = re.sub(r"\[.*$", "", name.split("::")[-1])
            if func and not re.search(rf"^\s*(async\s+)?def {re.escape(func)}\s*\(", text, re.M):
                out.append(f"{t} (no test {func} in {file})")
        return out

    reg = load_registry()
    root = repo_root(reg)
    shipped = sorted({t for v in reg.variants.values() if v.gate for t in v.gate.tests})
    assert len(shipped) > 20
    assert A.missing_tests(shipped, root) == old(shipped, root) == []
    (tmp_path / "t.py").write_text("def test_add_gpu():\n    pass\n# def test_comment():\nx = 'def test_str():'\n"
                                   "class TestK:\n    async def test_m (self):\n        pass\ndef  test_two_spaces():\n")
    probes = [f"t.py::{n}" for n in ("test_add", "test_add_gpu", "test_comment", "test_str", "TestK::test_m",
                                     "test_m[1-2]", "test_two_spaces", "test_add_gpu[x::y]", "")] + ["nofile.py::x"]
    assert A.missing_tests(probes, tmp_path) == old(probes, tmp_path)
    assert len(old(probes, tmp_path)) == 6
