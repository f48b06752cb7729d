"""Every launch route carries the same set to the plugin, each start is a server of its own, and a server
without a set says so (issue 34 item 2). No vLLM server is started here: tests/plugin/test_e2e_vllm_config.py does."""
from __future__ import annotations

import json
import os
import socket

import pytest

from r9k.plugin import startup, report
from r9k.registry import envvars

pytest.importorskip("vllm")


def _plan(tmp_path):
    from r9k.r9kctl.launch import plan_launch, vllm_config_files
    from r9k.registry import load_registry

    plan = plan_launch(load_registry(), "cpu-smoke", write_manifest=False, build_model=False)
    assert plan.ok, [d.format() for d in plan.report.errors]
    cfg, _ = vllm_config_files(plan)
    path = tmp_path / "config.yaml"
    path.write_text(cfg)
    return plan, str(path)


def test_the_carrier_is_read_from_a_config_file_as_vllm_reads_it(tmp_path):
    plan, cfg = _plan(tmp_path)
    carried, where = startup.find_carrier(["vllm", "serve", "--config", cfg])
    assert carried is not None and carried["hash"] == plan.manifest["hash"] and "--config" in where
    # the command line wins over the file, as in vLLM (its arguments come after the file's)
    other = json.dumps({"r9k": dict(carried, server="from-the-command-line")})
    carried2, _ = startup.find_carrier(["vllm", "serve", "--config", cfg, "--additional-config", other])
    assert carried2["server"] == "from-the-command-line"
    bad = tmp_path / "broken.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(startup.StartupError) as e:
        startup.find_carrier(["vllm", "serve", "--config", str(bad)])
    assert f"{bad}:1:1: error[manifest]" in str(e.value)


def _proc(pid=None):
    pid = pid or os.getpid()
    return startup.ProcessInfo("MainProcess", pid, 0, socket.gethostname(), startup.pid_start_time(pid))


def test_two_starts_of_one_carried_id_get_ids_of_their_own(tmp_path, monkeypatch):
    env = {envvars.CACHE_DIR.name: str(tmp_path)}
    first = startup.claim_server_id("s", _proc(), env)
    second = startup.claim_server_id("s", _proc(), env)  # the first still runs (this process)
    assert (first, second) == ("s", "s.2")
    assert startup.status_file_for(first, env) != startup.status_file_for(second, env)
    # a claim whose process is gone is taken over: a restart from the same files keeps the printed id
    dead = tmp_path / "run" / "server-d.claim"
    dead.write_text(json.dumps({"pid": os.getpid(), "started": 1.0, "node": socket.gethostname()}))
    assert startup.claim_server_id("d", _proc(), env) == "d"


def test_the_route_answers_503_and_status_fails_when_the_server_has_no_set(plugin_env, capsys):
    fastapi = pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    app = fastapi.FastAPI()
    report.endpoint_plugin().attach_router(app)
    res = TestClient(app).get(report.ROUTE)  # the plugin registered nothing in this process
    assert res.status_code == 503 and "no r9k block" in res.json()["error"]

    from r9k.r9kctl import netclient
    from r9k.r9kctl.cli import main

    def answer(url, **kw):
        raise netclient.ClientError("http", f"GET {url}: HTTP 503", 503, json.dumps(res.json()))

    plugin_env.setattr(netclient, "get_json", answer)
    assert main(["status", "--url", "http://127.0.0.1:9"]) == 2
    assert "no r9k block" in capsys.readouterr().err
    # an older server answering an empty document with 200: refused too, not an empty table
    plugin_env.setattr(netclient, "get_json", lambda *a, **k: {"schema": report.SCHEMA, "in_use": {}, "hash": None})
    assert main(["status", "--url", "http://127.0.0.1:9"]) == 2
    assert "names no set" in capsys.readouterr().err


def test_the_dry_run_carries_the_manifest_by_reference_and_prints_what_runs(tmp_path, monkeypatch):
    import shlex

    from r9k.r9kctl.launch import plan_launch
    from r9k.registry import load_registry
    from r9k.registry import manifest as mf

    monkeypatch.setenv(envvars.CACHE_DIR.name, str(tmp_path))
    reg = load_registry()
    plan = plan_launch(reg, "tp4-default", env={}, build_model=False)
    assert plan.ok, [d.format() for d in plan.report.errors]
    command = plan.display().splitlines()[-1]
    assert command == shlex.join(plan.argv) and len(command) < 2000, len(command)  # the exec'd argv, as printed
    carried = json.loads(plan.argv[plan.argv.index("--additional-config") + 1])["r9k"]
    assert "manifest" not in carried and carried["path"] == str(plan.manifest_path)
    m, server = mf.from_carrier(carried)
    assert m.hash == carried["hash"] == plan.manifest["hash"] and server == ""  # the id: in the environment
    assert plan.env[envvars.SERVER.name] == plan.server
    # the first process takes the launch's id from the environment; one started by hand (no carrier) ignores
    # what an earlier paste left in the shell
    env = {**plan.env, envvars.CACHE_DIR.name: str(tmp_path)}  # what the launch exports, its id included
    active = startup.load_active(env, carried=carried, carried_from="--additional-config")
    assert active.server == plan.server and startup.server_id(active, _proc(), dict(env), first=True) == plan.server
    # the file changed after the launch printed its hash: refused
    data = json.loads(plan.manifest_path.read_text())
    data["values"]["router_gemm"]["value"] = "stock"
    plan.manifest_path.write_text(json.dumps(data))
    with pytest.raises(mf.ManifestError, match="does not match its values"):
        mf.from_carrier(carried)
    data["hash"] = mf.set_hash(data["model"], data["tp"], {e["knob"]: e["value"] for e in data["values"].values()},
                               data["extra_env"])  # rewritten whole, consistent: not the set the command names
    plan.manifest_path.write_text(json.dumps(data))
    with pytest.raises(mf.ManifestError, match="announces hash"):
        mf.from_carrier(carried)
    plan.manifest_path.unlink()
    with pytest.raises(mf.ManifestError, match="--inline-manifest"):
        mf.from_carrier(carried)
    # vLLM's Ray executor (workers on other nodes): inline, as before
    ray = plan_launch(reg, "tp4-default", env={}, build_model=False,
                      extra_args=["--distributed-executor-backend", "ray"])
    assert "manifest" in json.loads(ray.argv[ray.argv.index("--additional-config") + 1])["r9k"]
