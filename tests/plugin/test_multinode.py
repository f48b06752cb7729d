"""One set per server across processes, ranks and nodes (issue "One active set per server").

* the ranks' agreement (``r9k.plugin.agree.agree_ranks``: an all-gather over vLLM's world group once the groups
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
from servers import free_port

from r9k.registry import envvars

E2E_MINUTES = 1  # its wall time in the CI rehearsal of 2026-12-01 (57, 30, 21 and 18 s): tests/conftest.py runs it early

RANK_TIMEOUT_S = 600  # each rank imports torch and vLLM: slow on a loaded 2-core machine




def _rank_main(rank: int, world: int, port: int, env: dict, out, done, calls: int) -> None:
    """One worker on its own "node" (host name ``node<rank>``, its own cache directory): the plugin registers
    (its own environment; vLLM's ``parallel_state`` is imported first, as in vLLM's workers), vLLM's distributed
    environment is set up as its workers do (the ranks agree when the world group is made), the first layer is
    chosen; then the rank counts ``calls`` router calls and, on rank 0, waits until the head's status shows
    every rank's counters (the figures the ranks share across nodes)."""
    for k in [k for k in os.environ if k.startswith(("R9K_", "_R9K_"))]:
        del os.environ[k]
    os.environ.update(env)
    socket.gethostname = lambda: f"node{rank}"  # one "node" per process
    import vllm.distributed.parallel_state  # noqa: F401

    import r9k.plugin as plugin

    try:
        from r9k.plugin import report

        report.emit = lambda level, line: None
        plugin.register()
        from vllm.config import VllmConfig, set_current_vllm_config
        from vllm.distributed import init_distributed_environment

        from r9k.plugin import report, dispatch
        from r9k.plugin.startup import StartupError

        try:
            with set_current_vllm_config(VllmConfig()):
                init_distributed_environment(world_size=world, rank=rank, local_rank=rank, backend="gloo",
                                             distributed_init_method=f"tcp://127.0.0.1:{port}")
            if dispatch.get_table() is None:
                out.put((rank, "inactive", None))
                return
            dispatch.get_table().choose("router_gemm", layer="model.layers.0.mlp.gate")  # the first layer
        except StartupError as exc:
            out.put((rank, "refused", str(exc)))
            return
        for _ in range(calls):
            report.hit("router_gemm")
        ranks = [(r["node"], r["rank"], r["hash"]) for r in report._ranks or []]
        cluster = None
        if rank == 0 and calls:
            want = {str(r): r + 2 for r in range(world)}
            for _ in range(int(RANK_TIMEOUT_S / 0.5)):
                cluster = report.current_status()["cluster"]
                got = {r: ((e.get("counters") or {}).get("router_gemm") or {}).get("calls", {}).get("fused")
                       for ranks_ in cluster["nodes"].values() for r, e in ranks_.items()}
                if got == want:
                    break
                done.wait(0.5)
            done.set()
        elif calls:
            done.wait(RANK_TIMEOUT_S)  # rank 0 reads this rank's figures meanwhile
        out.put((rank, "ok", {"ranks": ranks, "cluster": cluster}))
    except BaseException as exc:  # noqa: BLE001 - reported to the test, never hangs it
        out.put((rank, "crashed", f"{type(exc).__name__}: {exc}"))


def _run_group(world: int, envs: list[dict], tmp_path, calls: bool = False) -> dict:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    done = ctx.Event()
    port = free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, world, port, dict(envs[r], R9K_CACHE_DIR=str(tmp_path / f"c{r}")),
                                                  out, done, r + 2 if calls else 0), name=f"VllmWorker-{r}")
             for r in range(world)]
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


def test_two_ranks_with_one_set_agree_and_the_head_shows_every_ranks_counters(tmp_path):
    """Two "nodes" (own host name and cache directory each, nothing shared but the ranks' store): they agree,
    and rank 0's status (what the head's ``/r9k/status`` answers) shows each rank's live call counters, fresh,
    with none missing."""
    res = _run_group(2, [BASE, BASE], tmp_path, calls=True)
    assert [res[r][0] for r in range(2)] == ["ok", "ok"], res
    ranks, cl = res[0][1]["ranks"], res[0][1]["cluster"]
    assert [(n, r) for n, r, _ in ranks] == [("node0", 0), ("node1", 1)], "rank 0 records every rank"
    assert len({h for _, _, h in ranks}) == 1
    assert sorted(cl["nodes"]) == ["node0", "node1"], cl
    for r in (0, 1):
        e = cl["nodes"][f"node{r}"][str(r)]
        assert e["counters"]["router_gemm"]["calls"] == {"fused": r + 2}, (r, e)  # rank 1: only via the store
        assert e["age_s"] is not None and e["hash"] == ranks[0][2]
    assert cl["nodes"]["node1"]["1"]["source"] == "live"
    assert cl["calls"] == {"router_gemm": {"fused": 5}} and cl["not_reported"] == [] and cl["world_size"] == 2
    assert set(cl["age_s"]) == {"node0", "node1"}
    assert not any(tmp_path.joinpath("c0").rglob("*VllmWorker-1*")), "the head got rank 1's figures from no file"


