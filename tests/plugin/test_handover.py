"""The resolved set reaches a worker that cannot read the launcher's files (another node, another
directory): it travels in the environment (``R9K_MANIFEST_DATA``), the worker resolves it against its
own installation and agrees on the hash, or refuses."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

CHILD = ("import os, sys, r9k.plugin as p; p._emit = lambda l, x: None; p.register(); rs = p.active_set(); "
         "print(rs.hash, p._active.origin)")


def _launch_env(plugin_env, tmp_path, registry, **sets):
    from r9k.r9kctl.launch import plan_launch

    plugin_env.setenv("R9K_CACHE_DIR", str(tmp_path / "launcher" / "cache"))
    plan = plan_launch(registry, "cpu-smoke", env={}, sets=sets or None, build_model=False)
    assert plan.ok and plan.manifest_path.exists()
    return plan


def _worker(tmp_path, env):
    wd = tmp_path / "node2"
    wd.mkdir(exist_ok=True)
    env = dict(env, R9K_CACHE_DIR=str(wd / "cache"), HOME=str(wd))
    return subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=wd, capture_output=True, text=True,
                          timeout=120)


def _base_env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("R9K_", "_R9K_"))}


def test_a_worker_without_the_launchers_files_resolves_the_carried_set(plugin_env, tmp_path, registry):
    plan = _launch_env(plugin_env, tmp_path, registry)
    rs_hash = plan.manifest["hash"]
    env = dict(_base_env(), **plan.env, _R9K_LAUNCH_HASH=rs_hash, _R9K_LAUNCH_PID="1")
    shutil.rmtree(tmp_path / "launcher")  # the worker's node has none of the launcher's files
    assert not plan.manifest_path.exists()
    out = _worker(tmp_path, env)
    assert out.returncode == 0, out.stderr[-3000:]
    h, origin = out.stdout.split(" ", 1)
    assert h == rs_hash and "carried in the environment" in origin

    # the same worker whose own environment differs: a different hash, refused
    out = _worker(tmp_path, dict(env, R9K_ROUTER="stock"))
    assert out.returncode != 0 and ("manifest-drift" in out.stderr or "hash-mismatch" in out.stderr), out.stderr[-2000:]


def test_an_edited_carried_manifest_is_refused(plugin_env, tmp_path, registry):
    from r9k.plugin.snapshot import decode_manifest, encode_manifest

    plan = _launch_env(plugin_env, tmp_path, registry)
    data = decode_manifest(plan.env["R9K_MANIFEST_DATA"])
    data["values"]["router_gemm"]["value"] = "stock"  # the hash no longer matches the values
    env = {**_base_env(), **plan.env, "R9K_MANIFEST_DATA": encode_manifest(data), "_R9K_LAUNCH_HASH": data["hash"],
           "_R9K_LAUNCH_PID": "1", "R9K_MANIFEST": str(tmp_path / "nowhere.json")}
    out = _worker(tmp_path, env)
    assert out.returncode != 0 and "manifest-hash" in out.stderr, out.stderr[-2000:]
    # and a file and a carried copy that disagree are refused as drift
    other = json.loads(plan.manifest_path.read_text())
    other["hash"] = "000000000000"
    env = {**_base_env(), **plan.env, "R9K_MANIFEST_DATA": encode_manifest(other),
           "_R9K_LAUNCH_HASH": plan.manifest["hash"]}
    out = _worker(tmp_path, env)
    assert out.returncode != 0 and "manifest-drift" in out.stderr, out.stderr[-2000:]
