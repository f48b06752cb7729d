"""End to end on vLLM's CPU backend, no GPU and no download: ``r9kctl launch --profile cpu-smoke``.

1. The cpu-smoke server (``r9kctl launch --profile cpu-smoke``, a real vLLM server of the tiny Qwen2-MoE model,
   shared with the other tests of its xdist group: tests/servers.SharedServer) serves greedy completions; the
   test reads the active set the server reports (``r9kctl status``, through the route and the server's own
   status file), and finds the plugin's startup table with the hash in the log of every vLLM process (API
   server, engine core, worker), and the worker's line saying the router runs this project's Triton kernel
   (under the interpreter).
2. (The router at stock: tests/plugin/test_e2e_adapters.py compares this model with the router and its
   other variants on (profile cpu-qwen2-moe) against an all-stock launch, and checks on cpu-qwen3-next that
   the knobs reach vLLM's torch.compile cache key; kept out of here to save a vLLM start in CI.)
3. An invalid override: ``r9kctl launch`` refuses it itself; vLLM started by hand with it exits with
   the plugin's located error (the line ``r9kctl validate`` prints) before any weight is loaded.

Every process the test starts runs in its own session and is stopped (the whole process group); the test
then checks that none is left (the shared server's are checked when tests/conftest.py stops it).

Marked ``e2e``; deselect with ``-m "not e2e"``.
"""
from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest
from servers import (LOG_TAIL_LINES, R9KCTL, START_TIMEOUT_S, PY, Server, SharedServer, base_env,  # noqa: F401
                     free_port, launch_cpu_smoke, live_pids, vllm_cache, wait_healthy)  # the other e2e tests import these from here

pytestmark = pytest.mark.e2e
E2E_MINUTES = 2  # its wall time in the CI rehearsal of 2026-12-01 (94 s): tests/conftest.py runs it early
pytest.importorskip("vllm")

PROMPTS = ["The quick brown fox", "Once upon a time", "The capital of France is"]
MAX_TOKENS = 8


# ------------------------------------------------------------------------------------------ helpers


def post(port: int, path: str, body: dict) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=1800) as r:  # interpreted kernels on a loaded 2-core machine
        return json.loads(r.read())


def completions(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=30) as r:
        model = json.loads(r.read())["data"][0]["id"]
    out = []
    for p in PROMPTS:
        res = post(port, "/v1/completions", {"model": model, "prompt": p, "max_tokens": MAX_TOKENS,
                                             "temperature": 0, "seed": 0})
        ch = res["choices"][0]
        assert res["usage"]["completion_tokens"] == MAX_TOKENS, res
        out.append(ch["text"])
    return out


def route_installed() -> bool:
    from importlib.metadata import entry_points

    return any(ep.name == "r9k" for ep in entry_points(group="vllm.endpoint_plugins"))


