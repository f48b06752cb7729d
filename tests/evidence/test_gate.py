"""Gate runner and ledger on a temporary repository: a copy of the shipped registry plus test-only
variants whose implementation and gate tests are tiny files generated here (independent of the kernels).
"""
from __future__ import annotations

import json
import random
import textwrap

import pytest

from r9k.r9kctl import cli
from r9k.registry import ledger as L
from r9k.registry import envvars, load_registry

from .fake_repo import make_repo, variant

E2E_MINUTES = 1  # the paired gate on the CPU decode step: 63 s under load 5-10 on 2026-12-01: tests/conftest.py runs it early (no server; slow)

VARIANTS = "\n".join([
    variant("evfake_add", "Test-only fused add.", ["kernels/evfake/test_evfake.py::test_exact"],
            type="enum", choices=["r9k", "stock"], stock="stock", state="default-on", defaults={"tp1": "r9k"},
            sources=["kernels/evfake/impl.py"]),
    variant("evfake_gpu", "Test-only variant whose gate has an interpreter test and a GPU test.",
            ["kernels/evfake/test_evfake.py::test_exact", "kernels/evfake/test_evfake.py::test_on_gpu"],
            kind="tolerance", sources=["kernels/evfake/"]),
    variant("evfake_lost", "Test-only variant whose declared gate tests do not exist.",
            ["kernels/evfake/test_evfake.py::test_renamed", "kernels/evfake/test_gone.py",
             "kernels/evfake/test_broken.py"]),
])

TESTS = """
import importlib.util
import pathlib
import random

import pytest

_spec = importlib.util.spec_from_file_location("evfake_impl", pathlib.Path(__file__).with_name("impl.py"))
impl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(impl)


@pytest.mark.parametrize("n", [1, 7])
def test_exact(n):
    xs = [random.randrange(-1000, 1000) for _ in range(n)]
    ys = [random.randrange(-1000, 1000) for _ in range(n)]
    assert impl.add(xs, ys) == [x + y for x, y in zip(xs, ys)]


@pytest.mark.gpu
def test_on_gpu():
    assert impl.add([1], [2]) == [3]
"""

IMPL = "def add(xs, ys):\n    return [x + y for x, y in zip(xs, ys)]\n"


@pytest.fixture
def repo(tmp_path, monkeypatch):
    root = make_repo(tmp_path, monkeypatch, VARIANTS, {
        "kernels/evfake/impl.py": IMPL,
        "kernels/evfake/test_evfake.py": TESTS,
        "kernels/evfake/test_broken.py": "import evfake_no_such_module\n\ndef test_x():\n    pass\n",
    }, "zz-evidence-test.toml")
    prof = tmp_path / "profiles"
    prof.mkdir()
    (prof / "evfake.toml").write_text(textwrap.dedent("""\
        description = "stock, plus the test-only fused add and the GPU-gated variant"
        extends = "stock"
        tp = 1
        [knobs]
        R9K_EVFAKE_ADD = "r9k"
        R9K_EVFAKE_GPU = "1"
        """))
    monkeypatch.setenv(envvars.PROFILES_DIR.name, str(prof))
    return root


def _ledger(root):
    return [json.loads(l) for l in (root / "registry" / "gates" / "ledger.jsonl").read_text().splitlines()]


def test_gate_records_then_goes_stale_on_source_edit(repo, capsys):
    reg = load_registry()
    assert L.gate_states(reg)["evfake_add"].state == "missing"
    assert cli.main(["gate", "evfake_add"]) == 0
    out = capsys.readouterr().out
    assert "passed" in out and "gate now: fresh" in out
    (rec,) = _ledger(repo)
    assert rec["variant"] == "evfake_add" and rec["result"] == "pass"
    assert rec["outcomes"] == {"kernels/evfake/test_evfake.py::test_exact[1]": "passed",
                               "kernels/evfake/test_evfake.py::test_exact[7]": "passed"}
    assert rec["platform"].startswith("cpu")
    assert rec["source_hash"] == L.source_hash(reg, reg.variants["evfake_add"])[0]
    assert L.gate_states(reg)["evfake_add"].state == "fresh"

    # Edit the kernel source: same behaviour, different bytes -> the recorded result no longer applies.
    impl = repo / "kernels" / "evfake" / "impl.py"
    impl.write_text(IMPL.replace("return", f"# edited {random.random()}\n    return"))
    st = L.gate_states(reg)["evfake_add"]
    assert st.state == "stale" and st.recorded_hash == rec["source_hash"] != st.source_hash
    assert "kernels/evfake/impl.py changed" in st.detail and st.changes == ["kernels/evfake/impl.py changed"]
    # Editing the gate test counts as well (the hash covers the test file).
    assert cli.main(["gate", "R9K_EVFAKE_ADD"]) == 0
    assert L.gate_states(reg)["evfake_add"].state == "fresh"
    t = repo / "kernels" / "evfake" / "test_evfake.py"
    t.write_text(t.read_text() + "\n# a comment\n")
    assert L.gate_states(reg)["evfake_add"].state == "stale"

    # A broken kernel: the run fails, exit status 1, the gate is failed.
    impl.write_text(IMPL.replace("x + y", "x - y"))
    capsys.readouterr()
    assert cli.main(["gate", "evfake_add"]) == 1
    assert "1 gate(s) FAILED: evfake_add" in capsys.readouterr().out
    assert L.gate_states(reg)["evfake_add"].state == "failed"
    assert _ledger(repo)[-1]["result"] == "fail"


