"""A snapshot cache of the loaded registry, so that the plugin's ``register()`` stays cheap.

``register()`` runs in every vLLM process (API server, engine core, every worker). Parsing the ~30
TOML files of the registry costs ~40 ms per process (tomllib is pure Python), more than the plugin's
whole startup budget. The parsed :class:`~r9k.registry.loader.Registry` (schema-checked by the core
loader) is therefore pickled once into the user's cache directory, keyed by a fingerprint of every
input file (path, size, mtime) and of the registry's own Python sources. A changed file changes the
key, so a stale snapshot is never used; a snapshot that cannot be read is rebuilt.

Only successful loads are cached: a registry with errors raises ``RegistryError`` every time, with
its located diagnostics.
"""
from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path
from typing import Optional

from ..registry import envvars


def package_dir(name: str) -> Path:
    """Folder of a subpackage of r9k, found without importing it (importing r9k.registry costs
    tens of milliseconds of pydantic model building)."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def default_dirs(environ=None) -> tuple[Path, list[Path]]:
    """The registry root and the profile folders, as ``r9k.registry.loader`` chooses them."""
    environ = os.environ if environ is None else environ
    own = envvars.REGISTRY.get(environ)
    root = Path(own).expanduser() if own else package_dir("r9k.registry")
    return root, [package_dir("r9k.profiles")] + envvars.PROFILES_DIR.paths(environ)


def _fingerprint(root: Path, profile_dirs: list[Path]) -> str:
    """Stat-based fingerprint of everything a load (and a validation) reads: the registry's TOML and
    gate ledger files, the profiles, and the registry's Python code."""
    h = hashlib.sha256()
    h.update(str(root.resolve()).encode())
    files: list[Path] = sorted(package_dir("r9k.registry").glob("*.py"))
    for d in [root, *profile_dirs]:
        h.update(b"\0dir:" + str(Path(d).resolve()).encode())
        if Path(d).is_dir():
            files += sorted(Path(d).rglob("*.toml")) + sorted(Path(d).rglob("*.jsonl"))
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        h.update(f"{f}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:20]


def cache_dir() -> Path:
    return envvars.cache_dir() / "registry-snapshots"


def load_registry_cached(root: Optional[Path] = None, profile_dirs: Optional[list[Path]] = None):
    """Same result as ``r9k.registry.load_registry(root, profile_dirs)``, from a snapshot when fresh.

    ``envvars.NO_REGISTRY_CACHE`` set to 1 bypasses the cache (used by the benchmark to measure both paths).
    """
    from ..registry.loader import default_profile_dirs, default_registry_root, load_registry

    root = Path(root).expanduser() if root else default_registry_root()
    dirs = list(profile_dirs) if profile_dirs is not None else default_profile_dirs()
    if envvars.NO_REGISTRY_CACHE.on():
        return load_registry(root, dirs)
    path = cache_dir() / f"{_fingerprint(root, dirs)}.pickle"
    try:
        with open(path, "rb") as fh:
            return pickle.load(fh)
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, TypeError):
        pass
    reg = load_registry(root, dirs)  # raises RegistryError with located diagnostics
    try:
        from ..registry import fileio

        path.parent.mkdir(parents=True, exist_ok=True)
        fileio.atomic_write(path, pickle.dumps(reg, protocol=pickle.HIGHEST_PROTOCOL), "registry snapshot")
    except OSError:  # a read-only cache directory only costs speed (and leaves no temporary file)
        pass
    return reg
