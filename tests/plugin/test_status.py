"""The status a server reports: file sections per process, the HTTP route, ``r9kctl status``."""
from __future__ import annotations

import json

import pytest

import r9k.plugin as plugin
from r9k.plugin import status


def _section(name, role, rank, h, in_use=None):
    return {"profile": "cpu-smoke", "hash": h, "tp": 1, "model": "tiny-qwen2-moe", "platform": "cpu",
            "origin": "test", "strict": False, "values": {"R9K_ROUTER": "r9k"},
            "non_stock": [{"variant": "router_gemm", "knob": "R9K_ROUTER", "value": "r9k", "stock": "stock",
                           "layer": "profile", "source": "profiles/cpu-smoke.toml:18",
                           "implementation": "planned", "mode": "fused"}],
            "process": {"name": name, "pid": 100 + rank, "role": role, "rank": rank},
            "in_use": in_use or {}, "time": 0.0}


def test_sections_merge_and_the_worker_reports_what_is_used(tmp_path):
    path = str(tmp_path / "s.json")
    status.write_section(path, _section("MainProcess", "main", 0, "aaaaaaaaaaaa", {"router_gemm": "planned"}))
    status.write_section(path, _section("EngineCore", "engine", 0, "aaaaaaaaaaaa"))
    status.write_section(path, _section("VllmWorker-0", "worker", 0, "aaaaaaaaaaaa", {"router_gemm": "fused!"}))
    data = status.merged_status(None, path)
    assert set(data["processes"]) == {"MainProcess", "EngineCore", "VllmWorker-0"}
    assert data["in_use"] == {"router_gemm": "fused!"} and data["in_use_from"] == "VllmWorker-0"
    assert data["agree"] and data["hash"] == "aaaaaaaaaaaa" and data["non_stock"][0]["knob"] == "R9K_ROUTER"

    # a section of another launch (other hash) starts the file afresh
    status.write_section(path, _section("MainProcess", "main", 0, "bbbbbbbbbbbb"))
    assert set(json.loads(open(path).read())["processes"]) == {"MainProcess"}


def test_r9kctl_status_reads_the_file_and_flags_disagreement(tmp_path, capsys):
    from r9k.r9kctl.cli import main

    path = str(tmp_path / "s.json")
    status.write_section(path, _section("MainProcess", "main", 0, "aaaaaaaaaaaa"))
    status.write_section(path, _section("VllmWorker-0", "worker", 0, "aaaaaaaaaaaa", {"router_gemm": "fused!"}))
    assert main(["--plain", "status", "--file", path]) == 0
    out = capsys.readouterr().out
    assert "aaaaaaaaaaaa" in out and "R9K_ROUTER" in out and "fused!" in out

    # a worker that wrote another hash into the same file (bypassing the start check) is flagged
    data = json.loads(open(path).read())
    data["processes"]["VllmWorker-1"] = _section("VllmWorker-1", "worker", 1, "cccccccccccc")
    open(path, "w").write(json.dumps(data))
    assert main(["--plain", "status", "--file", path, "--format", "json"]) == 1
    assert main(["status", "--url", "http://127.0.0.1:9"]) == 2  # nothing listens: a clear error


def test_route_answers_the_active_set(plugin_env):
    fastapi = pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient
    from vllm.plugins.endpoint_plugins.interface import EndpointPlugin

    plugin_env.setenv("R9K_PROFILE", "cpu-smoke")
    plugin_env.setattr(plugin, "_emit", lambda level, line: None)
    plugin.register()
    ep = status.endpoint_plugin()
    assert isinstance(ep, EndpointPlugin)
    app = fastapi.FastAPI()
    ep.attach_router(app)
    res = TestClient(app).get(status.ROUTE)
    assert res.status_code == 200
    body = res.json()
    assert body["hash"] == plugin.active_set().hash and body["profile"] == "cpu-smoke"
    assert body["values"]["R9K_ROUTER"] == "r9k"
    assert "MainProcess" in body["processes"]
