"""One set per server across processes, ranks and nodes (issue "One active set per server").

* the ranks' agreement (``r9k.plugin._agree_ranks``: an all-gather over vLLM's world group once the groups
  exist) in 2- and 4-process gloo groups started as vLLM starts its workers (spawned processes named
  ``VllmWorker-<rank>``, ``init_distributed_environment`` over TCP), one rank with another set: refused on
  every rank, naming node, rank and the first differing knob;
* Ray: every variable the launch exports is among those vLLM's Ray executor copies to its workers;
* ``r9kctl launch --nnodes 2 --dry-run``: one command per node, head and headless, the same carried set;
* dead servers' status files: reported dead, cleaned by the next server.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import socket
import subprocess
import sys

import pytest

from r9k.registry import envvars

RANK_TIMEOUT_S = 600  # each rank imports torch and vLLM: slow on a loaded 2-core machine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, env: dict, out) -> None:
    """One worker: the plugin registers (its own environment), vLLM's distributed environment is set up
    as its workers do, then the plugin's first-layer hook runs the ranks' agreement."""
    for k in [k for k in os.environ if k.startswith(("R9K_", "_R9K_"))]:
        del os.environ[k]
    os.environ.update(env)
    import r9k.plugin as plugin

    plugin._emit = lambda level, line: None
    try:
        plugin.register()
        from vllm.config import VllmConfig, set_current_vllm_config
        from vllm.distributed import init_distributed_environment

        with set_current_vllm_config(VllmConfig()):
            init_distributed_environment(world_size=world, rank=rank, local_rank=rank, backend="gloo",
                                         distributed_init_method=f"tcp://127.0.0.1:{port}")
        from r9k.plugin import dispatch
        from r9k.plugin.startup import StartupError

        try:
            dispatch.get_table().choose("router_gemm", layer="model.layers.0.mlp.gate")  # the first layer
            out.put((rank, "ok", [(r["node"], r["rank"], r["hash"]) for r in plugin._ranks or []]))
        except StartupError as exc:
            out.put((rank, "refused", str(exc)))
    except BaseException as exc:  # noqa: BLE001 - reported to the test, never hangs it
        out.put((rank, "crashed", f"{type(exc).__name__}: {exc}"))


def _run_group(world: int, envs: list[dict], tmp_path) -> dict:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, world, port, dict(envs[r], R9K_CACHE_DIR=str(tmp_path / f"c{r}")),
                                                  out), name=f"VllmWorker-{r}") for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    try:
        for _ in range(world):
            rank, state, detail = out.get(timeout=RANK_TIMEOUT_S)
            results[rank] = (state, detail)
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
                p.join()
    return results


BASE = {envvars.PROFILE.name: "cpu-smoke", "TRITON_INTERPRET": "1"}


def test_two_ranks_with_one_set_agree(tmp_path):
    res = _run_group(2, [BASE, BASE], tmp_path)
    assert [res[r][0] for r in range(2)] == ["ok", "ok"], res
    node = socket.gethostname()
    assert [(n, r) for n, r, _ in res[0][1]] == [(node, 0), (node, 1)], "rank 0 records every rank"
    assert len({h for _, _, h in res[0][1]}) == 1


def test_a_rank_with_another_set_is_refused_naming_it(tmp_path):
    envs = [BASE, BASE, dict(BASE, R9K_ROUTER="stock"), BASE]
    res = _run_group(4, envs, tmp_path)
    assert sorted(res) == [0, 1, 2, 3], res
    for rank, (state, detail) in res.items():
        assert state == "refused", (rank, state, detail)  # every rank stops, not only the odd one
        assert f"node {socket.gethostname()} rank 2 " in detail and "R9K_ROUTER" in detail, detail
        assert "rank 1 " not in detail.split("runs set")[0] and "rank 3 " not in detail.split("runs set")[0], detail


def test_compare_ranks_names_the_first_differing_knob():
    from r9k.plugin.startup import compare_ranks

    a = {"node": "n0", "rank": 0, "pid": 1, "hash": "aaa", "values": {"R9K_A": "1", "R9K_B": "x"}}
    b = dict(a, node="n1", rank=1, pid=2, hash="bbb", values={"R9K_A": "1", "R9K_B": "y"})
    assert compare_ranks([a, dict(a, rank=1)]) == []
    (line,) = compare_ranks([b, a])
    assert line.startswith("error[rank-mismatch]: node n1 rank 1 (pid 2) runs set bbb") and "R9K_B='x' vs R9K_B='y'" in line


def test_every_launch_variable_is_in_what_vllms_ray_executor_copies(plugin_env, registry):
    """vLLM copies to Ray workers the names of its env registry (plus a few prefixes): after the plugin
    declared its set, every variable the launch exports must be among them (tp4-default: its launcher
    variables GPU_MAX_HW_QUEUES and HSA_ENABLE_MWAITX included)."""
    from vllm.ray.ray_env import get_env_vars_to_copy

    from r9k.plugin import envdecl
    from r9k.r9kctl.launch import plan_launch
    from r9k.registry import manifest as mf

    plan = plan_launch(registry, "tp4-default", env={}, build_model=False, write_manifest=False)
    assert plan.ok, [d.format() for d in plan.report.errors]
    assert {"GPU_MAX_HW_QUEUES", "HSA_ENABLE_MWAITX"} <= set(plan.env)
    for k, v in plan.env.items():
        plugin_env.setenv(k, v)
    envdecl.declare(mf.from_dict(plan.manifest))
    missing = sorted(set(plan.env) - get_env_vars_to_copy(destination="test"))
    assert missing == []


def test_nnodes_dry_run_prints_one_command_per_node_with_the_same_set(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("R9K_", "_R9K_"))}
    env[envvars.CACHE_DIR.name] = str(tmp_path / "cache")
    cmd = [sys.executable, "-m", "r9k.r9kctl.cli", "launch", "--profile", "cpu-smoke", "--nnodes", "2",
           "--master-addr", "10.0.0.1", "--dry-run", "--format", "json"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    head, worker = data["nodes"]
    carried = [json.loads(a[a.index("--additional-config") + 1])["r9k"] for a in (head, worker)]
    assert carried[0] == carried[1] and carried[0]["hash"] == data["manifest"]["hash"]
    assert "--headless" not in head and worker[-1] == "--headless"
    for rank, argv in enumerate((head, worker)):
        i = argv.index("--node-rank")
        assert argv[i + 1] == str(rank) and argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--master-addr") + 1] == "10.0.0.1"
    strip = lambda a: [x for x in a if x != "--headless"]  # noqa: E731
    assert strip(head)[:strip(head).index("--node-rank")] == strip(worker)[:strip(worker).index("--node-rank")]
    # and the text form prints both
    out = subprocess.run(cmd[:-2], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "# node 0 of 2" in out.stdout and "# node 1 of 2 (headless)" in out.stdout
    # each node's own invocation (run on that node) carries the same set and server id as the dry run
    for rank in (0, 1):
        one = subprocess.run(cmd + ["--node-rank", str(rank)], env=env, capture_output=True, text=True, timeout=600)
        argv = json.loads(one.stdout)["argv"]
        assert json.loads(argv[argv.index("--additional-config") + 1])["r9k"]["server"] == carried[0]["server"]
    bad = subprocess.run(cmd[:-3] + ["--node-rank", "2"], env=env, capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "--node-rank 2: must be between 0 and 1" in bad.stderr


def test_a_dead_servers_status_file_is_reported_dead_and_cleaned(tmp_path):
    from r9k.plugin import status
    from r9k.plugin.startup import pid_start_time

    run = tmp_path / "run"
    run.mkdir()
    me = os.getpid()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # a pid that is gone

    def write(server: str, pid: int, started) -> str:
        path = run / f"server-{server}.status.json"
        sec = {"profile": "p", "hash": "h", "tp": 1, "model": None, "server": server, "platform": "cpu",
               "origin": "test", "strict": False, "values": {}, "non_stock": [],
               "process": {"name": "MainProcess", "pid": pid, "role": "main", "rank": 0,
                           "node": socket.gethostname(), "started": started}}
        status.write_section(str(path), sec)
        status.write_counters(str(path), "MainProcess", {})
        return str(path)

    alive = write("alive", me, pid_start_time(me))
    dead = write("dead", child.pid, 1.0)
    (run / f"manifest-0123456789ab-{child.pid}.json").write_text("{}")  # what its first process handed on
    reused = write("reused", me, pid_start_time(me) - 100.0)  # this pid, but another (earlier) process
    assert status.liveness(status.read_status_file(alive)["processes"])["alive"] == ["MainProcess"]
    for path in (dead, reused):
        assert status.liveness(status.read_status_file(path)["processes"])["dead"] == ["MainProcess"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("R9K_", "_R9K_"))}
    out = subprocess.run([sys.executable, "-m", "r9k.r9kctl.cli", "status", "--file", dead], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 3 and "error[dead-server]" in out.stderr and "server dead is not running" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    removed = status.clean_dead(run, keep=None)
    assert sorted(os.path.basename(f) for f in removed if f.endswith(".status.json")) == [
        "server-dead.status.json", "server-reused.status.json"]
    assert os.path.exists(alive) and not any(f.startswith(dead) for f in map(str, run.iterdir()))
    assert not (run / f"manifest-0123456789ab-{child.pid}.json").exists()
