"""The map's "may import" column (docs/architecture.md) is the code's: every import of every file of each
top-level folder, inside functions too, names only what that folder's row allows (a folder ``x/``, a module
``x/y.py``, a third-party package by name) or the standard library."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAP = ROOT / "docs" / "architecture.md"
# Deliberate exceptions, each with its reason: (file, imported top-level name) -> why.
EXCEPTIONS = {
    ("registry/provenance.py", "torch"): "only when run as a script on the GPU machine (toolchain(use_torch=True))",
    ("registry/provenance.py", "_pytest"): "only as the pytest plugin that stamps the GPU gates' JUnit file "
                                           "(scripts/gpu.sh gates: -p provenance)",
}


def map_rows(text: str) -> dict[str, set[str]]:
    """folder -> allowed names (``registry/``, ``plugin/api.py``, ``pydantic``) from the map's table."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and re.fullmatch(r"`\w+/`", cells[0]) and cells[1].startswith("`r9k."):
            rows[cells[0].strip("`").rstrip("/")] = set(re.findall(r"`([^`]+)`", cells[3]))
    return rows


def _module_of(path: Path) -> list[str]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def imports(path: Path) -> list[tuple[int, list[str]]]:
    """(line, the imported module as repository parts or ``[third-party top-level name]``) for each import;
    ``r9k.x.y`` and ``from ..x import y`` both become ``["x", "y"]`` (the imported name included when it may be
    a module)."""
    pkg = _module_of(path)[:-1] if path.name != "__init__.py" else _module_of(path)
    out = []
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(n, ast.Import):
            out += [(n.lineno, a.name.split(".")) for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            if n.level:
                base = pkg[: len(pkg) - (n.level - 1)] if n.level > 1 else pkg
                mod = base + (n.module.split(".") if n.module else [])
                out += [(n.lineno, ["r9k", *mod, a.name]) for a in n.names]
            elif n.module:
                out += [(n.lineno, [*n.module.split("."), a.name]) for a in n.names]
    return out


def violations(folder: str, allowed: set[str], folders: set[str]) -> list[str]:
    bad = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(ROOT).as_posix()
        for line, mod in imports(path):
            top = mod[0]
            if top == "r9k":
                mod = mod[1:]
                if not mod or mod[0] not in folders or mod[0] == folder:
                    continue
                ok = f"{mod[0]}/" in allowed or any(
                    "/".join(mod[:i]) + ".py" in allowed for i in range(2, len(mod) + 1))
            elif top in folders and top in ("kernels", "bench"):  # pytest's path import of a test file's package
                ok = top == folder or f"{top}/" in allowed
            else:
                ok = top in sys.stdlib_module_names or top == "__future__" or top in allowed \
                    or (rel, top) in EXCEPTIONS
            if not ok:
                bad.append(f"{rel}:{line}: imports {'.'.join(mod)} (the map allows {folder}/ {sorted(allowed)})")
    return bad


def test_the_map_lists_every_package_folder():
    rows = map_rows(MAP.read_text(encoding="utf-8"))
    folders = {d.name for d in ROOT.iterdir() if (d / "__init__.py").is_file() and d.name != "r9k"}
    assert set(rows) == folders


def test_every_import_is_one_the_map_allows():
    rows = map_rows(MAP.read_text(encoding="utf-8"))
    bad = [b for folder, allowed in rows.items() for b in violations(folder, allowed, set(rows))]
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_disallowed_import(tmp_path, monkeypatch):
    """Not vacuous: r9kctl reaching past plugin/api.py, kernels importing the engine (relatively), an unlisted
    third-party package, are each caught; plugin/api.py itself passes."""
    (tmp_path / "r9kctl").mkdir()
    (tmp_path / "kernels" / "op").mkdir(parents=True)
    (tmp_path / "r9kctl" / "cmd_x.py").write_text(
        "import json\nfrom r9k.plugin.api import merged_status\n\ndef f():\n    from r9k.plugin import startup\n"
        "    import numpy\n")
    (tmp_path / "kernels" / "op" / "k.py").write_text("import torch\nfrom ...registry import envvars\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    folders = {"r9kctl", "plugin", "kernels", "registry"}
    r = violations("r9kctl", {"plugin/api.py", "registry/"}, folders)
    assert [b.split(": imports ")[1].split(" ")[0] for b in r] == ["plugin.startup", "numpy"], r
    k = violations("kernels", {"torch"}, folders)
    assert [b.split(": imports ")[1].split(" ")[0] for b in k] == ["registry.envvars"], k


# ------------------------------------------------------------------------------------- the layout tools read

FOLDERS = ("registry", "profiles", "r9kctl", "kernels", "plugin", "bench")


def test_a_clone_imports_itself(tmp_path):
    """A second checkout run from its root imports its own files, never the installed checkout's (the folders
    are ``r9k/``'s: docs/architecture.md, "The layout"), and the suite's import check passes there; pytest names
    a kernel's test file ``r9k.kernels.<op>.test_<op>`` (no second copy of a kernel module), and refuses the
    same file named through the top-level link."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)], check=True, timeout=300)
    code = ("import json, sys\nimport r9k, r9k.registry.loader, r9k.r9kctl.cli, r9k.plugin.api, r9k.kernels.ops,"
            " r9k.bench, r9k.profiles\nimport pytest\n"
            "rc = pytest.main(['-q', '-p', 'no:cacheprovider', '--collect-only', 'r9k/kernels/hc_mix/test_hc_mix.py'])\n"
            "linked = pytest.main(['-q', '-p', 'no:cacheprovider', '--collect-only', 'kernels/hc_mix/test_hc_mix.py'])\n"
            "mods = [m for m in sys.modules if m.split('.')[0] in ('r9k', 'kernels', 'bench', 'registry')]\n"
            "print(json.dumps([int(rc), int(linked), {m: getattr(sys.modules[m], '__file__', None) for m in mods}]))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=clone, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    rc, linked, files = json.loads(out.stdout.strip().splitlines()[-1])
    assert rc == 0 and "r9k.kernels.hc_mix.test_hc_mix" in files
    assert linked == pytest.ExitCode.USAGE_ERROR and "name the real path: r9k/kernels/hc_mix/test_hc_mix.py" in out.stdout + out.stderr
    # every module of the project's code is r9k's, from the clone; the refused run had loaded the conftest.py of
    # the path it was given (kernels.conftest: pytest loads it before any hook can refuse; fixtures only)
    assert {m for m in files if not m.startswith("r9k.")} <= {"r9k", "kernels", "kernels.conftest"}, sorted(files)
    assert all(f is None or f.startswith(str(clone)) for f in files.values()), files
    elsewhere = {m: f for m, f in files.items() if f and not Path(f).resolve().is_relative_to(clone.resolve())}
    assert not elsewhere, elsewhere
    check = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                            "tests/core/test_import_map.py::test_every_import_is_one_the_map_allows"],
                           cwd=clone, capture_output=True, text=True, timeout=600)
    assert check.returncode == 0, check.stdout + check.stderr


def _project_files() -> list[str]:
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(ROOT / "r9k", followlinks=True)
                  for f in fs if f.endswith(".py") and "__pycache__" not in d)


def test_a_static_checker_resolves_every_import(tmp_path):
    """mypy, with import resolution the only check kept: every import of the project's code, relative or as
    ``r9k.<folder>``, names a module (or a module's name) that exists. Third-party packages are left out
    (``--no-site-packages``): what is checked is the project's own graph, as an IDE or pyright sees it."""
    pytest.importorskip("mypy", reason="the dev extra's mypy (pip install -e '.[dev]')")
    assert len(_project_files()) > 150  # the folders are seen through r9k/
    out = subprocess.run([sys.executable, "-m", "mypy", "--no-site-packages", "--follow-imports=silent",
                          "--cache-dir", str(tmp_path / "cache"), "--python-version", "3.11", "--no-error-summary",
                          "--hide-error-context", "-p", "r9k"],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    bad = [ln for ln in out.stdout.splitlines()
           if (ln.endswith("[import-not-found]") and re.search(r'module named "(r9k|\.)', ln))
           or (ln.endswith("[attr-defined]") and re.search(r'Module "r9k[.\w]*" has no attribute', ln))]
    assert out.returncode in (0, 1), out.stdout[-2000:] + out.stderr  # 2: mypy itself failed
    assert not bad, "\n".join(bad)
