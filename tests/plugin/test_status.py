"""The status a server reports: file sections per process, the HTTP route, ``r9kctl status``."""
from __future__ import annotations

import json
import os
import socket

import pytest

import r9k.plugin as plugin
from r9k.plugin import report
from r9k.registry import envvars


def _section(name, role, rank, h, in_use=None):
    from r9k.plugin.startup import pid_start_time

    return {"profile": "cpu-smoke", "hash": h, "tp": 1, "model": "tiny-qwen2-moe", "platform": "cpu",
            "origin": "test", "strict": False, "values": {"R9K_ROUTER": "r9k"},
            "non_stock": [{"variant": "router_gemm", "knob": "R9K_ROUTER", "value": "r9k", "stock": "stock",
                           "layer": "profile", "source": "profiles/cpu-smoke.toml:18",
                           "implementation": "planned", "mode": "fused"}],
            # a live process (this test's): a status file of processes that are gone is a dead server's
            "process": {"name": name, "pid": os.getpid(), "role": role, "rank": rank,
                        "started": pid_start_time(os.getpid())},
            "in_use": in_use or {}, "time": 0.0}


def test_sections_merge_and_the_worker_reports_what_is_used(tmp_path):
    path = str(tmp_path / "s.json")
    report.write_section(path, _section("MainProcess", "main", 0, "aaaaaaaaaaaa", {"router_gemm": "planned"}))
    report.write_section(path, _section("EngineCore", "engine", 0, "aaaaaaaaaaaa"))
    report.write_section(path, _section("VllmWorker-0", "worker", 0, "aaaaaaaaaaaa", {"router_gemm": "fused!"}))
    data = report.merged_status(None, path)
    assert set(data["processes"]) == {"MainProcess", "EngineCore", "VllmWorker-0"}
    assert data["in_use"] == {"router_gemm": "fused!"} and data["in_use_from"] == "VllmWorker-0"
    assert data["agree"] and data["hash"] == "aaaaaaaaaaaa" and data["non_stock"][0]["knob"] == "R9K_ROUTER"

    # a section of another launch (other hash) starts the file afresh
    report.write_section(path, _section("MainProcess", "main", 0, "bbbbbbbbbbbb"))
    assert set(json.loads(open(path).read())["processes"]) == {"MainProcess"}


def test_r9kctl_status_reads_the_file_and_flags_disagreement(tmp_path, capsys):
    from r9k.r9kctl.cli import main

    path = str(tmp_path / "s.json")
    report.write_section(path, _section("MainProcess", "main", 0, "aaaaaaaaaaaa"))
    report.write_section(path, _section("VllmWorker-0", "worker", 0, "aaaaaaaaaaaa", {"router_gemm": "fused!"}))
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

    plugin_env.setenv(envvars.PROFILE.name, "cpu-smoke")
    plugin_env.setattr(report, "emit", lambda level, line: None)
    plugin.register()
    ep = report.endpoint_plugin()
    assert isinstance(ep, EndpointPlugin)
    app = fastapi.FastAPI()
    ep.attach_router(app)
    res = TestClient(app).get(report.ROUTE)
    assert res.status_code == 200
    body = res.json()
    assert body["hash"] == report.active_set().hash and body["profile"] == "cpu-smoke"
    assert body["values"]["R9K_ROUTER"] == "r9k"
    assert "MainProcess" in body["processes"]


def _vllm_app(argv, monkeypatch):
    """A FastAPI app with this route and vLLM's own middleware, as ``vllm serve ARGV`` sets it up
    (vLLM's parser, its ``build_app`` steps: ``app.state.args``, endpoint plugins, then its middleware)."""
    fastapi = pytest.importorskip("fastapi")
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.entrypoints.serve.middleware.register import init_entrypoints_middleware
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    app = fastapi.FastAPI()
    app.state.args = args
    report.endpoint_plugin().attach_router(app)

    @app.get("/v1/models")
    def models():
        return {"data": []}

    init_entrypoints_middleware(args, app, ())
    return app


