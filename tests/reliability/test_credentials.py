"""Class "secrets": a credential a profile's ``[env]`` sets (a name ``registry/redact.py`` calls secret) never
travels or lands in clear. The launch manifest, vLLM's ``--additional-config`` (visible in ``ps`` and vLLM's
log), the dry run in every format, the files of ``--format vllm-config``, the plugin's hand-over manifest,
its status file and its log carry a reference (name and fingerprint); each process takes the value from
its own environment and refuses to start, with one line naming no value, when it is missing or differs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from r9k.registry import envvars, redact
from r9k.registry.manifest import CARRIER_KEY, decode

from .harness import REPO, run_main

TOKEN = "hf_cLeArTeXt-t0ken-31337"
API_KEY = "sk-cLeArTeXt-k3y-4242"
SECRETS = (TOKEN, API_KEY, "cLeArTeXt")


def _clean(text: str, where: str) -> None:
    for s in SECRETS:
        assert s not in text, f"a credential's value in {where}"


@pytest.fixture
def setup(tmp_path, monkeypatch):
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "cred.toml").write_text('extends = "cpu-smoke"\n[env]\n'
                                      f'HF_TOKEN = "{TOKEN}"\nOPENAI_API_KEY = "{API_KEY}"\nPLAIN_SETTING = "seen"\n')
    cache = tmp_path / "cache"
    for k in list(os.environ):
        if k.startswith(("R9K_", "_R9K_")):
            monkeypatch.delenv(k)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    env = {envvars.CACHE_DIR.name: str(cache), envvars.NO_CACHE.name: "1"}
    return folder, cache, env


def _all_files(root: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*") if p.is_file())


def _carried(argv: list[str]) -> dict:
    return json.loads(argv[argv.index("--additional-config") + 1])[CARRIER_KEY]


def test_dry_runs_and_launch_files_hold_no_credential(setup, tmp_path):
    folder, cache, env = setup
    base = ["--profiles-dir", str(folder), "launch", "-p", "cred"]
    code, out, err = run_main(base + ["--dry-run"], env)
    assert code == 0, err
    _clean(out + err, "the dry run")
    assert "# HF_TOKEN=***" in out and "export PLAIN_SETTING=seen" in out
    cmd = next(ln for ln in out.splitlines() if "--additional-config" in ln)
    carried = json.loads(cmd.split("--additional-config ", 1)[1].split("' ", 1)[0].strip("'"))[CARRIER_KEY]
    manifest = decode(carried["manifest"]) if "manifest" in carried else json.loads(open(carried["path"]).read())
    _clean(json.dumps(manifest), "the carried manifest")
    ref = manifest["extra_env"]["HF_TOKEN"]
    assert redact.is_reference(ref) and ref == redact.reference("HF_TOKEN", TOKEN)
    assert manifest["extra_env"]["PLAIN_SETTING"] == "seen"
    code, out, err = run_main(base + ["--dry-run", "--format", "json"], env)
    assert code == 0, err
    _clean(out + err, "the JSON dry run")
    assert json.loads(out)["env"]["HF_TOKEN"] == redact.MASK
    code, out, err = run_main(base + ["--format", "vllm-config", "--out", str(tmp_path / "cfg")], env)
    assert code == 0, err
    _clean(out + err + _all_files(tmp_path / "cfg"), "the vllm-config files")
    assert (cache / "manifests").is_dir()
    _clean(_all_files(cache), "the cache (launch manifests)")


def _child(env: dict, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    code = ("import logging, sys\nlogging.basicConfig(level=logging.DEBUG, stream=sys.stderr)\n"
            "import r9k.plugin as p, r9k.plugin.report as rp\np.register()\nprint('active', rp.active_set().hash)\n")
    return subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_each_process_takes_the_credential_from_its_own_environment(setup, tmp_path, monkeypatch):
    from r9k.registry import load_registry
    from r9k.r9kctl.launch import plan_launch

    folder, cache, env = setup
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    plan = plan_launch(load_registry(profile_dirs=[REPO / "profiles", folder]), "cred", env={}, build_model=False)
    assert plan.ok, plan.report.format() if hasattr(plan, "report") else plan
    assert plan.env["HF_TOKEN"] == TOKEN  # the launch exports it to the process it starts
    _clean(plan.manifest_path.read_text() + json.dumps(_carried(plan.argv)), "the launch manifest")
    args = ["--additional-config", json.dumps({CARRIER_KEY: _carried(plan.argv)})]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("R9K_", "_R9K_"))}
    base[envvars.CACHE_DIR.name] = str(tmp_path / "node" / "cache")
    (tmp_path / "node").mkdir()
    ok = _child(dict(base, **plan.env), args, tmp_path / "node")
    assert ok.returncode == 0 and "active" in ok.stdout, ok.stderr[-3000:]
    _clean(ok.stdout + ok.stderr, "the plugin's log")
    status = tmp_path / "node" / "cache" / "run"
    assert any(status.glob("server-*.status.json"))
    _clean(_all_files(tmp_path / "node" / "cache"), "the status and run files")
    # the same carrier where the credential is missing or another value: refused, one line (in this process:
    # the refusal comes before anything vLLM-specific, as the child above shows it would start)
    from r9k.plugin import startup

    without = {k: v for k, v in dict(base, **plan.env).items() if k != "HF_TOKEN"}
    for env_, want in ((without, "it is not set in this process's environment"),
                       ({**base, **plan.env, "HF_TOKEN": "hf_another-value"}, "is not the value")):
        active = startup.load_active(env_, _carried(plan.argv), "--additional-config")
        with pytest.raises(startup.StartupError) as ei:
            startup.apply_profile_env(active, env_)
        text = str(ei.value)
        lines = [ln for ln in text.splitlines() if ln.strip().startswith("error[")]
        assert len(lines) == 1 and want in lines[0] and "HF_TOKEN" in lines[0], text
        _clean(text, "the refusal")
        assert "hf_another-value" not in text


def test_started_by_hand_the_profile_gives_the_value_and_hands_on_a_reference(setup, tmp_path, monkeypatch):
    from r9k.plugin import startup

    folder, cache, env = setup
    monkeypatch.setenv(envvars.PROFILES_DIR.name, str(folder))
    environ = dict(os.environ, **env, **{envvars.PROFILE.name: "cred"})
    active = startup.load_active(environ)
    _clean(json.dumps(active.rs.to_dict()) + repr(active), "the resolved manifest")
    startup.apply_profile_env(active, environ)
    assert environ["HF_TOKEN"] == TOKEN and environ["OPENAI_API_KEY"] == API_KEY  # for vLLM (downloads)
    path = startup.hand_on(active, environ)
    assert path and environ[envvars.MANIFEST.name] == path
    _clean(Path(path).read_text(), "the hand-over manifest")
    # the next process loads that manifest and checks its own environment (inherited: the same value)
    nxt = startup.load_active(environ)
    assert nxt.hash == active.hash and startup.apply_profile_env(nxt, dict(environ)) == []
    with pytest.raises(startup.StartupError) as ei:
        startup.apply_profile_env(nxt, {k: v for k, v in environ.items() if k != "OPENAI_API_KEY"})
    assert "OPENAI_API_KEY" in str(ei.value) and "error[credential]" in str(ei.value)


def test_references():
    ref = redact.reference("HF_TOKEN", TOKEN)
    assert ref.startswith(redact.REFERENCE_PREFIX) and TOKEN not in ref
    assert redact.reference("HF_TOKEN", ref) == ref  # a reference stays one
    assert redact.reference("PLAIN", "x") == "x" and redact.reference("HF_TOKEN", "") == ""
    assert redact.reference("HF_TOKEN", "a") != redact.reference("HF_TOKEN", "b")
    from r9k.registry.manifest import set_hash

    assert set_hash("m", 1, {}, {"HF_TOKEN": TOKEN}) == set_hash("m", 1, {}, {"HF_TOKEN": ref})
    assert set_hash("m", 1, {}, {"HF_TOKEN": TOKEN}) != set_hash("m", 1, {}, {"HF_TOKEN": "other"})
