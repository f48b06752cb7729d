"""eval record against real vLLM: the ``cpu-smoke`` launch (tiny Qwen2-MoE on vLLM's CPU backend).

Marked ``e2e``. The server is the shared cpu-smoke one (tests/servers.SharedServer: ``r9kctl launch --profile
cpu-smoke -- --port P``, as a user starts it, shared with the other tests of its xdist group; its router runs
this project's kernel under the Triton interpreter, deterministic like the rest). This test is about the
evaluation client. The tiny model has random weights and no chat template, so the completions API is used and
the accuracy is whatever it is; what is checked is the file and that two runs at concurrency 1 give identical
outputs (greedy decoding on one engine is deterministic).
"""
from __future__ import annotations

import importlib.util

import pytest

from r9k.r9kctl import cli
from servers import SharedServer
from r9k.r9kctl.evidence import mcnemar, results

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")]
E2E_MINUTES = 2  # its wall time in the CI rehearsal of 2026-12-01 (74 s): tests/conftest.py runs it early


@pytest.mark.xdist_group(SharedServer.GROUP)
def test_record_against_cpu_smoke(tmp_path, capsys, cpu_smoke_server):
    url = f"http://127.0.0.1:{cpu_smoke_server.port}"
    outs = []
    for name in ("a", "b"):
        out = tmp_path / f"{name}.jsonl"
        rc = cli.main(["eval", "record", "--url", url, "--dataset", "arith-smoke", "--out", str(out),
                       "--api", "completions", "--max-tokens", "16", "--limit", "8", "--quiet"])
        assert rc == 0, capsys.readouterr().err
        outs.append(results.load(out))
    a, b = outs
    assert a.n == 8 and a.header["params"]["concurrency"] == 1
    assert all(r.output is not None and len(r.output_sha256) == 64 for r in a.results.values())
    cmp = mcnemar.compare(a, b)
    assert cmp.identical == 8 and cmp.b == cmp.c == 0
