"""The one hand-off: ``r9kctl launch`` carries the manifest in vLLM's ``--additional-config``; a process
that gets it (on its command line, or in the ``vllm_config`` vLLM calls the plugin with) loads it, on a node
without any of the launcher's files, and never resolves again; an edited carrier, a process whose
environment or registry says otherwise, are refused with one line. Started by hand, the first process
resolves once and hands the same manifest on."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from r9k.registry import envvars

E2E_MINUTES = 1  # its launch children: 41 + 17 s under load 5-10 on 2026-12-01: tests/conftest.py runs it early (no server; slow)

# The child fails if anything resolves or validates a profile: the hand-off is load-and-check only.
NO_RESOLVE = ("import r9k.registry.resolve as R, r9k.registry.validate as V\n"
              "def _boom(*a, **k): raise SystemExit('resolved again')\n"
              "R.resolve = V.validate = V.check_profile = _boom\n")
CHILD = NO_RESOLVE + ("import r9k.plugin as p, r9k.plugin.report as rp; rp.emit = lambda l, x: None; p.register(); rs = rp.active_set()\n"
                      "print(rs.hash, rp._active.server, '|', rp._active.origin)\n")
WORKER = NO_RESOLVE + ("import json, sys, r9k.plugin as p, r9k.plugin.report as rp; rp.emit = lambda l, x: None\n"
                       "class Config:\n    additional_config = json.loads(sys.argv[1])\n"
                       "def init_worker(vllm_config):  # as vLLM's WorkerWrapperBase.init_worker calls the plugins\n"
                       "    p.register()\n"
                       "init_worker(Config())\nprint(rp.active_set().hash, rp._active.server, '|', rp._active.origin)\n")


def _plan(plugin_env, tmp_path, registry, **sets):
    from r9k.r9kctl.launch import plan_launch

    plugin_env.setenv(envvars.CACHE_DIR.name, str(tmp_path / "launcher" / "cache"))
    # inline: these nodes stand for machines without the launcher's files (its manifest file)
    plan = plan_launch(registry, "cpu-smoke", env={}, sets=sets or None, build_model=False, inline=True)
    assert plan.ok and plan.manifest_path.exists()
    return plan


def _additional_config(argv: list[str]) -> str:
    return argv[argv.index("--additional-config") + 1]


def _node(tmp_path, env, code, args, name="node2"):
    """A process of another node: its own working and cache directory, none of the launcher's files."""
    wd = tmp_path / name
    wd.mkdir(exist_ok=True)
    env = dict(env, R9K_CACHE_DIR=str(wd / "cache"), HOME=str(wd))
    return subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=wd, capture_output=True, text=True,
                          timeout=300)


def _base_env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("R9K_", "_R9K_"))}


def test_the_launch_carries_the_set_in_vllms_config(plugin_env, tmp_path, registry):
    plan = _plan(plugin_env, tmp_path, registry)
    carried = json.loads(_additional_config(plan.argv))["r9k"]
    assert carried["hash"] == plan.manifest["hash"] and carried["server"] == plan.server
    assert not any(k in plan.env for k in (envvars.MANIFEST.name, envvars.PROFILE.name, envvars.TP.name)), \
        "the set travels in vLLM's config, not in the plugin's variables"
    env = dict(_base_env(), **plan.env)
    shutil.rmtree(tmp_path / "launcher")  # this node has none of the launcher's files
    # the API server / a headless node: on its command line
    out = _node(tmp_path, env, CHILD, ["--additional-config", _additional_config(plan.argv)])
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    h, server, _, origin = out.stdout.split(maxsplit=3)
    assert (h, server) == (plan.manifest["hash"], plan.server) and "--additional-config" in origin
    # an engine core / a worker: in the vllm_config vLLM calls the plugin with
    out = _node(tmp_path, env, WORKER, [_additional_config(plan.argv)], "node3")
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    h, server, _, origin = out.stdout.split(maxsplit=3)
    assert (h, server) == (plan.manifest["hash"], plan.server) and "additional_config of Config" in origin


def test_a_carrier_that_does_not_hold_here_is_refused(plugin_env, tmp_path, registry):
    from r9k.registry import manifest as mf

    plan = _plan(plugin_env, tmp_path, registry)
    config = json.loads(_additional_config(plan.argv))
    env = dict(_base_env(), **plan.env)
    # edited: the values no longer give the hash
    data = mf.decode(config["r9k"]["manifest"])
    data["values"]["router_gemm"]["value"] = "stock"
    edited = dict(config, r9k=dict(config["r9k"], manifest=mf.encode(data)))
    out = _node(tmp_path, env, CHILD, ["--additional-config", json.dumps(edited)])
    assert out.returncode != 0 and "does not match its values" in out.stderr, out.stderr[-2000:]
    # this process's environment says otherwise
    out = _node(tmp_path, dict(env, R9K_ROUTER="stock"), CHILD, ["--additional-config", json.dumps(config)])
    assert out.returncode != 0 and "manifest-drift" in out.stderr and "R9K_ROUTER" in out.stderr, out.stderr[-2000:]
    # this node's registry differs from the launcher's (a copy with one value changed)
    reg2 = tmp_path / "registry2"
    shutil.copytree(registry.root, reg2, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    f = reg2 / "variants" / "decode.toml"
    f.write_text(f.read_text() + "\n# edited on this node\n")
    out = _node(tmp_path, dict(env, R9K_REGISTRY=str(reg2)), CHILD, ["--additional-config", json.dumps(config)])
    assert out.returncode != 0 and "registry-drift" in out.stderr, out.stderr[-2000:]


def test_started_by_hand_the_first_process_resolves_once_and_hands_the_manifest_on(plugin_env, tmp_path):
    from r9k.plugin import report
    import r9k.plugin as plugin

    plugin_env.setattr(report, "emit", lambda level, line: None)
    plugin_env.setenv(envvars.PROFILE.name, "cpu-smoke")
    plugin.register()  # the first process: resolves once
    h = report.active_set().hash
    path = os.environ[envvars.MANIFEST.name]
    assert json.loads(open(path).read())["hash"] == h
    # a later process (engine core, worker, helper) with the inherited environment: loads, never resolves
    out = subprocess.run([sys.executable, "-c", CHILD], env=dict(os.environ), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert out.stdout.split()[:2] == [h, report._active.server]
