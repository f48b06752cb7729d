"""Gate records prove what they say: the latest conclusive outcome decides (in both orders), a record says
where its code ran and whether it ran here, imported evidence is named and refused by a strict launch unless
accepted, the pytest configuration is in the hash, and the ledger survives bad lines and growth."""
from __future__ import annotations

import pytest

from r9k.registry import ledger as L
from r9k.registry import load_registry

from .fake_repo import make_repo, variant

TEST = "kernels/evrec/test_evrec.py::test_exact"
VARIANTS = variant("evrec_add", "Test-only fused add (gate record tests).", [TEST], type="enum",
                   choices=["r9k", "stock"], stock="stock", state="default-on", defaults={"tp1": "r9k"},
                   sources=["kernels/evrec/impl.py"], module="kernels.evrec.impl")
FILES = {"kernels/evrec/__init__.py": "", "kernels/evrec/impl.py": "def add(x, y):\n    return x + y\n",
         "kernels/evrec/test_evrec.py": "from kernels.evrec.impl import add\n\n\ndef test_exact():\n"
                                        "    assert add(1, 2) == 3\n"}
CPU_TC = {"torch": "2.13.0+cpu", "triton": "3.6.0", "vllm": "0.32.0", "python": "3.12.3", "device": "cpu"}
GPU_TC = dict(CPU_TC, torch="2.13.0+cu130", device="h200")


@pytest.fixture
def reg(tmp_path, monkeypatch):
    make_repo(tmp_path, monkeypatch, VARIANTS, FILES, "zz-evrec-test.toml")
    return load_registry()


def record(reg, outcome: str, date: str, platform: str = "cpu-triton-interpret", tc=CPU_TC, **kw) -> L.GateRecord:
    files, missing = L.file_hashes(reg, reg.variants["evrec_add"])
    return L.GateRecord("evrec_add", [TEST], "pass" if outcome == "passed" else "fail", {TEST: outcome}, platform,
                        date, L.hash_of(files, missing), len(files), deps=files, toolchain=tc,
                        **kw)


@pytest.mark.parametrize("order, expect", [(("passed", "failed"), "failed"), (("failed", "passed"), "fresh")])
def test_the_latest_conclusive_outcome_decides_in_both_orders(reg, order, expect):
    recs = [record(reg, o, f"2026-12-0{i + 1}T10:00:00Z") for i, o in enumerate(order)]
    st = L.state_of(reg, reg.variants["evrec_add"], recs, L.Toolchains(recs, local=CPU_TC))
    assert st.state == expect and st.per_platform == {"cpu-triton-interpret": expect}
    # an inconclusive record after them (skipped) changes nothing
    recs.append(record(reg, "skipped", "2026-12-03T10:00:00Z"))
    assert L.state_of(reg, reg.variants["evrec_add"], recs, L.Toolchains(recs, local=CPU_TC)).state == expect


def test_a_record_that_came_with_the_clone_did_not_run_here(reg, tmp_path):
    """``ran here`` only for a record r9kctl gate made in this checkout on this machine: one without that
    identity (as every record that came with a clone, or one from another worktree) ran elsewhere."""
    here = L.provenance.checkout_id(L.repo_root(reg))
    v = reg.variants["evrec_add"]
    for ran_at, expect in ((None, "ran elsewhere, 2026-12-01"), ("0123456789abcdef", "ran elsewhere, 2026-12-01"),
                           (here, "ran here")):
        recs = [record(reg, "passed", "2026-12-01T10:00:00Z", ran_at=ran_at)]
        st = L.state_of(reg, v, recs, L.Toolchains(recs, local=CPU_TC))
        assert st.state == "fresh" and st.evidence == {"cpu-triton-interpret": expect}
        assert L.summary([v], {v.id: st}, "cpu").startswith(
            "gates on cpu: 1 fresh (ran here)" if ran_at == here else
            "gates on cpu: 0 fresh (ran here); 1 fresh on records that ran elsewhere")
    assert here != L.provenance.checkout_id(tmp_path)  # another folder is another checkout


def test_a_strict_launch_names_and_refuses_unverified_imported_records_unless_accepted(reg, tmp_path, monkeypatch,
                                                                                         capsys):
    from r9k.r9kctl import cli
    from r9k.registry import envvars

    prof = tmp_path / "profiles"
    prof.mkdir()
    (prof / "evrec-h200.toml").write_text('description = "the test-only add on the H200"\nextends = "stock"\n'
                                          'tp = 1\nplatform = "cuda-h200"\n[knobs]\nR9K_EVREC_ADD = "r9k"\n')
    monkeypatch.setenv(envvars.PROFILES_DIR.name, str(prof))
    monkeypatch.delenv(envvars.ACCEPT_IMPORTED_GATES.name, raising=False)
    reg = load_registry()
    imp = record(reg, "passed", "2026-12-01T10:00:00Z", "cuda-h200", GPU_TC,
                 imported={"file": "gates-h200.xml", "created": "2026-12-01T09:00:00Z", "checks": "no stamp"})
    L.append_records(L.ledger_path(reg), [imp])
    assert cli.main(["launch", "--profile", "evrec-h200", "--dry-run", "--strict"]) == 1
    err = capsys.readouterr().err
    assert "warning[gate-unverified]: default-on variant 'evrec_add'" in err
    assert "cuda-h200: imported from cuda-h200, 2026-12-01, unverified" in err
    assert envvars.ACCEPT_IMPORTED_GATES.name + "=1" in err
    from r9k.registry.validate import validate

    def unverified():
        return [d for d in validate(load_registry(), profile="evrec-h200").warnings if d.code == "gate-unverified"]

    assert len(unverified()) == 1
    monkeypatch.setenv(envvars.ACCEPT_IMPORTED_GATES.name, "1")  # the user opts in
    assert unverified() == []
    # a record that ran under r9kctl gate on that platform is not an import: nothing to accept
    monkeypatch.delenv(envvars.ACCEPT_IMPORTED_GATES.name)
    L.append_records(L.ledger_path(reg), [record(reg, "passed", "2026-12-02T10:00:00Z", "cuda-h200", GPU_TC)])
    assert unverified() == []