def test_a_rank_without_a_set_is_refused_at_once_naming_it(tmp_path):
    """Rank 1 starts without the set (its plugin inactive): rank 0 refuses as soon as the world group exists,
    naming node and rank, instead of waiting in a collective until gloo's timeout."""
    res = _run_group(2, [BASE, {"TRITON_INTERPRET": "1"}], tmp_path)
    # rank 1 goes on as plain vLLM (it said it has no set); it fails only where vLLM's next collective finds
    # rank 0 gone
    assert res[1][0] in ("inactive", "crashed"), res
    state, detail = res[0]
    assert state == "refused", res
    assert "error[rank-no-set]: node node1 rank 1 " in detail and "has no r9k set" in detail, detail
    assert "node node0 rank 0 runs set" in detail and "rank-missing" not in detail, detail


def test_a_rank_with_another_set_is_refused_naming_it(tmp_path):
    envs = [BASE, BASE, dict(BASE, R9K_ROUTER="stock"), BASE]
    res = _run_group(4, envs, tmp_path)
    assert sorted(res) == [0, 1, 2, 3], res
    for rank, (state, detail) in res.items():
        assert state == "refused", (rank, state, detail)  # every rank stops, not only the odd one
        assert "node node2 rank 2 " in detail and "R9K_ROUTER" in detail, detail
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
    from r9k.plugin import report
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
        report.write_section(str(path), sec)
        report.write_counters(str(path), "MainProcess", {})
        return str(path)

    alive = write("alive", me, pid_start_time(me))
    dead = write("dead", child.pid, 1.0)
    (run / f"manifest-0123456789ab-{child.pid}.json").write_text("{}")  # what its first process handed on
    reused = write("reused", me, pid_start_time(me) - 100.0)  # this pid, but another (earlier) process
    assert report.liveness(report.read_status_file(alive)["processes"])["alive"] == ["MainProcess"]
    for path in (dead, reused):
        assert report.liveness(report.read_status_file(path)["processes"])["dead"] == ["MainProcess"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("R9K_", "_R9K_"))}
    out = subprocess.run([sys.executable, "-m", "r9k.r9kctl.cli", "status", "--file", dead], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 3 and "error[dead-server]" in out.stderr and "server dead is not running" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    removed = report.clean_dead(run, keep=None)
    assert sorted(os.path.basename(f) for f in removed if f.endswith(".status.json")) == [
        "server-dead.status.json", "server-reused.status.json"]
    assert os.path.exists(alive) and not any(f.startswith(dead) for f in map(str, run.iterdir()))
    assert not (run / f"manifest-0123456789ab-{child.pid}.json").exists()


class _Store:
    """A stand-in for the ranks' rendezvous store (set / get / check, as torch.distributed's TCPStore)."""

    def __init__(self):
        self.kv = {}

    def set(self, k, v):
        self.kv[k] = v.encode() if isinstance(v, str) else v

    def get(self, k):
        return self.kv[k]

    def check(self, keys):
        return all(k in self.kv for k in keys)


def _rec(rank, h="aaa", node="n0"):
    return {"node": node, "rank": rank, "pid": 10 + rank, "hash": h, "values": {"R9K_ROUTER": "r9k"}}


def test_a_rank_that_never_reports_is_named_after_the_bound():
    """A rank with no r9k at all (it never writes its record): the wait ends at the bound (a fake clock here),
    naming the rank and the node vLLM places it on."""
    from r9k.plugin import agree
    from r9k.plugin.startup import StartupError

    store, t = _Store(), [0.0]
    agree.publish(store, agree.AGREE_KEY.format(rank=1), _rec(1, node="n0"))
    records, missing = agree.gather(store, 4, timeout=60, clock=lambda: t[0],
                                    sleep=lambda s: t.__setitem__(0, t[0] + s))
    assert missing == [0, 2, 3] and t[0] >= 60 and [r["rank"] for r in records] == [1]
    lines = agree.refusals(records, [2, 3], 4, 2, 60)
    assert lines[0].startswith("error[rank-missing]: rank 2 (the node started with --node-rank 1) reported no r9k "
                               "set within 60 s; node n0 rank 1 runs set aaa"), lines
    with pytest.raises(StartupError) as exc:
        agree.agree(_rec(0), store, 3, nnodes=None, timeout=0)
    assert "error[rank-missing]: rank 2 reported no r9k set within 0 s" in str(exc.value)
    assert agree.agree(_rec(0), _Store(), 1) == [_rec(0)]  # one rank: nothing to wait for


def test_the_live_figures_go_out_on_change_or_heartbeat_and_rank_0_stamps_them():
    from r9k.plugin import agree

    store, t = _Store(), [0.0]
    pubs = [agree.LivePublisher(store, r, 2, heartbeat=5, clock=lambda: t[0]) for r in (0, 1)]
    sent = lambda r, c: pubs[r].publish(lambda: dict(_rec(r), counters=c, time=100 + t[0]), c)  # noqa: E731
    assert sent(0, {"a": 1}) and not sent(0, {"a": 1})  # unchanged: nothing goes out
    assert pubs[0].collect(now=50.0)["ranks"].keys() == {"0"}
    assert pubs[0].collect(now=51.0) is None  # nothing new
    t[0] = 6.0
    assert sent(0, {"a": 1}) and sent(1, {"b": 2})  # the heartbeat is due; rank 1's first figures
    got = pubs[0].collect(now=60.0)
    assert got["world_size"] == 2 and got["ranks"]["1"]["counters"] == {"b": 2}
    assert got["ranks"]["1"]["received"] == 60.0 and got["ranks"]["0"]["received"] == 60.0
    t[0] = 7.0
    assert sent(1, {"b": 3})
    got = pubs[0].collect(now=61.0)
    assert got["ranks"]["1"]["received"] == 61.0 and got["ranks"]["0"]["received"] == 60.0
