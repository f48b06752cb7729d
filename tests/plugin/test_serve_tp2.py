"""``r9kctl launch --dry-run`` output pasted into a shell starts the same server: vLLM's CPU backend at
TP 2 (``VLLM_CPU_OMP_THREADS_BIND=nobind``), launcher knobs set on the command line.

One vLLM start (~1 min on 2 cores when idle): the printed lines run in ``bash`` from another directory;
the test checks that every process (API server, engine core, both workers) reports the printed hash,
that the API server read the printed manifest, that vLLM applied each launcher request (``/r9k/status``
``applied``, from vLLM's final config), that the router runs this project's kernel in both workers
(per-op layer counts and call counters, flushed by the workers), and that ``r9kctl status`` agrees.

The same launch switches the all-reduce variants on (``--set R9K_R4D_AR=1``, the compressed 4-bit wire from
64 KB: vLLM's profiling run, 1024 tokens x 128 x bf16 = 256 KB a message, takes it; the requests' messages,
at most a few KB, stay exact) with the in-server check on (``envvars.SELFCHECK``): both workers' tensor-parallel
groups run ``allreduce`` (fused calls > 0 of both schedules), and every checked call passed its check: the
one-shot sum is the fp32 sum of the two ranks' inputs rounded to nearest, bit for bit, and vLLM's stock
all-reduce of the same call a rounding of that same fp32 sum (plugin/allreduce.py ``roundings``: bit for bit
where vLLM's CPU transport rounds to nearest, i.e. gloo, which its AVX2 build uses; one step of the dtype apart
where its AVX-512 shared-memory all-reduce rounds toward zero), the compressed sum within its stated
per-block L2 bound (kernels/allreduce/reference.py ``error_bound``, from both ranks' inputs). Every one-shot
call is checked, so the requests' all-reduces, the only ones whose results reach the completions, are
stock's sum up to that rounding.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from servers import free_port

pytestmark = pytest.mark.e2e
E2E_MINUTES = 2  # its wall time in the CI rehearsal of 2026-12-01 (77 s): tests/conftest.py runs it early
pytest.importorskip("vllm")

START_TIMEOUT_S = 600
PY = sys.executable




def _get(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - local test server
        return json.loads(r.read().decode() or "null")


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:  # noqa: S310
        return json.loads(r.read().decode())


def test_pasted_dry_run_serves_tp2_with_the_same_set(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("R9K_", "_R9K_", "VLLM_"))}
    env["R9K_CACHE_DIR"] = str(tmp_path / "cache")
    dry = subprocess.run([PY, "-m", "r9k.r9kctl.cli", "launch", "--profile", "cpu-smoke", "--tp", "2",
                          "--set", "NBT=1024", "--set", "UTIL=0.5", "--set", "R9K_R4D_AR=1", "--set", "R9K_R4D_AR_MAX_MB=48",
                          "--set", "R9K_AR_QUANT=1", "--set", "R9K_AR_QUANT_BITS=4", "--set", "R9K_AR_QUANT_MIN_KB=64",
                          "--dry-run", "--", "--port", str(port)],
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
    shell_env["R9K_SELFCHECK"] = "1"  # the all-reduce's in-server check against vLLM's stock all-reduce
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
            ar = st.get("ops", {}).get("allreduce", {}).get("by_process", {})
            if all(calls.get(w, {}).get("calls", {}).get("fused", 0) > 0 and
                   ar.get(w, {}).get("calls", {}).get("fused:one_shot", 0) > 0 for w in ("VllmWorker-0", "VllmWorker-1")):
                break
            time.sleep(1)
        # then until the all-reduce counters stand still for longer than a flush interval: a worker's file is
        # a snapshot taken by its flusher thread once a second, possibly in the middle of a call
        prev = None
        for _ in range(30):
            now = {w: v.get("calls") for w, v in st.get("ops", {}).get("allreduce", {}).get("by_process", {}).items()}
            if now == prev:
                break
            prev = now
            time.sleep(1.5)
            st = _get(base + "/r9k/status")
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
        # R9K_ROUTER, and the all-reduce's switch with its four knobs (one adapter: the device communicator)
        assert st["plan"]["installed"] == 6 and st["plan"]["fallback"] == 0, st["plan"]
        ar = st["ops"]["allreduce"]
        print(json.dumps(ar, indent=1))
        for w in ("VllmWorker-0", "VllmWorker-1"):
            mine = ar["by_process"][w]
            c = mine["calls"]
            assert mine["installed"] == 1, mine  # its tensor-parallel group
            assert c.get("fused:one_shot", 0) > 0 and c.get("fused:compressed_one_shot", 0) > 0, (w, c)
            said = [ln for ln in (tmp_path / "server.log").read_text(errors="replace").splitlines() if "r9k: allreduce" in ln]
            assert not [p for p in c if p.startswith(("check-failed", "fallback"))], (w, c, said)
            assert c["checked:one_shot"] == c["fused:one_shot"], (w, c)  # every exact call: stock's sum
            assert c["checked:compressed_one_shot"] > 0, (w, c)

        cli = subprocess.run([PY, "-m", "r9k.r9kctl.cli", "--plain", "status", "--url", base], env=env,
                             capture_output=True, text=True, timeout=60)
        assert cli.returncode == 0 and h in cli.stdout and "router_gemm" in cli.stdout, cli.stdout + cli.stderr
        assert "allreduce" in cli.stdout and "reference algorithm over gloo" in cli.stdout, cli.stdout
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