def test_the_pytest_configuration_is_in_the_gate_hash(reg):
    """Editing pyproject's [tool.pytest.ini_options] (an addopts, a marker) changes what the gate's tests run
    under, so the gate goes stale; an edit elsewhere in pyproject.toml does not."""
    root = L.repo_root(reg)
    v = reg.variants["evrec_add"]
    (root / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "1"\n\n[tool.pytest.ini_options]\n'
                                         'addopts = "-ra"\n')
    recs = [record(reg, "passed", "2026-12-01T10:00:00Z")]
    tcs = L.Toolchains(recs, local=CPU_TC)
    assert L.state_of(reg, v, recs, tcs).state == "fresh"
    (root / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "2"\n\n[tool.pytest.ini_options]\n'
                                         'addopts = "-ra"\n')
    assert L.state_of(reg, v, recs, tcs).state == "fresh"  # the version is not the pytest configuration
    (root / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "2"\n\n[tool.pytest.ini_options]\n'
                                         'addopts = "-ra -p no:randomly --deselect kernels/evrec"\n')
    st = L.state_of(reg, v, recs, tcs)
    assert st.state == "stale" and st.changes == ["<pytest configuration> changed"]
    (root / "pytest.ini").write_text("[pytest]\naddopts = -x\n")  # a pytest.ini counts too
    assert L.state_of(reg, v, recs, tcs).source_hash != st.source_hash


def test_each_bad_ledger_line_is_one_located_warning_and_the_rest_still_counts(reg, capsys):
    from r9k.r9kctl import cli

    p = L.ledger_path(reg)
    p.parent.mkdir(parents=True, exist_ok=True)
    good = record(reg, "passed", "2026-12-01T10:00:00Z").to_json()
    import json

    p.write_bytes(b'{"variant": "evrec_add"}\n' + b'{"a": 1\x00}\n' + b"not json\n" + b"\xff\xfe\n"
                  + json.dumps(good).encode() + b"\n")
    records, problems = L.read_ledger(p)
    assert [r.variant for r in records] == ["evrec_add"] and len(problems) == 4
    assert [m.split(": warning[ledger-line]: ")[0] for m in problems] == [f"{p}:1:1", f"{p}:2:8", f"{p}:3:1",
                                                                           f"{p}:4:1"]
    assert "NUL byte" in problems[1] and "not UTF-8" in problems[3]
    assert L.gate_states(reg).problems and cli.main(["gate", "--status", "evrec_add"]) == 0
    err = capsys.readouterr().err
    assert err.count("warning[ledger-line]") == 4
    L.append_records(p, [record(reg, "failed", "2026-12-02T10:00:00Z")])  # appends still work
    assert [r.outcomes[TEST] for r in L.read_ledger(p)[0]] == ["passed", "failed"]


def test_growth_never_makes_the_ledger_unreadable(reg, monkeypatch):
    """A ledger past the 32 MiB file limit is still read (line by line) and appended to (it is moved aside
    as a segment first); appends past SEGMENT_BYTES start a new segment, and the records stay in order."""
    import json

    p = L.ledger_path(reg)
    p.parent.mkdir(parents=True, exist_ok=True)
    big = record(reg, "passed", "2026-12-01T10:00:00Z", note="x" * 1_000_000).to_json()
    with p.open("w") as fh:
        for _ in range(34):  # 34 MB of records
            fh.write(json.dumps(big) + "\n")
    L.append_records(p, [record(reg, "failed", "2026-12-02T10:00:00Z")])
    records, problems = L.read_ledger(p)
    assert problems == [] and len(records) == 35 and records[-1].outcomes[TEST] == "failed"
    assert [s.name for s in L.segments(p)] == ["ledger.0001.jsonl", "ledger.jsonl"] and p.stat().st_size < 10_000
    assert L.state_of(reg, reg.variants["evrec_add"], records, L.Toolchains(records, local=CPU_TC)).state == "failed"
    monkeypatch.setattr(L, "SEGMENT_BYTES", 3 * len(json.dumps(record(reg, "passed", "x").to_json())))
    for i in range(7):
        L.append_records(p, [record(reg, "passed", f"2026-12-03T10:00:0{i}Z")])
    assert len(L.segments(p)) >= 4 and all(s.stat().st_size <= L.SEGMENT_BYTES for s in L.segments(p)[1:])
    assert [r.date for r in L.read_ledger(p)[0]][-8:] == ["2026-12-02T10:00:00Z"] + [
        f"2026-12-03T10:00:0{i}Z" for i in range(7)]
