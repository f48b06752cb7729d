"""End to end on vLLM's CPU backend, no GPU and no download: ``r9kctl launch --profile cpu-smoke``.

1. ``r9kctl launch --profile cpu-smoke`` starts a real vLLM server of the tiny Qwen2-MoE model; the test
   waits for ``/health``, gets greedy completions, reads the active set the server reports
   (``r9kctl status``), and finds the plugin's startup table with the hash in the log of every vLLM
   process (API server, engine core, worker), and the worker's line saying the router runs this
   project's Triton kernel (under the interpreter).
2. (The router at stock: tests/plugin/test_e2e_adapters.py compares this model with the router and its
   other variants on (profile cpu-qwen2-moe) against an all-stock launch, and checks on cpu-qwen3-next that
   the knobs reach vLLM's torch.compile cache key; kept out of here to save a vLLM start in CI.)
3. An invalid override: ``r9kctl launch`` refuses it itself; vLLM started by hand with it exits with
   the plugin's located error (the line ``r9kctl validate`` prints) before any weight is loaded.

Every process the test starts runs in its own session and is stopped (the whole process group);
the test then checks that none is left.

Slow (two vLLM starts, ~2-3 min on 2 cores): marked ``e2e``; deselect with ``-m "not e2e"``.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from servers import free_port, live_pids  # noqa: F401 - free_port: the other e2e tests import it from here

pytestmark = pytest.mark.e2e
E2E_MINUTES = 2  # its wall time in the CI rehearsal of 2026-12-01 (94 s): tests/conftest.py runs it early
pytest.importorskip("vllm")

PROMPTS = ["The quick brown fox", "Once upon a time", "The capital of France is"]
MAX_TOKENS = 8
START_TIMEOUT_S = 600  # a cold start compiles the model; generous for a loaded 2-core CI machine
PY = sys.executable
R9KCTL = [PY, "-m", "r9k.r9kctl.cli"]


# ------------------------------------------------------------------------------------------ helpers


#: lines of each server's log that a failing e2e test prints (tests/plugin/conftest.py's report hook)
LOG_TAIL_LINES = 60


class Server:
    """A process tree started in its own session, with its output in a log file.

    Every server is recorded in :attr:`started`; when a test fails, tests/plugin/conftest.py adds the last
    :data:`LOG_TAIL_LINES` lines of the log of each server that test started to its failure report."""

    started: list["Server"] = []

    def __init__(self, argv: list[str], env: dict, log: Path):
        Server.started.append(self)
        self.log = log
        self.fh = open(log, "wb")
        self.proc = subprocess.Popen(argv, env=env, stdout=self.fh, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=str(log.parent))

    def text(self) -> str:
        if not self.fh.closed:
            self.fh.flush()
        return self.log.read_text(errors="replace")

    def tail(self, n: int = LOG_TAIL_LINES) -> str:
        """The last ``n`` lines of the server's log ("" when it cannot be read)."""
        try:
            return "\n".join(self.text().splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        sid = self.proc.pid
        for sig, wait_s in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
            try:
                os.killpg(sid, sig)
            except ProcessLookupError:
                pass
            deadline = time.time() + wait_s
            while time.time() < deadline:
                if self.proc.poll() is not None and not live_pids(session=sid):
                    break
                time.sleep(0.5)
            else:
                continue
            break
        self.proc.wait(timeout=30)
        self.fh.close()
        left = live_pids(session=sid)
        assert not left, f"processes left running: {left}"


def wait_healthy(srv: Server, port: int) -> None:
    deadline = time.time() + START_TIMEOUT_S
    while time.time() < deadline:
        if srv.proc.poll() is not None:
            pytest.fail(f"server exited with {srv.proc.returncode} before /health:\n{srv.text()[-6000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(2)
    pytest.fail(f"no /health within {START_TIMEOUT_S} s:\n{srv.text()[-6000:]}")


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


def vllm_cache(tmp: Path) -> str:
    """vLLM's cache folder for the launches of this test session: pytest's base folder of the session (one per
    xdist worker), beside the tests' own folders. vLLM keys its torch.compile artifacts by its config hash,
    which covers the r9k carrier in --additional-config, so a launch of a set another test already compiled
    loads the compiled graph (about half of a cpu-smoke start on 2 cores) and a different set compiles anew
    (tests/plugin/test_e2e_adapters.py checks the keys differ)."""
    return str(Path(tmp).parent / "vllm-cache")


def base_env(tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("R9K_", "_R9K_", "VLLM_"))}
    env.pop("TRITON_INTERPRET", None)  # the profile sets it; the test must not
    env.update({
        "R9K_CACHE_DIR": str(tmp / "r9k-cache"),  # tiny model, manifests, status files
        "VLLM_CACHE_ROOT": vllm_cache(tmp),
        "VLLM_PLUGINS": "r9k",  # general plugin, and its /r9k/status route where installed
        "PYTHONUNBUFFERED": "1",
    })
    return env


def route_installed() -> bool:
    from importlib.metadata import entry_points

    return any(ep.name == "r9k" for ep in entry_points(group="vllm.endpoint_plugins"))


def read_status(env: dict, port: int, tmp: Path) -> dict:
    """The server's active set: through the HTTP route when the endpoint plugin is installed, and
    from the status file the server's processes wrote (its own, named by its server instance id: both agree)."""
    files = sorted((tmp / "r9k-cache" / "run").glob("server-*.status.json"), key=lambda f: f.stat().st_mtime)
    assert files, "the plugin wrote no status file for the server"  # newest last: this launch's
    res = subprocess.run(R9KCTL + ["status", "--file", str(files[-1]), "--format", "json"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads(res.stdout)
    if route_installed():
        res = subprocess.run(R9KCTL + ["status", "--url", f"http://127.0.0.1:{port}", "--format", "json"],
                             env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        via_http = json.loads(res.stdout)
        assert via_http["hash"] == data["hash"] and via_http["in_use"] == data["in_use"]
    # the human-readable form works too
    res = subprocess.run(R9KCTL + ["--plain", "status", "--file", str(files[-1])], env=env,
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


def launch(env: dict, tmp: Path, name: str, *sets: str) -> tuple[Server, int]:
    port = free_port()
    argv = R9KCTL + ["launch", "--profile", "cpu-smoke"]
    for s in sets:
        argv += ["--set", s]
    argv += ["--", "--port", str(port), "--host", "127.0.0.1"]
    return Server(argv, env, tmp / f"{name}.log"), port


# --------------------------------------------------------------------------------------------- test


def test_cpu_smoke_launch_status_stock_equivalence_and_fail_fast(tmp_path):
    env = base_env(tmp_path)
    started: list[Server] = []
    try:
        # 1. the profile's own set: R9K_ROUTER=r9k, the Triton router kernel through gate_linear
        srv, port = launch(env, tmp_path, "r9k")
        started.append(srv)
        wait_healthy(srv, port)
        texts_r9k = completions(port)
        status = read_status(env, port, tmp_path)
        srv.stop()
        log = srv.text()
        assert status["profile"] == "cpu-smoke" and status["agree"], status
        assert status["values"]["R9K_ROUTER"] == "r9k"
        assert "router_gemm fused (triton interpret)" in status["in_use"]["router_gemm"], status["in_use"]
        check_tables(log, status)
        if route_installed():  # predicted vs allocated KV cache (plugin/kvcache.py; notes/memory.md)
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
