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
import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Iterable
from . import envvars, fileio

NAMESPACE = "r9k"

# ------------------------------------------------------------------------------ the parse cache
# Parsing every module of every gate's closure was most of a cold `r9kctl validate` (0.33 s of 0.35). What a
# module's source says (its imports, the string constants that may name a data file beside it, whether it is
# a program) depends on its bytes alone, so it is cached on disk keyed by the sha256 of those bytes
# (<cache dir>/gatedeps-<format>.json); resolving the names to files stays live (a file created or removed is
# seen at once), and a changed file has another hash, so its gate goes stale at once as before.
# envvars.NO_CACHE = 1 bypasses it.
_CACHE_FORMAT = 1
_disk: dict[str, dict] | None = None
_dirty = False


def _cache_path() -> Path:
    return envvars.cache_dir() / f"gatedeps-{_CACHE_FORMAT}.json"


def _cache() -> dict[str, dict]:
    global _disk
    if _disk is None:
        from . import envvars

        _disk = {}
        if not envvars.NO_CACHE.on():
            try:
                data = json.loads(_cache_path().read_text(encoding="utf-8"))
                if isinstance(data, dict):
                    _disk = data
            except (OSError, ValueError):
                pass
    return _disk


def save_cache() -> None:
    """Write the parse cache if it gained entries (atomically; a cache that cannot be written is skipped)."""
    global _dirty

    if not _dirty or _disk is None or envvars.NO_CACHE.on():
        return
    path = _cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fileio.atomic_write(path, json.dumps(_disk, separators=(",", ":")), "parse cache", within=path.parent)
        _dirty = False
    except OSError:  # fileio's refusals (a FIFO, folder or outside link at the path) are OSErrors too
        pass


def closure_cached(root: Path, declaration: list, compute) -> tuple[dict[str, str], list[str]]:
    """``compute()`` (file -> sha256, missing declared paths) of one gate, or its cached result while still
    valid (see :func:`r9k.registry.ledger.file_hashes`). The entry lives in the same cache file as the parses."""
    import time

    cache = _cache()
    key = "closure:" + hashlib.sha256(json.dumps(declaration, sort_keys=True).encode()).hexdigest()
    entry = cache.get(key)
    if entry is not None:
        hashes = _still_valid(root, entry)
        if hashes is not None:
            return hashes, list(entry["missing"])
    t0 = time.time()
    files, missing = compute()
    stats: dict[str, list] = {}
    dirs = {".": _mtime(root)}
    for rel, sha in files.items():
        try:
            st = (root / rel).stat()
        except OSError:
            return files, missing
        stats[rel] = [st.st_mtime_ns, st.st_size, sha]
        d = Path(rel).parent
        while d.as_posix() not in dirs:  # the folder and every folder above it (lookups walk them)
            dirs[d.as_posix()] = _mtime(root / d)
            d = d.parent
    for rel in missing:  # a declared path that is not there: its nearest folder that is
        d = Path(rel).parent
        while not (root / d).is_dir():
            d = d.parent
        dirs.setdefault(d.as_posix(), _mtime(root / d))
    global _dirty
    cache[key] = {"files": stats, "dirs": dirs, "missing": list(missing), "at": int(t0 * 1e9)}
    _dirty = True
    save_cache()
    return files, missing


RACY_NS = 2_000_000_000  # a file modified this close to the recording is compared by content, not stat


def _mtime(p: Path) -> int | None:
    try:
        return p.stat().st_mtime_ns
    except OSError:
        return None


def _still_valid(root: Path, entry: dict) -> dict[str, str] | None:
    for rel, m in entry["dirs"].items():
        if _mtime(root / rel) != m:
            return None
    out = {}
    for rel, (mtime, size, sha) in entry["files"].items():
        try:
            st = (root / rel).stat()
        except OSError:
            return None
        if st.st_mtime_ns != mtime or st.st_size != size:
            return None
        if mtime >= entry["at"] - RACY_NS and content_hash(root / rel)[0] != sha:
            return None
        out[rel] = sha
    return out


def _facts_of(path: Path) -> dict:
    key, data = content_hash(path)
    hit = _cache().get(key)
    return hit if hit is not None else _facts(data if data is not None else path.read_bytes(), str(path), key)


