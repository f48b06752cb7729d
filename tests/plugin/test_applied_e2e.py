"""End to end on vLLM's CPU backend: a profile whose launcher knobs include a unit conversion (KVMEM, GiB ->
--kv-cache-memory-bytes) and a JSON config field (CGMODE -> --compilation-config cudagraph_mode) starts, and
/r9k/status shows every launcher request applied, 0 mismatches.

CGMODE is a rejected variant (27B TTFT on the R9700): the test's registry copy re-opens it (status opt-in) so
that a real JSON-field knob can be started here; everything else is the shipped registry. One vLLM start
(slow on 2 cores): marked ``e2e``.
"""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from .test_e2e_cpu_smoke import R9KCTL, Server, base_env, free_port, route_installed, wait_healthy

pytestmark = pytest.mark.e2e

PROFILE = """extends = "cpu-smoke"
description = "cpu-smoke with a unit-converted and a JSON-field launcher knob (tests/plugin/test_applied_e2e.py)"

[hardware]
gpus = 1
memory_gib_per_gpu = 2.0
name = "CPU (VLLM_CPU_KVCACHE_SPACE)"

[knobs]
KVMEM = "1"
CGMODE = "NONE"
"""


def test_launcher_requests_applied_with_0_mismatches(tmp_path):
    from r9k.registry.loader import PACKAGE_DIR

    reg = tmp_path / "registry"
    shutil.copytree(PACKAGE_DIR, reg, ignore=shutil.ignore_patterns("__pycache__"))
    other = reg / "variants" / "other.toml"
    text = other.read_text()
    block = text[text.index('knob = "CGMODE"'):]
    old = block[block.index('state = "rejected"'):block.index("\n", block.index("reason ="))]
    other.write_text(text.replace(old, 'state = "opt-in"\nreason = "re-opened by the test (JSON field on the CPU)"', 1))
    prof = tmp_path / "profiles"
    prof.mkdir()
    (prof / "cpu-applied.toml").write_text(PROFILE)
    env = base_env(tmp_path)
    common = ["--registry", str(reg), "--profiles-dir", str(prof)]
    dry = subprocess.run(R9KCTL + common + ["launch", "--profile", "cpu-applied", "--dry-run", "--format", "json"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    argv = json.loads(dry.stdout)["argv"]
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(2**30)
    # cpu-smoke's CUSTOM_OP_RMS_NORM (a vLLM switch) rides in the same JSON object
    assert json.loads(argv[argv.index("--compilation-config") + 1]) == {"cudagraph_mode": "NONE",
                                                                        "custom_ops": ["+rms_norm"]}

    port = free_port()
    srv = Server(R9KCTL + common + ["launch", "--profile", "cpu-applied", "--", "--port", str(port), "--host",
                                    "127.0.0.1"], env, tmp_path / "applied.log")
    try:
        wait_healthy(srv, port)
        files = sorted((tmp_path / "r9k-cache" / "run").glob("server-*.status.json"), key=lambda f: f.stat().st_mtime)
        assert files
        src = ["--url", f"http://127.0.0.1:{port}"] if route_installed() else ["--file", str(files[-1])]
        res = subprocess.run(R9KCTL + ["status", *src, "--format", "json"], env=env, capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        applied = json.loads(res.stdout)["applied"]
    finally:
        srv.stop()
    rows = {(r["knob"], r["where"]): r for r in applied["rows"]}
    assert applied["mismatches"] == [], applied
    kv = rows[("KVMEM", "cache_config.kv_cache_memory_bytes")]
    assert kv["state"] == "applied" and kv["applied"] == str(2**30)
    cg = rows[("CGMODE", "compilation_config.cudagraph_mode")]
    assert cg["state"] == "applied" and cg["applied"] == "NONE"
    assert all(r["state"] == "applied" for r in applied["rows"]), applied["rows"]
    log = srv.text()
    assert "0 mismatch(es)" in log
