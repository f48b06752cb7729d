"""The shortcuts a cold ``r9kctl validate`` takes (issue 24 item 7, round 4) answer as the long way does: the JSON
nesting check without a walk, the Python version without ``platform``, a gate record's outcome per test found
once per state."""
from __future__ import annotations

import dataclasses
import json
import platform

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
