import os

import pytest

from .harness import Tree


@pytest.fixture(scope="session")
def tree(tmp_path_factory):
    return Tree(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(autouse=True)
def _clean_env(tmp_path_factory, monkeypatch):
    for k in list(os.environ):
        if k.startswith("R9K_") or k.startswith("_R9K_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("R9K_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "r9k-cache"))
    monkeypatch.setenv("R9K_PLAIN", "1")