@pytest.mark.parametrize("how", ["--api-key", "VLLM_API_KEY"])
def test_route_is_under_vllms_api_key_and_answers_no_paths_or_secrets(plugin_env, tmp_path, how):
    """With ``vllm serve --api-key K`` (or ``VLLM_API_KEY=K``), ``/r9k/status`` answers 401 as ``/v1/models``
    does without ``Authorization: Bearer K`` (main d8f2320: 200 with pids, every value and the status file's
    path); with it, the answer holds no file path unless asked for with ``?paths=1`` from this machine."""
    from fastapi.testclient import TestClient

    plugin_env.setenv(envvars.PROFILE.name, "cpu-smoke")
    plugin_env.setenv(envvars.STATUS_FILE.name, str(tmp_path / "server.status.json"))
    plugin_env.setattr(report, "emit", lambda level, line: None)
    plugin.register()
    argv = ["--api-key", "k3y"] if how == "--api-key" else []
    if how == "VLLM_API_KEY":
        plugin_env.setenv("VLLM_API_KEY", "k3y")
    client = TestClient(_vllm_app(argv, plugin_env))
    for path in ("/v1/models", report.ROUTE):
        assert client.get(path).status_code == 401, path
        assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401, path
    ok = {"Authorization": "Bearer k3y"}
    res = client.get(report.ROUTE, headers=ok)
    assert res.status_code == 200 and res.json()["profile"] == "cpu-smoke"
    assert str(tmp_path) not in res.text and "status_file" not in res.json() and "k3y" not in res.text
    # TestClient's peer is "testclient", not a loopback address: ?paths=1 from elsewhere changes nothing
    assert str(tmp_path) not in client.get(report.ROUTE + "?paths=1", headers=ok).text


def test_route_without_a_key_stays_open(plugin_env):
    from fastapi.testclient import TestClient

    plugin_env.setenv(envvars.PROFILE.name, "cpu-smoke")
    plugin_env.delenv("VLLM_API_KEY", raising=False)
    plugin_env.setattr(report, "emit", lambda level, line: None)
    plugin.register()
    assert TestClient(_vllm_app([], plugin_env)).get(report.ROUTE).status_code == 200


def test_public_masks_credentials_and_paths():
    data = {"status_file": "/c/run/s.json", "applied": {"args": ["--api-key", "k", "--x=/p", "--api-key=z"]},
            "env": {"HF_TOKEN": "t", "R9K_A": "1"}, "model": "/models/q", "values": {"R9K_B": "r9k"}}
    out = report.public(data)
    assert "status_file" not in out and out["applied"]["args"][1] == "***" and out["applied"]["args"][3] == "--api-key=***"
    assert out["env"] == {"HF_TOKEN": "***", "R9K_A": "1"} and out["values"] == {"R9K_B": "r9k"}
    assert out["model"] == report.PATH_SHOWN and out["applied"]["args"][2] == report.PATH_SHOWN


def test_a_workers_counters_file_is_merged_into_its_section(tmp_path):
    path = str(tmp_path / "s.json")
    report.write_section(path, _section("VllmWorker-0", "worker", 0, "aaaaaaaaaaaa"))
    report.write_counters(path, "VllmWorker-0", {"router_gemm": {"installed": ["g0"], "kept": {},
                                                                 "calls": {"fused": 3}}})
    data = report.merged_status(None, path)
    assert data["ops"]["router_gemm"]["calls"] == {"fused": 3} and data["ops"]["router_gemm"]["installed"] == 1


