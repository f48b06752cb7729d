"""Repository-wide pytest setup.

pytest imports a test file by its path from the repository root, so ``kernels/hc_mix/test_hc_mix.py``
would arrive as the module ``kernels.hc_mix.test_hc_mix``, and its package ``kernels`` would run a
second time beside the installed ``r9k.kernels`` (two op tables, two copies of every kernel module:
the reason the folders are mapped under one namespace). This finder makes every ``kernels[.X]`` import
return the one ``r9k.kernels[.X]`` module instead.
"""
import importlib
import importlib.abc
import importlib.util
import sys

ALIASED = ("kernels", "bench")  # top-level folders whose code is imported as r9k.<folder>


class _NamespaceAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".", 1)[0] in ALIASED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return importlib.import_module("r9k." + spec.name)  # the real module, registered under both names

    def exec_module(self, module):
        pass  # already executed as r9k.<name>


if not any(isinstance(f, _NamespaceAlias) for f in sys.meta_path):
    sys.meta_path.insert(0, _NamespaceAlias())
