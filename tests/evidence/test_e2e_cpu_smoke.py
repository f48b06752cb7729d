"""eval record against real vLLM: the ``cpu-smoke`` launch (tiny Qwen2-MoE on vLLM's CPU backend).

Slow (vLLM takes about two minutes to come up on two cores), so marked ``e2e``. The server is started
with ``r9kctl launch --profile cpu-smoke --set R9K_ROUTER=stock -- --port P``, as a user would.
The router stays at stock here: this test is about the evaluation client, not the router kernel, which the
plugin's own end-to-end test covers. The tiny model has random weights and no chat template, so the
completions API is used and the accuracy is whatever it is; what is checked is the file and that two runs
at concurrency 1 give identical outputs (greedy decoding on one engine is deterministic).
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
import urllib.request

import pytest

from r9k.r9kctl import cli
from servers import stop_group
from r9k.r9kctl.evidence import mcnemar, results
from r9k.registry import envvars

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")]
E2E_MINUTES = 2  # its wall time in the CI rehearsal of 2026-12-01 (74 s): tests/conftest.py runs it early


def test_record_against_cpu_smoke(tmp_path, capsys, free_port):
    port = free_port
    env = {k: v for k, v in os.environ.items() if not k.startswith(("R9K_", "VLLM_"))}
    env.pop("TRITON_INTERPRET", None)  # the profile sets it
    # vLLM's cache: the session's, shared by its launches (tests/plugin/test_e2e_cpu_smoke.vllm_cache)
    env.update({envvars.CACHE_DIR.name: str(tmp_path / "r9k-cache"), "VLLM_CACHE_ROOT": str(tmp_path.parent / "vllm-cache"),
                "PYTHONUNBUFFERED": "1"})
    argv = [sys.executable, "-m", "r9k.r9kctl.cli", "launch", "--profile", "cpu-smoke", "--set", "R9K_ROUTER=stock",
            "--", "--port", str(port), "--host", "127.0.0.1"]
    log = (tmp_path / "vllm.log").open("w")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM exited with {proc.returncode} before serving:\n"
                            + (tmp_path / "vllm.log").read_text()[-3000:])
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("vLLM did not come up within 600 s")
                time.sleep(2)
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
    finally:
        stop_group(proc)
        log.close()
