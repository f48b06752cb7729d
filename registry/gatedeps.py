"""What a gate depends on, computed: the import closure, within this repository, of its test files and of
its kernel modules.

Roots of a variant's closure: the files of its declared gate tests, the ``conftest.py`` files pytest loads
for them (their folder and every folder above it up to the repository root), the kernel module named by
``implementation.module``, and the Python modules under ``implementation.sources`` (a program there, such as
a benchmark with an ``if __name__ == "__main__":`` block, is hashed as declared but its imports are not
followed: it is not what the gate tests). From each root the
module's source is parsed (``ast``; nothing is imported) and every ``import`` / ``from ... import``
anywhere in it (inside functions too: a lazy import is still a dependency) that names a module of this
repository is followed, together with the ``__init__.py`` of every package on the way (importing
``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py``). A string constant in a module that names a file
beside it (``"tuned_h200.json"``) makes that data file a dependency too.

Module names map to files as the installed package does (``setup.py``): ``r9k.<folder>.<...>`` is
``<folder>/<...>`` (``r9k`` itself is ``r9k/``), and a bare ``kernels.<...>`` (pytest's path import,
aliased by the root ``conftest.py``) is the same file. Names that are not files of the repository
(torch, triton, the standard library) are not followed: their versions are part of the toolchain
(:mod:`r9k.registry.provenance`). Dynamic imports (``importlib.import_module(name)``) are not seen.
"""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path
from typing import Iterable

NAMESPACE = "r9k"


def _module_file(root: Path, dotted: str) -> Path | None:
    """The file of a repository module (``pkg/__init__.py`` for a package), or None if not ours."""
    parts = dotted.split(".")
    if parts[0] == NAMESPACE:
        parts = parts[1:] if len(parts) > 1 else [NAMESPACE]
    if not parts or not parts[0]:
        return None
    base = root.joinpath(*parts)
    if base.is_dir() and (base / "__init__.py").is_file():
        return base / "__init__.py"
    py = base.with_suffix(".py")
    return py if py.is_file() else None


def _package_inits(root: Path, path: Path) -> list[Path]:
    """``__init__.py`` of every package that contains ``path`` (up to the repository root)."""
    out = []
    d = path.parent
    while d != root and root in d.parents:
        init = d / "__init__.py"
        if not init.is_file():
            break
        out.append(init)
        d = d.parent
    return out


def _module_name(root: Path, path: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


@lru_cache(maxsize=1024)
def _direct(root: Path, path: Path, mtime_ns: int) -> tuple[Path, ...]:
    """Repository files one module depends on directly (see the module doc). Cached per file version."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError):
        return ()  # its own hash still counts; a file that does not parse fails its gate anyway
    is_pkg = path.name == "__init__.py"
    package = _module_name(root, path) if is_pkg else _module_name(root, path).rpartition(".")[0]
    found: list[Path] = []

    def add(dotted: str) -> bool:
        # The module and each of its parent packages.
        parts = dotted.split(".")
        hit = False
        for i in range(1, len(parts) + 1):
            f = _module_file(root, ".".join(parts[:i]))
            if f is not None:
                found.append(f)
                hit = i == len(parts)
        return hit

    siblings = {p.name for p in path.parent.iterdir() if p.is_file()} if path.parent.is_dir() else set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                if node.level > 1:
                    base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base)
                mod = f"{prefix}.{node.module}" if node.module else prefix
            else:
                mod = node.module or ""
            if not mod:
                continue
            add(mod)
            for alias in node.names:  # `from pkg import submodule`
                if alias.name != "*" and _module_file(root, f"{mod}.{alias.name}") is not None:
                    add(f"{mod}.{alias.name}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in siblings:
            if node.value != path.name and "/" not in node.value:
                found.append(path.parent / node.value)
    return tuple(dict.fromkeys(p.resolve() for p in found))


def closure(root: str | Path, files: Iterable[str | Path]) -> list[str]:
    """Repository-relative paths (sorted) of ``files`` and everything they import from the repository."""
    root = Path(root).resolve()
    todo = [(root / f).resolve() for f in files]
    seen: set[Path] = set()
    while todo:
        p = todo.pop()
        if p in seen or not p.is_file():
            continue
        try:
            p.relative_to(root)
        except ValueError:
            continue
        seen.add(p)
        todo += _package_inits(root, p)
        if p.suffix == ".py":
            todo += _direct(root, p, p.stat().st_mtime_ns)
    return sorted(p.relative_to(root).as_posix() for p in seen)


def conftests(root: str | Path, test_file: str) -> list[str]:
    """The conftest.py files pytest loads for a test file: its folder and every folder above, to the root."""
    root = Path(root).resolve()
    out = []
    d = (root / test_file).parent
    while True:
        c = d / "conftest.py"
        if c.is_file():
            out.append(c.relative_to(root).as_posix())
        if d == root or root not in d.parents:
            break
        d = d.parent
    return out


def is_script(root: str | Path, rel: str) -> bool:
    """A file with an ``if __name__ == "__main__":`` block is a program (a benchmark), not a kernel module:
    declared sources that are programs are hashed, but their imports are not followed."""
    p = Path(root) / rel
    try:
        data = p.read_bytes()
        if b"__name__" not in data:  # no such block possible: skip the parse (most files; ~2 ms each)
            return False
        tree = ast.parse(data, filename=str(p))
    except (OSError, SyntaxError, ValueError):
        return False
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and isinstance(node.test.left, ast.Name) \
                and node.test.left.id == "__name__":
            return True
    return False


def module_path(root: str | Path, dotted: str | None) -> str | None:
    if not dotted:
        return None
    root = Path(root).resolve()
    f = _module_file(root, dotted)
    return f.relative_to(root).as_posix() if f is not None else None
