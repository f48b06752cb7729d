"""Two servers of one profile (cpu-smoke) on one machine, one cache directory: each reports only its own
processes and counters (issue "One active set per server": status and counters keyed by the server
instance id ``r9kctl launch`` creates), and a stopped server's status file is reported dead.

One test, two servers: A is the shared cpu-smoke server (tests/servers.SharedServer, already up), B is started
beside it with the same cache directory and stopped by the test; marked ``e2e``.
"""
from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from servers import live_pids

from .test_e2e_cpu_smoke import R9KCTL, SharedServer, completions, launch, wait_healthy

pytestmark = pytest.mark.e2e
E2E_MINUTES = 3  # its wall time in the CI rehearsal of 2026-12-01 (127 s): tests/conftest.py runs it early
pytest.importorskip("vllm")


def _status(env: dict, port: int) -> dict:
    res = subprocess.run(R9KCTL + ["status", "--url", f"http://127.0.0.1:{port}", "--format", "json"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)


def _calls(data: dict) -> int:
    return sum(sum(o.get("calls", {}).values()) for o in (data.get("ops") or {}).values())


def _pids(data: dict) -> set[int]:
    return {p["pid"] for p in data["processes"].values()}


@pytest.mark.xdist_group(SharedServer.GROUP)
def test_two_servers_of_one_profile_report_only_their_own(tmp_path, cpu_smoke_server):
    env, a, port_a = cpu_smoke_server.env, cpu_smoke_server.srv, cpu_smoke_server.port  # one cache directory
    b = None
    try:
        b, port_b = launch(env, tmp_path, "b")
        wait_healthy(b, port_b)
        sa, sb = _status(env, port_a), _status(env, port_b)
        assert sa["server"] and sb["server"] and sa["server"] != sb["server"]
        assert sa["status_file"] != sb["status_file"]
        assert sa["hash"] == sb["hash"], "one profile, one set: only the server differs"
        # nothing per start in the config vLLM hashes into its compile-cache key (the server id travels in the
        # environment): B's compiled model is looked up where A saved its own (what vLLM then does with it is
        # vLLM's: 0.32's CPU build with torch 2.13 fails to load the AOT artifact and compiles again, 10 s
        # against A's 44 s on 2026-12-03, its inductor caches warm)
        key = re.compile(r"torch_aot_compile/([0-9a-f]{16,})")
        keys_a, keys_b = set(key.findall(a.text())), set(key.findall(b.text()))
        assert keys_a and keys_a == keys_b, (keys_a, keys_b)
        own_a, own_b = set(live_pids(session=a.proc.pid)), set(live_pids(session=b.proc.pid))
        assert _pids(sa) and _pids(sa) <= own_a, (sa["processes"], own_a)
        assert _pids(sb) and _pids(sb) <= own_b, (sb["processes"], own_b)
        assert {"main", "engine", "worker"} <= {p["role"] for p in sa["processes"].values()}

        before_b = _calls(sb)
        completions(port_a)  # requests to A only
        deadline, sa2 = time.time() + 120, sa
        while time.time() < deadline and _calls(sa2) <= _calls(sa):
            time.sleep(2)  # the workers' flushers write their counters about once a second
            sa2 = _status(env, port_a)
        assert _calls(sa2) > _calls(sa), "A's counters count A's requests"
        assert _calls(_status(env, port_b)) == before_b, "B's counters do not count A's requests"

        b.stop()
        sa3 = _status(env, port_a)
        assert not (_pids(sa3) & own_b), "A never lists B's processes"
        dead = subprocess.run(R9KCTL + ["status", "--file", sb["status_file"]], env=env, capture_output=True,
                              text=True, timeout=120)
        assert dead.returncode == 3 and "error[dead-server]" in dead.stderr, dead.stdout + dead.stderr
        b = None
    finally:
        if b is not None:
            b.stop()
