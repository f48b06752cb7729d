"""Fixtures of the control panel's tests: a workspace in a temporary folder used as the working directory,
so every path the app shows is relative (``profiles/fx-tp2.toml``) and nothing the tests save touches the
repository.

``fx_workspace``: the small synthetic registry and profiles of tests/tui/fixtures (the snapshot and Pilot
tests), and only those profiles. ``workspace``: the project's own registry/ (read in place) with a copy of the
shipped profiles, for the tests that need the real thing (the operator tests)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from r9k.registry import envvars

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _workspace(tmp_path: Path, monkeypatch, registry: Path, profiles_src: Path) -> Path:
    ws = tmp_path / "ws"
    prof = ws / "profiles"
    prof.mkdir(parents=True)
    for f in sorted(profiles_src.glob("*.toml")):
        shutil.copy(f, prof / f.name)
    for name in list(os.environ):
        if name.startswith("R9K_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv(envvars.REGISTRY.name, str(registry))
    monkeypatch.setenv(envvars.PROFILES_DIR.name, str(prof))
    monkeypatch.setenv(envvars.CACHE_DIR.name, str(ws / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(ws / "config"))  # no user keymap
    monkeypatch.chdir(ws)
    return ws


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> Path:
    """The project's registry and a copy of the shipped profiles."""
    return _workspace(tmp_path, monkeypatch, REPO / "registry", REPO / "profiles")


@pytest.fixture
def fx_workspace(tmp_path, monkeypatch) -> Path:
    """The synthetic registry (copied: a test breaks one of its files) and profiles of tests/tui/fixtures, without
    the shipped profiles (they name the real releases and knobs, which the synthetic registry does not have)."""
    from r9k.registry import loader
    from r9k.r9kctl.tui import session

    shutil.copytree(FIXTURES / "registry", tmp_path / "ws" / "registry")
    ws = _workspace(tmp_path, monkeypatch, tmp_path / "ws" / "registry", FIXTURES / "profiles")
    only = lambda: envvars.PROFILES_DIR.paths()  # noqa: E731
    monkeypatch.setattr(loader, "default_profile_dirs", only)
    monkeypatch.setattr(session, "default_profile_dirs", only)
    return ws