def test_counters_of_the_workers_reach_the_merged_status_and_r9kctl_status(tmp_path, capsys):
    """Each worker's counters (its file section) are merged: layers as rank 0 reports them, calls summed."""
    from r9k.r9kctl.cli import main

    path = str(tmp_path / "s.json")
    report.write_section(path, _section("MainProcess", "main", 0, "aaaaaaaaaaaa"))
    for rank, (fused, big) in enumerate([(7, 2), (5, 1)]):
        sec = _section(f"VllmWorker-{rank}", "worker", rank, "aaaaaaaaaaaa")
        sec["counters"] = {"router_gemm": {"installed": ["model.layers.0.mlp.gate", "model.layers.1.mlp.gate"],
                                           "kept": {"gate with bias": ["model.layers.2.mlp.gate"]},
                                           "calls": {"fused": fused, "fallback:rows>16": big}}}
        report.write_section(path, sec)
    data = report.merged_status(None, path)
    op = data["ops"]["router_gemm"]
    assert op["installed"] == 2 and op["kept"] == {"gate with bias": 1} and op["layers_from"] == "VllmWorker-0"
    assert op["calls"] == {"fused": 12, "fallback:rows>16": 3}
    assert op["by_process"]["VllmWorker-1"]["calls"]["fused"] == 5
    assert main(["--plain", "status", "--file", path]) == 0
    out = capsys.readouterr().out
    assert "router_gemm" in out and "1 gate with bias" in out and "fused=12" in out and "fallback:rows>16=3" in out


def test_the_flusher_writes_only_when_the_counters_change(plugin_env, tmp_path, monkeypatch):
    from r9k.plugin import report

    plugin_env.setenv(envvars.PROFILE.name, "cpu-smoke")
    plugin_env.setenv(envvars.STATUS_FILE.name, str(tmp_path / "st.json"))
    monkeypatch.setattr(report, "emit", lambda level, line: None)
    monkeypatch.setattr(report, "FLUSH_INTERVAL_S", 3600.0)  # drive the flusher by hand
    report.reset()
    try:
        plugin.register()
        f = report._flusher
        assert f is not None, "a process with an installed adapter flushes its counters"
        writes = []
        monkeypatch.setattr(report, "write_counters", lambda path, process, snap: writes.append(1))
        f.look(report.snapshot(), None)
        assert writes == [1]  # first look: the (empty) counters
        f.look(report.snapshot(), None)
        assert writes == [1]  # unchanged: no write
        report.layer("router_gemm", "model.layers.0.mlp.gate", True)
        report.hit("router_gemm", "fused")
        f.look(report.snapshot(), None)
        assert writes == [1, 1]
        logged = []
        monkeypatch.setattr(report, "emit", lambda level, line: logged.append(line))
        f.look(report.snapshot(), None)  # stable: the model is built, its layer table is logged once
        f.look(report.snapshot(), None)
        assert writes == [1, 1] and len([ln for ln in logged if "model built" in ln]) == 1
        assert any("router_gemm: 1 run r9k (model.layers.0.mlp.gate)" in ln for ln in logged)
    finally:
        report.reset()


def test_an_exited_unreaped_process_is_not_alive():
    """A worker that has exited but not been reaped yet (a zombie: its parent died and init has not waited for
    it) is gone: the CI run of 2026-12-01 saw ``status --file`` of a stopped server exit 0 on such a worker."""
    import time

    from r9k.plugin.startup import pid_start_time, process_alive

    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        for _ in range(200):  # until the child has exited (state Z), never reaped meanwhile
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.01)
        else:
            pytest.fail("the child never exited")
        assert pid_start_time(pid) is None and not process_alive(pid, None)
        assert process_alive(os.getpid(), pid_start_time(os.getpid()))
    finally:
        os.waitpid(pid, 0)