def _facts(data: bytes, filename: str, key: str | None = None) -> dict:
    """What a module's source says, from its bytes: ``imports`` ([level, module, [names]] per import;
    ``import a.b`` is [-1, "a.b", []]), ``consts`` (string constants that could name a sibling file) and
    ``script`` (an ``if __name__ == "__main__":`` block at module level). Cached by content hash."""
    global _dirty
    key = key or hashlib.sha256(data).hexdigest()
    cache = _cache()
    hit = cache.get(key)
    if hit is not None:
        return hit
    try:
        tree = ast.parse(data, filename=filename)
    except (SyntaxError, ValueError):
        facts = {"imports": [], "consts": [], "script": False}
    else:
        imports, consts = [], set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imports += [[-1, alias.name, []] for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                imports.append([node.level, node.module or "", [a.name for a in node.names]])
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "/" not in node.value \
                    and 0 < len(node.value) <= 255 and "\n" not in node.value:
                consts.add(node.value)
        script = any(isinstance(n, ast.If) and isinstance(n.test, ast.Compare) and isinstance(n.test.left, ast.Name)
                     and n.test.left.id == "__name__" for n in tree.body)
        facts = {"imports": imports, "consts": sorted(consts), "script": script}
    cache[key] = facts
    _dirty = True
    return facts


#: lookups of one pass over the gates (:func:`fresh_lookups` starts one): module name -> file, folder ->
#: its package __init__ files, file -> (stat, sha256); every gate shares them, so the folders and files
#: several closures have in common are looked at once
_LOOKUPS: dict = {}


def fresh_lookups() -> None:
    """Forget the file-system lookups (called at the start of each pass over the gates: files may have been
    created, removed or edited since the last)."""
    _LOOKUPS.clear()


def content_hash(path: Path) -> tuple[str, bytes | None]:
    """(sha256 hex, the bytes when just read) of a file, once per file version within a pass."""
    st = path.stat()
    key = ("sha", path, st.st_mtime_ns, st.st_size)
    hit = _LOOKUPS.get(key)
    if hit is not None:
        return hit, None
    data = path.read_bytes()
    h = hashlib.sha256(data).hexdigest()
    _LOOKUPS[key] = h
    return h, data


def _module_file(root: Path, dotted: str) -> Path | None:
    key = ("mod", root, dotted)
    if key not in _LOOKUPS:
        _LOOKUPS[key] = _module_file_uncached(root, dotted)
    return _LOOKUPS[key]


def _module_file_uncached(root: Path, dotted: str) -> Path | None:
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
    key = ("inits", root, path.parent)
    if key not in _LOOKUPS:
        _LOOKUPS[key] = _package_inits_uncached(root, path)
    return _LOOKUPS[key]


def _package_inits_uncached(root: Path, path: Path) -> list[Path]:
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
def _direct(root: Path, path: Path, mtime_ns: int, size: int = -1) -> tuple[Path, ...]:
    """Repository files one module depends on directly (see the module doc). Cached per file version; the
    parse behind it per content hash (:func:`_facts`)."""
    try:
        facts = _facts_of(path)
    except OSError:
        return ()
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
    for level, module, names in facts["imports"]:
        if level < 0:  # import a.b
            add(module)
            continue
        if level:
            base = package.split(".") if package else []
            if level > 1:
                base = base[: len(base) - (level - 1)]
            prefix = ".".join(base)
            mod = f"{prefix}.{module}" if module else prefix
        else:
            mod = module
        if not mod:
            continue
        add(mod)
        for name in names:  # `from pkg import submodule`
            if name != "*" and _module_file(root, f"{mod}.{name}") is not None:
                add(f"{mod}.{name}")
    for const in facts["consts"]:
        if const in siblings and const != path.name:
            found.append(path.parent / const)
    return tuple(dict.fromkeys(Path(os.path.normpath(p)) for p in found))  # root is resolved: no lstat walk


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
            st = p.stat()
            todo += _direct(root, p, st.st_mtime_ns, st.st_size)
    save_cache()
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
    except OSError:
        return False
    if b"__name__" not in data:  # no such block possible: skip the parse (most files)
        return False
    facts = _facts(data, str(p))
    return bool(facts["script"])


def module_path(root: str | Path, dotted: str | None) -> str | None:
    if not dotted:
        return None
    root = Path(root).resolve()
    f = _module_file(root, dotted)
    return f.relative_to(root).as_posix() if f is not None else None
