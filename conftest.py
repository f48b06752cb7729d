"""Repository-wide pytest setup.

The kernels' and benchmarks' gate tests are collected by their paths (``kernels/hc_mix/test_hc_mix.py``),
and pytest would name such a file after its folders, ``kernels.hc_mix.test_hc_mix``: a second package
``kernels`` beside ``r9k.kernels`` (two op tables, two copies of every kernel module). This collection hook
imports each of them as the module of the one package instead (``r9k.kernels.hc_mix.test_hc_mix``, through
the ``r9k/`` links: docs/architecture.md, "The layout"). Nothing else is redirected: no import hook.
"""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
IN_R9K = ("kernels", "bench")  # top-level folders with test files, imported as r9k.<folder>


class _PackageModule(pytest.Module):
    def _getobj(self):
        name = ".".join(("r9k", *self.path.relative_to(ROOT).with_suffix("").parts))
        return importlib.import_module(name)


def pytest_pycollect_makemodule(module_path: Path, parent):
    try:
        rel = module_path.relative_to(ROOT)
    except ValueError:
        return None
    if rel.parts[0] in IN_R9K:
        return _PackageModule.from_parent(parent, path=module_path)
    return None
