"""The gate closures' parse cache (registry/gatedeps.py): a cold process parses nothing it parsed before, and
a changed file still makes its gate stale at once (its content hash is new, so it is parsed again; the
resolution of names to files is never cached across passes)."""
from __future__ import annotations

import ast
import json

import pytest

from r9k.r9kctl import cli
from r9k.registry import envvars, gatedeps, load_registry
from r9k.registry import ledger as L

from .test_provenance import FILES, repo  # noqa: F401 - the fixture


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(envvars.CACHE_DIR.name, str(tmp_path / "cache"))
    monkeypatch.delenv(envvars.NO_CACHE.name, raising=False)
    _cold(monkeypatch)
    return tmp_path / "cache"


def _cold(monkeypatch):
    """What a new process has: no in-memory parse results, no lookups."""
    monkeypatch.setattr(gatedeps, "_disk", None)
    gatedeps._direct.cache_clear()
    gatedeps.fresh_lookups()


def _count_parses(monkeypatch):
    seen = []
    real = ast.parse

    def parse(src, *a, **k):
        name = k.get("filename") or (a[0] if a else None)
        if name and "/repo/" in str(name):  # the gates' modules (other callers of ast.parse are not counted)
            seen.append(str(name))
        return real(src, *a, **k)

    monkeypatch.setattr(gatedeps.ast, "parse", parse)
    return seen


def test_a_cold_run_parses_nothing_it_parsed_before_and_edits_still_stale(repo, cache, monkeypatch):  # noqa: F811
    assert cli.main(["gate", "evdep_add", "evdep_neg"]) == 0
    first = L.gate_states(load_registry())
    assert first["evdep_neg"].state == "fresh"
    stored = json.loads((cache / f"gatedeps-{gatedeps._CACHE_FORMAT}.json").read_text())
    parsed = {k: v for k, v in stored.items() if not k.startswith("closure:")}
    closures = {k: v for k, v in stored.items() if k.startswith("closure:")}
    assert parsed and all({"imports", "consts", "script"} <= set(v) for v in parsed.values())
    assert len(closures) >= 2 and all({"files", "dirs", "missing", "at"} <= set(v) for v in closures.values())

    _cold(monkeypatch)
    parses = _count_parses(monkeypatch)
    again = L.gate_states(load_registry())
    assert parses == []  # every module came from the disk cache
    assert {k: (s.state, s.source_hash) for k, s in again.items()} == \
        {k: (s.state, s.source_hash) for k, s in first.items()}

    # An edit that adds an import: parsed again (new content hash), the new module joins the closure, stale.
    (repo / "evlib/extra.py").write_text("Y = 1\n")
    (repo / "kernels/evneg/impl.py").write_text("import evlib.extra\n" + FILES["kernels/evneg/impl.py"])
    _cold(monkeypatch)
    st = L.gate_states(load_registry())["evdep_neg"]
    assert [p for p in parses if p.endswith("impl.py")] and not [p for p in parses if p.endswith("common.py")]
    assert st.state == "stale" and "kernels/evneg/impl.py changed" in st.changes
    assert "evlib/extra.py" in L.dependencies(load_registry(), load_registry().variants["evdep_neg"])[0]
    # ... and an edit of that new dependency stales the gate too, within the same process (no cold start)
    assert cli.main(["gate", "evdep_neg"]) == 0
    assert L.gate_states(load_registry())["evdep_neg"].state == "fresh"
    (repo / "evlib/extra.py").write_text("Y = 2\n")
    st = L.gate_states(load_registry())["evdep_neg"]
    assert st.state == "stale" and st.changes == ["evlib/extra.py changed"]


def test_no_cache_parses_again(repo, cache, monkeypatch):  # noqa: F811
    L.gate_states(load_registry())
    _cold(monkeypatch)
    monkeypatch.setenv(envvars.NO_CACHE.name, "1")
    parses = _count_parses(monkeypatch)
    L.gate_states(load_registry())
    assert parses


def test_a_created_module_joins_the_closure_at_once(repo, cache, monkeypatch):  # noqa: F811
    """The per-gate closure cache is checked against the folders it looked in: a module created where an
    import already points (it did not resolve before) joins the closure without any edit of the importer."""
    (repo / "kernels/evneg/impl.py").write_text("import evlib.later  # not there yet\n" + FILES["kernels/evneg/impl.py"])
    reg = load_registry()
    deps = lambda: L.dependencies(reg, reg.variants["evdep_neg"])[0]  # noqa: E731
    before = L.gate_states(reg)["evdep_neg"].source_hash
    assert "evlib/later.py" not in deps()
    _cold(monkeypatch)
    assert L.gate_states(reg)["evdep_neg"].source_hash == before  # from the cache, same answer
    (repo / "evlib/later.py").write_text("Z = 1\n")
    after = L.gate_states(reg)["evdep_neg"].source_hash
    assert after != before and "evlib/later.py" in deps()