def read_status(env: dict, port: int, tmp: Path) -> dict:
    """The server's active set: through the HTTP route when the endpoint plugin is installed, and from the
    status file the server's processes wrote (its own, named by its server instance id: both agree; without
    the route, the newest status file of the cache folder)."""
    via_http = None
    if route_installed():
        res = subprocess.run(R9KCTL + ["status", "--url", f"http://127.0.0.1:{port}", "--format", "json"],
                             env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        via_http = json.loads(res.stdout)
        file = Path(via_http["status_file"])
        assert file.parent == tmp / "r9k-cache" / "run", (file, tmp)
    else:
        files = sorted((tmp / "r9k-cache" / "run").glob("server-*.status.json"), key=lambda f: f.stat().st_mtime)
        assert files, "the plugin wrote no status file for the server"  # newest last: this launch's
        file = files[-1]
    res = subprocess.run(R9KCTL + ["status", "--file", str(file), "--format", "json"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads(res.stdout)
    if via_http is not None:
        assert via_http["hash"] == data["hash"] and via_http["in_use"] == data["in_use"]
    # the human-readable form works too
    res = subprocess.run(R9KCTL + ["--plain", "status", "--file", str(file)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and data["hash"] in res.stdout, res.stdout + res.stderr
    return data


def check_tables(log: str, status: dict) -> None:
    """The startup table and hash in the log of every vLLM process that the status names."""
    h = status["hash"]
    procs = status["processes"]
    assert {p["role"] for p in procs.values()} >= {"main", "engine", "worker"}, procs
    for name, p in procs.items():
        assert p["hash"] == h, (name, p)
        pat = re.compile(rf"r9k {h}: profile cpu-smoke \(tp 1, [^)]*\), {re.escape(name)} pid {p['pid']}\b")
        assert pat.search(log), f"no startup table of {name} (pid {p['pid']}) in the log"


def compile_dirs(log: str) -> set[str]:
    return set(re.findall(r"torch_compile_cache/torch_aot_compile/([0-9a-f]{16,})", log))


launch = launch_cpu_smoke  # the other e2e tests start their cpu-smoke servers with it


# --------------------------------------------------------------------------------------------- test


@pytest.mark.xdist_group(SharedServer.GROUP)
def test_cpu_smoke_launch_status_stock_equivalence_and_fail_fast(tmp_path, cpu_smoke_server):
    shared = cpu_smoke_server  # r9kctl launch --profile cpu-smoke, shared with the group's other tests
    env, srv, port = shared.env, shared.srv, shared.port
    started: list[Server] = []
    try:
        # 1. the profile's own set: R9K_ROUTER=r9k, the Triton router kernel through gate_linear
        texts_r9k = completions(port)
        status = read_status(env, port, shared.tmp)
        log = srv.text()
        assert status["profile"] == "cpu-smoke" and status["agree"], status
        assert status["values"]["R9K_ROUTER"] == "r9k"
        assert "router_gemm fused (triton interpret)" in status["in_use"]["router_gemm"], status["in_use"]
        check_tables(log, status)
        if route_installed():  # predicted vs allocated KV cache (plugin/report.py; notes/memory.md)
            kv = status.get("kv_cache") or {}
            assert kv.get("predicted_tokens") and kv.get("actual_tokens") and kv.get("difference_tokens") is not None, kv
            print(f"KV cache (cpu-smoke): {kv}")
            assert re.search(rf"r9k {status['hash']}: KV cache: predicted [\d,]+ tokens .*allocated [\d,]+ tokens", log)
        assert re.search(rf"r9k {status['hash']}: R9K_ROUTER=r9k -> r9k\.kernels\.router:router_gemm fused "
                         r"\(triton interpret\), first used by model\.layers\.0\.mlp\.gate", log), log[-4000:]

        # 2. (the router at stock: covered with the other variants of this model by
        #    tests/plugin/test_e2e_adapters.py, cpu-qwen2-moe; one vLLM start fewer here)
        print("greedy completions, r9k router:", texts_r9k)

        # 3a. an invalid override: the launcher refuses it, nothing starts
        res = subprocess.run(R9KCTL + ["launch", "--profile", "cpu-smoke", "--set", "R9K_ROUTER=bogus"],
                             env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and "R9K_ROUTER" in res.stderr, res.stdout + res.stderr

        # 3b. the same override reaching vLLM started by hand: the plugin stops it before any weight
        bad_env = dict(env, R9K_PROFILE="cpu-smoke", R9K_ROUTER="bogus")
        val = subprocess.run(R9KCTL + ["--plain", "validate", "--profile", "cpu-smoke"], env=bad_env,
                             capture_output=True, text=True, timeout=120)
        expected = [ln for ln in (val.stdout + val.stderr).splitlines() if "error[" in ln]
        assert val.returncode == 2 and expected, val.stdout + val.stderr
        built = subprocess.run([PY, "-m", "r9k.plugin.tiny_model"], env=env, capture_output=True, text=True,
                               timeout=300)  # the model the launches built (cached: instant)
        model = built.stdout.strip()
        assert built.returncode == 0 and Path(model, "config.json").exists(), built.stdout + built.stderr
        srv3 = Server([PY, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--port",
                       str(free_port()), "--max-model-len", "512"], bad_env, tmp_path / "bogus.log")
        started.append(srv3)
        rc = srv3.proc.wait(timeout=300)
        srv3.stop()
        log3 = srv3.text()
        assert rc != 0, log3[-4000:]
        assert "r9k: profile 'cpu-smoke' does not resolve; refusing to start vLLM" in log3, log3[-4000:]
        for line in expected:
            msg = line[line.index("error["):]
            assert msg in log3, (msg, log3[-4000:])
        for marker in ("Starting to load model", "Loading weights", "Initializing a V1 LLM engine"):
            assert marker not in log3, f"vLLM got as far as {marker!r} before the plugin stopped it"
    finally:
        for s in started:
            if s.proc.poll() is None or live_pids(session=s.proc.pid):
                s.stop()
