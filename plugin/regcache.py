"""A snapshot cache of the loaded registry, so that the plugin's ``register()`` stays cheap.

``register()`` runs in every vLLM process (API server, engine core, every worker). Parsing the ~30
TOML files of the registry costs ~40 ms per process (tomllib is pure Python), more than the plugin's
whole startup budget. The parsed :class:`~r9k.registry.loader.Registry` (schema-checked by the core
loader) is therefore pickled once into the user's cache directory, keyed by a fingerprint of the content
(SHA-256) of every input file and of the registry's own Python sources. A changed file changes the key,
even one edited with its size and mtime kept (``cp -p``, ``rsync -a``), so a stale snapshot is never
used. The cache is an optimisation only: a snapshot is stored with the stamp of the code that wrote it and
a hash of its bytes, and one that is truncated, corrupted, of another version or not readable at all is
ignored and rebuilt; a cache folder that cannot be written only costs speed. The plugin never refuses to
start because of this cache.

Only successful loads are cached: a registry with errors raises ``RegistryError`` every time, with
its located diagnostics.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import stat
from pathlib import Path
from typing import Optional

from ..registry import envvars
from ..registry import fileio


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
    """Content fingerprint of everything a load (and a validation) reads: the registry's TOML and gate
    ledger files, the profiles, and the registry's Python code (each file's path and SHA-256)."""
    h = hashlib.sha256()
    h.update(str(root.resolve()).encode())
    files: list[Path] = sorted(package_dir("r9k.registry").glob("*.py"))
    for d in [root, *profile_dirs]:
        h.update(b"\0dir:" + str(Path(d).resolve()).encode())
        if Path(d).is_dir():
            files += sorted(Path(d).rglob("*.toml")) + sorted(Path(d).rglob("*.jsonl"))
    for f in files:
        try:
            with open(f, "rb") as fh:  # a FIFO or device here would block: regular files only
                if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                    continue
                digest = hashlib.sha256(fh.read()).hexdigest()
        except OSError:
            continue
        h.update(f"{f}:{digest}\n".encode())
    return h.hexdigest()[:20]


MAGIC = b"r9k-registry-snapshot/2\n"


def _decode(raw: bytes, stamp: str):
    """The registry of a snapshot file's bytes, or None unless it is intact and of this very code."""
    head = MAGIC + stamp.encode() + b"\n"
    if not raw.startswith(head) or len(raw) < len(head) + 65:
        return None
    digest, payload = raw[len(head): len(head) + 64], raw[len(head) + 65:]
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        return None
    try:
        reg = pickle.loads(payload)
    except Exception:  # noqa: BLE001 - any unreadable snapshot is rebuilt
        return None
    from ..registry.loader import Registry

    return reg if isinstance(reg, Registry) else None


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
    stamp = _fingerprint(root, dirs)
    path = cache_dir() / f"{stamp}.pickle"

    try:
        reg = _decode(fileio.read_bytes(path, "registry snapshot"), stamp)
    except Exception:  # noqa: BLE001 - missing, not a file, unreadable: rebuilt
        reg = None
    if reg is not None:
        return reg
    reg = load_registry(root, dirs)  # raises RegistryError with located diagnostics
    try:
        payload = pickle.dumps(reg, protocol=pickle.HIGHEST_PROTOCOL)
        blob = MAGIC + stamp.encode() + b"\n" + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload
        path.parent.mkdir(parents=True, exist_ok=True)
        fileio.atomic_write(path, blob, "registry snapshot", within=cache_dir())
    except Exception:  # noqa: BLE001 - a full, read-only or odd cache folder only costs speed
        pass
    return reg
