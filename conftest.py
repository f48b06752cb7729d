"""Repository-wide pytest setup: a test file named through a top-level link is refused.

The folders are the package ``r9k/`` (``r9k/kernels``, ...); the top-level ``kernels``, ``bench``, ... are links
to them (docs/architecture.md, "The layout"). pytest names a test file after the folders of the path it is
given: ``r9k/kernels/hc_mix/test_hc_mix.py`` is ``r9k.kernels.hc_mix.test_hc_mix``, the package's own module,
but through the link it would be ``kernels.hc_mix.test_hc_mix``, a second package ``kernels`` beside
``r9k.kernels`` (two op tables). So such a path stops the run with one line naming the real path (a walk from the root passes the links by).
"""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent


def pytest_ignore_collect(collection_path: Path, config: pytest.Config):
    try:
        rel = collection_path.relative_to(ROOT)
    except ValueError:
        return None
    link = ROOT / rel.parts[0] if rel.parts else None
    if link is not None and link.is_symlink():
        if len(rel.parts) == 1 and not any(Path(a.split("::")[0]).absolute() == collection_path for a in config.args):
            return True  # reached from the root (pytest .): the folder is collected as r9k/<folder>
        real = (ROOT / rel).resolve().relative_to(ROOT).as_posix()
        raise pytest.UsageError(f"{rel.as_posix()}:1:1: error[usage]: {rel.parts[0]}/ is a link into the package; "
                                f"name the real path: {real}")
    return None
