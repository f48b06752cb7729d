"""Corpus, part 5: the vLLM plugin. ``register()`` (in this process) raises only its StartupError, whose
lines are located, for every bad manifest, environment or registry; control variables alone leave it
inactive."""
from __future__ import annotations

import os
import re

import pytest

from r9k.registry import envvars

from .test_files import NEW_VARIANT

MANIFESTS = [
    ("a-list", b"[]", 1, "wrong-type"),
    ("a-string", b'"tp4-default"', 1, "wrong-type"),
    ("null", b"null", 1, "wrong-type"),
    ("a-number", b"4", 1, "wrong-type"),
    ("empty", b"", 1, "json-syntax"),
    ("syntax", b'{"profile": "tp4-default",\n "tp": }', 2, "json-syntax"),
    ("latin1", b'{"profile": "caf\xe9"}', 1, "encoding"),
    ("utf16", '{"profile": "x"}'.encode("utf-16"), 1, "encoding"),
    ("deep", b"[" * 100 + b"]" * 100, 1, "too-deep"),
    ("values-not-an-object", b'{"profile": "tp4-default", "tp": 4,\n "values": 5}', 2, "manifest"),
    ("values-a-list", b'{"profile": "tp4-default", "tp": 4,\n "values": []}', 2, "manifest"),
    ("value-entry-a-number", b'{"profile": "tp4-default", "tp": 4, "values": {\n "router_gemm": 5}}', 2, "manifest"),
    ("value-a-table", b'{"profile": "tp4-default", "tp": 4, "values": {\n "router_gemm": {"value": {}}}}', 2,
     "manifest"),
    ("tp-four", b'{"profile": "tp4-default",\n "tp": "four", "values": {}}', 2, "manifest"),
    ("tp-zero", b'{"profile": "tp4-default",\n "tp": 0, "values": {}}', 2, "manifest"),
    ("tp-true", b'{"profile": "tp4-default",\n "tp": true, "values": {}}', 2, "manifest"),
    ("profile-missing", b'{"tp": 4, "values": {}}', 1, "manifest"),
    ("profile-a-number", b'{"profile": 4, "tp": 4, "values": {}}', 1, "manifest"),
    ("extra-env-a-list", b'{"profile": "tp4-default", "tp": 4, "values": {},\n "extra_env": []}', 2, "manifest"),
    ("serve-args-numbers", b'{"profile": "tp4-default", "tp": 4, "values": {},\n "serve_args": [1]}', 2, "manifest"),
    ("values-of-another-registry", b'{"profile": "tp4-default", "tp": 4, "values": {}}', None, "manifest"),
]

LINE = re.compile(r"^\s*(?P<file>\S+?):(?P<line>\d+)(?::\d+)?: error\[(?P<kind>[a-z-]+)\]")


