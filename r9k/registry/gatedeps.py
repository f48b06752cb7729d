"""What a gate depends on: the import closure, within this repository, of its test files and kernel modules.

Roots come from :func:`r9k.registry.ledger.dependencies`. Each module is parsed (``ast``, nothing imported) and
every import in it that names a module of this repository is followed, with the ``__init__.py`` of every
package on the way; a program (an ``if __name__ == "__main__":`` block) is hashed but not followed, and a
string constant naming a file beside the module makes it a dependency. ``r9k.<folder>.<...>`` and a bare
``kernels.<...>`` are ``<folder>/<...>``. Dynamic imports are not seen.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import time
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Iterable
from . import envvars, fileio

NAMESPACE = "r9k"

# ------------------------------------------------------------------------------ the parse cache
# What a module's source says (:func:`_facts`) and each gate's closure (:func:`closure_cached`), cached on disk
# (<cache dir>/gatedeps-<format>.json); every entry's shape is checked before use; envvars.NO_CACHE bypasses it.
_CACHE_FORMAT = 1
_disk: dict[str, dict] | None = None
_dirty = False


def _cache_path() -> Path:
    return envvars.cache_dir() / f"gatedeps-{_CACHE_FORMAT}.json"


def _read_disk(path: Path) -> dict:
    """The cache file's entries; {} for anything but a readable JSON object (each entry is checked when used)."""
    try:
        if os.path.islink(path) and os.path.dirname(os.path.realpath(path)) != os.path.realpath(path.parent):
            return {}
        data = json.loads(fileio.read_bytes(path, "gate closure cache"))
    except (OSError, ValueError, fileio.FileError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _cache() -> dict[str, dict]:
    global _disk
    if _disk is None:
        _disk = {} if envvars.NO_CACHE.on() else _read_disk(_cache_path())
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
    """``compute()`` (file -> sha256, missing declared paths) of one gate, or its cached result while every file
    of the closure has the recorded content and every folder it was looked up in the recorded entries
    (modification times are never consulted)."""
    cache = _cache()
    key = "closure:" + hashlib.sha256(json.dumps(declaration, sort_keys=True).encode()).hexdigest()
    entry = cache.get(key)
    if _is_closure_entry(entry):
        hashes = _still_valid(root, entry)
        if hashes is not None:
            return hashes, list(entry["missing"])
    t0 = time.time()
    files, missing = compute()
    dirs = {".": _listing(root)}
    for rel in files:
        d = Path(rel).parent
        while d.as_posix() not in dirs:  # the folder and every folder above it (lookups walk them)
            dirs[d.as_posix()] = _listing(root / d)
            d = d.parent
    for rel in missing:  # a declared path that is not there: its nearest folder that is
        d = Path(rel).parent
        while not (root / d).is_dir():
            d = d.parent
        dirs.setdefault(d.as_posix(), _listing(root / d))
    global _dirty
    cache[key] = {"files": dict(files), "dirs": dirs, "missing": list(missing), "at": int(t0 * 1e9)}
    _dirty = True
    save_cache()
    return files, missing


def _listing(d: Path) -> str | None:
    """sha256 of a folder's entries (name, and whether it is a folder), or None if it cannot be listed."""
    return _looked_up(("ls", d), lambda: _listing_uncached(d))


def _listing_uncached(d: Path) -> str | None:
    try:
        with os.scandir(d) as it:
            names = sorted(e.name + ("/" if e.is_dir() else "") for e in it)
    except OSError:
        return None
    return hashlib.sha256("\0".join(names).encode("utf-8", "surrogateescape")).hexdigest()


def _is_sha(x) -> bool:
    return isinstance(x, str) and len(x) == 64


def _is_closure_entry(entry) -> bool:
    """The shape :func:`closure_cached` writes (an entry of an older format or a damaged one is not)."""
    return isinstance(entry, dict) and isinstance(entry.get("files"), dict) and isinstance(entry.get("dirs"), dict) \
        and isinstance(entry.get("missing"), list) and all(isinstance(m, str) for m in entry["missing"]) \
        and all(isinstance(k, str) and _is_sha(v) for k, v in entry["files"].items()) \
        and all(isinstance(k, str) and (v is None or _is_sha(v)) for k, v in entry["dirs"].items())


def _inside(root: Path, rel: str) -> Path | None:
    """``root / rel`` for a plain relative path (a cache entry naming ``/etc/x`` or ``../x`` is not followed)."""
    if not rel or rel.startswith("/") or f"/{rel}/".find("/../") >= 0 or "\\" in rel:
        return None
    return root / rel


def _still_valid(root: Path, entry: dict) -> dict[str, str] | None:
    for rel, listing in entry["dirs"].items():
        d = _inside(root, rel) if rel != "." else root
        if d is None or _listing(d) != listing:
            return None
    out = {}
    for rel, sha in entry["files"].items():
        p = _inside(root, rel)
        try:
            if p is None or content_hash(p)[0] != sha:
                return None
        except OSError:
            return None
        out[rel] = sha
    return out


def _is_facts(hit) -> bool:
    """The shape :func:`_facts` caches."""
    return isinstance(hit, dict) and isinstance(hit.get("script"), bool) \
        and isinstance(hit.get("consts"), list) and all(isinstance(c, str) for c in hit["consts"]) \
        and isinstance(hit.get("imports"), list) \
        and all(isinstance(i, list) and len(i) == 3 and isinstance(i[0], int) and not isinstance(i[0], bool)
                and isinstance(i[1], str) and isinstance(i[2], list) and all(isinstance(n, str) for n in i[2])
                for i in hit["imports"])


def _facts_of(path: Path) -> dict:
    key, data = content_hash(path)
    hit = _cache().get(key)
    return hit if _is_facts(hit) else _facts(data if data is not None else path.read_bytes(), str(path), key)


def _facts(data: bytes, filename: str, key: str | None = None) -> dict:
    """What a module's source says: ``imports`` ([level, module, [names]] per import; ``import a.b`` is
    [-1, "a.b", []]), ``consts`` (strings that could name a sibling file) and ``script``; cached by content hash."""
    global _dirty
    key = key or hashlib.sha256(data).hexdigest()
    cache = _cache()
    hit = cache.get(key)
    if _is_facts(hit):
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


#: file-system lookups of one pass over the gates (:func:`fresh_lookups` starts one), shared by its gates
_LOOKUPS: dict = {}
_PASS = [0]  # the number of the pass: a module's direct dependencies are reused within one pass only
_IN_PASS = [False]  # inside :func:`one_pass`: the gates of the pass share the lookups


def _looked_up(key: tuple, compute):
    """``compute()``, once per ``key`` within a pass."""
    if key not in _LOOKUPS:
        _LOOKUPS[key] = compute()
    return _LOOKUPS[key]


def fresh_lookups() -> None:
    """Forget the file-system lookups (at the start of each pass over the gates)."""
    _LOOKUPS.clear()
    _PASS[0] += 1


@contextmanager
def one_pass():
    """A pass over several gates that share the file-system lookups (taken once, at its start)."""
    fresh_lookups()
    _IN_PASS[0] = True
    try:
        yield
    finally:
        _IN_PASS[0] = False


def lookups_for_a_gate() -> None:
    """Called before one gate's closure: outside :func:`one_pass`, each gate is its own pass."""
    if not _IN_PASS[0]:
        fresh_lookups()


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
    return _looked_up(("mod", root, dotted), lambda: _module_file_uncached(root, dotted))


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
    return _looked_up(("inits", root, path.parent), lambda: _package_inits_uncached(root, path))


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
def _direct(root: Path, path: Path, sha: str, pass_no: int = -1) -> tuple[Path, ...]:
    """Repository files one module depends on directly, reused within one pass for the same content."""
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
            todo += _direct(root, p, content_hash(p)[0], _PASS[0])
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
    """A file with an ``if __name__ == "__main__":`` block is a program: hashed, its imports not followed."""
    p = Path(root) / rel
    try:
        data = p.read_bytes()
    except OSError:
        return False
    if b"__name__" not in data:  # no such block possible: skip the parse (most files)
        return False
    return bool(_facts(data, str(p))["script"])


def module_path(root: str | Path, dotted: str | None) -> str | None:
    if not dotted:
        return None
    root = Path(root).resolve()
    f = _module_file(root, dotted)
    return f.relative_to(root).as_posix() if f is not None else None
