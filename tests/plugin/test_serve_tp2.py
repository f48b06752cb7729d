"""``r9kctl launch --dry-run`` output pasted into a shell starts the same server: vLLM's CPU backend at
TP 2 (``VLLM_CPU_OMP_THREADS_BIND=nobind``), launcher knobs set on the command line.

One vLLM start (~1 min on 2 cores when idle): the printed lines run in ``bash`` from another directory;
the test checks that every process (API server, engine core, both workers) reports the printed hash,
that the API server read the printed manifest, that vLLM applied each launcher request (``/r9k/status``
``applied``, from vLLM's final config), that the router runs this project's kernel in both workers
(per-op layer counts and call counters, flushed by the workers), and that ``r9kctl status`` agrees.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytestmark = pytest.mark.e2e
E2E_MINUTES = 2  # its wall time in the CI rehearsal of 2026-12-01 (77 s): tests/conftest.py runs it early
pytest.importorskip("vllm")

START_TIMEOUT_S = 600
PY = sys.executable


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - local test server
        return json.loads(r.read().decode() or "null")


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:  # noqa: S310
        return json.loads(r.read().decode())


def test_pasted_dry_run_serves_tp2_with_the_same_set(tmp_path):
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("R9K_", "_R9K_", "VLLM_"))}
    env["R9K_CACHE_DIR"] = str(tmp_path / "cache")
    dry = subprocess.run([PY, "-m", "r9k.r9kctl.cli", "launch", "--profile", "cpu-smoke", "--tp", "2",
                          "--set", "NBT=1024", "--set", "UTIL=0.5", "--dry-run", "--", "--port", str(port)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr[-3000:]
    text = dry.stdout
    h = re.search(r"^# profile cpu-smoke tp2 hash ([0-9a-f]{12})$", text, re.M).group(1)
    # the manifest travels in vLLM's own config (--additional-config '{"r9k": {...}}'), its file beside it
    carrier = json.loads(shlex.split(text.strip().splitlines()[-1].split("--additional-config", 1)[1])[0])["r9k"]
    assert carrier["hash"] == h and "R9K_MANIFEST" not in text, carrier.keys()
    manifest = carrier["path"]
    model = text.strip().splitlines()[-1].split()[2]
    assert os.path.isfile(manifest) and os.path.isdir(model), "the printed manifest and model exist"
    script = tmp_path / "pasted.sh"
    script.write_text(text)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    log = open(tmp_path / "server.log", "wb")
    shell_env = {k: v for k, v in env.items() if k != "R9K_CACHE_DIR"}
    shell_env["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
    srv = subprocess.Popen(["bash", str(script)], env=shell_env, cwd=elsewhere, stdout=log,
                           stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + START_TIMEOUT_S
        while True:
            assert srv.poll() is None, (tmp_path / "server.log").read_text()[-5000:]
            try:
                _get(base + "/health")
                break
            except OSError:
                assert time.time() < deadline, "no /health in time"
                time.sleep(2)
        out = _post(base + "/v1/completions", {"model": model, "prompt": ["Once upon a time", "The capital of"],
                                               "max_tokens": 8, "temperature": 0})
        assert len(out["choices"]) == 2

        # the workers flush their counters within about a second
        for _ in range(30):
            st = _get(base + "/r9k/status")
            calls = st.get("ops", {}).get("router_gemm", {}).get("by_process", {})
            if all(calls.get(w, {}).get("calls", {}).get("fused", 0) > 0 for w in ("VllmWorker-0", "VllmWorker-1")):
                break
            time.sleep(1)
        procs = st["processes"]
        assert {"MainProcess", "EngineCore", "VllmWorker-0", "VllmWorker-1"} <= set(procs)
        assert {p["hash"] for p in procs.values()} == {h} and st["agree"]
        assert "additional-config" in st["origin"].replace("_", "-") and st["origin"].endswith(", from r9kctl launch"), st["origin"]
        rows = {r["knob"]: r for r in st["applied"]["rows"]}
        assert rows["(tp)"]["applied"] == "2" and rows["NBT"]["state"] == "applied" and rows["UTIL"]["state"] == "applied"
        assert st["applied"]["mismatches"] == []
        op = st["ops"]["router_gemm"]
        assert op["installed"] == 2, op  # the tiny model's two MoE gates run the r9k router GEMM
        assert op["calls"].get("fused", 0) > 0, op
        assert st["plan"]["installed"] == 1 and st["plan"]["fallback"] == 0

        cli = subprocess.run([PY, "-m", "r9k.r9kctl.cli", "--plain", "status", "--url", base], env=env,
                             capture_output=True, text=True, timeout=60)
        assert cli.returncode == 0 and h in cli.stdout and "router_gemm" in cli.stdout, cli.stdout + cli.stderr
        logtext = (tmp_path / "server.log").read_text(errors="replace")
        for who in ("EngineCore", "VllmWorker-0", "VllmWorker-1"):
            assert re.search(rf"\({who} pid=\d+\).*r9k {h}: profile cpu-smoke \(tp 2", logtext), who
    finally:
        os.killpg(srv.pid, signal.SIGTERM)
        try:
            srv.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(srv.pid, signal.SIGKILL)
            srv.wait(10)
        log.close()
