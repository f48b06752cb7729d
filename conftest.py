"""Repository-wide pytest setup: a test path named through a top-level link is refused.

The folders are the package ``r9k/`` (``r9k/kernels``, ...); the top-level ``kernels``, ``bench``, ... are links
to them (docs/architecture.md, "The layout"). pytest names a test file after the folders of the path it is
given: ``r9k/kernels/hc_mix/test_hc_mix.py`` is ``r9k.kernels.hc_mix.test_hc_mix``, the package's own module,
but through the link it would be ``kernels.hc_mix.test_hc_mix``, a second package ``kernels`` beside
``r9k.kernels`` (two op tables). So such a path stops the run with one line naming the real path, and a walk
from the root (``pytest .``) passes the links by.
"""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent


def _through_link(path: Path) -> Path | None:
    """``path`` (absolute, not resolved) relative to the root when its first folder is a top-level link."""
    try:
        rel = path.relative_to(ROOT)
    except ValueError:
        return None
    return rel if rel.parts and (ROOT / rel.parts[0]).is_symlink() else None


def pytest_configure(config: pytest.Config) -> None:
    for arg in config.args:
        rel = _through_link(Path(config.invocation_params.dir, arg.split("::")[0]).absolute())
        if rel is not None:
            real = (ROOT / rel).resolve().relative_to(ROOT).as_posix()
            raise pytest.UsageError(f"{arg}:1:1: error[usage]: {rel.parts[0]}/ is a link to the package's folder; "
                                    f"name the real path: {real}")


def pytest_ignore_collect(collection_path: Path) -> bool | None:
    return True if _through_link(collection_path) is not None else None
