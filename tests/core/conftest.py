import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from r9k.registry import envvars

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO.parent / "shared" / "reference"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # each test run gets its own parse cache and manifest folder
    monkeypatch.setenv(envvars.CACHE_DIR.name, str(tmp_path_factory.getbasetemp() / "r9k-cache"))
    for k in list(os.environ):
        if k.startswith(envvars.PREFIX) and k != envvars.CACHE_DIR.name:
            monkeypatch.delenv(k)


@pytest.fixture
def registry_copy(tmp_path):
    """A writable copy of the shipped registry tree."""
    from r9k.registry.loader import PACKAGE_DIR

    dst = tmp_path / "registry"
    shutil.copytree(PACKAGE_DIR, dst, ignore=shutil.ignore_patterns("*.py", "__pycache__", "gates"))
    return dst


@pytest.fixture
def r9kctl(tmp_path):
    """Run the real command line in a subprocess; returns (exit code, stdout, stderr)."""

    def run(*args, env=None, cwd=None):
        e = dict(os.environ)
        e.update(env or {})
        e[envvars.PLAIN.name] = "1"
        p = subprocess.run([sys.executable, "-m", "r9k.r9kctl.cli", *args], capture_output=True, text=True,
                           env=e, cwd=cwd or tmp_path, timeout=120)
        return p.returncode, p.stdout, p.stderr

    return run
