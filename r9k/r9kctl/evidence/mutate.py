"""pytest plugin for mutation tests: load kernel modules with a deliberate error, to show a gate can fail.

Active only when ``envvars.MUTATE`` is set (JSON list of ``{"module", "old", "new"}``): the module is compiled
from its file's text with ``old`` replaced by ``new`` (nothing on disk changes; :mod:`linecache` returns the
mutated text, which Triton's interpreter re-parses). An ``old`` that does not occur is an error at import.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import linecache
import sys

from ...registry import envvars

_SPEC = json.loads(envvars.MUTATE.get() or "[]")
_BY_MODULE: dict[str, list[dict]] = {}
for _m in _SPEC:
    _BY_MODULE.setdefault(_m["module"], []).append(_m)


class MutationMissing(ImportError):
    pass


class _Loader(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname):
        path = self.get_filename(fullname)
        src = self.get_data(path).decode("utf-8")
        for m in _BY_MODULE[fullname]:
            if m["old"] not in src:
                raise MutationMissing(f"mutation of {fullname}: {m['old']!r} does not occur in {path}")
            src = src.replace(m["old"], m["new"])
        lines = src.splitlines(keepends=True)
        linecache.cache[path] = (len(src), None, lines, path)  # mtime None: checkcache keeps it
        return compile(src, path, "exec", dont_inherit=True)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _BY_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.origin:
            return None
        spec.loader = _Loader(fullname, spec.origin)
        return spec


if _BY_MODULE and not any(isinstance(f, _Finder) for f in sys.meta_path):
    already = sorted(set(_BY_MODULE) & set(sys.modules))
    if already:
        raise MutationMissing(f"already imported before the mutation plugin: {', '.join(already)}")
    sys.meta_path.insert(0, _Finder())
