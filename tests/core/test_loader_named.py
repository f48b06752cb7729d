"""Profiles and releases are loaded by one rule: a file holds one item named like the file."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from r9k.registry import RegistryError, load_registry

ROOT = Path(__file__).resolve().parents[2]


def test_a_misnamed_release_and_profile_are_located_errors(tmp_path):
    reg = tmp_path / "registry"
    shutil.copytree(ROOT / "registry", reg, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    src = (reg / "releases" / "v0.1.0.toml").read_text()
    (reg / "releases" / "v0.1.9.toml").write_text(src)  # says version = "v0.1.0"
    prof = tmp_path / "profiles"
    prof.mkdir()
    (prof / "mine.toml").write_text('name = "other"\nextends = "stock"\n')
    with pytest.raises(RegistryError) as exc:
        load_registry(reg, [prof], broken_profiles="raise")
    lines = [d.format() for d in exc.value.diagnostics]
    assert any("v0.1.9.toml" in ln and "release version 'v0.1.0' differs from its file name 'v0.1.9'" in ln
               for ln in lines), lines
    assert any("mine.toml:1:1" in ln and "profile name 'other' differs from its file name 'mine'" in ln
               for ln in lines), lines
