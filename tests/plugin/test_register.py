"""register(): idempotence, fail-fast with the validator's located messages, hash agreement, manifest."""
from __future__ import annotations

import json
import os

import pytest

import r9k.plugin as plugin
from r9k.plugin.startup import LAUNCH_HASH_VAR, StartupError
from r9k.registry import envvars


@pytest.fixture
def emitted(plugin_env):
    from r9k.plugin import report
    lines: list[str] = []
    plugin_env.setattr(report, "emit", lambda level, line: lines.append(line))
    return lines


def test_inactive_without_any_r9k_variable(emitted):
    from r9k.plugin import report
    import vllm.envs as envs

    plugin.register()
    assert report.active_set() is None
    assert emitted == []
    assert "R9K_ROUTER" not in envs.environment_variables
    assert LAUNCH_HASH_VAR not in os.environ


def test_register_twice_is_idempotent(plugin_env, emitted):
    from r9k.plugin import report
    from vllm.model_executor.custom_op import op_registry_oot

    plugin_env.setenv(envvars.PROFILE.name, "cpu-smoke")
    plugin.register()
    rs = report.active_set()
    assert rs is not None and rs.profile == "cpu-smoke"
    first = list(emitted)
    assert any(rs.hash in ln and "profile cpu-smoke" in ln for ln in first)
    assert any("R9K_ROUTER" in ln and "r9k" in ln for ln in first)

    plugin.register()  # vLLM may call it again in the same process
    assert emitted == first, "the second call must not log the table again"
    assert report.active_set() is rs
    assert os.environ[LAUNCH_HASH_VAR] == rs.hash

    # vLLM's router layer module, imported after register(): the replacement is registered exactly once
    from vllm.model_executor.layers.fused_moe.router import gate_linear  # noqa: F401

    from r9k.plugin.layers.gate_linear import R9kGateLinear

    assert op_registry_oot.get("GateLinear") is R9kGateLinear
    from r9k.plugin.install import _install_now
    from r9k.registry.availability import load_adapters

    # a repeat installation is a no-op, not vLLM's duplicate assertion
    _install_now(load_adapters().adapters["pluggable_layer:gate_linear"], gate_linear)
    assert op_registry_oot.get("GateLinear") is R9kGateLinear


def test_invalid_override_fails_with_the_validators_located_message(plugin_env, emitted):
    from r9k.plugin import report
    from r9k.registry.validate import validate

    plugin_env.setenv(envvars.PROFILE.name, "cpu-smoke")
    plugin_env.setenv("R9K_ROUTER", "bogus")
    with pytest.raises(StartupError) as ei:
        plugin.register()
    expected = validate(profile="cpu-smoke", env=dict(os.environ)).errors
    assert expected, "the validator itself must reject R9K_ROUTER=bogus"
    for d in expected:
        assert d.format() in str(ei.value)
    assert "error[bad-value]" in str(ei.value)
    # a second call (vLLM loads plugins again in the same process) raises again, it does not pass
    with pytest.raises(StartupError):
        plugin.register()
    assert report.active_set() is None


def test_error_in_a_profile_file_is_located(plugin_env, emitted, tmp_path):
    pdir = tmp_path / "profiles"
    pdir.mkdir()
    (pdir / "broken.toml").write_text('description = "test"\nextends = "cpu-smoke"\n\n[knobs]\nR9K_ROUTER = "fast"\n')
    plugin_env.setenv(envvars.PROFILES_DIR.name, str(pdir))
    plugin_env.setenv(envvars.PROFILE.name, "broken")
    with pytest.raises(StartupError) as ei:
        plugin.register()
    msg = str(ei.value)
    assert "broken.toml:5" in msg and "error[bad-value]" in msg and "R9K_ROUTER" in msg


def test_worker_that_disagrees_with_the_engine_refuses_to_start(plugin_env, emitted):
    plugin_env.setenv(envvars.PROFILE.name, "cpu-smoke")
    plugin_env.setenv(LAUNCH_HASH_VAR, "0123456789ab")  # what the engine exported
    with pytest.raises(StartupError) as ei:
        plugin.register()
    assert "hash-mismatch" in str(ei.value) and "0123456789ab" in str(ei.value)


def test_manifest_from_launch_and_drift(plugin_env, emitted, tmp_path, registry):
    from r9k.plugin import report
    from r9k.registry.resolve import resolve

    rs = resolve(registry, "cpu-smoke", env={})
    manifest = tmp_path / "run" / "manifest.json"
    manifest.parent.mkdir()
    manifest.write_text(json.dumps(rs.to_manifest()))
    for k, v in rs.env().items():  # what r9kctl launch exports
        plugin_env.setenv(k, v)
    plugin_env.setenv(envvars.MANIFEST.name, str(manifest))
    plugin.register()
    assert report.active_set().hash == rs.hash
    assert any(f"manifest {manifest}" in ln for ln in emitted)
    from r9k.plugin.startup import status_file_for

    server = report._active.server
    assert server.startswith("cpu-smoke-")
    assert os.environ[envvars.STATUS_FILE.name] == status_file_for(server)
    status = json.loads(open(status_file_for(server)).read())
    assert status["hash"] == rs.hash and "MainProcess" in status["processes"] and status["server"] == server

    # the same manifest, but the environment changed after launch validated it
    report.reset_for_tests()
    for k in [k for k in os.environ if k.startswith("_R9K_")]:
        plugin_env.delenv(k)
    plugin_env.setenv("R9K_ROUTER", "stock")
    with pytest.raises(StartupError) as ei:
        plugin.register()
    assert "manifest-drift" in str(ei.value) and "R9K_ROUTER" in str(ei.value)


def test_register_imports_neither_textual_nor_rich():
    import subprocess
    import sys

    code = ("import os, sys; os.environ['R9K_PROFILE']='cpu-smoke'; import r9k.plugin as p; p.register(); "
            "bad=[m for m in ('textual','rich') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("R9K_", "_R9K_"))}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
