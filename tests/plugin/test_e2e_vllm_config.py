"""``r9kctl launch --format vllm-config`` starts the server it describes: the two files it writes, used exactly as
it prints (``set -a; . DIR/vllm.env; set +a; vllm serve --config DIR/config.yaml``), start vLLM with the
profile's set in every process, and ``/r9k/status`` reports it with a server id of this start's own.

Before the start, the test holds the claim of the id the files carry (as a second server started from the same
files finds it held by the first): the server must take an id of its own, and its own status file. Marked ``e2e``.
"""
from __future__ import annotations

import json
import re
import subprocess
import urllib.request

import pytest

from servers import R9KCTL, Server, base_env, free_port, wait_healthy

pytestmark = pytest.mark.e2e
E2E_MINUTES = 2  # one cpu-smoke start (as tests/plugin/test_e2e_cpu_smoke.py)
pytest.importorskip("vllm")


def test_the_vllm_config_files_start_the_server_with_its_own_status(tmp_path):
    env = base_env(tmp_path)
    out, port = tmp_path / "out", free_port()
    res = subprocess.run(R9KCTL + ["launch", "--profile", "cpu-smoke", "--format", "vllm-config", "--out", str(out),
                                   "--", "--port", str(port), "--host", "127.0.0.1"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    command = res.stdout.strip().splitlines()[-1].strip()  # the printed way to start it, run as printed
    assert command.startswith("set -a; . ") and command.endswith(f"serve --config {out / 'config.yaml'}"), command
    cfg = (out / "config.yaml").read_text()
    h = re.match(r"# r9k-stack profile cpu-smoke tp1 hash ([0-9a-f]{12})", cfg).group(1)
    assert "server" not in json.loads(json.loads(re.search(r"^additional-config: (.*)$", cfg, re.M).group(1)))["r9k"]
    carried = re.search(r"^_R9K_SERVER=(\S+)$", (out / "vllm.env").read_text(), re.M).group(1)  # the files' server id

    # the first server of these files holds their id (this test process stands for it: alive)
    from r9k.plugin.startup import pid_start_time

    run = tmp_path / "r9k-cache" / "run"
    run.mkdir(parents=True, exist_ok=True)
    import os
    import socket

    (run / f"server-{carried}.claim").write_text(json.dumps({"pid": os.getpid(), "node": socket.gethostname(),
                                                             "started": pid_start_time(os.getpid())}))
    srv = Server(["bash", "-c", command], env, tmp_path / "vllm-config.log")
    try:
        wait_healthy(srv, port)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/r9k/status?paths=1", timeout=60) as r:
            st = json.loads(r.read())
        log = srv.tail()
        assert st["hash"] == h and st["profile"] == "cpu-smoke", log
        assert "--config" in st["origin"], st["origin"]
        assert st["server"] == f"{carried}.2" and st["status_file"].endswith(f"server-{carried}.2.status.json"), st
        procs = st["processes"]
        assert {"MainProcess", "EngineCore"} <= set(procs) and any(p.startswith("VllmWorker") for p in procs), procs
        assert {p["hash"] for p in procs.values()} == {h}
        shown = subprocess.run(R9KCTL + ["status", "--url", f"http://127.0.0.1:{port}"], env=env,
                               capture_output=True, text=True, timeout=120)
        assert shown.returncode == 0 and f"hash {h}" in shown.stdout, shown.stdout + shown.stderr
    finally:
        srv.stop()
