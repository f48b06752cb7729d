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
