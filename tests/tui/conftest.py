"""Fixtures of the control panel's tests: a workspace in a temporary folder with a copy of the registry
tree and of the profiles, used as the working directory, so every path the app shows is relative
(``profiles/tp2-default.toml``) and nothing the tests save touches the repository."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from r9k.registry import envvars

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _workspace(tmp_path: Path, monkeypatch, registry_src: Path, profiles_src: Path) -> Path:
    ws = tmp_path / "ws"
    reg = ws / "registry"
    reg.mkdir(parents=True)
    for part in ("variants", "releases"):
        shutil.copytree(registry_src / part, reg / part)
    shutil.copy(registry_src / "models.toml", reg / "models.toml")
    prof = ws / "profiles"
    prof.mkdir()
    for f in sorted(profiles_src.glob("*.toml")):
        shutil.copy(f, prof / f.name)
    for name in list(os.environ):
        if name.startswith("R9K_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv(envvars.REGISTRY.name, str(reg))
    monkeypatch.setenv(envvars.PROFILES_DIR.name, str(prof))
    monkeypatch.setenv(envvars.CACHE_DIR.name, str(ws / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(ws / "config"))  # no user keymap
    monkeypatch.chdir(ws)
    return ws


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> Path:
    """A copy of the live registry and profiles (the Pilot tests)."""
    return _workspace(tmp_path, monkeypatch, REPO / "registry", REPO / "profiles")


@pytest.fixture
def frozen_workspace(tmp_path, monkeypatch) -> Path:
    """The frozen registry and profiles of tests/tui/fixtures (the snapshot tests), with the adapter table
    frozen beside them: it is a fact of the code (registry/adapters.toml) that the variants'
    implementation tables are checked against, so the live one would drift from the frozen variants."""
    from r9k.registry import availability

    frozen = FIXTURES / "registry" / availability.ADAPTERS_FILE
    monkeypatch.setattr(availability, "adapters_path", lambda: frozen)
    return _workspace(tmp_path, monkeypatch, FIXTURES / "registry", FIXTURES / "profiles")