@pytest.fixture
def plugin(monkeypatch, tmp_path):
    from r9k import plugin as P
    from r9k.plugin import report

    for k in list(os.environ):
        if k.startswith("R9K_") or k.startswith("_R9K_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv(envvars.CACHE_DIR.name, str(tmp_path / "cache"))
    report.reset_for_tests()
    yield P
    report.reset_for_tests()


def _register(P):
    from r9k.plugin.startup import StartupError

    try:
        P.register()
    except StartupError as exc:
        return exc
    return None


@pytest.mark.parametrize("name,data,line,kind", MANIFESTS, ids=[m[0] for m in MANIFESTS])
def test_bad_manifest(plugin, monkeypatch, tmp_path, name, data, line, kind):
    path = tmp_path / "manifest.json"
    path.write_bytes(data)
    monkeypatch.setenv(envvars.MANIFEST.name, str(path))
    exc = _register(plugin)
    assert exc is not None, "register() accepted a bad manifest"
    text = str(exc)
    assert "Traceback" not in text
    first = exc.lines[0]
    if line is None:
        assert "error[manifest]" in first, text
        return
    m = LINE.match(first)
    assert m and m["file"].endswith("manifest.json") and int(m["line"]) == line and m["kind"] == kind, text
    assert _register(plugin) is exc  # a second call in the process raises the same error


@pytest.mark.parametrize("env", [
    {envvars.NO_CACHE.name: "1"}, {"R9K_LOG_LEVEL": "debug"}, {envvars.CACHE_DIR.name: "/tmp"},
    {envvars.DEBUG.name: "1"}, {envvars.PLAIN.name: "1"}, {envvars.STATUS_FILE.name: "/tmp/r9k-status.json"},
    {envvars.REGISTRY.name: "/nonexistent"},
    {envvars.PROFILES_DIR.name: "/nonexistent"}, {envvars.LEDGER.name: "/x"},
    {envvars.NO_CACHE.name: "1", "R9K_LOG_LEVEL": "info", envvars.DEBUG.name: "1"}, {"R9K_VERBOSE": "1"},
], ids=lambda e: "+".join(e))
def test_control_variables_alone_leave_it_inactive(plugin, monkeypatch, env):
    from r9k.plugin import report
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert _register(plugin) is None
    assert report.active_set() is None


@pytest.mark.parametrize("env,kind", [
    ({envvars.TP.name: "four"}, "bad-value"),
    ({envvars.PROFILE.name: "nope"}, "unknown-profile"),
    ({envvars.PROFILE.name: "tp4-default", envvars.TP.name: "3"}, "unsupported-tp"),
    ({envvars.PROFILE.name: "tp4-default", "R9K_ROUTER": "fast"}, "bad-value"),
    ({envvars.PROFILE.name: "tp4-default", envvars.REGISTRY.name: "/nonexistent"}, "io"),
    ({envvars.MANIFEST.name: "/nonexistent/manifest.json"}, "not-found"),
    ({envvars.PROFILE.name: "tp4-default", "KVMEM": "1e300"}, "memory"),
    ({envvars.PROFILE.name: "tp4-default", "KVMEM": "100"}, "memory"),
    ({envvars.PROFILE.name: "tp4-default", "KVMEM": "inf"}, "bad-value"),
], ids=lambda e: "+".join(f"{k}={v}" for k, v in e.items()) if isinstance(e, dict) else e)
def test_bad_environment(plugin, monkeypatch, env, kind):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    exc = _register(plugin)
    assert exc is not None and any(f"error[{kind}]" in ln for ln in exc.lines), exc


@pytest.mark.parametrize("content,kind", [
    (b"[[variant]\n", "toml-syntax"), (b"# caf\xe9\n", "encoding"), ("x = 1\n".encode("utf-16"), "encoding"),
    (NEW_VARIANT.replace('knob = "R9K_ZZ_EXTRA"', "knob = 5").encode(), "schema"),
], ids=["syntax", "latin1", "utf16", "schema"])
def test_bad_registry(plugin, monkeypatch, tmp_path, content, kind):
    from .harness import copy_registry

    root = copy_registry(tmp_path / "registry")
    (root / "variants" / "zz.toml").write_bytes(content)
    monkeypatch.setenv(envvars.REGISTRY.name, str(root))
    monkeypatch.setenv(envvars.PROFILE.name, "tp4-default")
    exc = _register(plugin)
    assert exc is not None
    m = LINE.match(exc.lines[0])
    assert m and m["file"].endswith("zz.toml") and m["kind"] == kind, exc


def test_an_unexpected_exception_is_one_startup_line(plugin, monkeypatch):
    from r9k.plugin import startup

    def boom(*args, **kwargs):
        raise ZeroDivisionError("division by zero")
    monkeypatch.setattr(startup, "load_active", boom)
    monkeypatch.setenv(envvars.PROFILE.name, "tp4-default")
    exc = _register(plugin)
    assert exc is not None and "error[internal]" in exc.lines[0] and "R9K_DEBUG=1" in exc.lines[0]


@pytest.mark.parametrize("old", [b"[]", b'"x"', b'{"processes": []}', b"{", b"\xff\xfe"], ids=["list", "string",
                                                                                           "processes-list", "syntax",
                                                                                           "binary"])
def test_status_file_of_another_shape_is_replaced_not_a_crash(tmp_path, old):
    from r9k.plugin import report

    path = tmp_path / "status.json"
    path.write_bytes(old)
    section = {"profile": "p", "hash": "h", "tp": 1, "model": None,
               "process": {"name": "MainProcess", "pid": 1, "role": "main", "rank": 0}}
    report.write_section(str(path), section)
    assert report.read_status_file(str(path))["processes"]["MainProcess"]["hash"] == "h"
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []
