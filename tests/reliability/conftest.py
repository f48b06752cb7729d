import os

import pytest

from r9k.registry import envvars

from .harness import Tree


@pytest.fixture(scope="session")
def tree(tmp_path_factory):
    return Tree(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(autouse=True)
def _clean_env(tmp_path_factory, monkeypatch):
    for k in list(os.environ):
        if k.startswith("R9K_") or k.startswith("_R9K_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv(envvars.CACHE_DIR.name, str(tmp_path_factory.getbasetemp() / "r9k-cache"))
    monkeypatch.setenv(envvars.PLAIN.name, "1")