def test_gpu_tests_reported_and_missing_ids_fail(repo, capsys):
    reg = load_registry()
    assert cli.main(["gate", "evfake_gpu", "evfake_lost", "--format", "json"]) == 1
    d = json.loads(capsys.readouterr().out)
    recs = {r["variant"]: r for r in d["records"]}
    assert recs["evfake_gpu"]["outcomes"]["kernels/evfake/test_evfake.py::test_on_gpu"] == "needs-gpu"
    assert recs["evfake_gpu"]["result"] == "partial"
    assert d["needs_gpu"] == {"evfake_gpu": ["kernels/evfake/test_evfake.py::test_on_gpu"]}
    # A test file that cannot be imported is an error of its own gate; the other files still ran.
    assert recs["evfake_lost"]["outcomes"] == {"kernels/evfake/test_evfake.py::test_renamed": "not-found",
                                               "kernels/evfake/test_gone.py": "not-found",
                                               "kernels/evfake/test_broken.py": "error"}
    states = L.gate_states(reg)
    # Nothing has run on a GPU yet, so the GPU-marked half of the gate is missing, not passed.
    assert states["evfake_gpu"].state == "missing"
    assert states["evfake_gpu"].needs_gpu == ["kernels/evfake/test_evfake.py::test_on_gpu"]
    assert states["evfake_gpu"].tests["kernels/evfake/test_evfake.py::test_exact"] == "passed"
    assert states["evfake_lost"].state == "failed"
    # A record from a GPU platform at the same source hash completes the gate.
    files, missing = L.file_hashes(reg, reg.variants["evfake_gpu"])
    L.append_records(L.ledger_path(reg), [L.GateRecord(
        "evfake_gpu", reg.variants["evfake_gpu"].gate.tests, "pass",
        {"kernels/evfake/test_evfake.py::test_on_gpu": "passed"}, "cuda-h200", "2026-11-30T16:00:00Z",
        L.hash_of(files, missing), len(files), deps=files,
        toolchain={"torch": "2.9.0", "triton": "3.6.0", "vllm": None, "python": "3.12.3", "device": "h200"})])
    assert L.gate_states(reg)["evfake_gpu"].state == "fresh"
    assert L.gate_states(reg)["evfake_gpu"].platforms == ["cpu-triton-interpret", "cuda-h200"]


def test_gate_profile_and_validate_warning(repo, capsys):
    from r9k.registry.validate import validate

    reg = load_registry()

    def gate_warnings():
        return [d for d in validate(reg, profile="evfake").warnings if d.code == "gate"]

    assert [d.items[0] for d in gate_warnings()] == ["evfake_add"]  # default-on and active, never gated
    # Consequences: launch warns, launch --strict refuses (before starting anything).
    assert cli.main(["launch", "--profile", "evfake", "--dry-run"]) == 0
    assert "warning[gate]: default-on variant 'evfake_add'" in capsys.readouterr().err
    assert cli.main(["launch", "--profile", "evfake", "--dry-run", "--strict"]) == 1  # refused by --strict only (exit-code rule)
    assert "warning[gate]: default-on variant 'evfake_add'" in capsys.readouterr().err
    assert cli.main(["gate", "--profile", "evfake", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "kernels/evfake/test_evfake.py::test_on_gpu" in out and "evfake_lost" not in out
    assert cli.main(["gate", "--profile", "evfake"]) == 0
    out = capsys.readouterr().out
    assert "1 test item(s) need a GPU" in out and "evfake_gpu: kernels/evfake/test_evfake.py::test_on_gpu" in out
    assert {r["variant"] for r in _ledger(repo)} == {"evfake_add", "evfake_gpu"}
    assert gate_warnings() == []
    capsys.readouterr()
    assert cli.main(["launch", "--profile", "evfake", "--dry-run", "--strict"]) == 0, capsys.readouterr().err
    assert cli.main(["gate", "--status"]) == 0
    out = capsys.readouterr().out
    assert "evfake_add" in out and "fresh" in out and "evfake_lost" in out and "never run" in out


def test_unreadable_ledger_lines_are_reported(repo):
    reg = load_registry()
    p = L.ledger_path(reg)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text('{"variant": "evfake_add"}\nnot json\n')
    records, problems = L.read_ledger(p)
    assert records == [] and len(problems) == 2 and problems[0].startswith(f"{p}:1:")


def test_pairs_gate_on_the_cpu_decode_step(tmp_path, monkeypatch, capsys):
    """Two real variants of the tiny decode-step model, alone and together, against stock."""
    pytest.importorskip("torch")
    prof = tmp_path / "profiles"
    prof.mkdir()
    (prof / "pairdemo.toml").write_text('description = "two variants"\nextends = "stock"\ntp = 4\n[knobs]\n'
                                        'R9K_HC_FP8_DECODE = "1"\nR9K_SHARED_EXPERT = "r9k"\n')
    monkeypatch.setenv(envvars.PROFILES_DIR.name, str(prof))
    assert cli.main(["gate", "--pairs", "--profile", "pairdemo", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert set(d["alone"]) == {"hc_fp8_decode", "shared_expert_fused"} and d["alone"]["hc_fp8_decode"] > 0
    (pair,) = d["pairs"]
    assert pair["flagged"] is False and pair["d_pair"] <= pair["d_a"] + pair["d_b"]
    assert "router_gemm" not in d["alone"]  # at stock in this profile
    assert cli.main(["gate", "--pairs"]) == 2


def test_pair_flagging_rule():
    from r9k.r9kctl.evidence.pairs import PairResult

    assert PairResult("a", "b", 3e-3, 1e-3, 1e-3).flagged
    assert not PairResult("a", "b", 2e-3, 1e-3, 1e-3).flagged
    assert PairResult("a", "b", 1e-9, 0.0, 0.0).excess == float("inf")
