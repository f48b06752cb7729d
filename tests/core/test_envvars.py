"""The project's own environment variables: one module, what reaches vLLM, the cache directory."""
from __future__ import annotations

from pathlib import Path

from r9k.registry import envvars, load_registry
from r9k.registry.resolve import resolve


def test_every_variable_is_described_once():
    assert len(envvars.ALL) >= 20
    for name, v in envvars.ALL.items():
        assert name.lstrip("_").startswith(envvars.PREFIX), name
        assert v.type in {"path", "paths", "bool", "int", "str"}, name
        assert v.meaning and v.readers, name
    # stale names are gone: nothing reads them
    for stale in ("R9K_LAUNCH_HASH", "R9K_LOG_LEVEL", "R9K_PLATFORM_OVERRIDE"):
        assert stale not in envvars.ALL


def test_resolver_ignores_control_variables_and_flags_unknown_ones():
    reg = load_registry()
    env = {v.name: "1" for v in envvars.ALL.values() if v.type == "bool"}
    env["R9K_LOG_LEVEL"] = "debug"  # stale: now an unknown knob-like name
    rs = resolve(reg, "stock", env=env)
    flagged = {i for d in rs.diagnostics if d.code == "unknown-env" for i in d.items}
    assert flagged == {"R9K_LOG_LEVEL"}


def test_cache_dir_precedence(tmp_path):
    assert envvars.cache_dir({envvars.CACHE_DIR.name: str(tmp_path)}) == tmp_path
    assert envvars.cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "r9k"
    assert envvars.cache_dir({}) == Path.home() / ".cache" / "r9k"


def test_spell_names_the_variables_a_text_refers_to():
    text = "via ``envvars.MANIFEST`` (or envvars.TP), in envvars.cache_dir(); envvars.NOT_ONE, envvars.PREFIX"
    assert envvars.spell(text) == (f"via ``{envvars.MANIFEST.name}`` (or {envvars.TP.name}), in "
                                   "envvars.cache_dir(); envvars.NOT_ONE, envvars.PREFIX")
    assert envvars.MANIFEST.name == "R9K_MANIFEST"  # the reference, independent of spell


def test_help_built_from_docstrings_shows_the_names():
    """Docstrings refer to ``envvars.MANIFEST``; a user reading ``--help`` sees the name to set."""
    from r9k.r9kctl.cli import build_parser

    for cmd, var in (("launch", envvars.PROFILE), ("status", envvars.STATUS_FILE), ("bisect", envvars.MANIFEST)):
        sub = build_parser(only=cmd)._subparsers._group_actions[0].choices[cmd]
        text = sub.format_help()
        assert var.name in text and "envvars." not in text, (cmd, text)


def test_launcher_knobs_become_flags_not_variables():
    from r9k.registry.vllm_map import launch_args

    reg = load_registry()
    rs = resolve(reg, "tp4-default", env={}, sets={"EAGER": "1", "OFFLOAD_GB": "8"})
    exported = rs.env()
    for knob in ("UTIL", "EAGER", "MTP", "OFFLOAD_GB", "PREFIX_CACHE"):
        assert knob not in exported
    args, _env, _reqs, _conflicts = launch_args(rs)
    assert "--enforce-eager" in args and "--no-enable-prefix-caching" in args
    assert args[args.index("--cpu-offload-gb") + 1] == "8"
    spec = args[args.index("--speculative-config") + 1]
    assert '"num_speculative_tokens":3' in spec
    assert args[args.index("--gpu-memory-utilization") + 1] == rs.value("UTIL")


def test_cli_options_are_arguments_not_environment(tmp_path, capsys, monkeypatch):
    import os

    from r9k.r9kctl import cli

    for v in envvars.ALL.values():
        monkeypatch.delenv(v.name, raising=False)
    monkeypatch.setenv(envvars.CACHE_DIR.name, str(tmp_path / "cache"))
    src = Path(__file__).resolve().parents[2] / "profiles" / "cpu-smoke.toml"
    (tmp_path / "mine.toml").write_text(src.read_text())  # a profile is named by its file
    before = dict(os.environ)
    code = cli.main(["--plain", "--profiles-dir", str(tmp_path), "launch", "--profile", "mine", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert dict(os.environ) == before  # nothing leaked into this process's environment
    # ... but vLLM's processes are told where the validated profile lives
    assert f"export {envvars.PROFILES_DIR.name}={tmp_path}" in out.splitlines()


def test_an_installed_copy_writes_its_ledger_to_the_state_dir(tmp_path, monkeypatch):
    from r9k.registry import ledger

    pkg = tmp_path / "site-packages" / "r9k" / "registry"
    (pkg / "gates").mkdir(parents=True)
    (pkg / "gates" / "ledger.jsonl").write_text('{"shipped": 1}\n')
    monkeypatch.delenv(envvars.LEDGER.name, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(ledger, "_PACKAGE_DIR", pkg.resolve())
    path = ledger.ledger_path(pkg)
    assert path.parent == tmp_path / "state" / "r9k" / "gates"
    assert path.read_text() == '{"shipped": 1}\n'  # started from the packaged records
    # a checkout (a .git beside the package r9k/) keeps the repository's ledger
    (pkg.parents[1] / ".git").mkdir()
    assert ledger.ledger_path(pkg) == pkg / "gates" / "ledger.jsonl"
    # and this repository's own tree is a checkout
    assert ledger.ledger_path(Path(ledger.__file__).parent) == Path(ledger.__file__).parent / "gates" / "ledger.jsonl"