def test_cluster_merges_every_ranks_table_and_counters_per_node_with_their_age():
    """The head's cluster view: agreement records (who), this node's worker section, and the cluster file rank 0
    keeps from the ranks' shared figures; per node and rank the counters and their age (head's clock), calls
    summed over every rank, the ranks with no figures, and the ranks whose figures stopped coming."""
    from r9k.plugin.agree import STALE_AFTER_S

    now = 1000.0
    head = socket.gethostname()  # the head is this machine; its rank 0 is this (running) process
    agreed = [{"node": n, "rank": r, "pid": os.getpid() if r == 0 else 100 + r, "process": f"VllmWorker-{r % 2}",
               "hash": "aaaaaaaaaaaa", "in_use": {}, "modes": {"router_gemm": "fused"}}
              for r, n in enumerate([head, head, "n1", "n1"])]
    head_worker = _section("VllmWorker-0", "worker", 0, "aaaaaaaaaaaa", {"router_gemm": "fused!"})
    head_worker["process"]["node"] = head
    head_worker["ranks"] = agreed
    head_worker["counters"] = {"router_gemm": {"installed": ["l0"], "kept": {}, "calls": {"fused": 7}}}

    def rec(rank, calls, received):
        return {"node": agreed[rank]["node"], "rank": rank, "pid": 100 + rank, "process": agreed[rank]["process"],
                "hash": "aaaaaaaaaaaa", "in_use": {"router_gemm": "fused@" + str(rank)}, "modes": {},
                "counters": {"router_gemm": {"installed": ["l0"], "kept": {},
                                             "calls": {"fused": calls, "fallback:rows>16": 1}}},
                "time": received - 50.0, "received": received}  # its own clock is off: the head's is used

    live = {"world_size": 4, "collected": now - 1,
            "ranks": {"0": rec(0, 3, now - 2), "2": rec(2, 11, now - 1.5), "3": rec(3, 5, now - STALE_AFTER_S - 10)}}
    cl = report.cluster({"VllmWorker-0": head_worker}, 4, live, now=now)
    assert sorted(cl["nodes"]) == sorted([head, "n1"]) and sorted(cl["nodes"][head]) == ["0", "1"]
    n1 = cl["nodes"]["n1"]
    assert n1["2"]["counters"]["router_gemm"]["calls"]["fused"] == 11 and n1["2"]["age_s"] == 1.5
    assert n1["2"]["in_use"] == {"router_gemm": "fused@2"} and n1["2"]["source"] == "live"
    assert n1["3"]["age_s"] == STALE_AFTER_S + 10 and cl["stale"] == [3]
    assert cl["age_s"]["n1"] == STALE_AFTER_S + 10  # a node's figures are as old as its oldest rank's
    # rank 0: this node's running worker's own section (current) wins over its older shared figures
    r0 = cl["nodes"][head]["0"]
    assert r0["source"] == "local" and r0["counters"]["router_gemm"]["calls"] == {"fused": 7} and r0["age_s"] == 0
    # rank 1 agreed but never sent figures
    assert cl["nodes"][head]["1"]["counters"] is None and cl["not_reported"] == [1]
    assert cl["calls"] == {"router_gemm": {"fused": 7 + 11 + 5, "fallback:rows>16": 2}}
    assert cl["world_size"] == 4 and cl["collected"] == now - 1


def test_the_route_merges_the_cluster_file_rank_0_keeps(tmp_path, capsys):
    """merged_status (what /r9k/status and ``r9kctl status --file`` answer) reads the cluster file beside the
    status file; ``r9kctl status`` prints every rank's calls and age, and the ranks not reported."""
    import time

    from r9k.r9kctl.cli import main

    path = str(tmp_path / "s.json")
    report.write_section(path, _section("MainProcess", "main", 0, "aaaaaaaaaaaa"))
    rec = {"node": "far-node", "rank": 1, "pid": 4242, "process": "VllmWorker-1", "hash": "aaaaaaaaaaaa",
           "in_use": {}, "modes": {"router_gemm": "fused"}, "time": time.time(), "received": time.time(),
           "counters": {"router_gemm": {"installed": [], "kept": {}, "calls": {"fused": 9}}}}
    report.write_cluster(path, {"world_size": 3, "collected": time.time(), "ranks": {"1": rec}})
    data = report.merged_status(None, path)
    assert data["cluster"]["nodes"]["far-node"]["1"]["counters"]["router_gemm"]["calls"] == {"fused": 9}
    assert data["cluster"]["not_reported"] == [0, 2] and data["cluster"]["calls"] == {"router_gemm": {"fused": 9}}
    assert main(["--plain", "status", "--file", path]) == 0
    out = capsys.readouterr().out
    assert "far-node" in out and "router_gemm fused=9" in out and "ranks that have not reported: 0, 2" in out
